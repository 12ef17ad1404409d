"""Attention written out by hand, op by op, as in the blog: matmul, mul, masked_fill, softmax, matmul."""
from __future__ import annotations

import torch

from profiling.workload import Inputs, Workload

from .base import Variant


def _kv(x: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """k and v with a head per query head: grouped-query attention written by hand copies them (repeat_interleave)."""
    g = x.workload.groups
    return (x.k, x.v) if g == 1 else (x.k.repeat_interleave(g, dim=-3), x.v.repeat_interleave(g, dim=-3))


def naive_attention(x: Inputs) -> torch.Tensor:
    k, v = _kv(x)
    scores = x.q @ k.transpose(-2, -1)                          # [B, H, S, S]
    scores = scores * x.scale
    if x.bias is not None:
        scores = scores + x.bias                                # the bias holds −inf where a key is masked
    elif x.hidden is not None:
        scores = scores.masked_fill(x.hidden, float("-inf"))    # out of place: a fresh S×S tensor
    return torch.softmax(scores, dim=-1) @ v                    # [B, H, S, D]


def naive_inplace_attention(x: Inputs) -> torch.Tensor:
    k, v = _kv(x)
    scores = x.q @ k.transpose(-2, -1)                          # [B, H, S, S]
    scores = scores * x.scale
    if x.bias is not None:
        scores += x.bias
    elif x.hidden is not None:
        scores.masked_fill_(x.hidden, float("-inf"))            # in place: writes into the scores
    return torch.softmax(scores, dim=-1) @ v


def _scratch(w: Workload) -> int:
    """Scores and their scaled copy live together, then the softmax beside the scores; a training step keeps the
    softmax for the backward, which makes the S×S gradients of the softmax and of the scores beside it; grouped-query
    attention copies k and v to every head (and back, summing the gradients)."""
    expanded = 2 * w.batch * w.heads * w.seq_len * w.head_dim * w.element_bytes if w.groups > 1 else 0
    if w.device == "cpu" and w.element_bytes == 2:  # a 16-bit GEMM on a CPU works through fp32 buffers
        expanded += 2 * w.output_bytes
    if not w.training:
        return 2 * w.scores_bytes() + expanded
    return 4 * w.scores_bytes() + 2 * expanded


NAIVE = Variant(
    key="naive",
    label="Naive (masked_fill)",
    forward=naive_attention,
    scratch_bytes=_scratch,
)

NAIVE_INPLACE = Variant(
    key="naive_inplace",
    label="Naive (in-place masked_fill_)",
    forward=naive_inplace_attention,
    scratch_bytes=_scratch,
)
