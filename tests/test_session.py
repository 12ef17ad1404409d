"""The front door: a request is planned (or refused, with a typed kind and the amounts), then served live or from
the recording, and explained once, in the same Answer shape whoever asked."""
from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from attention_variants import VARIANTS
from profiling import budget, session, text
from profiling.budget import predicted_seconds
from profiling.request import LIVE_BUDGET_S
from profiling.environment import detect
from profiling.request import LIVE, Request
from profiling.results import DOES_NOT_FIT, Comparison, Sweep
from profiling.workload import Refusal, Workload

RECORDING = "h200-torch2.11"
CPU = detect("cpu")
TINY = {"batch": 1, "heads": 2, "seq_len": 64, "head_dim": 16, "dtype": "fp32"}


def live(a="naive", b="sdpa_math", seq_lens=None, **fields) -> Request:
    return Request.build(LIVE, a, b, TINY | fields, "cpu", seq_lens)


def recorded(a="sdpa_flash", b="sdpa_cudnn", seq_lens=None, **fields) -> Request:
    return Request.build(RECORDING, a, b, fields, "cpu", seq_lens)


def test_a_live_comparison_and_a_replay_come_back_in_one_shape():
    for request in (live(), recorded()):
        answer = session.compare(request)
        data = json.loads(json.dumps(answer.to_dict()))
        assert set(data) >= {"source", "a", "b", "verdict", "headline", "notes"}
        assert data["verdict"] == answer.explanation.headline.title
        assert data["a"]["trace_path"] is None and data["b"]["trace_path"] is None  # no server file leaves
        assert Comparison.from_dict(data).a.variant == request.a


def test_a_replay_is_the_recorded_run_explained_now():
    answer = session.compare(recorded())
    from profiling.replay import find_recorded
    assert answer.result.a.timing == find_recorded(RECORDING, "sdpa_flash", Workload.blog()).timing


def test_an_unrecorded_workload_is_refused_naming_the_nearest():
    with pytest.raises(Refusal) as caught:
        session.plan(recorded(seq_len=2048))
    assert caught.value.kind == "unrecorded" and caught.value.field == "source"
    assert "no run of B=8, H=16, S=2048" in str(caught.value) and "Nearest recorded: B=8, H=16, S=1024" in str(caught.value)


def test_a_recorded_sweep_asked_for_lengths_it_lacks_is_refused_naming_them():
    with pytest.raises(Refusal) as caught:
        session.sweep(recorded(seq_lens=(128, 333)))
    assert caught.value.field == "seq_lens" and caught.value.kind == "unrecorded" and "S=333" in str(caught.value)
    answer = session.sweep(recorded(seq_lens=(128, 1024)))
    assert answer.result.seq_lens == [128, 1024] and {r.workload.seq_len for r in answer.result.runs} == {128, 1024}


def test_memory_over_what_is_free_is_refused_before_anything_is_allocated(monkeypatch):
    allocated, measured = [], []
    monkeypatch.setattr(Workload, "make_inputs", lambda self: allocated.append(self))
    monkeypatch.setattr(session, "measure_runs", lambda *a, **k: measured.append(a))
    huge = live(batch=64, heads=64, seq_len=65536, head_dim=128)
    with pytest.raises(Refusal) as caught:
        session.compare(huge)
    assert allocated == [] and measured == []  # (a bound on the time said "nothing ran" only on a quiet machine)
    error = caught.value
    assert error.kind == "memory" and error.field == "seq_len" and error.needed > error.available > 0
    assert "GiB" in str(error) and "free on the CPU" in str(error)


def test_time_over_the_budget_is_refused_with_the_prediction(monkeypatch):
    """On a CPU whose bf16 products are 20x slower than fp32 (as one without AVX512-BF16 measures), a bf16 request
    that fits in fp32 is refused, saying why; the same CPU with fast bf16 takes it."""
    from profiling import budget
    monkeypatch.setattr(budget, "cpu_16bit_speed", lambda: {"bf16": 0.05, "fp16": 0.05})
    request = live(a="naive", b="sdpa_flash", batch=1, heads=8, seq_len=2048, head_dim=64, dtype="bf16")
    with pytest.raises(Refusal) as caught:
        session.compare(request, budget_s=LIVE_BUDGET_S["cpu"])
    error = caught.value
    assert error.kind == "time" and error.available == 60 and error.needed > 60
    assert "would take about" in str(error) and "choose fp32" in str(error)
    assert "bf16 matrix products run 20× slower than fp32 on this CPU" in str(error)
    monkeypatch.setattr(budget, "cpu_16bit_speed", lambda: {"bf16": budget.SLOWEST_16BIT, "fp16": 0.05})
    with pytest.raises(Refusal) as floored:  # the probe reads no slower than 50x: a CPU there may be slower still
        session.compare(request, budget_s=LIVE_BUDGET_S["cpu"])
    assert "bf16 matrix products run at least 50× slower than fp32" in str(floored.value)
    monkeypatch.setattr(budget, "cpu_16bit_speed", lambda: {"bf16": 0.05, "fp16": 0.05})
    assert predicted_seconds(request.workload.replace(dtype="fp32"), [VARIANTS["naive"], VARIANTS["sdpa_flash"]],
                             CPU) <= 60
    slow = error.needed
    monkeypatch.setattr(budget, "cpu_16bit_speed", lambda: {"bf16": 1.5, "fp16": 0.05})
    # (not a third: the naive forward's 16-bit elementwise passes, measured at 30-50 ns a score, stay)
    assert predicted_seconds(request.workload, [VARIANTS["naive"], VARIANTS["sdpa_flash"]], CPU) < slow / 2


def test_the_cpus_16bit_probe_times_a_slow_product_once_and_a_fast_one_best_of_three(monkeypatch):
    """`cpu_16bit_speed` is paid by a CPU's first live request: a product of 33 ms (fp16 without hardware support)
    is timed by its first call alone, one of 1 ms by the best of the calls after a first (its one-off costs left out)
    that fill 20 ms, three at least. On a clock that moves only when a product runs."""
    from profiling import budget

    class Clock:
        now = 0.0

        def perf_counter(self) -> float:
            return self.now

    clock = Clock()
    monkeypatch.setattr(budget, "time", clock)

    def product(*seconds):
        calls = iter(seconds)

        def call():
            clock.now += next(calls)
        return call
    assert budget.product_seconds(product(0.033)) == pytest.approx(0.033)  # a second call would raise
    assert budget.product_seconds(product(0.005, 0.0012, 0.001, *[0.0011] * 13)) == pytest.approx(0.001)
    assert budget.product_seconds(product(0.004, 0.019, 0.0015, 0.0012)) == pytest.approx(0.0012)  # 3 after a first
    # a fast product's first calls slowed by other work (the best of three read 3 ms): the later quiet ones count
    assert budget.product_seconds(product(0.005, 0.003, 0.003, 0.003, *[0.001] * 6)) == pytest.approx(0.001)
    speeds = budget.cpu_16bit_speed.__wrapped__  # the real probe, on this CPU: both ratios in the model's range
    monkeypatch.undo()
    assert all(0.02 <= ratio <= 2.0 for ratio in speeds().values())


def test_the_time_model_prices_dtype_size_and_what_cannot_run(monkeypatch):
    from profiling import budget
    w = Workload(batch=1, heads=8, seq_len=2048, head_dim=64, dtype="fp32", device="cpu")
    pair = [VARIANTS["naive"], VARIANTS["naive_inplace"]]
    # 16-bit GEMMs priced as this CPU measures them: 20x slower than fp32 without AVX512-BF16, faster with it
    monkeypatch.setattr(budget, "cpu_16bit_speed", lambda: {"bf16": 0.05, "fp16": 0.05})
    slow = predicted_seconds(w.replace(dtype="bf16"), pair, CPU)
    assert slow > 3 * predicted_seconds(w, pair, CPU)
    monkeypatch.setattr(budget, "cpu_16bit_speed", lambda: {"bf16": 2.0, "fp16": 0.05})
    # a half, not a third: the elementwise passes over the scores, not the GEMMs, are most of a fast-bf16 forward
    assert predicted_seconds(w.replace(dtype="bf16"), pair, CPU) < slow / 2
    assert predicted_seconds(w.replace(dtype="fp16"), pair, CPU) >= slow  # fp16 stays slow: it measured so
    assert predicted_seconds(w.replace(seq_len=4096), pair, CPU) > 3 * predicted_seconds(w, pair, CPU)
    # on a CPU the efficient and cuDNN pins are refused before their first call: they cost nothing
    assert predicted_seconds(w, [VARIANTS["sdpa_efficient"], VARIANTS["sdpa_cudnn"]], CPU, reference_ready=True) == 0
    assert predicted_seconds(w, [VARIANTS["flex"]], CPU) > predicted_seconds(w, [VARIANTS["sdpa_flash"]], CPU) + 20


def test_the_model_needs_a_variant_s_traits_not_its_registry():
    w = Workload(batch=1, heads=8, seq_len=2048, head_dim=64, dtype="fp32", device="cpu")
    flash = VARIANTS["sdpa_flash"]
    alike = SimpleNamespace(key="alike", fused=True, compiled=False, jit_s=None, sdpa_backend=flash.sdpa_backend,
                            scratch_bytes=flash.scratch_bytes, supports=flash.supports,
                            forward_flops=flash.forward_flops, runs_on=flash.runs_on)
    assert predicted_seconds(w, [alike], CPU) == predicted_seconds(w, [flash], CPU)


@pytest.mark.parametrize("a, b, fields", [
    ("naive", "naive_inplace", dict(batch=1, heads=2, seq_len=1024, head_dim=64, dtype="bf16")),
    ("sdpa_math", "sdpa_flash", dict(batch=1, heads=1, seq_len=2048, head_dim=16, dtype="fp32")),
])
def test_a_real_comparison_takes_no_longer_than_predicted(a, b, fields):
    """The prediction, at the speed this CPU showed during the run: the cost model's rates are a quiet machine's, so
    where the forward calls the run timed were slower than the model's (a loaded or slower CPU), the prediction is
    scaled by that ratio (never down: on a faster CPU it must still hold as it stands). What is checked is the
    model's account of a comparison (calls, profiler, reference, overheads), not this machine's load. On a CPU whose 16-bit
    products are slow, the case is halved in S until the plan admits it."""
    request = live(a, b, **fields)
    while True:
        try:
            predicted = session.plan(request, budget_s=LIVE_BUDGET_S["cpu"]).predicted_s
            break
        except Refusal as refusal:
            assert refusal.kind == "time", str(refusal)
            assert request.workload.seq_len > 128, str(refusal)
            request = live(a, b, **{**fields, "seq_len": request.workload.seq_len // 2})
    start = time.perf_counter()
    answer = session.compare(request)
    took = time.perf_counter() - start
    assert answer.result.a.ok and answer.result.b.ok
    cost = budget._device_cost("cpu", CPU)
    slower = max([1.0] + [run.timing.median_ms / 1e3 / budget._forward_seconds(run.workload, VARIANTS[run.variant],
                                                                              cost, CPU)
                          for run in (answer.result.a, answer.result.b)])
    assert took <= predicted * slower, (f"took {took:.1f} s, predicted {predicted:.1f} s at the model's speed, "
                                        f"{predicted * slower:.1f} s at the {slower:.2f}x slower speed this run timed")


def test_a_cancelled_live_comparison_stops_and_keeps_what_it_measured():
    answer = session.compare(live(), cancelled=lambda: True)
    assert {answer.result.a.status, answer.result.b.status} == {"stopped"}
    assert "cancelled" in answer.result.a.reason


def test_a_live_sweep_has_a_run_per_length_per_variant_and_refuses_what_does_not_fit(monkeypatch):
    request = live("naive", "sdpa_flash", seq_lens=(64, 128, 2048), head_dim=16, heads=1)
    at = {s: request.workload.replace(seq_len=s) for s in (128, 2048)}
    need = {s: max(budget.measure_bytes(w, VARIANTS[k].scratch_bytes(w, CPU)) for k in ("naive", "sdpa_flash"))
            for s, w in at.items()}
    free = (need[128] + need[2048]) // 2  # room for S=128, not for S=2048 (the fp64 check alone needs more)
    from profiling import sweep as sweep_mod
    for module in (budget, session, sweep_mod):
        monkeypatch.setattr(module, "available_bytes", lambda device: free, raising=False)
    result = session.sweep(request).result
    assert isinstance(result, Sweep) and result.seq_lens == [64, 128, 2048]
    for variant in ("naive", "sdpa_flash"):
        by_s = {r.workload.seq_len: r for r in result.of(variant)}
        assert by_s[64].ok and by_s[128].ok and by_s[2048].status == DOES_NOT_FIT
        assert by_s[2048].needed_bytes > by_s[2048].available_bytes == free and by_s[2048].timing is None
    # A and B of one length are one session: their timings were interleaved
    assert result.at("naive", 64).session == result.at("sdpa_flash", 64).session
    assert result.at("naive", 64).session != result.at("naive", 128).session


def test_a_sweep_past_its_budget_ends_with_the_points_done_and_says_why():
    """Two short lengths in a budget of a few times their predicted cost, then S=16,384: whatever this machine's
    speed, 16,384 is predicted at thousands of times S=128's cost and is not started (or, on a machine slow enough,
    the deadline stops an earlier point)."""
    request = live("naive", "sdpa_math", seq_lens=(64, 128, 16384))
    budget_s = session.plan(live("naive", "sdpa_math", seq_lens=(64, 128)), sweep=True).predicted_s * 3
    # the stop comes at the first safe point past the deadline: 2 s on a quiet machine, 10 s on a loaded one; S=16,384
    # alone is predicted at many times that, so the bound still tells a stop at the budget from a sweep that ran on
    longest = session.plan(live("naive", "sdpa_math", seq_lens=(16384,)), sweep=True).predicted_s
    assert longest > 5 * (budget_s + 10)
    start = time.perf_counter()
    answer = session.sweep(request, budget_s=budget_s)
    assert time.perf_counter() - start < budget_s + 10
    # S=16,384 is never started: where a variant would not fit this machine's free memory at the time (a loaded
    # machine's), it is refused there ("does not fit"), and the budget stops the rest
    started = {r.workload.seq_len for r in answer.result.runs if r.status != DOES_NOT_FIT}
    assert answer.result.stopped and 16384 not in started
    assert answer.explanation.headline.title.startswith(f"The sweep stopped early ({answer.result.stopped})")


def test_default_lengths_stop_where_the_fused_variants_stop_fitting():
    lengths = session.default_lengths([VARIANTS["naive"], VARIANTS["sdpa_flash"]],
                                      Workload.blog(device="cpu", dtype="fp32"), CPU, None)
    assert lengths[0] == 128 and all(b == 2 * a for a, b in zip(lengths, lengths[1:])) and len(lengths) <= 12


# -- the budget's edge under load: priced with the load now, and a stop keeps what was measured ------------------
def test_a_cpu_request_is_priced_with_the_machines_load_now_and_refused_where_the_load_would_overrun(monkeypatch):
    """A fake load, not this machine's: at a load of twice the cores a measurement's threads get at most half of
    them, so its price doubles at least, and a request that fits the budget idle is refused (kind "time")."""
    import os

    import torch

    request = live(seq_len=512)
    pair = [VARIANTS["naive"], VARIANTS["sdpa_math"]]
    idle = predicted_seconds(request.workload, pair, CPU, load=0.0)
    cores, threads = os.cpu_count(), min(torch.get_num_threads(), os.cpu_count())
    loaded = 2.0 * cores
    assert predicted_seconds(request.workload, pair, CPU, load=loaded) == pytest.approx(
        idle * (loaded + threads) / cores)  # an independent reading of the rule: runnable share of the cores
    budget_s = 1.5 * idle
    assert session.plan(request, budget_s=budget_s).predicted_s == pytest.approx(idle)  # conftest: no load read
    monkeypatch.setattr(budget, "machine_load", lambda: loaded)  # what the plan reads now
    with pytest.raises(Refusal) as refused:
        session.plan(request, budget_s=budget_s)
    assert refused.value.kind == "time" and refused.value.needed > 2 * idle
    slower = text.times((loaded + threads) / cores)
    assert f"at the machine's load now (load average {loaded:.1f}: {slower} an idle run's time)" in str(refused.value)


def _stopping_after(message_end: str):
    """(progress, cancelled): a cancel that comes once a progress message ending so has been seen (a fake clock: the
    stop lands at a chosen point of the measurement, whatever this machine's speed)."""
    seen = []
    return (lambda fraction, message: seen.append(1) if message.endswith(message_end) else None), lambda: bool(seen)


def test_a_run_stopped_after_a_was_measured_answers_with_as_figures_and_says_b_stopped():
    progress, cancelled = _stopping_after("naive: done")  # A profiled, B's profile not begun
    answer = session.compare(live(), budget_s=60, progress=progress, cancelled=cancelled)
    a, b = answer.result.a, answer.result.b
    assert a.status == "ok" and a.timing.samples >= 20 and a.kernels
    assert b.status == "stopped" and b.timing is not None and not b.kernels
    headline = answer.explanation.headline.title
    assert text.ms(a.timing.median_ms) in headline and "stopped after timing, before the profile" in headline
    assert not [n for n in answer.explanation.notes if "cannot run" in n.title]  # a stop is not a refusal


def test_a_run_stopped_before_b_was_timed_says_it_was_stopped_not_that_it_cannot_run():
    progress, cancelled = _stopping_after("sdpa_math: accuracy against fp64")  # inside B's preparation
    answer = session.compare(live(), budget_s=60, progress=progress, cancelled=cancelled)
    assert [r.status for r in (answer.result.a, answer.result.b)] == ["stopped", "stopped"]
    titles = [n.title for n in answer.explanation.notes]
    assert not [t for t in titles if "cannot run" in t or "not supported" in t], titles
    assert "stopped" in answer.explanation.headline.title and "cancelled" in answer.explanation.headline.title


@pytest.mark.parametrize("fields, points, field, said", [
    ({"q_len": 64}, "32, 128", "q_len", "q_len=64 is not allowed: must be between 1 and S=32"),
    ({"mask": "window", "window": 100}, "64, 256", "window", "window=100 is not allowed: must be between 1 and S=64"),
])
def test_a_sweep_point_that_fails_names_the_field_that_failed_and_the_point(fields, points, field, said):
    """At the sweep's point S=32, q_len=64 failed: the refusal names q_len and its value (it named seq_lens=32 and
    then said 'must be between 1 and S=32' of it), and says which point of seq_lens made it so."""
    request = live(seq_lens=tuple(int(p) for p in points.split(", ")), **fields | {"seq_len": 128})
    with pytest.raises(Refusal) as refused:
        session.plan(request, sweep=True)
    assert refused.value.field == field and str(refused.value).startswith(said)
    assert f"at the sweep's point S={points.split(',')[0]} of seq_lens" in str(refused.value)
