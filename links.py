"""A result as a link, and a link back as the page's controls: the request as a query (`Request.to_query`), the
page's tab and view beside it; a link is anyone's to write, so what it gets wrong is ignored and quoted as text.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, replace
from urllib.parse import parse_qsl, quote, urlencode

import gradio as gr

from handlers import DEFAULT_SOURCE, ENV
from profiling import reports
from profiling.request import LIVE_BUDGET_S, Request
from profiling.workload import Refusal, choice

HOST = re.compile(r"[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?")


def page_address(request) -> str:
    """The app's public address: behind a proxy (Spaces) the forwarded host, when it is a host name."""
    host = request.headers.get("x-forwarded-host", "").split(",")[0].strip()
    if HOST.fullmatch(host):
        proto = request.headers.get("x-forwarded-proto", "https").split(",")[0].strip()
        return f"{'http' if proto == 'http' else 'https'}://{host}/"
    return str(request.base_url)


MODES = {"compare": "A vs B", "sweep": "A vs B over S"}
VIEWS = {"page": "the whole page", "present": "presentation: large type, one screen",
         "embed": "blog embed: no header, the answer first"}
PAGE_KEYS = ("mode", "view")


def share_link(http: gr.Request, request: Request, mode: str = "compare", view: str = "page") -> str:
    """A link that reproduces a comparison (or sweep): the app's address plus the request as a query."""
    query = request.to_query() | ({"mode": mode} if mode != "compare" else {}) | ({"view": view} if view != "page" else {})
    return f"{page_address(http)}?{urlencode(query)}"


def view_links(link: str) -> str:
    """The same result in the other views, one click away (the link is the server's own, percent-encoded)."""
    safe = quote(link, safe=":/?&=,%+")
    joiner = "&" if "?" in safe else "?"
    return (f"Open this result as a [presentation]({safe}{joiner}view=present) (large type, one screen) · "
            f"a [blog embed]({safe}{joiner}view=embed) (no header, the answer first; in an iframe 760 px wide)")


MAX_NOTED = 8  # problems listed from one link; the rest are counted


@dataclass(frozen=True)
class Opening:
    """What a link opens on: its request (defaults where a parameter is absent or wrong), the tab and the view, and
    each parameter set aside (as written, and why)."""
    request: Request
    mode: str
    view: str
    problems: list[tuple[str, str]]

    def asked(self) -> Request:
        """The request the link's answer is of: its sweep, or its comparison (the sweep's values and axis aside)."""
        return self.request if self.mode == "sweep" else replace(self.request, seq_lens=None, axis="seq_len")


def opening(params: dict) -> Opening:
    """A link's query read once, the same way for the controls it sets (`prefill`) and the answer it opens on
    (app's open_link)."""
    request, problems = Request.from_query(params, ENV.device, DEFAULT_SOURCE, PAGE_KEYS)
    page = {"mode": "compare", "view": "page"}
    for key, allowed in (("mode", MODES), ("view", VIEWS)):
        if key in params:
            try:
                page[key] = choice(key, params[key], allowed)
            except Refusal as error:
                problems.append((f"{key}={params[key]}", error.limit))
    return Opening(request, page["mode"], page["view"], problems)


def prefill(http: gr.Request) -> list:
    """Page load: the controls, the tab and a sweep's values and axis from the URL's query (bad parameters ignored,
    with a visible note quoting them as literal text: a link is anyone's to write)."""
    opened = opening(dict(http.query_params))
    said = [f"{reports.literal(what)}: {why}" for what, why in opened.problems]
    if len(said) > MAX_NOTED:
        said[MAX_NOTED:] = [f"and {len(said) - MAX_NOTED} more"]
    notice = ("⚠️ Ignored from the link: " + "; ".join(said)) if said else ""
    request = opened.request
    seqs = ",".join(map(str, request.seq_lens or ()))
    return [*request.values(page=True), notice, seqs, request.axis, gr.Tabs(selected=opened.mode)]


# -- a link's preview: what a chat or a social card shows before anyone opens it ----------------------------------
def preview_meta(params: dict) -> str:
    """The <meta> tags of a link's preview (Open Graph and Twitter): A vs B and what the link's answer is of (the
    machine, recorded or live, the workload and its pass), read from its query as the page will read it."""
    from attention_variants import VARIANTS
    from handlers import RECORDINGS
    from profiling import text

    opened = opening(params)
    request, sweep = opened.asked(), opened.mode == "sweep"
    over = f" over {text.axis_symbol(request.axis)}" if sweep else ""
    title = f"{VARIANTS[request.a].label} vs {VARIANTS[request.b].label}{over} · Attention Profiler"
    if request.live:
        said = text.problem(request.workload, request.axis if sweep else None, request.seq_lens or ())
        try:  # as Run would plan it: a link to a run this machine refuses does not promise one
            from profiling import session
            session.plan(request, budget_s=LIVE_BUDGET_S[ENV.device], sweep=sweep)
            description = f"Runs live on {ENV.device_name} when asked · {said}"
        except Refusal as error:
            why = {"memory": "too large for its memory", "time": "longer than a live run may take"}.get(
                error.kind, error.limit.split(";")[0])
            description = f"Asks for a live run that {ENV.device_name} refuses: {why} · {said}"
        except Exception:  # a plan that fails otherwise: a preview is a courtesy, it promises nothing then
            description = f"Asks for a live run on {ENV.device_name} · {said}"
    else:
        description = text.measured(False, request.source, RECORDINGS[request.source], request.workload,
                                    request.axis if sweep else None, request.seq_lens or () if sweep else ())
    tags = {"og:title": title, "og:description": description, "og:type": "website",
            "twitter:card": "summary", "twitter:title": title, "twitter:description": description}
    return "".join(f'<meta {"property" if key.startswith("og:") else "name"}="{key}" content="{html.escape(value)}">'
                   for key, value in tags.items())


class LinkPreview:
    """ASGI middleware: the page's HTML (GET /) gets the preview tags of its own link in its <head>; a crawler runs
    no script, so they are written by the server. Everything else passes untouched."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "GET" or scope["path"] != "/":
            return await self.app(scope, receive, send)
        start, body = None, []

        async def held(message):
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body":
                return await send(message)
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return
            page = b"".join(body)
            headers = dict(start.get("headers", []))
            if b"text/html" in headers.get(b"content-type", b"") and b"</head>" in page:
                params = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
                try:
                    tags = preview_meta(params).encode()
                except (Refusal, KeyError):  # a preview is a courtesy: never the reason a page fails to open
                    tags = b""
                page = page.replace(b"</head>", tags + b"</head>", 1)
            start["headers"] = [(k, v) for k, v in start.get("headers", []) if k != b"content-length"] + [
                (b"content-length", str(len(page)).encode())]
            await send(start)
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, held)
