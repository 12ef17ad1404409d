"""Every variant on CPU, over dtypes × ranks × causal: right answers (held against an fp64 oracle written in the
tests), telling op tables, truthful statuses, interleaved timings with every sample kept, a guard that stops at
safe points, and a lossless JSON round trip."""
from __future__ import annotations

import contextlib
import math
import json
import os
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch
from oracles import attention_fp64, gradients_fp64

from attention_variants import VARIANTS, Variant, get_variant
from profiling import accuracy, budget, capture, measurement, text
from profiling.environment import detect, torch_release
from profiling.measurement import Guard, measure_runs, other_work
from profiling.results import Run
from profiling.workload import Workload

RANK3_FUSED = torch_release() >= (2, 14)  # rank-3 inputs reach fused kernels from torch 2.14 (PR #192271)


def small(dtype: str = "fp32", rank: int = 4, causal: bool = True, **changes) -> Workload:
    return Workload(**{"batch": 1, "heads": 2, "seq_len": 64, "head_dim": 16, "dtype": dtype, "rank": rank,
                       "causal": causal, "device": "cpu"} | changes)


def measure(key, workload: Workload, **kwargs) -> Run:
    variant = key if isinstance(key, Variant) else get_variant(key)
    return measure_runs([variant], workload, **kwargs)[0]


# flex compiles (tens of seconds on this CPU): one cell of it; the packed ways (test_packed.py holds their answers) one
# cell each where they run here and one where they are refused; every other variant over the whole matrix
PACKED_ONLY = {key for key, v in VARIANTS.items() if v.packed_only}
MATRIX = [(key, dtype, rank, causal) for key in VARIANTS if key != "flex" and key not in PACKED_ONLY
          for dtype in ("fp32", "bf16") for rank in (4, 3) for causal in (True, False)] + [("flex", "fp32", 4, True)] \
    + [("sdpa_docmask", "fp32", 4, True), ("naive_docmask", "fp32", 4, False), ("sdpa_nested", "fp32", 4, False), ("sdpa_nested", "fp32", 4, True),
       ("varlen", "fp32", 4, True)]
_runs: dict = {}


@pytest.fixture(scope="module")
def runs() -> dict:
    """Each workload's variants measured together, one session, as the app does."""
    if not _runs:
        for dtype, rank, causal in {(d, r, c) for _, d, r, c in MATRIX}:
            keys = [k for k, d, r, c in MATRIX if (d, r, c) == (dtype, rank, causal)]
            for run in measure_runs([VARIANTS[k] for k in keys], small(dtype, rank, causal)):
                _runs[run.variant, dtype, rank, causal] = run
    return _runs


def expected_cpu_backend(key: str, rank: int, causal: bool = True) -> str | None:
    """What SDPA on CPU runs for this variant, or None when it must refuse."""
    if key in ("sdpa_efficient", "sdpa_cudnn", "fa4", "sdpa_fa4") or VARIANTS[key].gpu_only:
        return None
    if key == "sdpa_math":
        return "math"
    fused_ok = rank == 4 or RANK3_FUSED
    if key == "sdpa_flash":
        return "flash (CPU)" if fused_ok else None
    if key in ("sdpa_auto", "sdpa_docmask"):
        return "flash (CPU)" if fused_ok else "math"
    if key == "sdpa_nested":  # math, the only path nested tensors have on a CPU, which takes no is_causal=True
        return "math" if not causal else None
    if key == "varlen":
        return None
    return "not sdpa"


@pytest.mark.parametrize("key, dtype, rank, causal", MATRIX)
def test_variant_on_cpu(runs, key, dtype, rank, causal):
    run = runs[key, dtype, rank, causal]
    backend = expected_cpu_backend(key, rank, causal)
    if backend is None:
        assert run.status == "unsupported", run.reason
        assert run.reason and run.timing is None and run.kernels == []
        return
    assert run.ok, run.reason
    # accurate: fp32 near exact; 16-bit within 2x of the naive computation in the same dtype
    tolerance = 1e-5 if dtype == "fp32" else 2 * run.accuracy.naive_max_abs_error + 1e-3
    assert run.accuracy.max_abs_error <= tolerance
    # measured, every sample kept
    t = run.timing
    assert t.median_ms > 0 and t.samples == len(t.samples_ms) >= 20 and t.method == "perf_counter"
    assert t.min_ms == min(t.samples_ms) and t.max_ms == max(t.samples_ms)
    assert run.profiled_host_ms > 0 and run.profiled_forwards == 3
    assert run.kernels and all(k.us_per_forward > 0 for k in run.kernels)
    assert abs(sum(k.share for k in run.kernels) - 1) < 1e-6
    assert run.kernels_per_forward is None  # a GPU fact, not shown for CPU ops
    ops = {op.name for op in run.host_ops}
    assert run.backend == (backend if key.startswith("sdpa") else None)
    if key == "sdpa_math":
        assert "aten::_safe_softmax" in ops and "aten::_scaled_dot_product_attention_math" in ops
    if key == "flex":
        assert any("Compiled" in name for name in ops)
    assert Run.from_dict(json.loads(json.dumps(run.to_dict()))) == run  # the JSON round trip is lossless


@pytest.mark.parametrize("key", ["naive", "sdpa_math", "sdpa_flash"])
@pytest.mark.parametrize("dtype, causal", [("fp32", True), ("fp32", False), ("bf16", True)])
def test_the_accuracy_figure_is_the_output_s_distance_from_an_independent_fp64_oracle(runs, key, dtype, causal):
    run = runs[key, dtype, 4, causal]
    x = small(dtype, 4, causal).make_inputs()
    with VARIANTS[key].pin():
        out = VARIANTS[key].forward(x)
    truth = attention_fp64(x.workload, x.q, x.k, x.v)
    error = (out.reshape(truth.shape).double() - truth).abs().max().item()
    assert run.accuracy.max_abs_error == pytest.approx(error, rel=1e-6, abs=1e-12)
    naive = (VARIANTS["naive"].forward(x).reshape(truth.shape).double() - truth).abs().max().item()
    assert run.accuracy.naive_max_abs_error == pytest.approx(naive, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("rank", [4, 3])
def test_out_of_place_naive_shows_the_copy_that_in_place_does_not(runs, rank):
    naive = {op.name for op in runs["naive", "fp32", rank, True].host_ops}
    inplace = {op.name for op in runs["naive_inplace", "fp32", rank, True].host_ops}
    assert {"aten::masked_fill", "aten::clone"} <= naive
    assert "aten::masked_fill_" in inplace and not {"aten::masked_fill", "aten::clone"} & inplace


def test_naive_memory_grows_with_s_squared_and_fused_does_not():
    # by growth, not size: a fused CPU kernel's per-thread blocks depend on the machine's thread count
    w = Workload.cpu_default(heads=1, seq_len=1024)
    peak = {(run.variant, s): run.peak_extra_bytes for s in (1024, 2048)
            for run in measure_runs([VARIANTS["naive"], VARIANTS["sdpa_flash"]], w.replace(seq_len=s))}
    assert peak["naive", 1024] >= w.scores_bytes()
    assert peak["naive", 2048] / peak["naive", 1024] > 3.5       # S²
    assert peak["sdpa_flash", 2048] / peak["sdpa_flash", 1024] < 2.5


def test_one_session_interleaves_its_variants_and_shares_their_inputs(runs):
    a, b = runs["naive", "fp32", 4, True], runs["sdpa_math", "fp32", 4, True]
    assert a.session == b.session and a.session
    assert a.timing.samples == b.timing.samples  # one sample of each per round
    assert a.accuracy.naive_max_abs_error == b.accuracy.naive_max_abs_error  # one reference for both
    assert a.host_cost is None and a.bound is None and a.back_to_back is None  # on a CPU the host does the work


def test_progress_follows_the_phases_and_only_grows():
    steps = []
    measure_runs([VARIANTS["naive"], VARIANTS["sdpa_math"]], small(), labels=["A", "B"],
                 progress=lambda fraction, message: steps.append((fraction, message)))
    fractions = [f for f, _ in steps]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and fractions[0] >= 0
    assert [m for _, m in steps if "profiling" in m] == ["A · naive: profiling", "B · sdpa_math: profiling"]


def test_the_trace_is_kept_for_download(tmp_path):
    run = measure("sdpa_math", small(), trace_dir=tmp_path)
    assert run.trace_path.startswith(str(tmp_path)) and json.loads(open(run.trace_path).read())["traceEvents"]


def test_the_trace_folder_prunes_past_a_dangling_link_and_a_trace_removed_meanwhile(tmp_path, monkeypatch):
    """One dangling entry in the temporary folder made every later live run fail (pruning read each with stat()):
    only the app's own traces go, oldest first; links are neither followed nor removed; what vanished is skipped."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(capture, "KEPT_TRACES", 2)
    folder = tmp_path / f"attention_profiler_{os.getpid()}"
    folder.mkdir()
    traces = [folder / f"12000{i}_{i}_naive_B1H2S64D16_fp32_causal_r4.json" for i in range(4)]
    for i, trace in enumerate(traces):
        trace.write_text("{}")
        os.utime(trace, (1000 + i, 1000 + i))
    outside, mine = tmp_path / "outside.json", folder / "notes.json"
    for path in (outside, mine):
        path.write_text("{}")
        os.utime(path, (0, 0))
    dangling, linked = folder / "120009_9_naive_gone.json", folder / "120008_8_naive_link.json"
    dangling.symlink_to(tmp_path / "missing.json")
    linked.symlink_to(outside)
    listed = os.scandir

    class Listing(list):  # as os.scandir's answer: iterable, and a context manager
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def then_the_oldest_vanishes(path):
        entries = Listing(listed(path))
        traces[0].unlink(missing_ok=True)  # removed by someone else between the listing and its stat
        return entries
    with monkeypatch.context() as m:
        m.setattr(os, "scandir", then_the_oldest_vanishes)
        path = capture.trace_path("naive", small(), None)
    assert path.parent == folder and path.name.endswith("_naive_B1H2S64D16_fp32_causal_r4.json")
    assert not traces[1].exists() and traces[2].exists() and traces[3].exists()  # the newest two kept
    assert dangling.is_symlink() and linked.is_symlink() and outside.exists() and mine.exists()
    assert capture.trace_path("naive", small(), None).parent == folder  # and the next run too


def _sleepy_pin_variant(calls: list) -> Variant:
    """A pinned variant whose pin costs 20 ms and whose forward costs almost nothing."""

    class SleepyPin(Variant):
        def pin(self):
            @contextlib.contextmanager
            def slow():
                time.sleep(0.02)
                yield
            return slow()

    def forward(x):
        calls.append(1)
        return x.q.clone()

    return SleepyPin("pinned_probe", "probe", forward, lambda w, env: 0, sdpa_backend="MATH")


def test_a_pinned_call_is_timed_without_its_pin_and_the_pin_is_costed_apart():
    calls = []
    run = measure(_sleepy_pin_variant(calls), small(seq_len=32))
    assert run.ok, run.reason
    assert run.timing.median_ms < 5 and run.pin_cost_ms >= 20
    assert len(calls) > run.timing.samples


def test_two_threads_measuring_at_once_take_turns(monkeypatch):
    """The profiler crashes when two sessions overlap: measurements hold one process-wide lock."""
    inside, most = [0], [0]
    original = capture.profile_calls

    def counting(*args, **kwargs):
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        try:
            return original(*args, **kwargs)
        finally:
            inside[0] -= 1

    monkeypatch.setattr(capture, "profile_calls", counting)
    results = []
    threads = [threading.Thread(target=lambda: results.append(measure("naive", small()))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and all(r.ok for r in results) and most[0] == 1


def test_a_guard_past_its_deadline_stops_at_the_next_safe_point():
    runs = measure_runs([VARIANTS["naive"], VARIANTS["sdpa_math"]], small(), guard=Guard.within(1e-9))
    assert all(r.status == "stopped" and "over the time budget" in r.reason for r in runs)


def test_a_cancel_during_timing_keeps_the_samples_taken():
    calls = []

    def cancel_after_ten() -> bool:
        return len(calls) > 10

    slow = Variant("slow", "Slow", lambda x: (calls.append(1), time.sleep(0.002), x.q.clone())[-1], lambda w, env: 0)
    (run,) = measure_runs([slow], small(), guard=Guard(cancelled=cancel_after_ten))
    assert run.status == "stopped" and "cancelled" in run.reason
    assert run.timing is not None and 0 < run.timing.samples < 20  # stopped inside the timing rounds


def test_other_work_during_timing_marks_the_run():
    release = threading.Event()

    def render():
        with other_work():
            release.wait(5)

    worker = threading.Thread(target=render)
    worker.start()
    try:
        busy = measure("naive", small())
    finally:
        release.set()
        worker.join()
    assert busy.concurrent_work and not measure("naive", small()).concurrent_work


def test_out_of_memory_is_a_result_and_the_next_run_works():
    def out_of_memory(inputs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 40.00 GiB")
    run = measure(Variant("oom", "OOM", out_of_memory, lambda w, env: 0), small(seq_len=32))
    assert run.status == "out of memory" and "out of memory" in run.reason and run.stops
    assert measure("naive", small(seq_len=32)).ok


def test_a_planted_wrong_variant_is_measured_wrong_and_never_ranked():
    """A variant whose answer is wrong (SDPA's math path with its output scaled by 1.5, as a kernel that drops a
    normalisation would give), measured beside naive: its accuracy is read against fp64, far past plain attention's
    in the dtype, and the headline says its answer is wrong, with both errors, and ranks neither side."""
    import dataclasses

    from profiling.explain import explain
    from profiling.results import Comparison

    real = VARIANTS["sdpa_math"]
    planted = dataclasses.replace(real, forward=lambda x: real.forward(x) * 1.5)
    a, b = measure_runs([VARIANTS["naive"], planted], small())
    assert a.ok and b.ok
    x = small().make_inputs()
    oracle = attention_fp64(small(), x.q, x.k, x.v)
    assert b.accuracy.max_abs_error == pytest.approx(0.5 * oracle.abs().max().item(), rel=1e-3)
    assert b.accuracy.max_abs_error > 10 * b.accuracy.naive_max_abs_error
    title = explain(Comparison(a, b)).headline.title
    assert title.startswith(f"{real.label} [B] gives a wrong answer on ") and "faster" not in title, title
    assert f"up to {text.error(b.accuracy.max_abs_error)}" in title
    assert f"{text.error(b.accuracy.naive_max_abs_error)}" in title


def test_a_variant_that_raises_is_a_result_not_a_crash():
    def fails(inputs):
        raise ValueError("this variant is broken")
    run = measure(Variant("broken", "Broken", fails, lambda w, env: 0), small(seq_len=32))
    assert run.status == "error" and "this variant is broken" in run.reason and not run.stops


def test_accuracy_at_large_s_checks_a_sample_of_rows_with_bounded_memory():
    rows = accuracy.checked_rows(131072, 131072)
    assert rows is not None and 64 <= len(rows) <= 256 and {0, 131071} <= set(rows.tolist())
    assert len(rows) * 131072 * 8 <= budget.REFERENCE_CHUNK_BYTES  # one slice of fp64 scores
    assert accuracy.checked_rows(1024, 1024) is None                      # small S: every row
    x = small(seq_len=256).make_inputs()
    picked = torch.tensor([0, 7, 100, 255])
    full = accuracy.attention(x, torch.float64, None)
    assert torch.allclose(accuracy.attention(x, torch.float64, picked), full[:, picked])
    assert torch.allclose(full, attention_fp64(x.workload, x.q, x.k, x.v))  # the app's reference is the oracle's


@pytest.mark.parametrize("changes", [{}, {"mask": "window", "window": 5}, {"mask": "bias"}, {"mask": "bias", "causal": False},
                                     {"heads": 4, "kv_heads": 2}, {"heads": 4, "kv_heads": 1, "mask": "bool"}])
def test_the_app_s_reference_is_the_oracle_s_for_every_mask_and_kv_heads(changes):
    x = small(seq_len=32, passes="fwd+bwd", **changes).make_inputs()
    assert torch.allclose(accuracy.attention(x, torch.float64, None), attention_fp64(x.workload, x.q, x.k, x.v))
    app, oracle = accuracy.gradients(x, torch.float64), gradients_fp64(x.workload, x.q, x.k, x.v, x.grad_out)
    for name in ("dq", "dk", "dv"):
        assert torch.allclose(app[name].cpu(), oracle[name], atol=1e-10), name


def test_a_compile_says_up_front_how_long_and_then_what_the_last_one_took(monkeypatch):
    monkeypatch.setattr(budget, "compile_clock", budget.CompileClock())
    monkeypatch.setattr(measurement, "compile_clock", budget.compile_clock)
    monkeypatch.setattr(measurement, "_compiled", set())
    naive, compiled = VARIANTS["naive"], set()

    def compiles(x):  # as torch.compile does: the first call of each shape is slow
        if x.workload not in compiled:
            compiled.add(x.workload)
            time.sleep(0.8)
        return naive.forward(x)

    fake = Variant("fake", "Compiled (fake)", compiles, naive.scratch_bytes, compiled=True)
    model_s = budget.COSTS["cpu"].compile_s
    assert budget.compile_clock.estimate("cpu", fake) == (model_s, "from the cost model for this CPU")

    def messages(workload) -> list[str]:
        said = []
        assert measure(fake, workload, progress=lambda f, m: said.append(m)).ok
        return said

    started = time.perf_counter()
    assert f"fake: compiling (first call; estimated ~{text.seconds(model_s)}, from the cost model for this CPU)" \
        in messages(small())
    whole_s = time.perf_counter() - started
    took_s, basis = budget.compile_clock.estimate("cpu", fake)
    # the first call's own time: its 0.8 s compile, and less than the whole measurement it was a part of
    assert 0.8 <= took_s < whole_s and basis == f"as the last compile here took {text.seconds(took_s)}"
    assert "fake: warm-up (compiled before in this process)" in messages(small())
    assert budget.compile_clock.estimate("cpu", fake)[0] == took_s  # a warm first call is no compile
    assert f"fake: compiling (first call; estimated ~{text.seconds(took_s)}, {basis})" in messages(small(seq_len=32))


@pytest.mark.parametrize("passes", ["fwd+bwd", "bwd"])
def test_flex_with_a_backward_on_a_cpu_is_refused_up_front_in_pytorchs_words(passes, monkeypatch):
    """It was accepted, compiled (~30 s), then failed: refused before anything runs while this torch says it cannot
    (read here from a compiled call as flex.py makes it; a torch that can is not refused). A forward still runs."""
    from torch.nn.attention.flex_attention import flex_attention

    from attention_variants import flex
    q = torch.zeros(1, 1, 128, 16, requires_grad=True)  # [B, H, S, D]
    try:
        torch.compile(flex_attention, dynamic=False)(q, q, q)
        said = None
    except NotImplementedError as error:  # torch 2.14.1: "FlexAttention does not support backward on CPU. ..."
        said = str(error).split(". ")[0]
    w = small(passes=passes)
    if said is None:
        assert VARIANTS["flex"].supports(w, detect("cpu")) is None
        return

    def compiled():
        raise AssertionError("compiled for a run it cannot finish")
    monkeypatch.setattr(flex, "_compiled_flex", compiled)
    run = measure("flex", w)
    assert run.status == "unsupported" and run.timing is None
    assert run.reason == f"torch {torch.__version__}: {said}: measure its forward alone, or on a GPU"
    assert VARIANTS["flex"].supports(small(), run.environment) is None


@pytest.mark.parametrize("key", ["fa4", "sdpa_fa4"])
def test_flashattention_4_without_its_package_says_so_with_the_install_line(runs, key):
    run = runs[key, "bf16", 4, True]
    from attention_variants import fa4
    if fa4.installed_version() is None:
        assert run.status == "unsupported" and "flash-attn-4 is not installed" in run.reason
        assert 'pip install "flash-attn-4' in run.reason and fa4.PIN in run.reason
    else:
        assert run.status == "unsupported" and "NVIDIA GPUs only" in run.reason


def test_a_training_steps_time_is_its_forward_plus_its_backward_of_the_same_calls():
    """The step's figure is, sample by sample, the forward and the backward of one call timed apart; a backward view's
    is the backward's. (A step reported as its forward would fail here.)"""
    step = measure("naive", small(passes="fwd+bwd"))
    f, b, t = step.forward_timing.samples_ms, step.backward_timing.samples_ms, step.timing.samples_ms
    assert len(f) == len(b) == len(t) >= 8 and all(math.isclose(x + y, z) for x, y, z in zip(f, b, t))
    assert min(b) > 0 and step.timing.median_ms > step.forward_timing.median_ms
    backward = measure("naive", small(passes="bwd"))
    assert backward.timing.samples_ms == backward.backward_timing.samples_ms and backward.phase == "backward"


def test_flex_builds_its_block_mask_once_not_per_call(monkeypatch):
    """FlexAttention's block mask is built in setup, once per mask: the calls that follow reuse it. (A mask rebuilt
    every call turned an 11.5 ms call into 82.6 ms on this CPU and the headline from 4.6x to 1.6x.)"""
    from torch.nn.attention import flex_attention as module

    from attention_variants import flex
    built = []
    real = module.create_block_mask
    monkeypatch.setattr(module, "create_block_mask", lambda *a, **k: built.append(1) or real(*a, **k))
    flex._block_mask.cache_clear()
    x = small(seq_len=256, mask="window", window=64).make_inputs()
    assert flex.setup(x) is False and built == [1]       # built now
    for _ in range(5):
        flex._mask_of(x)                                 # what each call passes to flex_attention
    assert built == [1] and flex.setup(x) is True        # reused, and said so


def test_a_cpu_timing_is_wall_milliseconds_by_an_independent_clock():
    """A CPU run's time per call is what a plain perf_counter loop of the same call reads, in ms (within a factor:
    the machine is shared; a unit off by 1,000 is not). The loop's figure is the median of its calls, as the run's
    is: a mean takes every preemption of a loaded machine's other work; and it runs before and after the measurement,
    the factor 10 around the two, so a load that comes and goes between them moves one, not both."""
    w = small(seq_len=128)
    x = w.make_inputs()

    def loop_ms() -> float:
        with torch.no_grad():
            VARIANTS["naive"].forward(x)
            calls = []
            for _ in range(21):
                t0 = time.perf_counter()
                VARIANTS["naive"].forward(x)
                calls.append((time.perf_counter() - t0) * 1000)
            return sorted(calls)[10]
    before = loop_ms()
    run = measure("naive", w)
    loops = (before, loop_ms())
    assert min(loops) / 10 < run.timing.median_ms < max(loops) * 10, (run.timing.median_ms, loops)


def test_a_stop_reaches_inside_the_fp64_reference_and_the_warm_up(monkeypatch):
    """The guard is checked inside every long block, not only between phases: under load a budget the cost model
    accepted still holds. Here a cancel that comes while the fp64 reference is being computed stops there."""
    entered, checks = [], []
    real = accuracy.attention

    def attention(x, dtype, rows, check=lambda: None):
        entered.append(dtype)
        return real(x, dtype, rows, check)
    monkeypatch.setattr(accuracy, "attention", attention)

    def cancelled() -> bool:
        checks.append(len(entered))
        return bool(entered)  # the first check made inside the reference cancels
    run = measure("naive", small(), guard=Guard(cancelled=cancelled))
    assert run.status == "stopped" and "cancelled" in run.reason and run.accuracy is None and run.timing is None
    assert entered == [torch.float64] and checks[-1] == 1  # stopped by the check inside the fp64 reference


@pytest.mark.parametrize("fails_at", [0, 2])  # the window's unrecorded warm-up call, a recorded one
def test_a_call_that_fails_in_the_profiled_window_leaves_the_profiler_off_and_the_next_window_whole(tmp_path, fails_at):
    """The window's session is started and stopped by hand (capture.profile_calls): a call that raises inside it,
    before or after the recording starts, must still stop it, or every later window in the process would fail."""
    from profiling import trace

    calls = []

    def failing() -> None:
        calls.append(1)
        if len(calls) - 1 == fails_at:
            raise RuntimeError("a call failed")
    with pytest.raises(RuntimeError, match="a call failed"):
        capture.profile_calls(failing, "cpu", 3, tmp_path / "failed.json")
    assert not torch.autograd._profiler_enabled()
    capture.profile_calls(lambda: torch.ones(16, 16) @ torch.ones(16, 16), "cpu", 3, tmp_path / "next.json")
    ranges = trace.call_ranges(trace.load_trace(tmp_path / "next.json")["traceEvents"])
    assert [r["name"] for r in ranges] == [f"{trace.CALL_RANGE}#{i}" for i in (1, 2, 3)]


# -- a failure called what it is: five kinds, each with its figure -------------------------------------------------
OOM_MESSAGE = ("CUDA out of memory. Tried to allocate 32.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
               "1.50 GiB is free. Including non-PyTorch memory, this process has 77.67 GiB memory in use. Of the "
               "allocated memory 48.02 GiB is allocated by PyTorch, and 29.42 GiB is reserved by PyTorch but "
               "unallocated. If reserved but unallocated memory is large try setting "
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")


def _headline_of(failed: Run) -> str:
    """The comparison's headline with naive beside `failed` as B."""
    from profiling.explain import explain
    from profiling.results import Comparison

    return explain(Comparison(measure("naive", failed.workload), failed)).headline.title


def test_out_of_memory_is_called_so_with_the_allocation_that_failed_and_what_the_allocator_held():
    def out_of_memory(inputs):
        raise torch.OutOfMemoryError(OOM_MESSAGE)
    failed = measure(Variant("sdpa_math", "SDPA · math", out_of_memory, lambda w, env: 0), small(seq_len=32))
    assert (failed.status, failed.needed_bytes, failed.available_bytes, failed.held_bytes) == \
        ("out of memory", 32 * 2**30, int(1.5 * 2**30), int(29.42 * 2**30))
    assert "(out of memory: 32.0 GiB asked, 1.5 GiB free, 29.4 GiB held unallocated by PyTorch)" \
        in _headline_of(failed)


def test_a_run_stopped_by_its_time_budget_says_the_budget_and_the_time_it_ran():
    (failed,) = measure_runs([VARIANTS["sdpa_math"]], small(seq_len=32), guard=Guard.within(1e-9))
    assert failed.status == "stopped" and failed.budget_s == 1e-9 and failed.wall_s > 0
    title = _headline_of(failed)
    assert f"(stopped by the time budget: over its {text.seconds(1e-9)} budget, after {text.seconds(failed.wall_s)})" \
        in title, title
    (cancelled,) = measure_runs([VARIANTS["sdpa_math"]], small(seq_len=32), guard=Guard(cancelled=lambda: True))
    assert cancelled.budget_s is None and "(cancelled: after " in _headline_of(cancelled)


def test_a_run_refused_for_memory_says_what_it_needs_and_what_was_free():
    from profiling.session import measure as measure_all

    w = small(seq_len=32)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("profiling.session.available_bytes", lambda device: 2**20)
        (failed,) = measure_all(w, ["sdpa_math"])
    assert failed.status == "does not fit" and failed.available_bytes == 2**20
    assert f"(refused for memory: needs {text.size(failed.needed_bytes)}, 1.0 MiB free)" in _headline_of(failed)


def test_a_request_refused_for_time_says_its_estimate_and_the_budget():
    from profiling.budget import check_time, predicted_seconds

    w = small(seq_len=32)
    variants = [VARIANTS["naive"], VARIANTS["sdpa_math"]]
    env = detect("cpu")
    seconds = predicted_seconds(w, variants, env)
    with pytest.raises(Exception) as refused:
        check_time(w, variants, env, seconds / 2)
    assert refused.value.kind == "time" and refused.value.needed == seconds and refused.value.available == seconds / 2
    assert f"would take about {text.seconds(seconds)}, over the {text.seconds(seconds / 2)} a live run may hold " \
        "the machine" in str(refused.value.limit)


def test_an_unsupported_run_says_why():
    w = small(seq_len=32, dtype="fp32")
    (failed,) = measure_runs([VARIANTS["sdpa_cudnn"]], w)
    assert failed.status == "unsupported"
    assert "(no CPU kernel)" in _headline_of(failed)


@pytest.mark.parametrize("raised, status", [
    (RuntimeError("Error in function 'operator()' at batch_decode.cu:63: Unsupported group_size: 32"), "unsupported"),
    (ValueError("a library's own failure"), "error")])
def test_a_setup_that_raises_is_that_variant_s_result_and_the_session_goes_on(raised, status):
    """A library failing at its plan (FlashInfer's, on an H100, for a group of heads it was not compiled for) is the
    variant's result, with the library's words, as a failed first call is; the other variant still runs."""
    def setup(x):
        raise raised
    planned = Variant(key="planned", label="a planned stand-in", forward=VARIANTS["naive"].forward,
                      scratch_bytes=lambda w, env: 0, setup=setup, call="the stand-in", guess=VARIANTS["naive"].guess)
    failed, ok = measure_runs([planned, VARIANTS["naive"]], small())
    assert (failed.status, failed.reason) == (status, str(raised))
    assert ok.status == "ok" and ok.timing is not None
