"""A sweep in words: the headline and the notes over every pair of the recorded H200 sweeps (one loop), and on
synthetic runs where each fact is made to happen, or not: every number read again from the runs it names, the
headline's kind the verdict's own test's, no exponent without a fit that supports it, no crossover the test cannot
rank, a stopped sweep that says why, short notes, never "here"."""
from __future__ import annotations

import dataclasses
import itertools
import re
import statistics

import pytest
from explain_helpers import assert_numbers_are_the_runs
from oracles import median_ratio, unconfirmed_gap_said
from sweep_helpers import H200, RECORDED, run, synthetic

from profiling import reports, stats, text
from profiling.explain import TOP, explain_sweep
from profiling.explain.curves import crossovers, slopes, stops_fitting
from profiling.explain.environment_rules import refusal
from profiling.explain.facts import label
from profiling.explain.sweep_notes import MAX_WORDS, WEIGHTS
from profiling.explain.verdict import decision, figure
from profiling.results import DOES_NOT_FIT, OUT_OF_MEMORY, Sweep

HERE = re.compile(r"\bhere\b", re.I)
EXPONENT = re.compile(r"S\^-?\d")
S = [256, 512, 1024, 2048, 4096]
CPU = dataclasses.replace(H200, device="cpu", device_name="Some CPU", compute_capability=None, total_memory_bytes=None)


def assert_words_hold(result: Sweep):
    """Short notes, every number read again from the runs, no "here", ranked by weight; the headline on the runs'
    own device, its numbers the runs'. Returns the explanation."""
    explanation = explain_sweep(result)
    headline = explanation.headline
    assert not HERE.search(headline.title) and text.on_device(result.environment) in headline.title, headline.title
    assert headline.side == "pair" and headline.rule == "sweep_headline"
    # the runs' numbers are facts read again from the runs; the words besides them quote why the sweep stopped (its
    # own words) and the test's threshold (a constant of the test, not a figure of the runs)
    ended = f"The sweep stopped early ({result.stopped}). " if result.stopped else ""
    assert headline.title.startswith(ended)
    said = re.sub(r"are within \d+% on", "are within … on", headline.title.removeprefix(ended))
    assert_numbers_are_the_runs(dataclasses.replace(headline, title=said), {"sweep": result})
    for note in explanation.notes:
        words = f"{note.title} {note.body}"
        assert text.word_count(words) <= MAX_WORDS and len(words.split()) <= MAX_WORDS, words
        assert not any(HERE.search(w) for w in (note.title, note.body, *note.evidence)), note.title
        assert note.side in ("a", "b", "pair") or note.side in result.variants, note.side
        assert note.weight == WEIGHTS[note.rule]
        assert_numbers_are_the_runs(note, {"sweep": result})
    assert [n.weight for n in explanation.notes] == sorted((n.weight for n in explanation.notes), reverse=True)
    return explanation


def longest_both_ran(result: Sweep) -> int | None:
    ran = [{result.value(r) for r in result.of(v) if r.ok and r.gpu_ms} for v in (result.a, result.b)]
    return max(ran[0] & ran[1], default=None)


# -- the recorded sweeps --------------------------------------------------------------------------------------
def headline_says(result: Sweep, s: int) -> str:
    """What the headline must say of A and B at S=`s`, from the verdict's own test on the verdict's figure."""
    ra, rb = result.at(result.a, s), result.at(result.b, s)
    v = decision(ra, rb)
    if v.kind == "ranked":
        fast, slow = (ra, rb) if v.faster == "a" else (rb, ra)
        ratio = median_ratio(getattr(slow, v.path).samples_ms, getattr(fast, v.path).samples_ms)
        tag = "[A]" if fast is ra else "[B]"
        return f"{label(fast.variant)} {tag} is {text.times(ratio)} faster than"
    if v.kind == "level":
        qa, qb = (statistics.quantiles(getattr(r, v.path).samples_ms, n=4, method="inclusive") for r in (ra, rb))
        if qa[2] < qb[0] or qb[2] < qa[0]:  # middle halves apart: a gap the test cannot confirm is not "level"
            return unconfirmed_gap_said(getattr(ra, v.path).samples_ms, getattr(rb, v.path).samples_ms)
    return {"level": "are level within noise", "no_practical_difference": "that counts as a practical difference",
            "too_few": "samples on a side are too few for the test", "inconsistent": "are not ranked"}[v.kind]


def test_every_recorded_pair_is_told_in_short_true_sentences():
    pairs = [(s, a, b) for s in RECORDED for a, b in itertools.combinations(s.variants, 2)]
    assert len(pairs) >= 28 + 10
    for recorded, a, b in pairs:
        result = recorded.select([a, b])
        explanation = assert_words_hold(result)
        title = explanation.headline.title
        s = longest_both_ran(result)
        if s is None:  # one side never ran: the headline says so, with its refusal's reason
            refused = next(v for v in (a, b) if not any(r.ok for r in result.of(v)))
            assert title.startswith("No length where both ran on the H200: "), title
            assert f"{label(refused)} [{'A' if refused == a else 'B'}] did not run (" in title, title
            assert refusal(result.of(refused)[0])[0] in title
            continue
        ra, rb = result.at(a, s), result.at(b, s)
        path, what = figure(ra, rb)
        symbol = {"seq_len": "S", "batch": "B"}[result.axis]  # the letter a reader knows the axis by
        assert title.startswith(f"At {symbol}={s:,} "), title
        assert f"({what})" in title and text.ms(getattr(ra, path).median_ms) in title
        assert text.ms(getattr(rb, path).median_ms) in title
        assert headline_says(result, s) in title, title
        # a crossover only between neighbouring ranked lengths, ranked in opposite orders
        said = [n for n in explanation.notes if n.rule == "sweep_crossover"]
        assert len(said) == len(crossovers(result))
        for cross in crossovers(result):
            before, after = (decision(result.at(a, x), result.at(b, x)) for x in (cross.s_before, cross.s_after))
            assert before.kind == after.kind == "ranked" and before.faster != after.faster
        stops = [n for n in explanation.notes if n.rule == "sweep_stops"]
        assert len(stops) == len(stops_fitting(result))
        for stop, note in zip(stops_fitting(result), stops):
            if stop.status == DOES_NOT_FIT:
                assert (f"needs {text.size(stop.needed_bytes)}, {text.size(stop.available_bytes)} available"
                        in note.title) and "GiB" in note.title
            else:
                failed = result.at(stop.variant, stop.seq_len)  # the figures PyTorch's message gave, read again
                assert note.title == (f"{label(stop.variant)} ran out of memory at S={stop.seq_len:,}: "
                                      f"{text.size(failed.needed_bytes)} asked, {text.size(failed.available_bytes)} "
                                      f"free, {text.size(failed.held_bytes)} held unallocated by PyTorch")
        fits = {(f.variant, f.quantity): f for f in slopes(result)}
        for note in (n for n in explanation.notes if n.rule.startswith("sweep_slope") or n.rule == "sweep_noisy"):
            variant = {"a": a, "b": b}[note.side]
            fit = fits[variant, "memory" if "peak memory" in note.title else "time"]
            assert fit.supported == (note.rule != "sweep_noisy")
            if fit.supported:
                assert f"grows as {text.power(fit.exponent, symbol)}" in note.title
                assert "as expected" in note.title or f"not {text.power(fit.expected, symbol)}" in note.title
                assert note.facts["exponent"].value == pytest.approx(fit.exponent)
            else:
                assert not EXPONENT.search(f"{note.title} {note.body}") and not note.facts


def test_the_shipped_recording_keeps_every_sample_and_ranks_by_them():
    """Every recorded point keeps its samples, so the test can rank: flash over memory-efficient at every length
    from S=512 on (GPU-bound), by the median ratio, agreeing with scipy's Mann-Whitney U."""
    for recorded in RECORDED:
        assert all(r.timing.kept == r.timing.samples >= 8 for r in recorded.runs if r.ok)
    result = RECORDED[0].select(["sdpa_efficient", "sdpa_flash"])
    for s in result.seq_lens[2:]:
        ra, rb = result.at("sdpa_efficient", s), result.at("sdpa_flash", s)
        v = decision(ra, rb)
        assert (v.kind, v.faster, v.path) == ("ranked", "b", "timing"), s
        assert v.ratio == pytest.approx(median_ratio(ra.timing.samples_ms, rb.timing.samples_ms))
        scipy_stats = pytest.importorskip("scipy.stats")
        p = scipy_stats.mannwhitneyu(ra.timing.samples_ms, rb.timing.samples_ms, method="exact").pvalue
        assert p < stats.LEVEL and v.p == pytest.approx(p, rel=1e-6)
    assert explain_sweep(result).headline.title.startswith(
        "At S=16,384 SDPA · FlashAttention [B] is 2.3× faster than SDPA · memory-efficient [A] on the H200: ")


def test_the_recorded_stops_are_told_with_the_recorded_numbers():
    result = RECORDED[0].select(["naive", "sdpa_math"])
    stopping = explain_sweep(result)
    naive, math_ = result.at("naive", 16384), result.at("sdpa_math", 16384)
    assert [n.title for n in stopping.notes[:2]] == [
        f"Naive (masked_fill) stops at S=16,384: needs {text.size(naive.needed_bytes)}, "
        f"{text.size(naive.available_bytes)} available",
        f"SDPA · math stops at S=16,384: needs {text.size(math_.needed_bytes)}, {text.size(math_.available_bytes)} "
        "available"]
    assert [n.title for n in stopping.notes[:2]] == [
        "Naive (masked_fill) stops at S=16,384: needs 136.4 GiB, 124.5 GiB available",
        "SDPA · math stops at S=16,384: needs 373.7 GiB, 124.5 GiB available"]
    assert [n.side for n in stopping.notes[:2]] == ["a", "b"]
    assert stopping.headline.title == (
        "At S=8,192 Naive (masked_fill) [A] is 2.1× faster than SDPA · math [B] on the H200: 86.466 ms vs "
        "179.670 ms per forward (GPU time, CUDA events).")


def test_a_crossover_across_two_figures_names_both_and_interpolates_no_length():
    """FA4 is host-bound up to S=1,024 (compared back to back there) and faster on GPU time from S=2,048: the note
    says which figure ranked each side and gives the span, not an S interpolated between two different figures."""
    result = RECORDED[0].select(["sdpa_flash", "fa4"])
    (cross,) = crossovers(result)
    assert (cross.s_before, cross.s_after, cross.path, cross.path_after) == (1024, 2048, "back_to_back", "timing")
    (said,) = [n for n in explain_sweep(result).notes if n.rule == "sweep_crossover"]
    assert said.title == "FlashAttention-4 overtakes SDPA · FlashAttention between S=1,024 and 2,048"
    assert said.body == ("SDPA · FlashAttention is 2.1× faster at S=1,024 (back to back), "
                         "FlashAttention-4 1.5× at S=2,048 (GPU time); on GPU time the latter leads at both.")
    assert "S=1,024, GPU time: FlashAttention-4 0.071 ms" in said.evidence and \
        "S=1,024, GPU time: SDPA · FlashAttention 0.095 ms" in said.evidence
    one_figure = RECORDED[0].select(["sdpa_flash", "sdpa_cudnn"])
    (cross,) = crossovers(one_figure)
    assert cross.same_figure and cross.s_before < cross.seq_len < cross.s_after


# -- the headline on synthetic runs: each kind where it is the true one -----------------------------------------
def test_the_headline_names_the_faster_by_the_medians_ratio_on_the_verdicts_figure():
    result = synthetic([run("naive", s, 1e-6 * s**2, seed=s) for s in S]
                       + [run("sdpa_flash", s, 4e-7 * s**2, seed=s + 1) for s in S])
    a, b = result.at("naive", 4096), result.at("sdpa_flash", 4096)
    ratio = median_ratio(a.timing.samples_ms, b.timing.samples_ms)
    explanation = assert_words_hold(result)
    assert explanation.headline.title == (
        f"At S=4,096 SDPA · FlashAttention [B] is {text.times(ratio)} faster than Naive (masked_fill) [A] on the "
        f"H200: {text.ms(b.gpu_ms)} vs {text.ms(a.gpu_ms)} per forward (GPU time, CUDA events).")  # in the order named
    assert explanation.headline.facts["ratio"].value == pytest.approx(ratio)
    cpu = synthetic([dataclasses.replace(r, environment=CPU) for r in result.runs], env=CPU)
    assert ("faster than Naive (masked_fill) [A] on the CPU: " in explain_sweep(cpu).headline.title
            and explain_sweep(cpu).headline.title.endswith("per forward (wall time)."))


def test_a_host_bound_side_is_compared_on_the_back_to_back_pace():
    runs = [run("naive", 1024, 1.0, seed=1, back_to_back=run("x", 1, 1.3, seed=3).timing, bound="host"),
            run("sdpa_flash", 1024, 0.8, seed=2, back_to_back=run("x", 1, 0.82, seed=4).timing, bound="gpu")]
    result = synthetic(runs)
    headline = assert_words_hold(result).headline
    assert headline.facts["a"].source.endswith(".back_to_back.median_ms")
    assert "(back to back: the pace of a loop of calls)" in headline.title
    assert "SDPA · FlashAttention [B] is 1.6× faster" in headline.title


@pytest.mark.parametrize("gap, spread, n, says", [
    (1.015, 0.001, 50, "differ by 1.5% on the H200, under the 3% that counts as a practical difference: "),
    (1.05, 0.2, 20, "are level within noise on the H200: "),                     # a gap inside the noise
    (0.5, 0.01, 4, "cannot be ranked on the H200: 4 samples on a side are too few for the test: "),  # 4 a side
])
def test_the_headline_says_only_what_the_test_supports(gap, spread, n, says):
    result = synthetic([run("naive", s, 1.0, spread=spread, n=n, seed=2 * s) for s in S]
                       + [run("sdpa_flash", s, gap, spread=spread, n=n, seed=2 * s + 1) for s in S])
    title = assert_words_hold(result).headline.title
    assert title.startswith(f"At S=4,096 Naive (masked_fill) [A] and SDPA · FlashAttention [B] {says}"), title
    assert " faster " not in title and "1.0×" not in title


def test_the_same_variant_twice_is_never_a_winner():
    result = synthetic([run("naive", 1024, 1.0, seed=1)], variants=("naive", "naive"))
    assert "are the same variant, so no winner" in explain_sweep(result).headline.title


def test_no_length_where_both_ran():
    result = synthetic([run("naive", 256, 1.0), run("naive", 512, status=DOES_NOT_FIT, needed_bytes=2**40,
                                                     available_bytes=2**30, estimated_extra_bytes=2**39),
                        run("sdpa_flash", 256, status="unsupported"), run("sdpa_flash", 512, status="unsupported")])
    assert explain_sweep(result).headline.title == (
        "No length where both ran on the H200: Naive (masked_fill) [A] ran only at S=256; SDPA · FlashAttention "
        "[B] did not run (not supported).")


@pytest.mark.parametrize("both_ran", [True, False])
def test_a_stopped_sweep_says_first_why_it_ended(both_ran):
    why = "time budget: S=8,192 would take about 93 s, 41 s of 90 s left"
    runs = [run("naive", 256, 1.0, seed=1)] + ([run("sdpa_flash", 256, 0.5, seed=2)] if both_ran else [])
    title = assert_words_hold(synthetic(runs, stopped=why)).headline.title
    assert title.startswith(f"The sweep stopped early ({why}). "), title
    assert title.removeprefix(f"The sweep stopped early ({why}). ").startswith(
        "At S=256 " if both_ran else "No length where both ran")


# -- the notes on synthetic runs ---------------------------------------------------------------------------------
def test_a_crossover_note_exactly_where_the_ranked_order_changes():
    runs = [run("naive", s, 1e-6 * s**2) for s in S] + \
           [run("sdpa_flash", s, 1e-6 * 1024**0.5 * s**1.5) for s in S if s != 1024]
    result = synthetic(runs)
    (cross,) = crossovers(result)
    note = assert_words_hold(result).notes[0]  # first: where the order changes matters most
    assert (note.rule, note.side) == ("sweep_crossover", "pair")
    assert note.title == "SDPA · FlashAttention overtakes Naive (masked_fill) near S=1,024 (GPU time)"
    assert note.body == ("Naive (masked_fill) is 1.4× faster at S=512, SDPA · FlashAttention 1.4× at S=2,048; "
                         "between them their GPU times grow as S^2 and S^1.50.")
    assert note.facts["r0"].value == pytest.approx(cross.ratio_before)
    assert note.facts["e0"].value == pytest.approx(2.0) and note.facts["e1"].value == pytest.approx(1.5)


def test_no_crossover_note_where_the_test_cannot_rank_the_gap():
    runs = [run("naive", s, 1.0, seed=2 * s) for s in S] + \
           [run("sdpa_flash", s, 1.005 if s < 1024 else 0.995, seed=2 * s + 1) for s in S]
    explanation = assert_words_hold(synthetic(runs))
    assert not [n for n in explanation.notes if n.rule == "sweep_crossover" or "overtakes" in n.title]


def _stop(**fields):
    return run("naive", 2048, status=DOES_NOT_FIT, **fields)


@pytest.mark.parametrize("stop, title, body", [
    (_stop(needed_bytes=200 * 2**30, available_bytes=126 * 2**30, reference_bytes=2**30,
           estimated_extra_bytes=190 * 2**30),
     "Naive (masked_fill) stops at S=2,048: needs 200.0 GiB, 126.0 GiB available",
     "Refused before anything was allocated; longer sequences need more still. The longest length it ran is "
     "S=1,024."),
    (_stop(needed_bytes=130 * 2**30, available_bytes=126 * 2**30, reference_bytes=10 * 2**30,
           estimated_extra_bytes=2 * 2**30),  # 120 GiB without the fp64 check: the check is what stops it
     "Naive (masked_fill) stops at S=2,048: needs 130.0 GiB, 126.0 GiB available",
     "Without the fp64 accuracy check (10.0 GiB) it would have fitted; the check is what refused it. The longest "
     "length it ran is S=1,024."),
    (run("naive", 2048, status=OUT_OF_MEMORY, reason="out of memory on NVIDIA H200: CUDA out of memory."),
     "Naive (masked_fill) ran out of memory at S=2,048",
     "Longer sequences are not tried. The longest length it ran is S=1,024."),
    (run("naive", 2048, status=OUT_OF_MEMORY, needed_bytes=32 * 2**30, available_bytes=2**30,
         held_bytes=29 * 2**30, reason="out of memory on NVIDIA H200: CUDA out of memory. Tried to allocate 32.00 GiB."),
     "Naive (masked_fill) ran out of memory at S=2,048: 32.0 GiB asked, 1.0 GiB free, 29.0 GiB held unallocated by "
     "PyTorch",
     "Longer sequences are not tried. The longest length it ran is S=1,024."),
])
def test_a_stop_note_says_what_stopped_it(stop, title, body):
    result = synthetic([run("naive", s, 1e-6 * s**2) for s in (256, 512, 1024)] + [stop]
                       + [run("sdpa_flash", s, 1e-7 * s**2, seed=1) for s in (256, 512, 1024, 2048)])
    note = next(n for n in assert_words_hold(result).notes if n.rule == "sweep_stops")
    assert (note.title, note.body, note.side) == (title, body, "a")


def test_the_fp64_check_is_not_blamed_for_a_point_that_would_not_fit_without_it():
    """200 GiB needed, 126 GiB free, of which the fp64 check is 1 GiB: without the check the point still needs
    199 GiB. Its forward alone (1 GiB) fitting says nothing about the inputs, mask and output it needs as well."""
    stop = _stop(needed_bytes=200 * 2**30, available_bytes=126 * 2**30, reference_bytes=2**30,
                 estimated_extra_bytes=2**30)
    result = synthetic([run("naive", s, 1e-6 * s**2) for s in (256, 512, 1024)] + [stop]
                       + [run("sdpa_flash", s, 1e-7 * s**2, seed=1) for s in (256, 512, 1024, 2048)])
    note = next(n for n in explain_sweep(result).notes if n.rule == "sweep_stops")
    assert note.body.startswith("Refused before anything was allocated")


def test_slopes_against_what_the_algorithm_predicts():
    runs = [run("naive", s, 0.1 + 1e-6 * s**2, mem=4 * s**2) for s in [128, *S]] + \
           [run("sdpa_flash", s, 2e-7 * s**2, mem=1000 * s**2, seed=1) for s in [128, *S]]
    notes = {n.title: n for n in assert_words_hold(synthetic(runs)).notes}
    time = notes["Naive (masked_fill): time per forward grows as S^1.85, as expected"]
    assert time.body == ("Fitted over S=512–4,096 (4 lengths): the work is S²·D per head. All 6 lengths: S^1.48; "
                         "a fixed per-call cost hides short S.")
    assert time.rule == "sweep_slope" and time.side == "a"
    wrong = notes["SDPA · FlashAttention: peak memory grows as S^2, not S^1"]
    assert wrong.rule == "sweep_slope_unexpected" and wrong.weight > time.weight and wrong.side == "b"
    assert wrong.body == "Over S=512–4,096 (4 lengths); expected S^1: a fused kernel stores no S×S scores."


def test_noisy_points_are_too_noisy_to_fit_and_state_no_exponent():
    # time falling then rising, quartiles 30% wide
    runs = [run("naive", s, ms, spread=0.3, seed=s) for s, ms in zip(S[:4], (1.0, 0.8, 0.9, 1.1))] + \
           [run("sdpa_flash", s, 1e-6 * s**2, seed=1) for s in S[:4]]
    explanation = assert_words_hold(synthetic(runs))
    (noisy,) = [n for n in explanation.notes if n.rule == "sweep_noisy"]
    assert noisy.title == "Naive (masked_fill): time per forward too noisy to fit over S=256–2,048 (4 lengths)"
    assert noisy.side == "a" and noisy.facts == {} and not EXPONENT.search(f"{noisy.title} {noisy.body}")
    assert "no exponent is stated" in noisy.body and any("R² 0.1" in e or "R² 0.2" in e for e in noisy.evidence)
    assert noisy is explanation.notes[-1]  # ranked last
    assert not [n for n in explanation.notes if n.side == "a" and "time per forward grows" in n.title]


def test_two_clean_lengths_are_too_few_to_fit_not_too_noisy():
    result = synthetic([run("naive", s, 1e-6 * s**2) for s in (256, 512)]
                       + [run("sdpa_flash", s, 1e-7 * s**2, seed=1) for s in (256, 512)])
    notes = [n for n in assert_words_hold(result).notes if n.rule in ("sweep_noisy", "sweep_slope")
             and "time per forward" in n.title]
    assert notes == []  # two points always make a line: no finding, and not "too noisy" either


def test_the_bound_note_sets_the_host_s_call_against_that_call_s_warm_gpu_time():
    """The host figures are of one whole call the host issues (a forward, or a training step), taken as a warm loop
    in every mode: the sweep's bound note names that call and sets its host cost against the same call's warm GPU
    time (a step's, not its forward's; warm, where the sweep's own figures are cold), re-derived here from the
    recorded H200 sweeps."""
    seen = set()
    for result in RECORDED:
        for n in explain_sweep(result).notes:
            if n.rule != "sweep_bound" or "issuing" not in n.body:
                continue
            (i,) = {int(re.search(r"runs\[(\d+)\]", q.source).group(1)) for q in n.facts.values()}  # one run's
            r = result.runs[i]
            s = result.value(r)
            assert n.title.startswith(label(r.variant) + ":")
            call = "step" if result.workload.passes != "fwd" else "forward"
            warm = "" if result.workload.timing == "warm" else " warm"
            assert n.body == (f"At {text.axis_symbol(result.axis)}={s:,} issuing a {call} costs the CPU "
                              f"{text.ms(r.host_cost.median_ms)}; the GPU runs it in {text.ms(r.warm_call_ms)}{warm}."), \
                n.body
            seen.add((call, result.workload.timing))
    assert {("forward", "warm"), ("step", "warm"), ("forward", "cold")} <= seen, seen


def test_bound_and_kernel_changes():
    host = run("x", 1, 2.0, seed=5, n=40).timing
    runs = [run("naive", 256, 1.0, bound="host", host_cost=host, kernels=[("gemm", 2), ("softmax_warp_forward", 1)]),
            run("naive", 512, 4.0, bound="gpu", kernels=[("gemm", 2), ("cunn_SoftMaxForwardReg", 1),
                                                         ("elementwise_kernel [where]", 3)]),
            run("sdpa_flash", 256, 1.0, seed=1), run("sdpa_flash", 512, 2.0, seed=1)]
    result = synthetic(runs)
    notes = {n.rule: n for n in assert_words_hold(result).notes}
    assert notes["sweep_bound"].title == "Naive (masked_fill): host-bound up to S=256, GPU-bound from S=512"
    assert notes["sweep_bound"].body == (f"At S=256 issuing a forward costs the CPU {text.ms(host.median_ms)}; the GPU "
                                         f"runs it in {text.ms(runs[0].gpu_ms)}.")
    assert notes["sweep_kernels"].title == "Naive (masked_fill): 3 → 6 kernels per forward from S=256 to 512"
    assert notes["sweep_kernels"].body == ("Adds cunn_SoftMaxForwardReg, elementwise · where ×3; drops "
                                           "softmax_warp_forward. Time grows as S^2 across the step.")


# -- the notes rendered ------------------------------------------------------------------------------------------
def test_the_markdown_shows_the_headline_the_top_three_and_folds_the_rest():
    explanation = explain_sweep(RECORDED[0].select(["naive", "sdpa_math"]))
    markdown = reports.sweep_markdown(explanation)
    assert markdown.startswith("**At S=8,192 Naive (masked\\_fill) \\[A\\] is 2.1× faster than SDPA · math \\[B\\]")
    for i, note in enumerate(explanation.notes[:TOP]):
        assert f"{i + 1}. **{reports._md(note.title)}**" in markdown
    assert "_(A · over S)_" in markdown and "_(B · over S)_" in markdown
    assert f"<summary>{len(explanation.notes) - TOP} more notes over S</summary>" in markdown
    assert markdown.count("<summary>evidence</summary>") == len(explanation.notes)
    assert not HERE.search(markdown)
    plain = reports.notes_text(explanation, evidence=False)
    assert plain.startswith(f"Verdict: {explanation.headline.title}") and "\n    - " not in plain
    assert all(n.title.replace("`", "") in plain for n in explanation.notes)
    present = reports.present_markdown(explanation)
    assert present.split("\n\n")[0] == f"## {reports._md(explanation.headline.title)}"
    top = explanation.notes[0]  # the one reason, with its body (a title alone gave none)
    assert present.split("\n\n")[1:] == [f"**{reports._md(top.title)}**: {reports._md(top.body.replace('`', ''))}"]


def test_a_crossing_of_the_loops_pace_says_where_the_gpu_times_had_already_crossed():
    """flash vs FA4's recorded sweep: "FA4 overtakes flash between S=1,024 and 2,048" on the verdict's figure, back to
    back at 1,024 (a side host-bound) and GPU time at 2,048, while on GPU time FA4 was already the faster at 1,024.
    Every recorded crossing whose earlier point is compared back to back says so exactly where the GPU medians there
    rank the other way, re-derived from the runs."""
    from test_explain_recorded import SWEEP_PAIRS

    from profiling.explain.curves import crossovers

    seen = 0
    for sweep in SWEEP_PAIRS:
        notes = [n for n in explain_sweep(sweep).notes if n.rule == "sweep_crossover"]
        for f, n in zip(crossovers(sweep), notes):
            before, after = (sweep.at(v, f.s_before) for v in (f.faster_before, f.faster_after))
            already = f.path != "timing" and after.timing.median_ms < before.timing.median_ms
            assert ("; on GPU time the latter leads at " in n.body) == already, (sweep.a, sweep.b, n.body)
            if already:  # "at both" only where it leads at the later point too
                later = [sweep.at(v, f.s_after).timing.median_ms for v in (f.faster_after, f.faster_before)]
                assert ("leads at both" in n.body) == (later[0] < later[1]), n.body
            seen += already
    assert seen


@pytest.mark.parametrize("load, busy", [(8.8, True), (1.5, False)])
def test_a_cpu_sweep_timed_beside_other_work_says_the_load_with_its_exponent(load, busy):
    """A CPU sweep whose time barely grows (S^0.09 where S^2 is expected) while the load average was 8.8 on 2
    threads: the slope's note says the load and does not state 'not S^2' as the variant's; at 1.5 (a quiet 2-thread
    machine) it states the exponent against the expected one as before."""
    cpu = dataclasses.replace(H200, device="cpu", device_name="a CPU", cpu_threads=2, total_memory_bytes=None)
    S = [256, 512, 1024, 2048]
    runs = [run(v, s, ms * s**0.09, env=cpu, seed=i, load_before=load, load_after=load)
            for i, (v, ms) in enumerate((("naive", 1.0), ("sdpa_flash", 0.5))) for s in S]
    result = synthetic(runs, env=cpu)
    (slope,) = [n for n in explain_sweep(result).notes if n.rule.startswith("sweep_slope") and "Naive" in n.title]
    if busy:
        assert f"on a busy machine (load average {load:.1f} on 2 CPU threads)" in slope.title, slope.title
        assert ", not " not in slope.title
    else:
        assert "busy" not in slope.title and slope.title.endswith(", not S^2"), slope.title
