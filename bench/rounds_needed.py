"""Would fewer timing rounds do? Read from the H200 recording, no GPU needed (issue 29: cut the warm path only where
measurement shows waste):

    python bench/rounds_needed.py            # the table on stdout (bench/rounds_needed.txt holds it)

Every pair of variants timed in one session (interleaved, as a comparison times A and B) on a warm workload: the
verdict's test (`stats.decide`) on the first k samples of each side against its answer on all of them, and how far
each side's median of the first k is from its median of all. A budget that took k samples would answer as the
first k do (the samples are taken round by round, in order). Last, the pairs with a side of a millisecond or more,
warm, cold and in a CUDA graph: that side cut to its first k samples (timing.LONG_MAX_SAMPLES, warm and cold), the
other kept whole.
"""
from __future__ import annotations

import itertools
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from attention_variants import VARIANTS  # noqa: E402
from profiling.replay import recorded_runs  # noqa: E402
from profiling.stats import decide  # noqa: E402
from profiling.timing import LONG_CALL_S  # noqa: E402

RECORDING = "h200-torch2.11"
PREFIXES = (8, 12, 16, 20, 25, 30, 40)


def pairs(fused_only: bool, mode: str = "warm"):
    runs = [r for r in recorded_runs(RECORDING) if r.ok and r.timing and r.timing.samples_ms
            and r.workload.timing == mode and (not fused_only or VARIANTS[r.variant].fused)]
    sessions: dict[str, list] = {}
    for run in runs:
        sessions.setdefault(run.session, []).append(run)
    for runs in sessions.values():
        yield from itertools.combinations(runs, 2)


def table(fused_only: bool) -> list[str]:
    found = list(pairs(fused_only))
    counts = [min(a.timing.samples, b.timing.samples) for a, b in found]
    lines = [f"{'fused pairs' if fused_only else 'every pair'}: {len(found)} pairs timed together, samples a side "
             f"{min(counts)}…{max(counts)} (median {statistics.median(counts):g})"]
    for k in PREFIXES:
        same = within = 0
        worst = 0.0
        for a, b in found:
            sa, sb = a.timing.samples_ms, b.timing.samples_ms
            full, early = decide(sa, sb), decide(sa[:k], sb[:k])
            same += (early.kind, early.faster) == (full.kind, full.faster)
            off = max(abs(statistics.median(s[:k]) / statistics.median(s) - 1) for s in (sa, sb))
            within += off <= 0.01
            worst = max(worst, off)
        lines.append(f"  first {k:>2} samples: the same verdict in {same / len(found):6.1%}, both medians within 1% "
                     f"of all samples' in {within / len(found):6.1%}, the worst {worst:.1%} off")
    return lines


def call_ms(run) -> float:
    """A call's length as `timing.time_gpu` measures it: a step's forward and backward together (also where the
    figure compared is the backward alone)."""
    if run.forward_timing and run.backward_timing:
        return run.forward_timing.median_ms + run.backward_timing.median_ms
    return run.timing.median_ms


def long_calls(k: int) -> list[str]:
    """Pairs with a side of LONG_CALL_S or more: that side's first `k` samples (each such side), the other's all."""
    lines = []
    for mode in ("warm", "cold", "graph"):
        found = same = 0
        worst, differ = 0.0, []
        for a, b in pairs(False, mode):
            sa, sb = a.timing.samples_ms, b.timing.samples_ms
            long = [call_ms(r) >= LONG_CALL_S * 1000 for r in (a, b)]
            if not any(long):
                continue
            ka, kb = (s[:k] if cut else s for s, cut in zip((sa, sb), long))
            found += 1
            full, early = decide(sa, sb), decide(ka, kb)
            if (early.kind, early.faster) == (full.kind, full.faster):
                same += 1
            else:
                differ.append(f"{full.kind} -> {early.kind} ({len(sa)} and {len(sb)} samples)")
            worst = max(worst, max(abs(statistics.median(c) / statistics.median(s) - 1)
                                   for c, s in ((ka, sa), (kb, sb))))
        lines.append(f"{mode:5} pairs with a side of {LONG_CALL_S * 1000:g} ms or more: {found}; that side's first {k} "
                     f"samples give the same verdict in {same}, its median moves {worst:.2%} at most"
                     + (f"; differ: {'; '.join(differ)}" if differ else ""))
    return lines


if __name__ == "__main__":
    print("\n".join(table(True) + table(False) + long_calls(16)))
