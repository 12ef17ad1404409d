"""Work a test needs from other processes, started as soon as the session knows it will run that test, so that it
overlaps the tests before it instead of adding to the suite's time: the memory probes (each in a fresh process,
one at a time while other tests run on the other core, two at once once a test waits for them) and the app as a
host starts it, for the browser tests. conftest.py starts them after collection; the tests' fixtures take them."""
from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
# The lines the app's log may hold (test_browser.py reads the served app's; bench/h200/quiet_log_check.py a GPU's):
OWN_LINES = (r"\* Running on local URL: +http://\S+",  # gradio's start-up: where the app listens (an operator's)
             r"\* To create a public link, set `share=True` in `launch\(\)`\.",  # gradio's, printed at every start
             r"refused: .+")  # the app's own: a request refused for what it asked (serving.refused, RequestGuard)


class Probes:
    """`tests/memory_probe.py` once per probe, each in its own fresh process (a peak is per process), at most one
    at a time until `rows()` is called, then at most two (the machine has two cores)."""

    def __init__(self, probes: list[tuple]):
        self._todo: queue.Queue = queue.Queue()
        for probe in probes:
            self._todo.put(probe)
        self._done: dict[tuple, tuple[int, str, str]] = {}
        self._probes = list(probes)
        self._wanted = threading.Event()
        self._workers = [threading.Thread(target=self._work, args=(i,), daemon=True) for i in range(2)]
        for worker in self._workers:
            worker.start()

    def _work(self, i: int) -> None:
        if i > 0:
            self._wanted.wait()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        while True:
            try:
                probe = self._todo.get_nowait()
            except queue.Empty:
                return
            process = subprocess.run([sys.executable, "tests/memory_probe.py", *map(str, probe)], cwd=ROOT, env=env,
                                     capture_output=True, text=True, timeout=600)
            self._done[probe] = (process.returncode, process.stdout, process.stderr)

    def rows(self) -> list[dict]:
        """Every probe's rows (in the probes' order), waiting for those still running."""
        self._wanted.set()
        for worker in self._workers:
            worker.join()
        rows = []
        for probe in self._probes:
            code, out, err = self._done[probe]
            assert code == 0, err[-2000:]
            rows += [dict(row, workload="x".join(map(str, probe[2:6])) + " " + " ".join(probe[6:]))
                     for row in json.loads(out.strip().splitlines()[-1])]
        return rows


class App:
    """`python app.py` on a free port given through $PORT, as a host would start it; its temp dir holds a
    scratch folder a dead process left an hour ago (the app removes it at start-up)."""

    def __init__(self, port: int):
        ARTIFACTS.mkdir(exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix="app-tmp-"))
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        self.stale = self.tmp / f"attention_profiler_{dead.pid}"
        self.stale.mkdir()
        os.utime(self.stale, (time.time() - 3600,) * 2)
        self.log = open(ARTIFACTS / "app.log", "w")
        self.url = f"http://127.0.0.1:{port}/"
        self.process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, stdout=self.log,
                                        stderr=subprocess.STDOUT,
                                        env={**os.environ, "PORT": str(port), "TMPDIR": str(self.tmp),
                                             "PYTHONUNBUFFERED": "1"})

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


started: dict[str, object] = {}  # what conftest started for this session, by name
