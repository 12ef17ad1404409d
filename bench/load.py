"""A bounded load, soak and hostile run against the app, served by `python app.py` on 127.0.0.1 only.

    python bench/load.py                        # every phase, ~10 minutes on a 2-core CPU
    python bench/load.py --phases 5,7           # some phases (numbers below)
    python bench/load.py --phases 6 --burners 4 # the budget under a loaded machine
    python bench/load.py | tee bench/load_output.txt

It starts `python app.py` on a free port with a temp dir of its own (its log, gradio's cache, the app's scratch
folders), writes nothing else, and stops it at the end, removing that dir (--keep-temp keeps it, log included).
The values it sends are built from the app's own field list (profiling.request.KEYS, checked against
GET /gradio_api/info), so it follows the controls as they change.

1. invalid calls (~300): bad values of every field through the API, malformed bodies, the closed REST routes,
   crafted `show` ids, file-route probes, oversized bodies, hostile links given to the page-load prefill;
2. 20 browser-like clients x 3 at once (the page's own events: run, then `show` of the kept id), replays of the
   H200 recording and small live CPU runs; a run whose kept result no longer shows is a result lost;
3. 100 consecutive runs (run, then show, as the page does), each in a new session; RSS sampled every 20;
4. one checked session's kept result, shown again between 40 other sessions' runs (4 at a time): it must show;
5. 5 live runs cancelled 1.5 s after joining (each cancel returns once the server has stopped the work), then a
   small live run: its latency against the same run's quiet latency, measured first (target <= 2x);
6. live requests predicted just under the CPU's live budget, one after another, while 4 other clients replay
   recorded runs (and, with --burners N, N busy processes load the machine): each must finish within
   budget + 5 s and come back with a verdict (its headline);
7. hostile routes: unknown parameters on /gradio_api/call/v2/<api>, unknown event and session ids, every event
   with no Python function (js-only), the page's instant helpers fed lists, an empty session_hash, URLs over
   64 KB, uploads: each must get a 4xx (never a 5xx), with no traceback in the server's log.

Prints one table (per phase: calls served/refused/failed, p50/p95 latency, the server's RSS growth, threads,
tracebacks in its log) and each phase's own figures against the issue's targets. Every request goes to 127.0.0.1;
every loop and every stream read is bounded.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from attention_variants import VARIANTS
from profiling.budget import predicted_seconds
from profiling.request import LIVE_BUDGET_S
from profiling.environment import detect
from profiling.request import KEYS, Request

RECORDING = "h200-torch2.11"
REPLAY = Request.build(RECORDING, "sdpa_flash", "sdpa_cudnn", {}, "cpu").values()
SMALL = dict(batch=1, heads=2, seq_len=128, head_dim=32, dtype="fp32")
LIVE = Request.build("live", "naive", "sdpa_flash", SMALL, "cpu").values()
CHECKED = Request.build(RECORDING, "naive", "naive_inplace", {"seq_len": 4096}, "cpu").values()
TIMEOUT_S = 180          # any one request or stream
NOT_KEPT = "no longer kept"


def with_(data: list, **changes) -> list:
    return [changes.get(key, value) for key, value in zip(KEYS, data)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python app.py` on a free port, with its own temp dir so its files can be counted."""

    def __init__(self):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmp = Path(tempfile.mkdtemp(prefix="load_"))
        self.log_path = self.tmp / "app.log"
        self.log = open(self.log_path, "w")
        env = {**os.environ, "PORT": str(self.port), "TMPDIR": str(self.tmp), "PYTHONUNBUFFERED": "1",
               "GRADIO_TEMP_DIR": str(self.tmp / "gradio"), "GRADIO_SERVER_NAME": "127.0.0.1"}
        self.process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=self.log,
                                        stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"app.py exited with {self.process.returncode}:\n{self.log_text()[-3000:]}")
            try:
                if httpx.get(self.url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise SystemExit("app.py did not start")

    def _status(self, key: str) -> int:
        with open(f"/proc/{self.process.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(key))

    def rss(self) -> int:
        return self._status("VmRSS") * 1024

    def threads(self) -> int:
        return self._status("Threads")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def temp_files(self) -> dict[str, int]:
        counts = Counter()
        for path in self.tmp.rglob("*"):
            if path.is_file() and path.name != "app.log":
                top = path.relative_to(self.tmp).parts[0]
                counts["gradio cache" if top == "gradio" else top.rsplit("_", 1)[0]] += 1
        return dict(counts)

    def stop(self) -> str:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        self.log.close()
        return self.log_text()


class Tally:
    """Outcomes ("served …", "refused …", "failed …") and latencies of one phase, with the server's RSS, threads
    and log around it."""

    def __init__(self, name: str, server: Server):
        self.name, self.server = name, server
        self.outcomes, self.latencies, self.lock = Counter(), [], threading.Lock()
        self.notes: list[str] = []
        self.rss0, self.threads0, self.log0 = server.rss(), server.threads(), len(server.log_text())
        self.started = time.perf_counter()

    def add(self, outcome: str, seconds: float):
        with self.lock:
            self.outcomes[outcome] += 1
            self.latencies.append(seconds)

    def timed(self, fn, *args, **kwargs) -> str:
        start = time.perf_counter()
        try:
            outcome = fn(*args, **kwargs)
        except httpx.HTTPError as error:
            outcome = f"failed: {type(error).__name__}"
        self.add(outcome, time.perf_counter() - start)
        return outcome

    def close(self):
        self.wall = time.perf_counter() - self.started
        self.rss1, self.threads1 = self.server.rss(), self.server.threads()
        log = self.server.log_text()[self.log0:]
        self.tracebacks = log.count("Traceback (most recent call last)")
        self.refusals = log.count("refused: ")
        self.log_excerpt = [line for line in log.splitlines() if re.match(r"\w*(Error|Exception)\b", line)][:5]
        return self

    def count(self, kind: str) -> int:
        return sum(n for k, n in self.outcomes.items() if k.startswith(kind))

    def row(self) -> str:
        lat = sorted(self.latencies)
        p50 = statistics.median(lat) if lat else 0.0
        p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))] if lat else 0.0
        grew = 100 * (self.rss1 - self.rss0) / self.rss0
        return (f"{self.name:34s} {len(lat):5d} {self.count('served'):6d} {self.count('refused'):7d} "
                f"{self.count('failed'):6d} {p50:7.2f} {p95:7.2f} {grew:+6.1f}% "
                f"{self.threads0:3d}->{self.threads1:<3d} {self.tracebacks:5d}")

    def details(self) -> list[str]:
        counts = "; ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
        lines = [f"{self.name}: {counts}; {self.refusals} one-line refusals logged; {self.wall:.0f} s"]
        lines += [f"    {note}" for note in self.notes]
        lines += [f"    log: {line[:160]}" for line in self.log_excerpt]
        return lines


HEADER = (f"{'phase':34s} {'calls':>5s} {'served':>6s} {'refused':>7s} {'failed':>6s} {'p50 s':>7s} {'p95 s':>7s} "
          f"{'RSS':>7s} {'threads':>7s} {'trace':>5s}")


# -- talking to the app as the page and as an API client do ---------------------------------------------------------
def read_stream(http: httpx.Client, url: str, params: dict | None, until, deadline_s: float = TIMEOUT_S):
    """Read an SSE stream until `until(event, data)` returns a value (returned), the stream ends or the deadline
    passes (None)."""
    deadline = time.monotonic() + deadline_s
    event = None
    with http.stream("GET", url, params=params) as stream:
        if stream.status_code != 200:
            return {"http": stream.status_code}
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                try:
                    data = json.loads(line[5:])
                except ValueError:
                    data = line[5:]
                found = until(event, data)
                if found is not None:
                    return found
            if time.monotonic() > deadline:
                return None
    return None


def api_call(http: httpx.Client, api: str, data: list | None = None, *, raw: str | None = None,
             deadline_s: float = TIMEOUT_S) -> tuple[str, object]:
    """POST /gradio_api/call/<api>, then read its result: ("complete" | "error", data) or ("http <code>", text)."""
    body = raw if raw is not None else json.dumps({"data": data})
    posted = http.post(f"/gradio_api/call/{api}", content=body, headers={"content-type": "application/json"})
    if posted.status_code != 200:
        return f"http {posted.status_code}", posted.text
    found = read_stream(http, f"/gradio_api/call/{api}/{posted.json()['event_id']}", None,
                        lambda event, data: (event, data) if event in ("complete", "error") else None, deadline_s)
    return found if found is not None else ("no end", None)


def queued(http: httpx.Client, index: int, data: list, session: str, deadline_s: float = TIMEOUT_S) -> dict:
    """Join the queue as the page does and read the session's stream until the event completes."""
    joined = http.post("/gradio_api/queue/join", json={"data": data, "fn_index": index, "session_hash": session})
    if joined.status_code != 200:
        return {"msg": "http", "status": joined.status_code, "success": False}
    found = read_stream(http, "/gradio_api/queue/data", {"session_hash": session},
                        lambda _, m: m if isinstance(m, dict) and m.get("msg") == "process_completed" else None,
                        deadline_s)
    return found if found is not None else {"msg": "no end", "success": False}


def error_of(message: dict) -> str:
    output = message.get("output") or {}
    return str(output.get("error") or message.get("status") or message.get("msg"))


def run_and_show(http: httpx.Client, names: dict[str, int], data: list, session: str) -> tuple[str, str | None]:
    """What the page does on Run: its private event (answer and kept id), then `show` of that id. Returns the
    outcome and the kept id."""
    live = data[0] == "live"
    ran = queued(http, names["run_compare" if live else "run_compare_replay"], data, session)
    if not ran.get("success"):
        if ran.get("status") == 503:
            return "refused: queue full", None
        return f"failed: run: {error_of(ran)[:60]}", None
    kept = ran["output"]["data"][1]  # (the answer, the kept result's id)
    shown = queued(http, names["show"], [kept], session)
    if shown.get("status") == 503:
        return "refused: queue full (show)", kept
    if not shown.get("success"):
        said = error_of(shown)
        return ("failed: result lost" if NOT_KEPT in said else f"failed: show: {said[:60]}"), kept
    return f"served ({'live' if live else 'replay'})", kept


def fn_indices(http: httpx.Client) -> tuple[dict[str, int], list[dict]]:
    config = http.get("/config").json()
    return {dep.get("api_name"): dep["id"] for dep in config["dependencies"]}, config["dependencies"]


def raw_request(port: int, method: str, target: str, body: bytes = b"") -> int:
    """One HTTP/1.1 request over a plain socket (httpx refuses URLs over 64 KB): its status, 0 if none."""
    head = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json"
                      f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            deadline = time.monotonic() + 30
            while b"\r\n" not in head and time.monotonic() < deadline:
                chunk = s.recv(4096)
                if not chunk:
                    break
                head += chunk
    except OSError:
        return 0
    first = head.split(b"\r\n", 1)[0].split()
    return int(first[1]) if len(first) > 1 and first[1].isdigit() else 0


# -- 1. invalid calls -------------------------------------------------------------------------------------------
BAD_VALUES = {
    "seq_len": ("1024", [1], None, 128.7, True, "nan", {"a": 1}, -1, 0, 10**9),
    "heads": (0, 2000, 1.5, "x", False),
    "batch": (0, 4096, 2.0, [], "1"),
    "head_dim": (0, 1000, 3.5, None),
    "dtype": ("fp8", None, 16, ["bf16"], "", "FP32", " fp32 ", "float32"),
    "causal": ("yes", 1, None, "true"),
    "rank": (5, 3.0, "4", None, True),
    "passes": ("both", None, 1, ["fwd"]),
    "kv_heads": (0, -1, "1", 1.5, 3),
    "mask": ("none", None, 0, ["flag"]),
    "window": (-1, "8", 1.5, [], 10**9),
    "source": (None, "mars", "../etc", 1, ["live"]),
    "a": ("nope", None, "<img src=x>", 3),
    "b": ("`x`", "", "flash"),
}
TOO_LONG = [with_(LIVE, a="naive", b="sdpa_math", seq_len=4096, heads=16, dtype="bf16", head_dim=64),
            with_(LIVE, a="naive", b="sdpa_math", seq_len=65536, heads=64, batch=64, head_dim=128)]


def invalid_calls(server: Server, names: dict[str, int]) -> Tally:
    tally = Tally("1. invalid calls", server)
    live_json = json.dumps({"data": with_(LIVE, seq_len="@@")})
    specials = [live_json.replace('"@@"', "9" * 5000), live_json.replace('"@@"', "NaN"),
                live_json.replace('"@@"', "Infinity"), live_json.replace('"@@"', "-Infinity"),
                '{"data": "not a list"}', '{"nothing": 1}', "not json", '{"data": []}']
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        def bad_value(field, value):
            event, body = api_call(http, "compare", with_(LIVE, **{field: value}))
            said = body.get("error", "") if isinstance(body, dict) else ""
            if event == "error" and said.startswith((f"{field}=", f"{field} was not given")):
                return "refused, field named"
            return "refused, field not named" if event == "error" else f"failed: {event} {str(body)[:80]}"

        def special(raw):
            event, body = api_call(http, "compare", raw=raw)
            clean = event.startswith("http 4") or (event == "error" and bool(body.get("error")))  # said why
            return "refused cleanly" if clean else f"failed: {event} {str(body)[:80]}"

        def too_long(data):
            event, body = api_call(http, "compare", data)
            budget = isinstance(body, dict) and body.get("title") in ("Too long for this machine",
                                                                    "Too large for this machine")
            return "refused, over budget" if event == "error" and budget else f"failed: {event} {str(body)[:80]}"

        def rest_route(route):
            answer = http.post(route, json={"data": LIVE})
            return "refused cleanly" if answer.status_code == 404 else f"failed: http {answer.status_code}"

        def crafted_show(target):
            crafted = {"source": "live", "a": {"trace_path": str(target)}, "b": {"trace_path": str(target)}}
            for kept_id in (crafted, str(target), "../" * 8 + str(target)):
                shown = queued(http, names["show"], [kept_id], secrets.token_hex(8))
                if shown.get("success"):
                    return "failed: show rendered a client's id"
            return "refused cleanly"

        def file_probe(target):
            answer = http.get(f"/gradio_api/file={target}")
            return "refused cleanly" if answer.status_code in (403, 404) else f"failed: served {target}"

        def big_body(size):
            answer = http.post("/gradio_api/queue/join", content=b"x" * size,
                               headers={"content-type": "application/json"})
            return "refused cleanly" if answer.status_code == 413 else f"failed: http {answer.status_code}"

        def hostile_link(query):
            answer = http.post("/gradio_api/run/predict", params=query,
                               json={"data": [], "fn_index": names["prefill"], "session_hash": secrets.token_hex(8)})
            ok = answer.status_code == 200 and "Ignored from the link" in json.dumps(answer.json())
            return "refused cleanly" if ok else f"failed: http {answer.status_code}"

        for _ in range(2):
            for field, values in BAD_VALUES.items():
                for value in values:
                    tally.timed(bad_value, field, value)
        for raw in specials * 3:
            tally.timed(special, raw)
        for data in TOO_LONG * 3:
            tally.timed(too_long, data)
        for route in ("/gradio_api/run/compare", "/gradio_api/api/compare", "/gradio_api/run/show") * 4:
            tally.timed(rest_route, route)
        for target in [ROOT / "app.py", ROOT / ".git", Path("/etc/passwd"), server.log_path] * 3:
            tally.timed(crafted_show, target)
            tally.timed(file_probe, target)
        for route, body in (("/gradio_api/run/predict", {"data": [], "fn_index": 999}),
                            ("/gradio_api/queue/join", {"data": [], "fn_index": -1, "session_hash": "x"}),
                            ("/gradio_api/call/nope", {"data": []})) * 3:
            tally.timed(lambda r, b: "refused cleanly" if http.post(r, json=b).status_code == 404
                        else "failed: not a 404", route, body)
        for size in (2**20, 50 * 2**20) * 3:
            tally.timed(big_body, size)
        for query in ({"seq": "9" * 5000}, {"a": "`<img src=x>`"}, {"x`<b>": "1"}, {"rank": "3.0"},
                      {"heads": "[click](http://127.0.0.1:9)"}, {"seq": "１２８"}, {"dtype": "FP32"}) * 3:
            tally.timed(hostile_link, query)
    not_named = tally.outcomes.get("refused, field not named", 0)
    tally.notes.append(f"bad values refused naming the field: {tally.outcomes.get('refused, field named', 0)} of "
                       f"{tally.outcomes.get('refused, field named', 0) + not_named}")
    return tally.close()


# -- 2. concurrent browser-like clients -----------------------------------------------------------------------------
def concurrent_clients(server: Server, names: dict[str, int], clients: int = 20, each: int = 3) -> Tally:
    tally = Tally(f"2. {clients} clients x {each} (page)", server)

    def client(i: int):
        session = secrets.token_hex(8)  # one page, one session, several runs
        with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
            for j in range(each):
                data = LIVE if (i + j) % 3 == 0 else REPLAY
                tally.timed(lambda data=data: run_and_show(http, names, data, session)[0])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=900)
    done = tally.count("served") + tally.outcomes.get("failed: result lost", 0)
    tally.notes.append(f"results lost: {tally.outcomes.get('failed: result lost', 0)} of {done} completed runs "
                       "(target 0)")
    return tally.close()


# -- 3. soak: new sessions, as the page runs them ---------------------------------------------------------------
def soak(server: Server, names: dict[str, int], runs: int = 100) -> Tally:
    """RSS sampled before the runs and after every 20."""
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        for _ in range(10):  # warm: first renders, fonts, the recording's traces cached
            run_and_show(http, names, REPLAY, secrets.token_hex(8))
        tally = Tally(f"3. {runs} runs, new session each", server)
        samples = [server.rss()]
        for i in range(runs):
            data = LIVE if i % 10 == 0 else REPLAY
            tally.timed(lambda data=data: run_and_show(http, names, data, secrets.token_hex(8))[0])
            if (i + 1) % 20 == 0:
                samples.append(server.rss())
    tally.notes.append(f"RSS every 20 runs: {' '.join(f'{s / 2**20:.0f}' for s in samples)} MiB "
                       f"({100 * (samples[-1] - samples[0]) / samples[0]:+.1f}%, target < 5%)")
    return tally.close()


# -- 4. a kept result among 40 other sessions -----------------------------------------------------------------------
def kept_among_others(server: Server, names: dict[str, int], others: int = 40) -> Tally:
    tally = Tally(f"4. 1 checked + {others} other sessions", server)
    mine = secrets.token_hex(8)
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        start = time.perf_counter()
        ran = queued(http, names["run_compare_replay"], CHECKED, mine)
        tally.add("served (checked run)" if ran.get("success") else f"failed: checked run {error_of(ran)[:60]}",
                  time.perf_counter() - start)
        if not ran.get("success"):
            return tally.close()
        kept = ran["output"]["data"][1]

        def show_mine() -> str:
            shown = queued(http, names["show"], [kept], mine)
            if not shown.get("success"):
                return "failed: result lost" if NOT_KEPT in error_of(shown) else f"failed: {error_of(shown)[:60]}"
            link, measured_on = shown["output"]["data"][0], shown["output"]["data"][3]
            ok = "a=naive&b=naive_inplace" in link and "S=4096" in measured_on
            return "served (checked result shown)" if ok else "failed: another result shown"

        def other(_):
            with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as own:
                tally.timed(lambda: run_and_show(own, names, REPLAY, secrets.token_hex(8))[0])

        with ThreadPoolExecutor(4) as pool:
            for batch in range(0, others, 10):
                list(pool.map(other, range(batch, min(others, batch + 10))))
                tally.timed(show_mine)
    shown = tally.outcomes.get("served (checked result shown)", 0)
    tally.notes.append(f"checked result shown {shown} of {others // 10} times between the others, lost "
                       f"{tally.outcomes.get('failed: result lost', 0)} times (target 0)")
    return tally.close()


# -- 5. cancels, then a small run ------------------------------------------------------------------------------------
def _cancel_workload() -> list:
    """A live run long enough to be cancelled mid-measurement: predicted ~half the CPU's budget."""
    env = detect("cpu")
    for seq_len in range(1024, 8193, 256):
        data = with_(LIVE, a="naive", b="sdpa_math", heads=2, seq_len=seq_len, head_dim=64)
        w = Request.from_values(dict(zip(KEYS, data)), "cpu").workload
        if predicted_seconds(w, [VARIANTS["naive"], VARIANTS["sdpa_math"]], env) > 0.4 * LIVE_BUDGET_S["cpu"]:
            return data
    return data


def cancels(server: Server, names: dict[str, int], runs: int = 5, after_s: float = 1.5) -> Tally:
    tally = Tally(f"5. {runs} cancels, then a small run", server)
    index = names["run_compare"]
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        def small_run() -> float:
            start = time.perf_counter()
            ran = queued(http, index, LIVE, secrets.token_hex(8))
            seconds = time.perf_counter() - start
            tally.add("served (small live run)" if ran.get("success") else f"failed: {error_of(ran)[:60]}", seconds)
            return seconds

        small_run()  # warm: the first live run of a process pays for its libraries
        quiet = statistics.median(small_run() for _ in range(3))
        threads_before = server.threads()
        long_run, stops = _cancel_workload(), []
        for _ in range(runs):
            session = secrets.token_hex(8)
            joined = http.post("/gradio_api/queue/join",
                               json={"data": long_run, "fn_index": index, "session_hash": session})
            if joined.status_code != 200:
                tally.add(f"failed: join http {joined.status_code}", 0.0)
                continue
            event_id, ended = joined.json()["event_id"], {}

            def read(session=session, ended=ended):
                with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as own:
                    ended["message"] = read_stream(
                        own, "/gradio_api/queue/data", {"session_hash": session},
                        lambda _, m: m if isinstance(m, dict) and m.get("msg") in ("process_completed",) else None)
            reader = threading.Thread(target=read)
            reader.start()
            time.sleep(after_s)
            start = time.perf_counter()
            answer = http.post("/gradio_api/cancel",
                               json={"session_hash": session, "fn_index": index, "event_id": event_id})
            stopped = time.perf_counter() - start
            reader.join(timeout=60)
            stops.append(stopped)
            message = ended.get("message") or {}
            cancelled = answer.status_code == 200 and message.get("output") == {}
            tally.add("served (cancelled)" if cancelled else f"failed: cancel {answer.status_code} "
                      f"{str(message)[:60]}", stopped)
        threads_after = server.threads()
        after = small_run()
    tally.notes.append(f"cancelled run ({' '.join(f'{k}={v}' for k, v in zip(KEYS[3:7], long_run[3:7]))}, naive vs "
                       f"sdpa_math) stopped within: {' '.join(f'{s:.2f}' for s in stops)} s "
                       f"(max {max(stops, default=0):.2f} s, target <= 2 s)")
    tally.notes.append(f"small live run: quiet {quiet:.2f} s, after the cancels {after:.2f} s = "
                       f"{after / quiet:.2f}x (target <= 2x); server threads {threads_before} -> {threads_after}")
    return tally.close()


# -- 6. budget-edge live requests while 4 clients replay --------------------------------------------------------
EDGE = [("naive", "sdpa_math", {"heads": 4}), ("sdpa_math", "sdpa_flash", {"heads": 2}),
        ("naive", "sdpa_flash", {"heads": 2}), ("naive", "sdpa_math", {"heads": 2, "dtype": "bf16"}),
        ("naive", "sdpa_flash", {"heads": 2, "passes": "fwd+bwd"})]


def _edge_workloads() -> list[tuple[list, float]]:
    """Live CPU requests predicted just under the live budget (85-98% of it), one of each kind in EDGE: the
    cheapest ops and the slowest (16-bit on a CPU, a training step): (values, predicted s)."""
    env, budget, found = detect("cpu"), LIVE_BUDGET_S["cpu"], []
    for a, b, fields in EDGE:
        best = None
        for seq_len in range(128, 8193, 64):
            data = with_(LIVE, a=a, b=b, seq_len=seq_len, head_dim=64, **fields)
            w = Request.from_values(dict(zip(KEYS, data)), "cpu").workload
            predicted = predicted_seconds(w, [VARIANTS[a], VARIANTS[b]], env)
            if predicted > 0.98 * budget:
                break
            if predicted >= 0.85 * budget:
                best = (data, predicted)
        if best:
            found.append(best)
    return found


BURN = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end:\n    pass\n"


def budget_edge(server: Server, names: dict[str, int], replayers: int = 4, burners: int = 0) -> Tally:
    """`burners` busy processes of this script's own on top (each bounded to 15 minutes, ended with the phase):
    the load of other work on a shared machine (the issue saw load 8-13)."""
    budget = LIVE_BUDGET_S["cpu"]
    tally = Tally(f"6. budget edge + {replayers} replaying" + (f" + {burners} busy" if burners else ""), server)
    stop, replays = threading.Event(), Tally("replays", server)
    burning = [subprocess.Popen([sys.executable, "-c", BURN.format(s=900)]) for _ in range(burners)]

    def replayer():
        with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
            for _ in range(500):  # bounded; stopped when the edge requests are done
                if stop.is_set():
                    return
                replays.timed(lambda: run_and_show(http, names, REPLAY, secrets.token_hex(8))[0])

    workers = [threading.Thread(target=replayer) for _ in range(replayers)]
    for worker in workers:
        worker.start()
    loads = []
    try:
        time.sleep(3)  # the replays under way
        with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
            for data, predicted in _edge_workloads():
                start = time.perf_counter()
                event, body = api_call(http, "compare", data, deadline_s=budget + 60)
                seconds = time.perf_counter() - start
                loads.append(os.getloadavg()[0])
                sent = dict(zip(KEYS, data))
                what = (f"{sent['a']} vs {sent['b']} S={sent['seq_len']} H={sent['heads']} {sent['dtype']} "
                        f"{sent['passes']}")
                if event == "complete":
                    answer = body[0]
                    verdict = bool((answer.get("headline") or {}).get("title")) and bool(answer.get("verdict"))
                    statuses = f"A {answer['a']['status']}, B {answer['b']['status']}"
                    within = seconds <= budget + 5
                    outcome = ("served" if within and verdict else "failed") + \
                        (" (within budget + 5 s, verdict)" if within and verdict else
                         " (past budget + 5 s)" if not within else " (no verdict)")
                    tally.notes.append(f"{what}: predicted {predicted:.1f} s, took {seconds:.1f} s, {statuses}, "
                                       f"verdict: {answer.get('verdict', '')[:90]!r}")
                elif event == "error" and isinstance(body, dict) and body.get("title", "").startswith("Too "):
                    outcome = "refused (over budget up front)"
                    tally.notes.append(f"{what}: predicted {predicted:.1f} s, refused in {seconds:.1f} s: "
                                       f"{body.get('error', '')[:90]}")
                else:
                    outcome = f"failed: {event} {str(body)[:60]}"
                    tally.notes.append(f"{what}: {outcome} after {seconds:.1f} s")
                tally.add(outcome, seconds)
    finally:
        stop.set()
        for burner in burning:
            burner.terminate()
            burner.wait(timeout=30)
        for worker in workers:
            worker.join(timeout=TIMEOUT_S)
    replays.close()
    tally.notes.append(f"budget {budget:.0f} s (target: each within {budget + 5:.0f} s, with a verdict); load average "
                       f"after each: {' '.join(f'{x:.1f}' for x in loads)}; replays meanwhile: "
                       f"{replays.count('served')} served, {replays.count('failed')} failed, "
                       f"p50 {statistics.median(replays.latencies) if replays.latencies else 0:.2f} s")
    return tally.close()


# -- 7. hostile routes ------------------------------------------------------------------------------------------
def hostile_routes(server: Server, names: dict[str, int], dependencies: list[dict]) -> Tally:
    tally = Tally("7. hostile routes", server)
    statuses = Counter()
    kwargs = dict(zip(KEYS, LIVE))
    js_only = [d for d in dependencies if not d.get("backend_fn")]
    instant = [d for d in dependencies if d.get("backend_fn") and not d.get("queue")]
    with httpx.Client(base_url=server.url, timeout=30) as http:
        def expect_4xx(what: str, method: str, url: str, **kw):
            def call():
                try:  # the status alone: a stream a server starts and never ends is not read
                    with http.stream(method, url, **kw) as answer:
                        status = answer.status_code
                except httpx.HTTPError as error:
                    return f"failed: {type(error).__name__} ({what})"
                statuses[status] += 1
                return f"refused ({status // 100}xx)" if 400 <= status < 500 else f"failed: {status} ({what})"
            tally.timed(call)

        def expect_4xx_raw(what: str, method: str, target: str, body: bytes = b""):
            def call():
                status = raw_request(server.port, method, target, body)
                statuses[status] += 1
                return f"refused ({status // 100}xx)" if 400 <= status < 500 else f"failed: {status} ({what})"
            tally.timed(call)

        post = "POST"
        for _ in range(2):
            expect_4xx("v2 unknown parameter", post, "/gradio_api/call/v2/compare", json={**kwargs, "bogus": 1})
            expect_4xx("v2 unknown parameter", post, "/gradio_api/call/v2/replay", json={"<img>": "x"})
            expect_4xx("v2 list body", post, "/gradio_api/call/v2/compare", json=LIVE)
            expect_4xx("v2 unknown endpoint", post, "/gradio_api/call/v2/nope", json={})
            expect_4xx("v2 private endpoint", post, "/gradio_api/call/v2/show", json={})
            for api in ("compare", "v2/compare", "sweep"):
                expect_4xx("unknown event id", "GET", f"/gradio_api/call/{api}/{secrets.token_hex(16)}")
            expect_4xx("unknown event id", "GET", "/gradio_api/call/compare/..%2F..%2Fetc")
            expect_4xx("unknown session", "GET", "/gradio_api/queue/data", params={"session_hash": "nobody"})
            expect_4xx("empty session", "GET", "/gradio_api/queue/data", params={"session_hash": ""})
            for index in (999, -1, "7", 1.5, None):
                expect_4xx("unknown fn id", post, "/gradio_api/queue/join",
                           json={"data": [], "fn_index": index, "session_hash": secrets.token_hex(8)})
                expect_4xx("unknown fn id", post, "/gradio_api/run/predict", json={"data": [], "fn_index": index})
            for dep in js_only:
                name = dep.get("api_name") or ""
                expect_4xx(f"js-only {name}", post, f"/gradio_api/call/{name}", json={"data": []})
                expect_4xx(f"js-only {name}", post, f"/gradio_api/run/{name}", json={"data": []})
                expect_4xx(f"js-only {name}", post, "/gradio_api/queue/join",
                           json={"data": [], "fn_index": dep["id"], "session_hash": secrets.token_hex(8)})
                expect_4xx(f"js-only {name}", post, "/gradio_api/run/predict",
                           json={"data": [], "fn_index": dep["id"]})
            for dep in instant:
                if dep.get("inputs"):
                    for value in (["live"], {"a": 1}):
                        expect_4xx(f"{dep.get('api_name')} given a {type(value).__name__}", post,
                                   "/gradio_api/run/predict",
                                   json={"data": [value] * len(dep["inputs"]), "fn_index": dep["id"],
                                         "session_hash": secrets.token_hex(8)})
            for route, body in (("/gradio_api/queue/join", {"data": LIVE, "fn_index": names["compare"]}),
                                ("/gradio_api/run/predict", {"data": ["live"], "fn_index": names["sweep_plan"]})):
                for session in ("", " "):
                    expect_4xx("empty session_hash", post, route, json={**body, "session_hash": session})
            expect_4xx("empty session_hash", post, "/gradio_api/queue/join", json={"data": LIVE,
                                                                                 "fn_index": names["compare"]})
            long = "x" * (65 * 1024)
            for method, target in (("GET", f"/?a={long}"), ("GET", f"/gradio_api/info?{long}"),
                                   ("GET", f"/gradio_api/queue/data?session_hash={long}"),
                                   ("GET", f"/gradio_api/call/compare/{long}"), ("GET", f"/{long}"),
                                   ("POST", f"/gradio_api/call/compare?{long}"),
                                   ("POST", f"/gradio_api/queue/join?{long}"), ("POST", f"/gradio_api/call/{long}")):
                expect_4xx_raw("URL over 64 KB", method, target, json.dumps({"data": LIVE}).encode())
            for name, content in (("a.txt", b"hello"), ("a.html", b"<script>alert(1)</script>"), ("x.json", b"{}")):
                expect_4xx("upload", post, "/gradio_api/upload", files={"files": (name, content)})
            expect_4xx("upload", post, "/gradio_api/upload?upload_id=x", files={"files": ("a.txt", b"x")})
            expect_4xx("upload progress", "GET", "/gradio_api/upload_progress", params={"upload_id": "x"})
            expect_4xx("component server", post, "/gradio_api/component_server",
                       json={"session_hash": "x", "component_id": 10**6, "fn_name": "x", "data": None})
    tally.notes.append("HTTP statuses: " + ", ".join(f"{s} x{n}" for s, n in sorted(statuses.items()))
                       + " (target: all 4xx, never 5xx)")
    return tally.close()


PHASES = {1: "invalid", 2: "clients", 3: "soak", 4: "kept", 5: "cancels", 6: "budget", 7: "hostile"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases", default=",".join(map(str, PHASES)),
                        help="which phases to run, by number (default: all): " +
                             ", ".join(f"{k} {v}" for k, v in PHASES.items()))
    parser.add_argument("--keep-temp", action="store_true",
                        help="keep the server's temp dir (its log: app.log) and say where it is")
    parser.add_argument("--burners", type=int, default=0, choices=range(9), metavar="N",
                        help="phase 6: N busy processes besides the 4 replaying clients, as other work on a shared "
                             "machine would load it (0-8; default 0)")
    args = parser.parse_args()
    chosen = [int(p) for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in PHASES]
    if unknown:
        parser.error(f"no phase {unknown[0]}: choose among {', '.join(map(str, PHASES))}")
    started = time.perf_counter()
    server = Server()
    tallies: list[Tally] = []
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            names, dependencies = fn_indices(http)
            info = http.get("/gradio_api/info").json()["named_endpoints"]
        sent = [p["parameter_name"] for p in info["/compare"]["parameters"]]
        if sent != list(KEYS):
            raise SystemExit(f"the app's /compare takes {sent}; this script sends {list(KEYS)}")
        print(f"app.py on {server.url} (pid {server.process.pid}); RSS at start {server.rss() / 2**20:.0f} MiB, "
              f"{server.threads()} threads; {os.cpu_count()} CPUs\n", flush=True)
        runs = {1: lambda: invalid_calls(server, names), 2: lambda: concurrent_clients(server, names),
                3: lambda: soak(server, names), 4: lambda: kept_among_others(server, names),
                5: lambda: cancels(server, names), 6: lambda: budget_edge(server, names, burners=args.burners),
                7: lambda: hostile_routes(server, names, dependencies)}
        for phase in chosen:
            tallies.append(runs[phase]())
            print(f"... {tallies[-1].name} done in {tallies[-1].wall:.0f} s", file=sys.stderr, flush=True)
        print(HEADER)
        for tally in tallies:
            print(tally.row())
        print()
        for tally in tallies:
            print("\n".join(tally.details()))
        print(f"\ntemp files kept by the server: {server.temp_files()}")
    finally:
        alive = server.process.poll() is None
        log = server.stop()
        if not alive:
            print(f"app.py exited during the run ({server.process.returncode}); its log ends:\n{log[-2000:]}")
        if args.keep_temp:
            print(f"the server's temp dir, its log app.log: {server.tmp}")
        else:
            shutil.rmtree(server.tmp, ignore_errors=True)
    failed = sum(t.count("failed") for t in tallies)
    print(f"tracebacks in the server's log: {log.count('Traceback (most recent call last)')}; one-line refusals "
          f"logged: {log.count('refused: ')}")
    print(f"failed: {failed}; wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
