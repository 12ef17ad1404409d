"""FlashInfer's decode kernel (PyPI `flashinfer-python`), as vLLM and SGLang call it: a `BatchDecodeWithPagedKVCache
Wrapper` planned once per workload (its setup: the plan reads the page table on the host and may not be captured in a
CUDA graph), then `run` per step. A contiguous [B, Hkv, S, D] cache is read in place in its "HND" layout as pages of
16 tokens (`contiguous_pages`); a paged pool [pages, P, Hkv, D] in its "NHD" layout through the page table. Its
kernels are compiled by its JIT with the machine's `nvcc` on a configuration's first plan (12.9 s on an H100) and kept
in its cache folder (~/.cache/flashinfer) across processes. An optional dependency: without it the variant is listed
as unavailable."""
from __future__ import annotations

import functools
import importlib.util
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from profiling.environment import Environment
from profiling.workload import Inputs, Workload

from .base import Variant
from .guesses import Expected, GuessRow
from .optional import Library
from .sdpa import SMALL

if TYPE_CHECKING:  # torch, imported where a variant runs: its file is read (keys, guesses, traits) without it
    import torch

LIBRARY = Library("flashinfer-python", "flashinfer", "0.6.18.post1", "FlashInfer")
WORKSPACE_BYTES = 128 * 2**20   # the float workspace its examples give a wrapper (split partials land in it)
INT_WORKSPACE_BYTES = 8 * 2**20  # the wrapper's own int workspace (plan info, request indices)
JIT_S = (16.0, 0.0)             # first plan+run of a decode configuration on H100s: 12.9 s here, 15.8 s in issue 54
HEAD_DIMS = (64, 128, 256)
PAGE = 16                       # a contiguous cache is read as pages of this many tokens (vLLM's default block)
# The query heads per kv head its decode kernels are compiled for: DISPATCH_GQA_GROUP_SIZE in its include/flashinfer/
# utils.cuh (0.6.18.post1's), read from the installed header where there is one. Any other group fails at its plan
# ("Unsupported group_size: 32", seen on an H100 at 32 query heads over one kv head).
GROUP_SIZES = (1, 2, 3, 4, 6, 8)


@functools.cache
def group_sizes() -> tuple[int, ...]:
    """The group sizes the installed FlashInfer's header dispatches (GROUP_SIZES where it cannot be read), found
    without importing it (an import takes ~2 s)."""
    spec = importlib.util.find_spec("flashinfer")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        header = Path(folder) / "data" / "include" / "flashinfer" / "utils.cuh"
        if header.is_file():
            body = header.read_text(errors="replace")
            start = body.find("#define DISPATCH_GQA_GROUP_SIZE")
            macro = body[start:body.find("#define", start + 1)] if start >= 0 else ""
            if found := re.findall(r"group_size == (\d+)", macro):
                return tuple(sorted({int(n) for n in found}))
    return GROUP_SIZES


def unavailable(w: Workload, env: Environment) -> str | None:
    reason = LIBRARY.missing()
    if reason:
        return reason
    if shutil.which("nvcc") is None:
        return "FlashInfer compiles its kernels on first use with CUDA's nvcc, which is not on this machine's PATH"
    if env.compute_capability and env.compute_capability[0] < 8:
        return f"FlashInfer needs sm80 or newer ({env.sm})"
    if w.q_len != 1 or w.lengths is not None:
        return ("this variant is FlashInfer's decode kernel: one new query per sequence (q_len 1) over a KV cache; "
                "its prefill kernels are not among these variants")
    if w.training:
        return "FlashInfer's decode kernels have no backward"
    if w.dtype not in ("fp16", "bf16"):  # (dtype fp8 is refused by the declaration: fp8=("kv",))
        return (f"FlashInfer's decode, as this variant calls it, runs fp16 and bf16 (and fp8 caches); the inputs are "
                f"{w.dtype}")
    if w.mask in ("bool", "bias"):
        return "FlashInfer's decode takes no dense mask or bias: a sliding window (window_left) or none"
    if w.head_dim not in HEAD_DIMS:
        return f"FlashInfer's decode kernels take head dims {', '.join(map(str, HEAD_DIMS))} (it is {w.head_dim})"
    if w.seq_len % PAGE and not w.page_size:
        return (f"FlashInfer reads a contiguous cache as pages of {PAGE} tokens: S must be a multiple of {PAGE} "
                f"({w.seq_len})")
    if w.rank == 3:
        return "FlashInfer reads q as [B, H, D] and the cache by kv head: a rank-3 [B·H, S, D] call has no kv heads"
    if w.groups not in group_sizes():
        return (f"FlashInfer's decode kernels are compiled for {', '.join(map(str, group_sizes()))} query heads per kv "
                f"head; this workload has {w.groups} ({w.heads} over {w.kv_head_count})")
    return None


def contiguous_pages(t: torch.Tensor) -> torch.Tensor:
    """[B, Hkv, S, D] as a pool of HND pages [pages, Hkv, PAGE, D], a strided view (no copy): page i starts PAGE·D
    elements after page i-1, a head S·D after the one before, so page j of sequence b is page b·Hkv·S/PAGE + j.
    FlashInfer splits a sequence's keys at its pages: one page of S tokens per sequence would leave it one block per
    (sequence, kv head) and no split (0.35 against 0.10 ms on an H100 at B=8, S=8,192)."""
    b, h, s, d = t.shape
    pages = (b - 1) * h * (s // PAGE) + s // PAGE       # up to the last sequence's last page: within the storage
    return t.as_strided((pages, h, PAGE, d), (PAGE * d, s * d, d, 1))


def _plan(x: Inputs):
    """The wrapper planned for these inputs, the cache it reads and an fp8 cache's scales: (wrapper, (k, v), scales)."""
    import flashinfer
    import torch

    w = x.workload
    device, i32 = x.q.device, torch.int32
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    window = w.window - 1 if w.mask == "window" else -1
    if x.page_table is not None:  # the pool [pages, P, Hkv, D], each sequence's pages in its table row
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
        indptr = torch.arange(w.batch + 1, device=device, dtype=i32) * (w.seq_len // w.page_size)
        indices, last, page, cache = x.page_table.flatten().to(i32), w.page_size, w.page_size, (x.k_pages, x.v_pages)
    else:  # [B, Hkv, S, D] read in place as pages of PAGE tokens in its HND layout (`contiguous_pages`)
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "HND")
        per_row = w.seq_len // PAGE
        indptr = torch.arange(w.batch + 1, device=device, dtype=i32) * per_row
        rows = torch.arange(w.batch, device=device, dtype=i32)[:, None] * (w.kv_head_count * per_row)
        indices = (rows + torch.arange(per_row, device=device, dtype=i32)).flatten()
        last, page, cache = PAGE, PAGE, (contiguous_pages(x.k), contiguous_pages(x.v))
    wrapper.plan(indptr, indices, torch.full((w.batch,), last, device=device, dtype=i32), w.heads, w.kv_head_count,
                 w.head_dim, page, window_left=window, logits_soft_cap=w.softcap or 0.0, q_data_type=x.q.dtype,
                 kv_data_type=x.k.dtype, sm_scale=x.scale)
    return wrapper, cache, scales(x)


def scales(x: Inputs) -> dict[str, float]:
    """An fp8 KV cache: `k_scale` and `v_scale` as `run` takes them, floats (FlashInfer's decode.py multiplies sm_scale
    by k_scale and the output by v_scale), read once at the plan; {} for a 16-bit cache."""
    return {f"{name}_scale": scale.item() for name, scale in x.descales().items()}


def setup(x: Inputs) -> bool:
    """Plan once per workload (a host-side schedule of the keys over the GPU's blocks), kept with the inputs; True
    when it was planned already."""
    done = x.is_prepared("flashinfer")
    x.prepared("flashinfer", lambda: _plan(x))
    return done


def flashinfer_decode(x: Inputs) -> torch.Tensor:
    """One decode step: q [B, H, 1, D] read as [B, H, D]; the output back as [B, H, 1, D]."""
    wrapper, cache, scaled = x.prepared("flashinfer", lambda: _plan(x))
    return wrapper.run(x.q[:, :, 0], cache, **scaled).unsqueeze(2)


FLASHINFER = Variant(
    key="flashinfer",
    label="FlashInfer decode",
    forward=flashinfer_decode,
    scratch_bytes=lambda w, env: 4 * w.batch * w.heads + SMALL,
    setup=setup,
    setup_bytes=lambda w, env: WORKSPACE_BYTES + INT_WORKSPACE_BYTES,
    check=unavailable, gpu_only=True,
    fused=True, sparse=True, jit_s=JIT_S, jit_measured_on="an H100", score_mods=("softcap",), fp8=("kv",),
    call="FlashInfer's decode",
    no_fp8="this variant calls FlashInfer's decode with an fp8 KV cache beside 16-bit queries, not fp8 queries",
    kernel_patterns={"batchdecodewithpagedkvcache": "fused attention", "mergestates": "fused attention"},
    split_kv=("batchdecodewithpagedkvcache", "mergestates"),
    words={"setup": "its plan",
           "setup_how": "`plan` lays out on the host, once per workload, which blocks read which pages; later calls "
                        "reuse it, and it cannot be captured in a CUDA graph.",
           "split": "FlashInfer's plan (on the host, once) cuts each sequence's keys into chunks so that the "
                    "(sequence, kv head, chunk) blocks fill the GPU, each writing an fp32 partial output and its "
                    "log-sum-exp",
           "paged": "FlashInfer reads the table itself (indices and indptr, planned once) and loads each page where it "
                    "lies"},
    guess=GuessRow("a serving engine's decode kernel: splits the keys to fill the GPU, at the cache's read speed",
        speed_rank=1, host_rank=2,
        on_cpu="GPU-only (CUDA code compiled on first use): nothing to run on a CPU",
        kernels=(Expected("FlashInfer batch decode", "fused attention"),)),
)

VARIANTS = (FLASHINFER,)
