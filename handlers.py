"""The app's handlers of a request, for the page and the API alike: the client's values checked into a
`Request`, served through `profiling.session` (live in the GPU's queue, with a cancel that reaches the
measurement; or replayed), and the answer kept by an opaque id for the page to render.

`serve_live` is the only function that touches the GPU: on a ZeroGPU Space it runs in another process.
"""
from __future__ import annotations

from profiling import startup

_COLLECTING = startup.pause()  # until this module, which imports everything the server keeps, is loaded (its end)
startup.skip_type_stubs()  # before anything imports gradio (spaces does)

try:  # ZeroGPU wants `spaces` imported before torch touches CUDA; elsewhere GPU() is a no-op
    import spaces
    on_gpu = spaces.GPU(duration=120)
except ImportError:
    def on_gpu(fn):
        return fn

import asyncio
import contextvars
import functools
import inspect
import json
import logging
import os
import secrets
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr

from profiling.caches import keep_compiles

keep_compiles()  # before anything imports a compiler's cache (flash_attn.cute reads its setting once)

from profiling import capture, phases, scratch, session, warmup  # noqa: E402
from profiling.environment import detect  # noqa: E402
from profiling.replay import RECORDED_DIR, by_size, recorded_runs  # noqa: E402
from profiling.request import KEYS, LIVE, LIVE_BUDGET_S, Request  # noqa: E402
from profiling.workload import Refusal  # noqa: E402
from serving import TITLES, log, refused  # noqa: E402

ENV = detect()
RECORDINGS = {name: recorded_runs(name)[0].environment for name in by_size()}  # the page opens on the first
# With a GPU the page measures live; without one it starts on the real GPU runs of the recording that holds the most
# (a second GPU's recording, begun part by part, opens only when chosen).
DEFAULT_SOURCE = LIVE if ENV.device == "cuda" or not RECORDINGS else next(iter(RECORDINGS))

class ResultStore:
    """Results kept on the server by an opaque id the client holds (never by gradio's session, which other
    visitors' sessions evict): each kept for `max_age_s`, as the object it is, with the size its keeper says it
    takes; the whole bounded by `max_bytes`, past which the oldest go first. Thread-safe."""

    def __init__(self, max_bytes: int, max_age_s: float, clock=time.monotonic):
        self.max_bytes, self.max_age_s, self._clock = max_bytes, max_age_s, clock
        self._kept: OrderedDict[str, tuple[float, int, object]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, value, size: int) -> str:
        key = secrets.token_urlsafe(16)
        with self._lock:
            self._kept[key] = (self._clock(), size, value)
            self._bytes += size
            self._prune()
        return key

    def get(self, key):
        """What is kept under `key`, or None when it never was or is no longer kept (any value is safe to ask)."""
        if not isinstance(key, str):
            return None
        with self._lock:
            self._prune()
            kept = self._kept.get(key)
        return kept[2] if kept else None

    def _prune(self) -> None:
        now = self._clock()
        while self._kept:
            key, (when, size, _) = next(iter(self._kept.items()))
            if now - when <= self.max_age_s and self._bytes <= self.max_bytes:
                break
            del self._kept[key]
            self._bytes -= size

    def __len__(self) -> int:
        return len(self._kept)


# What one visitor may cost the server. A result is kept by an id the page holds, half an hour, in a store
# bounded by bytes (compressed JSON, tens of KB a result), never in gradio's sessions, so other visitors cannot
# push it out. gradio keeps each session's last output values (~1.5 MB once a result is shown): 16 sessions.
MAX_REQUEST_BYTES = 64 * 1024
KEPT_FOR_S = 30 * 60
RESULTS = ResultStore(max_bytes=128 * 2**20, max_age_s=KEPT_FOR_S)
SESSIONS_KEPT = 16
REPLAYS_AT_ONCE = 4  # a replay reads JSON and draws a chart (~1 s of CPU): it never waits for a live run
NOT_KEPT = f"This result is no longer kept (results are kept {KEPT_FOR_S // 60} minutes); run it again."


# -- serving a request: every one goes through profiling.session ----------------------------------------
RUNNING: dict[str, threading.Event] = {}  # run id -> its cancel, while it runs
SWEEPS: dict[str, str] = {}               # session -> the run id of its live sweep (Stop sets that run's cancel)
# Every live measurement runs on this one thread: the profiler's library (Kineto, CUPTI) registers its client on
# the thread that first starts it, and logs an error when a later one starts from another ("External init callback
# must run in same thread as registerClient"). Replays run on the event loop's pool, as many at once as it allows.
LIVE_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="live-measurement")
# That alone left one such error at the first live run: the client registers on the thread that imports torch (this
# one), and the first session, wherever it starts, runs the init callback. It runs here, at start-up, instead: a
# ZeroGPU Space measures in another process and its main process must not start CUDA's side of the profiler.
if os.environ.get("SPACES_ZERO_GPU", "").lower() not in ("1", "t", "true"):
    capture.start_profiler_here()


def end_process(code: int = 0) -> None:
    """End this process now, its output flushed: on the H200 (torch 2.11) a process whose main thread started the
    profiler as above never finished exiting (the interpreter's shutdown hung; the same without the profiler's
    start-up, or on a CPU, exits at once). A server that has closed, or a bench process that has said its answer,
    ends here instead."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


@dataclass
class WarmUp:
    """The start-up warm-up's steps as queued on LIVE_WORKER, and the seconds each took once done."""
    queued: list[Future] = field(default_factory=list)
    steps: dict[str, float] = field(default_factory=dict)
    dropped: bool = False  # a live request came: the step in progress stops, the rest are dropped


WARM_UP = WarmUp()


def start_warm_up(device: str | None = None, keys: list[str] | None = None) -> None:
    """Pay what every first live request pays (`profiling.warmup`) now, in the background on the measurement thread,
    so that no visitor does: on a GPU (`device`, this machine's by default) of our own. Never on ZeroGPU, where the
    GPU exists only inside `serve_live`, a call in another process that costs the visitor's GPU quota, nor on a CPU,
    whose cores the replays share. A page or a replay never waits for it; a live request stops the step in progress
    at its next safe point and waits for that only (`_drop_warm_up`). The steps are queued at once: each asks whether
    its own variant runs here when it runs (the asking imports that variant's libraries). Once a live request has
    come, nothing of it runs: not the steps queued, nor any queued after that request."""
    device = device or ENV.device
    if os.environ.get("SPACES_ZERO_GPU") or WARM_UP.queued or device != "cuda":
        return

    def step(name, call) -> None:
        if WARM_UP.dropped:  # a live request came before this step started (even before the steps were queued)
            return
        started = time.perf_counter()
        try:
            ran = call()
        except Exception as error:  # a warm-up that failed leaves the request to pay, and to say why
            log.warning("warm-up step %r failed: %s", name, str(error).splitlines()[0] if str(error) else error)
            ran = True
        if ran and not WARM_UP.dropped:  # a step a live request stopped did not pay all it would have
            WARM_UP.steps[name] = time.perf_counter() - started

    try:
        found = warmup.steps(device, keys, stopped=lambda: WARM_UP.dropped)
    except Exception as error:  # no warm-up: every first request pays its own, and says why it cannot run
        log.warning("the warm-up's plan failed: %s", str(error).splitlines()[0] if str(error) else error)
        return
    if WARM_UP.dropped:  # a live request came while the server was still starting (matplotlib's import, the plan)
        return
    WARM_UP.queued = [LIVE_WORKER.submit(step, name, call) for name, call in found]


def wait_for_warm_up(timeout_s: float | None = None) -> bool:
    """Wait until the warm-up is over (its steps done, or dropped for a live request); False when none was started."""
    if not WARM_UP.queued:
        return False
    wait(WARM_UP.queued, timeout=timeout_s)
    return True


def _drop_warm_up() -> None:
    """A live request is here: the warm-up's step in progress stops at its next safe point and the steps not yet
    started give way to it (it pays what it needs itself)."""
    WARM_UP.dropped = True
    for queued in list(WARM_UP.queued):
        queued.cancel()


def request_of(values, seq_lens=None, axis=None, *, live: bool = True) -> Request:
    """The client's values as a Request (checked as sent; a sweep's values and axis too), or a gr.Error naming the
    field, the value and what is allowed."""
    try:
        request = Request.from_values(dict(zip(KEYS, values)), ENV.device, seq_lens, axis)
        if request.live and not live:
            raise Refusal("source", LIVE, "a live run joins the GPU's queue (the compare and sweep endpoints), not "
                                          "the replays'; choose a recording")
        return request
    except Refusal as error:
        raise refused(str(error), TITLES[error.kind]) from None


@on_gpu
def serve_live(kind: str, request: Request, run_id: str, progress) -> session.Answer:
    """The only function that touches the GPU: returns plain data, so ZeroGPU can pickle it out of its worker.
    There, in another process, no cancel reaches the run: it ends at its budget."""
    cancel = RUNNING.get(run_id)
    serve = session.compare if kind == "compare" else session.sweep
    return serve(request, budget_s=LIVE_BUDGET_S[request.workload.device],
                 cancelled=cancel.is_set if cancel else (lambda: False),
                 progress=lambda fraction, message: progress(fraction, desc=message))


async def serve(kind: str, request: Request, progress, run_id: str | None = None,
                keep: bool = True) -> tuple[dict, str | None]:
    """Serve `request` ("compare" or "sweep") in a worker thread, a live one on LIVE_WORKER: (what the client is
    sent, the id of what the server keeps, its files included; None unless `keep`: an API client gets no id, so
    nothing is kept for it that would crowd out the pages' results). A cancel by the client ends a live run at its
    next safe point, and the queue's slot is held until it has: nothing runs on that the queue cannot see."""
    run_id = run_id or secrets.token_hex(8)
    cancel = RUNNING.setdefault(run_id, threading.Event())

    queued = time.perf_counter()

    def work() -> session.Answer:
        try:
            if request.live:
                phases.add("waited for the measurement thread", time.perf_counter() - queued)
                return serve_live(kind, request, run_id, progress)
            return (session.compare if kind == "compare" else session.sweep)(request)
        except Refusal as error:
            raise refused(str(error), TITLES[error.kind]) from None

    if request.live:  # as asyncio.to_thread runs it (gradio's progress reads the event's context), on the live thread
        _drop_warm_up()
        call = functools.partial(contextvars.copy_context().run, work)
        task = asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(LIVE_WORKER, call))
    else:
        task = asyncio.ensure_future(asyncio.to_thread(work))
    try:
        answer = await asyncio.shield(task)
    except asyncio.CancelledError:
        cancel.set()
        await asyncio.wait({task})
        raise
    finally:
        if task.done():
            RUNNING.pop(run_id, None)
    with phases.spent("serialize"):
        client = answer.to_dict()
        text = json.dumps(client, indent=1) if keep else None  # the page's JSON download: what an API client gets
    if not keep:
        return client, None
    return client, RESULTS.put(Kept(kind, answer, text), 2 * len(text))  # the text and the objects it describes


def endpoint(kind: str, live: bool, page: bool):
    """A handler of the API (`page` False: returns the answer) or of the page (returns it and the kept result's
    id): A vs B ("compare") or a sweep, live and recorded (`live`) or recorded only."""
    extra = ("seq_lens", "axis") if kind == "sweep" else ()

    async def handler(*args):
        *values, http, progress = args
        axis, seq_lens = (values.pop(), values.pop()) if kind == "sweep" else (None, None)
        request = request_of(values, seq_lens, axis, live=live)
        run_id = None
        if kind == "sweep" and request.live and http.session_hash:
            run_id = SWEEPS[http.session_hash] = secrets.token_hex(8)  # a fresh Stop for each sweep
        try:
            client, kept = await serve(kind, request, progress, run_id, keep=page)
        finally:
            if run_id and SWEEPS.get(http.session_hash) == run_id:  # its Stop is spent: nothing left behind
                del SWEEPS[http.session_hash]
        return (client, kept) if page else client

    # The API's named parameters: the request's own fields. Each defaults to None, what the core reads as not given:
    # gradio documents a control with no initial value (kv_heads, window, seq_lens, axis) as optional only so.
    params = [inspect.Parameter(k, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None) for k in (*KEYS, *extra)]
    params += [inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                 annotation=gr.Request),
               inspect.Parameter("progress", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=gr.Progress())]
    handler.__signature__ = inspect.Signature(params)
    handler.__annotations__ = {"request": gr.Request}
    handler.__name__ = f"{'run_' if page else ''}{kind}{'' if live else '_replay'}"
    return handler


def stop_sweep(request: gr.Request) -> None:
    """Stop this session's running live sweep at its next point; it returns with the points done."""
    cancel = RUNNING.get(SWEEPS.get(request.session_hash, ""))
    if cancel:
        cancel.set()


@dataclass(frozen=True)
class Kept:
    """A served answer as the page keeps it: the objects it renders, and the JSON a client was sent (its download)."""
    kind: str                      # "compare" or "sweep"
    answer: session.Answer         # the request, the result (its trace files named) and the explanation
    text: str


def kept(result_id, kind: str) -> Kept:
    """The result kept under `result_id` if it is a `kind` ("compare" or "sweep"); else refused (an id is the
    client's to send: one of the other tab's, or made up, fetches nothing)."""
    data = RESULTS.get(result_id)
    if not isinstance(data, Kept) or data.kind != kind:
        raise refused(NOT_KEPT, "Result expired")
    return data


def served_trace(path: str | None) -> Path | None:
    """A trace the server itself wrote (a measurement's scratch folder) or shipped (a recording); nothing else."""
    if not path:
        return None
    trace = Path(path)
    try:
        recorded = trace.resolve(strict=True).is_relative_to(RECORDED_DIR.resolve()) and trace.is_file()
    except (OSError, RuntimeError):
        recorded = False
    return trace if recorded or scratch.is_scratch_file(trace) else None


startup.settle(_COLLECTING)  # the start's objects frozen out of later collections (profiling/startup.py)
