"""The app's sweep tab, its views and its links: through the public API (gradio_client against the app served
in-process), the page's own events and the handlers. Replays use the real H200 recording shipped with the app."""
from __future__ import annotations

import asyncio
import html
import json
import re
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

import gradio as gr
import httpx
import pytest
from gradio_client.exceptions import AppError

import app
import links
import handlers
from attention_variants import VARIANTS
from conftest import fn_index, queued, read_fact
from profiling import reports, text
from profiling.environment import Environment
from profiling.replay import find_recorded, find_recorded_sweep, nearest_recorded
from profiling.request import KEYS, LIVE, Request
from profiling.results import Sweep
from profiling.workload import Workload

RECORDING = "h200-torch2.11"
BLOG = Workload.blog()
SMALL = dict(batch=1, heads=2, seq_len=64, head_dim=32, dtype="fp32", causal=True, rank=4)
SWEEP_KEYS = {"source", "measured", "variants", "workload", "seq_lens", "axis", "environment", "runs", "available_bytes",
              "budget_s", "predicted_s", "stopped", "verdict", "headline", "notes"}
cpu_only = pytest.mark.skipif(app.ENV.device != "cpu", reason="checks what a CPU run looks like")


def values(source=LIVE, a="naive", b="sdpa_flash", **changes) -> list:
    """KEYS' values in order (every field the workload has): a live run tiny, a replay the blog's workload."""
    base = Request.build(source, "naive", "sdpa_flash", SMALL if source == LIVE else {}, app.ENV.device).values()
    sent = dict(zip(KEYS, base)) | {"a": a, "b": b} | changes
    return [sent[key] for key in KEYS]


def fake_request(query: dict | None = None, session: str = "s1"):
    return SimpleNamespace(query_params=query or {}, headers={}, base_url="http://127.0.0.1:7860/",
                           session_hash=session)


def handle(kind: str, data: list, *, live: bool = True, progress=None, http=None):
    """The page's handler of `kind` called as gradio calls it: (the answer, the kept result's id)."""
    return asyncio.run(app.endpoint(kind, live, True)(*data, http or fake_request(),
                                                      progress or (lambda *a, **k: None)))


def sweep_of(answer: dict) -> Sweep:
    return Sweep.from_dict({k: answer[k] for k in SWEEP_KEYS - {"source", "measured", "verdict", "headline", "notes"}})


def check_sweep(answer: dict) -> str:
    """The sweep's headline and notes, checked against its own points: both variants and the device named (never
    "here"), the length it speaks of the longest where both ran, and every figure read from the point it names."""
    a, b = answer["variants"][:2]
    title = answer["headline"]["title"]
    assert answer["verdict"] == title
    assert f"{VARIANTS[a].label} [A]" in title and f"{VARIANTS[b].label} [B]" in title, title
    assert text.on_device(Environment.from_dict(answer["environment"])) in title and " here" not in title, title
    both = sorted({r["workload"]["seq_len"] for r in answer["runs"] if r["variant"] == a and r["status"] == "ok"}
                  & {r["workload"]["seq_len"] for r in answer["runs"] if r["variant"] == b and r["status"] == "ok"})
    at = re.search(r"At S=([\d,]+) ", title)
    assert at and int(at.group(1).replace(",", "")) == both[-1], title
    facts = answer["headline"]["facts"]
    for side, variant in (("a", a), ("b", b)):
        run = read_fact(answer, facts[side]["source"].rsplit(".", 2)[0])
        assert (run["variant"], run["workload"]["seq_len"]) == (variant, both[-1])
    ranked = re.search(r"\[(A|B)\] is \S+× faster than .* \[(A|B)\]", title)
    if ranked:  # a winner only where its figure is the lower one
        assert facts[ranked.group(1).lower()]["value"] < facts[ranked.group(2).lower()]["value"], title
    for note in [answer["headline"], *answer["notes"]]:
        for name, fact in note["facts"].items():
            if re.fullmatch(r"sweep\.runs\[\d+\][\w.]*", fact["source"]):
                assert read_fact(answer, fact["source"]) == fact["value"], (note["title"], name, fact)
    return title


# -- the sweep endpoints -------------------------------------------------------------------------------------------
def test_a_recorded_sweep_replays_through_the_api_as_json(client):
    answer = client.predict(*values(RECORDING, "sdpa_flash", "sdpa_cudnn"), "1024, 4096,16384",
                            api_name="/sweep_replay")
    assert set(answer) == SWEEP_KEYS and answer["source"] == RECORDING
    result = sweep_of(answer)
    assert result.seq_lens == [1024, 4096, 16384] and result.variants == ["sdpa_flash", "sdpa_cudnn"]
    recorded = find_recorded_sweep(RECORDING, "sdpa_flash", "sdpa_cudnn", BLOG).select(
        ["sdpa_flash", "sdpa_cudnn"], [1024, 4096, 16384])
    assert result.runs == recorded.runs and len(result.runs) == 6  # the recorded numbers, unchanged
    title = check_sweep(answer)
    assert title.startswith("At S=16,384 ")
    if not any(r.timing.kept for r in result.runs):  # a recording that kept no samples: nothing it can rank
        assert "too few samples to rank on the H200" in title and "faster" not in title
    assert answer["notes"] and all(n["title"] for n in answer["notes"])


def test_the_sweep_endpoint_replays_every_recorded_length_and_says_where_one_stops_fitting(client):
    answer = client.predict(*values(RECORDING, "naive", "sdpa_flash"), "", api_name="/sweep")
    recorded = find_recorded_sweep(RECORDING, "naive", "sdpa_flash", BLOG)
    assert answer["seq_lens"] == recorded.seq_lens
    stops = [r for r in answer["runs"] if r["variant"] == "naive" and r["status"] != "ok"]
    assert [r["status"] for r in stops] == ["does not fit"]  # naive stops at its first point that does not fit
    assert f"{text.size(stops[0]['needed_bytes'])}" in stops[0]["reason"]  # needed vs free, in its own numbers
    assert f"{text.size(stops[0]['available_bytes'])} free" in stops[0]["reason"]
    naive_ran = [r["workload"]["seq_len"] for r in answer["runs"] if r["variant"] == "naive" and r["status"] == "ok"]
    assert check_sweep(answer).startswith(f"At S={max(naive_ran):,} ")  # the longest length both ran


def test_a_sweep_the_recording_lacks_is_refused_saying_what_it_holds(client):
    with pytest.raises(AppError) as error:
        client.predict(*values(RECORDING, "sdpa_flash", "sdpa_cudnn", heads=8), "", api_name="/sweep")
    assert str(error.value).startswith("The recording 'h200-torch2.11' has no sweep of sdpa_flash and sdpa_cudnn "
                                       f"at {BLOG.replace(heads=8).family()}. Of sdpa_flash and sdpa_cudnn it holds "
                                       f"{BLOG.family()} (and 4 others).")  # the nearest, the rest counted
    assert len(str(error.value)) <= 2 * 120  # one or two lines of an embed's frame, not twelve
    assert error.value.title == "Not in the recording"


def test_a_recorded_sweep_asked_for_lengths_it_lacks_is_refused_naming_them(client):
    with pytest.raises(AppError) as error:
        client.predict(*values(RECORDING, "sdpa_flash", "sdpa_cudnn"), "1024, 2000, 3000", api_name="/sweep_replay")
    held = find_recorded_sweep(RECORDING, "sdpa_flash", "sdpa_cudnn", BLOG).seq_lens
    assert str(error.value) == (f"The recorded sweep has no S=2,000, 3,000; it holds "
                                f"{', '.join(f'{s:,}' for s in held)}.")
    assert error.value.title == "Not in the recording"


@pytest.mark.parametrize("seq_lens, says", [
    ("abc", "seq_lens='abc' is not allowed: must be a whole number between 1 and 131072"),
    ("0", "seq_lens=0 is not allowed: must be between 1 and 131072"),
    ("128, １２８", "seq_lens='１２８' is not allowed: must be a whole number"),
    ("1_024", "seq_lens='1_024' is not allowed: must be a whole number"),
    ("128.0", "seq_lens='128.0' is not allowed: must be a whole number"),
    (", ".join(str(128 * i) for i in range(1, 20)), "is not allowed: at most 12 lengths per sweep (19 given)"),
    (12, "seq_lens=12 is not allowed: a text of lengths"),
])
def test_bad_lengths_are_refused_naming_the_field(client, seq_lens, says):
    with pytest.raises(AppError) as error:
        client.predict(*values(RECORDING, "sdpa_flash", "sdpa_cudnn"), seq_lens, api_name="/sweep_replay")
    assert says in str(error.value) and str(error.value).startswith("seq_lens=")


@cpu_only
def test_a_small_live_sweep_gives_a_point_per_length_per_variant(client):
    answer = client.predict(*values(LIVE, "naive", "sdpa_flash"), "128,64", api_name="/sweep")
    assert sorted((r["variant"], r["workload"]["seq_len"], r["status"]) for r in answer["runs"]) == [
        ("naive", 64, "ok"), ("naive", 128, "ok"), ("sdpa_flash", 64, "ok"), ("sdpa_flash", 128, "ok")]
    assert answer["environment"]["device"] == "cpu" and answer["stopped"] is None
    assert answer["workload"] == Request.build(LIVE, "naive", "sdpa_flash", SMALL, "cpu").workload.__dict__
    assert check_sweep(answer).startswith("At S=128 ")


@cpu_only
def test_stop_ends_a_live_sweep_with_the_points_done_and_never_stops_the_next():
    http = fake_request(session="stopper")
    stages = []

    def progress(fraction, desc=""):
        stages.append(desc)
        if desc.startswith("S=128"):  # the second length has begun: Stop
            app.stop_sweep(http)

    answer, _ = handle("sweep", [*values(LIVE, "naive", "sdpa_flash"), "64,128,256", None], progress=progress,
                       http=http)
    assert "cancelled" in answer["stopped"]
    assert {r["workload"]["seq_len"] for r in answer["runs"]} <= {64, 128}
    assert [(r["variant"], r["status"]) for r in answer["runs"] if r["workload"]["seq_len"] == 64] == [
        ("naive", "ok"), ("sdpa_flash", "ok")]  # the points done are kept
    assert not any(s.startswith("S=256") for s in stages)
    assert "stopped early" in answer["verdict"] and "cancelled" in answer["verdict"]
    assert not handlers.RUNNING and "stopper" not in handlers.SWEEPS  # nothing left behind
    app.stop_sweep(http)  # a Stop with no sweep running is a no-op, and is not kept for the next sweep
    answer, _ = handle("sweep", [*values(LIVE, "naive", "sdpa_flash"), "64", None], http=http)
    assert answer["stopped"] is None and [r["status"] for r in answer["runs"]] == ["ok", "ok"]


def test_the_sweep_replays_event_refuses_a_live_sweep():
    with pytest.raises(gr.Error, match="a live run joins the GPU's queue"):
        handle("sweep", [*values(LIVE), "", None], live=False)


def test_the_sweep_plan_says_the_budget_live_and_what_is_recorded():
    assert f"after {text.seconds(app.LIVE_BUDGET_S[app.ENV.device])}" in app.sweep_plan(LIVE)
    recorded = app.sweep_plan(RECORDING)
    assert recorded.startswith(f"Recorded sweeps on the H200: {BLOG.family()}, S=128…16,384 (10 variants); ")
    assert "window 1024" in recorded and "forward + backward" in recorded


# -- the page's sweep: its event keeps the answer, show_sweep renders it ---------------------------------------------
def test_the_pages_sweep_renders_every_point_its_link_and_its_files(app_url):
    session = "sweep-page"
    ran = queued(app_url, fn_index("run_sweep_replay"),
                 [*values(RECORDING, "naive", "sdpa_flash"), "2048,16384", "seq_len"], session)
    assert ran["success"], ran
    answer, sweep_id = ran["output"]["data"]
    assert set(answer) == SWEEP_KEYS
    shown = queued(app_url, fn_index("show_sweep"), [sweep_id], session)
    assert shown["success"], shown
    (link, views_line, verdict, present, chart, present_chart, table, json_file, png_file,
     roof, roof_line, roof_file, stage_roof, fold, folded) = shown["output"]["data"]
    query = dict(parse_qsl(urlsplit(link).query, keep_blank_values=True))
    asked = Request.build(RECORDING, "naive", "sdpa_flash", {}, "cpu", (2048, 16384)).to_query() | {"mode": "sweep"}
    assert query == asked  # the same sweep, on its tab; S stays the control's (the lengths are the sweep's own)
    assert "view=present" in views_line and "view=embed" in views_line
    assert reports._md(answer["verdict"]).split(" (")[0] in verdict
    assert chart["visible"] and chart["value"]["plot"].startswith("data:image/png;base64,")
    assert present_chart["visible"] and present.startswith("## ")
    rows = table["value"]["data"]
    headers = table["value"]["headers"]
    seen = [(row[headers.index("S")], row[headers.index("variant")], row[headers.index("status")]) for row in rows]
    points = [(r["workload"]["seq_len"], r["variant"], r["status"]) for r in answer["runs"]]
    assert seen == sorted(points, key=lambda p: (p[0], answer["variants"].index(p[1])))  # every point, S by S
    assert seen == [(2048, "naive", "ok"), (2048, "sdpa_flash", "ok"), (16384, "naive", "does not fit"),
                    (16384, "sdpa_flash", "ok")]
    gpu_ms = [row[headers.index("GPU ms per forward")] for row in rows]
    assert gpu_ms[0] == round(answer["runs"][0]["timing"]["median_ms"], 4) and gpu_ms[2] is None
    downloaded = json.loads(httpx.get(json_file["value"]["url"], timeout=30).content)
    assert downloaded == answer  # the download is what an API client gets
    assert httpx.get(png_file["value"]["url"], timeout=30).content[:8] == b"\x89PNG\r\n\x1a\n"
    # the roofline of a recorded GPU sweep: drawn, no line saying why not, its PNG downloadable
    assert roof["visible"] and roof["value"]["plot"].startswith("data:image/png;base64,") and not roof_line
    assert httpx.get(roof_file["value"]["url"], timeout=30).content[:8] == b"\x89PNG\r\n\x1a\n"
    # the stage's roofline, its own large-type figure, and the embed's fold holding the page's
    assert stage_roof["visible"] and stage_roof["value"]["plot"].startswith("data:image/png;base64,")
    assert stage_roof["value"]["plot"] != roof["value"]["plot"]
    assert fold["visible"] and folded["visible"] and folded["value"]["plot"] == roof["value"]["plot"]


# -- links: a sweep, a view --------------------------------------------------------------------------------------
def test_a_sweep_link_reproduces_the_sweep_and_opens_its_tab():
    request = Request.build(RECORDING, "sdpa_flash", "sdpa_cudnn", {}, "cpu", (1024, 2048))
    link = app.share_link(fake_request(), request, mode="sweep")
    query = dict(parse_qsl(urlsplit(link).query, keep_blank_values=True))
    assert query["mode"] == "sweep" and query["seqs"] == "1024,2048"
    controls, (notice, seqs, axis, tabs) = (lambda v: (v[:len(KEYS)], v[len(KEYS):]))(
        app.prefill(fake_request(query)))
    assert controls == request.values(page=True) and (notice, seqs, tabs.selected) == ("", "1024,2048", "sweep")
    assert axis == "seq_len" and links.opening(query).asked() == request  # the sweep the page opens on


def test_a_sweep_links_preview_names_its_axis_and_says_what_the_page_says():
    """A link's preview (what a chat shows before anyone opens it) of a sweep over the batch says "over B", one
    over S "over S", and describes it with the page's own line for that sweep; a comparison's says neither."""
    from profiling import session
    from profiling.replay import recorded_sweeps

    recorded = next(s for s in recorded_sweeps(RECORDING) if s.axis == "batch")
    fields = {f: getattr(recorded.workload, f) for f in ("batch", "heads", "kv_heads", "seq_len", "q_len",
                                                          "head_dim", "dtype", "causal")}
    for axis, values, said in (("batch", tuple(recorded.seq_lens), "over B"),
                               ("seq_len", (1024, 2048), "over S")):
        asked = dict(fields) if axis == "batch" else {}
        request = Request.build(RECORDING, "sdpa_flash", "sdpa_cudnn", asked, "cpu", values, axis)
        query = dict(parse_qsl(urlsplit(app.share_link(fake_request(), request, mode="sweep")).query))
        tags = links.preview_meta(query)
        assert f'content="SDPA · FlashAttention vs SDPA · cuDNN {said} · Attention Profiler"' in tags
        line = session.sweep(request).measured
        assert f'<meta property="og:description" content="{html.escape(line)}">' in tags
    compared = links.preview_meta(Request.build(RECORDING, "sdpa_flash", "sdpa_cudnn", {}, "cpu").to_query())
    assert 'content="SDPA · FlashAttention vs SDPA · cuDNN · Attention Profiler"' in compared
    # a live sweep's link, not yet run: its fixed fields and its axis, never one S as if it were the run's
    live = Request.build(LIVE, "naive", "sdpa_math", {}, "cpu", (128, 256, 512))
    family = live.workload.family("seq_len")
    tags = links.preview_meta(live.to_query() | {"mode": "sweep"})
    assert f"when asked · {family}, forward · S from 128 to 512 (3 points)" in html.unescape(tags)
    tags = links.preview_meta({k: v for k, v in live.to_query().items() if k != "seqs"} | {"mode": "sweep"})
    assert f"when asked · {family}, forward · over S\"" in html.unescape(tags)
    # a live link to a run the plan refuses (1.3 TB at S=99,999) does not promise it runs
    tags = html.unescape(links.preview_meta({"source": "live", "seq": "99999"}))
    assert "refuses: too large for its memory · " in tags and "when asked" not in tags


def test_view_mode_and_lengths_in_a_link_are_checked():
    n = len(KEYS)
    notice, seqs, _, tabs = app.prefill(fake_request({"view": "present", "mode": "sweep", "seqs": "256, 128"}))[n:]
    assert (notice, seqs, tabs.selected) == ("", "128,256", "sweep")
    notice, seqs, _, tabs = app.prefill(fake_request({"view": "<b>x</b>", "mode": "race", "seqs": "x"}))[n:]
    for quoted in ("`view=<b>x</b>`", "`mode=race`", "`seqs=x`"):  # quoted as literal text
        assert quoted in notice
    assert (seqs, tabs.selected) == ("", "compare")


def test_view_links_offer_the_presentation_and_the_embed_of_the_same_result():
    request = Request.build(RECORDING, "sdpa_flash", "sdpa_cudnn", {}, "cpu")
    link = app.share_link(fake_request(), request)
    line = app.view_links(link)
    assert f"({link}&view=present)" in line and f"({link}&view=embed)" in line
    assert app.share_link(fake_request(), request, view="present") == f"{link}&view=present"
    assert app.share_link(fake_request(), request, mode="sweep", view="embed") == f"{link}&mode=sweep&view=embed"


# -- a workload the recording lacks, flagged as it is chosen ------------------------------------------------------
def test_an_unrecorded_workload_is_flagged_with_the_nearest_recorded_in_words():
    *_, coverage, _ = app.guesses(*values(RECORDING, "sdpa_flash", "sdpa_cudnn", seq_len=2048))
    assert coverage.startswith(f"⚠️ The H200 recording has no run of {BLOG.replace(seq_len=2048).words()}. "
                               f"Nearest recorded: {BLOG.words()}")
    *_, coverage, _ = app.guesses(*values(RECORDING, "sdpa_flash", "sdpa_cudnn"))
    assert coverage == ""


def test_switching_to_a_recording_moves_an_unrecorded_workload_to_the_blogs_and_says_so():
    moved = app.switch_source(RECORDING, "naive", *values(LIVE)[3:])
    assert moved[:-1] == Request("h200", "naive", "naive", BLOG).values(page=True)[3:]  # an empty menu as ""
    live = Request.from_values(dict(zip(KEYS, values(LIVE))), "cpu").workload
    assert moved[-1].startswith(f"The H200 recording has no run of {live.words()}. Nearest recorded: ") and \
        moved[-1].endswith(f"Moved to the blog's workload, {BLOG.words()}.")
    kept = app.switch_source(RECORDING, "naive", *values(RECORDING)[3:])  # recorded already: nothing moves
    assert all(v == gr.skip() for v in kept)


def test_switching_to_a_recording_without_a_at_the_blogs_workload_moves_to_the_nearest_that_holds_a(monkeypatch):
    """A recording begun part by part may lack A at the blog's workload: switching to it moves to the nearest
    workload it holds A on, and says so; where it holds A there, nothing moves. (The H100 recording held no naive run
    at the blog's workload until its matrix part came: that is planted here by hiding the run.)"""
    hidden = find_recorded("h100-torch2.11", "naive", BLOG)
    assert hidden is not None
    real = app.find_recorded
    monkeypatch.setattr(app, "find_recorded", lambda source, a, w: None if (source, a, w.problem()) == (
        "h100-torch2.11", "naive", BLOG.problem()) else real(source, a, w))
    monkeypatch.setattr(app, "nearest_recorded", lambda source, w, keys, n=3: [
        x for x in nearest_recorded(source, w, keys, n=n + 1) if x.problem() != BLOG.problem()][:n])
    monkeypatch.setattr(app, "unrecorded_message", lambda source, w, keys: f"No run of naive on {w.words()}.")
    moved = app.switch_source("h100-torch2.11", "naive", *values(RECORDING)[3:])
    (w,) = app.nearest_recorded("h100-torch2.11", BLOG, ("naive",), n=1)
    assert find_recorded("h100-torch2.11", "naive", w) is not None and w != BLOG
    assert moved[:-1] == Request("h100-torch2.11", "naive", "naive", w).values(page=True)[3:]
    assert moved[-1] == f"No run of naive on {BLOG.words()}. Moved to the nearest workload recorded with naive, " \
                        f"{w.words()}."
    kept = app.switch_source("h100-torch2.11", "fa3", *values(RECORDING, "fa3")[3:])
    assert all(v == gr.skip() for v in kept)  # recorded there: nothing moves


def test_a_twin_the_workload_refuses_is_found_as_its_recorded_refusal_not_as_missing():
    """FlashInfer's fp8-cache twin cannot quantise the blog's prefill (kv_dtype=fp8 is a decode step's): the
    recording keeps that refusal under the workload it refused. It is found there, so switching to the recording
    with it as A moves nowhere (it said "no run", then "moved" to the very workload it was on)."""
    run = find_recorded("h100-torch2.11", "flashinfer_fp8", BLOG)
    assert run is not None and run.status == "unsupported" and run.workload.problem() == BLOG.problem()
    kept = app.switch_source("h100-torch2.11", "flashinfer_fp8", *values(RECORDING, "flashinfer_fp8")[3:])
    assert all(v == gr.skip() for v in kept)


@cpu_only
def test_a_compiled_variant_says_its_first_compile_up_front():
    guess_a, guess_b, *_ = app.guesses(*values(LIVE, "flex", "sdpa_flash"))
    assert "its first call compiles: estimated" in guess_a and "compiles" not in guess_b
