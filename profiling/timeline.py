"""One forward as a timeline: what the CPU did and what the GPU ran, from a Chrome trace.

The events inside one `attention_profiler::forward#i` range on the CPU thread become the CPU lane
(aten ops, nested, and the runtime calls that launch work); the kernels, memcpys and memsets that
share a correlation id with one of those calls become the GPU lane, wherever they fall in time.
Times are µs from the range's start. Nothing here draws: `figures.timeline_figure` does.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from . import trace as trace_mod

_GPU_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


@dataclass
class Span:
    lane: str                 # cpu | gpu
    kind: str                 # op | launch (CPU); kernel | memcpy | memset (GPU)
    name: str                 # aten op, runtime call, or the kernel's short name
    start_us: float           # from the forward's range start
    dur_us: float
    depth: int = 0            # CPU nesting: 0 for an op called by the forward itself
    correlation: int | None = None  # links a launch to the GPU work it started
    full_name: str = ""

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


@dataclass
class Timeline:
    label: str                # the variant, or what the caller names it
    forward: str              # which range: "attention_profiler::forward#2"
    range_us: float           # the CPU range: issuing one forward
    spans: list[Span] = field(default_factory=list)

    @property
    def cpu(self) -> list[Span]:
        return [s for s in self.spans if s.lane == "cpu"]

    @property
    def gpu(self) -> list[Span]:
        return [s for s in self.spans if s.lane == "gpu"]

    @property
    def end_us(self) -> float:
        return max([self.range_us, *(s.end_us for s in self.spans)])

    @property
    def gpu_busy_us(self) -> float:
        return sum(s.dur_us for s in self.gpu)

    @property
    def gpu_idle_us(self) -> float:
        """GPU time between its first start and last end with nothing running: the gaps a slow host leaves."""
        gpu = self.gpu
        if not gpu:
            return 0.0
        idle, reached = 0.0, gpu[0].start_us
        for s in gpu:
            idle += max(0.0, s.start_us - reached)
            reached = max(reached, s.end_us)
        return idle


def forward_timeline(trace: dict, label: str = "", forward: int | None = None) -> Timeline:
    """The lanes of one forward: the range numbered `forward` (#1, #2, ...), or by default the one of median
    length (the first profiled forward often pays a one-off cost)."""
    events = [e for e in trace.get("traceEvents", []) if isinstance(e, dict)]
    ranges = trace_mod.call_ranges(events)
    if not ranges:
        raise ValueError(f"no '{trace_mod.CALL_RANGE}' ranges in this trace")
    if forward is None:
        middle = statistics.median_low(r["dur"] for r in ranges)
        rng = next(r for r in ranges if r["dur"] == middle)
    else:
        matching = [r for r in ranges if r["name"].endswith(f"#{forward}")]
        if not matching:
            raise ValueError(f"no forward #{forward}: the trace holds {', '.join(r['name'] for r in ranges)}")
        rng = matching[0]
    t0 = rng["ts"]

    def inside(e: dict) -> bool:  # on any thread of the process: a backward runs on the autograd engine's
        return trace_mod._inside(e, rng) and e["ts"] + e.get("dur", 0) <= rng["ts"] + rng["dur"]

    cpu_events = [e for e in events if e.get("ph") == "X" and inside(e)
                  and (e.get("cat") == "cpu_op" or e.get("cat") in trace_mod.LAUNCH_CATEGORIES)]
    cpu_events.sort(key=lambda e: (e["ts"], -e["dur"]))
    spans, stacks = [], {}
    for e in cpu_events:
        stack = stacks.setdefault(e.get("tid"), [])
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
            stack.pop()
        launch = e.get("cat") in trace_mod.LAUNCH_CATEGORIES
        spans.append(Span("cpu", "launch" if launch else "op", e["name"].replace("aten::", ""),
                          e["ts"] - t0, float(e["dur"]), len(stack),
                          e.get("args", {}).get("correlation"), e["name"]))
        stack.append(e)
    launched = {s.correlation for s in spans if s.kind == "launch" and s.correlation is not None}
    gpu_events = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in _GPU_KINDS
                         and e.get("args", {}).get("correlation") in launched), key=lambda e: e["ts"])
    spans += [Span("gpu", _GPU_KINDS[e["cat"]], trace_mod.short_name(e["name"]), e["ts"] - t0, float(e["dur"]),
                   correlation=e["args"]["correlation"], full_name=e["name"]) for e in gpu_events]
    return Timeline(label, rng["name"], float(rng["dur"]), spans)


def run_timeline(run, forward: int | None = None) -> Timeline:
    """The timeline of a `Run` (live or recorded) from its trace file."""
    if not run.trace_path or not Path(run.trace_path).exists():
        raise ValueError(f"{run.variant} has no trace to draw ({run.status})")
    return forward_timeline(trace_mod.load_trace(run.trace_path), run.variant, forward)
