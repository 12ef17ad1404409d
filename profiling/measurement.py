"""Measure variants on one workload: first call and warm-up, accuracy, timing, host figures, memory and a
profiled window -> `Run`s (plain data). Nothing here plans, explains, formats or draws.

The variants of one call are one session: their timings are taken in interleaved rounds, so a drift of the
machine hits them alike, and their host figures before any profiler session of the call (a session leaves later
calls costlier). A `Guard` is checked at every safe point, inside long phases too: past its deadline or once
cancelled, what was measured is kept and the rest comes back "stopped".

Everything that times or profiles holds one process-wide lock: two profiler sessions at once crash libtorch,
and two timings at once contaminate each other, whoever calls.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from attention_variants import Variant

from . import text, trace as trace_mod
from .accuracy import Reference
from .budget import compile_clock, forward_bytes
from .dispatch import clean_warning, refusals
from .environment import Environment, detect
from .results import ERROR, OK, OUT_OF_MEMORY, STOPPED, UNSUPPORTED, Run, Timing
from .workload import Inputs, Refusal, Workload

Progress = Callable[[float, str], None]
WARMUP_CALLS = 3              # as in the blog
PROFILED_CALLS = 3            # the blog's "active 3"
TIMING_BUDGET_S = 0.06        # GPU, per variant: CUDA events are steady, this gives a stable median
MIN_SAMPLES, MAX_SAMPLES = 8, 50  # 8 a side: the rank test can separate at p = 2/12870
GROUP_S, GROUP_MAX = 200e-6, 64  # forwards shorter than 200 µs are timed in groups of up to 64
CPU_TIMING_BUDGET_S = 1.0     # CPU, per comparison: more samples while the spread is wide, up to this
CPU_MAX_SAMPLES = 200
CPU_MIN_ROUNDS = 20
SETTLED_SPREAD = 0.10         # a CPU timing has settled when its quartiles are within 10% of its median
HOST_FIGURES_BUDGET_S = 0.02  # back-to-back and host cost: this long each, 20 to 300 calls
HOST_COST_CALLS = (20, 300)
HOST_ROUNDS = 8               # back-to-back samples per variant, one per round
LOOP_CALLS = 10               # the fewest calls of a back-to-back sample of calls under 10 ms
QUEUE_LAUNCHES = 512          # launches queued behind the parked GPU, well under CUDA's queue depth
MAX_LAUNCHES_PER_CALL = 64    # more than any variant launches per call (math at S=4096: 24 kernels); the host
                              # figures come before the profile, so the real count is not known yet
LONG_CALL_S = 1e-3            # a forward this long is GPU-bound beyond doubt: fewer probe and settle calls
                              # (budget._LONG_TIMED_CALLS prices what it takes)
HOST_CALL_MAX_S = 5e-4        # no variant here takes the host longer than this to issue (math: ~0.16 ms)
HOST_BOUND = 1.10             # back-to-back per call over GPU time by more than this: the host sets the pace
PIN_CALLS = 200
KEPT_TRACES = 64              # traces kept in the temporary folder when no trace_dir is given
_trace_counter = itertools.count()
PHASES = {"prepare": (0.0, 0.3), "timing": (0.3, 0.25), "host": (0.55, 0.15), "finish": (0.7, 0.3)}
_LOCK = threading.RLock()     # one measurement at a time in this process, whatever calls it


class Stopped(Exception):
    """The guard ended the measurement: cancelled, or past the deadline. What was measured is kept."""


@dataclass
class Guard:
    """When a measurement must stop: past `deadline` (time.perf_counter) or once `cancelled()` says so."""
    deadline: float | None = None
    cancelled: Callable[[], bool] = field(default=lambda: False)
    budget_s: float | None = None

    @classmethod
    def within(cls, budget_s: float | None, cancelled: Callable[[], bool] = lambda: False) -> "Guard":
        deadline = time.perf_counter() + budget_s if budget_s is not None else None
        return cls(deadline, cancelled, budget_s)

    def left_s(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.perf_counter()

    def check(self) -> None:
        if self.cancelled():
            raise Stopped("cancelled")
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise Stopped(f"over the time budget of {self.budget_s:.0f} s")


class _OtherWork:
    """Counts work of this process that runs beside a measurement (rendering another visitor's result):
    it shares the CPU, so a timing taken meanwhile is marked as such."""

    def __init__(self):
        self._guard = threading.Lock()
        self.running = 0      # how many are running now
        self.started = 0      # how many have ever started

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._guard:
            self.running += 1
            self.started += 1
        try:
            yield
        finally:
            with self._guard:
                self.running -= 1

    def mark(self) -> tuple[int, int]:
        return self.running, self.started


other_work = _OtherWork()  # `with other_work(): render(...)` in the app


def _overlapped(mark: tuple[int, int]) -> bool:
    """Did other work run at any time since `mark` was taken?"""
    running, started = other_work.mark()
    return mark[0] > 0 or running > 0 or started > mark[1]


def _compiled_before() -> bool:
    """Has torch.compile produced a graph in this process? (Read without importing dynamo.)"""
    utils = sys.modules.get("torch._dynamo.utils")
    return bool(utils and utils.counters["stats"]["unique_graphs"])


# -- compiling: a compiled variant's first call that compiled is the estimate for the next one ------------
COMPILED_FIRST_CALL = (5.0, 0.5)  # a compiled variant's first call over 5 warm calls + 0.5 s long: it compiled
_compiled: set[tuple[str, Workload]] = set()    # (variant key, workload) compiled in this process


def has_compiled(key: str, workload: Workload) -> bool:
    return (key, workload) in _compiled


def _note_compile(variant: Variant, workload: Workload, first_call_s: float, warm_call_s: float) -> None:
    _compiled.add((variant.key, workload))
    calls, extra_s = COMPILED_FIRST_CALL
    if first_call_s > calls * warm_call_s + extra_s:
        compile_clock.record(workload.device, variant.key, first_call_s)


def _no_progress(fraction: float, message: str) -> None:
    pass


# -- the workload's shared state: inputs and the fp64 reference --------------------------------------
class _WorkloadCache:
    """Inputs and reference of the last workload, so every variant sees the same tensors and mask."""

    def __init__(self):
        self.workload: Workload | None = None
        self.inputs: Inputs | None = None
        self.reference: Reference | None = None

    def get(self, workload: Workload) -> "_WorkloadCache":
        if workload != self.workload:
            self.clear()
            self.inputs = workload.make_inputs()
            self.workload = workload
        return self

    def clear(self) -> None:
        self.workload = self.inputs = self.reference = None


_cache = _WorkloadCache()


# -- timing ---------------------------------------------------------------------------------
def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _park_gpu(seconds: float) -> None:
    """Queue a spin on the GPU so the host runs ahead of it: what follows is timed without host gaps."""
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(int(min(seconds, 1.0) * 2e9))  # ~2 GHz: a little longer on slower clocks


@dataclass
class _Subject:
    """One variant on its way through a measurement. A call is its pass's phases in turn: the forward alone (under
    no_grad), or a training step's forward (autograd recording) then backward."""
    variant: Variant
    run: Run
    phases: list[Callable[[], None]] = field(default_factory=list)
    inputs: Inputs | None = None
    estimate_s: float = 0.0
    finished: bool = False

    @property
    def going(self) -> bool:
        return self.run.status == OK

    def call(self) -> None:
        for phase in self.phases:
            phase()

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        """What every loop of calls runs inside, entered once outside the timed region: the variant's sdpa_kernel pin,
        and no autograd for a forward pass (as inference runs it)."""
        with self.variant.pin(), (torch.no_grad() if not self.run.workload.training else contextlib.nullcontext()):
            yield


def _phases(variant: Variant, x: Inputs) -> list[Callable[[], None]]:
    """The calls of one pass. A training step resets the gradients to None first (accumulating into them would add
    kernels), runs the forward on inputs that require grad, then the backward from the fixed output gradient."""
    if not x.workload.training:
        return [lambda: variant.forward(x)]
    leaves, held = (x.q, x.k, x.v), {}

    def forward() -> None:
        for t in leaves:
            t.grad = None
        held["out"] = variant.forward(x)

    def backward() -> None:
        held.pop("out").backward(x.grad_out)
    return [forward, backward]


def _pass_timings(run: Run, per_phase: list[list[float]], method: str) -> None:
    """The pass's timing from its phases' samples (same calls): a forward; a step (their sum); the backward alone."""
    if len(per_phase) == 1:
        run.timing = Timing.of(per_phase[0], method)
        return
    run.forward_timing, run.backward_timing = (Timing.of(p, method) for p in per_phase)
    step = [f + b for f, b in zip(*per_phase)]
    run.timing = run.backward_timing if run.workload.passes == "bwd" else Timing.of(step, method)


def _time_gpu(subjects: list[_Subject], guard: Guard) -> None:
    """CUDA events around groups of calls, every sample queued behind its own parked GPU, so the events time the
    GPU's work alone and not the gaps a slow host would leave between launches; the variants take their samples in
    turn, round by round. Within a call an event between the forward and the backward times each apart. A call of a
    few microseconds is timed in groups (each sample is a group's mean): an event pair costs about as much as such
    a kernel and would otherwise be most of what it measures."""
    plans = {}
    for s in subjects:
        probes = 10 if s.estimate_s < LONG_CALL_S else 2  # a call of a millisecond or more: two tell its length
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with s.context():
            torch.cuda.synchronize()
            _park_gpu(0.002 + probes * min(s.estimate_s, HOST_CALL_MAX_S))
            start.record()
            for _ in range(probes):
                s.call()
            end.record()
            torch.cuda.synchronize()
        per_call_s = max(start.elapsed_time(end) / probes / 1000.0, 1e-7)
        group = int(min(GROUP_MAX, max(1, GROUP_S // per_call_s)))
        wanted = int(min(MAX_SAMPLES, max(MIN_SAMPLES, TIMING_BUDGET_S / (group * per_call_s))))
        plans[id(s)] = (group, wanted, [])
    for _ in range(max(wanted for _, wanted, _ in plans.values())):
        guard.check()
        for s in subjects:
            group, wanted, samples = plans[id(s)]
            if len(samples) >= wanted:
                continue
            events = [[torch.cuda.Event(enable_timing=True) for _ in range(len(s.phases) + 1)] for _ in range(group)]
            with s.context():  # entered outside the events
                # never more launches in flight than one group's, far under CUDA's queue depth (a full queue
                # makes the host wait, and the GPU then waits on the host)
                torch.cuda.synchronize()
                _park_gpu(1.5 * group * min(s.estimate_s, HOST_CALL_MAX_S) + 20e-6)
                for marks in events:
                    for mark, phase in zip(marks, s.phases):
                        mark.record()
                        phase()
                    marks[-1].record()
            samples.append(events)
    torch.cuda.synchronize()
    for s in subjects:
        group, _, samples = plans[id(s)]
        per_phase = [[sum(marks[p].elapsed_time(marks[p + 1]) for marks in events) / group for events in samples]
                     for p in range(len(s.phases))]
        _pass_timings(s.run, per_phase, "cuda events" if group == 1 else f"cuda events per {group} calls")


def _settled(times: list[list[float]]) -> bool:
    """Every timing's quartiles are tight. (Never "already apart": stopping as soon as two samples look
    different would make noise look like a result.)"""
    stats = [Timing.of(t, "") for t in times]
    return all(s.p75_ms - s.p25_ms <= SETTLED_SPREAD * s.median_ms for s in stats)


def _time_cpu(subjects: list[_Subject], guard: Guard) -> None:
    """Wall time per call on the CPU (each phase apart), the variants interleaved call by call (so a burst of load
    hits all), with more rounds while the spread is wide, up to CPU_TIMING_BUDGET_S."""
    times: list[list[list[float]]] = [[[] for _ in s.phases] for s in subjects]
    until = time.perf_counter() + CPU_TIMING_BUDGET_S
    try:
        for rounds in itertools.count(1):
            guard.check()
            for subject, per_phase in zip(subjects, times):
                with subject.context():  # entered outside the timed call
                    for phase, samples in zip(subject.phases, per_phase):
                        t0 = time.perf_counter()
                        phase()
                        samples.append((time.perf_counter() - t0) * 1000.0)
            totals = [[sum(call) for call in zip(*per_phase)] for per_phase in times]
            if rounds >= CPU_MIN_ROUNDS and (time.perf_counter() > until or rounds >= CPU_MAX_SAMPLES
                                             or _settled(totals)):
                break
    finally:  # a stop keeps the samples taken
        for subject, per_phase in zip(subjects, times):
            done = min(len(p) for p in per_phase)  # a round cut short between phases is dropped
            if done:
                _pass_timings(subject.run, [p[:done] for p in per_phase], "perf_counter")


def _calls(per_call_s: float, wanted: float) -> int:
    """How many calls a host figure takes: what the budget allows, within HOST_COST_CALLS; a call of a
    millisecond or more is GPU-bound beyond doubt, and a few of them settle it."""
    least = HOST_COST_CALLS[0] if per_call_s < LONG_CALL_S else 8
    return int(min(HOST_COST_CALLS[1], max(least, wanted)))


def _host_plan(s: _Subject) -> tuple[int, int, float]:
    """Per round: (back-to-back calls, host-cost calls, a generous guess of one call's host time in seconds)."""
    gpu_s = s.run.timing.median_ms / 1000.0
    host_guess_s = max(s.estimate_s, 1e-4) if gpu_s < LONG_CALL_S else HOST_CALL_MAX_S  # a warm call: an upper bound
    per_call_s = max(gpu_s, host_guess_s)
    loop = _calls(per_call_s, HOST_FIGURES_BUDGET_S / per_call_s) // HOST_ROUNDS
    calls = min(_calls(per_call_s, HOST_FIGURES_BUDGET_S / per_call_s) // HOST_ROUNDS,
                QUEUE_LAUNCHES // MAX_LAUNCHES_PER_CALL)
    # a loop's first call is issued before the GPU has work: over 10 calls its host time is a tenth of the pace,
    # over 2 half (a 1.1 ms step read 10% slow); only calls of 10 ms and more can afford 2
    return max(LOOP_CALLS if gpu_s < 10 * LONG_CALL_S else 2, loop), max(2, calls), host_guess_s


def _host_figures(subjects: list[_Subject], guard: Guard) -> None:
    """Back-to-back time per call (a plain loop: what a model sees), host cost per call (each call timed
    while the GPU is parked, so the host never waits on it), and which side sets the back-to-back pace.
    Taken in HOST_ROUNDS rounds that alternate between the variants, so a drift in the host's speed
    (seen on the H200: one variant's median moving from 17 to 26 µs between two moments) hits all alike."""
    plans = {id(s): _host_plan(s) for s in subjects}
    loops: dict[int, list[float]] = {id(s): [] for s in subjects}
    host_ms: dict[int, list[float]] = {id(s): [] for s in subjects}
    try:
        for _ in range(HOST_ROUNDS):
            guard.check()
            for s in subjects:
                loop, calls, host_guess_s = plans[id(s)]
                with s.context():  # entered outside every timed call
                    # settle after whatever ran before (another variant): a long call settles in one
                    for _ in range(3 if s.run.timing.median_ms < LONG_CALL_S * 1000 else 1):
                        s.call()
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(loop):
                        s.call()
                    torch.cuda.synchronize()
                    loops[id(s)].append((time.perf_counter() - t0) * 1000.0 / loop)
                    _park_gpu(1.5 * calls * host_guess_s + 0.002)
                    for _ in range(calls):
                        t0 = time.perf_counter()
                        s.call()
                        host_ms[id(s)].append((time.perf_counter() - t0) * 1000.0)
                    torch.cuda.synchronize()
    finally:  # a stop keeps the rounds taken
        for s in subjects:
            if loops[id(s)] and host_ms[id(s)]:
                run = s.run
                run.back_to_back = Timing.of(loops[id(s)], "perf_counter per loop of calls")
                run.bound = "host" if run.back_to_back.median_ms > HOST_BOUND * run.timing.median_ms else "gpu"
                run.host_cost = Timing.of(host_ms[id(s)], "perf_counter per call, GPU parked")


def _pin_cost_ms(variant: Variant) -> float | None:
    """What entering and leaving the variant's `sdpa_kernel` pin costs, alone."""
    if not variant.pinned:
        return None
    times = []
    for _ in range(PIN_CALLS):
        t0 = time.perf_counter()
        with variant.pin():
            pass
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def _peak_extra_bytes(s: _Subject, x: Inputs) -> int | None:
    """A call's peak beyond what was allocated before it (a training step's gradients of the last call freed
    first, as the step itself frees them). On a CPU the profiled window's memory events give it instead."""
    if x.workload.device != "cuda":
        return None
    for t in (x.q, x.k, x.v):
        t.grad = None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    s.call()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def _saved_bytes(variant: Variant, x: Inputs) -> int | None:
    """What autograd keeps from one forward for its backward, beyond q, k and v themselves: the storages of every
    tensor it saves, each counted once (read by a saved-tensors hook, the same on any device). None where the hook
    cannot see them."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = variant.forward(x)
    except Exception:  # a compiled graph that will not trace under the hook: not measured, not guessed
        return None
    del out
    leaves = {t.untyped_storage().data_ptr() for t in (x.q, x.k, x.v)}
    return sum(n for ptr, n in seen.items() if ptr not in leaves)


def _profile(fn: Callable[[], None], device: str, calls: int, trace_path: Path) -> None:
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the profiler's own chatter is not the user's business
        with profile(activities=activities, profile_memory=device == "cpu",
                     schedule=schedule(wait=0, warmup=1, active=calls, repeat=1),
                     on_trace_ready=lambda p: p.export_chrome_trace(str(trace_path))) as prof:
            for i in range(calls + 1):  # one unrecorded warm-up step, then the active ones
                with record_function(f"{trace_mod.CALL_RANGE}#{i}"):
                    fn()
                _sync(device)
                prof.step()


def _trace_path(key: str, w: Workload, trace_dir: str | Path | None) -> Path:
    """A named trace file; without a trace_dir, in a per-process folder that keeps the newest few."""
    kv = f"kv{w.kv_heads}" if w.kv_heads else ""
    mask = {"flag": "", "bool": "_bool", "bias": "_bias", "window": f"_w{w.window}"}[w.mask]
    step = {"fwd": "", "fwd+bwd": "_train", "bwd": "_bwd"}[w.passes]
    name = (f"{key}_B{w.batch}H{w.heads}{kv}S{w.seq_len}D{w.head_dim}_{w.dtype}_{'causal' if w.causal else 'full'}"
            f"{mask}_r{w.rank}{step}")
    if trace_dir:
        directory = Path(trace_dir)
    else:  # a long-running app must not fill the disk with traces nobody downloads
        directory = Path(tempfile.gettempdir()) / f"attention_profiler_{os.getpid()}"
        name = f"{time.strftime('%H%M%S')}_{next(_trace_counter)}_{name}"
        for old in sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime)[:-KEPT_TRACES]:
            old.unlink(missing_ok=True)
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"{name}.json"


# -- one variant --------------------------------------------------------------------------------
def _is_refusal(error: Exception) -> bool:
    """PyTorch refusing the input (no backend for it, an unsupported feature), not a failure."""
    said = str(error)
    return isinstance(error, NotImplementedError) or any(
        words in said for words in ("No available kernel", "Rejected backends", "does not support", "not supported"))


def _first_call(fn: Callable[[], torch.Tensor]) -> tuple[torch.Tensor | None, list[str], Exception | None]:
    """Call once, keeping PyTorch's warnings: they carry SDPA's reasons for refusing a backend."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return fn(), _unique(caught), None
        except Exception as error:  # a refused backend, a failed compile: a result, not a crash
            if isinstance(error, torch.OutOfMemoryError):
                raise
            return None, _unique(caught), error


def _unique(caught) -> list[str]:
    return list(dict.fromkeys(m for m in (clean_warning(str(w.message)) for w in caught) if m))


def _refusal_reason(messages: list[str], error: Exception) -> str:
    """'Flash attention not used because: <PyTorch's reason> → No available kernel. Aborting execution.'"""
    why = [f"{backend} not used because: {' '.join(r for r in reasons if 'runtime disabled' not in r)}"
           for backend, reasons in refusals(messages).items()
           if any("runtime disabled" not in r for r in reasons)]
    return "; ".join(why + [clean_warning(str(error).strip().splitlines()[0])])


def _free(device: str) -> None:
    _cache.clear()
    if device == "cuda":
        torch.cuda.empty_cache()


def _prepare(subject: _Subject, progress: Progress) -> None:
    """The variant's own check, its one-off setup, then the first call (PyTorch's refusals, compilation), its
    accuracy against the fp64 reference (made once per workload), and warm-up."""
    variant, run = subject.variant, subject.run
    workload, env = run.workload, run.environment
    reason = variant.supports(workload, env)
    if reason:
        run.status, run.reason = UNSUPPORTED, reason
        return
    device = workload.device
    state = _cache.get(workload)
    x = state.inputs.with_grad() if workload.training else state.inputs
    subject.inputs, subject.phases = x, _phases(variant, x)
    if variant.setup is not None:
        t0 = time.perf_counter()
        variant.setup(x)
        _sync(device)
        run.setup_ms = (time.perf_counter() - t0) * 1000.0
    compiles = variant.compiled or variant.jit_s
    if compiles and not has_compiled(variant.key, workload):
        seconds, basis = compile_clock.estimate(device, variant, workload.training)
        progress(0.0, f"{variant.key}: compiling (first call; estimated ~{text.seconds(seconds)}, {basis})")
    else:
        progress(0.0, f"{variant.key}: warm-up" + (" (compiled before in this process)" if compiles else ""))
    with subject.context():
        t0 = time.perf_counter()
        out, run.pytorch_warnings, error = _first_call(lambda: _first(subject))
        _sync(device)
        run.first_call_ms = (time.perf_counter() - t0) * 1000.0
        if error is not None:
            run.status = UNSUPPORTED if _is_refusal(error) else ERROR
            run.reason = _refusal_reason(run.pytorch_warnings, error)
            return
        progress(0.5, f"{variant.key}: accuracy against fp64")
        if state.reference is None:
            state.reference = Reference(state.inputs)
        grads = {"dq": x.q.grad, "dk": x.k.grad, "dv": x.v.grad} if workload.training else None
        run.accuracy = state.reference.of(out, grads)
        del out, grads
        t0 = time.perf_counter()
        for _ in range(WARMUP_CALLS - 1):
            subject.call()
        _sync(device)
    subject.estimate_s = (time.perf_counter() - t0) / max(1, WARMUP_CALLS - 1)
    if compiles:
        _note_compile(variant, workload, run.first_call_ms / 1000.0, subject.estimate_s)


def _first(subject: _Subject) -> torch.Tensor:
    """The first call, keeping the output for the accuracy check (a training step's gradients stay on the inputs)."""
    x = subject.inputs
    if not x.workload.training:
        return subject.variant.forward(x)
    for t in (x.q, x.k, x.v):
        t.grad = None
    out = subject.variant.forward(x)
    out.backward(x.grad_out)
    return out.detach()


def _finish(subject: _Subject, trace_dir: str | Path | None, progress: Progress) -> None:
    """Peak memory (and, training, what autograd saves), then the profiled window (last: a profiler session leaves
    later calls costlier); then the trace's tables."""
    variant, run, x = subject.variant, subject.run, subject.inputs
    workload, device = run.workload, run.workload.device
    with subject.context():  # entered once around every loop: the pin is not part of a call
        run.peak_extra_bytes = _peak_extra_bytes(subject, x)
        if workload.training:
            run.saved_bytes = _saved_bytes(variant, x)
        progress(0.1, f"{variant.key}: profiling")
        path = _trace_path(variant.key, workload, trace_dir)
        _profile(subject.call, device, PROFILED_CALLS, path)
    summary = trace_mod.summarize_trace(trace_mod.load_trace(path))
    run.trace_path = str(path)
    run.profiled_forwards = summary.forwards
    run.kernels, run.host_ops, run.backend = summary.kernels, summary.host_ops, summary.backend
    run.profiled_host_ms = summary.profiled_host_ms
    if device == "cuda":
        run.kernels_per_forward = summary.kernels_per_forward
    else:
        run.peak_extra_bytes = summary.cpu_peak_extra_bytes
    run.pin_cost_ms = _pin_cost_ms(variant)
    run.tflops = workload.pass_flops / (run.timing.median_ms * 1e-3) / 1e12
    peak = (run.environment.peak_tflops or {}).get(workload.dtype)
    run.peak_share = run.tflops / peak if peak else None
    subject.finished = True
    progress(1.0, f"{variant.key}: done")


def _guarded(subject: _Subject, step: Callable[[], None]) -> None:
    """Run one step of a subject; an out-of-memory error becomes its result, and frees what it can."""
    if not subject.going:
        return
    try:
        step()
    except torch.OutOfMemoryError as error:
        _free(subject.run.workload.device)
        subject.run.status = OUT_OF_MEMORY
        subject.run.reason = f"out of memory on {subject.run.environment.device_name}: {str(error).splitlines()[0]}"


def measure_runs(variants: list[Variant], workload: Workload, *, env: Environment | None = None,
                 trace_dir: str | Path | None = None, progress: Progress = _no_progress,
                 guard: Guard | None = None, labels: list[str] | None = None) -> list[Run]:
    """Measure `variants` on the same inputs as one session, under the process-wide lock: each prepared in turn
    (compiled ones last), then timed in interleaved rounds, their host figures taken, and each profiled. A variant
    that cannot run comes back with status "unsupported" and the reason; once `guard` stops it, the runs not yet
    done come back "stopped" with what they had measured. Whether the request fits in memory and time is the
    plan's to decide before this is called (`session.plan`)."""
    if workload.device == "cuda" and not torch.cuda.is_available():
        raise Refusal("device", "cuda", "no CUDA GPU is visible to this process")
    env = env or detect(workload.device)
    guard = guard or Guard()
    session = uuid.uuid4().hex[:12]
    with _LOCK:
        started = time.perf_counter()
        subjects = [_Subject(v, Run(variant=v.key, workload=workload, environment=env, session=session,
                                    estimated_extra_bytes=forward_bytes(workload, v.scratch_bytes(workload))))
                    for v in variants]
        n = len(subjects)
        names = [f"{label} · " if label else "" for label in (labels or [""] * n)]

        def step_progress(i: int, phase: str) -> Progress:
            """Progress of subject i within a phase; the phases follow one another, so it only grows."""
            start, width = PHASES[phase]
            return lambda f, m: progress(start + width * (i + min(f, 1.0)) / n, names[i] + m)

        try:
            for i, s in sorted(enumerate(subjects), key=lambda e: e[1].variant.compiled):
                guard.check()
                _guarded(s, lambda s=s, i=i: _prepare(s, step_progress(i, "prepare")))
            going = [s for s in subjects if s.going]
            compiled_before, mark = _compiled_before(), other_work.mark()
            for s in going:
                s.run.compiled_before = compiled_before
                step_progress(subjects.index(s), "timing")(0.0, f"{s.variant.key}: timing")
            if going:
                (_time_gpu if workload.device == "cuda" else _time_cpu)(going, guard)
            disturbed = _overlapped(mark)
            for s in going:
                s.run.concurrent_work = disturbed
            if workload.device == "cuda" and going:
                progress(PHASES["host"][0], "host cost of " + " and ".join(
                    f"{names[subjects.index(s)]}{s.variant.key}" for s in going))
                _host_figures(going, guard)
            for i, s in enumerate(subjects):
                guard.check()
                _guarded(s, lambda s=s, i=i: _finish(s, trace_dir, step_progress(i, "finish")))
        except Stopped as stop:
            for s in subjects:
                if s.going and not s.finished:
                    s.run.status = STOPPED
                    s.run.reason = f"stopped after {time.perf_counter() - started:.1f} s: {stop}"
        except torch.OutOfMemoryError as error:  # a late OOM in a shared phase: the figures so far stand
            _free(workload.device)
            for s in subjects:
                if s.going and not s.finished:
                    s.run.status = OUT_OF_MEMORY
                    s.run.reason = f"out of memory on {env.device_name}: {str(error).splitlines()[0]}"
        wall_s = time.perf_counter() - started
        for s in subjects:
            s.phases, s.inputs = [], None
            s.run.wall_s = wall_s
        progress(1.0, "done")
        return [s.run for s in subjects]
