"""Where a request's wall time goes, through the public API and through the front door:

    python bench/latency.py [--quick]        # the table on stdout, and in $OUT/latency.txt when $OUT is set

Through the API: a server started here (this file with --serve: app.py's start, on 127.0.0.1 and a free port)
answering gradio_client; through the front door: `profiling.session` called in a fresh process (this file with
--front-door), the page's rendering (`app.show`) after it. Each scenario's wall time is split into its parts:
the server's process start and imports (torch, gradio, the app), its launch and first HTTP answer; per request, the
phases the code marks (`profiling.phases`: plan, copy ceiling (the first CUDA allocation on a GPU), inputs, setup,
first call (library handles, compiles), accuracy, warm-up, timing rounds, host figures, memory, profiling (the first
one starts the profiler), trace, pin cost, replay lookup, explain, serialize); the wait for the measurement thread
(a start-up warm-up in progress); rendering (the page's); and transfer (the client's wall time less the server's
handler). "other" is what no phase holds. The scenarios: server start to its first replayed answer, a replay (and
the same replay over plain HTTP: gradio_client's message loop polls every 50 ms, a floor no server can lower), the
first live comparison of a fused pair, the same warm, a warm naive pair (both warm pairs over plain HTTP too), a live
sweep (9 lengths on a GPU; a CPU-sized one on a CPU), replays while the same sweep runs again and once the server
is idle, on a GPU the first live fused pair of a fresh server left alone until its warm-up is over; and the time of
`import torch, gradio` in a fresh interpreter, the yardstick of start-up; and gradio_client's own floor, a bare
gradio app's echo (this file with --echo) through gradio_client and over plain HTTP.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RECORDING = "h200-torch2.11"
GPU_PAIRS = {"fused": ("sdpa_flash", "sdpa_cudnn"), "naive": ("naive", "naive_inplace")}
CPU_PAIRS = {"fused": ("sdpa_flash", "sdpa_auto"), "naive": ("naive", "naive_inplace")}
GPU_SWEEP = tuple(128 * 2**i for i in range(9))     # 128 … 32,768
CPU_SWEEP = (128, 256, 512, 1024)
WARM_UP_WAIT_S = 180     # the longest wait for a fresh server's start-up warm-up (compiles included) to be over
REQUEST_TIMEOUT_S = 120  # a request with no answer by then is a hang: the bench stops and says which
TARGETS_S = {"server start → first answer": 6.0, "first live, fused pair": 2.0, "warm fused pair": 0.15,
             "warm naive pair": 0.4, "live sweep": 8.0, "replay": 0.1}  # the issue's, on the H200 through the API


def now() -> float:
    return time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of this machine


# -- the server, as app.py starts it, with its requests' phases written to a file -----------------------------
START_STEPS = {"reads the machine": ("profiling.environment", "detect"),
               "starts the profiler": ("profiling.capture", "start_profiler_here"),
               "reads the recording": ("profiling.replay", "load_recorded")}


def _time_start_steps() -> dict[str, float]:
    """The app's import split into the steps it runs as it loads (handlers': the machine read, the profiler's one-off
    start, the recording read), each wrapped before handlers imports it; the rest (spaces, the modules, the page) is
    what they leave."""
    import importlib

    spent: dict[str, float] = {}
    for name, (module, function) in START_STEPS.items():
        loaded = importlib.import_module(module)
        original = getattr(loaded, function)

        def timed(*args, original=original, name=name, **kwargs):
            t0 = now()
            try:
                return original(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + now() - t0
        setattr(loaded, function, timed)
    return spent


def serve(port: int, record_path: str) -> None:
    started = now()
    marks = {"interpreter": started}
    from profiling import startup
    collecting = startup.pause()  # as a server's start does (handlers, app.py's first import, pauses it first) ...
    startup.skip_type_stubs()     # ... and turns gradio's stub writing off before gradio's import
    import torch  # noqa: F401
    marks["import torch"] = now()
    import gradio  # noqa: F401
    marks["import gradio"] = now()
    spent = _time_start_steps()
    import app
    import handlers
    from profiling import phases
    startup.settle(collecting)  # ... and settles once loaded (handlers found the collector paused: left it so)
    marks["import app"] = now()
    marks["the app's steps"] = spent
    record = open(record_path, "a", buffering=1)

    def write(entry: dict) -> None:
        record.write(json.dumps(entry) + "\n")

    original = handlers.serve

    async def timed(kind, request, progress, run_id=None, keep=True):
        with phases.recording() as spent:
            t0 = now()
            try:
                return await original(kind, request, progress, run_id, keep)
            finally:
                write({"kind": kind, "live": request.live, "handler_s": now() - t0, "phases": spent})

    handlers.serve = timed
    app.demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **app.LAUNCH)
    marks["launched"] = now()
    write({"marks": marks})
    app.once_serving()  # as app.py's main does, then
    if handlers.wait_for_warm_up():  # over: its steps done, or dropped for a live request
        write({"warmed": now(), "warm_up_s": handlers.WARM_UP.steps})
    while True:
        time.sleep(3600)


def serve_echo(port: int) -> None:
    """A bare gradio app of one endpoint that hands its text back: what gradio and its client cost with no work."""
    import gradio as gr
    with gr.Blocks() as demo:
        text, same = gr.Textbox(), gr.Textbox()
        text.submit(lambda x: x, text, same, api_name="echo")
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    while True:
        time.sleep(3600)


def client_floor(rows: list, facts: dict, repeats: int) -> None:
    """gradio_client's own floor on this host: a bare gradio app's echo (`serve_echo`, a process of its own) through
    gradio_client and over plain HTTP, each the median of `repeats` after a first. A row each, no server phases: all
    of it is gradio, the client and the transfer."""
    import httpx
    from gradio_client import Client

    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    process = subprocess.Popen([sys.executable, __file__, "--echo", str(port)], cwd=ROOT,
                               env=os.environ | {"GRADIO_ANALYTICS_ENABLED": "False"})
    try:
        until = now() + REQUEST_TIMEOUT_S
        while True:
            try:
                urllib.request.urlopen(url + "config", timeout=5).read()
                break
            except OSError:
                if process.poll() is not None or now() > until:
                    raise SystemExit("the echo server did not start")
                time.sleep(0.05)
        client = Client(url, verbose=False)

        def through_client() -> float:
            t0 = now()
            client.predict("echo", api_name="/echo")
            return now() - t0
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as plain:
            for name, once in (("bare gradio echo", through_client),
                               ("bare gradio echo over plain HTTP", lambda: raw_http(plain, url, "echo", ["echo"]))):
                walls = [once() for _ in range(1 + repeats)][1:]  # the first opened the connection
                wall = statistics.median_low(walls)
                rows.append((f"{name} (median of {repeats})", "API", wall, {"transfer": wall}))
                facts[name] = wall
    finally:
        process.terminate()
        process.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def parts_of(entry: dict, client_s: float | None = None) -> dict[str, float]:
    """A served request's parts: its phases, what no phase holds, and (through the API) the transfer."""
    parts = dict(entry["phases"])
    parts["other"] = max(0.0, entry["handler_s"] - sum(parts.values()))
    if client_s is not None:
        parts["transfer"] = max(0.0, client_s - entry["handler_s"])
    return parts


def values_of(source: str, a: str, b: str, device: str, **fields) -> dict:
    from profiling.request import KEYS, Request
    return dict(zip(KEYS, Request.build(source, a, b, fields, device).values()))


class Server:
    """app.py's server in a process of its own (this file with --serve), from its start to its first replayed answer:
    `start` is that row's parts."""

    def __init__(self, folder: str, device: str):
        from gradio_client import Client

        self.record_path = Path(folder) / f"record-{now()}.jsonl"
        self.record_path.touch()
        port = free_port()
        url = self.url = f"http://127.0.0.1:{port}/"
        # the request made before the clock starts: in a client that has not imported torch, making it imports the
        # variants (and torch), 1.6 s of this CPU that the server's start would otherwise be charged
        self.replay = values_of(RECORDING, *(GPU_PAIRS if device == "cuda" else CPU_PAIRS)["fused"], device)
        started = now()
        self.process = subprocess.Popen([sys.executable, __file__, "--serve", str(port), str(self.record_path)],
                                        cwd=ROOT, env=os.environ | {"GRADIO_ANALYTICS_ENABLED": "False", "PYTHONFAULTHANDLER": "1"})
        while True:
            try:
                urllib.request.urlopen(url + "config", timeout=5).read()
                break
            except OSError:
                if self.process.poll() is not None:
                    raise SystemExit(f"the server exited with {self.process.returncode}")
                time.sleep(0.05)
        answered = now()
        self.client = Client(url, verbose=False)
        connected = now()
        t0 = now()
        self.client.predict(**self.replay, api_name="/replay")
        first = now()
        entries = self.records()
        marks = next(e["marks"] for e in entries if "marks" in e)
        self.started, self.first_answer_s = started, first - started
        self.start = {"interpreter": marks["interpreter"] - started,
                      "torch": marks["import torch"] - marks["interpreter"],
                      "gradio": marks["import gradio"] - marks["import torch"],
                      **{f"the app {k}": v for k, v in marks["the app's steps"].items()},
                      "the app, the rest": marks["import app"] - marks["import gradio"]
                      - sum(marks["the app's steps"].values()),
                      "launch": marks["launched"] - marks["import app"],
                      "first HTTP answer": answered - marks["launched"], "client connects": connected - answered}
        self.start |= {f"replay · {k}": v for k, v in parts_of(entries[-1], first - t0).items()}

    def records(self) -> list[dict]:
        return read_records(self.record_path)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def raw_http(client, url: str, api: str, data: list) -> float:
    """One request through the same queue as gradio_client's (gradio's /call route: join, then read the event's
    stream) on `client` (an httpx.Client, its connection kept, as a browser keeps it), without the client library,
    whose message loop polls every 50 ms (gradio_client.utils.stream_sse_v1plus). Its wall time in seconds."""
    t0 = now()
    event = client.post(f"{url}gradio_api/call/{api}", json={"data": data})
    event.raise_for_status()
    with client.stream("GET", f"{url}gradio_api/call/{api}/{event.json()['event_id']}") as stream:
        complete = False
        for line in stream.iter_lines():
            if line.startswith("event: error"):
                raise SystemExit(f"{api} over plain HTTP failed")
            complete = complete or line.startswith("event: complete")
            if complete and line.startswith("data:"):  # the answer itself, read
                break
    return now() - t0


def through_api(quick: bool, device: str, rows: list, facts: dict, starts: int) -> None:
    import httpx

    pairs = GPU_PAIRS if device == "cuda" else CPU_PAIRS
    # matplotlib's font cache, built once here: a server stopped below while building it (behind its first answer,
    # on a fresh machine) leaves its lock file, and every later server's import waits 5 s for that lock
    subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], check=True)
    client_floor(rows, facts, 5 if quick else 10)
    with tempfile.TemporaryDirectory() as folder:
        servers = []
        for _ in range(starts - 1):  # the start alone, measured again: it varies with the machine's load
            servers.append(Server(folder, device))
            servers[-1].stop()
        server = Server(folder, device)
        servers.append(server)
        try:
            middle = sorted(servers, key=lambda s: s.first_answer_s)[(len(servers) - 1) // 2]
            rows.append(("server start → first answer" + (f" (median of {starts})" if starts > 1 else ""), "API",
                         middle.first_answer_s, middle.start))
            facts["server start → first answer"] = middle.first_answer_s
            facts["the server's own import torch, gradio"] = middle.start["torch"] + middle.start["gradio"]
            client = server.client

            def timed(name: str, api: str, values: dict, repeats: int = 1, **extra) -> None:
                walls, parts = [], []
                for _ in range(repeats):
                    t0 = now()
                    client.submit(**values, **extra, api_name=api).result(timeout=REQUEST_TIMEOUT_S)
                    walls.append(now() - t0)
                    parts.append(parts_of(server.records()[-1], walls[-1]))
                middle = walls.index(statistics.median_low(walls))
                rows.append((name + (f" (median of {repeats})" if repeats > 1 else ""), "API", walls[middle],
                             parts[middle]))
                facts[name] = walls[middle]
                print(f"{rows[-1][0]}: {rows[-1][2]:.3f} s", file=sys.stderr, flush=True)  # as it goes

            def over_plain_http(name: str, api: str, values: dict, repeats: int) -> None:
                """The same request as gradio_client's, over plain HTTP (as the page's own client reads it: a
                stream, no polling): what the server's answer costs without the client library's 50 ms loop."""
                from profiling.request import KEYS
                with httpx.Client(timeout=REQUEST_TIMEOUT_S) as plain:
                    walls = [raw_http(plain, server.url, api, [values[k] for k in KEYS]) for _ in range(1 + repeats)]
                walls = walls[1:]  # the first opened the connection
                middle = walls.index(statistics.median_low(walls))
                rows.append((f"{name} over plain HTTP (median of {len(walls)})", "API", walls[middle],
                             parts_of(server.records()[-len(walls) + middle], walls[middle])))
                facts[f"{name} over plain HTTP"] = walls[middle]

            timed("replay", "/replay", server.replay, 3 if quick else 10)
            over_plain_http("replay", "replay", server.replay, 3 if quick else 10)
            warmed = [e for e in server.records() if "warmed" in e]
            if warmed:  # before the first live request: it would drop the steps not started
                facts["warm-up done, after start"] = warmed[0]["warmed"] - server.started
            live = values_of("live", *pairs["fused"], device)
            timed("first live, fused pair", "/compare", live)
            timed("warm fused pair", "/compare", live, 3 if quick else 5)
            naive = values_of("live", *pairs["naive"], device)
            client.submit(**naive, api_name="/compare").result(timeout=REQUEST_TIMEOUT_S)  # its first call's costs
            timed("warm naive pair", "/compare", naive, 3 if quick else 5)
            over_plain_http("warm fused pair", "compare", live, 3 if quick else 5)
            over_plain_http("warm naive pair", "compare", naive, 3 if quick else 5)
            lengths = (GPU_SWEEP if device == "cuda" else CPU_SWEEP[:2] if quick else CPU_SWEEP)
            timed("live sweep", "/sweep", live, seq_lens=",".join(map(str, lengths)), axis="seq_len")
            rows[-1] = (f"live sweep of {len(lengths)} lengths", *rows[-1][1:])
            # replays while a live run holds the machine (the same sweep again), then with the server idle
            job = client.submit(**live, seq_lens=",".join(map(str, lengths)), axis="seq_len", api_name="/sweep")
            during = []
            while not job.done():
                t0 = now()
                client.predict(**server.replay, api_name="/replay")
                wall = now() - t0
                replayed = next(e for e in reversed(server.records()) if "kind" in e and not e["live"])
                during.append((wall, parts_of(replayed, wall)))
            job.result(timeout=REQUEST_TIMEOUT_S)
            if during:
                wall, parts = sorted(during, key=lambda d: d[0])[(len(during) - 1) // 2]
                rows.append((f"replay during a live sweep (median of {len(during)})", "API", wall, parts))
                facts["replay during a live sweep"] = wall
            timed("replay, the server idle", "/replay", server.replay, 3 if quick else 10)
            warmed = [e for e in server.records() if "warmed" in e]
            if warmed:  # its steps as they ran (those a live request dropped are not there)
                rows.insert(2, ("start-up warm-up (background)", "API", sum(warmed[0]["warm_up_s"].values()),
                                warmed[0]["warm_up_s"]))
        except TimeoutError:  # a hang: the server's threads as faulthandler dumps them (its stderr is ours)
            print(f"no answer after {REQUEST_TIMEOUT_S} s: the server's threads follow", file=sys.stderr, flush=True)
            server.process.send_signal(signal.SIGABRT)
            raise
        finally:
            server.stop()
        if device == "cuda":
            first_after_warm_up(Server(folder, device), values_of("live", *pairs["fused"], device), rows, facts)


def first_after_warm_up(server: "Server", live: dict, rows: list, facts: dict) -> None:
    """A visitor who clicks once the start-up warm-up is over: a fresh server left alone until its warm-up is done
    (every step, none dropped), then its first live fused pair; and that warm-up's steps."""
    try:
        while not any("warmed" in e for e in server.records()) and now() - server.started < WARM_UP_WAIT_S:
            time.sleep(0.2)
        warmed = next((e for e in server.records() if "warmed" in e), None)
        t0 = now()
        server.client.submit(**live, api_name="/compare").result(timeout=REQUEST_TIMEOUT_S)
        wall = now() - t0
        name = (f"first live, fused pair, after warm-up ({warmed['warmed'] - server.started:.1f} s)" if warmed else
                f"first live, fused pair, warm-up on ({WARM_UP_WAIT_S} s)")  # in seconds after the server's start
        rows.append((name, "API", wall, parts_of(server.records()[-1], wall)))
        facts["first live, fused pair, after the warm-up"] = wall
        if warmed:
            rows.append(("start-up warm-up (background), undisturbed", "API", sum(warmed["warm_up_s"].values()),
                         warmed["warm_up_s"]))
    finally:
        server.stop()


# -- the front door: profiling.session in a fresh process, the page's rendering after it --------------------------
def front_door(quick: bool, mode: str, host_rounds: int | None) -> None:
    """`mode`: "cold" (every scenario in a fresh process), "warm" (the start-up warm-up, then the first live
    comparison) or "sweep" (the live sweep alone, with `host_rounds` host rounds for calls of a millisecond or
    more: the figure before issue 29 cut them, where 8)."""
    warm_first = mode == "warm"
    started = now()
    from profiling import startup
    collecting = startup.pause()  # as a server's start does (see serve)
    startup.skip_type_stubs()
    import torch
    t_torch = now()
    import gradio  # noqa: F401
    t_gradio = now()
    import app
    import handlers
    from links import share_link  # noqa: F401  (the page's link: rendering needs a request's address)
    from profiling import phases, session, timing
    from profiling.request import Request
    startup.settle(collecting)
    t_app = now()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    pairs = GPU_PAIRS if device == "cuda" else CPU_PAIRS
    rows, facts = [], {}
    rows.append(("imports", "front door", t_app - started,
                 {"torch": t_torch - started, "gradio": t_gradio - t_torch, "the app": t_app - t_gradio}))

    class Page:  # what app.show reads of gradio's request: the page's address
        headers: dict = {}
        base_url = "http://127.0.0.1/"

    def served(name: str, kind: str, request: Request, repeats: int = 1) -> None:
        walls, parts = [], []
        for _ in range(repeats):
            with phases.recording() as spent:
                t0 = now()
                waited = 0.0
                if request.live and handlers.WARM_UP.queued:
                    w0 = now()
                    handlers.wait_for_warm_up()
                    waited = now() - w0
                serve = session.compare if kind == "compare" else session.sweep
                answer = serve(request, budget_s=None if not request.live else
                               handlers.LIVE_BUDGET_S[request.workload.device])
                with phases.spent("serialize"):
                    text = json.dumps(answer.to_dict(), indent=1)
                with phases.spent("render"):
                    kept = handlers.RESULTS.put(handlers.Kept(kind, answer, text), 2 * len(text))
                    (app.show if kind == "compare" else app.show_sweep)(kept, Page())
                wall = now() - t0
            parts.append({"waited for the warm-up": waited, **spent,
                          "other": max(0.0, wall - waited - sum(spent.values()))} if waited
                         else {**spent, "other": max(0.0, wall - sum(spent.values()))})
            walls.append(wall)
        middle = walls.index(statistics.median_low(walls))
        rows.append((name + (f" (median of {repeats})" if repeats > 1 else ""), "front door", walls[middle],
                     parts[middle]))
        facts[name] = walls[middle]

    if host_rounds is not None:
        timing.LONG_HOST_ROUNDS = host_rounds
    lengths = GPU_SWEEP if device == "cuda" else CPU_SWEEP[:2] if quick else CPU_SWEEP
    sweep = Request.build("live", *pairs["fused"], {}, device, tuple(lengths))
    if mode == "sweep":
        served(f"live sweep of {len(lengths)} lengths, {timing.LONG_HOST_ROUNDS} host rounds from 1 ms", "sweep",
               sweep)
        print(json.dumps({"rows": rows, "facts": {}}))
        return
    if warm_first:
        w0 = now()
        handlers.start_warm_up()
        if handlers.wait_for_warm_up():
            rows.append(("start-up warm-up (background)", "front door", now() - w0, dict(handlers.WARM_UP.steps)))
    else:
        served("first replayed answer", "compare", Request.build(RECORDING, *pairs["fused"], {}, device))
        served("replay", "compare", Request.build(RECORDING, *pairs["fused"], {}, device), 3 if quick else 10)
    live = Request.build("live", *pairs["fused"], {}, device)
    served("first live, fused pair" + (" (after the warm-up)" if warm_first else ""), "compare", live)
    if not warm_first:
        served("warm fused pair", "compare", live, 3 if quick else 5)
        naive = Request.build("live", *pairs["naive"], {}, device)
        served("first live, naive pair", "compare", naive)
        served("warm naive pair", "compare", naive, 3 if quick else 5)
        served(f"live sweep of {len(lengths)} lengths", "sweep", sweep)
    print(json.dumps({"rows": rows, "facts": facts}))


def in_fresh_process(*args: str) -> dict:
    done = subprocess.run([sys.executable, __file__, *args], cwd=ROOT, capture_output=True, text=True,
                          env=os.environ | {"GRADIO_ANALYTICS_ENABLED": "False"})
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def import_yardstick(repeats: int) -> float:
    """`import torch, gradio` in a fresh interpreter: the median of `repeats`."""
    code = "import time; t = time.perf_counter(); import torch, gradio; print(time.perf_counter() - t)"
    return statistics.median(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                  check=True).stdout) for _ in range(repeats))


# -- the table ---------------------------------------------------------------------------------------------------
# The phases that measure (make the inputs, run the variants' calls, read the clocks, the copy ceiling and the pin's
# cost): the bare work a live answer wraps. The rest (plan, trace, explain, serialize, waits, transfer) is the wrapping.
MEASURING = ("copy ceiling", "inputs", "setup", "first call", "accuracy", "warm-up", "timing rounds", "host figures",
             "memory", "profiling", "pin cost")


def table(rows: list, machine: str, facts: dict, yardstick_s: float, device: str) -> str:
    load = " · load average %.1f, %.1f, %.1f" % os.getloadavg() if hasattr(os, "getloadavg") else ""
    lines = [f"latency on {machine} ({os.cpu_count()} CPUs{load})",
             f"import torch, gradio in a fresh interpreter: {yardstick_s:.2f} s", "",
             f"{'scenario':<46} {'path':<10} {'wall s':>7} {'× bare':>6}  parts (s), largest first"]
    for name, path, wall, parts in rows:
        shown = sorted(((k, v) for k, v in parts.items() if v >= 0.0005), key=lambda kv: -kv[1])
        bare = sum(parts.get(k, 0.0) for k in MEASURING)
        ratio = f"{wall / bare:>5.2f}×" if bare >= 0.001 else ""
        lines.append(f"{name:<46} {path:<10} {wall:>7.3f} {ratio:>6}  " + " · ".join(f"{k} {v:.3f}" for k, v in shown))
    lines += ["", "× bare: a live answer's wall time over the bare work it wraps, its measuring phases (" +
              ", ".join(MEASURING) + ")"]
    start = facts.get("server start → first answer")
    if start is not None:
        own = facts["the server's own import torch, gradio"]
        lines.append(f"server start → first replayed answer: {start:.2f} s = {start / yardstick_s:.2f}× import "
                     f"torch, gradio in a fresh interpreter, {start / own:.2f}× the server's own ({own:.2f} s, the "
                     f"same moment's load) (target ≤ 2× on a CPU)")
    floor = facts.get("bare gradio echo")
    if floor is not None:
        lines.append(f"gradio_client's own floor here: {floor:.3f} s for a bare gradio app's echo, "
                     f"{facts['bare gradio echo over plain HTTP']:.3f} s over plain HTTP: every row through gradio_client "
                     "carries its client's costs and its message loop's 50 ms sleeps")
    if "warm-up done, after start" in facts:
        lines.append(f"start-up warm-up done {facts['warm-up done, after start']:.2f} s after the server's start")
    if device == "cuda":
        for name, target in TARGETS_S.items():
            for measured, got in ((k, f) for k, f in facts.items() if k.startswith(name)):  # replays: each moment
                lines.append(f"target {measured}: {got:.3f} s (≤ {target} s: {'met' if got <= target else 'NOT met'})")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, a shorter CPU sweep")
    parser.add_argument("--api-only", action="store_true", help="only through the API")
    parser.add_argument("--starts", type=int, help="server starts measured (default 1 with --quick, else 3)")
    parser.add_argument("--serve", nargs=2, metavar=("PORT", "RECORD"), help=argparse.SUPPRESS)
    parser.add_argument("--echo", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--front-door", choices=("cold", "warm", "sweep"), help=argparse.SUPPRESS)
    parser.add_argument("--host-rounds", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(int(args.serve[0]), args.serve[1])
    if args.echo:
        return serve_echo(args.echo)
    if args.front_door:
        front_door(args.quick, args.front_door, args.host_rounds)
        import handlers
        handlers.end_process()  # its answer is printed: on a GPU the interpreter's own exit hangs (see end_process)
    yardstick_s = import_yardstick(1 if args.quick else 3)
    import torch
    from profiling.environment import detect
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows, facts = [], {}
    through_api(args.quick, device, rows, facts, args.starts or (1 if args.quick else 3))
    if not args.api_only:
        quick = ("--quick",) if args.quick else ()
        runs = [("cold",)] + ([("warm",), ("sweep", "--host-rounds", "8")] if device == "cuda" else [])
        for mode in runs:
            done = in_fresh_process("--front-door", *mode, *quick)
            rows += done["rows"]
            facts |= {f"front door: {k}": v for k, v in done["facts"].items()}
    out = table(rows, detect(device).summary(), facts, yardstick_s, device)
    print(out, end="")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "latency.txt").write_text(out)


if __name__ == "__main__":
    main()
