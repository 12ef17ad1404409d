"""Measure variants on one workload: first call and warm-up, accuracy, timing (warm, then the workload's own mode:
cold L2 or a CUDA graph), energy per call where asked, host figures, memory and a profiled window -> `Run`s (plain
data). Nothing here plans,
explains, formats or draws. This module runs the steps in order; `timing` times the calls and takes the host
figures, `capture` the memory and the profiled window.

The variants of one call are one session: their timings are taken in interleaved rounds, so a drift of the
machine hits them alike, and their host figures before any profiler session of the call (a session leaves later
calls costlier). A `Guard` is checked at every safe point, inside long phases too: past its deadline or once
cancelled, what was measured is kept and the rest comes back "stopped".

Everything that times or profiles holds one process-wide lock: two profiler sessions at once crash libtorch,
and two timings at once contaminate each other, whoever calls.
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch

from attention_variants import Variant, reasons as why_not

from . import capture, text, timing, trace as trace_mod
from .accuracy import Reference
from .budget import PROFILED_CALLS, WARMUP_CALLS, call_bytes, cap_malloc_arenas, compile_clock, machine_load
from .dispatch import clean_warning, refusals
from .environment import Environment, detect
from .phases import spent
from .results import ERROR, OK, OUT_OF_MEMORY, STOPPED, UNSUPPORTED, Run, out_of_memory_figures
from .workload import Inputs, Refusal, Workload

Progress = Callable[[float, str], None]
PHASES = {"prepare": (0.0, 0.3), "timing": (0.3, 0.25), "host": (0.55, 0.15), "finish": (0.7, 0.3)}
_LOCK = threading.RLock()     # one measurement at a time in this process, whatever calls it


class Stopped(Exception):
    """The guard ended the measurement: cancelled, or past the deadline (`budget_s`: the budget it held to; None when
    cancelled). What was measured is kept."""

    def __init__(self, why: str, budget_s: float | None = None):
        super().__init__(why)
        self.budget_s = budget_s


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
            raise Stopped(f"over the time budget of {text.seconds(self.budget_s)}", self.budget_s)


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
    """Inputs and reference of the last workload's drawn values, so every variant sees the same tensors and mask. A
    pair whose workloads differ only in what is quantised (a variant beside its fp8 twin) shares them: the values are
    drawn once (the 16-bit workload's, `Workload.unquantised`), the quantised inputs made from them
    (`Inputs.quantised_as`), and the fp64 truth computed once, each quantised side adding its own part
    (`Reference.quantised`)."""

    def __init__(self):
        self.clear()

    def get(self, workload: Workload) -> "_WorkloadCache":
        drawn = workload.unquantised
        if drawn != self.workload:
            self.clear()
            self.inputs = drawn.make_inputs()
            self.workload = drawn
        return self

    def inputs_for(self, workload: Workload) -> Inputs:
        """The inputs of `workload`: the drawn ones, or those values quantised as it says (made once)."""
        if workload == self.workload:
            return self.inputs
        if workload not in self.quantised:
            self.quantised[workload] = self.inputs.quantised_as(workload)
        return self.quantised[workload]

    def reference_for(self, workload: Workload, check: Callable[[], None]) -> Reference:
        """The fp64 reference of `workload`'s inputs, made once per drawn values (and once per quantisation)."""
        if self.reference is None:
            self.reference = Reference(self.inputs, check)
        if workload == self.workload:
            return self.reference
        if workload not in self.references:
            self.references[workload] = self.reference.quantised(self.inputs_for(workload), check)
        return self.references[workload]

    def clear(self) -> None:
        self.workload = self.inputs = self.reference = None
        self.quantised: dict[Workload, Inputs] = {}
        self.references: dict[Workload, Reference] = {}


_cache = _WorkloadCache()


@dataclass
class _Subject:
    """One variant on its way through a measurement (what `timing` times: a `timing.Timed`). A call is its pass's
    phases in turn: the forward alone (under no_grad), or a training step's forward (autograd recording) then
    backward."""
    variant: Variant
    run: Run
    phases: list[Callable[[], None]] = field(default_factory=list)
    inputs: Inputs | None = None
    estimate_s: float = 0.0
    issue_s: float | None = None
    graph: timing.Captured | None = None  # graph timing: the captured graph, its calls and events, until energy
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
    leaves, grad_out, held = variant.leaves(x), variant.grad_out(x), {}

    def forward() -> None:
        for t in leaves:
            t.grad = None
        held["out"] = variant.forward(x)

    def backward() -> None:
        held.pop("out").backward(grad_out)
    return [forward, backward]


# -- one variant --------------------------------------------------------------------------------
def _is_refusal(error: Exception) -> bool:
    """PyTorch or a library refusing the input (no backend for it, an unsupported feature), not a failure."""
    said = str(error)
    return isinstance(error, NotImplementedError) or any(
        words in said for words in ("No available kernel", "Rejected backends", "does not support", "not supported",
                                    "Unsupported "))


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


def _prepare(subject: _Subject, reason: str | None, progress: Progress, check: Callable[[], None]) -> None:
    """The plan's answer to whether the variant can run here (`reason`), its one-off setup, then the first call
    (PyTorch's refusals, compilation), its accuracy against the fp64 reference (made once per workload), and
    warm-up; `check` (the guard's) between each and inside the reference's slices, so a budget holds however slow
    the machine is now."""
    variant, run = subject.variant, subject.run
    workload = run.workload
    if reason:
        run.status, run.reason = UNSUPPORTED, reason
        return
    device = workload.device
    with spent("inputs"):
        state = _cache.get(workload)
        inputs = state.inputs_for(workload)
    x = inputs.with_grad() if workload.training else inputs
    subject.inputs, subject.phases = x, _phases(variant, x)
    if x.quantised is not None:
        run.quantise_ms = x.quantised.ms
    if variant.setup is not None:
        with spent("setup"):
            t0 = time.perf_counter()
            try:
                run.setup_reused = bool(variant.setup(x))
            except (Stopped, torch.OutOfMemoryError):
                raise
            except Exception as error:  # a library refusing the workload at its plan: a result, not a crash
                run.status = UNSUPPORTED if _is_refusal(error) else ERROR  # (FlashInfer's "Unsupported group_size")
                run.reason = _refusal_reason([], error)
                return
            timing.sync(device)
            run.setup_ms = (time.perf_counter() - t0) * 1000.0
    check()
    compiles = variant.compiled or variant.jit_s
    if compiles and not has_compiled(variant.key, workload):
        seconds, basis = compile_clock.estimate(device, variant, workload.training)
        progress(0.0, f"{variant.key}: compiling (first call; estimated ~{text.seconds(seconds)}, {basis})")
    else:
        progress(0.0, f"{variant.key}: warm-up" + (" (compiled before in this process)" if compiles else ""))
    with subject.context():
        with spent("first call"):
            t0 = time.perf_counter()
            out, run.pytorch_warnings, error = _first_call(lambda: _first(subject))
            timing.sync(device)
            run.first_call_ms = (time.perf_counter() - t0) * 1000.0
        if error is not None:
            run.status = UNSUPPORTED if _is_refusal(error) else ERROR
            run.reason = _refusal_reason(run.pytorch_warnings, error)
            return
        check()
        progress(0.5, f"{variant.key}: accuracy against fp64")
        with spent("accuracy"):
            reference = state.reference_for(workload, check)
            grads = dict(zip(("dq", "dk", "dv"), (t.grad for t in variant.leaves(x)))) if workload.training else None
            run.accuracy = reference.of(out, grads, variant.packing(workload))
            del out, grads
            if variant.top_left is not None and workload.lower_right:
                _top_left(subject, reference)
        with spent("warm-up"):
            t0 = time.perf_counter()
            for _ in range(WARMUP_CALLS - 1):
                check()
                subject.call()
            timing.sync(device)
    subject.estimate_s = (time.perf_counter() - t0) / max(1, WARMUP_CALLS - 1)
    if compiles:
        _note_compile(variant, workload, run.first_call_ms / 1000.0, subject.estimate_s)


def _top_left(subject: _Subject, reference: Reference) -> None:
    """What `is_causal=True` gives its users on these inputs, where the queries are fewer than the keys: one more
    call (inside the variant's pin, before anything is timed) against the same fp64 reference; or PyTorch's words
    where it refuses the flag at these lengths. Shown beside the right answer, not assumed from the docs."""
    out, messages, error = _first_call(lambda: subject.variant.top_left(subject.inputs))
    accuracy = subject.run.accuracy
    if error is not None:
        accuracy.top_left_refused = _refusal_reason(messages, error)
    else:
        accuracy.top_left_max_abs_error = reference.of(out).max_abs_error


def _first(subject: _Subject) -> torch.Tensor:
    """The first call, keeping the output for the accuracy check (a training step's gradients stay on the inputs)."""
    x, variant = subject.inputs, subject.variant
    if not x.workload.training:
        return variant.forward(x)
    for t in variant.leaves(x):
        t.grad = None
    out = variant.forward(x)
    out.backward(variant.grad_out(x))
    return out.detach()


def _finish(subject: _Subject, trace_dir: str | Path | None, progress: Progress) -> None:
    """Peak memory (and, training, what autograd saves), then the profiled window (last: a profiler session leaves
    later calls costlier); then the trace's tables."""
    variant, run, x = subject.variant, subject.run, subject.inputs
    workload, device = run.workload, run.workload.device
    with subject.context():  # entered once around every loop: the pin is not part of a call
        with spent("memory"):
            run.peak_extra_bytes = capture.peak_extra_bytes(subject.call, variant, x)
            if workload.training:
                run.saved_bytes = capture.saved_bytes(variant, x)
        progress(0.1, f"{variant.key}: profiling")
        path = capture.trace_path(variant.key, workload, trace_dir)
        for _ in range(2):  # once on the H200 a session's trace held the calls' ops and none of their GPU work
            with spent("profiling"):
                capture.profile_calls(subject.call, device, PROFILED_CALLS, path)
            with spent("trace"):
                summary = trace_mod.summarize_trace(trace_mod.load_trace(path))
            if device != "cuda" or any(k.launched_by for k in summary.kernels):
                break
            progress(0.1, f"{variant.key}: the profiler saw no GPU work; profiling again")
        else:
            run.status = ERROR
            run.reason = ("the profiler recorded the calls' ops but none of their GPU work, twice (CUPTI delivered "
                          "no activity): no kernel table to show")
            return
    run.trace_path = str(path)
    run.profiled_forwards = summary.forwards
    run.kernels, run.host_ops, run.backend = summary.kernels, summary.host_ops, summary.backend
    run.profiled_host_ms, run.profiled_host_mean_ms = summary.profiled_host_ms, summary.profiled_host_mean_ms
    if device != "cuda":
        run.peak_extra_bytes = summary.cpu_peak_extra_bytes
    with spent("pin cost"):
        run.pin_cost_ms = timing.pin_cost_ms(variant)
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
        _out_of_memory(subject.run, error)


def _out_of_memory(run: Run, error: torch.OutOfMemoryError) -> None:
    """The run ran out of memory: PyTorch's words, and the figures they give (the allocation that failed, the free
    memory, what the caching allocator held unallocated)."""
    message = str(error).splitlines()[0]
    run.status, run.reason = OUT_OF_MEMORY, f"out of memory on {run.environment.device_name}: {message}"
    for name, value in out_of_memory_figures(message).items():
        setattr(run, name, value)


def _roofs(env: Environment, workloads: list[Workload]) -> Environment:
    """`env` with the GPU's roofs this process measured: the copy ceiling, and the matmul rate in the runs' dtypes
    (an fp8 run's: the drawn dtype's and fp8's); each measured once per process (timing's caches)."""
    if env.copy_bytes_per_s is None:
        with spent("copy ceiling"):
            env = dataclasses.replace(env, copy_bytes_per_s=timing.copy_ceiling())
    dtypes = [d for d in dict.fromkeys(d for w in workloads for d in (w.drawn, w.dtype))
              if d not in (env.matmul_flops_per_s or {})]
    if dtypes:
        with spent("matmul rate"):
            rates = {d: rate for d in dtypes if (rate := timing.matmul_rate(d))}
        if rates:
            env = dataclasses.replace(env, matmul_flops_per_s={**(env.matmul_flops_per_s or {}), **rates},
                                      matmul_tf32=timing.matmul_tf32() if "fp32" in rates else env.matmul_tf32)
    return env


def measure_runs(variants: list[Variant], workload: Workload, *, env: Environment | None = None,
                 trace_dir: str | Path | None = None, progress: Progress = _no_progress,
                 guard: Guard | None = None, labels: list[str] | None = None,
                 reasons: dict[str, str | None] | None = None, energy: bool = False) -> list[Run]:
    """Measure `variants` on the same inputs as one session, under the process-wide lock: each prepared in turn
    (compiled ones last), then timed in interleaved rounds, with `energy` (a GPU) their energy per call over a loop
    of a second or more each, their host figures taken, and each profiled. A variant
    that cannot run (`reasons`: the plan's, by key) comes back with status "unsupported" and the reason; once
    `guard` stops it, the runs not yet done come back "stopped" with what they had measured. Whether the request
    fits in memory and time is the plan's to decide before this is called (`session.plan`)."""
    if workload.device == "cuda" and not torch.cuda.is_available():
        raise Refusal("device", "cuda", "no CUDA GPU is visible to this process")
    env = env or detect(workload.device)
    if workload.device == "cpu":
        cap_malloc_arenas()  # the memory bound's arenas (budget.fixed_bytes), whatever the load
    reasons = reasons if reasons is not None else why_not(variants, workload, env)
    guard = guard or Guard()
    session = uuid.uuid4().hex[:12]
    with _LOCK:
        started = time.perf_counter()
        if workload.device == "cuda":  # measured once per process, under the lock
            env = _roofs(env, [v.runs_on(workload) for v in variants])  # a twin's: fp8 beside its bf16
        subjects = [_Subject(v, Run(variant=v.key, workload=v.runs_on(workload), environment=env, session=session,
                                    estimated_extra_bytes=None if reasons.get(v.key) else call_bytes(v, workload, env)))
                    for v in variants]  # one that cannot run is not priced (its memory model may not hold for it)
        n = len(subjects)
        names = [f"{label} · " if label else "" for label in (labels or [""] * n)]

        def step_progress(i: int, phase: str) -> Progress:
            """Progress of subject i within a phase; the phases follow one another, so it only grows."""
            start, width = PHASES[phase]
            return lambda f, m: progress(start + width * (i + min(f, 1.0)) / n, names[i] + m)

        try:
            for i, s in sorted(enumerate(subjects), key=lambda e: e[1].variant.compiled):
                guard.check()
                _guarded(s, lambda s=s, i=i: _prepare(s, reasons.get(s.variant.key), step_progress(i, "prepare"),
                                                      guard.check))
            going = [s for s in subjects if s.going]
            compiled_before, mark, load_before = _compiled_before(), other_work.mark(), machine_load()
            for s in going:
                s.run.compiled_before = compiled_before
                step_progress(subjects.index(s), "timing")(0.0, f"{s.variant.key}: timing")
            if going and workload.device == "cuda":
                with spent("timing rounds"):
                    before = timing.clocks_under_load()
                    timing.time_gpu(going, guard.check)    # warm, in every mode
                    timing.time_mode(going, guard.check)   # cold or graph: beside the warm figure
                    after = timing.clocks_under_load()
                for s in going:
                    s.run.clocks_before, s.run.clocks_after = before, after
                going = [s for s in going if s.going]  # a capture refused stops here
                if energy and going:
                    progress(PHASES["timing"][0] + PHASES["timing"][1], "energy per call of " + " and ".join(
                        f"{names[subjects.index(s)]}{s.variant.key}" for s in going))
                    with spent("energy"):
                        timing.energy(going, guard.check, guard.left_s)
                for s in subjects:
                    s.graph = None  # the graphs' memory is not the profiled calls'
            elif going:
                with spent("timing rounds"):
                    timing.time_cpu(going, guard.check)
            disturbed, load_after = _overlapped(mark), machine_load()
            for s in going:
                s.run.concurrent_work = disturbed
                s.run.load_before, s.run.load_after = load_before, load_after
            if workload.device == "cuda" and going:
                progress(PHASES["host"][0], "host cost of " + " and ".join(
                    f"{names[subjects.index(s)]}{s.variant.key}" for s in going))
                with spent("host figures"):
                    timing.host_figures(going, guard.check)
            for i, s in enumerate(subjects):
                guard.check()
                _guarded(s, lambda s=s, i=i: _finish(s, trace_dir, step_progress(i, "finish")))
        except Stopped as stop:
            for s in subjects:
                if s.going and not s.finished:
                    s.run.status, s.run.budget_s = STOPPED, stop.budget_s
                    s.run.reason = f"stopped after {text.seconds(time.perf_counter() - started)}: {stop}"
        except torch.OutOfMemoryError as error:  # a late OOM in a shared phase: the figures so far stand
            _free(workload.device)
            for s in subjects:
                if s.going and not s.finished:
                    _out_of_memory(s.run, error)
        wall_s = time.perf_counter() - started
        for s in subjects:
            s.phases, s.inputs, s.graph = [], None, None
            s.run.wall_s = wall_s
        progress(1.0, "done")
        return [s.run for s in subjects]


# -- the call Nsight Compute reads (profiling/counters.py runs it under ncu) -------------------------------------
def counted_call(workload: Workload, key: str) -> str | None:
    """Build `workload`'s inputs and `key`'s call as a session does (`measurement`: the same inputs, the variant's
    setup and pin, no autograd for a forward), call it WARMUP_CALLS times untimed, then once between
    `torch.cuda.profiler.start()` and `stop()`: the call ncu reads. None, or why the variant cannot run here."""
    from attention_variants import VARIANTS

    variant = VARIANTS[key]
    why = why_not([variant], workload, detect(workload.device))[key]
    if why:
        return why
    workload = variant.runs_on(workload)  # an fp8 twin's: its quantised inputs
    x = workload.make_inputs()
    x = x.with_grad() if workload.training else x
    if variant.setup is not None:
        variant.setup(x)
    phases = _phases(variant, x)
    with variant.pin(), (torch.no_grad() if not workload.training else torch.enable_grad()):
        for _ in range(WARMUP_CALLS):
            for phase in phases:
                phase()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for phase in phases:
            phase()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    return None
