"""Guess + reference + trace + environment -> notes.

Each rule below is a small function `(run, peers) -> Note | None` that looks for one lesson in a
measured run: it reads only the run (its kernels, host ops, timings, warnings and environment),
the variant's `Guess`, the blog's A100 reference and, where a ratio needs one, the other runs of
the same workload (`peers`). A rule that finds nothing returns None, and every piece of evidence a
note quotes comes from the run it is about (or, for a ratio, from the peer it names). Rules decide
from what the trace shows and the versions it ran with, never from a GPU's name. `RULES` lists them
in the order notes are shown.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Callable, Iterable

from attention_variants import VARIANTS, Guess

from . import dispatch
from .reference import BLOG
from .results import Comparison, HostOp, Kernel, Note, Run

Peers = dict[str, Run]  # variant key -> an ok run of the same workload in the same environment
Rule = Callable[[Run, Peers], Note | None]

DEFAULT_SHARED_MEMORY_BYTES = 48 * 1024  # per block, unless a kernel opts in to more
REGISTERS_PER_SM = 65536                 # 64 K 32-bit registers per SM, from compute capability 5.0 on
INT32_INDEX_LIMIT = 2**31 - 1            # what a 32-bit index reaches; elementwise kernels index with it
SIGNIFICANT = 1.05                       # a ranking flips only when the gap is over 5% (timing noise)


# -- evidence formatting ----------------------------------------------------------------------
def _us(ms: float) -> str:
    return f"{ms * 1000:.1f} µs"


def _mib(nbytes: float) -> str:
    if nbytes < 1024:
        return f"{nbytes:g} bytes"
    return f"{nbytes / 2**20:,.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 1024:,.1f} KiB"


def _ratio(slow: float, fast: float) -> str:
    return f"{slow / fast:.1f}x"


def kernel_name(k: Kernel, width: int = 64) -> str:
    """The readable name, cut to `width`."""
    name = k.short_name or k.name
    return name if len(name) <= width else name[:width - 1] + "…"


def kernel_line(k: Kernel) -> str:
    """'nvjet_sm90_tst_256x128_… · 84.4 µs/fwd · occupancy 0% · 168 registers · 208.2 KiB shared · cuLaunchKernelEx'"""
    parts = [kernel_name(k)]
    if round(k.calls_per_forward, 2) != 1:
        parts.append(f"×{k.calls_per_forward:g}")
    parts.append(f"{k.us_per_forward:.1f} µs/fwd")
    if k.occupancy_pct is not None:
        parts.append(f"occupancy {k.occupancy_pct:g}%")
    if k.registers_per_thread is not None:
        parts.append(f"{k.registers_per_thread} registers")
    if k.shared_memory_bytes:
        parts.append(f"{_mib(k.shared_memory_bytes)} shared")
    if k.launch_api:
        parts.append(k.launch_api)
    return " · ".join(parts)


def host_line(op: HostOp) -> str:
    """'aten::clone · 1 call/fwd · 51.7 µs (7.8 µs self)' — CPU time inside the forward's range."""
    calls = f"{op.calls_per_forward:g} call{'s' if op.calls_per_forward != 1 else ''}/fwd"
    return f"{op.name} · {calls} · {op.total_us_per_forward:.1f} µs ({op.self_us_per_forward:.1f} µs self)"


def _host_op(run: Run, name: str) -> HostOp | None:
    return next((h for h in run.host_ops if h.name == name), None)


def _kernels(run: Run, *categories: str) -> list[Kernel]:
    return [k for k in run.kernels if k.category in categories]


def _aten_op(k: Kernel) -> str | None:
    """The ATen op a generic kernel runs, as trace.short_name shows it: 'elementwise_kernel [where]' -> 'where'."""
    found = re.search(r"\[(\w+)\]$", k.short_name)
    return found.group(1) if found else None


def _guess(run: Run) -> Guess | None:
    variant = VARIANTS.get(run.variant)
    return variant.guess if variant else None


def _label(run: Run) -> str:
    variant = VARIANTS.get(run.variant)
    return variant.label if variant else run.variant


def _pinned(run: Run) -> str | None:
    """'flash', 'efficient', 'cudnn', 'math', 'auto', or None for a variant that is not SDPA."""
    variant = VARIANTS.get(run.variant)
    backend = variant.sdpa_backend if variant else None
    return "auto" if backend == "auto" else dispatch.backend_key(backend)


def _sdpa_op(run: Run) -> HostOp | None:
    return next((h for h in run.host_ops if h.name in dispatch.SDPA_BACKEND_OPS), None)


def _on_gpu(run: Run) -> bool:
    return run.ok and run.environment.device == "cuda"


def _versions(run: Run) -> str:
    env = run.environment
    parts = [p for p in (env.sm, f"cuDNN {env.cudnn_label}" if env.cudnn_label else None,
                         f"torch {env.torch_version}") if p]
    return ", ".join(parts)


# -- the guess against the trace --------------------------------------------------------------
def hidden_memcpy(run: Run, peers: Peers) -> Note | None:
    """Out-of-place masked_fill copies the whole S×S score matrix before filling it: a Memcpy nobody wrote."""
    masked, clone = _host_op(run, "aten::masked_fill"), _host_op(run, "aten::clone")
    copies = _kernels(run, "memcpy")
    if not run.ok or masked is None or clone is None or (run.environment.device == "cuda" and not copies):
        return None
    copy = _host_op(run, "aten::copy_")
    evidence = [kernel_line(k) for k in copies] + [host_line(op) for op in (masked, clone, copy) if op]
    guess = _guess(run)
    if guess and guess.kernels_per_forward and run.kernels_per_forward:
        evidence.append(f"{run.kernels_per_forward:g} kernels per forward; the guess was {guess.kernels_per_forward}, "
                        "none of them a copy")
    where = "a device-to-device Memcpy" if copies else "aten::clone → aten::copy_ on the CPU"
    return Note(
        title="A hidden copy: out-of-place masked_fill clones the scores",
        evidence=evidence,
        cause=(f"`scores.masked_fill(mask, -inf)` must leave `scores` untouched, so PyTorch clones it "
               f"({_mib(run.workload.scores_bytes())}, the whole S×S matrix) and fills the clone: {where} "
               "that appears nowhere in the code. `masked_fill_` under `no_grad` writes into the scores and "
               "the copy disappears."))


def inplace_no_copy(run: Run, peers: Peers) -> Note | None:
    """masked_fill_ writes into the scores: no clone, no Memcpy, so in place saves time as well as memory."""
    fill = _host_op(run, "aten::masked_fill_")
    if not run.ok or fill is None or _host_op(run, "aten::masked_fill") or _host_op(run, "aten::clone") \
            or _kernels(run, "memcpy"):
        return None
    evidence = [host_line(fill)]
    evidence += [kernel_line(k) for k in run.kernels if _aten_op(k) == "masked_fill"]
    if run.kernels_per_forward:
        evidence.append(f"no Memcpy among the {run.kernels_per_forward:g} kernels per forward")
    naive = peers.get("naive")
    copies = _kernels(naive, "memcpy") if naive else []
    if copies and naive.kernels_per_forward:
        evidence.append(f"out-of-place naive on the same inputs: {naive.kernels_per_forward:g} kernels, "
                        f"{kernel_line(copies[0])}, GPU {naive.gpu_ms:.3f} ms vs {run.gpu_ms:.3f} ms here")
    return Note(
        title="In place is faster too: masked_fill_ leaves no copy",
        evidence=evidence,
        cause=("The guess was that in place only saves memory. Out-of-place `masked_fill` first clones the "
               "S×S scores; `masked_fill_` fills them where they are, so the clone, and the time it takes to "
               "move the whole matrix through memory, are gone."))


def workspace_memsets(run: Run, peers: Peers) -> Note | None:
    """cuBLAS and cuDNN zero a small workspace before their kernels: Memsets the code never asked for."""
    memsets = _kernels(run, "memset")
    guess = _guess(run)
    if not _on_gpu(run) or not memsets or (guess and any("memset" in k.lower() for k in guess.kernels)):
        return None
    order = run.kernels  # in order of first launch
    followers = {kernel_name(order[i + 1]) for i, k in enumerate(order[:-1]) if k.category == "memset"}
    evidence = [kernel_line(k) for k in memsets] + [f"launched just before: {name}" for name in sorted(followers)]
    libraries = sorted({"cuDNN" if "cudnn" in f.lower() else "cuBLAS" if f.startswith(("nvjet", "sm", "cutlass"))
                        else "the library" for f in followers})
    count = sum(k.calls_per_forward for k in memsets)
    return Note(
        title=f"{count:g} Memset{'s' if count != 1 else ''} per forward that no line of code asked for",
        evidence=evidence,
        cause=(f"{' and '.join(libraries)} clear{'s' if len(libraries) == 1 else ''} a small workspace with "
               "cudaMemsetAsync before launching the kernel that follows (flags or partial sums it expects zeroed). "
               f"It takes {sum(k.us_per_forward for k in memsets):.1f} µs per forward, but the profiler counts it "
               f"as a kernel, so the count is {count:g} higher than the ops written."))


def split_launches(run: Run, peers: Peers) -> Note | None:
    """An S×S tensor past 2^31 elements is split into several launches: 32-bit indexing, more kernels than ops."""
    w = run.workload
    elements = w.batch * w.heads * w.seq_len ** 2
    if not _on_gpu(run) or elements <= INT32_INDEX_LIMIT:
        return None
    launches = Counter()
    for k in run.kernels:
        if _aten_op(k):
            launches[_aten_op(k)] += k.calls_per_forward
    evidence = []
    for op, calls in launches.items():
        # the op that launched them: aten::mul, or the in-place aten::masked_fill_ that masked_fill calls
        host = max((h for h in (_host_op(run, f"aten::{op}"), _host_op(run, f"aten::{op}_")) if h),
                   key=lambda h: h.calls_per_forward, default=None)
        if host and calls > host.calls_per_forward:
            evidence.append(f"{op}: {calls:g} kernel launches per forward for {host.calls_per_forward:g} {host.name} "
                            f"call{'s' if host.calls_per_forward != 1 else ''}")
    if not evidence:
        return None
    return Note(
        title="More launches than ops: the S×S tensor is past 32-bit indexing",
        evidence=evidence + [f"one S×S tensor: {w.batch}·{w.heads}·{w.seq_len}² = {elements:,} elements "
                             f"> 2³¹−1 = {INT32_INDEX_LIMIT:,}"],
        cause=("PyTorch's elementwise kernels index with 32-bit integers for speed. A tensor with more "
               "elements than that reaches is cut into pieces and the kernel is launched once per piece, "
               "so the same op shows up as several kernels: same work, more launches."))


def fp32_on_cuda_cores(run: Run, peers: Peers) -> Note | None:
    """FP32 GEMMs run as FFMA on CUDA cores, not on tensor cores: math's upcast, or fp32 inputs with TF32 off."""
    slow = [k for k in run.kernels if k.precision and "CUDA cores" in k.precision]
    guess = _guess(run)
    if not _on_gpu(run) or not slow or (guess and "CUDA cores" in guess.precision):
        return None
    evidence = [f"{kernel_line(k)} · {k.precision}" for k in slow]
    if run.workload.dtype in ("bf16", "fp16"):
        upcasts = _host_op(run, "aten::_to_copy")
        evidence.append(f"inputs are {run.workload.dtype}" + (f"; {host_line(upcasts)}" if upcasts else ""))
        cause = ("The math backend computes in fp32 for 16-bit inputs: it casts q, k and v up, so cuBLAS gets "
                 "fp32 GEMMs and, with TF32 off by default, runs them as FFMA on CUDA cores while the tensor "
                 "cores idle. `torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)` keeps them 16-bit.")
    else:
        evidence.append(f"inputs are {run.workload.dtype}")
        cause = ("With fp32 inputs and `torch.backends.cuda.matmul.allow_tf32` off (PyTorch's default) cuBLAS "
                 "computes true FP32 products, which tensor cores cannot do: FFMA on CUDA cores. TF32 "
                 "(`torch.set_float32_matmul_precision('high')`) or 16-bit inputs bring the tensor cores in.")
    return Note(title="FP32 GEMMs on CUDA cores, not tensor cores", evidence=evidence, cause=cause)


def math_kernel_count(run: Run, peers: Peers) -> Note | None:
    """SDPA's math backend is PyTorch's reference path written in ATen ops: one line of Python, about 20 kernels."""
    if not _on_gpu(run) or dispatch.backend_key(run.backend) != "math":
        return None
    per_op = Counter()
    for k in run.kernels:
        per_op[_aten_op(k) or ("GEMM" if k.category == "gemm" else kernel_name(k, 24))] += k.calls_per_forward
    guess = _guess(run)
    guessed = f" (guess: {guess.kernels_per_forward})" if guess else ""
    evidence = [f"{run.kernels_per_forward:g} kernels per forward{guessed}: "
                + ", ".join(f"{op} ×{calls:g}" for op, calls in per_op.items())]
    inplace = peers.get("naive_inplace")
    if inplace and inplace.gpu_ms and run.gpu_ms:
        evidence.append(f"GPU {run.gpu_ms:.3f} ms per forward vs naive in-place {inplace.gpu_ms:.3f} ms on the same "
                        f"inputs: {_ratio(run.gpu_ms, inplace.gpu_ms)} slower")
    return Note(
        title=f"SDPA math: {run.kernels_per_forward:g} kernels for one line of Python",
        evidence=evidence,
        cause=("The math backend is SDPA's portable fallback, written as ordinary ATen ops: it upcasts to fp32, "
               "scales q and k, builds the causal mask, masks with `where`, runs a softmax that guards fully "
               "masked rows, and casts back. Each step is its own kernel over a B·H·S·D or S×S tensor, so one "
               "line costs more launches and more memory traffic than the five ops of naive attention."))


def math_mask_rebuilt(run: Run, peers: Peers) -> Note | None:
    """With is_causal=True the math backend builds the S×S causal mask again on every call."""
    tril = _host_op(run, "aten::tril")
    if not run.ok or dispatch.backend_key(run.backend) != "math" or tril is None:
        return None
    evidence = [host_line(op) for op in (_host_op(run, "aten::ones"), tril) if op]
    evidence += [kernel_line(k) for k in run.kernels if "triu_tril" in k.name or
                 (_aten_op(k) == "fill" and "bool" in k.name)]
    return Note(
        title="The causal mask is rebuilt on every call",
        evidence=evidence,
        cause=("Given `is_causal=True`, the math backend makes the mask itself, `ones(S, S, bool).tril()`, inside "
               "every forward; the naive variants build theirs once, outside. It is small next to the float work, "
               "but it is extra ops on every call that a cached mask would not need."))


def safe_softmax(run: Run, peers: Peers) -> Note | None:
    """The math backend's _safe_softmax checks for fully masked rows: extra passes over the S×S scores."""
    op = _host_op(run, "aten::_safe_softmax")
    if not run.ok or op is None:
        return None
    checks = [k for k in run.kernels if _aten_op(k) in ("isneginf", "and")]
    guard_ops = [h for h in (_host_op(run, "aten::isneginf"), _host_op(run, "aten::all")) if h]
    return Note(
        title="_safe_softmax: a softmax that checks for fully masked rows",
        evidence=[host_line(op)] + [host_line(h) for h in guard_ops] + [kernel_line(k) for k in checks],
        cause=("The math path calls `_safe_softmax`, which returns 0 rather than NaN for a row whose scores are "
               "all −inf. Finding those rows takes an `isneginf`, an `all` reduction and a `where` over the S×S "
               "scores after the softmax: passes that naive softmax and the fused kernels do not make."))


def occupancy_by_design(run: Run, peers: Peers) -> Note | None:
    """Low but real occupancy in a fused attention kernel is the design: big tiles in registers and shared memory."""
    low = [k for k in _kernels(run, "fused attention", "triton")
           if k.occupancy_pct and k.occupancy_pct < 50 and k.registers_per_thread and k.block]
    if not _on_gpu(run) or not low:
        return None
    evidence = []
    for k in low:
        threads = k.block[0] * k.block[1] * k.block[2]
        per_block = k.registers_per_thread * threads
        blocks = REGISTERS_PER_SM // per_block
        evidence += [kernel_line(k),
                     f"{k.registers_per_thread} registers × {threads} threads = {per_block:,} registers per block: "
                     f"{blocks} blocks ({blocks * threads // 32} warps) fit in an SM's {REGISTERS_PER_SM:,}"]
    guess = _guess(run)
    expected = f"The guess said '{guess.summary}'. " if guess and guess.occupancy == "high" else ""
    return Note(
        title=f"{low[0].occupancy_pct:g}% occupancy for {kernel_name(low[0], 40)} is by design",
        evidence=evidence,
        cause=(expected + "A fused attention kernel keeps its tiles of Q, K and V and the running softmax in "
               "registers and shared memory, so only a few warps fit on an SM; it hides memory latency with that "
               "on-chip reuse and asynchronous copies, not with more warps. Low occupancy is the price of never "
               "writing S×S to memory, not a fault."))


def occupancy_zero(run: Run, peers: Peers) -> Note | None:
    """A 0% 'est. achieved occupancy' on a kernel that ran is a gap in the profiler's estimate, not an idle kernel."""
    zeros = [k for k in run.kernels
             if k.occupancy_pct == 0 and (k.shared_memory_bytes or 0) > DEFAULT_SHARED_MEMORY_BYTES]
    if not _on_gpu(run) or not zeros:
        return None
    apis = sorted({k.launch_api for k in zeros if k.launch_api})
    evidence = [kernel_line(k) for k in zeros]
    evidence.append(f"each uses more than the default {_mib(DEFAULT_SHARED_MEMORY_BYTES)} of shared memory per block")
    runtime = [a for a in apis if a.startswith("cuda")]  # the runtime API, not cuLaunchKernelEx's driver API
    launch = (f" The blog put the zero down to `cuLaunchKernelEx`; here it also shows on a kernel launched with "
              f"{', '.join(f'`{a}`' for a in runtime)}, so shared memory, not the launch API, is what decides."
              if runtime else "")
    return Note(
        title=f"0% occupancy on {len(zeros)} kernel{'s' if len(zeros) > 1 else ''} that ran: not a real zero",
        evidence=evidence,
        cause=("Kineto estimates occupancy with CUDA's occupancy calculator from registers, block size and shared "
               f"memory, assuming the default {_mib(DEFAULT_SHARED_MEMORY_BYTES)} limit per block. These kernels opt "
               "in to more, so the calculator finds that no block fits and prints 0; they ran for the microseconds "
               "shown." + launch))


def host_heavier_than_gpu(run: Run, peers: Peers) -> Note | None:
    """When the CPU takes longer to issue a call than the GPU takes to run it, the host is the bottleneck."""
    if not _on_gpu(run) or run.bound != "host" or run.host_cost is None:
        return None
    busiest = sorted(run.host_ops, key=lambda h: -h.self_us_per_forward)[:2]
    evidence = [f"CPU {_us(run.host_cost.median_ms)} to issue one forward (GPU kept busy) vs GPU {_us(run.gpu_ms)} "
                f"(CUDA events); back to back {_us(run.back_to_back_ms)} per call"] + [host_line(h) for h in busiest]
    backend = dispatch.backend_key(run.backend)
    guess = _guess(run)
    if backend == "cudnn":
        transposes = _host_op(run, "aten::transpose")
        evidence.append(host_line(transposes) if transposes else "no aten::transpose in this forward")
        lighter = [p for p in peers.values() if p.host_cost and dispatch.backend_key(p.backend)
                   not in (None, "cudnn", "math") and p.host_cost.p75_ms < run.host_cost.p25_ms]
        evidence += [f"{_label(p)}: CPU {_us(p.host_cost.median_ms)} per forward" for p in lighter]
        cause = ("cuDNN attention selects an execution plan for every call: it looks the shape, strides, dtype and "
                 "causality up in its plan cache (building a plan on a miss) and packs the call's pointers for it, "
                 "in `aten::_cudnn_attention_forward`, before the kernel is launched. With a kernel this short, "
                 "that host work takes longer than the GPU work, so back-to-back calls wait on the CPU"
                 + (", and having no transposes did not make it the lightest." if lighter and guess
                    and guess.host_rank == 1 else "."))
    elif run.variant == "flex":
        cause = ("Every call to the compiled function first runs TorchDynamo's guards (`TorchDynamo Cache Lookup`) "
                 "and the compiled graph's wrapper before Triton launches its kernel. For a kernel this short "
                 "that Python-side work is longer than the GPU work.")
    elif backend in ("flash", "efficient"):
        cause = ("Before its one kernel, the call goes through the dispatcher, SDPA's backend checks, the output and "
                 "log-sum-exp allocations (`aten::empty`) and the transposes of q, k and v to the kernel's layout. "
                 "With a kernel this short that host work is longer than the GPU work, so the GPU waits unless "
                 "calls are queued ahead of it.")
    else:
        cause = ("Every aten op of the forward goes through the dispatcher and allocates its output before its "
                 "kernel is queued; with kernels this short that host work is longer than the GPU work.")
    return Note(title=f"Host-bound: {_us(run.back_to_back_ms)} per call back to back, {_us(run.gpu_ms)} on the GPU",
                evidence=evidence, cause=cause)


def scores_in_memory(run: Run, peers: Peers) -> Note | None:
    """Naive and math write the B·H·S×S scores to memory; fused kernels never do. The measured peak tells which."""
    w = run.workload
    scores = w.scores_bytes()
    # with S close to D one score matrix is no bigger than q, k, v: the peak cannot tell them apart
    if not run.ok or run.peak_extra_bytes is None or scores < 2 * w.input_bytes:
        return None
    share = run.peak_extra_bytes / scores
    fused = run.variant == "flex" or dispatch.backend_key(run.backend) in ("flash", "efficient", "cudnn")
    guess = _guess(run)
    evidence = [f"peak beyond the inputs: {_mib(run.peak_extra_bytes)} = {share:.2f}× one score matrix",
                f"one score matrix: {w.batch}·{w.heads}·{w.seq_len}² × {w.element_bytes} bytes ({w.dtype}) "
                f"= {_mib(scores)}"]
    if guess:
        evidence.append(f"guess: the S×S scores {'do' if guess.materialises_scores else 'do not'} go through memory")
    if fused and share >= 0.9 and run.environment.device == "cpu":
        # no S×S op in the trace: the CPU kernel's own per-thread blocks make this peak
        threads = run.environment.cpu_threads
        evidence.append(f"{_sdpa_op(run).name if _sdpa_op(run) else run.variant} ran; no op in the trace "
                        f"writes an S×S tensor" + (f"; {threads} CPU threads" if threads else ""))
        return Note(
            title=f"Peak above one S×S matrix, from per-thread blocks ({_mib(run.peak_extra_bytes)})",
            evidence=evidence,
            cause=("The fused CPU kernel still never writes the scores: it gives each thread its own fp32 "
                   "query-block × key-block buffers. With many threads and a short sequence those buffers add up "
                   "to more than one S×S matrix, but they grow with the thread count and block size, not with S²."))
    materialised = share >= 0.9 and not fused
    wrong = guess is not None and guess.materialises_scores != materialised
    if not materialised:
        return Note(
            title=f"{'Guess was wrong: no' if wrong else 'No'} S×S matrix in memory "
                  f"({_mib(run.peak_extra_bytes)} peak)",
            evidence=evidence,
            cause=("A fused kernel computes softmax(q·kᵀ)·v tile by tile in on-chip memory and writes only the "
                   "output and a B·H·S log-sum-exp; memory grows with S, not S². That is what lets fused "
                   "attention reach sequence lengths where the score matrix alone would not fit."))
    math = dispatch.backend_key(run.backend) == "math"
    if math:
        cause = ("The math backend keeps several S×S tensors alive at once: the scores, the mask, the softmax output "
                 "and its guard's temporaries" + (", in fp32, twice the size of 16-bit ones." if w.dtype != "fp32"
                                                  else "."))
    else:
        cause = "q·kᵀ and its scaled copy (then the softmax output) are alive at once: about two S×S matrices."
    return Note(
        title=("Guess was wrong: " if wrong else "") + f"S×S in memory: peak {share:.1f}× one score matrix",
        evidence=evidence,
        cause=cause + " Memory grows with S², which is what limits the sequence length."
        + (" The guess expected a fused kernel; this run took the math path." if wrong and math else ""))


def first_call_cost(run: Run, peers: Peers) -> Note | None:
    """The first call pays one-time costs (compilation, cuDNN plans, lazy loading) that the timed calls do not."""
    if not run.ok or run.first_call_ms is None or not run.gpu_ms or run.first_call_ms < max(50.0, 20 * run.gpu_ms):
        return None
    if run.variant == "flex":
        generated = "a Triton kernel" if run.environment.device == "cuda" else "C++ code"
        cause = (f"torch.compile traced `flex_attention`, lowered it with Inductor and compiled {generated} on the "
                 "first call. Later calls reuse it as long as shapes and dtype match; a new S or dtype compiles again.")
    elif dispatch.backend_key(run.backend) == "cudnn":
        cause = "cuDNN built and cached an execution plan for this shape on the first call; later calls look it up."
    else:
        cause = "Libraries load their kernels and create their handles on first use; the timed calls come after."
    return Note(
        title=f"The first call took {run.first_call_ms / 1000:.2f} s" if run.first_call_ms >= 1000
        else f"The first call took {run.first_call_ms:.0f} ms",
        evidence=[f"first call {run.first_call_ms:,.1f} ms (wall) vs {run.gpu_ms:.3f} ms per warm forward"],
        cause=cause)


def flex_mask_per_call(run: Run, peers: Peers) -> Note | None:
    """flex_attention with block_mask=None builds a full block mask inside every call: extra Triton kernels."""
    extra = [k for k in _kernels(run, "triton") if re.search(r"fused_(ones|zeros)", k.name)]
    if not _on_gpu(run) or run.variant != "flex" or not extra:
        return None
    guess = _guess(run)
    return Note(
        title=f"{run.kernels_per_forward:g} kernels, not {guess.kernels_per_forward if guess else 1}: "
              "a block mask built on every call",
        evidence=[kernel_line(k) for k in _kernels(run, "triton")],
        cause=("Without a mask (not causal) this variant passes `block_mask=None`, and flex_attention then makes a "
               "full block mask on every call; compiled, that becomes the small `ones`/`zeros` Triton kernels "
               "above, fused into the graph. A block mask built once (`create_block_mask`) and passed in "
               "removes them."))


# -- the environment: dispatch, refusals, versions, CPU ------------------------------------------
def _rank3_story(run: Run) -> str:
    env = run.environment
    if dispatch.rank3_is_fused(env):
        return (f"torch {env.torch_version} (2.14 or newer) prepends a batch dimension of 1 to rank-3 q, k, v before "
                "choosing a backend, so [B·H, S, D] inputs reach the fused kernels.")
    return (f"Up to torch 2.13 (this is {env.torch_version}) every fused backend wants 4-D q, k, v, so a rank-3 "
            "[B·H, S, D] call can only take the math path: silently with no pin, an error when pinned. torch 2.14 "
            "views rank-3 inputs as one batch before choosing; here, reshape to [B, H, S, D].")


def pinned_refused(run: Run, peers: Peers) -> Note | None:
    """A pinned backend that cannot take this input fails instead of falling back; PyTorch's warnings say why."""
    if run.status == "ok":
        return None
    backend = _pinned(run)
    reasons = dispatch.refusal_reasons(backend, run.pytorch_warnings) if backend else []
    evidence = [f"PyTorch: {r}" for r in reasons] or [dispatch.clean_warning(run.reason or run.status)]
    if reasons and run.reason and "No available kernel" in run.reason:
        evidence.append("then: No available kernel. Aborting execution.")
    text = " ".join(reasons).lower() or (run.reason or "").lower()
    if run.status == "error":
        why, cause = "failed", "The run stopped with this error; nothing was measured."
    elif "4 dimensional" in text:
        why, cause = "rank-3 inputs", _rank3_story(run)
    elif "dtype" in text:
        why = f"{run.workload.dtype} inputs"
        cause = ("This backend's kernels exist only for the dtypes PyTorch lists. Pinned, SDPA has no fallback, "
                 "so the call fails rather than quietly running another backend (with no pin it would take one "
                 "that accepts these inputs).")
    elif "head_dim" in text or "head dim" in text:
        why, cause = f"head_dim {run.workload.head_dim}", "The kernel is compiled for a limited set of head sizes."
    elif "architecture" in text or re.search(r"\bsm\d", text):
        why = f"this GPU ({run.environment.sm})"
        cause = "The kernel is built for a range of GPU generations that does not include this one."
    elif "mask" in text:
        why, cause = "the mask", "This backend cannot take an explicit attention mask."
    elif "cpu kernel" in text:
        why, cause = "no CPU kernel", ("Memory-efficient and cuDNN attention are CUDA kernels; on CPU SDPA has only "
                                       "its flash kernel for CPU and math.")
    else:
        why, cause = "not supported here", "Pinned, SDPA does not fall back to another backend."
    return Note(title=f"{_label(run)} cannot run here: {why}", evidence=evidence, cause=cause, kind="environment")


def rank3_path(run: Run, peers: Peers) -> Note | None:
    """Rank-3 inputs: math before torch 2.14, fused kernels from 2.14, stated for the torch that ran."""
    pinned = _pinned(run)
    if not run.ok or run.workload.rank != 3 or pinned in (None, "math"):
        return None
    op = _sdpa_op(run)
    unsqueeze = _host_op(run, "aten::unsqueeze")
    evidence = [f"ran: {op.name}" if op else f"backend: {run.backend}"] + ([host_line(unsqueeze)] if unsqueeze else [])
    evidence.append(f"torch {run.environment.torch_version}")
    took_math = dispatch.backend_key(run.backend) == "math"
    cause = _rank3_story(run)
    if took_math and dispatch.rank3_is_fused(run.environment):
        cause += " This trace still ran math, so another of SDPA's checks refused the fused backends."
    return Note(title="Rank-3 input: " + ("the math path" if took_math else f"{run.backend} despite rank 3"),
                evidence=evidence, cause=cause, kind="environment")


def auto_choice(run: Run, peers: Peers) -> Note | None:
    """With no pin SDPA takes the first backend in its priority order that accepts the input; the order depends on
    compute capability and cuDNN version."""
    if not _on_gpu(run) or _pinned(run) != "auto":
        return None
    env, ran = run.environment, dispatch.backend_key(run.backend)
    if ran is None:  # the trace did not show which SDPA op ran: nothing to explain
        return None
    order = dispatch.priority(env)
    op = _sdpa_op(run)
    evidence = [f"ran: {op.name} → {ran}" if op else f"backend: {run.backend}",
                f"priority here: {' → '.join(order)} ({_versions(run)})"]
    skipped = order[:order.index(ran)] if ran in order else order
    if dispatch.cudnn_first(env):
        order_why = (f"On compute capability {env.compute_capability[0]}.{env.compute_capability[1]} with cuDNN "
                     f"{env.cudnn_label} (newer than 9.15) PyTorch moves cuDNN to the front of the order.")
    else:
        order_why = ("Here the order is PyTorch's default, flash → efficient → math → cuDNN; cuDNN goes first only "
                     "on sm90/sm100 with cuDNN newer than 9.15, so on this setup auto never picks cuDNN.")
    if "math" in skipped:  # math accepts every input: this order cannot have been the one that ran
        result = (f" The trace shows {ran}, which this order never reaches: the order that ran was another one "
                  "(set with TORCH_CUDNN_SDPA_DEPRIORITIZED, in code, or by another torch's rules).")
    elif skipped:
        for backend in skipped:
            why = dispatch.known_refusal(backend, run.workload, env)
            evidence.append(f"{backend}: refused, " + (why or "by a check PyTorch does not report when another "
                                                             "backend runs"))
        result = f" {', '.join(skipped)} refused this input, so auto fell through to {ran}."
    else:
        result = f" {ran} accepted this input, so auto runs it."
    faster = [p for p in peers.values() if _pinned(p) not in (None, "auto") and p.gpu_ms and run.gpu_ms
              and p.gpu_ms * SIGNIFICANT < run.gpu_ms]
    if faster:
        best = min(faster, key=lambda p: p.gpu_ms)
        evidence.append(f"measured: {_label(best)} {best.gpu_ms:.3f} ms vs auto {run.gpu_ms:.3f} ms")
        result += f" It is not the fastest here: {_label(best)} is {_ratio(run.gpu_ms, best.gpu_ms)} faster."
    return Note(title=f"sdpa_auto picked {ran} on this GPU", evidence=evidence, cause=order_why + result,
                kind="environment")


def cpu_dispatch(run: Run, peers: Peers) -> Note | None:
    """On CPU there are no kernels: the table lists aten ops, and SDPA dispatches to its CPU flash kernel or math."""
    if not run.ok or run.environment.device != "cpu":
        return None
    op = _sdpa_op(run)
    evidence = [f"SDPA ran: {host_line(op)}"] if op else []
    evidence += [f"{k.name} · {k.us_per_forward:.1f} µs self/fwd" for k in run.kernels[:3]
                 if not op or k.name != op.name]
    evidence.append(f"CPU: {run.environment.device_name}; times are wall clock (perf_counter)")
    return Note(
        title="CPU run: aten ops, not GPU kernels",
        evidence=evidence,
        cause=("On CPU, SDPA tries `_scaled_dot_product_flash_attention_for_cpu` first, then math; memory-efficient "
               "and cuDNN have no CPU kernels. The table lists aten ops by CPU self time, so GPU facts (kernel "
               "counts, tensor cores, occupancy, launch APIs, Memsets) do not apply; the host-side lessons "
               "(masked_fill's copy, math's extra ops) still do."),
        kind="environment")


# -- the blog's A100 reference ------------------------------------------------------------------
def against_blog(run: Run, peers: Peers) -> Note | None:
    """Each run beside the blog's A100 number for the same variant, on the blog's workload only."""
    ref = BLOG.results.get(run.variant)
    if not _on_gpu(run) or ref is None or not BLOG.matches(run.workload):
        return None
    env = run.environment
    evidence = []
    if ref.kernels_per_forward is not None and run.kernels_per_forward is not None:
        evidence.append(f"kernels per forward: {run.kernels_per_forward:g} here, {ref.kernels_per_forward} on the A100")
    if ref.gpu_us and run.gpu_ms:
        speed = ref.gpu_us / (run.gpu_ms * 1000)
        evidence.append(f"GPU: {_us(run.gpu_ms)} here, {ref.gpu_us:g} µs on the A100 ({speed:.1f}x)")
    if ref.host_us and run.profiled_host_ms:
        evidence.append(f"CPU: {_us(run.profiled_host_ms)} here, {ref.host_us:g} µs on the A100")
    main = max(run.kernels, key=lambda k: k.us_per_forward, default=None)
    if ref.occupancy_pct is not None and main and main.occupancy_pct is not None:
        evidence.append(f"occupancy of {kernel_name(main, 40)}: {main.occupancy_pct:g}% here, "
                        f"{ref.occupancy_pct:g}% on the A100")
    inplace, blog_inplace = peers.get("naive_inplace"), BLOG.results["naive_inplace"].gpu_us
    if run.variant == "sdpa_math" and inplace and inplace.gpu_ms and ref.gpu_us and blog_inplace:
        evidence.append(f"math / naive in-place: {_ratio(run.gpu_ms, inplace.gpu_ms)} here, "
                        f"{_ratio(ref.gpu_us, blog_inplace)} on the A100")
    fused = {k: p for k, p in {**peers, run.variant: run}.items()
             if k in ("sdpa_efficient", "sdpa_flash", "sdpa_cudnn") and p.profiled_host_ms}
    if run.variant in fused and len(fused) > 1:
        here = sorted(fused, key=lambda k: fused[k].profiled_host_ms)
        there = sorted(fused, key=lambda k: BLOG.results[k].host_us)
        evidence.append("CPU time, lightest first: here " + " < ".join(
            f"{k} {fused[k].profiled_host_ms * 1000:.0f} µs" for k in here) + "; A100 " + " < ".join(
            f"{k} {BLOG.results[k].host_us:g} µs" for k in there))
    if not evidence:
        return None
    cc = env.compute_capability
    return Note(
        title=f"Against the blog's A100: {ref.finding}",
        evidence=evidence,
        cause=(f"Same workload and a similar method (3 warm-up calls, kernels counted in one forward's range), but "
               f"{env.device_name} is compute capability {cc[0]}.{cc[1]} against the A100's "
               f"{BLOG.compute_capability[0]}.{BLOG.compute_capability[1]}, with its own libraries and kernels. "
               "Absolute times do not carry over between GPUs; the kernel lists and ratios are what to compare."),
        kind="reference")


def _unlike_blog(run: Run) -> str:
    """Said after any comparison with the blog's kernels made on another workload."""
    differences = BLOG.differences(run.workload)
    return f" (This run's workload differs from the blog's: {', '.join(differences)}.)" if differences else ""


def _sm_of(k: Kernel) -> str | None:
    found = re.search(r"(?:^|_)(sm\d{2,3})(?:_|$)", kernel_name(k, 200))
    return found.group(1) if found else None


def kernel_generation(run: Run, peers: Peers) -> Note | None:
    """Kernel names carry the GPU generation they were built for: an sm80 kernel on sm90 leaves Hopper's features
    idle."""
    sm = run.environment.sm
    older = [k for k in run.kernels if _sm_of(k) and sm and _sm_of(k) != sm]
    if not _on_gpu(run) or not older:
        return None
    built = sorted({_sm_of(k) for k in older})
    return Note(
        title=f"Kernels built for {', '.join(built)} running on {sm}",
        evidence=[f"{kernel_line(k)} · built for {_sm_of(k)}" for k in older]
        + [f"this GPU: {run.environment.device_name}, {sm}"],
        cause=(f"These kernels come precompiled for {', '.join(built)} and run unchanged on this {sm} GPU: they use "
               "that generation's instructions, not this one's (on Hopper, wgmma and TMA). On the blog's A100 "
               f"({BLOG.sm}) they were native; here, kernels built for {sm} can pull ahead of them."
               + _unlike_blog(run)),
        kind="reference")


def nvjet_gemms(run: Run, peers: Peers) -> Note | None:
    """cuBLAS on Hopper and newer runs its nvjet GEMMs: other names than the blog's, launched with cuLaunchKernelEx."""
    nvjet = [k for k in _kernels(run, "gemm") if kernel_name(k).startswith("nvjet")]
    if not _on_gpu(run) or not nvjet:
        return None
    return Note(
        title="cuBLAS chose nvjet GEMMs, not the kernels in the blog's A100 trace",
        evidence=[kernel_line(k) for k in nvjet],
        cause=("nvjet is cuBLAS's GEMM family for Hopper and newer GPUs (the architecture is in the name). Same "
               "matmuls, other kernel names, launched with `cuLaunchKernelEx`, often with a workspace Memset "
               "before them: so the kernel list and count differ from the A100's while the code is the same."
               + _unlike_blog(run)),
        kind="reference")


def fused_ranking_vs_blog(run: Run, peers: Peers) -> Note | None:
    """Rankings don't travel between GPUs: on the A100 flash beat cuDNN; a kernel built for this GPU may win here."""
    fused = {k: p for k, p in {**peers, run.variant: run}.items()
             if k in ("sdpa_efficient", "sdpa_flash", "sdpa_cudnn") and p.ok and p.gpu_ms}
    if not _on_gpu(run) or run.variant not in fused or len(fused) < 2 or not BLOG.matches(run.workload):
        return None
    here = sorted(fused, key=lambda k: fused[k].gpu_ms)
    there = sorted(fused, key=lambda k: BLOG.results[k].gpu_us)
    if here.index(run.variant) == there.index(run.variant):
        return None
    main = {k: max(p.kernels, key=lambda x: x.us_per_forward) for k, p in fused.items() if p.kernels}
    generations = [f"{kernel_name(main[k])} · " + (f"built for {_sm_of(main[k])}" if _sm_of(main[k])
                                                  else "no architecture in its name") for k in here if k in main]
    return Note(
        title=f"{_label(run)} ranks #{here.index(run.variant) + 1} of {len(here)} here, "
              f"#{there.index(run.variant) + 1} on the blog's A100",
        evidence=["GPU here: " + " < ".join(f"{k} {_us(fused[k].gpu_ms)}" for k in here),
                  "GPU on the A100: " + " < ".join(f"{k} {BLOG.results[k].gpu_us:g} µs" for k in there)] + generations,
        cause=("On the A100 every backend's kernel was built for its generation and FlashAttention-2 won. On this GPU "
               "the kernel that targets it directly (its architecture in the name) can use instructions the others "
               "don't, so the order changes: measure on the GPU you deploy to."),
        kind="reference")


RULES: tuple[Rule, ...] = (
    # the guess against the trace
    hidden_memcpy, inplace_no_copy, workspace_memsets, split_launches, math_kernel_count, fp32_on_cuda_cores,
    math_mask_rebuilt, safe_softmax, flex_mask_per_call, occupancy_by_design, occupancy_zero,
    host_heavier_than_gpu, scores_in_memory, first_call_cost,
    # the environment
    pinned_refused, rank3_path, auto_choice, cpu_dispatch,
    # the blog's A100
    against_blog, kernel_generation, nvjet_gemms, fused_ranking_vs_blog,
)


def peers_for(run: Run, runs: Iterable[Run]) -> Peers:
    """The runs among `runs` a ratio with `run` means something for: ok, another variant, same workload
    (seed aside), same GPU and torch."""
    def same(other: Run) -> bool:
        return (other.workload.replace(seed=0) == run.workload.replace(seed=0)
                and other.environment.device_name == run.environment.device_name
                and other.environment.torch_version == run.environment.torch_version)
    return {p.variant: p for p in runs if p.ok and p.variant != run.variant and same(p)}


def explain_run(run: Run, peers: Iterable[Run] = ()) -> list[Note]:
    """Every note the rules find in `run`; `peers` (other runs of the same workload) allow ratios such as
    math against naive in-place."""
    others = peers_for(run, peers)
    return [note for rule in RULES if (note := rule(run, others)) is not None]


# -- A vs B ---------------------------------------------------------------------------------------
def _verdict(a: Run, b: Run) -> str:
    """One sentence: GPU time, host time, kernels, peak memory, accuracy; or who could not run and why."""
    def name(run: Run) -> str:
        return f"{'A' if run is a else 'B'} ({_label(run)})"

    failed, ran = [r for r in (a, b) if not r.ok], [r for r in (a, b) if r.ok]
    if failed:
        why = "; ".join(f"{name(r)} could not run here: {_first_reason(r).rstrip('.')}" for r in failed)
        return why + (f"; {name(ran[0])} ran at {ran[0].gpu_ms:.3f} ms per forward." if ran else ".")
    fast, slow = sorted((a, b), key=lambda r: r.gpu_ms)
    where = "on the GPU" if a.environment.device == "cuda" else "in wall time on the CPU"
    if _clearly_faster(fast, slow):
        sentence = (f"{name(fast)} is {_ratio(slow.gpu_ms, fast.gpu_ms)} faster than {name(slow)} {where} "
                    f"({fast.gpu_ms:.3f} vs {slow.gpu_ms:.3f} ms per forward)")
    else:
        sentence = f"{name(a)} and {name(b)} are level {where} ({a.gpu_ms:.3f} vs {b.gpu_ms:.3f} ms per forward)"
    if a.profiled_host_ms and b.profiled_host_ms:
        light, heavy = sorted((a, b), key=lambda r: r.profiled_host_ms)
        if heavy.profiled_host_ms > light.profiled_host_ms * SIGNIFICANT:
            sentence += (f", and {name(light)[0]} is {_ratio(heavy.profiled_host_ms, light.profiled_host_ms)} "
                         f"lighter on the host ({light.profiled_host_ms:.3f} vs {heavy.profiled_host_ms:.3f} ms)")
        else:
            sentence += f", with the same host time ({a.profiled_host_ms:.3f} vs {b.profiled_host_ms:.3f} ms)"
    side_by_side = []  # A's value first, then B's
    if a.kernels_per_forward and b.kernels_per_forward:
        side_by_side.append(f"{a.kernels_per_forward:g} vs {b.kernels_per_forward:g} kernels per forward")
    if a.peak_extra_bytes is not None and b.peak_extra_bytes is not None:
        side_by_side.append(f"{_mib(a.peak_extra_bytes)} vs {_mib(b.peak_extra_bytes)} peak extra memory")
    if a.accuracy and b.accuracy:
        side_by_side.append(f"max error {a.accuracy.max_abs_error:.2g} vs {b.accuracy.max_abs_error:.2g} against fp64")
    return sentence + (f"; A vs B: {', '.join(side_by_side)}." if side_by_side else ".")


def _clearly_faster(fast: Run, slow: Run) -> bool:
    """Over 5% apart, and even the slow one's best sample slower than the fast one's median: on a busy
    CPU the samples spread widely, and an order inside that spread is noise, not a result."""
    return slow.gpu_ms > fast.gpu_ms * SIGNIFICANT and slow.timing.min_ms > fast.timing.median_ms


def _first_reason(run: Run) -> str:
    backend = _pinned(run)
    reasons = dispatch.refusal_reasons(backend, run.pytorch_warnings) if backend else []
    return reasons[0] if reasons else dispatch.clean_warning(run.reason or run.status)


def _ranking_notes(a: Run, b: Run) -> list[Note]:
    """A verdict note wherever the measured order contradicts the guessed one (speed_rank, host_rank)."""
    ga, gb = _guess(a), _guess(b)
    if not (a.ok and b.ok and ga and gb):
        return []
    notes = []
    speed = ("faster", "GPU") if a.environment.device == "cuda" else ("faster on this CPU", "wall")
    for what, rank, measure, unit in ((speed[0], "speed_rank", lambda r: r.gpu_ms, speed[1]),
                                      ("lighter on the host", "host_rank", lambda r: r.profiled_host_ms, "host")):
        ra, rb, ma, mb = getattr(ga, rank), getattr(gb, rank), measure(a), measure(b)
        if ra == rb or not ma or not mb:
            continue
        expected, other = (a, b) if ra < rb else (b, a)
        if measure(expected) <= measure(other) * SIGNIFICANT or (
                unit != "host" and not _clearly_faster(other, expected)):
            continue
        evidence, reasons = _why_faster(other, expected, unit)
        notes.append(Note(
            title=(f"Guessed {_label(expected)} {what}; {_label(other)} is, "
                   f"by {_ratio(measure(expected), measure(other))}"),
            evidence=[f"guess {rank}: {_label(a)} {ra}, {_label(b)} {rb} (1 = best)",
                      f"measured {unit}: {_label(a)} {ma:.3f} ms, {_label(b)} {mb:.3f} ms per forward"] + evidence,
            cause=" ".join(["The guess ranks by what the code looks like; the trace ranks by what ran."] + reasons),
            kind="verdict"))
    return notes


def _why_faster(fast: Run, slow: Run, unit: str) -> tuple[list[str], list[str]]:
    """Evidence and reasons, from the two traces, for `fast` beating `slow` on the GPU (or on the host)."""
    if unit == "host":
        calls = {id(r): sum(h.calls_per_forward for h in r.host_ops) for r in (fast, slow)}
        evidence = [f"{_label(r)}: {calls[id(r)]:g} aten calls per forward (nested ones included), busiest "
                    f"{h.name} {h.self_us_per_forward:.1f} µs self"
                    for r in (fast, slow) if (h := max(r.host_ops, key=lambda o: o.self_us_per_forward, default=None))]
        more = calls[id(slow)] >= 1.5 * calls[id(fast)] > 0
        return evidence, [f"{_label(slow)} makes {calls[id(slow)]:g} aten calls per forward to "
                          f"{calls[id(fast)]:g}, each a trip through the dispatcher."] if more else []
    evidence, reasons = [], []
    main = {id(r): max(r.kernels, key=lambda k: k.us_per_forward, default=None) for r in (fast, slow)}
    for r in (fast, slow):
        if main[id(r)] and r.kernels_per_forward:
            n = r.kernels_per_forward
            evidence.append(f"{_label(r)}: {n:g} kernel{'s' if n != 1 else ''}, longest {kernel_line(main[id(r)])}")
    if (slow.kernels_per_forward or 0) >= 2 * (fast.kernels_per_forward or 1e9):
        reasons.append(f"{_label(slow)} launches {slow.kernels_per_forward:g} kernels to {fast.kernels_per_forward:g}.")
    if any(k.precision and "CUDA cores" in k.precision for k in slow.kernels) and \
            not any(k.precision and "CUDA cores" in k.precision for k in fast.kernels):
        reasons.append(f"{_label(slow)}'s GEMMs run in FP32 on CUDA cores.")
    sm = fast.environment.sm
    if main[id(fast)] and main[id(slow)] and sm and _sm_of(main[id(fast)]) == sm != _sm_of(main[id(slow)]):
        reasons.append(f"{_label(fast)}'s main kernel is built for this GPU ({sm}); {_label(slow)}'s is not.")
    return evidence, reasons


def explain(comparison: Comparison) -> Comparison:
    """Fill each run's notes, the verdict and the A-vs-B notes; returns the same object."""
    a, b = comparison.a, comparison.b
    a.notes = explain_run(a, [b])
    b.notes = explain_run(b, [a])
    comparison.verdict = _verdict(a, b)
    comparison.notes = _ranking_notes(a, b)
    return comparison


# -- rendering ------------------------------------------------------------------------------------
KIND_LABELS = {"guess": "guess vs trace", "reference": "vs the blog's A100", "environment": "environment",
               "verdict": "verdict"}
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#|])")


def _md(text: str) -> str:
    """Kernel names are full of underscores and angle brackets: escape them so Markdown shows them as written."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def _md_cause(text: str) -> str:
    """Causes may quote code in backticks: keep those spans, escape the rest."""
    return "".join(part if part.startswith("`") else _md(part) for part in re.split(r"(`[^`]*`)", text))


def render_markdown(notes: list[Note]) -> str:
    return "\n\n".join(f"**{_md(n.title)}** · _{KIND_LABELS.get(n.kind, n.kind)}_\n\n"
                       + "".join(f"- {_md(e)}\n" for e in n.evidence) + f"\n{_md_cause(n.cause)}"
                       for n in notes)


def render_text(notes: list[Note]) -> str:
    return "\n\n".join(f"* {n.title}  [{KIND_LABELS.get(n.kind, n.kind)}]\n"
                       + "".join(f"  - {e}\n" for e in n.evidence) + f"  {n.cause.replace('`', '')}"
                       for n in notes)
