"""What a measurement records beside its timings: a call's peak memory, what autograd saves for the backward,
and the profiled window of a few calls, exported to a named trace file (without a trace_dir, in a per-process
folder that keeps the newest few).
"""
from __future__ import annotations

import itertools
import os
import re
import stat
import time
import warnings
from pathlib import Path
from typing import Callable

import torch
from torch.autograd.profiler import record_function

from attention_variants import Variant

from . import scratch, trace as trace_mod
from .timing import sync
from .workload import Inputs, Workload

KEPT_TRACES = 64              # traces kept in the temporary folder when no trace_dir is given
_trace_counter = itertools.count()
_KEPT_NAME = re.compile(r"\d{6}_\d+_.+\.json")  # a trace trace_path named in the temporary folder


def peak_extra_bytes(call: Callable[[], None], variant: Variant, x: Inputs) -> int | None:
    """A call's peak beyond what was allocated before it (a training step's gradients of the last call freed
    first, as the step itself frees them). On a CPU the profiled window's memory events give it instead."""
    if x.workload.device != "cuda":
        return None
    for t in variant.leaves(x):
        t.grad = None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    call()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def saved_bytes(variant: Variant, x: Inputs) -> int | None:
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
    leaves = {t.untyped_storage().data_ptr() for t in variant.leaves(x)}
    return sum(n for ptr, n in seen.items() if ptr not in leaves)


def start_profiler_here() -> None:
    """Run the profiler's library's one-off start-up on this thread, which must be the one that imported torch.
    Kineto registers its client as torch loads and runs its init callback at the first profiled session; from any
    other thread (the app's live-measurement thread) that callback logs "ERROR: External init callback must run in
    same thread as registerClient". One empty CPU session here runs it where it belongs; later sessions on other
    threads log nothing."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.profiler.profile(use_cpu=True):
            pass


def profile_calls(fn: Callable[[], None], device: str, calls: int, path: Path,
                  before: Callable[[], None] | None = None) -> None:
    """`calls` calls of `fn` under the profiler, each in its own named range (`before` run ahead of each, outside
    it: a context-parallel rank's barrier), after one unrecorded warm-up call with the profiler already on (what
    `torch.profiler.schedule(warmup=1)` does: the warm-up absorbs its start-up); the Chrome trace goes to `path`.

    The session is autograd's profiler, driven as `torch.profiler.profile` drives it (prepare, warm-up step, start,
    stop, export). That wrapper's first session in a process imports torch._inductor (`hasattr(torch, "_inductor")`
    in its prepare step, on purpose since pytorch/pytorch#155243: inductor's lazy start-up, where a workload would
    trigger it, then runs before the trace instead of inside it; it also reads whether inductor's CUDA graphs are
    on): 1 s on this 2-core machine, 3-4 s on the H200's host, paid by a process's first measurement (a server's first
    click, the command line's only one). Here every profiled call has run before its window (the first call, the
    warm-up calls, the window's own unrecorded one), flex's compile, which imports inductor, among them: nothing is
    left to start inside the trace."""
    def one(i: int) -> None:
        if before is not None:
            before()
        with record_function(f"{trace_mod.CALL_RANGE}#{i}"):
            fn()
        sync(device)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the profiler's own chatter is not the user's business
        session = torch.autograd.profiler.profile(use_cpu=True, use_device="cuda" if device == "cuda" else None,
                                                  profile_memory=device == "cpu", use_kineto=True)
        session._prepare_trace()  # on, recording nothing yet: torch.profiler's warm-up step
        started = False
        try:
            one(0)
            session._start_trace()
            started = True
            for i in range(1, calls + 1):
                one(i)
        finally:
            if not started:  # as torch.profiler does after a failed warm-up step: started, so that it stops
                session._start_trace()
            session.__exit__(None, None, None)
    session.export_chrome_trace(str(path))


def trace_path(key: str, w: Workload, trace_dir: str | Path | None) -> Path:
    """A named trace file; without a trace_dir, in a per-process folder that keeps the newest few."""
    name = f"{key}_{w.tag()}"
    if trace_dir:
        directory = Path(trace_dir)
    else:  # a long-running app must not fill the disk with traces nobody downloads
        directory = scratch.process_folder()
        name = f"{time.strftime('%H%M%S')}_{next(_trace_counter)}_{name}"
        _prune(directory, KEPT_TRACES)
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"{name}.json"


def _prune(directory: Path, keep: int) -> None:
    """Remove all but the newest `keep` traces trace_path named in `directory`. Only regular files named as it names
    them, read with lstat: a link is never followed nor removed (it is not the app's), and an entry that vanished
    or cannot be read or removed meanwhile is skipped (one of them made every later live run fail)."""
    try:
        entries = list(os.scandir(directory))
    except OSError:  # removed meanwhile
        return
    aged = []
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if _KEPT_NAME.fullmatch(entry.name) and stat.S_ISREG(info.st_mode):
            aged.append((info.st_mtime, entry.path))
    for _, path in sorted(aged)[:-keep]:
        try:
            os.unlink(path)
        except OSError:
            continue
