"""The wall-time cost model (`profiling.budget.predicted_seconds`) against real comparisons on this machine.

    python bench/calibrate_cost.py            # a grid of pairs, dtypes, shapes and passes on the CPU (~5 minutes)
    python bench/calibrate_cost.py --decode   # decode steps: a few queries against a long KV cache (~2 minutes)

Each row: a fresh workload (inputs and reference included), A and B through the front door
(`profiling.session.compare`), as the app runs them; the ratio measured/predicted should stay at or below 1 (the
model errs long) and not far below (it refuses too much). The CPU rates in `profiling/budget.py` were set from
rows like these.
"""
from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from attention_variants import VARIANTS  # noqa: E402
from profiling import session  # noqa: E402
from profiling.budget import cpu_16bit_speed, machine_load, predicted_seconds  # noqa: E402
from profiling.environment import detect  # noqa: E402
from profiling.measurement import _cache  # noqa: E402
from profiling.request import LIVE, Request  # noqa: E402

PAIRS = (("naive", "sdpa_math"), ("naive_inplace", "sdpa_flash"))
SHAPES = ((1, 2, 1024, 64), (1, 8, 512, 64), (1, 1, 2048, 16), (1, 4, 1024, 128), (1, 1, 4096, 8))
# decode steps on the CPU's base workload (8 heads, D=64): (B, kv heads, S, q_len), the page's decode presets' and
# the sizes the sweeps over S and over B reach
DECODE_PAIRS = (("naive", "sdpa_flash"), ("sdpa_math", "sdpa_flash"))
DECODE_SHAPES = ((1, 2, 8192, 1), (1, 2, 32768, 4), (1, 2, 131072, 1), (2, 2, 65536, 1))


def others_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy, less this process's own (/proc/stat; 0 where there is none)."""
    try:
        with open("/proc/stat") as stat:
            f = [int(n) for n in stat.readline().split()[1:]]
    except OSError:
        return 0.0
    own = resource.getrusage(resource.RUSAGE_SELF)
    return (sum(f) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK") - own.ru_utime - own.ru_stime


def request(a: str, b: str, **fields) -> Request:
    return Request.build(LIVE, a, b, fields, "cpu")


def grid():
    """(a, b, fields) of each row: the forward and training grid, or with --decode the decode steps'."""
    if "--decode" in sys.argv:
        for batch, kv_heads, seq_len, q_len in DECODE_SHAPES:
            for a, b in DECODE_PAIRS:
                yield a, b, dict(batch=batch, kv_heads=kv_heads, seq_len=seq_len, q_len=q_len)
        return
    for passes in ("fwd", "fwd+bwd"):
        for dtype in ("fp32", "bf16"):
            for batch, heads, seq_len, head_dim in SHAPES:
                for a, b in PAIRS:
                    yield a, b, dict(batch=batch, heads=heads, seq_len=seq_len, head_dim=head_dim, dtype=dtype,
                                     passes=passes)


def main() -> None:
    env = detect("cpu")
    session.compare(request("naive", "sdpa_flash", seq_len=64))  # the process's first-call costs, not a row's
    # and a decode step's (CPU flash's first call with fewer queries than keys took 1-1.6 s, once a process)
    session.compare(request("naive", "sdpa_flash", seq_len=256, q_len=1))
    speed = cpu_16bit_speed()
    print(f"cpu_16bit_speed: bf16 {speed['bf16']:.4f}, fp16 {speed['fp16']:.4f} (of fp32's; read once, as the app does); "
          f"others: the share of the {os.cpu_count()} cores other processes took during the row; load: the 1-minute "
          f"load average as it began, which the plan prices (predicted: idle; loaded: at that load)")
    print(f"{'pair':26s} {'workload':52s} {'measured s':>10s} {'predicted s':>11s} {'ratio':>6s} {'others':>6s} "
          f"{'load':>5s} {'loaded s':>8s}")
    worst = 0.0
    for a, b, fields in grid():
        r = request(a, b, **fields)
        _cache.clear()
        load = machine_load() or 0.0
        predicted = predicted_seconds(r.workload, (VARIANTS[a], VARIANTS[b]), env, load=0.0)
        loaded = predicted_seconds(r.workload, (VARIANTS[a], VARIANTS[b]), env, load=load)
        start, others = time.perf_counter(), others_cpu_s()
        session.compare(r)
        measured = time.perf_counter() - start
        others = max(0.0, others_cpu_s() - others) / ((os.cpu_count() or 1) * measured)
        worst = max(worst, measured / predicted)
        print(f"{a + ' vs ' + b:26s} {r.workload.words():52s} {measured:10.2f} {predicted:11.2f} "
              f"{measured / predicted:6.2f} {others:6.2f} {load:5.2f} {loaded:8.2f}", flush=True)
    print(f"\nworst measured/predicted: {worst:.2f} (target <= 1)")


if __name__ == "__main__":
    main()
