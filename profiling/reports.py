"""Results -> pandas tables, Markdown cards, matplotlib figures and files. Renders only; never measures.

The CLI prints `summary_line` and `kernel_table`; the app shows the cards, the tables and
`timing_figure`, and offers `export`'s files for download.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from . import text
from .explain import TOP, SweepExplanation
from .results import Comparison, Note, Run


# -- tables -----------------------------------------------------------------------------------
def kernel_table(run: Run) -> pd.DataFrame:
    """One row per kernel (per aten op on CPU), in launch order on GPU, by time on CPU; named by a short label,
    unique in the table, and by the full name from the trace in the last column."""
    gpu = run.workload.device == "cuda"
    rows = []
    labels = text.kernel_labels([k.short_name or k.name for k in run.kernels], [k.name for k in run.kernels])
    for k, label in zip(run.kernels, labels):
        row = {"kernel" if gpu else "op": label, "category": k.category,
               "calls/fwd": round(k.calls_per_forward, 2),
               ("GPU µs/fwd" if gpu else "CPU self µs/fwd"): round(k.us_per_forward, 1),
               "share %": round(100 * k.share, 1)}
        if gpu:
            row.update({"occupancy %": k.occupancy_pct, "regs/thread": k.registers_per_thread,
                        "smem B": k.shared_memory_bytes, "grid": _dims(k.grid), "block": _dims(k.block),
                        "launch": k.launch_api, "precision": k.precision or ""})
        row["full name"] = k.name
        rows.append(row)
    return pd.DataFrame(rows)


def kernel_summary(run: Run) -> pd.DataFrame:
    """The kernel table's first columns (label, category, calls, µs, share): the numbers fit a 760 px column."""
    return kernel_table(run).iloc[:, :5]


def _dims(dims) -> str:
    return "×".join(map(str, dims)) if dims else ""


def host_ops_table(run: Run, top: int = 10) -> pd.DataFrame:
    return pd.DataFrame([{"op": h.name, "calls/fwd": round(h.calls_per_forward, 2),
                          "CPU µs/fwd": round(h.total_us_per_forward, 1),
                          "self µs/fwd": round(h.self_us_per_forward, 1)} for h in run.host_ops[:top]])


# -- one line and Markdown cards ----------------------------------------------------------------
def literal(text, limit: int = 80) -> str:
    """Text from a client (a link's key or value) as Markdown shows it verbatim: one code span, cut to
    `limit` characters, its control characters spelled out. The fence is one backtick longer than any
    run inside, so no backtick can close it; inside a code span nothing is markup, HTML or a link."""
    text = str(text)
    if len(text) > limit:
        text = text[:limit] + "…"
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    if not text.strip():
        return f"(empty: {len(text)} spaces)" if text else "(empty)"
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text[0] == "`" or text[-1] == "`" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def device_time_label(run: Run) -> str:
    """What `timing` measures: GPU time from CUDA events, or wall time on CPU."""
    return "GPU" if run.workload.device == "cuda" else "wall"


def summary_line(run: Run) -> str:
    """One line per run: the numbers a reader compares first."""
    if not run.ok:
        return f"{run.variant}: {run.status} — {run.reason}"
    parts = [f"{run.variant}: {device_time_label(run)} {run.timing.median_ms:.3f} ms/fwd "
             f"(min {run.timing.min_ms:.3f}, spread {run.timing.spread_pct:.0f}%, n={run.timing.samples})",
             f"profiled range {run.profiled_host_ms:.3f} ms/fwd"]
    if run.host_cost is not None:
        parts.append(f"host cost {text.ms(run.host_cost.median_ms)}/call")
    if run.kernels_per_forward is not None:
        parts.append(f"{run.kernels_per_forward:g} kernels/fwd")
    if run.backend:
        parts.append(f"backend {run.backend}")
    if run.peak_extra_bytes is not None:
        parts.append(f"peak +{text.size(run.peak_extra_bytes)}")
    if run.accuracy:
        parts.append(f"max err {run.accuracy.max_abs_error:.2e}")
    if run.tflops:
        share = f" ({100 * run.peak_share:.0f}% of peak)" if run.peak_share else ""
        parts.append(f"{run.tflops:.1f} TFLOP/s{share}")
    return " · ".join(parts)


def _size(n_bytes: int | None) -> str:
    return "—" if n_bytes is None else text.size(n_bytes)


def guess_card(side: str, variant, guess, cannot_run: str | None = None, cpu: bool = False,
               compile_estimate: tuple[float, str] | None = None) -> str:
    """What reading `variant`'s code suggests for this workload, before anything runs (Markdown); for a
    compiled variant run live, how long its first call's compile is estimated to take, and from what."""
    g = guess
    lines = [f"**{side} · {variant.label}** — *“{g.summary}”*",
             f"- {'aten ops' if cpu else 'kernels'} per forward: **{g.kernels_per_forward}**"
             f" ({', '.join(e.what for e in g.kernels)})",
             f"- precision: {g.precision}",
             f"- S×S scores through memory: {'yes' if g.materialises_scores else 'no'}",
             f"- expected speed rank {g.speed_rank}, host-cost rank {g.host_rank} (1 = best)"
             + (f", occupancy {g.occupancy}" if g.occupancy else "")]
    if compile_estimate:
        seconds, basis = compile_estimate
        lines.append(f"- ⏱ its first call compiles: estimated ~{seconds:.0f} s, {basis}; the progress bar counts "
                     "the seconds")
    if cannot_run:
        lines.append(f"- ⚠️ cannot run here: {cannot_run}")
    return "\n".join(lines)


def _host_line(run: Run) -> str:
    """The host figures of a GPU run in one line; on a CPU the host does the work itself."""
    if run.host_cost is None:
        return ("- host: on a CPU the host does the work itself; its time is the wall time above"
                if run.workload.device == "cpu" else "- host cost per call: — (not measured in this run)")
    pin = f"; the sdpa_kernel pin costs {text.ms(run.pin_cost_ms)} apart" if run.pin_cost_ms is not None else ""
    return (f"- host (CPU) cost to issue one forward: **{text.ms(run.host_cost.median_ms)}** (unprofiled, GPU kept "
            f"busy); back to back {text.ms(run.back_to_back_ms)} per call: **{run.bound}-bound**{pin}")


def run_card(side: str, run: Run, label: str) -> str:
    """The numbers of one run, or why there are none (Markdown)."""
    head = f"### {side} · {label} `{run.variant}`"
    if run.status == "unsupported":
        return f"{head}\n\n> ⚠️ **Unsupported {text.on_device(run.environment)}.** {run.reason}"
    if not run.ok:
        return f"{head}\n\n> ❌ **Error.** {run.reason}"
    t = run.timing
    lines = [f"**{t.median_ms:.3f} ms** {device_time_label(run)} time per forward "
             f"(min {t.min_ms:.3f}, spread {t.spread_pct:.0f}%, n={t.samples}, {t.method})",
             _host_line(run),
             f"- profiled range of one forward: {run.profiled_host_ms:.3f} ms (includes the profiler's overhead)"
             if run.profiled_host_ms is not None else "- profiled range: —"]
    if run.kernels_per_forward is not None:
        lines.append(f"- kernels per forward: **{run.kernels_per_forward:g}**")
    if run.backend:
        lines.append(f"- SDPA backend that ran: **{run.backend}**")
    lines.append(f"- peak memory beyond the inputs: {_size(run.peak_extra_bytes)} "
                 f"(estimated {_size(run.estimated_extra_bytes)})")
    if run.accuracy:
        a = run.accuracy
        naive = f" (plain attention in {run.workload.dtype}: {a.naive_max_abs_error:.1e})" \
            if a.naive_max_abs_error is not None else ""
        rows = f", on {a.rows_checked} sampled query rows" if a.rows_checked else ""
        lines.append(f"- max error vs fp64: {a.max_abs_error:.1e}{naive}{rows}")
    if run.tflops:
        share = f", {100 * run.peak_share:.0f}% of the datasheet peak" if run.peak_share else ""
        lines.append(f"- {run.tflops:.3g} TFLOP/s{share}")
    if run.first_call_ms is not None:
        lines.append(f"- first call: {run.first_call_ms:.0f} ms (compilation, plans, lazy init)")
    if run.concurrent_work:
        lines.append("- ⚠️ other work of this app shared the CPU while this was timed: its times may read high")
    if run.compiled_before:
        lines.append("- torch.compile had already run in this process before this measurement")
    card = f"{head}\n\n" + "\n".join(lines)
    if run.pytorch_warnings:
        card += ("\n\n<details><summary>PyTorch's warnings</summary>\n\n"
                 + "\n".join(f"- {w}" for w in run.pytorch_warnings) + "\n\n</details>")
    return card


def comparison_table(comparison: Comparison) -> str:
    """A vs B, the headline numbers side by side (Markdown table)."""
    def cell(run: Run, value) -> str:
        return value(run) if run.ok else run.status

    unit = device_time_label(comparison.a)
    rows = [(f"{unit} ms/fwd", lambda r: f"{r.timing.median_ms:.3f}"),
            ("host cost ms/call", lambda r: f"{r.host_cost.median_ms:.3f}" if r.host_cost else "—"),
            ("profiled range ms", lambda r: f"{r.profiled_host_ms:.3f}" if r.profiled_host_ms else "—"),
            ("kernels/fwd", lambda r: f"{r.kernels_per_forward:g}" if r.kernels_per_forward else "—"),
            ("peak memory", lambda r: _size(r.peak_extra_bytes)),
            ("max error", lambda r: f"{r.accuracy.max_abs_error:.1e}" if r.accuracy else "—")]
    a, b = comparison.a, comparison.b
    lines = [f"| | A · `{a.variant}` | B · `{b.variant}` |", "|---|---:|---:|"]
    lines += [f"| {name} | {cell(a, value)} | {cell(b, value)} |" for name, value in rows]
    return "\n".join(lines)


# -- the notes ---------------------------------------------------------------------------------
SIDES = {"a": "A", "b": "B", "both": "A and B", "pair": "A vs B"}
KINDS = {"guess": "guess vs trace", "reference": "vs the blog's A100", "environment": "environment",
         "verdict": "verdict", "sweep": "over S"}
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#|])")


def _md(words: str) -> str:
    """Kernel names are full of underscores and angle brackets: escape them; keep `code` spans as code."""
    return "".join(part if part.startswith("`") else _MARKDOWN_SPECIAL.sub(r"\\\1", part)
                   for part in re.split(r"(`[^`]*`)", words))


def _glossed(markdown: str, seen: set[str]) -> str:
    """The first use of each glossary term on the page carries its gloss (shown on hover)."""
    for term in text.terms_in(markdown):
        if term not in seen:
            seen.add(term)
            markdown = re.sub(rf"(?<![\w.-]){re.escape(term)}(?![\w-])",
                              f'<abbr title="{text.GLOSSARY[term]}">{term}</abbr>', markdown, count=1)
    return markdown


def _note_markdown(n: Note, seen: set[str], number: int | None = None) -> str:
    head = f"{number}. " if number else "- "
    words = f"**{_md(n.title)}** {_md(n.body)}".strip()
    folded = [_md(e) for e in n.evidence] + [f"source: {link}" for link in n.links]
    details = ("\n\n   <details><summary>evidence</summary>\n\n" + "".join(f"   - {line}\n" for line in folded)
               + "\n   </details>") if folded else ""
    return f"{head}{_glossed(words, seen)} _({SIDES.get(n.side, n.side)} · {KINDS.get(n.kind, n.kind)})_{details}"


def _terms_markdown(used: set[str]) -> str:
    if not used:
        return ""
    return ("<details><summary>Terms</summary>\n\n"
            + "".join(f"- **{term}**: {text.GLOSSARY[term]}\n" for term in text.GLOSSARY if term in used)
            + "\n</details>")


def verdict_markdown(comparison: Comparison, table: str = "") -> str:
    """The headline, `table` (the numbers side by side), the notes that matter most, the rest of the notes about
    both or about the pair (folded) and the terms used: the verdict box. Notes about one side only continue in
    that side's column (`side_notes_markdown`)."""
    seen: set[str] = set()
    top = comparison.notes[:TOP]
    rest = [n for n in comparison.notes[TOP:] if n.side in ("both", "pair")]
    parts = [_glossed(f"**{_md(comparison.verdict)}**", seen) if comparison.verdict else "*No verdict.*", table]
    parts += [_note_markdown(n, seen, i + 1) for i, n in enumerate(top)]
    if rest:
        parts.append(f"<details><summary>{text.plural(len(rest), 'more note')} on A and B</summary>\n\n"
                     + "\n".join(_note_markdown(n, seen) for n in rest) + "\n\n</details>")
    parts.append(_terms_markdown(seen))
    return "\n\n".join(p for p in parts if p)


def present_markdown(comparison: Comparison) -> str:
    """The presentation view's answer: the headline as a heading, the titles of the notes that matter most.
    Plain words, no glossary markup: it is read from across a room."""
    head = f"## {_md(comparison.verdict)}" if comparison.verdict else "## No verdict."
    return "\n\n".join([head] + [f"{i + 1}. {_md(n.title)}" for i, n in enumerate(comparison.notes[:TOP])])


def side_notes_markdown(comparison: Comparison, side: str) -> str:
    """The notes about one side ('a' or 'b') that are not among the top ones, folded."""
    rest = [n for n in comparison.notes[TOP:] if n.side == side]
    if not rest:
        shown = sum(n.side == side for n in comparison.notes[:TOP])
        return f"*{'The notes on this side are' if shown else 'No other notes on this side;'} in the verdict above.*"
    seen: set[str] = set()
    body = "\n".join(_note_markdown(n, seen) for n in rest)
    return (f"<details><summary>{text.plural(len(rest), 'more note')} on {SIDES[side]}</summary>\n\n{body}"
            f"\n\n{_terms_markdown(seen)}\n\n</details>")


def sweep_markdown(explanation: SweepExplanation) -> str:
    """A sweep's headline, the notes that matter most and the rest folded, with the terms used: as
    `verdict_markdown` shows a comparison's."""
    seen: set[str] = set()
    parts = [_glossed(f"**{_md(explanation.headline)}**", seen)]
    parts += [_note_markdown(n, seen, i + 1) for i, n in enumerate(explanation.notes[:TOP])]
    rest = explanation.notes[TOP:]
    if rest:
        parts.append(f"<details><summary>{text.plural(len(rest), 'more note')} over S</summary>\n\n"
                     + "\n".join(_note_markdown(n, seen) for n in rest) + "\n\n</details>")
    parts.append(_terms_markdown(seen))
    return "\n\n".join(p for p in parts if p)


def sweep_table(result) -> pd.DataFrame:
    """Every point of a sweep, shortest S first, its numbers rounded for reading; the JSON keeps them whole."""
    frame = result.to_frame()
    digits = {"GPU ms": 4, "wall ms": 3, "host µs": 1, "peak MiB": 1, "TFLOP/s": 1, "% peak": 1, "kernels/fwd": 2,
              "first call ms": 1, "wall s": 2}
    return frame.round({k: v for k, v in digits.items() if k in frame.columns})


def _note_text(n: Note, evidence: bool = True) -> str:
    lines = [f"{n.title.replace('`', '')} [{SIDES.get(n.side, n.side)} · {KINDS.get(n.kind, n.kind)}]"]
    if n.body:
        lines.append("  " + n.body.replace("`", ""))
    if evidence:
        lines += [f"    - {e}" for e in n.evidence] + [f"    source: {link}" for link in n.links]
    return "\n".join(lines)


def _terms_text(words: list[str]) -> list[str]:
    used = text.terms_in(" ".join(words))
    return ["-- terms --\n" + "\n".join(f"{term}: {text.GLOSSARY[term]}" for term in used)] if used else []


def notes_text(comparison: Comparison) -> str:
    """Plain text for a terminal: the headline, the top notes, the rest by side, and the terms used."""
    out = [f"Verdict: {comparison.verdict}"]
    out += [f"{i + 1}. {_note_text(n)}" for i, n in enumerate(comparison.notes[:TOP])]
    for side, name in SIDES.items():
        rest = [n for n in comparison.notes[TOP:] if n.side == side]
        if rest:
            out.append(f"-- more on {name} --\n" + "\n".join(f"* {_note_text(n)}" for n in rest))
    out += _terms_text([comparison.verdict] + [f"{n.title} {n.body}" for n in comparison.notes])
    return "\n\n".join(out)


def sweep_text(explanation: SweepExplanation) -> str:
    """Plain text for a terminal: the sweep's headline, the top notes, the rest, and the terms used; no evidence,
    which is the table of points printed above it."""
    out = [explanation.headline]
    out += [f"{i + 1}. {_note_text(n, evidence=False)}" for i, n in enumerate(explanation.notes[:TOP])]
    if explanation.notes[TOP:]:
        out.append("-- more --\n" + "\n".join(f"* {_note_text(n, evidence=False)}" for n in explanation.notes[TOP:]))
    out += _terms_text([explanation.headline] + [f"{n.title} {n.body}" for n in explanation.notes])
    return "\n\n".join(out)


def visible_words(comparison: Comparison) -> int:
    """Words a reader sees before opening anything: the headline and the top notes' titles and bodies."""
    return text.word_count(" ".join([comparison.verdict] + [f"{n.title} {n.body}" for n in comparison.notes[:TOP]]))


# -- the chart --------------------------------------------------------------------------------
# Sized for a 760 px wide column: 7.0 in at 100 dpi, a 700 px PNG that fits the ~710 px a chart gets there (the
# page's and the block's padding) unscaled, and no text under 9 pt, so 12.5 px at any width from 700 px up.
WIDTH_IN, DPI = 7.0, 100
SMALL_PT, TEXT_PT, TITLE_PT = 9, 10, 11
CATEGORY_COLOURS = {
    "gemm": "#4c72b0", "fused attention": "#dd8452", "softmax": "#55a868", "elementwise": "#c44e52",
    "reduction": "#8172b3", "copy": "#937860", "memcpy": "#da8bc3", "memset": "#8c8c8c", "triton": "#64b5cd",
}
OTHER_COLOUR = "#ccb974"
# time per forward: colours no kernel category uses; host time hatched as well, so it reads without colour
DEVICE_TIME_COLOUR, HOST_TIME_COLOUR = "#2a9d8f", "#e9c46a"
_SEGMENTS = 8  # kernels drawn one by one per bar; the rest are lumped into "other"
_LABEL_CHARS = 70  # characters of 9-pt text across the whole width of the lower axes


def theme(dark: bool | None) -> dict:
    """Colours of a figure for a light page, a dark one, or (None) either: transparent, mid-grey text."""
    if dark is None:
        return {"bg": "none", "fg": "#7b8494", "muted": "#7b8494", "grid": "#7b849455", "range": "#7b849422",
                "launch": "#7b8494", "link": "#7b8494"}
    if dark:
        return {"bg": "#0b0f19", "fg": "#e5e7eb", "muted": "#9ca3af", "grid": "#374151", "range": "#1f2937",
                "launch": "#f9fafb", "link": "#6b7280"}
    return {"bg": "#ffffff", "fg": "#111827", "muted": "#6b7280", "grid": "#e5e7eb", "range": "#f3f4f6",
            "launch": "#111827", "link": "#9ca3af"}


def style_axes(axes, colours: dict) -> None:
    axes.set_facecolor(colours["bg"])
    axes.tick_params(colors=colours["fg"], labelsize=SMALL_PT, which="both")
    for side, spine in axes.spines.items():
        spine.set_visible(side in ("left", "bottom"))
        spine.set_color(colours["muted"])
    axes.xaxis.label.set_color(colours["fg"])
    axes.yaxis.label.set_color(colours["fg"])
    axes.title.set_color(colours["fg"])


def timing_figure(comparison: Comparison, dark: bool | None = False) -> Figure:
    """Top: time per forward, device and host, A vs B. Bottom: each forward split by kernel, stacked.
    `dark`: False for a light page, True for a dark one, None for either (transparent, mid-grey text)."""
    colours = theme(dark)
    runs = (("A", comparison.a), ("B", comparison.b))
    names = [f"{side} · {run.variant}" for side, run in runs]
    unit = device_time_label(comparison.a)
    figure = Figure(figsize=(WIDTH_IN, 5.6), dpi=DPI, layout="constrained", facecolor=colours["bg"])
    top, bottom = figure.subplots(2, 1, height_ratios=(1, 1))

    # time per forward
    height = 0.38
    for i, (_, run) in enumerate(runs):
        if not run.ok:
            top.text(0, i, f"  {run.status}", va="center", color="#c0392b", fontsize=TEXT_PT)
            continue
        for offset, value, colour, hatch, label in (
                (-height / 2, run.timing.median_ms, DEVICE_TIME_COLOUR, None, f"{unit} time"),
                (height / 2, run.profiled_host_ms, HOST_TIME_COLOUR, "///", "host (CPU) time, profiled")):
            if value is None:
                continue
            top.barh(i + offset, value, height, color=colour, hatch=hatch, edgecolor=colours["bg"] if hatch is None
                     else "#8a6d1a", linewidth=0, label=label if i == 0 or not runs[0][1].ok else None)
            top.text(value, i + offset, f" {value:.3f}", va="center", fontsize=SMALL_PT, color=colours["fg"])
    top.set_xlabel("ms per forward", fontsize=TEXT_PT)
    top.set_title("time per forward", fontsize=TITLE_PT, loc="left", color=colours["fg"])
    top.margins(x=0.2)
    if top.get_legend_handles_labels()[0]:
        top.legend(fontsize=SMALL_PT, loc="lower right", bbox_to_anchor=(1, 1), ncol=2, frameon=False,
                   labelcolor=colours["fg"])

    # where the time goes, kernel by kernel
    seen: dict[str, str] = {}
    widest = max((sum(k.us_per_forward for k in run.kernels) for _, run in runs if run.ok), default=0.0)
    for i, (_, run) in enumerate(runs):
        if not run.ok or not run.kernels:
            bottom.text(0, i, f"  {run.status if not run.ok else 'no kernels'}", va="center", color="#c0392b",
                        fontsize=TEXT_PT)
            continue
        ordered = sorted(run.kernels, key=lambda k: k.us_per_forward, reverse=True)
        shown, rest = ordered[:_SEGMENTS], ordered[_SEGMENTS:]
        total = sum(k.us_per_forward for k in run.kernels)
        start = 0.0
        segments = [(k.short_name, k.category, k.us_per_forward) for k in shown]
        if rest:
            segments.append((f"{len(rest)} more", "other", sum(k.us_per_forward for k in rest)))
        for name, category, width in segments:
            colour = CATEGORY_COLOURS.get(category, OTHER_COLOUR)
            seen.setdefault(category if category in CATEGORY_COLOURS else "other", colour)
            bottom.barh(i, width, 0.6, left=start, color=colour, edgecolor="white", linewidth=0.8)
            fits = int(_LABEL_CHARS * width / widest) if widest else 0  # characters the segment has room for
            if fits >= 4:
                bottom.text(start + width / 2, i, text.clip(name, fits), ha="center", va="center",
                            fontsize=SMALL_PT, color="white")
            start += width
        bottom.text(start, i, f" {total:,.0f} µs", va="center", fontsize=SMALL_PT, color=colours["fg"])
    bottom.set_xlabel("GPU µs per forward" if unit == "GPU" else "CPU self µs per forward (aten ops)",
                      fontsize=TEXT_PT)
    bottom.set_title("where the time goes (kernel by kernel)" if unit == "GPU" else "where the time goes (op by op)",
                     fontsize=TITLE_PT, loc="left", color=colours["fg"])
    bottom.margins(x=0.12)
    if seen:
        from matplotlib.patches import Patch
        bottom.legend(handles=[Patch(color=c, label=n) for n, c in seen.items()], fontsize=SMALL_PT,
                      loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=min(len(seen), 5), frameon=False,
                      labelcolor=colours["fg"])
    for axes in (top, bottom):
        axes.set_yticks(range(len(names)), names)
        axes.set_ylim(len(names) - 0.5, -0.5)  # A on top, and room for a missing bar's label
        style_axes(axes, colours)
    return figure


# -- files to download --------------------------------------------------------------------------
def export(comparison: Comparison, figure: Figure, directory: str | Path) -> dict[str, Path]:
    """Write the kernel tables (CSV), the comparison (JSON) and the chart (PNG) into `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    for side, run in (("a", comparison.a), ("b", comparison.b)):
        if run.kernels:
            files[f"{side}_csv"] = directory / f"{side}_{run.variant}_kernels.csv"
            kernel_table(run).to_csv(files[f"{side}_csv"], index=False)
    files["json"] = directory / f"comparison_{comparison.a.variant}_vs_{comparison.b.variant}.json"
    files["json"].write_text(json.dumps(comparison.to_dict(), indent=1))
    files["png"] = directory / f"chart_{comparison.a.variant}_vs_{comparison.b.variant}.png"
    figure.savefig(files["png"], format="png")
    return files
