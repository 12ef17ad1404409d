"""Start-up and first answer (issue 29): the warm-up runs on the measurement thread and never holds a replay; a
live request waits only for the step in progress; nothing warms on ZeroGPU or a CPU; neither the server's start nor
its first profiled window imports a compiler; the phases a request records are the ones it ran; the compilers'
caches go to the app's folder only where the user set none; the machine is read without importing triton; the
server's events import no pyplot; gradio writes no stubs and builds the served app once; a long call's host figures take the rounds the cost model prices."""
from __future__ import annotations

import asyncio
import importlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import handlers
from profiling import budget, caches, phases, session, startup, timing, warmup
from profiling.environment import detect
from profiling.request import LIVE, Request
from profiling.results import Timing
from test_timing_modes import gpu, subject  # noqa: F401  (gpu: the fake GPU's fixture)

RECORDING = "h200-torch2.11"
ROOT = Path(__file__).resolve().parent.parent


def replayed() -> Request:
    return Request.build(RECORDING, "sdpa_flash", "sdpa_cudnn", {}, "cpu")


@pytest.fixture
def fresh_warm_up(monkeypatch):
    """A warm-up of stand-in steps on a GPU, as the server would start it (this CPU stands in for the GPU)."""
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    monkeypatch.setattr(handlers, "WARM_UP", handlers.WarmUp())
    yield
    for queued in handlers.WARM_UP.queued:  # nothing of the test left on the measurement thread
        queued.cancel()
    handlers.wait_for_warm_up(30)


def test_the_warm_up_runs_on_the_measurement_thread_and_a_replay_does_not_wait_for_it(fresh_warm_up, monkeypatch):
    entered, release, threads = threading.Event(), threading.Event(), {}

    def held() -> None:  # a warm-up step that lasts until the test releases it
        threads["warm-up"] = threading.current_thread().name
        entered.set()
        release.wait(30)

    def steps(device, keys=None, stopped=None):
        return [("held", lambda: held() or True)]
    monkeypatch.setattr(warmup, "steps", steps)
    handlers.start_warm_up("cuda")
    try:
        assert entered.wait(30)
        started = time.monotonic()
        client, _ = asyncio.run(handlers.serve("compare", replayed(), None, keep=False))
        took = time.monotonic() - started
        assert not release.is_set() and client["source"] == RECORDING and client["a"]["variant"] == "sdpa_flash"
    finally:
        release.set()
    assert handlers.wait_for_warm_up(30)
    assert took < 25  # the held step would have held it 30 s
    assert threads["warm-up"].startswith("live-measurement")
    assert list(handlers.WARM_UP.steps) == ["held"]


def test_a_live_request_waits_for_the_step_in_progress_and_the_rest_give_way(fresh_warm_up, monkeypatch):
    in_step, release, order = threading.Event(), threading.Event(), []
    replay = session.compare

    def first() -> None:
        in_step.set()
        release.wait(30)
        order.append("first step")

    def second() -> None:
        order.append("second step")

    def measured(request, **kwargs):  # stands in for a live measurement: records its turn and thread
        order.append(("live", threading.current_thread().name))
        return replay(replayed())
    monkeypatch.setattr(warmup, "steps", lambda device, keys=None, stopped=None: [("first", first),
                                                                                  ("second", second)])
    handlers.start_warm_up("cuda")
    assert in_step.wait(30)
    monkeypatch.setattr(handlers.session, "compare", measured)
    live = Request.build(LIVE, "naive", "sdpa_math", {}, "cpu")
    threading.Timer(0.3, release.set).start()
    asyncio.run(handlers.serve("compare", live, lambda *a, **k: None, keep=False))
    assert order[0] == "first step" and order[1][0] == "live" and order[1][1].startswith("live-measurement")
    assert "second step" not in order and handlers.WARM_UP.queued[-1].cancelled()
    assert handlers.wait_for_warm_up(30)  # over, a step dropped: nothing raised


@pytest.mark.parametrize("late", ["planned after the request", "queued after the request"])
def test_a_live_request_before_the_warm_up_started_leaves_nothing_of_it_to_run(fresh_warm_up, monkeypatch, late):
    """A live request while the server is still starting (importing matplotlib, planning the warm-up) has paid its
    own first costs: the warm-up found later runs none of its steps, each of which would otherwise run to its first
    safe point and hold the next live request (2.5 s of a sweep on a lent H100, its start slowed by matplotlib's font
    cache)."""
    ran, replay = [], session.compare
    monkeypatch.setattr(handlers.session, "compare", lambda request, **kwargs: replay(replayed()))
    live = Request.build(LIVE, "naive", "sdpa_math", {}, "cpu")
    asyncio.run(handlers.serve("compare", live, lambda *a, **k: None, keep=False))
    steps = [("first", lambda: ran.append("first") or True), ("second", lambda: ran.append("second") or True)]
    monkeypatch.setattr(warmup, "steps", lambda device, keys=None, stopped=None: steps)
    if late == "queued after the request":  # the request came between the plan and the queueing
        monkeypatch.setattr(handlers, "WARM_UP", handlers.WarmUp())
        monkeypatch.setattr(warmup, "steps", lambda *a, **k: handlers._drop_warm_up() or steps)
    handlers.start_warm_up("cuda")
    handlers.wait_for_warm_up(30)
    assert ran == [] and handlers.WARM_UP.steps == {}


def test_the_warm_up_is_planned_without_asking_any_variant_and_each_step_asks_its_own(monkeypatch):
    """Asking whether a variant runs here imports its libraries (nested tensors' 0.7 s, flex's 0.3 s here, FA4's
    ~2 s): the plan asks none, so a live request soon after the start waits for one step's asking at most; each step
    asks for its own variant when it runs, and one that runs nowhere here says it did not run."""
    asked = []
    real = session.why_not
    monkeypatch.setattr(session, "why_not", lambda variants, *a: asked.append([v.key for v in variants])
                        or real(variants, *a))
    found = warmup.steps("cpu", ["sdpa_cudnn", "naive", "flex"])
    assert asked == []
    ran = {name: call() for name, call in found if "compile" not in name}
    assert asked == [["naive"], ["sdpa_cudnn"], ["naive"], ["sdpa_cudnn"]]
    # cuDNN has no CPU kernel: its steps say they did not run (the server then does not count them)
    assert ran == {"libraries, profiler": True, "sdpa_cudnn": False, "naive: a training step": True,
                   "sdpa_cudnn: a training step": False}


def test_a_live_request_stops_the_step_in_progress_at_its_next_safe_point(monkeypatch):
    """The step's measurement checks `stopped` at every safe point: once a live request has come, the step ends
    there (its run comes back stopped) instead of running to its end."""
    came = threading.Event()
    checks = []

    def stopped() -> bool:
        checks.append(came.is_set())
        if len(checks) == 3:
            came.set()  # the request comes while the step runs
        return came.is_set()
    measured = []
    real = session.measure
    monkeypatch.setattr(session, "measure", lambda *a, **k: measured.append(real(*a, **k)) or measured[-1])
    (name, call), *_ = warmup.steps("cpu", ["sdpa_math"], stopped=stopped)
    call()
    (run,) = measured[0]
    assert run.status == "stopped" and "cancelled" in run.reason and len(checks) == 3  # no check after it


def test_a_step_stopped_or_not_run_is_not_counted(fresh_warm_up, monkeypatch):
    """WARM_UP.steps holds the steps that paid what they are for: not one whose variant runs nowhere here, nor one a
    live request stopped."""
    def steps(device, keys=None, stopped=None):
        return [("ran", lambda: True), ("runs nowhere here", lambda: False),
                ("stopped", lambda: handlers._drop_warm_up() or True)]
    monkeypatch.setattr(warmup, "steps", steps)
    handlers.start_warm_up("cuda")
    assert handlers.wait_for_warm_up(30)
    assert list(handlers.WARM_UP.steps) == ["ran"]


def test_nothing_warms_on_zerogpu(fresh_warm_up, monkeypatch):
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    monkeypatch.setattr(warmup, "steps", lambda *a, **k: pytest.fail("a warm-up step was asked for"))
    handlers.start_warm_up("cuda")
    assert not handlers.WARM_UP.queued and not handlers.wait_for_warm_up()


def test_a_cpu_warms_nothing(fresh_warm_up, monkeypatch):
    """On a CPU nothing warms: the replays share its cores, and no measurement pays a one-off import worth it."""
    monkeypatch.setattr(warmup, "steps", lambda *a, **k: pytest.fail("a warm-up step was asked for"))
    handlers.start_warm_up("cpu")
    assert not handlers.WARM_UP.queued and not handlers.wait_for_warm_up()


def test_neither_the_start_nor_the_first_profiled_window_imports_a_compiler(tmp_path):
    """torch.profiler.profile's first session imports torch._inductor (1 s here, 3-4 s on the H200's host); the
    app's profiler start and its profiled window run autograd's profiler, which does not. Checked in a
    fresh process, as a server starts and then profiles its first request; the window records the calls asked for,
    the warm-up call not among them."""
    probe = ("import sys\nfrom pathlib import Path\nimport torch\nfrom profiling import capture, trace\n"
             "before = set(sys.modules)\ncapture.start_profiler_here()\n"
             f"path = Path({str(tmp_path / 'window.json')!r})\n"
             "capture.profile_calls(lambda: torch.ones(64, 64) @ torch.ones(64, 64), 'cpu', 3, path)\n"
             "print('imported:', sorted(m for m in set(sys.modules) - before "
             "if m.startswith(('torch._inductor', 'torch._dynamo'))))\n"
             "print('ranges:', [r['name'] for r in trace.call_ranges(trace.load_trace(path)['traceEvents'])])\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    said = [line for line in done.stdout.splitlines() if line.startswith(("imported:", "ranges:"))]
    assert said == ["imported: []", "ranges: ['attention_profiler::call#1', 'attention_profiler::call#2', "
                                    "'attention_profiler::call#3']"], (done.stdout[-2000:], done.stderr[-2000:])


SERVED_PAGE_PROBE = """
import ast, contextlib, json, re, sys, urllib.request
from profiling import startup
if {gradios}:  # gradio's own way: its stubs written, its app built at every step
    startup.skip_type_stubs = lambda: None
    startup.app_built_at_launch = contextlib.nullcontext
parsed, parse = [], ast.get_source_segment  # how gradio reads a component's source for its stubs
ast.get_source_segment = lambda *a, **k: parsed.append(1) or parse(*a, **k)
import handlers  # the server's start: app.py's first import, which imports gradio
import gradio.routes
build, builds = gradio.routes.App.create_app, []
gradio.routes.App.create_app = staticmethod(lambda *a, **k: builds.append(1) or build(*a, **k))
import app
made = app.demo.app
app.demo.launch(server_port={port}, prevent_thread_lock=True, **app.LAUNCH)
url = "http://127.0.0.1:{port}/"
served = {{"config": json.loads(urllib.request.urlopen(url + "config").read()),
          "api": json.loads(urllib.request.urlopen(url + "gradio_api/info").read())}}
served["config"].pop("app_id")  # random per process
app.demo.close()
served = re.sub(r" at 0x[0-9a-f]+|127\\.0\\.0\\.1:\\d+", "", json.dumps(served, sort_keys=True, default=str))
print("PARSED", min(len(parsed), 50), "BUILDS", len(builds), made is None, "SERVED", served)
"""


def test_the_server_s_start_skips_gradio_s_stubs_and_extra_builds_and_serves_the_same_page():
    """At every import gradio compares and rewrites its components' .pyi stubs, each component class's source file
    parsed (0.9 s of its 2.25 s import on this CPU); and gradio 6.31 builds its web app as a Blocks is made, as its
    `with` closes, at `queue()` and at `launch`, which serves the last. The server's start turns the stubs off as gradio
    is imported (before spaces imports it) and makes its page inside `startup.app_built_at_launch`. In fresh
    processes, the server's start against gradio's own way: no source parsed against many, one build against four,
    and the page and API served the same (the config and the API's description, functions' addresses and the port
    aside): every component still builds as it did."""
    from conftest import free_port

    said = {}
    for gradios in (False, True):
        done = subprocess.run([sys.executable, "-c", SERVED_PAGE_PROBE.format(gradios=gradios, port=free_port())],
                              cwd=ROOT, capture_output=True, text=True, timeout=180,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False"})
        assert done.returncode == 0, done.stderr[-2000:]
        said[gradios] = next(line for line in done.stdout.splitlines() if line.startswith("PARSED ")).split(" SERVED ")
    assert [said[False][0], said[True][0]] == ["PARSED 0 BUILDS 1 True", "PARSED 50 BUILDS 4 False"]
    ours, gradios = said[False][1], said[True][1]
    first = next((i for i, (x, y) in enumerate(zip(ours, gradios)) if x != y), min(len(ours), len(gradios)))
    assert ours == gradios, (ours[first - 200:first + 200], gradios[first - 200:first + 200])  # not pytest's diff
    assert '"compare"' in ours and len(ours) > 100_000  # a whole page and its API, compared


def test_app_built_at_launch_skips_the_builds_inside_and_leaves_gradio_as_it_was():
    import gradio as gr
    from gradio.routes import App

    build = App.__dict__["create_app"]
    with startup.app_built_at_launch(), gr.Blocks() as page:
        gr.Textbox()
    assert page.app is None and App.__dict__["create_app"] is build
    with pytest.raises(ValueError, match="inside"):
        with startup.app_built_at_launch():
            raise ValueError("inside")
    assert App.__dict__["create_app"] is build
    page.queue()  # outside: gradio's own way
    assert page.app is not None


def test_after_import_changes_a_module_as_it_is_imported_then_steps_aside(tmp_path, monkeypatch):
    name = f"late_module_{os.getpid()}"
    (tmp_path / f"{name}.py").write_text("value = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    finders = len(sys.meta_path)
    startup.after_import(name, lambda m: seen.append(m.value) or setattr(m, "value", 2))
    assert len(sys.meta_path) == finders + 1
    try:
        module = importlib.import_module(name)
        assert seen == [1] and module.value == 2 and len(sys.meta_path) == finders  # run once, then gone
        startup.after_import(name, lambda m: seen.append("at once"))                 # already imported
        assert seen == [1, "at once"] and len(sys.meta_path) == finders
    finally:
        sys.modules.pop(name, None)


def test_the_servers_events_import_no_pyplot_and_its_charts_still_draw():
    """gradio wraps every event in a switch of matplotlib's backend whose `get_backend()` imports pyplot when no
    backend is named (0.2 s of the first answer here); the app names agg before matplotlib's import. Checked in a
    fresh process as the server runs: the app imported, an event's wrapper, then a chart drawn to a PNG."""
    probe = ("import sys\nimport app\nfrom gradio import utils\n"
             "with utils.MatplotlibBackendMananger():\n    pass\n"
             "from profiling import figures\nfrom matplotlib.figure import Figure\n"
             "drawn = figures.png(Figure(figsize=(1, 1)))\n"
             "print('pyplot:', 'matplotlib.pyplot' in sys.modules, 'png:', drawn[:4] == b'\\x89PNG')\n")
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**env, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pyplot: False png: True" in done.stdout.splitlines(), (done.stdout[-2000:], done.stderr[-2000:])


def test_the_warm_up_steps_measure_every_backend_that_runs_here_and_record_their_phases():
    found = warmup.steps("cpu", ["sdpa_docmask", "naive", "sdpa_math", "sdpa_cudnn", "flex", "sdpa_flash"])
    names = [name for name, _ in found]
    # The page's default pair first (its forward pays the one-off costs), then each other variant alone (a
    # packed-only one after the rest), forwards then training steps; the compile last: a live request waits for one
    # short step at most, never for every variant's (cuDNN's steps, no CPU kernel, say they did not run)
    assert names == ["libraries, profiler", "sdpa_math", "sdpa_cudnn", "sdpa_docmask", "naive: a training step",
                     "sdpa_flash: a training step", "sdpa_math: a training step", "sdpa_cudnn: a training step",
                     "sdpa_docmask: a training step", "flex: compile"]
    plain = warmup.steps("cpu", ["naive"])[0][1]
    with phases.recording() as spent:
        plain()
    for phase in ("inputs", "first call", "accuracy", "warm-up", "timing rounds", "profiling", "trace"):
        assert spent.get(phase, 0) > 0, phase


def test_a_replay_records_its_own_phases_and_nothing_is_kept_unasked():
    with phases.recording() as spent:
        session.compare(replayed())
    assert list(spent) == ["plan", "replay lookup", "explain"]
    assert all(seconds >= 0 for seconds in spent.values())
    with phases.spent("nobody records"):  # outside a recording: nothing kept, nothing raised
        phases.add("nor this", 1.0)
    assert "nobody records" not in spent and "nor this" not in spent


def test_compile_caches_go_to_the_apps_folder_only_where_the_user_chose_none(tmp_path, monkeypatch):
    for name in ("TORCHINDUCTOR_CACHE_DIR", "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR",
                 "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    chosen = caches.keep_compiles(tmp_path / "app")
    assert chosen == {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "app" / "inductor"),
                      "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR": str(tmp_path / "app" / "flash_attn_cute"),
                      "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED": "1"}
    assert all(os.environ[k] == v for k, v in chosen.items())
    from torch._inductor.runtime.cache_dir_utils import cache_dir  # the variable PyTorch itself reads
    assert Path(cache_dir()) == tmp_path / "app" / "inductor"

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("FLASH_ATTENTION_CUTE_DSL_CACHE_DIR", str(tmp_path / "fa4"))
    monkeypatch.delenv("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED")
    assert caches.keep_compiles(tmp_path / "app") == {}  # the user's folders, and their choice to cache FA4 or not
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")
    assert "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED" not in os.environ


def test_a_read_only_home_leaves_the_compilers_defaults(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert caches.keep_compiles(blocked / "app") == {}
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ


def test_the_machine_is_read_without_importing_triton_and_still_names_it(monkeypatch):
    import importlib.metadata
    monkeypatch.setitem(sys.modules, "triton", None)  # an import of triton now fails: only its metadata can answer
    try:
        expected = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        expected = None
    assert detect("cpu").triton_version == expected


@pytest.mark.parametrize("gpu_ms, rounds, per_round", [(0.1, timing.HOST_ROUNDS, None),
                                                        (3.0, timing.LONG_HOST_ROUNDS, 1 + timing.LOOP_CALLS + 2),
                                                        (14.0, timing.LONG_HOST_ROUNDS, 0 + 2 + 2)])
def test_host_figures_of_a_long_call_take_the_rounds_the_cost_model_prices(gpu, gpu_ms, rounds, per_round):
    """A call of a millisecond or more (GPU-bound beyond doubt) takes LONG_HOST_ROUNDS rounds: each a settling call
    (none from 10 ms), a back-to-back loop and parked calls, whole calls all (flash at S=16,384 takes 14 ms on the
    H200); the cost model that plans a request prices no fewer. A short one keeps HOST_ROUNDS, and the variants still alternate."""
    short, measured = subject(gpu, host_s=(1e-5,)), subject(gpu, host_s=(1e-5,))
    short.log, measured.log = [], []
    short.run.timing = Timing.of([0.1] * 8, "cuda events")
    measured.run.timing = Timing.of([gpu_ms] * 8, "cuda events")
    timing.host_figures([short, measured], lambda: None)
    assert short.run.back_to_back.samples == timing.HOST_ROUNDS
    assert measured.run.back_to_back.samples == rounds
    if per_round is not None:
        assert len(measured.log) == rounds * per_round
        model = budget._MID_TIMED_CALLS if gpu_ms < 10 else budget._LONG_TIMED_CALLS
        assert model["cuda"] >= len(measured.log) + timing.MIN_SAMPLES
