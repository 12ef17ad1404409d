"""A vs B: the headline (who wins, by how much, on what) and a note wherever the measured order contradicts
the guessed one, with the reasons the two traces show, or saying that they show none.

An order is stated only when the two timing distributions do not overlap (`ordered`). The figure compared
is the one that bounds a call: the CPU's cost to issue it for a host-bound run, GPU time otherwise.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import text
from ..results import Note, Run, Timing
from .environment_rules import refusal
from .facts import (ampere_design, guess, instruction, kernels_in, label, main_kernel, measured, note, of_kernel,
                    ratio)

if TYPE_CHECKING:
    from ..sweep import SweepPoint


def bounding(run: Run | SweepPoint, device: str | None = None) -> tuple[Timing, str, str]:
    """The timing that sets the pace of a call, its path in the run, and what it is in words. A sweep's point
    does not carry its device: give it."""
    if run.bound == "host" and run.host_cost is not None:
        return run.host_cost, "host_cost", "CPU per call, host-bound"
    what = "GPU, CUDA events" if (device or run.environment.device) == "cuda" else "wall time"
    return run.timing, "timing", what


QUARTILE_SAMPLES, RANGE_SAMPLES = 20, 8


def ordered(fast: Timing, slow: Timing) -> bool:
    """The named test. With at least 20 samples a side: `fast`'s 75th percentile below `slow`'s 25th. With
    8 to 19: every sample of `fast` below every sample of `slow`. Fewer: no order. For two samples of one
    distribution these fire about 0.2% and 0.02% of the time (simulated; a 5-sample quartile test fires in
    one comparison of five), so noise is not called a winner."""
    n = min(fast.samples, slow.samples)
    if n >= QUARTILE_SAMPLES and fast.p75_ms is not None and slow.p25_ms is not None:
        return fast.p75_ms < slow.p25_ms
    return n >= RANGE_SAMPLES and fast.max_ms < slow.min_ms


def _where(run: Run) -> str:
    return text.on_device(run.environment)


def headline(a: Run, b: Run) -> Note:
    """One sentence: who wins, by how much, on what; or level within noise; or who could not run and why."""
    name = {id(a): f"{label(a)} [A]", id(b): f"{label(b)} [B]"}
    failed = [r for r in (a, b) if not r.ok]
    if failed:
        why = {f"why_{i}": refusal(r)[0] for i, r in enumerate(failed)}
        said = "; ".join(f"{name[id(r)]} could not run {_where(r)} ({{why_{i}}})" for i, r in enumerate(failed))
        ok = [r for r in (a, b) if r.ok]
        facts = {"time": measured(ok[0], "timing.median_ms", "ms", "a" if ok[0] is a else "b")} if ok else {}
        rest = f"; {name[id(ok[0])]} ran at {{time}} per forward." if ok else "."
        return note("verdict", "verdict", said + rest, "", weight=1.0, facts=facts, names=why)
    (ta, pa, wa), (tb, pb, wb) = bounding(a), bounding(b)
    facts = {"a": measured(a, f"{pa}.median_ms", "ms", "a"), "b": measured(b, f"{pb}.median_ms", "ms", "b")}
    what = wa if wa == wb else f"{wa} vs {wb}"
    same = a.variant == b.variant
    fast, slow = (a, b) if ta.median_ms <= tb.median_ms else (b, a)
    if not same and ordered(*((ta, tb) if fast is a else (tb, ta))):
        facts["ratio"] = ratio(facts["b" if fast is a else "a"], facts["a" if fast is a else "b"])
        first, second = ("a", "b") if fast is a else ("b", "a")
        title = (f"{name[id(fast)]} is {{ratio}} faster than {name[id(slow)]} {_where(a)}, "
                 f"{{{first}}} vs {{{second}}} per forward ({what}).")
    else:
        facts |= {"spread_a": measured(a, f"{pa}.spread_pct", "pct", "a"),
                  "spread_b": measured(b, f"{pb}.spread_pct", "pct", "b")}
        why = "the same variant, so no winner" if same else "level within noise"
        title = (f"{name[id(a)]} and {name[id(b)]} are {why} {_where(a)}: {{a}} vs {{b}} per forward ({what}; "
                 "spread {spread_a} / {spread_b}).")
    return note("verdict", "verdict", title, "", weight=1.0, facts=facts)


def _reasons(fast: Run, slow: Run, side: dict) -> tuple[list[str], dict]:
    """What the two traces show that makes `slow` slower, as sentence templates and their facts; ([], {}) when
    they show nothing that explains it."""
    reasons, facts = [], {}
    if any(instruction(k) == "ffma" for k in kernels_in(slow, "gemm")) and \
            not any(instruction(k) == "ffma" for k in kernels_in(fast, "gemm")):
        reasons.append(f"{label(slow)}'s GEMMs run in fp32 on CUDA cores (FFMA)")
    scores = slow.workload.scores_bytes()
    if slow.peak_extra_bytes and fast.peak_extra_bytes is not None and slow.peak_extra_bytes >= 0.9 * scores \
            > fast.peak_extra_bytes:
        facts["scores"] = measured(slow, "workload.scores_bytes()", "bytes", side[id(slow)])
        reasons.append(f"{label(slow)} writes the S×S scores ({{scores}}) through memory; {label(fast)} never does")
    if (slow.kernels_per_forward or 0) >= 2 * (fast.kernels_per_forward or 1e9):
        facts |= {"slow_kernels": measured(slow, "kernels_per_forward", "count", side[id(slow)]),
                  "fast_kernels": measured(fast, "kernels_per_forward", "count", side[id(fast)])}
        reasons.append(f"{label(slow)} launches {{slow_kernels}} kernels to {{fast_kernels}}")
    main_fast, main_slow = main_kernel(fast), main_kernel(slow)
    if main_fast and main_slow and instruction(main_fast) == "wgmma" and ampere_design(main_slow):
        reasons.append(f"{label(fast)}'s kernel uses Hopper's wgmma; {label(slow)}'s "
                       f"({text.kernel(main_slow, 32)}) is an Ampere-design kernel")
    only = [k for k in slow.kernels if k.short_name not in {f.short_name for f in fast.kernels}
            and k is not main_kernel(slow)]  # a different main kernel is what is compared, not a reason
    gap_us = 1000 * (slow.gpu_ms - fast.gpu_ms) if slow.gpu_ms and fast.gpu_ms else 0
    if only and not reasons:
        k = max(only, key=lambda x: x.us_per_forward)
        if gap_us and k.us_per_forward >= 0.25 * gap_us:
            facts["only"] = of_kernel(slow, k, "us_per_forward", "us", side[id(slow)])
            reasons.append(f"{label(slow)} also runs {text.kernel(k, 40)} ({{only}}), which {label(fast)} does not")
    if slow.bound == "host" and fast.bound != "host":
        reasons.append(f"{label(slow)} is host-bound: the CPU issues its calls slower than the GPU runs them")
    return reasons[:2], facts


def ranking_notes(a: Run, b: Run) -> list[Note]:
    """Why the faster run wins, with the reasons the traces show (or saying they show none), worded as a
    contradiction where the guess ranked them the other way; and a note where the host-cost order contradicts
    the guess."""
    ga, gb = guess(a), guess(b)
    if not (a.ok and b.ok and ga and gb) or a.variant == b.variant:
        return []
    side = {id(a): "a", id(b): "b"}
    notes = []
    (ta, pa, _), (tb, pb, _) = bounding(a), bounding(b)
    fast, slow = (a, b) if ta.median_ms <= tb.median_ms else (b, a)
    (tf, pf, _), (ts, ps, _) = bounding(fast), bounding(slow)
    if ordered(tf, ts):
        facts = {"ratio": ratio(measured(slow, f"{ps}.median_ms", "ms", side[id(slow)]),
                                measured(fast, f"{pf}.median_ms", "ms", side[id(fast)]))}
        reasons, because = _reasons(fast, slow, side)
        facts |= because
        body = ("; ".join(reasons) + ".") if reasons else \
            "The traces do not show why: no difference in arithmetic, memory, kernel count or host cost explains it."
        body = body[0].upper() + body[1:]
        contradicts = guess(slow).speed_rank < guess(fast).speed_rank
        off = 1 - 1 / facts["ratio"].value
        notes.append(note("speed", "verdict",
                          (f"Guessed {label(slow)} faster; {label(fast)} is, by {{ratio}}" if contradicts else
                           f"Why {label(fast)} is {{ratio}} faster"),
                          body, weight=min(0.95, off + 0.2) if contradicts else 0.8 * off, facts=facts,
                          evidence=[f"guessed speed rank (1 = fastest): {label(a)} {ga.speed_rank}, "
                                    f"{label(b)} {gb.speed_rank}"]))
    if ga.host_rank != gb.host_rank and a.host_cost is not None and b.host_cost is not None:
        expected, other = (a, b) if ga.host_rank < gb.host_rank else (b, a)
        if other.host_cost.median_ms < expected.host_cost.median_ms and ordered(other.host_cost, expected.host_cost):
            facts = {"ratio": ratio(measured(expected, "host_cost.median_ms", "ms", side[id(expected)]),
                                    measured(other, "host_cost.median_ms", "ms", side[id(other)])),
                     "expected": measured(expected, "host_cost.median_ms", "ms", side[id(expected)]),
                     "other": measured(other, "host_cost.median_ms", "ms", side[id(other)])}
            ops = {id(r): sum(h.calls_per_forward for h in r.host_ops) for r in (a, b)}
            reason = (f"{label(expected)} makes {text.count(ops[id(expected)])} aten calls per forward to "
                      f"{text.count(ops[id(other)])}, each a trip through the dispatcher."
                      if ops[id(expected)] >= 1.5 * ops[id(other)] > 0 else
                      "The traces do not show why; the cause is not known.")
            notes.append(note("host_ranking", "verdict",
                              f"Guessed {label(expected)} lighter on the host; {label(other)} is, by {{ratio}}",
                              "CPU cost to issue one forward, unprofiled: {expected} vs {other}. " + reason,
                              weight=min(0.9, 1 - 1 / facts["ratio"].value), facts=facts))
    return notes
