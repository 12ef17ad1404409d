"""fp8 on the lent GPU (issue 55): FA3 fp8 vs FA3 bf16 on a prefill, FlashInfer's fp8 KV cache vs its bf16 cache on a
GQA decode step: for each, the GPU time, the error against fp64 on the unquantised inputs, the part the quantisation
alone explains, plain bf16's, the quantisation's own time, the attention kernels that ran, and the headline of the
pair. Run after `. bench/h200/engines_setup.sh <wheels>`:  python bench/h200/fp8_check.py"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from attention_variants import VARIANTS  # noqa: E402
from profiling.explain import facts  # noqa: E402
from profiling.explain.verdict import headline  # noqa: E402
from profiling.measurement import measure_runs  # noqa: E402
from profiling.workload import NAMED, Workload  # noqa: E402

PREFILL = Workload.blog(batch=2, seq_len=2048, head_dim=128)
LONG = Workload.blog(batch=1, seq_len=16384, head_dim=128)
DECODE = NAMED["decode"]
PAIRS = [("fa3", PREFILL, PREFILL.replace(dtype="fp8")), ("fa3", LONG, LONG.replace(dtype="fp8")),
         ("fa3", DECODE, DECODE.replace(dtype="fp8")), ("flashinfer", DECODE, DECODE.replace(kv_dtype="fp8")),
         ("flashinfer", DECODE.replace(page_size=16), DECODE.replace(page_size=16, kv_dtype="fp8"))]


def one(key: str, w: Workload):
    run = measure_runs([VARIANTS[key]], w)[0]
    if not run.ok:
        print(f"  {key} {w.words()}: {run.status}: {run.reason}")
        return None
    a = run.accuracy
    kernels = [k.short_name[:100] for k in run.kernels if k.category == "fused attention"]
    print(f"  {key} {w.words()}: {run.timing.median_ms:.4f} ms; error vs fp64 {a.max_abs_error:.3e}, quantisation alone "
          f"{a.quantisation_max_abs_error}, plain {w.drawn} {a.naive_max_abs_error:.3e}; quantise "
          f"{run.quantise_ms} ms; gate {'WRONG' if facts.wrong_answer(run) else 'ok'}; kernels {kernels}")
    return run


for key, bf16, fp8 in PAIRS:
    print(f"{key}: {fp8.words()} beside {bf16.words()}")
    slow, fast = one(key, bf16), one(key, fp8)
    if slow and fast:
        print("  headline:", headline(fast, slow).title)
