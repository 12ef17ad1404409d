"""FlexAttention: attention written as a score/mask modification, compiled into one Triton kernel."""
from __future__ import annotations

import functools
import logging
import os

import torch

from profiling.environment import Environment
from profiling.workload import Inputs, Workload

from .base import Variant


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention
    # a CUDA build of torch on a CPU-only machine logs a warning per compile; it is not ours to show
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    # Every new shape recompiles; past dynamo's limit (8) it would silently run flex eagerly,
    # unfused, and the trace would show something else. An app sees many shapes: raise it.
    config = torch._dynamo.config
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, limit, max(getattr(config, limit), 256))
    return torch.compile(flex_attention, dynamic=False)


@functools.lru_cache(maxsize=4)
def _causal_block_mask(seq_len: int, device: str):
    """Built once per (S, device), like the naive variants' mask."""
    from torch.nn.attention.flex_attention import create_block_mask
    return create_block_mask(_causal, B=None, H=None, Q_LEN=seq_len, KV_LEN=seq_len, device=device)


def flex_attention(x: Inputs) -> torch.Tensor:
    q, k, v = x.q, x.k, x.v
    if q.dim() == 3:  # flex wants [B, H, S, D]: view [B*H, S, D] as one batch of B*H heads
        q, k, v = (t.unsqueeze(0) for t in (q, k, v))
    w = x.workload
    block_mask = _causal_block_mask(w.seq_len, w.device) if w.causal else None
    out = _compiled_flex()(q, k, v, block_mask=block_mask, scale=x.scale)
    return out.squeeze(0) if x.q.dim() == 3 else out


def _zero_gpu() -> bool:
    """On a ZeroGPU Space (the `spaces` package reads the same variable the same way)."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


def _check(w: Workload, env: Environment) -> str | None:
    if _zero_gpu():
        return ("ZeroGPU runs the GPU function without torch.compile, and this variant is FlexAttention "
                "compiled into a Triton kernel: it cannot run on this Space (run it on a GPU machine)")
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        return f"torch {env.torch_version} has no torch.nn.attention.flex_attention"
    if w.device == "cuda" and env.triton_version is None:
        return "FlexAttention compiles to Triton, and Triton is not installed"
    return None


def _scratch_bytes(w: Workload) -> int:
    """logsumexp and workspace; for a causal workload, also what building its block mask takes the first time:
    create_block_mask evaluates the mask at every (q, kv) pair, an S×S int64 index grid and its S×S bools
    (on the H200 at S=131072 it asked for 128 GiB in one allocation, S²×8 bytes, and ran out of memory)."""
    mask = 9 * w.seq_len * w.seq_len if w.causal else 0
    return 2 * w.batch * w.heads * w.seq_len * 4 + 2 * 2**20 + mask


FLEX = Variant(
    key="flex",
    label="FlexAttention (compiled)",
    forward=flex_attention,
    scratch_bytes=lambda w: _scratch_bytes(w),
    check=_check,
    fused=True, compiled=True,
)
