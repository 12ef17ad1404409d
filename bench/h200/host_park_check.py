"""Did the host cost's shorter park move its figure? On a GPU (~1 min; issue 29): the host cost and back-to-back
figures of live measurements, taken alternately with the park as it is now (PARK_MARGIN times the calls' issue that
`time_gpu` measured, + HOST_PARK_SLACK_S) and as it was (PARK_MARGIN times a generous guess + PROBE_PARK_S, ~2 ms
more), the loops alike, each arm first in turn after an uncounted measurement; each row the median over the
measurements of the runs' medians, and the host figures' time. Two more arms park four times as long as now, and
2 ms longer than now; the column "ended early" counts the host-cost rounds whose park had ended before the host had
issued its last call (an event recorded behind the park, queried there): a park too short shows there, and a park
that outlasts the calls but still moves the figure shows in the longer arms. CASES=0,1 picks cases by index,
REPEATS=N sets the repeats.

    python bench/h200/host_park_check.py        # the table on stdout and in $OUT/host_park_check.txt
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

import torch  # noqa: E402

from attention_variants import VARIANTS  # noqa: E402
from profiling import phases, timing  # noqa: E402
from profiling.measurement import measure_runs  # noqa: E402
from profiling.workload import Workload  # noqa: E402

OUT = Path(os.environ.get("OUT", "."))
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # a CPU: a dry run, small (no host figures there)
CASES = [("blog fwd", "sdpa_flash", "sdpa_cudnn", {}), ("blog fwd", "naive", "naive_inplace", {}),
         ("blog step", "sdpa_flash", "sdpa_cudnn", {"passes": "fwd+bwd"}),
         ("S=128", "sdpa_flash", "naive", {"seq_len": 128}), ("S=8192", "sdpa_flash", "sdpa_cudnn", {"seq_len": 8192})]
CASES = [CASES[int(i)] for i in os.environ["CASES"].split(",")] if os.environ.get("CASES") else CASES
REPEATS = int(os.environ.get("REPEATS", 6 if DEVICE == "cuda" else 1))  # (the first H100 output: 3, "now" first)
_now = timing._host_plan
_park, _sync = timing._park_gpu, torch.cuda.synchronize
_watch = {"on": False, "parked": [], "early": []}


def _park_watched(seconds: float) -> None:
    _park(seconds)
    if _watch["on"] and DEVICE == "cuda":
        event = torch.cuda.Event()
        event.record()
        _watch["parked"].append(event)


def _sync_watched(*args, **kwargs):
    while _watch["parked"]:  # the host has issued the round's last call: is the GPU still parked?
        _watch["early"].append(_watch["parked"].pop().query())
    return _sync(*args, **kwargs)


def _host_figures_watched(subjects, check) -> None:
    _watch["on"] = True
    try:
        _host_figures(subjects, check)
    finally:
        _watch["on"] = False


_host_figures = timing.host_figures
timing._park_gpu, torch.cuda.synchronize, timing.host_figures = _park_watched, _sync_watched, _host_figures_watched


def _before(s) -> tuple[int, int, float]:
    """The plan as now, its park as before: from the guess, not the measured issue."""
    loop, calls, _ = _now(s)
    issue, s.issue_s = s.issue_s, None
    try:
        return (loop, calls, _now(s)[2])
    finally:
        s.issue_s = issue


def _longer(s) -> tuple[int, int, float]:
    """The plan as now, parked four times as long."""
    loop, calls, park_s = _now(s)
    return (loop, calls, 4 * park_s)


def _plus(s) -> tuple[int, int, float]:
    """The plan as now, parked PROBE_PARK_S (2 ms) longer: the old park's extra, on the measured issue."""
    loop, calls, park_s = _now(s)
    return (loop, calls, park_s + timing.PROBE_PARK_S)


def main() -> None:
    env = f"{torch.cuda.get_device_name()} · torch {torch.__version__}" if DEVICE == "cuda" else "CPU (dry run)"
    lines = [env, f"{'case':10s} {'variant':14s} {'park':7s} {'host µs':>8s} {'b2b ms':>8s} {'gpu ms':>8s} "
                  f"{'host figures s':>14s} {'ended early':>11s}"]
    for case, a, b, changes in CASES:
        w = Workload.blog(device=DEVICE, **changes) if DEVICE == "cuda" else Workload.blog(
            device="cpu", dtype="fp32", batch=1, heads=2, **changes)
        got = {}
        measure_runs([VARIANTS[a], VARIANTS[b]], w)  # the case's first measurement (cold host caches): not counted
        for i in range(REPEATS):
            arms = (("now", _now), ("before", _before), ("now ×4", _longer), ("now+2ms", _plus))
            for label, plan in arms[i % len(arms):] + arms[:i % len(arms)]:  # each arm first in turn
                timing._host_plan = plan
                try:
                    _watch["early"].clear()
                    with phases.recording() as spent:
                        runs = measure_runs([VARIANTS[a], VARIANTS[b]], w)
                finally:
                    timing._host_plan = _now
                # host_figures' rounds in its order: each active variant in turn
                order = [run.variant for r in range(timing.HOST_ROUNDS) for run in runs
                         if run.warm_call_ms is not None and r < timing.host_rounds(run.warm_call_ms)]
                for run in runs:
                    row = got.setdefault((run.variant, label), {"host": [], "b2b": [], "gpu": [], "s": [],
                                                                "early": [0, 0]})
                    mine = [e for v, e in zip(order, _watch["early"]) if v == run.variant]
                    row["early"][0] += sum(mine)
                    row["early"][1] += len(mine)
                    if run.host_cost is not None:
                        row["host"].append(run.host_cost.median_ms * 1000)
                        row["b2b"].append(run.back_to_back.median_ms)
                    row["gpu"].append(run.gpu_ms or 0.0)
                    row["s"].append(spent.get("host figures", 0.0))
        for (variant, label), row in got.items():
            early = row.pop("early")
            med = {k: statistics.median(v) if v else float("nan") for k, v in row.items()}
            lines.append(f"{case:10s} {variant:14s} {label:7s} {med['host']:8.1f} {med['b2b']:8.4f} {med['gpu']:8.4f} "
                         f"{med['s']:14.3f} {early[0]:5.0f} of {early[1]:3.0f}")
    text = "\n".join(lines)
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "host_park_check.txt").write_text(text + "\n")


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"{time.perf_counter() - started:.1f} s")
