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
from .sdpa import SMALL


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
def _block_mask(kind: str, queries: int, keys: int, window: int | None, device: str,
                allowed: torch.Tensor | None = None):
    """The BlockMask of a mask kind, built once per (kind, Lq, S, W, device) as a user builds it: from a `mask_mod`
    over positions (causal, a sliding window of W; the queries are the last Lq of the S positions), or one that reads
    an explicit bool mask."""
    from torch.nn.attention.flex_attention import create_block_mask

    offset = keys - queries
    if kind == "bool":
        def mask_mod(b, h, q_idx, kv_idx):
            return allowed[q_idx, kv_idx]
    elif kind == "window":
        def mask_mod(b, h, q_idx, kv_idx):
            return (q_idx + offset >= kv_idx) & (q_idx + offset - kv_idx < window)
    else:
        def mask_mod(b, h, q_idx, kv_idx):
            return q_idx + offset >= kv_idx
    _built.add((kind, queries, keys, window, device))
    return create_block_mask(mask_mod, B=None, H=None, Q_LEN=queries, KV_LEN=keys, device=device)


_built: set[tuple] = set()  # the masks built in this process (a later build of one may still have left the cache)


def _mask_key(w: Workload) -> tuple | None:
    if not w.causal:
        return None
    kind = w.mask if w.mask in ("bool", "window") else "causal"
    return kind, w.queries, w.seq_len, w.window, w.device


def _mask_of(x: Inputs):
    key = _mask_key(x.workload)
    if key is None:
        return None
    return _block_mask(*key, x.allowed if key[0] == "bool" else None)


def setup(x: Inputs) -> bool:
    """Build (or find built) the block mask before the first call: `create_block_mask` is paid once per mask.
    Returns whether it was found built."""
    hits = _block_mask.cache_info().hits
    _mask_of(x)
    return _block_mask.cache_info().hits > hits


def _setup_bytes(w: Workload, env: Environment) -> int:
    """What building the block mask allocates, while it lasts (measured on this CPU and the H200: 10 bytes per
    query-key pair): `create_block_mask` evaluates the mask_mod over the whole Lq×S grid, window or not, with no
    chunking (a bool grid), then pads it to 128-multiples and sums blocks through an int64 copy: Lq·S + 9·Lq'·S'.
    Nothing where no mask is built: not causal, or a position mask this process built already."""
    key = _mask_key(w)
    if key is None or (key in _built and key[0] != "bool"):
        return 0
    padded = lambda n: -(-n // 128) * 128  # noqa: E731
    return w.queries * w.seq_len + 9 * padded(w.queries) * padded(w.seq_len)


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


def _scratch_bytes(w: Workload, env: Environment) -> int:
    """The call's memory beyond its output (every recorded H200 peak): the Triton template writes an fp32
    log-sum-exp and row max per query row; its backward an fp32 delta per row besides, and no dK, dV at every query
    head for grouped-query attention. The block mask is built in `setup`, before the call (`_setup_bytes`)."""
    return (12 if w.training else 8) * w.batch * w.heads * w.queries + SMALL


FLEX = Variant(
    key="flex",
    label="FlexAttention (compiled)",
    forward=flex_attention,
    scratch_bytes=_scratch_bytes,
    check=_check,
    setup=setup,
    setup_bytes=_setup_bytes,
    fused=True, sparse=True, compiled=True,
)
