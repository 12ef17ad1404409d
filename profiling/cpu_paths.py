"""What PyTorch's CPU paths allocate for attention, as far as the profiler (c10's CPU allocator) sees it: which
path a 16-bit matrix product takes on this CPU, the workspace it books, and the CPU flash kernel's per-thread buffers.
The memory estimates of the variants (`attention_variants`) are built from these rules, so that they bound the peak
on every x86-64 CPU PyTorch runs on, whatever its instructions, not on the one they were measured on.

Read in PyTorch 2.14 (aten/src/ATen/native/LinearAlgebra.cpp `bmm_out_or_baddbmm_`, CPUBlas.cpp, mkldnn/Matmul.cpp,
cpu/FlashAttentionKernel.cpp) and oneDNN 3.12 (the release the 2.14 wheels ship; src/cpu/matmul/brgemm_matmul_utils.cpp,
gemm_bf16_matmul.cpp), and measured with torch.profiler(profile_memory=True) on an AVX2 CPU (2026-12-02):
- fp32, and 16-bit on a CPU without the instructions oneDNN's 16-bit matmul needs: MKL's batched gemm or ATen's own
  gemm, which allocate nothing through c10.
- bf16 on AVX-512 without AVX512_BF16 (Skylake-SP, Cascade Lake, Ice Lake Xeons): oneDNN's gemm-based matmul books a
  whole fp32 copy of the output as its scratchpad.
- bf16 with AVX512_BF16 / AMX-BF16 / AVX-VNNI-2, fp16 with AVX512-FP16 / AMX-FP16 / AVX-VNNI-2: oneDNN's brgemm
  matmul books per-thread blocks of A, B and C in at most 4-byte elements (a block of at most 256 rows of A with its
  whole K, 64 columns of B, an fp32 C block of at most 256 × 1024), reused across the batch.
ideep runs oneDNN with a user scratchpad allocated through c10 (mkldnn/IDeepRegistration.cpp), so the profiler
counts these. Where the CPU's flags cannot be read, the estimate takes the larger of every path.
"""
from __future__ import annotations

import re

import torch

# The flags that decide the path (Linux /proc/cpuinfo names).
FEATURES = ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16",
            "avx_vnni", "avx_vnni_int8", "avx_ne_convert")


def read_features() -> tuple[str, ...] | None:
    """This CPU's flags among FEATURES, or None where /proc/cpuinfo cannot be read (the estimate then assumes any)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            found = re.search(r"^flags\s*:(.*)$", cpuinfo.read(), re.M)
    except OSError:
        return None
    return tuple(f for f in FEATURES if found and f in found.group(1).split()) if found else None


def gemm_path(dtype: str, features: tuple[str, ...] | None) -> str:
    """The path a CPU batched matrix product of `dtype` takes: "blas" (no counted workspace), "gemm_acc" (an fp32 copy
    of the output), "brgemm" (per-thread blocks), or "any" (the flags are unknown: the larger of all)."""
    if dtype == "fp32" or not torch.backends.mkldnn.is_available() or not torch.backends.mkldnn.enabled:
        return "blas"
    if features is None:
        return "any"
    flags = set(features)
    avx512_core = {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags
    avx2_vnni_2 = {"avx_vnni", "avx_vnni_int8", "avx_ne_convert"} <= flags
    if dtype == "bf16":
        if not (avx512_core or avx2_vnni_2):
            return "blas"
        return "brgemm" if {"avx512_bf16", "amx_bf16"} & flags or avx2_vnni_2 else "gemm_acc"
    return "brgemm" if "avx512_fp16" in flags or "amx_fp16" in flags or avx2_vnni_2 else "blas"


def _brgemm_per_thread(k: int, n: int) -> int:
    """oneDNN brgemm's scratchpad per thread for an M×K by K×N product: a ≤256-row A block with its K (and a 64-wide
    B block) in 4-byte copies, a ≤256×1024 fp32 C block, batch descriptors and the tile buffer."""
    n_padded = min(-(-n // 64) * 64, 1024)
    return 4 * (256 + 64) * (k + 64) + 4 * 256 * n_padded + 32 * k + 8192


def gemm_workspace(dtype: str, features: tuple[str, ...] | None, batch: int, m: int, k: int, n: int,
                   threads: int) -> int:
    """Bytes a batched (batch × M×K by K×N) product of `dtype` allocates through c10 beside its output."""
    path = gemm_path(dtype, features)
    acc = 4 * (batch * m * n + 64 * threads)
    blocks = threads * _brgemm_per_thread(k, n)
    return {"blas": 0, "gemm_acc": acc, "brgemm": blocks, "any": max(acc, blocks)}[path]


def flash_splits(queries: int, keys: int) -> tuple[int, int]:
    """The CPU flash kernel's query and key block sizes (flash_attention_kernel_impl)."""
    q = 256 if queries >= 768 else 64 if queries >= 192 else 32
    return min(q, queries), min(512, keys)


def flash_buffers(queries: int, keys: int, head_dim: int, element_bytes: int, threads: int, backward: bool) -> int:
    """The CPU flash kernel's per-thread buffers, all threads': an fp32 block of scores, its row max and sum and an
    output block (and a 16-bit copy of the scores block for 16-bit inputs); its backward's two fp32 blocks (and their
    16-bit copies) and a row sum. Measured exact on the AVX2 CPU above."""
    q, kv = flash_splits(queries, keys)
    reduced = element_bytes == 2
    if backward:
        return threads * (8 * q * kv + (2 * element_bytes * q * kv if reduced else 0) + 4 * q)
    return threads * (4 * (q * kv + 2 * q + q * head_dim) + (element_bytes * q * kv if reduced else 0))
