"""Measure variants on one workload: warm-up, timing, host cost, memory, accuracy, a profiled window.

Returns `Run`s (plain data). Nothing here explains, formats or draws.

Everything that times or profiles holds one process-wide lock: two profiler sessions at once
crash libtorch, and two timings at once contaminate each other, whoever calls.
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
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from attention_variants import Variant, get_variant

from . import trace as trace_mod
from .dispatch import clean_warning, refusals
from .environment import Environment, detect
from .results import Accuracy, Comparison, Run, Timing
from .workload import (REFERENCE_CHUNK_BYTES, Inputs, Workload, WorkloadError, accuracy_rows, check_fits,
                       check_time_budget, compile_estimate_s, forward_bytes, measure_bytes, memory_budget_bytes,
                       note_compile_s)

Progress = Callable[[float, str], None]
WARMUP_CALLS = 3              # as in the blog
PROFILED_FORWARDS = 3         # the blog's "active 3"
TIMING_BUDGET_S = 0.06        # GPU, per variant: CUDA events are steady, this gives a stable median
MIN_SAMPLES, MAX_SAMPLES = 8, 50  # 8: the fewest the verdict's range test ranks (explain/verdict.py)
GROUP_S, GROUP_MAX = 200e-6, 64  # forwards shorter than 200 µs are timed in groups of up to 64
CPU_TIMING_BUDGET_S = 1.0     # CPU, per comparison: more samples while the spread is wide, up to this
CPU_MAX_SAMPLES = 200
CPU_MIN_ROUNDS = 20           # the fewest the verdict's quartile test ranks
SETTLED_SPREAD = 0.10         # a CPU timing has settled when its quartiles are within 10% of its median
HOST_FIGURES_BUDGET_S = 0.02  # back-to-back and host cost: this long each, 20 to 300 calls
HOST_COST_CALLS = (20, 300)
QUEUE_LAUNCHES = 512          # launches queued behind the parked GPU, well under CUDA's queue depth
LONG_CALL_S = 1e-3           # a forward this long is GPU-bound beyond doubt: fewer probe and settle calls
                             # (workload._LONG_TIMED_CALLS prices what it takes)
HOST_CALL_MAX_S = 5e-4        # no variant here takes the host longer than this to issue (math: ~0.16 ms)
HOST_BOUND = 1.10             # back-to-back per call over GPU time by more than this: the host sets the pace
PIN_CALLS = 200
HOST_ROUNDS = 4
KEPT_TRACES = 64              # traces kept in the temporary folder when no trace_dir is given
_trace_counter = itertools.count()
PHASES = {"prepare": (0.0, 0.2), "timing": (0.2, 0.2), "finish": (0.4, 0.5)}  # then host figures at 0.9  # (start, width) of progress
_LOCK = threading.RLock()     # one measurement at a time in this process, whatever calls it


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


def _note_compile(variant: Variant, workload: Workload, first_call_s: float, warm_call_s: float) -> None:
    """After a compiled variant's first call: its workload is compiled, and a first call that compiled (much
    slower than a warm one) is what `workload.compile_estimate_s` gives from now on."""
    _compiled.add((variant.key, workload))
    calls, extra_s = COMPILED_FIRST_CALL
    if first_call_s > calls * warm_call_s + extra_s:
        note_compile_s(workload.device, first_call_s)


class Stopped(Exception):
    """The time budget ran out; what was measured so far is kept."""


def _no_progress(fraction: float, message: str) -> None:
    pass


# -- the workload's shared state: inputs, fp64 reference, naive baseline --------------------
class _WorkloadCache:
    """Inputs and references of the last workload, so A and B see the same tensors and mask."""

    def __init__(self):
        self.workload: Workload | None = None
        self.inputs: Inputs | None = None
        self.reference: torch.Tensor | None = None
        self.naive_error: float | None = None

    def get(self, workload: Workload) -> "_WorkloadCache":
        if workload != self.workload:
            self.clear()
            self.inputs = workload.make_inputs()
            self.workload = workload
        return self

    def clear(self) -> None:
        self.workload = self.inputs = self.reference = None
        self.naive_error = None


_cache = _WorkloadCache()


def _checked_rows(seq_len: int) -> torch.Tensor | None:
    """The query rows the fp64 accuracy check compares (`accuracy_rows` of them): every row (None) while a
    row-block of fp64 scores fits REFERENCE_CHUNK_BYTES, else a seeded sample that always includes the first
    and last rows (the one that sees one key, the one that sees them all)."""
    rows = accuracy_rows(seq_len)
    if rows >= seq_len:
        return None
    generator = torch.Generator().manual_seed(0)
    sample = torch.randperm(seq_len - 2, generator=generator)[:rows - 2] + 1
    return torch.cat([torch.tensor([0, seq_len - 1]), sample]).sort().values


def _chunked_attention(x: Inputs, dtype: torch.dtype, rows: torch.Tensor | None) -> torch.Tensor:
    """Plain attention in `dtype` for the query `rows` (all when None), over slices of the leading dim so
    the scores in flight stay near REFERENCE_CHUNK_BYTES whatever S is. Returns [B*H, rows, D]."""
    q, k, v = (t.reshape(-1, *t.shape[-2:]) for t in (x.q, x.k, x.v))  # [B*H, S, D]
    mask = x.mask
    if rows is not None:
        rows = rows.to(q.device)
        q = q[:, rows]                                                # [B*H, R, D]
        mask = mask[rows] if mask is not None else None               # [R, S]
    per_slice = q.shape[1] * k.shape[1] * torch.finfo(dtype).bits // 8
    step = max(1, REFERENCE_CHUNK_BYTES // per_slice)
    out = torch.empty(q.shape, dtype=dtype, device=q.device)
    for i in range(0, q.shape[0], step):
        qs, ks, vs = (t[i:i + step].to(dtype) for t in (q, k, v))
        scores = (qs @ ks.transpose(-2, -1)) * x.scale          # [chunk, R, S]
        if mask is not None:
            scores.masked_fill_(mask, float("-inf"))
        out[i:i + step] = torch.softmax(scores, dim=-1) @ vs
    return out


def _accuracy(out: torch.Tensor, state: _WorkloadCache) -> Accuracy:
    x = state.inputs
    rows = _checked_rows(x.workload.seq_len)
    if state.reference is None:
        state.reference = _chunked_attention(x, torch.float64, rows)
        naive = _chunked_attention(x, x.q.dtype, rows)  # the same plain computation in the inputs' dtype
        state.naive_error = (naive.double() - state.reference).abs().max().item()
    ref = state.reference
    out = out.reshape(-1, *out.shape[-2:])
    diff = (out if rows is None else out[:, rows.to(out.device)]).double() - ref
    return Accuracy(max_abs_error=diff.abs().max().item(),
                    relative_error=(diff.norm() / ref.norm()).item(),
                    naive_max_abs_error=state.naive_error,
                    rows_checked=None if rows is None else len(rows))


# -- timing ---------------------------------------------------------------------------------
def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _park_gpu(seconds: float) -> None:
    """Queue a spin on the GPU so the host runs ahead of it: what follows is timed without host gaps."""
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(int(min(seconds, 1.0) * 2e9))  # ~2 GHz: a little longer on slower clocks


def _time_gpu(call: Callable[[], torch.Tensor], estimate_s: float) -> Timing:
    """CUDA events around groups of forwards, every forward queued behind a parked GPU, so the events time
    the GPU's work alone and not the gaps a slow host would leave between launches. A forward of a few
    microseconds is timed in groups of calls (each sample is a group's mean): an event pair costs about
    as much as such a kernel and would otherwise be most of what it measures."""
    probe_start, probe_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    probes = 10 if estimate_s < LONG_CALL_S else 2  # a forward of a millisecond or more: two tell its length
    torch.cuda.synchronize()
    _park_gpu(0.002 + probes * min(estimate_s, HOST_CALL_MAX_S))
    probe_start.record()
    for _ in range(probes):
        call()
    probe_end.record()
    torch.cuda.synchronize()
    per_call_s = max(probe_start.elapsed_time(probe_end) / probes / 1000.0, 1e-7)
    group = int(min(GROUP_MAX, max(1, GROUP_S // per_call_s)))
    samples = int(min(MAX_SAMPLES, max(MIN_SAMPLES, TIMING_BUDGET_S / (group * per_call_s))))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    for start, end in zip(starts, ends):
        # each sample queued behind its own short park: never more launches in flight than one group's, far
        # under CUDA's queue depth (a full queue makes the host wait, and the GPU then waits on the host)
        torch.cuda.synchronize()
        _park_gpu(1.5 * group * min(estimate_s, HOST_CALL_MAX_S) + 20e-6)
        start.record()
        for _ in range(group):
            call()
        end.record()
    torch.cuda.synchronize()
    method = "cuda events" if group == 1 else f"cuda events per {group} calls"
    return Timing.of([s.elapsed_time(e) / group for s, e in zip(starts, ends)], method)


def _settled(times: list[list[float]]) -> bool:
    """Every timing's quartiles are tight. (Never "already apart": stopping as soon as two samples look
    different would make noise look like a result.)"""
    stats = [Timing.of(t, "") for t in times]
    return all(s.p75_ms - s.p25_ms <= SETTLED_SPREAD * s.median_ms for s in stats)


def _time_cpu(subjects: list["_Subject"], deadline: float | None) -> None:
    """Wall time per forward on the CPU, A and B interleaved call by call (so a burst of load hits both),
    with more rounds while the spread is wide, up to CPU_TIMING_BUDGET_S."""
    times: list[list[float]] = [[] for _ in subjects]
    until = time.perf_counter() + CPU_TIMING_BUDGET_S
    for rounds in itertools.count(1):
        for subject, samples in zip(subjects, times):
            with subject.variant.pin():  # entered outside the timed call
                t0 = time.perf_counter()
                subject.call()
                samples.append((time.perf_counter() - t0) * 1000.0)
        if rounds < CPU_MIN_ROUNDS:
            continue
        now = time.perf_counter()
        if now > until or rounds >= CPU_MAX_SAMPLES or _settled(times) or (deadline and now > deadline):
            break
    for subject, samples in zip(subjects, times):
        subject.run.timing = Timing.of(samples, "perf_counter")


def _calls(per_call_s: float, wanted: float) -> int:
    """How many calls a host figure takes: what the budget allows, within HOST_COST_CALLS; a call of a
    millisecond or more is GPU-bound beyond doubt, and a few of them settle it."""
    least = HOST_COST_CALLS[0] if per_call_s < LONG_CALL_S else 8
    return int(min(HOST_COST_CALLS[1], max(least, wanted)))


def _host_plan(run: Run) -> tuple[int, int, float]:
    """(back-to-back calls, host-cost calls, a generous guess of one call's host time in seconds)."""
    gpu_s = run.timing.median_ms / 1000.0
    host_guess_s = (run.profiled_host_ms or 0.1) / 1000.0  # the profiled range: an upper bound
    per_call_s = max(gpu_s, host_guess_s)
    kernels = max(1.0, run.kernels_per_forward or 1.0)
    loop = _calls(per_call_s, HOST_FIGURES_BUDGET_S / per_call_s)
    calls = _calls(per_call_s, min(QUEUE_LAUNCHES / kernels, HOST_FIGURES_BUDGET_S / per_call_s))
    return loop, calls, host_guess_s


def _host_figures(subjects: list["_Subject"]) -> None:
    """Back-to-back time per call (a plain loop: what a model sees), host cost per call (each call timed
    while the GPU is parked, so the host never waits on it), and which side sets the back-to-back pace.
    Taken in HOST_ROUNDS rounds that alternate between the variants, so a drift in the host's speed
    (seen on the H200: one variant's median moving from 17 to 26 µs between two moments) hits all alike."""
    plans = {id(s): _host_plan(s.run) for s in subjects}
    loop_s = {id(s): 0.0 for s in subjects}
    loops = {id(s): 0 for s in subjects}
    host_ms: dict[int, list[float]] = {id(s): [] for s in subjects}
    for _ in range(HOST_ROUNDS):
        for s in subjects:
            loop, calls, host_guess_s = plans[id(s)]
            loop, calls = max(2, loop // HOST_ROUNDS), max(2, calls // HOST_ROUNDS)
            with s.variant.pin():  # entered outside every timed call
                # settle after whatever ran before (another variant, a profiler teardown): a long call settles in one
                for _ in range(3 if s.run.timing.median_ms < LONG_CALL_S * 1000 else 1):
                    s.call()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(loop):
                    s.call()
                torch.cuda.synchronize()
                loop_s[id(s)] += time.perf_counter() - t0
                loops[id(s)] += loop
                _park_gpu(1.5 * calls * host_guess_s + 0.002)
                for _ in range(calls):
                    t0 = time.perf_counter()
                    s.call()
                    host_ms[id(s)].append((time.perf_counter() - t0) * 1000.0)
                torch.cuda.synchronize()
    for s in subjects:
        run = s.run
        run.back_to_back_ms = loop_s[id(s)] * 1000.0 / loops[id(s)]
        run.bound = "host" if run.back_to_back_ms > HOST_BOUND * run.timing.median_ms else "gpu"
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


def _peak_extra_bytes(fn: Callable[[], torch.Tensor], device: str) -> int | None:
    if device != "cuda":
        return None  # on CPU the profiled window's memory events give it
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def _profile(fn: Callable[[], torch.Tensor], device: str, forwards: int, trace_path: Path) -> None:
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the profiler's own chatter is not the user's business
        with profile(activities=activities, profile_memory=device == "cpu",
                     schedule=schedule(wait=0, warmup=1, active=forwards, repeat=1),
                     on_trace_ready=lambda p: p.export_chrome_trace(str(trace_path))) as prof:
            for i in range(forwards + 1):  # one unrecorded warm-up step, then the active ones
                with record_function(f"{trace_mod.FORWARD_RANGE}#{i}"):
                    fn()
                _sync(device)
                prof.step()


def _trace_path(key: str, w: Workload, trace_dir: str | Path | None) -> Path:
    """A named trace file; without a trace_dir, in a per-process folder that keeps the newest few."""
    name = f"{key}_B{w.batch}H{w.heads}S{w.seq_len}D{w.head_dim}_{w.dtype}_{'causal' if w.causal else 'full'}_r{w.rank}"
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
def _is_no_kernel(error: Exception) -> bool:
    text = str(error)
    return "No available kernel" in text or "Rejected backends" in text


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


@dataclass
class _Subject:
    """One variant on its way through a measurement."""
    variant: Variant
    run: Run
    call: Callable[[], torch.Tensor] | None = None
    out: torch.Tensor | None = None
    estimate_s: float = 0.0
    trace_path: Path | None = None

    @property
    def going(self) -> bool:
        return self.run.status == "ok"


def _prepare(subject: _Subject, progress: Progress, budget_s: float | None = None, first: bool = True) -> None:
    """Refuse what cannot run or fit (or, given the request's budget left, what would take longer: refused when
    it is the `first` variant, else stopped before it starts), then the first call (PyTorch's refusals,
    compilation) and warm-up."""
    variant, run = subject.variant, subject.run
    workload, env = run.workload, run.environment
    reason = variant.supports(workload, env)
    if reason:
        run.status, run.reason = "unsupported", reason
        return
    ready = _cache.workload == workload  # inputs made; the fp64 reference too once a variant got that far
    reference_ready = ready and _cache.reference is not None
    needed = measure_bytes(workload, variant.scratch_bytes(workload), inputs_ready=ready,
                           reference_ready=reference_ready)
    check_fits(workload, needed, memory_budget_bytes(workload.device), f"{variant.key} at {workload.label()}")
    if budget_s is not None:
        try:
            check_time_budget(workload, [variant], reference_ready=reference_ready, budget_s=budget_s)
        except WorkloadError as error:
            if first:  # nothing measured yet: the request is refused before anything runs
                raise
            run.status, run.reason = "stopped", f"not started: {error.limit}"  # keeps what was measured
            return
    device = workload.device
    run.compiled_before = _compiled_before()
    inputs = _cache.get(workload).inputs
    subject.call = lambda: variant.forward(inputs)
    if variant.compiled and (variant.key, workload) not in _compiled:
        seconds, basis = compile_estimate_s(device)
        progress(0.0, f"{variant.key}: compiling (first call; estimated ~{seconds:.0f} s, {basis})")
    else:
        progress(0.0, f"{variant.key}: warm-up" + (" (compiled before in this process)" if variant.compiled else ""))
    with variant.pin():
        t0 = time.perf_counter()
        subject.out, run.pytorch_warnings, error = _first_call(subject.call)
        _sync(device)
        run.first_call_ms = (time.perf_counter() - t0) * 1000.0
        if error is not None:
            run.status = "unsupported" if _is_no_kernel(error) else "error"
            run.reason = _refusal_reason(run.pytorch_warnings, error)
            return
        t0 = time.perf_counter()
        for _ in range(WARMUP_CALLS - 1):
            subject.call()
        _sync(device)
    subject.estimate_s = (time.perf_counter() - t0) / max(1, WARMUP_CALLS - 1)
    if variant.compiled:
        _note_compile(variant, workload, run.first_call_ms / 1000.0, subject.estimate_s)


def _finish(subject: _Subject, trace_dir: str | Path | None, progress: Progress) -> None:
    """Memory, accuracy, the profiled window and, on a GPU, the host figures; then the trace's tables."""
    variant, run, call = subject.variant, subject.run, subject.call
    workload, device = run.workload, run.workload.device
    with variant.pin():  # entered once around every loop: the pin is not part of a call
        run.peak_extra_bytes = _peak_extra_bytes(call, device)
        run.accuracy = _accuracy(subject.out, _cache.get(workload))
        subject.out = None
        progress(0.1, f"{variant.key}: profiling")
        subject.trace_path = _trace_path(variant.key, workload, trace_dir)
        _profile(call, device, PROFILED_FORWARDS, subject.trace_path)
        summary = trace_mod.summarize_trace(trace_mod.load_trace(subject.trace_path))
        run.trace_path = str(subject.trace_path)
        run.profiled_forwards = summary.forwards
        run.kernels, run.host_ops, run.backend = summary.kernels, summary.host_ops, summary.backend
        run.profiled_host_ms = summary.profiled_host_ms
        if device == "cuda":
            run.kernels_per_forward = summary.kernels_per_forward
        else:
            run.peak_extra_bytes = summary.cpu_peak_extra_bytes
    run.pin_cost_ms = _pin_cost_ms(variant)
    run.tflops = workload.flops / (run.timing.median_ms * 1e-3) / 1e12
    peak = (run.environment.peak_tflops or {}).get(workload.dtype)
    run.peak_share = run.tflops / peak if peak else None
    progress(1.0, f"{variant.key}: done")


def _guarded(subject: _Subject, step: Callable[[], None]) -> None:
    """Run one step of a subject; an out-of-memory error becomes its result, and frees what it can."""
    if not subject.going:
        return
    try:
        step()
    except torch.OutOfMemoryError as error:
        _free(subject.run.workload.device)
        subject.out = None
        subject.run.status = "error"
        subject.run.reason = f"out of memory on {subject.run.environment.device_name}: {str(error).splitlines()[0]}"


def measure_runs(variants: list[Variant], workload: Workload, *, env: Environment | None = None,
                 trace_dir: str | Path | None = None, progress: Progress = _no_progress,
                 budget_s: float | None = None, labels: list[str] | None = None) -> list[Run]:
    """Measure `variants` on the same inputs, one after another (their CPU timings interleaved), under
    the process-wide lock. Bad input raises WorkloadError before anything is allocated; a variant that
    cannot run comes back with status 'unsupported' and the reason; past `budget_s` seconds the variants
    not yet done come back with status 'stopped'."""
    if workload.device == "cuda" and not torch.cuda.is_available():
        raise WorkloadError("device", "cuda", "no CUDA GPU is visible to this process")
    env = env or detect(workload.device)
    with _LOCK:
        started = time.perf_counter()
        deadline = started + budget_s if budget_s else None
        subjects = [_Subject(v, Run(variant=v.key, workload=workload, environment=env,
                                    estimated_extra_bytes=forward_bytes(workload, v.scratch_bytes(workload))))
                    for v in variants]
        n = len(subjects)
        names = [f"{label} · " if label else "" for label in (labels or [""] * n)]

        def step_progress(i: int, phase: str):
            """Progress of subject i within a phase; the phases follow one another, so it only grows."""
            start, width = PHASES[phase]
            return lambda f, m: progress(start + width * (i + min(f, 1.0)) / n, names[i] + m)

        def check_time() -> None:
            if deadline and time.perf_counter() > deadline:
                for s in subjects:
                    if s.going and s.run.profiled_forwards == 0:  # not finished yet
                        s.run.status = "stopped"
                        s.run.reason = (f"stopped after {time.perf_counter() - started:.1f} s: over this "
                                        f"request's time budget of {budget_s:.0f} s")

        for i, s in enumerate(subjects):
            left_s = deadline - time.perf_counter() if deadline else None
            if left_s is None or left_s > 0:
                _guarded(s, lambda s=s, i=i: _prepare(s, step_progress(i, "prepare"), left_s, first=i == 0))
            check_time()
        going = [s for s in subjects if s.going]
        mark = other_work.mark()
        for s in going:
            step_progress(subjects.index(s), "timing")(0.0, f"{s.variant.key}: timing")
        if workload.device == "cuda":
            for s in going:
                def time_one(s=s):
                    with s.variant.pin():
                        s.run.timing = _time_gpu(s.call, s.estimate_s)
                _guarded(s, time_one)
        elif going:
            _time_cpu(going, deadline)
        disturbed = _overlapped(mark)
        for s in going:
            s.run.concurrent_work = disturbed
        check_time()
        for i, s in enumerate(subjects):
            _guarded(s, lambda s=s, i=i: _finish(s, trace_dir, step_progress(i, "finish")))
            check_time()
        going = [s for s in subjects if s.going]
        if workload.device == "cuda" and going:
            progress(0.9, "host cost of " + " and ".join(f"{names[subjects.index(s)]}{s.variant.key}" for s in going))
            try:
                _host_figures(going)
            except torch.OutOfMemoryError:  # a late OOM: the figures so far stand, the host ones are left out
                _free(workload.device)
        for s in subjects:
            s.out = None
        progress(1.0, "done")
        return [s.run for s in subjects]


def measure(variant: str | Variant, workload: Workload, *, env: Environment | None = None,
            trace_dir: str | Path | None = None, progress: Progress = _no_progress,
            budget_s: float | None = None) -> Run:
    """Measure one variant (see `measure_runs`)."""
    variant = variant if isinstance(variant, Variant) else get_variant(variant)
    return measure_runs([variant], workload, env=env, trace_dir=trace_dir, progress=progress, budget_s=budget_s)[0]


def compare(a: str, b: str, workload: Workload, *, trace_dir: str | Path | None = None,
            progress: Progress = _no_progress, budget_s: float | None = None) -> Comparison:
    """Measure A and B on the same inputs (never overlapping anything else). Unexplained:
    `profiling.explain.explain` adds the verdict and notes, for live and recorded runs alike."""
    variants = [get_variant(a), get_variant(b)]  # unknown keys fail here, before any work
    runs = measure_runs(variants, workload, trace_dir=trace_dir, budget_s=budget_s, progress=progress,
                        labels=["A", "B"])
    return Comparison(*runs)
