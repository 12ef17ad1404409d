"""What a process's first live request pays once, paid before it: the CUDA context and the copy ceiling, each
library's handles and the modules of its kernels (a tiny call of every backend that can run here, a forward and a
training step), the profiler's first session (CUPTI's start) and the trace reader; then the compilers' first run
(FlexAttention's torch.compile, FlashAttention-4's JIT). Each step is one `session.measure` of a tiny workload in
the blog's dtype, head size and mask (the kernels a first request most likely runs): the code a request runs, so
nothing is warmed that a request would not use, and the runs are thrown away.

The server (handlers.start_warm_up) runs the steps in order on the measurement thread, where every live measurement
runs, the first chosen before the rest (`first_steps`); a live request that arrives meanwhile waits for the step in
progress, and the steps not started are dropped.
"""
from __future__ import annotations

from typing import Callable

from attention_variants import VARIANTS, reasons as why_not

from .environment import detect
from .workload import Workload

TINY = {"batch": 1, "heads": 2, "seq_len": 128}  # on the blog's workload: its dtype, head size and causal flag


def tiny(device: str, **changes) -> Workload:
    return Workload.blog(**TINY, device=device, **changes)


def _first_name(device: str) -> str:
    return "CUDA, libraries, profiler" if device == "cuda" else "libraries, profiler"


def first_steps(device: str) -> list[tuple[str, Callable[[], None]]]:
    """The first of `steps`, decided by asking the page's default pair alone whether it runs here: asking every
    variant imports their libraries (flash_attn.cute: ~2 s), which a live click soon after the start would wait for
    before the step every live request needs first. Nothing where neither runs here (`steps` then picks another)."""
    from . import session
    from .request import DEFAULT_A, DEFAULT_B

    w = tiny(device)
    can = why_not([VARIANTS[DEFAULT_A], VARIANTS[DEFAULT_B]], w, detect(device))
    first = [k for k, reason in can.items() if reason is None]
    return [(_first_name(device), lambda: session.measure(w, first))] if first else []


def steps(device: str, keys: list[str] | None = None) -> list[tuple[str, Callable[[], None]]]:
    """The warm-up's steps on `device`, in order, each (name, call), each as short as it can be: a live request that
    arrives waits for the step in progress only. First the page's default pair (its forward pays CUDA, the profiler's
    first session and the trace reader), then every other variant of `keys` (all by default) that runs here, each
    alone: the forwards, then the training steps where they take one (variants of packed documents after the rest),
    then each compiling one alone (the longest steps, last)."""
    from . import session
    from .request import DEFAULT_A, DEFAULT_B

    w = tiny(device)
    env = detect(device)
    can = why_not([VARIANTS[k] for k in keys or VARIANTS], w, env)
    runnable = sorted((VARIANTS[k] for k, reason in can.items() if reason is None),
                      key=lambda v: (v.key not in (DEFAULT_A, DEFAULT_B), v.packed_only))
    plain = [v.key for v in runnable if not (v.compiled or v.jit_s)]
    step = tiny(device, passes="fwd+bwd")
    trainable = [k for k, reason in why_not([VARIANTS[k] for k in plain], step, env).items() if reason is None]
    first = [k for k in plain if k in (DEFAULT_A, DEFAULT_B)] or plain[:1]
    found = []
    if first:
        found.append((_first_name(device), lambda: session.measure(w, first)))
    found += [(key, lambda key=key: session.measure(w, [key])) for key in plain if key not in first]
    found += [(f"{key}: a training step", lambda key=key: session.measure(step, [key])) for key in trainable]
    for v in runnable:
        if v.compiled or v.jit_s:
            name = f"{v.key}: {'compile' if v.compiled else 'JIT'}"
            found.append((name, lambda key=v.key: session.measure(w, [key])))
    return found
