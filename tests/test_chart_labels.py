"""No chart overprints a label: every chart of recorded pairs and sweeps drawn as the page, the embed and the PNG
download draw it, and its text read back as drawn (matplotlib's extents, with the figure's own renderer). Two texts
never share a pixel; a label written in a plot lies inside its axes; one written on a bar lies wholly inside that bar,
and one written beside a bar touches no bar; no horizontal or vertical line (a pace, a memory line, a crossing)
runs through a label."""
from __future__ import annotations

import itertools
import math

import pytest
from explain_helpers import RUNS
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from test_explain_recorded import PAIRS, SWEEP_PAIRS

from profiling import figures, roofline



def spread(items: list, n: int, key=lambda item: None) -> list:
    """About `n` of `items` evenly spaced, as many from each group of the same `key` (a sweep's family), so the sample
    keeps its size, and every group its place, as the recording grows."""
    groups = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    each = math.ceil(n / len(groups))
    return [group[round(i * len(group) / each)] for group in groups.values()
            for i in range(min(each, len(group)))]


def family(sweep) -> str:
    return sweep.workload.family(sweep.axis)


# 29 recorded pairs spread evenly over the 8,783 (each workload family, forward, backward and step views, CPU-free),
# and every pair of the default workload, where the page opens
SAMPLE = spread(PAIRS, 29) + [c for c in PAIRS if c.a.workload == RUNS[0].workload][:6]
SWEEPS = spread(SWEEP_PAIRS, 24, family)  # each family's pairs, as many of each


DRAWN = {}


def timing_figure(comparison):
    """The page's time chart of a sampled pair, drawn once for the two tests that read it."""
    if id(comparison) not in DRAWN:
        DRAWN[id(comparison)] = figures.timing_figure(comparison, dark=None)
    return DRAWN[id(comparison)]


def drawn(figure):
    """`figure` drawn as it is saved, and the renderer that drew it."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return canvas.get_renderer()


def overprints(figure) -> list[str]:
    """Every overprint in `figure` as drawn, in words (empty: none)."""
    renderer = drawn(figure)
    ticks = {t for axes in figure.axes for axis in (axes.xaxis, axes.yaxis)
             for tick in axis.get_major_ticks() + axis.get_minor_ticks() for t in (tick.label1, tick.label2)}
    drawn_ticks = {t for axes in figure.axes for axis in (axes.xaxis, axes.yaxis)  # those in the view, as drawn
                   for tick in axis._update_ticks() for t in (tick.label1, tick.label2)}
    texts = [(t, t.get_window_extent(renderer)) for t in figure.findobj(Text)
             if t.get_visible() and t.get_text().strip() and (t not in ticks or t in drawn_ticks)]
    found = []
    for (a, box_a), (b, box_b) in itertools.combinations(texts, 2):
        if min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0) > 1 and min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0) > 1:
            found.append(f"{a.get_text()!r} overlaps {b.get_text()!r}")
    for axes in figure.axes:
        frame = axes.get_window_extent(renderer)
        bars = [box for p in axes.patches if isinstance(p, Rectangle) and p.get_width()  # not a shaded span
                for box in [p.get_window_extent(renderer)] if box.height < frame.height - 1]
        lines = [line.get_window_extent(renderer) for line in axes.lines if len(line.get_xdata()) > 1
                 and (len(set(line.get_xdata())) == 1 or len(set(line.get_ydata())) == 1)]
        for label in (t for t in axes.texts if t.get_visible() and t.get_text().strip()):
            box = label.get_window_extent(renderer)
            said = repr(label.get_text())
            if box.x0 < frame.x0 - 1 or box.x1 > frame.x1 + 1 or box.y0 < frame.y0 - 1 or box.y1 > frame.y1 + 1:
                found.append(f"{said} crosses its axes' edge")
            touched = [bar for bar in bars if min(box.x1, bar.x1) - max(box.x0, bar.x0) > 0.5
                       and min(box.y1, bar.y1) - max(box.y0, bar.y0) > 0.5]
            if len(touched) > 1 or (touched and not (touched[0].x0 <= box.x0 and box.x1 <= touched[0].x1)):
                found.append(f"{said} crosses a bar's edge")
            if any(min(box.x1, line.x1) - max(box.x0, line.x0) >= 0 and min(box.y1, line.y1) - max(box.y0, line.y0)
                   >= 0 for line in lines):
                found.append(f"{said} is struck through by a line")
    return found


def pair_id(c) -> str:
    return f"{c.a.variant}-{c.b.variant}-{c.a.workload.words()}"


@pytest.mark.parametrize("comparison", SAMPLE, ids=pair_id)
def test_the_time_chart_and_the_present_chart_never_overprint(comparison):
    for figure in (timing_figure(comparison), figures.present_figure(comparison)):
        figures.caption(figure, "Recorded on NVIDIA H200 (torch 2.11) · workload " + comparison.a.workload.words())
        assert not overprints(figure)


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda s: f"{s.a}-{s.b}-{family(s)}")
def test_a_sweeps_charts_never_overprint(sweep):
    assert not overprints(figures.sweep_figure(sweep))
    assert not overprints(figures.present_sweep_figure(sweep))


def test_the_check_sees_an_overprint():
    """The check itself: two labels written at one place, and a label across a bar's edge, are found."""
    comparison = SAMPLE[0]
    figure = figures.timing_figure(comparison)
    top = figure.axes[0]
    top.text(0, 0, "planted label", fontsize=9)
    top.text(0, 0, "planted twin", fontsize=9)
    found = overprints(figure)
    assert any("'planted label' overlaps 'planted twin'" in f for f in found)
    assert any("'planted label' crosses a bar's edge" in f for f in found)


def test_a_kernel_too_narrow_for_its_name_is_numbered_and_keyed():
    """Where a segment has no room for its name, its number is on it and the key under the chart names it: every
    number on a bar is in the key, with the kernel's name."""
    numbered = 0
    for comparison in SAMPLE:
        bottom = timing_figure(comparison).axes[1]
        numbers = {t.get_text() for t in bottom.texts if t.get_text().isdigit()}
        legend = bottom.get_legend()
        keys = {t.get_text().split(":")[0] for t in (legend.get_texts() if legend else ()) if ":" in t.get_text()}
        assert numbers <= keys, (pair_id(comparison), numbers, keys)
        numbered += len(numbers)
    assert numbered  # the sample has such segments: the check is not vacuous


@pytest.mark.parametrize("present", [False, True], ids=["page", "stage"])
@pytest.mark.parametrize("comparison", SAMPLE[::3], ids=pair_id)
def test_a_comparisons_roofline_never_overprints(comparison, present):
    """The page's roofline and the stage's (tall, in its large type, the key one entry a line)."""
    figure = figures.roofline_figure(comparison, present=present)
    if figure is None:  # neither side ran: no roofline, and the reason
        assert not comparison.a.ok and not comparison.b.ok and roofline.refusal([comparison.a, comparison.b])
        return
    figures.caption(figure, "Recorded on NVIDIA H200 (torch 2.11) · workload " + comparison.a.workload.words(),
                    size=figures.PRESENT_PT if present else figures.SMALL_PT)
    assert not overprints(figure)
    if present:
        assert figure.get_size_inches().tolist() == [figures.PRESENT_WIDTH_IN, figures.PRESENT_HEIGHT_IN]
        sizes = {t.get_fontsize() for t in figure.findobj(Text) if t.get_text().strip()}
        assert sizes == {figures.PRESENT_PT}, sizes  # every word at the stage's size


@pytest.mark.parametrize("sweep,present", [(s, False) for s in SWEEPS] + [(s, True) for s in SWEEPS[1::2]],
                         ids=lambda x: ("stage" if x else "page") if isinstance(x, bool) else f"{x.a}-{x.b}-{family(x)}")
def test_a_sweeps_roofline_never_overprints_and_names_its_lengths(sweep, present):
    figure = figures.roofline_figure(sweep, present=present)
    assert not overprints(figure)
    written = {t.get_text() for t in figure.axes[0].texts}
    assert written and written <= {figures._seq_label(v) for v in sweep.seq_lens} | \
        {f"B={v:,}" for v in sweep.seq_lens}  # every label by a path is one of its lengths
