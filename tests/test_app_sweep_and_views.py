"""The app's sweep tab, its views and its links: through the public API (gradio_client against the app served
in-process) and through the handlers. Replays use the real H200 recording shipped with the app."""
from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

import gradio as gr
import pytest
from gradio_client.exceptions import AppError

import app
from profiling.recording import find_recorded_sweep
from profiling.sweep import Sweep
from profiling.workload import Workload

RECORDING = "h200-torch2.11"
BLOG = Workload.blog()
BLOG_CONTROLS = dict(seq_len=BLOG.seq_len, heads=BLOG.heads, dtype=BLOG.dtype, batch=BLOG.batch,
                     head_dim=BLOG.head_dim, causal=BLOG.causal, rank=BLOG.rank)
SMALL = dict(seq_len=64, heads=2, dtype="fp32", batch=1, head_dim=32, causal=True, rank=4)
cpu_only = pytest.mark.skipif(app.ENV.device != "cpu", reason="checks what a CPU run looks like")


def fake_request(query: dict | None = None, session: str = "s1"):
    return SimpleNamespace(query_params=query or {}, headers={}, base_url="http://127.0.0.1:7860/",
                           session_hash=session)


# -- the sweep endpoints --------------------------------------------------------------------------------
def test_a_recorded_sweep_replays_through_the_api_as_json(client):
    answer = client.predict(source=RECORDING, a="sdpa_flash", b="sdpa_cudnn", **BLOG_CONTROLS,
                            seq_lens="1024, 4096,16384", api_name="/sweep_replay")
    result = Sweep.from_dict({k: answer[k] for k in ("variants", "workload", "seq_lens", "environment", "points",
                                                     "available_bytes", "budget_s", "predicted_s", "stopped")})
    assert result.seq_lens == [1024, 4096, 16384] and result.variants == ["sdpa_flash", "sdpa_cudnn"]
    recorded = find_recorded_sweep(RECORDING, "sdpa_flash", "sdpa_cudnn", BLOG)
    for point in result.points:  # the recorded numbers, unchanged
        twin = next(p for p in recorded.points if (p.variant, p.seq_len) == (point.variant, point.seq_len))
        assert point.gpu_ms == twin.gpu_ms and point.status == twin.status
    assert "H200" in answer["headline"] and answer["notes"]
    assert all(n["title"] for n in answer["notes"])


def test_the_sweep_endpoint_replays_too_and_refuses_what_is_not_recorded(client):
    answer = client.predict(source=RECORDING, a="naive", b="sdpa_flash", **BLOG_CONTROLS, seq_lens="",
                            api_name="/sweep")
    stops = [p for p in answer["points"] if p["variant"] == "naive" and p["status"] != "ok"]
    assert stops and "GiB" in (stops[0]["reason"] or "")  # naive stops fitting, said with needed vs free
    with pytest.raises(AppError, match="has no sweep of sdpa_flash and sdpa_cudnn"):
        client.predict(source=RECORDING, a="sdpa_flash", b="sdpa_cudnn", **(BLOG_CONTROLS | {"heads": 8}),
                       seq_lens="", api_name="/sweep")


@pytest.mark.parametrize("seq_lens, says", [
    ("abc", "seq_lens='abc' is not allowed: each length must be a whole number"),
    ("0", "seq_lens=0 is not allowed: each length must be between"),
    (", ".join(str(128 * i) for i in range(1, 20)), "seq_lens=19 is not allowed: at most 12 lengths"),
    (12, "seq_lens=12 is not allowed: a text of lengths"),
])
def test_bad_lengths_are_refused_naming_the_field(client, seq_lens, says):
    with pytest.raises(AppError) as error:
        client.predict(source=RECORDING, a="sdpa_flash", b="sdpa_cudnn", **BLOG_CONTROLS, seq_lens=seq_lens,
                       api_name="/sweep_replay")
    assert says in str(error.value)


@cpu_only
def test_a_small_live_sweep_gives_a_point_per_length_per_variant(client):
    answer = client.predict(source="live", a="naive", b="sdpa_flash", **SMALL, seq_lens="64,128",
                            api_name="/sweep")
    assert sorted((p["variant"], p["seq_len"], p["status"]) for p in answer["points"]) == [
        ("naive", 64, "ok"), ("naive", 128, "ok"), ("sdpa_flash", 64, "ok"), ("sdpa_flash", 128, "ok")]
    assert answer["environment"]["device"] == "cpu" and answer["headline"]


@cpu_only
def test_stop_ends_a_live_sweep_with_the_points_done(monkeypatch):
    request = fake_request(session="stopper")
    seen = []

    def progress(fraction, desc=""):
        seen.append(desc)
        if "S=128" in desc:  # the second length has begun: ask to stop
            app.stop_sweep(request)

    answer, _ = app.run_sweep("live", "naive", "sdpa_flash", *SMALL.values(), "64,128,256", request, progress)
    assert answer["stopped"].startswith("cancelled after")
    assert {p["seq_len"] for p in answer["points"]} <= {64, 128} and answer["points"]
    assert "stopper" not in app.STOPPING and "stopper" not in app.SWEEPING  # nothing left behind
    app.stop_sweep(request)  # a stop with no sweep running is a no-op
    assert "stopper" not in app.STOPPING


def test_the_sweep_replays_event_refuses_a_live_sweep():
    with pytest.raises(gr.Error, match="GPU's queue"):
        app.run_sweep_replay("live", "naive", "sdpa_flash", *SMALL.values(), "", fake_request())


def test_the_sweep_plan_says_the_budget_live_and_what_is_recorded():
    assert f"{app.LIVE_BUDGET_S[app.ENV.device]:.0f} s" in app.sweep_plan("live")
    recorded = app.sweep_plan(RECORDING)
    assert "H200" in recorded and "B=8, H=16" in recorded and "8 variants" in recorded


# -- links: a sweep, a view ---------------------------------------------------------------------------
def test_a_sweep_link_reproduces_the_sweep_and_opens_its_tab():
    controls = [RECORDING, "sdpa_flash", "sdpa_cudnn", *BLOG_CONTROLS.values()]
    link = app.share_link(fake_request(), *controls, mode="sweep", seqs="1024,2048")
    query = dict(parse_qsl(urlsplit(link).query))
    assert query["mode"] == "sweep" and query["seqs"] == "1024,2048"
    values = app.prefill(fake_request(query))
    assert values[:10] == controls and (values[11], values[12].selected, values[13]) == ("1024,2048", "sweep", "sweep")


def test_view_and_mode_in_a_link_are_checked():
    values, problems = app.parse_query({"view": "present", "mode": "sweep", "seqs": "256, 128"})
    assert (values["view"], values["mode"], values["seqs"], problems) == ("present", "sweep", "128,256", [])
    values, problems = app.parse_query({"view": "<b>x</b>", "mode": "race", "seqs": "x"})
    assert (values["view"], values["mode"], values["seqs"]) == ("page", "compare", "")
    assert len(problems) == 3 and all(p.startswith("`") for p in problems)  # quoted as literal text


def test_view_links_offer_the_presentation_and_the_embed_of_the_same_result():
    link = app.share_link(fake_request(), RECORDING, "sdpa_flash", "sdpa_cudnn", *BLOG_CONTROLS.values())
    line = app.view_links(link)
    assert f"({link}&view=present)" in line and f"({link}&view=embed)" in line


def test_a_forged_forwarded_host_never_reaches_a_link():
    request = SimpleNamespace(query_params={}, base_url="http://127.0.0.1:7860/",
                              headers={"x-forwarded-host": "evil.example/)[x](javascript:alert(1)"})
    assert app.share_link(request, RECORDING, "naive", "sdpa_flash", *BLOG_CONTROLS.values()).startswith(
        "http://127.0.0.1:7860/?")


# -- a workload the recording lacks, flagged as it is chosen ---------------------------------------------
def test_an_unrecorded_workload_is_flagged_with_the_nearest_recorded_in_words():
    *_, coverage = app.guesses(RECORDING, "sdpa_flash", "sdpa_cudnn", **(BLOG_CONTROLS | {"seq_len": 2048}))
    assert "no run of B=8, H=16, S=2048, D=64, bf16, causal" in coverage
    assert "Nearest recorded: B=8, H=16, S=1024, D=64, bf16, causal" in coverage
    *_, coverage = app.guesses(RECORDING, "sdpa_flash", "sdpa_cudnn", **BLOG_CONTROLS)
    assert coverage == ""


@cpu_only
def test_a_compiled_variant_says_its_first_compile_up_front():
    guess_a, guess_b, _ = app.guesses("live", "flex", "sdpa_flash", **SMALL)
    assert "compiles" in guess_a and "estimated" in guess_a and "compiles" not in guess_b


# -- the screen's outputs for a recorded result -------------------------------------------------------
def test_a_recorded_comparison_shows_its_timeline_and_the_view_links(client):
    kept = app.run_replay(RECORDING, "naive", "naive_inplace", *BLOG_CONTROLS.values())[1]
    figure = app.timeline_of(app.Comparison.from_dict(__import__("json").loads(kept)))
    assert figure is not None
    labels = [t.get_text() for t in figure.axes[0].get_yticklabels()]
    assert any("A · naive CPU" in label for label in labels) and any("B · naive_inplace GPU" in label
                                                                     for label in labels)
