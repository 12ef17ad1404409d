"""The app through its public API (gradio_client against the app served in-process), and its handlers.

Live runs use small CPU workloads; replays use the real H200 recording shipped with the app.
"""
from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

import gradio as gr
import pytest
from gradio_client.exceptions import AppError

import app
from profiling import reports
from profiling.explain import explain
from profiling.recording import find_recorded
from profiling.results import Comparison, Run
from profiling.workload import Workload

RECORDING = "h200-torch2.11"
SMALL = dict(seq_len=128, heads=2, dtype="fp32", batch=1, head_dim=32, causal=True, rank=4)
cpu_only = pytest.mark.skipif(app.ENV.device != "cpu", reason="checks what a CPU run looks like")


def compare(client, **changes) -> dict:
    args = dict(source="live", a="naive", b="sdpa_flash", **SMALL) | changes
    return client.predict(**args, api_name="/compare")


def fake_request(query: dict | None = None, headers: dict | None = None, base_url="http://127.0.0.1:7860/"):
    return SimpleNamespace(query_params=query or {}, headers=headers or {}, base_url=base_url)


# -- the public endpoint --------------------------------------------------------------------------
@cpu_only
def test_live_cpu_comparison_returns_what_the_core_measured(client):
    result = compare(client, a="naive", b="sdpa_flash")
    comparison = Comparison.from_dict(result)  # the API returns Comparison.to_dict() (+ its source)
    assert result["source"] == "live"
    assert (comparison.a.status, comparison.b.status) == ("ok", "ok")
    assert comparison.a.workload == Workload.cpu_default(**SMALL)
    assert comparison.a.environment.device == "cpu"
    assert {"bmm", "_softmax"} <= {k.short_name for k in comparison.a.kernels}  # aten ops on CPU
    assert comparison.b.backend == "flash (CPU)"
    assert comparison.a.timing.median_ms > 0 and comparison.b.profiled_host_ms > 0
    assert comparison.a.trace_path is None and comparison.b.trace_path is None  # no server path leaves the server


@cpu_only
def test_a_variant_that_cannot_run_here_comes_back_with_its_reason(client):
    result = compare(client, a="sdpa_math", b="sdpa_cudnn")
    assert result["a"]["status"] == "ok" and result["a"]["backend"] == "math"
    assert result["b"]["status"] == "unsupported"
    assert "CPU" in result["b"]["reason"]


@pytest.mark.parametrize("bad, says", [
    (dict(seq_len=0), "seq_len=0 is not allowed: must be between 1 and 131072"),
    (dict(heads=2000), "heads=2000 is not allowed"),
    (dict(a="nope"), "a='nope' is not allowed: choose one of naive, naive_inplace"),
    (dict(rank=5), "rank=5 is not allowed: must be 3 ([B*H, S, D]) or 4"),
    (dict(dtype="fp8"), "dtype='fp8' is not allowed: choose one of fp32, fp16, bf16"),
])
def test_bad_inputs_get_a_clear_error_and_the_app_keeps_serving(client, bad, says):
    with pytest.raises(AppError) as error:
        compare(client, **bad)
    assert says in str(error.value)
    assert "Traceback" not in str(error.value)
    assert compare(client, a="naive_inplace", b="sdpa_math")["b"]["status"] == "ok"


# -- replay of the recorded H200 runs -------------------------------------------------------------
@pytest.mark.parametrize("a, b, changes", [
    ("sdpa_flash", "sdpa_cudnn", {}),
    ("naive", "naive_inplace", {"seq_len": 4096}),
    ("sdpa_efficient", "sdpa_flash", {"dtype": "fp32"}),
])
def test_replay_returns_the_recorded_numbers_explained(client, a, b, changes):
    blog = Workload.blog(**changes)
    result = compare(client, source=RECORDING, a=a, b=b, seq_len=blog.seq_len, heads=blog.heads, dtype=blog.dtype,
                     batch=blog.batch, head_dim=blog.head_dim, causal=blog.causal, rank=blog.rank)
    assert result["source"] == RECORDING
    for side, key in (("a", a), ("b", b)):
        recorded = find_recorded(RECORDING, key, blog)
        run = Comparison.from_dict(result).a if side == "a" else Comparison.from_dict(result).b
        assert run.environment.device_name == "NVIDIA H200"
        assert run.status == recorded.status
        assert run.gpu_ms == recorded.gpu_ms
        assert run.kernels_per_forward == recorded.kernels_per_forward
        assert [k.us_per_forward for k in run.kernels] == [k.us_per_forward for k in recorded.kernels]
    # the explainer ran on the replay exactly as on a live run: the same headline and notes as explaining it here
    expected = explain(Comparison(find_recorded(RECORDING, a, blog), find_recorded(RECORDING, b, blog)))
    replayed = Comparison.from_dict(result)
    assert result["verdict"] == expected.verdict and replayed.headline == expected.headline
    assert [(n.rule, n.side, n.title) for n in replayed.notes] == [(n.rule, n.side, n.title) for n in expected.notes]


def test_replay_of_a_workload_not_recorded_says_which_are(client):
    with pytest.raises(AppError) as error:
        compare(client, source=RECORDING, a="sdpa_flash", b="sdpa_cudnn", **SMALL)
    message = str(error.value)
    assert "The H200 recording has no run of B=1, H=2, S=128, D=32, fp32, causal. Nearest recorded: " in message


# -- prefill from the URL, and the link that reproduces a comparison -------------------------------
def test_query_parameters_prefill_the_controls():
    values = app.prefill(fake_request({"a": "naive", "b": "sdpa_flash", "seq": "4096", "heads": "16",
                                       "dtype": "bf16", "batch": "2", "head_dim": "128", "causal": "false",
                                       "rank": "3", "source": RECORDING}))
    assert values[:11] == [RECORDING, "naive", "sdpa_flash", 4096, 16, "bf16", 2, 128, False, 3, ""]
    assert (values[11], values[12].selected, values[13]) == ("", "compare", "compare")  # no lengths; that tab


def test_bad_or_unknown_query_parameters_are_ignored_with_a_visible_message():
    *values, notice = app.prefill(fake_request({"a": "nope", "seq": "0", "heads": "x", "rank": "5",
                                                "dtype": "fp8", "causal": "maybe", "colour": "red",
                                                "source": "mars", "__theme": "dark"}))[:11]
    default = app.base_workload(app.DEFAULT_SOURCE)
    assert values == [app.DEFAULT_SOURCE, app.DEFAULT_A, app.DEFAULT_B, default.seq_len, default.heads, default.dtype,
                      default.batch, default.head_dim, default.causal, default.rank]
    for key in ("a=nope", "seq=0", "heads=x", "rank=5", "dtype=fp8", "causal=maybe", "colour", "source=mars"):
        assert f"`{key}" in notice
    assert "__theme" not in notice


def test_the_share_link_reproduces_the_controls():
    controls = [RECORDING, "sdpa_math", "sdpa_flash", 1024, 16, "bf16", 8, 64, True, 4]
    link = app.share_link(fake_request(headers={"x-forwarded-host": "someone-attention.hf.space",
                                                "x-forwarded-proto": "https"}), *controls)
    assert link.startswith("https://someone-attention.hf.space/?")
    assert app.prefill(fake_request(dict(parse_qsl(urlsplit(link).query))))[:11] == controls + [""]


# -- presets and guesses ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", app.PRESETS)
@cpu_only
def test_presets_are_cpu_sized_live_and_recorded_on_replay(name):
    a, b, seq_len, heads, dtype, batch, head_dim, causal, rank = app.apply_preset(name, "live")
    live = Workload(batch=batch, heads=heads, seq_len=seq_len, head_dim=head_dim, dtype=dtype, causal=causal,
                    rank=rank, device="cpu")
    assert "flex" not in (a, b)  # compiles ~15 s on CPU
    assert live.flops <= Workload.cpu_default().flops
    a, b, *workload = app.apply_preset(name, RECORDING)
    replayed = app.workload_of(RECORDING, *workload)
    assert find_recorded(RECORDING, a, replayed) and find_recorded(RECORDING, b, replayed)


@cpu_only
def test_guesses_say_when_a_variant_cannot_run_here():
    guess_a, guess_b, coverage = app.guesses("live", "sdpa_flash", "sdpa_cudnn", **SMALL)
    assert coverage == ""  # live: nothing to flag
    assert "fastest, so high occupancy" in guess_a and "cannot run here" not in guess_a
    assert "cannot run here" in guess_b


# -- what the handlers and renderers do with progress, errors and refusals ---------------------------
@cpu_only
def test_progress_reports_the_real_stages_of_a_then_b():
    stages = []
    app.run_comparison("live", "naive", "sdpa_math", **SMALL, progress=lambda f, desc: stages.append((f, desc)))
    descriptions = [desc for _, desc in stages]
    for side, key in (("A", "naive"), ("B", "sdpa_math")):
        for stage in ("warm-up", "timing", "profiling"):
            assert f"{side} · {key}: {stage}" in descriptions
    assert [f for f, _ in stages] == sorted(f for f, _ in stages) and stages[-1][0] == 1.0


def test_a_workload_over_the_cpu_budget_is_refused_before_it_runs():
    if app.ENV.device != "cpu":
        pytest.skip("the GFLOP limit is a CPU one")
    with pytest.raises(gr.Error, match="would take about .* over the 60 s a live run may hold the machine"):
        app.run_comparison("live", "naive", "sdpa_math", seq_len=4096, heads=16, dtype="fp32", batch=1,
                           head_dim=64, causal=False, rank=4, progress=lambda f, desc: None)


@pytest.mark.parametrize("status, reason, says", [
    ("error", "out of memory on NVIDIA H200: CUDA out of memory. Tried to allocate 64.00 GiB", "❌ **Error.**"),
    ("unsupported", "No available kernel. Aborting execution.", "⚠️ **Unsupported on the H200.**"),
])
def test_a_run_without_numbers_renders_its_reason(status, reason, says):
    ok = find_recorded(RECORDING, "sdpa_flash", Workload.blog())
    failed = Run(variant="sdpa_math", workload=ok.workload, environment=ok.environment, status=status, reason=reason)
    card = reports.run_card("B", failed, "SDPA · math")
    assert says in card and reason in card
    figure = reports.timing_figure(Comparison(ok, failed))
    assert status in [t.get_text().strip() for axes in figure.axes for t in axes.texts]
    assert reports.kernel_table(failed).empty


# -- the default: real GPU runs where there is no GPU ---------------------------------------------------------
def test_the_page_starts_live_with_a_gpu_and_on_the_h200_recording_without_one():
    expected = "live" if app.ENV.device == "cuda" else next(iter(app.RECORDINGS))
    assert app.DEFAULT_SOURCE == expected
    values, problems = app.parse_query({})
    assert values["source"] == expected and not problems
    if expected != "live":
        assert app.workload_of(expected, *[values[k] for k in app.QUERY_KEYS[3:]]) == Workload.blog()
        assert "recorded GPU runs" in app.machine_line() and "live on this CPU" in app.LIVE_LABEL
        for name in app.PRESETS:  # every preset replays from the recording
            a, b, *workload = app.apply_preset(name, expected)
            assert find_recorded(expected, a, app.workload_of(expected, *workload))


def test_a_replay_speaks_of_the_gpu_it_ran_on_never_here():
    ok = find_recorded(RECORDING, "sdpa_flash", Workload.blog())
    refused = Run(variant="sdpa_cudnn", workload=ok.workload, environment=ok.environment, status="unsupported",
                  reason="No available kernel.")
    card = reports.run_card("B", refused, "SDPA · cuDNN")
    assert "on the H200" in card and "here" not in card.lower()


# -- replays have their own queue ------------------------------------------------------------------------
def test_a_replay_never_waits_for_a_live_run_holding_the_gpu(app_url, client, monkeypatch):
    import threading
    import time

    from conftest import queued

    held = threading.Event()

    def slow_live(*args, **kwargs):  # a live run that holds the GPU's queue for 8 s
        held.set()
        time.sleep(8)
        raise app.refused("slow run over", "Slow")
    monkeypatch.setattr(app, "measure_live", slow_live)
    live_event = next(i for i, fn in app.demo.fns.items() if fn.name == "run_comparison")
    live = threading.Thread(target=lambda: queued(app_url, live_event, ["live", "naive", "sdpa_flash", *SMALL.values()],
                                                  "live-session"))
    live.start()
    assert held.wait(30)
    blog = Workload.blog()
    replay = next(i for i, fn in app.demo.fns.items() if fn.name == "run_replay")
    started = time.monotonic()
    message = queued(app_url, replay, [RECORDING, "sdpa_flash", "sdpa_cudnn", blog.seq_len, blog.heads, blog.dtype,
                                       blog.batch, blog.head_dim, blog.causal, blog.rank], "replay-session")
    took = time.monotonic() - started
    live.join(30)
    assert message["success"], message
    assert took < 3, f"the replay took {took:.1f} s behind a live run"
    print(f"\nreplay while a live run holds the GPU: {took:.2f} s")


def test_the_replays_event_refuses_a_live_run():
    with pytest.raises(gr.Error, match="GPU's queue"):
        app.run_replay("live", "naive", "sdpa_flash", *SMALL.values())


def test_run_starts_the_live_or_the_replay_event_by_source():
    live_started, replay_started = app.route("live")
    assert isinstance(live_started, int) and replay_started == gr.skip()
    live_started, replay_started = app.route(RECORDING)
    assert isinstance(replay_started, int) and live_started == gr.skip()


# -- legible at 760 px, in either theme ---------------------------------------------------------------
@pytest.mark.parametrize("dark", [False, True, None])
@pytest.mark.parametrize("a, b", [("naive", "naive_inplace"), ("sdpa_flash", "sdpa_cudnn")])
def test_chart_text_is_at_least_12_px_when_shown_760_px_wide(a, b, dark):
    blog = Workload.blog()
    figure = reports.timing_figure(Comparison(find_recorded(RECORDING, a, blog), find_recorded(RECORDING, b, blog)),
                                   dark=dark)
    png_width_px = figure.get_figwidth() * figure.dpi
    texts = [t for t in figure.findobj(lambda o: hasattr(o, "get_fontsize") and hasattr(o, "get_text"))
             if t.get_text().strip() and t.get_visible()]
    assert texts
    smallest_px = min(t.get_fontsize() for t in texts) * figure.dpi / 72 * 760 / png_width_px
    assert smallest_px >= 12, f"{smallest_px:.1f} px at 760 px wide"
    background = figure.get_facecolor()
    assert (background[3] == 0) if dark is None else ((sum(background[:3]) < 0.5) == bool(dark))


def test_one_colour_means_one_thing_in_the_chart():
    used = set(reports.CATEGORY_COLOURS.values()) | {reports.OTHER_COLOUR}
    assert reports.DEVICE_TIME_COLOUR not in used and reports.HOST_TIME_COLOUR not in used
    assert len(used) == len(reports.CATEGORY_COLOURS) + 1


def test_the_kernel_table_on_screen_keeps_the_numbers_and_the_download_every_column():
    run = find_recorded(RECORDING, "naive", Workload.blog())
    assert list(reports.kernel_summary(run).columns) == ["kernel", "category", "calls/fwd", "GPU µs/fwd", "share %"]
    assert "full name" in reports.kernel_table(run).columns
