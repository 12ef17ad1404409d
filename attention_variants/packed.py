"""Packed documents the ways their users write them, each over the documents end to end ([T, H, D], T tokens in all):
SDPA and attention written by hand over one packed sequence under a block-diagonal bool mask, nested jagged tensors
through SDPA, and
`torch.nn.attention.varlen.varlen_attn` with cumulative lengths. (Padding to B×S is the other SDPA variants' and
naive's way; FlexAttention's document mask and FlashAttention-4's varlen entry are in flex.py and fa4.py.)

Each takes B equal sequences as B documents of S too, so it can be set against any of the others on any batch. What
the running torch offers is read at run time: whether it has `varlen_attn`, and whether that takes `is_causal`
(torch 2.11) or a `window_size` of (-1, 0) for the causal pattern (2.14), or `enable_gqa` (2.12 on).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import functools
import inspect
import logging
import warnings


from profiling.environment import Environment
from profiling.scores import every, pipeline
from profiling.workload import MAX_TOKENS, Inputs, Workload

from .base import Variant
from .guesses import Expected, GEMM_PV, GEMM_QK, GuessRow, NAIVE_BACKWARD, SCALE, SOFTMAX
from .naive import NO_FP8 as NAIVE_NO_FP8
from .sdpa import NO_FP8, SMALL, _auto_scratch, _fused_scratch, _math_scratch

if TYPE_CHECKING:  # torch, imported where a variant runs: its file is read (keys, guesses, traits) without it
    import torch


def one_sequence(w: Workload, **changes) -> Workload:
    """The batch as one sequence of its T tokens (what a block-diagonal mask and the varlen kernels index), for the
    memory models: B = 1, S = T, none of a decode step's, a dense mask's, rank 3's or context parallel's fields (the
    packed ways refuse them), timed warm; every other field (heads, dtype, pass, a score transform, ...) as `w`'s."""
    return w.replace(batch=1, seq_len=w.tokens, lengths=None, q_len=None, page_size=None, mask="flag", window=None,
                     rank=4, gpus=1, cp_rotate="allgather", timing="warm", seed=0).replace(**changes)


def _documents_only(w: Workload) -> str | None:
    """What every packed way refuses: a decode step, a dense mask, rank 3 (the workload refuses these with packed
    documents; here they are refused for B equal sequences too)."""
    if w.q_len is not None or w.page_size:
        return "it reads each document's own queries against its own keys: leave q_len and page_size empty"
    if w.mask != "flag":
        return f"it sets each document's pattern itself, causal or not: choose mask=flag, not mask={w.mask}"
    if w.rank == 3:
        return "it reads [tokens, H, D]: choose rank 4"
    if w.tokens > MAX_TOKENS:  # B equal sequences past what one packed sequence may hold (documents are held to it)
        return (f"it reads the batch as one sequence of B·S = {w.tokens:,} tokens, more than the {MAX_TOKENS:,} one "
                f"sequence may hold: choose a smaller B or S")
    return None


def _gqa(w: Workload) -> dict:
    return {"enable_gqa": True} if w.groups > 1 else {}


# -- one packed sequence under a block-diagonal mask --------------------------------------------------------
def block_diagonal(x: Inputs) -> torch.Tensor:
    """SDPA over the T tokens as one sequence, each token allowed its own document's keys (and, causal, those not
    after it): the [T, T] bool mask is built every call from the tokens' document ids, as a training loop builds it
    for each new batch of lengths; SDPA has no causal flag to combine with a mask, so the causal pattern is in it."""
    import torch.nn.functional as F
    p, w = x.packed(), x.workload
    allowed = p.document[:, None] == p.document[None, :]                    # [T, T]
    if w.causal:
        allowed &= p.position[:, None] >= p.position[None, :]
    q, k, v = (t.transpose(0, 1).unsqueeze(0) for t in (p.q, p.k, p.v))     # [1, H, T, D] views
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, **_gqa(w))


def naive_block_diagonal(x: Inputs) -> torch.Tensor:
    """Attention written by hand over the T tokens as one sequence, as naive writes it (out-of-place masked_fill),
    each token hidden from other documents' keys (and, causal, from later ones) by a [T, T] mask built every call."""
    import torch
    p, w = x.packed(), x.workload
    hidden = p.document[:, None] != p.document[None, :]                     # [T, T]
    if w.causal:
        hidden |= p.position[:, None] < p.position[None, :]
    q, k, v = (t.transpose(0, 1) for t in (p.q, p.k, p.v))                 # [H, T, D] views
    if w.groups > 1:                                                        # a head of k and v per query head
        k, v = (t.repeat_interleave(w.groups, dim=0) for t in (k, v))
    scores = pipeline(q, k, x, hidden=hidden)                               # [H, T, T]: scaled, transformed, filled
    return (torch.softmax(scores, dim=-1) @ v).unsqueeze(0)                 # [1, H, T, D]


def _naive_block_scratch(w: Workload, env: Environment) -> int:
    """The [T, T] mask, kept through the call; beside it first the comparison or-ed into it (freed once or-ed), then
    naive's own over one sequence of the T tokens (its score matrices are H·T×T)."""
    from .naive import _scratch
    return w.tokens ** 2 + max(w.tokens ** 2, _scratch(one_sequence(w), env))


def _block_scratch(w: Workload, env: Environment) -> int:
    """The [T, T] bool mask, kept through the call; beside it first the comparison it is and-ed with (freed once
    and-ed), then SDPA's own over one sequence of T tokens given a dense bool mask (its additive copy, and what the
    backend it takes keeps)."""
    return w.tokens ** 2 + max(w.tokens ** 2, _auto_scratch(one_sequence(w, causal=True, mask="bool"), env))


# -- nested jagged tensors ----------------------------------------------------------------------------------
class _FxTracingNotice(logging.Filter):
    """torch.nested.nested_tensor_from_jagged asks `is_fx_tracing()`, which logs once a process that the function is
    deprecated in favour of others: torch's note to torch's own callers (seen in the H200 server's log at the warm-up's
    first nested call), no operator's concern. Only that line is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("is_fx_tracing will return true")


logging.getLogger("torch.fx._symbolic_trace").addFilter(_FxTracingNotice())


def _jagged(t: torch.Tensor, p, shortest: int) -> torch.Tensor:
    """[T, H, D] values as a nested jagged tensor [B, H, j, D], the shortest and longest documents' lengths given up
    front (without them SDPA's jagged path reads them back from the device, a sync each call)."""
    import torch
    nested = torch.nested.nested_tensor_from_jagged(t, p.offsets, min_seqlen=shortest, max_seqlen=p.max_len)
    return nested.transpose(1, 2)


def nested(x: Inputs) -> torch.Tensor:
    """SDPA on nested jagged tensors (`layout=torch.jagged`) made from the packed values and offsets: no mask, the
    causal flag within each document. Returns the output's values, [T, H, D]. On a CPU the only jagged backend is math
    (torch/nested/_internal/sdpa.py), so SDPA is pinned to it inside the call there: a CUDA build on a machine without
    a GPU would otherwise ask the GPU whether cuDNN can run."""
    import torch.nn.functional as F
    p, w = x.packed(), x.workload
    q, k, v = (_jagged(t, p, min(w.documents)) for t in (p.q, p.k, p.v))
    if w.device == "cpu":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.MATH):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=w.causal, **_gqa(w))
    else:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=w.causal, **_gqa(w))
    return out.transpose(1, 2).values()


@functools.lru_cache(maxsize=16)
def _nested_refusal(device: str, dtype: str, causal: bool, heads: int, kv_heads: int, head_dim: int,
                    training: bool) -> str | None:
    """What this torch says when SDPA is given nested jagged tensors of this kind (two tiny documents), in its own
    words (it logs each backend's reason, then raises); None where one backend takes them. Read, not assumed from a
    version: torch 2.14's math path refuses is_causal=True on nested tensors, its GPU kernels take it."""
    import torch
    w = Workload(batch=2, heads=heads, kv_heads=None if kv_heads == heads else kv_heads, seq_len=8, head_dim=head_dim,
                 dtype=dtype, causal=causal, passes="fwd+bwd" if training else "fwd", device=device,
                 lengths=(5, 8))
    x = w.make_inputs()
    x = x.with_grad() if training else x
    said: list[str] = []

    class Heard(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage().strip())
    logger, heard = logging.getLogger("torch.nested._internal.sdpa"), Heard()
    logger.addHandler(heard)
    propagates, logger.propagate = logger.propagate, False  # heard here, said in the refusal: not in the server's log
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # each disabled backend warns as it is skipped: this call only asks
            out = nested(x)
        if training:
            out.backward(torch.ones_like(out))
    except RuntimeError as error:
        reasons, backend = [], ""
        for line in said:  # "<backend> kernel not used because:", then its reasons
            if line.endswith("not used because:"):
                backend = line
            elif line and (device == "cuda" or backend.startswith("Math")):  # a CPU has the math path only
                reasons.append(line)
        return "; ".join(dict.fromkeys(reasons)) + f" → {str(error).splitlines()[0]}" if reasons else str(error)
    finally:
        logger.removeHandler(heard)
        logger.propagate = propagates
    return None


def _nested_check(w: Workload, env: Environment) -> str | None:
    import torch
    reason = _documents_only(w)
    if reason:
        return f"nested tensors: {reason}"
    if env.torch_version != torch.__version__ or (w.device == "cuda" and not torch.cuda.is_available()):
        return None  # another machine's run (a recording): asked of this torch, the answer would be this one's
    refusal = _nested_refusal(w.device, w.dtype, w.causal, w.heads, w.kv_head_count, w.head_dim, w.training)
    return f"torch {env.torch_version} refuses nested jagged tensors for this input: {refusal}" if refusal else None


def _nested_scratch(w: Workload, env: Environment) -> int:
    """On a GPU a fused kernel over the T tokens (an fp32 log-sum-exp per query row; a training step's fp32 dQ
    accumulator). On a CPU the math path over strided nested copies of q, k and v, one document's scores at a time in
    fp32: bounded by the math path's over the batch padded to B×S."""
    if w.device == "cpu":
        return _math_scratch(w, env)
    return _fused_scratch(one_sequence(w), env, "flash")


# -- varlen_attn -------------------------------------------------------------------------------------------
@functools.cache
def _varlen_parameters() -> frozenset[str]:
    """varlen_attn's parameters in the running torch, read once (a call must not pay for inspect)."""
    from torch.nn.attention.varlen import varlen_attn
    return frozenset(inspect.signature(varlen_attn).parameters)


def varlen(x: Inputs) -> torch.Tensor:
    """`varlen_attn(q, k, v, cu_seq_q, cu_seq_k, max_q, max_k)` over [T, H, D], the causal pattern as the running
    torch spells it: `is_causal=True` (2.11) or `window_size=(-1, 0)` (2.14)."""
    from torch.nn.attention.varlen import varlen_attn

    p, w = x.packed(), x.workload
    kwargs = _gqa(w)
    if w.causal:
        kwargs |= {"is_causal": True} if "is_causal" in _varlen_parameters() else {"window_size": (-1, 0)}
    return varlen_attn(p.q, p.k, p.v, p.cu_seqlens, p.cu_seqlens, p.max_len, p.max_len, **kwargs)  # scale: 1/√D


def _varlen_check(w: Workload, env: Environment) -> str | None:
    try:
        import torch.nn.attention.varlen  # noqa: F401
    except ImportError:
        return f"torch {env.torch_version} has no torch.nn.attention.varlen (varlen_attn arrived in 2.11)"
    reason = _documents_only(w)
    if reason:
        return f"varlen_attn: {reason}"
    if w.device != "cuda":
        return ("varlen_attn calls aten::_flash_attention_forward (or cuDNN's), which have no CPU kernel: it runs on "
                "a GPU")
    if w.dtype not in ("fp16", "bf16"):
        return f"varlen_attn's FlashAttention kernels take fp16 and bf16 only (the inputs are {w.dtype})"
    if w.groups > 1 and "enable_gqa" not in _varlen_parameters():
        return f"torch {env.torch_version}'s varlen_attn has no enable_gqa (it arrived in 2.12): kv heads as heads"
    return None


def _varlen_scratch(w: Workload, env: Environment) -> int:
    """A fused kernel over the T tokens: an fp32 log-sum-exp per query row (a training step's fp32 dQ besides)."""
    return _fused_scratch(one_sequence(w), env, "flash") + SMALL


SDPA_DOCMASK = Variant(
    key="sdpa_docmask",
    label="SDPA · block-diagonal mask",
    forward=block_diagonal,
    scratch_bytes=_block_scratch,
    check=lambda w, env: (f"a block-diagonal mask: {r}" if (r := _documents_only(w)) else None),
    sdpa_backend="auto", fused=True, packs="block", packed_only=True, no_fp8=NO_FP8,
    context_parallel=lambda w: ("its block-diagonal mask is an attn_mask, which context parallel's ring handlers "
                                "refuse (PyTorch: \"attn_bias is not supported yet\")"),
    words={"packed": "SDPA given the mask chose its {backend} backend"},
    guess=GuessRow("one fused {one} over the T tokens, the mask built first",
        speed_rank=3, host_rank=3, kernels=(
        Expected("build the block-diagonal mask", "elementwise", "aten::eq", cpu_category="other"),
        Expected("fused attention over one sequence", "fused attention")),
        backward=(Expected("fused attention backward", "fused attention", None, "backward"),)),
)

NAIVE_DOCMASK = Variant(
    key="naive_docmask",
    label="Naive · block-diagonal mask",
    forward=naive_block_diagonal,
    scratch_bytes=_naive_block_scratch,
    check=lambda w, env: (f"a block-diagonal mask: {r}" if (r := _documents_only(w)) else None),
    packs="block", packed_only=True, score_mods=every, no_fp8=NAIVE_NO_FP8,
    guess=GuessRow("{count} ops over the T tokens: the mask, then naive's",
        speed_rank=6, host_rank=4, kernels=(
        Expected("build the block-diagonal mask", "elementwise", "aten::ne", cpu_category="other"),
        GEMM_QK, SCALE, Expected("block-diagonal mask", "elementwise", "aten::masked_fill"), SOFTMAX,
        GEMM_PV), backward=NAIVE_BACKWARD),
)

SDPA_NESTED = Variant(
    key="sdpa_nested",
    label="SDPA · nested jagged",
    forward=nested,
    scratch_bytes=_nested_scratch,
    check=_nested_check,
    sdpa_backend="auto", fused=True, packs="packed", packed_only=True, no_fp8=NO_FP8,
    context_parallel=lambda w: ("nested jagged tensors have no fixed sequence dimension for context parallel to "
                                "shard (it splits dim 2 of [B, H, S, D])"),
    words={"packed": "SDPA's nested path chose its {backend} backend",
           "host_path": "nested tensors' subclass dispatch"},
    guess=GuessRow("one fused {one} over the documents, no padding", speed_rank=2, host_rank=4,
        on_cpu="SDPA's math path, document by document",
        kernels=(Expected("fused attention over the documents", "fused attention"),),
        backward=(Expected("fused attention backward", "fused attention", None, "backward"),)),
)

VARLEN = Variant(
    key="varlen",
    label="varlen_attn",
    forward=varlen,
    scratch_bytes=_varlen_scratch,
    check=_varlen_check,
    fused=True, packs="packed", packed_only=True, call="varlen_attn",
    # varlen_attn's own choice of kernel, by the aten op it calls (torch/nn/attention/varlen.py, _varlen_attn)
    packed_ops={"aten::_flash_attention_forward": "FlashAttention", "aten::_cudnn_attention_forward": "cuDNN"},
    words={"packed": "varlen_attn called `{op}` ({lib}) with the cumulative lengths",
           "host_path": "varlen_attn's custom op"},
    guess=GuessRow("FlashAttention's varlen {one}: the documents' own pairs only",
        speed_rank=1, host_rank=2,
        on_cpu="GPU-only (FlashAttention): nothing to run on a CPU",
        kernels=(Expected("flash attention, variable length", "fused attention"),),
        backward=(Expected("flash attention backward, variable length", "fused attention", None,
        "backward"),)),
)

VARIANTS = (SDPA_DOCMASK, NAIVE_DOCMASK, SDPA_NESTED, VARLEN,)  # in the table's order
