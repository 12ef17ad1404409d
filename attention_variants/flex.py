"""FlexAttention: attention written as a score/mask modification, compiled into one Triton kernel."""
from __future__ import annotations

import functools
import logging
import os
import warnings

import torch

from profiling.environment import Environment
from profiling.workload import Inputs, Workload

from .base import Variant


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
def _block_mask(kind: str, seq_len: int, window: int | None, device: str, allowed: torch.Tensor | None = None):
    """The BlockMask of a mask kind, built once per (kind, S, W, device) as a user builds it: from a `mask_mod` over
    positions (causal, a sliding window of W), or one that reads an explicit bool mask."""
    from torch.nn.attention.flex_attention import create_block_mask

    if kind == "bool":
        def mask_mod(b, h, q_idx, kv_idx):
            return allowed[q_idx, kv_idx]
    elif kind == "window":
        def mask_mod(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (q_idx - kv_idx < window)
    else:
        def mask_mod(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx
    return create_block_mask(mask_mod, B=None, H=None, Q_LEN=seq_len, KV_LEN=seq_len, device=device)


def _mask_of(x: Inputs):
    w = x.workload
    if not w.causal:
        return None
    kind = w.mask if w.mask in ("bool", "window") else "causal"
    return _block_mask(kind, w.seq_len, w.window, w.device, x.allowed if kind == "bool" else None)


def setup(x: Inputs) -> None:
    """Build (or find built) the block mask before the first call: `create_block_mask` is paid once per mask."""
    _mask_of(x)


def flex_attention(x: Inputs) -> torch.Tensor:
    q, k, v = x.q, x.k, x.v
    if q.dim() == 3:  # flex wants [B, H, S, D]: view [B*H, S, D] as one batch of B*H heads
        q, k, v = (t.unsqueeze(0) for t in (q, k, v))
    kwargs = {"enable_gqa": True} if x.workload.groups > 1 else {}
    if x.bias is not None:
        bias = x.bias

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + bias[q_idx, kv_idx]
        kwargs["score_mod"] = score_mod
    out = _compiled_flex()(q, k, v, block_mask=_mask_of(x), scale=x.scale, **kwargs)
    return out.squeeze(0) if x.q.dim() == 3 else out


def _zero_gpu() -> bool:
    """On a ZeroGPU Space (the `spaces` package reads the same variable the same way)."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


@functools.cache
def _cpu_backward_refusal() -> str | None:
    """What this torch says when FlexAttention is given inputs that need a backward on a CPU, read once from a call on
    a tiny shape (it checks before any work; torch 2.14.1, compiled or not: "FlexAttention does not support backward
    on CPU"); None where it takes them. Read, not assumed from a version: a torch that adds it is not refused."""
    from torch.nn.attention.flex_attention import flex_attention
    q = torch.zeros(1, 1, 16, 16, requires_grad=True)  # [B, H, S, D]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # eager flex warns that it runs unfused: this call only asks
            flex_attention(q, q, q)
    except NotImplementedError as error:
        return str(error).split(". ")[0]
    return None


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
    if w.device == "cpu" and w.training and _cpu_backward_refusal():
        return f"torch {env.torch_version}: {_cpu_backward_refusal()}: measure its forward alone, or on a GPU"
    return None


def _scratch_bytes(w: Workload) -> int:
    """logsumexp and max (fp32 rows, allocated whatever is written) and workspace; a mask's first build: 
    create_block_mask evaluates the mask at every (q, kv) pair, S×S int64 index grids and S×S bools (on the H200 at
    S=131072 it asked for 128 GiB in one allocation, S²×8 bytes, and ran out of memory); a training step: dQ, dK, dV
    in the Triton template's fp32 accumulators, grouped-query dK and dV for every query head."""
    n = w.batch * w.heads * w.seq_len
    mask = 9 * w.seq_len * w.seq_len if w.causal else 0
    scratch = 2 * n * 4 + 2 * 2**20 + mask
    if w.training:
        scratch += n * 4 + 3 * n * w.head_dim * 4
    return scratch


FLEX = Variant(
    key="flex",
    label="FlexAttention (compiled)",
    forward=flex_attention,
    scratch_bytes=_scratch_bytes,
    check=_check,
    setup=setup,
    fused=True, compiled=True,
)
