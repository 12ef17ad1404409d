"""The app's A vs B: its public endpoints (gradio_client against the app served in-process), the page's own events
and the handlers behind them, the link a result gives, and what the screen draws of it.

Live runs use tiny CPU workloads; replays use the real H200 recording shipped with the app. The recording was
made before timing samples were kept, so its headlines cannot rank (0 samples a side): what is checked of them is
what is true of the data, never who wins.
"""
from __future__ import annotations

import asyncio
import html
import json
import re
import string
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

import gradio as gr
import numpy as np
import pytest
from gradio_client.exceptions import AppError

import app
import links
import handlers
from attention_variants import VARIANTS
from conftest import check_headline, fn_index, queued
from profiling import figures, reports, session
from profiling.explain import explain
from profiling.replay import find_recorded
from profiling.request import KEYS, LIVE, Request, field_values
from profiling.results import Comparison, Run
from profiling.workload import Workload

RECORDING = "h200-torch2.11"
BLOG = Workload.blog()
SMALL = dict(batch=1, heads=2, seq_len=128, head_dim=32, dtype="fp32", causal=True, rank=4)
ANSWER_KEYS = {"source", "measured", "a", "b", "verdict", "headline", "notes"}
cpu_only = pytest.mark.skipif(app.ENV.device != "cpu", reason="checks what a CPU run looks like")


def values(source=LIVE, a="naive", b="sdpa_flash", **changes) -> list:
    """KEYS' values in order, as the page and the API send them (every field, however many the workload has): a
    live run tiny, a replay the blog's workload; `changes` sent as given, checked by no one but the app."""
    base = Request.build(source, "naive", "sdpa_flash", SMALL if source == LIVE else {}, app.ENV.device).values()
    sent = dict(zip(KEYS, base)) | {"a": a, "b": b} | changes
    return [sent[key] for key in KEYS]


def compare(client, *args, api_name="/compare", **fields) -> dict:
    return client.predict(*values(*args, **fields), api_name=api_name)


def fake_request(query: dict | None = None, headers: dict | None = None, session_hash: str = "s1",
                 base_url: str = "http://127.0.0.1:7860/"):
    return SimpleNamespace(query_params=query or {}, headers=headers or {}, base_url=base_url,
                           session_hash=session_hash)


def json_of(data):
    """`data` as a client receives it (tuples become lists)."""
    return json.loads(json.dumps(data))


def as_read(markdown: str) -> str:
    """What a reader sees of `markdown` on the page: rendered, tags dropped, entities read, spaces collapsed."""
    from markdown_it import MarkdownIt

    rendered = re.sub(r"<[^>]+>", "", MarkdownIt("commonmark").enable("table").render(markdown))
    return " ".join(html.unescape(rendered).split())


def handle(kind: str, data: list, *, live: bool = True, page: bool = True, progress=None, http=None):
    """One of the app's handlers (`app.endpoint`) called as gradio calls it."""
    handler = app.endpoint(kind, live, page)
    return asyncio.run(handler(*data, http or fake_request(), progress or (lambda *a, **k: None)))


# -- the public endpoint: the answer, and only the answer ----------------------------------------------------------
@cpu_only
def test_a_live_comparison_returns_the_answer_the_core_measured_and_nothing_else(client):
    answer = compare(client, a="naive", b="sdpa_flash")
    assert set(answer) == ANSWER_KEYS  # no kept result's id, no file: the answer dict alone
    comparison = Comparison.from_dict(answer)
    assert answer["source"] == LIVE
    assert (comparison.a.status, comparison.b.status) == ("ok", "ok")
    assert comparison.a.workload == comparison.b.workload == Request.build(LIVE, "naive", "sdpa_flash", SMALL,
                                                                           "cpu").workload
    assert comparison.a.environment.device == "cpu"
    assert comparison.a.session == comparison.b.session  # A and B timed interleaved, in one session
    assert {"bmm", "_softmax"} <= {k.short_name for k in comparison.a.kernels}  # aten ops on a CPU
    assert comparison.b.backend == "flash (CPU)"
    assert comparison.a.timing.median_ms > 0 and len(comparison.a.timing.samples_ms) == comparison.a.timing.samples
    assert comparison.a.trace_path is None and comparison.b.trace_path is None  # no server path leaves the server
    check_headline(answer)
    assert answer["notes"] and all(n["title"] and n["side"] in ("a", "b", "both", "pair") for n in answer["notes"])


@cpu_only
def test_a_variant_that_cannot_run_here_comes_back_with_its_reason(client):
    answer = compare(client, a="sdpa_math", b="sdpa_cudnn")
    assert answer["a"]["status"] == "ok" and answer["a"]["backend"] == "math"
    assert answer["b"]["status"] == "unsupported" and "CPU" in answer["b"]["reason"]
    title = check_headline(answer)
    assert "SDPA · cuDNN [B] could not run on the CPU" in title and "[A] ran at" in title


@pytest.mark.parametrize("field, value, says", [
    ("seq_len", 0, "seq_len=0 is not allowed: must be between 1 and 131072"),
    ("heads", 2000, "heads=2000 is not allowed: must be between 1 and 1024"),
    ("seq_len", 128.0, "seq_len=128.0 is not allowed: must be a whole number between 1 and 131072"),
    ("batch", True, "batch=True is not allowed: must be a whole number"),
    ("a", "nope", "a='nope' is not allowed: choose one of naive, naive_inplace"),
    ("rank", 5, "rank=5 is not allowed: choose one of 4, 3"),
    ("rank", "4", "rank='4' is not allowed: choose one of 4, 3"),
    ("dtype", "e4m3", "dtype='e4m3' is not allowed: choose one of fp32, fp16, bf16, fp8"),
    # one spelling of each dtype, exactly: no case, no aliases, no spaces (the link and the CLI refuse them too)
    ("dtype", "BF16", "dtype='BF16' is not allowed: choose one of fp32, fp16, bf16"),
    ("dtype", "float32", "dtype='float32' is not allowed: choose one of fp32, fp16, bf16"),
    ("dtype", " fp32 ", "dtype=' fp32 ' is not allowed: choose one of fp32, fp16, bf16"),
    ("causal", "true", "causal='true' is not allowed: must be true or false"),
])
def test_a_bad_value_is_refused_naming_the_field_the_value_and_what_is_allowed(client, field, value, says):
    data = values()
    data[KEYS.index(field)] = value
    with pytest.raises(AppError) as error:
        client.predict(*data, api_name="/compare")
    assert str(error.value).startswith(says)
    assert error.value.title == "Not a request this app can run"


def test_the_app_keeps_serving_after_refusals(client):
    with pytest.raises(AppError):
        compare(client, dtype="BF16")
    assert compare(client, RECORDING, "sdpa_flash", "sdpa_cudnn")["b"]["status"] == "ok"


# -- the API documented is the API accepted --------------------------------------------------------------------------
def same(value, other) -> bool:
    return type(value) is type(other) and value == other


def fits(value, schema: dict) -> bool:
    """Whether `value`, as a Python client sends it, is of the type a JSON schema of the API documents (the keywords
    gradio's API info uses, each of them holding; 3.0 is no integer, True no integer)."""
    kinds = {"integer": (int,), "number": (int, float), "string": (str,), "boolean": (bool,), "null": (type(None),)}
    return (("anyOf" not in schema or any(fits(value, s) for s in schema["anyOf"]))
            and ("const" not in schema or same(value, schema["const"]))
            and ("enum" not in schema or any(same(value, c) for c in schema["enum"]))
            and ("type" not in schema or type(value) in kinds[schema["type"]])
            and ("minimum" not in schema or schema["minimum"] <= value <= schema["maximum"])
            and ("exclusiveMinimum" not in schema or schema["exclusiveMinimum"] < value <= schema["maximum"]))


def documented_values(schema: dict) -> list:
    """Each value a schema lists: every choice, and None where it allows None (a free type lists none)."""
    if "anyOf" in schema:
        return [value for s in schema["anyOf"] for value in documented_values(s)]
    if "const" in schema:
        return [schema["const"]]
    return list(schema.get("enum", [None] if schema.get("type") == "null" else []))


# what the core refuses of a value's type or range, which the documented schema can say too
REFUSED = [("rank", "4"), ("rank", 3.0), ("rank", 5), ("kv_heads", "2"), ("kv_heads", 0), ("window", 256.0),
           ("heads", 128.7), ("batch", True), ("seq_len", "1024"), ("seq_len", 0), ("seq_len", None),
           ("head_dim", 513), ("dtype", "BF16"), ("causal", "true"), ("causal", 1), ("passes", None),
           ("mask", "sliding"), ("a", "nope"), ("source", "../../etc"), ("seq_lens", 1024), ("softcap", 0),
           ("softcap", "30"), ("softcap", True), ("softcap", 1001.0)]


def test_every_public_endpoint_takes_exactly_the_types_its_api_documents(client, monkeypatch):
    """view_api documented rank as Literal['4', '3'] and refused '4', and kv_heads and window as required ints though
    None is their default; /replay documented the live source it refuses. Every endpoint is called with each value
    its docs list (every choice, None where optional, the documented defaults otherwise), and every one is taken, as
    sent; what the core refuses of a type or a range, the docs do not document."""
    replayed = {}  # one real answer per kind, served for every call: these calls test the values, not the runs
    compare_replay, sweep_replay = session.compare, session.sweep
    got = []

    def compared(request, **kwargs):
        got.append(request)
        if "compare" not in replayed:
            replayed["compare"] = compare_replay(Request.build(RECORDING, "sdpa_flash", "sdpa_cudnn", {}, "cpu"))
        return replayed["compare"]

    def swept(request, **kwargs):
        got.append(request)
        if "sweep" not in replayed:
            replayed["sweep"] = sweep_replay(Request.build(RECORDING, "sdpa_flash", "sdpa_cudnn", {}, "cpu",
                                                           (1024, 4096)))
        return replayed["sweep"]
    monkeypatch.setattr(session, "compare", compared)
    monkeypatch.setattr(session, "sweep", swept)
    api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert set(api) == {"/compare", "/replay", "/sweep", "/sweep_replay"}
    for name, endpoint in api.items():
        params = {p["parameter_name"]: p for p in endpoint["parameters"]}
        assert list(params) == [*KEYS, *(["seq_lens", "axis"] if "sweep" in name else [])]
        assert all(p["parameter_has_default"] for p in params.values()), name  # optional ones default to None
        base = {key: p["parameter_default"] for key, p in params.items()}
        listed = {key: documented_values(p["type"]) for key, p in params.items()}
        for key, values_ in listed.items():
            if values_:  # what the python type shows: the same values, of the same types (Literal[4], not '4')
                shown = re.findall(r"Literal\[([^]]*)\]", params[key]["python_type"]["type"])
                assert sorted(x for group in shown for x in group.split(", ")) \
                    == sorted(repr(v) for v in values_ if v is not None), (name, key, params[key]["python_type"])
                assert ("None" in params[key]["python_type"]["type"]) == (None in values_), (name, key)
        calls = [base | {key: values_[i % len(values_)] for key, values_ in listed.items() if values_}
                 for i in range(max(map(len, listed.values())))]  # each listed value sent once at least, the rest as base
        for call in calls:  # an fp8 KV cache is a decode step's beside 16-bit queries: sent once, on its own, below
            call["kv_dtype"] = None
        calls.append(calls[0] | {"kv_dtype": "fp8", "dtype": "bf16", "q_len": 1, "mask": "flag", "passes": "fwd",
                                 "gpus": 1, "cp_rotate": "allgather", "timing": "warm", "window": None})
        for call in calls:
            if call["gpus"] != 1:  # context parallel takes no mask, q_len, rank 3 or cold timing: those as base
                call |= {key: base[key] for key in ("mask", "window", "q_len", "page_size", "rank", "timing")}
            elif call["cp_rotate"] != "allgather":  # a K/V rotation applies over several GPUs only
                call["cp_rotate"] = "allgather"
            if call["mask"] == "window":  # a documented int: mask=window needs one
                call["window"] = 256
            if call["timing"] != "warm" and call["source"] == LIVE and app.ENV.device == "cpu":
                call["source"] = RECORDING  # cold and graph time a GPU: this server's live runs are its CPU's
            assert all(fits(call[key], params[key]["type"]) for key in call), (name, call)
            got.clear()
            answer = client.predict(**call, api_name=name)
            assert answer["verdict"], (name, call)
            (request,) = got  # taken as sent: the same values, of the same types
            assert all(same(sent, kept) for sent, kept in zip([call[k] for k in KEYS], request.values())), \
                (name, call, request)
        for key, value in REFUSED:
            if key in params:
                assert not fits(value, params[key]["type"]), (name, key, value)
                sent = base | {key: value}
                with pytest.raises(gr.Error):  # the core's rule, as the endpoint applies it
                    handlers.request_of([sent[k] for k in KEYS], sent.get("seq_lens"), live="replay" not in name)
        if "replay" in name:  # a live run is not theirs, and not documented so
            assert not fits(LIVE, params["source"]["type"])
            with pytest.raises(AppError, match="a live run joins the GPU's queue"):
                client.predict(**base | {"source": LIVE}, api_name=name)


# -- replays of the recorded H200 runs -------------------------------------------------------------------------------
@pytest.mark.parametrize("a, b, changes", [
    ("sdpa_flash", "sdpa_cudnn", {}),
    ("naive", "naive_inplace", {"seq_len": 4096}),
    ("sdpa_efficient", "sdpa_flash", {"dtype": "fp32"}),
    ("sdpa_auto", "sdpa_flash", {"rank": 3}),
])
def test_a_replay_returns_the_recorded_runs_explained_as_a_live_run_would_be(client, a, b, changes):
    workload = BLOG.replace(**changes)
    answer = compare(client, RECORDING, a, b, api_name="/replay", **changes)
    assert set(answer) == ANSWER_KEYS and answer["source"] == RECORDING
    recorded = Comparison(find_recorded(RECORDING, a, workload), find_recorded(RECORDING, b, workload))
    replayed = Comparison.from_dict(answer)
    for run, twin in ((replayed.a, recorded.a), (replayed.b, recorded.b)):  # the recorded numbers, unchanged
        assert run.environment.device_name == "NVIDIA H200" and run.workload == twin.workload
        assert run.status == twin.status and run.gpu_ms == twin.gpu_ms and run.timing == twin.timing
        assert run.kernels == twin.kernels and run.kernels_per_forward == twin.kernels_per_forward
        assert run.trace_path is None  # the server's copy of the trace stays on the server
    # the explainer ran on the replay exactly as on a live run: the answer's words are explain()'s on those runs
    expected = explain(recorded).to_dict()
    assert {k: answer[k] for k in ("verdict", "headline", "notes")} == expected
    title = check_headline(answer)
    assert "on the H200" in title
    if not (replayed.a.ok and replayed.b.ok):  # who could not run, and why, in the recording's own words
        failed = replayed.b if replayed.a.ok else replayed.a
        assert f"{VARIANTS[failed.variant].label} [{'B' if failed is replayed.b else 'A'}] could not run on the H200" \
            in title and "faster than" not in title
    elif not (replayed.a.timing.kept and replayed.b.timing.kept):  # a recording that kept no samples: no test
        assert "cannot be ranked on the H200: 0 samples on a side are too few" in title and "faster" not in title


def test_the_compare_endpoint_replays_too_and_the_replay_endpoint_refuses_a_live_run(client):
    assert compare(client, RECORDING, "naive", "sdpa_flash")["a"]["environment"]["device_name"] == "NVIDIA H200"
    with pytest.raises(AppError, match="a live run joins the GPU's queue"):
        compare(client, LIVE, api_name="/replay")


def test_a_replay_of_a_workload_not_recorded_says_which_are(client):
    with pytest.raises(AppError) as error:
        compare(client, RECORDING, "sdpa_flash", "sdpa_cudnn", **SMALL)
    asked = Request.build(RECORDING, "sdpa_flash", "sdpa_cudnn", SMALL, "cpu").workload
    assert str(error.value).startswith(f"The H200 recording has no run of {asked.words()}. Nearest recorded: ")
    assert BLOG.words() in str(error.value)
    assert error.value.title == "Not in the recording"


# -- the page's own events: the answer and the id of what the server keeps; show renders it -------------------------
def test_the_pages_event_keeps_the_answer_it_returns_and_show_renders_that_result(app_url):
    session_hash = "page-" + str(time.monotonic_ns())
    data = values(RECORDING, "naive", "naive_inplace", seq_len=4096)
    ran = queued(app_url, fn_index("run_compare_replay"), data, session_hash)
    assert ran["success"], ran
    answer, result_id = ran["output"]["data"]
    assert set(answer) == ANSWER_KEYS and isinstance(result_id, str) and len(result_id) >= 20
    kept = handlers.RESULTS.get(result_id)
    assert kept.kind == "compare" and kept.answer.request.source == RECORDING and json.loads(kept.text) == answer
    assert json_of(kept.answer.result.without_files().to_dict()) == json_of({k: answer[k] for k in "ab"})
    shown = queued(app_url, fn_index("show"), [result_id], session_hash)
    assert shown["success"], shown
    link, views_line, stale, measured_on, verdict, present, chart, present_chart, caption, *rest = \
        shown["output"]["data"]
    asked = Request.build(RECORDING, "naive", "naive_inplace", {"seq_len": 4096}, "cpu")
    assert dict(parse_qsl(urlsplit(link).query, keep_blank_values=True)) == asked.to_query()
    assert stale == "" and measured_on.startswith("**Recorded** on NVIDIA H200")
    assert f"workload {BLOG.replace(seq_len=4096).words()}" in measured_on
    assert answer["verdict"] in as_read(verdict) and answer["verdict"] in as_read(present)
    for note in answer["notes"][:3]:  # the top notes, in order, as the explainer ranked them
        assert note["title"] in as_read(verdict)
    top = answer["notes"][0]  # the stage's one reason: the top note, its title and its body
    assert f"{top['title']}: {top['body']}".replace("`", "") in as_read(present)
    assert chart["visible"] and chart["value"]["plot"].startswith("data:image/png;base64,")
    assert present_chart["visible"] and caption.startswith("One profiled forward of each")
    timeline, timeline_file, card_a = rest[:3]
    assert timeline["visible"] and timeline_file["visible"] and timeline_file["value"]["path"].endswith(".png")
    assert card_a.startswith("### A · Naive (masked_fill) `naive`")
    roof, roof_line, roof_file = rest[-6:-3]  # the roofline under the chart, its PNG beside the chart's
    assert roof["visible"] and roof["value"]["plot"].startswith("data:image/png;base64,") and roof_line == ""
    assert roof_file["visible"] and roof_file["value"]["path"].endswith(".png")
    stage_roof, fold, folded = rest[-3:]  # the stage's own roofline; the embed's fold holds the page's figure
    assert stage_roof["visible"] and stage_roof["value"]["plot"].startswith("data:image/png;base64,")
    assert stage_roof["value"]["plot"] != roof["value"]["plot"]
    assert fold["visible"] and folded["visible"] and folded["value"]["plot"] == roof["value"]["plot"]


def test_a_replay_shown_again_is_served_the_charts_drawn_the_first_time_and_another_answer_draws_its_own(
        app_url, monkeypatch):
    """The same recorded answer, shown twice (the same JSON): its charts are drawn once, and the second showing sends
    the same PNGs; another answer's are drawn for it, never served from the first's."""
    drawn = []
    for name in ("timing_figure", "present_figure", "timeline_figure"):
        real = getattr(figures, name)
        monkeypatch.setattr(figures, name, lambda *a, real=real, name=name, **k: drawn.append(name) or real(*a, **k))
    session_hash = "drawn-" + str(time.monotonic_ns())

    def shown(seq_len: int) -> tuple[list, list]:
        ran = queued(app_url, fn_index("run_compare_replay"), values(RECORDING, "naive", "sdpa_flash",
                                                                     seq_len=seq_len), session_hash)
        before = len(drawn)
        out = queued(app_url, fn_index("show"), [ran["output"]["data"][1]], session_hash)["output"]["data"]
        return [out[6]["value"]["plot"], out[7]["value"]["plot"], out[9]["value"]["plot"]], drawn[before:]

    figures.DRAWN._drawn.clear()
    first, drew = shown(4096)
    assert sorted(drew) == ["present_figure", "timeline_figure", "timing_figure"]
    again, drew = shown(4096)
    assert again == first and drew == []
    other, drew = shown(1024)
    assert len(drew) == 3 and not set(other) & set(first)


def test_the_opening_is_drawn_once_the_server_answers_and_its_first_visitor_draws_nothing(monkeypatch):
    """`app.draw_opening` (run by `once_serving` after the launch) draws the charts of the answer a link with no
    query opens on; a visitor's page then opens (prefill, the replay, show) and draws none. Were the opening a
    different request than the page's (another pair or workload), the visitor would draw its own."""
    monkeypatch.setattr(figures, "DRAWN", figures.Drawn(kept=8))
    drawn = []
    for name in ("timing_figure", "present_figure", "timeline_figure"):
        real = getattr(figures, name)
        monkeypatch.setattr(figures, name, lambda *a, real=real, name=name, **k: drawn.append(name) or real(*a, **k))
    app.draw_opening()
    assert sorted(drawn) == ["present_figure", "timeline_figure", "timing_figure"]
    opened = app.prefill(fake_request())[:len(KEYS)]  # the controls a plain visit opens with
    _, kept_id = asyncio.run(handlers.serve("compare", handlers.request_of(opened, live=False), None))
    shown = app.show(kept_id, fake_request())
    assert drawn[3:] == [] and shown[6]["value"].plot.startswith("data:image/png;base64,")


def test_a_chart_asked_for_while_it_is_drawn_is_drawn_once():
    """Two callers asking for one chart at once (two visitors opening one link, or the opening drawn as the first
    visitor comes) get the one PNG drawn; a drawing that fails fails for both and is tried again next time."""
    drawing, release, calls = threading.Event(), threading.Event(), []

    def figure():
        calls.append(1)
        drawing.set()
        release.wait(10)
        from matplotlib.figure import Figure
        return Figure(figsize=(1, 1))
    kept = figures.Drawn(kept=4)
    got = []
    first = threading.Thread(target=lambda: got.append(kept.png("answer", "chart", figure)))
    first.start()
    assert drawing.wait(10)
    second = threading.Thread(target=lambda: got.append(kept.png("answer", "chart", figure)))
    second.start()
    time.sleep(0.05)  # the second is waiting on the first's drawing (were it drawing too, calls would be 2)
    release.set()
    first.join(10), second.join(10)
    assert len(calls) == 1 and len(got) == 2 and got[0] == got[1] and got[0][:4] == b"\x89PNG"

    def broken():
        raise RuntimeError("no font")
    with pytest.raises(RuntimeError):
        kept.png("answer", "broken", broken)
    assert kept.png("answer", "broken", lambda: None) is None  # tried again: not kept as failed


# -- prefill from a link, and the link that reproduces a result ----------------------------------------------------
def test_a_links_query_prefills_the_controls():
    query = {"source": RECORDING, "a": "naive", "b": "sdpa_flash", "batch": "2", "heads": "16", "seq": "4096",
             "head_dim": "128", "dtype": "bf16", "causal": "false", "rank": "3"}
    controls, (notice, seqs, axis, tabs) = (lambda v: (v[:len(KEYS)], v[len(KEYS):]))(
        app.prefill(fake_request(query)))
    assert controls == Request.build(RECORDING, "naive", "sdpa_flash", dict(batch=2, heads=16, seq_len=4096,
                                     head_dim=128, dtype="bf16", causal=False, rank=3), "cpu").values(page=True)
    assert controls[KEYS.index("seq_len")] == 4096 and controls[KEYS.index("causal")] is False
    assert (notice, seqs, axis, tabs.selected) == ("", "", "seq_len", "compare")
    assert links.opening(query).asked().values(page=True) == controls  # the answer the page opens on: of these controls


@pytest.mark.parametrize("query", [
    {"a": "nope", "seq": "0", "heads": "x", "rank": "5", "causal": "True", "colour": "red", "source": "mars",
     "__theme": "dark"},
    # the one rule for text: ASCII digits, the exact spelling (a link and the command line read alike)
    {"dtype": "BF16", "batch": "1_024", "head_dim": "٣٢", "seq": "１２８"},
    {"dtype": "float32", "heads": "16.0", "causal": "1"},
    {"dtype": " fp32 "},
])
def test_bad_or_unknown_query_parameters_are_ignored_with_a_visible_message(query):
    *controls, notice = app.prefill(fake_request(query))[:len(KEYS) + 1]
    assert controls == Request.build(app.DEFAULT_SOURCE, "naive", "sdpa_flash", {}, app.ENV.device).values(page=True)
    assert notice.startswith("⚠️ Ignored from the link: ") and "__theme" not in notice
    for key, value in query.items():
        if not key.startswith("__"):
            assert reports.literal(key if key == "colour" else f"{key}={value}") in notice, key


def test_a_link_with_many_problems_lists_the_first_eight_and_counts_the_rest():
    notice = app.prefill(fake_request({f"k{i}": "v" for i in range(11)}))[len(KEYS)]
    assert notice.count("not a parameter here") == links.MAX_NOTED and notice.endswith("; and 3 more")


def test_the_link_of_a_result_reproduces_its_request():
    request = Request.build(RECORDING, "sdpa_math", "sdpa_flash", {"dtype": "fp32", "causal": False}, "cpu")
    link = app.share_link(fake_request(headers={"x-forwarded-host": "someone-attention.hf.space",
                                                "x-forwarded-proto": "https"}), request)
    assert link.startswith("https://someone-attention.hf.space/?")
    query = dict(parse_qsl(urlsplit(link).query, keep_blank_values=True))
    assert query["seq"] == "1024" and query["causal"] == "false" and "mode" not in query and "view" not in query
    assert app.prefill(fake_request(query))[:len(KEYS) + 1] == [*request.values(page=True), ""]


@pytest.mark.parametrize("host", ["evil.example/)[x](javascript:alert(1)", "a b", "x" * 300, "e\u0301vil.example"])
def test_a_forged_forwarded_host_never_reaches_a_link(host):
    link = app.share_link(fake_request(headers={"x-forwarded-host": host}),
                          Request.build(RECORDING, "naive", "sdpa_flash", {}, "cpu"))
    assert link.startswith("http://127.0.0.1:7860/?")


# -- presets and guesses ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", app.PRESETS)
@cpu_only
def test_presets_are_cpu_sized_live_and_recorded_on_replay(name):
    source, a, b, *fields = app.apply_preset(name, LIVE)
    assert source == LIVE  # live stays live
    live = Request.build(LIVE, a, b, dict(zip(KEYS[3:], fields)), "cpu").workload
    assert "flex" not in (a, b)  # it compiles ~15 s on a CPU
    assert live.flops <= Workload.cpu_default().flops
    source, a, b, *fields = app.apply_preset(name, RECORDING)
    replayed = Request.build(source, a, b, dict(zip(KEYS[3:], fields)), "cpu")
    assert session.plan(replayed)  # a recording holds both: a replay, never a refusal
    assert source == RECORDING or not app.holds(RECORDING, app.PRESETS[name])  # moved only to the one that holds it


@cpu_only
def test_guesses_say_when_a_variant_cannot_run_here():
    guess_a, guess_b, coverage, _ = app.guesses(*values(LIVE, "sdpa_flash", "sdpa_cudnn"))
    assert coverage == ""  # live: nothing to flag
    assert "SDPA's fused CPU op" in guess_a and "cannot run here" not in guess_a
    assert "occupancy" not in guess_a  # a GPU's reason is no CPU's
    assert "cannot run here" in guess_b
    assert "speed rank" in guess_a and "speed rank" not in guess_b  # a side that cannot run here is not ranked
    # a compiled GPU-only kernel on a CPU: GPU-only, and neither ranked nor given a compile estimate
    _, fa4, _, _ = app.guesses(*values(LIVE, "sdpa_flash", "fa4"))
    assert "cannot run here" in fa4 and "speed rank" not in fa4 and "compiles" not in fa4, fa4


@cpu_only
def test_lengths_have_a_control_and_typing_them_puts_their_b_and_s_in_theirs():
    """Packed documents on the page: a control, and as lengths are typed B and S show what they set (their count, the
    longest), so what runs is what the controls say; a B left contradicting them turns Run off with the one-line
    refusal the API gives (B and S were replaced without a word)."""
    (control,) = [c for c in app.fields if c.elem_id == "field-lengths"]
    assert control.visible
    assert app.documents_set("64, 32") == [2, 64]
    agreed = app.guesses(*values(LIVE, "naive", "sdpa_docmask", lengths="64, 32", batch=2, seq_len=64))
    assert agreed[2] == "" and agreed[3].interactive
    _, _, coverage, run = app.guesses(*values(LIVE, "naive", "sdpa_docmask", lengths="64, 32", batch=8, seq_len=64))
    assert "batch=8 is not allowed: lengths=64,32 set B=2 (their count)" in coverage and not run.interactive


def test_a_live_presentation_link_stages_what_run_will_measure_before_anything_runs():
    """A live link in the presentation view: before Run the stage names A and B, the machine, the workload and the
    button that measures them (it was blank); nothing else is rendered and nothing runs."""
    (opener,) = [fn for fn in app.demo.fns.values() if fn.name == "open_link"]
    query = {"source": LIVE, "a": "naive", "b": "sdpa_flash", "view": "present"}
    out = asyncio.run(opener.fn(fake_request(query)))
    ids = [getattr(o, "elem_id", None) for o in opener.outputs]
    staged = out[ids.index("present")]
    workload = links.opening(query).asked().workload
    assert staged.startswith("## Naive (masked\\_fill) [A] vs SDPA · FlashAttention [B]"), staged
    assert f"Runs live on {app.ENV.device_name} when you press **{app.RUN_LABEL}**: {workload.words()}, forward" \
        in staged
    assert sum(not isinstance(x, dict) or x.get("__type__") != "update" for x in out) == 1  # the stage alone


def test_the_presentation_gives_the_one_reason_and_its_chart_is_all_in_large_type(monkeypatch):
    """The stage's words: the headline, what was measured and the top note with its body (titles alone gave no
    reason); its chart and its roofline as the page draws them, captions included, have no text under PRESENT_PT (18 px
    and more at their PNGs' own size: the caption was 9 pt, 12.5 px)."""
    from matplotlib.text import Text
    request = Request.build(RECORDING, "naive", "sdpa_flash", {}, "cpu")
    answer = session.compare(request)
    words = reports.present_markdown(answer.explanation, answer.measured).split("\n\n")
    top = answer.explanation.notes[0]
    assert top.body and words[2:] == [f"**{reports._md(top.title)}**: {reports._md(top.body.replace('`', ''))}"]
    _, kept_id = asyncio.run(handlers.serve("compare", request, None))
    drawn = {}
    monkeypatch.setattr(figures, "DRAWN", figures.Drawn(kept=8))
    monkeypatch.setattr(figures, "png", lambda figure, real=figures.png: drawn.setdefault(id(figure), figure) and
                        real(figure))
    app.charts(handlers.RESULTS.get(kept_id))
    stage = [f for f in drawn.values() if f.get_figwidth() == figures.PRESENT_WIDTH_IN]
    assert len(stage) == 2  # the headline's figure and the roofline
    for present in stage:
        sizes = [t.get_fontsize() for t in present.findobj(Text) if t.get_visible() and t.get_text().strip()]
        assert min(sizes) >= figures.PRESENT_PT and min(sizes) * figures.DPI / 72 >= 18


def test_a_decode_steps_guess_speaks_of_its_lq_by_s_scores():
    """The guess card names the score matrix the workload has: S×S for a square one, Lq×S for a decode step."""
    square, _, _, _ = app.guesses(*values(RECORDING, "naive", "sdpa_flash"))
    decode, _, _, _ = app.guesses(*values(RECORDING, "naive", "sdpa_flash", q_len=1, seq_len=4096))
    assert "- S×S scores through memory: yes" in square
    assert "- Lq×S scores through memory: yes" in decode and "S×S" not in decode


def test_a_bad_value_in_the_controls_still_shows_the_guesses():
    guess_a, guess_b, coverage, _ = app.guesses(*values(RECORDING, "naive", "<img src=x>", dtype="BF16"))
    assert guess_a.startswith("**A · Naive (masked_fill)**") and guess_b == "**B**: unknown variant `<img src=x>`"
    # what Run would refuse, said as the controls change, the client's value escaped: no markup reaches the page
    assert coverage.startswith("⚠️ b='\\<img src=x\\>' is not allowed: choose one of naive")
    assert not re.search(r"(?<!\\)<img", coverage)



@pytest.mark.parametrize("source", [LIVE, RECORDING])
@pytest.mark.parametrize("changes, field", [({"heads": 16, "kv_heads": 5}, "kv_heads=5"),
                                            ({"mask": "flag", "window": 128}, "window=128"),
                                            ({"mask": "window", "window": 99999}, "window=99999"),
                                            ({"mask": "bool", "causal": False}, "mask='bool'"),
                                            ({"batch": None}, "batch")])
def test_a_bad_combination_turns_run_off_as_it_is_typed_with_the_refusal_run_would_give(source, changes, field):
    sent = values(source, "naive", "sdpa_flash", **changes)
    *_, coverage, run = app.guesses(*sent)
    assert run.interactive is False
    with pytest.raises(gr.Error) as refused:  # what Run itself says: the same words, checked by the same core
        session.plan(handlers.request_of(sent, live=source == LIVE))
    assert coverage == reports.refusal_markdown(refused.value.message)
    assert field.replace("_", "\\_") in coverage
    *_, coverage, run = app.guesses(*values(source, "naive", "sdpa_flash"))
    assert coverage == "" and run.interactive is True


def test_a_refused_run_keeps_the_old_result_marked_stale():
    """Editing marks the result stale; Run's click no longer clears the banner (only a new result's render does),
    and the page's CSS hides gradio's "Error" pill over the verdict: the toast says the refusal."""
    assert app.stale_notice("some-id") == app.STALE and app.stale_notice("") == ""
    clears = [fn for fn in app.demo.fns.values() if any(getattr(o, "elem_id", None) == "stale" for o in fn.outputs)]
    assert {fn.name for fn in clears} <= {"stale_notice", "show", "open_link"}, {fn.name for fn in clears}
    assert '[data-testid="status-tracker"]:has(> .error) { display: none' in app.CSS

# -- handlers: progress, refusals before anything runs ---------------------------------------------------------------
@cpu_only
def test_progress_reports_the_real_stages_of_a_then_b_and_the_kept_result_is_the_answer():
    stages = []
    answer, result_id = handle("compare", values(LIVE, "naive", "sdpa_math"),
                               progress=lambda f, desc: stages.append((f, desc)))
    descriptions = [desc for _, desc in stages]
    for side, key in (("A", "naive"), ("B", "sdpa_math")):
        for stage in ("warm-up", "timing", "profiling"):
            assert f"{side} · {key}: {stage}" in descriptions, (side, stage, descriptions)
    assert [f for f, _ in stages] == sorted(f for f, _ in stages) and stages[-1][0] == 1.0
    kept = handlers.RESULTS.get(result_id)
    assert json_of(kept.answer.result.without_files().to_dict()) == json_of({k: answer[k] for k in "ab"})
    assert json_of(kept.answer.explanation.to_dict()["headline"]) == json_of(answer["headline"])
    assert not handlers.RUNNING  # the run's cancel is gone with it


@pytest.mark.parametrize("fields, title, says", [
    (dict(seq_len=4096, heads=16, causal=False, head_dim=64), "Too long for this machine",
     "would take about .* over the 60 s a live run may hold the machine"),
    (dict(seq_len=131072, heads=1, head_dim=64), "Too large for this machine",
     r"naive at B=1, H=1, S=131072, D=64, fp32, causal.* needs about .* GiB .* free on the CPU"),
])
@cpu_only
def test_a_workload_over_the_cpus_budget_is_refused_before_anything_runs(monkeypatch, fields, title, says):
    def measured(*args, **kwargs):
        raise AssertionError("a refused request must not measure")
    monkeypatch.setattr(session, "measure_runs", measured)
    with pytest.raises(gr.Error, match=says) as error:
        handle("compare", values(LIVE, "naive", "sdpa_math", **fields))
    assert error.value.title == title


def test_run_starts_the_live_or_the_replay_event_by_source():
    live_started, replay_started = app.route(LIVE)
    assert isinstance(live_started, int) and replay_started == gr.skip()
    live_started, replay_started = app.route(RECORDING)
    assert isinstance(replay_started, int) and live_started == gr.skip()
    assert app.route(RECORDING)[1] != replay_started  # a fresh number: the same preset twice runs twice


# -- replays have their own queue -----------------------------------------------------------------------------------
def test_a_replay_never_waits_for_a_live_run_holding_the_gpu(app_url, monkeypatch):
    held, release = threading.Event(), threading.Event()

    def held_live(kind, request, run_id, progress):  # a live run that holds the GPU's queue until released
        held.set()
        release.wait(60)
        raise handlers.refused("released", "Stopped")
    monkeypatch.setattr(handlers, "serve_live", held_live)
    live = threading.Thread(target=queued, args=(app_url, fn_index("run_compare"), values(), "live-session"))
    live.start()
    try:
        assert held.wait(30)
        message = queued(app_url, fn_index("run_compare_replay"), values(RECORDING, "sdpa_flash", "sdpa_cudnn"),
                         "replay-session")
        # answered while the live run still held the GPU's queue: it never waited for it (whatever this machine's
        # speed; a timed bound said the same only on a quiet machine)
        still_held = live.is_alive() and not release.is_set()
    finally:
        release.set()
        live.join(30)
    assert message["success"], message
    assert still_held, "the replay was answered only once the live run let go of the queue"


# -- what the screen draws: cards, charts, tables ---------------------------------------------------------------------
def _runs(a: str, b: str) -> Comparison:
    return Comparison(find_recorded(RECORDING, a, BLOG), find_recorded(RECORDING, b, BLOG))


@pytest.mark.parametrize("status, reason, says", [
    ("error", "out of memory on NVIDIA H200: CUDA out of memory. Tried to allocate 64.00 GiB", "⚠️ **Error.**"),
    ("unsupported", "No available kernel. Aborting execution.", "⚠️ **Unsupported on the H200.**"),
])
def test_a_run_without_numbers_renders_its_reason_and_never_says_here(status, reason, says):
    ok = find_recorded(RECORDING, "sdpa_flash", BLOG)
    failed = Run(variant="sdpa_math", workload=ok.workload, environment=ok.environment, status=status, reason=reason)
    card = reports.run_card("B", failed, "SDPA · math")
    assert says in card and reason in card and "here" not in card.lower()
    figure = figures.timing_figure(Comparison(ok, failed))
    assert status in [t.get_text().strip() for axes in figure.axes for t in axes.texts]
    assert reports.kernel_table(failed).empty


@pytest.mark.parametrize("a, b", [("naive", "naive_inplace"), ("sdpa_flash", "sdpa_cudnn")])
def test_chart_text_is_at_least_12_px_when_shown_760_px_wide(a, b):
    figure = figures.timing_figure(_runs(a, b), dark=None)  # the page's: transparent, on a light or dark page
    png_width_px = figure.get_figwidth() * figure.dpi
    texts = [t for t in figure.findobj(lambda o: hasattr(o, "get_fontsize") and hasattr(o, "get_text"))
             if t.get_text().strip() and t.get_visible()]
    assert texts
    smallest_px = min(t.get_fontsize() for t in texts) * figure.dpi / 72 * 760 / png_width_px
    assert smallest_px >= 12, f"{smallest_px:.1f} px at 760 px wide"
    assert figure.get_facecolor()[3] == 0


def test_one_colour_means_one_thing_in_the_chart():
    used = set(figures.CATEGORY_COLOURS.values()) | {figures.OTHER_COLOUR}
    assert figures.DEVICE_TIME_COLOUR not in used and figures.HOST_TIME_COLOUR not in used
    assert len(used) == len(figures.CATEGORY_COLOURS) + 1


def test_the_kernel_table_on_screen_keeps_the_numbers_and_the_download_every_column():
    run = find_recorded(RECORDING, "naive", BLOG)
    table, shown = reports.kernel_table(run), reports.kernel_summary(run)
    assert list(shown.columns) == list(table.columns[:5]) and len(shown) == len(table) == len(run.kernels)
    assert len(set(shown.iloc[:, 0])) == len(shown)  # a label each, told apart
    assert list(shown.iloc[:, 1]) == [round(k.us_per_forward, 1) for k in run.kernels]  # the µs, in launch order
    assert list(shown.iloc[:, 2]) == [round(100 * k.share, 1) for k in run.kernels]
    assert table.columns[-1] == "full name" and list(table["full name"]) == [k.name for k in run.kernels]


# -- the default: real GPU runs where there is no GPU ------------------------------------------------------------------
def test_the_page_starts_live_with_a_gpu_and_on_the_h200_recording_without_one():
    expected = LIVE if app.ENV.device == "cuda" else "h200-torch2.11"  # the recording that holds the most runs
    assert app.DEFAULT_SOURCE == expected
    controls = app.prefill(fake_request())[:len(KEYS) + 1]
    assert controls == [*Request.build(expected, "naive", "sdpa_flash", {}, app.ENV.device).values(page=True), ""]
    if expected != LIVE:
        assert Request.build(expected, "naive", "sdpa_flash", {}, "cpu").workload == BLOG
        assert "recorded GPU runs" in app.machine_line() and "live on this CPU" in app.LIVE_LABEL
        for name in app.PRESETS:  # every preset replays from the recording
            source, a, b, *fields = app.apply_preset(name, expected)
            assert session.plan(Request.build(source, a, b, dict(zip(KEYS[3:], fields)), "cpu"))


def test_every_face_the_theme_declares_holds_every_letter_the_page_writes():
    """gradio's bundled semibold faces hold ~60 glyphs: a face the theme declares must hold every printable ASCII
    letter, digit and sign, and the few others the page writes (·, ×, –, µ), or text mixes two faces."""
    from fontTools.ttLib import TTFont

    static = Path(gr.__file__).parent / "templates" / "frontend"
    faces = re.findall(r"url\('([^']+\.woff2)'\)[^}]*font-weight: (\d+)", "".join(app.THEME._font_css))
    assert {weight for _, weight in faces} == {"400", "700"}, faces  # no 600: semibold text takes the bold face
    needed = {*map(ord, string.printable.strip()), *map(ord, "·×–µ")}
    for url, weight in faces:
        cmap = TTFont(static / url).getBestCmap()
        assert needed <= set(cmap), (url, "".join(sorted(chr(c) for c in needed - set(cmap))))


# -- what an answer is of, on every surface it travels to ----------------------------------------------------------
def test_the_workload_gpu_and_source_travel_with_the_answer_to_every_surface(monkeypatch):
    """The present view, every PNG, the JSON download and a link's preview say where it ran (recorded: which
    recording), the workload and its pass: one line, re-derived here from the request and the recording's runs."""
    request = Request.build(RECORDING, "sdpa_flash", "sdpa_cudnn", {"passes": "fwd+bwd"}, "cpu")
    answer, kept_id = asyncio.run(handlers.serve("compare", request, None))
    env = find_recorded(RECORDING, "sdpa_flash", request.workload).environment
    line = (f"Recorded on {env.device_name} · torch {env.torch_version.split('+')[0]} (recording {RECORDING}) · "
            f"{request.workload.words()}")
    assert answer["measured"] == line and "forward + backward" in line and "H200" in line
    captured = {}

    def keep(figure, *args, **kwargs):
        captured.setdefault(id(figure), " ".join(figure._supxlabel.get_text().split()))
        return original(figure, *args, **kwargs)

    from matplotlib.figure import Figure
    original = Figure.savefig
    monkeypatch.setattr(figures, "DRAWN", figures.Drawn(kept=8))  # nothing drawn before: every chart drawn here
    monkeypatch.setattr(Figure, "savefig", keep)
    shown = app.show(kept_id, fake_request())
    monkeypatch.undo()
    assert reports._md(line) in shown[5]  # the present view's answer
    # the chart's PNG, the timeline's and the stage's two say the line; the roofline's says it, then what its roofs are
    roofs = [c for c in captured.values() if c != line]
    assert len(captured) >= 4 and len(roofs) == 1 and roofs[0].startswith(line + ". x: the pass's FLOPs"), captured
    json_file = next(o.value["path"] for o in shown if isinstance(o, gr.DownloadButton) and o.value
                     and o.value["path"].endswith(".json"))
    assert json.loads(Path(json_file).read_text())["measured"] == line
    tags = links.preview_meta(request.to_query())
    assert f'<meta property="og:description" content="{html.escape(line)}">' in tags
    assert f'<meta name="twitter:description" content="{html.escape(line)}">' in tags
    assert "SDPA · FlashAttention vs SDPA · cuDNN" in tags


# -- a training step drawn as forward + backward -------------------------------------------------------------------
def _bars(axes, y: float) -> list:
    """The bars drawn at row `y` of `axes`, left to right: (left, width, colour)."""
    from matplotlib.colors import to_hex

    bars = [p for p in axes.patches if abs(p.get_y() + p.get_height() / 2 - y) < 1e-6]
    return sorted((p.get_x(), p.get_width(), to_hex(p.get_facecolor())) for p in bars)


@pytest.mark.parametrize("passes", ["fwd+bwd", "bwd"])
def test_a_training_step_is_drawn_as_its_forward_and_its_backward(passes):
    """A step's GPU bar is its forward's median then its backward's, in the phases' colours; its kernels are drawn
    phase by phase in those colours, each phase's widths summing to that phase's kernels (re-added from the table);
    a backward view draws the backward's kernels alone. Every label says what the figure is per."""
    request = Request.build(RECORDING, "naive", "sdpa_flash", {"passes": passes}, "cpu")
    comparison = session.compare(request).result
    top, bottom = figures.timing_figure(comparison).axes[:2]
    phase_colour = {p: c.lower() for p, c in figures.PHASE_COLOURS.items()}
    for i, run in enumerate((comparison.a, comparison.b)):
        gpu_bar = [b for b in _bars(top, i - 0.19) if b[2] != figures.HOST_TIME_COLOUR.lower()]
        kernels = _bars(bottom, i)
        if passes == "fwd+bwd":
            assert [(w, c) for _, w, c in gpu_bar] == [(run.forward_timing.median_ms, phase_colour["forward"]),
                                                       (run.backward_timing.median_ms, phase_colour["backward"])]
            for phase in ("forward", "backward"):
                drawn = sum(w for _, w, c in kernels if c == phase_colour[phase])
                assert drawn == pytest.approx(sum(k.us_per_forward for k in run.kernels if k.phase == phase))
            colours = [c for _, _, c in kernels]
            assert colours == sorted(colours, key=[phase_colour["forward"], phase_colour["backward"]].index)
        else:
            assert [w for _, w, _ in gpu_bar] == [run.timing.median_ms]
            drawn = sum(w for _, w, _ in kernels)
            assert drawn == pytest.approx(sum(k.us_per_forward for k in run.kernels if k.phase == "backward"))
            assert drawn < sum(k.us_per_forward for k in run.kernels)  # the forward's kernels are not in it
    per = "step" if passes == "fwd+bwd" else "backward"
    assert bottom.get_xlabel() == f"GPU µs per {per}"
    assert "per forward" not in " ".join(t.get_text() for ax in (top, bottom) for t in ax.texts)


@pytest.mark.parametrize("passes", ["fwd", "fwd+bwd", "bwd"])
@pytest.mark.parametrize("pair", [("naive", "sdpa_flash"), ("flex", "sdpa_cudnn")])
def test_every_bar_and_line_of_the_time_chart_is_in_the_unit_its_axis_or_its_label_names(passes, pair):
    """Each bar and line of "time per call" is matched, by its length, to the figure of the answer's JSON it draws,
    and that figure's pass read from the JSON's own fields (GPU time: the view's pass; host cost and back-to-back
    pace: the call a loop repeats, a whole step in a backward view; a step's two parts: the step). Where the axis
    says "ms per P", every one of them is per P; otherwise each bar's value says its own pass and the axis names the
    pass of each kind. (A backward view once drew per-step host cost and pace on an axis of "ms per backward".)"""
    request = Request.build(RECORDING, *pair, {"passes": passes}, "cpu")
    answer, kept_id = asyncio.run(handlers.serve("compare", request, None))
    top = figures.timing_figure(handlers.RESULTS.get(kept_id).answer.result).axes[0]
    view = {"fwd": "forward", "fwd+bwd": "step", "bwd": "backward"}[answer["a"]["workload"]["passes"]]
    loop = "forward" if answer["a"]["workload"]["passes"] == "fwd" else "step"
    drawn = []  # (what, its pass, the bar's value label or None for a line)
    for i, side in enumerate(("a", "b")):
        run = json_of(answer)[side]
        figures_of = {"timing": view, "host_cost": loop, "back_to_back": loop}
        lengths = {round(run[key]["median_ms"], 9): (key, unit) for key, unit in figures_of.items() if run.get(key)}
        if view == "step":
            lengths |= {round(run[key]["median_ms"], 9): (key, "step") for key in ("forward_timing", "backward_timing")}
        for bar in (p for p in top.patches if abs(p.get_y() + p.get_height() / 2 - i) < 0.5):
            key, unit = lengths[round(bar.get_width(), 9)]
            label = next((t.get_text() for t in top.texts if abs(t.get_position()[1] - (bar.get_y() + bar.get_height()
                          / 2)) < 1e-6 and abs(t.get_position()[0] - bar.get_x() - bar.get_width()) < 1e-9), None)
            drawn.append((key, unit, label))
        for line in (ln for ln in top.lines if abs(np.mean(ln.get_ydata()) - i) < 0.5):
            drawn.append((*lengths[round(line.get_xdata()[0], 9)], None))
    assert {key for key, _, _ in drawn} >= {"host_cost", "back_to_back"}  # what the check is about is drawn
    single = re.fullmatch(r"ms per (\w+)", top.get_xlabel())
    if single:
        assert {unit for _, unit, _ in drawn} == {single[1]}, (top.get_xlabel(), drawn)
    else:
        axis = top.get_xlabel()
        for key, unit, label in drawn:
            words = {"timing": "time", "host_cost": "host cost", "back_to_back": "back-to-back pace"}.get(key)
            assert re.search(rf"{words}[a-z -]* per {unit}", axis), (axis, key, unit)
            if label is not None:
                assert label.endswith(f" per {unit}"), (label, key, unit)


# -- a live CPU run says when the machine was busy ---------------------------------------------------------------
@cpu_only
def test_a_live_cpu_run_says_the_machines_load_and_the_run_to_run_spread_beside_the_verdict(monkeypatch):
    import profiling.measurement as measurement

    loads = iter([3.5, 6.0])
    monkeypatch.setattr(measurement, "machine_load", lambda: next(loads))
    request = Request.build(LIVE, "naive", "sdpa_math", SMALL, "cpu")
    answer, kept_id = asyncio.run(handlers.serve("compare", request, lambda fraction, desc: None))
    a, b = handlers.RESULTS.get(kept_id).answer.result.a, handlers.RESULTS.get(kept_id).answer.result.b
    assert (a.load_before, a.load_after) == (b.load_before, b.load_after) == (3.5, 6.0)
    assert answer["a"]["load_before"] == 3.5 and answer["b"]["load_after"] == 6.0  # in the JSON too
    measured_on = app.show(kept_id, fake_request())[3]
    assert "load average 3.5 as the timing began, 6.0 as it ended" in measured_on
    spread = f"A {reports.text.percent(a.timing.spread_pct)}, B {reports.text.percent(b.timing.spread_pct)}"
    assert f"run-to-run spread: {spread}" in measured_on
    replayed = asyncio.run(handlers.serve("compare", Request.build(RECORDING, "naive", "sdpa_math", {}, "cpu"),
                                          None))[1]
    assert "load average" not in app.show(replayed, fake_request())[3]  # a replay's load is no load of this machine


# -- a picture of the mask ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("changes", [{}, {"mask": "window", "window": 256}, {"causal": False}, {"q_len": 4},
                                     {"mask": "bias"}])
def test_the_mask_picture_draws_which_query_sees_which_key(changes):
    """Each cell is re-derived here from positions (queries are the last Lq of S; causal: key ≤ query; a window:
    the query and the W-1 keys before it), at the picture's 16 keys with the window scaled."""
    w = BLOG.replace(**changes)
    image = figures.mask_figure(w).axes[0].images[0].get_array()
    small = figures.mask_workload(w)
    lq, s = small.queries, small.seq_len
    for i in range(lq):
        for j in range(s):
            q = s - lq + i
            sees = (j <= q or not w.causal) and (w.mask != "window" or q - j < small.window)
            assert bool(image[i][j]) == sees, (changes, i, j)
    assert small.seq_len == figures.MASK_KEYS and (small.window or 0) == (4 if w.window else 0)


def _cells_seen(w: Workload, image) -> None:
    """Each cell of the picture re-derived from positions, at the picture's keys (as above)."""
    small = figures.mask_workload(w)
    lq, s = small.queries, small.seq_len
    assert len(image) == lq and len(image[0]) == s
    for i in range(lq):
        for j in range(s):
            q = s - lq + i
            assert bool(image[i][j]) == ((j <= q or not w.causal) and (w.mask != "window" or q - j < small.window))


def test_the_mask_picture_draws_every_recorded_workload_in_every_timing():
    """The picture is of the mask alone: a workload timed cold or in a CUDA graph (which a CPU refuses to time), a
    training pass, a paged cache or another GPU count draws the same cells as its warm twin, through the page's own
    handler, never an error (the picture's workload once kept `timing`, and every cold or graph link got a 500)."""
    from profiling.replay import recorded_workloads

    drawn = 0
    for recorded in recorded_workloads(RECORDING):
        for timing in ("warm", "cold", "graph"):
            w = recorded.replace(timing=timing)
            picture = app.mask_picture(RECORDING, "naive", "sdpa_flash", *field_values(w))
            assert isinstance(picture, figures.Figure), (w, picture)
            if w.lengths is None:
                _cells_seen(w, picture.axes[0].images[0].get_array())
            drawn += 1
    assert drawn == 3 * len(recorded_workloads(RECORDING))


# -- what each error is of -----------------------------------------------------------------------------------------
def _error_rows(markdown: str) -> list[tuple[str, str, str]]:
    """The numbers table's rows about error: (label, A's cell, B's cell)."""
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in markdown.splitlines()
            if line.startswith("|")]
    return [tuple(row) for row in rows if len(row) == 3 and "error" in row[0]]


@pytest.mark.parametrize("passes,pair", [("bwd", ("sdpa_flash", "sdpa_cudnn")), ("fwd+bwd", ("naive", "flex")),
                                         ("bwd", ("sdpa_math", "fa4")), ("fwd", ("sdpa_flash", "sdpa_cudnn"))])
def test_each_error_on_the_page_is_of_the_pass_it_names(passes, pair):
    """A backward view's error is the backward's own: the gradients' (dq, dk, dv) against fp64, each re-read here
    from the answer's JSON, shown first and named so; the forward output's error, where a training view shows it
    too, says it is the forward's; a forward view's one error is the output's. (The backward view once showed the
    forward output's 8.7e-03 as its only "max error", the gradients' 1.5e-02 to 2.0e-02 nowhere in the table.)"""
    request = Request.build(RECORDING, *pair, {"passes": passes}, "cpu")
    answer, kept_id = asyncio.run(handlers.serve("compare", request, None))
    rows = _error_rows(app.show(kept_id, fake_request())[4])
    for side, column in (("a", 1), ("b", 2)):
        accuracy = json_of(answer)[side]["accuracy"]
        output = reports.text.error(accuracy["max_abs_error"])
        if passes == "fwd":
            assert [(row[0], row[column]) for row in rows] == [("max error", output)]
            continue
        grads = accuracy["grads"]
        assert set(grads) == {"dq", "dk", "dv"}
        said_grads = next(row for row in rows if "gradients" in row[0])
        assert "backward" in said_grads[0]
        assert said_grads[column] == " · ".join(f"{g} {reports.text.error(grads[g])}" for g in ("dq", "dk", "dv"))
        said_output = next(row for row in rows if "output" in row[0])
        assert "forward" in said_output[0] and said_output[column] == output
        assert all("forward" in label or "backward" in label for label, *_ in rows), rows  # no error of no pass
        if passes == "bwd":
            assert rows[0] == said_grads, rows  # the backward's own first
        # the side card and the command line's line say the same of each
        run = getattr(handlers.RESULTS.get(kept_id).answer.result, side)
        card = [line for line in reports.run_card(side.upper(), run, run.variant).splitlines()
                if "error" in line]
        assert any("the forward" in line and output in line for line in card), card
        assert any("the backward" in line and all(reports.text.error(e) in line for e in grads.values())
                   for line in card), card
        line = reports.summary_line(run)
        assert f"output {output} (forward)" in line and "(backward)" in line, line


def test_a_sides_host_ops_table_names_the_call_it_is_of():
    """The host ops of one profiled call: a forward's, or a whole training step's (a backward view's too)."""
    from profiling.explain import explain

    for passes, call in (("fwd", "forward"), ("fwd+bwd", "training step"), ("bwd", "training step")):
        c = session.compare(Request.build(RECORDING, "sdpa_flash", "sdpa_cudnn", {"passes": passes}, "cpu")).result
        with gr.Blocks():
            side = app.Side("A")
        host = side.render(c, explain(c), {})[3]
        assert host.label == f"A: host (CPU) ops of one profiled {call}", (passes, host.label)


def test_a_preset_the_shown_recording_lacks_moves_to_the_recording_that_holds_it():
    """The serving engines' kernels are recorded on the H100 only: their presets move Source there, and the next
    preset of a lesson the H200 holds moves it back; a recording that holds the lesson is never left."""
    h200, h100 = "h200-torch2.11", "h100-torch2.11"
    for name in ("FlashInfer decode", "FA3 vs FA4 decode", "FA3 fp8", "fp8 KV cache"):
        assert not app.holds(h200, app.PRESETS[name]) and app.holds(h100, app.PRESETS[name]), name
        assert app.apply_preset(name, h200)[0] == h100
    for name, preset in app.PRESETS.items():  # every lesson, from either recording
        for shown in (h200, h100):
            moved = app.apply_preset(name, shown)[0]
            assert moved == shown if app.holds(shown, preset) else app.holds(moved, preset), (name, shown, moved)
    source, a, b, *fields = app.apply_preset("FA3 fp8", h200)
    assert (a, b) == ("fa3_fp8", "fa3")
    assert Request.build(source, a, b, dict(zip(KEYS[3:], fields)), "cpu").workload.words() == \
        "B=1, H=16, S=16384, D=128, bf16, causal"
