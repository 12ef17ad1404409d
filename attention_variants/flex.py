"""FlexAttention: attention written as a score/mask modification, compiled into one Triton kernel."""
from __future__ import annotations

from typing import TYPE_CHECKING

import functools
import logging
import os
import warnings


from profiling.environment import Environment
from profiling.scores import elementwise, flex_score_mod
from profiling.workload import Inputs, Workload

from .base import Variant
from .guesses import Expected, GuessRow
from .sdpa import SMALL

if TYPE_CHECKING:  # torch, imported where a variant runs: its file is read (keys, guesses, traits) without it
    import torch


@functools.cache
def _compiled_flex():
    import torch
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


@functools.lru_cache(maxsize=4)
def _paged_mask(causal: bool, queries: int, keys: int, page_size: int, batch: int, device: str,
                page_table: torch.Tensor):
    """The BlockMask over a paged cache, as `torch.nn.attention.experimental._paged_attention.PagedAttention` makes
    it: a logical block mask with key blocks of one page (causal for the last Lq positions, or none), converted to
    the physical pages through the page table, its mask_mod reading each key's logical position back from the
    physical one. The PagedAttention holds the pool as the inputs lay it out (the shuffled pages of a server whose
    sequences came and went) rather than as `reserve` would hand pages out to a fresh pool, in order."""
    import torch
    from torch.nn.attention.experimental._paged_attention import PagedAttention
    from torch.nn.attention.flex_attention import create_block_mask, noop_mask

    pages = keys // page_size
    paged = PagedAttention(n_pages=batch * pages, page_size=page_size, max_batch_size=batch, device=device)
    table = page_table.long()                                                      # [B, S/P] logical -> physical
    paged.page_table[:, :pages] = table
    paged.physical_to_logical.scatter_(1, table, torch.arange(pages, device=device).expand(batch, pages))
    paged.capacity.fill_(keys)
    paged.empty_pages = []
    offset = keys - queries
    if causal:
        def mask_mod(b, h, q_idx, kv_idx):
            return q_idx + offset >= kv_idx
    else:
        mask_mod = noop_mask
    logical = create_block_mask(mask_mod, B=batch, H=None, Q_LEN=queries, KV_LEN=keys, device=device,
                                BLOCK_SIZE=(128, page_size))  # a key block is a page: the table maps whole blocks
    return paged.convert_logical_block_mask(logical)


@functools.lru_cache(maxsize=4)
def _document_mask(lengths: tuple[int, ...], causal: bool, device: str):
    """The BlockMask of packed documents over one sequence of their T tokens, as attention-gym's `document_mask`
    writes it: a key is seen where it is in the query's document (and, causal, not after it); built once per
    (lengths, causal, device): a new batch of lengths is a new mask."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    sizes = torch.tensor(lengths, device=device)
    document = torch.repeat_interleave(torch.arange(len(lengths), device=device), sizes)   # [T]

    def mask_mod(b, h, q_idx, kv_idx):
        same = document[q_idx] == document[kv_idx]
        return same & (q_idx >= kv_idx) if causal else same
    tokens = sum(lengths)
    return create_block_mask(mask_mod, B=None, H=None, Q_LEN=tokens, KV_LEN=tokens, device=device)


def _mask_key(w: Workload) -> tuple | None:
    if not w.causal:
        return None
    kind = w.mask if w.mask in ("bool", "window") else "causal"
    return kind, w.queries, w.seq_len, w.window, w.device


def _mask_of(x: Inputs):
    w = x.workload
    if w.lengths is not None:
        return _document_mask(w.lengths, w.causal, w.device)
    if x.page_table is not None:
        return _paged_mask(w.causal, w.queries, w.seq_len, w.page_size, w.batch, w.device, x.page_table)
    key = _mask_key(w)
    if key is None:
        return None
    return _block_mask(*key, x.allowed if key[0] == "bool" else None)


# PyTorch's own words where its context parallel refuses flex (torch/distributed/tensor/experimental/_context_parallel)
FLEX_ALLTOALL = "FlexAttention CP doesn't support alltoall yet."


def _context_parallel(w: Workload) -> str:
    if w.cp_rotate == "alltoall":
        return f"PyTorch: \"{FLEX_ALLTOALL}\" (FlexAttention's context parallel gathers K/V)"
    return ("FlexAttention's context parallel is another path (a sharded BlockMask through _ContextParallel's "
            "module wrapper, all-gather only) that this app does not run yet")


def setup(x: Inputs) -> bool:
    """Build (or find built) the block mask before the first call: `create_block_mask` is paid once per mask.
    Returns whether it was found built."""
    cache = _document_mask if x.workload.lengths is not None else _paged_mask if x.page_table is not None \
        else _block_mask
    hits = cache.cache_info().hits
    _mask_of(x)
    return cache.cache_info().hits > hits


def _setup_bytes(w: Workload, env: Environment) -> int:
    """What building the block mask allocates, while it lasts (measured on this CPU and the H200: 10 bytes per
    query-key pair): `create_block_mask` evaluates the mask_mod over the whole Lq×S grid, window or not, with no
    chunking (a bool grid), then pads it to 128-multiples and sums blocks through an int64 copy: Lq·S + 9·Lq'·S'.
    Nothing where no mask is built: not causal, or a position mask this process built already."""
    padded = lambda n, block=128: -(-n // block) * block  # noqa: E731
    if w.lengths is not None:  # over one sequence of the T tokens (and the [T] document ids the mask_mod reads)
        return w.tokens ** 2 + 9 * padded(w.tokens) ** 2 + 16 * w.tokens
    if w.page_size:  # a mask per batch row over the logical keys, then PagedAttention's tables over the whole pool
        pool = w.batch * w.pages                                                  # physical pages
        logical = w.batch * (w.queries * w.seq_len + 9 * padded(w.queries) * padded(w.seq_len, w.page_size))
        return logical + 2 * 8 * w.batch * pool + 2 * 4 * w.batch * pool  # int64 page tables, int32 block indices
    key = _mask_key(w)
    if key is None or (key in _built and key[0] != "bool"):
        return 0
    return w.queries * w.seq_len + 9 * padded(w.queries) * padded(w.seq_len)


def flex_attention(x: Inputs) -> torch.Tensor:
    q, k, v = x.q, x.k, x.v
    if x.workload.lengths is not None:  # packed documents: one sequence of the T tokens under the document mask
        p = x.packed()
        q, k, v = (t.transpose(0, 1).unsqueeze(0) for t in (p.q, p.k, p.v))  # [1, H, T, D] views
    if x.page_table is not None:  # the pool [pages, P, Hkv, D] as PagedAttention's cache [1, Hkv, pages·P, D]: a view
        w = x.workload
        k, v = (t.permute(2, 0, 1, 3).view(1, w.kv_head_count, -1, w.head_dim) for t in (x.k_pages, x.v_pages))
    if q.dim() == 3:  # flex wants [B, H, S, D]: view [B*H, S, D] as one batch of B*H heads
        q, k, v = (t.unsqueeze(0) for t in (q, k, v))
    kwargs = {"enable_gqa": True} if x.workload.groups > 1 else {}
    score_mod = flex_score_mod(x)  # the score transforms, then the bias (the scale is flex's, the mask its block mask)
    if score_mod is not None:
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
    import torch
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
    if w.page_size:
        try:
            import torch.nn.attention.experimental._paged_attention  # noqa: F401
        except ImportError:
            return f"torch {env.torch_version} has no torch.nn.attention.experimental._paged_attention.PagedAttention"
    if w.device == "cpu" and w.training and _cpu_backward_refusal():
        return f"torch {env.torch_version}: {_cpu_backward_refusal()}: measure its forward alone, or on a GPU"
    return None


def _scratch_bytes(w: Workload, env: Environment) -> int:
    """The call's memory beyond its output (every recorded H200 peak): the Triton template writes an fp32
    log-sum-exp and row max per query row; its backward an fp32 delta per row besides, and no dK, dV at every query
    head for grouped-query attention. Under 128 queries on a GPU flex may take its decoding kernel, which keeps an fp32
    partial output, row max and sum per split of the keys (two splits per SM over B·Hkv: at most 320 for 160 SMs)
    for a combine after it. The block mask is built in `setup`, before the call (`_setup_bytes`).
    A training step over packed documents ([1, H, T, D] views of the [T, H, D] tokens): the recorded H200 peak (torch
    2.11) is one [T, H, D] tensor over the rest of this model (15.5 of 16 MiB at T=8,192, H=16, D=64, bf16), a copy
    that the compiled backward makes of a tensor in the views' layout (which one the trace does not say): budgeted as
    that one copy."""
    rows = w.heads * (w.tokens if w.lengths is not None else w.batch * w.queries)
    splits = 0
    if w.device == "cuda" and w.queries < 128:
        splits = max(1, 320 // (w.batch * w.kv_head_count))
    relaid = w.tokens * w.heads * w.head_dim * w.element_bytes if w.lengths is not None and w.training else 0
    return (12 if w.training else 8) * rows + splits * rows * (w.head_dim + 2) * 4 + relaid + SMALL


FLEX = Variant(
    key="flex",
    label="FlexAttention (compiled)",
    forward=flex_attention,
    scratch_bytes=_scratch_bytes,
    check=_check,
    setup=setup,
    setup_bytes=_setup_bytes,
    fused=True, sparse=True, compiled=True, packs="block", score_mods=elementwise, context_parallel=_context_parallel,
    no_fp8="this variant calls flex_attention on 16- and 32-bit inputs only (no descales reach its score_mod)",
    words={"setup": "the block mask",
           "setup_how": "`create_block_mask` evaluated the mask at every query–key pair once and kept which tiles are "
                        "empty, full or partial; later calls with this mask reuse it (a new S or window builds another).",
           "packed": "the document BlockMask, built once before the calls, marks the tiles between documents empty",
           "paged": "PagedAttention's block mask names each key block's physical page; its mask_mod maps keys back"},
    guess=GuessRow("one generated {one}, close to flash; the first call compiles",
        speed_rank=3, host_rank=2, kernels=(
        Expected("flex_attention, generated", "triton"),),
        backward=(Expected("flex_attention backward, generated", "triton", None, "backward"),)),
)

VARIANTS = (FLEX,)  # in the table's order
