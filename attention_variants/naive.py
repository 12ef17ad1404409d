"""Attention written out by hand, op by op, as in the blog: matmul, mul, masked_fill, softmax, matmul."""
from __future__ import annotations

from typing import TYPE_CHECKING

from profiling.cpu_paths import gemm_workspace
from profiling.environment import Environment
from profiling.scores import every, kept, pipeline
from profiling.workload import Inputs, Workload

from .base import Variant
from .guesses import Expected, GEMM_PV, GEMM_QK, GuessRow, MASK, NAIVE_BACKWARD, SCALE, SOFTMAX
from .sdpa import contiguous_only

if TYPE_CHECKING:  # torch, imported where a variant runs: its file is read (keys, guesses, traits) without it
    import torch

# Written by hand, attention reads k and v as tensors: a paged cache would be gathered into a contiguous copy first, a
# call of its own that is not this one
PAGED = ("hand-written attention reads k and v as [B, Hkv, S, D] tensors: it has no page table (leave page_size "
         "empty)")


def _kv(x: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """k and v with a head per query head: grouped-query attention written by hand copies them (repeat_interleave)."""
    g = x.workload.groups
    return (x.k, x.v) if g == 1 else (x.k.repeat_interleave(g, dim=-3), x.v.repeat_interleave(g, dim=-3))


def naive_attention(x: Inputs) -> torch.Tensor:
    import torch
    k, v = _kv(x)
    scores = pipeline(x.q, k, x)  # [B, H, S, S]: q·kᵀ, scaled, transformed, + the bias or masked_fill: each fresh
    return torch.softmax(scores, dim=-1) @ v                    # [B, H, S, D]


def naive_inplace_attention(x: Inputs) -> torch.Tensor:
    import torch
    k, v = _kv(x)
    scores = pipeline(x.q, k, x, in_place=True)  # [B, H, S, S]: q·kᵀ, scaled, then += the bias or masked_fill_
    return torch.softmax(scores, dim=-1) @ v


def _scratch(w: Workload, env: Environment) -> int:
    """Memory beyond q, k, v and the output. The forward holds the scores and their scaled copy (q·kᵀ, then its
    masked copy), then the softmax beside the scores while `p @ v` runs: two Lq×S score matrices. A training step
    keeps the softmax for the backward, which makes the gradients of the softmax and of the scores beside it (the
    H200 recorded 3.9 score matrices: 4 is the bound). Grouped-query attention copies k and v to every head. On a CPU
    a 16-bit product may add its workspace (`cpu_paths.gemm_workspace`: none, an fp32 copy of its output, or
    per-thread blocks, by the CPU's instructions) at q·kᵀ and at p·v. A training step keeps beside them what the
    score transforms keep for their backward (`scores.kept`)."""
    import torch
    scores = w.scores_bytes()
    expanded = w.headed_kv_elements * w.element_bytes if w.groups > 1 else 0
    qk = pv = 0
    if w.device == "cpu":
        threads, bh = env.cpu_threads or torch.get_num_threads(), w.batch * w.heads
        qk = gemm_workspace(w.dtype, env.cpu_features, bh, w.queries, w.head_dim, w.seq_len, threads)
        pv = gemm_workspace(w.dtype, env.cpu_features, bh, w.queries, w.seq_len, w.head_dim, threads)
    forward = max(scores + qk, 2 * scores + pv)
    if not w.training:
        return forward + expanded
    return max(forward, 4 * scores, 2 * scores + qk, 2 * scores + pv) + len(kept(w)) * scores + 2 * expanded


# torch's matmul has no fp8 kernel ("bmm" not implemented for 'Float8_e4m3fn'; torch._scaled_mm is a scaled GEMM, not
# attention written as its users write it)
NO_FP8 = "hand-written attention has no fp8 path: torch's matmul takes no float8 inputs"

NAIVE = Variant(
    key="naive",
    label="Naive (masked_fill)",
    forward=naive_attention,
    scratch_bytes=_scratch,
    check=contiguous_only(reason=PAGED),
    score_mods=every, no_fp8=NO_FP8,
    guess=GuessRow("{count} ops, so {count} {units}, one per op", speed_rank=6, host_rank=4, kernels=(
        GEMM_QK, SCALE, Expected(MASK, "elementwise", "aten::masked_fill"), SOFTMAX, GEMM_PV),
        backward=NAIVE_BACKWARD),
)

NAIVE_INPLACE = Variant(
    key="naive_inplace",
    label="Naive (in-place masked_fill_)",
    forward=naive_inplace_attention,
    scratch_bytes=_scratch,
    check=contiguous_only(reason=PAGED),
    in_place=True, score_mods=every, no_fp8=NO_FP8,
    guess=GuessRow("the same {count} {units}: in place only saves memory",
        speed_rank=5, host_rank=4, kernels=(
        GEMM_QK, SCALE, Expected(MASK, "elementwise", "aten::masked_fill_"), SOFTMAX, GEMM_PV),
        backward=NAIVE_BACKWARD),
)

VARIANTS = (NAIVE, NAIVE_INPLACE,)  # in the table's order
