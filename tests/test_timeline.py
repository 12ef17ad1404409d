"""One forward's lanes from real H200 traces (torch 2.11), and the figures that draw them and a sweep."""
import io
from pathlib import Path

import pytest
from PIL import Image

from profiling.figures import sweep_figure, timeline_figure
from profiling.recording import load_recorded
from profiling.reports import DPI, WIDTH_IN
from profiling.results import Timing
from profiling.sweep import Sweep, SweepPoint
from profiling.timeline import forward_timeline, run_timeline
from profiling.trace import load_trace, summarize_trace
from profiling.workload import Workload

DATA = Path(__file__).parent / "data" / "h200-torch2.11"
RUNS = {r.variant: r for r in load_recorded(DATA) if r.workload == Workload.blog()}


def test_naive_lanes_hold_the_forwards_ops_launches_and_kernels_in_order():
    timeline = run_timeline(RUNS["naive"])
    assert timeline.forward == "attention_profiler::forward#2"  # the median of the three ranges
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
    assert len(gpu) == summarize_trace(load_trace(RUNS["naive"].trace_path)).kernels_per_forward
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
    assert labels[0].startswith("A · naive CPU") and labels[3].startswith("B · flex GPU")
    assert all(t.get_fontsize() * figure.dpi / 72 >= 12 for t in figure.findobj(lambda o: hasattr(o, "get_fontsize")))


def _sweep_with_refusal() -> Sweep:
    env = RUNS["naive"].environment
    points = []
    for s in (1024, 2048, 4096, 8192):
        for variant, ms in (("naive", 2e-8 * s**2 + 0.01), ("sdpa_flash", 1.2e-6 * s**1.5)):
            points.append(SweepPoint(variant, s, "ok", timing=Timing(ms, ms, ms, 5, "cuda events"),
                                     peak_extra_bytes=(4 * s * s if variant == "naive" else 1000 * s)))
    points.append(SweepPoint("naive", 16384, "does not fit", needed_bytes=140 * 2**30, available_bytes=126 * 2**30))
    return Sweep(["naive", "sdpa_flash"], Workload.blog(seq_len=1024), [1024, 2048, 4096, 8192, 16384], env, points,
                 126 * 2**30)


@pytest.mark.parametrize("dark", [False, True])
def test_sweep_figure_draws_exponents_crossover_and_the_refused_point(dark):
    figure = sweep_figure(_sweep_with_refusal(), dark=dark)
    assert _png_size(figure)[0] == WIDTH_IN * DPI == 700  # fits a 760 px column unscaled
    time_axes, memory_axes = figure.axes
    texts = [t.get_text() for axes in (time_axes, memory_axes) for t in axes.texts]
    assert any("overtakes" in t for t in texts) and "naive stops" in texts and "needs 140 GiB" in texts
    assert any("S^{2.00}" in t for t in texts)                    # naive's memory
    assert any("NVIDIA H200 memory, 140 GiB" in t for t in texts)
    hollow = [line for line in memory_axes.lines if line.get_markerfacecolor() == "none"]
    (refused,) = hollow
    assert list(refused.get_xdata()) == [16384] and refused.get_ydata()[0] == pytest.approx(
        RUNS["naive"].environment.total_memory_bytes / 2**20)
    assert all(t.get_fontsize() * figure.dpi / 72 >= 12 for t in figure.findobj(lambda o: hasattr(o, "get_fontsize")))
