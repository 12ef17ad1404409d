"""One forward's lanes from real H200 traces (torch 2.11), and the figures that draw them, a comparison and a sweep:
each chart's bars and marks are the runs' own figures, a sweep's exponents appear only where a fit supports one, a
crossing only where the verdict's test ranks A and B in opposite orders, and a stopped sweep says why."""
import io

import pytest
from PIL import Image
from sweep_helpers import run, synthetic

from profiling import text
from profiling.explain.curves import crossovers, slopes
from profiling.figures import DPI, WIDTH_IN, sweep_figure, timeline_figure, timing_figure
from explain_helpers import RUNS as RECORDED  # the tests' one load of the recording (read-only)
from profiling.results import DOES_NOT_FIT, Comparison, Sweep
from profiling.timeline import forward_timeline, run_timeline
from profiling.trace import load_trace, summarize_trace
from profiling.workload import Workload

RUNS = {r.variant: r for r in RECORDED if r.workload == Workload.blog()}


def median_range(path) -> str:
    """The profiled call whose host range is the median of the trace's, read with gzip and json alone."""
    import gzip
    import json
    with gzip.open(path) as f:
        ranges = [e for e in json.load(f)["traceEvents"]
                  if e.get("cat") == "user_annotation" and e.get("name", "").startswith("attention_profiler::call#")]
    assert len(ranges) % 2 == 1, "an odd number of profiled calls has one median"
    return sorted(ranges, key=lambda e: e["dur"])[len(ranges) // 2]["name"]


def test_naive_lanes_hold_the_forwards_ops_launches_and_kernels_in_order():
    timeline = run_timeline(RUNS["naive"])
    assert timeline.forward == median_range(RUNS["naive"].trace_path)
    top_ops = [s.name for s in timeline.cpu if s.kind == "op" and s.depth == 0]
    assert top_ops == ["transpose", "matmul", "mul", "masked_fill", "softmax", "matmul"]
    launches = [s.name for s in timeline.cpu if s.kind == "launch"]
    assert launches == ["cudaMemsetAsync", "cuLaunchKernelEx", "cudaLaunchKernel", "cudaMemcpyAsync",
                        "cudaLaunchKernel", "cudaLaunchKernel", "cuLaunchKernelEx"]
    gpu = timeline.gpu
    assert [s.kind for s in gpu] == ["memset", "kernel", "kernel", "memcpy", "kernel", "kernel", "kernel"]
    assert [s.name for s in gpu][1:] == [
        "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", "vectorized_elementwise_kernel [mul]", "Memcpy DtoD",
        "elementwise_kernel [masked_fill]", "softmax_warp_forward", "nvjet_sm90_tst_64x512_64x2_1x2_h_bz_coopB_NNT"]
    # the same kernels the trace parser counts per forward, each after its launch, one after another
    assert len(gpu) == summarize_trace(load_trace(RUNS["naive"].trace_path)).launches
    starts = [s.start_us for s in gpu]
    assert starts == sorted(starts)
    by_correlation = {s.correlation: s for s in timeline.cpu if s.kind == "launch"}
    assert all(s.start_us >= by_correlation[s.correlation].start_us for s in gpu)
    # the hidden copy of the out-of-place masked_fill sits under aten::clone → copy_
    copy = next(s for s in timeline.cpu if s.name == "cudaMemcpyAsync")
    assert copy.depth == 3 and by_correlation[gpu[3].correlation] is copy
    memcpy = next(k for k in RUNS["naive"].kernels if k.category == "memcpy")
    assert gpu[3].dur_us == pytest.approx(memcpy.us_per_forward, rel=0.1)  # one forward's copy, the average's size
    assert timeline.range_us == pytest.approx(RUNS["naive"].profiled_host_ms * 1000)  # the median range
    assert 0 <= timeline.gpu_idle_us < gpu[-1].end_us - gpu[0].start_us


def test_cudnn_kernel_starts_as_soon_as_it_is_launched_under_the_profiler():
    timeline = run_timeline(RUNS["sdpa_cudnn"])
    (memset, kernel) = timeline.gpu
    assert (memset.kind, kernel.kind) == ("memset", "kernel")
    assert kernel.name.startswith("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma")
    launch = next(s for s in timeline.cpu if s.correlation == kernel.correlation)
    assert launch.name == "cuLaunchKernelEx" and kernel.start_us - launch.end_us < 5  # runs as soon as launched


@pytest.mark.parametrize("forward", [1, 2, 3])
def test_every_profiled_forward_can_be_chosen(forward):
    timeline = forward_timeline(load_trace(RUNS["sdpa_flash"].trace_path), "flash", forward)
    assert timeline.forward.endswith(f"#{forward}")
    assert [s.name for s in timeline.gpu] == ["pytorch_flash::flash_fwd_kernel"]
    with pytest.raises(ValueError, match="no forward #7"):
        forward_timeline(load_trace(RUNS["sdpa_flash"].trace_path), "flash", 7)


def _png_size(figure) -> tuple[int, int]:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return Image.open(buffer).size


@pytest.mark.parametrize("dark", [False, True])
def test_timeline_figure_fits_a_760_px_column(dark):
    figure = timeline_figure(run_timeline(RUNS["naive"]), run_timeline(RUNS["flex"]), dark=dark)
    assert _png_size(figure)[0] == WIDTH_IN * DPI == 700  # fits a 760 px column unscaled
    labels = [t.get_text() for t in figure.axes[0].get_yticklabels()]
    assert labels[0].startswith("A · naive\nCPU issues: ") and labels[2].startswith("B · flex\nCPU issues: ")
    assert labels[3].startswith("GPU runs: ") or labels[3].startswith("GPU: none")
    assert all(t.get_fontsize() * figure.dpi / 72 >= 12 for t in figure.findobj(lambda o: hasattr(o, "get_fontsize")))


def _texts(figure) -> list[str]:
    return [t.get_text() for axes in figure.axes for t in axes.texts]


def _big_enough(figure) -> bool:
    return all(t.get_fontsize() * figure.dpi / 72 >= 12 for t in figure.findobj(lambda o: hasattr(o, "get_fontsize")))


@pytest.mark.parametrize("a, b", [("naive", "flex"), ("sdpa_flash", "sdpa_cudnn")])
def test_the_timing_chart_draws_the_unprofiled_host_cost_and_marks_the_back_to_back_pace(a, b):
    """Per run: a bar of GPU time, a bar of the host's cost to issue one call (unprofiled, GPU kept busy), and a mark
    at the back-to-back pace; the profiled range (which includes the profiler's overhead) is drawn nowhere."""
    comparison = Comparison(RUNS[a], RUNS[b])
    figure = timing_figure(comparison)
    assert _png_size(figure)[0] == WIDTH_IN * DPI == 700 and _big_enough(figure)
    top = figure.axes[0]
    widths = sorted(round(p.get_width(), 12) for p in top.patches)
    expected = sorted(round(x, 12) for r in (comparison.a, comparison.b)
                      for x in (r.timing.median_ms, r.host_cost.median_ms))
    assert widths == expected
    drawn = {round(x, 12) for x in widths} | {round(x, 12) for line in top.lines for x in line.get_xdata()}
    assert not {round(r.profiled_host_ms, 12) for r in (comparison.a, comparison.b)} & drawn
    paces = [line.get_xdata()[0] for line in top.lines]
    assert paces == [comparison.a.back_to_back.median_ms, comparison.b.back_to_back.median_ms]
    labels = [t.get_text().strip() for t in top.texts]
    assert labels == [text.ms(x) for r in (comparison.a, comparison.b) for x in (r.timing.median_ms,
                                                                                r.host_cost.median_ms)]
    legend = {t.get_text() for t in top.get_legend().get_texts()}
    assert legend == {"GPU time", "host cost to issue (CPU)", "back-to-back pace"}


def _sweep_with_refusal() -> Sweep:
    runs = []
    for s in (1024, 2048, 4096, 8192):
        for variant, ms, seed in (("naive", 2e-8 * s**2 + 0.01, 1), ("sdpa_flash", 1.2e-6 * s**1.5, 2)):
            runs.append(run(variant, s, ms, seed=seed, mem=(4 * s * s if variant == "naive" else 1000 * s)))
    runs.append(run("naive", 16384, status=DOES_NOT_FIT, needed_bytes=140 * 2**30, available_bytes=126 * 2**30))
    return synthetic(runs, available_bytes=126 * 2**30)


@pytest.mark.parametrize("dark", [False, True])
def test_sweep_figure_draws_exponents_crossover_and_the_refused_point(dark):
    result = _sweep_with_refusal()
    figure = sweep_figure(result, dark=dark)
    assert _png_size(figure)[0] == WIDTH_IN * DPI == 700 and _big_enough(figure)
    time_axes, memory_axes = figure.axes
    texts = _texts(figure)
    assert "naive stops" in texts
    assert f"naive: does not fit,\nneeds {text.size(140 * 2**30)} of {text.size(126 * 2**30)} free" in texts
    assert f"NVIDIA H200 memory, {text.size(result.environment.total_memory_bytes)}" in texts
    # an exponent at each curve's end, as fitted, for every fit the points support (here: all four)
    fits = [f for f in slopes(result) if f.supported]
    assert len(fits) == 4
    for axes, quantity in ((time_axes, "time"), (memory_axes, "memory")):
        written = sorted(t.get_text() for t in axes.texts if "propto" in t.get_text())
        assert written == sorted(rf"$\propto S^{{{f.exponent:.2f}}}$" for f in fits if f.quantity == quantity)
    # the crossing the notes name, at the interpolated length
    (cross,) = crossovers(result)
    (said,) = [t for t in time_axes.texts if "overtakes" in t.get_text()]
    assert said.get_text() == f"sdpa_flash overtakes\nnaive ≈ S={cross.seq_len:,.0f}"
    assert any(list(line.get_xdata()) == [cross.seq_len] * 2 for line in time_axes.lines)
    hollow = [line for line in memory_axes.lines if line.get_markerfacecolor() == "none"]
    (refused,) = hollow
    assert list(refused.get_xdata()) == [16384] and refused.get_ydata()[0] == pytest.approx(  # over the line
        max(RUNS["naive"].environment.total_memory_bytes, 140 * 2**30) / 2**20)
    assert not any(t.startswith("stopped early") for t in texts)


def test_a_point_that_needs_less_than_the_card_but_more_than_was_free_is_said_not_to_fit():
    """136 GiB under the H200's 139.8 GiB line, with 124.5 GiB free: the words over the line say it does not fit, and
    of what was free; two variants refused alike at one length share one label (they once printed over each other)."""
    runs = [run(v, s, 1e-6 * s**2, seed=i, mem=4 * s * s) for s in (1024, 2048) for i, v in enumerate(("naive", "math"))]
    runs += [run(v, 4096, status=DOES_NOT_FIT, needed_bytes=136 * 2**30, available_bytes=int(124.5 * 2**30))
             for v in ("naive", "math")]
    result = synthetic(runs, available_bytes=int(124.5 * 2**30))
    assert result.environment.total_memory_bytes > 136 * 2**30
    said = [t.get_text() for t in sweep_figure(result).axes[1].texts if "fit" in t.get_text()]
    assert said == [f"naive, math: do not fit,\nneed {text.size(136 * 2**30)} of {text.size(int(124.5 * 2**30))} free"]


def test_sweep_figure_writes_no_exponent_the_points_do_not_support():
    S = [256, 512, 1024, 2048]
    noisy = [run("naive", s, ms, spread=0.3, seed=s) for s, ms in zip(S, (1.0, 0.8, 0.9, 1.1))]
    clean = [run("sdpa_flash", s, 1e-6 * s**2, seed=1) for s in S]
    result = synthetic(noisy + clean)
    fits = {(f.variant, f.quantity): f for f in slopes(result)}
    assert not fits["naive", "time"].supported and fits["sdpa_flash", "time"].supported
    time_axes = sweep_figure(result).axes[0]
    exponents = [t for t in time_axes.texts if "propto" in t.get_text()]
    (flash,) = exponents  # flash's alone, at its last point
    assert flash.get_text() == rf"$\propto S^{{{fits['sdpa_flash', 'time'].exponent:.2f}}}$"
    assert flash.xy == (2048, clean[-1].gpu_ms)
    # the crossings drawn are the ones the notes name: between lengths the test ranked in opposite orders
    assert [t.get_text() for t in time_axes.texts if "overtakes" in t.get_text()] == [
        f"{c.faster_after} overtakes\n{c.faster_before} ≈ S={c.seq_len:,.0f}" for c in crossovers(result)]


def test_a_stopped_sweep_says_why_on_its_chart():
    why = "cancelled during S=4,096"
    result = _sweep_with_refusal()
    result.stopped = why
    (said,) = [t for t in sweep_figure(result).axes[0].texts if t.get_text().startswith("stopped early")]
    assert said.get_text() == f"stopped early: {why}" and said.get_color() == "#c0392b"
