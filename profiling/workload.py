"""The workload: one validated attention problem, its inputs, its FLOPs and its memory needs.

Everything here is checked before a single tensor is allocated, so a bad request costs
nothing and says exactly which field was wrong.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import torch

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_DTYPE_ALIASES = {
    "float32": "fp32", "float": "fp32", "torch.float32": "fp32",
    "float16": "fp16", "half": "fp16", "torch.float16": "fp16",
    "bfloat16": "bf16", "torch.bfloat16": "bf16",
}
# Inclusive limits per field; beyond them a request is a typo, not a workload.
LIMITS = {"batch": (1, 1024), "heads": (1, 1024), "seq_len": (1, 131072), "head_dim": (1, 512)}


REFERENCE_CHUNK_BYTES = 256 * 2**20  # the fp64 accuracy check keeps its scores in flight under this

class WorkloadError(ValueError):
    """A request that cannot be run, naming the field, the value and the limit."""

    def __init__(self, field: str, value, limit: str):
        self.field, self.value, self.limit = field, value, limit
        super().__init__(f"{field}={shown(value)} is not allowed: {limit}")

    def __reduce__(self):  # ZeroGPU pickles errors out of its worker: keep the fields
        return WorkloadError, (self.field, self.value, self.limit)


_SHOWN_CHARS = 60


def shown(value) -> str:
    """A client's value as an error quotes it: its repr, cut short (a number past Python's 4,300-digit
    limit cannot even be printed, and a megabyte string has no place in a message)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"<a whole number of about {int(value.bit_length() * 0.30103) + 1} digits>"
    if isinstance(value, str) and len(value) > _SHOWN_CHARS:
        return f"{value[:_SHOWN_CHARS]!r}… ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]}… ({type(value).__name__})"


def whole_number(field: str, value, low: int, high: int) -> int:
    """`value` if it is an int (not a bool, a float, a numeric string) within [low, high]; else WorkloadError.
    Nothing is rounded or converted: 128.7, 3.0, True and "64" are refused, not read as 128, 3, 1 and 64."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkloadError(field, value, f"must be a whole number between {low} and {high}")
    if not low <= value <= high:
        raise WorkloadError(field, value, f"must be between {low} and {high}")
    return value


def whole_number_from_text(field: str, text: str, low: int, high: int) -> int:
    """A whole number written as text (a link's query, a command line), within [low, high].
    Only an optional sign and digits; a long run of digits is refused before int() sees it."""
    digits = text.strip().removeprefix("-").removeprefix("+") if isinstance(text, str) else ""
    if not (digits.isascii() and digits.isdigit()):
        raise WorkloadError(field, text, f"must be a whole number between {low} and {high}")
    if len(digits.lstrip("0")) > len(str(high)):
        raise WorkloadError(field, text, f"must be between {low} and {high}")
    return whole_number(field, int(text), low, high)


def choice(field: str, value, choices) -> str:
    """`value` if it is one of `choices` (compared as the same type: 3.0 is not "3"); else WorkloadError."""
    choices = list(choices)
    if not any(type(value) is type(c) and value == c for c in choices):
        raise WorkloadError(field, value, f"choose one of {', '.join(map(str, choices))}")
    return value


def canonical_dtype(name: str) -> str:
    if not isinstance(name, str):
        raise WorkloadError("dtype", name, f"choose one of {', '.join(DTYPES)}")
    key = name.strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise WorkloadError("dtype", name, f"choose one of {', '.join(DTYPES)}")
    return key


@dataclass(frozen=True)
class Workload:
    batch: int = 8          # B
    heads: int = 16         # H
    seq_len: int = 1024     # S (queries and keys alike)
    head_dim: int = 64      # D
    dtype: str = "bf16"     # fp32 | fp16 | bf16
    causal: bool = True
    rank: int = 4           # 4: [B, H, S, D]; 3: [B*H, S, D]
    device: str = "cuda"    # cuda | cpu
    seed: int = 0

    def __post_init__(self):
        for field, (low, high) in LIMITS.items():
            whole_number(field, getattr(self, field), low, high)
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        if isinstance(self.rank, bool) or self.rank not in (3, 4) or not isinstance(self.rank, int):
            raise WorkloadError("rank", self.rank, "must be 3 ([B*H, S, D]) or 4 ([B, H, S, D])")
        if not isinstance(self.device, str) or self.device not in ("cuda", "cpu"):
            raise WorkloadError("device", self.device, "must be 'cuda' or 'cpu'")
        if not isinstance(self.causal, bool):
            raise WorkloadError("causal", self.causal, "must be true or false")
        whole_number("seed", self.seed, 0, 2**63 - 1)

    @classmethod
    def blog(cls, **changes) -> "Workload":
        """The blog post's workload: B=8, H=16, S=1024, D=64, bf16, causal, rank 4."""
        return dataclasses.replace(cls(), **changes)

    @classmethod
    def cpu_default(cls, **changes) -> "Workload":
        """Small enough that every variant runs in well under a second on a laptop CPU."""
        return dataclasses.replace(cls(batch=1, heads=8, seq_len=512, dtype="fp32", device="cpu"), **changes)

    def replace(self, **changes) -> "Workload":
        return dataclasses.replace(self, **changes)

    # -- shapes and sizes ---------------------------------------------------------------
    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def shape(self) -> tuple[int, ...]:
        if self.rank == 4:
            return (self.batch, self.heads, self.seq_len, self.head_dim)
        return (self.batch * self.heads, self.seq_len, self.head_dim)

    @property
    def element_bytes(self) -> int:
        return torch.finfo(self.torch_dtype).bits // 8

    @property
    def flops(self) -> float:
        """4·B·H·S²·D (two matmuls, 2 FLOPs a multiply-add), halved when causal."""
        full = 4.0 * self.batch * self.heads * self.seq_len**2 * self.head_dim
        return full / 2 if self.causal else full

    @property
    def input_bytes(self) -> int:
        """q, k, v and the output."""
        return 4 * self.batch * self.heads * self.seq_len * self.head_dim * self.element_bytes

    def scores_bytes(self, element_bytes: int | None = None) -> int:
        """One B·H·S×S score matrix."""
        return self.batch * self.heads * self.seq_len**2 * (element_bytes or self.element_bytes)

    def label(self) -> str:
        shape = "x".join(map(str, self.shape))
        return f"{shape} {self.dtype}{' causal' if self.causal else ''} (rank {self.rank}, {self.device})"

    def words(self) -> str:
        """The problem as a sentence names it: 'B=8, H=16, S=1024, D=64, bf16, causal' (rank 3 said, 4 not;
        no device: a recording's GPU and a live CPU hold the same problem)."""
        rank = ", rank 3" if self.rank == 3 else ""
        return (f"B={self.batch}, H={self.heads}, S={self.seq_len}, D={self.head_dim}, {self.dtype}, "
                f"{'causal' if self.causal else 'not causal'}{rank}")

    # -- inputs ---------------------------------------------------------------------------
    def make_inputs(self) -> "Inputs":
        """Seeded q, k, v (never zeros: zeros hide bugs and run faster) and the mask, built once."""
        generator = torch.Generator(device=self.device).manual_seed(self.seed)
        q, k, v = (torch.randn(self.shape, generator=generator, device=self.device, dtype=self.torch_dtype)
                   for _ in range(3))
        mask = None
        if self.causal:  # True above the diagonal = a future key, masked out (as in the blog)
            mask = torch.triu(torch.ones(self.seq_len, self.seq_len, dtype=torch.bool, device=self.device), 1)
        return Inputs(self, q, k, v, mask)


@dataclass
class Inputs:
    workload: Workload
    q: torch.Tensor  # [B, H, S, D] or [B*H, S, D]
    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor | None  # [S, S] bool, True where attention is forbidden

    @property
    def scale(self) -> float:
        return self.workload.head_dim ** -0.5


# -- memory: everything a measurement allocates, bounded before anything is -------------------------
def forward_bytes(workload: Workload, scratch_bytes: int) -> int:
    """One forward's peak beyond q, k, v: its output and the variant's scratch (`Variant.scratch_bytes`)."""
    return workload.input_bytes // 4 + scratch_bytes


def _attention_slice_bytes(workload: Workload, element_bytes: int, rows: int) -> int:
    """Peak temporaries of `measurement._chunked_attention` in a dtype of `element_bytes` over `rows` query rows:
    per slice of B·H heads, the scores and their scaled copy (then scores and softmax) live together, rows×S
    each, beside the slice's q rows, k, v, a contiguous copy of kᵀ and the product with v."""
    w = workload
    heads = min(w.batch * w.heads, max(1, REFERENCE_CHUNK_BYTES // (rows * w.seq_len * element_bytes)))
    return heads * element_bytes * (2 * rows * w.seq_len + 4 * w.seq_len * w.head_dim + 2 * rows * w.head_dim)


def accuracy_rows(seq_len: int) -> int:
    """How many query rows the fp64 accuracy check compares: all while one row-block of fp64 scores (rows×S)
    stays under REFERENCE_CHUNK_BYTES, else that many (at least 64)."""
    return min(seq_len, max(64, REFERENCE_CHUNK_BYTES // (seq_len * 8)))


def measure_bytes(workload: Workload, scratch_bytes: int, *, inputs_ready: bool, reference_ready: bool) -> int:
    """Bytes `measurement.measure` may add to what is resident now, at its peak: the inputs and mask (unless
    ready), the first call's output (kept for the accuracy check), the fp64 reference rows (unless ready); and
    on top, the largest of its phases: a forward (output + scratch), the reference's slices, the same check in
    the workload's dtype, and the accuracy differences in fp64, over `accuracy_rows` query rows.
    Plus 5%, and what the allocator holds beyond live tensors."""
    w = workload
    checked_rows = accuracy_rows(w.seq_len)
    n = w.batch * w.heads * w.seq_len * w.head_dim        # elements of q, k, v or an output
    r = w.batch * w.heads * checked_rows * w.head_dim     # elements of the rows checked
    out = n * w.element_bytes
    fp64_diffs = r * w.element_bytes + 3 * 8 * r           # the rows picked from out, .double(), difference, abs()
    resident = out
    phases = [forward_bytes(w, scratch_bytes), fp64_diffs]
    if not inputs_ready:
        resident += 3 * out + (w.seq_len**2 if w.causal else 0)  # q, k, v and the bool mask
    if not reference_ready:
        resident += 8 * r                                  # the fp64 reference rows, kept for B
        phases.append(_attention_slice_bytes(w, 8, checked_rows))
        naive = r * w.element_bytes + _attention_slice_bytes(w, w.element_bytes, checked_rows)
        phases.append(max(naive, r * w.element_bytes + fp64_diffs))
    return int((resident + max(phases)) * 1.05) + allocator_slack_bytes(w.device)


def allocator_slack_bytes(device: str) -> int:
    """Memory the allocator holds beyond live tensors. On CPU, glibc keeps freed blocks under its mmap
    threshold (at most 32 MiB) in each thread's arena until 64 MiB are free at its top: the process was seen
    to grow 50-90 MiB past the profiler's live count (a 16-bit GEMM's fp32 buffers, masks). On a GPU the
    caching allocator rounds each block up; a few MiB."""
    return 64 * 2**20 * (torch.get_num_threads() + 1) if device == "cpu" else 16 * 2**20


def memory_budget_bytes(device: str) -> int:
    """What may be allocated now: 90% of free device memory (counting blocks PyTorch's caching allocator
    holds but no tensor uses: they are ours to reuse), or 80% of available RAM on CPU."""
    if device == "cuda":
        free, _total = torch.cuda.mem_get_info()
        cached = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
        return int((free + cached) * 0.9)
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        return int(int(fields["MemAvailable"].split()[0]) * 1024 * 0.8)
    except (OSError, KeyError, ValueError):
        return int(os.environ.get("ATTENTION_PROFILER_CPU_BUDGET_BYTES", 8 * 2**30))


def check_fits(workload: Workload, estimated_bytes: int, budget_bytes: int, what: str) -> None:
    """Refuse before allocating: a workload whose estimate is over budget."""
    if estimated_bytes > budget_bytes:
        raise WorkloadError(
            "seq_len", workload.seq_len,
            f"{what} needs about {estimated_bytes / 2**30:.1f} GiB but only "
            f"{budget_bytes / 2**30:.1f} GiB is free on {workload.device}; lower seq_len, batch or heads")


# -- time: what a live comparison holds the machine for, refused up front past a budget --------------
# A live run holds the only measurement slot (and on ZeroGPU the GPU's time), so its wall time is
# predicted before it starts: per forward, GEMM FLOPs at a rate by dtype plus the elementwise passes over
# the S×S scores (a materialising variant's real cost at small head dims), times the calls `measure` makes;
# plus the fp64 reference and the naive check once per workload.
LIVE_BUDGET_S = {"cpu": 60.0, "cuda": 90.0}  # cuda: ZeroGPU grants the GPU function 120 s in all
_L4_BF16_TFLOPS = 121.0  # the datasheet peak of the GPU the cuda figures below were set for


@dataclass(frozen=True)
class DeviceCost:
    gemm_flops_per_s: dict[str, float]   # the GEMMs of a materialising forward (naive), by dtype
    fused_flops_per_s: float             # a fused kernel (flash, efficient, cuDNN, flex): FLOPs halved when causal
    fused_score_s: float                 # its per-score-element cost (blocks of S×S in registers): rules at small D
    score_s: dict[str, float]            # seconds per S×S score element: all of one forward's elementwise passes
    math_score_s: float                  # the same for SDPA's math path (fp32 inside, more passes)
    fp64_flops_per_s: float              # the accuracy reference
    fp64_score_s: float
    per_measure_s: float                 # profiler session, trace export and parse, accuracy differences
    per_comparison_s: float              # first-call costs of a process (CUPTI's start on a GPU)
    compile_s: float                     # flex's first torch.compile in a process (a later shape's takes less)


# CPU: measured on this project's 2-core AMD EPYC (shared with other work), torch 2.14; bench/calibrate_cost.py
# prints measured against predicted. fp32 GEMMs ran at 10-40 GFLOP/s, bf16 and fp16 ones at 1-3 (no native
# 16-bit matmul on this CPU: 5-20x slower than fp32); one naive forward's elementwise passes cost 15-40 ns per
# score element in fp32 and 30-95 in 16-bit, SDPA math's 30-75 whatever the dtype (it computes in fp32); CPU
# flash 6-20 GFLOP/s, slower per element at small head dims; the measurement makes ~10 calls of a slow forward.
# flex's first compile in a process took 30 s with inductor's disk cache cold, 20 s with it warm, ~35 s under
# load (an earlier report), each new shape after it 8-9 s: compile_s is that 35 (it was 30, under what was seen).
# Rates sit between the middle and the slow end of what was seen, so the prediction errs long: whole
# comparisons took 0.2-0.6x the prediction on a quiet machine, up to ~1.1x while other jobs shared its cores.
# GPU: the figures of an L4-class GPU (the slowest the Space is suggested on), scaled to this GPU by datasheet
# peaks (_device_cost), with the GPU's first profiler session (~4 s, DESIGN.md) and flex's first compile (7.4 s
# on the H200) on top. The fused rate is half the slowest fused kernel measured on the H200 (efficient, 132-181
# TFLOP/s at S >= 8192 in the recorded sweeps), scaled back to the L4: 8e12 (it was 5e12, 5x under the H200's);
# its per-score cost is 0.01e-9 (it was 0.02e-9, which alone priced efficient at 8x16x32768x64 above what it
# measured). The rest are set, not measured, and err long.
COSTS = {
    "cpu": DeviceCost(gemm_flops_per_s={"fp32": 25e9, "bf16": 1.5e9, "fp16": 1.5e9}, fused_flops_per_s=15e9,
                      fused_score_s=15e-9, score_s={"fp32": 30e-9, "bf16": 60e-9, "fp16": 80e-9}, math_score_s=60e-9,
                      fp64_flops_per_s=5e9, fp64_score_s=40e-9, per_measure_s=0.3, per_comparison_s=1.0,
                      compile_s=35.0),
    "cuda": DeviceCost(gemm_flops_per_s={"fp32": 10e12, "bf16": 50e12, "fp16": 50e12}, fused_flops_per_s=8e12,
                       fused_score_s=0.01e-9, score_s={"fp32": 0.3e-9, "bf16": 0.15e-9, "fp16": 0.15e-9},
                       math_score_s=0.4e-9, fp64_flops_per_s=0.4e12, fp64_score_s=1e-9, per_measure_s=1.0,
                       per_comparison_s=6.0, compile_s=15.0),
}
# What `measure` calls: the first call and 2 warm-up calls, 4 under the profiler (which slows them, ~1.2x),
# and timed ones: on a CPU at least 20 interleaved rounds, more while the spread is wide (the pair's 1 s
# budget, half each); on a GPU at least 8 event samples, and the host figures' back-to-back and parked
# calls (20 each at least); a GPU forward of a millisecond or more: 2 probes, 8 samples and 4 host rounds of
# 1 settling, 2 back-to-back and 2 parked calls (measurement.LONG_CALL_S).
_UNTIMED_CALLS = 3 + 4 * 1.2
_MIN_TIMED_CALLS = {"cpu": 20, "cuda": 48}
_LONG_CALL_S, _LONG_TIMED_CALLS = 1e-3, {"cpu": 20, "cuda": 30}
_TIMING_S = {"cpu": 0.5, "cuda": 0.1}


def _forward_seconds(w: Workload, variant, cost: DeviceCost) -> float:
    """One forward of `variant` (a Variant) on `w`: fused, SDPA's math path, or naive ops in the dtype."""
    full_flops = 4.0 * w.batch * w.heads * w.seq_len**2 * w.head_dim
    score_elements = w.batch * w.heads * w.seq_len**2
    # fused: never writes S×S (unless its scratch says it takes the math path: SDPA auto on rank 3 before 2.14)
    if variant.fused and variant.scratch_bytes(w) < w.scores_bytes(element_bytes=4):
        return w.flops / cost.fused_flops_per_s + score_elements * (w.flops / full_flops) * cost.fused_score_s
    if variant.sdpa_backend is not None:  # SDPA's math path: upcasts to fp32, more passes
        return full_flops / cost.gemm_flops_per_s["fp32"] + score_elements * cost.math_score_s
    return full_flops / cost.gemm_flops_per_s[w.dtype] + score_elements * cost.score_s[w.dtype]


def _measure_seconds(w: Workload, variant, cost: DeviceCost) -> float:
    forward = _forward_seconds(w, variant, cost)
    compile_s = cost.compile_s if variant.compiled else 0.0
    calls = (_MIN_TIMED_CALLS if forward < _LONG_CALL_S else _LONG_TIMED_CALLS)[w.device]
    timed = max(calls * forward, _TIMING_S[w.device])
    return compile_s + _UNTIMED_CALLS * forward + timed + cost.per_measure_s


_last_compile_s: dict[str, float] = {}  # device -> the last first call in this process that compiled, seconds


def note_compile_s(device: str, seconds: float) -> None:
    """A compiled variant's first call compiled, in `seconds` (measurement notes it): the estimate from now on."""
    _last_compile_s[device] = seconds


def compile_estimate_s(device: str) -> tuple[float, str]:
    """How long a compiled variant's first call on `device` should take, and on what basis: the last compile
    measured in this process, else the cost model's figure (COSTS)."""
    if device in _last_compile_s:
        seconds = _last_compile_s[device]
        return seconds, f"as the last compile here took {seconds:.0f} s"
    return COSTS[device].compile_s, "from the cost model for " + ("this CPU" if device == "cpu" else "a GPU")


def _reference_seconds(w: Workload, cost: DeviceCost) -> float:
    """The fp64 reference and the naive computation in the workload's dtype (`measurement._accuracy`)."""
    rows = accuracy_rows(w.seq_len)                          # query rows checked, against all S keys
    full_flops = 4.0 * w.batch * w.heads * rows * w.seq_len * w.head_dim
    score_elements = w.batch * w.heads * rows * w.seq_len
    fp64 = full_flops / cost.fp64_flops_per_s + score_elements * cost.fp64_score_s
    naive = full_flops / cost.gemm_flops_per_s[w.dtype] + score_elements * cost.score_s[w.dtype]
    return fp64 + naive


def _device_cost(device: str, env) -> DeviceCost:
    """The cost model of `device`; a GPU's rates scaled from the L4-class figures by its datasheet bf16 peak
    over the L4's (an H200 is ~8x), its per-element costs likewise. A GPU of unknown peak keeps the L4's."""
    cost = COSTS[device]
    peak = ((env.peak_tflops or {}).get("bf16") if env is not None else None) if device == "cuda" else None
    if not peak:
        return cost
    k = peak / _L4_BF16_TFLOPS
    return dataclasses.replace(
        cost, gemm_flops_per_s={d: r * k for d, r in cost.gemm_flops_per_s.items()},
        fused_flops_per_s=cost.fused_flops_per_s * k, fused_score_s=cost.fused_score_s / k,
        score_s={d: t / k for d, t in cost.score_s.items()}, math_score_s=cost.math_score_s / k,
        fp64_flops_per_s=cost.fp64_flops_per_s * k, fp64_score_s=cost.fp64_score_s / k)


def predicted_seconds(workload: Workload, variants, *, reference_ready: bool = False) -> float:
    """Wall time a live measurement of `variants` (Variants: anything with `fused`, `compiled`, `sdpa_backend`,
    `scratch_bytes` and `supports`) on `workload` should take on this device: warm-up, timing and profiled
    window of each, plus the reference once (unless already computed). A variant that cannot run here costs
    nothing: it is refused before its first call."""
    from .environment import detect

    env = detect(workload.device) if workload.device == "cpu" or torch.cuda.is_available() else None
    cost = _device_cost(workload.device, env)
    total = 0.0 if reference_ready else _reference_seconds(workload, cost) + cost.per_comparison_s
    for variant in variants:
        if env is None or variant.supports(workload, env) is None:
            total += _measure_seconds(workload, variant, cost)
    return total


def check_time_budget(workload: Workload, variants, *, reference_ready: bool = False,
                      budget_s: float | None = None) -> None:
    """Refuse, before anything runs, a measurement of `variants` (Variants) predicted to hold the machine past
    `budget_s` (by default the budget of a live run on this device)."""
    variants = list(variants)
    budget = LIVE_BUDGET_S[workload.device] if budget_s is None else budget_s
    seconds = predicted_seconds(workload, variants, reference_ready=reference_ready)
    if seconds > budget:
        names = " vs ".join(v.key for v in variants)
        slow = (f"; {workload.dtype} arithmetic runs many times slower than fp32 on this CPU"
                if workload.device == "cpu" and workload.dtype != "fp32" else "")
        whose = "a live run may hold the machine" if budget_s is None else "left of this request's budget"
        raise WorkloadError(
            "seq_len", workload.seq_len,
            f"{names} at {workload.label()} would take about {seconds:.0f} s{slow}, over the {budget:.0f} s {whose}; "
            "lower seq_len, batch or heads" + (", or choose fp32" if slow else ""))
