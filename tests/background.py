"""Work a test needs from another process, started as soon as the session knows it will run that test, so that it
overlaps the tests before it instead of adding to the suite's time: the app as a host starts it, for the browser
tests. conftest.py starts it after collection (in a run on one process); the `served` fixture takes it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
# The lines the app's log may hold (test_browser.py reads the served app's; bench/h200/quiet_log_check.py a GPU's):
OWN_LINES = (r"\* Running on local URL: +http://\S+",  # gradio's start-up: where the app listens (an operator's)
             r"\* To create a public link, set `share=True` in `launch\(\)`\.",  # gradio's, printed at every start
             r"refused: .+")  # the app's own: a request refused for what it asked (serving.refused, RequestGuard)


class App:
    """`python app.py` on a free port given through $PORT, as a host would start it; its temp dir holds a
    scratch folder a dead process left an hour ago, its lock free (the app removes it at start-up)."""

    def __init__(self, port: int):
        ARTIFACTS.mkdir(exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix="app-tmp-"))
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        self.stale = self.tmp / f"attention_profiler_{dead.pid}"
        self.stale.mkdir()
        (self.stale / ".lock").touch()  # its lock, which nobody holds now that the process is gone
        for path in (self.stale / ".lock", self.stale):
            os.utime(path, (time.time() - 3600,) * 2)
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
