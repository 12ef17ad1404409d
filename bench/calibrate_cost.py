"""The wall-time cost model (`profiling.workload.predicted_seconds`) against real comparisons on this machine.

    python bench/calibrate_cost.py            # a grid of pairs, dtypes and shapes on the CPU (~5 minutes)

Each row: a fresh workload (inputs and reference included), A then B, as the app runs them; the ratio
measured/predicted should stay at or below 1 (the model errs long) and not far below (it refuses too much).
The CPU rates in `profiling/workload.py` were set from rows like these.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from attention_variants import VARIANTS  # noqa: E402
from profiling.measurement import _cache, compare  # noqa: E402
from profiling.workload import Workload, predicted_seconds  # noqa: E402

PAIRS = (("naive", "sdpa_math"), ("naive_inplace", "sdpa_flash"))
SHAPES = ((1, 2, 1024, 64), (1, 8, 512, 64), (1, 1, 2048, 16), (1, 4, 1024, 128), (1, 1, 4096, 8))


def main() -> None:
    compare("naive", "sdpa_flash", Workload.cpu_default(seq_len=64))  # the process's first-call costs, not a row's
    print(f"{'pair':26s} {'workload':40s} {'measured s':>10s} {'predicted s':>11s} {'ratio':>6s}")
    worst = 0.0
    for dtype in ("fp32", "bf16", "fp16"):
        for batch, heads, seq_len, head_dim in SHAPES:
            w = Workload(batch=batch, heads=heads, seq_len=seq_len, head_dim=head_dim, dtype=dtype, device="cpu")
            for a, b in PAIRS:
                _cache.clear()
                predicted = predicted_seconds(w, (VARIANTS[a], VARIANTS[b]))
                start = time.perf_counter()
                compare(a, b, w)
                measured = time.perf_counter() - start
                worst = max(worst, measured / predicted)
                print(f"{a + ' vs ' + b:26s} {w.label():40s} {measured:10.2f} {predicted:11.2f} {measured / predicted:6.2f}",
                      flush=True)
    print(f"\nworst measured/predicted: {worst:.2f} (target <= 1)")


if __name__ == "__main__":
    main()
