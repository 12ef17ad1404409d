"""Shared test setup: GPU tests deselected without a GPU; the app served in-process; a free port; joining
the app's queue as the page does; what every answer's headline must get right."""
from __future__ import annotations

import json
import os
import re
import socket
import sys

import httpx
import pytest
import torch


def pytest_collection_modifyitems(config, items):
    """GPU tests run where there is a GPU; elsewhere they are deselected (and counted), not skipped."""
    if torch.cuda.is_available():
        return
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if gpu:
        config.hook.pytest_deselected(items=gpu)
        items[:] = [item for item in items if not item.get_closest_marker("gpu")]


def pytest_collection_finish(session):
    """Start, in other processes, the slow work the selected tests will take (background.py): the memory probes,
    and the app for the browser tests, so that both overlap the tests that run before theirs."""
    import background

    wants = {name for item in session.items for name in item.fixturenames}
    if "probed" in wants:
        background.started["probes"] = background.Probes(sys.modules["test_memory_estimate"].PROBES)
    if "served" in wants and os.path.exists(sys.modules["test_browser"].CHROMIUM):
        background.started["app"] = background.App(free_port())


def pytest_sessionfinish(session):
    import background

    app = background.started.pop("app", None)
    if app is not None:
        app.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fn_index(name: str) -> int:
    """The app's first event whose handler is `name` (the page's own events are private: not in the API's docs)."""
    import app

    return next(i for i, fn in app.demo.fns.items() if fn.name == name)


def queued(base: str, index: int, data: list, session: str, timeout: float = 120) -> dict:
    """Join the queue as the page does, and read the event's stream until it completes."""
    with httpx.Client(base_url=base, timeout=timeout) as http:
        joined = http.post("/gradio_api/queue/join", json={"data": data, "fn_index": index, "session_hash": session})
        assert joined.status_code == 200, joined.text
        with http.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    message = json.loads(line[5:])
                    if message.get("msg") == "process_completed":
                        return message
    raise AssertionError("the event never completed")


@pytest.fixture(scope="session")
def app_url():
    """`app.demo` launched in this process (no browser, no share link); closed after the session."""
    import app

    port = free_port()
    app.demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **app.LAUNCH)
    yield f"http://127.0.0.1:{port}/"
    app.demo.close()


@pytest.fixture(scope="session")
def client(app_url):
    from gradio_client import Client

    return Client(app_url, verbose=False)


# -- the headline: what a reader takes away, so every number in it is checked against the runs -----------------
def read_fact(answer: dict, source: str):
    """A fact's source ("a.timing.median_ms", "b.timing.kept", "sweep.runs[2].timing.median_ms") read again from
    the answer as the client got it (a sweep's answer is the sweep)."""
    value = answer
    for name, index in re.findall(r"(\w+)(?:\[(\d+)\])?", source.removeprefix("sweep.")):
        value = len(value.get("samples_ms") or []) if name == "kept" else value[name]
        if index:
            value = value[int(index)]
    return value


def check_headline(answer: dict) -> str:
    """The answer's headline, once checked against its own runs: named for both variants and the device they ran on
    (never "here": a replay is shown elsewhere), every number it quotes read from the runs, and a winner only where
    the winner's figure is the lower one, by the ratio it states. Returns the title."""
    from attention_variants import VARIANTS
    from profiling import text
    from profiling.environment import Environment

    headline, a, b = answer["headline"], answer["a"], answer["b"]
    title = headline["title"]
    assert answer["verdict"] == title
    assert f"{VARIANTS[a['variant']].label} [A]" in title and f"{VARIANTS[b['variant']].label} [B]" in title, title
    assert text.on_device(Environment.from_dict(a["environment"])) in title, title
    assert not re.search(r"\bhere\b", title), title
    facts = headline["facts"]
    for name, fact in facts.items():
        if re.fullmatch(r"[ab](\.\w+)+", fact["source"]):
            assert read_fact(answer, fact["source"]) == fact["value"], (name, fact)
    ranked = re.search(r"\[(A|B)\] is (\S+)× faster than .* \[(A|B)\]", title)
    if ranked:
        fast, slow = ranked.group(1).lower(), ranked.group(3).lower()
        assert facts[fast]["value"] < facts[slow]["value"], title
        assert abs(facts["ratio"]["value"] - facts[slow]["value"] / facts[fast]["value"]) < 1e-9
        assert ranked.group(2) == text.times(facts["ratio"]["value"]).rstrip("×"), title
    for side in ("a", "b"):
        if side in facts:
            assert text.ms(facts[side]["value"]) in title, title
    return title
