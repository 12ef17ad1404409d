"""Rounds of samples queued behind one park (timing.BATCH_GPU_S) against one round per park, on a GPU (~1 min;
issue 29: the warm fused pair's timing rounds were 0.095-0.15 s of its 0.28-0.34 s on the H200, most of it one
wait for the GPU per sample):

    python bench/h200/batch_check.py        # the table on stdout and in $OUT/batch_check.txt

For pairs on the blog's workload (forward, training step, short and long calls, decode), alternating rounds of
`session.measure` with BATCH_GPU_S as set and with 0 (one sample per park), each figure against timing_check's bare
loop (the accuracy target: within 5%), the wall time `timing.time_gpu` took, and the clocks read under load around
the timing (their park now 2 ms beyond the read: still the maximum clocks?).
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from attention_variants import VARIANTS  # noqa: E402
from profiling import session, timing  # noqa: E402
from profiling.workload import Workload  # noqa: E402
from timing_check import bare  # noqa: E402

OUT = Path(os.environ.get("OUT", "."))
CASES = [("blog fwd", Workload.blog(), ("sdpa_flash", "sdpa_cudnn")),
         ("blog fwd", Workload.blog(), ("naive", "naive_inplace")),
         ("blog step", Workload.blog(passes="fwd+bwd"), ("sdpa_flash", "sdpa_cudnn")),
         ("S=256", Workload.blog(seq_len=256), ("sdpa_flash", "sdpa_cudnn")),
         ("S=8192", Workload.blog(seq_len=8192), ("sdpa_flash", "sdpa_cudnn")),
         ("decode", Workload.blog(q_len=1, seq_len=4096, causal=False), ("sdpa_flash", "sdpa_cudnn")),
         ("blog cold", Workload.blog(timing="cold"), ("sdpa_flash", "sdpa_cudnn"))]
REPEATS = 3


def main() -> None:
    spent = []
    inner = timing.time_gpu

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        inner(*args, **kwargs)
        spent.append(time.perf_counter() - t0)
    timing.time_gpu = timed
    batched = timing.BATCH_GPU_S
    lines = [f"{torch.cuda.get_device_name()} · torch {torch.__version__} · BATCH_GPU_S {batched}",
             f"{'case':<10} {'variant':<14} {'batch s':>8} {'time_gpu s':>10} {'median ms':>10} {'bare ms':>9} "
             f"{'diff':>7} {'gaps':>5} {'spread %':>8}  clocks before/after (SM, memory MHz)"]
    print(lines[0], flush=True)
    for name, w, keys in CASES:
        try:
            found = {}
            for _ in range(REPEATS):
                for batch in (batched, 0.0):
                    timing.BATCH_GPU_S = batch
                    spent.clear()
                    runs = session.measure(w, list(keys))
                    for run in runs:
                        found.setdefault((run.variant, batch), []).append((run, spent[0] if spent else float("nan")))
            timing.BATCH_GPU_S = batched
            bares = {k: bare(VARIANTS[k], w, "warm", 20) for k in keys}
            for (key, batch), got in found.items():
                ok = [(r, s) for r, s in got if r.ok]
                if not ok:
                    lines.append(f"{name:<10} {key:<14} {batch:>8} {got[0][0].status}: {got[0][0].reason}"[:160])
                    continue
                med = statistics.median(r.timing.median_ms for r, _ in ok)
                wall = statistics.median(s for _, s in ok)
                spread = statistics.median(r.timing.spread_pct for r, _ in ok)
                gaps = sum(bool(r.timing.host_gaps) for r, _ in ok)
                lines.append(f"{name:<10} {key:<14} {batch:>8} {wall:>10.3f} {med:>10.4f} {bares[key]:>9.4f} "
                             f"{100 * (med / bares[key] - 1):>+6.1f}% {gaps:>5} {spread:>8.1f}  "
                             f"{[c and (c.sm_mhz, c.memory_mhz) for c in (ok[-1][0].clocks_before, ok[-1][0].clocks_after)]}")
        except Exception as error:  # one case's failure is printed; the rest go on
            lines.append(f"{name:<10} failed: {type(error).__name__}: {str(error).splitlines()[0][:120]}")
        finally:
            timing.BATCH_GPU_S = batched
            torch.cuda.empty_cache()
        print("\n".join(lines[-4:]), flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "batch_check.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
