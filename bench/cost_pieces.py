"""The CPU cost model's pieces, timed one by one on this machine (what `profiling.budget.COSTS["cpu"]` is set from).

    python bench/cost_pieces.py            # ~3 minutes on the 2-core EPYC
    python bench/cost_pieces.py --decode   # a decode step's pieces only (~1 minute)

Per variant, pass, dtype and shape: the best (minimum) and the 25th percentile of a warm call's wall time over
repeats (this machine is shared: the low end is the machine's speed, the rest is other work), and what that gives
as the model's per-forward terms: a materialising forward's (naive, SDPA's math path) seconds per score element
beyond its GEMMs at the fp32 GEMM rate measured here, a fused one's (CPU flash) FLOP rate. Then the fp64 reference
of each workload and `cpu_16bit_speed()`. A decode step (`--decode`: a few queries against a long cache, whose scores
and FLOPs are few) is timed the same way and read per element of K and V as the query heads read them
(`Workload.headed_kv_elements`): each path's `*_kv_s` and the reference's `fp64_kv_s`.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from attention_variants import VARIANTS  # noqa: E402
from profiling.accuracy import Reference  # noqa: E402
from profiling.budget import cpu_16bit_speed  # noqa: E402
from profiling.measurement import _phases  # noqa: E402
from profiling.request import LIVE, Request  # noqa: E402
from profiling.workload import PASS_FLOPS  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate_cost import others_cpu_s  # noqa: E402

SHAPES = ((1, 2, 1024, 64), (1, 8, 512, 64), (1, 1, 2048, 16), (1, 4, 1024, 128), (1, 1, 4096, 8), (4, 16, 512, 64))
VARIANT_KEYS = ("naive", "sdpa_math", "sdpa_flash")


# a decode step on the CPU's base workload (8 heads, D=64): (B, kv heads, S, q_len), as the page's decode presets
DECODE_SHAPES = ((1, 2, 8192, 1), (1, 2, 32768, 1), (1, 2, 131072, 1), (4, 2, 32768, 1), (1, 8, 32768, 1),
                 (1, 2, 32768, 4))


def workload(dtype: str, passes: str, shape, **fields):
    b, h, s, d = shape
    return Request.build(LIVE, "naive", "sdpa_flash", dict(batch=b, heads=h, seq_len=s, head_dim=d, dtype=dtype,
                                                            passes=passes, **fields), "cpu").workload


def decode() -> None:
    """Per decode shape: the best warm call of each variant and the best of two references, each in ns per element
    of K and V as the query heads read them, with the share of the cores other processes took meanwhile."""
    print(f"{'B,kv,S,q_len':18s} {'variant':11s} {'min ms':>9s} {'ns/kv element':>13s} {'others':>6s}")
    for b, kv, s, q in DECODE_SHAPES:
        w = workload("fp32", "fwd", (b, 8, s, 64), kv_heads=kv, q_len=q)
        x, shape = w.make_inputs(), f"{b},{kv},{s},{q}"
        for key in VARIANT_KEYS:
            start, others = time.perf_counter(), others_cpu_s()
            with torch.no_grad():
                lo = min(call_times(VARIANTS[key], x, enough_s=0.3, most=8))
            others = max(0.0, others_cpu_s() - others) / (2 * (time.perf_counter() - start))
            print(f"{shape:18s} {key:11s} {lo * 1e3:9.2f} {lo / w.headed_kv_elements * 1e9:13.2f} {others:6.2f}",
                  flush=True)
        start, others, best = time.perf_counter(), others_cpu_s(), float("inf")
        for _ in range(2):
            t0 = time.perf_counter()
            Reference(x)
            best = min(best, time.perf_counter() - t0)
        others = max(0.0, others_cpu_s() - others) / (2 * (time.perf_counter() - start))
        print(f"{shape:18s} {'reference':11s} {best * 1e3:9.2f} {best / w.headed_kv_elements * 1e9:13.2f} "
              f"{others:6.2f}", flush=True)


def call_times(variant, x, enough_s: float = 0.6, most: int = 15) -> list[float]:
    phases = _phases(variant, x)
    grad = contextlib_nullcontext() if x.workload.training else torch.no_grad()
    times = []
    with variant.pin(), grad:
        for phase in phases:  # the first call: one-off costs
            phase()
        spent = 0.0
        while len(times) < 3 or (spent < enough_s and len(times) < most):
            t0 = time.perf_counter()
            for phase in phases:
                phase()
            times.append(time.perf_counter() - t0)
            spent += times[-1]
    return times


def contextlib_nullcontext():
    import contextlib
    return contextlib.nullcontext()


def gemm_rate(dtype=torch.float32, n=512, calls=10) -> float:
    """fp32 GEMM FLOP/s of batched [n, 64] x [64, n] and [n, n] x [n, 64] products (the naive forward's shapes)."""
    a, b = torch.randn(8, n, 64, dtype=dtype), torch.randn(8, 64, n, dtype=dtype)
    p, v = torch.randn(8, n, n, dtype=dtype), torch.randn(8, n, 64, dtype=dtype)
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter()
        a @ b
        p @ v
        best = min(best, time.perf_counter() - t0)
    return 2 * 2 * 8 * n * n * 64 / best


def main() -> None:
    torch.manual_seed(0)
    if "--decode" in sys.argv:
        return decode()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; cpu_16bit_speed {cpu_16bit_speed()}")
    g = gemm_rate()
    print(f"fp32 batched GEMM (the naive forward's shapes, S=512, D=64): {g / 1e9:.1f} GFLOP/s (best of 10)\n")
    print(f"{'variant':11s} {'pass':7s} {'dtype':5s} {'B,H,S,D':16s} {'min ms':>9s} {'p25 ms':>9s} {'n':>3s} "
          f"{'ns/score (min)':>14s} {'GFLOP/s (min)':>13s}")
    for passes in ("fwd", "fwd+bwd"):
        for dtype in ("fp32", "bf16"):
            for shape in SHAPES:
                w = workload(dtype, passes, shape)
                x = w.make_inputs()
                x = x.with_grad() if w.training else x
                step = PASS_FLOPS[passes]
                for key in VARIANT_KEYS:
                    v = VARIANTS[key]
                    t = call_times(v, x)
                    lo, q1 = min(t), statistics.quantiles(t, n=4)[0] if len(t) >= 4 else min(t)
                    flops = w.flops if v.fused else w.dense_flops
                    gemm_s = step * w.dense_flops / g
                    per_score = (lo - gemm_s) / (step * w.score_elements) * 1e9
                    print(f"{key:11s} {passes:7s} {dtype:5s} {','.join(map(str, shape)):16s} {lo * 1e3:9.2f} "
                          f"{q1 * 1e3:9.2f} {len(t):3d} {per_score:14.1f} {step * flops / lo / 1e9:13.2f}",
                          flush=True)
    print("\nfp64 reference (Reference(inputs): the fp64 rows, the dtype's check, the gradients when training)")
    for passes in ("fwd", "fwd+bwd"):
        for dtype in ("fp32", "bf16"):
            for shape in SHAPES:
                w = workload(dtype, passes, shape)
                x = w.make_inputs()
                best = float("inf")
                for _ in range(2):
                    t0 = time.perf_counter()
                    Reference(x)
                    best = min(best, time.perf_counter() - t0)
                print(f"reference {passes:7s} {dtype:5s} {','.join(map(str, shape)):16s} {best:7.3f} s", flush=True)


if __name__ == "__main__":
    main()
