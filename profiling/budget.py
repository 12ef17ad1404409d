"""What a request costs before it runs: the memory a measurement may allocate and the wall time it holds the
machine for. `session.plan` asks these; a request over budget is refused up front with a `Refusal` of kind
"memory" or "time" that carries what it needs and what is available.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import time
from dataclasses import dataclass
from typing import Callable

from . import text
from .environment import PEAK_TFLOPS
from .workload import PASS_FLOPS, Refusal, Workload

REFERENCE_CHUNK_BYTES = 256 * 2**20  # the fp64 accuracy check keeps its scores in flight under this


# -- memory: everything a measurement allocates, bounded before anything is -------------------------
ALLOCATOR_SMALL_BYTES = 2**20  # PyTorch's CUDA caching allocator: requests up to this are its small pool's


def forward_bytes(workload: Workload, scratch_bytes: int, packing: str = "padded") -> int:
    """One call's peak beyond q, k, v: its output and the variant's scratch (`Variant.scratch_bytes`); a training
    step's gradients of q, k and v too (each as large as what it is the gradient of). A variant that lays packed
    documents out as their T tokens (`Variant.packing`: "block" or "packed") writes an output and gradients of T rows
    where a padded one writes B·S.
    On a GPU, beside a call whose output is past 1 MiB, the caching allocator's rounding: it hands out a cached
    large-pool block whole when splitting it would leave 1 MiB or less (`should_split`, kSmallSize, in
    c10/cuda/CUDACachingAllocator.cpp), and counts the whole block as allocated."""
    w = workload
    if packing == "padded":
        out, grads = w.output_bytes, w.q_bytes + w.kv_bytes
    else:
        out = w.tokens * w.heads * w.head_dim * w.element_bytes
        grads = out + 2 * w.tokens * w.kv_head_count * w.head_dim * w.element_bytes
    unsplit = ALLOCATOR_SMALL_BYTES if w.device == "cuda" and out > ALLOCATOR_SMALL_BYTES else 0
    return out + scratch_bytes + (grads if w.training else 0) + unsplit


def call_bytes(variant, workload: Workload, env) -> int:
    """One call of `variant` (an attention_variants.Variant): its peak beyond q, k and v, in its own layout, on the
    workload it runs (`Variant.effective`: a twin's quantised)."""
    workload = variant.runs_on(workload)
    return forward_bytes(workload, variant.scratch_bytes(workload, env), variant.packing(workload))


def _attention_slice_bytes(workload: Workload, element_bytes: int, rows: int) -> int:
    """Peak temporaries of `accuracy.attention` in a dtype of `element_bytes` over `rows` query rows: per slice of
    B·H heads, the scores and their scaled copy (then scores and softmax) live together, rows×S each, beside the
    slice's q rows, k, v, a contiguous copy of kᵀ and the product with v."""
    w = workload
    heads = min(w.batch * w.heads, max(1, REFERENCE_CHUNK_BYTES // (rows * w.seq_len * element_bytes)))
    return heads * element_bytes * (2 * rows * w.seq_len + 4 * w.seq_len * w.head_dim + 2 * rows * w.head_dim)


def accuracy_rows(queries: int, keys: int) -> int:
    """How many query rows the fp64 accuracy check compares: all while one row-block of fp64 scores (rows×S)
    stays under REFERENCE_CHUNK_BYTES, else that many (at least 64)."""
    return min(queries, max(64, REFERENCE_CHUNK_BYTES // (keys * 8)))


def timing_bytes(workload: Workload, scratch_bytes: int, env) -> int:
    """What the workload's timing mode holds beside a call: cold, the buffer it writes before each call
    (`timing.flush_bytes`); graph, the captured calls' private memory pool (their allocations, one call's
    reused from one to the next: about one call's)."""
    if workload.timing == "cold":
        from .timing import flush_bytes  # torch: not for the command line's parsing

        return flush_bytes(env)
    return forward_bytes(workload, scratch_bytes) if workload.timing == "graph" else 0


def measure_bytes(workload: Workload, scratch_bytes: int, *, inputs_ready: bool = False,
                  reference_ready: bool = False, compiled: bool = False, setup_bytes: int = 0,
                  timing_bytes: int = 0, holes: bool = True) -> int:
    """Bytes `measurement` may add to what is resident now, at its peak: the inputs and masks (unless ready), the
    first call's output (kept for the accuracy check), a paged cache's pool, the fp64 reference rows (unless ready); and on top, the
    largest of its phases: the variant's setup (flex's block mask), a call (output + scratch), the reference's
    slices, the same check in the workload's dtype, and the accuracy differences in fp64, over `accuracy_rows`
    query rows; a call beside what its timing mode holds (`timing_bytes`); on a CPU, the largest phase once more, for
    the holes it leaves (`holes`: False leaves them out, to see the rest). Plus 5%, and what a measurement holds
    whatever its size (`fixed_bytes`)."""
    w = workload
    checked = accuracy_rows(w.queries, w.seq_len)
    r = w.batch * w.heads * checked * w.head_dim          # elements of the rows checked
    out = w.output_bytes
    fp64_diffs = r * w.element_bytes + 3 * 8 * r           # the rows picked from out, .double(), difference, abs()
    resident = out
    phases = [forward_bytes(w, scratch_bytes) + timing_bytes, fp64_diffs, setup_bytes]
    if not inputs_ready:
        masks = 2 * w.mask_elements if w.causal or w.mask != "flag" else 0  # allowed and hidden, bool
        resident += w.q_bytes + w.kv_bytes + masks + (w.mask_elements * w.element_bytes if w.mask == "bias" else 0) \
            + w.quantisation_bytes  # quantised inputs: their drawn values and, for the reference, dequantised copies
        if w.page_size:  # the paged pool beside the contiguous k and v the reference reads, and its page table
            resident += w.kv_bytes + w.page_table_bytes
    if w.training:  # the output's gradient, q, k, v copies that require grad and their gradients; the fp64
        # reference's gradients kept, its backward's row blocks (the chunk) and the plain one's in the dtype
        inputs = w.q_bytes + w.kv_bytes
        resident += out + 2 * inputs + 8 // w.element_bytes * inputs
        phases.append(inputs + REFERENCE_CHUNK_BYTES)
    if not reference_ready:
        resident += 8 * r                                  # the fp64 reference rows, kept for B
        phases.append(_attention_slice_bytes(w, 8, checked))
        naive = r * w.element_bytes + _attention_slice_bytes(w, w.element_bytes, checked)
        phases.append(max(naive, r * w.element_bytes + fp64_diffs))
    # On a CPU, what a phase frees below blocks still live stays in glibc's arena as holes (a heap is returned only
    # from its top, past the trim threshold), resident while the next phase peaks: the largest phase once more. The
    # same work (naive, S=2048 fp32 training) grew fresh processes here by 480-780 MiB, process to process.
    left = max(phases) if holes and w.device == "cpu" else 0
    return int((resident + max(phases) + left) * 1.05) + fixed_bytes(w.device, compiled)


def reference_bytes(workload: Workload, scratch_bytes: int) -> int:
    """The part of `measure_bytes` from nothing that is the fp64 accuracy check."""
    return measure_bytes(workload, scratch_bytes) - measure_bytes(workload, scratch_bytes, reference_ready=True)


def malloc_arenas() -> int:
    """The glibc malloc arenas a CPU measurement may spread its allocations over: one per allocating thread, torch's
    intra-op threads, the caller's and the profiler's own."""
    import torch

    return torch.get_num_threads() + 2


@functools.cache
def cap_malloc_arenas() -> bool:
    """Cap glibc's arenas at `malloc_arenas()` for this process (mallopt M_ARENA_MAX, -8 in malloc.h): a thread that
    finds its arena locked opens another, up to 8 per core, so on a loaded machine the count, and each arena's
    slack, grew with the load (a fresh process on a loaded 2-core box grew 62 MiB past its bound). False where the C
    library has no mallopt (not glibc): the bound then assumes the arenas the threads make unloaded."""
    import ctypes

    try:
        return ctypes.CDLL("libc.so.6").mallopt(-8, malloc_arenas()) == 1
    except (OSError, AttributeError):
        return False


def fixed_bytes(device: str, compiled: bool = False) -> int:
    """What a measurement holds whatever its size. On CPU: the allocator's slack (glibc keeps freed blocks under its
    mmap threshold, at most 32 MiB, in each thread's arena until 64 MiB are free at its top: the process was seen to
    grow 50-90 MiB past the profiler's live count) in each of `malloc_arenas()` arenas (capped so:
    `cap_malloc_arenas`; a fresh 2-thread process on a loaded 2-core box grew 5 MiB past the count without the
    profiler's); and a process's first measurement (libraries, the profiler's first session: a fresh process grew
    160 MB at S=64), and torch.compile's (flex grew 111 MB more). On a GPU the caching allocator rounds each block
    up: a few MiB."""
    if device != "cpu":
        return 16 * 2**20
    return 64 * 2**20 * malloc_arenas() + 192 * 2**20 + (128 * 2**20 if compiled else 0)


def available_bytes(device: str) -> int:
    """What may be allocated now: 90% of free device memory and of the cached segments the allocator would give
    back (`releasable_cached_bytes`), or 80% of available RAM on CPU."""
    import torch

    if device == "cuda":
        free, _total = torch.cuda.mem_get_info()
        return int((free + releasable_cached_bytes()) * 0.9)
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        return int(int(fields["MemAvailable"].split()[0]) * 1024 * 0.8)
    except (OSError, KeyError, ValueError):
        return int(os.environ.get("ATTENTION_PROFILER_CPU_BUDGET_BYTES", 8 * 2**30))


def releasable_cached_bytes() -> int:
    """The bytes PyTorch's CUDA caching allocator holds in segments no tensor uses: on a failed cudaMalloc it frees
    its cached blocks and retries, but only unsplit ones, whole segments (`release_blocks`: `!block->prev &&
    !block->next`, c10/cuda/CUDACachingAllocator.cpp). A free block in a segment that also holds a live tensor stays
    reserved and serves only a request that fits in it: held, for the large requests a plan is about (an H100 ran out
    of memory asking 32 GiB with 29.42 GiB reserved but unallocated, after earlier comparisons; issue 51)."""
    import torch

    return sum(segment["total_size"] for segment in torch.cuda.memory_snapshot() if segment["allocated_size"] == 0)


# -- time: what a live request holds the machine for, refused up front past a budget --------------
# A live run holds the only measurement slot (and on ZeroGPU the GPU's time), so its wall time is
# predicted before it starts: per forward, GEMM FLOPs at a rate by dtype plus the elementwise passes over
# the S×S scores (a materialising variant's real cost at small head dims), times the calls `measure` makes;
# plus the fp64 reference and the naive check once per workload.


@dataclass(frozen=True)
class DeviceCost:
    gemm_flops_per_s: dict[str, float]   # the GEMMs of a materialising forward (naive), by dtype
    fused_flops_per_s: float             # a fused kernel (flash, efficient, cuDNN, flex): FLOPs halved when causal
    fused_score_s: float                 # its per-score-element cost (blocks of S×S in registers): rules at small D
    score_s: dict[str, float]            # seconds per S×S score element: all of one forward's elementwise passes
    math_score_s: float                  # the same for SDPA's math path (fp32 inside, more passes)
    fp64_flops_per_s: float              # the accuracy reference
    fp64_score_s: float
    kv_s: float                          # per element of K and V as the query heads read them (2·B·H·S·D): naive
    math_kv_s: float                     # the same for SDPA's math path
    fused_kv_s: float                    # the same for a fused kernel
    fp64_kv_s: float                     # the same for the accuracy check (K and V copied per head, to fp64)
    per_measure_s: float                 # profiler session, trace export and parse, accuracy differences
    training_measure_s: float            # the same of a training step (gradients checked, autograd's saved bytes)
    per_comparison_s: float              # first-call costs of a process (CUPTI's start on a GPU; the roofs' copy
                                         # and matmul rates, measured once per process: ~0.1-0.3 s a dtype)
    compile_s: float                     # flex's first torch.compile in a process (a later shape's takes less)


# CPU: measured on 2026-12-06 on this project's 2-core AMD EPYC (a Zen 2 that day: AVX2, no AVX512-BF16), torch
# 2.14, on a machine another session's test suite shared (often ~70% of both cores): rates are from the minimum of
# repeated warm calls (bench/cost_pieces.py), whole comparisons from bench/calibrate_cost.py, read with its column of
# the cores other processes took. Batched fp32 GEMMs of the naive forward's shapes ran at up to 118 GFLOP/s; a naive
# fp32 forward fits ~85 GFLOP/s plus 5-7 ns per score element (19 at D=128), SDPA's math path 4-8 ns beyond its GEMMs
# (24 at D=128; fp32 inside whatever the dtype); a training step took 1.8-3.5x its forward (the model's 3.5x). 16-bit
# GEMMs follow from the fp32 rate and `cpu_16bit_speed`, measured at run time: this Zen 2 reads ~0.025 quiet (bf16
# and fp16 ~40x slower; the probe floors at 0.02) but 0.1-0.4 while other jobs share the cores, which slow its 1 ms
# fp32 product more than the 40 ms bf16 one, so a bf16 prediction made then is short (the guard stops the run); an
# EPYC with AVX512-BF16 (2026-12-01) read 2.0. The naive bf16 forward's elementwise passes cost 30-50 ns a score
# element here. CPU flash: 17-87 GFLOP/s (causal FLOPs) forward in fp32, 8-51 in bf16; its bf16 training step 4-9x
# its fp32 one (priced as fp32's: flash alone in bf16 training can run long). The fp64 reference and the dtype's check:
# 0.04 s quiet at 1x2x1024x64, 0.2-1.3 s forward, up to 23 s with bf16 gradients. A comparison's own costs beside the
# calls: 0.05-0.3 s a variant (profiler session, trace, accuracy), and timing's 20 rounds (the pair's 1 s only while
# the spread stays wide, as under load). flex's first compile in a process took 30 s with inductor's disk cache cold,
# 20 s warm, ~35 s under load (an earlier report), each new shape after it 8-9 s: compile_s is that 35.
# Rates sit 1.3-2x under the best seen, so the prediction errs long: calibrate_cost.py's grid took 0.26-0.90x it with
# under 15% of the cores taken by others (the quietest rows, small and training ones, 0.26-0.37x), 0.4-1.6x with a
# fifth to a third taken and the bf16 probe misreading (bench/calibrate_cost_output.txt; tests/data/cpu_comparisons.csv
# holds the quiet rows, test_cost_model_cpu.py re-predicts them). Before 2026-12-06 the rates were 25 GFLOP/s, 30 ns a score (math 60), fused 15
# GFLOP/s and 15 ns, fp64 5 GFLOP/s and 40 ns, 0.3 s a variant, 1 s a comparison and 0.5 s of timing a variant:
# 3-30x long here (calibrate ratios 0.03-0.16 on 2026-12-01, 0.05-0.31 loaded).
# A decode step (a few queries against a long KV cache) has few scores and FLOPs: K and V, read as the query heads
# read them (Workload.headed_kv_elements: 2·B·H·S·D), rule it, and were priced at nothing, 7-46x short (S=131,072:
# 1.1 s predicted, 7.5 s quiet). Timed on 2026-12-07 (bench/cost_pieces.py --decode; the box then an Intel Xeon,
# AVX512 and AMX; others took 30-50% of the cores for the lowest readings): the naive forward 1.24-1.28 ns per such
# element (its repeat_interleave copies, then the products), SDPA's math path 1.8-3.4, CPU flash 0.3-0.55, the fp64
# reference 4.5-8; set at 2, 3.5, 0.6 and 8. Whole decode comparisons (bench/calibrate_cost.py --decode, at loads of
# 5.5-6.5) took 0.6-1.3x their prediction at that load (tests/data/cpu_comparisons.csv). CPU flash's first call with
# fewer queries than keys took 1-1.6 s once per process (a later shape ~10 ms), not priced.
# GPU: the figures of an L4-class GPU (the slowest the Space is suggested on), scaled to this GPU by datasheet
# peaks (_device_cost; the K-and-V terms set from the L4's 300 GB/s, a few passes a call, not measured), with the
# GPU's first profiler session (~4 s on the H200) and flex's first compile (7.4 s on the H200) on top. The fused
# rate is half the slowest fused kernel measured on the H200 (efficient, 132-181 TFLOP/s at S >= 8192 in the
# recorded sweeps), scaled back to the L4: 8e12 (it was 5e12, 5x under the H200's);
# its per-score cost is 0.01e-9 (it was 0.02e-9, which alone priced efficient at 8x16x32768x64 above what it
# measured). The seconds beside the calls are measured (2026-12-07, tests/test_cost_model_gpu.py re-predicts every
# recorded H200 group): a recorded group's wall time (`Run.wall_s`, one `measure_runs` of all its variants: inputs,
# each variant's setup, first call, accuracy and warm-up, the interleaved timing, host figures, profiled window and
# trace) less its first calls left 0.16-1.17 s a variant that ran (108 groups, 0.4-27 s), save one: the explicit bool
# mask's training step timed cold, 39.6 s for 7 variants whose first calls took 3.9 s (its twin with a bias took 9.4
# s; nothing recorded says where the 35 s went). per_measure_s is 1.0 (a forward), training_measure_s 4.0 (a training
# step: that group at 0.84x its prediction, the other training groups 0.23-0.6x); compile_s is 8 (flex's first
# calls took 2-8 s on the H200 by shape and pass; it was 15). Each group took 0.22-0.93x its prediction, less the
# process's first costs (per_comparison_s: a recording pays them once) where its compiling variants compiled in it; a
# figure off by 2x breaks that band (test_cost_model_gpu). The per-call rates above are not yet re-fit to the
# recorded CUDA-event timings: they err 0.1-85x per call (a dense T×T mask read by a fused kernel, flex in fp32, a
# memory-bound decode step, launch floors), small beside these seconds at the recorded sizes.
COSTS = {
    "cpu": DeviceCost(gemm_flops_per_s={"fp32": 80e9, "bf16": 1.5e9, "fp16": 1.5e9}, fused_flops_per_s=30e9,
                      fused_score_s=3e-9, score_s={"fp32": 8e-9, "bf16": 40e-9, "fp16": 50e-9}, math_score_s=10e-9,
                      fp64_flops_per_s=10e9, fp64_score_s=20e-9, kv_s=2e-9, math_kv_s=3.5e-9, fused_kv_s=0.6e-9,
                      fp64_kv_s=8e-9, per_measure_s=0.1, training_measure_s=0.1, per_comparison_s=0.1,
                      compile_s=35.0),
    "cuda": DeviceCost(gemm_flops_per_s={"fp32": 10e12, "bf16": 50e12, "fp16": 50e12}, fused_flops_per_s=8e12,
                       fused_score_s=0.01e-9, score_s={"fp32": 0.3e-9, "bf16": 0.15e-9, "fp16": 0.15e-9},
                       math_score_s=0.4e-9, fp64_flops_per_s=0.4e12, fp64_score_s=1e-9, kv_s=0.05e-9, math_kv_s=0.05e-9,
                       fused_kv_s=0.02e-9, fp64_kv_s=0.1e-9, per_measure_s=1.0, training_measure_s=4.0,
                       per_comparison_s=6.0, compile_s=8.0),
}
# What `measure` calls: the first call and 2 warm-up calls, 4 under the profiler (which slows them, ~1.2x),
# and timed ones: on a CPU at least 20 interleaved rounds, more while the spread is wide (up to the pair's 1 s
# budget: on a quiet machine the spread settles within the 20, so a tenth of a second each is priced); on a GPU at least 8 event samples, and the host figures' back-to-back and parked
# calls (20 each at least); a GPU forward of a millisecond or more: 2 probes, 8 samples and 4 host rounds
# (timing.LONG_HOST_ROUNDS) of 1 settling, 10 back-to-back (2 from 10 ms) and 2 parked calls.
WARMUP_CALLS = 3              # the first call and the warm-up's, as in the blog (measurement makes them)
PROFILED_CALLS = 3            # the blog's "active 3", after one unrecorded call (capture.profile_calls)
_PROFILER_SLOWDOWN = 1.2
_MIN_TIMED_CALLS = {"cpu": 20, "cuda": 48}
_LONG_TIMED_CALLS = {"cpu": 20, "cuda": 30}
_MID_TIMED_CALLS = {"cpu": 20, "cuda": 62}  # 1 to 10 ms on a GPU: back-to-back rounds of 10 calls
_TIMING_S = {"cpu": 0.15, "cuda": 0.1}


def measured_calls(device: str, forward_s: float) -> tuple[float, int]:
    """The calls one measurement makes of a forward of `forward_s`: (untimed, counted in calls of the warm forward:
    the first and warm-up calls and the profiled ones, slowed by the profiler; timed, the least the timing takes)."""
    from .timing import LONG_CALL_S  # timing's policy (it imports torch: here, not at the top)
    untimed = WARMUP_CALLS + (PROFILED_CALLS + 1) * _PROFILER_SLOWDOWN
    timed = (_MIN_TIMED_CALLS if forward_s < LONG_CALL_S else _MID_TIMED_CALLS if forward_s < 10 * LONG_CALL_S
             else _LONG_TIMED_CALLS)[device]
    return untimed, timed


def _forward_seconds(w: Workload, variant, cost: DeviceCost, env) -> float:
    """One call of `variant` (a Variant) on `w`: fused, SDPA's math path, or naive ops in the dtype; a training
    call (forward and backward) as the pass's FLOP factor says. A dense mask is priced as no mask: the kernel
    computes every tile."""
    score_elements = w.score_elements
    step = PASS_FLOPS[w.call_passes]
    flops = variant.forward_flops(w)
    # fused: never writes S×S (unless its scratch says it takes the math path: SDPA auto on rank 3 before 2.14)
    kv = w.headed_kv_elements  # what rules a decode step, whose scores are few
    if variant.fused and variant.scratch_bytes(w, env) < w.scores_bytes(element_bytes=4):
        return step * (flops / cost.fused_flops_per_s + score_elements * (flops / w.dense_flops) * cost.fused_score_s
                       + kv * cost.fused_kv_s)
    if variant.sdpa_backend is not None:  # SDPA's math path: upcasts to fp32, more passes
        return step * (w.dense_flops / cost.gemm_flops_per_s["fp32"] + score_elements * cost.math_score_s
                       + kv * cost.math_kv_s)
    return step * (w.dense_flops / cost.gemm_flops_per_s[w.drawn] + score_elements * cost.score_s[w.drawn]
                   + kv * cost.kv_s)


class CompileClock:
    """How long a compiling variant's first call should take on a device: the last first call of that variant in
    this process that compiled (measurement reports it), else a prior (torch.compile's from the cost model, a
    variant's own JIT figures)."""

    def __init__(self):
        self._last_s: dict[tuple[str, str], float] = {}

    def record(self, device: str, key: str, seconds: float) -> None:
        self._last_s[device, key] = seconds

    def estimate(self, device: str, variant, training: bool = False) -> tuple[float, str]:
        """(seconds, on what basis, in words)."""
        if (device, variant.key) in self._last_s:
            seconds = self._last_s[device, variant.key]
            return seconds, f"as the last compile here took {text.seconds(seconds)}"
        if variant.jit_s:
            seconds = variant.jit_s[0] + (variant.jit_s[1] if training else 0.0)
            return seconds, f"as its first calls took on {variant.jit_measured_on}"
        return COSTS[device].compile_s, "from the cost model for " + ("this CPU" if device == "cpu" else "a GPU")


compile_clock = CompileClock()


def _measure_seconds(w: Workload, variant, cost: DeviceCost, env) -> float:
    w = variant.runs_on(w)  # a twin's time is its quantised workload's
    forward = _forward_seconds(w, variant, cost, env)
    compile_s = cost.compile_s if variant.compiled else 0.0
    if variant.jit_s:
        compile_s = variant.jit_s[0] + (variant.jit_s[1] if w.training else 0.0)
    untimed, calls = measured_calls(w.device, forward)
    timed = max(calls * forward, _TIMING_S[w.device])
    if w.timing != "warm":  # timed twice: warm, then cold or in a CUDA graph (its capture: a few calls more)
        timed *= 2
    beside = cost.training_measure_s if w.training else cost.per_measure_s
    return compile_s + untimed * forward + timed + beside


def _reference_seconds(w: Workload, cost: DeviceCost) -> float:
    """The fp64 reference and the naive computation in the workload's dtype (`measurement._accuracy`)."""
    rows = accuracy_rows(w.queries, w.seq_len)               # query rows checked, against all S keys
    score_elements = w.batch * w.heads * rows * w.seq_len
    full_flops = w.pair_flops(score_elements)
    fp64 = full_flops / cost.fp64_flops_per_s + score_elements * cost.fp64_score_s
    naive = full_flops / cost.gemm_flops_per_s[w.drawn] + score_elements * cost.score_s[w.drawn]
    copies = w.headed_kv_elements * cost.fp64_kv_s  # K and V per head, in fp64 and in the dtype
    if w.quantised:  # fp64 once more, on the dequantised inputs
        fp64, copies = 2 * fp64, 2 * copies
    if not w.training:
        return fp64 + naive + copies
    # the gradients' reference: every row, a forward and the backward's four GEMMs, in fp64 and in the dtype
    every_row = w.queries / rows
    return (fp64 + naive) * (1 + 3 * every_row) + 2 * copies


SLOWEST_16BIT = 0.02  # the slowest 16-bit speed against fp32 the probe reads (50x): slower is read as this


@functools.cache
def cpu_16bit_speed() -> dict[str, float]:
    """How fast this CPU multiplies 16-bit matrices against fp32 (its fp32 time over theirs), measured once per
    process (by a CPU's first live request) on a 384×384 product (`product_seconds`): with AVX512-BF16 or AMX bf16
    is as fast as fp32 or faster, without it 5-50x slower (the CPU model's fp32 rates were measured; the 16-bit ones
    follow from this)."""
    import torch

    def product(dtype) -> Callable[[], object]:
        x = torch.randn(384, 384).to(dtype)
        return lambda: x @ x
    fp32 = product_seconds(product(torch.float32))
    return {name: min(2.0, max(SLOWEST_16BIT, fp32 / product_seconds(product(dtype))))
            for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16))}


def product_seconds(call: Callable[[], object], calls: int = 3, enough_s: float = 0.02, most: int = 64) -> float:
    """One product's time: the best of the calls after a first (its one-off costs), made until they have taken
    `enough_s` and at least `calls` of them (`most` at the most); a product slower than `enough_s` (fp16 on this EPYC:
    33 ms a call, the first as long within 0.3%) by its first call alone, where the best of three after a first cost
    0.13 s of the first live request's plan. A fast one takes ~20 calls: its best of three, read while other work
    shared the cores, made fp32 look slow and bf16 10x faster against it than it was (0.1-0.4 for ~0.025 quiet)."""
    times: list[float] = []
    while len(times) < most:
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
        if sum(times) >= enough_s and (len(times) > calls or times[0] >= enough_s):
            break
    return min(times[1:] or times)


def _device_cost(device: str, env) -> DeviceCost:
    """The cost model of `device`; a GPU's rates scaled from the L4-class figures by its datasheet bf16 peak
    over the L4's (an H200 is ~8x), its per-element costs likewise; a CPU's 16-bit GEMM rates from its fp32 rate
    and `cpu_16bit_speed`. A GPU of unknown peak keeps the L4's."""
    cost = COSTS[device]
    if device == "cpu":
        fp32 = cost.gemm_flops_per_s["fp32"]
        return dataclasses.replace(cost, gemm_flops_per_s={"fp32": fp32, **{
            d: fp32 * speed for d, speed in cpu_16bit_speed().items()}})
    peak = ((env.peak_tflops or {}).get("bf16") if env is not None else None) if device == "cuda" else None
    if not peak:
        return cost
    k = peak / PEAK_TFLOPS["L4"]["bf16"]  # the datasheet peak of the GPU the cuda figures were set for
    return dataclasses.replace(
        cost, gemm_flops_per_s={d: r * k for d, r in cost.gemm_flops_per_s.items()},
        fused_flops_per_s=cost.fused_flops_per_s * k, fused_score_s=cost.fused_score_s / k,
        score_s={d: t / k for d, t in cost.score_s.items()}, math_score_s=cost.math_score_s / k,
        fp64_flops_per_s=cost.fp64_flops_per_s * k, fp64_score_s=cost.fp64_score_s / k, kv_s=cost.kv_s / k,
        math_kv_s=cost.math_kv_s / k, fused_kv_s=cost.fused_kv_s / k, fp64_kv_s=cost.fp64_kv_s / k)


def machine_load() -> float | None:
    """The machine's 1-minute load average (runnable processes, any owner's), where the OS tells it; where
    ATTENTION_PROFILER_CPU_LOAD is set, that figure instead (a host that knows its share; the tests' idle machine,
    which every process they start inherits)."""
    try:
        return float(os.environ["ATTENTION_PROFILER_CPU_LOAD"])
    except (KeyError, ValueError):  # unset, or not a number: the OS's figure
        pass
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def load_slowdown(load: float | None) -> float:
    """How much longer a CPU measurement takes beside `load` runnable processes (`machine_load()`, read as it is
    planned): its torch threads share the cores with them, each runnable getting cores / (load + threads) of a
    core, so a measurement of t threads on n cores runs (load + t) / n times as long once that passes 1. The load
    counts this process's own recent work too (a measurement just ended), which errs long. Two CPU burners on this
    2-core box (load ~2, 2 threads): 2x; load 8: 5x."""
    if not load:
        return 1.0
    import torch

    cores = os.cpu_count() or 1
    threads = min(torch.get_num_threads(), cores)
    return max(1.0, (load + threads) / cores)


def energy_seconds(workload: Workload) -> float:
    """What measuring a variant's energy per call adds on a GPU (measurement's `energy`): its loop of
    timing.ENERGY_LOOP_S at least, and the call it ends inside (a tenth of a second is priced for it); nothing on a
    CPU, which has no such counter."""
    from .timing import ENERGY_LOOP_S  # timing's policy (it imports torch: here, not at the top)
    return ENERGY_LOOP_S + 0.1 if workload.device == "cuda" else 0.0


def predicted_seconds(workload: Workload, variants, env=None, *, reference_ready: bool = False,
                      reasons: dict[str, str | None] | None = None, load: float | None = None,
                      energy: bool = False) -> float:
    """Wall time a live measurement of `variants` (Variants) on `workload` should take on `env`'s device: warm-up,
    timing and profiled window of each, with `energy` its energy loop (`energy_seconds`), plus the reference once
    (unless already computed); on a CPU, times `load_slowdown` of `load` (the machine's load now where not given). A
    variant that cannot run there (`reasons`, the plan's) costs nothing: it is refused before its first call."""
    cost = _device_cost(workload.device, env)
    total = 0.0 if reference_ready else _reference_seconds(workload, cost) + cost.per_comparison_s
    if not reference_ready:  # each twin's quantisation adds its own fp64 pass on its dequantised inputs
        quantised = {v.runs_on(workload) for v in variants} - {workload}
        total += sum(_reference_seconds(q, cost) - _reference_seconds(q.unquantised, cost) for q in quantised)
    if reasons is None and env is not None:
        from attention_variants import reasons as why_not
        reasons = why_not(variants, workload, env)
    for variant in variants:
        if not (reasons or {}).get(variant.key):
            total += _measure_seconds(workload, variant, cost, env) + (energy_seconds(workload) if energy else 0.0)
    if workload.device != "cpu":
        return total
    return total * load_slowdown(machine_load() if load is None else load)


def check_time(workload: Workload, variants, env, budget_s: float, *, reference_ready: bool = False,
               reasons: dict[str, str | None] | None = None, energy: bool = False) -> float:
    """The predicted seconds of measuring `variants` on `workload` (with `energy`: their energy loops); a Refusal of
    kind "time" past `budget_s`."""
    variants = list(variants)
    load = machine_load() if workload.device == "cpu" else None
    seconds = predicted_seconds(workload, variants, env, reference_ready=reference_ready, reasons=reasons,
                                load=load or 0.0, energy=energy)
    if seconds > budget_s:
        names = " vs ".join(v.key for v in variants)
        speed = cpu_16bit_speed().get(workload.dtype, 1.0) if workload.device == "cpu" else 1.0
        floor = "at least " if speed <= SLOWEST_16BIT else ""  # the probe's reading stops there
        slow = (f"; {workload.dtype} matrix products run {floor}{text.times(1 / speed)} slower than fp32 on this CPU"
                if speed < 0.5 else "")
        busy = (f" at the machine's load now (load average {load:.1f}: {text.times(load_slowdown(load))} an idle "
                "run's time)" if load_slowdown(load) > 1 else "")
        raise Refusal("seq_len", workload.seq_len,
                      f"{names} at {workload.words()} would take about {text.seconds(seconds)}{busy}{slow}, over "
                      f"the {text.seconds(budget_s)} a live run may hold the machine; lower seq_len, batch or "
                      "heads" + (", or choose fp32" if slow else ""), kind="time", needed=seconds, available=budget_s)
    return seconds


def memory_refusal(variant, workload: Workload, env, available: int) -> Refusal | None:
    """Why measuring `variant` (a Variant) on `workload` from nothing would not fit in `available` bytes, or None.
    The one memory rule: the plan of a comparison and each point of a sweep ask it; a twin's on the workload it runs
    (`Variant.effective`)."""
    workload = variant.runs_on(workload)
    scratch = variant.scratch_bytes(workload, env)
    needed = measure_bytes(workload, scratch, compiled=variant.compiled, setup_bytes=variant.setup_bytes(workload, env),
                           timing_bytes=timing_bytes(workload, scratch, env))
    if needed <= available:
        return None
    reference = reference_bytes(workload, scratch)
    holes = needed - measure_bytes(workload, scratch, compiled=variant.compiled, holes=False,
                                   setup_bytes=variant.setup_bytes(workload, env),
                                   timing_bytes=timing_bytes(workload, scratch, env))
    parts = [f"{text.size(scratch)} its own at its peak", f"{text.size(reference)} the fp64 accuracy reference"]
    if holes > 0:  # a CPU: its largest phase once more (measure_bytes)
        parts.append(f"{text.size(holes)} for the holes a CPU's allocator leaves")
    return Refusal("seq_len", workload.seq_len,
                   f"{variant.key} at {workload.words()} needs about {text.size(needed)}, of which "
                   f"{', '.join(parts[:-1])} and {parts[-1]} (the rest its inputs, output and margin); "
                   f"{text.size(available)} free on {text.device_words(workload.device)}; lower seq_len, batch or "
                   "heads", kind="memory", needed=needed, available=available)
