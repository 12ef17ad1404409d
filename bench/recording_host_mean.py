"""Add each recorded run's `profiled_host_mean_ms` (the profiled ranges' mean: what its host ops' per-call times, also
means, are shares of), read from the run's own trace shipped with the recording; nothing else changes:

    python bench/recording_host_mean.py [profiling/recorded/h200-torch2.11]

The runs were recorded with the ranges' median only, which a note set against the ops' means: one slow profiled call
carried FlashAttention-4's `FlashAttnVarlenFunc` to "112% of the profiled call's CPU time". A run without a trace (a
refused one) gets none. Written as `record` writes (results.write_stored's bytes), the key beside profiled_host_ms.
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from profiling import trace  # noqa: E402
from profiling.results import RUNS_FILE, read_stored  # noqa: E402


def main(folder: Path) -> None:
    runs = read_stored(folder / RUNS_FILE)
    added = 0
    for i, run in enumerate(runs):
        mean = None
        if run.get("trace_path"):
            mean = trace.summarize_trace(trace.load_trace(folder / run["trace_path"])).profiled_host_mean_ms
            added += 1
        keys = list(run)
        at = keys.index("profiled_host_ms") + 1 if "profiled_host_ms" in keys else len(keys)
        runs[i] = dict([*[(k, run[k]) for k in keys[:at] if k != "profiled_host_mean_ms"],
                        ("profiled_host_mean_ms", mean),
                        *[(k, run[k]) for k in keys[at:] if k != "profiled_host_mean_ms"]])
    data = json.dumps(runs, indent=1).encode()
    with open(folder / RUNS_FILE, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        f.write(data)
    print(f"{folder / RUNS_FILE}: {added} of {len(runs)} runs read their trace's mean range")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else
         Path(__file__).resolve().parent.parent / "profiling" / "recorded" / "h200-torch2.11")
