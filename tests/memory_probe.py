"""Run by tests/test_memory_estimate.py in a fresh process: measure the variants in turn on one CPU workload (the
first fresh, the others on its inputs) and print, as JSON, how far the process's resident memory rose at its peak
during each against `measure_bytes`.

    python tests/memory_probe.py A,B[,C...] BATCH HEADS SEQ HEAD_DIM DTYPE [PASS]

The peak is the kernel's own high-water mark (VmHWM), reset just before each measurement
(/proc/self/clear_refs), less the resident size just before: everything the measurement touched,
the allocator's slack included, not only what the profiler counts.
"""
import json
import sys

from profiling import measurement, timing
from profiling.budget import call_bytes, measure_bytes
from profiling.environment import detect
from profiling.workload import Workload

ENV = detect("cpu")
from attention_variants import get_variant

# The peak is reached in the first timed round: every later one allocates what the one before it did, in the same
# malloc arenas (a measurement caps their count, budget.cap_malloc_arenas). Three rounds, not the app's twenty,
# keep a probe's time for what it measures.
timing.CPU_MIN_ROUNDS = 3


def status(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))


def main(variants: str, batch: str, heads: str, seq: str, head_dim: str, dtype: str, passes: str = "fwd") -> None:
    w = Workload(batch=int(batch), heads=int(heads), seq_len=int(seq), head_dim=int(head_dim), dtype=dtype,
                 passes=passes, device="cpu")
    # no warm-up: the first is this process's first measurement (libraries, the profiler's first session), as a
    # fresh server's first request is; the others then run on its inputs
    rows = []
    for i, key in enumerate(variants.split(",")):
        ready = i > 0
        variant = get_variant(key)
        estimate = measure_bytes(w, variant.scratch_bytes(w, ENV), inputs_ready=ready, reference_ready=ready,
                                 setup_bytes=variant.setup_bytes(w, ENV))
        before = status("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident size
        (run,) = measurement.measure_runs([variant], w)
        rows.append({"variant": key, "ready": ready, "status": run.status, "grew": status("VmHWM") - before,
                     "estimate": estimate, "forward_peak": run.peak_extra_bytes,
                     "forward_estimate": call_bytes(variant, w, ENV),
                 "estimate_without_holes": measure_bytes(w, variant.scratch_bytes(w, ENV), inputs_ready=ready,
                                                         reference_ready=ready, setup_bytes=variant.setup_bytes(w, ENV),
                                                         holes=False)})
    print(json.dumps(rows))


if __name__ == "__main__":
    main(*sys.argv[1:])
