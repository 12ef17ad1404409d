"""torch.nn.functional.scaled_dot_product_attention, pinned to one backend each, or left to choose."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from profiling import gpu_paths
from profiling.cpu_paths import flash_buffers
from profiling.dispatch import rank3_is_fused
from profiling.environment import Environment
from profiling.workload import Inputs, Workload

from .base import Variant
from .guesses import Expected, GEMM_PV, GEMM_QK, GuessRow, MASK, NAIVE_BACKWARD, SCALE, SOFTMAX

if TYPE_CHECKING:  # torch, imported where a variant runs: its file is read (keys, guesses, traits) without it
    import torch


def _sdpa(x: Inputs) -> torch.Tensor:
    """As a user writes it: `is_causal` for the causal flag (the point is what SDPA does with causality by itself),
    the mask as `attn_mask` (bool: True where a key may be attended; or the additive bias), and `enable_gqa` for
    fewer kv heads. SDPA has no sliding-window argument: a window is a dense bool mask. With fewer queries than keys
    (a decode step) `is_causal=True` would align the mask to the top left (query i sees keys 0…i): the causal
    pattern is then `causal_lower_right`, PyTorch's own bias for the queries that are the last positions. Packed
    documents are padded to B×S at the end of each row: the causal flag hides the padding keys from every real query,
    and without it a [B, 1, 1, S] key-padding mask does (which SDPA's flash backend refuses, as it refuses any mask)."""
    import torch.nn.functional as F
    w = x.workload
    kwargs = {"enable_gqa": True} if w.groups > 1 else {}
    if x.padding is not None:  # packed documents padded to B×S, not causal: the key-padding mask (`Inputs.hidden`)
        return F.scaled_dot_product_attention(x.q, x.k, x.v, attn_mask=x.padding, **kwargs)
    if w.mask == "flag":
        if w.lower_right:
            from torch.nn.attention.bias import causal_lower_right
            return F.scaled_dot_product_attention(x.q, x.k, x.v, attn_mask=causal_lower_right(w.queries, w.seq_len),
                                                  **kwargs)
        return F.scaled_dot_product_attention(x.q, x.k, x.v, is_causal=w.causal, **kwargs)
    mask = x.bias if w.mask == "bias" else x.allowed
    return F.scaled_dot_product_attention(x.q, x.k, x.v, attn_mask=mask, **kwargs)


def _sdpa_top_left(x: Inputs) -> torch.Tensor:
    """The causal flag as `is_causal=True`: SDPA aligns it to the top left (query i sees keys 0…i), so with fewer
    queries than keys the last query sees the first Lq keys, not all S (torch.nn.attention.bias, CausalVariant)."""
    import torch.nn.functional as F
    kwargs = {"enable_gqa": True} if x.workload.groups > 1 else {}
    return F.scaled_dot_product_attention(x.q, x.k, x.v, is_causal=True, **kwargs)


# SDPA reads k and v as [B, Hkv, S, D] tensors: a paged cache would have to be gathered into one first, another call
PAGED = "SDPA has no page table: it reads k and v as contiguous [B, Hkv, S, D] tensors (leave page_size empty)"


def contiguous_only(check: Callable[[Workload, Environment], str | None] | None = None,
                    reason: str = PAGED) -> Callable[[Workload, Environment], str | None]:
    """A paged cache refused with `reason`; then `check`, if any."""
    def checked(w: Workload, env: Environment) -> str | None:
        return reason if w.page_size else (check(w, env) if check else None)
    return checked


SMALL = 8 * 2**10  # a few small blocks (philox seed and offset, an empty log-sum-exp), rounded up by the allocator


def _math_scratch(w: Workload, env: Environment) -> int:
    """The math path upcasts to fp32 and keeps the scores, the rebuilt mask and the softmax alive together, beside
    fp32 copies of its operands: q and q scaled, k, k scaled and v at every query head, and with grouped-query
    attention k and v before `repeat_interleave` too (aten's _scaled_dot_product_attention_math scales q and k by
    √scale each); and its output: up to 2.75x the fp32 scores on the H200 (recorded), 3.5x on a CPU (the causal bias
    is an fp32 Lq×S tensor there too); a training step keeps the fp32 softmax and makes the Lq×S gradients beside it.
    A causal decode step adds the Lq×S mask `causal_lower_right` materialises (`gpu_paths`)."""
    scores = (3.5 if w.device == "cpu" else 2.75) * w.scores_bytes(element_bytes=4)
    rows = 4 * w.batch * w.head_dim
    copies = rows * (w.heads * (2 * w.queries + 3 * w.seq_len) + (2 * w.kv_head_count * w.seq_len if w.groups > 1
                                                                  else 0))
    mask = w.mask_elements * (1 + 4) if w.lower_right else 0
    if w.training:
        return int(scores + 2 * w.scores_bytes(element_bytes=4)) + 2 * copies + mask
    return int(scores) + copies + mask


def _fused_scratch(w: Workload, env: Environment, backend: str = "flash") -> int:
    """A fused kernel's memory beyond its output. On a GPU (every recorded H200 peak): an fp32 log-sum-exp per query
    row (flash writes it even without grad), and the additive Lq×S mask SDPA makes from a dense bool mask
    (`where(mask, 0, -inf)` in the inputs' dtype; before torch 2.14 a bool `logical_not` beside it), and for a
    decode step the split-KV partial outputs of `backend` and the lower-right mask cuDNN is given (`gpu_paths`).
    A training step: the fp32 dQ accumulator, dK and dV at every query head before the group sum, a row statistic.
    On a CPU, the CPU flash kernel's per-thread blocks (`cpu_paths.flash_buffers`) instead of the GPU's."""
    import torch
    rows = w.batch * w.heads * w.queries
    mask = 0
    negated = env.torch_release < (2, 14) or w.device == "cpu"  # a bool logical_not beside the float mask
    if w.mask in ("bool", "window"):
        mask = w.mask_elements * (w.element_bytes + (1 if negated else 0))
    elif w.lengths is not None and not w.causal:  # a padded batch's [B, 1, 1, S] key-padding mask, made additive
        mask = w.batch * w.seq_len * (w.element_bytes + (1 if negated else 0))
    elif backend == "cudnn" and w.device == "cuda" and w.lower_right:
        mask = w.mask_elements * (1 + w.element_bytes + (1 if negated else 0))
    if w.device == "cuda":
        mask += gpu_paths.cudnn_split_bytes(w, env.sm_count) if backend == "cudnn" else \
            gpu_paths.flash_split_bytes(w, env.sm_count) if backend == "flash" else 0
    scratch = 4 * rows + mask + SMALL
    if w.device == "cpu":
        threads = env.cpu_threads or torch.get_num_threads()
        forward = flash_buffers(w, env.cpu_features, threads, backward=False)
        if not w.training:
            return scratch + forward
        backward = flash_buffers(w, env.cpu_features, threads, backward=True)
        return scratch + max(forward, w.q_bytes + backward)
    if w.training:
        scratch += 2 * rows * w.head_dim * 4 + 2 * rows * w.head_dim * w.element_bytes + 4 * rows
    return scratch


def _auto_scratch(w: Workload, env: Environment) -> int:
    """SDPA's own choice: the larger of the fused kernels' it may take, but where the run's torch sends a rank-3 call
    to the math path (before 2.14, PR #192271: `dispatch.rank3_is_fused`), the math path's."""
    if w.rank == 3 and not rank3_is_fused(env):
        return _math_scratch(w, env)
    return max(_fused_scratch(w, env, backend) for backend in ("flash", "efficient", "cudnn"))


def _scratch_of(backend: str) -> Callable[[Workload, Environment], int]:
    return lambda w, env: _fused_scratch(w, env, backend)


def _cuda_only(name: str) -> Callable[[Workload, Environment], str | None]:
    def check(w: Workload, env: Environment) -> str | None:
        if w.device != "cuda":
            return f"PyTorch has no CPU kernel for {name}: pinned to it, SDPA on CPU has nothing to run"
        return None
    return check


def _cudnn_check(w: Workload, env: Environment) -> str | None:
    import torch
    from torch.nn.attention import SDPBackend
    reason = _cuda_only("cuDNN attention")(w, env)
    if reason is None and not hasattr(SDPBackend, "CUDNN_ATTENTION"):
        reason = f"torch {env.torch_version} has no SDPBackend.CUDNN_ATTENTION"
    if reason is None and not torch.backends.cudnn.is_available():
        reason = "cuDNN is not available in this PyTorch build"
    return reason


# Read in torch 2.14.1's source: F.scaled_dot_product_attention takes no float8 inputs and no descales (its math path
# raises "not implemented for 'Float8_e4m3fn'"); fp8 goes through the experimental, private
# torch.nn.attention.experimental._scaled_dot_product_attention_quantized, which needs torch's FA3 route activated (Dao-
# AILab's flash_attn_3, not fa3-fwd: see fa3.py) and is not wired here. torchao calls it from torch 2.11.
NO_FP8 = ("F.scaled_dot_product_attention takes no fp8 inputs or descales (torch's fp8 attention is the experimental, "
          "private _scaled_dot_product_attention_quantized through its FA3 route, which no variant calls)")

MATH = Variant(
    key="sdpa_math",
    label="SDPA · math",
    forward=_sdpa,
    scratch_bytes=_math_scratch,
    check=contiguous_only(),
    sdpa_backend="MATH", top_left=_sdpa_top_left, no_fp8=NO_FP8,
    guess=GuessRow("one line, so few {units} and fast", speed_rank=4, host_rank=3, like_naive=True,
        kernels=(GEMM_QK, SCALE, Expected(MASK, "elementwise", "aten::tril"), SOFTMAX, GEMM_PV),
        backward=NAIVE_BACKWARD),
)

EFFICIENT = Variant(
    key="sdpa_efficient",
    label="SDPA · memory-efficient",
    forward=_sdpa,
    scratch_bytes=_scratch_of("efficient"),
    check=contiguous_only(_cuda_only("memory-efficient attention")),
    sdpa_backend="EFFICIENT_ATTENTION", fused=True, top_left=_sdpa_top_left, no_fp8=NO_FP8,
    guess=GuessRow("one fused {one} that never writes the S×S scores",
        speed_rank=3, host_rank=2, kernels=(
        Expected("fused attention (CUTLASS fmha)", "fused attention"),),
        backward=(Expected("fused attention backward", "fused attention", None, "backward"),)),
)

FLASH = Variant(
    key="sdpa_flash",
    label="SDPA · FlashAttention",
    forward=_sdpa,
    scratch_bytes=_scratch_of("flash"),
    check=contiguous_only(),
    sdpa_backend="FLASH_ATTENTION", fused=True, top_left=_sdpa_top_left, no_fp8=NO_FP8,
    guess=GuessRow("fastest, so high occupancy", speed_rank=1, host_rank=2, occupancy="high",
        on_cpu="SDPA's fused CPU op: no S×S scores in memory",
        kernels=(Expected("flash attention", "fused attention"),),
        backward=(Expected("flash attention backward", "fused attention", None, "backward"),)),
)

CUDNN = Variant(
    key="sdpa_cudnn",
    label="SDPA · cuDNN",
    forward=_sdpa,
    scratch_bytes=_scratch_of("cudnn"),
    check=contiguous_only(_cudnn_check),
    sdpa_backend="CUDNN_ATTENTION", fused=True, top_left=_sdpa_top_left, no_fp8=NO_FP8,
    # cuDNN's sum of dK and dV over a GQA group's heads in a backward (flash's is aten's reduce_kernel): a reduction
    kernel_patterns={"reduce_head": "reduction"},
    guess=GuessRow("no transposes, so lightest on the CPU", speed_rank=2, host_rank=1,
        on_cpu="a GPU library: nothing to run on a CPU", kernels=(
        Expected("cuDNN fused attention", "fused attention"),),
        backward=(Expected("cuDNN fused attention backward", "fused attention", None,
        "backward"),)),
)

AUTO = Variant(
    key="sdpa_auto",
    label="SDPA · auto",
    forward=_sdpa,
    scratch_bytes=_auto_scratch,
    check=contiguous_only(),
    sdpa_backend="auto", fused=True, top_left=_sdpa_top_left, no_fp8=NO_FP8,
    words={"chooser": "auto"},
    guess=GuessRow("the fastest backend for this GPU", speed_rank=1, host_rank=2,
        on_cpu="the best backend SDPA has for a CPU", kernels=(
        Expected("whichever fused kernel is fastest on the GPU", "fused attention"),),
        backward=(Expected("that kernel's backward", "fused attention", None, "backward"),)),
)

VARIANTS = (MATH, EFFICIENT, FLASH, CUDNN, AUTO,)  # in the table's order
