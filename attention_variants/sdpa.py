"""torch.nn.functional.scaled_dot_product_attention, pinned to one backend each, or left to choose."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

from profiling.environment import Environment, torch_release
from profiling.workload import Inputs, Workload

from .base import Variant


def _sdpa(x: Inputs) -> torch.Tensor:
    """As a user writes it: `is_causal` for the causal flag (the point is what SDPA does with causality by itself),
    the mask as `attn_mask` (bool: True where a key may be attended; or the additive bias), and `enable_gqa` for
    fewer kv heads. SDPA has no sliding-window argument: a window is a dense bool mask."""
    w = x.workload
    kwargs = {"enable_gqa": True} if w.groups > 1 else {}
    if w.mask == "flag":
        return F.scaled_dot_product_attention(x.q, x.k, x.v, is_causal=w.causal, **kwargs)
    mask = x.bias if w.mask == "bias" else x.allowed
    return F.scaled_dot_product_attention(x.q, x.k, x.v, attn_mask=mask, **kwargs)


def _math_scratch(w: Workload) -> int:
    # math upcasts to fp32 and keeps scores, the rebuilt mask and the softmax alive together, beside fp32 copies of
    # q, k, v and its output: up to 2.75x the fp32 scores on the H200 (recorded), 3.25x on CPU (the causal bias is
    # an S×S fp32 tensor there too); with grouped-query attention it copies k and v to every head first; a training
    # step keeps the fp32 softmax and makes the S×S gradients beside it
    scores = (3.5 if w.device == "cpu" else 2.75) * w.scores_bytes(element_bytes=4)
    qkv = 4 * w.batch * w.heads * w.seq_len * w.head_dim * 4
    if w.training:
        return int(scores + 2 * w.scores_bytes(element_bytes=4)) + 2 * qkv
    return int(scores) + qkv


def _fused_scratch(w: Workload) -> int:
    # the fp32 logsumexp and a workspace; on CPU each thread's blocks of q·kᵀ too (a few MiB); a dense mask
    # (a window, an explicit mask) is converted to an additive one of S×S in the inputs' dtype; a training step:
    # the gradients' fp32 accumulators (flash's dQ, cuDNN's) and grouped-query attention's expanded dK and dV
    n = w.batch * w.heads * w.seq_len
    mask = w.seq_len**2 * w.element_bytes if w.mask in ("bool", "window") else 0
    scratch = n * 4 + 4 * 2**20 + mask
    if w.training:
        scratch += 2 * n * w.head_dim * 4 + 2 * n * w.head_dim * w.element_bytes + n * 4
    return scratch


def _auto_scratch(w: Workload) -> int:
    # before torch 2.14 a rank-3 call can only take the math path (DESIGN.md, version facts)
    return _math_scratch(w) if w.rank == 3 and torch_release() < (2, 14) else _fused_scratch(w)


def _cuda_only(name: str) -> Callable[[Workload, Environment], str | None]:
    def check(w: Workload, env: Environment) -> str | None:
        if w.device != "cuda":
            return f"PyTorch has no CPU kernel for {name}: pinned to it, SDPA on CPU has nothing to run"
        return None
    return check


def _cudnn_check(w: Workload, env: Environment) -> str | None:
    reason = _cuda_only("cuDNN attention")(w, env)
    if reason is None and not hasattr(SDPBackend, "CUDNN_ATTENTION"):
        reason = f"torch {env.torch_version} has no SDPBackend.CUDNN_ATTENTION"
    if reason is None and not torch.backends.cudnn.is_available():
        reason = "cuDNN is not available in this PyTorch build"
    return reason


MATH = Variant(
    key="sdpa_math",
    label="SDPA · math",
    forward=_sdpa,
    scratch_bytes=_math_scratch,
    sdpa_backend="MATH",
)

EFFICIENT = Variant(
    key="sdpa_efficient",
    label="SDPA · memory-efficient",
    forward=_sdpa,
    scratch_bytes=_fused_scratch,
    check=_cuda_only("memory-efficient attention"),
    sdpa_backend="EFFICIENT_ATTENTION", fused=True,
)

FLASH = Variant(
    key="sdpa_flash",
    label="SDPA · FlashAttention",
    forward=_sdpa,
    scratch_bytes=_fused_scratch,
    sdpa_backend="FLASH_ATTENTION", fused=True,
)

CUDNN = Variant(
    key="sdpa_cudnn",
    label="SDPA · cuDNN",
    forward=_sdpa,
    scratch_bytes=_fused_scratch,
    check=_cudnn_check,
    sdpa_backend="CUDNN_ATTENTION", fused=True,
)

AUTO = Variant(
    key="sdpa_auto",
    label="SDPA · auto",
    forward=_sdpa,
    scratch_bytes=_auto_scratch,
    sdpa_backend="auto", fused=True,
)
