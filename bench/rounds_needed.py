"""Would fewer timing rounds do? Read from the H200 recording, no GPU needed (issue 29: cut the warm path only where
measurement shows waste):

    python bench/rounds_needed.py            # the table on stdout (bench/rounds_needed.txt holds it)

Every pair of variants timed in one session (interleaved, as a comparison times A and B) on a warm workload: the
verdict's test (`stats.decide`) on the first k samples of each side against its answer on all of them, and how far
each side's median of the first k is from its median of all. A budget that took k samples would answer as the
first k do (the samples are taken round by round, in order).
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

RECORDING = "h200-torch2.11"
PREFIXES = (8, 12, 16, 20, 25, 30, 40)


def pairs(fused_only: bool):
    runs = [r for r in recorded_runs(RECORDING) if r.ok and r.timing and r.timing.samples_ms
            and r.workload.timing == "warm" and (not fused_only or VARIANTS[r.variant].fused)]
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


if __name__ == "__main__":
    print("\n".join(table(True) + table(False)))
