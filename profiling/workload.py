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
# A CPU forward above this many FLOPs takes minutes once warm-up and repeats are counted.
CPU_MAX_GFLOP_PER_FORWARD = 40.0


class WorkloadError(ValueError):
    """A request that cannot be run, naming the field, the value and the limit."""

    def __init__(self, field: str, value, limit: str):
        self.field, self.value, self.limit = field, value, limit
        super().__init__(f"{field}={value!r} is not allowed: {limit}")

    def __reduce__(self):  # ZeroGPU pickles errors out of its worker: keep the fields
        return WorkloadError, (self.field, self.value, self.limit)


def canonical_dtype(name: str) -> str:
    key = str(name).strip().lower()
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
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                raise WorkloadError(field, value, "must be a whole number")
            if not low <= value <= high:
                raise WorkloadError(field, value, f"must be between {low} and {high}")
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        if self.rank not in (3, 4):
            raise WorkloadError("rank", self.rank, "must be 3 ([B*H, S, D]) or 4 ([B, H, S, D])")
        if self.device not in ("cuda", "cpu"):
            raise WorkloadError("device", self.device, "must be 'cuda' or 'cpu'")
        if not isinstance(self.causal, bool):
            raise WorkloadError("causal", self.causal, "must be true or false")

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


def memory_budget_bytes(device: str) -> int:
    """What may be allocated now: 90% of free device memory, or of available RAM on CPU."""
    if device == "cuda":
        free, _total = torch.cuda.mem_get_info()
        return int(free * 0.9)
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        return int(int(fields["MemAvailable"].split()[0]) * 1024 * 0.8)
    except (OSError, KeyError, ValueError):
        return int(os.environ.get("ATTENTION_PROFILER_CPU_BUDGET_BYTES", 8 * 2**30))


def check_fits(workload: Workload, estimated_bytes: int, budget_bytes: int, what: str) -> None:
    """Refuse before allocating: a workload whose estimate is over budget, or too slow on CPU."""
    if estimated_bytes > budget_bytes:
        raise WorkloadError(
            "seq_len", workload.seq_len,
            f"{what} needs about {estimated_bytes / 2**30:.1f} GiB but only "
            f"{budget_bytes / 2**30:.1f} GiB is free on {workload.device}; lower seq_len, batch or heads")
    gflop = workload.flops / 1e9
    if workload.device == "cpu" and gflop > CPU_MAX_GFLOP_PER_FORWARD:
        raise WorkloadError(
            "seq_len", workload.seq_len,
            f"one forward is {gflop:.0f} GFLOP, over the CPU limit of {CPU_MAX_GFLOP_PER_FORWARD:.0f} GFLOP; "
            "lower seq_len, batch or heads, or run on a GPU")
