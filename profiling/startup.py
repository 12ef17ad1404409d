"""A process's start: Python's cyclic garbage collector paused while the start makes what the process keeps for its
life (the imports: spaces', gradio's, torch's; the recording's runs), then all of that frozen out of every later
collection (`gc.freeze`) and the collector resumed where it was on.

Left on, the collector walked those objects over and over while they were made, and each later full collection
walked them all again. Measured on a 2-core CPU: importing torch and gradio 3.8 -> 3.3 s; reading the H200
recording 0.78 -> 0.37 s (the collector ran 216 times during it, twice over the process's 330,000 objects); a full
collection in the server, its ~640,000 start-up objects frozen, 331 -> 12 ms. Reference counting still frees
whatever is dropped; only a cycle alive at the freeze and dropped later is never collected, and the start's own cyclic
garbage is frozen with it (the server's: ~17,000 objects, 2.3 MiB, once).

Used by the server's start (`handlers`, app.py's first import: `pause` at its top, `settle` at its end), the
command line's (`profiling.__main__`) and the recording's loader (`paused`, for any other caller).
"""
from __future__ import annotations

import gc
from contextlib import contextmanager


def pause() -> bool:
    """Pause the collector; whether it was on (`settle` resumes it only then)."""
    was_on = gc.isenabled()
    gc.disable()
    return was_on


def settle(was_on: bool) -> None:
    """Freeze what is alive now out of later collections, and resume the collector if it was on."""
    gc.freeze()
    if was_on:
        gc.enable()


@contextmanager
def paused():
    """`pause` for the block, `settle` after it (even when it raises)."""
    was_on = pause()
    try:
        yield
    finally:
        settle(was_on)
