"""Every variant on CPU, over dtypes × ranks × causal: right answers, telling op tables, lossless JSON."""
import json

import pytest
import torch

from attention_variants import VARIANTS
from profiling.measurement import compare, measure
from profiling.results import Comparison, Run
from profiling.environment import torch_release
from profiling.workload import Workload

TORCH_RELEASE = torch_release()
RANK3_FUSED = TORCH_RELEASE >= (2, 14)  # DESIGN.md: rank-3 inputs reach fused kernels from torch 2.14


def small(dtype: str, rank: int, causal: bool) -> Workload:
    return Workload(batch=1, heads=2, seq_len=64, head_dim=16, dtype=dtype, rank=rank, causal=causal, device="cpu")


MATRIX = [(key, dtype, rank, causal) for key in VARIANTS for dtype in ("fp32", "bf16")
          for rank in (4, 3) for causal in (True, False)]
_runs: dict = {}


def run_of(key, dtype, rank, causal) -> Run:
    """Each cell measured once per session and shared by the tests below."""
    cell = (key, dtype, rank, causal)
    if cell not in _runs:
        _runs[cell] = measure(key, small(dtype, rank, causal))
    return _runs[cell]


def expected_cpu_backend(key: str, rank: int) -> str | None:
    """What SDPA on CPU runs for this variant, or None when it must refuse."""
    if key in ("sdpa_efficient", "sdpa_cudnn"):
        return None
    if key == "sdpa_math":
        return "math"
    fused_ok = rank == 4 or RANK3_FUSED
    if key == "sdpa_flash":
        return "flash (CPU)" if fused_ok else None
    if key == "sdpa_auto":
        return "flash (CPU)" if fused_ok else "math"
    return "not sdpa"


@pytest.mark.parametrize("key, dtype, rank, causal", MATRIX)
def test_variant_on_cpu(key, dtype, rank, causal):
    run = run_of(key, dtype, rank, causal)
    backend = expected_cpu_backend(key, rank)
    if backend is None:
        assert run.status == "unsupported", run.reason
        assert run.reason and run.timing is None and run.kernels == []
        return
    assert run.ok, run.reason
    # accurate: fp32 near exact; 16-bit within 2x of the naive computation in the same dtype
    tolerance = 1e-5 if dtype == "fp32" else 2 * run.accuracy.naive_max_abs_error + 1e-3
    assert run.accuracy.max_abs_error <= tolerance
    assert run.accuracy.relative_error < (1e-5 if dtype == "fp32" else 2e-2)
    # measured
    assert run.timing.median_ms > 0 and run.timing.samples >= 5 and run.timing.method == "perf_counter"
    assert run.profiled_host_ms > 0 and run.profiled_forwards == 3
    assert run.kernels and all(k.us_per_forward > 0 for k in run.kernels)
    assert abs(sum(k.share for k in run.kernels) - 1) < 1e-6
    assert run.kernels_per_forward is None  # a GPU fact, not shown for CPU ops
    ops = {op.name for op in run.host_ops}
    if key.startswith("sdpa"):
        assert run.backend == backend
    else:
        assert run.backend is None
    if key == "sdpa_math":
        assert "aten::_safe_softmax" in ops and "aten::_scaled_dot_product_attention_math" in ops
    if key == "flex":
        assert any("Compiled" in name for name in ops)
    # JSON round trip is lossless
    assert Run.from_dict(json.loads(json.dumps(run.to_dict()))) == run


@pytest.mark.parametrize("rank", [4, 3])
def test_out_of_place_naive_shows_the_copy_that_in_place_does_not(rank):
    naive = {op.name for op in run_of("naive", "fp32", rank, True).host_ops}
    inplace = {op.name for op in run_of("naive_inplace", "fp32", rank, True).host_ops}
    assert {"aten::masked_fill", "aten::clone"} <= naive
    assert "aten::masked_fill_" in inplace and not {"aten::masked_fill", "aten::clone"} & inplace


def test_naive_memory_grows_with_s_squared_and_fused_does_not():
    # by growth, not size: a fused CPU kernel's per-thread blocks depend on the machine's thread count
    # (from S=1024 the CPU flash kernel's blocks are full size, so only its output still grows)
    w = Workload.cpu_default(heads=2, seq_len=1024)
    peak = {(key, s): measure(key, w.replace(seq_len=s)).peak_extra_bytes
            for key in ("naive", "sdpa_flash") for s in (1024, 2048)}
    assert peak["naive", 1024] >= w.scores_bytes()
    assert peak["naive", 2048] / peak["naive", 1024] > 3.5       # S²
    assert peak["sdpa_flash", 2048] / peak["sdpa_flash", 1024] < 2.5


def test_unsupported_pins_say_why():
    run = run_of("sdpa_cudnn", "bf16", 4, True)
    assert run.status == "unsupported" and "CPU" in run.reason


def test_compare_shares_inputs_and_round_trips():
    w = small("fp32", 4, True)
    steps = []
    result = compare("naive", "sdpa_math", w, progress=lambda fraction, message: steps.append((fraction, message)))
    assert result.a.variant == "naive" and result.b.variant == "sdpa_math"
    # the same inputs: both errors are measured against one reference
    assert result.a.accuracy.naive_max_abs_error == result.b.accuracy.naive_max_abs_error
    assert [m for _, m in steps if "profiling" in m] == ["A · naive: profiling", "B · sdpa_math: profiling"]
    assert all(0 <= f <= 1 for f, _ in steps) and steps[-1][0] == 1.0
    assert Comparison.from_json(result.to_json()) == result


def test_trace_is_kept_for_download(tmp_path):
    run = measure("sdpa_math", small("fp32", 4, True), trace_dir=tmp_path)
    trace = json.loads(open(run.trace_path).read())
    assert run.trace_path.startswith(str(tmp_path)) and trace["traceEvents"]


def _sleepy_pin_variant(calls: list):
    """A pinned variant whose pin costs 20 ms and whose forward costs almost nothing."""
    import contextlib
    import time as _time

    from attention_variants.base import Variant

    class SleepyPin(Variant):
        def pin(self):
            @contextlib.contextmanager
            def slow():
                _time.sleep(0.02)
                yield
            return slow()

    def forward(x):
        calls.append(1)
        return x.q.clone()

    return SleepyPin("pinned_probe", "probe", forward, lambda w: 0, sdpa_backend="MATH")


def test_a_pinned_call_is_timed_without_its_pin_and_the_pin_is_costed_apart():
    calls = []
    run = measure(_sleepy_pin_variant(calls), Workload.cpu_default(seq_len=32))
    assert run.ok, run.reason
    assert run.timing.median_ms < 5           # the 20 ms pin is outside every timed call
    assert run.pin_cost_ms >= 20              # and measured on its own
    assert len(calls) > run.timing.samples    # warm-up, timing, profiling: many calls, none timed with the pin


def test_two_threads_measuring_at_once_take_turns():
    """The profiler crashes when two sessions overlap: measurements hold one process-wide lock."""
    import threading

    from profiling import measurement

    inside, most = [0], [0]
    original = measurement._profile

    def counting(*args, **kwargs):
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        try:
            return original(*args, **kwargs)
        finally:
            inside[0] -= 1

    measurement._profile = counting
    try:
        results = []
        threads = [threading.Thread(target=lambda: results.append(compare("naive", "sdpa_math", small("fp32", 4, True))))
                   for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        measurement._profile = original
    assert len(results) == 3 and all(c.a.ok and c.b.ok for c in results)
    assert most[0] == 1


def test_cpu_timings_of_a_pair_are_interleaved_and_quartiles_kept():
    comparison = compare("naive", "naive_inplace", small("fp32", 4, True))
    for run in (comparison.a, comparison.b):
        t = run.timing
        assert t.min_ms <= t.p25_ms <= t.median_ms <= t.p75_ms <= t.max_ms and t.samples >= 5
    assert comparison.a.timing.samples == comparison.b.timing.samples  # one sample of each per round
    assert comparison.a.host_cost is None and comparison.a.bound is None  # on a CPU the host does the work


def test_a_run_over_its_time_budget_stops_cleanly():
    from profiling.measurement import measure_runs
    from attention_variants import get_variant
    runs = measure_runs([get_variant("naive"), get_variant("sdpa_math")], small("fp32", 4, True), budget_s=1e-9)
    assert all(r.status == "stopped" and "time budget" in r.reason for r in runs)


def test_other_work_during_timing_marks_the_run():
    import threading

    from profiling.measurement import other_work
    release = threading.Event()

    def render():
        with other_work():
            release.wait(5)

    worker = threading.Thread(target=render)
    worker.start()
    try:
        busy = measure("naive", small("fp32", 4, True))
    finally:
        release.set()
        worker.join()
    assert busy.concurrent_work
    assert not measure("naive", small("fp32", 4, True)).concurrent_work


def test_accuracy_at_large_s_checks_a_sample_of_rows_with_bounded_memory():
    from profiling import measurement
    rows = measurement._checked_rows(131072)
    assert rows is not None and 64 <= len(rows) <= 256 and {0, 131071} <= set(rows.tolist())
    assert len(rows) * 131072 * 8 <= measurement.REFERENCE_CHUNK_BYTES  # one slice of fp64 scores
    assert measurement._checked_rows(1024) is None                        # small S: every row
    w = small("fp32", 4, True).replace(seq_len=256)
    x = w.make_inputs()
    picked = torch.tensor([0, 7, 100, 255])
    full = measurement._chunked_attention(x, torch.float64, None)
    assert torch.allclose(measurement._chunked_attention(x, torch.float64, picked), full[:, picked])


def test_a_compile_says_up_front_how_long_and_then_what_the_last_one_took(monkeypatch):
    import time

    from attention_variants import Variant
    from profiling import measurement, workload
    from profiling.workload import COSTS, compile_estimate_s
    monkeypatch.setattr(workload, "_last_compile_s", {})
    monkeypatch.setattr(measurement, "_compiled", set())
    naive, compiled = VARIANTS["naive"], set()

    def compiles(x):  # as torch.compile does: the first call of each shape is slow
        if x.workload not in compiled:
            compiled.add(x.workload)
            time.sleep(0.8)
        return naive.forward(x)

    fake = Variant("fake", "Compiled (fake)", compiles, naive.scratch_bytes, compiled=True)
    model_s = COSTS["cpu"].compile_s
    assert compile_estimate_s("cpu") == (model_s, "from the cost model for this CPU")

    def messages(workload) -> list[str]:
        said = []
        assert measure(fake, workload, progress=lambda f, m: said.append(m)).ok
        return said

    w = small("fp32", 4, True)
    assert f"fake: compiling (first call; estimated ~{model_s:.0f} s, from the cost model for this CPU)" in messages(w)
    took_s, basis = compile_estimate_s("cpu")
    assert 0.8 <= took_s < 5 and basis == f"as the last compile here took {took_s:.0f} s"
    assert "fake: warm-up (compiled before in this process)" in messages(w)
    assert compile_estimate_s("cpu")[0] == took_s  # a warm first call is no compile
    assert f"fake: compiling (first call; estimated ~{took_s:.0f} s, {basis})" in messages(w.replace(seq_len=32))
