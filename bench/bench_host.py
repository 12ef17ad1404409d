"""Host time you can trust: the app's three host figures beside an independent loop, on a GPU.

    python bench/bench_host.py [--out DIR]

For efficient, flash, cuDNN, auto and flex at the blog workload and at 1x1x128x64:
- the app's figures (`measure`): GPU ms (CUDA events), host cost per call, back-to-back per call, bound;
- the same three, measured by `independent()` below (plain torch, no project code in the timed path, the
  pin entered once around the loop) in the same process right after, and in a fresh process;
- isolation: pinned cuDNN's host cost in a process where compiled flex ran first;
- A vs A: each fused variant compared with itself (the JSON is kept to check the verdict on a CPU);
- a warm comparison's wall time (target <= 0.5 s).
Targets: host cost within 10% of the independent figure; the same bound label; A vs A never ranked.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("sdpa_efficient", "sdpa_flash", "sdpa_cudnn", "sdpa_auto", "flex")
SHAPES = {"blog": (8, 16, 1024, 64), "tiny": (1, 1, 128, 64)}
PINS = {"sdpa_efficient": "EFFICIENT_ATTENTION", "sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION"}


def independent(key: str, shape: tuple[int, int, int, int], calls: int = 300) -> dict:
    """Plain torch, in this (fresh) process: GPU ms by events, host cost per call with the GPU parked,
    back-to-back per call. bf16, causal."""
    import contextlib

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, h, s, d = shape
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    if key == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        mask = create_block_mask(lambda b_, h_, qi, ki: qi >= ki, None, None, s, s, device="cuda")
        compiled = torch.compile(flex_attention, dynamic=False)
        fn = lambda: compiled(q, k, v, block_mask=mask)  # noqa: E731
    else:
        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    pin = sdpa_kernel(getattr(SDPBackend, PINS[key])) if key in PINS else contextlib.nullcontext()
    with pin:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        # GPU time: events around each call, the GPU parked so the host runs ahead
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(50)]
        torch.cuda._sleep(int(0.05 * 2e9))
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        gpu_ms = statistics.median(s.elapsed_time(e) for s, e in events)
        # host cost per call: the GPU parked for longer than the loop takes
        n = min(calls, 400)
        torch.cuda._sleep(int(0.2 * 2e9))
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000)
        torch.cuda.synchronize()
        host_ms = statistics.median(times)
        # back to back
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        b2b_ms = (time.perf_counter() - t0) * 1000 / 200
    return {"gpu_ms": gpu_ms, "host_ms": host_ms, "b2b_ms": b2b_ms}


def _child(key: str, shape: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", key, shape], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", nargs=2)
    args = parser.parse_args()
    if args.child:
        key, shape = args.child
        print(json.dumps(independent(key, SHAPES[shape])))
        return 0

    sys.path.insert(0, str(ROOT))
    import torch

    from profiling.measurement import compare, measure
    from profiling.workload import Workload
    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 1
    out = Path(args.out) if args.out else None
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}\n")

    # independent figures first, each in a fresh process
    bare = {(key, shape): _child(key, shape) for shape in SHAPES for key in VARIANTS}

    rows = []
    for shape, (b, h, s, d) in SHAPES.items():
        w = Workload(batch=b, heads=h, seq_len=s, head_dim=d, dtype="bf16", causal=True)
        for key in VARIANTS:  # flex last: it compiles
            run = measure(key, w)
            fresh = bare[(key, shape)]
            ind = independent(key, SHAPES[shape]) if run.ok else fresh  # same process, right after
            if "error" in ind or not run.ok:
                print(f"{shape:5s} {key:15s} app {run.status} {run.reason or ''} | independent {ind}")
                continue
            ind_bound = "host" if ind["b2b_ms"] > 1.10 * ind["gpu_ms"] else "gpu"
            rows.append(dict(shape=shape, variant=key, gpu=run.gpu_ms, gpu_ind=ind["gpu_ms"],
                             host=run.host_cost.median_ms, host_ind=ind["host_ms"], b2b=run.back_to_back_ms,
                             b2b_ind=ind["b2b_ms"], bound=run.bound, bound_ind=ind_bound,
                             profiled=run.profiled_host_ms, pin=run.pin_cost_ms,
                             host_fresh=fresh.get("host_ms"), b2b_fresh=fresh.get("b2b_ms")))
    print(f"{'shape':5s} {'variant':15s} {'GPU ms':>15s} {'host µs/call':>17s} {'b2b µs/call':>17s} "
          f"{'bound':>11s} {'profiled µs':>11s} {'pin µs':>7s}   (app / independent)")
    for r in rows:
        print(f"{r['shape']:5s} {r['variant']:15s} {r['gpu']:7.4f}/{r['gpu_ind']:7.4f} "
              f"{r['host'] * 1e3:8.1f}/{r['host_ind'] * 1e3:8.1f} {r['b2b'] * 1e3:8.1f}/{r['b2b_ind'] * 1e3:8.1f} "
              f"{r['bound']:>5s}/{r['bound_ind']:5s} {r['profiled'] * 1e3:11.1f} "
              f"{(r['pin'] or 0) * 1e3:7.1f}   host {100 * (r['host'] / r['host_ind'] - 1):+.0f}% "
              f"gpu {100 * (r['gpu'] / r['gpu_ind'] - 1):+.1f}%   fresh process: host "
              f"{(r['host_fresh'] or 0) * 1e3:.1f} b2b {(r['b2b_fresh'] or 0) * 1e3:.1f}")

    # isolation: pinned cuDNN after compiled flex ran in this process (it has, above)
    blog = Workload.blog()
    after = measure("sdpa_cudnn", blog)
    before = next(r for r in rows if r["shape"] == "blog" and r["variant"] == "sdpa_cudnn")
    print(f"\nisolation: sdpa_cudnn host cost {before['host'] * 1e3:.1f} µs before flex compiled, "
          f"{after.host_cost.median_ms * 1e3:.1f} µs after (compiled_before={after.compiled_before}); "
          f"independent fresh process {before['host_ind'] * 1e3:.1f} µs")

    # A vs A, and warm comparison wall time
    same = []
    for key in VARIANTS[:4]:
        for _ in range(5):
            same.append(compare(key, key, blog).to_dict())
    print(f"A vs A: {len(same)} comparisons kept for the verdict check")
    walls = {}
    for a, b in (("naive", "naive_inplace"), ("sdpa_math", "sdpa_flash"), ("sdpa_flash", "sdpa_cudnn"),
                 ("naive_inplace", "sdpa_auto"), ("sdpa_efficient", "flex")):
        compare(a, b, blog)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            compare(a, b, blog)
            times.append(time.perf_counter() - t0)
        walls[f"{a} vs {b}"] = statistics.median(times)
    print("warm comparison wall (target <= 0.5 s): "
          + ", ".join(f"{k} {v:.3f} s" for k, v in walls.items()))
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "host_bench.json").write_text(json.dumps({"rows": rows, "a_vs_a": same, "walls": walls,
                                                         "isolation_after_ms": after.host_cost.median_ms}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
