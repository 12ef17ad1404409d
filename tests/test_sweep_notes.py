"""A sweep in words: the headline and the notes over every pair of the recorded H200 sweeps, and on synthetic
points where each fact is made to happen (or not)."""
from __future__ import annotations

import dataclasses
import itertools
import json
import re
from pathlib import Path

import pytest
from explain_helpers import assert_numbers_are_the_runs

from profiling import reports, text
from profiling.explain.facts import label
from profiling.explain import explain_sweep
from profiling.explain.sweep_notes import MAX_WORDS
from profiling.results import Timing
from profiling.sweep import KernelCount, Sweep, SweepPoint, crossovers, stops_fitting
from profiling.workload import Workload

RECORDED = [Sweep.from_dict(d) for d in json.loads(
    (Path(__file__).parent / "data" / "h200-torch2.11" / "sweeps.json").read_text())]
PAIRS = [(i, a, b) for i, s in enumerate(RECORDED) for a, b in itertools.combinations(s.variants, 2)]
H200 = RECORDED[0].environment
HERE = re.compile(r"\bhere\b", re.I)


def pair_id(pair) -> str:
    i, a, b = pair
    return f"{a}-{b}-D{RECORDED[i].workload.head_dim}"


def longest_common(result: Sweep) -> tuple[int, SweepPoint, SweepPoint]:
    ran = [{p.seq_len: p for p in result.of(v) if p.ok} for v in (result.a, result.b)]
    s = max(set(ran[0]) & set(ran[1]))
    return s, ran[0][s], ran[1][s]


def assert_words_hold(result: Sweep) -> None:
    """Short notes, numbers read from the points, no "here", ranked by weight."""
    explanation = explain_sweep(result)
    assert not HERE.search(explanation.headline) and text.on_device(result.environment) in explanation.headline
    for note in explanation.notes:
        assert text.word_count(f"{note.title} {note.body}") <= MAX_WORDS, (note.title, note.body)
        assert len(f"{note.title} {note.body}".split()) <= MAX_WORDS
        assert not any(HERE.search(words) for words in (note.title, note.body, *note.evidence)), note.title
        assert_numbers_are_the_runs(note, {"sweep": result})
    assert [n.weight for n in explanation.notes] == sorted((n.weight for n in explanation.notes), reverse=True)


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_every_recorded_pair_is_told_in_short_true_sentences(pair):
    i, a, b = pair
    result = RECORDED[i].select([a, b])
    assert_words_hold(result)
    explanation = explain_sweep(result)
    s, pa, pb = longest_common(result)
    fast, slow = (pa, pb) if pa.gpu_ms <= pb.gpu_ms else (pb, pa)
    tag = {a: "[A]", b: "[B]"}
    assert explanation.headline.startswith(f"At S={s} ")
    if " faster than " in explanation.headline:  # the faster one first, by the points' own ratio
        assert f"{label(fast.variant)} {tag[fast.variant]} " in explanation.headline.split(" faster than ")[0]
        assert text.times(slow.gpu_ms / fast.gpu_ms) in explanation.headline
    else:
        assert "level within noise" in explanation.headline
    assert text.ms(pa.gpu_ms) in explanation.headline and text.ms(pb.gpu_ms) in explanation.headline
    said = [n for n in explanation.notes if n.rule == "sweep_crossover"]
    assert len(said) == len(crossovers(result))
    for stop, note in zip(stops_fitting(result), [n for n in explanation.notes if n.rule == "sweep_stops"]):
        if stop.status == "does not fit":
            assert f"needs {text.size(stop.needed_bytes)}, {text.size(stop.available_bytes)} available" in note.title
            assert "GiB" in note.title


def test_the_recorded_crossover_and_stops_are_told():
    crossing = explain_sweep(RECORDED[1].select(["sdpa_efficient", "sdpa_flash"]))
    assert crossing.notes[0].rule == "sweep_crossover" and crossing.notes[0].side == "pair"
    assert crossing.notes[0].title == "SDPA · FlashAttention overtakes SDPA · memory-efficient near S=567"
    stopping = explain_sweep(RECORDED[0].select(["naive", "sdpa_math"]))
    assert [n.title for n in stopping.notes[:2]] == [
        "Naive (masked_fill) stops at S=16384: needs 136.1 GiB, 124.5 GiB available",
        "SDPA · math stops at S=16384: needs 373.4 GiB, 124.5 GiB available"]
    assert [n.side for n in stopping.notes[:2]] == ["a", "b"]


def test_the_recorded_headline_ranks_the_longest_length_both_ran():
    explanation = explain_sweep(RECORDED[1].select(["sdpa_efficient", "sdpa_flash"]))
    assert explanation.headline == (
        "At S=131072 SDPA · FlashAttention [B] is 1.8× faster than SDPA · memory-efficient [A] on the H200: "
        "215.983 ms vs 397.214 ms per forward (GPU, CUDA events).")


def test_five_samples_a_side_are_too_few_to_call_an_order():
    # every sample of one below every sample of the other, but five of each: the verdict's test needs eight
    explanation = explain_sweep(synthetic([point("naive", 1024, 2.0, samples=5), point("sdpa_flash", 1024, 1.0,
                                                                                        samples=5)]))
    assert explanation.headline.endswith("but from 5 samples: too few to call it.")
    assert "reads 2.0× faster" in explanation.headline


# -- synthetic points ----------------------------------------------------------------------------------
def point(variant, s, ms=None, mem=None, status="ok", samples=50, spread=0.01, bound=None, kernels=(),
          **extra) -> SweepPoint:
    timing = Timing(ms, ms * (1 - spread), ms * (1 + spread), samples, "cuda events", ms * (1 - spread / 2),
                    ms * (1 + spread / 2)) if ms is not None else None
    return SweepPoint(variant, s, status, timing=timing, peak_extra_bytes=mem, bound=bound,
                      kernels=[KernelCount(n, "x", c, 1.0) for n, c in kernels],
                      kernels_per_forward=sum(c for _, c in kernels) if kernels else None, **extra)


def synthetic(points, variants=("naive", "sdpa_flash"), env=H200) -> Sweep:
    lengths = sorted({p.seq_len for p in points})
    return Sweep(list(variants), Workload.blog(seq_len=lengths[0]), lengths, env, points)


S = [256, 512, 1024, 2048, 4096]


def test_the_headline_names_the_faster_by_the_points_ratio():
    result = synthetic([point("naive", s, ms=1e-6 * s**2) for s in S] + [point("sdpa_flash", s, ms=4e-7 * s**2)
                                                                         for s in S])
    assert explain_sweep(result).headline == (
        "At S=4096 SDPA · FlashAttention [B] is 2.5× faster than Naive (masked_fill) [A] on the H200: "
        "6.711 ms vs 16.777 ms per forward (GPU, CUDA events).")
    cpu = dataclasses.replace(H200, device="cpu", device_name="Some CPU", compute_capability=None)
    assert "faster than Naive (masked_fill) [A] on the CPU: " in explain_sweep(synthetic(result.points, env=cpu)).headline
    assert_words_hold(result)


def test_level_within_noise_when_the_samples_do_not_separate():
    result = synthetic([point("naive", s, ms=1.0, spread=0.2) for s in S]
                       + [point("sdpa_flash", s, ms=1.05, spread=0.2) for s in S])
    assert explain_sweep(result).headline.startswith(
        "At S=4096 Naive (masked_fill) [A] and SDPA · FlashAttention [B] are level within noise on the H200: "
        "1.000 ms vs 1.050 ms per forward")
    assert crossovers(result) == [] and not [n for n in explain_sweep(result).notes if n.rule == "sweep_crossover"]


def test_no_length_where_both_ran():
    result = synthetic([point("naive", 256, ms=1.0), point("naive", 512, status="does not fit"),
                        point("sdpa_flash", 256, status="unsupported"), point("sdpa_flash", 512, status="unsupported")])
    assert explain_sweep(result).headline == ("No length where both ran on the H200: Naive (masked_fill) [A] ran "
                                              "S=256–256; SDPA · FlashAttention [B] did not run (unsupported).")


def test_a_crossover_note_exactly_where_the_order_changes():
    points = [point("naive", s, ms=1e-6 * s**2) for s in S] + \
             [point("sdpa_flash", s, ms=1e-6 * 1024**0.5 * s**1.5) for s in S if s != 1024]
    result = synthetic(points)
    (cross,) = crossovers(result)
    note = explain_sweep(result).notes[0]  # first: where the order changes matters most
    assert note.title == "SDPA · FlashAttention overtakes Naive (masked_fill) near S=1024"
    assert note.body == ("Naive (masked_fill) is 1.4× faster at S=512, SDPA · FlashAttention 1.4× at S=2048; "
                         "between them their times grow as S^2 and S^1.50.")
    assert note.facts["e0"].value == pytest.approx(cross.exponent_overtaken)
    assert_words_hold(result)


@pytest.mark.parametrize("stop, title, body", [
    (point("naive", 2048, status="does not fit", needed_bytes=200 * 2**30, available_bytes=126 * 2**30,
           estimated_extra_bytes=190 * 2**30),
     "Naive (masked_fill) stops at S=2048: needs 200.0 GiB, 126.0 GiB available",
     "Refused before anything was allocated; longer sequences need more still. The longest length it ran is S=1024."),
    (point("naive", 2048, status="does not fit", needed_bytes=200 * 2**30, available_bytes=126 * 2**30,
           estimated_extra_bytes=2**30),
     "Naive (masked_fill) stops at S=2048: needs 200.0 GiB, 126.0 GiB available",
     "Its forward alone needs 1.0 GiB; the fp64 accuracy check brings the point to 200.0 GiB. The longest length it "
     "ran is S=1024."),
    (point("naive", 2048, status="error", reason="out of memory on NVIDIA H200: CUDA out of memory."),
     "Naive (masked_fill) ran out of memory at S=2048",
     "The allocator failed during the measurement; longer sequences are not tried. The longest length it ran is "
     "S=1024."),
    (point("naive", 2048, status="refused", reason="would take about 93 s at this size; over the 60 s a run may hold"),
     "Naive (masked_fill) stops at S=2048: refused",
     "Would take about 93 s at this size. The longest length it ran is S=1024."),
])
def test_a_stop_note_says_what_stopped_it(stop, title, body):
    result = synthetic([point("naive", s, ms=1e-6 * s**2) for s in (256, 512, 1024)] + [stop]
                       + [point("sdpa_flash", s, ms=1e-7 * s**2) for s in (256, 512, 1024, 2048)])
    note = explain_sweep(result).notes[0]  # first: nothing crosses over
    assert (note.rule, note.title, note.body, note.side) == ("sweep_stops", title, body, "a")


def test_slopes_against_what_the_algorithm_predicts():
    points = [point("naive", s, ms=0.1 + 1e-6 * s**2, mem=4 * s**2) for s in [128, *S]] + \
             [point("sdpa_flash", s, ms=2e-7 * s**2, mem=1000 * s**2) for s in [128, *S]]
    notes = {n.title: n for n in explain_sweep(synthetic(points)).notes if n.rule.startswith("sweep_slope")}
    time = notes["Naive (masked_fill): time per forward grows as S^1.85, as expected"]
    assert time.body == ("Fitted over S=512–4096 (4 lengths): the work is S²·D per head. Over all 6 lengths S^1.48: "
                         "a fixed per-call cost hides short S.")
    wrong = notes["SDPA · FlashAttention: peak memory grows as S^2, not S^1"]
    assert wrong.rule == "sweep_slope_unexpected" and wrong.weight > time.weight
    assert wrong.body == "Fitted over S=512–4096 (4 lengths); S^1 was expected: a fused kernel stores no S×S scores."


def test_bound_and_kernel_changes():
    points = [point("naive", 256, ms=1, bound="host", host_cost=Timing(2.0, 1.9, 2.1, 50, "perf_counter"),
                    kernels=[("gemm", 2), ("softmax_warp_forward", 1)]),
              point("naive", 512, ms=4, bound="gpu", kernels=[("gemm", 2), ("cunn_SoftMaxForwardReg", 1),
                                                              ("elementwise_kernel [where]", 3)]),
              point("sdpa_flash", 256, ms=1), point("sdpa_flash", 512, ms=2)]
    notes = {n.rule: n for n in explain_sweep(synthetic(points)).notes}
    assert notes["sweep_bound"].title == "Naive (masked_fill): host-bound up to S=256, GPU-bound from S=512"
    assert notes["sweep_bound"].body == "At S=256 issuing a call costs the CPU 2.000 ms; the GPU runs it in 1.000 ms."
    assert notes["sweep_kernels"].title == "Naive (masked_fill): 3 → 6 kernels per forward from S=256 to 512"
    assert notes["sweep_kernels"].body == ("Adds cunn_SoftMaxForwardReg, elementwise · where ×3; drops "
                                           "softmax_warp_forward. Time grows as S^2 across the step.")
    assert_words_hold(synthetic(points))


def test_the_markdown_shows_the_headline_the_top_three_and_folds_the_rest():
    explanation = explain_sweep(RECORDED[1].select(["sdpa_efficient", "sdpa_flash"]))
    markdown = reports.sweep_markdown(explanation)
    assert markdown.startswith("**At S=131072 SDPA · FlashAttention \\[B\\] is 1.8× faster")
    assert "1. **SDPA · FlashAttention overtakes" in markdown and "_(A vs B · over S)_" in markdown
    assert f"<summary>{len(explanation.notes) - 3} more notes over S</summary>" in markdown
    assert "<summary>Terms</summary>" in markdown and not HERE.search(markdown)
    plain = reports.sweep_text(explanation)
    assert plain.startswith(explanation.headline) and "-- more --" in plain
