"""Results as plain data: what a run measured, with a lossless JSON round trip.

The UI, the CLI, the API, the recorded runs and ZeroGPU (which pickles results out of a
worker) all pass these same objects around. Nothing here measures or formats.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field

from .environment import Environment
from .workload import Workload


@dataclass
class Launch:
    """Who launched a kernel: the aten ops around its launch call, outermost first, and those launches' cost."""
    ops: list[str]                            # ["aten::masked_fill", "aten::clone", "aten::copy_"]
    calls_per_forward: float
    us_per_forward: float


@dataclass
class Kernel:
    """One row of a forward's kernel table. On a GPU a kernel, memcpy or memset; on CPU an aten op."""
    name: str                                 # full name from the trace
    short_name: str                           # readable: "flash_fwd_kernel", "elementwise [mul]"
    category: str                             # gemm, fused attention, softmax, elementwise, ...
    calls_per_forward: float
    us_per_forward: float                     # GPU µs (CPU self µs for CPU ops)
    share: float                              # of the forward's total, 0..1
    grid: list[int] | None = None
    block: list[int] | None = None
    registers_per_thread: int | None = None
    shared_memory_bytes: int | None = None
    occupancy_pct: float | None = None        # Kineto's "est. achieved occupancy %", as recorded
    launch_api: str | None = None             # cudaLaunchKernel, cuLaunchKernelEx, cudaMemcpyAsync, ...
    precision: str | None = None              # what the name tells: "FP32 on CUDA cores (ffma)", ...
    launched_by: list[Launch] | None = None   # by launching op chain; None where the trace did not say


@dataclass
class HostOp:
    """A CPU-side op inside the forward's range (inclusive and self time)."""
    name: str
    calls_per_forward: float
    total_us_per_forward: float
    self_us_per_forward: float


@dataclass
class Timing:
    """A distribution of per-call times: enough to say whether two of them really differ."""
    median_ms: float
    min_ms: float
    max_ms: float
    samples: int
    method: str                               # "cuda events [per N calls]", "perf_counter", ...; how it was timed
    p25_ms: float | None = None               # quartiles: an order is stated only when they do not overlap
    p75_ms: float | None = None

    @classmethod
    def of(cls, times_ms: list[float], method: str) -> "Timing":
        ordered = sorted(times_ms)
        def at(q: float) -> float:  # linear interpolation between the closest ranks
            i = q * (len(ordered) - 1)
            lo = int(i)
            hi = min(lo + 1, len(ordered) - 1)
            return ordered[lo] + (ordered[hi] - ordered[lo]) * (i - lo)
        return cls(median_ms=at(0.5), min_ms=ordered[0], max_ms=ordered[-1], samples=len(ordered),
                   method=method, p25_ms=at(0.25), p75_ms=at(0.75))

    @property
    def spread_pct(self) -> float:
        return 100.0 * (self.max_ms - self.min_ms) / self.median_ms if self.median_ms else 0.0


@dataclass
class Accuracy:
    max_abs_error: float                      # against an fp64 reference
    relative_error: float                     # ||out - ref|| / ||ref||
    naive_max_abs_error: float | None = None  # the naive computation in the same dtype, for scale
    rows_checked: int | None = None           # query rows compared (a seeded sample at large S); None: all


@dataclass
class Quantity:
    """A number a note states, with its unit and where it was read (so a test can read it again)."""
    value: float
    unit: str                                 # ms, us, s, bytes, x (a ratio), share (0..1), pct, count
    source: str                               # "run.kernels[3].us_per_forward", "ratio(a.timing.median_ms, ...)"


@dataclass
class Note:
    """One lesson the trace teaches, as data: the facts it rests on, and the words profiling.text made of them."""
    rule: str                                 # the rule that found it: "hidden_memcpy"
    kind: str                                 # guess | environment | reference | verdict | sweep
    title: str                                # one line, true of this run
    body: str                                 # why, in a sentence or two
    weight: float = 0.0                       # 0..1: share of time or memory it explains, or how far the guess was off
    side: str = "run"                         # a | b | both (true of both runs) | pair (A vs B) | a sweep's
                                              # third variant's key; "run" before explain
    facts: dict[str, Quantity] = field(default_factory=dict)
    kernels: list[str] = field(default_factory=list)   # Kernel.name of every kernel it is about
    ops: list[str] = field(default_factory=list)       # aten ops it is about
    evidence: list[str] = field(default_factory=list)  # folded: the rows of the trace it rests on
    links: list[str] = field(default_factory=list)     # folded: sources that say why

    @classmethod
    def from_dict(cls, data: dict) -> "Note":
        data = dict(data)
        data["facts"] = {name: Quantity(**q) for name, q in data.get("facts", {}).items()}
        return cls(**data)


@dataclass
class Run:
    variant: str
    workload: Workload
    environment: Environment
    status: str = "ok"                        # ok | unsupported | error | stopped
    reason: str | None = None                 # why it did not run (PyTorch's own words where it gave them)
    pytorch_warnings: list[str] = field(default_factory=list)
    first_call_ms: float | None = None        # wall time of the very first call (compilation, plans, ...)
    timing: Timing | None = None              # device time per forward (wall time on CPU)
    # The host, three figures each named for what it is (GPU runs; on a CPU the host does the work itself):
    host_cost: Timing | None = None           # CPU time to issue one forward while the GPU is kept busy
    pin_cost_ms: float | None = None          # entering and leaving the sdpa_kernel pin, costed apart
    back_to_back_ms: float | None = None      # wall time of N forwards in a plain loop, divided by N
    bound: str | None = None                  # "host" or "gpu": what sets the back-to-back pace
    profiled_host_ms: float | None = None     # the forward's record_function range: includes profiler overhead
    compiled_before: bool = False             # torch.compile had run in this process before this measurement
    concurrent_work: bool = False             # other work of this process shared the CPU while this was timed
    kernels_per_forward: float | None = None
    kernels: list[Kernel] = field(default_factory=list)
    host_ops: list[HostOp] = field(default_factory=list)
    backend: str | None = None                # SDPA backend that really ran, from the trace
    peak_extra_bytes: int | None = None       # peak memory beyond the inputs
    estimated_extra_bytes: int | None = None  # what we predicted before allocating
    accuracy: Accuracy | None = None
    tflops: float | None = None
    peak_share: float | None = None           # of the device's datasheet peak, 0..1
    profiled_forwards: int = 0
    trace_path: str | None = None             # Chrome trace (opens in Perfetto)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def gpu_ms(self) -> float | None:
        return self.timing.median_ms if self.timing else None

    def to_dict(self) -> dict:
        data = asdict(self)
        data["workload"] = asdict(self.workload)
        data["environment"] = self.environment.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Run":
        data = dict(data)
        if "host_ms_per_forward" in data:  # recordings made before the host figures were split
            data["profiled_host_ms"] = data.pop("host_ms_per_forward")
        data["workload"] = Workload(**data["workload"])
        data["environment"] = Environment.from_dict(data["environment"])
        data.pop("notes", None)  # recordings made when notes were kept per run
        data["kernels"] = [_kernel(k) for k in data.get("kernels", [])]
        data["host_ops"] = [HostOp(**h) for h in data.get("host_ops", [])]
        for key, kind in (("timing", Timing), ("host_cost", Timing), ("accuracy", Accuracy)):
            if data.get(key) is not None:
                data[key] = kind(**data[key])
        return cls(**data)


def _kernel(data: dict) -> Kernel:
    data = dict(data)
    if data.get("launched_by") is not None:
        data["launched_by"] = [Launch(**launch) for launch in data["launched_by"]]
    return Kernel(**data)


@dataclass
class Comparison:
    """A vs B: the two runs and, once explained, the verdict and the notes, most important first."""
    a: Run
    b: Run
    headline: Note | None = None              # the verdict: who wins, by how much, on what
    notes: list[Note] = field(default_factory=list)    # ranked; each says which side it is about

    @property
    def verdict(self) -> str:
        return self.headline.title if self.headline else ""

    def to_dict(self) -> dict:
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "verdict": self.verdict,
                "headline": asdict(self.headline) if self.headline else None,
                "notes": [asdict(n) for n in self.notes]}

    @classmethod
    def from_dict(cls, data: dict) -> "Comparison":
        headline = data.get("headline")
        return cls(a=Run.from_dict(data["a"]), b=Run.from_dict(data["b"]),
                   headline=Note.from_dict(headline) if headline else None,
                   notes=[Note.from_dict(n) for n in data.get("notes", [])])

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def without_files(self) -> "Comparison":
        """A copy that names no file of this machine: what a client of the app may be sent."""
        return dataclasses.replace(self, a=dataclasses.replace(self.a, trace_path=None),
                                   b=dataclasses.replace(self.b, trace_path=None))

    @classmethod
    def from_json(cls, text: str) -> "Comparison":
        return cls.from_dict(json.loads(text))
