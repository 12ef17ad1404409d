"""Run by tests/test_memory_estimate.py in a fresh process: measure the variants in turn on one CPU workload (the
first fresh, the others on its inputs) and give, as JSON rows, how far the process's resident memory rose at its peak
during each against `measure_bytes`.

    python tests/memory_probe.py A,B[,C...] BATCH HEADS SEQ HEAD_DIM DTYPE [PASS]

The test runs `rows` in processes forked from a server that has imported torch and this module and run nothing
(multiprocessing's forkserver): a fresh process but for its imports, which any process makes before its first
measurement.
The peak is the kernel's own high-water mark (VmHWM), reset just before each measurement
(/proc/self/clear_refs), less the resident size just before: everything the measurement touched,
the allocator's slack included, not only what the profiler counts.
"""
import json
import sys

from attention_variants import get_variant
from profiling import measurement, timing
from profiling.budget import call_bytes, measure_bytes
from profiling.environment import detect
from profiling.workload import Workload

def status(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))


def rows(variants: str, batch, heads, seq, head_dim, dtype: str, passes: str = "fwd") -> list[dict]:
    """In the probe's own process only: it changes the timing rounds of every later measurement in it."""
    # The peak is reached in the first timed round: every later one allocates what the one before it did, in the same
    # malloc arenas (a measurement caps their count, budget.cap_malloc_arenas). Three rounds, not the app's twenty,
    # keep a probe's time for what it measures.
    timing.CPU_MIN_ROUNDS = 3
    env = detect("cpu")
    w = Workload(batch=int(batch), heads=int(heads), seq_len=int(seq), head_dim=int(head_dim), dtype=dtype,
                 passes=passes, device="cpu")
    # no warm-up: the first is this process's first measurement (libraries, the profiler's first session), as a
    # fresh server's first request is; the others then run on its inputs
    found = []
    for i, key in enumerate(variants.split(",")):
        ready = i > 0
        variant = get_variant(key)
        estimate = measure_bytes(w, variant.scratch_bytes(w, env), inputs_ready=ready, reference_ready=ready,
                                 setup_bytes=variant.setup_bytes(w, env))
        before = status("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident size
        (run,) = measurement.measure_runs([variant], w)
        found.append({"variant": key, "ready": ready, "status": run.status, "grew": status("VmHWM") - before,
                     "estimate": estimate, "forward_peak": run.peak_extra_bytes,
                     "forward_estimate": call_bytes(variant, w, env),
                 "estimate_without_holes": measure_bytes(w, variant.scratch_bytes(w, env), inputs_ready=ready,
                                                         reference_ready=ready, setup_bytes=variant.setup_bytes(w, env),
                                                         holes=False)})
    return found


if __name__ == "__main__":
    print(json.dumps(rows(*sys.argv[1:])))
