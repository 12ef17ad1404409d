"""Results -> pandas tables, Markdown cards and notes, plain text for a terminal, and the files to download.
Renders only; never measures. Every number is written by `profiling.text`; every chart is `figures`'.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from . import text
from .explain import TOP, Explanation
from .explain.facts import label
from .results import Comparison, Note, Run, Sweep
from .workload import QUANTISED

if TYPE_CHECKING:
    from .timeline import Timeline
    from .workload import Workload


# -- tables -----------------------------------------------------------------------------------
def kernel_table(run: Run) -> pd.DataFrame:
    """One row per kernel (per aten op on CPU) of the run's phase (a forward's, a step's both phases, a backward
    view's backward alone), per call, in launch order on GPU, by time on CPU; its share of the phase's total, named
    in the column; a short label, unique in the table, and the full name from the trace in the last column; a step's
    backward rows say so in their category. A CPU table's times are self times under the profiler, which slows each
    op: its column says so."""
    gpu = run.workload.device == "cuda"
    rows_of = run.kernels_of()
    total_us = run.gpu_us() or 1.0
    labels = {}  # unique within a phase: a kernel of both the forward and the backward keeps one label in each
    for phase in ("forward", "backward"):
        of_phase = [k for k in rows_of if k.phase == phase]
        labels |= dict(zip(map(id, of_phase), text.kernel_labels([k.short_name or k.name for k in of_phase],
                                                                  [k.name for k in of_phase])))
    rows = []
    for k in rows_of:
        label = labels[id(k)]
        row = {"kernel" if gpu else "op": label,  # the numbers next to the name: on a phone they stay in view
               (f"GPU µs per {run.phase}" if gpu else f"self µs per {run.phase}, profiled"):
                   round(k.us_per_forward, 1),
               f"% of {run.phase}": round(100 * k.us_per_forward / total_us, 1),
               "calls": round(k.calls_per_forward, 2),  # per call of the phase the table's label names
               "category": k.category if k.phase == "forward" or run.phase == "backward" else f"{k.category} (bwd)"}
        if gpu:
            row.update({"occupancy %": k.occupancy_pct, "regs/thread": k.registers_per_thread,
                        "smem B": k.shared_memory_bytes, "grid": _dims(k.grid), "block": _dims(k.block),
                        "launch": k.launch_api, "precision": k.precision or ""})
        row["full name"] = k.name
        rows.append(row)
    return pd.DataFrame(rows)


def kernel_summary(run: Run) -> pd.DataFrame:
    """The kernel table's first columns (label, µs, share, calls, category): they fit a 760 px column."""
    return kernel_table(run).iloc[:, :5]


def _figures(value: float) -> float:
    """One decimal from 1 up; under 1, three significant figures (0.00123 TFLOP/s on a CPU is not 0.0)."""
    return round(value, 1) if abs(value) >= 1 else float(f"{value:.3g}")


def _dims(dims) -> str:
    return "×".join(map(str, dims)) if dims else ""


def host_ops_table(run: Run, top: int = 10) -> pd.DataFrame:
    """The CPU side of one profiled call (a forward, or a step): the ops' times under the profiler (with its
    overhead), per call, each naming its phase."""
    per = text.host_call(run.workload)
    return pd.DataFrame([{"op": h.name, "phase": h.phase, f"calls per {per}": round(h.calls_per_forward, 2),
                          f"CPU µs per {per}, profiled": round(h.total_us_per_forward, 1),
                          f"self µs per {per}, profiled": round(h.self_us_per_forward, 1)} for h in run.host_ops[:top]])


def sweep_table(result: Sweep) -> pd.DataFrame:
    """Every point of a sweep, smallest S (or B) first (the time column says what it measures: GPU or wall; the last,
    kernels or a CPU's aten ops), each number rounded for reading; the JSON keeps them whole. A point that did not finish (stopped, refused, failed)
    shows its status and reason, never the figures it had reached."""
    gpu = result.workload.device == "cuda"
    time_label, what = ("GPU ms", "kernels or reason") if gpu else ("wall ms", "aten ops or reason")
    time_label = f"{time_label} per {text.call(result.workload)}"
    host_label = f"host µs per {text.host_call(result.workload)}"
    rows = []
    for s in result.seq_lens:
        for r in (r for v in result.variants for r in result.of(v) if result.value(r) == s):
            if not r.ok:
                rows.append({text.axis_symbol(result.axis): s, "variant": r.variant, "status": r.status,
                             what: r.reason or r.status})
                continue
            row = {text.axis_symbol(result.axis): s, "variant": r.variant, "status": r.status,
                   time_label: round(r.gpu_ms, 4) if r.gpu_ms else None,
                   host_label: round(r.host_cost.median_ms * 1000, 1) if r.host_cost else None, "bound": r.bound,
                   "peak MiB": _figures(r.peak_extra_bytes / 2**20) if r.peak_extra_bytes is not None else None,
                   "TFLOP/s": _figures(r.tflops) if r.tflops else None,
                   "% peak": round(100 * r.peak_share, 1) if r.peak_share else None}
            if gpu:  # a CPU's table is aten ops by CPU time: no kernels to count
                row[f"kernels per {text.call(result.workload)}"] = round(r.kernels_per_forward, 2) \
                    if r.kernels_per_forward is not None else None
            rows.append(row | {what: r.reason or ", ".join(k.short_name for k in r.kernels[:3])})
    return pd.DataFrame(rows)


# -- one line and Markdown cards ----------------------------------------------------------------
def literal(value, limit: int = 80) -> str:
    """Text from a client (a link's key or value) as Markdown shows it verbatim: one code span, cut to
    `limit` characters, its control characters spelled out. The fence is one backtick longer than any
    run inside, so no backtick can close it; inside a code span nothing is markup, HTML or a link."""
    value = str(value)
    if len(value) > limit:
        value = value[:limit] + "…"
    value = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in value)
    if not value.strip():
        return f"(empty: {len(value)} spaces)" if value else "(empty)"
    fence = "`" * (max(map(len, re.findall("`+", value)), default=0) + 1)
    pad = " " if value[0] == "`" or value[-1] == "`" else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def device_time_label(run: Run) -> str:
    """What `timing` measures: GPU time from CUDA events, or wall time on CPU."""
    return "GPU" if run.workload.device == "cuda" else "wall"


def counters_text(c) -> str:
    """A call's counters for the command line: the summed line, then each kernel's figures (`counters.Counters`)."""
    head = f"{c.variant}: {text.counters(c)}"
    rows = [f"  {text.clip(k.name, 70):70s} " + " · ".join(
        f"{words} {fmt(v)}" for words, v, fmt in (("read", k.value("dram_read"), text.size),
                                                  ("written", k.value("dram_write"), text.size),
                                                  ("L2 hit", k.value("l2_hit"), text.percent),
                                                  ("occupancy", k.value("occupancy"), text.percent),
                                                  ("tensor", k.tensor_pct, text.percent)) if v is not None)
        for k in c.kernels]
    return "\n".join([head, *rows])


def summary_line(run: Run) -> str:
    """One line per run: the numbers a reader compares first."""
    if not run.ok:
        return f"{run.variant}: {run.status} — {run.reason}"
    t = run.timing
    parts = [f"{run.variant}: {device_time_label(run)} {text.ms(t.median_ms)} per {run.phase} (min "
             f"{text.ms(t.min_ms)}, spread {text.percent(t.spread_pct)}, n={t.samples})"]
    if run.back_to_back is not None:
        parts.append(f"back to back {text.ms(run.back_to_back.median_ms)} per {run.call} ({_bound_words(run)})")
    if run.host_cost is not None:
        parts.append(f"host cost {text.ms(run.host_cost.median_ms)} per {run.call}")
    if run.kernels_per_forward is not None:
        parts.append(f"{text.plural(run.kernels_per_forward, 'kernel')} per {run.phase}")
    if run.backend:
        parts.append(f"backend {run.backend}")
    if run.peak_extra_bytes is not None:
        parts.append(f"peak +{text.size(run.peak_extra_bytes)}")
    if run.accuracy:
        if run.workload.training:
            parts.append(f"max err: output {text.error(run.accuracy.max_abs_error)} (forward), "
                         f"{_grad_errors(run)} (backward)")
        else:
            parts.append(f"max err {text.error(run.accuracy.max_abs_error)}")
    if run.tflops:
        parts.append(text.rate(run.tflops, run.peak_share))
    if run.energy is not None or run.energy_refused:
        parts.append(_energy_words(run))
    return " · ".join(parts)


def _energy_words(run: Run) -> str:
    """The run's energy per call, or why it was not measured."""
    if run.energy is not None:
        return f"energy {text.energy(run.energy, run.call)}"
    return f"energy not measured: {run.energy_refused}"


def _size(n_bytes: int | None) -> str:
    return "—" if n_bytes is None else text.size(n_bytes)


def _grad_errors(run: Run, sep: str = ", ") -> str:
    """The backward's own errors against fp64, a gradient each ("dq 1.5e-02, dk 1.7e-02, dv 2.0e-02"); "—" where the
    run kept none."""
    grads = run.accuracy.grads if run.accuracy else None
    return sep.join(f"{name} {text.error(e)}" for name, e in grads.items()) if grads else "—"


def guess_card(side: str, variant, guess, cannot_run: str | None = None, cpu: bool = False,
               compile_estimate: tuple[float, str] | None = None, workload: Workload | None = None) -> str:
    """What reading `variant`'s code suggests for `workload`, before anything runs (Markdown); for a
    compiled variant run live, how long its first call's compile is estimated to take, and from what. One that
    `cannot_run` here gets neither a speed rank nor a compile estimate: it will not run to be ranked or compiled."""
    g = guess
    unit = "aten ops" if cpu else "kernels"
    forward = [e.what for e in g.kernels if e.phase == "forward"]
    backward = [e.what for e in g.kernels if e.phase == "backward"]
    said = f"- {unit} per forward: **{len(forward)}** ({', '.join(forward)})"
    if backward:
        said = (f"- {unit} per step: **{len(g.kernels)}**: forward {len(forward)} ({', '.join(forward)}); backward "
                f"{len(backward)} ({', '.join(backward)})")
    lines = [f"**{side} · {variant.label}** — *“{g.summary}”*", *([f"- {variant.help}"] if variant.help else []), said,
             f"- precision: {g.precision}",
             text.score_grid(f"- S×S scores through memory: {'yes' if g.materialises_scores else 'no'}",
                             *((workload.queries, workload.seq_len) if workload else (1, 1))),
             *([] if cannot_run else [f"- expected speed rank {g.speed_rank}, host-cost rank {g.host_rank} (1 = best)"
                                      + (f", occupancy {g.occupancy}" if g.occupancy else "")])]
    if compile_estimate and not cannot_run:
        seconds, basis = compile_estimate
        lines.append(f"- ⏱ its first call compiles: estimated ~{text.seconds(seconds)}, {basis}; the progress bar "
                     "counts the seconds")
    if cannot_run:
        lines.append(f"- ⚠️ cannot run here: {cannot_run}")
    return "\n".join(lines)


def _bound_words(run: Run) -> str:
    return {"host": "host-bound", "gpu": "GPU-bound", "other": "slower than both: neither bound"}.get(run.bound, "—")


def _host_line(run: Run) -> str:
    """The host figures of a GPU run in one line (of one call: a forward, or a whole step); on a CPU the host does
    the work itself."""
    if run.host_cost is None or run.back_to_back is None:
        return ("- host: on a CPU the host does the work itself; its time is the wall time above"
                if run.workload.device == "cpu" else f"- host cost per {run.call}: — (not measured in this run)")
    pin = f"; the sdpa_kernel pin costs {text.ms(run.pin_cost_ms)} apart" if run.pin_cost_ms is not None else ""
    warm = "" if run.workload.timing == "warm" else " (both taken as a plain warm loop, whatever the timing mode)"
    return (f"- host (CPU) cost to issue one {run.call}: **{text.ms(run.host_cost.median_ms)}** (unprofiled, GPU kept "
            f"busy); back to back {text.ms(run.back_to_back.median_ms)} per {run.call}: **{_bound_words(run)}**{pin}"
            + warm)


def _clock_line(run: Run) -> str:
    """'clocks under load, as the timing began → ended: SM 1,980 → 1,980 MHz (max 1,980 MHz), memory 3,201 → …'"""
    def moved(attribute: str) -> str:
        b, a = getattr(run.clocks_before, attribute), getattr(run.clocks_after, attribute)
        return f"{text.mhz(b) if b else '—'} → {text.mhz(a) if a else '—'}"
    peak = f" (max {text.mhz(run.environment.max_sm_clock_mhz)})" if run.environment.max_sm_clock_mhz else ""
    sms = f"; {run.environment.sm_count} SMs" + (", a MIG slice" if run.environment.mig else "") \
        if run.environment.sm_count else ""
    return (f"clocks under load, as the timing began → ended: SM {moved('sm_mhz')}{peak}, memory "
            f"{moved('memory_mhz')}{sms}")


def _profiled_line(run: Run) -> str:
    """The profiled range of one call: its median, and its mean where the host ops' shares are of the mean."""
    if run.profiled_host_ms is None:
        return "- profiled range: —"
    mean = (f", mean {text.ms(run.profiled_host_mean_ms)}, what the host ops' shares are of"
            if run.profiled_host_mean_ms and run.host_ops else "")
    return (f"- profiled range of one {run.call}: median {text.ms(run.profiled_host_ms)}{mean} (includes the "
            "profiler's overhead)")


def run_card(side: str, run: Run, label: str) -> str:
    """The numbers of one run, or why there are none (Markdown)."""
    head = f"### {side} · {label} `{run.variant}`"
    if run.timing is None:
        why = {"unsupported": f"Unsupported {text.on_device(run.environment)}."}.get(run.status, run.status.capitalize() + ".")
        return f"{head}\n\n> ⚠️ **{why}** {run.reason or ''}"
    t = run.timing
    lines = [f"**{text.ms(t.median_ms)}** {device_time_label(run)} time per {run.phase} "
             f"(min {text.ms(t.min_ms)}, spread {text.percent(t.spread_pct)}, n={t.samples}, {t.method})",
             _host_line(run),
             _profiled_line(run)]
    if not run.ok:
        lines.insert(0, f"> ⚠️ **{run.status.capitalize()}** before it finished: {run.reason}")
    if run.forward_timing is not None and run.backward_timing is not None:
        lines.append(f"- forward {text.ms(run.forward_timing.median_ms)} + backward "
                     f"{text.ms(run.backward_timing.median_ms)} (the same calls, an event between them)")
    if run.warm_timing is not None:
        lines.append(f"- warm, the same calls back to back: {text.ms(run.warm_timing.median_ms)} per {run.call} "
                     f"on the GPU ({run.warm_timing.method})")
    if run.clocks_before is not None and run.clocks_after is not None:
        lines.append(f"- {_clock_line(run)}")
    if run.kernels_per_forward is not None:
        if run.phase == "step":
            split = f" ({text.count(run.launches('forward'))} forward, {text.count(run.launches('backward'))} backward)"
        elif run.phase == "backward":
            split = f" (its step launches {text.count(run.launches('step'))})"
        else:
            split = ""
        lines.append(f"- kernels per {run.phase}: **{text.count(run.kernels_per_forward)}**{split}")
    if run.backend:
        lines.append(f"- SDPA backend that ran: **{run.backend}**")
    lines.append(f"- peak memory beyond the inputs{' (of the whole step)' if run.workload.training else ''}: "
                 f"{_size(run.peak_extra_bytes)} (estimated {_size(run.estimated_extra_bytes)})")
    if run.saved_bytes is not None:
        lines.append(f"- kept by autograd for the backward: {_size(run.saved_bytes)} beyond q, k, v")
    if run.setup_ms is not None:
        lines.append(f"- one-off setup before the first call: {text.ms(run.setup_ms)}")
    if run.quantise_ms is not None:
        lines.append(f"- quantising {QUANTISED[run.workload.quantised]} (per tensor, amax/448), once, apart from the "
                     f"calls: {text.ms(run.quantise_ms)}")
    if run.accuracy:
        a = run.accuracy
        naive = f" (plain attention in {run.workload.drawn}: {text.error(a.naive_max_abs_error)})" \
            if a.naive_max_abs_error is not None else ""
        rows = f", on {a.rows_checked} sampled query rows" if a.rows_checked else ""
        output = "the output's max error (the forward)" if run.workload.training else "max error"
        exact = " on the unquantised inputs" if a.quantisation_max_abs_error is not None else ""
        lines.append(f"- {output} vs fp64{exact}: {text.error(a.max_abs_error)}{naive}{rows}")
        if a.quantisation_max_abs_error is not None:
            lines.append("- of which the quantisation alone explains (fp64 on the dequantised inputs vs fp64 on the "
                         f"unquantised): {text.error(a.quantisation_max_abs_error)}")
        if a.grads:
            plain = a.naive_grads or {}
            lines.append("- the gradients' max error (the backward) vs fp64: " + ", ".join(
                f"{name} {text.error(e)}" + (f" (plain {text.error(plain[name])})" if name in plain else "")
                for name, e in a.grads.items()))
    if run.tflops:
        lines.append(f"- {text.rate(run.tflops, run.peak_share)}")
    if run.energy is not None or run.energy_refused:
        lines.append(f"- {_energy_words(run)} (NVML's counter: the whole GPU)")
    if run.counters is not None:
        version = f", {run.counters.ncu_version}" if run.counters.ncu_version else ""
        lines.append(f"- Nsight Compute (recorded{version}): {text.counters(run.counters)}")
    if run.first_call_ms is not None:
        lines.append(f"- first call: {text.seconds(run.first_call_ms / 1000)} (compilation, plans, lazy init)")
    if run.concurrent_work:
        lines.append("- ⚠️ other work of this app shared the CPU while this was timed: its times may read high")
    if run.compiled_before:
        lines.append("- torch.compile had already run in this process before this was timed")
    card = f"{head}\n\n" + "\n".join(lines)
    if run.pytorch_warnings:
        card += ("\n\n<details><summary>PyTorch's warnings</summary>\n\n"
                 + "\n".join(f"- {w}" for w in run.pytorch_warnings) + "\n\n</details>")
    return card


def comparison_table(comparison: Comparison) -> str:
    """A vs B, the headline numbers side by side (Markdown table)."""
    def cell(run: Run, value) -> str:
        return value(run) if run.timing is not None else run.status

    unit = device_time_label(comparison.a)
    rows = [(f"{unit} time per {text.call(comparison.a.workload)}", lambda r: text.ms(r.timing.median_ms))]
    if comparison.a.workload.training:
        rows += [("forward", lambda r: text.ms(r.forward_timing.median_ms) if r.forward_timing else "—"),
                 ("backward", lambda r: text.ms(r.backward_timing.median_ms) if r.backward_timing else "—"),
                 ("kept for the backward", lambda r: _size(r.saved_bytes))]
    call = comparison.a.call
    if comparison.a.workload.device == "cuda":  # a CPU issues nothing to another device and launches no kernels
        rows += [(f"back to back per {call}", lambda r: text.ms(r.back_to_back.median_ms) if r.back_to_back else "—"),
                 (f"host cost per {call}", lambda r: text.ms(r.host_cost.median_ms) if r.host_cost else "—"),
                 (f"kernels per {text.call(comparison.a.workload)}",
                  lambda r: text.count(r.kernels_per_forward) if r.kernels_per_forward else "—")]
    rows.append(("peak memory" + (" of the step" if comparison.a.workload.training else ""),
                 lambda r: _size(r.peak_extra_bytes)))
    output_error = ("max error", lambda r: text.error(r.accuracy.max_abs_error) if r.accuracy else "—")
    grad_errors = ("max error of the gradients (the backward)", lambda r: _grad_errors(r, " · "))
    if comparison.a.phase == "backward":    # the backward's own result is the gradients; the output is the forward's
        rows += [grad_errors, ("max error of the output (the forward)", output_error[1])]
    elif comparison.a.workload.training:
        rows += [("max error of the output (the forward)", output_error[1]), grad_errors]
    else:
        rows.append(output_error)
    a, b = comparison.a, comparison.b
    if any(r.energy is not None or r.energy_refused for r in (a, b)):
        rows += [(f"energy per {call} (whole GPU)",
                  lambda r: text.joules(r.energy.joules_per_call) if r.energy else "not measured"),
                 ("mean power over its loop", lambda r: text.watts(r.energy.watts) if r.energy else "—")]
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


def _note_markdown(n: Note, seen: set[str], number: int | None = None, kinds: dict[str, str] = KINDS) -> str:
    head = f"{number}. " if number else "- "
    words = f"**{_md(n.title)}** {_md(n.body)}".strip()
    folded = [_md(e) for e in n.evidence] + [f"source: {link}" for link in n.links]
    details = ("\n\n   <details><summary>evidence</summary>\n\n" + "".join(f"   - {line}\n" for line in folded)
               + "\n   </details>") if folded else ""
    return f"{head}{_glossed(words, seen)} _({SIDES.get(n.side, n.side)} · {kinds.get(n.kind, n.kind)})_{details}"


def _terms_markdown(used: set[str]) -> str:
    if not used:
        return ""
    return ("<details><summary>Terms</summary>\n\n"
            + "".join(f"- **{term}**: {text.GLOSSARY[term]}\n" for term in text.GLOSSARY if term in used)
            + "\n</details>")


def verdict_markdown(explanation: Explanation, table: str = "", rest_label: str = "on A and B",
                     rest_sides: tuple[str, ...] = ("both", "pair"), kinds: dict[str, str] = KINDS) -> str:
    """The headline, `table` (the numbers side by side), the notes that matter most, the rest of the notes on
    `rest_sides` (folded) and the terms used. A comparison's other notes about one side continue in that side's
    column (`side_notes_markdown`); a sweep's fold here whatever their side."""
    seen: set[str] = set()
    top = explanation.notes[:TOP]
    rest = [n for n in explanation.notes[TOP:] if not rest_sides or n.side in rest_sides]
    parts = [_glossed(f"**{_md(explanation.headline.title)}**", seen), table]
    parts += [_note_markdown(n, seen, i + 1, kinds) for i, n in enumerate(top)]
    if rest:
        parts.append(f"<details><summary>{text.plural(len(rest), 'more note')} {rest_label}</summary>\n\n"
                     + "\n".join(_note_markdown(n, seen, kinds=kinds) for n in rest) + "\n\n</details>")
    parts.append(_terms_markdown(seen))
    return "\n\n".join(p for p in parts if p)


def sweep_kinds(axis: str) -> dict[str, str]:
    """The kinds of a sweep's notes as they are labelled: its own are over its axis (over S, over B)."""
    return KINDS | {"sweep": f"over {text.axis_symbol(axis)}"}


def sweep_markdown(explanation: Explanation, axis: str = "seq_len", measured: str = "") -> str:
    """A sweep's verdict and notes, under the line of what it measured (`Answer.measured`) when given."""
    kinds = sweep_kinds(axis)
    body = verdict_markdown(explanation, rest_label=kinds["sweep"], rest_sides=(), kinds=kinds)
    return f"*{_md(measured)}*\n\n{body}" if measured else body


def present_markdown(explanation: Explanation, measured: str = "") -> str:
    """The presentation view's answer: the headline as a heading, what it measured (`Answer.measured`: the
    machine, live or recorded, the workload and its pass), and the one reason: the note that matters most, its
    title and its body (a title alone, "Why … is 11× faster", gave no reason). Plain words, no glossary markup: it is
    read from across a room."""
    plain = lambda words: _md(words.replace("`", ""))  # noqa: E731 (code spans: plain words on a stage)
    reason = [f"**{plain(n.title)}**" + (f": {plain(n.body)}" if n.body else "") for n in explanation.notes[:1]]
    return "\n\n".join([f"## {_md(explanation.headline.title)}"] + ([_md(measured)] if measured else []) + reason)


def present_plan_markdown(a_label: str, b_label: str, device_name: str, problem: str, run_button: str) -> str:
    """The presentation view of a live link before Run: what will run, where, and the button that runs it (the stage
    was blank until then)."""
    return "\n\n".join([f"## {_md(a_label)} [A] vs {_md(b_label)} [B]",
                         f"Runs live on {_md(device_name)} when you press **{_md(run_button)}**: {_md(problem)}"])


def refusal_markdown(refusal) -> str:
    """What Run would refuse, as the page flags it: the core's one line, every character Markdown or HTML would read
    as markup escaped (it quotes the client's value)."""
    return f"⚠️ {_md(str(refusal))}"


def side_notes_markdown(explanation: Explanation, side: str) -> str:
    """The notes about one side ('a' or 'b') that are not among the top ones, folded."""
    rest = [n for n in explanation.notes[TOP:] if n.side == side]
    if not rest:
        shown = sum(n.side == side for n in explanation.notes[:TOP])
        return f"*{'The notes on this side are' if shown else 'No other notes on this side;'} in the verdict above.*"
    seen: set[str] = set()
    body = "\n".join(_note_markdown(n, seen) for n in rest)
    return (f"<details><summary>{text.plural(len(rest), 'more note')} on {SIDES[side]}</summary>\n\n{body}"
            f"\n\n{_terms_markdown(seen)}\n\n</details>")


def _note_text(n: Note, evidence: bool = True, kinds: dict[str, str] = KINDS) -> str:
    lines = [f"{n.title.replace('`', '')} [{SIDES.get(n.side, n.side)} · {kinds.get(n.kind, n.kind)}]"]
    if n.body:
        lines.append("  " + n.body.replace("`", ""))
    if evidence:
        lines += [f"    - {e}" for e in n.evidence] + [f"    source: {link}" for link in n.links]
    return "\n".join(lines)


def notes_text(explanation: Explanation, evidence: bool = True, kinds: dict[str, str] = KINDS) -> str:
    """Plain text for a terminal: the headline, the top notes, the rest by side, and the terms used (a sweep's
    evidence is the table of points printed above it: `evidence=False`; its kinds are `sweep_kinds`)."""
    out = [f"Verdict: {explanation.headline.title}"]
    out += [f"{i + 1}. {_note_text(n, evidence, kinds)}" for i, n in enumerate(explanation.notes[:TOP])]
    for side in dict.fromkeys(n.side for n in explanation.notes[TOP:]):
        rest = [n for n in explanation.notes[TOP:] if n.side == side]
        out.append(f"-- more on {SIDES.get(side, side)} --\n"
                   + "\n".join(f"* {_note_text(n, evidence, kinds)}" for n in rest))
    used = text.terms_in(" ".join([explanation.headline.title] + [f"{n.title} {n.body}" for n in explanation.notes]))
    if used:
        out.append("-- terms --\n" + "\n".join(f"{term}: {text.GLOSSARY[term]}" for term in used))
    return "\n\n".join(out)


def visible_words(explanation: Explanation) -> int:
    """Words a reader sees before opening anything: the headline and the top notes' titles and bodies."""
    return text.word_count(" ".join([explanation.headline.title]
                                    + [f"{n.title} {n.body}" for n in explanation.notes[:TOP]]))


# -- files to download --------------------------------------------------------------------------
def csv_header(run: Run) -> str:
    """The comment lines above a kernel table's CSV: what ran, on what, on which workload (a file saved apart from the
    page says it; pandas reads past them with comment="#")."""
    return (f"# {run.variant}: {label(run)}\n# on: {run.environment.summary()}\n"
            f"# workload: {run.workload.words()}\n")


def export(answer_json: str, comparison: Comparison, chart_png: bytes, directory: str | Path) -> dict[str, Path]:
    """Write the kernel tables (CSV, under `csv_header`), the answer (its JSON, as the API returns it) and the chart
    (its PNG, drawn) into `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    for side, run in (("a", comparison.a), ("b", comparison.b)):
        if run.kernels:
            files[f"{side}_csv"] = directory / f"{side}_{run.variant}_kernels.csv"
            with open(files[f"{side}_csv"], "w", newline="") as f:
                f.write(csv_header(run))
                kernel_table(run).to_csv(f, index=False)
    files["json"] = directory / f"comparison_{comparison.a.variant}_vs_{comparison.b.variant}.json"
    files["json"].write_text(answer_json)
    files["png"] = directory / f"chart_{comparison.a.variant}_vs_{comparison.b.variant}.png"
    files["png"].write_bytes(chart_png)
    return files


# -- one call on a timeline ------------------------------------------------------------------------------
def timeline_caption(a: Timeline, b: Timeline, call: str = "forward", phase: str = "forward") -> str:
    """One line under the timeline: what one profiled call is (`call`: a forward, or a whole training step, which a
    backward view's, `phase`, is too), and for each side when the CPU finished issuing it and when the GPU finished
    running it, and which waited on which."""
    def said(side: str, t) -> str:
        if not t.gpu:
            return f"{side} ({t.label}): the CPU ran it all in {text.us(t.range_us)}"
        gpu_end = max(s.end_us for s in t.gpu)
        waited = gpu_end < 1.05 * t.range_us or t.gpu_idle_us > 0.1 * t.gpu_busy_us
        who = "the GPU waited on the CPU" if waited else "the CPU ran ahead and the GPU worked through its queue"
        return (f"{side} ({t.label}): the CPU finished issuing at {text.us(t.range_us)}, the GPU finished at "
                f"{text.us(gpu_end)}; {who}")
    whole = ", the whole step: a backward runs inside one" if phase == "backward" else ""
    return (f"One profiled {'training step' if call == 'step' else call} of each{whole} (the profiler slows the CPU "
            "side): " + "; ".join((said("A", a), said("B", b)))
            + ". "
            "Thin lines join each launch to the GPU work it started.")


def cp_table(runs) -> pd.DataFrame:
    """Context-parallel runs (`context_parallel.CPRun`), a row per rank: its step, compute, NCCL and exposed time per
    step, its peak beyond its inputs; the straggler marked; a run that did not run as one row saying why."""
    rows = []
    for r in runs:
        w = r.workload
        head = {"variant": r.variant, "GPUs": w.gpus, "S": w.seq_len, "pass": w.passes, "K/V": w.cp_rotate,
                "balancer": "on" if r.balanced else "off"}
        if not r.ok:
            rows.append({**head, "rank": "—", "step": f"{r.status}: {text.clip(r.reason or '', 60)}"})
            continue
        slowest = r.straggler().rank
        for x in r.ranks:
            t = x.timeline
            kernel_us = text.us if t.busy_us else (lambda _: "—")     # a CPU's trace has no kernels
            rows.append({**head, "rank": f"{x.rank}{' (straggler)' if x.rank == slowest else ''}",
                         "step": text.ms(x.median_ms), "compute": kernel_us(t.compute_us),
                         "NCCL": kernel_us(t.collective_us), "exposed": kernel_us(t.exposed_us),
                         "peak +": _size(x.peak_extra_bytes),
                         "error": text.error(r.accuracy.max_abs_error) if r.accuracy and x.rank == 0 else ""})
    return pd.DataFrame(rows)
