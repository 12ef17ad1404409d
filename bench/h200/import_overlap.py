"""Does importing torch on a thread while gradio imports on the main one shorten a server's start? (issue 29: torch
took 3.2-4.7 s and gradio 2.0-3.3 s of the lent GPU hosts' starts; on the 2-core CPU here the two together took as
long either way, 3.9-4.3 s: the imports hold the GIL.) Fresh interpreters, alternating, REPEATS each:

    python bench/h200/import_overlap.py        # the table on stdout and in $OUT/import_overlap.txt
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

REPEATS = 3
ONE_THEN_OTHER = """
import time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import gradio
print(t1 - t0, time.perf_counter() - t1, time.perf_counter() - t0)
"""
OVERLAPPED = """
import threading, time
t0 = time.perf_counter()
done = {}
def load():
    import torch
    done["torch"] = time.perf_counter() - t0
thread = threading.Thread(target=load)
thread.start()
import gradio
g = time.perf_counter() - t0
thread.join()
print(done["torch"], g, time.perf_counter() - t0)
"""


def main() -> None:
    walls = {"torch, then gradio": [], "torch on a thread, gradio beside it": []}
    for _ in range(REPEATS):
        for name, code in zip(walls, (ONE_THEN_OTHER, OVERLAPPED)):
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            walls[name].append([float(x) for x in out.split()])
    lines = [f"{'':<38} {'torch s':>8} {'gradio s':>9} {'both s':>7}   (median of {REPEATS}; torch's and gradio's "
             "own clocks: on a thread, each from the start)"]
    for name, runs in walls.items():
        lines.append(f"{name:<38} " + " ".join(f"{statistics.median(r[i] for r in runs):{w}.2f}"
                                                for i, w in ((0, 8), (1, 9), (2, 7))))
    print("\n".join(lines))
    Path(os.environ.get("OUT", "."), "import_overlap.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
