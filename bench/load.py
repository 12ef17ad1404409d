"""A bounded load and soak run against the app, served by `python app.py` on 127.0.0.1 only.

    python bench/load.py            # ~5-10 minutes on a 2-core CPU; writes nothing but its own temp folder

1. invalid calls (>= 200): bad values of every kind through the API, the closed REST route, crafted `show`
   payloads, file-route probes, oversized bodies, hostile links given to the page-load prefill;
2. 20 concurrent clients x 3 requests, mixing replays of the H200 recording and small live CPU runs;
3. 100 consecutive runs (compare, then show, as the page does), each in a new session.
Prints served/refused/failed counts, p50/p95 latency per phase, the server's RSS growth over phase 3, the
temp files it keeps, and the tracebacks in its log. Every request goes to 127.0.0.1; every loop is bounded.
"""
from __future__ import annotations

import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
RECORDING = "h200-torch2.11"
REPLAY = [RECORDING, "sdpa_flash", "sdpa_cudnn", 1024, 16, "bf16", 8, 64, True, 4]
LIVE = ["live", "naive", "sdpa_flash", 128, 2, "fp32", 1, 32, True, 4]
TIMEOUT_S = 180


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
        self.log = open(self.tmp / "app.log", "w")
        env = {**os.environ, "PORT": str(self.port), "TMPDIR": str(self.tmp),
               "GRADIO_TEMP_DIR": str(self.tmp / "gradio"), "GRADIO_SERVER_NAME": "127.0.0.1"}
        self.process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=self.log,
                                        stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.5)
        raise SystemExit("app.py did not start")

    def rss(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))

    def temp_files(self) -> dict[str, int]:
        counts = Counter()
        for path in self.tmp.rglob("*"):
            if path.is_file() and path.name != "app.log":
                top = path.relative_to(self.tmp).parts[0]
                counts["gradio cache" if top == "gradio" else top.rsplit("_", 1)[0]] += 1
        return dict(counts)

    def stop(self) -> str:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()
        return (self.tmp / "app.log").read_text()


class Tally:
    def __init__(self):
        self.outcomes, self.latencies, self.lock = Counter(), [], threading.Lock()

    def add(self, outcome: str, seconds: float):
        with self.lock:
            self.outcomes[outcome] += 1
            self.latencies.append(seconds)

    def line(self, name: str) -> str:
        lat = sorted(self.latencies)
        p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))] if lat else 0.0
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
        return (f"{name:34s} {len(lat):4d} calls: {counts}; latency p50 {statistics.median(lat) if lat else 0:.2f} s, "
                f"p95 {p95:.2f} s")


def api_call(http: httpx.Client, data: list, *, raw: str | None = None) -> tuple[str, object]:
    """POST /gradio_api/call/compare and read its result: ("complete" | "error", data) or ("http <code>", text)."""
    body = raw if raw is not None else json.dumps({"data": data})
    posted = http.post("/gradio_api/call/compare", content=body, headers={"content-type": "application/json"})
    if posted.status_code != 200:
        return f"http {posted.status_code}", posted.text
    text = http.get(f"/gradio_api/call/compare/{posted.json()['event_id']}").text
    return text.split("event: ")[-1].split("\n")[0], json.loads(text.split("data: ")[-1])


def queued(http: httpx.Client, index: int, data: list, session: str) -> dict:
    joined = http.post("/gradio_api/queue/join", json={"data": data, "fn_index": index, "session_hash": session})
    if joined.status_code != 200:
        return {"msg": "http", "status": joined.status_code, "success": False}
    with http.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if message.get("msg") == "process_completed":
                    return message
    return {"msg": "no end", "success": False}


def fn_indices(http: httpx.Client) -> dict[str, int]:
    config = http.get("/config").json()
    return {dep.get("api_name"): dep["id"] for dep in config["dependencies"]}


# -- 1. invalid calls -------------------------------------------------------------------------------------------
def invalid_calls(server: Server, names: dict[str, int]) -> Tally:
    tally = Tally()
    bad_values = [(3, v) for v in ("1024", [1], None, 128.7, True, "nan", {"a": 1}, -1, 0, 10**9)] + \
                 [(4, v) for v in (0, 2000, 1.5, "x", False)] + [(6, v) for v in (0, 4096, 2.0, [], "1")] + \
                 [(7, v) for v in (0, 1000, 3.5, None)] + [(5, v) for v in ("fp8", None, 16, ["bf16"], "")] + \
                 [(8, v) for v in ("yes", 1, None, "true")] + [(9, v) for v in (5, 3.0, "4", None, True)] + \
                 [(0, v) for v in (None, "mars", "../etc", 1, ["live"])] + \
                 [(1, v) for v in ("nope", None, "<img src=x>", 3)] + [(2, v) for v in ("`x`", "", "flash")]
    specials = ['{"data": ["live", "naive", "sdpa_flash", ' + "9" * 5000 + ', 2, "fp32", 1, 32, true, 4]}',
                '{"data": ["live", "naive", "sdpa_flash", NaN, 2, "fp32", 1, 32, true, 4]}',
                '{"data": ["live", "naive", "sdpa_flash", Infinity, 2, "fp32", 1, 32, true, 4]}',
                '{"data": ["live", "naive", "sdpa_flash", -Infinity, 2, "fp32", 1, 32, true, 4]}',
                '{"data": "not a list"}', '{"nothing": 1}', "not json", '{"data": []}']
    too_long = [["live", "naive", "sdpa_math", 4096, 16, "bf16", 1, 64, True, 4],
                ["live", "naive", "sdpa_math", 65536, 64, "fp32", 64, 128, True, 4]]
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        def expect_refusal(fn, *args, **kwargs):
            start = time.perf_counter()
            try:
                outcome = fn(*args, **kwargs)
            except httpx.HTTPError as error:
                outcome = f"failed: {type(error).__name__}"
            tally.add(outcome, time.perf_counter() - start)

        def bad_value(position, value):
            data = list(LIVE)
            data[position] = value
            event, body = api_call(http, data)
            named = event == "error" and " is not allowed: " in body.get("error", "")
            return "refused, field named" if named else f"failed: {event} {str(body)[:80]}"

        def special(raw):
            event, body = api_call(http, [], raw=raw)
            clean = event.startswith("http 4") or (event == "error" and bool(body.get("error")))  # said why
            return "refused cleanly" if clean else f"failed: {event} {str(body)[:80]}"

        def rest_route(route):
            answer = http.post(route, json={"data": LIVE})
            return "refused cleanly" if answer.status_code == 404 else f"failed: http {answer.status_code}"

        def crafted_show(target):
            session = secrets.token_hex(8)
            crafted = {"source": "live", "a": {"trace_path": str(target)}, "b": {"trace_path": str(target)}}
            shown = queued(http, names["show"], [crafted], session)  # no kept result in a new session
            return "refused cleanly" if not shown.get("success") else "failed: show rendered a client's payload"

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

        for _ in range(3):
            for position, value in bad_values:
                expect_refusal(bad_value, position, value)
        for raw in specials * 3:
            expect_refusal(special, raw)
        for data in too_long * 3:
            expect_refusal(lambda d: "refused, field named" if "is not allowed" in str(api_call(http, d)[1])
                           else "failed: not refused", data)
        for route in ("/gradio_api/run/compare", "/gradio_api/api/compare", "/gradio_api/run/show") * 4:
            expect_refusal(rest_route, route)
        for target in [ROOT / "app.py", ROOT / ".git", Path("/etc/passwd"), server.tmp / "app.log"] * 3:
            expect_refusal(crafted_show, target)
            expect_refusal(file_probe, target)
        for route, body in (("/gradio_api/run/predict", {"data": [], "fn_index": 999}),
                            ("/gradio_api/queue/join", {"data": [], "fn_index": -1, "session_hash": "x"}),
                            ("/gradio_api/call/nope", {"data": []})) * 3:
            expect_refusal(lambda r, b: "refused cleanly" if http.post(r, json=b).status_code == 404
                           else "failed: not a 404", route, body)
        for size in (2**20, 50 * 2**20) * 3:
            expect_refusal(big_body, size)
        for query in ({"seq": "9" * 5000}, {"a": "`<img src=x>`"}, {"x`<b>": "1"}, {"rank": "3.0"},
                      {"heads": "[click](http://127.0.0.1:9)"}) * 3:
            expect_refusal(hostile_link, query)
    return tally


# -- 2. concurrent clients ----------------------------------------------------------------------------------------
def concurrent_clients(server: Server, clients: int = 20, each: int = 3) -> Tally:
    tally = Tally()

    def client(i: int):
        with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
            for j in range(each):
                data = LIVE if (i + j) % 3 == 0 else REPLAY
                start = time.perf_counter()
                try:
                    event, body = api_call(http, data)
                    if event == "complete":
                        outcome = f"served ({'live' if data is LIVE else 'replay'})"
                    elif event == "http 503":
                        outcome = "refused: queue full"
                    else:
                        outcome = f"failed: {event} {str(body)[:60]}"
                except httpx.HTTPError as error:
                    outcome = f"failed: {type(error).__name__}"
                tally.add(outcome, time.perf_counter() - start)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=900)
    return tally


# -- 3. soak: new sessions, as the page runs them ---------------------------------------------------------------
def soak(server: Server, names: dict[str, int], runs: int = 100) -> tuple[Tally, list[int]]:
    """RSS sampled before the runs and after every 20."""
    tally, samples = Tally(), []
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S) as http:
        for _ in range(10):  # warm: first renders, fonts, the recording's traces cached
            session = secrets.token_hex(8)
            queued(http, names["compare"], REPLAY, session)
            queued(http, names["show"], [None], session)
        samples.append(server.rss())
        for i in range(runs):
            session = secrets.token_hex(8)
            data = LIVE if i % 10 == 0 else REPLAY
            start = time.perf_counter()
            ran = queued(http, names["compare"], data, session)
            shown = queued(http, names["show"], [None], session) if ran.get("success") else {"success": False}
            outcome = "served (compare + show)" if ran.get("success") and shown.get("success") else \
                f"failed: {ran.get('output', ran)}"[:80]
            tally.add(outcome, time.perf_counter() - start)
            if (i + 1) % 20 == 0:
                samples.append(server.rss())
    return tally, samples


def main() -> None:
    started = time.perf_counter()
    server = Server()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            names = fn_indices(http)
        print(f"app.py on {server.url} (pid {server.process.pid}); RSS at start {server.rss() / 2**20:.0f} MiB\n")
        invalid = invalid_calls(server, names)
        print(invalid.line("1. invalid calls"))
        concurrent = concurrent_clients(server)
        print(concurrent.line("2. 20 clients x 3 (replay + live)"))
        soaked, samples = soak(server, names)
        print(soaked.line("3. 100 runs, new session each"))
        before, after = samples[0], samples[-1]
        print(f"\nRSS over phase 3: {before / 2**20:.0f} -> {after / 2**20:.0f} MiB "
              f"({100 * (after - before) / before:+.1f}%, target < 5%); every 20 runs: "
              + " ".join(f"{s / 2**20:.0f}" for s in samples))
        print(f"temp files kept by the server: {server.temp_files()}")
    finally:
        log = server.stop()
    failed = sum(n for t in (invalid, concurrent, soaked) for k, n in t.outcomes.items() if k.startswith("failed"))
    print(f"tracebacks in the server's log: {log.count('Traceback')}; one-line refusals logged: "
          f"{log.count('refused: ')}")
    print(f"failed: {failed}; wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
