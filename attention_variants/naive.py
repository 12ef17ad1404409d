"""Attention written out by hand, op by op, as in the blog: matmul, mul, masked_fill, softmax, matmul."""
from __future__ import annotations

import torch

from profiling.workload import Inputs, Workload

from .base import Variant


def naive_attention(x: Inputs) -> torch.Tensor:
    scores = x.q @ x.k.transpose(-2, -1)                        # [B, H, S, S]
    scores = scores * x.scale
    if x.mask is not None:
        scores = scores.masked_fill(x.mask, float("-inf"))      # out of place: a fresh S×S tensor
    return torch.softmax(scores, dim=-1) @ x.v                  # [B, H, S, D]


@torch.no_grad()
def naive_inplace_attention(x: Inputs) -> torch.Tensor:
    scores = x.q @ x.k.transpose(-2, -1)                        # [B, H, S, S]
    scores = scores * x.scale
    if x.mask is not None:
        scores.masked_fill_(x.mask, float("-inf"))              # in place: writes into the scores
    return torch.softmax(scores, dim=-1) @ x.v


def _two_score_matrices(w: Workload) -> int:
    # scores and its scaled copy live together; softmax's output replaces the first
    return 2 * w.scores_bytes()


NAIVE = Variant(
    key="naive",
    label="Naive (masked_fill)",
    forward=naive_attention,
    scratch_bytes=_two_score_matrices,
)

NAIVE_INPLACE = Variant(
    key="naive_inplace",
    label="Naive (in-place masked_fill_)",
    forward=naive_inplace_attention,
    scratch_bytes=_two_score_matrices,
)
