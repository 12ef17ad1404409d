"""Shared test setup: GPU tests deselected without a GPU; the app served in-process; a free port; joining
the app's queue as the page does; what every answer's headline must get right."""
from __future__ import annotations

import json
import os
import re
import socket

import httpx
import pytest

# Two workers, Chromium and the app share this 2-core machine: PyTorch's OpenMP threads, left to spin between parallel
# regions as libgomp does by default, burn the cores the other processes wait for (~15 s of a 3-minute run, measured).
# Passive threads sleep instead. Set before any process of the run loads OpenMP: the workers and every process a test
# starts inherit it. It changes how idle threads wait, not what any test checks; the app itself keeps the default.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


# Every plan prices its request as on an idle machine (`budget.machine_load` reads this figure instead of the load
# average), so that no test's refusal or acceptance depends on this shared machine's load; set here, every process a
# test starts (the app a browser test drives, the ZeroGPU worker) prices alike. A test of the load's pricing sets its own.
os.environ["ATTENTION_PROFILER_CPU_LOAD"] = "0"


def pytest_configure(config):
    """pytest looks for unraisable exceptions at the end after five full garbage collections (~0.4 s each in a process
    holding torch and gradio: the last ~2 s of every run, both cores idle); one finds what they would, as pytest's own
    pytester sets it. (A private knob: a pytest without it keeps its five.)"""
    try:
        from _pytest.unraisableexception import gc_collect_iterations_key
    except ImportError:
        return
    config.stash[gc_collect_iterations_key] = 1


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which names each test's group in its id
def pytest_collection_modifyitems(config, items):
    """GPU tests run where there is a GPU; elsewhere they are deselected (and counted), not skipped.
    A run over processes (pyproject's addopts: pytest-xdist, --dist loadgroup) hands out a module at a time, so that
    a module's fixtures are made once, in one process; the browser tests' two modules (one app served for both) as
    one unit, handed out first: they wait on the page more than they use the CPU, and the rest fills the other
    process meanwhile."""
    import torch  # here, not at the top: the process that spreads a run over workers never collects, nor needs torch

    if not torch.cuda.is_available():
        gpu = [item for item in items if item.get_closest_marker("gpu")]
        if gpu:
            config.hook.pytest_deselected(items=gpu)
            items[:] = [item for item in items if not item.get_closest_marker("gpu")]
            if hasattr(config, "workeroutput"):  # a worker's deselections never reach the summary: say them there
                config.workeroutput["gpu_deselected"] = len(gpu)
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    if hasattr(config, "workerinput"):  # in one process the app starts at collection, beside the tests before them
        items.sort(key=handed_out)  # stable: each module's tests stay in file order


# The modules that cost most, dearest first (seconds on this 2-core machine, 2026-12-07, child processes and
# Chromium included: chart labels 106, app 63, explain 56, memory 32, safety 30, latency 19, measurement 16, ...):
# handed out right after the browser tests, so that the run does not end on one of them while the other process has
# nothing left. The rest follow in file order. The order changes only how long a run takes.
DEAREST = ("test_chart_labels", "test_app", "test_explain_recorded", "test_memory_estimate", "test_safety_app",
           "test_latency", "test_measurement_cpu", "test_mutations", "test_context_parallel", "test_recording",
           "test_cli", "test_zerogpu")


def handed_out(item) -> int:
    group = item.get_closest_marker("xdist_group").args[0]
    return -1 if group == "browser" else DEAREST.index(group) if group in DEAREST else len(DEAREST)


GPU_DESELECTED: dict[str, int] = {}  # by worker, in a run over processes


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: this file loads without it too
def pytest_testnodedown(node, error):
    """A worker's end (pytest-xdist, in the process that spread the run): what it deselected for want of a GPU."""
    GPU_DESELECTED[node.gateway.id] = getattr(node, "workeroutput", {}).get("gpu_deselected", 0)


def pytest_terminal_summary(terminalreporter):
    if GPU_DESELECTED and max(GPU_DESELECTED.values()):
        terminalreporter.write_line(f"{max(GPU_DESELECTED.values())} GPU tests deselected: no CUDA GPU here")


def pytest_collection_finish(session):
    """Start, in another process, the slow work the selected tests will take (background.py): the app for the
    browser tests, so that its start-up overlaps the tests that run before theirs. Not in a worker of a run spread
    over processes (pytest-xdist: every worker collects every test and runs only some): there the browser tests'
    worker starts it when they first ask."""
    import background

    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    wants = {name for item in session.items for name in item.fixturenames}
    if "served" in wants and os.path.exists(CHROMIUM):
        background.started["app"] = background.App(free_port())


CHROMIUM = "/usr/bin/chromium"  # the system's: nothing is downloaded
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="session")
def served():
    """`python app.py` on a free port given through $PORT, as a host would start it, with a scratch folder a dead
    process left an hour ago in its temp dir (background.App): started as the session began, so its start-up
    overlaps the tests before the browser's; waited for here; one for every browser test of the session."""
    import json
    import time
    import urllib.request

    import background
    host = background.started.pop("app", None) or background.App(free_port())
    deadline = time.monotonic() + 180  # a loaded machine's start-up: imports of torch and gradio
    while True:
        try:
            urllib.request.urlopen(host.url, timeout=2)
            break
        except OSError:
            if host.process.poll() is not None or time.monotonic() > deadline:
                host.process.kill()
                pytest.fail(f"app.py did not start: see {host.log.name}")
            time.sleep(0.2)
    config = json.load(urllib.request.urlopen(host.url + "config"))
    events = {d["api_name"]: d["id"] for d in config["dependencies"] if d.get("api_name")}
    yield type("Served", (), {"url": host.url, "stale": host.stale, "events": events, "log": host.log.name,
                             "pid": host.process.pid})
    host.stop()


@pytest.fixture(scope="module")
def chromium():
    """A headless Chromium for a module's browser tests, closed at its end: Playwright's sync API holds an event loop
    on this thread while it runs, and a later test's asyncio.run would find it running."""
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


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


def assert_refused_by_link_and_command_line(field: str, spelled: str, *more: str, source: str = "h200-torch2.11"):
    """`field` spelled as `spelled` is dropped from a link (its problem named first) and stops the command line."""
    import argparse

    from profiling.request import Request
    request, problems = Request.from_query({field: spelled}, "cpu", source)
    assert getattr(request.workload, field) is None and problems[0][0] == f"{field}={spelled}"
    parser = argparse.ArgumentParser()
    Request.add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["naive", "flex", f"--{field.replace('_', '-')}", spelled, *more])

