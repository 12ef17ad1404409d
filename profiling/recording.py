"""Recorded runs from real GPUs: written by `python -m profiling record`, read by replay mode and tests."""
from __future__ import annotations

import copy
import dataclasses
import functools
import gzip
import json
import math
import shutil
from pathlib import Path

from . import text
from .results import Run, Sweep
from .budget import forward_bytes
from .workload import Workload

RECORDED_DIR = Path(__file__).parent / "recorded"

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
)


def backward_view(run: Run) -> Run:
    """A training step's run as the "backward only" pass sees it: the same calls, the backward's timing."""
    w = run.workload.replace(passes="bwd")
    if run.backward_timing is None:
        return dataclasses.replace(run, workload=w)
    tflops = w.pass_flops / (run.backward_timing.median_ms * 1e-3) / 1e12
    peak = (run.environment.peak_tflops or {}).get(w.dtype)
    return dataclasses.replace(run, workload=w, timing=run.backward_timing, tflops=tflops,
                               peak_share=tflops / peak if peak else None)


def record(out_dir: str | Path, workloads=GPU_MATRIX, variants=None, progress=print) -> list[Run]:
    """Measure every variant on every workload, each workload one session (the variants' timings interleaved, the
    compiled ones prepared last); keep each run and its gzipped Chrome trace."""
    from attention_variants import VARIANTS
    from .measurement import measure_runs

    out_dir = Path(out_dir)
    (out_dir / "traces").mkdir(parents=True, exist_ok=True)
    runs = []
    chosen = [VARIANTS[k] for k in (variants or VARIANTS)]
    for workload in workloads:
        for run in measure_runs(chosen, workload, trace_dir=out_dir / "raw"):
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


def load_recorded(directory: str | Path) -> list[Run]:
    """Runs from a recording, their trace paths made absolute; the memory estimate beside the measured peak is
    today's model (`budget.forward_bytes`), as a live run would show it. The kernel tables are as recorded: tests
    compare them with what the parser reads from the traces today."""
    from attention_variants import VARIANTS

    directory = Path(directory)
    runs = [Run.from_dict(d) for d in json.loads((directory / "runs.json").read_text())]
    for run in runs:
        if run.variant in VARIANTS:
            run.estimated_extra_bytes = forward_bytes(run.workload, VARIANTS[run.variant].scratch_bytes(run.workload))
        if run.trace_path:
            run.trace_path = str(directory / run.trace_path)
    return runs


def recordings() -> dict[str, Path]:
    """Name -> folder of every recording shipped with the app."""
    return {p.name: p for p in sorted(RECORDED_DIR.iterdir()) if (p / "runs.json").exists()} \
        if RECORDED_DIR.exists() else {}


# -- replay: look runs up in a recording ------------------------------------------------------
@functools.cache
def recorded_runs(name: str) -> tuple[Run, ...]:
    """Every run of the recording `name`, loaded once (read-only: find_recorded hands out copies)."""
    return tuple(load_recorded(recordings()[name]))


def _problem(workload: Workload) -> Workload:
    """The workload with the fields that do not change the problem (device, seed) set aside."""
    return dataclasses.replace(workload, device="cuda", seed=0)


def recorded_workloads(name: str) -> list[Workload]:
    """The distinct workloads the recording holds, in recording order."""
    return list(dict.fromkeys(run.workload for run in recorded_runs(name)))


def find_recorded(name: str, variant: str, workload: Workload) -> Run | None:
    """A copy of the recorded run of `variant` on the same problem as `workload` (any device), or None."""
    wanted = _problem(workload)
    for run in recorded_runs(name):
        if run.variant == variant and _problem(run.workload) == wanted:
            return copy.deepcopy(run)
    return None


def _held(name: str) -> dict[Workload, set[str]]:
    """The problems the recording `name` holds, in recording order, each with the variants run on it."""
    held: dict[Workload, set[str]] = {}
    for run in recorded_runs(name):
        held.setdefault(_problem(run.workload), set()).add(run.variant)
    return held


def _log2_distance(a: Workload, b: Workload) -> float:
    return sum(abs(math.log2(getattr(a, f) / getattr(b, f))) for f in ("seq_len", "batch", "heads", "head_dim"))


def nearest_recorded(name: str, workload: Workload, variants=(), n: int = 3) -> list[Workload]:
    """The `n` workloads of the recording `name` closest to `workload`'s problem, best first: those holding a
    run of every one of `variants` (keys) before the others, then the fewest fields that differ, then the
    smallest sum of |log2| ratios of S, B, H and D (S=2048 is as near 1024 as 4096 is), then recording order."""
    wanted, held = _problem(workload), _held(name)
    fields = [f.name for f in dataclasses.fields(Workload)]

    def distance(problem: Workload) -> tuple:
        differing = sum(getattr(problem, f) != getattr(wanted, f) for f in fields)
        return not set(variants) <= held[problem], differing, _log2_distance(problem, wanted)

    return sorted(held, key=distance)[:n]


def unrecorded_message(name: str, workload: Workload, variants=()) -> str | None:
    """None when the recording `name` holds a run of every one of `variants` (keys) on `workload`'s problem
    (with none given: any run of it); else what is missing and the nearest recorded workloads, in words."""
    wanted = _problem(workload)
    held = _held(name).get(wanted)
    missing = [v for v in variants if v not in (held or ())]
    if held is not None and not missing:
        return None
    gpu = text.machine(recorded_runs(name)[0].environment)
    what = workload.words() if held is None else f"{' or '.join(missing)} on {workload.words()}"
    nearest = [w.words() for w in nearest_recorded(name, workload, variants, n=4) if w != wanted][:3]
    said = f"The {gpu} recording has no run of {what}."
    return f"{said} Nearest recorded: {'; '.join(nearest)}." if nearest else said


# -- recorded sweeps ----------------------------------------------------------------------------
@functools.cache
def recorded_sweeps(name: str) -> tuple[Sweep, ...]:
    """Every sweep of the recording `name` (its sweeps.json, written by `record-sweeps`), loaded once."""
    folders = {p.name: p for p in RECORDED_DIR.iterdir() if p.is_dir()} if RECORDED_DIR.exists() else {}
    if name not in folders or not (folders[name] / "sweeps.json").exists():  # a name, never a path
        return ()
    path = folders[name] / "sweeps.json"
    return tuple(Sweep.from_dict(d) for d in json.loads(path.read_text()))


def find_recorded_sweep(name: str, a: str, b: str, workload: Workload) -> Sweep | None:
    """The recorded sweep of A and B on `workload`'s problem with S left free (any device), or None."""
    wanted = _problem(workload.replace(seq_len=1))
    for recorded in recorded_sweeps(name):
        if {a, b} <= set(recorded.variants) and _problem(recorded.workload.replace(seq_len=1)) == wanted:
            return copy.deepcopy(recorded.select([a, b]))  # the cached sweep stays as recorded
    return None


# -- recording sweeps on a GPU -----------------------------------------------------------------------
DOUBLING = [2**i for i in range(7, 18)]   # 128 … 131072
FUSED = ("sdpa_efficient", "sdpa_flash", "sdpa_cudnn", "sdpa_auto", "flex", "fa4")
WINDOWED = ("sdpa_auto", "sdpa_cudnn", "flex", "fa4")  # a dense window mask against block-sparse kernels
# What `record-sweeps` runs: the blog's workload for every variant, a long-context one for the fused, a training
# step, and a sliding window of 1024 keys against causal over S (from the window up).
RECORDED_FAMILIES = (
    (Workload.blog(), None, DOUBLING),                                  # None: every variant
    (Workload.blog(batch=1, head_dim=128), FUSED, DOUBLING),
    (Workload.blog(passes="fwd+bwd"), FUSED, DOUBLING[:9]),            # 128 … 32768
    (Workload.blog(batch=1, head_dim=128, mask="window", window=1024), WINDOWED, DOUBLING[3:]),  # 1024 … 131072
)


def record_sweeps(out_dir, families=RECORDED_FAMILIES, progress=print) -> list[Sweep]:
    """Each family over its lengths, every variant stopping at its first point that does not fit; written to
    out_dir/sweeps.json after each family (no traces: a sweep keeps numbers and kernel names)."""
    import time

    from attention_variants import VARIANTS
    from .environment import detect
    from .sweep import run_sweep

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sweeps = []
    for base, keys, lengths in families:
        t0 = time.perf_counter()
        variants = [VARIANTS[k] for k in (keys or VARIANTS)]
        result = run_sweep(variants, base.replace(seq_len=lengths[0]), lengths, detect(base.device),
                           progress=lambda f, m: progress(f"{time.perf_counter() - t0:6.1f} s  {m}")
                           if m.endswith(": done") or m.startswith("predicted") else None)
        progress(f"{base.family()}: {len(result.runs)} points in {time.perf_counter() - t0:.0f} s")
        for run in result.runs:
            progress(f"  S={run.workload.seq_len:<7} {run.variant:15s} {run.status:13s} "
                     + (text.ms(run.gpu_ms) if run.gpu_ms else (run.reason or "")[:60]))
        sweeps.append(result)
        (out_dir / "sweeps.json").write_text(json.dumps([s.to_dict() for s in sweeps], indent=1))
    return sweeps
