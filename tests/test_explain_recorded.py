"""The whole explainer over every pair of the H200 recording, each property one loop over all pairs.

For each pair: every number a note states is the run's or the trace's figure (read again from the note's source);
the headline compares one figure on both sides, never a host cost, never "1.0×", never ranks identical code, and
its kind (ranked, level, no practical difference, too few) is the one an independent rank test (scipy) gives; no
fixed text contradicts the run's dtype, causality, rank or device; every kernel is predicted by the guess or
listed in the ledger; the headline and the top three are short; a note true of both sides is said once; nothing
says "here". And the headline and top three of every pair are a golden file a person reviewed (tests/golden).
"""
from __future__ import annotations

import functools
import itertools
import math
import re
import statistics
from collections import defaultdict
from pathlib import Path

import pytest
import trace_oracle
from explain_helpers import RECORDING, RUNS, assert_numbers_are_the_runs, comparison_context
from oracles import unconfirmed_gap_said
from scipy.stats import mannwhitneyu

from attention_variants import guess_for
from profiling import reports, stats, text
from profiling.explain import TOP, Explanation, explain, explain_sweep, facts
from profiling.replay import load_recorded, recorded_sweeps
from profiling.explain.verdict import decision
from profiling.results import Comparison, Note, Run, in_phase

# every recording the page offers: the H200's (explain_helpers.RUNS), then each other GPU's, never mixed in a pair
RECORDED = {RECORDING.name: RUNS} | {p.name: load_recorded(p) for p in sorted(RECORDING.parent.glob("*-torch*"))
                                    if p.name != RECORDING.name}
BY_WORKLOAD = defaultdict(list)  # (recording, workload asked) -> its runs (an fp8 twin's beside its base's, as the
for _name, _runs in RECORDED.items():                     # page pairs them: its own run holds the quantised one)
    for _run in _runs:
        BY_WORKLOAD[_name, _run.workload.unquantised].append(_run)
PAIRS_OF = {name: [Comparison(a, b) for (held, _), runs in BY_WORKLOAD.items() if held == name
                   for a, b in itertools.combinations(runs, 2)] for name in RECORDED}
PAIRS = [c for pairs in PAIRS_OF.values() for c in pairs]
GOLDEN = Path(__file__).parent / "golden" / "recorded_pairs.txt"
# a golden file per recording (its pairs' ids are the same words on another GPU)
GOLDENS = {name: GOLDEN if name == RECORDING.name else GOLDEN.with_name(f"recorded_pairs_{name}.txt")
           for name in RECORDED}


def pair_id(c: Comparison) -> str:
    w = c.a.workload.unquantised  # the workload asked (an fp8 twin's run holds its quantised one)
    return f"{c.a.variant} vs {c.b.variant} · {w.words()}"


@pytest.fixture(scope="module")
def explained() -> list[tuple[Comparison, Explanation]]:
    return [(c, explain(c)) for c in PAIRS]


def runs_of(c: Comparison, note: Note) -> list[Run]:
    return {"a": [c.a], "b": [c.b], "both": [c.a, c.b], "pair": [c.a, c.b]}[note.side]


def golden_lines(explained) -> list[str]:
    """What tests/golden/recorded_pairs.txt holds: per pair, its headline and its top three notes, title and body:
    the words a reader sees, so a reviewer of its diff reads them too."""
    lines = []
    for c, e in explained:
        lines += [f"## {pair_id(c)}", f"headline: {e.headline.title}"]
        for i, n in enumerate(e.notes[:TOP]):
            lines += [f"{i + 1}. {n.title} [{n.side}]", f"   {n.body}"]
    return lines


GOLDEN_SWEEPS = Path(__file__).parent / "golden" / "recorded_sweeps.txt"
GOLDENS_SWEEPS = {name: GOLDEN_SWEEPS if name == RECORDING.name
                  else GOLDEN_SWEEPS.with_name(f"recorded_sweeps_{name}.txt") for name in RECORDED}
SWEEP_PAIRS_OF = {name: [s.select([a, b]) for s in recorded_sweeps(name)
                         for a, b in itertools.combinations(s.variants, 2)] for name in RECORDED}
SWEEP_PAIRS = [s for pairs in SWEEP_PAIRS_OF.values() for s in pairs]


def golden_sweep_lines(name: str = RECORDING.name) -> list[str]:
    """What tests/golden/recorded_sweeps.txt (the recording `name`'s file) holds: per pair of every recorded sweep,
    its headline and top three notes, title and body."""
    lines = []
    for sweep in SWEEP_PAIRS_OF[name]:
        e = explain_sweep(sweep)
        lines += [f"## {sweep.a} vs {sweep.b} · {sweep.workload.family(sweep.axis)} · "
                  f"{text.axis_symbol(sweep.axis)}={sweep.seq_lens[0]}…{sweep.seq_lens[-1]}",
                  f"headline: {e.headline.title}"]
        for i, n in enumerate(e.notes[:TOP]):
            lines += [f"{i + 1}. {n.title} [{n.side}]", f"   {n.body}"]
    return lines


@pytest.mark.parametrize("name", RECORDED)
def test_the_recorded_sweeps_headlines_and_top_notes_are_the_reviewed_golden_file(name):
    assert GOLDENS_SWEEPS[name].read_text().splitlines() == golden_sweep_lines(name)


def test_the_recording_holds_every_pair_of_its_workloads():
    assert len(BY_WORKLOAD) >= 6 and len(PAIRS) == sum(len(r) * (len(r) - 1) // 2 for r in BY_WORKLOAD.values())
    assert all(len({r.environment.device_name for r in runs}) == 1 for runs in RECORDED.values())  # one GPU each


def explained_of(explained, name: str) -> list:
    """The explained pairs of the recording `name` (PAIRS holds each recording's in turn)."""
    start = sum(len(PAIRS_OF[n]) for n in itertools.takewhile(lambda n: n != name, RECORDED))
    return explained[start:start + len(PAIRS_OF[name])]


def test_the_headlines_and_top_notes_are_the_reviewed_golden_file(explained):
    """A reversed verdict, a lost note or a wrong kernel shows up here as a diff a person reads. After a change a
    person has checked, rewrite the files with `python tests/update_golden.py` and read their diff."""
    for name, golden in GOLDENS.items():
        assert golden.read_text().splitlines() == golden_lines(explained_of(explained, name)), golden.name


def check_golden(words: str) -> None:
    """The golden file's sections for the pairs whose id holds `words`, explained again (a cheap subset of the test
    above, for the planted faults)."""
    sections, current = {}, None
    for line in GOLDEN.read_text().splitlines():
        if line.startswith("## "):
            current = line[3:]
            sections[current] = []
        sections[current].append(line)
    chosen = [c for c in PAIRS_OF[RECORDING.name] if words in pair_id(c)]
    assert chosen, words
    for c in chosen:
        assert golden_lines([(c, explain(c))]) == sections[pair_id(c)], pair_id(c)


def _of_its_run_alone(note: Note) -> bool:
    """Whether every figure of a side's note is read from its own run (none from the other side or the pair)."""
    return note.side in ("a", "b") and not any(_OTHERS.search(q.source) for q in note.facts.values())


_OTHERS = re.compile(r"\b(peers|a|b)[.\[]")  # a source that reads a peer or a side of the pair


def test_every_number_is_the_runs_figure(explained):
    checked = set()  # a side's note of its own run's figures reads the same in each pair the run is in: once
    for c, e in explained:
        assert_numbers_are_the_runs(e.headline, facts.context(c.a, a=c.a, b=c.b))
        for note in e.notes:
            run = c.b if note.side == "b" else c.a
            key = (id(run), note.rule, note.title, note.body)
            if _of_its_run_alone(note) and key in checked:
                continue
            checked.add(key)
            assert_numbers_are_the_runs(note, comparison_context(c, note))
            for q in note.facts.values():  # the profiled range only as a share of itself, named so
                assert "profiled_host_ms" not in q.source or (q.unit == "share" and "profiled" in (q.of or "")), \
                    (pair_id(c), note.rule, q)


def past_the_gate(run: Run) -> bool:
    """The correctness gate re-derived from the run's accuracy: an output (or gradient) error past 10x plain
    attention's in the same dtype (fp32's floor 2^-10 under it; fp8 inputs: or past 10x their quantisation's own)."""
    a = run.accuracy
    if a is None:
        return False
    pairs = [(a.max_abs_error, a.naive_max_abs_error, a.quantisation_max_abs_error)]
    pairs += [(a.grads[g], (a.naive_grads or {}).get(g), None) for g in a.grads or {}]
    floor = 2.0 ** -10 if run.workload.dtype == "fp32" else 0.0
    return any(err > 10.0 * max(plain, floor, quant or 0.0) for err, plain, quant in pairs if plain)


def test_the_headline_compares_one_figure_and_its_kind_is_the_true_one(explained):
    for c, e in explained:
        title = e.headline.title
        assert "1.0×" not in title, title
        if not (c.a.ok and c.b.ok):
            continue
        v = decision(c.a, c.b)
        wrong = tuple(side for side, run in (("a", c.a), ("b", c.b)) if past_the_gate(run))
        assert v.wrong == wrong, (pair_id(c), v.wrong, wrong)
        if wrong:  # never ranked, whatever the timings say: the title names who and says so
            assert v.kind == "wrong" and "not ranked" in title and ("wrong answer" in title), title
            continue
        sources = {q.source.split(".")[1] for name, q in e.headline.facts.items() if name in ("a", "b")}
        assert sources == {v.path} and "host_cost" not in sources, (pair_id(c), sources)
        same_code = ({(k.name, k.phase): round(k.calls_per_forward, 2) for k in c.a.kernels} ==
                     {(k.name, k.phase): round(k.calls_per_forward, 2) for k in c.b.kernels} and
                     {(h.name, h.phase): h.calls_per_forward for h in c.a.host_ops} ==
                     {(h.name, h.phase): h.calls_per_forward for h in c.b.host_ops})
        assert not (same_code and v.kind == "ranked"), f"identical code ranked: {pair_id(c)}"
        a, b = (getattr(r, v.path).samples_ms or [] for r in (c.a, c.b))
        if stats.min_p(len(a), len(b)) > stats.LEVEL:
            assert v.kind == "too_few" and "cannot be ranked" in title, title
            continue
        p = mannwhitneyu(a, b, alternative="two-sided", method="exact" if len(a) + len(b) <= 40 else "asymptotic").pvalue
        ratio = max(statistics.median(a), statistics.median(b)) / min(statistics.median(a), statistics.median(b))
        if p > stats.LEVEL * 1.05:
            qa, qb = (statistics.quantiles(x, n=4, method="inclusive") for x in (a, b))
            apart = qa[2] < qb[0] or qb[2] < qa[0]  # middle halves apart: a gap the test cannot confirm, not "level"
            said = unconfirmed_gap_said(a, b) if apart else "level within noise"
            assert v.kind == "level" and said in title, (title, p)
        elif p < stats.LEVEL * 0.95 and v.kind != "inconsistent":
            assert v.kind == ("ranked" if ratio >= 1 + v.threshold else "no_practical_difference"), (title, p, ratio)


def contradictions(words: str, run: Run) -> list[str]:
    """Fixed text that cannot be true of `run`."""
    w, found = run.workload, []
    words = re.sub(r"\(This workload differs from the blog's[^)]*\)", "", words)  # says how, by design
    words = re.sub(r"[^.]*\(the inputs are fp32\)", "", words)  # a refusal: what it runs, beside the inputs' dtype
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


def test_no_fixed_text_contradicts_the_run(explained):
    for c, e in explained:
        for note in e.notes:
            if note.side != "pair":
                for run in runs_of(c, note):
                    assert not contradictions(f"{note.title} {note.body}", run), (pair_id(c), note.rule, note.title)


def test_every_kernel_is_guessed_or_in_the_ledger_and_the_ledger_counts_its_rows(explained):
    for c, e in explained:
        for side, run in (("a", c.a), ("b", c.b)):
            if not run.ok:
                continue
            g = guess_for(run.variant, run.workload)
            ledgers = [n for n in e.notes if n.rule == "unpredicted_kernels" and n.side in (side, "both")]
            ledger = {name for n in ledgers for name in n.kernels}
            predicted, unpredicted, _ = facts.match_guess(run, g)
            unpredicted = [u for u in unpredicted if in_phase(u.kernel, run.phase)]  # the view's own rows
            assert {u.kernel.name for u in unpredicted} <= ledger
            assert {k.name for i, k in enumerate(run.kernels) if i not in predicted
                    and in_phase(k, run.phase)} <= ledger
            for n in ledgers:  # "{rows} of {table} kernels were not in the guess": the rows it lists
                if "rows" in n.facts:
                    assert n.facts["rows"].value == sum(u.whole for u in unpredicted) and \
                        n.facts["table"].value == len(run.kernels_of()), (pair_id(c), n.title)
                    one = n.facts["rows"].value == 1  # its words agree with the count: "1 … was", "It takes"
                    assert (" was not" in n.title) == one and n.body.startswith("It takes" if one else "They take"), \
                        (pair_id(c), n.title, n.body)


FP8_ERRORS = " Error against fp64 on the unquantised inputs: "  # the clause an fp8 side's speed is never said without


def _without_fp8_errors(words: str) -> tuple[str, int]:
    """`words` without the fp8 error clause that ends its speed sentence (issue 55: on the same line as any speed said
    of fp8), and that clause's length in words (at most 18: two sides' errors and their quantisations')."""
    at = words.find(FP8_ERRORS)
    if at < 0:
        return words, 0
    end = words.find(". ", at) + 1 or len(words)  # a sentence may follow it (the rank-3 trap's)
    clause = text.word_count(words[at:end])
    assert clause <= 18, words[at:end]
    return words[:at] + words[end:], clause


def test_the_headline_and_the_top_three_are_short(explained):
    """60 words a card at most, and 200 in all: the fp8 error clause an fp8 pair's headline and speed note end with
    comes on top (it must stand on the line that calls a side faster)."""
    words = []
    for c, e in explained:
        headline, extra = _without_fp8_errors(e.headline.title)
        assert text.word_count(headline) <= 60, e.headline.title
        assert len(e.notes[:TOP]) == min(TOP, len(e.notes)) >= 2
        for note in e.notes[:TOP]:
            title, more = _without_fp8_errors(note.title)
            assert text.word_count(f"{title} {note.body}") <= 60, (note.rule, note.title)
            extra += more
        words.append(reports.visible_words(e) - extra)
    print(f"\nvisible words per comparison, the fp8 error clauses aside: median {statistics.median(words)}, "
          f"max {max(words)}")
    assert max(words) <= 200


def test_a_note_true_of_both_sides_is_said_once_and_notes_are_ranked(explained):
    for c, e in explained:
        said = [(n.rule, n.title, n.body) for n in e.notes]
        assert len(said) == len(set(said))
        weights = [round(n.weight, 3) for n in e.notes]
        assert weights == sorted(weights, reverse=True)


def test_an_explanation_round_trips_through_json(explained):
    for c, e in explained[::17]:
        assert Explanation.from_dict(e.to_dict()) == e


def test_rendering(explained):
    c, e = next((c, e) for c, e in explained if (c.a.variant, c.b.variant) == ("naive", "sdpa_math"))
    markdown, plain = reports.verdict_markdown(e), reports.notes_text(e)
    assert markdown.startswith(r"**Naive (masked\_fill) \[A\] ") and "<summary>Terms</summary>" in markdown
    assert r"nvjet\_sm90" in reports.side_notes_markdown(e, "a")  # kernel names are escaped, not italics
    assert "<abbr title=" in markdown  # jargon is glossed on first use
    assert plain.startswith(f"Verdict: {e.headline.title}") and "`" not in plain
    assert all(note.title.replace("`", "") in plain for note in e.notes)


HERE = re.compile(r"\bhere\b", re.I)
QUOTED_GUESS = re.compile(r"“[^”]*”")  # a guess quoted as written (attention_variants/guesses.py), not a claim
NAMES_THE_GPU = {"against_blog": "body", "kernel_generation": "body", "nvjet_gemms": "body",
                 "ranking_vs_blog": "title", "pinned_refused": "title", "auto_choice": "body"}


def test_a_replay_names_the_gpu_it_ran_on_never_here(explained):
    """The app replays these H200 runs on a machine without a GPU: "here" would be false there."""
    # The notes' own words are read wherever they appear; the page's markdown adds the renderer's fixed words, each
    # rule's layout and the glossary's definitions: rendered once for each set of rules and glossary terms.
    cards, read, layouts = {}, set(), set()
    for c, e in explained:
        gpu = f"on the {text.machine(c.a.environment)}"
        assert gpu in ("on the H200", "on the H100") and gpu in e.headline.title
        shown = [e.headline, *e.notes]
        layout = (frozenset(n.rule for n in shown), frozenset(text.terms_in(" ".join(
            f"{n.title} {n.body} {' '.join(n.evidence)}" for n in shown))))
        rendered = [] if layout in layouts else [
            reports.verdict_markdown(e, reports.comparison_table(c)), reports.notes_text(e),
            reports.side_notes_markdown(e, "a"), reports.side_notes_markdown(e, "b")]
        layouts.add(layout)
        for side, run in (("A", c.a), ("B", c.b)):
            if (id(run), side) not in cards:
                cards[id(run), side] = reports.run_card(side, run, side)
                rendered.append(cards[id(run), side])
        for note in [e.headline, *e.notes]:
            for words in {note.title, note.body, *note.evidence} - read:
                assert not HERE.search(QUOTED_GUESS.sub("", words)), (note.rule, words)
                read.add(words)
            if note.rule in NAMES_THE_GPU:
                assert gpu in getattr(note, NAMES_THE_GPU[note.rule]), (note.rule, note.title, note.body)
        for markdown in rendered:
            assert not HERE.search(QUOTED_GUESS.sub("", markdown)), markdown


# -- an independent oracle: every share and phase total a note states, against a second reader of the traces -----
@functools.cache
def oracles() -> dict:
    """The oracle's reading of every recorded GPU trace, by run: read when a test first asks (not at collection, in
    every worker)."""
    return {id(r): trace_oracle.read(r.trace_path) for r in RUNS
            if r.ok and r.trace_path and r.environment.device == "cuda"}
_SHARE = re.compile(r"^(launch_)?share\((\w+(?:\[\w+\])?), '(\w+)', ([\d, ]+)\)$")
_PHASE_TOTAL = re.compile(r"^(\w+(?:\[\w+\])?)\.(gpu_us|launches)\('(\w+)'\)$")


def test_every_recorded_runs_phases_are_the_oracles():
    """The parser files each GPU row under the phase the oracle's own rule gives (the launching thread), with the
    same microseconds: the tables every share is read from are right, phase by phase."""
    ORACLE = oracles()
    assert len(ORACLE) >= 100
    for run in (r for r in RUNS if id(r) in ORACLE):
        oracle, where = ORACLE[id(run)], f"{run.variant} · {run.workload.words()}"
        for phase in ("forward", "backward", "step"):
            assert math.isclose(run.gpu_us(phase), oracle.total(phase), rel_tol=1e-6, abs_tol=1e-6), (where, phase)
            assert math.isclose(run.launches(phase), oracle.count(phase), rel_tol=1e-6), (where, phase)
        for k in run.kernels:
            assert math.isclose(k.us_per_forward, oracle.us[k.name, k.phase], rel_tol=1e-6), (where, k.name, k.phase)
        assert {p for _, p in oracle.us} == ({"forward", "backward"} if run.workload.training else {"forward"}), where


def _run_named(c: Comparison, note: Note, who: str) -> Run:
    if who == "run":
        return c.b if note.side == "b" else c.a
    if who in ("a", "b"):
        return getattr(c, who)
    peer = re.fullmatch(r"peers\[(\w+)\]", who).group(1)
    return next(r for r in (c.a, c.b) if r.variant == peer)


def test_every_share_and_phase_total_a_note_states_is_the_oracles_for_the_phase_it_names(explained):
    """Each share of a note is its kernels' time over the total of the phase the share names, and says that phase
    ("…% of the backward"); each phase total and kernel count is that phase's: all read again from the traces by the
    oracle, not by the parser (a share of the step said as the forward's, or a forward kernel counted in a backward
    view, fails here)."""
    assert check_shares(explained) > 1000


def check_shares(explained) -> int:
    """The test above on some explained pairs; how many facts it checked."""
    ORACLE, checked = oracles(), 0
    for c, e in explained:
        for note in e.notes:
            for name, q in note.facts.items():
                where = (pair_id(c), note.rule, name, q.source)
                share, total = _SHARE.match(q.source), _PHASE_TOTAL.match(q.source)
                if share:
                    run = _run_named(c, note, share.group(2))
                    if id(run) not in ORACLE:
                        continue
                    phase, refs = share.group(3), [int(i) for i in share.group(4).split(",")]
                    if share.group(1):  # launch chains: pairs of (kernel, launch) indices
                        part = sum(run.kernels[i].launched_by[j].us_per_forward for i, j in zip(refs[::2], refs[1::2]))
                    else:
                        part = sum(ORACLE[id(run)].us[run.kernels[i].name, run.kernels[i].phase] for i in refs)
                    assert math.isclose(q.value, part / ORACLE[id(run)].total(phase), rel_tol=1e-6), where
                    assert q.of == f"the {phase}" and f"of the {phase}" in text.quantity(q), where
                    checked += 1
                elif total:
                    run = _run_named(c, note, total.group(1))
                    if id(run) in ORACLE:
                        oracle, phase = ORACLE[id(run)], total.group(3)
                        expected = oracle.total(phase) if total.group(2) == "gpu_us" else oracle.count(phase)
                        assert math.isclose(q.value, expected, rel_tol=1e-6), where
                        checked += 1
    return checked


def test_a_kernel_count_in_words_is_the_tables_and_no_kernel_launches_itself(explained):
    """"{who} ran one kernel for q_len N" only where the table holds one launch in that phase (re-added here from its
    rows); where the call launches more (flex's pointwise kernels, cuDNN's mask building) it says one attention
    kernel and how many others, the table's launches less the main kernel's. And no kernel is said to be launched
    "from" itself: the op named is one of the ops around its launch, never its own name (flex's
    `triton_poi_fused_flex_attention_3` was once "from `triton_poi_fused_flex_attention_3`")."""
    checked = named = 0
    for c, e in explained:
        for note in e.notes:
            for run in runs_of(c, note):
                if note.rule == "decode_kernels" and " kernel for q_len " in note.title:
                    main = next(k for k in run.kernels if k.name in note.kernels)
                    launches = sum(k.calls_per_forward for k in run.kernels if in_phase(k, main.phase))
                    if " ran one kernel " in note.title:
                        assert launches == main.calls_per_forward == 1, (pair_id(c), note.title, launches)
                    else:
                        assert " ran one attention kernel " in note.title, note.title
                        said = re.search(r"launches (\d+) other kernels?, ", note.body)
                        assert said and int(said[1]) == launches - main.calls_per_forward, (pair_id(c), note.body)
                    checked += 1
                for k in run.kernels:
                    for launcher in re.findall(re.escape(text.kernel(k, 40)) + r" from `([^`]+)`", note.body):
                        around = [text.host_op(text.op(o)) for launch in k.launched_by or [] for o in launch.ops
                                  if o != k.name]
                        assert launcher in around, (pair_id(c), note.rule, k.name, launcher, around)
                        named += 1
    assert checked >= 20 and named >= 20, (checked, named)


def test_a_kernel_csv_names_the_variant_the_gpu_and_the_workload_above_its_table(tmp_path):
    """A downloaded kernel table named neither the GPU nor the workload: three comment lines now do, and the table
    under them reads back as the page's table."""
    import pandas as pd

    c = next(Comparison(a, b) for a, b in itertools.combinations(RUNS, 2) if a.kernels and b.kernels)
    files = reports.export("{}", c, b"png", tmp_path)
    for side, run in (("a", c.a), ("b", c.b)):
        lines = files[f"{side}_csv"].read_text().splitlines()
        assert lines[:3] == [f"# {run.variant}: {facts.label(run)}", f"# on: {run.environment.summary()}",
                             f"# workload: {run.workload.words()}"]
        assert run.environment.device_name in lines[1] and "NVIDIA" in lines[1]  # the GPU that ran it
        table, shown = pd.read_csv(files[f"{side}_csv"], comment="#"), reports.kernel_table(run)
        assert list(table.columns) == list(shown.columns) and list(table.iloc[:, 0]) == list(shown.iloc[:, 0])
