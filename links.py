"""A result as a link, and a link back as the page's controls: the request as a query (`Request.to_query`), the
page's tab and view beside it; a link is anyone's to write, so what it gets wrong is ignored and quoted as text.
"""
from __future__ import annotations

import re
from urllib.parse import quote, urlencode

import gradio as gr

from handlers import DEFAULT_SOURCE, ENV
from profiling import reports
from profiling.request import Request
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


def prefill(http: gr.Request) -> list:
    """Page load: the controls, the tab and a sweep's values and axis from the URL's query (bad parameters ignored, with a
    visible note quoting them as literal text: a link is anyone's to write), and the tab the link opens on."""
    params = dict(http.query_params)
    request, problems = Request.from_query(params, ENV.device, DEFAULT_SOURCE, PAGE_KEYS)
    page = {"mode": "compare", "view": "page"}
    for key, allowed in (("mode", MODES), ("view", VIEWS)):
        if key in params:
            try:
                page[key] = choice(key, params[key], allowed)
            except Refusal as error:
                problems.append((f"{key}={params[key]}", error.limit))
    said = [f"{reports.literal(what)}: {why}" for what, why in problems]
    if len(said) > MAX_NOTED:
        said[MAX_NOTED:] = [f"and {len(said) - MAX_NOTED} more"]
    notice = ("⚠️ Ignored from the link: " + "; ".join(said)) if said else ""
    seqs = ",".join(map(str, request.seq_lens or ()))
    return [*request.values(), notice, seqs, request.axis, gr.Tabs(selected=page["mode"]), page["mode"]]
