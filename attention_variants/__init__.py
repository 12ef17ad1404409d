"""Every attention variant the profiler knows, in one place, each with the guess beside it.

A variant (`base.Variant`) is a forward over seeded `Inputs`, its traits (pinned SDPA backend,
fused, compiled) and a `supports` check that returns the reason it cannot run here, or None.
What an engineer reading its code would expect to see in the trace is its row in `guesses.GUESSES`
(`guess_for(key, workload)`).
"""
from __future__ import annotations

import functools

from profiling.workload import choice

from .guesses import GUESSES, Expected, Guess, guess_for

KEYS = tuple(GUESSES)  # every variant's key, in the table's order: known without importing torch (the command line)


@functools.cache
def _variants() -> dict:
    """The variants themselves, imported (torch with them) the first time one is asked for."""
    from . import fa4, flex, naive, packed, sdpa

    variants = {v.key: v for v in (naive.NAIVE, naive.NAIVE_INPLACE, sdpa.MATH, sdpa.EFFICIENT, sdpa.FLASH,
                                   sdpa.CUDNN, sdpa.AUTO, flex.FLEX, fa4.FA4, fa4.SDPA_FA4, packed.SDPA_DOCMASK,
                                   packed.NAIVE_DOCMASK, packed.SDPA_NESTED, packed.VARLEN)}
    assert tuple(variants) == KEYS, "each variant has its row in guesses.GUESSES, in the same order"
    return variants


def __getattr__(name: str):
    """`VARIANTS` (key -> Variant) and `Variant`, on first use: importing the package costs no torch."""
    if name == "VARIANTS":
        return _variants()
    if name == "Variant":
        from .base import Variant

        return Variant
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["KEYS", "VARIANTS", "Expected", "Guess", "Variant", "get_variant", "guess_for", "reasons"]


def reasons(variants, workload, env) -> dict[str, str | None]:
    """Why each of `variants` cannot run `workload` on `env`, by key (None: it can): the one place it is decided,
    once per request (the plan asks; measurement and the cost model read the plan's answer)."""
    return {v.key: v.supports(workload, env) for v in variants}


def get_variant(key: str, field: str = "variant") -> Variant:
    """The variant `key`; a WorkloadError naming `field` (the API's `a` or `b`) and the known keys if none."""
    variants = _variants()
    return variants[choice(field, key, KEYS)]
