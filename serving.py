"""What a public server needs beyond the screen: one-line refusals, a request guard that answers hostile requests
with a 4xx, and bounded memory.

Nothing here knows about attention; app.py builds the screen and uses these.
"""
from __future__ import annotations

import asyncio
import ctypes
import inspect
import itertools
import json
import logging
import os
import re
from urllib.parse import parse_qsl

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


def draw_off_screen() -> None:
    """The charts are PNGs, never a window: matplotlib is told so (MPLBACKEND=agg, unless the host set one) before
    its import. gradio wraps every event in a switch of matplotlib's backend (`utils.MatplotlibBackendMananger`), and
    its `matplotlib.get_backend()` settles a backend left unset by importing pyplot, which this app never uses: on
    this CPU that wrapper took 0.26-0.29 s of the server's first answer, 0.055 s with the backend named."""
    os.environ.setdefault("MPLBACKEND", "agg")


# How often gradio's queue looks for work while it has none (it polls: 1 ms for events, 10 ms for progress). An idle
# server here burned 6.3% of a core (63 of 1,000 ticks in 10 s, no page open), in the process and under the GIL a live
# CPU measurement runs in; at 10 ms and 50 ms, 1.9%. A queued event now waits up to 10 ms to start; progress is sent
# up to 20 times a second.
QUEUE_POLL_S = {"sleep_when_free": 0.01, "progress_update_sleep_when_free": 0.05}


def quiet_queue(queue) -> list[str]:
    """Slow `queue`'s idle polling to QUEUE_POLL_S; the names it set (gradio's own attributes: one a release renames
    or drops is left as gradio has it)."""
    done = []
    for name, seconds in QUEUE_POLL_S.items():
        if isinstance(getattr(queue, name, None), (int, float)):
            setattr(queue, name, seconds)
            done.append(name)
    return done


# How many events of one concurrency group may wait at once (gradio's own max_size counts every group together: 16
# live requests queued by one client made every replay answer 503 "Queue is full"). Live runs each hold the machine
# for up to their budget, so fewer of them wait; the replays' and the pages' groups keep room of their own.
WAITING = {"gpu": 8}
WAITING_DEFAULT = 16
_WAITERS = {"gpu": "live runs", "replay": "replays", "show": "answers being drawn"}


def cap_waiting(queue) -> bool:
    """Bound the events waiting in each of `queue`'s concurrency groups (WAITING, else WAITING_DEFAULT): an event past
    its group's bound is refused as gradio refuses a full queue (503), in words that name the group and the bound,
    and a full group leaves every other one open. gradio's own bound becomes the sum of the groups', so it never
    refuses first. Whether it was set: a gradio whose queue lacks what this reads is left as it is."""
    push = getattr(queue, "push", None)
    groups = getattr(queue, "event_queue_per_concurrency_id", None)
    fns = getattr(getattr(queue, "blocks", None), "fns", None)
    if push is None or not isinstance(groups, dict) or not isinstance(fns, dict):
        return False
    lock = None

    async def capped(body, request, username):
        nonlocal lock
        fn = fns.get(getattr(body, "fn_index", None))
        if fn is None:  # gradio's own answer ("No function index provided.", or its error for an unknown one)
            return await push(body, request, username)
        lock = lock or asyncio.Lock()
        async with lock:  # the count and the push together: two joins at once cannot both take the last place
            group = fn.concurrency_id
            bound = WAITING.get(group, WAITING_DEFAULT)
            waiting = len(groups[group].queue) if group in groups else 0
            if waiting >= bound:
                what = _WAITERS.get(group, "requests of this kind")
                return (False, f"{waiting} {what} are already waiting, the most this server lets wait at once; "
                        "try again in a while" + ("; replays of a recording wait apart from them"
                                                  if group == "gpu" else ""), "queue_full")
            return await push(body, request, username)
    queue.push = capped
    queued = {fn.concurrency_id for fn in fns.values() if getattr(fn, "queue", True)}
    queue.max_size = sum(WAITING.get(group, WAITING_DEFAULT) for group in queued)
    return True


def refuse_short_requests(block_fn, inputs: list) -> None:
    """Blocks.validate_inputs, run before every event's handler: what gradio would let through to a traceback,
    refused in one line instead. gradio's own check that a request sent every input raises a ValueError, logged
    with its traceback: the same check, naming what the event takes (a request of more values than that is refused
    too: gradio dropped the rest unsaid). An event with no Python function (its work
    is the browser's: `js=` alone, or a `cancels=` click) has nothing to run on the server. And an event the page
    fires outside the queue (its instant helpers) takes what a page's control sends: one value per control, never
    a list or an object (the queued endpoints take anything: the core names each field it refuses)."""
    name = block_fn.api_name or block_fn.name
    if block_fn.fn is None:
        raise refused(f"{name} runs in the browser: there is nothing on the server to call")
    if len(inputs) != len(block_fn.inputs):  # fewer would fail in gradio; more were dropped unsaid
        names = [key for key, p in inspect.signature(block_fn.fn).parameters.items()
                 if not isinstance(p.default, (gr.Progress, gr.Request))
                 and p.annotation not in (gr.Request, "gr.Request")]
        raise refused(f"{name} takes {len(block_fn.inputs)} values "
                      f"({', '.join(names)}); the request sent {len(inputs)}", "Not a request this app can run")
    if not block_fn.queue:
        for i, (block, value) in enumerate(zip(block_fn.inputs, inputs)):
            if isinstance(value, (list, dict)) and _one_value(block):
                label = getattr(block, "label", None) or type(block).__name__
                raise refused(f"{name} takes one value for {label!r} (input {i + 1}); the request sent a "
                              f"{type(value).__name__}")


def _one_value(block) -> bool:
    """Whether a page's control sends a single value (a choice, a number, a flag, a line of text)."""
    if isinstance(block, (gr.Radio, gr.Number, gr.Checkbox, gr.Textbox)):
        return True
    return isinstance(block, gr.Dropdown) and not block.multiselect


# The POST routes that name an event to run (each pattern's group: the api_name in the path, if any), the GET
# route of a named call's result stream (its group: the event id), and gradio's upload routes.
_EVENT_ROUTES = (re.compile(r"/gradio_api/queue/join/?()"), re.compile(r"/gradio_api/(?:run|api)/([^/]+)/?"),
                 re.compile(r"/gradio_api/call/([^/]+)/?"), re.compile(r"/gradio_api/call/v2/([^/]+)/?"))
_RESULT_STREAM = re.compile(r"/gradio_api/call/(?:v2/)?[^/]+/([^/]+)/?")
_UPLOAD_ROUTES = ("/gradio_api/upload", "/gradio_api/upload/", "/gradio_api/upload_progress")


# How deep lists and objects may nest in an event's body: the page sends two levels. json.loads recurses per level,
# and so does whatever reads the values after it; a body of a few KB nested 1,000 deep overran Python's stack.
MAX_NESTING = 16
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


def _nesting(body: bytes) -> int:
    """How deep lists and objects nest in a JSON body, counted without parsing it (brackets in strings aside)."""
    brackets = _JSON_STRING.sub(b"", body).translate(None, delete=_NOT_BRACKETS)
    return max(itertools.accumulate(1 if b in b"[{" else -1 for b in brackets), default=0)


def _said(text: str, limit: int = 160) -> str:
    """A client's text as a log line quotes it: one line, cut short."""
    text = text.replace("\n", " ").replace("\r", " ")
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def takes_uploads(blocks) -> bool:
    """Whether any component of `blocks` takes a file from the visitor (an upload event, or file types)."""
    for block in blocks.blocks.values():
        events = {getattr(e, "event_name", e) for e in getattr(type(block), "EVENTS", ())}
        if "upload" in events or getattr(block, "file_types", None) is not None:
            return True
    return False


class RequestGuard:
    """ASGI middleware for what gradio leaves open, each answered with a 4xx and one log line, never a 500 or a
    traceback:

    - a request body over `max_bytes`: 413 at once when its Content-Length says so, else as soon as the bytes read
      pass the limit, before any handler parses it; a URL over `max_url_bytes`: 414 (gradio's own URL parser
      fails at 64 KB, with a traceback);
    - an event's body that is not a JSON object of the right shapes: nested over MAX_NESTING deep, not UTF-8, not
      JSON (an integer past Python's 4,300 digits too), not an object, or a `data`, `fn_index` or `session_hash`
      of the wrong type: 400 or 422 (json.loads overran the stack on a deep one: a 500 and a traceback);
    - a request naming an event that does not exist (a stray fn_index or api_name), or one with no Python
      function (`js=` alone, a `cancels=` click): 404; an empty session_hash: 400 (gradio would queue the event
      under a session nothing reads, and fail on it); a parameter /call/v2/<api_name> does not take: 422;
    - a result stream of an unknown event or session (/call/<api_name>/<event_id>, /queue/data): 404 before the
      stream starts (gradio starts it, then fails inside it);
    - an upload when the app has no component that takes files: 404 (gradio would keep the file and answer with
      its absolute path on the server);
    - a refusal (a gr.Error) of an event called through /run/<api_name>: 422, where gradio answers 500."""

    def __init__(self, app, max_bytes: int, max_url_bytes: int = 8 * 1024):
        self.app, self.max_bytes, self.max_url_bytes = app, max_bytes, max_url_bytes
        self._uploads: dict[int, bool] = {}  # id(blocks) -> whether it takes uploads

    def _too_large(self) -> str:
        return f"request body over {self.max_bytes} bytes: this app takes no files"

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method = scope["path"], scope["method"]

        def logged(why: str) -> None:
            log.warning("refused: %s %s: %s", method, _said(path, 120), why)

        async def refuse(status: int, detail: str, why: str | None = None):
            logged(why or detail)
            await JSONResponse({"detail": detail}, status_code=status)(scope, receive, send)

        url_bytes = len(scope.get("raw_path") or path.encode()) + len(scope.get("query_string") or b"")
        if url_bytes > self.max_url_bytes:
            return await refuse(414, f"URL over {self.max_url_bytes} bytes",
                                f"URL of {url_bytes} bytes, over {self.max_url_bytes}")
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if len(declared) > 12 or not declared.isdigit() or int(declared) > self.max_bytes:
            return await refuse(413, self._too_large(),
                                f"Content-Length {_said(declared.decode('latin-1'), 20)}: {self._too_large()}")
        received, started = 0, False

        async def limited_receive():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:  # a chunked body that grew past the limit: FastAPI answers 413
                logged(self._too_large())
                raise HTTPException(413, detail=self._too_large())
            return message

        app = scope.get("app")
        blocks = app.get_blocks() if hasattr(app, "get_blocks") else None
        next_receive = limited_receive
        if blocks is not None and path.startswith("/gradio_api/"):
            if path in _UPLOAD_ROUTES and not self._takes_uploads(blocks):
                return await refuse(404, "this app takes no uploads")
            if method == "GET":
                why = self._unknown_stream(blocks, path, scope)
                if why:
                    return await refuse(404, "no such event or session in this app", why)
            elif method == "POST":
                route = next((r for r in _EVENT_ROUTES if r.fullmatch(path)), None)
                if route is not None:
                    try:
                        body = await self._read_body(receive)
                    except _TooLarge:
                        return await refuse(413, self._too_large())
                    status, why = self._check_event(blocks, route, path, body)
                    if status:
                        return await refuse(status, why)
                    next_receive = _replay(body, receive)

        rewrite = method == "POST" and path.startswith(("/gradio_api/run/", "/gradio_api/api/"))
        held: list = []

        async def watched_send(message):
            nonlocal started
            if rewrite and (held or (message["type"] == "http.response.start" and message["status"] == 500)):
                held.append(message)  # perhaps a refusal gradio answers with 500: decided on its body
                if message["type"] == "http.response.body" and not message.get("more_body"):
                    await self._send_refusal_or_error(held, send, method, path)
                    started = True
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, next_receive, watched_send)
        except (KeyError, FnIndexInferError) as error:
            if started or not path.startswith("/gradio_api/"):
                raise
            await refuse(404, "no such event in this app", f"names no event of this app ({_said(str(error))})")
        except TypeError as error:  # /call/v2/<api_name> given a parameter the endpoint does not take
            if started or not path.startswith("/gradio_api/call/v2/"):
                raise
            said = str(error).split(". ")[0]
            await refuse(422, said, said)

    def _takes_uploads(self, blocks) -> bool:
        if id(blocks) not in self._uploads:
            self._uploads[id(blocks)] = takes_uploads(blocks)
        return self._uploads[id(blocks)]

    async def _read_body(self, receive) -> bytes:
        """The whole request body (it is at most `max_bytes`: an event's values)."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                raise _TooLarge
            if not message.get("more_body"):
                break
        return b"".join(chunks)

    @staticmethod
    def _check_event(blocks, route, path: str, body: bytes) -> tuple[int, str]:
        """(a 4xx status, why) for a request naming an event it cannot run, or a body that is not one; (0, "") to
        let gradio answer."""
        nesting = _nesting(body)
        if nesting > MAX_NESTING:
            return 400, f"request body nested {nesting} deep: at most {MAX_NESTING}"
        try:
            data = json.loads(body)
        except ValueError as error:  # not UTF-8, not JSON, or an integer past Python's 4,300-digit limit
            return 400, f"request body is not JSON this app can read: {_said(str(error), 100)}"
        if not isinstance(data, dict):
            return 422, f"request body is a JSON {type(data).__name__}: it must be an object"
        api_name = route.fullmatch(path).group(1) or None
        v2 = "/call/v2/" in path
        if not v2:  # the body of gradio's PredictBody: what this guard reads of it, of the type gradio takes
            for key, kind, allowed in (("data", list, "must be a list of the event's values"),
                                       ("session_hash", str, "must be a string naming the session"),
                                       ("fn_index", int, "must be a whole number")):
                value = data.get(key)
                if value is None and key == "data":
                    return 422, f"data was not given: {allowed}"
                if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
                    return 422, f"{key}={_said(repr(value), 40)} is not allowed: {allowed}"
            session_hash = data.get("session_hash")
            if isinstance(session_hash, str) and not session_hash.strip():
                return 400, "session_hash is empty: name the session the event belongs to"
        fns = blocks.fns  # a session's own (gr.render adds events to it), once it has one
        session_hash = None if v2 else data.get("session_hash")
        if isinstance(session_hash, str) and session_hash in blocks.state_holder:
            fns = blocks.state_holder[session_hash].blocks_config.fns
        index = None if v2 else data.get("fn_index")
        if index is not None:
            fn = fns.get(index)
        else:
            fn = next((f for f in fns.values() if api_name and f.api_name == api_name), None)
        if fn is None:
            return 404, "no such event in this app"
        if fn.fn is None:
            return 404, f"{fn.api_name or fn.name} runs in the browser: there is nothing on the server to call"
        return 0, ""

    @staticmethod
    def _unknown_stream(blocks, path: str, scope) -> str | None:
        """Why a GET of a result stream names nothing gradio holds (it would start the stream, then fail in it),
        or None: the same rule gradio's stream applies on its first read."""
        queue = blocks._queue
        if path.rstrip("/") == "/gradio_api/queue/data":
            session = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"))).get("session_hash", "")
        else:
            match = _RESULT_STREAM.fullmatch(path)
            if match is None:
                return None
            event_id = match.group(1)
            event = queue.event_ids_to_events.get(event_id)
            session = event.session_hash if event is not None else next(
                (s for s, ids in list(queue.pending_event_ids_session.items()) if event_id in ids), event_id)
        if session in queue.pending_messages_per_session:
            return None
        return f"no pending event for session {_said(session, 40)!r}"

    @staticmethod
    async def _send_refusal_or_error(held: list, send, method: str, path: str) -> None:
        """gradio's /run/ route answers every error with 500: a gr.Error (a refusal, its message shown) becomes 422;
        anything else (a real failure: no message) stays 500."""
        body = b"".join(m.get("body", b"") for m in held[1:])
        try:
            refusal = isinstance(json.loads(body).get("error"), str)
        except (ValueError, AttributeError):
            refusal = False
        start = dict(held[0])
        if refusal:
            start["status"] = 422
        for message in (start, *held[1:]):
            await send(message)


class _TooLarge(Exception):
    pass


def _replay(body: bytes, receive):
    """A receive that hands over `body` (read already) once, then waits on the client (its disconnect)."""
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return replayed
