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

The CPU flash kernel (cpu/FlashAttentionKernel.cpp in PyTorch 2.14, read 2026-12-07), by the paths a CPU takes:
- every CPU, every dtype: per-thread `buf` (fp32: a query block × key block of scores, row max and sum, an output
  block) and, for 16-bit inputs, `buf_reduced` (the scores block in 16 bits); lines 455-467 of cpu_flash_attention.
- AVX-512 with AMX (oneDNN's ISA at least avx512_core_amx for bf16, avx512_core_amx_fp16 for fp16: CPUBlas.cpp
  `Pack::could_pack`), when `need_pack` holds (lines 431-447: both lengths ≥ 64 for bf16, ≥ 16 for fp16, and each
  thread's products ≥ 4x / 1x the K packed): K and V copied whole into oneDNN's VNNI layout (`key_t_reorder`,
  `value_t_reorder`, lines 481-498), a per-thread transpose block and, for an odd head dim, a padded query block
  (lines 500-512). Measured exact on an AMX Xeon: bf16 forwards 1.0-2.4x what the unpacked kernel takes.
- AVX2 and AVX-512 without AMX (or oneDNN capped below it, ONEDNN_MAX_CPU_ISA): no packing; the products are
  `cpublas::gemm` calls writing fp32, which book nothing.
- its backward, every CPU: per-thread fp32 `buf` and 16-bit `buf_reduced` of two blocks each and a row sum (lines
  888-929); for 16-bit inputs where the CPU's 16-bit products are oneDNN's (`gemm_path`), the three products that
  write 16-bit gradients book oneDNN scratchpads per call, one per thread at a time (measured on the AMX Xeon:
  30-338 KiB a call in bf16, 41-870 KiB in fp16; none in fp32).
"""
from __future__ import annotations

import re


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
    import torch
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
    """The CPU flash kernel's query and key block sizes (flash_attention_kernel_impl: 256 queries from 768 on, 64 from
    192, else 32; 512 keys), each at most the length it splits."""
    q = 256 if queries >= 768 else 64 if queries >= 192 else 32
    return min(q, queries), min(512, keys)


def _onednn_isa_allows(level: str) -> bool:
    """Whether oneDNN may use `level` ("AMX" or "AMX_FP16"): its ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA), when set,
    caps the ISA `dnnl::get_effective_cpu_isa()` reports."""
    import os

    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "ALL").upper()
    return cap == "ALL" or ("AMX_FP16" in cap if level == "AMX_FP16" else "AMX" in cap)


def flash_may_pack(dtype: str, features: tuple[str, ...] | None) -> bool:
    """Whether the CPU flash kernel's forward may pack K and V for oneDNN's AMX micro-kernels (`cpublas::could_pack`,
    ATen/native/CPUBlas.cpp: mkldnn enabled and oneDNN's effective ISA at least avx512_core_amx for bf16,
    avx512_core_amx_fp16 for fp16); where the flags are unknown, it may."""
    import torch
    if dtype == "fp32" or not torch.backends.mkldnn.is_available() or not torch.backends.mkldnn.enabled:
        return False
    if dtype == "bf16":
        return (features is None or "amx_bf16" in features) and _onednn_isa_allows("AMX")
    return (features is None or "amx_fp16" in features) and _onednn_isa_allows("AMX_FP16")


def flash_packs(dtype: str, features: tuple[str, ...] | None, batch: int, heads: int, kv_heads: int, queries: int,
                keys: int, head_dim: int, threads: int) -> bool:
    """Whether the forward packs (`need_pack` in cpu_flash_attention, PyTorch 2.14): it may (`flash_may_pack`), both
    lengths reach 64 (bf16) or 16 (fp16), and each thread's products are at least 4x (bf16) or 1x (fp16) the K it
    packs. The products are counted over every key, as a call without `is_causal` makes them: a causal call packs
    less often, never more."""
    if not flash_may_pack(dtype, features):
        return False
    threshold, ratio = (64, 4) if dtype == "bf16" else (16, 1)
    if keys < threshold or queries < threshold:
        return False
    q_split, _ = flash_splits(queries, keys)
    per_thread = -(-batch * heads * -(-queries // q_split) // threads)
    return per_thread * q_split * keys * head_dim >= ratio * batch * kv_heads * keys * head_dim


def flash_buffers(w, features: tuple[str, ...] | None, threads: int, backward: bool) -> int:
    """The CPU flash kernel's buffers (FlashAttentionKernel.cpp, PyTorch 2.14), all threads' (`w`: a Workload).
    Forward (cpu_flash_attention): per thread an fp32 block of scores, its row max and sum and an output block, and
    for 16-bit inputs a 16-bit copy of the scores block (`buf`, `buf_reduced`); where it packs (`flash_packs`), K
    transposed and V in oneDNN's VNNI layout (`key_t_reorder`, `value_t_reorder`: B·Hkv·S·D each, lengths and head
    dim padded to even), a per-thread transpose block of kvSplit×D and, for an odd head dim, a padded query block.
    Its products write fp32 and book no workspace (measured: fp16 on AVX512-FP16 without AMX).
    Backward (cpu_flash_attention_backward): per thread two fp32 blocks (and their 16-bit copies) and a row sum; its
    three products that write 16-bit gradients (dV += Pᵀ·dO, dQ += dS·K, dK += dSᵀ·Q) go through oneDNN where the
    CPU's 16-bit path is oneDNN's (`gemm_path`), each booking its scratchpad per call, one call per thread at a time:
    `_gemm_call_scratch`."""
    element_bytes = w.element_bytes
    q, kv = flash_splits(w.queries, w.seq_len)
    reduced = element_bytes == 2
    if backward:
        blocks = threads * (8 * q * kv + (2 * element_bytes * q * kv if reduced else 0) + 4 * q)
        if not reduced or gemm_path(w.dtype, features) == "blas":
            return blocks
        d = w.head_dim
        largest = max(_gemm_call_scratch(kv, q, d, threads), _gemm_call_scratch(q, kv, d, threads))
        return blocks + min(threads, w.batch * w.kv_head_count) * largest
    packs = flash_packs(w.dtype, features, w.batch, w.heads, w.kv_head_count, w.queries, w.seq_len, w.head_dim,
                        threads)
    even_kv = kv + (kv % 2 if packs else 0)
    blocks = threads * (4 * (q * kv + 2 * q + q * w.head_dim) + (element_bytes * q * even_kv if reduced else 0))
    if not packs:
        return blocks
    d = w.head_dim + w.head_dim % 2
    tail = (w.seq_len - 1) % kv + 1
    padded_keys = (w.seq_len - 1) // kv * even_kv + tail + tail % 2
    reorder = w.batch * w.kv_head_count * (d * w.seq_len + padded_keys * w.head_dim)
    transpose = threads * kv * w.head_dim + (threads * q * d if w.head_dim % 2 else 0)
    return blocks + element_bytes * (reorder + transpose)


def _gemm_call_scratch(m: int, k: int, n: int, threads: int) -> int:
    """A bound on the scratchpad oneDNN's matmul books for one M×K by K×N product with a 16-bit output
    (src/cpu/matmul/brgemm_matmul_utils.cpp `init_scratchpad`: per thread of the primitive, a copy of A's block
    (M_blk × LDA, LDA at most K padded and one cache line more), of B's (LDB × K) and an accumulator (M_blk × LDC),
    in at most 4-byte elements, each dimension padded to 64, and a 4 KiB AMX tile buffer), for the primitive's
    `threads`. Measured on an AMX Xeon (2 threads): 30-338 KiB (bf16) and 41-870 KiB (fp16), 0.5-0.6x this."""
    def pad(x: int) -> int:
        return -(-x // 64) * 64

    per_thread = 4 * (pad(m) * (pad(k) + 64) + pad(k) * pad(n) + pad(m) * pad(n)) + 4096
    return threads * per_thread
