"""The sweep: real small sweeps on CPU (statuses, refusals, stopping), facts on synthetic points, JSON, CLI."""
import json

import pytest

from profiling import sweep as sweep_mod
from profiling.environment import detect
from profiling.results import Timing
from profiling.sweep import (BoundChange, KernelChange, KernelCount, StopsFitting, Sweep, SweepPoint, facts,
                             fit_exponent, parse_seq_lens, sweep)
from profiling.workload import Workload, WorkloadError

SMALL = Workload(batch=1, heads=2, seq_len=64, head_dim=32, dtype="fp32", device="cpu")
LENGTHS = [64, 128, 256]


@pytest.fixture(scope="module")
def small_sweep() -> Sweep:
    return sweep("naive", "sdpa_flash", SMALL, LENGTHS)


def test_small_cpu_sweep_has_one_point_per_length_per_variant(small_sweep):
    assert small_sweep.variants == ["naive", "sdpa_flash"] and small_sweep.seq_lens == LENGTHS
    assert [(p.variant, p.seq_len) for p in small_sweep.points] == [
        (v, s) for s in LENGTHS for v in ("naive", "sdpa_flash")]
    for p in small_sweep.points:
        assert p.status == "ok", p.reason
        assert p.timing.median_ms > 0 and p.peak_extra_bytes > 0 and p.tflops > 0 and p.wall_s > 0
        assert p.kernels and all(k.short_name and k.calls_per_forward > 0 for k in p.kernels)
    assert small_sweep.of("sdpa_flash")[0].backend == "flash (CPU)"
    assert "bmm" in {k.short_name for k in small_sweep.of("naive")[0].kernels}
    # naive's scores go through memory: 4x the memory for 2x S; flash's do not
    naive_mem = [p.peak_extra_bytes for p in small_sweep.of("naive")]
    assert naive_mem[2] / naive_mem[1] > 3.0
    assert small_sweep.stopped is None and small_sweep.predicted_s > 0


def test_a_variant_that_cannot_run_here_is_unsupported_at_every_length():
    result = sweep("sdpa_cudnn", "sdpa_math", SMALL, [64, 128])
    cudnn = result.of("sdpa_cudnn")
    assert [p.status for p in cudnn] == ["unsupported", "unsupported"]
    assert "no CPU kernel for cuDNN attention" in cudnn[0].reason and cudnn[0].timing is None
    assert [p.status for p in result.of("sdpa_math")] == ["ok", "ok"]


def test_a_point_predicted_not_to_fit_is_refused_before_allocating(monkeypatch):
    # At this small size the fp64 check, not the scores, sets both estimates; make naive's S² part the larger
    # (as it is at real sizes) so the budget lets flash through and stops naive at S=1024.
    real = sweep_mod.needed_bytes
    monkeypatch.setattr(sweep_mod, "needed_bytes",
                        lambda v, w: real(v, w) + (w.scores_bytes() * 64 if v.key == "naive" else 0))
    flash_top = real(sweep_mod.get_variant("sdpa_flash"), SMALL.replace(seq_len=2048))
    budget = max(flash_top, sweep_mod.needed_bytes(sweep_mod.get_variant("naive"), SMALL.replace(seq_len=256))) + 1
    assert sweep_mod.needed_bytes(sweep_mod.get_variant("naive"), SMALL.replace(seq_len=1024)) > budget
    monkeypatch.setattr(sweep_mod, "memory_budget_bytes", lambda device: budget)
    import profiling.measurement as measurement
    monkeypatch.setattr(measurement, "memory_budget_bytes", lambda device: budget)
    result = sweep("naive", "sdpa_flash", SMALL, [256, 1024, 2048])
    naive = result.of("naive")
    assert [(p.seq_len, p.status) for p in naive] == [(256, "ok"), (1024, "does not fit")]  # then not tried
    refused = naive[1]
    assert refused.needed_bytes > refused.available_bytes == budget and refused.timing is None
    assert refused.reference_bytes < refused.needed_bytes
    assert f"{refused.needed_bytes / 2**30:.1f} GiB" in refused.reason
    assert [p.status for p in result.of("sdpa_flash")] == ["ok"] * 3
    (stop,) = sweep_mod.stops_fitting(result)
    assert (stop.variant, stop.seq_len, stop.last_ran) == ("naive", 1024, 256)


def test_cancel_and_time_budget_stop_cleanly_with_the_points_done():
    calls = []
    result = sweep("naive", "sdpa_flash", SMALL, LENGTHS, should_stop=lambda: len(calls.append(1) or calls) > 2)
    assert len(result.points) == 2 and result.stopped.startswith("cancelled after 2 of 6")
    result = sweep("naive", "sdpa_flash", SMALL, [64, 8192], budget_s=6)
    assert [p.seq_len for p in result.points] == [64, 64]
    assert result.stopped.startswith("time budget: naive at S=8192 would take about")


def test_a_point_predicted_over_what_is_left_of_the_budget_is_refused_before_it_runs():
    result = sweep("naive", "sdpa_flash", SMALL, [64], budget_s=0.5)  # the cost model prices a point at ~2 s
    assert [(p.status, p.timing) for p in result.points] == [("refused", None), ("refused", None)]
    assert all("left of this request's budget" in p.reason for p in result.points)


@pytest.mark.parametrize("text, expected", [("256, 128,128 512", [128, 256, 512]), ([64], [64]),
                                            ("131072", [131072])])
def test_lengths_are_sorted_unique_and_within_limits(text, expected):
    assert parse_seq_lens(text) == expected


@pytest.mark.parametrize("text, field_value", [("0,128", 0), ("128,131073", 131073), ("12a", "12a"),
                                               (",".join(str(64 * i) for i in range(1, 14)), 13), ("", "")])
def test_bad_lengths_name_the_value(text, field_value):
    with pytest.raises(WorkloadError) as error:
        parse_seq_lens(text)
    assert error.value.field == "seq_lens" and error.value.value == field_value


def test_default_lengths_are_powers_of_two_up_to_what_the_fused_variant_fits():
    assert sweep_mod.default_seq_lens(["naive", "sdpa_flash"], Workload.cpu_default(), 2**40) == \
        [128, 256, 512, 1024, 2048]  # past it, one point alone would take longer than a live CPU run may
    gpu = Workload.blog()
    lengths = sweep_mod.default_seq_lens(["naive", "sdpa_flash"], gpu, 126 * 2**30)  # an H200's budget
    assert lengths == [2**i for i in range(7, 18)]  # flash fits to the limit: accuracy checks sampled rows
    assert sweep_mod.default_seq_lens(["naive", "sdpa_math"], gpu, 126 * 2**30)[-1] == 8192


def test_sweep_json_round_trip_is_lossless(small_sweep):
    again = Sweep.from_json(small_sweep.to_json())
    assert again == small_sweep
    assert isinstance(again.points[0].timing, Timing) and isinstance(again.points[0].kernels[0], KernelCount)
    assert again.select(["sdpa_flash"], [128]).points == [small_sweep.of("sdpa_flash")[1]]


# -- facts on synthetic points ------------------------------------------------------------------
ENV = detect("cpu")


def point(variant, s, ms=None, mem=None, status="ok", bound=None, kernels=(), **extra) -> SweepPoint:
    timing = Timing(ms, ms * 0.99, ms * 1.01, 10, "cuda events") if ms is not None else None
    return SweepPoint(variant, s, status, timing=timing, peak_extra_bytes=mem, bound=bound,
                      kernels=[KernelCount(n, "x", c, 1.0) for n, c in kernels],
                      kernels_per_forward=sum(c for _, c in kernels) if kernels else None, **extra)


def synthetic(points, variants=("naive", "sdpa_flash")) -> Sweep:
    lengths = sorted({p.seq_len for p in points})
    return Sweep(list(variants), Workload.blog(seq_len=lengths[0]), lengths, ENV, points)


S = [256, 512, 1024, 2048, 4096]


@pytest.mark.parametrize("power", [2.0, 1.0, 1.5])
def test_fitted_exponent_of_c_times_s_to_the_power(power):
    assert fit_exponent([point("naive", s, ms=3e-6 * s**power) for s in S]) == pytest.approx(power)
    assert fit_exponent([point("naive", s, mem=int(7 * s**power)) for s in S], "memory") == \
        pytest.approx(power, abs=1e-4)


def test_fit_ignores_points_that_did_not_run():
    points = [point("naive", s, ms=1e-6 * s**2) for s in S] + [point("naive", 8192, status="does not fit")]
    assert fit_exponent(points) == pytest.approx(2.0)
    assert fit_exponent(points[:1]) is None


def test_slopes_against_expectation_on_the_top_of_the_range():
    points = [point("naive", s, ms=0.1 + 1e-6 * s**2, mem=4 * s**2) for s in [128, *S]] + \
             [point("sdpa_flash", s, ms=2e-7 * s**2, mem=1000 * s) for s in [128, *S]]
    by_key = {(f.variant, f.quantity): f for f in sweep_mod.slopes(synthetic(points))}
    naive_time = by_key["naive", "time"]
    assert (naive_time.s_from, naive_time.s_to, naive_time.points) == (512, 4096, 4)
    assert naive_time.exponent == pytest.approx(1.85, abs=0.01) and naive_time.as_expected
    assert naive_time.whole_range_exponent == pytest.approx(1.48, abs=0.01)  # a fixed 0.1 ms flattens short S
    assert by_key["naive", "memory"].exponent == pytest.approx(2.0) and by_key["naive", "memory"].expected == 2.0
    flash_memory = by_key["sdpa_flash", "memory"]
    assert flash_memory.exponent == pytest.approx(1.0) and flash_memory.expected == 1.0


def test_crossover_is_interpolated_on_log_axes():
    # A = S^2, B = 4·S^1.5 · 1e-3 ... B/A = 4·S^-0.5 · const: equal at S = 1024 by construction
    points = [point("naive", s, ms=1e-6 * s**2) for s in S] + \
             [point("sdpa_flash", s, ms=1e-6 * 1024**0.5 * s**1.5) for s in S if s != 1024]
    (cross,) = sweep_mod.crossovers(synthetic(points))
    assert cross.seq_len == pytest.approx(1024) and (cross.s_before, cross.s_after) == (512, 2048)
    assert (cross.faster_before, cross.faster_after) == ("naive", "sdpa_flash")
    assert cross.exponent_overtaken == pytest.approx(2.0) and cross.exponent_overtaking == pytest.approx(1.5)
    assert cross.ratio_before == pytest.approx(2**0.5)


def test_no_crossover_where_the_spreads_overlap():
    points = [point("naive", s, ms=1.0) for s in S] + [point("sdpa_flash", s, ms=1.001 if s < 1024 else 0.999)
                                                        for s in S]
    assert sweep_mod.crossovers(synthetic(points)) == []


def test_stop_bound_and_kernel_change_facts():
    points = [point("naive", 256, ms=1, bound="host", kernels=[("gemm", 2), ("softmax", 1)]),
              point("naive", 512, ms=4, bound="host", kernels=[("gemm", 2), ("softmax", 1)]),
              point("naive", 1024, ms=16, bound="gpu", kernels=[("gemm", 2), ("softmax", 1), ("where", 3)]),
              point("naive", 2048, status="does not fit", needed_bytes=200 * 2**30, available_bytes=126 * 2**30,
                    estimated_extra_bytes=190 * 2**30),
              point("sdpa_flash", 256, ms=1), point("sdpa_flash", 512, ms=2)]
    result = synthetic(points)
    found = facts(result)
    assert StopsFitting("naive", 2048, "does not fit", 200 * 2**30, 126 * 2**30, 1024, 190 * 2**30) in found
    assert BoundChange("naive", 512, 1024) in found
    (change,) = [f for f in found if isinstance(f, KernelChange)]
    assert (change.s_before, change.s_after, change.added, change.removed) == (512, 1024, {"where": 3}, {})
    assert change.kernels_before == 3 and change.kernels_after == 6 and change.step_exponent == pytest.approx(2.0)


def test_a_variant_stopped_by_the_reference_says_so():
    fact = StopsFitting("sdpa_flash", 131072, "does not fit", 260 * 2**30, 126 * 2**30, 65536, 2**30)
    assert fact.stopped_by_reference


# -- the command line -------------------------------------------------------------------------------
def test_cli_sweep_writes_json_that_round_trips(tmp_path, capsys):
    from profiling.__main__ import main
    path = tmp_path / "sweep.json"
    assert main(["sweep", "naive", "sdpa_flash", "--device", "cpu", "--seq", "64,128", "--heads", "2",
                 "--batch", "1", "--head-dim", "32", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "1x2xSx32 fp32 causal (rank 4)" in out and "wall ms" in out
    result = Sweep.from_dict(json.loads(path.read_text()))
    assert [(p.variant, p.seq_len, p.status) for p in result.points] == [
        ("naive", 64, "ok"), ("sdpa_flash", 64, "ok"), ("naive", 128, "ok"), ("sdpa_flash", 128, "ok")]


def test_cli_replays_a_recorded_sweep(tmp_path, capsys, monkeypatch, small_sweep):
    from profiling import recording
    from profiling.__main__ import main
    recorded = synthetic([point(v, s, ms=1e-6 * s**2, mem=s * 10) for s in S
                          for v in ("naive", "naive_inplace", "sdpa_flash")],
                         variants=("naive", "naive_inplace", "sdpa_flash"))
    (tmp_path / "gpu-x").mkdir()
    (tmp_path / "gpu-x" / "sweeps.json").write_text(json.dumps([recorded.to_dict()]))
    monkeypatch.setattr(recording, "RECORDED_DIR", tmp_path)
    recording.recorded_sweeps.cache_clear()
    try:
        assert main(["sweep", "sdpa_flash", "naive", "--source", "gpu-x", "--seq", "512,1024"]) == 0
        out = capsys.readouterr().out
        assert "8x16xSx64 bf16 causal (rank 4) (recorded: gpu-x)" in out and "GPU ms" in out
        assert out.count("sdpa_flash") >= 2 and "naive_inplace" not in out and "2048" not in out
        assert main(["sweep", "sdpa_flash", "naive", "--source", "gpu-x", "--head-dim", "128"]) == 2
        assert "it holds: 8x16xSx64 bf16 causal (rank 4): naive, naive_inplace, sdpa_flash" in capsys.readouterr().err
    finally:
        recording.recorded_sweeps.cache_clear()


def test_a_point_over_the_cpu_time_budget_is_refused_with_measures_reason():
    result = sweep("naive", "sdpa_flash", SMALL.replace(head_dim=512), [8192])  # 137 GFLOP; a CPU sweep has 60 s
    assert [(p.seq_len, p.status) for p in result.points] == [(8192, "refused"), (8192, "refused")]
    assert "would take about" in result.points[-1].reason and "left of this request's budget" in result.points[-1].reason
    assert "would take about" in sweep_mod.stops_fitting(result)[0].reason
