"""Record what the CPU variants' measurements really take on this CPU, for `tests/test_memory_estimate.py` to hold
the estimate against on every CPU, not only the one CI lands on.

    python bench/record_cpu_peaks.py OUT.json [LABEL]      # ~5 minutes on 2 cores

Each probe runs `tests/memory_probe.py` (one variant, fresh, in a process of its own): the five CPU variants x
bf16/fp16/fp32 x forward/training step x four shapes, as the Intel AMX table in ../shared/reference was. The table
keeps the CPU's flags (`cpu_paths.read_features`), torch's version and CPU capability, its thread count, and any
ONEDNN_MAX_CPU_ISA in force: set that to record the path a CPU without AMX takes (AVX512_CORE_BF16: oneDNN's
AVX-512 BF16 kernels, as on a Zen 4 EPYC or a Cooper Lake Xeon) on a CPU with it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VARIANTS = ("sdpa_flash", "naive", "naive_inplace", "sdpa_math", "sdpa_auto")
FORWARD_SHAPES = ((1, 2, 2048, 64), (2, 2, 1024, 32), (1, 4, 4096, 128), (1, 1, 4096, 1))
STEP_SHAPES = ((1, 2, 1024, 32), (1, 2, 2048, 64))
STEP_VARIANTS = ("sdpa_flash", "naive", "sdpa_math")


def probes():
    for dtype in ("bf16", "fp16", "fp32"):
        for key in VARIANTS:
            for shape in FORWARD_SHAPES:
                yield (key, *shape, dtype, "fwd")
        for key in STEP_VARIANTS:
            for shape in STEP_SHAPES:
                yield (key, *shape, dtype, "fwd+bwd")


def main(out: str, label: str | None = None) -> None:
    import torch

    from profiling.cpu_paths import read_features

    rows = []
    for probe in probes():
        found = subprocess.run([sys.executable, str(ROOT / "tests" / "memory_probe.py"), *map(str, probe)],
                               capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        line = found.stdout.strip().splitlines()[-1] if found.stdout.strip() else "[]"
        for row in json.loads(line):
            rows.append({**row, "probe": list(probe)})
            print(row["variant"], probe[1:], row["forward_peak"], row["forward_estimate"], flush=True)
    table = {"cpu": label or read_cpu_name(), "features": read_features(), "torch": torch.__version__,
             "capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
             "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"), "how": __doc__.split("\n\n")[2].strip(),
             "rows": rows}
    Path(out).write_text(json.dumps(table, indent=1) + "\n")


def read_cpu_name() -> str:
    with open("/proc/cpuinfo") as cpuinfo:
        return next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "unknown")


if __name__ == "__main__":
    main(*sys.argv[1:])
