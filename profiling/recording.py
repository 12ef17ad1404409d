"""Recording real GPU runs: `python -m profiling record` (the variant matrix, each run with its gzipped trace) and
`record-sweeps` (the sweeps), written where `replay` reads them."""
from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
from pathlib import Path

from . import text
from .results import Run, Sweep
from .workload import Workload

# What `record` runs on a GPU: the blog workload and the variations the notes are about. A training step is
# recorded once: its "backward only" view is the same calls' backward timings (`backward_view`).
BLOG = Workload.blog()
LLAMA = Workload(batch=4, heads=32, kv_heads=8, seq_len=2048, head_dim=128)   # grouped-query, Llama-style
GPU_MATRIX = (
    BLOG,                                    # the blog's workload
    BLOG.replace(seq_len=4096),              # where naive grows kernels and flash pulls away
    BLOG.replace(dtype="fp32"),              # who can run fp32
    BLOG.replace(rank=3),                    # the rank-3 trap
    BLOG.replace(head_dim=128),              # a larger head
    BLOG.replace(causal=False),              # no mask at all
    BLOG.replace(passes="fwd+bwd"),          # a training step
    LLAMA, LLAMA.replace(passes="fwd+bwd"),  # grouped-query heads, inference and training
    BLOG.replace(mask="bool"),               # an explicit causal mask
    BLOG.replace(mask="bias"),               # an additive bias
    BLOG.replace(mask="window", window=256),  # a sliding window
    BLOG.replace(mask="window", window=256, passes="fwd+bwd"),
) + (
    # Timed cold and in a CUDA graph (each run carries its warm figure and host figures too) where the mode changes
    # the answer: cold where the working set is near the L2's size (the blog's forward and step: 64 and 128 MiB
    # against the H200's L2), graphs where kernels of 0.06-0.3 ms are host-bound one launch at a time (flex, FA4: the
    # blog's forward and step, the window of 256). All 13 workloads in all three modes would take ~15 min on the
    # H200; with these six the matrix, the sweeps and the blog's cold sweep fit in ~10.
    BLOG.replace(timing="cold"), BLOG.replace(timing="graph"),
    BLOG.replace(passes="fwd+bwd", timing="cold"), BLOG.replace(passes="fwd+bwd", timing="graph"),
    BLOG.replace(mask="window", window=256, timing="graph"),
    BLOG.replace(mask="window", window=256, passes="fwd+bwd", timing="graph"),
)


def backward_view(run: Run) -> Run:
    """A training step's run as the "backward only" pass sees it: the same calls, the backward's timing."""
    w = run.workload.replace(passes="bwd")
    if run.backward_timing is None:
        return dataclasses.replace(run, workload=w)
    return dataclasses.replace(run, workload=w, timing=run.backward_timing)


def record(out_dir: str | Path, workloads=GPU_MATRIX, variants=None, progress=print, kept: list[Run] = ()) -> list[Run]:
    """Measure every variant on every workload, each workload one session (the variants' timings interleaved, the
    compiled ones prepared last); keep each run and its gzipped Chrome trace, after the runs `kept`."""
    from attention_variants import VARIANTS
    from .session import measure

    out_dir = Path(out_dir)
    (out_dir / "traces").mkdir(parents=True, exist_ok=True)
    runs = list(kept)
    keys = list(variants or VARIANTS)
    for workload in workloads:
        for run in measure(workload, keys, trace_dir=out_dir / "raw"):
            if run.trace_path:
                target = out_dir / "traces" / (Path(run.trace_path).name + ".gz")
                with open(run.trace_path, "rb") as src, gzip.open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                run.trace_path = str(target.relative_to(out_dir))
            runs += [run, backward_view(run)] if workload.passes == "fwd+bwd" else [run]
            gpu = text.ms(run.gpu_ms) if run.gpu_ms else run.status
            progress(f"{workload.words():60s} {run.variant:15s} {gpu}")
    shutil.rmtree(out_dir / "raw", ignore_errors=True)
    (out_dir / "runs.json").write_text(json.dumps([r.to_dict() for r in runs], indent=1))
    return runs


# -- recording sweeps on a GPU -----------------------------------------------------------------------
DOUBLING = [2**i for i in range(7, 18)]   # 128 … 131072
FUSED = ("sdpa_efficient", "sdpa_flash", "sdpa_cudnn", "sdpa_auto", "flex", "fa4")
WINDOWED = ("sdpa_auto", "sdpa_cudnn", "flex", "fa4")  # a dense window mask against block-sparse kernels
# What `record-sweeps` runs: the blog's workload for every variant, warm and cold (where the L2 stops holding the
# working set: 64 MiB at S=1024), a long-context one for the fused, a training step, and a sliding window of 1024
# keys against causal over S (from the window up). Each family: its fixed fields, its variants (None: every one),
# the values of its axis and the axis.
RECORDED_FAMILIES = (
    (Workload.blog(), None, DOUBLING, "seq_len"),                                  # None: every variant
    (Workload.blog(timing="cold"), None, DOUBLING, "seq_len"),
    (Workload.blog(batch=1, head_dim=128), FUSED, DOUBLING, "seq_len"),
    (Workload.blog(passes="fwd+bwd"), FUSED, DOUBLING[:9], "seq_len"),            # 128 … 32768
    (Workload.blog(batch=1, head_dim=128, mask="window", window=1024), WINDOWED, DOUBLING[3:], "seq_len"),
)

# -- decode steps: `record-decode` adds them to a recording (runs and sweeps), about 3 minutes on the H200 -------------
# A Llama-style decode step (B=8, H=32, 8 kv heads, S=8,192, D=128, one new query) and its variations: the batch
# (1, 64), the KV length (1k, 128k), the kv heads (MHA, MQA), four queries (a speculative step), a paged cache of
# 16-token pages (cp.async in FA4) and of 128 (a whole key tile: TMA). FlexAttention compiles each shape (~5 s) and
# FlashAttention-4 each configuration: the grid is held to what shows a lesson.
DECODE = Workload(batch=8, heads=32, kv_heads=8, seq_len=8192, head_dim=128, q_len=1)
LONG_DECODE = DECODE.replace(batch=1, seq_len=131072)
SPECULATIVE = DECODE.replace(q_len=4)
DECODE_MATRIX = (
    DECODE, SPECULATIVE, LONG_DECODE,
    DECODE.replace(batch=1), DECODE.replace(batch=64),
    DECODE.replace(seq_len=1024),
    DECODE.replace(kv_heads=None), DECODE.replace(kv_heads=1),
    DECODE.replace(page_size=16), DECODE.replace(page_size=128), SPECULATIVE.replace(page_size=16),
)
DECODERS = ("sdpa_flash", "sdpa_cudnn", "sdpa_auto", "flex", "fa4")
DECODE_FAMILIES = (
    (DECODE.replace(batch=1), DECODERS, [1024, 4096, 16384, 65536, 131072], "seq_len"),  # one sequence, longer
    (DECODE, DECODERS, [1, 4, 16, 64], "batch"),                                          # more sequences
)


def record_sweeps(out_dir, families=RECORDED_FAMILIES, progress=print, kept: list[Sweep] = ()) -> list[Sweep]:
    """Each family over its axis' values, every variant stopping at its first point that does not fit; written to
    out_dir/sweeps.json after each family, after the sweeps `kept` (no traces: a sweep keeps numbers and kernel
    names)."""
    import time

    from attention_variants import VARIANTS
    from .session import sweep_all

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sweeps = list(kept)
    for base, keys, lengths, axis in families:
        t0 = time.perf_counter()
        result = sweep_all(base, keys or list(VARIANTS), lengths, axis=axis,
                           progress=lambda f, m: progress(f"{time.perf_counter() - t0:6.1f} s  {m}")
                           if m.endswith(": done") or m.startswith("predicted") else None)
        progress(f"{base.family(axis)}: {len(result.runs)} points in {time.perf_counter() - t0:.0f} s")
        for run in result.runs:
            progress(f"  {text.point(axis, result.value(run)):9s} {run.variant:15s} {run.status:13s} "
                     + (text.ms(run.gpu_ms) if run.gpu_ms else (run.reason or "")[:60]))
        sweeps.append(result)
        (out_dir / "sweeps.json").write_text(json.dumps([s.to_dict() for s in sweeps], indent=1))
    return sweeps


def record_decode(out_dir, progress=print, variants=None) -> tuple[list[Run], list[Sweep]]:
    """Add the decode steps to the recording in `out_dir`: DECODE_MATRIX's runs (every variant unless `variants`
    names some, traces kept) and
    DECODE_FAMILIES' sweeps, in place of any the recording held of the same workloads, beside all the rest."""
    import time

    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    held = json.loads((out_dir / "runs.json").read_text()) if (out_dir / "runs.json").exists() else []
    kept = [Run.from_dict(r) for r in held]
    kept = [r for r in kept if r.workload.problem() not in {w.problem() for w in DECODE_MATRIX}]
    runs = record(out_dir, DECODE_MATRIX, variants, progress=progress, kept=kept)
    progress(f"decode runs: {time.perf_counter() - t0:.0f} s")
    swept = json.loads((out_dir / "sweeps.json").read_text()) if (out_dir / "sweeps.json").exists() else []
    families = {(base.problem(free=(axis,)), axis) for base, _, _, axis in DECODE_FAMILIES}
    kept_sweeps = [s for s in (Sweep.from_dict(d) for d in swept)
                   if (s.workload.problem(free=(s.axis,)), s.axis) not in families]
    sweeps = record_sweeps(out_dir, DECODE_FAMILIES, progress=progress, kept=kept_sweeps)
    progress(f"decode recording: {time.perf_counter() - t0:.0f} s in all")
    return runs, sweeps
