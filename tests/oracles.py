"""Independent answers the tests hold the app against: plain fp64 attention written here (not the app's reference),
its gradients by autograd (not the app's textbook backward), and the headline's figures re-derived from the runs'
own samples by a route of their own."""
from __future__ import annotations

import statistics

import torch

from profiling.workload import Workload


def _scores_mask(w: Workload) -> tuple[torch.Tensor, torch.Tensor]:
    """(allowed [S, S] bool, additive [S, S] fp64) for the workload's mask, built here position by position."""
    s = w.seq_len
    q = torch.arange(s)[:, None].expand(s, s)
    k = torch.arange(s)[None, :].expand(s, s)
    allowed = (k <= q) if w.causal else torch.ones(s, s, dtype=torch.bool)
    if w.mask == "window":
        allowed = allowed & (q - k < w.window)
    additive = torch.zeros(s, s, dtype=torch.float64)
    if w.mask == "bias":  # the app's distance penalty, rounded to the inputs' dtype as the app stores it
        additive = (-(q - k).abs().double() / s).to(w.torch_dtype).double()
    return allowed, additive


def attention_fp64(workload: Workload, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q·kᵀ/√D + mask)·v in float64, head by head, each query head reading its kv head: [B*H, S, D]."""
    w = workload
    q = q.double().cpu().reshape(w.batch, w.heads, w.seq_len, w.head_dim)
    k, v = (t.double().cpu().reshape(w.batch, w.kv_heads or w.heads, w.seq_len, w.head_dim) for t in (k, v))
    allowed, additive = _scores_mask(w)
    rows = []
    for b in range(w.batch):
        for h in range(w.heads):
            kv = h // w.groups
            scores = q[b, h] @ k[b, kv].T / w.head_dim ** 0.5 + additive
            scores = scores.masked_fill(~allowed, float("-inf"))
            rows.append(torch.softmax(scores, dim=-1) @ v[b, kv])
    return torch.stack(rows)  # [B*H, S, D]


def gradients_fp64(workload: Workload, q, k, v, grad_out) -> dict[str, torch.Tensor]:
    """dq, dk, dv of `attention_fp64` by autograd, for the output gradient `grad_out`."""
    leaves = [t.detach().double().cpu().requires_grad_(True) for t in (q, k, v)]
    out = attention_fp64(workload, *leaves)
    out.backward(grad_out.detach().double().cpu().reshape(out.shape))
    return {name: t.grad.reshape(src.shape) for name, t, src in zip(("dq", "dk", "dv"), leaves, (q, k, v))}


def median_ratio(slow: list[float], fast: list[float]) -> float:
    """slower median over faster median, from the raw samples."""
    return statistics.median(slow) / statistics.median(fast)
