"""Figures of a sweep and of one forward's timeline (matplotlib). Renders only; never measures.

Sized for a 760 px wide column as reports' chart is (reports.WIDTH_IN: a 700 px PNG), no text under 9 pt (12.5 px). `dark=True` draws
the same figure for a dark page.
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from . import sweep as sweep_mod
from .reports import (CATEGORY_COLOURS, DPI, OTHER_COLOUR, SMALL_PT, TEXT_PT, TITLE_PT, WIDTH_IN,
                      style_axes as _style, theme as _theme)
from .timeline import Timeline
from .trace import category

VARIANT_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#64b5cd")


def _seq_label(s: float) -> str:
    return f"{s / 1024:g}k" if s >= 1024 else f"{s:g}"


def _legend(axes, handles, theme: dict, **kwargs) -> None:
    legend = axes.legend(handles=handles, fontsize=SMALL_PT, frameon=False, labelcolor=theme["fg"], **kwargs)
    legend.set_zorder(5)


# -- the sweep -----------------------------------------------------------------------------------
def sweep_figure(result: sweep_mod.Sweep, *, dark: bool = False) -> Figure:
    """Top: time per forward vs S; bottom: peak memory vs S with the device's memory as a line. Log–log,
    the fitted exponent written at each curve's end, the crossover marked, refused points hollow."""
    theme = _theme(dark)
    figure = Figure(figsize=(WIDTH_IN, 7.4), dpi=DPI, layout="constrained", facecolor=theme["bg"])
    time_axes, memory_axes = figure.subplots(2, 1, sharex=True)
    colours = {v: VARIANT_COLOURS[i % len(VARIANT_COLOURS)] for i, v in enumerate(result.variants)}
    slopes = {(f.variant, f.quantity): f for f in sweep_mod.slopes(result)}
    gpu = result.workload.device == "cuda"
    line_mib, line_label = _memory_line(result)

    for quantity, axes in (("time", time_axes), ("memory", memory_axes)):
        handles = []
        for variant in result.variants:
            points = result.of(variant)
            ran = [p for p in points if p.ok and sweep_mod.QUANTITIES[quantity](p)]
            ys = [_value(p, quantity) for p in ran]
            colour = colours[variant]
            label = variant
            if ran:
                axes.plot([p.seq_len for p in ran], ys, "o-", color=colour, markersize=5, linewidth=1.8)
                fit = slopes.get((variant, quantity))
                if fit:
                    axes.annotate(rf"$\propto S^{{{fit.exponent:.2f}}}$", (ran[-1].seq_len, ys[-1]),
                                  xytext=(6, 0), textcoords="offset points", va="center", fontsize=TEXT_PT,
                                  color=colour)
            else:
                label += f" ({points[0].status if points else 'no points'})"
            refused = [p for p in points if p.stops]
            if refused and line_mib and quantity == "memory":
                axes.plot([p.seq_len for p in refused], [line_mib] * len(refused), "o", markersize=9,
                          markerfacecolor="none", markeredgecolor=colour, markeredgewidth=1.8)
                for p in refused:
                    text = (f"needs {p.needed_bytes / 2**30:.0f} GiB" if p.needed_bytes else "out of memory")
                    axes.annotate(text, (p.seq_len, line_mib), xytext=(0, 8), textcoords="offset points",
                                  ha="center", fontsize=SMALL_PT, color=colour)
            for p in refused if quantity == "time" else ():
                axes.axvline(p.seq_len, color=colour, linestyle=":", linewidth=1.2)
                axes.annotate(f"{variant} stops", (p.seq_len, 0.5), xycoords=("data", "axes fraction"),
                              xytext=(-3, 0), textcoords="offset points", rotation=90, ha="right", va="center",
                              fontsize=SMALL_PT, color=colour)
            handles.append(Line2D([], [], color=colour, marker="o", label=label))
        if quantity == "memory" and line_mib:
            axes.axhline(line_mib, color=theme["muted"], linestyle="--", linewidth=1.2)
            axes.annotate(line_label, (0, line_mib), xycoords=("axes fraction", "data"), xytext=(4, -4),
                          textcoords="offset points", va="top", fontsize=SMALL_PT, color=theme["muted"])
        if quantity == "time":
            for cross in sweep_mod.crossovers(result):
                axes.axvline(cross.seq_len, color=theme["fg"], linestyle="--", linewidth=1)
                axes.annotate(f"{cross.faster_after} overtakes\n{cross.faster_before} ≈ S={cross.seq_len:,.0f}",
                              (cross.seq_len, 0.03), xycoords=("data", "axes fraction"), xytext=(5, 0),
                              textcoords="offset points", fontsize=SMALL_PT, color=theme["fg"])
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        if quantity == "memory" and line_mib:
            axes.set_ylim(top=line_mib * 4)  # room for the refused points' labels above the line
        axes.grid(True, which="major", color=theme["grid"], linewidth=0.8)
        _style(axes, theme)
        if quantity == "time":  # one legend for both panels
            handles.append(Line2D([], [], color=theme["muted"], marker="o", markerfacecolor="none",
                                  linestyle="none", label="does not fit / out of memory (below)"))
            _legend(axes, handles, theme, loc="upper left")
    time_axes.set_ylabel(("GPU" if gpu else "wall") + " ms per forward", fontsize=TEXT_PT)
    memory_axes.set_ylabel("peak memory beyond inputs, MiB", fontsize=TEXT_PT)
    memory_axes.set_xlabel("sequence length S", fontsize=TEXT_PT)
    memory_axes.xaxis.set_major_locator(FixedLocator(result.seq_lens))
    memory_axes.xaxis.set_minor_locator(NullLocator())
    memory_axes.xaxis.set_major_formatter(FuncFormatter(lambda s, _: _seq_label(s)))
    lengths = result.seq_lens
    memory_axes.set_xlim(lengths[0] / 1.4, lengths[-1] * 2.2)  # room for the exponents at the right
    time_axes.set_title(f"{sweep_mod.family_label(result.workload)} · {result.environment.device_name}",
                        fontsize=TITLE_PT, color=theme["fg"])
    return figure


def _value(point: sweep_mod.SweepPoint, quantity: str) -> float:
    return point.gpu_ms if quantity == "time" else point.peak_extra_bytes / 2**20


def _memory_line(result: sweep_mod.Sweep) -> tuple[float | None, str]:
    """The device's memory where known (a GPU), else what was free when the sweep began."""
    total = result.environment.total_memory_bytes
    if total:
        return total / 2**20, f"{result.environment.device_name} memory, {total / 2**30:.0f} GiB"
    if result.available_bytes:
        return result.available_bytes / 2**20, f"free memory, {result.available_bytes / 2**30:.0f} GiB"
    return None, ""


# -- one forward's timeline -------------------------------------------------------------------------
_LABEL_PX = 8.0      # width of one 9-pt character, with a margin
_AXES_PX = 470       # the lanes' width in the 700 px figure, less the lane labels


def timeline_figure(a: Timeline, b: Timeline, *, dark: bool = False) -> Figure:
    """A and B on one time axis (µs from each forward's start), two lanes each: the CPU issuing the
    forward (aten ops, launch calls in black) and the GPU running what was launched. Thin lines join a
    launch to its work, so a queue, a gap or a hidden Memcpy shows at a glance."""
    theme = _theme(dark)
    figure = Figure(figsize=(WIDTH_IN, 3.9), dpi=DPI, layout="constrained", facecolor=theme["bg"])
    axes = figure.subplots()
    end = max(a.end_us, b.end_us) * 1.02
    seen: dict[str, str] = {}
    labels = []
    for side, (timeline, cpu_y, gpu_y) in enumerate(((a, 3.0, 2.0), (b, 1.0, 0.0))):
        name = f"{'AB'[side]} · {timeline.label}"
        labels += [(cpu_y, f"{name} CPU\nrange {timeline.range_us:,.0f} µs"),
                   (gpu_y, f"{name} GPU\nbusy {timeline.gpu_busy_us:,.0f} · idle {timeline.gpu_idle_us:,.0f} µs"
                    if timeline.gpu else f"{name} GPU\nnone (a CPU run)")]
        axes.barh(cpu_y, timeline.range_us, 0.9, left=0, color=theme["range"], edgecolor=theme["muted"],
                  linewidth=0.6)
        for span in (s for s in timeline.cpu if s.kind == "op" and s.depth == 0):
            axes.barh(cpu_y + 0.1, span.dur_us, 0.55, left=span.start_us, color="#9db4d6", edgecolor=theme["bg"],
                      linewidth=0.6)
            _label(axes, span, cpu_y + 0.1, end, "#111827")
        launches = {s.correlation: s for s in timeline.cpu if s.kind == "launch"}
        for span in (s for s in timeline.cpu if s.kind == "launch"):
            axes.barh(cpu_y - 0.3, max(span.dur_us, end / 600), 0.22, left=span.start_us, color=theme["launch"])
        for span in timeline.gpu:
            kind = {"memcpy": "gpu_memcpy", "memset": "gpu_memset"}.get(span.kind, "kernel")
            group = category(span.full_name or span.name, kind)
            colour = CATEGORY_COLOURS.get(group, OTHER_COLOUR)
            seen.setdefault(group if group in CATEGORY_COLOURS else "other", colour)
            axes.barh(gpu_y, max(span.dur_us, end / 600), 0.7, left=span.start_us, color=colour,
                      edgecolor=theme["bg"], linewidth=0.6)
            _label(axes, span, gpu_y, end, "white")
            launch = launches.get(span.correlation)
            if launch:
                axes.plot([launch.end_us, span.start_us], [cpu_y - 0.41, gpu_y + 0.35], color=theme["link"],
                          linewidth=0.7, zorder=0)
    axes.set_yticks([y for y, _ in labels], [text for _, text in labels], fontsize=SMALL_PT)
    axes.set_ylim(-0.6, 3.55)
    axes.set_xlim(0, end)
    axes.set_xlabel("µs from the start of one forward (its record_function range)", fontsize=TEXT_PT)
    axes.grid(True, axis="x", color=theme["grid"], linewidth=0.8)
    axes.set_axisbelow(True)
    _style(axes, theme)
    handles = [Patch(color="#9db4d6", label="aten op"), Patch(color=theme["launch"], label="launch call")]
    handles += [Patch(color=c, label=n) for n, c in seen.items()]
    _legend(axes, handles, theme, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(len(handles), 5))
    return figure


def _label(axes, span, y: float, end: float, colour: str) -> None:
    room = int(_AXES_PX * span.dur_us / end / _LABEL_PX)  # characters the bar has room for
    if room >= 4:
        text = span.name if len(span.name) <= room else span.name[:room - 1] + "…"
        axes.text(span.start_us + span.dur_us / 2, y, text, ha="center", va="center", fontsize=SMALL_PT,
                  color=colour, clip_on=True)
