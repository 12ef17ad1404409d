"""FlashAttention-3's forward, as the PyPI package `fa3-fwd` builds it: a third-party build of FA3's Hopper forward
(Dao-AILab/flash-attention's `hopper/`, not Dao-AILab's own wheel, which is not on PyPI) against torch's stable ABI,
its ops under `torch.ops.fa3_fwd`, so SDPA's FA3 route (which loads `flash_attn_3`) cannot use it. Called as its users
call it: `flash_attn_func` for a prefill, `flash_attn_with_kvcache` for a decode step (its own split count, as vLLM
calls it), `flash_attn_varlen_func` for packed documents. What the build left out (its backward, fp16, windows, paged
KV) is read from the package's own `fa3_fwd_config.CONFIG` at run time. An optional dependency: without it the variant
is listed as unavailable, with the reason and the install line."""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

from profiling import gpu_paths
from profiling.environment import Environment
from profiling.workload import Inputs, Workload

from .base import Variant
from .guesses import Expected, GuessRow
from .optional import Library
from .sdpa import SMALL

if TYPE_CHECKING:  # torch, imported where a variant runs: its file is read (keys, guesses, traits) without it
    import torch

LIBRARY = Library("fa3-fwd", "fa3_fwd_interface", "0.0.3", "FlashAttention-3's forward (fa3-fwd)")
QUERY_BLOCK = 64      # a decode step's query heads of a kv head packed into 64-row tiles (hopper/heuristics.h)
KEY_BLOCK = 128
MAX_SPLITS = 128


@functools.cache
def build_flags() -> dict[str, bool]:
    """What this build of FA3 was compiled without (`FLASHATTENTION_DISABLE_BACKWARD`: True, ...), from the
    package's own record of its build; {} where it has none."""
    try:
        from fa3_fwd_config import CONFIG
        return dict(CONFIG.get("build_flags", {}))
    except Exception:
        return {}


def _without(feature: str) -> bool:
    return bool(build_flags().get(f"FLASHATTENTION_DISABLE_{feature}"))


def unavailable(w: Workload, env: Environment) -> str | None:
    reason = LIBRARY.missing()
    if reason:
        return reason
    built = f"this build of FA3 ({LIBRARY.dist} {LIBRARY.version()}) was compiled without"
    if env.compute_capability and env.compute_capability[0] not in (8, 9):
        return f"FlashAttention-3 has kernels for sm80 and sm90 (Hopper) only, not {env.sm}"
    if w.training and _without("BACKWARD"):
        return f"{built} its backward (FLASHATTENTION_DISABLE_BACKWARD): forward only"
    if w.dtype == "fp8":
        if _without("FP8"):
            return f"{built} fp8 (FLASHATTENTION_DISABLE_FP8)"
        if w.training:
            return "FA3 runs fp8 forward only (its backward takes fp16 and bf16)"
        if w.lengths is not None:
            return "this variant runs no fp8 over packed documents (flash_attn_varlen_func's descales are per document)"
    allowed = ("bf16",) if _without("FP16") else ("fp16", "bf16")
    if w.dtype not in (*allowed, "fp8"):
        return f"{built} fp16: it runs bf16 (and fp8) only (the inputs are {w.dtype})" if w.dtype == "fp16" else \
            f"FlashAttention-3 runs {' and '.join(allowed)} (and fp8) only (the inputs are {w.dtype})"
    if w.mask in ("bool", "bias"):
        return "FlashAttention-3 takes no dense mask or bias: causal, a sliding window, or none"
    if w.mask == "window" and _without("LOCAL"):
        return f"{built} sliding windows (FLASHATTENTION_DISABLE_LOCAL)"
    if w.page_size and _without("PAGEDKV"):
        return f"{built} paged KV caches (FLASHATTENTION_DISABLE_PAGEDKV)"
    if w.lengths is not None and _without("VARLEN"):
        return f"{built} packed (varlen) sequences (FLASHATTENTION_DISABLE_VARLEN)"
    if w.softcap and _without("SOFTCAP"):
        return f"{built} softcap (FLASHATTENTION_DISABLE_SOFTCAP)"
    if w.head_dim > 256 or w.head_dim % 8:
        return f"FlashAttention-3 takes head dims up to 256 in steps of 8 (it is {w.head_dim})"
    return None


def descales(x: Inputs) -> dict[str, torch.Tensor]:
    """fp8 inputs: `q_descale`, `k_descale`, `v_descale` as FA3 takes them, fp32 [B, Hkv] (hopper/flash_api.cpp reads
    them per batch row and kv head; one per-tensor scale repeated), made once per inputs and kept with them (no copy
    inside a timed call); {} for 16-bit inputs."""
    if x.quantised is None:
        return {}
    w = x.workload
    rows, heads = (1, w.batch * w.heads) if x.q.dim() == 3 else (w.batch, w.kv_head_count)
    return x.prepared("fa3 descales", lambda: {f"{name}_descale": scale.reshape(1, 1).expand(rows, heads).contiguous()
                                                for name, scale in x.descales().items()})


def fa3_attention(x: Inputs) -> torch.Tensor:
    """[B, S, H, D] views of the [B, H, S, D] tensors (FA3 reads any layout whose last stride is 1); causal is aligned
    to the bottom right, so a decode step's queries see the keys up to their own positions. A decode step goes through
    `flash_attn_with_kvcache` with `num_splits=0`: FA3 picks its own split of the keys, as a server calls it. fp8
    inputs (e4m3) come with their descales (`descales`); the output is bf16."""
    import fa3_fwd_interface as fa3

    w = x.workload
    kwargs = dict(softmax_scale=x.scale, causal=w.causal, softcap=w.softcap or 0.0,
                  window_size=(w.window - 1, 0) if w.mask == "window" else (-1, -1), **descales(x))
    if w.lengths is not None:
        p = x.packed()
        return fa3.flash_attn_varlen_func(p.q, p.k, p.v, p.cu_seqlens, p.cu_seqlens, p.max_len, p.max_len, **kwargs)
    q, k, v = x.q, x.k, x.v
    if q.dim() == 3:  # [B*H, S, D] as one batch of B*H heads
        q, k, v = (t.unsqueeze(0) for t in (q, k, v))
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    if w.q_len is not None:
        out = fa3.flash_attn_with_kvcache(qt, kt, vt, num_splits=0, **kwargs)
    else:
        out = fa3.flash_attn_func(qt, kt, vt, **kwargs)
    out = out.transpose(1, 2)
    return out.squeeze(0) if x.q.dim() == 3 else out


def splits(w: Workload, sm_count: int | None) -> int:
    """A bound on the key splits FA3 takes for a decode step (`num_splits=0`): its heuristic is the one PyTorch's
    flash uses (`gpu_paths.splits_heuristic`) over (batch, kv head, 64-row tile) tiles, its query heads of a kv head
    packed together; counted here against two blocks per SM, the most it could take."""
    if w.q_len is None:
        return 1
    tiles = w.batch * w.kv_head_count * math.ceil(w.queries * w.groups / QUERY_BLOCK)
    key_blocks = math.ceil(w.seq_len / KEY_BLOCK)
    sms = 2 * (sm_count or gpu_paths.MOST_SMS)
    return gpu_paths.splits_heuristic(tiles, sms, key_blocks, MAX_SPLITS)


def _scratch(w: Workload, env: Environment) -> int:
    """An fp32 log-sum-exp per query row; a decode step's split partials (fp32 output and log-sum-exp per split)."""
    rows = w.heads * (w.tokens if w.lengths is not None else w.batch * w.queries)
    n = splits(w, env.sm_count)
    partials = n * rows * (w.head_dim + 1) * 4 if n > 1 else 0
    return 4 * rows + partials + SMALL


FA3 = Variant(
    key="fa3",
    label="FA3 (fa3-fwd build)",
    forward=fa3_attention,
    scratch_bytes=_scratch,
    check=unavailable, gpu_only=True,
    fused=True, sparse=True, packs="packed", score_mods=("softcap",), call="FA3's flash_attn_func", fp8=("qkv",),
    no_fp8="FA3 takes q, k and v in one dtype (hopper/flash_api.cpp checks k's and v's against q's), so fp8 all "
           "three, not an fp8 cache beside 16-bit queries",
    kernel_patterns={"flashattnfwdcombine": "fused attention", "flashattnfwd": "fused attention",
                     "flash::prepare": "other"},
    split_kv=("flashattnfwdsm90", "flashattnfwdcombine"),
    words={"split": "called with num_splits=0, FA3 picks its split count (num_splits_heuristic: the fewest splits "
                    "within 0.85 of the best wave efficiency, where too few tiles fill the SMs) and writes fp32 "
                    "partial outputs",
           "packed": "flash_attn_varlen_func walks each document's tiles from the cumulative lengths"},
    guess=GuessRow("written for Hopper (wgmma, TMA, warp specialisation): faster than FlashAttention-2 and cuDNN",
        speed_rank=1, host_rank=2,
        on_cpu="GPU-only (written for Hopper): nothing to run on a CPU",
        kernels=(Expected("FlashAttention-3 forward", "fused attention"),)),
)

VARIANTS = (FA3,)
