"""Measure one variant on one workload: warm-up, timing, memory, accuracy, a profiled window.

Returns a `Run` (plain data). Nothing here formats or draws.
"""
from __future__ import annotations

import itertools
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from attention_variants import Variant, get_variant
from attention_variants.naive import naive_inplace_attention

from . import trace as trace_mod
from .dispatch import clean_warning, refusals
from .environment import Environment, detect
from .results import Accuracy, Comparison, Run, Timing
from .workload import (Inputs, Workload, WorkloadError, check_fits, check_time_budget, forward_bytes,
                       measure_bytes, memory_budget_bytes)

Progress = Callable[[float, str], None]
WARMUP_CALLS = 3              # as in the blog
PROFILED_FORWARDS = 3         # the blog's "active 3"
TIMING_BUDGET_S = 0.06        # per variant: enough samples for a stable median, fast enough to stay interactive
MIN_SAMPLES, MAX_SAMPLES = 5, 50
_REFERENCE_CHUNK_BYTES = 256 * 2**20
KEPT_TRACES = 64              # traces kept in the temporary folder when no trace_dir is given
_trace_counter = itertools.count()


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


def _chunked_attention(x: Inputs, dtype: torch.dtype) -> torch.Tensor:
    """Plain attention in `dtype`, over slices of the leading dim so the S×S scores stay small."""
    q, k, v = x.q, x.k, x.v
    flat = q.dim() == 3
    if not flat:  # [B, H, S, D] -> [B*H, S, D]
        q, k, v = (t.reshape(-1, *t.shape[-2:]) for t in (q, k, v))
    per_slice = x.workload.seq_len ** 2 * torch.finfo(dtype).bits // 8
    step = max(1, _REFERENCE_CHUNK_BYTES // per_slice)
    out = torch.empty(q.shape, dtype=dtype, device=q.device)
    mask = x.mask
    for i in range(0, q.shape[0], step):
        qs, ks, vs = (t[i:i + step].to(dtype) for t in (q, k, v))
        scores = (qs @ ks.transpose(-2, -1)) * x.scale          # [chunk, S, S]
        if mask is not None:
            scores.masked_fill_(mask, float("-inf"))
        out[i:i + step] = torch.softmax(scores, dim=-1) @ vs
    return out if flat else out.reshape(x.q.shape)


def _accuracy(out: torch.Tensor, state: _WorkloadCache) -> Accuracy:
    x = state.inputs
    if state.reference is None:
        state.reference = _chunked_attention(x, torch.float64)
        naive = naive_inplace_attention(x) if x.workload.dtype == "fp32" else _chunked_attention(x, x.q.dtype)
        state.naive_error = (naive.double() - state.reference).abs().max().item()
    ref = state.reference
    diff = out.double() - ref
    return Accuracy(max_abs_error=diff.abs().max().item(),
                    relative_error=(diff.norm() / ref.norm()).item(),
                    naive_max_abs_error=state.naive_error)


# -- timing -----------------------------------------------------------------------------------
def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _time_forward(fn: Callable[[], torch.Tensor], device: str, estimate_s: float) -> Timing:
    budget_s = TIMING_BUDGET_S if device == "cuda" else 4 * TIMING_BUDGET_S  # a CPU's samples spread wider
    samples = int(min(MAX_SAMPLES, max(MIN_SAMPLES, budget_s / max(estimate_s, 1e-6))))
    if device == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
        torch.cuda.synchronize()
        # Keep the GPU busy while the host queues every forward, so the events time the GPU's
        # work alone and not the gaps a slow host would leave between launches.
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(int(min(0.05, samples * estimate_s) * 2e9))
        for start, end in zip(starts, ends):
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        times_ms = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        method = "cuda events"
    else:
        times_ms = []
        for _ in range(samples):
            t0 = time.perf_counter()
            fn()
            times_ms.append((time.perf_counter() - t0) * 1000.0)
        method = "perf_counter"
    return Timing(median_ms=statistics.median(times_ms), min_ms=min(times_ms), max_ms=max(times_ms),
                  samples=samples, method=method)


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


def measure(variant: str | Variant, workload: Workload, *, env: Environment | None = None,
            trace_dir: str | Path | None = None, progress: Progress = _no_progress) -> Run:
    """Measure one variant. Bad input raises WorkloadError before anything is allocated;
    a variant that cannot run here comes back as a Run with status 'unsupported' and the reason."""
    variant = variant if isinstance(variant, Variant) else get_variant(variant)
    if workload.device == "cuda" and not torch.cuda.is_available():
        raise WorkloadError("device", "cuda", "no CUDA GPU is visible to this process")
    env = env or detect(workload.device)
    estimate = forward_bytes(workload, variant.scratch_bytes(workload))
    run = Run(variant=variant.key, workload=workload, environment=env, estimated_extra_bytes=estimate)
    reason = variant.supports(workload, env)
    if reason:
        run.status, run.reason = "unsupported", reason
        return run
    ready = _cache.workload == workload  # inputs made; the fp64 reference too once a variant got that far
    needed = measure_bytes(workload, variant.scratch_bytes(workload), inputs_ready=ready,
                           reference_ready=ready and _cache.reference is not None,
                           reference_chunk_bytes=_REFERENCE_CHUNK_BYTES)
    check_fits(workload, needed, memory_budget_bytes(workload.device), f"{variant.key} at {workload.label()}")
    check_time_budget(workload, [variant], reference_ready=ready and _cache.reference is not None)
    device = workload.device
    try:
        with variant.pin():  # entered once around every loop: the pin is not part of a call
            state = _cache.get(workload)
            call = lambda: variant.forward(state.inputs)  # noqa: E731

            progress(0.0, f"{variant.key}: warm-up" + (" (compiling)" if variant.key == "flex" else ""))
            t0 = time.perf_counter()
            out, run.pytorch_warnings, error = _first_call(call)
            _sync(device)
            run.first_call_ms = (time.perf_counter() - t0) * 1000.0
            if error is not None:
                run.status = "unsupported" if _is_no_kernel(error) else "error"
                run.reason = _refusal_reason(run.pytorch_warnings, error)
                return run
            t0 = time.perf_counter()
            for _ in range(WARMUP_CALLS - 1):
                call()
            _sync(device)
            estimate_s = (time.perf_counter() - t0) / max(1, WARMUP_CALLS - 1)

            progress(0.3, f"{variant.key}: timing")
            run.timing = _time_forward(call, device, estimate_s)
            run.peak_extra_bytes = _peak_extra_bytes(call, device)
            run.accuracy = _accuracy(out, state)

            progress(0.6, f"{variant.key}: profiling")
            trace_path = _trace_path(variant.key, workload, trace_dir)
            _profile(call, device, PROFILED_FORWARDS, trace_path)
    except torch.OutOfMemoryError as error:
        _free(device)
        run.status = "error"
        run.reason = f"out of memory on {env.device_name}: {str(error).splitlines()[0]}"
        return run

    summary = trace_mod.summarize_trace(trace_mod.load_trace(trace_path))
    run.trace_path = str(trace_path)
    run.profiled_forwards = summary.forwards
    run.kernels, run.host_ops, run.backend = summary.kernels, summary.host_ops, summary.backend
    run.profiled_host_ms = summary.profiled_host_ms
    if device == "cuda":
        run.kernels_per_forward = summary.kernels_per_forward
    else:
        run.peak_extra_bytes = summary.cpu_peak_extra_bytes
    run.tflops = workload.flops / (run.timing.median_ms * 1e-3) / 1e12
    peak = (env.peak_tflops or {}).get(workload.dtype)
    run.peak_share = run.tflops / peak if peak else None
    progress(1.0, f"{variant.key}: done")
    return run


def compare(a: str, b: str, workload: Workload, *, trace_dir: str | Path | None = None,
            progress: Progress = _no_progress) -> Comparison:
    """Measure A then B on the same inputs (never overlapping), then explain both."""
    from .explanation import explain  # the explainer reads runs; it never measures

    variants = get_variant(a), get_variant(b)  # unknown keys fail here, before any work
    runs = []
    for i, variant in enumerate(variants):
        side = "AB"[i]
        runs.append(measure(variant, workload, trace_dir=trace_dir,
                            progress=lambda f, m, i=i, side=side: progress((i + f) / 2, f"{side} · {m}")))
    return explain(Comparison(*runs))
