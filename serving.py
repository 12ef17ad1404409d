"""What a public server needs beyond the screen: one-line refusals, a request guard, bounded memory.

Nothing here knows about attention; app.py builds the screen and uses these.
"""
from __future__ import annotations

import ctypes
import html
import inspect
import logging

import gradio as gr
from fastapi import HTTPException
from gradio.route_utils import FnIndexInferError
from starlette.responses import JSONResponse

log = logging.getLogger("attention_profiler")


def refused(message: str, title: str) -> gr.Error:
    """A request refused for what it asked: one line in the server's log, no traceback; the message
    HTML-escaped, since gradio renders an error's message as HTML."""
    log.warning("refused: %s", message)
    return gr.Error(html.escape(message, quote=False), title=title, print_exception=False)


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
                 if not isinstance(p.default, (gr.Progress, gr.Request)) and p.annotation != "gr.Request"]
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
