"""On a GPU: every variant through the app's own measurement on the workloads the training pass, grouped-query heads
and masks add; a short table per run (status, backend, timings by phase, kernels by phase, what autograd saves,
accuracy), the runs as JSON and their traces under $OUT. A first look before recording.

    python bench/explore_gpu.py [variant,variant,...]      # FA4_SITE=/tmp/site: flash-attn-4 installed there
"""
from __future__ import annotations

import json
import os
import shutil
import site
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
if os.environ.get("FA4_SITE"):
    site.addsitedir(os.environ["FA4_SITE"])  # a --target install: its .pth files must run

from attention_variants import VARIANTS  # noqa: E402
from profiling.session import measure  # noqa: E402
from profiling.workload import Workload  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp/explore"))
BLOG = Workload.blog()
WORKLOADS = [
    BLOG.replace(passes="fwd+bwd"),
    Workload(batch=2, heads=32, kv_heads=8, seq_len=2048, head_dim=128, passes="fwd+bwd"),
    BLOG.replace(mask="bool"), BLOG.replace(mask="bias"), BLOG.replace(mask="window", window=256),
    BLOG.replace(mask="window", window=256, passes="fwd+bwd"),
]


def line(run) -> str:
    if run.timing is None:
        return f"  {run.variant:15s} {run.status:12s} {(run.reason or '')[:150]}"
    t = f"{run.timing.median_ms:8.3f}"
    if run.forward_timing:
        t += f" (f {run.forward_timing.median_ms:.3f} b {run.backward_timing.median_ms:.3f})"
    phases = {p: [k for k in run.kernels if k.phase == p] for p in ("forward", "backward")}
    kernels = " | ".join(f"{p[0]}{len(ks)}: " + ", ".join(k.short_name[:38] for k in sorted(ks, key=lambda k: -k.us_per_forward)[:4])
                         for p, ks in phases.items() if ks)
    acc = run.accuracy
    grads = "" if not acc or not acc.grads else " grads " + "/".join(f"{v:.1e}" for v in acc.grads.values())
    saved = f" saved {run.saved_bytes / 2**20:.1f}MiB" if run.saved_bytes is not None else ""
    return (f"  {run.variant:15s} {run.status:4s} {str(run.backend):12s} {t} peak {(run.peak_extra_bytes or 0) / 2**20:.0f}MiB"
            f"{saved} err {acc.max_abs_error:.1e}{grads} bound {run.bound}\n      {kernels}")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    traces = OUT / "traces"
    runs = []
    chosen = sys.argv[1].split(",") if len(sys.argv) > 1 else list(VARIANTS)
    for w in WORKLOADS:
        t0 = time.perf_counter()
        got = measure(w, chosen, trace_dir=traces)
        print(f"{w.words()}: {time.perf_counter() - t0:.1f} s", flush=True)
        for run in got:
            print(line(run), flush=True)
        runs += got
    (OUT / "explore_runs.json").write_text(json.dumps([r.to_dict() for r in runs]))
    with tarfile.open(OUT / "explore_traces.tar.gz", "w:gz") as tar:
        tar.add(traces, arcname="traces")
    shutil.rmtree(traces)


if __name__ == "__main__":
    main()
