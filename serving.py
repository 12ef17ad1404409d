"""What a public server needs beyond the screen: one-line refusals, a request guard, bounded memory, results kept
by id, and the page's public address.

Nothing here knows about attention; app.py builds the screen and uses these.
"""
from __future__ import annotations

import ctypes
import inspect
import logging
import re
import secrets
import threading
import time
import zlib
from collections import OrderedDict

import gradio as gr
from fastapi import HTTPException
from gradio.route_utils import FnIndexInferError
from starlette.responses import JSONResponse

log = logging.getLogger("attention_profiler")


TITLES = {"invalid": "Not a request this app can run", "memory": "Too large for this machine",
          "time": "Too long for this machine", "unrecorded": "Not in the recording"}
_ANGLES = str.maketrans({"<": "‹", ">": "›", "&": "+"})


def refused(message: str, title: str = TITLES["invalid"]) -> gr.Error:
    """A request refused for what it asked: one line in the server's log, no traceback. gradio renders an error's
    message as HTML on the page and sends it as text to API clients, so the characters HTML would read as markup
    are replaced by look-alikes that are safe and readable in both ("‹img›", never "&lt;img&gt;")."""
    log.warning("refused: %s", message)
    return gr.Error(message.translate(_ANGLES), title=title, print_exception=False)


def limit_malloc_arenas(arenas: int = 2) -> None:
    """glibc gives each new thread a malloc arena of its own and keeps there what the thread freed. gradio runs
    handlers on up to 40 worker threads, so the server crept up ~0.15 MB per session until every thread had
    its arena; with two, it stays flat (bench/load.py). Before any worker thread starts; a no-op off glibc."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-8, arenas)  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def refuse_short_requests(block_fn, inputs: list) -> None:
    """gradio's own check that a request sent every input raises a ValueError, logged with its traceback:
    the same check (it replaces Blocks.validate_inputs), refused in one line naming what the event takes."""
    if len(inputs) < len(block_fn.inputs):
        names = [name for name, p in inspect.signature(block_fn.fn).parameters.items()
                 if not isinstance(p.default, (gr.Progress, gr.Request))
                 and p.annotation not in (gr.Request, "gr.Request")]
        raise refused(f"{block_fn.api_name or block_fn.name} takes {len(block_fn.inputs)} values "
                      f"({', '.join(names)}); the request sent {len(inputs)}", "Not a request this app can run")


class RequestGuard:
    """ASGI middleware for what gradio leaves open. A request body over `max_bytes` gets 413 at once when its
    Content-Length says so, else as soon as the bytes read pass the limit, before any handler parses it. A
    request naming an event that does not exist (a stray fn_index or api_name) gets 404 and one log line,
    where gradio would answer 500 with a traceback."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    def _too_large(self) -> str:
        return f"request body over {self.max_bytes} bytes: this app takes no files"

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if len(declared) > 12 or not declared.isdigit() or int(declared) > self.max_bytes:
            return await JSONResponse({"detail": self._too_large()}, status_code=413)(scope, receive, send)
        received, started = 0, False

        async def limited_receive():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:  # a chunked body that grew past the limit: FastAPI answers 413
                raise HTTPException(413, detail=self._too_large())
            return message

        async def watched_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, watched_send)
        except (KeyError, FnIndexInferError) as error:
            if started or not scope["path"].startswith("/gradio_api/"):
                raise
            log.warning("refused: %s %s names no event of this app (%s)", scope["method"], scope["path"], error)
            await JSONResponse({"detail": "no such event in this app"}, status_code=404)(scope, receive, send)


class ResultStore:
    """Results kept on the server by an opaque id the client holds (never by gradio's session, which other
    visitors' sessions evict): each kept for `max_age_s`, zlib-compressed, the whole bounded by `max_bytes`, past
    which the oldest go first. Thread-safe."""

    def __init__(self, max_bytes: int, max_age_s: float, clock=time.monotonic):
        self.max_bytes, self.max_age_s, self._clock = max_bytes, max_age_s, clock
        self._kept: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, text: str) -> str:
        key = secrets.token_urlsafe(16)
        packed = zlib.compress(text.encode(), 6)
        with self._lock:
            self._kept[key] = (self._clock(), packed)
            self._bytes += len(packed)
            self._prune()
        return key

    def get(self, key) -> str | None:
        """The text kept under `key`, or None when it never was or is no longer kept (any value is safe to ask)."""
        if not isinstance(key, str):
            return None
        with self._lock:
            self._prune()
            kept = self._kept.get(key)
        return zlib.decompress(kept[1]).decode() if kept else None

    def _prune(self) -> None:
        now = self._clock()
        while self._kept:
            key, (when, packed) = next(iter(self._kept.items()))
            if now - when <= self.max_age_s and self._bytes <= self.max_bytes:
                break
            del self._kept[key]
            self._bytes -= len(packed)

    def __len__(self) -> int:
        return len(self._kept)


HOST = re.compile(r"[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?")


def page_address(request) -> str:
    """The app's public address: behind a proxy (Spaces) the forwarded host, when it is a host name."""
    host = request.headers.get("x-forwarded-host", "").split(",")[0].strip()
    if HOST.fullmatch(host):
        proto = request.headers.get("x-forwarded-proto", "https").split(",")[0].strip()
        return f"{'http' if proto == 'http' else 'https'}://{host}/"
    return str(request.base_url)
