"""A vs B: one figure on both sides, a named test, and the headline that says only what they support; then a note
wherever the measured order contradicts the guessed one, with the reasons the two traces show.

The figure: GPU time (CUDA events) when neither run is host-bound (`Run.bound`); when either is, the back-to-back
pace of both, since a model's loop runs at that pace; wall time on a CPU. Timed cold or in a CUDA graph (the
workload's `timing`, the same on both sides), the mode's own GPU time. The test (`stats.decide`): a rank test at
level 0.01 (exact where the sizes allow), and a winner only when the gap is at least 3% and above the drift between
the moments A and B were measured (none when they were interleaved in one session). Host cost per call is its own
figure, in its own note, never the headline's.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from .. import stats, text
from ..results import STOPPED, Note, Run, Timing
from .environment_rules import failure
from .facts import (FLASH_TESTS_FACTOR, WRONG_FACTOR, ampere_design, beyond_median, call_gpu, constant, difference,
                    fused, guess, hopper_design, host_share, instruction, kernels_in, label, launch_count, launch_share,
                    launches, main_kernel, measured, note, of_kernel, of_launch, on_gpu, pinned, ran, ratio,
                    scores_bytes, square_scores, total, wrong_answer)

# Runs from two sessions (not interleaved) can differ by the machine's drift alone. Measured on the H200: the
# host cost of one variant moved ~50% within a process; GPU time moves far less.
CROSS_SESSION_DRIFT = {"timing": 0.10, "back_to_back": 0.50}
FIGURES = {"timing": "GPU time, CUDA events", "back_to_back": "back to back: the pace of a loop of calls",
           "wall": "wall time", "cold": "GPU time with a cold L2, CUDA events",
           "graph": "GPU time in a CUDA graph, replay events"}


@dataclass(frozen=True)
class Verdict:
    """What the named test says of A and B on the figure both are compared on."""
    kind: str                     # ranked | level | no_practical_difference | too_few | host_gaps | wrong
    path: str                     # the Run attribute compared: "timing" or "back_to_back"
    what: str                     # the figure in words
    faster: str | None            # "a" | "b" (ranked, or the lower median where no difference counts)
    ratio: float                  # slower median / faster median
    p: float | None
    samples: int                  # the fewer of the two sides'
    threshold: float              # the practical threshold used, drift included
    same_session: bool
    method: str = ""              # the rank test's: "exact" or "normal approximation"
    wrong: tuple[str, ...] = ()   # "a", "b": the sides whose answer is wrong (`facts.wrong_answer`), never ranked


def figure(a: Run, b: Run) -> tuple[str, str]:
    """(path, words) of the one figure A and B are compared on. Cold or in a CUDA graph, the mode's own figure (a warm
    loop's pace is not a cold one's, and a graph has no host pace). A backward alone has no pace of its own (a loop
    runs whole steps): its GPU time, always."""
    if a.environment.device != "cuda":
        return "timing", FIGURES["wall"]
    if a.workload.timing != "warm":
        return "timing", FIGURES[a.workload.timing]
    if a.workload.passes == "bwd":
        return "timing", FIGURES["timing"]
    if "host" in (a.bound, b.bound) and a.back_to_back is not None and b.back_to_back is not None:
        return "back_to_back", FIGURES["back_to_back"]
    return "timing", FIGURES["timing"]


def quartiles_apart(a: Timing | None, b: Timing | None) -> bool:
    """The middle halves of two distributions do not overlap: a gap the test does not confirm is then no "level"
    (a single outlier can hold the rank test above its level)."""
    if a is None or b is None or None in (a.p25_ms, a.p75_ms, b.p25_ms, b.p75_ms):
        return False
    return a.p75_ms < b.p25_ms or b.p75_ms < a.p25_ms


def unconfirmed_gap(a, b):
    """The higher median over the lower, as a fact."""
    return ratio(a, b) if a.value >= b.value else ratio(b, a)


def _samples(timing: Timing | None) -> list[float]:
    return list(timing.samples_ms or []) if timing else []


def decision(a: Run, b: Run) -> Verdict:
    """The named test on the one figure; `host_gaps` (no order stated) when a side's GPU time includes gaps in which
    the GPU waited for the host, so it is not the GPU's own time; `wrong` (no order stated, whatever the test says)
    when a side's answer is wrong: a faster wrong answer is no win."""
    path, what = figure(a, b)
    same = a.session is not None and a.session == b.session
    drift = 0.0 if same else CROSS_SESSION_DRIFT[path]
    d = stats.decide(_samples(getattr(a, path)), _samples(getattr(b, path)), drift=drift)
    kind = d.kind
    if path == "timing" and kind != "too_few" and any(r.timing is not None and r.timing.host_gaps for r in (a, b)):
        kind = "host_gaps"
    wrong = tuple(side for side, run in (("a", a), ("b", b)) if wrong_answer(run))
    if wrong:
        kind = "wrong"
    return Verdict(kind, path, what, d.faster, d.ratio, d.p, d.samples, d.threshold, same, d.method, wrong)


def _where(run: Run) -> str:
    return text.on_device(run.environment)


def headline(a: Run, b: Run) -> Note:
    """One sentence: who wins, by how much, on which figure; or which of level, no practical difference, too few
    samples holds; or who could not run and why."""
    name = {id(a): f"{label(a)} [A]", id(b): f"{label(b)} [B]"}
    failed = [r for r in (a, b) if not (r.ok or timed_then_stopped(r))]
    if failed:
        side = {id(a): "a", id(b): "b"}
        whys = {id(r): failure(r, side[id(r)]) for r in failed}
        verb = {id(r): "was stopped" if r.status == STOPPED else "could not run" for r in failed}
        refused = "; ".join(f"{name[id(r)]} {verb[id(r)]} {_where(r)} ({whys[id(r)][0]})" for r in failed)
        ok = [r for r in (a, b) if r.ok]
        facts = {k: q for _, more in whys.values() for k, q in more.items()}
        facts |= {"time": measured(ok[0], "timing.median_ms", "ms", side[id(ok[0])])} if ok else {}
        rest = f"; {name[id(ok[0])]} ran at {{time}} per {text.call(ok[0].workload)}." if ok else "."
        if ok:
            clause, more = _fallback(ok[0], "a" if ok[0] is a else "b")
            rest, facts = rest + clause, facts | more
            who = side[id(ok[0])]
            errors, more = quantised_errors({who: ok[0]}, lambda run, path, unit, w: measured(run, path, unit, w))
            rest, facts = rest + errors, facts | more
        return note("verdict", "verdict", refused + rest, "", weight=1.0, facts=facts)
    v = decision(a, b)
    facts = {"a": measured(a, f"{v.path}.median_ms", "ms", "a"), "b": measured(b, f"{v.path}.median_ms", "ms", "b")}
    on = _where(a)
    evidence = [f"figure: {v.what}; " + ("A and B were timed interleaved, in one session" if v.same_session else
                                         "A and B were measured at different moments, so the threshold includes "
                                         "the drift between sessions"),
                f"named test: Mann–Whitney rank test ({v.method or 'not run'}) at level {stats.LEVEL:g}, "
                f"{v.samples} samples on the smaller side" + (f", p = {text.p_value(v.p)}" if v.p is not None else "")
                + f"; a winner needs a gap of at least {text.share(v.threshold)}"]
    title, more = said(a, b, v, (name[id(a)], name[id(b)]), on, facts, lambda run, path, unit, who:
                       measured(run, path, unit, who))
    facts |= more
    for run, side in ((a, "a"), (b, "b")):
        clause, more = _fallback(run, side)
        title, facts = title + clause, facts | more
    stopped = [r for r in (a, b) if timed_then_stopped(r)]
    if stopped:  # timed in full, then stopped: the figures stand, the profile is missing
        title += " " + " and ".join(name[id(r)] for r in stopped) + " stopped after timing, before the profile."
    return note("verdict", "verdict", title, "", weight=1.0, facts=facts, evidence=evidence)


def timed_then_stopped(run: Run) -> bool:
    """Stopped (cancel or budget) after its timing rounds finished: its figures can still be compared."""
    return run.status == STOPPED and run.timing is not None and run.timing.kept > 0


def said(a: Run, b: Run, v: Verdict, names: tuple[str, str], on: str, facts: dict, fact) -> tuple[str, dict]:
    """The headline's sentence for `v` (its facts "a" and "b" given, each side's figure), the one wording of a
    comparison's and a sweep's: (the sentence, the facts it adds). `fact(run, path, unit, who)` reads a figure of
    `a` ("a") or `b` ("b") with a source its context resolves. Where a side's inputs are quantised (fp8), each side's
    error against fp64 follows on the same line (a wrong answer's sentence states them itself)."""
    sentence, more = _said(a, b, v, names, on, facts, fact)
    if v.kind == "wrong":
        return sentence, more
    errors, also = quantised_errors({"a": a, "b": b}, fact)
    return sentence + errors, more | also


CARD_WORDS = 60  # a note's title and body together, the fp8 error clause aside: what a card holds


def quantised_errors(runs: dict, fact) -> tuple[str, dict]:
    """' Error against fp64 on the unquantised inputs: A … (quantising alone: …); B ….' where a side of `runs`
    ("a", "b") has quantised inputs; ('', {}) where none has. A speed is never said of fp8 without it. The sides are
    named by their letters: the sentence before it has named them."""
    if not any(r.workload.quantised for r in runs.values()):
        return "", {}
    said_, facts = [], {}
    for w, run in runs.items():
        if run.accuracy is None:
            continue
        facts[f"{w}_fp64_error"] = fact(run, "accuracy.max_abs_error", "error", w)
        part = f"{w.upper()} {{{w}_fp64_error}}"
        if run.accuracy.quantisation_max_abs_error is not None:
            facts[f"{w}_quantisation"] = fact(run, "accuracy.quantisation_max_abs_error", "error", w)
            part += f" (quantising alone: {{{w}_quantisation}})"
        said_.append(part)
    if not said_:
        return "", {}
    return " Error against fp64 on the unquantised inputs: " + "; ".join(said_) + ".", facts


def _said(a: Run, b: Run, v: Verdict, names: tuple[str, str], on: str, facts: dict, fact) -> tuple[str, dict]:
    facts, more = dict(facts), {}
    figures = f"{{a}} vs {{b}} per {text.call(a.workload)} ({v.what})"
    name = {"a": names[0], "b": names[1]}
    if v.kind == "wrong":
        return _wrong(a, b, v, name, on, figures, fact)
    if a.variant == b.variant and a.workload == b.workload:
        return f"{name['a']} and {name['b']} are the same variant, so no winner {on}: {figures}.", more
    if v.kind == "ranked":
        slow = "b" if v.faster == "a" else "a"
        more["ratio"] = ratio(facts[slow], facts[v.faster])
        figures = f"{{{v.faster}}} vs {{{slow}}} per {text.call(a.workload)} ({v.what})"  # in the order named
        return f"{name[v.faster]} is {{ratio}} faster than {name[slow]} {on}: {figures}.", more
    if v.kind == "no_practical_difference":
        low, high = ("a", "b") if v.faster != "b" else ("b", "a")
        more["gap"] = difference(ratio(facts[high], facts[low], "share"), constant(1.0, "share", "1"))
        more["threshold"] = constant(v.threshold, "share", repr(v.threshold))
        return (f"{name['a']} and {name['b']} differ by {{gap}} {on}, under the {{threshold}} that counts as a "
                f"practical difference: {figures}."), more
    if v.kind == "too_few":
        fewer, who = min(((a, "a"), (b, "b")), key=lambda rw: getattr(rw[0], v.path).kept)
        more["n"] = fact(fewer, f"{v.path}.kept", "count", who)
        return (f"{name['a']} and {name['b']} cannot be ranked {on}: {{n}} samples on a side are too few for the "
                f"test: {figures}."), more
    if v.kind == "host_gaps":
        gapped = " and ".join(name[w] for w, r in (("a", a), ("b", b)) if r.timing is not None and r.timing.host_gaps)
        return (f"{name['a']} and {name['b']} are not ranked {on}: {gapped}'s GPU time includes gaps where the GPU "
                f"waited for the host: {figures}."), more
    if quartiles_apart(getattr(a, v.path), getattr(b, v.path)):
        # the middle halves are apart and the test still finds no order: samples in the tails cross over (a complete
        # separation would have ranked them, as `too_few` is ruled out), so say which, counted from the samples
        more["ratio"] = unconfirmed_gap(facts["a"], facts["b"])
        runs = {"a": a, "b": b}
        timing = {w: fact(runs[w], v.path, "count", w) for w in runs}
        low = "a" if facts["a"].value < facts["b"].value else "b"
        high = "b" if low == "a" else "a"
        crossing = []
        for w, other, beyond in ((low, high, "slower"), (high, low, "faster")):
            counted = beyond_median(timing[w], timing[other])
            if counted.value:
                more[f"{w}_beyond"], more[f"{w}_kept"] = counted, fact(runs[w], f"{v.path}.kept", "count", w)
                crossing.append(f"{{{w}_beyond}} of {w.upper()}'s {{{w}_kept}} samples "
                                f"{'is' if counted.value == 1 else 'are'} {beyond} than {other.upper()}'s median"
                                if not crossing else  # the second said as briefly: the card holds 60 words
                                f"{{{w}_beyond}} of {w.upper()}'s {{{w}_kept}} {beyond} than {other.upper()}'s")
        tails = ", ".join(crossing) or "the tails of their samples overlap"
        return (f"{name['a']} and {name['b']} are not ranked {on}: {figures}, {{ratio}} apart; {tails}: too spread "
                "to rank."), more
    return f"{name['a']} and {name['b']} are level within noise {on}: {figures}.", more


def _wrong(a: Run, b: Run, v: Verdict, name: dict, on: str, figures: str, fact) -> tuple[str, dict]:
    """The headline of a pair with a wrong answer: who is wrong, its error and plain attention's, the limit and why;
    no order, whatever the times say."""
    runs, said_ = {"a": a, "b": b}, []
    more = {"factor": constant(WRONG_FACTOR, "x", repr(WRONG_FACTOR)),
            "passed": constant(FLASH_TESTS_FACTOR, "x", repr(FLASH_TESTS_FACTOR))}
    for w in v.wrong:
        gate = wrong_answer(runs[w])
        more |= {f"{w}_error": fact(runs[w], gate.error, "error", w),
                 f"{w}_plain": fact(runs[w], gate.plain, "error", w)}
        quantised = fact(runs[w], gate.quantised, "error", w) if gate.quantised else None
        more[f"{w}_limit"] = gate.limit(more[f"{w}_plain"], quantised)
        if quantised is not None and quantised.value >= max(more[f"{w}_plain"].value, gate.floor):
            more[f"{w}_quantised"] = quantised
            basis = (f"{{factor}} the fp8 quantisation's own error, {{{w}_quantised}}: fp64 on the dequantised inputs "
                     f"against fp64 on the unquantised ones; plain attention in {runs[w].workload.drawn} errs by "
                     f"{{{w}_plain}}")
        elif more[f"{w}_plain"].value < gate.floor:
            more["floor"] = constant(gate.floor, "error", repr(gate.floor))
            basis = f"{{factor}} {{floor}}, TF32's rounding, as plain attention in {runs[w].workload.dtype} is off by only {{{w}_plain}}"
        else:
            basis = f"{{factor}} plain attention's in {runs[w].workload.drawn}, {{{w}_plain}}"
        said_.append(f"{name[w]}'s {gate.what} is off from fp64 by up to {{{w}_error}}, past {{{w}_limit}} ({basis})")
    one = len(v.wrong) == 1
    who = " and ".join(name[w] for w in v.wrong)
    return (f"{who} {'gives a wrong answer' if one else 'give wrong answers'} {on}, so "
            f"{'it is not' if one else 'neither is'} ranked: " + "; ".join(said_)
            + (". A kernel that applies its descales errs by a small multiple of the quantisation's own error"
               if any(wrong_answer(runs[w]).quantised for w in v.wrong) else
               ". FlashAttention's tests pass a kernel within {passed} plain attention's error")
            + f": {{factor}} is no rounding difference. Not compared: {figures}."), more


def _fallback(run: Run, side: str) -> tuple[str, dict]:
    """SDPA left to choose that took its math path: the quiet slow path is the lesson, so the headline says it."""
    if not (on_gpu(run) and pinned(run) == "auto" and ran(run) == "math") or run.peak_extra_bytes is None:
        return "", {}
    facts = {f"{side}_math_kernels": measured(run, "kernels_per_forward", "count", side),
             f"{side}_math_peak": measured(run, "peak_extra_bytes", "bytes", side)}
    quiet = "" if run.pytorch_warnings else ", with no warning,"
    return (f" {label(run)}{quiet} took SDPA's math path: {{{side}_math_kernels}} kernels, {{{side}_math_peak}} at "
            "peak.", facts)


def _reasons(fast: Run, slow: Run, path: str, side: dict) -> tuple[list[str], dict]:
    """What the two traces show that makes `slow` slower on the compared figure, as sentence templates and their
    facts; ([], {}) only when nothing anywhere in them explains it. On the back-to-back figure: what holds the slow
    side's loop back (its host, or neither side), and where its GPU work alone outlasts the fast side's pace, what
    the GPU does (the same as on GPU time)."""
    reasons, facts = [], {}
    s, f = side[id(slow)], side[id(fast)]
    if path == "back_to_back":
        facts |= {"slow_gpu": call_gpu(slow, s), "slow_host": measured(slow, "host_cost.median_ms", "ms", s)}
        if slow.bound == "host":
            reasons.append(f"{label(slow)} is host-bound: the CPU takes {{slow_host}} to issue a {slow.call} whose "
                           "GPU work takes {slow_gpu}")
        elif slow.bound == "other":
            facts["slow_pace"] = measured(slow, "back_to_back.median_ms", "ms", s)
            reasons.append(f"{label(slow)}'s loop runs at {{slow_pace}}, slower than its GPU work ({{slow_gpu}}) and "
                           "its host cost ({slow_host})")
        if slow.call_gpu_ms < fast.call_gpu_ms:
            facts["fast_gpu"] = call_gpu(fast, f)
            reasons.append(f"on the GPU alone {label(slow)} is the faster ({{slow_gpu}} vs {{fast_gpu}})")
            return reasons, facts
        if slow.call_gpu_ms < fast.back_to_back.median_ms:  # the slow side's GPU work fits in the fast one's pace
            return reasons, facts
    gpu, more = _gpu_reasons(fast, slow, side)
    if reasons and len(gpu) > 1:  # the loop's reason first; of the GPU's, the first (one note stays readable)
        gpu = gpu[:1]
        more = {k: v for k, v in more.items() if "{" + k + "}" in gpu[0]}
    return reasons + gpu, facts | more


def _gpu_reasons(fast: Run, slow: Run, side: dict) -> tuple[list[str], dict]:
    """What the two traces' GPU work shows: FFMA GEMMs, the S×S scores through memory, many more kernels, an older
    kernel design, and the kernel role (phase and category) whose time differs most: kernels compared by what they do
    and how long they take, never by name across implementations."""
    reasons, facts = [], {}
    s, f, phase = side[id(slow)], side[id(fast)], slow.phase
    if any(instruction(k) == "ffma" for k in kernels_in(slow, "gemm", phase=phase)) and \
            not any(instruction(k) == "ffma" for k in kernels_in(fast, "gemm", phase=phase)):
        reasons.append(f"{label(slow)}'s GEMMs run in fp32 on CUDA cores (FFMA)")
    # grouped-query attention by hand: K and V copied to every query head, often more time than the scores take
    copies = [(k, launch) for k, launch in launches(slow, "aten::repeat_interleave", phase=phase)]
    gap_us = 1000 * (slow.timing.median_ms - fast.timing.median_ms)
    if copies and not launches(fast, "aten::repeat_interleave", phase=phase) and \
            sum(launch.us_per_forward for _, launch in copies) >= 0.25 * gap_us:  # a cause of the gap, not a crumb
        facts |= {"copies": total(of_launch(slow, k, launch, "us_per_forward", "us", s) for k, launch in copies),
                  "copies_share": launch_share(slow, copies, phase, s)}
        reasons.append(f"{label(slow)} copies K and V to every query head ({{copies}}, {{copies_share}})")
    square = square_scores(slow)  # its scores are S×S (not one packed sequence's T×T, nor per document)
    if square and not slow.workload.training:
        scores = scores_bytes(slow, s)
        if slow.peak_extra_bytes and fast.peak_extra_bytes is not None and not fused(slow) and \
                slow.peak_extra_bytes >= 0.9 * scores.value > fast.peak_extra_bytes:
            facts["scores"] = scores
            reasons.append(f"{label(slow)} writes the S×S scores ({{scores}}) through memory; {label(fast)} never does")
    elif square and slow.saved_bytes and fast.saved_bytes is not None and slow.saved_bytes >= 0.9 * scores_bytes(slow).value \
            > fast.saved_bytes:
        facts |= {"saved_slow": measured(slow, "saved_bytes", "bytes", s),
                  "saved_fast": measured(fast, "saved_bytes", "bytes", f)}
        reasons.append(f"{label(slow)} keeps {{saved_slow}} for its backward, the S×S probabilities among it; "
                       f"{label(fast)} {{saved_fast}}")
    if slow.launches(phase) >= 2 * max(fast.launches(phase), 1e-9) and fast.launches(phase) > 0:
        facts |= {"slow_kernels": launch_count(slow, phase, s), "fast_kernels": launch_count(fast, phase, f)}
        runs = "launches {slow_kernels} kernels" if on_gpu(slow) else "runs {slow_kernels} aten ops"  # a CPU's table
        reasons.append(f"{label(slow)} {runs} per {phase}, {label(fast)} {{fast_kernels}}")
    main_fast, main_slow = main_kernel(fast), main_kernel(slow)
    if main_fast and main_slow and hopper_design(main_fast) and ampere_design(main_slow):
        reasons.append(f"{label(fast)}'s kernel is written for {fast.environment.sm}; {label(slow)}'s "
                       f"({text.kernel(main_slow, 32)}) is an Ampere-design kernel")
    role, more = _role_gap(fast, slow, side)
    if role and len(reasons) < 2:
        reasons.append(role)
        facts |= more
    return reasons[:3], facts


ROLES = {"fused attention": "attention", "triton": "attention"}  # a generated attention kernel is the same role


def _role_gap(fast: Run, slow: Run, side: dict) -> tuple[str | None, dict]:
    """The kernel role (phase and category: 'forward memcpy', 'backward gemm') where the slow side spends the most
    time beyond the fast one, when that is at least a quarter of the gap between them on the GPU."""
    phase = slow.phase
    gap_us = 1000 * (slow.timing.median_ms - fast.timing.median_ms)  # GPU time of the phase both are of
    if gap_us <= 0 or not all(on_gpu(run) or _profile_is_the_timed_call(run) for run in (slow, fast)):
        return None, {}
    by_role: dict[tuple[str, str], list[list]] = defaultdict(lambda: [[], []])
    for i, run in enumerate((slow, fast)):
        for k in run.kernels_of(phase):
            by_role[k.phase, ROLES.get(k.category, k.category)][i].append(k)
    if not by_role:
        return None, {}
    (role_phase, category), (slows, fasts) = max(
        by_role.items(), key=lambda item: sum(k.us_per_forward for k in item[1][0])
        - sum(k.us_per_forward for k in item[1][1]))
    extra = sum(k.us_per_forward for k in slows) - sum(k.us_per_forward for k in fasts)
    if extra < 0.25 * gap_us or not slows:
        return None, {}
    s, f = side[id(slow)], side[id(fast)]
    facts = {"role_slow": total(of_kernel(slow, k, "us_per_forward", "us", s) for k in slows)}
    where = f"{role_phase} " if slow.phase == "step" else ""
    unit = "kernels" if on_gpu(slow) else "ops"  # a CPU's table: aten ops by CPU time
    if not fasts:
        return f"{label(slow)}'s {where}{category} {unit} take {{role_slow}} per {phase}; {label(fast)} runs none", facts
    facts["role_fast"] = total(of_kernel(fast, k, "us_per_forward", "us", f) for k in fasts)
    return (f"{label(slow)}'s {where}{category} {unit} take {{role_slow}} per {phase} to {label(fast)}'s "
            "{role_fast}", facts)


PROFILE_AGREES = 1.25  # a CPU's profiled call within this factor of its timed one: its ops' µs describe that call


def _profile_is_the_timed_call(run: Run) -> bool:
    """On a CPU the op table's µs are self times under the profiler: they describe the timed call only where the
    profiled call took about as long (a fresh CLI process on a busy 2-core CPU profiled compiled flex's calls at 14x
    their timed 0.32 ms, and the reason said its ops took 5.4 ms per forward)."""
    if not (run.profiled_host_ms and run.timing and run.timing.median_ms):
        return False
    return 1 / PROFILE_AGREES <= run.profiled_host_ms / run.timing.median_ms <= PROFILE_AGREES


def ranking_notes(a: Run, b: Run) -> list[Note]:
    """Why the faster run wins, with the reasons the traces show (or saying they show none), worded as a
    contradiction where the guess ranked them the other way; and a note where the host-cost order contradicts
    the guess, by the same test on the host cost."""
    ga, gb = guess(a), guess(b)
    if not (a.ok and b.ok and ga and gb) or a.variant == b.variant:
        return []
    side = {id(a): "a", id(b): "b"}
    notes = []
    v = decision(a, b)
    if v.kind == "wrong":  # a wrong answer is ranked on no figure, its host cost included
        return []
    if v.kind == "ranked":
        fast, slow = (a, b) if v.faster == "a" else (b, a)
        facts = {"ratio": ratio(measured(slow, f"{v.path}.median_ms", "ms", side[id(slow)]),
                                measured(fast, f"{v.path}.median_ms", "ms", side[id(fast)]))}
        reasons, because = _reasons(fast, slow, v.path, side)
        facts |= because
        contradicts = guess(slow).speed_rank < guess(fast).speed_rank
        title = (f"Guessed {label(slow)} faster; {label(fast)} is, by {{ratio}}" if contradicts else
                 f"Why {label(fast)} is {{ratio}} faster")
        while len(reasons) > 1 and text.word_count(text.fill(f"{title} {'; '.join(reasons)}.", facts, {})) \
                > CARD_WORDS:
            reasons.pop()  # the card stays short: the reasons past it are the notes' below (long labels, fp8 twins)
        body = ("; ".join(reasons) + ".") if reasons else \
            ("The traces do not show why: no difference in arithmetic, memory, kernel count, kernel roles or host "
             "cost explains it.")
        body = text.sentence(body)
        off = 1 - 1 / facts["ratio"].value
        errors, more = quantised_errors({"a": a, "b": b},  # fp8: its error beside
                                        lambda run, path, unit, who: measured(run, path, unit, who))
        facts |= more
        notes.append(note("speed", "verdict", title + (f".{errors}" if errors else ""),
                          body, weight=min(0.95, off + 0.2) if contradicts else 0.8 * off, facts=facts,
                          evidence=[f"guessed speed rank (1 = fastest): {label(a)} {ga.speed_rank}, "
                                    f"{label(b)} {gb.speed_rank}", f"figure compared: {v.what}"]))
    if ga.host_rank != gb.host_rank and a.host_cost is not None and b.host_cost is not None:
        expected, other = (a, b) if ga.host_rank < gb.host_rank else (b, a)
        d = stats.decide(_samples(expected.host_cost), _samples(other.host_cost),
                         drift=0.0 if v.same_session else CROSS_SESSION_DRIFT["back_to_back"])
        if d.kind == "ranked" and d.faster == "b":  # the one guessed heavier is lighter
            facts = {"ratio": ratio(measured(expected, "host_cost.median_ms", "ms", side[id(expected)]),
                                    measured(other, "host_cost.median_ms", "ms", side[id(other)])),
                     "expected": measured(expected, "host_cost.median_ms", "ms", side[id(expected)]),
                     "other": measured(other, "host_cost.median_ms", "ms", side[id(other)])}
            ops = {id(r): sum(h.calls_per_forward for h in r.host_ops if h.name.startswith("aten::"))
                   for r in (a, b)}
            if ops[id(expected)] >= 1.5 * ops[id(other)] > 0:
                reason = (f"{label(expected)} makes {text.count(ops[id(expected)])} aten calls per {a.call} to "
                          f"{text.count(ops[id(other)])}, each a trip through the dispatcher.")
            else:
                reason, more = _host_reason(expected, side[id(expected)])
                facts |= more
            notes.append(note("host_ranking", "verdict",
                              f"Guessed {label(expected)} lighter on the host; {label(other)} is, by {{ratio}}",
                              f"CPU cost to issue one {a.call}, unprofiled: {{expected}} vs {{other}}. " + reason,
                              weight=min(0.9, 1 - 1 / facts["ratio"].value), facts=facts))
    return notes


def _host_reason(run: Run, who: str) -> tuple[str, dict]:
    """Where the heavier side's host time goes, from its profiled host ops: the op with the largest own time, as a
    share of the profiled call (the profiler inflates every op: only shares are said)."""
    top = max(run.host_ops, key=lambda h: h.self_us_per_forward, default=None)
    if top is None or not run.profiled_host_ms:
        return "The traces do not show why; the cause is not known.", {}
    share = host_share(run, run.host_ops.index(top), "its", who)
    return f"{label(run)}'s own `{text.host_op(top.name)}` takes {{top_share}}.", {"top_share": share}
