"""Where a warm live comparison's time goes inside the measurement, on a GPU (issue 29; ~1 min): for each case, the
request's phases (median of 3 warm compares, through `session.compare`, no server), then one compare under cProfile
(the functions with the most own time), and a live sweep's phases point by point:

    python bench/h200/warm_profile.py        # the table on stdout and in $OUT/warm_profile.txt
"""
from __future__ import annotations

import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

import torch  # noqa: E402

from profiling import phases, session, sweep  # noqa: E402
from profiling.request import LIVE, Request  # noqa: E402

OUT = Path(os.environ.get("OUT", "."))
CASES = [("blog fused", "sdpa_flash", "sdpa_cudnn", {}), ("blog naive", "naive", "naive_inplace", {}),
         ("S=256 fused", "sdpa_flash", "sdpa_cudnn", {"seq_len": 256}),
         ("S=32768 fused", "sdpa_flash", "sdpa_cudnn", {"seq_len": 32768})]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # a CPU: a dry run of the script, small
if DEVICE == "cpu":
    CASES = [(name, a, b, {"seq_len": 256}) for name, a, b, _ in CASES[:2]]
LENGTHS = tuple(128 * 2**i for i in range(9 if DEVICE == "cuda" else 2))
lines: list[str] = []


def say(line: str = "") -> None:
    print(line, flush=True)
    lines.append(line)


def parts(record: dict[str, float], wall: float) -> str:
    record = dict(record, other=max(0.0, wall - sum(record.values())))
    return " · ".join(f"{k} {v * 1000:.1f}" for k, v in sorted(record.items(), key=lambda kv: -kv[1]) if v >= 5e-4)


def main() -> None:
    say(f"{torch.cuda.get_device_name() if DEVICE == 'cuda' else 'CPU'} · torch {torch.__version__} (ms)")
    for name, a, b, fields in CASES:
        request = Request.build(LIVE, a, b, fields, DEVICE)
        for _ in range(2):
            session.compare(request)
        walls = []
        for _ in range(3):
            with phases.recording() as record:
                t0 = time.perf_counter()
                session.compare(request)
                walls.append((time.perf_counter() - t0, dict(record)))
        wall, record = sorted(walls, key=lambda w: w[0])[1]
        say(f"{name:<14} {wall * 1000:7.1f}  {parts(record, wall)}")
        profile = cProfile.Profile()
        profile.enable()
        session.compare(request)
        profile.disable()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(14)
        shown = text.getvalue().splitlines()
        shown = shown[next(i for i, line in enumerate(shown) if "ncalls" in line):]
        say("\n".join("   " + line.replace(str(Path(torch.__file__).parent.parent), "") for line in shown if line.strip()))
    inner = sweep.measure_runs

    def per_point(variants, workload, **kwargs):
        with phases.recording() as record:
            t0 = time.perf_counter()
            try:
                return inner(variants, workload, **kwargs)
            finally:
                wall = time.perf_counter() - t0
                say(f"sweep S={workload.seq_len:<6} {wall * 1000:7.1f}  {parts(record, wall)}")
    sweep.measure_runs = per_point
    request = Request.build(LIVE, "sdpa_flash", "sdpa_cudnn", {}, DEVICE, seq_lens=LENGTHS)
    t0 = time.perf_counter()
    session.sweep(request)
    say(f"sweep of {len(LENGTHS)} lengths {time.perf_counter() - t0:.2f} s")
    (OUT / "warm_profile.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
