"""Where a request's wall time goes: named phases, each timed by `spent(name)` where it happens, kept only while
something records them (`recording()`: the latency bench, bench/latency.py). Otherwise `spent` costs one read of a
context variable and records nothing. A phase that runs more than once in a request (a variant's first call, a
sweep's points) adds up.

The record is a context variable: a live measurement runs on the measurement thread inside a copy of the handler's
context (handlers.serve), a replay on a pool thread (asyncio.to_thread copies it too), so each request's phases land
in its own record whichever thread they run on.
"""
from __future__ import annotations

import contextlib
import time
from contextvars import ContextVar
from typing import Iterator

_record: ContextVar[dict[str, float] | None] = ContextVar("phases", default=None)


@contextlib.contextmanager
def recording() -> Iterator[dict[str, float]]:
    """Record the phases spent inside: phase name -> seconds, in the order first met."""
    record: dict[str, float] = {}
    token = _record.set(record)
    try:
        yield record
    finally:
        _record.reset(token)


@contextlib.contextmanager
def spent(name: str) -> Iterator[None]:
    """Time what runs inside as the phase `name` of the request being recorded (nothing when none is)."""
    record = _record.get()
    if record is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        record[name] = record.get(name, 0.0) + time.perf_counter() - started


def add(name: str, seconds: float) -> None:
    """Count `seconds` spent elsewhere (waiting for a thread) as the phase `name` of the request being recorded."""
    record = _record.get()
    if record is not None:
        record[name] = record.get(name, 0.0) + seconds
