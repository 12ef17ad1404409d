"""Where the start-up warm-up's sdpa_nested step spends its seconds (6.5 s on a lent H100 against 0.1-0.6 s for the
other forwards; under cProfile its first measure took 9.4 s, 8.3 of them timing rounds, 882 calls of nested SDPA's
preprocessing in all, and a second one without it 4.0 s, 3.6 of them timing rounds): the default pair first, as the
warm-up does, then sdpa_nested's why_not, then two measures with their phases and samples; a forward, then a step.
    python bench/h200/nested_first_probe.py"""
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
t0 = time.perf_counter()
from attention_variants import VARIANTS  # noqa: E402
from profiling import phases, session, warmup  # noqa: E402
from profiling.environment import detect  # noqa: E402
print(f"imports {time.perf_counter() - t0:.2f} s")
for passes in ("fwd", "fwd+bwd"):
    w = warmup.tiny("cuda", passes=passes)
    t0 = time.perf_counter()
    session.measure(w, ["sdpa_flash", "sdpa_cudnn"])
    print(f"{passes}: default pair {time.perf_counter() - t0:.2f} s")
    t0 = time.perf_counter()
    reasons = session.why_not([VARIANTS["sdpa_nested"]], w, detect("cuda"))
    print(f"{passes}: sdpa_nested why_not {time.perf_counter() - t0:.2f} s: {reasons}")
    for i in range(2):
        with phases.recording() as spent:
            t0 = time.perf_counter()
            (run,) = session.measure(w, ["sdpa_nested"])
            took = time.perf_counter() - t0
        t = run.timing
        print(f"{passes}: sdpa_nested measure #{i + 1} {took:.2f} s, {run.status}, {t and t.samples} samples "
              f"({t and t.method}), GPU {t and round(t.median_ms, 4)} ms, host "
              f"{run.host_cost and round(run.host_cost.median_ms, 3)} ms:",
              {k: round(v, 3) for k, v in sorted(spent.items(), key=lambda kv: -kv[1]) if v >= 0.001})
sys.stdout.flush()
os._exit(0)  # a process that started the profiler hangs in the interpreter's exit on these hosts (handlers.end_process)
