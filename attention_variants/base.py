"""What a variant is: a forward over seeded `Inputs`, a memory estimate, a check, and its traits.

The families (naive, sdpa, flex) build `Variant`s; the registry in `__init__` lists them, and
`guesses.py` holds the guess a reader would make for each.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, ContextManager

import torch

from profiling.environment import Environment
from profiling.workload import Inputs, Workload


@dataclass(frozen=True)
class Variant:
    key: str
    label: str
    forward: Callable[[Inputs], torch.Tensor]        # one forward, without the pin (see `pin`)
    scratch_bytes: Callable[[Workload, Environment], int]  # a call's memory beyond q, k, v and the output
    check: Callable[[Workload, Environment], str | None] = lambda workload, env: None
    setup: Callable[[Inputs], bool] | None = None   # once per workload before the first call (flex: its block mask);
                                                     # returns whether its work was found done (cached) already
    setup_bytes: Callable[[Workload, Environment], int] = lambda workload, env: 0  # what the setup allocates
    sdpa_backend: str | None = None                  # the SDPBackend it pins ("FLASH_ATTENTION"), "auto", or None
    fused: bool = False                              # meant to run as one kernel that never writes S×S
    sparse: bool = False                             # skips every tile its mask leaves empty (a block mask, a window
                                                     # argument), not only those above a causal diagonal
    compiled: bool = False                           # goes through torch.compile
    jit_s: tuple[float, float] | None = None         # compiles its own kernels on a configuration's first call
                                                     # (not torch.compile): a prior of the forward's, the backward's
    top_left: Callable[[Inputs], torch.Tensor] | None = None  # the same call with SDPA's is_causal=True, which
                                                     # aligns the causal mask to the top left: with fewer queries than
                                                     # keys, not what a decode step needs (called once, never timed)

    def supports(self, workload: Workload, env: Environment) -> str | None:
        """None when this variant can run here, else the reason it cannot."""
        return self.check(workload, env)

    @property
    def pinned(self) -> bool:
        return self.sdpa_backend not in (None, "auto")

    def pin(self) -> ContextManager:
        """The `sdpa_kernel` context a pinned variant runs in (a no-op for the others). Measurement enters
        it once around a loop of forwards, so a call's figures are SDPA's and the pin is costed apart."""
        if not self.pinned:
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(getattr(SDPBackend, self.sdpa_backend))
