"""Every attention variant the profiler knows, collected from the families' files, each with its guess.

A variant (`base.Variant`) is declared whole in its family's file: a forward over seeded `Inputs`, its memory
estimate, its traits (pinned SDPA backend, fused, compiled, the words the explainer says of it), a `supports` check
that returns the reason it cannot run here, or None, and its guess (`guesses.GuessRow`: what an engineer reading its
code would expect to see in the trace; `guess_for(key, workload)`). A family file lists its variants in VARIANTS;
adding a variant to one is that file alone, a new family one word in FAMILIES. Reading them imports no torch (the
command line's help and refusals answer at once): a variant imports it where it runs.
"""
from __future__ import annotations

from profiling.workload import choice

from . import cudnn_frontend, fa3, fa4, flashinfer, flex, naive, packed, sdpa
from .base import Variant
from .guesses import Expected, Guess, guess_for

FAMILIES = (naive, sdpa, flex, fa4, fa3, cudnn_frontend, flashinfer, packed)  # the table's order: the page's menus, the command line's list
# Each variant that takes fp8 inputs is followed by its fp8 twins (`Variant.twins`: the same call on a 16-bit
# workload with its quantisation applied), so one comparison sets a kernel in fp8 beside itself in 16 bits.
VARIANTS: dict[str, Variant] = {v.key: v for family in FAMILIES for base in family.VARIANTS
                                for v in (base, *base.twins())}
KEYS = tuple(VARIANTS)
assert all(v.guess for v in VARIANTS.values()), "each variant carries the guess a reader would make (Variant.guess)"

__all__ = ["KEYS", "VARIANTS", "Expected", "Guess", "Variant", "get_variant", "guess_for", "reasons"]


def reasons(variants, workload, env) -> dict[str, str | None]:
    """Why each of `variants` cannot run `workload` on `env`, by key (None: it can): the one place it is decided,
    once per request (the plan asks; measurement and the cost model read the plan's answer)."""
    return {v.key: v.supports(workload, env) for v in variants}


def get_variant(key: str, field: str = "variant") -> Variant:
    """The variant `key`; a WorkloadError naming `field` (the API's `a` or `b`) and the known keys if none."""
    return VARIANTS[choice(field, key, KEYS)]
