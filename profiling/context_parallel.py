"""Context parallelism: one attention call with its sequence sharded over several GPUs, measured per rank.

PyTorch's `torch.distributed.tensor.experimental.context_parallel(mesh, buffers=…, buffer_seq_dims=…)` (a prototype;
read in torch 2.14's `_context_parallel/_attention.py` and `_load_balancer.py`) shards the buffers along the sequence in
place, patches `F.scaled_dot_product_attention`, and runs a ring over the ranks: at step i each rank attends its own
queries to the K/V shard of rank (rank − i), merging the partial outputs by their log-sum-exp in fp32. K/V move by an
all-gather (the default: one collective, the whole K/V held on every rank) or by all-to-all (`set_rotate_method
("alltoall")`: one shard received per step); the backward sends dK/dV around by all-to-all either way. Under a causal
mask the head-tail load balancer (on by default, when S splits into 2·gpus chunks) gives each rank chunk r and chunk
2·gpus−1−r, so each rank attends as many pairs; without it rank r does r + 1 blocks of work and rank 0 one.

What runs where:
- On GPUs (written for them, not yet run on them: no machine of several GPUs was lent while it was built): one process
  a GPU, started by `torch.multiprocessing`, NCCL (NVLink multicast off: NCCL_NVLS_ENABLE=0 unless set), a rendezvous
  file in the first job's folder; each rank times its steps with CUDA events, records its peak memory, and writes a
  profiler trace (its attention kernels and its NCCL kernels on one timeline) that `rank_timeline` reads: compute,
  communication, and the communication no compute kernel overlaps (exposed), per step.
- On a CPU (the tests): the same worker on gloo. PyTorch's ring handlers exist only for the CUDA SDPA ops (the CPU op
  "does not have a sharding strategy registered"), so `_cpu_ring_ops` registers SDPA's CPU flash op and its backward
  with PyTorch's own ring (`_templated_ring_attention` and its backward): PyTorch's sharding, load balancer, both
  rotations and merge run; only the per-block kernel is the CPU's. A CPU trace has no kernels: its timeline is zero,
  and the notes that need kernel time are not made.

Measurement returns data (`CPRun`, JSON round trip); `profiling.explain.cp_rules` says what it means.
"""
from __future__ import annotations

import gzip
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .results import Accuracy
from .capture import profile_calls
from .trace import GPU_CATEGORIES, call_ranges, category, load_trace, short_name
from .workload import Inputs, Refusal, Workload

# The SDPA backends whose op has a ring handler in PyTorch (`_sdpa_handler`'s call_maps: flash, efficient, cuDNN and
# their backwards); auto runs whichever of them SDPA picks.
RING_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "auto")
# PyTorch's own words where it refuses (quoted from the source named above)
NO_HANDLER = "CP only supports flash attention and memory efficient attention now."
WARMUP_STEPS, TIMED_STEPS, PROFILED_STEPS = 3, 10, 3
JOIN_TIMEOUT_S = 300     # per job
GROUP_TIMEOUT_S = 600    # a collective's wait: rank 0's fp64 reference of a long training step runs meanwhile


def unsupported(key: str, workload: Workload) -> str | None:
    """Why variant `key` cannot run `workload` over several GPUs here (None: it can), in PyTorch's words where it has
    them: what the variant's own file says (`Variant.context_parallel`), else by its SDPA backend. The workload's own
    limits (mask, q_len, rank, S) are the workload's (`Workload._check_context_parallel`)."""
    from attention_variants import VARIANTS

    v = VARIANTS[key]
    if v.context_parallel is not None:
        return v.context_parallel(workload)
    if v.sdpa_backend in RING_BACKENDS:
        return None
    if v.sdpa_backend == "MATH":
        return (f"context parallel has ring handlers for SDPA's flash, memory-efficient and cuDNN ops, not math: "
                f"PyTorch raises \"{NO_HANDLER}\"")
    return (f"context parallel patches torch.nn.functional.scaled_dot_product_attention: {key} does not call it, so "
            "nothing would be sharded")


def visible_refusal(workload: Workload) -> Refusal | None:
    """gpus beyond the GPUs this process sees, on a live run (a CPU run in tests takes gloo processes instead)."""
    if workload.gpus == 1 or workload.device == "cpu":
        return None
    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if workload.gpus > seen:
        return Refusal("gpus", workload.gpus, f"this machine has {seen} CUDA GPU{'s' if seen != 1 else ''} visible: "
                                              f"choose at most {seen}" if seen else "this machine has no CUDA GPU "
                                                                                    "visible: choose 1")
    return None


# -- what the source says each rank does: pairs and buffers (the model the notes set the measurements against) --------
def rank_positions(seq_len: int, gpus: int, balanced: bool) -> list[list[int]]:
    """The sequence positions each rank holds: S/gpus in a row, or with the head-tail balancer chunk r and chunk
    2·gpus−1−r of 2·gpus equal chunks (`_HeadTailLoadBalancer`)."""
    if not balanced:
        n = seq_len // gpus
        return [list(range(r * n, (r + 1) * n)) for r in range(gpus)]
    c = seq_len // (2 * gpus)
    return [list(range(r * c, (r + 1) * c)) + list(range((2 * gpus - 1 - r) * c, (2 * gpus - r) * c))
            for r in range(gpus)]


def causal_pairs(seq_len: int, gpus: int, balanced: bool, causal: bool = True) -> list[int]:
    """Query–key pairs each rank's queries attend (per head and sequence): position p sees p + 1 keys when causal."""
    return [sum(p + 1 for p in ps) if causal else len(ps) * seq_len for ps in rank_positions(seq_len, gpus, balanced)]


def kv_rotation_bytes(workload: Workload, rotate: str | None = None) -> int:
    """The K/V buffers a rank's forward holds for the rotation at its peak, beyond its own inputs, by the source
    (`_templated_ring_attention`): every step but the last cats the K/V in use into a send buffer of one shard (the
    all-gather's too, used only at the first step). All-gather receives every rank's shard at once (gpus shards: the
    whole K/V) beside that cat: gpus + 1 shards. All-to-all receives one shard a step (`permute_tensor`) while it
    computes on the one received before and sends its cat: three shards, two with 2 GPUs (its only receive is at the
    first step, beside the first cat)."""
    n = workload.gpus
    shard = workload.kv_bytes // n
    rotate = rotate or workload.cp_rotate
    return shard * (n + 1 if rotate == "allgather" else 2 if n == 2 else 3)


# -- per-rank timelines: interval arithmetic over a trace's GPU events ------------------------------------------------
def is_collective(name: str) -> bool:
    """NCCL's kernels (ncclDevKernel_AllGather_RING_LL, ncclKernel_SendRecv, …)."""
    return name.lower().startswith("nccl")


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The intervals merged where they overlap or touch, sorted."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in union(intervals))


def uncovered(intervals: list[tuple[float, float]], cover: list[tuple[float, float]]) -> float:
    """How long `intervals` run with nothing of `cover` beside them: |∪intervals| − |∪intervals ∩ ∪cover|."""
    mine, theirs = union(intervals), union(cover)
    overlap, j = 0.0, 0
    for start, end in mine:
        while j < len(theirs) and theirs[j][1] <= start:
            j += 1
        k = j
        while k < len(theirs) and theirs[k][0] < end:
            overlap += min(end, theirs[k][1]) - max(start, theirs[k][0])
            k += 1
    return length(mine) - overlap


@dataclass
class RankKernel:
    """One row of a rank's kernel table, per profiled step."""
    name: str
    short_name: str
    category: str                 # "collective" for NCCL's; else trace.category's (fused attention, copy, …)
    calls_per_step: float
    us_per_step: float


@dataclass
class RankTimeline:
    """A rank's profiled steps on the GPU, per step: kernel time by kind and the collectives' time no compute kernel
    overlapped. Compute is every GPU event that is not NCCL's (attention, the merge's elementwise ops, copies)."""
    steps: int
    compute_us: float             # |∪ compute kernels|
    attention_us: float           # the fused attention kernels' summed time
    collective_us: float          # |∪ NCCL kernels| (a collective waiting for a slower rank runs the while)
    exposed_us: float             # |∪ NCCL kernels| with no compute kernel running
    busy_us: float                # |∪ every GPU event|
    kernels: list[RankKernel] = field(default_factory=list)


def rank_timeline(trace: dict) -> RankTimeline:
    """A rank's trace (Chrome JSON as the profiler writes it) -> its timeline per profiled step: the steps are the
    `record_function` ranges named CALL_RANGE (#1, #2, ...); every GPU event of the trace belongs to one of them (the
    window holds nothing else: a host barrier, not NCCL, separates the steps)."""
    events = trace.get("traceEvents", [])
    steps = len(call_ranges(events))
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES]
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in gpu if is_collective(e["name"])]
    compute = [(e["ts"], e["ts"] + e["dur"]) for e in gpu if not is_collective(e["name"])]
    rows: dict[str, list[float]] = {}
    for e in gpu:
        rows.setdefault(e["name"], []).append(e["dur"])
    per = max(steps, 1)
    kernels = [RankKernel(name, short_name(name), "collective" if is_collective(name) else category(name),
                          len(durations) / per, sum(durations) / per) for name, durations in rows.items()]
    kernels.sort(key=lambda k: -k.us_per_step)
    attention = sum(k.us_per_step for k in kernels if k.category == "fused attention")
    return RankTimeline(steps, length(compute) / per, attention, length(comm) / per, uncovered(comm, compute) / per,
                        length(comm + compute) / per, kernels)


# -- results --------------------------------------------------------------------------------------------------------
@dataclass
class RankResult:
    rank: int
    step_ms: list[float]          # each timed step, from the host barrier's release to this rank's last kernel's end
    peak_extra_bytes: int | None  # peak allocated during the timed steps beyond what was allocated before them
    timeline: RankTimeline
    trace_file: str | None = None

    @property
    def median_ms(self) -> float:
        return statistics.median(self.step_ms)


@dataclass
class CPRun:
    """One variant's context-parallel run: a workload (gpus, cp_rotate), with or without the load balancer, per rank."""
    variant: str
    workload: Workload
    balanced: bool
    device_name: str
    torch_version: str
    status: str = "ok"            # ok | unsupported | error
    reason: str | None = None
    ranks: list[RankResult] = field(default_factory=list)
    accuracy: Accuracy | None = None          # the unsharded output (and dq, dk, dv) against fp64
    alone_accuracy: Accuracy | None = None    # the same variant on one device, same inputs, against the same fp64

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def straggler(self) -> RankResult:
        """The rank that computed longest (its compute kernels' union; the median step where there is no trace)."""
        if any(r.timeline.busy_us for r in self.ranks):
            return max(self.ranks, key=lambda r: r.timeline.compute_us)
        return max(self.ranks, key=lambda r: r.median_ms)

    def step_ms(self) -> float:
        """The step as the slowest rank finished it: the step time of the whole group."""
        return max(r.median_ms for r in self.ranks)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["workload"] = {k: v for k, v in asdict(self.workload).items()}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "CPRun":
        data = dict(data)
        data["workload"] = Workload(**data["workload"])
        ranks = []
        for r in data.get("ranks", []):
            t = dict(r["timeline"])
            t["kernels"] = [RankKernel(**k) for k in t.get("kernels", [])]
            ranks.append(RankResult(**{**r, "timeline": RankTimeline(**t)}))
        data["ranks"] = ranks
        for name in ("accuracy", "alone_accuracy"):
            data[name] = Accuracy(**data[name]) if data.get(name) else None
        return cls(**data)


# -- the worker: one process a rank ---------------------------------------------------------------------------------
def _cpu_ring_ops() -> None:
    """Run SDPA's CPU flash op through PyTorch's own ring (tests on gloo): PyTorch registers ring handlers for the CUDA
    ops only, and the CPU op otherwise fails with "does not have a sharding strategy registered"."""
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.experimental._context_parallel import _attention as cp

    aten = torch.ops.aten

    def local(args, kwargs):
        mesh = args[0].device_mesh
        plain = [a.to_local() if isinstance(a, DTensor) else a for a in args]
        return mesh, plain, {k: v.to_local() if isinstance(v, DTensor) else v for k, v in kwargs.items()}

    def wrap(mesh, outs):
        return tuple(DTensor.from_local(o, mesh, [Shard(2)], run_check=False) for o in outs)

    def forward(op_call, args, kwargs):  # (query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask, scale)
        mesh, (q, k, v, *rest), kw = local(args, kwargs)
        kw.update(zip(("dropout_p", "is_causal"), rest))
        causal = kw.pop("is_causal", False)
        return wrap(mesh, cp._templated_ring_attention(
            mesh.get_group(), 2, aten._scaled_dot_product_flash_attention_for_cpu, q, k, v, is_causal=causal, **kw))

    def backward(op_call, args, kwargs):  # (grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, …)
        mesh, (grad_out, q, k, v, out, lse, *rest), kw = local(args, kwargs)
        kw.update(zip(("dropout_p", "is_causal"), rest))
        causal = kw.pop("is_causal", False)
        return wrap(mesh, cp._templated_ring_attention_backward(
            mesh.get_group(), 2, aten._scaled_dot_product_flash_attention_for_cpu_backward.default, grad_out,
            "grad_out", q, k, v, out, lse, causal, **kw))

    cp.custom_ops[aten._scaled_dot_product_flash_attention_for_cpu.default] = forward
    cp.custom_ops[aten._scaled_dot_product_flash_attention_for_cpu_backward.default] = backward


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _worker(rank: int, config: dict) -> None:
    """One rank: join the group (NCCL on GPUs, gloo on a CPU), then each job of `config` in turn, writing the job's
    rank<r>.json (and trace) in its folder. A job that fails on any rank is marked failed on all (a host all-reduce
    after each job keeps the ranks in step), and the next one runs."""
    import torch.distributed as dist
    from datetime import timedelta

    device, n = config["device"], config["gpus"]
    if device == "cuda":
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")   # NVLink multicast off unless asked: read at NCCL's init
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"file://{config['rendezvous']}",
                            rank=rank, world_size=n, timeout=timedelta(seconds=GROUP_TIMEOUT_S))
    host = dist.new_group(backend="gloo")   # step barriers and job flags on the host: no NCCL kernel of ours
    if device == "cpu":
        _cpu_ring_ops()
    references: dict[tuple, Any] = {}
    try:
        for job in config["jobs"]:
            out = Path(job["out_dir"])
            try:
                written = _job(rank, job, out, dist, host, references)
                failed = torch.zeros(1)
            except Exception as error:
                written = {"error": f"{type(error).__name__}: {error}"[:2000]}
                failed = torch.ones(1)
            dist.all_reduce(failed, group=host)
            if failed.item() and "error" not in written:
                written = {"error": "another rank failed"}
            (out / f"rank{rank}.json").write_text(json.dumps(written))
    finally:
        dist.destroy_process_group()


def _job(rank: int, job: dict, out: Path, dist, host, references: dict) -> dict:
    """One variant, workload and balance setting: shard the seeded inputs with context_parallel, warm up, time the
    steps, profile a few, and check the unsharded output (and gradients) against fp64 on rank 0, beside the same
    variant's on this device alone."""
    from attention_variants import VARIANTS
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import (_cp_options, context_parallel_unshard,
                                                                  set_rotate_method)

    from .accuracy import Reference

    w = Workload(**job["workload"])
    device = w.device
    mesh = init_device_mesh(device, (w.gpus,))
    set_rotate_method(w.cp_rotate)
    _cp_options.enable_load_balance = job["balanced"]
    variant = VARIANTS[job["variant"]]
    full = w.make_inputs()                  # the same seeded inputs on every rank (on this rank's GPU: set above)
    buffers = [full.q.clone(), full.k.clone(), full.v.clone()] + ([full.grad_out.clone()] if w.training else [])

    def call(x: Inputs):
        if not w.training:
            with torch.no_grad():
                return variant.forward(x), None
        q, k, v = (t.detach().requires_grad_(True) for t in (x.q, x.k, x.v))
        o = variant.forward(Inputs(w, q, k, v, None, None, x.grad_out))
        o.backward(x.grad_out)
        return o.detach(), {"dq": q.grad, "dk": k.grad, "dv": v.grad}

    with variant.pin():
        alone, alone_grads = call(full)                   # the same variant, one device, the whole sequence
        with context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2] * len(buffers)):
            shard = Inputs(w, buffers[0], buffers[1], buffers[2], None, None, buffers[3] if w.training else None)
            for _ in range(WARMUP_STEPS):
                call(shard)
            _synchronize(device)
            before = torch.cuda.memory_allocated() if device == "cuda" else 0
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            steps = []
            for _ in range(job["timed_steps"]):
                _synchronize(device)
                dist.barrier(group=host)
                if device == "cuda":
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    call(shard)
                    end.record()
                    end.synchronize()
                    steps.append(start.elapsed_time(end))
                else:
                    t0 = time.perf_counter()
                    call(shard)
                    steps.append((time.perf_counter() - t0) * 1e3)
            peak = torch.cuda.max_memory_allocated() - before if device == "cuda" else None
            trace_file = _profile(rank, out, device, lambda: call(shard), dist, host)
            result, grads = call(shard)
            names = ["dq", "dk", "dv"] if grads else []
            gathered = context_parallel_unshard(mesh, [result] + [grads[g] for g in names], [2] * (1 + len(names)))
    written = {"rank": rank, "step_ms": steps, "peak_extra_bytes": peak, "trace_file": trace_file,
               "device_name": torch.cuda.get_device_name(rank) if device == "cuda" else "cpu"}
    if rank == 0:
        key = w.replace(cp_rotate="allgather").problem()   # the same problem whatever the rotation or balance
        if key not in references:
            references.clear()          # one held at a time: a long sequence's fp64 answers are gigabytes
            references[key] = Reference(full)
        reference = references[key]
        sharded = dict(zip(names, gathered[1:])) or None
        written["accuracy"] = asdict(reference.of(gathered[0], sharded))
        written["alone_accuracy"] = asdict(reference.of(alone, alone_grads))
    return written


def _profile(rank: int, out: Path, device: str, step, dist, host) -> str:
    """PROFILED_STEPS steps profiled as every measurement's calls are (`capture.profile_calls`: each in a CALL_RANGE
    range, after an unrecorded one), the ranks released together by a host barrier before each; the trace gzipped
    beside the results."""
    raw = out / f"rank{rank}.trace.json"
    profile_calls(step, device, PROFILED_STEPS, raw, before=lambda: dist.barrier(group=host))
    name = f"rank{rank}.trace.json.gz"
    with open(raw, "rb") as src, gzip.open(out / name, "wb") as dst:
        dst.write(src.read())
    raw.unlink()
    return name


# -- the parent: start the ranks, read what they wrote ------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    """One run to make: a variant on a workload (its gpus, cp_rotate), with or without the load balancer, into a
    folder of its own."""
    variant: str
    workload: Workload
    balanced: bool
    out_dir: Path


def refusal(job: Job, env=None) -> str | None:
    """Why a job cannot run, decided before any process starts (None: it can): more GPUs than visible, the balancer
    without a causal mask, a variant without a ring handler, or one that cannot run the workload on one GPU of `env`
    (its own check: a pinned backend's dtype, head dim, …)."""
    from attention_variants import VARIANTS

    visible = visible_refusal(job.workload)
    if visible:
        return str(visible)
    if job.balanced and not job.workload.causal:
        return "PyTorch: \"Load balancing requires `is_causal=True`.\""
    return unsupported(job.variant, job.workload) or (
        VARIANTS[job.variant].supports(job.workload.replace(gpus=1, cp_rotate="allgather"), env) if env else None)


def measure(jobs: list[Job], *, timed_steps: int = TIMED_STEPS) -> list[CPRun]:
    """Every job, in one group of processes started by `torch.multiprocessing` (one a GPU, NCCL; gloo with PyTorch's
    ring on SDPA's CPU op on a CPU): the jobs must share gpus and device. A job refused up front comes back as such
    without a process started for it."""
    import torch.multiprocessing as mp

    if not jobs:
        return []
    first = jobs[0].workload
    if any((j.workload.gpus, j.workload.device) != (first.gpus, first.device) for j in jobs):
        raise ValueError("one group of processes runs jobs of one gpus and device")
    from .environment import detect

    device_name = "cpu" if first.device == "cpu" else \
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    env = detect(first.device) if first.device == "cpu" or torch.cuda.is_available() else None
    runs = [CPRun(j.variant, j.workload, j.balanced, device_name, torch.__version__) for j in jobs]
    going = []
    for run, job in zip(runs, jobs):
        reason = refusal(job, env)
        if reason:
            run.status, run.reason = "unsupported", reason
            continue
        job.out_dir.mkdir(parents=True, exist_ok=True)
        for stale in job.out_dir.glob("rank*.json"):
            stale.unlink()
        going.append((run, job))
    if not going:
        return runs
    rendezvous = going[0][1].out_dir / "rendezvous"
    rendezvous.unlink(missing_ok=True)
    config = {"device": first.device, "gpus": first.gpus, "rendezvous": str(rendezvous),
              "jobs": [{"variant": j.variant, "workload": asdict(j.workload), "balanced": j.balanced,
                        "out_dir": str(j.out_dir), "timed_steps": timed_steps} for _, j in going]}
    context = mp.start_processes(_worker, args=(config,), nprocs=first.gpus, join=False, start_method="spawn")
    deadline = time.monotonic() + JOIN_TIMEOUT_S * len(going)
    try:
        while not context.join(timeout=2):
            if time.monotonic() > deadline:
                for p in context.processes:   # the processes this call started, by their handle
                    p.terminate()
                raise TimeoutError(f"the ranks did not finish in {JOIN_TIMEOUT_S * len(going)} s")
    except Exception as error:
        said = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        for run, job in going:
            if not (job.out_dir / "rank0.json").exists():
                run.status, run.reason = "error", said
    finally:
        rendezvous.unlink(missing_ok=True)
    for run, job in going:
        if run.status == "ok":
            _collect(run, job.out_dir)
    return runs


def _collect(run: CPRun, out: Path) -> None:
    written = [json.loads((out / f"rank{r}.json").read_text()) for r in range(run.workload.gpus)]
    error = next((d["error"] for d in written if "error" in d and d["error"] != "another rank failed"), None) or \
        next((d["error"] for d in written if "error" in d), None)
    if error:
        run.status, run.reason = "error", error
        return
    for data in written:  # a trace is named from the folder above the job's (a recording's context_parallel/)
        timeline = rank_timeline(load_trace(out / data["trace_file"]))
        run.ranks.append(RankResult(data["rank"], data["step_ms"], data["peak_extra_bytes"], timeline,
                                    f"{out.name}/{data['trace_file']}"))
    run.accuracy = Accuracy(**written[0]["accuracy"])
    run.alone_accuracy = Accuracy(**written[0]["alone_accuracy"])
    run.device_name = written[0]["device_name"]


def balance_settings(workload: Workload) -> tuple[bool, ...]:
    """With and without the load balancer under a causal mask; without only otherwise (PyTorch refuses it)."""
    return (True, False) if workload.causal else (False,)


def jobs_for(variants, workload: Workload, out_dir: str | Path) -> list[Job]:
    """Each variant on `workload` with and without the load balancer (`balance_settings`), each in its own folder."""
    return [Job(v, workload, b, Path(out_dir) / f"{v}{workload.tag()}_{'balanced' if b else 'unbalanced'}")
            for v in variants for b in balance_settings(workload)]


# -- recordings: <recording>/context_parallel/runs.json, each job's folder (its ranks' traces) beside it ------------
def save(runs: list[CPRun], folder: str | Path) -> Path:
    """Add `runs` to a recording's context-parallel runs, replacing any of the same variant, workload and balance."""
    path = folder_of(folder) / "runs.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = [r for r in load(folder) if not any(_same(r, n) for n in runs)]
    path.write_text(json.dumps([r.to_dict() for r in kept + list(runs)], indent=1))
    return path


def load(folder: str | Path) -> list[CPRun]:
    path = folder_of(folder) / "runs.json"
    return [CPRun.from_dict(d) for d in json.loads(path.read_text())] if path.exists() else []


def _same(a: CPRun, b: CPRun) -> bool:
    return (a.variant, a.workload.problem(), a.balanced) == (b.variant, b.workload.problem(), b.balanced)


def find(runs: list[CPRun], variant: str, workload: Workload) -> list[CPRun]:
    """The runs of `variant` on `workload` (device and seed aside), balanced first."""
    return sorted((r for r in runs if r.variant == variant and r.workload.problem() == workload.problem()),
                  key=lambda r: not r.balanced)


def folder_of(recording: str | Path) -> Path:
    """Where a recording keeps its context-parallel runs (the jobs' folders go inside)."""
    return Path(recording) / "context_parallel"


def trace_of(recording: str | Path, rank: RankResult) -> dict[str, Any]:
    return load_trace(folder_of(recording) / rank.trace_file)


__all__ = ["CPRun", "Job", "RankResult", "RankTimeline", "balance_settings", "causal_pairs", "jobs_for",
           "kv_rotation_bytes", "measure", "rank_timeline", "unsupported", "visible_refusal"]

