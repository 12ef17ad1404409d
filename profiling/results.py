"""Results as plain data: what a run measured, a comparison of two and a sweep of many, with a lossless JSON
round trip.

The UI, the CLI, the API, the recorded runs and ZeroGPU (which pickles results out of a worker) all pass these
same objects around. Nothing here measures, explains or formats.
"""
from __future__ import annotations

import functools
import gzip
import json
import re
import statistics
from dataclasses import asdict, dataclass, field, fields, replace

from .counters import Counters
from .environment import Clocks, Environment
from .workload import Workload

# What became of a variant on a workload: it ran, or why it did not (typed, never a sentence to parse).
OK, UNSUPPORTED, ERROR, OUT_OF_MEMORY, STOPPED = "ok", "unsupported", "error", "out of memory", "stopped"
DOES_NOT_FIT = "does not fit"   # refused by the plan before anything was allocated

# The phases a kernel belongs to, and the one a run's figure is of: a forward, a training step (forward + backward),
# or the backward alone (the step's backward, timed in the same calls).
PHASE_OF_PASS = {"fwd": "forward", "fwd+bwd": "step", "bwd": "backward"}
# Back to back over GPU time by more than this, with the host's cost to issue a call near the GPU's time too: the
# host sets the pace (the one rule; `Run.bound`).
HOST_BOUND = 1.10


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
    calls_per_forward: float                  # launches per profiled call of the pass (a forward, or a step)
    us_per_forward: float                     # GPU µs per profiled call (CPU self µs for CPU ops)
    share: float = 0.0                        # of its phase's total (the forward's, or the backward's), 0..1:
                                              # derived from the table (`share_by_phase`), never read from a file
    grid: list[int] | None = None
    block: list[int] | None = None
    registers_per_thread: int | None = None
    shared_memory_bytes: int | None = None
    occupancy_pct: float | None = None        # Kineto's "est. achieved occupancy %", as recorded
    launch_api: str | None = None             # cudaLaunchKernel, cuLaunchKernelEx, cudaMemcpyAsync, ...
    precision: str | None = None              # what the name tells: "FP32 on CUDA cores (ffma)", ...
    launched_by: list[Launch] | None = None   # by launching op chain; None where the trace did not say
    phase: str = "forward"                    # forward | backward: launched under the autograd engine's backward

    @classmethod
    def from_dict(cls, data: dict) -> "Kernel":
        data = {k: v for k, v in data.items() if k in _KERNEL_FIELDS and k != "share"}
        if data.get("launched_by") is not None:
            data["launched_by"] = [Launch(**launch) for launch in data["launched_by"]]
        return cls(**data)


_KERNEL_FIELDS = {f.name for f in fields(Kernel)}


def in_phase(k: "Kernel", phase: str) -> bool:
    """Whether kernel `k` is part of `phase`: "forward", "backward", or the whole "step"."""
    return phase == "step" or k.phase == phase


def share_by_phase(kernels: list["Kernel"]) -> list["Kernel"]:
    """Set each kernel's share of its own phase's total (the one rule, for parsed and recorded tables alike)."""
    totals: dict[str, float] = {}
    for k in kernels:
        totals[k.phase] = totals.get(k.phase, 0.0) + k.us_per_forward
    for k in kernels:
        k.share = k.us_per_forward / totals[k.phase] if totals[k.phase] else 0.0
    return kernels


@dataclass
class HostOp:
    """A CPU-side op inside the forward's range (inclusive and self time)."""
    name: str
    calls_per_forward: float
    total_us_per_forward: float
    self_us_per_forward: float
    phase: str = "forward"                    # forward | backward (under the autograd engine's evaluate_function)


@dataclass
class Timing:
    """A distribution of per-call times, every sample kept: enough for a rank test of whether two differ."""
    median_ms: float
    min_ms: float
    max_ms: float
    samples: int
    method: str                               # "cuda events [per N calls]", "perf_counter", ...; how it was timed
    p25_ms: float | None = None
    p75_ms: float | None = None
    samples_ms: list[float] | None = None     # every sample, in the order taken (None in older recordings)
    host_gaps: bool = False                   # GPU events only: the GPU caught up with the host inside the timed
                                              # calls (parked longer and retaken, it still did), so the samples may
                                              # include time it waited for the host

    @classmethod
    def of(cls, times_ms: list[float], method: str) -> "Timing":
        ordered = sorted(times_ms)

        def at(q: float) -> float:  # linear interpolation between the closest ranks
            i = q * (len(ordered) - 1)
            lo = int(i)
            hi = min(lo + 1, len(ordered) - 1)
            return ordered[lo] + (ordered[hi] - ordered[lo]) * (i - lo)
        return cls(median_ms=statistics.median(ordered), min_ms=ordered[0], max_ms=ordered[-1],
                   samples=len(ordered), method=method, p25_ms=at(0.25), p75_ms=at(0.75),
                   samples_ms=list(times_ms))

    @property
    def kept(self) -> int:
        """How many samples a test can read (older recordings kept none)."""
        return len(self.samples_ms or [])

    @property
    def spread_pct(self) -> float:
        return 100.0 * (self.max_ms - self.min_ms) / self.median_ms if self.median_ms else 0.0


@dataclass
class Energy:
    """What the whole GPU drew over a loop of one call: NVML's total-energy counter (mJ since the driver loaded) read
    before and after the loop, the GPU synchronised at both ends (timing.energy)."""
    start_mj: int
    end_mj: int
    seconds: float                            # the loop's wall time
    calls: int                                # calls made in it (a graph's replays times its calls)
    loop: str                                 # its calls, how: "calls back to back", "calls replayed in the
                                              # timing's CUDA graph (8 a replay)"

    @property
    def joules(self) -> float:
        return (self.end_mj - self.start_mj) / 1000.0

    @property
    def joules_per_call(self) -> float:
        return self.joules / self.calls

    @property
    def watts(self) -> float:
        """The mean power over the loop."""
        return self.joules / self.seconds


@dataclass
class Accuracy:
    max_abs_error: float                      # against an fp64 reference
    relative_error: float                     # ||out - ref|| / ||ref||
    naive_max_abs_error: float | None = None  # the naive computation in the same dtype, for scale
    rows_checked: int | None = None           # query rows compared (a seeded sample at large S); None: all
    grads: dict[str, float] | None = None     # a training pass: max error of dq, dk, dv against fp64 (every row)
    naive_grads: dict[str, float] | None = None  # the naive backward's in the same dtype, for scale
    # Fewer queries than keys, causal: what SDPA's is_causal=True (aligned top left) gives on the same inputs, one
    # call outside every timed region, against the same fp64 reference; or PyTorch's words refusing it
    top_left_max_abs_error: float | None = None
    top_left_refused: str | None = None
    # Quantised (fp8) inputs: the fp64 reference on the dequantised inputs against the fp64 reference on the inputs as
    # drawn (which max_abs_error is against too): the part of the error the quantisation alone explains; None: none
    quantisation_max_abs_error: float | None = None


@dataclass
class Quantity:
    """A number a note states, with its unit and where it was read (so a test can read it again); a share names
    the total it is of ("the forward"), and is written with it ("39% of the forward")."""
    value: float
    unit: str                                 # ms, us, s, bytes, x (a ratio), share (0..1), pct, count, power
    source: str                               # "run.kernels[3].us_per_forward", "share(run, 'forward', 3)"
    of: str | None = None                     # a share's total, in words: "the forward", "the step"


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


_SIZE_UNITS = {"B": 1, "bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_OOM_FIGURES = {"needed_bytes": r"Tried to allocate ([\d.]+) (\w+)", "available_bytes": r"of which ([\d.]+) (\w+) is free",
                "held_bytes": r"([\d.]+) (\w+) is reserved by PyTorch but unallocated"}


def out_of_memory_figures(message: str) -> dict[str, int]:
    """The figures PyTorch's out-of-memory message gives, as Run fields: the allocation that failed (needed_bytes),
    the device's free memory (available_bytes) and what its caching allocator held reserved but unallocated
    (held_bytes), each where the message says it ("Tried to allocate 32.00 GiB. GPU 0 has a total capacity of 79.19
    GiB of which 1.20 GiB is free. ... and 29.42 GiB is reserved by PyTorch but unallocated.")."""
    figures = {}
    for name, pattern in _OOM_FIGURES.items():
        found = re.search(pattern, message)
        if found and found.group(2) in _SIZE_UNITS:
            figures[name] = int(float(found.group(1)) * _SIZE_UNITS[found.group(2)])
    return figures


@dataclass
class Run:
    variant: str
    workload: Workload
    environment: Environment
    status: str = OK                          # ok, unsupported, error, out of memory, stopped, does not fit
    reason: str | None = None                 # why it did not run (PyTorch's own words where it gave them)
    session: str | None = None                # the measurement it came from: runs of one session were interleaved
    pytorch_warnings: list[str] = field(default_factory=list)
    first_call_ms: float | None = None        # wall time of the very first call (compilation, plans, ...)
    timing: Timing | None = None              # device time per call of the pass (wall time on CPU): a forward, a
                                              # training step (forward + backward), or the backward alone
    forward_timing: Timing | None = None      # a training pass: the forward (autograd recording) ...
    backward_timing: Timing | None = None     # ... and the backward, timed in the same calls
                                              # (workload.timing says how: warm, cold L2, or a CUDA graph's replay;
                                              # in a graph the two are events inside the step's graph)
    warm_timing: Timing | None = None         # cold and graph timing: warm CUDA events of one whole call (a forward,
                                              # or a step), taken beside the mode's own figure
    flush_bytes: int | None = None            # cold timing: the buffer written before every timed call
    clocks_before: Clocks | None = None       # GPU clocks under load as the timing began ...
    clocks_after: Clocks | None = None        # ... and as it ended (None where they could not be read)
    # The host, three figures each named for what it is (GPU runs; on a CPU the host does the work itself):
    # (on a GPU, of one call: a forward, or a whole training step, which a backward view's call is too; taken as a
    # warm loop in every timing mode)
    host_cost: Timing | None = None           # CPU time to issue one call while the GPU is kept busy
    pin_cost_ms: float | None = None          # entering and leaving the sdpa_kernel pin, costed apart
    back_to_back: Timing | None = None        # wall time per call of a plain loop of calls, per round
    profiled_host_ms: float | None = None     # one call's record_function range: includes profiler overhead
    profiled_host_mean_ms: float | None = None  # the profiled ranges' mean: what host ops' per-call times are shares of
    compiled_before: bool = False             # torch.compile had run in this process before this was timed
    concurrent_work: bool = False             # other work of this process shared the CPU while this was timed
    load_before: float | None = None          # the machine's 1-minute load average (any process's work) as the
    load_after: float | None = None           # timing began and as it ended: a busy machine, said beside the verdict
    kernels: list[Kernel] = field(default_factory=list)  # every phase's, each row naming its phase
    host_ops: list[HostOp] = field(default_factory=list)
    backend: str | None = None                # SDPA backend that really ran, from the trace
    peak_extra_bytes: int | None = None       # peak memory beyond the inputs
    estimated_extra_bytes: int | None = None  # what we predicted before allocating
    saved_bytes: int | None = None            # a training pass: what autograd keeps from the forward for the backward
    setup_ms: float | None = None             # one-off setup before the first call (flex: create_block_mask)
    setup_reused: bool | None = None          # the setup found its work done earlier in the process (a cached mask)
    quantise_ms: float | None = None          # quantised (fp8) inputs: the quantisation's wall time, once per workload
                                              # when the inputs were made, never inside a call's time
    needed_bytes: int | None = None           # does not fit: what measuring it would need; out of memory: the
                                              # allocation that failed ...
    available_bytes: int | None = None        # ... and what was free (out of memory: the device's free, at the
                                              # failure, as PyTorch's message said)
    held_bytes: int | None = None             # out of memory: what PyTorch's caching allocator held reserved but
                                              # unallocated at the failure (its message's figure)
    budget_s: float | None = None             # stopped by the time budget: that budget (None: cancelled, or not
                                              # stopped); wall_s is the time it had run
    reference_bytes: int | None = None        # the part of needed_bytes that is the fp64 accuracy check
    accuracy: Accuracy | None = None
    energy: Energy | None = None              # GPU: the energy a loop of the call drew (None: not measured) ...
    energy_refused: str | None = None         # ... or why it was not, in one line (None: not asked, or measured)
    profiled_forwards: int = 0
    wall_s: float | None = None               # what measuring it cost, start to end
    trace_path: str | None = None             # Chrome trace (opens in Perfetto)
    counters: Counters | None = None          # one call under Nsight Compute: a replay's, where the recording holds
                                              # them for this workload and variant (replay.find_recorded)

    @property
    def ok(self) -> bool:
        return self.status == OK

    # -- phases: every figure, count and share names the phase it is of ---------------------------------------
    @property
    def phase(self) -> str:
        """What the run's figure (`timing`) is of: "forward", "step" (forward + backward) or "backward"."""
        return PHASE_OF_PASS[self.workload.passes]

    @property
    def call(self) -> str:
        """What one call is, the unit of the host figures and the profiled window: a forward, or a training step
        (a backward view's calls are whole steps too)."""
        return "step" if self.workload.training else "forward"

    def kernels_of(self, phase: str | None = None) -> list[Kernel]:
        """The table's rows of `phase` (the run's own by default)."""
        return [k for k in self.kernels if in_phase(k, phase or self.phase)]

    def gpu_us(self, phase: str | None = None) -> float:
        """The kernel table's total for `phase` (the run's own by default): GPU µs per call (CPU self µs on a CPU)."""
        return sum(k.us_per_forward for k in self.kernels_of(phase))

    def launches(self, phase: str | None = None) -> float:
        """Kernels launched per call in `phase` (the run's own by default)."""
        return sum(k.calls_per_forward for k in self.kernels_of(phase))

    @property
    def kernels_per_forward(self) -> float | None:
        """Kernels per call of the run's phase, on a GPU (a CPU table lists ops, not launches)."""
        if self.environment.device != "cuda" or not self.kernels:
            return None
        return self.launches()

    @property
    def call_gpu_ms(self) -> float | None:
        """GPU time of one whole call, the unit of the host figures: a backward view's is its step's."""
        if self.workload.passes == "bwd" and self.forward_timing is not None and self.backward_timing is not None:
            return self.forward_timing.median_ms + self.backward_timing.median_ms
        return self.timing.median_ms if self.timing else None

    @property
    def warm_call_ms(self) -> float | None:
        """The warm GPU time of one whole call, what a plain loop's figures are set against: the mode's own call time
        when it is warm, else the warm events taken beside it."""
        return self.warm_timing.median_ms if self.warm_timing is not None else self.call_gpu_ms

    @property
    def bound(self) -> str | None:
        """What sets a plain loop's pace, from the three host figures (None where they were not taken): "gpu" when
        the pace is within HOST_BOUND of the warm GPU time; "host" when it is not and issuing a call costs the CPU
        about as long as the GPU takes to run it, so the host cannot stay ahead; "other" when the loop ran slower than
        both (it waited on something neither measures: a finding to explain, not a bound)."""
        if self.back_to_back is None or self.host_cost is None or self.warm_call_ms is None:
            return None
        gpu = self.warm_call_ms
        if self.back_to_back.median_ms <= HOST_BOUND * gpu:
            return "gpu"
        return "host" if HOST_BOUND * self.host_cost.median_ms >= gpu else "other"

    @property
    def tflops(self) -> float | None:
        """The pass's FLOPs (workload.pass_flops) over its figure's time."""
        if not self.timing or not self.timing.median_ms:
            return None
        return self.workload.pass_flops / (self.timing.median_ms * 1e-3) / 1e12

    @property
    def peak_share(self) -> float | None:
        """`tflops` over the device's datasheet peak for the dtype, 0..1 (None where the peak is not known)."""
        peak = (self.environment.peak_tflops or {}).get(self.workload.dtype)
        return self.tflops / peak if peak and self.tflops else None

    @property
    def gpu_ms(self) -> float | None:
        return self.timing.median_ms if self.timing else None

    @property
    def back_to_back_ms(self) -> float | None:
        return self.back_to_back.median_ms if self.back_to_back else None

    @property
    def stops(self) -> bool:
        """Longer sequences would need more memory still: a sweep tries this variant no further."""
        return self.status in (DOES_NOT_FIT, OUT_OF_MEMORY)

    def to_dict(self) -> dict:
        """The run's fields, and for a client the figures derived from them (read back, they are derived again)."""
        data = asdict(self)
        data["environment"] = self.environment.to_dict()
        if self.counters is not None:
            data["counters"] = self.counters.to_dict()
        data |= {"phase": self.phase, "bound": self.bound, "kernels_per_forward": self.kernels_per_forward,
                 "tflops": self.tflops, "peak_share": self.peak_share, "warm_call_ms": self.warm_call_ms}
        if self.energy is not None:
            data["energy"] |= {"joules_per_call": self.energy.joules_per_call, "watts": self.energy.watts}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Run":
        data = {k: v for k, v in data.items() if k in _RUN_FIELDS}
        data["workload"] = _workload(json.dumps(data["workload"], sort_keys=True))
        data["environment"] = _environment(json.dumps(data["environment"], sort_keys=True))
        data["kernels"] = share_by_phase([Kernel.from_dict(k) for k in data.get("kernels", [])])
        data["host_ops"] = [HostOp(**h) for h in data.get("host_ops", [])]
        if data.get("status") == OUT_OF_MEMORY and data.get("needed_bytes") is None:  # recorded before the fields
            data |= out_of_memory_figures(data.get("reason") or "")
        for key, kind in (("timing", Timing), ("host_cost", Timing), ("back_to_back", Timing), ("accuracy", Accuracy),
                          ("forward_timing", Timing), ("backward_timing", Timing), ("warm_timing", Timing),
                          ("clocks_before", Clocks), ("clocks_after", Clocks), ("energy", Energy)):
            if data.get(key) is not None:
                data[key] = kind(**{k: v for k, v in data[key].items() if k in _FIELDS_OF[kind]})
        if data.get("counters") is not None:
            data["counters"] = Counters.from_dict(data["counters"])
        return cls(**data)

    def light(self) -> "Run":
        """The run as a sweep keeps it: numbers, statuses and kernel rows, without launch chains, host ops or trace."""
        kernels = [replace(k, launched_by=None) for k in self.kernels]
        return replace(self, kernels=kernels, host_ops=[], pytorch_warnings=[], trace_path=None)


_RUN_FIELDS = {f.name for f in fields(Run)}
_FIELDS_OF = {kind: {f.name for f in fields(kind)} for kind in (Timing, Accuracy, Clocks, Energy)}  # a client's
# derived figures (Energy's joules_per_call and watts) are derived again, not read


# A recording's runs share a few dozen workloads and one machine: each made (and checked) once, by its JSON. Both are
# frozen, so the runs may share them.
@functools.lru_cache(maxsize=4096)
def _workload(spelled: str) -> Workload:
    return Workload(**json.loads(spelled))


@functools.lru_cache(maxsize=64)
def _environment(spelled: str) -> Environment:
    return Environment.from_dict(json.loads(spelled))


@dataclass
class Comparison:
    """A vs B on one workload: the two runs. A side may be a variant's fp8 twin: its run's workload is then the asked
    one quantised (`Variant.effective`), the two differing in dtype or kv_dtype alone, on the same drawn values."""
    a: Run
    b: Run

    @property
    def workload(self) -> Workload:
        """The workload asked: both sides', or, where a side quantised it, the 16-bit one whose values both drew."""
        w = self.a.workload
        return w if w == self.b.workload else w.unquantised

    def quantised_sides(self) -> dict[str, Workload]:
        """"A", "B" -> the workload that side ran, where it quantised the asked one itself (an fp8 twin)."""
        return {name: r.workload for name, r in (("A", self.a), ("B", self.b)) if r.workload != self.workload}

    def to_dict(self) -> dict:
        return {"a": self.a.to_dict(), "b": self.b.to_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> "Comparison":
        return cls(a=Run.from_dict(data["a"]), b=Run.from_dict(data["b"]))

    def without_files(self) -> "Comparison":
        """A copy that names no file of this machine: what a client of the app may be sent."""
        return Comparison(replace(self.a, trace_path=None), replace(self.b, trace_path=None))


@dataclass
class Sweep:
    """Variants over one axis of the workload, everything else fixed: one light run per variant and point. The axis
    is the sequence length S by default, or the batch B; `seq_lens` holds its values, in order (the name it had when
    only S was swept, kept for the recordings and the API)."""
    variants: list[str]                       # A and B first; a recording holds every variant
    workload: Workload                        # the fixed fields; its axis field holds the first value
    seq_lens: list[int]                       # the axis' values
    environment: Environment
    runs: list[Run] = field(default_factory=list)
    available_bytes: int | None = None        # the memory budget when the sweep began
    budget_s: float | None = None
    predicted_s: float | None = None          # the whole sweep's cost, predicted from its first points
    stopped: str | None = None                # why it ended before its last point, if it did
    axis: str = "seq_len"                     # the workload field swept: seq_len or batch

    @property
    def a(self) -> str:
        return self.variants[0]

    @property
    def b(self) -> str:
        return self.variants[1]

    def value(self, run: Run) -> int:
        """The run's point on the axis: its S, or its B."""
        return getattr(run.workload, self.axis)

    def of(self, variant: str) -> list[Run]:
        """The runs of one variant, smallest point first."""
        return sorted((r for r in self.runs if r.variant == variant), key=self.value)

    def at(self, variant: str, value: int) -> Run | None:
        return next((r for r in self.runs if r.variant == variant and self.value(r) == value), None)

    def select(self, variants, seq_lens=None) -> "Sweep":
        """The same sweep narrowed to some variants (in that order) and points."""
        variants = list(variants)
        points = [s for s in self.seq_lens if seq_lens is None or s in set(seq_lens)]
        runs = [r for v in variants for r in self.of(v) if self.value(r) in points]
        workload = self.workload.replace(**{self.axis: points[0]}) if points else self.workload
        return replace(self, variants=variants, workload=workload, seq_lens=points, runs=runs)

    def to_dict(self) -> dict:
        return {"variants": self.variants, "workload": asdict(self.workload), "seq_lens": self.seq_lens,
                "axis": self.axis, "environment": self.environment.to_dict(), "runs": [r.to_dict() for r in self.runs],
                "available_bytes": self.available_bytes, "budget_s": self.budget_s,
                "predicted_s": self.predicted_s, "stopped": self.stopped}

    @classmethod
    def from_dict(cls, data: dict) -> "Sweep":
        data = dict(data)
        data["workload"] = _workload(json.dumps(data["workload"], sort_keys=True))
        data["environment"] = _environment(json.dumps(data["environment"], sort_keys=True))
        data["runs"] = [Run.from_dict(r) for r in data["runs"]]
        return cls(**data)


# -- a recording's files: its runs and its sweeps, each a gzipped JSON list (18 MB of runs is 2 MB so: the tree a lent
# GPU's call carries is held to 64 MiB) --------------------------------------------------------------------------------
RUNS_FILE, SWEEPS_FILE = "runs.json.gz", "sweeps.json.gz"


def write_stored(path, items) -> None:
    """Write `items` (runs or sweeps) to `path` as gzipped JSON, the same bytes for the same items (no time stamp)."""
    data = json.dumps([item.to_dict() for item in items], indent=1).encode()
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        f.write(data)


def read_stored(path) -> list[dict]:
    """The JSON list stored at `path` (write_stored's), or [] where there is none."""
    try:
        with gzip.open(path, "rb") as f:
            return loads(f.read())
    except FileNotFoundError:
        return []


def loads(data: bytes):
    """JSON from bytes, parsed by orjson where it is installed (gradio depends on it): the recording's 20 MB of runs
    parse in 0.07 s against the standard library's 0.18 s (this 2-core CPU), a part of every server's start. What orjson
    refuses (NaN, integers past 64 bits, both of which `json.dumps` may write) is parsed by the standard library."""
    try:
        import orjson
    except ImportError:
        return json.loads(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)

