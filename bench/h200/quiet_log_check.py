"""On the GPU: `python app.py` as a host starts it, two live comparisons and a live sweep through the public API,
then every line of its log that is not gradio's start-up or the app's own one-line refusal (the test on a CPU is
tests/test_browser.py::test_the_server_log_holds_only_the_apps_own_lines). Before handlers.py ran the profiler's
start-up on the importing thread, the first live run logged "ERROR: External init callback must run in same thread
as registerClient". Prints a short table; writes the log to $OUT/app.log.

    python bench/h200/quiet_log_check.py
"""
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from background import OWN_LINES  # noqa: E402  (the CPU test's own list of the lines that may appear)

out = Path(os.environ.get("OUT", "."))
out.mkdir(parents=True, exist_ok=True)
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
log_path = out / "app.log"
REQUEST_TIMEOUT_S = 120
process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, stdout=open(log_path, "w"), stderr=subprocess.STDOUT,
                           env={**os.environ, "PORT": str(port), "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"})
url = f"http://127.0.0.1:{port}/"
deadline = time.monotonic() + 300
while True:
    try:
        urllib.request.urlopen(url, timeout=2)
        break
    except OSError:
        if process.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"app.py did not start: see {log_path}")
        time.sleep(0.5)
from gradio_client import Client  # noqa: E402

client = Client(url, verbose=False)
rows = []
for name, api, extra in (("live compare (cold)", "/compare", {}), ("live compare (warm)", "/compare", {}),
                         ("live sweep", "/sweep", {"seq_lens": "1024,2048"})):
    started = time.monotonic()
    job = client.submit(source="live", a="sdpa_flash", b="sdpa_cudnn", api_name=api, **extra)
    try:
        job.result(timeout=REQUEST_TIMEOUT_S)
    except Exception as error:
        if not isinstance(error, TimeoutError):
            print(f"{name}: {type(error).__name__}: {error}", flush=True)
            continue
        # a hang: every thread's stack into the log (faulthandler, on SIGABRT), and stop
        print(f"{name}: no answer after {time.monotonic() - started:.0f} s ({type(error).__name__}); the server's "
              f"threads, as faulthandler dumped them, are in {log_path}", flush=True)
        process.send_signal(signal.SIGABRT)
        process.wait(timeout=30)
        print("\n".join(log_path.read_text().splitlines()[-80:]))
        sys.exit(1)
    foreign = [line for line in log_path.read_text().splitlines() if line.strip()
               and not any(re.fullmatch(p, line) for p in OWN_LINES)]
    rows.append((name, f"{time.monotonic() - started:.1f} s", len(foreign)))
    print(*rows[-1], flush=True)
process.terminate()
process.wait(timeout=30)
print(f"{'request':<22} {'wall':>8} {'foreign log lines so far':>26}")
for row in rows:
    print(f"{row[0]:<22} {row[1]:>8} {row[2]:>26}")
foreign = [line for line in log_path.read_text().splitlines() if line.strip()
           and not any(re.fullmatch(p, line) for p in OWN_LINES)]
print("foreign lines:" if foreign else "the log holds only gradio's start-up and the app's own lines")
for line in foreign[:20]:
    print("  " + line)
