"""Would fewer host-figure rounds do? Read from the H200 recording, no GPU needed (issue 29: the host figures are a
third of a warm fused pair's wall time; cut them only where measurement shows waste):

    python bench/host_rounds_needed.py        # the table on stdout (bench/host_rounds_needed.txt holds it)

For every recorded run whose host figures took 8 rounds: the bound (`Run.bound`'s rule) and the back-to-back median
from the first k rounds against those from all 8. A budget of k rounds would answer as the first k do (the rounds are
taken in order, alternating between the variants).
"""
from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from profiling.explain.verdict import decision, figure  # noqa: E402
from profiling.replay import recorded_runs  # noqa: E402
from profiling.stats import LEVEL, min_p  # noqa: E402
from profiling.results import HOST_BOUND, Timing  # noqa: E402

RECORDING = "h200-torch2.11"


def bound(back_to_back_ms: float, host_ms: float, gpu_ms: float) -> str:
    if back_to_back_ms <= HOST_BOUND * gpu_ms:
        return "gpu"
    return "host" if HOST_BOUND * host_ms >= gpu_ms else "other"


def main() -> None:
    runs = [r for r in recorded_runs(RECORDING) if r.ok and r.back_to_back and r.host_cost and r.warm_call_ms
            and len(r.back_to_back.samples_ms) == 8]
    print(f"{len(runs)} recorded runs with 8 rounds of host figures ({RECORDING})")
    for timing in ("warm", "cold", "graph"):
        of_timing = [r for r in runs if r.workload.timing == timing]
        for k in (2, 4, 6):
            agree, off = 0, []
            for r in of_timing:
                loops, host = r.back_to_back.samples_ms, r.host_cost.samples_ms
                per_round = len(host) // len(loops)
                full = bound(statistics.median(loops), statistics.median(host), r.warm_call_ms)
                part = bound(statistics.median(loops[:k]), statistics.median(host[:k * per_round]), r.warm_call_ms)
                agree += part == full
                off.append(abs(statistics.median(loops[:k]) / statistics.median(loops) - 1))
            off.sort()
            print(f"  {timing:5} first {k} rounds: the same bound in {agree / len(of_timing):6.1%} of {len(of_timing)}; "
                  f"back-to-back median off by {off[len(off) // 2]:.1%} (median), {off[int(0.95 * len(off))]:.1%} "
                  f"(95th percentile), {off[-1]:.0%} (worst)")


def long_calls() -> None:
    """Calls of a millisecond or more (4 rounds recorded, some 8): would a back-to-back loop in the first k rounds
    alone do, the host cost's parked calls still taken in all? The bound and the median say yes; the headline's rank
    test says no wherever the back-to-back figure is the one compared (a side host-bound): at LEVEL, 2 samples
    against a host-bound side's 8 can never rank (stats.min_p), where 4 could."""
    runs = [r for r in recorded_runs(RECORDING) if r.ok and r.back_to_back and r.host_cost and r.warm_call_ms
            and r.warm_call_ms >= 1.0 and len(r.back_to_back.samples_ms) >= 4]
    print(f"{len(runs)} recorded runs of 1 ms or more, 4 or 8 rounds (the loops from the first k, the host cost "
          f"from all)")
    for k in (1, 2, 3):
        agree, off = 0, []
        for r in runs:
            loops, host = r.back_to_back.samples_ms, statistics.median(r.host_cost.samples_ms)
            full = bound(statistics.median(loops), host, r.warm_call_ms)
            agree += bound(statistics.median(loops[:k]), host, r.warm_call_ms) == full
            off.append(abs(statistics.median(loops[:k]) / statistics.median(loops) - 1))
        off.sort()
        print(f"  first {k} loops: the same bound in {agree / len(runs):6.1%} of {len(runs)}; back-to-back median "
              f"off by {off[len(off) // 2]:.2%} (median), {off[int(0.95 * len(off))]:.2%} (95th percentile), "
              f"{off[-1]:.1%} (worst)")
    sessions = defaultdict(list)
    for r in recorded_runs(RECORDING):
        if r.ok and r.back_to_back and r.warm_call_ms:
            sessions[r.session].append(r)
    pairs = [(a, b) for runs_ in sessions.values() for i, a in enumerate(runs_) for b in runs_[i + 1:]
             if figure(a, b)[0] == "back_to_back" and max(a.warm_call_ms, b.warm_call_ms) >= 1.0]
    kinds = Counter(decision(a, b).kind for a, b in pairs)
    print(f"  but {len(pairs)} recorded pairs (one session each) compare back to back with a side of 1 ms or more "
          f"({dict(kinds)}): with 2 loops, stats.min_p(2, 8) = {min_p(2, 8):.3f} > LEVEL {LEVEL}, every one 'too "
          f"few samples'. The loops stay in every round.")


def early_stop(within: float = 0.04, after: int = 4) -> None:
    """Calls under 1 ms (8 rounds): would a variant whose first `after` loops all came within `within` of its GPU
    time (GPU-bound beyond doubt) do with those rounds alone, loops and parked calls? Re-decides every recorded pair
    of one workload with such runs cut to their first `after` rounds."""
    runs = [r for r in recorded_runs(RECORDING) if r.ok and r.back_to_back and r.host_cost and r.warm_call_ms
            and len(r.back_to_back.samples_ms) == 8]
    cut = {id(r): r for r in runs if max(r.back_to_back.samples_ms[:after]) <= (1 + within) * r.warm_call_ms}
    flips = sum(bound(statistics.median(r.back_to_back.samples_ms), statistics.median(r.host_cost.samples_ms),
                      r.warm_call_ms) != "gpu" for r in cut.values())
    host_off = sorted(abs(statistics.median(r.host_cost.samples_ms[:after * (len(r.host_cost.samples_ms) // 8)])
                          / statistics.median(r.host_cost.samples_ms) - 1) for r in cut.values())

    def shortened(r):
        if id(r) not in cut:
            return r
        per_round = len(r.host_cost.samples_ms) // 8
        return replace(r, back_to_back=Timing.of(r.back_to_back.samples_ms[:after], r.back_to_back.method),
                       host_cost=Timing.of(r.host_cost.samples_ms[:after * per_round], r.host_cost.method))
    timed = [r for r in recorded_runs(RECORDING) if r.ok and r.back_to_back and r.warm_call_ms]
    pairs = [(a, b) for i, a in enumerate(timed) for b in timed[i + 1:] if a.workload == b.workload]
    changed = sum((d.kind, d.path, d.faster) != (e.kind, e.path, e.faster)
                  for d, e in ((decision(a, b), decision(shortened(a), shortened(b))) for a, b in pairs))
    print(f"{len(cut)} of {len(runs)} runs under 1 ms had every one of their first {after} loops within "
          f"{within:.0%} of their GPU time: cut to {after} rounds, the bound holds in all but {flips}, but their host "
          f"cost moves by {host_off[len(host_off) // 2]:.1%} (median), {host_off[int(0.95 * len(host_off))]:.1%} "
          f"(95th percentile), {host_off[-1]:.0%} (worst), and {changed} of {len(pairs)} recorded headlines change "
          f"(a side's back-to-back samples fewer): the rounds stay.")


if __name__ == "__main__":
    main()
    long_calls()
    early_stop()
