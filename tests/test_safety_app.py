"""The app as a hostile or busy visitor meets it, over HTTP on 127.0.0.1 (the app served in this process):
no entry skips the queue, a cancel stops the work before the queue moves on, results are kept by an id only the
page holds (other visitors cannot push them out; a made-up id fetches nothing), no file is served that the server
did not write for a result, bodies are bounded, sessions are bounded, errors name the field in plain text and log
one line, links cannot inject markup."""
from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import httpx
import pytest

import app
import handlers
from conftest import fn_index, queued
from profiling import reports, scratch, session
from profiling.replay import find_recorded
from profiling.request import KEYS, Request, sources
from profiling.results import Comparison
from profiling.workload import Workload
from handlers import ResultStore
from serving import MAX_NESTING

ROOT = Path(__file__).resolve().parent.parent
RECORDING = "h200-torch2.11"
BLOG = Workload.blog()
# KEYS' values, as the page and the API send them (every field the workload has)
REPLAY = Request.build(RECORDING, "sdpa_flash", "sdpa_cudnn", {}, "cpu").values()
LIVE = Request.build("live", "naive", "sdpa_flash", dict(batch=1, heads=2, seq_len=128, head_dim=32), "cpu").values()
HTTP = SimpleNamespace(query_params={}, headers={}, base_url="http://127.0.0.1:7860/", session_hash="s1")
ENTITIES = ("&lt;", "&gt;", "&amp;", "&quot;", "&#")


def with_(data: list, **changes) -> list:
    return [changes.get(key, value) for key, value in zip(KEYS, data)]


def called(base: str, data: list, api_name: str = "compare") -> tuple[str, object]:
    """The documented REST way: POST /gradio_api/call/<api>, then read its result stream."""
    with httpx.Client(base_url=base, timeout=120) as http:
        posted = http.post(f"/gradio_api/call/{api_name}", content=json.dumps({"data": data}),
                           headers={"content-type": "application/json"})
        assert posted.status_code == 200, posted.text
        text = http.get(f"/gradio_api/call/{api_name}/{posted.json()['event_id']}").text
    event = text.split("event: ")[-1].split("\n")[0]
    return event, json.loads(text.split("data: ")[-1])


class Joined:
    """An event joined as the page joins it, its stream read in the background (so it can be cancelled)."""

    def __init__(self, base: str, index: int, data: list, session: str):
        self.base, self.index, self.session, self.message = base, index, session, None
        joined = httpx.post(f"{base}gradio_api/queue/join", timeout=30,
                            json={"data": data, "fn_index": index, "session_hash": session})
        assert joined.status_code == 200, joined.text
        self.event_id = joined.json()["event_id"]
        self.thread = threading.Thread(target=self._read)
        self.thread.start()

    def _read(self) -> None:
        with httpx.stream("GET", f"{self.base}gradio_api/queue/data", params={"session_hash": self.session},
                          timeout=120) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:") and json.loads(line[5:]).get("msg") == "process_completed":
                    self.message = json.loads(line[5:])
                    return

    def cancel(self) -> httpx.Response:
        """What the page sends when its visitor leaves: returns once the server has ended the event."""
        return httpx.post(f"{self.base}gradio_api/cancel", timeout=120,
                          json={"session_hash": self.session, "fn_index": self.index, "event_id": self.event_id})

    def result(self, timeout: float = 120) -> dict:
        self.thread.join(timeout)
        assert self.message is not None, "the event never completed"
        return self.message


def files_in(output) -> list[dict]:
    """Every file a response offers (gradio's FileData dicts), wherever they sit in the outputs."""
    if isinstance(output, dict):
        found = [output] if output.get("path") and "url" in output else []
        return found + [f for value in output.values() for f in files_in(value)]
    if isinstance(output, list):
        return [f for value in output for f in files_in(value)]
    return []


# -- 1. no entry skips the queue; a cancel ends the work before the queue moves on ----------------------------------
def test_the_rest_routes_refuse_every_queued_event(app_url):
    """/gradio_api/run/<name> and /gradio_api/api/<name> would run an event outside the queue and its
    concurrency limit of 1: every queued event, by name or by index, is refused there."""
    queued_fns = [i for i, fn in app.demo.fns.items() if fn.queue]
    assert {fn_index(name) for name in ("compare", "run_compare", "show", "sweep", "run_sweep")} <= set(queued_fns)
    with httpx.Client(base_url=app_url, timeout=30) as http:
        for name in ("compare", "replay", "sweep", "sweep_replay", "run_compare", "show"):
            for route in (f"/gradio_api/run/{name}", f"/gradio_api/api/{name}"):
                answer = http.post(route, json={"data": LIVE})
                assert answer.status_code == 404 and "join the queue" in answer.json()["detail"], route
        for index in queued_fns:
            answer = http.post("/gradio_api/run/predict", json={"data": [None] * 10, "fn_index": index})
            assert answer.status_code == 404, (index, answer.text)


def test_live_runs_never_overlap_whichever_door_they_come_through(app_url, monkeypatch):
    """The public endpoint, the REST call and the page's own event share one slot: one live run at a time."""
    spans, lock = [], threading.Lock()
    replay = session.compare

    def timed(request, **kwargs):  # stands in for a measurement: holds the slot a moment, answers a replay
        start = time.monotonic()
        time.sleep(0.3)
        with lock:
            spans.append((start, time.monotonic()))
        return replay(Request.build(RECORDING, request.a, request.b, {}, "cpu"))
    monkeypatch.setattr(session, "compare", timed)
    answers = {}

    def direct(i):
        answers[f"direct {i}"] = httpx.post(f"{app_url}gradio_api/run/compare", json={"data": LIVE}, timeout=60)

    def through_queue(i):
        answers[f"queued {i}"] = called(app_url, LIVE)

    def the_page(i):
        answers[f"page {i}"] = queued(app_url, fn_index("run_compare"), LIVE, f"page-{i}")

    threads = [threading.Thread(target=f, args=(i,)) for i in range(2) for f in (direct, through_queue, the_page)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for i in range(2):
        assert answers[f"direct {i}"].status_code == 404
        event, data = answers[f"queued {i}"]
        assert event == "complete" and data[0]["a"]["status"] == "ok"
        assert answers[f"page {i}"]["success"]
    spans.sort()
    assert len(spans) == 4  # only the queued calls ran
    assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:])), "two live runs overlapped"


def test_every_live_run_is_measured_on_one_thread_and_replays_on_others(monkeypatch):
    """The profiler's library registers on the thread that first starts it and logs an error when a later start comes
    from another: two live runs, even at once, run on the same thread (in turn); replays keep a pool of their own."""
    threads, replay = {}, session.compare

    def measured(request, **kwargs):  # stands in for a measurement: records its thread, answers a replay
        threads.setdefault("live" if request.live else "replay", []).append(threading.get_ident())
        time.sleep(0.2)
        return replay(Request.build(RECORDING, request.a, request.b, {}, "cpu"))
    monkeypatch.setattr(session, "compare", measured)
    live, recorded = (Request.from_values(dict(zip(KEYS, values)), "cpu") for values in (LIVE, REPLAY))

    async def at_once():
        await asyncio.gather(*(handlers.serve("compare", r, lambda *a, **k: None, keep=False)
                               for r in (live, live, recorded, recorded)))
    asyncio.run(at_once())
    asyncio.run(at_once())  # another event loop, another pool: the same live thread
    assert len(threads["live"]) == 4 and len(set(threads["live"])) == 1
    assert len(threads["replay"]) == 4 and not set(threads["replay"]) & set(threads["live"])


def test_a_cancelled_live_run_stops_at_a_safe_point_and_holds_the_queue_until_it_has(app_url, monkeypatch):
    started, spans = threading.Event(), {}
    replay = session.compare

    def measuring(request, *, cancelled, **kwargs):  # a measurement that checks its cancel at safe points
        begun = time.monotonic()
        if request.a == "naive":
            started.set()
            deadline = begun + 30
            while not cancelled() and time.monotonic() < deadline:
                time.sleep(0.01)
            spans["saw the cancel"] = cancelled()
            time.sleep(0.3)  # the rest of the step in progress, up to its next safe point
        spans[request.a] = (begun, time.monotonic())
        return replay(Request.build(RECORDING, request.a, request.b, {}, "cpu"))
    monkeypatch.setattr(session, "compare", measuring)

    first = Joined(app_url, fn_index("run_compare"), LIVE, "leaving-" + secrets.token_hex(4))
    assert started.wait(30)
    second = Joined(app_url, fn_index("compare"), with_(LIVE, a="sdpa_math"), "next-" + secrets.token_hex(4))
    assert first.cancel().json() == {"success": True}
    assert spans["saw the cancel"] and "naive" in spans  # the work itself stopped, before the cancel returned
    assert first.result()["output"] == {}  # nothing sent for a cancelled event
    assert second.result()["success"]
    assert spans["sdpa_math"][0] >= spans["naive"][1], "the next live run started while the cancelled one ran"
    assert not handlers.RUNNING  # no cancel flag left behind


# -- 2. results are kept by an id only the page holds --------------------------------------------------------------
def _rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))


def test_a_kept_result_survives_40_other_sessions_and_what_sessions_keep_stays_bounded(app_url):
    replay = fn_index("run_compare_replay")
    mine = secrets.token_hex(8)
    ran = queued(app_url, replay, with_(REPLAY, a="naive", b="naive_inplace", seq_len=4096), mine)
    assert ran["success"], ran
    answer, result_id = ran["output"]["data"]

    def visit(_):
        return queued(app_url, replay, REPLAY, secrets.token_hex(8))["success"]
    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(visit, range(20)))  # fill gradio's store of sessions: what it costs at its bound
        before = _rss()
        assert all(pool.map(visit, range(40)))
    grew = (_rss() - before) / before
    assert mine not in app.demo.state_holder.session_data  # gradio has forgotten my session ...
    assert len(app.demo.state_holder.session_data) <= app.SESSIONS_KEPT
    assert grew < 0.05, f"RSS grew {100 * grew:.1f}% over 40 new sessions"
    shown = queued(app_url, fn_index("show"), [result_id], mine)  # ... the id my page holds still shows my result
    assert shown["success"], shown
    link, _, _, measured_on, verdict, *_ = shown["output"]["data"]
    assert "a=naive&b=naive_inplace" in link and "S=4096" in measured_on
    assert "Naive (in-place masked\\_fill\\_) \\[B\\]" in verdict


CRAFTED_IDS = ["", "nope", "../../app.py", str(ROOT / "app.py"), "x" * 50_000, secrets.token_urlsafe(16), None,
               17, {"a": {"trace_path": str(ROOT / "app.py")}}, [str(ROOT / "app.py")]]


@pytest.mark.parametrize("event", ["show", "show_sweep"])
def test_a_crafted_or_unknown_result_id_fetches_nothing(app_url, event):
    for result_id in CRAFTED_IDS:
        shown = queued(app_url, fn_index(event), [result_id], secrets.token_hex(8))
        assert not shown["success"] and files_in(shown["output"]) == []
        assert shown["output"]["error"] == handlers.NOT_KEPT and "no longer kept" in shown["output"]["error"]


def test_a_kept_result_of_one_kind_is_not_shown_as_the_other():
    """The ids of both tabs are in the page: a comparison's id sent to the sweep tab (or the reverse) is refused
    in one line, not read as the wrong kind."""
    _, compare_id = asyncio.run(app.endpoint("compare", False, True)(*REPLAY, HTTP, None))
    _, sweep_id = asyncio.run(app.endpoint("sweep", False, True)(*REPLAY, "1024,4096", None, HTTP, None))
    for show, wrong in ((app.show, sweep_id), (app.show_sweep, compare_id)):
        with pytest.raises(gr.Error) as error:
            show(wrong, HTTP)
        assert error.value.message == handlers.NOT_KEPT


def test_a_kept_result_expires_and_the_store_stays_within_its_bytes():
    now = [0.0]
    store = ResultStore(max_bytes=10_000, max_age_s=60, clock=lambda: now[0])
    answer = object()
    first = store.put(answer, 600)
    assert store.get(first) is answer  # the object itself: no round trip through text
    now[0] = 61
    assert store.get(first) is None and len(store) == 0  # half an hour in the app: then gone
    kept = [store.put(i, 2_500) for i in range(5)]
    assert store.get(kept[0]) is None and store.get(kept[-1]) == 4  # over its bytes, the oldest go first
    assert store._bytes <= 10_000
    assert len({store.put("same", 1) for _ in range(100)}) == 100 and all(len(k) >= 22 for k in kept)
    assert (handlers.RESULTS.max_age_s, handlers.RESULTS.max_bytes) == (30 * 60, 128 * 2**20)


# -- 3. results carry no server paths; no file but the server's own is served -------------------------------------
def test_the_public_endpoint_sends_the_answer_alone_naming_no_server_file(app_url):
    kept = len(handlers.RESULTS)
    for data in (REPLAY, LIVE):
        event, output = called(app_url, data)
        assert event == "complete" and len(output) == 1  # the answer; no kept result's id
        result = output[0]
        assert set(result) == {"source", "measured", "a", "b", "verdict", "headline", "notes"}
        assert result["a"]["trace_path"] is None and result["b"]["trace_path"] is None
        text = json.dumps(result)
        assert str(ROOT) not in text and tempfile.gettempdir() + "/" not in text
    assert len(handlers.RESULTS) == kept  # nothing kept that no one holds an id to: the pages' results stay


@pytest.fixture()
def secrets_on_disk():
    """Files a crafted request would love to read: the app's source, its git pointer, a temp-dir dotfile."""
    dotfile = Path(tempfile.gettempdir()) / f".attention_profiler_secret_{secrets.token_hex(4)}"
    dotfile.write_text("secret")
    git = ROOT / ".git" / "config" if (ROOT / ".git").is_dir() else ROOT / ".git"  # a worktree has a .git file
    yield [ROOT / "app.py", git, dotfile]
    dotfile.unlink()


def test_a_shown_result_offers_only_the_servers_own_files(app_url, secrets_on_disk):
    session_hash = secrets.token_hex(8)
    ran = queued(app_url, fn_index("run_compare_replay"), REPLAY, session_hash)
    shown = queued(app_url, fn_index("show"), [ran["output"]["data"][1]], session_hash)
    assert shown["success"], shown
    offered = files_in(shown["output"]["data"])
    assert {Path(f["path"]).suffix for f in offered} == {".png", ".gz", ".csv", ".json"}
    with httpx.Client(timeout=30) as http:
        bodies = {f["path"]: http.get(f["url"]).content for f in offered}
    assert all(body not in (t.read_bytes() for t in secrets_on_disk) for body in bodies.values())
    # the recorded traces download as recorded: the server copied them from its recording
    for side, key in (("a", "sdpa_flash"), ("b", "sdpa_cudnn")):
        trace = next(body for path, body in bodies.items() if Path(path).name.startswith(f"{side}_{key}_B8"))
        assert trace == Path(find_recorded(RECORDING, key, BLOG).trace_path).read_bytes()


def test_the_file_route_serves_no_file_of_the_app_or_the_temp_dir(app_url, secrets_on_disk):
    with httpx.Client(base_url=app_url, timeout=30) as http:
        for target in secrets_on_disk:
            answer = http.get(f"/gradio_api/file={target}")
            assert answer.status_code in (403, 404) and answer.content != target.read_bytes()


def test_reshowing_a_live_result_whose_trace_was_pruned_hides_its_button():
    """A live trace the measurement's folder pruned since: no button to a missing file (it would 403), the rest
    still shown."""
    answer, result_id = asyncio.run(app.endpoint("compare", True, True)(*LIVE, HTTP, lambda *a, **k: None))
    kept = handlers.RESULTS.get(result_id).answer.result
    assert scratch.is_scratch_file(kept.a.trace_path) and scratch.is_scratch_file(kept.b.trace_path)
    Path(kept.a.trace_path).unlink()  # pruned
    shown = dict(zip(app.views, app.show(result_id, HTTP)))

    def file_of(button) -> Path:
        return Path(button.value["path"] if isinstance(button.value, dict) else button.value)
    assert not shown[app.side_a.trace].visible and shown[app.side_b.trace].visible
    assert file_of(shown[app.side_b.trace]).read_bytes() == Path(kept.b.trace_path).read_bytes()
    assert shown[app.timeline] == {"__type__": "update", "value": None, "visible": False}  # no trace left to draw
    for button in (app.side_a.csv, app.json_file, app.png_file):
        assert shown[button].visible and file_of(shown[button]).is_file()
    sent = file_of(shown[app.json_file]).read_text()
    assert tempfile.gettempdir() + "/" not in sent and json.loads(sent) == json.loads(json.dumps(answer))


def test_only_the_servers_own_folders_hold_servable_traces(tmp_path):
    assert not scratch.is_scratch_file(ROOT / "app.py")
    assert handlers.served_trace(str(ROOT / "app.py")) is None and handlers.served_trace(None) is None
    recorded = find_recorded(RECORDING, "naive", BLOG).trace_path
    assert handlers.served_trace(recorded) == Path(recorded)
    folder = scratch.process_folder("test")
    inside, link = folder / "x.json", folder / "link.json"
    inside.write_text("{}")
    link.symlink_to(ROOT / "app.py")
    try:
        assert scratch.is_scratch_file(inside) and not scratch.is_scratch_file(link)
        assert handlers.served_trace(str(link)) is None
        assert not scratch.is_scratch_file(tmp_path / "x.json")
    finally:
        shutil.rmtree(folder)  # its files and its lock


def test_view_folders_made_from_many_threads_at_once_never_fail():
    with ThreadPoolExecutor(8) as pool:
        folders = list(pool.map(lambda _: scratch.view_folder(keep=4), range(64)))
    assert len(set(folders)) == 64 and sum(f.exists() for f in folders) <= 4 + 1  # the newest kept, older removed


# -- 4. request bodies are bounded ------------------------------------------------------------------------------------
@pytest.mark.parametrize("route", ["/gradio_api/queue/join", "/gradio_api/call/compare", "/gradio_api/upload"])
def test_a_huge_body_is_refused_at_once(app_url, route):
    body = b'{"data": ["' + b"x" * (50 * 2**20) + b'"]}'
    start = time.perf_counter()
    answer = httpx.post(app_url.rstrip("/") + route, content=body, headers={"content-type": "application/json"},
                        timeout=30)
    # refused, not read and parsed: 413. The time is only bounded well under the client's timeout (sending 50 MiB
    # takes a quiet machine a second, a loaded one several): a server that read the body first would answer 400/500
    assert answer.status_code == 413 and time.perf_counter() - start < 25.0


def test_a_chunked_body_is_cut_off_past_the_limit(app_url):
    def chunks():
        for _ in range(64):
            yield b"x" * 2**20
    answer = httpx.post(app_url + "gradio_api/queue/join", content=chunks(), timeout=30,
                        headers={"content-type": "application/json"})
    assert answer.status_code == 413


def test_the_page_and_a_normal_request_still_pass(app_url):
    assert httpx.get(app_url, timeout=30).status_code == 200
    event, _ = called(app_url, REPLAY)
    assert event == "complete"


# -- 4b. hostile routes: a 4xx and one log line, never a 500 or a traceback (issue 21, item 6) ------------------------
def no_traceback(capfd, caplog) -> None:
    """Nothing gradio, uvicorn or the queue logged with a traceback (some of it after the response: a moment)."""
    time.sleep(0.3)
    assert "Traceback" not in capfd.readouterr().err
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records if r.exc_info]


def refusals_logged(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "attention_profiler"]


def raw_status(base: str, method: str, target: str, body: bytes = b"") -> int:
    """One request over a plain socket (httpx refuses a URL over 64 KB): its status."""
    host, port = base.split("//")[1].rstrip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(f"{method} {target} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        head = b""
        while b"\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
    return int(head.split()[1])


def test_an_unknown_parameter_of_a_named_call_is_a_422_naming_it(app_url, capfd, caplog):
    """/call/v2/<api_name> takes the endpoint's parameters by name: gradio failed with a 500 and a traceback."""
    answer = httpx.post(app_url + "gradio_api/call/v2/compare", json={**dict(zip(KEYS, LIVE)), "bogus": 1},
                        timeout=30)
    assert answer.status_code == 422 and "bogus" in answer.json()["detail"]
    assert httpx.post(app_url + "gradio_api/call/v2/compare", json=LIVE, timeout=30).status_code == 422  # a list
    no_traceback(capfd, caplog)
    assert len(refusals_logged(caplog)) == 2  # one line each
    good = httpx.post(app_url + "gradio_api/call/v2/replay", json=dict(zip(KEYS, REPLAY)), timeout=30)
    assert good.status_code == 200 and "event_id" in good.json()  # by name, every parameter it takes: joined


def hostile_bodies(index: int) -> dict[str, bytes]:
    """Bodies no client of this app sends, each for an event that exists (`index`) where it names one."""
    def body(**fields) -> bytes:
        return json.dumps({"data": LIVE, "fn_index": index, "session_hash": "hostile", **fields}).encode()
    deep_lists, deep_dicts = b"[" * 1000 + b"]" * 1000, b'{"a": ' * 1000 + b"1" + b"}" * 1000  # 2 KB and 6 KB
    return {
        "lists 1,000 deep": b'{"data": [' + deep_lists + b'], "fn_index": 0}',
        "dicts 1,000 deep": b'{"data": [' + deep_dicts + b']}',
        "lists 5,000 deep at the top": b"[" * 5000 + b"]" * 5000,
        "a body 17 deep": body(data=[json.loads(b"[" * (MAX_NESTING - 1) + b"]" * (MAX_NESTING - 1))]),
        "a number of 10^6 digits": b'{"data": [' + b"9" * 10**6 + b"]}",
        "a number of 5,000 digits": b'{"data": [' + b"9" * 5000 + b"]}",
        "invalid UTF-8": b'{"data": ["\xff\xfe"], "session_hash": "\xc3"}',
        "not JSON": b'{"data": [',
        "empty": b"",
        "NaN at the top": b"NaN",
        "NaN as fn_index": body(fn_index=math.nan),
        "Infinity as session_hash": body(session_hash=math.inf),
        "-Infinity as data": body(data=-math.inf),
        "a top-level array": json.dumps([LIVE]).encode(),
        "a top-level string": b'"compare"',
        "fn_index as text": body(fn_index=str(index)),
        "fn_index 1.5": body(fn_index=1.5),
        "fn_index true": body(fn_index=True),
        "fn_index a list": body(fn_index=[index]),
        "session_hash a number": body(session_hash=7),
        "session_hash a list": body(session_hash=["hostile"]),
        "session_hash an object": body(session_hash={"a": 1}),
        "data an object": body(data=dict(zip(KEYS, LIVE))),
        "data a string": body(data="live"),
        "data a number": body(data=14),
        "data null": body(data=None),
        "no data": json.dumps({"fn_index": index, "session_hash": "hostile"}).encode(),
    }


@pytest.mark.parametrize("route", ["/gradio_api/queue/join", "/gradio_api/call/compare", "/gradio_api/run/compare",
                                   "/gradio_api/call/replay"])
def test_a_malformed_nested_or_huge_body_is_a_4xx_in_one_log_line(app_url, route, capfd, caplog):
    """json.loads in the guard overran the stack on a body nested 1,000 deep (a 500 and a 57-line traceback); what
    gradio's own parser refused, it refused with no line in the log."""
    with httpx.Client(base_url=app_url, timeout=30) as http:
        for name, body in hostile_bodies(fn_index("compare")).items():
            caplog.clear()
            answer = http.post(route, content=body, headers={"content-type": "application/json"})
            assert 400 <= answer.status_code < 500, (name, answer.status_code, answer.text[:200])
            assert len(refusals_logged(caplog)) == 1, (name, refusals_logged(caplog))
            assert len(answer.text) < 400, name  # one line: the body is not sent back
    no_traceback(capfd, caplog)


@pytest.mark.parametrize("route", ["gradio_api/call/compare/{id}", "gradio_api/call/v2/replay/{id}",
                                   "gradio_api/queue/data?session_hash={id}", "gradio_api/queue/data?session_hash="])
def test_the_stream_of_an_unknown_event_or_session_is_a_404_before_it_starts(app_url, route, capfd, caplog):
    """gradio started the stream (200), then failed inside it: a traceback, and a client left with a broken
    stream; or, for a session that exists without events, a stream of heartbeats that never ends."""
    with httpx.stream("GET", app_url + route.format(id=secrets.token_hex(16)), timeout=10) as answer:
        assert answer.status_code == 404
    no_traceback(capfd, caplog)
    assert len(refusals_logged(caplog)) == 1


def test_the_stream_of_a_known_event_still_reads_to_its_end(app_url):
    event, data = called(app_url, REPLAY, "replay")  # POST, then GET /call/replay/<event_id>
    assert event == "complete" and data[0]["verdict"]


def js_only_events() -> list:
    return [fn for fn in app.demo.fns.values() if fn.fn is None]


def test_an_event_with_no_python_function_is_a_404_by_every_route(app_url, capfd, caplog):
    """The page's js-only events (a scroll, a `cancels=` click) have no handler: gradio raised IndexError with a
    traceback for each, by name or by index, through the queue or the REST route (500)."""
    events = js_only_events()
    assert len(events) >= 8 and any(fn.api_name.startswith("js_fn") for fn in events) \
        and any(fn.api_name.startswith("unnamed") for fn in events)
    with httpx.Client(base_url=app_url, timeout=30) as http:
        for fn in events:
            for route, body in ((f"/gradio_api/call/{fn.api_name}", {"data": []}),
                                (f"/gradio_api/run/{fn.api_name}", {"data": []}),
                                ("/gradio_api/queue/join", {"data": [], "fn_index": fn._id,
                                                            "session_hash": secrets.token_hex(8)}),
                                ("/gradio_api/run/predict", {"data": [], "fn_index": fn._id})):
                answer = http.post(route, json=body)
                assert answer.status_code == 404 and "runs in the browser" in answer.json()["detail"], (route, fn)
        for index in ("7", 1.5, True):  # gradio would read "7" as 7
            answer = http.post("/gradio_api/queue/join", json={"data": [], "fn_index": index, "session_hash": "s"})
            assert answer.status_code == 422, index
    no_traceback(capfd, caplog)
    assert len(refusals_logged(caplog)) == 4 * len(events) + 3


def test_validate_inputs_refuses_an_event_with_no_python_function_in_one_line():
    from serving import refuse_short_requests

    with pytest.raises(gr.Error) as error:
        refuse_short_requests(js_only_events()[0], [])
    assert "runs in the browser" in error.value.message and not error.value.print_exception


@pytest.mark.parametrize("value", [["live"], {"source": "live"}])
def test_an_instant_helper_given_a_list_or_an_object_is_a_422_in_one_line(app_url, value, capfd, caplog):
    """The page's instant helpers (outside the queue) take one value per control: `sweep_plan` given a list
    through /run/predict hashed it (TypeError: a traceback and a 500)."""
    plan = fn_index("sweep_plan")
    answer = httpx.post(app_url + "gradio_api/run/predict", timeout=30,
                        json={"data": [value], "fn_index": plan, "session_hash": secrets.token_hex(8)})
    assert answer.status_code == 422
    assert answer.json()["error"] == (f"sweep_plan takes one value for 'Source' (input 1); the request sent a "
                                      f"{type(value).__name__}")
    no_traceback(capfd, caplog)
    assert refusals_logged(caplog) == [f"refused: {answer.json()['error']}"]
    fine = httpx.post(app_url + "gradio_api/run/predict", timeout=30,
                      json={"data": ["live"], "fn_index": plan, "session_hash": secrets.token_hex(8)})
    assert fine.status_code == 200 and "Live on this" in fine.json()["data"][0]


def test_every_instant_helper_refuses_lists_and_the_queued_endpoints_leave_them_to_the_core(app_url, capfd, caplog):
    instant = [fn for fn in app.demo.fns.values() if fn.fn is not None and not fn.queue and fn.inputs]
    assert {"sweep_plan", "guesses", "switch_source", "stale_notice"} <= {fn.name for fn in instant}
    with httpx.Client(base_url=app_url, timeout=30) as http:
        for fn in instant:
            answer = http.post("/gradio_api/run/predict", json={"data": [["x"]] * len(fn.inputs), "fn_index": fn._id,
                                                                "session_hash": secrets.token_hex(8)})
            assert answer.status_code == 422 and "takes one value" in answer.json()["error"], fn.name
    event, error = called(app_url, with_(LIVE, source=["live"]))  # the API: the core names the field
    assert event == "error" and error["error"].startswith("source=['live'] is not allowed")
    no_traceback(capfd, caplog)


@pytest.mark.parametrize("route", ["queue/join", "run/predict"])
@pytest.mark.parametrize("session_hash", ["", "  "])
def test_an_empty_session_hash_is_a_400(app_url, route, session_hash, capfd, caplog):
    """gradio queued an event under an empty session nothing reads, then failed on it (KeyError, a traceback)."""
    index = fn_index("compare" if route == "queue/join" else "sweep_plan")
    data = LIVE if route == "queue/join" else ["live"]
    answer = httpx.post(f"{app_url}gradio_api/{route}", timeout=30,
                        json={"data": data, "fn_index": index, "session_hash": session_hash})
    assert answer.status_code == 400 and "session_hash" in answer.json()["detail"]
    no_traceback(capfd, caplog)
    assert len(refusals_logged(caplog)) == 1


@pytest.mark.parametrize("method, target", [("GET", "/?a={x}"), ("GET", "/gradio_api/info?{x}"),
                                            ("POST", "/gradio_api/call/compare?{x}"),
                                            ("POST", "/gradio_api/queue/join?{x}"), ("GET", "/{x}")])
def test_a_url_over_64_kb_is_a_414(app_url, method, target, capfd, caplog):
    """gradio's URL parser refused it inside the handler (httpx.InvalidURL: a 500 and a traceback)."""
    status = raw_status(app_url, method, target.format(x="x" * 65 * 1024), json.dumps({"data": LIVE}).encode())
    assert status == 414
    assert raw_status(app_url, "GET", "/?a=" + "x" * 4000) == 200  # a long link of the page's own still opens
    no_traceback(capfd, caplog)


def test_the_upload_route_is_closed_in_an_app_that_takes_no_files(app_url, capfd, caplog):
    """gradio kept any file sent to /upload and answered with its absolute path on the server."""
    from serving import takes_uploads

    assert not takes_uploads(app.demo)
    with gr.Blocks() as uploads:
        gr.File()
    assert takes_uploads(uploads)
    with httpx.Client(base_url=app_url, timeout=30) as http:
        for name, content in (("a.txt", b"hello"), ("a.html", b"<script>alert(1)</script>")):
            answer = http.post("/gradio_api/upload", files={"files": (name, content)})
            assert answer.status_code == 404 and tempfile.gettempdir() not in answer.text
        assert http.get("/gradio_api/upload_progress", params={"upload_id": "x"}).status_code == 404
    no_traceback(capfd, caplog)


def test_a_refusal_through_the_rest_route_is_a_422_and_a_failure_stays_a_500():
    """gradio's /run/<api_name> answers every error 500: a gr.Error (a refusal, its message sent) becomes 422; an
    error with no message for the client (a real failure) stays 500."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from serving import RequestGuard

    async def refusal(request):
        return JSONResponse({"error": "seq_len=0 is not allowed", "title": "Not a request"}, status_code=500)

    async def failure(request):
        return JSONResponse({"error": None}, status_code=500)

    async def fine(request):
        return JSONResponse({"data": [1]})
    inner = Starlette(routes=[Route("/gradio_api/run/refusal", refusal, methods=["POST"]),
                              Route("/gradio_api/run/failure", failure, methods=["POST"]),
                              Route("/gradio_api/run/fine", fine, methods=["POST"])])
    with TestClient(RequestGuard(inner, max_bytes=1024)) as http:
        answer = http.post("/gradio_api/run/refusal", json={})
        assert answer.status_code == 422 and answer.json()["error"] == "seq_len=0 is not allowed"
        assert http.post("/gradio_api/run/failure", json={}).status_code == 500
        assert http.post("/gradio_api/run/fine", json={}).json() == {"data": [1]}


# -- 5. errors: the field, the value, what is allowed, in plain text; one log line; nothing coerced ------------------
NAN, INF = float("nan"), float("inf")
BAD_VALUES = [  # (field, value, what the message must say)
    ("seq_len", "1024", "seq_len='1024' is not allowed: must be a whole number between 1 and 131072"),
    ("seq_len", [1024], "seq_len=[1024] is not allowed: must be a whole number"),
    ("seq_len", NAN, "seq_len=nan is not allowed: must be a whole number"),
    ("seq_len", INF, "seq_len=inf is not allowed: must be a whole number"),
    ("seq_len", -INF, "seq_len=-inf is not allowed: must be a whole number"),
    ("seq_len", None, "seq_len was not given: must be a whole number between 1 and 131072"),
    ("heads", 128.7, "heads=128.7 is not allowed: must be a whole number between 1 and 1024"),
    ("batch", True, "batch=True is not allowed: must be a whole number"),
    ("head_dim", 3.0, "head_dim=3.0 is not allowed: must be a whole number"),
    ("rank", 3.0, "rank=3.0 is not allowed: choose one of 4, 3"),
    ("rank", "4", "rank='4' is not allowed: choose one of 4, 3"),
    ("causal", "true", "causal='true' is not allowed: must be true or false"),
    ("causal", 1, "causal=1 is not allowed: must be true or false"),
    ("dtype", ["bf16"], "dtype=['bf16'] is not allowed: choose one of fp32, fp16, bf16"),
    ("dtype", "BF16", "dtype='BF16' is not allowed: choose one of fp32, fp16, bf16"),
    ("dtype", "float32", "dtype='float32' is not allowed: choose one of fp32, fp16, bf16"),
    ("dtype", " fp32 ", "dtype=' fp32 ' is not allowed: choose one of fp32, fp16, bf16"),
    ("dtype", None, "dtype was not given: choose one of fp32, fp16, bf16"),
    ("source", None, f"source was not given: choose one of {', '.join(sources())}"),
    ("source", "../../etc", "source='../../etc' is not allowed: choose one of live"),
    ("a", {"x": 1}, "a={'x': 1} is not allowed: choose one of naive"),
    # gradio shows an error's message as HTML on the page and as text to an API client: look-alikes, no entities
    ("b", "<img src=x>", "b='‹img src=x›' is not allowed"),
    ("b", "x&amp;<y>", "b='x+amp;‹y›' is not allowed"),
    ("seq_len", "<5000 digits>", None),  # not even JSON Python can read: refused by the server, cleanly
]


@pytest.mark.parametrize("field, value, says", BAD_VALUES, ids=[f"{f}={str(v)[:14]}" for f, v, _ in BAD_VALUES])
def test_every_bad_value_gets_a_message_naming_field_value_and_limit(app_url, field, value, says, capfd, caplog):
    if says is None:
        body = json.dumps({"data": with_(LIVE, seq_len="HUGE")}).replace('"HUGE"', "9" * 5000)
        answer = httpx.post(app_url + "gradio_api/call/compare", content=body, timeout=30,
                            headers={"content-type": "application/json"})
        assert 400 <= answer.status_code < 500
        return
    event, error = called(app_url, with_(LIVE, **{field: value}))
    assert event == "error" and error["error"].startswith(says), error
    assert error["title"] == "Not a request this app can run"
    assert not any(entity in error["error"] for entity in ENTITIES)
    assert "Traceback" not in capfd.readouterr().err
    refusals = [r for r in caplog.records if r.name == "attention_profiler"]
    assert len(refusals) == 1 and refusals[0].getMessage().startswith("refused: ")


def test_the_pages_handlers_refuse_what_the_api_does():
    for field, value, says in BAD_VALUES[:-1]:
        for live in (True, False):
            data = with_(LIVE if live else REPLAY, **{field: value})
            with pytest.raises(gr.Error) as caught:
                asyncio.run(app.endpoint("compare", live, True)(*data, HTTP, lambda *a, **k: None))
            assert caught.value.message.startswith(says), (field, value, live)


def test_a_request_missing_values_is_refused_in_one_line(app_url, capfd, caplog):
    event, error = called(app_url, [])
    assert event == "error"
    assert error["error"] == f"compare takes {len(KEYS)} values ({', '.join(KEYS)}); the request sent 0"
    event, error = called(app_url, [*LIVE, "one too many"])  # more than it takes: refused, not dropped unsaid
    assert event == "error"
    assert error["error"] == f"compare takes {len(KEYS)} values ({', '.join(KEYS)}); the request sent {len(KEYS) + 1}"
    assert "Traceback" not in capfd.readouterr().err
    assert [r.name for r in caplog.records].count("attention_profiler") == 2


def test_the_page_load_prefill_never_fails_on_a_link():
    links = [{"seq": "9" * 5000}, {"seq": "1e9"}, {"heads": "-0"}, {"rank": "3.0"}, {"rank": "9" * 5000},
             {"a": "x" * 100_000}, {"causal": ""}, {"dtype": "\x00"}, {"source": "\ud800"}, {"": ""},
             {"seqs": ",".join(map(str, range(1, 5000)))}, {"seqs": "9" * 5000}, {"seqs": ""},
             {f"k{i}": "v" for i in range(1000)}]
    for query in links:
        *values, notice = app.prefill(SimpleNamespace(query_params=query))[:len(KEYS) + 1]
        assert values[0] == app.DEFAULT_SOURCE and notice.startswith("⚠️ Ignored from the link:"), query
        assert len(notice) < 2000


# -- 6. links cannot inject markup ---------------------------------------------------------------------------------
INJECTIONS = {"`": "`", "a`b": "``<img src=http://127.0.0.1:9/x>``", "x<img src=http://127.0.0.1:9/y>": "1",
              "seq": "[click](http://127.0.0.1:9/z) `` ` <a href=http://127.0.0.1:9/w>w</a>",
              "dtype": "**bold** $$x$$ \n\n# heading", "heads": "https://example.invalid/auto-link"}


def test_link_text_renders_as_literal_text_in_the_notice():
    from markdown_it import MarkdownIt

    notice = app.prefill(SimpleNamespace(query_params=INJECTIONS))[len(KEYS)]
    html = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(notice)
    assert "<img" not in html and "<a " not in html and "<strong>" not in html and "<h1>" not in html
    for key, value in INJECTIONS.items():
        assert reports.literal(f"{key}={value}" if key in ("seq", "dtype", "heads") else key) in notice


@pytest.mark.parametrize("text", ["`", "``x``", "a`b``c```d", "<img src=x>", "line\n\nbreak", "| a | b |", "\\`x"])
def test_literal_is_one_code_span_holding_the_text(text):
    import html as html_mod

    from markdown_it import MarkdownIt

    rendered = MarkdownIt("commonmark").render(reports.literal(text))
    assert rendered.count("<code>") == 1
    inner = rendered.split("<code>")[1].split("</code>")[0]
    assert html_mod.unescape(inner).strip() == text.replace("\n", "\\n")


# -- 7. temp folders of dead processes are removed at start-up --------------------------------------------------------
def test_stale_scratch_folders_of_dead_processes_are_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    made = {name: tmp_path / name for name in (
        f"attention_profiler_{dead.pid}", f"attention_profiler_views_{dead.pid}",  # a dead process's: removed
        f"attention_profiler_{os.getpid()}", f"attention_profiler_views_{os.getppid()}",  # alive: kept
        "attention_profiler_notapid", f"other_{dead.pid}")}                           # not ours: kept
    an_hour_ago = time.time() - 3600
    for path in made.values():
        path.mkdir()
        (path / "trace.json").write_text("{}")
        os.utime(path, (an_hour_ago, an_hour_ago))
    recent = tmp_path / f"attention_profiler_views_{dead.pid}0"  # dead here, but touched a minute ago: kept
    recent.mkdir()
    link = tmp_path / f"attention_profiler_{dead.pid + 1}"
    if not link.exists():
        link.symlink_to(ROOT)  # a link named like ours: its target untouched
    for path in (made[f"attention_profiler_{dead.pid}"], made[f"attention_profiler_views_{dead.pid}"]):
        (path / scratch.LOCK_NAME).write_text("")  # locked while its process lived, free now
        os.utime(path / scratch.LOCK_NAME, (an_hour_ago, an_hour_ago))
    lockless = tmp_path / f"attention_profiler_cp_{dead.pid}"  # no lock: another PID namespace's process may own it
    lockless.mkdir()
    os.utime(lockless, (an_hour_ago, an_hour_ago))
    removed = scratch.clean_stale_folders(tmp_path)
    assert set(removed) == {made[f"attention_profiler_{dead.pid}"], made[f"attention_profiler_views_{dead.pid}"]}
    assert not made[f"attention_profiler_{dead.pid}"].exists()
    for name in (f"attention_profiler_{os.getpid()}", f"attention_profiler_views_{os.getppid()}",
                 "attention_profiler_notapid", f"other_{dead.pid}"):
        assert made[name].exists(), name
    assert recent.exists() and lockless.is_dir() and link.is_symlink()  # every CLI command removed a lockless one
    assert (ROOT / "app.py").exists()


def test_a_symlink_loop_in_the_views_folder_is_skipped_in_one_log_line(tmp_path, monkeypatch, caplog):
    """A link to itself in the views folder made every view fail (stat raised ELOOP, only FileNotFoundError was
    caught): the views are made, the oldest beyond `keep` still go, the loop stays, and the log says it once a view."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = scratch.process_folder("views")
    loop = root / "loop"
    loop.symlink_to(loop)
    with caplog.at_level(logging.WARNING, logger="profiling.scratch"):
        folders = [scratch.view_folder(keep=2) for _ in range(4)]
    assert all(f.parent == root for f in folders) and folders[-1].is_dir() and sum(f.is_dir() for f in folders) == 3
    assert loop.is_symlink()
    said = [r.getMessage() for r in caplog.records if r.name == "profiling.scratch"]
    assert len(said) == 4 and all(m.startswith("views folder: skipped loop (") for m in said), said
    scratch.remove_own_folders(tmp_path)


def holding_the_lock_of(folder: Path) -> subprocess.Popen:
    """Another process that holds `folder`'s lock (as its owner does while it lives), once it has taken it."""
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               "fcntl.flock(os.open(sys.argv[1], os.O_RDWR | os.O_CREAT), fcntl.LOCK_EX)\n"
                               "print('held', flush=True)\ntime.sleep(120)", str(folder / scratch.LOCK_NAME)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    return holder


def test_a_folder_whose_lock_is_held_is_kept_whatever_its_pid_and_age_and_a_free_one_goes(tmp_path):
    """Liveness by pid was wrong across PID namespaces sharing /tmp (a live process's folder under a pid dead here),
    and a live folder idle for 5 minutes went too: every CLI command and each app start removed the others'."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    held, free = tmp_path / f"attention_profiler_{dead.pid}", tmp_path / f"attention_profiler_views_{os.getppid()}"
    an_hour_ago = time.time() - 3600
    for folder in (held, free):
        folder.mkdir()
        for path in (folder / "trace.json", folder / scratch.LOCK_NAME):
            path.write_text("")
            os.utime(path, (an_hour_ago, an_hour_ago))
        os.utime(folder, (an_hour_ago, an_hour_ago))
    holder = holding_the_lock_of(held)
    try:
        assert scratch.clean_stale_folders(tmp_path) == [free]  # a pid alive here names no owner: its lock is free
        assert held.is_dir() and (held / "trace.json").exists() and not free.exists()
    finally:
        holder.kill()
        holder.wait()
    assert scratch.clean_stale_folders(tmp_path) == [held]  # its owner gone: the lock is free


def test_the_folders_a_process_makes_are_locked_while_it_lives(tmp_path, monkeypatch):
    """What another process's clean-up sees of this one's folders, even where its pid looks dead and they are old."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    views, traces = scratch.process_folder("views"), scratch.process_folder()
    assert (views.name, traces.name) == (f"attention_profiler_views_{os.getpid()}", f"attention_profiler_{os.getpid()}")
    cleaned = subprocess.run([sys.executable, "-c", "import sys\nfrom profiling import scratch\n"
                              "scratch._alive = lambda pid: False  # as from another PID namespace\n"
                              "print(scratch.clean_stale_folders(sys.argv[1], min_age_s=0))", str(tmp_path)],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert cleaned.returncode == 0 and cleaned.stdout == "[]\n", cleaned.stderr
    assert views.is_dir() and traces.is_dir()


def test_a_closed_server_ends_its_process_with_its_output_flushed(monkeypatch, capsys):
    """app.py's main ends with handlers.end_process once the server has closed (on the H200 the interpreter's own exit
    hung after the profiler's start-up): what was printed is out, the log handlers are shut, the code is the one given."""
    import logging

    ended, shut = [], []
    monkeypatch.setattr(handlers.os, "_exit", ended.append)
    monkeypatch.setattr(logging, "shutdown", lambda: shut.append(True))
    print("the last line", end="")
    handlers.end_process(3)
    assert ended == [3] and shut == [True] and capsys.readouterr().out == "the last line"
    source = Path(app.__file__).read_text()
    assert source.index("demo.block_thread()") < source.index("handlers.end_process()")


def test_the_queue_polls_at_the_apps_pace_and_a_gradio_without_those_knobs_is_left_as_it_is():
    """The pace is set on the app's own queue (test_browser measures what it saves); a gradio release that renames or
    drops the attributes gets nothing set on it, and the app still starts."""
    from serving import QUEUE_POLL_S, quiet_queue

    assert {name: getattr(app.demo._queue, name) for name in QUEUE_POLL_S} == QUEUE_POLL_S
    bare = SimpleNamespace(sleep_when_free=None)
    assert quiet_queue(bare) == [] and bare.sleep_when_free is None
    assert not hasattr(bare, "progress_update_sleep_when_free")


def test_building_the_page_reaches_no_host_but_its_own(monkeypatch):
    """gradio's defaults fetch its latest version from api.gradio.app as a Blocks is built (a thread) and post usage
    at launch; the app's Blocks reach nothing (every name looked up and every connection is recorded while one is
    built and its threads end). Planted: gradio's default, analytics on, is caught."""
    import socket

    def looked_up(settings: dict) -> list:
        asked = []
        real = socket.getaddrinfo

        def getaddrinfo(host, *args, **kwargs):
            asked.append(host)
            if host not in ("127.0.0.1", "localhost", "::1"):
                raise socket.gaierror("no network in this test")
            return real(host, *args, **kwargs)
        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
        before = set(threading.enumerate())
        with gr.Blocks(**settings):
            gr.Markdown("x")
        for thread in set(threading.enumerate()) - before:
            thread.join(10)
        monkeypatch.undo()
        return asked

    assert looked_up(app.BLOCKS) == []
    assert "api.gradio.app" in looked_up({**app.BLOCKS, "analytics_enabled": True})


def test_live_runs_queued_past_their_bound_are_refused_in_words_and_replays_still_answer(monkeypatch):
    """One client's flood of live requests filled gradio's one queue (max_size counts every group together): a replay
    then answered 503 "Queue is full". Each concurrency group now waits apart (serving.cap_waiting): live joins past
    the live bound are refused with a 503 that says what is full, while a replay joins and answers; the app's own
    queue is capped so, gradio's bound the sum of its groups'."""
    import serving
    from conftest import free_port

    assert app.demo._queue.push.__name__ == "capped"
    groups = {fn.concurrency_id for fn in app.demo.fns.values() if fn.queue}
    assert app.demo._queue.max_size == sum(serving.WAITING.get(g, serving.WAITING_DEFAULT) for g in groups)

    monkeypatch.setattr(serving, "WAITING", {"gpu": 2})
    started, release = threading.Event(), threading.Event()

    def live(x):
        started.set()
        release.wait(60)
        return x

    with gr.Blocks() as page:
        text, same = gr.Textbox(), gr.Textbox()
        text.submit(live, text, same, api_name="live", concurrency_id="gpu", concurrency_limit=1)
        text.submit(lambda x: x, text, same, api_name="replay", concurrency_id="replay", concurrency_limit=4)
    page.queue()
    assert serving.cap_waiting(page._queue)
    port = free_port()
    page.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            def join(api: str):
                return http.post(f"/gradio_api/call/{api}", json={"data": ["x"]})
            assert join("live").status_code == 200
            assert started.wait(30)  # the first runs; the next two wait, the bound
            assert [join("live").status_code for _ in range(2)] == [200, 200]
            refused = join("live")
            assert refused.status_code == 503
            assert "2 live runs are already waiting" in refused.text and "replays" in refused.text
            replay = join("replay")
            assert replay.status_code == 200
            with http.stream("GET", f"/gradio_api/call/replay/{replay.json()['event_id']}") as stream:
                lines = [line for line in stream.iter_lines() if line.startswith("event:")]
            assert lines[-1] == "event: complete"
    finally:
        release.set()
        page.close()


def test_a_gradio_queue_without_what_the_bound_reads_is_left_as_it_is():
    from serving import cap_waiting

    bare = SimpleNamespace(push=None, max_size=16)
    assert cap_waiting(bare) is False and bare.max_size == 16
