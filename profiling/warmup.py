"""What a process's first live request pays once, paid before it: the CUDA context and the copy ceiling, each
library's handles and the modules of its kernels (a tiny call of every backend that can run here, a forward and a
training step), the profiler's first session (CUPTI's start) and the trace reader; then the compilers' first run
(FlexAttention's torch.compile, FlashAttention-4's JIT). Each step is one `session.measure` of a tiny workload in
the blog's dtype, head size and mask (the kernels a first request most likely runs): the code a request runs, so
nothing is warmed that a request would not use, and the runs are thrown away.

The server (handlers.start_warm_up) queues the steps on the measurement thread, where every live measurement runs.
Nothing is asked before a step runs: each step asks whether its own variant runs here (`session.measure` does, and
the asking imports that variant's libraries: nested tensors' ~0.7 s, flex's 0.3 s on a 2-core CPU, flash_attn.cute's
~2 s), so the queue is made at once and a live request that arrives meanwhile waits for one step's imports at most,
never for every variant's. That step stops at its next safe point once `stopped()` says so (a live request came);
the steps not started are dropped.
"""
from __future__ import annotations

from typing import Callable

from attention_variants import VARIANTS

from .measurement import Guard
from .results import UNSUPPORTED
from .workload import NAMED, Workload

TINY = {"batch": 1, "heads": 2, "seq_len": 128}  # on the blog's workload: its dtype, head size and causal flag


def tiny(device: str, **changes) -> Workload:
    return Workload.blog(**TINY, device=device, **changes)


def _first_name(device: str) -> str:
    return "CUDA, libraries, profiler" if device == "cuda" else "libraries, profiler"


def steps(device: str, keys: list[str] | None = None, stopped: Callable[[], bool] = lambda: False
          ) -> list[tuple[str, Callable[[], bool]]]:
    """The warm-up's steps on `device`, in order, each (name, call); a call says whether it ran (False: none of its
    variants runs here). First the page's default pair (its forward pays CUDA, the profiler's first session and the
    trace reader), then every other variant of `keys` (all by default) alone: the forwards (variants of packed
    documents after the rest), then the training steps, then each compiling one (the longest steps, last)."""
    from . import session
    from .request import DEFAULT_A, DEFAULT_B

    chosen = [VARIANTS[k] for k in keys or VARIANTS]
    ordered = sorted(chosen, key=lambda v: (v.key not in (DEFAULT_A, DEFAULT_B), v.packed_only))
    plain = [v.key for v in ordered if not (v.compiled or v.jit_s)]
    first = [k for k in plain if k in (DEFAULT_A, DEFAULT_B)] or plain[:1]
    w, step = tiny(device), tiny(device, passes="fwd+bwd")

    def measured(workload: Workload, measured_keys: list[str], *others: Workload) -> Callable[[], bool]:
        """Measure `workload`, or where none of the keys runs it, the first of `others` one does."""
        def call() -> bool:
            for each in (workload, *others):
                runs = session.measure(each, measured_keys, guard=Guard(cancelled=stopped))
                if any(run.status != UNSUPPORTED for run in runs):
                    return True
            return False
        return call
    found = [(_first_name(device), measured(w, first))] if first else []
    found += [(key, measured(w, [key])) for key in plain if key not in first]
    found += [(f"{key}: a training step", measured(step, [key])) for key in plain]
    # a compiler's configuration is its dtype, head size and heads, not its lengths: a decode kernel (FlashInfer's),
    # which takes no prefill, compiles the default decode step's configuration on a short cache
    decode = NAMED["decode"].replace(batch=1, seq_len=TINY["seq_len"], device=device)
    found += [(f"{v.key}: {'compile' if v.compiled else 'JIT'}", measured(w, [v.key], decode))
              for v in ordered if v.compiled or v.jit_s]
    return found
