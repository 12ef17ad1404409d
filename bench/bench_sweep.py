"""Performance targets of the sweep, measured on whatever GPU this runs on (needs no gradio).

    python bench/bench_sweep.py

1. a warm sweep of sdpa_flash and sdpa_cudnn over 9 lengths (128…32768) at B=8, H=16, D=64 bf16
   causal: total wall (target <= 10 s), and what each point cost;
2. each point's GPU ms/forward vs a bare CUDA-event loop written here (target within 5%): the
   variant's pin entered once around the loop, nothing but `forward(inputs)` between the events.
   "queued" parks the GPU first so the host runs ahead (GPU time even where a call is host-bound);
   "plain" does not (the back-to-back pace, slower than the GPU where the host is the limit).
3. a recorded sweep's replay time, when the recording holds one (target <= 1 s on a 2-core CPU).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from attention_variants import get_variant  # noqa: E402
from profiling.sweep import sweep  # noqa: E402
from profiling.workload import Workload  # noqa: E402

PAIR = ("sdpa_flash", "sdpa_cudnn")
LENGTHS = [128 * 2**i for i in range(9)]   # 128 … 32768
LOOP_S = 0.05                              # GPU time per bare loop


def bare_event_loop_ms(key: str, inputs, iters: int, queued: bool) -> float:
    variant = get_variant(key)
    forward = variant.forward
    with variant.pin():
        for _ in range(3):
            forward(inputs)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if queued:
            torch.cuda._sleep(int(20e-3 * 2e9))
        start.record()
        for _ in range(iters):
            forward(inputs)
        end.record()
        torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 1
    base = Workload.blog()
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}  {' vs '.join(PAIR)}, "
          f"8x16xSx64 bf16 causal, S = {', '.join(map(str, LENGTHS))}\n")

    t0 = time.perf_counter()
    sweep(*PAIR, base, LENGTHS)  # cold: CUPTI's start, cuDNN's plans, every length's inputs once
    cold_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = sweep(*PAIR, base, LENGTHS)
    warm_s = time.perf_counter() - t0
    print(f"1. sweep wall: cold {cold_s:.1f} s, warm {warm_s:.1f} s (target <= 10 s) "
          f"{'OK' if warm_s <= 10 else 'OVER'}; {len(warm.points)} points, statuses "
          f"{sorted({p.status for p in warm.points})}\n")

    print("2. reported GPU ms/fwd vs a bare CUDA-event loop (target within 5% of queued):")
    print(f"  {'S':>6s} {'variant':11s} {'point s':>7s} {'reported':>9s} {'queued':>9s} {'diff':>7s} "
          f"{'plain':>9s} {'diff':>7s}")
    worst = 0.0
    for s in LENGTHS:
        inputs = base.replace(seq_len=s).make_inputs()
        for point in (p for key in PAIR for p in warm.of(key) if p.seq_len == s):
            if not point.ok:
                print(f"  {s:6d} {point.variant:11s} {point.status}: {point.reason}")
                continue
            iters = int(min(200, max(5, LOOP_S / (point.gpu_ms / 1000))))
            queued = bare_event_loop_ms(point.variant, inputs, iters, queued=True)
            plain = bare_event_loop_ms(point.variant, inputs, iters, queued=False)
            diff = 100 * (point.gpu_ms / queued - 1)
            worst = max(worst, abs(diff))
            print(f"  {s:6d} {point.variant:11s} {point.wall_s:7.2f} {point.gpu_ms:9.4f} {queued:9.4f} "
                  f"{diff:+6.1f}% {plain:9.4f} {100 * (point.gpu_ms / plain - 1):+6.1f}%")
        del inputs
    print(f"  worst |diff| vs queued: {worst:.1f}% {'OK' if worst <= 5 else 'OVER'}\n")

    from profiling.recording import find_recorded_sweep, recordings, recorded_sweeps
    for name in recordings():
        t0 = time.perf_counter()
        recorded_sweeps.cache_clear()
        replay = find_recorded_sweep(name, *PAIR, base)
        replay_s = time.perf_counter() - t0
        if replay is not None:
            print(f"3. replay of '{name}' ({len(replay.points)} points): {replay_s * 1000:.0f} ms (target <= 1 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
