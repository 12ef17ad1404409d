"""Every variant × mask kind × grouped-query or not (forward and a training step): runs, or is refused with PyTorch's
reason, on this machine's device. One line each: what ran (the backend) or why not.

    python bench/dispatch_table.py [cpu|cuda]       # FA4_SITE=/tmp/site: flash-attn-4 installed there
"""
from __future__ import annotations

import os
import site
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
if os.environ.get("FA4_SITE"):
    site.addsitedir(os.environ["FA4_SITE"])

import torch  # noqa: E402

from attention_variants import VARIANTS  # noqa: E402
from profiling.session import measure  # noqa: E402
from profiling.workload import Workload  # noqa: E402


def main(device: str) -> None:
    dtype = "bf16" if device == "cuda" else "fp32"
    masks = [("flag", {}), ("bool", {}), ("bias", {}), ("window", {"window": 64})]
    print(f"{'pass':7s} {'mask':6s} {'kv':4s} " + " ".join(f"{k:>14s}" for k in VARIANTS))
    reasons: dict[str, str] = {}
    for passes in ("fwd", "fwd+bwd"):
        for mask, extra in masks:
            for kv in (None, 2):
                w = Workload(batch=1, heads=8, kv_heads=kv, seq_len=256, head_dim=64, dtype=dtype, device=device,
                             mask=mask, passes=passes, **extra)
                runs = measure(w, list(VARIANTS))
                cells = []
                for run in runs:
                    if run.ok:
                        cells.append(run.backend or "runs")
                    else:
                        tag = f"R{len(reasons) + 1}" if run.reason not in reasons.values() else \
                            next(t for t, r in reasons.items() if r == run.reason)
                        reasons.setdefault(tag, run.reason)
                        cells.append(f"{run.status[:5]} {tag}")
                print(f"{passes:7s} {mask:6s} {'2' if kv else '-':4s} " + " ".join(f"{c[:14]:>14s}" for c in cells),
                      flush=True)
    print()
    for tag, reason in reasons.items():
        print(f"{tag}: {reason}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ("cuda" if torch.cuda.is_available() else "cpu"))
