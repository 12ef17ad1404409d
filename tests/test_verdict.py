"""The headline compares one figure on both sides by a named test, and says only what it supports: a winner (never
"1.0×"), level within noise, no practical difference, or too few samples — each the true one of the four."""
from __future__ import annotations

import dataclasses
import random
import re
import statistics

import pytest
from explain_helpers import RUNS
from oracles import median_ratio, unconfirmed_gap_said

from profiling import stats, text
from profiling.explain import explain
from profiling.explain.verdict import CROSS_SESSION_DRIFT, decision, figure, headline
from profiling.results import Comparison, Run, Timing

FLASH = next(r for r in RUNS if r.variant == "sdpa_flash" and r.workload.seq_len == 1024 and r.workload.causal
             and r.workload.rank == 4 and r.workload.dtype == "bf16" and r.workload.head_dim == 64
             and r.workload.timing == "warm" and r.workload.passes == "fwd" and r.workload.mask == "flag"
             and r.workload.q_len is None)
CUDNN = next(r for r in RUNS if r.variant == "sdpa_cudnn" and r.workload == FLASH.workload)


def timing(median: float, spread: float, n: int, rng: random.Random) -> Timing:
    return Timing.of([median * (1 + rng.gauss(0, spread)) for _ in range(n)], "cuda events")


def run(base: Run, gpu_ms: float, *, n: int = 20, spread: float = 0.01, session: str = "s1", host_ms: float | None = None,
        pace_ms: float | None = None, seed: int = 0) -> Run:
    rng = random.Random(seed)
    gpu = timing(gpu_ms, spread, n, rng)
    pace = timing(pace_ms or gpu_ms, spread, 8, rng)
    host = timing(host_ms or gpu_ms / 4, spread, 40, rng)
    return dataclasses.replace(base, session=session, timing=gpu, back_to_back=pace, host_cost=host)


def numbers(title: str) -> list[str]:
    return re.findall(r"\d+(?:\.\d+)?×", title)


def test_a_clear_gap_is_ranked_and_its_ratio_is_the_medians_ratio():
    a, b = run(FLASH, 0.096, seed=1), run(CUDNN, 0.060, seed=2)
    note = headline(a, b)
    assert note.title.startswith("SDPA · cuDNN [B] is 1.6× faster than SDPA · FlashAttention [A] on the H200")
    assert note.facts["ratio"].value == pytest.approx(median_ratio(a.timing.samples_ms, b.timing.samples_ms))
    assert "(GPU time, CUDA events)" in note.title


@pytest.mark.parametrize("n", [5, 8, 20, 50])
def test_two_samples_of_one_distribution_are_never_a_winner(n):
    ranked = sum(decision(run(FLASH, 0.1, n=n, seed=2 * i), run(CUDNN, 0.1, n=n, seed=2 * i + 1)).kind == "ranked"
                 for i in range(200))
    assert ranked <= 6  # the test's own false-alarm rate is under 1%; 6 of 200 would be 3%


def test_a_tiny_real_gap_is_no_practical_difference_and_never_1_0x():
    a, b = run(FLASH, 0.1000, n=50, spread=0.001, seed=3), run(CUDNN, 0.1015, n=50, spread=0.001, seed=4)
    v = decision(a, b)
    assert v.kind == "no_practical_difference" and v.p < stats.LEVEL
    title = headline(a, b).title
    assert "1.0×" not in title and "differ by 1.5%" in title and "under the 3% that counts" in title


def test_noise_wider_than_the_gap_is_level_within_noise():
    a, b = run(FLASH, 0.100, n=20, spread=0.3, seed=5), run(CUDNN, 0.104, n=20, spread=0.3, seed=6)
    assert decision(a, b).kind == "level"
    assert "level within noise" in headline(a, b).title


def test_a_big_gap_the_test_cannot_confirm_is_not_called_level():
    """Recorded on the H200 (additive bias, memory-efficient vs flex, back to back): seven of flex's eight samples
    are below all of memory-efficient's, one is above; p = 0.0104 misses 0.01. A 2× gap is not "level"."""
    a = dataclasses.replace(run(FLASH, 0.400), timing=Timing.of([0.4147, 0.4125, 0.4105, 0.4124, 0.4107, 0.4120,
                                                                 0.4104, 0.4129], "cuda events"))
    b = dataclasses.replace(run(CUDNN, 0.19), timing=Timing.of([0.176, 0.194, 0.1857, 0.1942, 0.435, 0.1959, 0.188,
                                                                 0.1904], "cuda events"))
    v = decision(a, b)
    assert v.kind == "level" and v.p == pytest.approx(0.0104, abs=1e-4)
    title = headline(a, b).title
    assert "level within noise" not in title and " faster " not in title
    assert title.endswith("are not ranked on the H200: 0.412 ms vs 0.192 ms per forward (GPU time, CUDA events), 2.1× "
                          "apart; 1 of B's 8 samples is slower than A's median: too spread to rank.")
    assert title.endswith(unconfirmed_gap_said(a.timing.samples_ms, b.timing.samples_ms))


SPECULATIVE_AUTO = [0.3962, 0.4009, 0.4045, 0.4067, 0.4070, 0.4097, 0.4287, 0.4295]


@pytest.mark.parametrize("a_samples, b_samples, crossing", [
    (SPECULATIVE_AUTO, [0.135, 0.198, 0.205, 0.208, 0.208, 0.216, 0.648, 0.780],
     "2 of B's 8 samples are slower than A's median"),
    ([0.8087, 0.7795, 0.7563, 1.0919, 1.096, 1.0486, 1.1296, 0.9901],
     [0.6424, 0.6205, 0.5759, 0.7461, 0.7579, 0.8211, 0.759, 0.8787], "the tails of their samples overlap"),
])
def test_a_gap_whose_middle_halves_are_apart_is_never_said_to_overlap(a_samples, b_samples, crossing):
    """The speculative-decode preset (sdpa_auto vs flex, back to back, recorded on the H200): A's quartiles
    0.404–0.414 ms, B's 0.203–0.324 ms, disjoint; p = 0.1 on 8 samples a side, because two of B's are slower than
    every one of A's. The headline once said "their samples overlap too much": it says which samples cross instead,
    counted here again from the samples (`unconfirmed_gap_said`), and that their middle halves are apart. Where no
    sample passes the other side's median (flex vs FA4, a packed training step, back to back: p = 0.0104), the
    tails overlap, and it says that."""
    a = dataclasses.replace(run(FLASH, 0.4), timing=Timing.of(a_samples, "cuda events"))
    b = dataclasses.replace(run(CUDNN, 0.2), timing=Timing.of(b_samples, "cuda events"))
    v = decision(a, b)
    qa, qb = (statistics.quantiles(x, n=4, method="inclusive") for x in (a_samples, b_samples))
    assert v.kind == "level" and v.path == "timing" and qb[2] < qa[0]  # the test leaves them unranked; apart
    title = headline(a, b).title
    assert "overlap too much" not in title and title.endswith(unconfirmed_gap_said(a_samples, b_samples)), title
    assert crossing in title, title


def test_five_samples_a_side_that_separate_are_evidence_not_noise():
    a, b = run(FLASH, 20.1, n=5, seed=7), run(CUDNN, 0.63, n=5, seed=8)
    note = headline(a, b)
    assert decision(a, b).kind == "ranked" and decision(a, b).p == pytest.approx(2 / 252)
    assert f"{text.times(median_ratio(a.timing.samples_ms, b.timing.samples_ms))} faster" in note.title


def test_four_samples_are_too_few_and_it_says_so():
    a, b = run(FLASH, 1.0, n=4, seed=9), run(CUDNN, 0.5, n=4, seed=10)
    assert decision(a, b).kind == "too_few"
    assert "cannot be ranked" in headline(a, b).title and "4 samples on a side are too few" in headline(a, b).title


def test_a_host_bound_side_puts_both_on_the_back_to_back_pace():
    # flex-like: host cost above its GPU time, so a loop runs at the host's pace; the other side GPU-bound
    fast_gpu_slow_host = run(FLASH, 0.082, host_ms=0.12, pace_ms=0.125, seed=11)
    gpu_bound = run(CUDNN, 1.06, pace_ms=1.06, seed=12)
    path, what = figure(fast_gpu_slow_host, gpu_bound)
    assert path == "back_to_back" and "back to back" in what
    note = headline(fast_gpu_slow_host, gpu_bound)
    assert note.facts["a"].source == "a.back_to_back.median_ms" and note.facts["b"].source == "b.back_to_back.median_ms"
    assert note.facts["ratio"].value == pytest.approx(
        median_ratio(gpu_bound.back_to_back.samples_ms, fast_gpu_slow_host.back_to_back.samples_ms))
    assert all("host_cost" not in q.source for q in note.facts.values())  # never a host cost in the headline


def test_a_pace_over_the_gpu_time_with_a_host_that_keeps_ahead_is_no_host_bound():
    """Seen live on the H200: cuDNN at 1×32×16,384×128, host cost 0.045 ms a call against 3.47 ms of GPU time, ran a
    loop at 3.83 ms. The host keeps ahead, so it is no host bound, and a GPU-bound pair is compared on GPU time."""
    odd = run(CUDNN, 3.47, host_ms=0.045, pace_ms=3.83, seed=13)
    other = run(FLASH, 6.98, host_ms=0.05, pace_ms=7.0, seed=14)
    assert odd.bound == "other" and other.bound == "gpu"
    assert figure(odd, other)[0] == "timing" and "(GPU time, CUDA events)" in headline(odd, other).title
    notes = explain(Comparison(odd, other)).notes
    assert any(n.rule == "loop_waits" and n.side == "a" for n in notes)
    assert not any(n.rule == "host_bound" for n in notes)
    # with the host's cost near the GPU time the same pace is the host's
    assert run(CUDNN, 0.10, host_ms=0.095, pace_ms=0.12, seed=13).bound == "host"


def test_a_gpu_time_with_host_gaps_is_never_ranked_or_called_level():
    a, b = run(FLASH, 0.100, seed=23), run(CUDNN, 0.100, seed=24)
    b = dataclasses.replace(b, timing=dataclasses.replace(b.timing, host_gaps=True))
    assert decision(a, b).kind == "host_gaps"
    title = headline(a, b).title
    assert "level" not in title and " faster " not in title and "SDPA · cuDNN [B]'s GPU time includes gaps" in title


def test_runs_of_two_sessions_need_a_gap_beyond_the_drift_between_them():
    a, b = run(FLASH, 0.100, session="one", seed=15), run(CUDNN, 0.092, session="two", seed=16)
    assert decision(a, b).kind == "no_practical_difference" and decision(a, b).threshold == CROSS_SESSION_DRIFT["timing"]
    assert decision(a, dataclasses.replace(b, session="one")).kind == "ranked"


def test_the_same_variant_is_never_a_winner():
    a, b = run(FLASH, 0.096, seed=17), run(FLASH, 0.060, seed=18)
    assert "the same variant, so no winner" in headline(a, b).title


def test_a_cpu_pair_is_compared_on_wall_time():
    cpu_env = dataclasses.replace(FLASH.environment, device="cpu", device_name="CPU", compute_capability=None)
    a = dataclasses.replace(run(FLASH, 2.0, seed=19), environment=cpu_env, host_cost=None, back_to_back=None)
    b = dataclasses.replace(run(CUDNN, 11.0, seed=20), environment=cpu_env, host_cost=None, back_to_back=None)
    assert figure(a, b) == ("timing", "wall time") and "(wall time)" in headline(a, b).title


def test_a_cpu_pairs_why_counts_aten_ops_where_a_gpus_counts_kernels():
    """The why note's count of what each side runs: kernels launched on a GPU; on a CPU, whose table is aten ops by
    CPU time, aten ops run (the same recorded pair, its runs said to be a CPU's)."""
    from explain_helpers import recorded
    naive, flash = recorded("naive"), recorded("sdpa_flash")
    why = next(n for n in explain(Comparison(naive, flash)).notes if n.rule == "speed")
    assert "launches 7 kernels per forward, SDPA · FlashAttention 1" in why.body
    cpu_env = dataclasses.replace(naive.environment, device="cpu", device_name="CPU", compute_capability=None)
    cpu = [dataclasses.replace(r, environment=cpu_env, profiled_host_ms=r.timing.median_ms) for r in (naive, flash)]
    why = next(n for n in explain(Comparison(*cpu)).notes if n.rule == "speed")
    assert "runs 7 aten ops per forward, SDPA · FlashAttention 1" in why.body and "kernel" not in why.body, why.body
    # the kernel role whose time differs most, and a first call's note, in a CPU's words too
    from profiling.explain import timing_rules, verdict
    side = {id(cpu[0]): "a", id(cpu[1]): "b"}
    role, _ = verdict._role_gap(cpu[1], cpu[0], side)
    gpu_role, _ = verdict._role_gap(flash, naive, {id(naive): "a", id(flash): "b"})
    assert role and " ops take " in role and "kernels" not in role and " kernels take " in gpu_role, (role, gpu_role)
    # planted: the slow side profiled at 14x its timed call (a busy CPU): its ops' µs are not its forward's
    inflated = dataclasses.replace(cpu[0], profiled_host_ms=14 * cpu[0].timing.median_ms)
    assert verdict._role_gap(cpu[1], inflated, {id(inflated): "a", id(cpu[1]): "b"}) == (None, {})
    assert not any(" ops take " in n.body for n in explain(Comparison(inflated, cpu[1])).notes)
    flex = recorded("flex")
    first = timing_rules.first_call(flex, {})
    assert first.body.endswith("on the GPU.")
    first = timing_rules.first_call(dataclasses.replace(flex, environment=cpu_env), {})
    assert first.body.endswith("(wall time).") and "GPU" not in first.body, first.body
    # the numbers side by side: a GPU's host figures and kernel count; no rows of dashes for a CPU's
    from profiling import reports
    gpu_rows = [line.split("|")[1].strip() for line in reports.comparison_table(Comparison(naive, flash)).splitlines()]
    assert {"back to back per forward", "host cost per forward", "kernels per forward"} <= set(gpu_rows)
    cpu_workload = naive.workload.replace(device="cpu")
    cpu = [dataclasses.replace(r, workload=cpu_workload) for r in cpu]
    cpu_rows = [line.split("|")[1].strip() for line in reports.comparison_table(Comparison(*cpu)).splitlines()]
    assert cpu_rows[2:] == ["wall time per forward", "peak memory", "max error"], cpu_rows


def test_the_headline_and_the_why_note_agree_on_winner_and_ratio():
    a, b = run(FLASH, 0.096, seed=21), run(CUDNN, 0.060, seed=22)
    explanation = explain(Comparison(a, b))
    why = next(n for n in explanation.notes if n.rule == "speed")
    assert why.facts["ratio"].value == explanation.headline.facts["ratio"].value
    assert "SDPA · cuDNN" in why.title


def test_text_never_writes_a_ranked_ratio_as_1_0x():
    assert text.times(1.03) == "1.03×" and text.times(1.094) == "1.09×" and text.times(1.1) == "1.1×"
    assert all("1.0×" != text.times(1 + k / 1000) for k in range(30, 200))


def test_a_run_stopped_after_its_timing_still_has_a_verdict_and_says_it_stopped():
    """A budget or a cancel that lands during the profile leaves the timing rounds whole: the headline compares them
    and says the profile is missing; stopped before its timing, the side was stopped (not "could not run": it could)."""
    a, b = run(FLASH, 0.096, seed=1), run(CUDNN, 0.060, seed=2)
    late = dataclasses.replace(b, status="stopped", reason="stopped after 61.0 s: over the time budget of 60 s",
                               budget_s=60.0, wall_s=61.0)
    title = headline(a, late).title
    assert title.startswith("SDPA · cuDNN [B] is 1.6× faster than SDPA · FlashAttention [A] on the H200")
    assert title.endswith("SDPA · cuDNN [B] stopped after timing, before the profile.")
    early = dataclasses.replace(late, timing=None)
    assert headline(a, early).title.startswith("SDPA · cuDNN [B] was stopped on the H200 (stopped by the time budget")



def test_a_peak_past_the_scores_is_read_as_the_scores_written_only_for_a_call_that_is_not_fused():
    """The verdict's reason "writes the S×S scores through memory" reads the slow side's peak. Naive's, at the blog
    workload, says so. Planted: compiled flex with a peak past its scores (as on a CPU at S=128, fp32: 642 KiB over
    128 KiB scores it never writes, its compiled graph's buffers) beside a flash that peaked at nothing: a fused call's
    peak is not its scores, as the guess's memory note already reads it (facts.fused), and the reason is not said."""
    from profiling.explain.facts import fused
    from profiling.explain.verdict import _gpu_reasons

    naive, flex = (next(r for r in RUNS if r.variant == key and r.workload == FLASH.workload) for key in ("naive", "flex"))
    reasons, _ = _gpu_reasons(FLASH, naive, {id(naive): "a", id(FLASH): "b"})
    assert any("writes the S×S scores" in r for r in reasons) and not fused(naive)
    scores = flex.workload.scores_bytes(2)
    flex = dataclasses.replace(flex, peak_extra_bytes=5 * scores)
    flash = dataclasses.replace(FLASH, peak_extra_bytes=0)
    reasons, _ = _gpu_reasons(flash, flex, {id(flex): "a", id(flash): "b"})
    assert fused(flex) and not any("S×S" in r for r in reasons)


def test_a_gqa_backward_s_attention_kernels_are_summed_alike_on_both_sides():
    """Grouped-query heads' backward sums dK and dV over each group's query heads: flash with aten's reduce_kernel,
    cuDNN with its own fmha_reduce_head, which the trace's categories counted as attention (the reason compared
    flash's 1.387 ms of attention kernels with cuDNN's 859.2 µs, its 44.1 µs reduction in). Both are reductions now,
    and the reason's sums are each side's attention kernels, re-derived from the table."""
    from profiling.explain import verdict
    from profiling.trace import category

    assert category("void cudnn::fusion::fmha_reduce_head<true>(void const*)") == "reduction" \
        == category("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16>>")
    flash, cudnn = (next(r for r in RUNS if r.variant == v and r.workload.kv_heads == 8 and r.workload.passes == "bwd"
                         and r.workload.timing == "graph") for v in ("sdpa_flash", "sdpa_cudnn"))
    reason, facts = verdict._role_gap(cudnn, flash, {id(flash): "a", id(cudnn): "b"})
    assert reason and "attention kernels" in reason, reason
    for key, run in (("role_slow", flash), ("role_fast", cudnn)):
        attention = sum(k.us_per_forward for k in run.kernels_of("backward") if k.category == "fused attention")
        assert facts[key].value == pytest.approx(attention), key
        assert not any("reduce" in k.name and k.category == "fused attention" for k in run.kernels)


# -- the correctness gate: a wrong answer is never ranked ------------------------------------------------------------
def wrong(base: Run, **errors) -> Run:
    """`base` with its accuracy's errors set (max_abs_error=..., grads={...}), plain attention's left as measured."""
    return dataclasses.replace(base, accuracy=dataclasses.replace(base.accuracy, **errors))


def test_a_wrong_answer_is_never_ranked_and_the_headline_gives_both_errors_and_the_limit():
    """A planted wrong output (max error 0.5 where plain bf16 attention errs by 0.016: a field ignored) on the
    faster side: the headline says it is wrong, with its error, plain attention's and the limit (10× plain's), and
    ranks nothing; no note says a speed of it beside another's. The same side 9× plain's is still ranked: the gate is
    no tighter than a wrong answer needs."""
    from explain_helpers import assert_numbers_are_the_runs, comparison_context

    from profiling.explain import facts

    a, b = run(FLASH, 0.096, seed=1), run(CUDNN, 0.060, seed=2)
    plain = b.accuracy.naive_max_abs_error
    bad = wrong(b, max_abs_error=0.5)
    assert decision(a, bad).kind == "wrong" and decision(a, bad).wrong == ("b",)
    c = Comparison(a, bad)
    explanation = explain(c)
    title = explanation.headline.title
    assert title.startswith("SDPA · cuDNN [B] gives a wrong answer on the H200, so it is not ranked: SDPA · cuDNN "
                            f"[B]'s output is off from fp64 by up to 5.0e-01, past {text.error(10 * plain)} (10× plain "
                            f"attention's in bf16, {text.error(plain)}).")
    assert "faster" not in title and "slower" not in title and "level" not in title, title
    assert_numbers_are_the_runs(explanation.headline, {"a": a, "b": bad})
    for n in explanation.notes:  # no ranking of the wrong side anywhere: the why note, host ranking, #1 of 2, the A100
        assert n.rule not in ("speed", "host_ranking", "ranking_vs_blog"), n.title
        assert n.side == "a" or "faster" not in n.title + n.body, n.title
        assert_numbers_are_the_runs(n, comparison_context(c, n))
    limit = facts.WRONG_FACTOR * plain
    assert headline(a, wrong(b, max_abs_error=0.9 * limit)).title.startswith("SDPA · cuDNN [B] is 1.6× faster")
    assert facts.wrong_answer(wrong(b, max_abs_error=1.01 * limit)).what == "output"


def test_a_wrong_gradient_is_never_ranked_and_fp32_has_a_floor():
    """A training step whose dk is wrong is not ranked, and the headline names dk with its own two errors. In fp32,
    plain attention errs by ~1e-6: an answer 100× that (a TF32 kernel's rounding) is right, one past 10× 2^-10 not."""
    from profiling.explain import facts

    step = next(r for r in RUNS if r.variant == "sdpa_flash" and r.workload.passes == "fwd+bwd" and r.accuracy.grads)
    other = next(r for r in RUNS if r.variant == "sdpa_cudnn" and r.workload == step.workload)
    a, b = run(step, 1.0, seed=1), run(other, 0.5, seed=2)
    dk = b.accuracy.naive_grads["dk"]
    title = headline(a, wrong(b, grads=b.accuracy.grads | {"dk": 0.5})).title
    assert "[B] gives a wrong answer" in title and "'s dk is off from fp64 by up to 5.0e-01, past " \
        f"{text.error(10 * dk)} (10× plain attention's in bf16, {text.error(dk)})" in title, title
    assert "faster" not in title
    fp32 = next(r for r in RUNS if r.workload.dtype == "fp32" and r.ok and r.accuracy)
    plain = fp32.accuracy.naive_max_abs_error
    assert plain < facts.ERROR_FLOOR["fp32"]
    assert facts.wrong_answer(wrong(fp32, max_abs_error=100 * plain)) is None
    gate = facts.wrong_answer(wrong(fp32, max_abs_error=0.02))
    assert gate is not None and gate.limit(facts.measured(fp32, gate.plain, "error")).value == 10 * 2.0**-10
    peer = next(r for r in RUNS if r.workload == fp32.workload and r.variant != fp32.variant and r.ok)
    title = headline(run(peer, 1.0, seed=1), wrong(run(fp32, 0.5, seed=2), max_abs_error=0.02)).title
    assert f"past 9.8e-03 (10× 9.8e-04, TF32's rounding, as plain attention in fp32 is off by only " \
        f"{text.error(plain)})" in title, title


def test_a_sweep_point_whose_answer_is_wrong_is_never_said_faster():
    """A sweep where B is 2.5× faster at every length but wrong at each: the headline says B's answer is wrong at
    the longest length both ran, and no crossover ranks it."""
    from sweep_helpers import run as point, synthetic

    from profiling.results import Accuracy
    from profiling.explain import explain_sweep

    def answer(error: float) -> Accuracy:
        return Accuracy(max_abs_error=error, relative_error=0.0, naive_max_abs_error=0.016)
    lengths = [256, 512, 1024, 2048]
    result = synthetic([point("naive", s, 1e-6 * s**2, seed=s, accuracy=answer(0.01)) for s in lengths]
                       + [point("sdpa_flash", s, 4e-7 * s**2, seed=s + 1, accuracy=answer(0.5)) for s in lengths])
    explanation = explain_sweep(result)
    title = explanation.headline.title
    assert title.startswith("At S=2,048 SDPA · FlashAttention [B] gives a wrong answer on the H200"), title
    assert "faster" not in title
    assert not any(n.rule == "sweep_crossover" or "faster" in n.body for n in explanation.notes)
