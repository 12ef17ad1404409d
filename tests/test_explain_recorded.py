"""The whole explainer over every pair of the H200 recording: 8 variants, 28 pairs, 6 workloads, 168 comparisons.

For each: every number a note states is the run's or the trace's figure (read from the note's facts), no fixed
text contradicts the run's dtype, causality, rank or device, every kernel of the table is predicted by the guess
or accounted for in the ledger, the headline and the top three notes exist and are short, and a note true of
both sides is said once.
"""
from __future__ import annotations

import copy
import itertools
import re
import statistics
from collections import defaultdict

import pytest
from explain_helpers import RUNS, assert_numbers_are_the_runs, comparison_context

from attention_variants import guess_for
from profiling import reports, text
from profiling.explain import TOP, explain, facts
from profiling.results import Comparison, Note, Run

BY_WORKLOAD = defaultdict(list)
for _run in RUNS:
    BY_WORKLOAD[_run.workload].append(_run)
PAIRS = [(a, b) for runs in BY_WORKLOAD.values() for a, b in itertools.combinations(runs, 2)]


def pair_id(pair) -> str:
    a, b = pair
    w = a.workload
    return f"{a.variant}-{b.variant}-S{w.seq_len}D{w.head_dim}-{w.dtype}-{'causal' if w.causal else 'full'}-r{w.rank}"


@pytest.fixture(scope="module")
def explained() -> dict:
    return {pair_id(p): explain(Comparison(copy.deepcopy(p[0]), copy.deepcopy(p[1]))) for p in PAIRS}


def runs_of(c: Comparison, note: Note) -> list[Run]:
    return {"a": [c.a], "b": [c.b], "both": [c.a, c.b], "pair": [c.a, c.b]}[note.side]


def test_the_recording_holds_168_pairs():
    assert len(BY_WORKLOAD) == 6 and len(PAIRS) == 168


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_every_number_is_the_runs_figure(pair, explained):
    c = explained[pair_id(pair)]
    assert_numbers_are_the_runs(c.headline, facts.context(c.a, a=c.a, b=c.b))
    for note in c.notes:
        assert_numbers_are_the_runs(note, comparison_context(c, note))
        assert all("profiled_host_ms" not in q.source for q in note.facts.values())  # never the profiled range


def contradictions(words: str, run: Run) -> list[str]:
    """Fixed text that cannot be true of `run`."""
    w, found = run.workload, []
    words = re.sub(r"\(This workload differs from the blog's: [^)]*\)", "", words)  # says how, by design
    if w.dtype == "fp32" and (re.search(r"\b(bf16|fp16)\b", words.replace("fp16 and bf16", ""))
                              or re.search(r"cast.* (up|back)", words)):
        found.append("16-bit casts on fp32 inputs")
    if w.dtype == "bf16" and re.search(r"\bfp16\b", words.replace("fp16 and bf16", "")):
        found.append("fp16 on bf16 inputs")
    if not w.causal and re.search(r"causal mask|is_causal", words):
        found.append("a causal mask on a non-causal run")
    if w.rank == 4 and re.search(r"rank-3", words, re.I):
        found.append("rank 3 on a rank-4 run")
    if w.device == "cuda" and re.search(r"A CPU run|on (this|the) CPU", words):
        found.append("CPU on a GPU run")
    if run.ok and run.backend != "math" and re.search(r"\bmath (path|op|backend)\b|_safe_softmax", words) \
            and "fell back to math" not in words:
        found.append("the math path on a run that did not take it")
    return found


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_no_fixed_text_contradicts_the_run(pair, explained):
    c = explained[pair_id(pair)]
    for note in c.notes:
        if note.side == "pair":
            continue
        for run in runs_of(c, note):
            assert not contradictions(f"{note.title} {note.body}", run), (note.rule, note.title)


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_every_kernel_is_guessed_or_accounted_for(pair, explained):
    c = explained[pair_id(pair)]
    for side, run in (("a", c.a), ("b", c.b)):
        if not run.ok:
            continue
        g = guess_for(run.variant, run.workload)
        ledger = {name for n in c.notes if n.rule == "unpredicted_kernels" and n.side in (side, "both")
                  for name in n.kernels}
        guessed = {e.category for e in g.kernels}
        for k in run.kernels:
            if k.category not in guessed:  # nothing in the guess could be this kernel
                assert k.name in ledger, (run.variant, k.short_name)
        predicted, unpredicted, _ = facts.match_guess(run, g)
        assert {u.kernel.name for u in unpredicted} <= ledger
        assert {k.name for i, k in enumerate(run.kernels) if i not in predicted} <= ledger


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_the_headline_and_the_top_three_are_short(pair, explained):
    c = explained[pair_id(pair)]
    assert c.headline and text.word_count(c.verdict) <= 60
    top = c.notes[:TOP]
    assert len(top) == min(TOP, len(c.notes)) >= 2
    for note in top:
        assert text.word_count(f"{note.title} {note.body}") <= 60, (note.rule, note.title)
    assert reports.visible_words(c) <= 200


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_a_note_true_of_both_sides_is_said_once(pair, explained):
    c = explained[pair_id(pair)]
    said = [(n.rule, n.title, n.body) for n in c.notes]
    assert len(said) == len(set(said))
    assert [n.weight for n in c.notes] == sorted((n.weight for n in c.notes), reverse=True) or \
        [round(n.weight, 3) for n in c.notes] == sorted((round(n.weight, 3) for n in c.notes), reverse=True)


def test_visible_words_and_notes_per_comparison(explained):
    words = [reports.visible_words(c) for c in explained.values()]
    notes = [len(c.notes) for c in explained.values()]
    print(f"\nvisible words per comparison: median {statistics.median(words)}, max {max(words)}; "
          f"notes per comparison: median {statistics.median(notes)}")
    assert statistics.median(words) <= 200 and max(words) <= 200


def test_an_explained_comparison_round_trips_through_json(explained):
    for c in list(explained.values())[::17]:
        again = Comparison.from_json(c.to_json())
        assert again == c and again.verdict == c.verdict and again.notes[0].facts == c.notes[0].facts


def test_rendering(explained):
    c = explained[pair_id(next(p for p in PAIRS if (p[0].variant, p[1].variant) == ("naive", "sdpa_math")))]
    markdown, plain = reports.verdict_markdown(c), reports.notes_text(c)
    assert markdown.startswith(r"**Naive (masked\_fill) \[A\] is 2.5× faster") and "<summary>Terms</summary>" in markdown
    assert r"nvjet\_sm90" in reports.side_notes_markdown(c, "a")  # kernel names are escaped, not italics
    assert "<abbr title=" in markdown  # jargon is glossed on first use
    assert plain.startswith(f"Verdict: {c.verdict}") and "`" not in plain
    for note in c.notes:
        assert note.title.replace("`", "") in plain


HERE = re.compile(r"\bhere\b", re.I)
QUOTED_GUESS = re.compile(r"“[^”]*”")  # a guess quoted as written (attention_variants/guesses.py), not a claim
# the rules that once said "here" for the run's GPU, and where they now name it
NAMES_THE_GPU = {"against_blog": "body", "kernel_generation": "body", "nvjet_gemms": "body",
                 "ranking_vs_blog": "title", "pinned_refused": "title", "auto_choice": "body"}


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_a_replay_names_the_gpu_it_ran_on_never_here(pair, explained):
    """The app replays these H200 runs on a machine without a GPU: "here" would be false there."""
    c = explained[pair_id(pair)]
    gpu = f"on the {text.machine(c.a.environment)}"
    assert gpu == "on the H200" and gpu in c.verdict
    rendered = [reports.verdict_markdown(c, reports.comparison_table(c)), reports.notes_text(c),
                reports.side_notes_markdown(c, "a"), reports.side_notes_markdown(c, "b"),
                reports.run_card("A", c.a, "A"), reports.run_card("B", c.b, "B")]
    for note in [c.headline, *c.notes]:
        for words in (note.title, note.body, *note.evidence):
            assert not HERE.search(QUOTED_GUESS.sub("", words)), (note.rule, words)
        if note.rule in NAMES_THE_GPU:
            assert gpu in getattr(note, NAMES_THE_GPU[note.rule]), (note.rule, note.title, note.body)
        if note.rule == "ranking_vs_blog":
            assert note.evidence[0].startswith("H200, fastest first: ")
    for markdown in rendered:
        assert not HERE.search(QUOTED_GUESS.sub("", markdown)), markdown
