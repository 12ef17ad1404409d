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
from torch.profiler import ProfilerActivity, profile, record_function, schedule

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
    threads log nothing. The session is autograd's profiler, the one `torch.profiler.profile` drives: that wrapper's
    first session imports torch._inductor (to read whether inductor's CUDA graphs are on), 3 s of a server's start
    that its first measurement pays instead (`prepare_profiler`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.profiler.profile(use_cpu=True):
            pass


def prepare_profiler() -> None:
    """What `torch.profiler.profile`'s first session imports (torch._inductor's config), imported now: the start-up's
    warm-up calls this where no measurement warms it, so that the first click does not pay it."""
    import torch._inductor.config  # noqa: F401


def profile_calls(fn: Callable[[], None], device: str, calls: int, path: Path) -> None:
    """`calls` calls of `fn` under the profiler, each in its own named range, after one unrecorded warm-up; the
    Chrome trace goes to `path`."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the profiler's own chatter is not the user's business
        with profile(activities=activities, profile_memory=device == "cpu",
                     schedule=schedule(wait=0, warmup=1, active=calls, repeat=1),
                     on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
            for i in range(calls + 1):  # one unrecorded warm-up step, then the active ones
                with record_function(f"{trace_mod.CALL_RANGE}#{i}"):
                    fn()
                sync(device)
                prof.step()


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
