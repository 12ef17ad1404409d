"""Record context-parallel runs on a machine of several GPUs (nvidia-h200-x2 / -x4), into a recording folder in place.

For each GPU count (2 and 4, those beyond the visible GPUs left out), each S, the forward and the training step, both
K/V rotations (all-gather, all-to-all), with and without the load balancer: each variant sharded by PyTorch's
context_parallel, one process a GPU (NCCL; NVLink multicast off: NCCL_NVLS_ENABLE=0), its ranks' steps, peak memory,
per-rank traces and the answer against fp64 (profiling/context_parallel.py). The runs are added to
<out>/context_parallel/runs.json (replacing any of the same variant, workload and balance), each job's rank traces in
<out>/context_parallel/<job>/; a short table is printed and written to $OUT/cp_record.txt.

    python bench/h200/cp_record.py --out profiling/recorded/h200-torch2.11            # x2: 2 GPUs; x4: 2 and 4
    python bench/h200/cp_record.py --out ... --gpus 2 --seq 16384 --variants sdpa_flash   # a quick check (~1 min)

About 2 variants x 2 S x 2 passes x 2 rotations x 2 balance = 32 jobs per GPU count, one process group each count
(~3-5 s a job on H200s, the fp64 reference of a training step the largest part): a few minutes per count.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")   # NVLink multicast off (inherited by the ranks)

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from profiling import context_parallel as cp  # noqa: E402
from profiling.explain.cp_rules import explain_cp  # noqa: E402
from profiling.workload import CP_ROTATES, Workload  # noqa: E402

BASE = Workload(batch=1, heads=16, seq_len=16384, head_dim=128, dtype="bf16", causal=True)


def row(r: cp.CPRun) -> str:
    w = r.workload
    head = f"{r.variant:15} {w.gpus} {w.seq_len:6} {w.passes:7} {w.cp_rotate:9} {'lb' if r.balanced else '--'}"
    if not r.ok:
        return f"{head}  {r.status}: {(r.reason or '')[:90]}"
    straggler = r.straggler()
    exposed = max(x.timeline.exposed_us / (x.median_ms * 1000) for x in r.ranks)
    peak = max(x.peak_extra_bytes or 0 for x in r.ranks) / 2**20
    steps = " ".join(f"{x.median_ms:7.3f}" for x in r.ranks)
    return (f"{head}  step {r.step_ms():8.3f} ms  ranks [{steps}]  straggler {straggler.rank}  exposed {exposed:5.1%}  "
            f"peak+ {peak:8.1f} MiB  err {r.accuracy.max_abs_error:.1e} (1 GPU {r.alone_accuracy.max_abs_error:.1e})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the recording folder (profiling/recorded/<gpu>-torch<version>)")
    parser.add_argument("--gpus", default="2,4", help="GPU counts, those beyond the visible ones left out")
    parser.add_argument("--seq", default="16384,65536", help="sequence lengths S")
    parser.add_argument("--variants", default="sdpa_flash,sdpa_cudnn")
    args = parser.parse_args()
    visible = torch.cuda.device_count()
    counts = [n for n in map(int, args.gpus.split(",")) if n <= visible]
    variants = args.variants.split(",")
    out = Path(args.out)
    lines = [f"{torch.cuda.get_device_name(0) if visible else 'no GPU'} x{visible}, torch {torch.__version__}, "
             f"NCCL_NVLS_ENABLE={os.environ['NCCL_NVLS_ENABLE']}"]
    print(lines[0], flush=True)
    all_runs = []
    for n in counts:
        jobs = [job for s in map(int, args.seq.split(",")) for passes in ("fwd", "fwd+bwd")
                for rotate in CP_ROTATES
                for job in cp.jobs_for(variants, BASE.replace(gpus=n, seq_len=s, passes=passes, cp_rotate=rotate),
                                       cp.folder_of(out))]
        started = time.perf_counter()
        runs = cp.measure(jobs)
        cp.save(runs, out)
        all_runs += runs
        lines.append(f"-- {n} GPUs: {len(jobs)} jobs in {time.perf_counter() - started:.0f} s")
        lines += [row(r) for r in runs]
        print("\n".join(lines[-len(runs) - 1:]), flush=True)
    notes = explain_cp(all_runs)
    lines.append(f"-- {len(notes)} notes; the first five:")
    lines += [f"[{n.side}] {n.title}" for n in notes[:5]]
    print("\n".join(lines[-min(len(notes), 5) - 1:]))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "cp_record.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
