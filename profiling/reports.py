"""Results -> pandas tables and matplotlib figures. Renders only; never measures."""
from __future__ import annotations

import pandas as pd

from .results import Run


def kernel_table(run: Run) -> pd.DataFrame:
    """One row per kernel (per aten op on CPU), in launch order on GPU, by time on CPU."""
    gpu = run.workload.device == "cuda"
    rows = []
    for k in run.kernels:
        row = {"kernel" if gpu else "op": k.short_name, "category": k.category,
               "calls/fwd": round(k.calls_per_forward, 2),
               ("GPU µs/fwd" if gpu else "CPU self µs/fwd"): round(k.us_per_forward, 1),
               "share %": round(100 * k.share, 1)}
        if gpu:
            row.update({"occupancy %": k.occupancy_pct, "regs/thread": k.registers_per_thread,
                        "smem B": k.shared_memory_bytes, "grid": _dims(k.grid), "block": _dims(k.block),
                        "launch": k.launch_api, "precision": k.precision or ""})
        row["full name"] = k.name
        rows.append(row)
    return pd.DataFrame(rows)


def _dims(dims) -> str:
    return "×".join(map(str, dims)) if dims else ""


def host_ops_table(run: Run, top: int = 10) -> pd.DataFrame:
    return pd.DataFrame([{"op": h.name, "calls/fwd": round(h.calls_per_forward, 2),
                          "CPU µs/fwd": round(h.total_us_per_forward, 1),
                          "self µs/fwd": round(h.self_us_per_forward, 1)} for h in run.host_ops[:top]])


def summary_line(run: Run) -> str:
    """One line per run: the numbers a reader compares first."""
    if not run.ok:
        return f"{run.variant}: {run.status} — {run.reason}"
    unit = "GPU" if run.workload.device == "cuda" else "wall"
    parts = [f"{run.variant}: {unit} {run.timing.median_ms:.3f} ms/fwd "
             f"(min {run.timing.min_ms:.3f}, spread {run.timing.spread_pct:.0f}%, n={run.timing.samples})",
             f"host {run.host_ms_per_forward:.3f} ms/fwd"]
    if run.kernels_per_forward is not None:
        parts.append(f"{run.kernels_per_forward:g} kernels/fwd")
    if run.backend:
        parts.append(f"backend {run.backend}")
    if run.peak_extra_bytes is not None:
        parts.append(f"peak +{run.peak_extra_bytes / 2**20:.1f} MB")
    if run.accuracy:
        parts.append(f"max err {run.accuracy.max_abs_error:.2e}")
    if run.tflops:
        share = f" ({100 * run.peak_share:.0f}% of peak)" if run.peak_share else ""
        parts.append(f"{run.tflops:.1f} TFLOP/s{share}")
    return " · ".join(parts)
