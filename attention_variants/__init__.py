"""Every attention variant the profiler knows, in one place, each with the guess beside it.

A variant is a callable over seeded `Inputs`, a one-line description, what an engineer
reading its code would expect to see in the trace (its `Guess`), and a `supports` check
that returns the reason it cannot run here, or None.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from profiling.environment import Environment
from profiling.workload import Inputs, Workload, WorkloadError


@dataclass(frozen=True)
class Guess:
    """What reading the code suggests, before anything runs."""
    summary: str                        # the intuition in one line: "one line, so few kernels and fast"
    kernels_per_forward: int | None     # how many kernels one forward should launch on a GPU
    kernels: tuple[str, ...]            # which ones, in plain words
    precision: str                      # the arithmetic one expects for 16-bit inputs
    materialises_scores: bool           # does the S×S score matrix go through memory?
    host_rank: int                      # expected CPU cost per call: 1 = lightest
    speed_rank: int                     # expected GPU speed: 1 = fastest
    occupancy: str = ""                 # what one expects Kineto's occupancy column to say


@dataclass(frozen=True)
class Variant:
    key: str
    label: str
    description: str
    forward: Callable[[Inputs], torch.Tensor]
    guess: Guess
    scratch_bytes: Callable[[Workload], int]         # memory estimate beyond q, k, v and the output
    check: Callable[[Workload, Environment], str | None] = lambda workload, env: None
    sdpa_backend: str | None = None                  # the SDPBackend it pins, "auto", or None

    def supports(self, workload: Workload, env: Environment) -> str | None:
        """None when this variant can run here, else the reason it cannot."""
        return self.check(workload, env)


from . import flex, naive, sdpa  # noqa: E402  (the families need Guess and Variant above)

VARIANTS: dict[str, Variant] = {v.key: v for v in (
    naive.NAIVE,
    naive.NAIVE_INPLACE,
    sdpa.MATH,
    sdpa.EFFICIENT,
    sdpa.FLASH,
    sdpa.CUDNN,
    sdpa.AUTO,
    flex.FLEX,
)}


def get_variant(key: str) -> Variant:
    try:
        return VARIANTS[key]
    except KeyError:
        raise WorkloadError("variant", key, f"choose one of {', '.join(VARIANTS)}") from None
