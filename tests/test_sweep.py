"""The sweep: real tiny sweeps on the CPU (a light run per variant and length, each length one session, memory
refused per point, out of memory, a guard that ends it and says why), planning lengths and reading them, the JSON
round trip and the table; then the curve facts (`explain.curves`) on synthetic runs, each made to happen or not:
exponents exact on power laws and withheld on noise, a crossover only where the verdict's test ranks A and B in
opposite orders, stops, bound and kernel changes; and the command line."""
from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest
import torch
from explain_helpers import assert_numbers_are_the_runs
from sweep_helpers import H200, RECORDED, run, synthetic

from attention_variants import VARIANTS
from profiling import budget, figures, reports, session, text
from profiling import sweep as sweep_mod
from profiling.environment import detect
from profiling.explain import explain_sweep
from profiling.explain.curves import (BoundChange, bound_changes, crossovers, kernel_changes, r_squared, slopes,
                                      stops_fitting)
from profiling.explain.facts import log_slope
from profiling.measurement import Guard
from profiling.request import LIVE, MAX_LENGTHS, Request, parse_lengths
from profiling.results import DOES_NOT_FIT, OUT_OF_MEMORY, STOPPED, UNSUPPORTED, Kernel, Sweep, Timing
from profiling.sweep import run_sweep
from profiling.workload import Refusal, Workload, spec_of

CPU = detect("cpu")
SMALL = Workload(batch=1, heads=2, seq_len=64, head_dim=32, dtype="fp32", device="cpu")
LENGTHS = [64, 128, 256]


def variants(*keys):
    return [VARIANTS[k] for k in keys]


@pytest.fixture(scope="module")
def small_sweep() -> tuple[Sweep, list[tuple[float, str]]]:
    messages: list[tuple[float, str]] = []
    result = run_sweep(variants("naive", "sdpa_flash"), SMALL, LENGTHS, CPU,
                       progress=lambda f, m: messages.append((f, m)))
    return result, messages


def test_a_small_cpu_sweep_has_one_light_run_per_length_and_variant_each_length_one_session(small_sweep):
    result, _ = small_sweep
    assert result.variants == ["naive", "sdpa_flash"] and result.seq_lens == LENGTHS and result.workload == SMALL
    assert [(r.variant, r.workload.seq_len) for r in result.runs] == [(v, s) for s in LENGTHS
                                                                      for v in ("naive", "sdpa_flash")]
    for r in result.runs:
        assert r.ok, r.reason
        assert r.workload == SMALL.replace(seq_len=r.workload.seq_len) and r.environment == CPU
        t = r.timing
        assert t.median_ms > 0 and t.kept == t.samples >= 20 and t.method == "perf_counter"
        assert r.tflops == pytest.approx(r.workload.flops / (t.median_ms * 1e-3) / 1e12)
        assert r.peak_extra_bytes > 0 and r.wall_s > 0 and r.accuracy.max_abs_error < 1e-5
        assert r.kernels and all(k.short_name and k.calls_per_forward > 0 for k in r.kernels)
        # light: numbers, statuses and kernel rows; no trace, host ops, warnings or launch chains
        assert r.trace_path is None and r.host_ops == [] and r.pytorch_warnings == []
        assert all(k.launched_by is None for k in r.kernels)
    for s in LENGTHS:  # A and B of a length were timed interleaved, one session; each length its own
        assert result.at("naive", s).session == result.at("sdpa_flash", s).session
    assert len({result.at("naive", s).session for s in LENGTHS}) == len(LENGTHS)
    assert result.of("sdpa_flash")[0].backend == "flash (CPU)" and result.of("naive")[0].backend is None
    assert "bmm" in {k.short_name for k in result.of("naive")[0].kernels}
    # naive's S×S scores go through memory (4x for 2x S); flash's never do
    naive, flash = ([r.peak_extra_bytes for r in result.of(v)] for v in ("naive", "sdpa_flash"))
    scores = SMALL.replace(seq_len=LENGTHS[-1]).scores_bytes()
    assert naive[2] / naive[1] > 3.0 and naive[2] >= scores > flash[2]
    assert result.stopped is None and result.budget_s is None and result.available_bytes > 0


def test_the_sweep_says_its_prediction_up_front_and_its_progress_only_grows(small_sweep):
    result, messages = small_sweep
    fractions = [f for f, _ in messages]
    assert fractions == sorted(fractions) and messages[-1][0] == 1.0
    assert re.fullmatch(r"sweep done: 6 points in [\d.,]+ (ms|s)", messages[-1][1])
    predicted = [m for _, m in messages if m.startswith("predicted")]
    assert predicted == [f"predicted {text.seconds(result.predicted_s)} for 6 points"]
    first = result.at("naive", LENGTHS[0]).wall_s
    assert result.predicted_s > first  # the first length's wall time and the lengths still to come
    assert {m.split(" · ")[0] for _, m in messages if " · " in m} == {f"S={s:,}" for s in LENGTHS}


def test_a_variant_that_cannot_run_here_is_unsupported_at_every_length_and_the_headline_says_so():
    result = run_sweep(variants("sdpa_cudnn", "sdpa_math"), SMALL, [64, 128], CPU)
    cudnn = result.of("sdpa_cudnn")
    assert [r.status for r in cudnn] == [UNSUPPORTED, UNSUPPORTED]  # unsupported does not stop a variant
    assert cudnn[0].reason == VARIANTS["sdpa_cudnn"].supports(SMALL, CPU) and cudnn[0].timing is None
    assert [r.status for r in result.of("sdpa_math")] == ["ok", "ok"]
    assert explain_sweep(result).headline.title == (
        "No length where both ran on the CPU: SDPA · cuDNN [A] did not run (no CPU kernel); SDPA · math [B] ran "
        "S=64–128.")


def test_a_variant_that_cannot_run_a_point_is_not_priced_there_its_memory_model_may_not_hold():
    """Found on the lent H100 (the blog's sweep of every variant, B=8): at S=32,768 the packed ways' memory model
    reads the batch as one sequence of B·S = 262,144 tokens, past what a workload may hold, and pricing it raised
    "seq_len=262144 is not allowed", ending the sweep. The way refuses that point (supports): unpriced, it says so."""
    base = Workload.blog(device="cpu")
    w = base.replace(seq_len=32768)
    varlen = VARIANTS["varlen"]
    assert "262,144 tokens" in VARIANTS["sdpa_nested"].supports(w.replace(device="cuda"), None)  # the refusal it keeps
    with pytest.raises(Refusal, match="seq_len=262144"):
        budget.memory_refusal(varlen, w, CPU, 2**40)  # the model alone: no workload of one such sequence
    fit, refused = sweep_mod.fitting([varlen], w, CPU, 2**40)  # reasons asked where not given
    assert (fit, refused) == ([varlen], [])  # left to measurement, which says why it cannot run
    result = run_sweep([varlen], base, [16384, 32768], CPU)
    assert [r.status for r in result.of("varlen")] == [UNSUPPORTED, UNSUPPORTED]
    assert result.of("varlen")[1].reason == varlen.supports(w, CPU)


def test_a_point_that_does_not_fit_is_refused_before_allocating_with_the_models_numbers(monkeypatch):
    """At real sizes naive's S×S scores set its memory; at this tiny one the fixed costs do. A naive whose estimate
    grows 256 S×S matrices faster stands in for the real one: the memory rule and the sweep are the real ones."""
    calls = []
    real = VARIANTS["naive"]
    big = dataclasses.replace(real, scratch_bytes=lambda w, env: real.scratch_bytes(w, env) + 256 * w.scores_bytes(),
                              forward=lambda x: calls.append(x.workload.seq_len) or real.forward(x))
    flash = VARIANTS["sdpa_flash"]
    need = {(v.key, s): budget.measure_bytes(SMALL.replace(seq_len=s), v.scratch_bytes(SMALL.replace(seq_len=s), CPU))
            for v in (big, flash) for s in (64, 256, 512)}
    free = (need["naive", 64] + need["naive", 256]) // 2
    assert need["naive", 64] < free < need["naive", 256] and need["sdpa_flash", 512] <= free  # as planned
    monkeypatch.setattr(sweep_mod, "available_bytes", lambda device: free)

    result = run_sweep([big, flash], SMALL, [64, 256, 512], CPU)
    naive = result.of("naive")
    assert [(r.workload.seq_len, r.status) for r in naive] == [(64, "ok"), (256, DOES_NOT_FIT)]  # then not tried
    assert [r.status for r in result.of("sdpa_flash")] == ["ok"] * 3
    assert set(calls) == {64}  # nothing of naive ran at 256
    refused, w = naive[1], SMALL.replace(seq_len=256)
    scratch = big.scratch_bytes(w, CPU)
    assert refused.needed_bytes == need["naive", 256] and refused.available_bytes == free == result.available_bytes
    assert refused.reference_bytes == budget.reference_bytes(w, scratch) < refused.needed_bytes
    assert refused.reason == budget.memory_refusal(big, w, CPU, free).limit
    assert text.size(refused.needed_bytes) in refused.reason
    assert refused.timing is None and refused.peak_extra_bytes is None and refused.session is None and refused.stops
    (stop,) = stops_fitting(result)
    assert (stop.variant, stop.seq_len, stop.status, stop.last_ran) == ("naive", 256, DOES_NOT_FIT, 64)
    assert (stop.needed_bytes, stop.available_bytes) == (refused.needed_bytes, free)
    note = next(n for n in explain_sweep(result).notes if n.rule == "sweep_stops")
    assert note.title == (f"Naive (masked_fill) stops at S=256: needs {text.size(refused.needed_bytes)}, "
                          f"{text.size(free)} available") and note.side == "a"
    assert_numbers_are_the_runs(note, {"sweep": result})
    row = reports.sweep_table(result).query("S == 256 and variant == 'naive'").iloc[0]
    assert row["status"] == DOES_NOT_FIT and row["aten ops or reason"] == refused.reason and math.isnan(row["wall ms per forward"])
    columns = list(reports.sweep_table(result).columns)  # a CPU's table: aten ops, no kernels to count
    assert not any("kernel" in c for c in columns), columns
    # what the model predicts for its forward, as a measured run of the same variant states it
    assert refused.estimated_extra_bytes == budget.forward_bytes(w, scratch)


def test_out_of_memory_stops_the_variant_and_the_other_goes_on():
    real = VARIANTS["naive"]

    def forward(x):
        if x.workload.seq_len >= 128:
            raise torch.OutOfMemoryError("CPU out of memory. Tried to allocate 40.00 GiB")
        return real.forward(x)
    result = run_sweep([dataclasses.replace(real, forward=forward), VARIANTS["sdpa_flash"]], SMALL, LENGTHS, CPU)
    assert [(r.workload.seq_len, r.status) for r in result.of("naive")] == [(64, "ok"), (128, OUT_OF_MEMORY)]
    assert [r.status for r in result.of("sdpa_flash")] == ["ok"] * 3 and result.stopped is None
    (stop,) = stops_fitting(result)
    assert (stop.variant, stop.seq_len, stop.status, stop.last_ran, stop.needed_bytes) == (
        "naive", 128, OUT_OF_MEMORY, 64, 40 * 2**30)  # the allocation that failed, as PyTorch's message says
    note = next(n for n in explain_sweep(result).notes if n.rule == "sweep_stops")
    assert (note.title, note.body) == (
        "Naive (masked_fill) ran out of memory at S=128: 40.0 GiB asked",
        "Longer sequences are not tried. The longest length it ran is S=64.")


def test_a_cancel_between_lengths_ends_the_sweep_with_the_points_done_and_says_why():
    cancel = []
    result = run_sweep(variants("naive", "sdpa_flash"), SMALL, LENGTHS, CPU,
                       progress=lambda f, m: m.startswith("predicted") and cancel.append(1),
                       guard=Guard(cancelled=lambda: bool(cancel)))
    assert {r.workload.seq_len for r in result.runs} == {64} and all(r.ok for r in result.runs)
    assert result.stopped == "cancelled after 2 of 6 points"
    headline = explain_sweep(result).headline.title
    assert headline.startswith("The sweep stopped early (cancelled after 2 of 6 points). At S=64 ")
    chart = figures.sweep_figure(result)
    assert "stopped early: cancelled after 2 of 6 points" in [t.get_text() for t in chart.axes[0].texts]
    # the line every view and the PNG carry counts the lengths reached, not the six planned
    said = session.Answer(Request.build(LIVE, "naive", "sdpa_flash", {}, "cpu", LENGTHS), result, None).measured
    assert said.endswith(f" · S={LENGTHS[0]} (1 point)"), said


def test_a_cancel_during_a_measurement_keeps_what_it_had_and_says_the_cancel_not_another_runs_reason():
    cancel = []
    progress = lambda f, m: m.startswith("S=128 ·") and m.endswith("naive: timing") and cancel.append(1)  # noqa: E731
    result = run_sweep(variants("sdpa_cudnn", "naive"), SMALL, LENGTHS, CPU, progress=progress,
                       guard=Guard(cancelled=lambda: bool(cancel)))
    at = {(r.variant, r.workload.seq_len): r for r in result.runs}
    assert at["naive", 64].ok and at["naive", 128].status == STOPPED and "cancelled" in at["naive", 128].reason
    assert at["sdpa_cudnn", 128].status == UNSUPPORTED and 256 not in {s for _, s in at}
    assert result.stopped == "cancelled during S=128"
    assert explain_sweep(result).headline.title.startswith("The sweep stopped early (cancelled during S=128). ")


def test_a_length_predicted_past_what_is_left_of_the_budget_is_not_started():
    guard = Guard.within(30.0)
    result = run_sweep(variants("naive", "sdpa_flash"), SMALL, [64, 16384], CPU, guard=guard)
    assert {r.workload.seq_len for r in result.runs} == {64} and result.budget_s == 30.0
    said = re.fullmatch(r"time budget: S=16,384 would take about ([\d,.]+) s, ([\d,.]+) s of 30 s left", result.stopped)
    assert said, result.stopped
    ahead = sum(sweep_mod._predict_s(result, v, 16384) for v in ("naive", "sdpa_flash"))
    assert said.group(1) == text.seconds(ahead).removesuffix(" s") and ahead > float(said.group(2).replace(",", ""))
    assert explain_sweep(result).headline.title.startswith(f"The sweep stopped early ({result.stopped}). ")


# -- lengths: read from text, planned from the memory and time models -------------------------------------------
@pytest.mark.parametrize("words, expected", [("256, 128,128 512", (128, 256, 512)), ("131072", (131072,)),
                                             (" 64\t128 ", (64, 128))])
def test_lengths_are_sorted_unique_and_within_limits(words, expected):
    assert parse_lengths(words) == expected


@pytest.mark.parametrize("words, value", [("0,128", 0), ("128,131073", 131073), ("12a", "12a"), ("", ""),
                                          ("1_024", "1_024"), ("１２８", "１２８"),
                                          (",".join(str(64 * i) for i in range(1, 14)), None), ([64], [64])])
def test_bad_lengths_are_refused_naming_the_field_and_the_value(words, value):
    with pytest.raises(Refusal) as error:
        parse_lengths(words)
    assert error.value.field == "seq_lens" and error.value.kind == "invalid"
    assert error.value.value == (words if value is None else value)
    if value is None:
        assert f"at most {MAX_LENGTHS} lengths" in str(error.value)


def test_default_lengths_are_powers_of_two_up_to_what_the_bounding_variants_fit_or_the_budget(monkeypatch):
    monkeypatch.setattr(session, "available_bytes", lambda device: 126 * 2**30)  # an H200's, as recorded
    high = spec_of("seq_len").limits[1]

    def check(keys, base, env, budget_s):
        chosen = [VARIANTS[k] for k in keys]
        lengths = session.default_lengths(chosen, base, env, budget_s)
        bounding = [v for v in chosen if v.fused] or chosen
        assert lengths[0] == session.FIRST_LENGTH and all(b == 2 * a for a, b in zip(lengths, lengths[1:]))
        for s in lengths:  # each fits for some bounding variant, within the budget
            w = base.replace(seq_len=s)
            assert not all(budget.memory_refusal(v, w, CPU, session.available_bytes(w.device)) for v in bounding)
            assert budget_s is None or budget.predicted_seconds(w, bounding, env) <= budget_s
        after = base.replace(seq_len=min(2 * lengths[-1], high))
        assert (2 * lengths[-1] > high or len(lengths) == MAX_LENGTHS
                or all(budget.memory_refusal(v, after, CPU, session.available_bytes(after.device)) for v in bounding)
                or (budget_s is not None and budget.predicted_seconds(after, bounding, env) > budget_s))
        return lengths

    assert check(("naive", "sdpa_flash"), Workload.blog(), H200, None) == tuple(2**i for i in range(7, 18))
    assert check(("naive", "sdpa_math"), Workload.blog(), H200, None)[-1] == 8192  # as the recorded sweep stops
    assert check(("naive", "sdpa_flash"), Workload.blog(), H200, 90.0)[-1] < 131072  # one point would overrun
    monkeypatch.undo()
    assert check(("naive", "sdpa_flash"), Workload.cpu_default(), CPU, 60.0)[-1] <= 4096


# -- the result as data -----------------------------------------------------------------------------------------
def test_the_sweep_json_round_trip_is_lossless_and_select_narrows_it(small_sweep):
    result, _ = small_sweep
    again = Sweep.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result
    assert isinstance(again.runs[0].timing, Timing) and isinstance(again.runs[0].kernels[0], Kernel)
    narrowed = result.select(["sdpa_flash"], [128, 256])
    assert narrowed.runs == [result.at("sdpa_flash", 128), result.at("sdpa_flash", 256)]
    assert (narrowed.variants, narrowed.seq_lens) == (["sdpa_flash"], [128, 256])
    assert narrowed.workload == result.workload.replace(seq_len=128)  # a sweep's workload is at its first length
    assert (narrowed.environment, narrowed.available_bytes, narrowed.predicted_s) == (
        result.environment, result.available_bytes, result.predicted_s)
    assert len(result.runs) == 6  # the original is untouched
    assert result.select(["sdpa_flash", "naive"]).variants == ["sdpa_flash", "naive"]
    assert result.at("naive", 999) is None


def test_the_table_has_a_row_per_run_with_the_runs_numbers():
    result = RECORDED[0].select(["naive", "sdpa_math"])
    table = reports.sweep_table(result)
    assert len(table) == len(result.runs) and list(table["S"]) == sorted(table["S"])
    for _, row in table.iterrows():
        r = result.at(row["variant"], row["S"])
        assert row["status"] == r.status
        if r.ok:
            assert row["GPU ms per forward"] == round(r.gpu_ms, 4) and row["bound"] == r.bound
            assert row["host µs per forward"] == round(r.host_cost.median_ms * 1000, 1)
            assert row["peak MiB"] == round(r.peak_extra_bytes / 2**20, 1)
            assert row[f"kernels per {text.call(result.workload)}"] == round(r.kernels_per_forward, 2)
        else:
            assert row["kernels or reason"] == r.reason and math.isnan(row["GPU ms per forward"])


# -- curve facts on synthetic runs -------------------------------------------------------------------------------
S = [256, 512, 1024, 2048, 4096]


@pytest.mark.parametrize("power", [2.0, 1.0, 1.5])
def test_the_fitted_exponent_of_c_times_s_to_the_power_is_exact(power):
    result = synthetic([run("naive", s, 3e-6 * s**power, mem=int(7 * s**power)) for s in S]
                       + [run("sdpa_flash", s, 1e-6 * s**2, seed=1) for s in S])
    by = {(f.variant, f.quantity): f for f in slopes(result)}
    for quantity, tolerance in (("time", 1e-9), ("memory", 1e-4)):
        fit = by["naive", quantity]
        assert fit.exponent == pytest.approx(power, abs=tolerance) and fit.r2 == pytest.approx(1.0)
        assert fit.supported and (fit.s_from, fit.s_to, fit.points) == (512, 4096, 4)


def test_slopes_are_fitted_over_the_top_of_the_range_as_numpy_fits_them():
    runs = [run("naive", s, 0.1 + 1e-6 * s**2, mem=4 * s**2) for s in [128, *S]] + \
           [run("sdpa_flash", s, 2e-7 * s**2, mem=1000 * s, seed=1) for s in [128, *S]]
    by = {(f.variant, f.quantity): f for f in slopes(synthetic(runs))}
    naive_time = by["naive", "time"]
    tail = [r for r in runs if r.variant == "naive"][-4:]
    oracle = np.polyfit(np.log([r.workload.seq_len for r in tail]), np.log([r.gpu_ms for r in tail]), 1)[0]
    whole = np.polyfit(np.log([128, *S]), np.log([r.gpu_ms for r in runs if r.variant == "naive"]), 1)[0]
    assert (naive_time.s_from, naive_time.s_to, naive_time.points) == (512, 4096, 4)
    assert naive_time.exponent == pytest.approx(oracle, abs=1e-12) and naive_time.as_expected
    assert naive_time.whole_range_exponent == pytest.approx(whole, abs=1e-12)  # a fixed 0.1 ms flattens short S
    assert naive_time.whole_range_exponent < naive_time.exponent - 0.25
    assert by["naive", "memory"].exponent == pytest.approx(2.0) and by["naive", "memory"].expected == 2.0
    flash_memory = by["sdpa_flash", "memory"]
    assert flash_memory.exponent == pytest.approx(1.0) and flash_memory.expected == 1.0 and flash_memory.supported
    assert r_squared([1, 2, 4], [1, 4, 16]) == pytest.approx(1.0) and log_slope([1, 2, 4], [1, 4, 16]) == 2.0


def test_no_exponent_is_supported_over_noisy_points():
    # time falling then rising, quartiles wide: no line on log–log axes
    falling_rising = synthetic([run("naive", s, ms, spread=0.3, seed=s) for s, ms in
                                zip(S[:4], (1.0, 0.8, 0.9, 1.1))] + [run("sdpa_flash", s, 1.0, seed=s) for s in S[:4]])
    fit = next(f for f in slopes(falling_rising) if (f.variant, f.quantity) == ("naive", "time"))
    assert fit.r2 < 0.9 and not fit.supported
    # a clean line, but a rise smaller than the points' own spread: the first and last quartiles overlap
    creeping = synthetic([run("naive", s, 1.0 + 0.02 * i, spread=0.2) for i, s in enumerate(S[:4])])
    fit = next(f for f in slopes(creeping) if f.quantity == "time")
    assert fit.r2 >= 0.9 and not fit.supported
    first, last = creeping.of("naive")[0].timing, creeping.of("naive")[-1].timing
    assert first.p75_ms >= last.p25_ms  # overlapping: why
    # two points always make a line: a fit needs three
    two = synthetic([run("naive", s, 1e-6 * s**2) for s in S[:2]])
    (fit,) = [f for f in slopes(two) if f.quantity == "time"]
    assert fit.r2 == pytest.approx(1.0) and fit.points == 2 and not fit.supported


def test_a_crossover_is_interpolated_on_log_axes_where_the_test_ranks_them_in_opposite_orders():
    # A = S², B = √1024·S^1.5: equal at S=1024 by construction, which B is not measured at
    runs = [run("naive", s, 1e-6 * s**2) for s in S] + \
           [run("sdpa_flash", s, 1e-6 * 1024**0.5 * s**1.5) for s in S if s != 1024]
    (cross,) = crossovers(synthetic(runs))
    assert cross.seq_len == pytest.approx(1024) and (cross.s_before, cross.s_after) == (512, 2048)
    assert (cross.faster_before, cross.faster_after, cross.path) == ("naive", "sdpa_flash", "timing")
    assert cross.ratio_before == pytest.approx(2**0.5) and cross.ratio_after == pytest.approx(2**0.5)


def test_no_crossover_is_claimed_where_the_test_cannot_rank_them():
    # the medians cross (0.5% apart), but 0.5% is under what the test ranks: at no length is either the faster
    runs = [run("naive", s, 1.0, seed=2 * s) for s in S] + \
           [run("sdpa_flash", s, 1.005 if s < 1024 else 0.995, seed=2 * s + 1) for s in S]
    result = synthetic(runs)
    assert crossovers(result) == [] and not [n for n in explain_sweep(result).notes if n.rule == "sweep_crossover"]
    assert not any("overtakes" in t.get_text() for t in figures.sweep_figure(result).axes[0].texts)
    # a real 5% order change, but A and B of each length measured in different sessions: within their drift
    apart = [dataclasses.replace(r, session=f"{r.variant}{r.workload.seq_len}") for r in synthetic(
        [run("naive", s, 1.0, seed=2 * s) for s in S] + [run("sdpa_flash", s, 1.05 if s < 1024 else 0.95,
                                                                seed=2 * s + 1) for s in S]).runs]
    assert crossovers(synthetic(apart)) == []


def test_a_crossover_spans_the_lengths_the_test_could_rank():
    # ranked at 256 (A faster) and 4096 (B faster); in between within 0.5%: the crossing lies between 256 and 4096
    gap = {256: 1.2, 512: 1.004, 1024: 0.997, 2048: 1.003, 4096: 0.8}
    runs = [run("naive", s, 1.0, seed=2 * s) for s in S] + [run("sdpa_flash", s, gap[s], seed=2 * s + 1) for s in S]
    (cross,) = crossovers(synthetic(runs))
    assert (cross.s_before, cross.s_after, cross.faster_before, cross.faster_after) == (256, 4096, "naive",
                                                                                         "sdpa_flash")
    r0, r1 = math.log(cross.ratio_before), math.log(cross.ratio_after)
    assert math.log(cross.seq_len) == pytest.approx(math.log(256) + math.log(4096 / 256) * r0 / (r0 + r1))


def test_stop_bound_and_kernel_change_facts():
    runs = [run("naive", 256, 1.0, bound="host", kernels=[("gemm", 2), ("softmax", 1)]),
            run("naive", 512, 4.0, bound="host", kernels=[("gemm", 2), ("softmax", 1)]),
            run("naive", 1024, 16.0, bound="gpu", kernels=[("gemm", 2), ("softmax", 1), ("where", 3)]),
            run("naive", 2048, status=DOES_NOT_FIT, needed_bytes=200 * 2**30, available_bytes=126 * 2**30,
                estimated_extra_bytes=190 * 2**30, reason="needs about 200.0 GiB"),
            run("sdpa_flash", 256, 1.0, seed=1), run("sdpa_flash", 512, 2.0, seed=1)]
    result = synthetic(runs)
    (stop,) = stops_fitting(result)
    assert (stop.variant, stop.seq_len, stop.status, stop.needed_bytes, stop.available_bytes, stop.last_ran,
            stop.own_bytes, stop.reason) == ("naive", 2048, DOES_NOT_FIT, 200 * 2**30, 126 * 2**30, 1024,
                                             190 * 2**30, "needs about 200.0 GiB")
    assert not stop.stopped_by_reference
    assert bound_changes(result) == [BoundChange("naive", 512, 1024)]
    (change,) = kernel_changes(result)
    assert (change.variant, change.s_before, change.s_after, change.added, change.removed) == (
        "naive", 512, 1024, {"where": 3}, {})
    assert change.kernels_before == 3 and change.kernels_after == 6 and change.step_exponent == pytest.approx(2.0)
    assert stops_fitting(synthetic(runs[:3] + runs[4:])) == []  # nothing stopped, nothing said


# -- the command line ------------------------------------------------------------------------------------------
def test_cli_sweep_prints_the_table_and_notes_and_writes_the_answer(tmp_path, capsys):
    from profiling.__main__ import main
    from profiling.explain import Explanation
    path = tmp_path / "sweep.json"
    assert main(["sweep", "naive", "sdpa_flash", "--device", "cpu", "--seq", "64,128", "--heads", "2",
                 "--batch", "1", "--head-dim", "32", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "workload: B=1, H=2, D=32, fp32, causal, S over 64, 128 (live)" in out and "wall ms per forward" in out
    data = json.loads(path.read_text())
    result = Sweep.from_dict({k: data[k] for k in (f.name for f in dataclasses.fields(Sweep))})
    assert [(r.variant, r.workload.seq_len, r.status) for r in result.runs] == [
        ("naive", 64, "ok"), ("sdpa_flash", 64, "ok"), ("naive", 128, "ok"), ("sdpa_flash", 128, "ok")]
    assert data["source"] == "live" and f"Verdict: {data['verdict']}" in out
    assert Explanation.from_dict(data).headline.title == data["verdict"] == explain_sweep(result).headline.title


def test_cli_replays_a_recorded_sweep_and_refuses_one_it_lacks_saying_what_it_holds(capsys):
    from profiling.__main__ import main
    assert main(["sweep", "sdpa_flash", "naive", "--source", "h200-torch2.11", "--seq", "512,1024"]) == 0
    out = capsys.readouterr().out
    assert "workload: B=8, H=16, D=64, bf16, causal, S over 512, 1024 (recorded: h200-torch2.11)" in out
    assert "GPU ms per forward" in out and "naive_inplace" not in out and "2048" not in out
    assert main(["sweep", "sdpa_flash", "naive", "--source", "h200-torch2.11", "--head-dim", "96"]) == 2
    err = capsys.readouterr().err
    assert "has no sweep of sdpa_flash and naive at B=8, H=16, D=96, bf16, causal" in err
    assert f"Of sdpa_flash and naive it holds {RECORDED[0].workload.family()} (and 1 other)." in err


def test_the_tables_time_columns_name_the_pass_they_are_per():
    """A training step's sweep gives its GPU time and its host cost per step, a forward's per forward: every unit
    names its pass (the same numbers, read as per forward, would be 2-3× off)."""
    passes = {}
    for result in RECORDED:
        columns = list(reports.sweep_table(result).columns)
        call = text.call(result.workload)
        assert f"GPU ms per {call}" in columns and f"host µs per {text.host_call(result.workload)}" in columns, columns
        assert not any(c in ("GPU ms", "host µs") for c in columns)
        passes[result.workload.passes] = columns
    assert {"fwd", "fwd+bwd"} <= set(passes) and "GPU ms per step" in passes["fwd+bwd"]


def test_a_stopped_point_shows_as_stopped_with_no_times():
    """A point the sweep stopped in (its timing half done) says "stopped" and why, and none of the figures it had
    reached: the table's numbers are of finished points only."""
    from profiling.reports import sweep_table
    from profiling.results import STOPPED

    runs = [run("naive", 1024, 0.5, mem=4 * 2**20), run("sdpa_flash", 1024, 0.1, mem=2**20),
            run("naive", 2048, 1.9, mem=16 * 2**20, status=STOPPED, reason="stopped after 59 s: time budget")]
    table = sweep_table(synthetic(runs))
    stopped = table[table["status"] == STOPPED].iloc[0]
    assert stopped["kernels or reason"] == "stopped after 59 s: time budget"
    numbers = [c for c in table.columns if c not in ("S", "variant", "status", "kernels or reason")]
    assert stopped[numbers].isna().all(), stopped
    assert table[table["status"] == "ok"]["GPU ms per forward"].notna().all()


def test_the_charts_hollow_key_is_there_only_where_a_point_is_drawn_hollow():
    """The sweep chart's legend explains hollow points ("does not fit / out of memory") only on a chart that draws
    one: the recorded blog sweep, where naive stops at S=16,384, has it; the batch sweep, where every point ran, not."""
    from profiling.replay import recorded_sweeps

    def legend(sweep) -> list[str]:
        return [t.get_text() for t in figures.sweep_figure(sweep).axes[0].get_legend().get_texts()]
    sweeps = recorded_sweeps("h200-torch2.11")
    blog = sweeps[0].select(["naive", "sdpa_flash"])
    assert any(r.stops for r in blog.runs) and legend(blog) == ["naive", "sdpa_flash",
                                                                "does not fit / out of memory (below)"]
    batch = next(s for s in sweeps if s.axis == "batch").select(["sdpa_flash", "sdpa_cudnn"])
    assert not any(r.stops for r in batch.runs) and legend(batch) == ["sdpa_flash", "sdpa_cudnn"]
