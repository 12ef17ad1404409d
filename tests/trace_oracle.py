"""A second, minimal reader of the recorded Chrome traces, written apart from profiling/trace.py and using none of
the project's code: gzip and json only. It re-derives what the notes' shares and times rest on: per profiled call,
each GPU row's microseconds and launches by phase, and each phase's total.

Its own rule for the phase (not the parser's): the forward's kernels are launched from the thread that runs the
call's range; a training step's backward runs on the autograd engine's device thread, so a GPU row whose launch came
from any other thread is the backward's.
"""
from __future__ import annotations

import gzip
import json
from collections import defaultdict
from dataclasses import dataclass, field

CALLS = ("attention_profiler::call", "attention_profiler::forward")
GPU = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCHES = {"cuda_runtime", "cuda_driver"}


@dataclass
class PerCall:
    """What one profiled call ran on the GPU, averaged over the trace's calls."""
    calls: int
    us: dict[tuple[str, str], float] = field(default_factory=dict)        # (kernel name, phase) -> µs per call
    launches: dict[tuple[str, str], float] = field(default_factory=dict)  # (kernel name, phase) -> launches per call

    def total(self, phase: str) -> float:
        """µs per call of "forward", "backward" or the whole "step"."""
        return sum(us for (_, p), us in self.us.items() if phase in ("step", p))

    def count(self, phase: str) -> float:
        return sum(n for (_, p), n in self.launches.items() if phase in ("step", p))


def read(path: str) -> PerCall:
    with gzip.open(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if isinstance(e, dict)]
    ranges = [e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"
              and str(e.get("name", "")).startswith(CALLS)]
    within = [(r["ts"], r["ts"] + r["dur"], r.get("pid")) for r in ranges]
    call_threads = {r.get("tid") for r in ranges}
    launch_thread = {}
    for e in events:
        if e.get("cat") in LAUNCHES and "correlation" in e.get("args", {}):
            if any(start <= e["ts"] <= end and e.get("pid") == pid for start, end, pid in within):
                launch_thread[e["args"]["correlation"]] = e.get("tid")
    per = PerCall(len(ranges))
    us, count = defaultdict(float), defaultdict(float)
    for e in events:
        correlation = e.get("args", {}).get("correlation")
        if e.get("ph") == "X" and e.get("cat") in GPU and correlation in launch_thread:
            phase = "forward" if launch_thread[correlation] in call_threads else "backward"
            us[e["name"], phase] += float(e.get("dur", 0.0)) / len(ranges)
            count[e["name"], phase] += 1.0 / len(ranges)
    per.us, per.launches = dict(us), dict(count)
    return per
