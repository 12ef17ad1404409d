"""FlashAttention-4 (PyPI `flash-attn-4`, CuTe DSL, kernels JIT-compiled per configuration on first call): called
directly as its users call it, and through SDPA's FA4 route. An optional dependency: without it both variants are
listed as unavailable, with the reason and the install line, and nothing here imports it.

`flash_attn.cute` is imported lazily (about 2 s, the cutlass MLIR library and torch._dynamo); the pairing of
torch's SDPA route with a flash-attn-4 release is read from both packages' source (see the notes below).
"""
from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import inspect
import re
from typing import ContextManager, TYPE_CHECKING

from profiling.environment import Environment
from profiling.workload import Inputs, Workload

from .base import Variant
from .guesses import Expected, GuessRow
from .sdpa import NO_FP8, SMALL, _sdpa_top_left

if TYPE_CHECKING:  # torch, imported where a variant runs: its file is read (keys, guesses, traits) without it
    import torch

DIST = "flash-attn-4"
PIN = "4.0.0b36"            # seen working on the H200 with nvidia-cutlass-dsl 4.8.1 (torch 2.11.0+cu130)
CUTLASS_PIN = "4.8.1"
LAST_TWO_VALUE_BETA = 18    # flash-attn-4 4.0.0b3..b18 return (out, lse) from _flash_attn_fwd; b19+ return more
JIT_S = (3.6, 6.0)          # first forward, first backward of a configuration on the H200 (measured)
HOST = "flash_attn.cute's Python launch path"  # where its calls' own host time goes (`Variant.words`)


def installed_version() -> str | None:
    try:
        return importlib.metadata.version(DIST)
    except importlib.metadata.PackageNotFoundError:
        return None


def install_line() -> str:
    import torch
    cu13 = "[cu13]" if (torch.version.cuda or "").startswith("13") else ""
    return f'pip install "{DIST}{cu13}=={PIN}" "nvidia-cutlass-dsl{cu13}=={CUTLASS_PIN}"'


@functools.cache
def _import_error() -> str | None:
    """Import flash_attn.cute once (no CUDA call, no JIT): the error in one line, or None."""
    try:
        import flash_attn.cute  # noqa: F401
    except Exception as error:  # ImportError, an OSError from the cutlass library, its loader's RuntimeError
        return f"{type(error).__name__}: {error}".splitlines()[0]
    return None


def unavailable(w: Workload, env: Environment) -> str | None:
    """Why FA4 cannot run this workload here, or None. Cheap when the package is absent."""
    if w.softcap and w.training:  # flash_attn/cute/interface.py (read at 004b1a2): `None,  # softcap - not yet ...`
        return ("FlashAttention-4's backward does not apply softcap (its interface gives the backward kernel "
                "softcap=None: 'not yet supported in backward'): measure its forward alone")
    version = installed_version()
    if version is None:
        return f"{DIST} is not installed (an optional dependency); to add it: {install_line()}"
    if w.device != "cuda":
        return "FlashAttention-4 runs on NVIDIA GPUs only"
    spec = importlib.util.find_spec("flash_attn")
    if spec is None or spec.origin is not None:  # FA4's flash_attn is a namespace package: FA2's would shadow it
        return f"{DIST} {version} is installed but flash_attn.cute cannot be found (FlashAttention-2's flash_attn " \
               "package shadows it, or the install folder is not on sys.path)"
    if env.compute_capability and env.compute_capability[0] not in (8, 9, 10, 11, 12):
        return f"FlashAttention-4 has no kernels for {env.sm} (sm80 forward only, sm90, sm100/sm110, sm120)"
    if w.dtype not in ("fp16", "bf16"):
        return f"FlashAttention-4 runs fp16 and bf16 only (the inputs are {w.dtype})"
    if w.mask in ("bool", "bias"):
        return "FlashAttention-4 takes no dense mask: causal, a sliding window, or a CuTe-DSL mask_mod"
    if not 8 <= w.head_dim <= 256 or w.head_dim % 8:
        return f"FlashAttention-4 takes head dims of 8 to 256 in steps of 8 on sm90 (it is {w.head_dim})"
    if w.training and env.compute_capability and env.compute_capability[0] == 8:
        return "FlashAttention-4 has no backward on sm80"
    if w.page_size and env.compute_capability and env.compute_capability[0] in (8, 12):
        return f"FlashAttention-4 has no paged KV on {env.sm} (flash_attn/cute/interface.py: sm90 and sm100 only)"
    error = _import_error()
    return f"import flash_attn.cute failed ({error}); to fix: {install_line()}" if error else None


def fa4_attention(x: Inputs) -> torch.Tensor:
    """As its users call it: [B, S, H, D] tensors, fewer kv heads for GQA, `window_size=(left, right)`. Its
    `causal=True` is aligned to the bottom right (flash_attn/cute/mask.py: a query's last key is its row plus
    seqlen_k − seqlen_q), so the last q_len queries of a decode step see the keys up to their own positions as they
    are. A paged cache goes through `flash_attn_varlen_func`, FA4's entry that takes a page table: the pool
    [pages, P, Hkv, D] and the table [B, S/P] int32, q left [B, Lq, H, D] (no cu_seqlens)."""
    from flash_attn.cute import flash_attn_func, flash_attn_varlen_func

    w = x.workload
    window = (w.window - 1, 0) if w.mask == "window" else (None, None)  # W keys: itself and the W-1 before it
    scores = {"softmax_scale": x.scale, "causal": w.causal, "softcap": w.softcap or 0.0}  # every entry's
    if w.lengths is not None:  # packed documents: [T, H, D] and their cumulative lengths, FA4's varlen entry
        p = x.packed()
        return flash_attn_varlen_func(p.q, p.k, p.v, cu_seqlens_q=p.cu_seqlens, cu_seqlens_k=p.cu_seqlens,
                                      max_seqlen_q=p.max_len, max_seqlen_k=p.max_len, **scores)[0]
    if x.page_table is not None:
        out = flash_attn_varlen_func(x.q.transpose(1, 2), x.k_pages, x.v_pages, page_table=x.page_table,
                                     window_size=window, **scores)[0]
        return out.transpose(1, 2)
    q, k, v = x.q, x.k, x.v
    if q.dim() == 3:  # [B*H, S, D] as one batch of B*H heads
        q, k, v = (t.unsqueeze(0) for t in (q, k, v))
    # [B, H, S, D] -> [B, S, H, D] is a view: FA4 keeps a view whose last stride is 1 and other strides 16-byte
    # aligned (flash_attn/cute/cute_dsl_utils.py, maybe_contiguous), as here with D a multiple of 8: no copy
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    out = flash_attn_func(qt, kt, vt, window_size=window, **scores)[0]
    out = out.transpose(1, 2)  # back to [B, H, S, D]: again a view of FA4's contiguous output
    return out.squeeze(0) if x.q.dim() == 3 else out


def _fused_scratch(w: Workload, env: Environment) -> int:
    """An fp32 log-sum-exp per query row (every recorded H200 peak); a training step: dQ's fp32 accumulator, dK and
    dV for every query head (summed per group), softmax_d. Packed documents: their real rows only."""
    rows = w.heads * (w.tokens if w.lengths is not None else w.batch * w.queries)
    scratch = 4 * rows + SMALL
    if w.training:
        scratch += rows * w.head_dim * 4 + 2 * rows * w.head_dim * 4 + rows * 4
    return scratch


# -- SDPA's FA4 route (torch 2.11+: torch.nn.attention.activate_flash_attention_impl("FA4")) -------------------
def _torch_unpacks_two() -> bool:
    """torch 2.11-2.13's route unpacks `out, lse = module._flash_attn_fwd(...)`; 2.14+ `out, lse, *_ = ...`
    (torch/nn/attention/_fa4.py, _fa4_run_forward): read from the source where it can be."""
    import torch
    try:
        from torch.nn.attention import _fa4
        source = inspect.getsource(_fa4._fa4_run_forward)
        return not re.search(r"out\s*,\s*lse\s*,\s*\*\s*_\s*=", source)
    except Exception:
        return tuple(int(n) for n in re.findall(r"\d+", torch.__version__)[:2]) < (2, 14)


def pairing(version: str) -> str | None:
    """Why torch's SDPA FA4 route cannot run this flash-attn-4 release, naming the pairs that do; or None."""
    import torch
    beta = re.fullmatch(r"4\.0\.0b(\d+)", version)
    if not _torch_unpacks_two() or (beta and int(beta.group(1)) <= LAST_TWO_VALUE_BETA):
        return None
    return (f"torch {torch.__version__}'s SDPA FA4 route unpacks (out, lse) from flash_attn.cute's _flash_attn_fwd, "
            f"and {DIST} {version} returns more (4 values from 4.0.0b19, 5 from 4.0.0b33): its forward fails with "
            f"'too many values to unpack (expected 2)'. torch 2.11-2.13 pair with {DIST} 4.0.0b3 to "
            f"4.0.0b{LAST_TWO_VALUE_BETA} (read from both packages' source; untried); torch 2.14 and later with any")


# The FA4 route overrides SDPA's flash kernel (same signature: no attn_mask), behind the flash backend's checks.
DENSE_MASK = ("SDPA's FA4 route runs in place of its flash backend, which takes no attn_mask; SDPA has no window "
              "argument, so a window reaches it as a dense mask")


# F.scaled_dot_product_attention has no page-table argument, and its FA4 route runs behind it
PAGED = ("SDPA's FA4 route runs behind F.scaled_dot_product_attention, which has no page table: call FlashAttention-4 "
         "directly (fa4) for a paged cache")


def sdpa_unavailable(w: Workload, env: Environment) -> str | None:
    reason = unavailable(w, env)
    if reason:
        return reason
    from torch.nn import attention
    if not hasattr(attention, "activate_flash_attention_impl"):
        return f"torch {env.torch_version} has no SDPA FA4 route (torch.nn.attention gained it in 2.11)"
    if w.mask == "window":  # (bool and bias were refused above, as for FA4 itself)
        return DENSE_MASK
    if w.page_size:
        return PAGED
    return pairing(installed_version())


class _SdpaFa4(Variant):
    def pin(self) -> ContextManager:
        """SDPA pinned to FLASH_ATTENTION with FA4 active in its place; what was active before comes back on exit."""
        stack = contextlib.ExitStack()
        stack.enter_context(super().pin())
        stack.enter_context(_fa4_active())
        return stack


@contextlib.contextmanager
def _fa4_active():
    from torch.nn import attention
    previous = attention.current_flash_attention_impl()  # None: torch's own FlashAttention-2
    attention.activate_flash_attention_impl("FA4")
    try:
        yield
    finally:
        if previous is not None:
            attention.activate_flash_attention_impl(previous)
        else:
            attention.restore_flash_attention_impl()


def _sdpa_route(x: Inputs) -> torch.Tensor:
    from .sdpa import _sdpa
    return _sdpa(x)


FA4 = Variant(
    key="fa4",
    label="FlashAttention-4",
    forward=fa4_attention,
    scratch_bytes=_fused_scratch,
    check=unavailable,
    fused=True, sparse=True, jit_s=JIT_S, packs="packed", score_mods=("softcap",),
    no_fp8="FlashAttention-4's fp8 forward is Blackwell-only (sm100); on Hopper FA3 runs fp8",
    # flash_attn/cute/interface.py: "SplitKV not supported on SM 9.0"
    no_split_kv_on={"sm90": "its interface asserts it"},
    words={"packed": "flash_attn_varlen_func walks each document's tiles from the cumulative lengths",
           "paged": "FlashAttention-4 reads the table itself (page_table) and loads each page where it lies",
           "host": HOST},
    guess=GuessRow("written for Hopper and Blackwell: wgmma and TMA, as fast as cuDNN or faster",
        speed_rank=1, host_rank=2,
        on_cpu="GPU-only (CuTe DSL): nothing to run on a CPU",
        kernels=(Expected("FlashAttention-4 forward", "fused attention"),),
        backward=(Expected("FlashAttention-4 backward", "fused attention", None, "backward"),)),
)

SDPA_FA4 = _SdpaFa4(
    key="sdpa_fa4",
    label="SDPA · FlashAttention-4",
    forward=_sdpa_route,
    scratch_bytes=_fused_scratch,
    check=sdpa_unavailable,
    sdpa_backend="FLASH_ATTENTION", fused=True, jit_s=JIT_S, top_left=_sdpa_top_left, words={"host": HOST},
    context_parallel=lambda w: ("FA4 through SDPA is untried under context parallel here: its ring handler would call "
                                "the flash op that activate_flash_attention_impl replaces"), no_fp8=NO_FP8,
    guess=GuessRow("FlashAttention-4 in FlashAttention-2's place: one fused {one}",
        speed_rank=1, host_rank=2,
        on_cpu="a GPU route of SDPA: nothing to run on a CPU",
        kernels=(Expected("FlashAttention-4 forward", "fused attention"),),
        backward=(Expected("FlashAttention-4 backward", "fused attention", None, "backward"),)),
)

VARIANTS = (FA4, SDPA_FA4,)  # in the table's order
