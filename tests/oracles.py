"""Independent answers the tests hold the app against: plain fp64 attention written here (not the app's reference),
its gradients by autograd (not the app's textbook backward), and the headline's figures re-derived from the runs'
own samples by a route of their own."""
from __future__ import annotations

import statistics

import torch

from profiling.workload import Workload


def _scores_mask(w: Workload, top_left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(allowed [Lq, S] bool, additive [Lq, S] fp64) for the workload's mask, built here position by position: the
    Lq queries are the last Lq of the S positions (query i at position S − Lq + i), so a causal query sees the keys
    up to its own position. `top_left`: the causal pattern as SDPA's is_causal=True aligns it instead, query i
    seeing keys 0…i whatever S is."""
    s, lq = w.seq_len, w.q_len or w.seq_len
    first = 0 if top_left else s - lq
    q = torch.tensor([[first + i] * s for i in range(lq)])          # each query's position, along its row
    k = torch.tensor([list(range(s))] * lq)                            # each key's position
    allowed = (k <= q) if w.causal else torch.ones(lq, s, dtype=torch.bool)
    if w.mask == "window":
        allowed = allowed & (q - k < w.window)
    additive = torch.zeros(lq, s, dtype=torch.float64)
    if w.mask == "bias":  # the app's distance penalty, rounded to the inputs' dtype as the app stores it
        additive = (-(q - k).abs().double() / s).to(w.torch_dtype).double()
    return allowed, additive


def attention_fp64(workload: Workload, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   top_left: bool = False) -> torch.Tensor:
    """softmax(q·kᵀ/√D + mask)·v in float64, head by head, each query head reading its kv head: [B*H, Lq, D]."""
    w = workload
    lq = w.q_len or w.seq_len
    q = q.double().cpu().reshape(w.batch, w.heads, lq, w.head_dim)
    k, v = (t.double().cpu().reshape(w.batch, w.kv_heads or w.heads, w.seq_len, w.head_dim) for t in (k, v))
    allowed, additive = _scores_mask(w, top_left)
    rows = []
    for b in range(w.batch):
        for h in range(w.heads):
            kv = h // w.groups
            scores = q[b, h] @ k[b, kv].T / w.head_dim ** 0.5 + additive
            scores = scores.masked_fill(~allowed, float("-inf"))
            rows.append(torch.softmax(scores, dim=-1) @ v[b, kv])
    return torch.stack(rows)  # [B*H, Lq, D]


def paged_kv(workload: Workload, k_pages: torch.Tensor, page_table: torch.Tensor) -> torch.Tensor:
    """The contiguous [B, Hkv, S, D] cache a paged pool holds, read back page by page through its table."""
    w = workload
    out = torch.empty(w.batch, w.kv_heads or w.heads, w.seq_len, w.head_dim, dtype=k_pages.dtype)
    for b in range(w.batch):
        for j, page in enumerate(page_table[b].tolist()):
            out[b, :, j * w.page_size:(j + 1) * w.page_size] = k_pages[page].transpose(0, 1)
    return out


def gradients_fp64(workload: Workload, q, k, v, grad_out) -> dict[str, torch.Tensor]:
    """dq, dk, dv of `attention_fp64` by autograd, for the output gradient `grad_out`."""
    leaves = [t.detach().double().cpu().requires_grad_(True) for t in (q, k, v)]
    out = attention_fp64(workload, *leaves)
    out.backward(grad_out.detach().double().cpu().reshape(out.shape))
    return {name: t.grad.reshape(src.shape) for name, t, src in zip(("dq", "dk", "dv"), leaves, (q, k, v))}


def median_ratio(slow: list[float], fast: list[float]) -> float:
    """slower median over faster median, from the raw samples."""
    return statistics.median(slow) / statistics.median(fast)


def unconfirmed_gap_said(a: list[float], b: list[float]) -> str:
    """What a headline must say of two sets of samples whose middle halves are apart but that the rank test leaves
    unranked, re-derived from the raw samples: how many of each side's samples lie beyond the other's median (the
    faster side's slower than the slower's median, the slower side's faster than the faster's), or, where none do,
    that the tails overlap. Never that the samples "overlap too much": their middle halves do not."""
    ma, mb = statistics.median(a), statistics.median(b)
    sides = {"A": (a, mb), "B": (b, ma)}
    fast = "A" if ma < mb else "B"
    said = []
    for side in (fast, "B" if fast == "A" else "A"):
        mine, their_median = sides[side]
        other = "B" if side == "A" else "A"
        n = sum(x > their_median for x in mine) if side == fast else sum(x < their_median for x in mine)
        if n and not said:
            said.append(f"{n} of {side}'s {len(mine)} samples {'is' if n == 1 else 'are'} "
                        f"{'slower' if side == fast else 'faster'} than {other}'s median")
        elif n:  # the second side, briefly
            said.append(f"{n} of {side}'s {len(mine)} {'slower' if side == fast else 'faster'} than {other}'s")
    return "apart; " + (", ".join(said) or "the tails of their samples overlap") \
        + ": too spread to rank."


def documents_fp64(workload: Workload, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Packed documents' attention in float64, each document alone: document b is the first L_b rows of batch row b
    of the padded [B, H, S, D] inputs, softmax(q·kᵀ/√D) over its own keys (the causal ones: a lower triangle), each
    query head reading its kv head. Returns the documents end to end: [T, H, D]."""
    w = workload
    q, k, v = (t.double().cpu() for t in (q, k, v))
    outs = []
    for b, n in enumerate(w.lengths):
        heads = []
        for h in range(w.heads):
            kv = h // w.groups
            scores = q[b, h, :n] @ k[b, kv, :n].T / w.head_dim ** 0.5              # [n, n]
            if w.causal:
                scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
            heads.append(torch.softmax(scores, dim=-1) @ v[b, kv, :n])            # [n, D]
        outs.append(torch.stack(heads, dim=1))                                    # [n, H, D]
    return torch.cat(outs)


def documents_gradients_fp64(workload: Workload, q, k, v, grad_out) -> dict[str, torch.Tensor]:
    """dq, dk, dv of `documents_fp64` by autograd for the padded batch's output gradient (its real rows), each as the
    documents end to end ([T, H, D], [T, Hkv, D])."""
    w = workload
    leaves = [t.detach().double().cpu().requires_grad_(True) for t in (q, k, v)]
    out = documents_fp64(w, *leaves)
    g = grad_out.detach().double().cpu()
    out.backward(torch.cat([g[b, :, :n].transpose(0, 1) for b, n in enumerate(w.lengths)]))
    return {name: torch.cat([t.grad[b, :, :n].transpose(0, 1) for b, n in enumerate(w.lengths)])
            for name, t in zip(("dq", "dk", "dv"), leaves)}
