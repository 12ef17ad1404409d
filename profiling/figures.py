"""Every chart (matplotlib): a comparison's time per forward, a sweep's curves, one forward's timeline. Renders
only; never measures. Numbers on a chart are written by `profiling.text`, as in the notes.

Sized for a 760 px wide column: 7.0 in at 100 dpi, a 700 px PNG that fits the ~710 px a chart gets there (the
page's and the block's padding) unscaled, and no text under 9 pt, so 12.5 px at any width from 700 px up.
`dark`: False for a light page, True for a dark one, None for either (transparent, mid-grey text).
"""
from __future__ import annotations

import hashlib
import io
import math
import textwrap
import threading
from collections import OrderedDict
from concurrent.futures import Future

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

from . import text
from .explain.curves import QUANTITIES, crossovers, slopes
from .results import Comparison, Sweep
from .timeline import Timeline
from .trace import category
from .workload import Workload

# -- shared sizes and colours -------------------------------------------------------------------
WIDTH_IN, DPI = 7.0, 100
SMALL_PT, TEXT_PT, TITLE_PT = 9, 10, 11
CATEGORY_COLOURS = {
    "gemm": "#4c72b0", "fused attention": "#dd8452", "softmax": "#55a868", "elementwise": "#c44e52",
    "reduction": "#8172b3", "copy": "#937860", "memcpy": "#da8bc3", "memset": "#8c8c8c", "triton": "#64b5cd",
}
OTHER_COLOUR = "#ccb974"
# time per forward: colours no kernel category uses; host time hatched as well, so it reads without colour
DEVICE_TIME_COLOUR, HOST_TIME_COLOUR = "#2a9d8f", "#e9c46a"
# a training step's two phases, on both axes: the step's GPU bar stacked and its kernels coloured by phase
PHASE_COLOURS = {"forward": "#2a9d8f", "backward": "#8172b3"}
_SEGMENTS = 8  # kernels drawn one by one per bar; the rest are lumped into "other"


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


def caption(figure: Figure, line: str, dark: bool | None = False, size: float = SMALL_PT) -> Figure:
    """`figure` with what it is of written under it (where it ran, live or recorded, the workload: the answer's
    `measured` line), so a PNG saved from the page still says it; wrapped to the figure's width, in the layout, at
    `size` points (the presentation's at its own large type)."""
    chars = int(figure.get_figwidth() * 72 / (size * 0.6))  # DejaVu Sans averages ~0.6 em a character
    figure.supxlabel(textwrap.fill(line, chars), fontsize=size, x=0.01, ha="left", color=theme(dark)["muted"])
    return figure


def timing_figure(comparison: Comparison, dark: bool | None = False) -> Figure:
    """Top: time per call, A vs B: the device's time (CUDA events; wall on a CPU; a training step's stacked as its
    forward and its backward, each its own median) and, on a GPU, the host's cost to issue one call (unprofiled),
    with the back-to-back pace marked. Bottom: the view's call split by kernel (a step's coloured by phase)."""
    colours = theme(dark)
    runs = (("A", comparison.a), ("B", comparison.b))
    names = [f"{side} · {run.variant}" for side, run in runs]
    gpu = comparison.a.workload.device == "cuda"
    figure = Figure(figsize=(WIDTH_IN, 5.6), dpi=DPI, layout="constrained", facecolor=colours["bg"])
    top, bottom = figure.subplots(2, 1, height_ratios=(1, 1))

    # time per call: the device's time is per the view's pass; the host's cost and the back-to-back pace are per the
    # call a loop repeats (a backward view's loop runs whole steps), so where the two differ every figure says its own
    phase, call = comparison.a.phase, comparison.a.call
    mixed = gpu and phase != call and any(r.host_cost or r.back_to_back for _, r in runs)
    per = {"device": f" per {phase}" if mixed else "", "host": f" per {call}" if mixed else ""}
    height = 0.38
    inside = []  # (bar, the labels it may carry, longest first): written where they fit, once the figure is laid out
    for i, (_, run) in enumerate(runs):
        if run.timing is None:
            top.text(0, i, f"  {run.status}", va="center", color="#c0392b", fontsize=TEXT_PT)
            continue
        device_label = "GPU time" if gpu else "wall time"  # per the x axis' unit
        if run.phase == "step" and run.forward_timing is not None and run.backward_timing is not None:
            # the step as its two phases, each its own median (timed in the same calls, an event between them)
            left = 0.0
            for phase, part in (("forward", run.forward_timing), ("backward", run.backward_timing)):
                inside.append((top.barh(i - height / 2, part.median_ms, height, left=left,
                                        color=PHASE_COLOURS[phase], edgecolor="white", linewidth=0.8,
                                        label=f"{phase} (GPU)" if i == 0 or comparison.a.forward_timing is None
                                        else None)[0], [text.ms(part.median_ms)]))
                left += part.median_ms
            top.text(left, i - height / 2, f" {text.ms(run.timing.median_ms)} per step", va="center",
                     fontsize=SMALL_PT, color=colours["fg"])
            bars = []
        else:
            bars = [(-height / 2, run.timing.median_ms, DEVICE_TIME_COLOUR, None, device_label, per["device"])]
        if run.host_cost is not None:
            bars.append((height / 2, run.host_cost.median_ms, HOST_TIME_COLOUR, "///",
                         "host cost to issue (CPU)" + ("" if run.call == run.phase else f", a {run.call}"), per["host"]))
        for offset, value, colour, hatch, label, unit in bars:
            top.barh(i + offset, value, height, color=colour, hatch=hatch, edgecolor=colours["bg"] if hatch is None
                     else "#8a6d1a", linewidth=0, label=label if i == 0 or comparison.a.timing is None else None)
            # on the page's ground, above the pace line: a line that crosses the figure leaves it readable
            top.text(value, i + offset, f" {text.ms(value)}{unit}", va="center", fontsize=SMALL_PT,
                     color=colours["fg"], zorder=4, bbox=dict(facecolor=colours["bg"], edgecolor="none", pad=0.5))
        if run.back_to_back is not None:
            # a mark over the time bar, not a line across the rows: a line would strike through a value label
            top.plot([run.back_to_back.median_ms], [i - height - 0.02], marker="v", markersize=9, linestyle="none",
                     color=colours["fg"], zorder=3, clip_on=False,
                     label="back-to-back pace" + ("" if run.call == run.phase else f", a {run.call}") if i == 0 or comparison.a.back_to_back is None else None)
    top.set_xlabel(f"ms: {'GPU' if gpu else 'wall'} time per {phase}; host cost and back-to-back pace per {call}"
                   if mixed else f"ms per {text.call(comparison.a.workload)}", fontsize=TEXT_PT)
    rows = -(-len(top.get_legend_handles_labels()[0]) // 3)  # the legend's rows, between the title and the axes
    top.set_title("time per call", fontsize=TITLE_PT, loc="left", color=colours["fg"], pad=8 + 15 * max(rows, 1))
    top.margins(x=0.25)
    if top.get_legend_handles_labels()[0]:
        top.legend(fontsize=SMALL_PT, loc="lower right", bbox_to_anchor=(1, 1), ncol=3, frameon=False,
                   labelcolor=colours["fg"])

    # where the time goes, kernel by kernel
    seen: dict[str, str] = {}
    segments = []  # (bar, the kernel's name, its colour)
    for i, (_, run) in enumerate(runs):
        if not run.kernels_of():
            bottom.text(0, i, f"  {run.status if not run.ok else 'no kernels'}", va="center", color="#c0392b",
                        fontsize=TEXT_PT)
            continue
        total = run.gpu_us()
        start = 0.0
        parts = []  # (label, what colours it: its category, or in a step its phase, the colour)
        step = run.phase == "step"
        for phase in (("forward", "backward") if step else (run.phase,)):
            ordered = sorted(run.kernels_of(phase), key=lambda k: k.us_per_forward, reverse=True)
            keep = _SEGMENTS // 2 if step else _SEGMENTS
            shown, rest = ordered[:keep], ordered[keep:]
            for k in shown:
                group = phase if step else (k.category if k.category in CATEGORY_COLOURS else "other")
                parts.append((k.short_name, group, k.us_per_forward))
            if rest:
                parts.append((f"{len(rest)} more", phase if step else "other",
                              sum(k.us_per_forward for k in rest)))
        for name, group, width in parts:
            colour = PHASE_COLOURS[group] if step else CATEGORY_COLOURS.get(group, OTHER_COLOUR)
            seen.setdefault(group, colour)
            bar = bottom.barh(i, width, 0.6, left=start, color=colour, edgecolor="white", linewidth=0.8)[0]
            segments.append((bar, name, colour))
            start += width
        bottom.text(start, i, f" {text.us(total)}", va="center", fontsize=SMALL_PT, color=colours["fg"])
    bottom.set_xlabel(f"GPU µs per {text.call(comparison.a.workload)}" if gpu else f"CPU self µs per {text.call(comparison.a.workload)} (aten ops)",
                      fontsize=TEXT_PT)
    by_phase = "; forward, then backward" if comparison.a.phase == "step" else ""
    bottom.set_title(f"where the time goes ({'kernel by kernel' if gpu else 'op by op'}{by_phase})",
                     fontsize=TITLE_PT, loc="left", color=colours["fg"])
    bottom.margins(x=0.12)
    for axes in (top, bottom):
        axes.set_yticks(range(len(names)), names)
        axes.set_ylim(len(names) - 0.5, -0.5)  # A on top, and room for a missing bar's label
        style_axes(axes, colours)
    # labels placed on the laid-out figure: a kernel's name on its segment where it fits, else a number keyed below
    renderer = _laid_out(figure)
    for axes in (top, bottom):
        _room_at_the_right(axes, renderer)
    inside += [(bar, [text.kernel_label(name, n) for n in _NAME_CHARS]) for bar, name, _ in segments]
    written, unlabelled = _label_inside(inside, renderer)
    keyed = [(bar, name, colour) for bar, name, colour in segments if bar in unlabelled]
    numbers, unnumbered = _label_inside([(bar, [str(n)]) for n, (bar, _, _) in enumerate(keyed, 1)], renderer)
    written += numbers
    handles = [Patch(color=c, label=n) for n, c in seen.items()]
    handles += [Patch(color=colour, label=f"{n}: {text.kernel_label(name, _KEY_CHARS)}")
                for n, (bar, name, colour) in enumerate(keyed, 1) if bar not in unnumbered]
    if handles:
        columns = min(len(handles), 3 if len(handles) > len(seen) else 5)
        bottom.legend(handles=handles, fontsize=SMALL_PT, loc="upper center", bbox_to_anchor=(0.5, -0.3),
                      ncol=columns, frameon=False, labelcolor=colours["fg"])
        figure.set_figheight(figure.get_figheight() + _KEY_ROW_IN * (-(-len(handles) // columns) - 1))
    for _ in range(2):  # the key moved the axes (constrained layout settles over two passes): room at the right
        renderer = _laid_out(figure)
        for axes in (top, bottom):
            _room_at_the_right(axes, renderer)
    for label, bar in written:  # and a label that no longer fits its bar goes
        if not _fits(label, bar, renderer, margin=1):
            label.remove()
    return figure


_NAME_CHARS = (40, 28, 20, 14, 10)  # a kernel's label on its segment: the longest of these that fits, none under 10
_KEY_CHARS = 20                     # a kernel's name in the key under the chart (three to a row in 700 px)
_KEY_ROW_IN = 0.2                   # a row of the key (9 pt, spaced): the figure grows by it, the axes keep theirs


def _laid_out(figure: Figure):
    """`figure` laid out as it is saved (its constrained layout run), and the renderer that measures its text."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = figure.canvas if isinstance(figure.canvas, FigureCanvasAgg) else FigureCanvasAgg(figure)
    figure.draw_without_rendering()
    return canvas.get_renderer()


def _room_at_the_right(axes, renderer) -> None:
    """Widen `axes`' x range until every text written at a bar's end (left-aligned) ends inside the axes."""
    box = axes.get_window_extent(renderer)
    low, high = axes.get_xlim()
    needed = high
    for label in axes.texts:
        if label.get_ha() != "left":
            continue
        width = label.get_window_extent(renderer).width
        x = label.get_position()[0]
        if box.width - width > 16 and x > low:
            needed = max(needed, low + (x - low) * box.width / (box.width - width - 16))  # a margin: the layout moves as the ticks do
    axes.set_xlim(low, needed)


def _label_inside(bars, renderer) -> tuple[list, set]:
    """Each bar of `bars` (bar, its labels longest first) given the first label that fits inside it, measured on
    the laid-out figure (white, centred): the (label, bar) pairs written, and the bars no label fits."""
    written, left = [], set()
    for bar, labels in bars:
        for words in dict.fromkeys(labels):
            x, y = bar.get_x() + bar.get_width() / 2, bar.get_y() + bar.get_height() / 2
            label = bar.axes.text(x, y, words, ha="center", va="center", fontsize=SMALL_PT, color="white")
            if _fits(label, bar, renderer, margin=6):  # room to spare: the layout moves a little once the key is in
                written.append((label, bar))
                break
            label.remove()
        else:
            left.add(bar)
    return written, left


def _fits(label, bar, renderer, margin: float) -> bool:
    """`label` lies inside `bar`, `margin` px clear of its edges, as drawn."""
    inner, outer = label.get_window_extent(renderer), bar.get_window_extent(renderer)
    return (inner.x0 >= outer.x0 + margin and inner.x1 <= outer.x1 - margin
            and inner.y0 >= outer.y0 - 1 and inner.y1 <= outer.y1 + 1)


# -- the presentation view: the headline's figure alone, read from across a room ------------------------------
# 4.6 in at 100 dpi: a 460 px PNG shown unscaled in half of a 1024 px screen; 14 pt is 19.4 px there.
# the stage's figures fill half a screen's width and the height under its controls: taller than wide
PRESENT_WIDTH_IN, PRESENT_HEIGHT_IN, PRESENT_PT = 4.6, 6.2, 14
_PRESENT_NAMES = {"timing": "GPU time", "back_to_back": "back-to-back pace"}


def present_figure(comparison: Comparison, dark: bool | None = None) -> Figure:
    """The one figure the headline compares (`verdict.figure`), a column for each side that has it, its value
    written over it: a tall figure, as the stage's half of a screen is (it fills that half's height, in large type)."""
    from .explain.verdict import figure as headline_figure
    colours = theme(dark)
    a, b = comparison.a, comparison.b
    path, _ = headline_figure(a, b)
    gpu = a.workload.device == "cuda"
    name = _PRESENT_NAMES[path] if gpu else "wall time"
    fig = Figure(figsize=(PRESENT_WIDTH_IN, PRESENT_HEIGHT_IN), dpi=DPI, layout="constrained",
                 facecolor=colours["bg"])
    axes = fig.subplots()
    tallest = 0.0
    for i, (side, run) in enumerate((("A", a), ("B", b))):
        timing = getattr(run, path) if run.timing is not None else None
        if timing is None:
            axes.text(i, 0, textwrap.fill(run.status, 14), ha="center", va="bottom", color="#c0392b",
                      fontsize=PRESENT_PT)
            continue
        tallest = max(tallest, timing.median_ms)
        axes.bar(i, timing.median_ms, 0.6, color=DEVICE_TIME_COLOUR if side == "A" else "#dd8452")
        axes.text(i, timing.median_ms, text.ms(timing.median_ms), ha="center", va="bottom", fontsize=PRESENT_PT,
                  color=colours["fg"])
    axes.set_xticks([0, 1], [f"A\n{a.variant}", f"B\n{b.variant}"])
    axes.set_xlim(-0.6, 1.6)
    axes.set_ylim(0, (tallest or 1) * 1.15)  # room over the taller column for its value
    axes.set_yticks([])
    axes.set_title(f"{name} per {text.call(a.workload)}", fontsize=PRESENT_PT, loc="left", color=colours["fg"])
    style_axes(axes, colours)
    axes.tick_params(labelsize=PRESENT_PT, length=0)
    axes.spines["left"].set_visible(False)
    return fig


def present_sweep_figure(result: Sweep, dark: bool | None = None) -> Figure:
    """A's and B's GPU (or wall) time per call over the sweep's axis (S or B), log–log, in large type."""
    colours = theme(dark)
    fig = Figure(figsize=(PRESENT_WIDTH_IN, PRESENT_HEIGHT_IN), dpi=DPI, layout="constrained", facecolor=colours["bg"])
    axes = fig.subplots()
    handles = []
    for side, variant, colour in (("A", result.a, DEVICE_TIME_COLOUR), ("B", result.b, "#dd8452")):
        runs = [r for r in result.of(variant) if r.ok and r.gpu_ms]
        if runs:
            axes.plot([result.value(r) for r in runs], [r.gpu_ms for r in runs], marker="o", color=colour,
                      linewidth=2.5, markersize=7)
        handles.append(Line2D([], [], color=colour, marker="o", linewidth=2.5, label=f"{side} · {variant}"))
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.margins(x=0.1)  # the first S label clear of the lowest y label at the corner
    axes.xaxis.set_major_formatter(FuncFormatter(lambda s, _: _seq_label(s)))
    axes.xaxis.set_minor_locator(NullLocator())
    axes.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    axes.set_xlabel(text.axis_symbol(result.axis), fontsize=PRESENT_PT)
    device = "GPU" if result.workload.device == "cuda" else "wall"
    axes.set_title(f"{device} ms per {text.call(result.workload)}", fontsize=PRESENT_PT, loc="left",
                   color=colours["fg"])
    axes.legend(handles=handles, fontsize=PRESENT_PT, frameon=False, labelcolor=colours["fg"])
    _minor_labels(axes)
    style_axes(axes, colours)
    axes.tick_params(labelsize=PRESENT_PT, which="both")
    axes.grid(True, which="major", color=colours["grid"], linewidth=0.8)
    return fig


# -- a sweep ------------------------------------------------------------------------------------
VARIANT_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#64b5cd")


def _seq_label(s: float) -> str:
    return f"{s / 1024:g}k" if s >= 1024 else f"{s:g}"


def _legend(axes, handles, colours: dict, fontsize: float = SMALL_PT, **kwargs) -> None:
    legend = axes.legend(handles=handles, fontsize=fontsize, frameon=False, labelcolor=colours["fg"], **kwargs)
    legend.set_zorder(5)


# -- the sweep -----------------------------------------------------------------------------------
def sweep_figure(result: Sweep, *, dark: bool = False) -> Figure:
    """Top: time per forward vs S (or B: the sweep's axis); bottom: peak memory vs it with the device's memory as a
    line. Log–log, the fitted
    exponent written at each curve's end where the points support one, the crossover marked, refused points
    hollow; a sweep that stopped early says why on the chart."""
    colours = theme(dark)
    figure = Figure(figsize=(WIDTH_IN, 7.4), dpi=DPI, layout="constrained", facecolor=colours["bg"])
    time_axes, memory_axes = figure.subplots(2, 1, sharex=True)
    variant_colour = {v: VARIANT_COLOURS[i % len(VARIANT_COLOURS)] for i, v in enumerate(result.variants)}
    fits = {(f.variant, f.quantity): f for f in slopes(result) if f.supported}
    gpu = result.workload.device == "cuda"
    line_mib, line_label = _memory_line(result)
    symbol = text.axis_symbol(result.axis)

    handles, exponents = [], []  # (annotation, variant, quantity): written at a curve's end where they fit
    movable, crossings = [], []  # labels of refused points and of crossings: moved where they would overprint
    for quantity, axes in (("time", time_axes), ("memory", memory_axes)):
        for variant in result.variants:
            runs = result.of(variant)
            ran = [r for r in runs if r.ok and QUANTITIES[quantity](r)]
            ys = [_value(r, quantity) for r in ran]
            colour = variant_colour[variant]
            if ran:
                axes.plot([result.value(r) for r in ran], ys, "o-", color=colour, markersize=5, linewidth=1.8)
                fit = fits.get((variant, quantity))
                if fit:
                    exponents.append((axes.annotate(
                        rf"$\propto {symbol}^{{{fit.exponent:.2f}}}$", (result.value(ran[-1]), ys[-1]), xytext=(6, 0),
                        textcoords="offset points", va="center", fontsize=TEXT_PT, color=colour), variant, quantity))
            if quantity == "time":
                handles.append(Line2D([], [], color=colour, marker="o", label=variant if ran else
                                      f"{variant} ({runs[0].status if runs else 'no points'})"))
        # where the sweep stopped: one mark and one label a length, naming every variant that stopped there
        stopped: dict[int, list] = {}
        for r in (r for r in result.runs if r.stops):
            stopped.setdefault(result.value(r), []).append(r)
        for x, runs in stopped.items():
            colour = variant_colour[runs[0].variant] if len(runs) == 1 else colours["fg"]
            names = ", ".join(r.variant for r in runs)
            if quantity == "memory" and line_mib:
                needed = [r.needed_bytes for r in runs if r.needed_bytes]
                y = max(line_mib, max(needed, default=0) / 2**20)  # over the line: it does not fit
                axes.plot([x], [y], "o", markersize=9, markerfacecolor="none", markeredgecolor=colour,
                          markeredgewidth=1.8)
                movable.append(axes.annotate(_does_not_fit(runs), (x, y), xytext=(-6, 8),
                                             textcoords="offset points", ha="right", fontsize=SMALL_PT, color=colour))
            elif quantity == "time":
                axes.axvline(x, color=colour, linestyle=":", linewidth=1.2)
                axes.annotate(f"{names} {'stops' if len(runs) == 1 else 'stop'}", (x, 0.5),
                              xycoords=("data", "axes fraction"), xytext=(-3, 0), textcoords="offset points",
                              rotation=90, ha="right", va="center", fontsize=SMALL_PT, color=colour)
        if quantity == "memory" and line_mib:
            axes.axhline(line_mib, color=colours["muted"], linestyle="--", linewidth=1.2)
            axes.annotate(line_label, (0, line_mib), xycoords=("axes fraction", "data"), xytext=(4, -4),
                          textcoords="offset points", va="top", fontsize=SMALL_PT, color=colours["muted"])
        if quantity == "time":
            for cross in crossovers(result):
                if cross.same_figure:
                    axes.axvline(cross.seq_len, color=colours["fg"], linestyle="--", linewidth=1)
                    where, x = f"≈ {text.point(result.axis, cross.seq_len)}", cross.seq_len
                else:  # compared on different figures at the two lengths: the span, no interpolated S
                    axes.axvspan(cross.s_before, cross.s_after, color=colours["range"], zorder=0)
                    where, x = f"in {text.point(result.axis, cross.s_before)}…{text.count(cross.s_after)}", cross.s_before
                crossings.append(axes.annotate(f"{cross.faster_after} overtakes\n{cross.faster_before} {where}",
                                               (x, 0.03), xycoords=("data", "axes fraction"), xytext=(5, 0),
                                               textcoords="offset points", fontsize=SMALL_PT, color=colours["fg"]))
            if result.stopped:
                axes.annotate(f"stopped early: {text.clip(result.stopped, 70)}", (0.99, 0.03),
                              xycoords="axes fraction", ha="right", fontsize=SMALL_PT, color="#c0392b")
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.grid(True, which="major", color=colours["grid"], linewidth=0.8)
        style_axes(axes, colours)
    time_axes.set_ylabel(("GPU" if gpu else "wall") + f" ms per {text.call(result.workload)}", fontsize=TEXT_PT)
    memory_axes.set_ylabel("peak memory beyond inputs, MiB", fontsize=TEXT_PT)
    memory_axes.set_xlabel("sequence length S" if result.axis == "seq_len" else f"batch {symbol}", fontsize=TEXT_PT)
    measured = sorted({result.value(r) for r in result.runs}) or result.seq_lens
    memory_axes.xaxis.set_major_locator(FixedLocator(measured))
    memory_axes.xaxis.set_minor_locator(NullLocator())
    memory_axes.xaxis.set_major_formatter(FuncFormatter(lambda s, _: _seq_label(s)))
    memory_axes.set_xlim(measured[0] / 1.4, measured[-1] * 2.2)  # room for the exponents at the right
    time_axes.set_title(f"{result.workload.family(result.axis)} · {result.environment.device_name}",
                        fontsize=TITLE_PT, color=colours["fg"])
    figure.get_layout_engine().set(h_pad=0.15)  # the panels' y labels apart (their end ticks met)
    # an exponent that would overprint a label or a line moves up or down a line; one with no room goes in the legend
    # the refused points' labels over the memory line: room at the top for them, the ticks as saved and the layout
    # they make; then each label where it overprints nothing, and one with no free place lifted over where it was and
    # given room for it, until every label has its place (labels of several lines need several lines of room)
    renderer = _laid_out(figure)
    for _ in range(len(movable) + 1):
        _room_at_the_top(memory_axes, renderer)
        for axes in (time_axes, memory_axes):
            _minor_labels(axes)
        renderer = _laid_out(figure)
        stuck = _unclutter(movable, renderer)
        if not stuck:
            break
        for label in stuck:
            x, y = label.xyann
            label.xyann = (x, y + label.get_window_extent(renderer).height * 72 / figure.dpi)
    moved = _unclutter([label for label, _, _ in exponents], renderer, remove=True)
    handles += [Line2D([], [], color=colours["fg"], linestyle="--", linewidth=1, label=label.get_text().replace("\n", " "))
                for label in _unclutter(crossings, renderer, remove=True)]
    said = {}
    for label, variant, quantity in exponents:
        if label in moved:
            said.setdefault(variant, []).append(f"{quantity} {label.get_text()}")
    for handle in handles:
        variant = handle.get_label().split(" (")[0]
        if variant in said:
            handle.set_label(f"{variant}: " + ", ".join(said[variant]))
    if line_mib and any(r.stops for r in result.runs):  # the hollow key where a point is drawn hollow
        handles.append(Line2D([], [], color=colours["muted"], marker="o", markerfacecolor="none",
                              linestyle="none", label="does not fit / out of memory (below)"))
    _legend(time_axes, handles, colours, loc="upper left")  # one legend for both panels
    return figure


def _minor_labels(axes) -> None:
    """A log y axis' labels between the powers of ten: over under 3 decades (a decade 90 px or more), at 2 and 5
    only (matplotlib's own labels 3 and 4 as well under one, which meet); over more, none."""
    low, high = axes.get_ylim()
    axes.yaxis.set_minor_formatter(FuncFormatter(
        lambda y, _: f"{y:g}" if round(y / 10 ** math.floor(math.log10(y)), 6) in (2, 5) else "")
        if math.log10(high / low) < 3 else NullFormatter())


def _does_not_fit(runs) -> str:
    """The words over the memory line at a length where `runs` stopped: which do not fit (or ran out of memory), and
    what each would need of what was free, one line for those that say the same."""
    said: dict[str, list[str]] = {}
    for r in runs:
        free = f" of {text.size(r.available_bytes)} free" if r.available_bytes else ""
        said.setdefault(f"needs {text.size(r.needed_bytes)}{free}" if r.needed_bytes else "", []).append(r.variant)
    lines = []
    for need, names in said.items():
        verb = ("does not fit" if len(names) == 1 else "do not fit") if need else "out of memory"
        lines.append(f"{', '.join(names)}: {verb}" + (f",\n{need.replace('needs', 'need') if len(names) > 1 else need}"
                                                     if need else ""))
    return "\n".join(lines)


def _unclutter(labels, renderer, remove: bool = False) -> set:
    """Each of `labels` (annotations placed by an offset in points) moved up or down a line of its text at a time
    (a label of several lines too) until it overprints no other text of its figure and no straight line of its axes;
    one no place frees stays where it was, or with `remove` is removed; those no place frees are returned."""
    figure = labels[0].figure if labels else None
    stuck = set()
    for label in labels:
        others = [t.get_window_extent(renderer) for t in figure.findobj(Text)
                  if t is not label and t.get_visible() and t.get_text().strip()]
        others += [line.get_window_extent(renderer) for line in label.axes.lines if len(line.get_xdata()) > 1
                   and (len(set(line.get_xdata())) == 1 or len(set(line.get_ydata())) == 1)]
        frame = label.axes.get_window_extent(renderer)
        x, y = label.xyann
        side = label.get_ha()
        lines = label.get_text().count("\n") + 1  # a label of several lines moves a line of its text at a time
        step = label.get_window_extent(renderer).height / lines * 72 / figure.dpi + 1
        shifts = [0] + [k * sign for k in range(1, 3 + lines) for sign in (1, -1)]
        # up or down by whole lines, then (a label beside its point) the same on the point's other side
        sides = ((side, x), ({"left": "right", "right": "left"}[side], -x)) if side in ("left", "right") else \
            ((side, x),)
        for ha, dx in sides:
            label.set_ha(ha)
            for shift in shifts:
                label.xyann = (dx, y + shift * step)
                box = label.get_window_extent(renderer)
                if frame.y0 <= box.y0 and box.y1 <= frame.y1 and frame.x0 <= box.x0 and box.x1 <= frame.x1 and \
                        not any(min(box.x1, o.x1) - max(box.x0, o.x0) >= 0 and
                                min(box.y1, o.y1) - max(box.y0, o.y0) >= 0 for o in others):
                    break
            else:
                continue
            break
        else:
            label.set_ha(side)
            label.xyann = (x, y)
            stuck.add(label)
            if remove:
                label.remove()
    return stuck


def _room_at_the_top(axes, renderer) -> None:
    """Raise `axes`' (log) y range until every text written in it ends below its top."""
    box = axes.get_window_extent(renderer)
    low, high = axes.get_ylim()
    over = max((t.get_window_extent(renderer).y1 - box.y1 + 4 for t in axes.texts), default=0)
    if over > 0:
        decades = math.log10(high / low)
        axes.set_ylim(low, high * 10 ** (decades * over / max(box.height - over, 1)))


def _value(run, quantity: str) -> float:
    return run.gpu_ms if quantity == "time" else run.peak_extra_bytes / 2**20


def _memory_line(result: Sweep) -> tuple[float | None, str]:
    """The device's memory where known (a GPU), else what was free when the sweep began."""
    total = result.environment.total_memory_bytes
    if total:
        return total / 2**20, f"{result.environment.device_name} memory, {text.size(total)}"
    if result.available_bytes:
        return result.available_bytes / 2**20, f"free memory, {text.size(result.available_bytes)}"
    return None, ""


# -- one forward's timeline -------------------------------------------------------------------------
_LABEL_PX = 8.0      # width of one 9-pt character, with a margin
_AXES_PX = 420       # the lanes' width in the 700 px figure, less the lane labels


def timeline_figure(a: Timeline, b: Timeline, *, dark: bool = False) -> Figure:
    """A and B on one time axis (µs from each forward's start), two lanes each: the CPU issuing the
    forward (aten ops, launch calls in black) and the GPU running what was launched. Thin lines join a
    launch to its work, so a queue, a gap or a hidden Memcpy shows at a glance."""
    colours = theme(dark)
    figure = Figure(figsize=(WIDTH_IN, 3.9), dpi=DPI, layout="constrained", facecolor=colours["bg"])
    axes = figure.subplots()
    end = max(a.end_us, b.end_us) * 1.02
    seen: dict[str, str] = {}
    labels = []
    for side, (timeline, cpu_y, gpu_y) in enumerate(((a, 3.0, 2.0), (b, 1.0, 0.0))):
        name = f"{'AB'[side]} · {timeline.label}"
        labels += [(cpu_y, f"{name}\nCPU issues: {text.us(timeline.range_us)}"),
                   (gpu_y, f"GPU runs: {text.us(timeline.gpu_busy_us)}\n(idle {text.us(timeline.gpu_idle_us)} between)"
                    if timeline.gpu else "GPU: none (a CPU run)")]
        axes.barh(cpu_y, timeline.range_us, 0.9, left=0, color=colours["range"], edgecolor=colours["muted"],
                  linewidth=0.6)
        for span in (s for s in timeline.cpu if s.kind == "op" and s.depth == 0):
            axes.barh(cpu_y + 0.1, span.dur_us, 0.55, left=span.start_us, color="#9db4d6", edgecolor=colours["bg"],
                      linewidth=0.6)
            _label(axes, span, cpu_y + 0.1, end, "#111827")
        launches = {s.correlation: s for s in timeline.cpu if s.kind == "launch"}
        for span in (s for s in timeline.cpu if s.kind == "launch"):
            axes.barh(cpu_y - 0.3, max(span.dur_us, end / 600), 0.22, left=span.start_us, color=colours["launch"])
        for span in timeline.gpu:
            kind = {"memcpy": "gpu_memcpy", "memset": "gpu_memset"}.get(span.kind, "kernel")
            group = category(span.full_name or span.name, kind)
            colour = CATEGORY_COLOURS.get(group, OTHER_COLOUR)
            seen.setdefault(group if group in CATEGORY_COLOURS else "other", colour)
            axes.barh(gpu_y, max(span.dur_us, end / 600), 0.7, left=span.start_us, color=colour,
                      edgecolor=colours["bg"], linewidth=0.6)
            _label(axes, span, gpu_y, end, "white")
            launch = launches.get(span.correlation)
            if launch:
                axes.plot([launch.end_us, span.start_us], [cpu_y - 0.41, gpu_y + 0.35], color=colours["link"],
                          linewidth=0.7, zorder=0)
    axes.set_yticks([y for y, _ in labels], [words for _, words in labels], fontsize=SMALL_PT)
    axes.set_ylim(-0.6, 3.55)
    axes.set_xlim(0, end)
    axes.set_xlabel("µs from the start of one call (its record_function range)", fontsize=TEXT_PT)
    axes.grid(True, axis="x", color=colours["grid"], linewidth=0.8)
    axes.set_axisbelow(True)
    style_axes(axes, colours)
    handles = [Patch(color="#9db4d6", label="aten op (CPU)"), Patch(color=colours["launch"], label="launch call"),
               Line2D([], [], color=colours["link"], linewidth=0.9, label="launch → its GPU work")]
    handles += [Patch(color=c, label=n) for n, c in seen.items()]
    _legend(axes, handles, colours, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4)
    return figure


def _label(axes, span, y: float, end: float, colour: str) -> None:
    room = int(_AXES_PX * span.dur_us / end / _LABEL_PX) - 1  # characters the bar has room for, a margin kept
    if room >= 5:
        name = text.kernel_label(span.name, room) if span.lane == "gpu" else text.clip(text.op(span.name), room)
        axes.text(span.start_us + span.dur_us / 2, y, name, ha="center", va="center", fontsize=SMALL_PT,
                  color=colour, clip_on=True)


# -- the mask: which query sees which key -------------------------------------------------------------------------
MASK_KEYS = 16  # keys the picture draws: a workload's mask drawn at this S, its window and query length scaled


def mask_workload(w):
    """`w`'s mask at MASK_KEYS keys, its window and query length scaled with it (at least 1): the same pattern, small
    enough to see each cell (the picture is of the rule, which does not depend on S). Only the mask's own fields are
    carried (causal, mask, window, q_len): the rest (timing, GPUs, pass, pages, dtype, ...) draw nothing, and a
    workload of them may be one a CPU refuses (cold or graph timing, several GPUs)."""
    scale = MASK_KEYS / w.seq_len
    return Workload(seq_len=MASK_KEYS, causal=w.causal, mask=w.mask, device="cpu",
                    q_len=min(w.q_len, MASK_KEYS) if w.q_len else None,  # a decode step's few queries, each
                    window=max(1, round(w.window * scale)) if w.window else None)


def mask_figure(w, dark: bool | None = None) -> Figure:
    """Which query sees which key, as attention-gym draws a mask: a row per query, a column per key, filled where
    the query may attend the key (the workload's own `allowed`, at MASK_KEYS keys; packed documents, their
    block-diagonal pattern)."""
    if w.lengths is not None:
        cells = _documents_cells(w)
        return _cells_figure(cells, f"{'causal' if w.causal else 'all'} within {len(w.lengths)} documents", 1.0, dark)
    small = mask_workload(w)
    allowed = small.allowed()
    cells = allowed.numpy() if allowed is not None else [[True] * small.seq_len for _ in range(small.queries)]
    scaled = (f"W={small.window} of " if small.window else "S=") + str(small.seq_len) + \
        (f", q_len {small.q_len}" if small.q_len else "")
    title = f"{w.mask if w.mask != 'flag' else ('causal' if w.causal else 'no mask')} ({scaled})"
    return _cells_figure(cells, title, small.queries / small.seq_len, dark)


def _documents_cells(w):
    """Packed documents over their T tokens, each document's length scaled to about 2·MASK_KEYS tokens in all (at
    least one): each token sees its own document (causally or not), the pattern every way computes."""
    import torch

    sizes = torch.tensor([max(1, round(n * 2 * MASK_KEYS / w.tokens)) for n in w.lengths])
    document = torch.repeat_interleave(torch.arange(len(sizes)), sizes)
    cells = document[:, None] == document[None, :]
    if w.causal:
        cells &= torch.ones_like(cells).tril()
    return cells.numpy()


def _cells_figure(cells, title: str, rows_per_column: float, dark: bool | None) -> Figure:
    """A grid of booleans as the page draws a mask: filled where a query may attend a key."""
    from matplotlib.colors import ListedColormap

    colours = theme(dark)
    fig = Figure(figsize=(2.6, 0.9 + 1.7 * rows_per_column), dpi=DPI, layout="constrained", facecolor=colours["bg"])
    axes = fig.subplots()
    axes.imshow(cells, cmap=ListedColormap([colours["range"] if dark is None else colours["grid"],
                                             DEVICE_TIME_COLOUR]), vmin=0, vmax=1, aspect="equal")
    axes.set_xticks([]), axes.set_yticks([])
    axes.set_xlabel("keys →", fontsize=SMALL_PT)
    axes.set_ylabel("queries ↓", fontsize=SMALL_PT)
    axes.set_title(title, fontsize=SMALL_PT, color=colours["fg"])
    style_axes(axes, colours)
    return fig


# -- drawn once: a chart as the PNG the page and its download show ---------------------------------------------
def png(figure: Figure | None) -> bytes | None:
    """A figure as the PNG both the page and the download show (None for no figure)."""
    if figure is None:
        return None
    with io.BytesIO() as drawn:
        figure.savefig(drawn, format="png")
        return drawn.getvalue()


class Drawn:
    """The charts drawn for the answers shown last, by the answer's JSON (what its client was sent, every figure's
    input with it): the same answer shown again (a replay's answer is the same text every time, a live one's never
    repeats) gets the PNGs drawn the first time, in microseconds instead of a third of a second a chart. A chart
    being drawn when another caller asks for it (two visitors opening one link, or the server's opening drawn as the
    first visitor comes) is drawn once: the second waits for it."""

    def __init__(self, kept: int):
        self.kept = kept
        self._drawn: OrderedDict[tuple[str, str], bytes | None] = OrderedDict()
        self._drawing: dict[tuple[str, str], Future] = {}
        self._lock = threading.Lock()

    def png(self, answer_text: str, name: str, figure) -> bytes | None:
        """The PNG of chart `name` of this answer: kept, or drawn now from `figure()` (a Figure, or None)."""
        key = (hashlib.sha256(answer_text.encode()).hexdigest(), name)
        with self._lock:
            if key in self._drawn:
                self._drawn.move_to_end(key)
                return self._drawn[key]
            drawing = self._drawing.get(key)
            if drawing is None:
                drawing = self._drawing[key] = Future()
                mine = True
            else:
                mine = False
        if not mine:
            return drawing.result()  # its drawer's PNG, or its error
        try:
            drawn = png(figure())
        except BaseException as error:
            with self._lock:
                del self._drawing[key]
            drawing.set_exception(error)
            raise
        with self._lock:
            self._drawn[key] = drawn
            del self._drawing[key]
            while len(self._drawn) > self.kept:
                self._drawn.popitem(last=False)
        drawing.set_result(drawn)
        return drawn


DRAWN = Drawn(kept=96)  # PNGs of 15-50 KB: the charts of the last 32 answers shown, ~3 MB


# -- the roofline: each run against the GPU's roofs ------------------------------------------------------------
ROOF_COLOUR = "#6b7280"
SIDE_COLOURS = {"A": DEVICE_TIME_COLOUR, "B": "#dd8452"}


def roofline_figure(result: Comparison | Sweep, dark: bool | None = None, present: bool = False) -> Figure | None:
    """Each run at its arithmetic intensity and achieved TFLOP/s (`roofline.points`), log–log, under the GPU's roofs
    (`roofline.roofs`: measured drawn full, the datasheet's thin, each named with its figure in the key): A and B a
    point each, or a sweep's variants a path each over its axis with its first and last lengths written by them; warm
    points filled, cold ones hollow. None where the runs have no roofline (`roofline.refusal` says why). `present`:
    the stage's figure, tall and in its large type (PRESENT_PT), the key one entry a line."""
    from . import roofline

    sweep = isinstance(result, Sweep)
    runs = roofline.runs(result)
    if roofline.refusal(runs) is not None:
        return None
    env, workload = runs[0].environment, runs[0].workload
    roofs = roofline.roofs_of(runs)
    colours = theme(dark)
    size = (PRESENT_WIDTH_IN, PRESENT_HEIGHT_IN) if present else (WIDTH_IN, 4.4)
    small, body, title = (PRESENT_PT,) * 3 if present else (SMALL_PT, TEXT_PT, TITLE_PT)
    figure = Figure(figsize=size, dpi=DPI, layout="constrained", facecolor=colours["bg"])
    axes = figure.subplots()
    handles, labels = [], []
    if sweep and present:  # A and B in the stage's other figure's colours and names
        paths = [(f"{side} · {variant}", colour, result.of(variant))
                 for side, variant, colour in (("A", result.a, DEVICE_TIME_COLOUR), ("B", result.b, "#dd8452"))]
    elif sweep:
        paths = [(variant, VARIANT_COLOURS[i % len(VARIANT_COLOURS)], result.of(variant))
                 for i, variant in enumerate(result.variants)]
    else:
        paths = [(f"{side} · {run.variant}", SIDE_COLOURS[side], [run]) for side, run in (("A", result.a),
                                                                                       ("B", result.b))]
    everything = []
    for name, colour, of in paths:
        ran = [(run, p) for run in of for p in roofline.points(run)]
        everything += [p for _, p in ran]
        for cold in (False, True):
            these = [(run, p) for run, p in ran if p.cold is cold]
            if not these:
                continue
            axes.plot([p.intensity for _, p in these], [p.tflops for _, p in these], marker="o",
                      color=colour, markersize=6 if sweep else 9, linewidth=1.6,
                      linestyle=("--" if cold else "-") if sweep else "none",
                      markerfacecolor="none" if cold else colour, markeredgewidth=1.6, zorder=3)
            if sweep and not cold:  # the path's ends: which length each is
                ends = {id(r): (r, q, side) for r, q, side in ((*these[0], -1), (*these[-1], 1))}
                for run, p, side in ends.values():
                    labels.append(axes.annotate(_seq_label(result.value(run)) if result.axis == "seq_len" else
                                                text.point(result.axis, result.value(run)), (p.intensity, p.tflops),
                                                xytext=(6 * side, 0), textcoords="offset points", va="center",
                                                ha="left" if side > 0 else "right", fontsize=small, color=colour))
        handles.append(Line2D([], [], color=colour, marker="o", linewidth=1.6 if sweep else 0,
                              label=name if ran else f"{name} ({of[0].status if of else 'no points'})"))
    if any(p.cold for p in everything):
        handles.append(Line2D([], [], color=colours["muted"], marker="o", markerfacecolor="none", linestyle="none",
                              label="cold (L2 flushed); filled: warm"))

    xs, ys = [p.intensity for p in everything], [p.tflops for p in everything]
    ridge = roofs.compute.value / roofs.memory.value if roofs.memory and roofs.compute else None
    low_x, high_x = min(xs + [ridge or xs[0]]) / 6, max(xs + [ridge or xs[0]]) * 6
    grid = [low_x * (high_x / low_x) ** (i / 200) for i in range(201)]
    for roof in (roofs.memory, roofs.compute, *roofs.beside):
        if roof is None:
            continue
        main = roof in (roofs.memory, roofs.compute)
        other = roofs.compute if roof is roofs.memory else roofs.memory
        line = [(x, roof.value * (x if roof.kind == "memory" else 1) / 1e12) for x in grid]
        if main and other is not None:  # the roofline: where this roof is the lower of the two
            line = [(x, y) for x, y in line if y <= other.value * (x if other.kind == "memory" else 1) / 1e12 * 1.0001]
        thick = main and roof.measured
        axes.plot([x for x, _ in line], [y for _, y in line], color=colours["fg"] if thick else ROOF_COLOUR,
                  linewidth=2.2 if thick else 1.0, linestyle="-" if main else ":", zorder=2)
        handles.append(Line2D([], [], color=colours["fg"] if thick else ROOF_COLOUR, linewidth=2.2 if thick else 1.0,
                              linestyle="-" if main else ":",
                              label=f"{roof.kind}: {roof.label}"))
    top = max(ys + [roofs.compute.value / 1e12 if roofs.compute else 0])
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlim(low_x, high_x)
    axes.set_ylim(min(ys) / 4, top * 3)
    axes.grid(True, which="major", color=colours["grid"], linewidth=0.8)
    axes.set_xlabel("FLOPs per byte it must move" if present else
                    "arithmetic intensity: FLOPs per byte the pass must move", fontsize=body)
    axes.set_ylabel("TFLOP/s achieved", fontsize=body)
    axes.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    axes.set_title(f"against the roofs · {text.machine(env) if present else env.device_name}, {workload.dtype}",
                   fontsize=title, loc="left", color=colours["fg"])
    style_axes(axes, colours)
    if present:  # the key's lines wrapped to the tall figure's width (a handle's width aside)
        axes.tick_params(labelsize=PRESENT_PT, which="both")
        for handle in handles:
            handle.set_label(textwrap.fill(handle.get_label(), int(size[0] * 72 / (PRESENT_PT * 0.6)) - 6))
    _legend(axes, handles, colours, loc="upper center", bbox_to_anchor=(0.5, -0.2),
            ncol=1 if present else 2, fontsize=small)
    if labels:
        _unclutter(labels, _laid_out(figure), remove=True)
    return figure
