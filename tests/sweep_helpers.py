"""What the sweep tests share: light runs built the way a test needs (every timing sample kept, so the verdict's rank
test can read them), a sweep of them, and the recorded H200 sweeps."""
from __future__ import annotations

import random

from profiling.replay import recorded_sweeps
from profiling.results import OK, Kernel, Run, Sweep, Timing
from profiling.workload import Workload

RECORDING = "h200-torch2.11"
RECORDED = recorded_sweeps(RECORDING)
H200 = RECORDED[0].environment


def timing(ms: float, spread: float = 0.01, n: int = 20, seed: int = 0) -> Timing:
    """n samples around `ms`, relative noise `spread` (a Gaussian's sd). The same seed gives the same relative noise
    at every median, so medians of one seed scale exactly with `ms` (a fitted exponent is then exact)."""
    rng = random.Random(seed)
    return Timing.of([ms * (1 + rng.gauss(0, spread)) for _ in range(n)], "cuda events")


def kernel(short_name: str, calls: float, us: float = 1.0, category: str = "x") -> Kernel:
    return Kernel(short_name, short_name, category, calls, us, 0.0)


def run(variant: str, s: int, ms: float | None = None, *, mem: int | None = None, status: str = OK,
        spread: float = 0.01, n: int = 20, seed: int = 0, session: str | None = None, kernels=(), env=H200,
        bound: str | None = None, **fields) -> Run:
    """A light run of `variant` at S=`s` on the blog's workload: GPU time `ms` (samples kept), peak memory `mem`;
    one session per length unless told (A and B of a length timed interleaved). `bound` ("host" or "gpu") gives it
    the host figures that make it so (`Run.bound` derives it from them), where `fields` set none."""
    rows = [kernel(name, calls) for name, calls in kernels]
    if bound is not None:
        pace, host = (1.3 * ms, 1.3 * ms) if bound == "host" else (ms, ms / 4)
        fields.setdefault("back_to_back", timing(pace, spread, 8, seed + 100))
        fields.setdefault("host_cost", timing(host, spread, 40, seed + 200))
    return Run(variant, Workload.blog(seq_len=s, device=env.device), env, status=status,
               session=session if session is not None else (f"S{s}" if ms is not None else None),
               timing=timing(ms, spread, n, seed) if ms is not None else None, peak_extra_bytes=mem, kernels=rows,
               **fields)


def synthetic(runs: list[Run], variants=("naive", "sdpa_flash"), env=H200, **fields) -> Sweep:
    lengths = sorted({r.workload.seq_len for r in runs})
    return Sweep(list(variants), Workload.blog(seq_len=lengths[0], device=env.device), lengths, env, runs, **fields)
