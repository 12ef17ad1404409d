"""Live GPU behaviour. Collected only where CUDA is available (tests/conftest.py deselects it elsewhere);
run on the lent H200 with `python -m pytest tests/test_gpu_live.py`."""
import json

import pytest
import torch

from profiling import dispatch
from profiling.environment import detect
from profiling.measurement import compare, measure
from profiling.results import Comparison
from profiling.environment import torch_release
from profiling.workload import Workload, WorkloadError

pytestmark = pytest.mark.gpu
BLOG = Workload.blog()
TORCH_RELEASE = torch_release()


def test_the_hidden_memcpy_live():
    result = compare("naive", "naive_inplace", BLOG)
    naive, inplace = result.a, result.b
    assert [k for k in naive.kernels if k.category == "memcpy"]
    assert not [k for k in inplace.kernels if k.category == "memcpy"]
    assert naive.kernels_per_forward == inplace.kernels_per_forward + 1
    assert Comparison.from_dict(json.loads(result.to_json())) == result


def test_sdpa_math_live():
    run = measure("sdpa_math", BLOG)
    assert run.backend == "math" and run.kernels_per_forward >= 15
    assert any(k.precision == "FP32 on CUDA cores (ffma)" for k in run.kernels if k.category == "gemm")
    assert any(k.short_name == "triu_tril_kernel" for k in run.kernels)
    assert "aten::_safe_softmax" in {op.name for op in run.host_ops}
    assert run.peak_extra_bytes >= BLOG.scores_bytes(element_bytes=4)


@pytest.mark.parametrize("key", ["sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_auto", "flex"])
def test_fused_variants_live(key):
    run = measure(key, BLOG)
    assert run.ok, run.reason
    fused = [k for k in run.kernels if k.category in ("fused attention", "triton")]
    assert len(fused) == 1 and run.kernels_per_forward <= 3
    assert run.peak_extra_bytes < BLOG.scores_bytes()
    assert run.accuracy.max_abs_error <= 2 * run.accuracy.naive_max_abs_error
    assert run.timing.method.startswith("cuda events") and run.timing.spread_pct < 50


def test_rank3_follows_the_running_torch():
    """Before 2.14 a rank-3 call can only take math; from 2.14 it reaches the first fused backend of the order."""
    workload = BLOG.replace(rank=3)
    run = measure("sdpa_auto", workload)
    env = detect()
    expected = "math" if TORCH_RELEASE < (2, 14) else next(
        b for b in dispatch.priority(env).order if dispatch.known_refusal(b, workload, env) is None)
    assert run.ok and run.backend == expected


def test_fp32_flash_is_refused_with_pytorchs_reason():
    run = measure("sdpa_flash", BLOG.replace(dtype="fp32"))
    assert run.status == "unsupported" and "dtype" in run.reason and "No available kernel" in run.reason


def test_out_of_memory_is_predicted_before_allocating():
    free_before = torch.cuda.mem_get_info()[0]
    with pytest.raises(WorkloadError, match="GiB"):
        measure("sdpa_math", BLOG.replace(seq_len=131072))
    assert torch.cuda.mem_get_info()[0] >= free_before - 2**20


def test_out_of_memory_is_recovered_from():
    torch.cuda.set_per_process_memory_fraction(0.002)  # ~280 MB on an H200: the estimate can't know
    try:
        run = measure("naive", BLOG.replace(seq_len=2048))
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert run.status == "error" and "out of memory" in run.reason
    assert measure("sdpa_flash", BLOG).ok


def test_measuring_from_a_worker_thread_still_sees_the_kernels():
    """Gradio runs handlers on worker threads; Kineto registered its client on the main thread."""
    import threading
    runs = []
    worker = threading.Thread(target=lambda: runs.append(measure("sdpa_flash", BLOG.replace(seq_len=2048))))
    worker.start()
    worker.join()
    (run,) = runs
    assert run.ok and run.kernels_per_forward == 1 and run.kernels[0].category == "fused attention"


@pytest.mark.parametrize("key", ["sdpa_flash", "sdpa_auto", "naive_inplace"])
def test_host_figures_live(key):
    """Host cost per call is unprofiled and smaller than the profiled range; back-to-back never beats the
    GPU; the bound follows back-to-back; a pinned variant's pin is costed apart."""
    run = measure(key, BLOG)
    assert run.ok and run.host_cost.samples >= 20 and run.host_cost.method.startswith("perf_counter")
    assert 0 < run.host_cost.median_ms < run.profiled_host_ms
    assert run.back_to_back_ms >= 0.95 * run.gpu_ms
    assert run.bound == ("host" if run.back_to_back_ms > 1.10 * run.gpu_ms else "gpu")
    assert (run.pin_cost_ms is not None) == (key == "sdpa_flash")


def test_two_threads_measuring_at_once_do_not_crash():
    """Two overlapping profiler sessions segfault libtorch: the core's lock serialises them."""
    import threading
    runs = []
    threads = [threading.Thread(target=lambda: runs.append(compare("sdpa_flash", "sdpa_cudnn", BLOG)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(runs) == 2 and all(c.a.ok and c.b.ok for c in runs)
