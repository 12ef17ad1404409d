"""The app as a hostile or busy visitor meets it, over HTTP on 127.0.0.1 (the app served in this process):
no entry skips the queue, no file is served that the server did not write for a result, bodies are
bounded, sessions are bounded, errors name the field and log one line, links cannot inject markup."""
from __future__ import annotations

import json
import os
import secrets
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

import app
from conftest import queued
from profiling import reports, scratch
from profiling.recording import find_recorded
from profiling.results import Comparison
from profiling.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
RECORDING = "h200-torch2.11"
BLOG = Workload.blog()
REPLAY = [RECORDING, "sdpa_flash", "sdpa_cudnn", BLOG.seq_len, BLOG.heads, BLOG.dtype, BLOG.batch, BLOG.head_dim,
          BLOG.causal, BLOG.rank]
LIVE = ["live", "naive", "sdpa_flash", 128, 2, "fp32", 1, 32, True, 4]


def fn_index(name: str) -> int:
    """The first event whose handler is `name` (compare is the run button's; show follows it)."""
    return next(i for i, fn in app.demo.fns.items() if fn.name == name)


def called(base: str, data: list, api_name: str = "compare") -> tuple[str, object]:
    """The documented REST way: POST /gradio_api/call/<api>, then read its result stream."""
    with httpx.Client(base_url=base, timeout=120) as http:
        posted = http.post(f"/gradio_api/call/{api_name}", content=json.dumps({"data": data}),
                           headers={"content-type": "application/json"})
        assert posted.status_code == 200, posted.text
        text = http.get(f"/gradio_api/call/{api_name}/{posted.json()['event_id']}").text
    event = text.split("event: ")[-1].split("\n")[0]
    return event, json.loads(text.split("data: ")[-1])


def files_in(output) -> list[dict]:
    """Every file a response offers (gradio's FileData dicts), wherever they sit in the outputs."""
    if isinstance(output, dict):
        found = [output] if output.get("path") and "url" in output else []
        return found + [f for value in output.values() for f in files_in(value)]
    if isinstance(output, list):
        return [f for value in output for f in files_in(value)]
    return []


# -- 1. no entry skips the queue --------------------------------------------------------------------------
def test_the_rest_routes_refuse_every_queued_event(app_url):
    """/gradio_api/run/<name> and /gradio_api/api/<name> would run an event outside the queue and its
    concurrency limit of 1: every queued event, by name or by index, is refused there."""
    queued_fns = [i for i, fn in app.demo.fns.items() if fn.queue]
    assert fn_index("run_comparison") in queued_fns and fn_index("show") in queued_fns
    with httpx.Client(base_url=app_url, timeout=30) as http:
        for route in ("/gradio_api/run/compare", "/gradio_api/api/compare"):
            answer = http.post(route, json={"data": LIVE})
            assert answer.status_code == 404 and "join the queue" in answer.json()["detail"]
        for index in queued_fns:
            answer = http.post("/gradio_api/run/predict", json={"data": [None] * 10, "fn_index": index})
            assert answer.status_code == 404, (index, answer.text)


def test_simultaneous_direct_calls_are_refused_and_queued_ones_never_overlap(app_url, monkeypatch):
    spans, lock = [], threading.Lock()
    measure_live = app.measure_live

    def timed(*args, **kwargs):
        start = time.monotonic()
        try:
            return measure_live(*args, **kwargs)
        finally:
            with lock:
                spans.append((start, time.monotonic()))
    monkeypatch.setattr(app, "measure_live", timed)

    answers = {}

    def direct(i):
        answers[f"direct {i}"] = httpx.post(f"{app_url}gradio_api/run/compare", json={"data": LIVE}, timeout=60)

    def through_queue(i):
        answers[f"queued {i}"] = called(app_url, LIVE)

    threads = [threading.Thread(target=f, args=(i,)) for i in range(2) for f in (direct, through_queue)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    for i in range(2):
        assert answers[f"direct {i}"].status_code == 404
        event, data = answers[f"queued {i}"]
        assert event == "complete" and data[0]["a"]["status"] == "ok"
    assert len(spans) == 2  # only the queued calls measured
    (start_1, end_1), (start_2, end_2) = sorted(spans)
    assert end_1 <= start_2, "two measurements overlapped"


# -- 2. results carry no server paths; no file but the server's own is served -----------------------------
def test_no_result_sent_to_a_client_names_a_server_file(app_url):
    for data in (REPLAY, LIVE):
        event, (result, *state) = called(app_url, data)
        assert event == "complete" and state == [None]  # the server-side copy (gr.State) is never sent
        assert result["a"]["trace_path"] is None and result["b"]["trace_path"] is None
        text = json.dumps(result)
        assert str(ROOT) not in text and tempfile.gettempdir() + "/" not in text


@pytest.fixture()
def secrets_on_disk(tmp_path_factory):
    """Files a crafted request would love to read: the app's source, its git pointer, a temp-dir dotfile."""
    dotfile = Path(tempfile.gettempdir()) / f".attention_profiler_secret_{secrets.token_hex(4)}"
    dotfile.write_text("secret")
    git = ROOT / ".git" / "config" if (ROOT / ".git").is_dir() else ROOT / ".git"  # a worktree has a .git file
    yield [ROOT / "app.py", git, dotfile]
    dotfile.unlink()


def test_a_crafted_show_payload_fetches_no_file(app_url, secrets_on_disk):
    """show renders what this session's last run kept on the server; what the client sends is ignored."""
    session = secrets.token_hex(8)
    ran = queued(app_url, fn_index("run_comparison"), REPLAY, session)
    assert ran["success"]
    result = ran["output"]["data"][0]
    for target in secrets_on_disk:
        crafted = json.loads(json.dumps(result))
        crafted["a"]["trace_path"] = crafted["b"]["trace_path"] = str(target)
        crafted["a"]["kernels"] = [{"name": "<img src=x>"}]  # and nonsense the server must not parse
        shown = queued(app_url, fn_index("show"), [crafted], session)
        assert shown["success"], shown
        offered = files_in(shown["output"]["data"])
        assert offered, "the server's own downloads are still offered"
        with httpx.Client(timeout=30) as http:
            for file in offered:
                body = http.get(file["url"]).content
                assert all(body != t.read_bytes() for t in secrets_on_disk), file
        # the recorded traces still download: the server copied them from its recording, not the client's path
        recorded = find_recorded(RECORDING, "sdpa_flash", BLOG)
        traces = [f for f in offered if f["path"].endswith(".json.gz")]
        assert traces and httpx.get(traces[0]["url"]).content == Path(recorded.trace_path).read_bytes()


def test_show_in_a_session_with_no_kept_result_offers_nothing(app_url):
    shown = queued(app_url, fn_index("show"), [{"a": {"trace_path": str(ROOT / "app.py")}}], secrets.token_hex(8))
    assert not shown["success"] and "no longer kept" in shown["output"]["error"]


def test_the_file_route_serves_no_file_of_the_app_or_the_temp_dir(app_url, secrets_on_disk):
    with httpx.Client(base_url=app_url, timeout=30) as http:
        for target in secrets_on_disk:
            answer = http.get(f"/gradio_api/file={target}")
            assert answer.status_code in (403, 404) and answer.content != target.read_bytes()


def test_reshowing_a_result_whose_trace_was_pruned_hides_its_button(tmp_path):
    """A live trace the measurement's folder pruned since: no button to a missing file (it would 403)."""
    kept = app.run_comparison(*LIVE, progress=lambda *a, **k: None)[1]
    comparison = Comparison.from_dict(json.loads(kept))
    Path(comparison.a.trace_path).unlink()  # pruned
    files = app.view_files(comparison, reports.timing_figure(comparison), tmp_path)
    assert "a_trace" not in files and files["b_trace"].read_bytes() == Path(comparison.b.trace_path).read_bytes()
    assert {"a_csv", "json", "png"} <= set(files) and all(Path(p).parent == tmp_path for p in files.values())
    assert tempfile.gettempdir() + "/" not in files["json"].read_text()


def test_only_the_servers_own_folders_hold_servable_traces(tmp_path):
    assert not scratch.is_scratch_file(ROOT / "app.py")
    assert not app._is_recorded_trace(ROOT / "app.py")
    folder = scratch.process_folder("test")
    inside, link = folder / "x.json", folder / "link.json"
    inside.write_text("{}")
    link.symlink_to(ROOT / "app.py")
    try:
        assert scratch.is_scratch_file(inside) and not scratch.is_scratch_file(link)
        assert not scratch.is_scratch_file(tmp_path / "x.json")
    finally:
        link.unlink()
        inside.unlink()
        folder.rmdir()


# -- 8. request bodies are bounded ----------------------------------------------------------------------------
@pytest.mark.parametrize("route", ["/gradio_api/queue/join", "/gradio_api/call/compare", "/gradio_api/upload"])
def test_a_huge_body_is_refused_at_once(app_url, route):
    body = b'{"data": ["' + b"x" * (50 * 2**20) + b'"]}'
    start = time.perf_counter()
    answer = httpx.post(app_url.rstrip("/") + route, content=body, headers={"content-type": "application/json"},
                        timeout=30)
    assert answer.status_code == 413 and time.perf_counter() - start < 5.0  # mostly the client sending 50 MiB


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


# -- 6. what sessions keep is bounded ------------------------------------------------------------------------
def _rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))


def test_sessions_are_bounded_and_memory_stays_flat_over_100_new_sessions(app_url):
    index = fn_index("run_comparison")
    for _ in range(app.SESSIONS_KEPT + 10):  # fill the session store: what it costs at its bound
        assert queued(app_url, index, REPLAY, secrets.token_hex(8))["success"]
    before = _rss()
    for _ in range(100):
        assert queued(app_url, index, REPLAY, secrets.token_hex(8))["success"]
    grew = (_rss() - before) / before
    assert len(app.demo.state_holder.session_data) <= app.SESSIONS_KEPT
    assert grew < 0.05, f"RSS grew {100 * grew:.1f}% over 100 new sessions"


def test_a_kept_result_expires():
    states = [b for b in app.demo.blocks.values() if b.__class__.__name__ == "State"]
    assert states and all(state.time_to_live == app.KEPT_FOR_S <= 3600 for state in states)


# -- 7. errors: the field, the value, what is allowed; one log line; nothing coerced --------------------------
NAN, INF = float("nan"), float("inf")
BAD_VALUES = [  # (position in the compare endpoint's data, value, what the message must say)
    (3, "1024", "seq_len='1024' is not allowed: must be a whole number between 1 and 131072"),
    (3, [1024], "seq_len=[1024] is not allowed: must be a whole number"),
    (3, NAN, "seq_len=nan is not allowed: must be a whole number"),
    (3, INF, "seq_len=inf is not allowed: must be a whole number"),
    (3, -INF, "seq_len=-inf is not allowed: must be a whole number"),
    (3, None, "seq_len=None is not allowed: must be a whole number"),
    (4, 128.7, "heads=128.7 is not allowed: must be a whole number between 1 and 1024"),
    (6, True, "batch=True is not allowed: must be a whole number"),
    (7, 3.0, "head_dim=3.0 is not allowed: must be a whole number"),
    (9, 3.0, "rank=3.0 is not allowed: must be 3 ([B*H, S, D]) or 4"),
    (9, "4", "rank='4' is not allowed: must be 3"),
    (8, "true", "causal='true' is not allowed: must be true or false"),
    (8, 1, "causal=1 is not allowed: must be true or false"),
    (5, ["bf16"], "dtype=['bf16'] is not allowed: choose one of fp32, fp16, bf16"),
    (5, None, "dtype=None is not allowed"),
    (0, None, "source=None is not allowed: choose one of live, h200-torch2.11"),
    (0, "../../etc", "source='../../etc' is not allowed: choose one of live"),
    (1, {"x": 1}, "a={'x': 1} is not allowed: choose one of naive"),
    (2, "<img src=x>", "b='&lt;img src=x&gt;' is not allowed"),  # HTML-escaped: gradio renders errors as HTML
    (3, "<5000 digits>", None),  # not even JSON Python can read: refused by the server, cleanly
]


@pytest.mark.parametrize("position, value, says", BAD_VALUES, ids=[f"{p}={str(v)[:14]}" for p, v, _ in BAD_VALUES])
def test_every_bad_value_gets_a_message_naming_field_value_and_limit(app_url, position, value, says, capfd, caplog):
    data = list(LIVE)
    data[position] = value
    if says is None:
        body = '{"data": ["live", "naive", "sdpa_flash", ' + "9" * 5000 + ', 2, "fp32", 1, 32, true, 4]}'
        answer = httpx.post(app_url + "gradio_api/call/compare", content=body, timeout=30,
                            headers={"content-type": "application/json"})
        assert 400 <= answer.status_code < 500
        return
    event, error = called(app_url, data)
    assert event == "error" and says in error["error"], error
    assert "Traceback" not in capfd.readouterr().err
    refusals = [r for r in caplog.records if r.name == "attention_profiler"]
    assert len(refusals) == 1 and says.replace("&lt;", "<").replace("&gt;", ">") in refusals[0].getMessage()


def test_the_ui_handler_refuses_what_the_api_does():
    for position, value, says in BAD_VALUES[:-1]:
        data = list(LIVE)
        data[position] = value
        with pytest.raises(app.gr.Error) as caught:
            app.run_comparison(*data, progress=lambda *a, **k: None)
        assert says in caught.value.message


def test_the_page_load_prefill_never_fails_on_a_link():
    links = [{"seq": "9" * 5000}, {"seq": "1e9"}, {"heads": "-0"}, {"rank": "3.0"}, {"rank": "9" * 5000},
             {"a": "x" * 100_000}, {"causal": ""}, {"dtype": "\x00"}, {"source": "\ud800"}, {"": ""},
             {f"k{i}": "v" for i in range(1000)}]
    for query in links:
        *values, notice = app.prefill(type("R", (), {"query_params": query})())[:11]
        assert values[0] == app.DEFAULT_SOURCE and notice.startswith("⚠️ Ignored from the link:")
        assert len(notice) < 2000


# -- 5. links cannot inject markup ----------------------------------------------------------------------------
INJECTIONS = {"`": "`", "a`b": "``<img src=http://127.0.0.1:9/x>``", "x<img src=http://127.0.0.1:9/y>": "1",
              "seq": "[click](http://127.0.0.1:9/z) `` ` <a href=http://127.0.0.1:9/w>w</a>",
              "dtype": "**bold** $$x$$ \n\n# heading", "heads": "https://example.invalid/auto-link"}


def test_link_text_renders_as_literal_text_in_the_notice():
    from markdown_it import MarkdownIt

    *_, notice = app.prefill(type("R", (), {"query_params": INJECTIONS})())[:11]
    html = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(notice)
    assert "<img" not in html and "<a " not in html and "<strong>" not in html and "<h1>" not in html
    for key, value in INJECTIONS.items():
        assert reports.literal(f"{key}={value}" if key in ("seq", "dtype", "heads") else key) in notice


@pytest.mark.parametrize("text", ["`", "``x``", "a`b``c```d", "<img src=x>", "line\n\nbreak", "| a | b |", "\\`x"])
def test_literal_is_one_code_span_holding_the_text(text):
    from markdown_it import MarkdownIt

    rendered = MarkdownIt("commonmark").render(reports.literal(text))
    assert rendered.count("<code>") == 1
    inner = rendered.split("<code>")[1].split("</code>")[0]
    import html as html_mod
    assert html_mod.unescape(inner).strip() == text.replace("\n", "\\n")


def test_an_unknown_variant_in_a_guess_is_literal_text():
    guess_a, _, _ = app.guesses("live", "<img src=x>", "naive", 128, 2, "fp32", 1, 32, True, 4)
    assert "`<img src=x>`" in guess_a


# -- 9. temp folders of dead processes are removed at start-up ------------------------------------------------
def test_stale_scratch_folders_of_dead_processes_are_removed(tmp_path):
    import subprocess
    import sys
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
        link.symlink_to(ROOT)  # a link named like ours: unlinked, its target untouched
    removed = scratch.clean_stale_folders(tmp_path)
    assert set(removed) >= {made[f"attention_profiler_{dead.pid}"], made[f"attention_profiler_views_{dead.pid}"]}
    assert not made[f"attention_profiler_{dead.pid}"].exists()
    for name in (f"attention_profiler_{os.getpid()}", f"attention_profiler_views_{os.getppid()}",
                 "attention_profiler_notapid", f"other_{dead.pid}"):
        assert made[name].exists(), name
    assert recent.exists()
    assert (ROOT / "app.py").exists()


def test_the_app_cleans_up_at_start_up(tmp_path):
    import subprocess
    import sys
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"attention_profiler_{dead.pid}"
    stale.mkdir()
    os.utime(stale, (time.time() - 3600,) * 2)
    subprocess.run([sys.executable, "-c", "import app"], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)},
                   check=True, capture_output=True, timeout=300)
    assert not stale.exists()


def test_a_request_missing_values_is_refused_in_one_line(app_url, capfd, caplog):
    event, error = called(app_url, [])
    assert event == "error"
    assert error["error"] == ("compare takes 10 values (source, a, b, seq_len, heads, dtype, batch, head_dim, "
                              "causal, rank); the request sent 0")
    assert "Traceback" not in capfd.readouterr().err
    assert [r.name for r in caplog.records].count("attention_profiler") == 1
