"""Recording real GPU runs: `python -m profiling record` measures the recording's parts (PARTS: the variant matrix,
each run with its gzipped trace; the timing modes; the sweeps; the decode steps; packed documents), written where
`replay` reads them."""
from __future__ import annotations

import dataclasses
import gzip
import shutil
from pathlib import Path

from . import text
from .results import RUNS_FILE, SWEEPS_FILE, Run, Sweep, read_stored, write_stored
from .workload import NAMED, Workload

# What `record` runs on a GPU: the blog workload and the variations the notes are about. A training step is
# recorded once: its "backward only" view is the same calls' backward timings (`backward_view`).
BLOG = Workload.blog()
LLAMA = NAMED["llama"]   # grouped-query, Llama-style
MATRIX = (
    BLOG,                                    # the blog's workload
    BLOG.replace(seq_len=4096),              # where naive grows kernels and flash pulls away
    BLOG.replace(dtype="fp32"),              # who can run fp32
    BLOG.replace(rank=3),                    # the rank-3 trap
    BLOG.replace(head_dim=128),              # a larger head
    BLOG.replace(causal=False),              # no mask at all
    BLOG.replace(passes="fwd+bwd"),          # a training step
    LLAMA, LLAMA.replace(passes="fwd+bwd"),  # grouped-query heads, inference and training
    BLOG.replace(mask="bool"), BLOG.replace(mask="bool", passes="fwd+bwd"),   # an explicit causal mask
    BLOG.replace(mask="bias"), BLOG.replace(mask="bias", passes="fwd+bwd"),   # an additive bias
    BLOG.replace(mask="window", window=256),  # a sliding window
    BLOG.replace(mask="window", window=256, passes="fwd+bwd"),
)


def timed(workloads) -> tuple[Workload, ...]:
    """Each workload timed cold (the L2 flushed before every call) and in a CUDA graph; each such run carries its warm
    figure and host figures too, so a recorded workload has all three."""
    return tuple(w.replace(timing=mode) for w in workloads for mode in ("cold", "graph"))


TIMED = timed(MATRIX)
GPU_MATRIX = MATRIX + TIMED


def backward_view(run: Run) -> Run:
    """A training step's run as the "backward only" pass sees it: the same calls, the backward's timing."""
    w = run.workload.replace(passes="bwd")
    if run.backward_timing is None:
        return dataclasses.replace(run, workload=w)
    return dataclasses.replace(run, workload=w, timing=run.backward_timing)


def record(out_dir: str | Path, workloads=GPU_MATRIX, variants=None, progress=print, kept: list[Run] = (),
           deadline: float | None = None, energy: bool = True) -> list[Run]:
    """Measure every variant on every workload, each workload one session (the variants' timings interleaved, the
    compiled ones prepared last; with `energy`, each one's energy per call); keep each run and its gzipped Chrome
    trace beside the runs `kept`, each workload's runs in place of any `kept` held of it. With a `deadline` (time.monotonic()), a workload is begun only while
    the one before it would still fit: the rest keep their runs, and `record.stopped` names the first not begun."""
    import time

    from attention_variants import VARIANTS
    from .session import measure

    out_dir = Path(out_dir)
    (out_dir / "traces").mkdir(parents=True, exist_ok=True)
    runs = list(kept)
    keys = list(variants or VARIANTS)
    record.stopped = None
    last_s = 0.0
    for i, workload in enumerate(workloads):
        if deadline is not None and time.monotonic() + 1.2 * last_s > deadline:
            record.stopped = i
            progress(f"stopped before {workload.words()} ({i} of {len(workloads)} done): the time left is less "
                     f"than the last workload took ({last_s:.0f} s)")
            break
        t0 = time.monotonic()
        new = []
        for run in measure(workload, keys, trace_dir=out_dir / "raw", energy=energy):
            if run.trace_path:
                target = out_dir / "traces" / (Path(run.trace_path).name + ".gz")
                with open(run.trace_path, "rb") as src, gzip.open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                run.trace_path = str(target.relative_to(out_dir))
            new += [run, backward_view(run)] if workload.passes == "fwd+bwd" else [run]
            gpu = text.ms(run.gpu_ms) if run.gpu_ms else run.status
            progress(f"{workload.words():60s} {run.variant:15s} {gpu}")
        runs = [r for r in runs  # a run of this workload by a variant recorded here: replaced
                if _step_of(_asked(r)) != _step_of(workload) or (variants and r.variant not in keys)] + new
        write_stored(out_dir / RUNS_FILE, runs)  # after each workload: a recording cut short keeps what it measured
        last_s = time.monotonic() - t0
    shutil.rmtree(out_dir / "raw", ignore_errors=True)
    write_stored(out_dir / RUNS_FILE, runs)
    return runs


# -- recording sweeps on a GPU -----------------------------------------------------------------------
DOUBLING = [2**i for i in range(7, 18)]   # 128 … 131072
FUSED = ("sdpa_efficient", "sdpa_flash", "sdpa_cudnn", "sdpa_auto", "flex", "fa4", "fa3", "fa3_fp8", "cudnn_fe")
WINDOWED = ("sdpa_auto", "sdpa_cudnn", "flex", "fa4", "cudnn_fe")  # a dense window mask against block-sparse kernels
# The recorded sweeps: the blog's workload for every variant, warm and cold (where the L2 stops holding the
# working set: 64 MiB at S=1024), a long-context one for the fused, a training step, and a sliding window of 1024
# keys against causal over S (from the window up). Each family: its fixed fields, its variants (None: every one),
# the values of its axis and the axis.
COLD_FAMILIES = ((Workload.blog(timing="cold"), None, DOUBLING, "seq_len"),)
RECORDED_FAMILIES = (
    (Workload.blog(), None, DOUBLING, "seq_len"),                                  # None: every variant
    (Workload.blog(batch=1, head_dim=128), FUSED, DOUBLING, "seq_len"),
    (Workload.blog(passes="fwd+bwd"), FUSED, DOUBLING[:9], "seq_len"),            # 128 … 32768
    (Workload.blog(batch=1, head_dim=128, mask="window", window=1024), WINDOWED, DOUBLING[3:], "seq_len"),
) + COLD_FAMILIES

# -- decode steps (the part 'decode' of a recording: runs and sweeps), about 3 minutes on the H200 -------------------
# A Llama-style decode step (B=8, H=32, 8 kv heads, S=8,192, D=128, one new query) and its variations: the batch
# (1, 64), the KV length (1k, 128k), the kv heads (MHA, MQA), four queries (a speculative step), a paged cache of
# 16-token pages (cp.async in FA4) and of 128 (a whole key tile: TMA). FlexAttention compiles each shape (~5 s) and
# FlashAttention-4 each configuration: the grid is held to what shows a lesson.
DECODE = NAMED["decode"]
LONG_DECODE = DECODE.replace(batch=1, seq_len=131072)
SPECULATIVE = DECODE.replace(q_len=4)
DECODE_MATRIX = (
    DECODE, SPECULATIVE, LONG_DECODE,
    DECODE.replace(batch=1), DECODE.replace(batch=64),
    DECODE.replace(seq_len=1024),
    DECODE.replace(kv_heads=None), DECODE.replace(kv_heads=1),
    DECODE.replace(page_size=16), DECODE.replace(page_size=128), SPECULATIVE.replace(page_size=16),
)
DECODERS = ("sdpa_flash", "sdpa_cudnn", "sdpa_auto", "flex", "fa4", "fa3", "fa3_fp8", "cudnn_fe", "flashinfer",
            "flashinfer_fp8")
DECODE_FAMILIES = (
    (DECODE.replace(batch=1), DECODERS, [1024, 4096, 16384, 65536, 131072], "seq_len"),  # one sequence, longer
    (DECODE, DECODERS, [1, 4, 16, 64], "batch"),                                          # more sequences
)


def record_sweeps(out_dir, families=RECORDED_FAMILIES, progress=print, kept: list[Sweep] = (),
                  deadline: float | None = None) -> list[Sweep]:
    """Each family over its axis' values, every variant stopping at its first point that does not fit; written to
    out_dir/sweeps.json.gz after each family, each in place of a sweep `kept` held of the same family (no traces: a
    sweep keeps numbers and kernel names). With a `deadline` (time.monotonic()), a family is begun only while the
    one before it would still fit; the rest keep what was held, and `record_sweeps.stopped` counts those begun."""
    import time

    from attention_variants import VARIANTS
    from .session import sweep_all

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sweeps = list(kept)
    record_sweeps.stopped = None
    last_s = 0.0
    for i, (base, keys, lengths, axis) in enumerate(families):
        if deadline is not None and time.monotonic() + 1.2 * last_s > deadline:
            record_sweeps.stopped = i
            progress(f"stopped before the sweep {base.family(axis)}: the time left is less than the last took")
            break
        t0 = time.perf_counter()
        result = sweep_all(base, keys or list(VARIANTS), lengths, axis=axis,
                           progress=lambda f, m: progress(f"{time.perf_counter() - t0:6.1f} s  {m}")
                           if m.endswith(": done") or m.startswith("predicted") else None)
        progress(f"{base.family(axis)}: {len(result.runs)} points in {time.perf_counter() - t0:.0f} s")
        for run in result.runs:
            progress(f"  {text.point(axis, result.value(run)):9s} {run.variant:15s} {run.status:13s} "
                     + (text.ms(run.gpu_ms) if run.gpu_ms else (run.reason or "")[:60]))
        own = (base.problem(free=(axis,)), axis)  # a held sweep of this family whose variants the new one covers
        sweeps = [s for s in sweeps if (s.workload.problem(free=(s.axis,)), s.axis) != own
                  or (keys and not set(s.variants) <= set(keys))] + [result]
        write_stored(out_dir / SWEEPS_FILE, sweeps)
        last_s = time.perf_counter() - t0
    return sweeps


# -- packed documents (the parts 'packed' and 'packed_unequal'), about 5 and 3 minutes on the H200 ------------------
# Three batches of 8,192 tokens (H=16, D=64, bf16, causal): four equal documents, one long document among short ones,
# many short ones of uneven lengths; forward and training step, every way: padded (SDPA pinned and auto), the
# block-diagonal mask (SDPA's and by hand), nested jagged tensors, varlen_attn, FlexAttention's document mask, FlashAttention-4's varlen.
# Then how unequal the documents are, forward only, the total held: the longest of four from a quarter of the tokens
# to nearly all of them (a sweep's axis is S or B, a number; these points are runs of their own).
PACKED = Workload.blog(lengths=(2048,) * 4)
ONE_LONG = PACKED.replace(lengths=(4096,) + (512,) * 8)
MANY_SHORT = PACKED.replace(lengths=tuple(64 + (97 * i) % 448 for i in range(28)) + (198,))  # 29 of 64…503
PACKED_MATRIX = tuple(w.replace(passes=p) for w in (PACKED, ONE_LONG, MANY_SHORT) for p in ("fwd", "fwd+bwd"))
UNEQUAL = tuple(PACKED.replace(lengths=(8192 - 3 * n, n, n, n)) for n in (1536, 1024, 512, 64))  # 2048: PACKED
PACKERS = ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_auto", "sdpa_docmask", "naive_docmask", "sdpa_nested",
           "varlen", "flex", "fa4", "fa3", "cudnn_fe")

# -- fp8 beside bf16 (the part 'fp8'), about 3 minutes on the H200 (estimated) -------------------------------------
# Each kernel that takes fp8 beside its own fp8 twin (`Variant.twins`: the same call on the same drawn values, quantised
# on its side) and the bf16 kernels a reader weighs it against: the blog's forward, a long prefill (one sequence of
# 16k, D=128) and the GQA decode step, runs; and sweeps over S of the blog's forward and of one decode sequence.
FP8_PREFILL = (BLOG.replace(batch=1, seq_len=16384, head_dim=128),)
FP8_MATRIX = (BLOG, *FP8_PREFILL, DECODE)
FP8_TAKERS = ("fa3", "fa3_fp8", "flashinfer", "flashinfer_fp8")  # (tests check: every taker and its twins)
FP8_FAMILIES = (
    (BLOG, ("fa3", "fa3_fp8", "cudnn_fe"), DOUBLING[:9], "seq_len"),   # 128 … 32768
    (DECODE.replace(batch=1), ("flashinfer", "flashinfer_fp8", "fa3", "fa3_fp8"),
     [1024, 4096, 16384, 65536, 131072], "seq_len"),
)

# -- the recording's parts: each recorded in place ------------------------------------------------------------------
# `python -m profiling record --out DIR --part NAME ...` measures the named parts (all by default) and keeps every
# other run and sweep DIR held: a part recorded again replaces its own runs and sweeps, never doubles them. Each part
# fits in one call of a lent GPU (≤ 10 min on the H200).
PARTS = {
    "matrix": (MATRIX, ()),                                  # ~5 min on the H200
    "cold": (TIMED[0::2], ()),                               # 3.4 min (FA4 installed: all the H200 times here)
    "graph": (TIMED[1::2], ()),                              # 1.6 min
    "sweeps": ((), RECORDED_FAMILIES),                       # ~3.5 min, the blog's cold sweep among them
    "decode": (DECODE_MATRIX, DECODE_FAMILIES),              # ~3.5 min
    "decode_timing": (timed(DECODE_MATRIX), ()),             # ~2.5 min (estimated from its first four workloads)
    "packed": (PACKED_MATRIX, ()),                           # 1.5 min
    "packed_unequal": (UNEQUAL, ()),                         # 0.6 min
    "packed_timing": (timed(PACKED_MATRIX), ()),             # 1.8 min
    "unequal_timing": (timed(UNEQUAL), ()),                  # ~1 min (estimated)
    "fp8": (FP8_MATRIX, FP8_FAMILIES),                       # ~3 min (estimated)
    "counters": ((), ()),                                    # ncu over one call of each of COUNTED (record_counters)
}
PART_VARIANTS = {name: PACKERS for name in ("packed", "packed_unequal", "packed_timing", "unequal_timing")}
# The part records the fp8 takers, their twins and cuDNN's frontend: the kernels it adds. The SDPA and FA4 runs its
# workloads share with the matrix and decode parts stay those parts' (each workload's runs one session where it can).
PART_VARIANTS["fp8"] = FP8_TAKERS + ("cudnn_fe",)


# -- hardware counters (the part 'counters'): one call of each variant under Nsight Compute -------------------------
# The blog's workload for every variant the recording holds there (None), and a decode step for its decoders: each
# one process under ncu (counters.read), its counters kept in counters.json.gz beside the runs, or ncu's refusal.
COUNTED = ((BLOG, None), (DECODE, DECODERS))


def counted_variants(out_dir, workload: Workload, keys=None) -> list[str]:
    """The variants to read on `workload`: those of `keys` (every variant: None) the recording in `out_dir` holds an
    ok run of there, in recording order; where it holds none of that workload, every one of `keys`."""
    from attention_variants import VARIANTS

    keys = list(keys or VARIANTS)
    held = [r["variant"] for r in read_stored(Path(out_dir) / RUNS_FILE)
            if r.get("status") == "ok" and Run.from_dict(r).workload.problem() == workload.problem()]
    return [k for k in dict.fromkeys(held) if k in keys] or keys


def record_counters(out_dir, counted=COUNTED, progress=print, read=None, deadline: float | None = None) -> list:
    """Read each variant of `counted` under ncu (`counters.read`, or `read`) and write them to out_dir/counters.json.gz
    in place of those it held of the same workload and variant, beside the rest; written after each variant. Those
    it holds read already come last, so a part stopped at its `deadline` (time.monotonic(): no variant begun that the
    last would not fit before it) goes on where it stopped when recorded again."""
    import time

    from .counters import COUNTERS_FILE, Counters, read as ncu_read

    read = read or ncu_read
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    held = [Counters.from_dict(d) for d in read_stored(out_dir / COUNTERS_FILE)]
    last_s = 0.0
    for workload, keys in counted:
        done = {c.variant for c in held if c.workload.problem() == workload.problem() and not c.refusal}
        for key in sorted(counted_variants(out_dir, workload, keys), key=lambda k: k in done):
            if deadline is not None and time.monotonic() + 1.2 * last_s > deadline:
                progress(f"part counters: stopped at its deadline before {key} on {workload.words()}; recorded "
                         "again, it goes on with those not read")
                return held
            t0 = time.monotonic()
            got = read(workload, key)
            last_s = time.monotonic() - t0
            held = [c for c in held if (c.workload.problem(), c.variant) != (workload.problem(), key)] + [got]
            write_stored(out_dir / COUNTERS_FILE, held)
            said = got.refusal or (f"{len(got.kernels)} kernels, DRAM read {text.size(got.dram_read_bytes or 0)}, "
                                   f"written {text.size(got.dram_write_bytes or 0)}")
            progress(f"{workload.words():60s} {key:15s} {said}")
    return held


def _step_of(workload: Workload) -> tuple:
    """A run's problem with a backward view keyed as the training step it was cut from (recorded with it)."""
    return (workload.replace(passes="fwd+bwd") if workload.passes == "bwd" else workload).problem()


def _asked(run: Run) -> Workload:
    """The workload a run was measured for: an fp8 twin's is the 16-bit one it quantised (`Variant.effective`)."""
    from attention_variants import VARIANTS

    twin = run.variant in VARIANTS and VARIANTS[run.variant].quantises
    return run.workload.unquantised if twin else run.workload


def record_part(out_dir, name: str, progress=print, variants=None, start: int = 0,
                deadline: float | None = None, energy: bool = True) -> tuple[list[Run], list[Sweep]]:
    """Record the part `name` of PARTS into the recording in `out_dir`, in place of any runs and sweeps it held of
    the same workloads, beside all the rest: its runs (every variant unless `variants` or PART_VARIANTS name some,
    traces kept) from its workload `start` on, then its sweeps. With a `deadline` (time.monotonic()) a part that
    runs out of time stops between two workloads, keeps what it held of the rest, records no sweep, and says the
    --start that goes on from there (a lent GPU's call is 10 minutes). The part 'counters' writes counters.json.gz
    (`record_counters`) and returns the runs and sweeps the recording holds, unchanged."""
    import time

    if name not in PARTS:
        raise ValueError(f"part={name!r} is not a part of the recording: choose one of {', '.join(PARTS)}")
    if name == "counters":  # no runs or sweeps: counters.json.gz beside them
        t0 = time.perf_counter()
        held = record_counters(out_dir, progress=progress, deadline=deadline)
        progress(f"part counters: {len(held)} calls read, {time.perf_counter() - t0:.0f} s")
        return [Run.from_dict(d) for d in read_stored(Path(out_dir) / RUNS_FILE)], \
            [Sweep.from_dict(d) for d in read_stored(Path(out_dir) / SWEEPS_FILE)]
    workloads, families = PARTS[name]
    if not 0 <= start <= len(workloads):
        raise ValueError(f"start={start} is outside the part {name!r}: its workloads are 0 to {len(workloads)}")
    variants = variants or PART_VARIANTS.get(name)
    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    held = [Run.from_dict(r) for r in read_stored(out_dir / RUNS_FILE)]
    todo = workloads[start:]
    runs = record(out_dir, todo, variants, progress=progress, kept=held, deadline=deadline, energy=energy) \
        if todo else held
    stopped = record.stopped if todo else None
    held_traces = {Path(r.trace_path).name for r in runs if r.trace_path}
    for trace in (out_dir / "traces").glob("*.gz") if (out_dir / "traces").is_dir() else ():
        if trace.name not in held_traces:  # a replaced run's trace
            trace.unlink()
    held_sweeps = [Sweep.from_dict(s) for s in read_stored(out_dir / SWEEPS_FILE)]
    if stopped is not None:
        progress(f"part {name}: stopped at its deadline; go on with --part {name} --start {start + stopped}")
        return runs, held_sweeps
    if variants:
        families = tuple((base, [k for k in (keys or variants) if k in variants], values, axis)
                         for base, keys, values, axis in families)
    sweeps = record_sweeps(out_dir, families, progress=progress, kept=held_sweeps, deadline=deadline) \
        if families else held_sweeps
    if families and record_sweeps.stopped is not None:
        progress(f"part {name}: stopped at its deadline before {len(families) - record_sweeps.stopped} of its "
                 f"sweeps; go on with --part {name} --start {len(workloads)}")
    progress(f"part {name}: {len(runs)} runs, {len(sweeps)} sweeps in the recording, {time.perf_counter() - t0:.0f} s")
    return runs, sweeps
