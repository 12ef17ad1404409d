"""Live GPU behaviour. Collected only where CUDA is available (tests/conftest.py deselects it elsewhere);
run on the lent H200 with `python -m pytest -o addopts=-ra tests/test_gpu_live.py` (one process: pytest-xdist, which
the suite's addopts ask for, is not installed there)."""
import json
import threading

import pytest
import torch
from conftest import check_headline

from attention_variants import VARIANTS
from profiling import dispatch, session, text
from profiling.environment import detect, torch_release
from profiling.measurement import measure_runs
from profiling.request import LIVE, Request
from profiling.results import OUT_OF_MEMORY, UNSUPPORTED, Comparison, Run
from profiling.results import HOST_BOUND
from profiling.timing import MIN_SAMPLES, host_rounds
from profiling.workload import Refusal, Workload

pytestmark = [pytest.mark.gpu, pytest.mark.xdist_group("gpu")]  # one process at a time on the GPU
BLOG = Workload.blog()
TORCH_RELEASE = torch_release()


def measure(key: str, workload: Workload = BLOG) -> Run:
    return measure_runs([VARIANTS[key]], workload)[0]


def test_the_cold_flush_writes_every_byte_of_its_buffer_on_the_gpu():
    from test_timing_modes import flush_writes_every_byte

    flush_writes_every_byte("cuda")


def test_the_hidden_memcpy_live():
    naive, inplace = measure_runs([VARIANTS["naive"], VARIANTS["naive_inplace"]], BLOG)
    assert [k for k in naive.kernels if k.category == "memcpy"]
    assert not [k for k in inplace.kernels if k.category == "memcpy"]
    assert naive.kernels_per_forward == inplace.kernels_per_forward + 1
    assert naive.session == inplace.session  # one session: their timings interleaved
    comparison = Comparison(naive, inplace)
    assert Comparison.from_dict(json.loads(json.dumps(comparison.to_dict()))) == comparison


def test_sdpa_math_live():
    run = measure("sdpa_math")
    assert run.backend == "math" and run.kernels_per_forward >= 15
    assert any(k.precision == "FP32 on CUDA cores (ffma)" for k in run.kernels if k.category == "gemm")
    assert any(k.short_name == "triu_tril_kernel" for k in run.kernels)
    assert "aten::_safe_softmax" in {op.name for op in run.host_ops}
    assert run.peak_extra_bytes >= BLOG.scores_bytes(element_bytes=4)


@pytest.mark.parametrize("key", ["sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_auto", "flex"])
def test_fused_variants_live(key):
    run = measure(key)
    assert run.ok, run.reason
    fused = [k for k in run.kernels if k.category in ("fused attention", "triton")]
    assert len(fused) == 1 and run.kernels_per_forward <= 3
    assert run.peak_extra_bytes < BLOG.scores_bytes()
    assert run.accuracy.max_abs_error <= 2 * run.accuracy.naive_max_abs_error
    t = run.timing
    assert t.method.startswith("cuda events") and t.spread_pct < 50 and t.kept == t.samples >= MIN_SAMPLES


def test_a_live_comparison_ranks_by_the_test_and_says_so_in_the_headline():
    answer = session.compare(Request.build(LIVE, "sdpa_math", "sdpa_flash", {}, "cuda"))
    a, b = answer.result.a, answer.result.b
    assert a.ok and b.ok and a.session == b.session
    title = check_headline(json.loads(json.dumps(answer.to_dict())))
    where = text.on_device(a.environment)  # "on the H200", "on the H100": the card the run had
    assert "SDPA · FlashAttention [B] is " in title and f" faster than SDPA · math [A] {where}" in title


def test_rank3_follows_the_running_torch():
    """Before 2.14 a rank-3 call can only take math; from 2.14 it reaches the first fused backend of the order."""
    workload = BLOG.replace(rank=3)
    run = measure("sdpa_auto", workload)
    env = detect()
    expected = "math" if TORCH_RELEASE < (2, 14) else next(
        b for b in dispatch.priority(env, workload).order if dispatch.known_refusal(b, workload, env) is None)
    assert run.ok and run.backend == expected


def test_fp32_flash_is_refused_with_pytorchs_reason():
    run = measure("sdpa_flash", BLOG.replace(dtype="fp32"))
    assert run.status == UNSUPPORTED and "dtype" in run.reason and "No available kernel" in run.reason


def test_out_of_memory_is_predicted_before_allocating():
    free_before = torch.cuda.mem_get_info()[0]
    request = Request.build(LIVE, "sdpa_math", "sdpa_flash", {"seq_len": 131072}, "cuda")
    with pytest.raises(Refusal, match="GiB") as refused:
        session.compare(request)
    assert refused.value.kind == "memory" and refused.value.needed > refused.value.available
    assert torch.cuda.mem_get_info()[0] >= free_before - 2**20


def test_out_of_memory_is_recovered_from():
    torch.cuda.set_per_process_memory_fraction(0.002)  # ~280 MB on an H200: the estimate can't know
    try:
        run = measure("naive", BLOG.replace(seq_len=2048))
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert run.status == OUT_OF_MEMORY and "out of memory" in run.reason and run.stops
    assert measure("sdpa_flash").ok


def test_measuring_from_a_worker_thread_still_sees_the_kernels():
    """Gradio runs handlers on worker threads; Kineto registered its client on the main thread."""
    runs = []
    worker = threading.Thread(target=lambda: runs.append(measure("sdpa_flash", BLOG.replace(seq_len=2048))))
    worker.start()
    worker.join()
    (run,) = runs
    assert run.ok and run.kernels_per_forward == 1 and run.kernels[0].category == "fused attention"


@pytest.mark.parametrize("key", ["sdpa_flash", "sdpa_auto", "naive_inplace"])
def test_host_figures_live(key):
    """Host cost per call is unprofiled and smaller than the profiled range; back-to-back is one sample per round
    and never beats the GPU; the bound follows back-to-back; a pinned variant's pin is costed apart."""
    run = measure(key)
    host = run.host_cost
    rounds = host_rounds(run.warm_call_ms)
    assert run.ok and host.kept == host.samples >= 2 * rounds and host.method.startswith("perf_counter")
    assert 0 < host.median_ms < run.profiled_host_ms
    assert run.back_to_back.samples == rounds and run.back_to_back_ms == run.back_to_back.median_ms
    assert run.back_to_back_ms >= 0.95 * run.gpu_ms
    slow_loop, slow_host = run.back_to_back_ms > HOST_BOUND * run.gpu_ms, HOST_BOUND * host.median_ms >= run.gpu_ms
    assert run.bound == ("gpu" if not slow_loop else "host" if slow_host else "other")
    assert (run.pin_cost_ms is not None) == VARIANTS[key].pinned


def test_two_threads_measuring_at_once_do_not_crash():
    """Two overlapping profiler sessions segfault libtorch: the core's lock serialises them."""
    runs = []
    pair = [VARIANTS["sdpa_flash"], VARIANTS["sdpa_cudnn"]]
    threads = [threading.Thread(target=lambda: runs.append(measure_runs(pair, BLOG))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(runs) == 2 and all(a.ok and b.ok for a, b in runs)
    assert runs[0][0].session != runs[1][0].session


# shapes the recording does not hold: the decode memory rules and the lower-right dispatch on held-out cases
HELD_OUT_DECODE = [Workload(batch=2, heads=16, kv_heads=4, seq_len=6144, q_len=1, head_dim=128),
                   Workload(batch=3, heads=32, kv_heads=1, seq_len=3000, q_len=1, head_dim=64),
                   Workload(batch=1, heads=8, seq_len=20000, q_len=1, head_dim=128, dtype="fp16"),
                   Workload(batch=4, heads=16, kv_heads=8, seq_len=4096, q_len=8, head_dim=128)]


@pytest.mark.parametrize("w", HELD_OUT_DECODE, ids=lambda w: w.tag())
def test_a_held_out_decode_step_stays_within_its_estimate_and_splits_as_flash_says(w):
    """Every SDPA variant's decode peak within its estimate (and not over 2x it, or 1 MiB); flash's split count the
    one gpu_paths re-states from flash_api.cpp; auto takes the backend the lower-right order gives."""
    from profiling import gpu_paths
    from profiling.budget import call_bytes
    env = detect()
    runs = measure_runs([VARIANTS[k] for k in ("sdpa_flash", "sdpa_cudnn", "sdpa_math", "sdpa_auto")], w)
    for run in runs:
        if not run.ok:
            continue
        estimate = call_bytes(VARIANTS[run.variant], w, env)
        peak = run.peak_extra_bytes
        assert peak <= estimate <= max(2 * peak, peak + 2**20), (run.variant, peak, estimate)
    flash = runs[0]
    assert flash.ok, flash.reason
    split = next((k for k in flash.kernels_of("forward") if k.short_name.endswith("flash_fwd_splitkv_kernel")), None)
    assert (split.grid[1] if split else 1) == gpu_paths.flash_splits(w, env.sm_count)
    auto = runs[3]
    expected = next(b for b in dispatch.priority(env, w).order if dispatch.known_refusal(b, w, env) is None)
    assert auto.ok and dispatch.backend_key(auto.backend) == expected
