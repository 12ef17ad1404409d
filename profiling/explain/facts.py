"""What a run shows, read for the rules: its ops and kernels, who launched what, the guess it is held
against, the GPU's limits; and the two tools every note is built with: `Quantity`s that say where each
number was read (`measured`, `total`, `ratio`), and `note`, which has profiling.text write the words.
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from attention_variants import VARIANTS, Guess, Variant, guess_for

from .. import dispatch, text
from ..environment import HBM_BYTES_PER_US
from ..reference import BLOG
from ..results import HostOp, Kernel, Launch, Note, Quantity, Run, in_phase

Peers = dict[str, Run]  # variant key -> an ok run of the same workload in the same environment
Rule = Callable[[Run, Peers], Note | None]
NEGLIGIBLE = 0.01        # a share of GPU time below this is listed, not explained


# -- the run -----------------------------------------------------------------------------------
def variant(run: Run) -> Variant | None:
    return VARIANTS.get(run.variant)


def label(run: Run | str) -> str:
    """The variant's label, of a run or of a variant's key."""
    key = run if isinstance(run, str) else run.variant
    return VARIANTS[key].label if key in VARIANTS else key


def guess(run: Run) -> Guess | None:
    return guess_for(run.variant, run.workload) if run.variant in VARIANTS else None


def pinned(run: Run) -> str | None:
    """'flash', 'efficient', 'cudnn', 'math', 'auto', or None for a variant that is not SDPA."""
    v = variant(run)
    backend = v.sdpa_backend if v else None
    return "auto" if backend == "auto" else dispatch.backend_key(backend)


def ran(run: Run) -> str | None:
    """The SDPA backend the trace shows: 'flash', 'efficient', 'cudnn', 'math', or None."""
    return dispatch.backend_key(run.backend)


def fused(run: Run) -> bool:
    """Whether the call ran a fused attention kernel, which keeps its score tiles on chip and never writes S×S: an
    SDPA backend the trace shows as flash, efficient or cuDNN (SDPA may fall back to math), or a fused variant that
    calls its kernel itself (flex compiled, FA4 compiled just in time, varlen_attn). Its peak can still pass one S×S
    matrix (a CPU kernel's per-thread blocks, a compiled graph's buffers at a short S): not the scores."""
    v = variant(run)
    return ran(run) in ("flash", "efficient", "cudnn") or bool(v and v.fused and v.sdpa_backend is None)


def on_gpu(run: Run) -> bool:
    return run.ok and run.environment.device == "cuda"


def host_op(run: Run, name: str, phase: str | None = None) -> HostOp | None:
    """The host op `name` of the profiled call; with `phase` ("forward", "backward"), only that phase's."""
    return next((h for h in run.host_ops if h.name == name and (phase is None or in_phase(h, phase))), None)


def sdpa_op(run: Run) -> HostOp | None:
    return next((h for h in run.host_ops if h.name in dispatch.SDPA_BACKEND_OPS), None)


def kernels_in(run: Run, *categories: str, phase: str = "step") -> list[Kernel]:
    """The run's kernels of `categories` in `phase` (every phase: "step")."""
    return [k for k in run.kernels if k.category in categories and in_phase(k, phase)]


def main_kernel(run: Run, phase: str | None = None) -> Kernel | None:
    """The longest kernel of `phase` (the run's own by default)."""
    return max(run.kernels_of(phase), key=lambda k: k.us_per_forward, default=None)


def sixteen_bit(run: Run) -> bool:
    return run.workload.dtype in ("fp16", "bf16")


def launches(run: Run, under: str | None = None, phase: str = "step") -> list[tuple[Kernel, Launch]]:
    """Every (kernel, launch chain) of the run in `phase`; with `under`, those whose chain includes that op."""
    return [(k, launch) for k in run.kernels if in_phase(k, phase) for launch in (k.launched_by or [])
            if under is None or under in launch.ops]


def launched_under(k: Kernel, *ops: str) -> bool:
    return any(o in launch.ops for launch in (k.launched_by or []) for o in ops)


def sm_in_name(k: Kernel) -> str | None:
    """'sm80' for 'fmha_cutlassF_bf16_aligned_64x64_rf_sm80', 'sm90' for FlashAttention-4's
    'flash_fwd_sm90FlashAttentionForwardSm90': the generation the kernel's code targets, where its name says."""
    found = re.search(r"(?:^|[_:])[sS]m(\d{2,3})(?![a-z0-9])", k.name)
    return f"sm{found.group(1)}" if found else None


def hopper_design(k: Kernel) -> bool:
    """Written for Hopper or newer: wgmma in its name, or an sm90+ token (FlashAttention-4's, cuBLAS's nvjet)."""
    sm = sm_in_name(k)
    return "wgmma" in k.name.lower() or (sm is not None and int(sm[2:]) >= 90)


def instruction(k: Kernel) -> str | None:
    """What the name says about the arithmetic: 'ffma', 'wgmma', 'hmma', 'nvjet', None."""
    lower = k.name.lower()
    for mark in ("ffma", "wgmma", "hmma", "tf32"):
        if mark in lower:
            return mark
    return "nvjet" if lower.startswith("nvjet") else None


def ampere_design(k: Kernel) -> bool:
    """Written for Ampere's mma.sync and cp.async: an sm80 name, or PyTorch's FlashAttention-2 kernels."""
    return sm_in_name(k) == "sm80" or k.short_name.startswith(("pytorch_flash::flash_fwd", "pytorch_flash::flash_bwd"))


# -- numbers with their source ---------------------------------------------------------------------
def _kernel_index(run: Run, k: Kernel) -> int:
    return next(i for i, x in enumerate(run.kernels) if x is k)


def measured(run: Run, path: str, unit: str, who: str = "run") -> Quantity:
    """A figure of the run read at `path` ('timing.median_ms', 'workload.scores_bytes()')."""
    return Quantity(_walk(run, path), unit, f"{who}.{path}")


# -- the correctness gate: a wrong answer is never ranked ---------------------------------------------------------
# An answer is wrong, not rounded differently, when its error against the fp64 reference (the output's, or in a
# training pass a gradient's) is past WRONG_FACTOR times what plain attention in the inputs' dtype makes on the same
# inputs (`Accuracy.naive_*`). A kernel that computes attention in the dtype errs by the same roundings, a small
# multiple of plain attention's: FlashAttention's tests pass a kernel within 2x it (tests/test_flash_attn.py,
# "at most twice the numerical error of a Pytorch implementation"), and the 2,832 errors of the recorded H200 runs
# and sweep points (outputs and gradients, every variant) reach 1.13x. A wrong answer (a field ignored, a mask
# dropped, a scale off) errs by the output's own size, 1/u roundings (u = 2^-8 in bf16: ~250x; a planted one, 30x).
# 10x sits five times past FlashAttention's bound and an order of magnitude under an answer off by its own size.
# fp32's plain attention errs by ~1e-6 (1.3e-6 recorded), and PyTorch lets fp32 products run in TF32 on tensor
# cores (a 10-bit mantissa, unit roundoff 2^-11; `allow_tf32`), which errs by ~1e-3 and is still right: fp32's
# floor is TF32's rounding at an output of size 2 (outputs, weighted averages of standard-normal v rows, are mostly
# smaller): 2^-10, so an fp32 answer is wrong past ~1e-2.
# fp8 inputs (q, k and v in e4m3, or an e4m3 KV cache) carry an error before any kernel runs: e4m3 keeps 3 mantissa
# bits, so each quantised element is off by up to 2^-4 of itself, far past bf16's 2^-9. Plain attention in bf16 is then
# no measure of a right answer; the quantisation's own error is: fp64 attention on the dequantised inputs against fp64
# on the inputs as drawn (`Accuracy.quantisation_max_abs_error`), what a kernel that applies its descales exactly and
# rounds nothing more would err by. A right fp8 kernel adds its own roundings to it (FA3 rounds P to e4m3 for P·V, an
# error of the same size as v's quantisation), a small multiple; an answer whose scales were dropped errs by the
# output's own size (the scores off by 1/(scale_q·scale_k), ~10^4 here, the output by 1/scale_v, ~10^2). So the gate
# for an fp8 answer is WRONG_FACTOR times the larger of the quantisation's error and plain attention's in bf16.
WRONG_FACTOR = 10.0
FLASH_TESTS_FACTOR = 2.0   # FlashAttention's tests' bound, said beside the gate's
ERROR_FLOOR = {"fp32": 2.0**-10}


@dataclass(frozen=True)
class WrongAnswer:
    """Which of a run's answers is wrong: where its error and plain attention's are read in the run."""
    what: str                    # "output", "dq", "dk", "dv"
    error: str                   # its error against fp64: "accuracy.max_abs_error", "accuracy.grads[dq]"
    plain: str                   # plain attention's in the inputs' dtype: "accuracy.naive_max_abs_error"
    floor: float                 # the dtype's floor under plain attention's (ERROR_FLOOR; 0.0 where none)
    quantised: str | None = None  # fp8 inputs, the output: the quantisation's own error,
                                  # "accuracy.quantisation_max_abs_error"

    def limit(self, plain: Quantity, quantised: Quantity | None = None) -> Quantity:
        """Past this the answer is wrong: WRONG_FACTOR x plain attention's error (`plain`, read from the run), or
        x the dtype's floor, or x the quantisation's own error (`quantised`, fp8 inputs), whichever is largest."""
        base = Quantity(max(plain.value, self.floor), "error", f"max({plain.source}, {self.floor!r})") \
            if self.floor else plain
        if quantised is not None:
            base = Quantity(max(base.value, quantised.value), "error", f"max({base.source}, {quantised.source})")
        return scaled(base, WRONG_FACTOR, "error")

    def base(self, run: Run, who: str = "run") -> tuple[Quantity, Quantity | None]:
        """(plain attention's error, the quantisation's or None) as read from `run`."""
        return measured(run, self.plain, "error", who), \
            (measured(run, self.quantised, "error", who) if self.quantised else None)


def wrong_answer(run: Run) -> WrongAnswer | None:
    """The run's answer furthest past the gate (output, dq, dk, dv), or None where every one is within it (or no
    accuracy was taken)."""
    a = run.accuracy
    if a is None:
        return None
    checked = [("output", "max_abs_error", "naive_max_abs_error")] if a.naive_max_abs_error is not None else []
    checked += [(g, f"grads[{g}]", f"naive_grads[{g}]") for g in a.grads or {} if (a.naive_grads or {}).get(g)]
    past = []
    for what, error, plain in checked:
        quantised = "accuracy.quantisation_max_abs_error" \
            if what == "output" and a.quantisation_max_abs_error is not None else None
        gate = WrongAnswer(what, f"accuracy.{error}", f"accuracy.{plain}", ERROR_FLOOR.get(run.workload.dtype, 0.0),
                           quantised)
        beyond = measured(run, gate.error, "error").value / gate.limit(*gate.base(run)).value
        if beyond > 1:
            past.append((beyond, gate))
    return max(past, key=lambda t: t[0])[1] if past else None


def rankable(run: Run) -> bool:
    """The run ran and its answer is right: a speed may be said of it beside another's."""
    return run.ok and wrong_answer(run) is None


def of_kernel(run: Run, k: Kernel, attribute: str, unit: str, who: str = "run") -> Quantity:
    return measured(run, f"kernels[{_kernel_index(run, k)}].{attribute}", unit, who)


def of_launch(run: Run, k: Kernel, launch: Launch, attribute: str, unit: str, who: str = "run") -> Quantity:
    j = next(i for i, x in enumerate(k.launched_by) if x is launch)
    return measured(run, f"kernels[{_kernel_index(run, k)}].launched_by[{j}].{attribute}", unit, who)


PHASE_WORDS = {"forward": "the forward", "backward": "the backward", "step": "the step"}


def share_of(run: Run, kernels: Iterable[Kernel], phase: str, who: str = "run") -> Quantity:
    """The kernels' share of `phase`'s GPU time (the kernel table's total for it), naming that total: every stated
    share goes through here, so no rule can divide one phase's kernels by another's total."""
    kernels = list(kernels)
    stray = next((k for k in kernels if not in_phase(k, phase)), None)
    if stray is not None:
        raise ValueError(f"{stray.short_name} is a {stray.phase} kernel: not a share of the {phase}")
    index = ", ".join(str(_kernel_index(run, k)) for k in kernels)
    value = sum(k.us_per_forward for k in kernels) / run.gpu_us(phase)
    return Quantity(value, "share", f"share({who}, '{phase}', {index})", of=PHASE_WORDS[phase])


def launch_share(run: Run, pairs: Iterable[tuple[Kernel, Launch]], phase: str, who: str = "run") -> Quantity:
    """The share of `phase`'s GPU time that some launch chains of its kernels take (a kernel launched by several ops:
    the part one op launched)."""
    pairs = list(pairs)
    refs = []
    for k, launch in pairs:
        if not in_phase(k, phase):
            raise ValueError(f"{k.short_name} is a {k.phase} kernel: not a share of the {phase}")
        i = _kernel_index(run, k)
        refs += [str(i), str(next(j for j, x in enumerate(k.launched_by) if x is launch))]
    value = sum(launch.us_per_forward for _, launch in pairs) / run.gpu_us(phase)
    return Quantity(value, "share", f"launch_share({who}, '{phase}', {', '.join(refs)})", of=PHASE_WORDS[phase])


def phase_total(run: Run, phase: str, who: str = "run") -> Quantity:
    """The kernel table's GPU µs per call for `phase`."""
    return Quantity(run.gpu_us(phase), "us", f"{who}.gpu_us('{phase}')")


def launch_count(run: Run, phase: str, who: str = "run") -> Quantity:
    """Kernels launched per call in `phase`."""
    return Quantity(run.launches(phase), "count", f"{who}.launches('{phase}')")


def call_gpu(run: Run, who: str = "run") -> Quantity:
    """The warm GPU time of one whole call (a backward view's is its step's): what the host figures, taken as a warm
    loop in every timing mode, are set against."""
    return Quantity(run.warm_call_ms, "ms", f"{who}.warm_call_ms")


# -- bytes: what a call must move, at the least ------------------------------------------------------------
def packing(run: Run) -> str:
    """How the run's variant laid out its sequences (attention_variants.base.PACKINGS): what its bytes count."""
    v = variant(run)
    return v.packing(run.workload) if v is not None else "padded"


def square_scores(run: Run) -> bool:
    """Whether the run's scores are S×S per (batch row, head): a B×S batch's are; one packed sequence's are T×T, and
    varlen kernels' and nested tensors' per document, which an S×S figure does not describe."""
    return packing(run) == "padded"


def sparse(run: Run) -> bool:
    """Whether the run's variant skips the tiles its mask leaves empty (`Variant.sparse`): it reads no dense window
    mask, and over one packed sequence FlexAttention's BlockMask and the [T] document ids, never a [T, T] mask."""
    v = variant(run)
    return bool(v and v.sparse)


def run_tensors(run: Run, phase: str | None = None) -> list[tuple[str, int]]:
    """`Workload.tensors` of the run's phase (or `phase`), laid out as its variant lays them."""
    return run.workload.tensors(phase or run.phase, packing(run), sparse(run))


def moved(run: Run, phase: str | None = None, who: str = "run") -> Quantity:
    phase = phase or run.phase
    return Quantity(run.workload.moved_bytes(phase, packing(run), sparse(run)), "bytes",
                    f"moved({who}, '{phase}')")


def written(run: Run, phase: str | None = None, who: str = "run") -> Quantity:
    """The part of `moved` the call writes (its outputs: `Workload.written_bytes`)."""
    phase = phase or run.phase
    return Quantity(run.workload.written_bytes(phase, packing(run), sparse(run)), "bytes",
                    f"written({who}, '{phase}')")


def working_set(run: Run, phase: str | None = None, who: str = "run") -> Quantity:
    phase = phase or run.phase
    return Quantity(run.workload.working_set_bytes(phase, packing(run), sparse(run)), "bytes",
                    f"working_set({who}, '{phase}')")


def scores_bytes(run: Run, who: str = "run") -> Quantity:
    """One S×S score matrix as the run holds it: in fp32 on SDPA's math path (it computes in fp32), else in the
    inputs' dtype."""
    element = 4 if ran(run) == "math" else run.workload.element_bytes
    return measured(run, f"workload.scores_bytes({element})", "bytes", who)


def total(parts: Iterable[Quantity], unit: str | None = None) -> Quantity:
    parts = list(parts)
    return Quantity(sum(p.value for p in parts), unit or parts[0].unit, f"sum({', '.join(p.source for p in parts)})")


def ratio(num: Quantity, den: Quantity, unit: str = "x") -> Quantity:
    return Quantity(num.value / den.value, unit, f"ratio({num.source}, {den.source})")


def host_share(run: Run, i: int, whose: str, who: str = "run") -> Quantity:
    """Host op `i`'s own time as a share of the profiled call's CPU time, both means over the same profiled calls (the
    ranges' median against the ops' means let one slow call carry an op past 100%); a run recorded without the mean:
    the median. (The profiler inflates every op: only such shares are said.)"""
    whole = "profiled_host_mean_ms" if run.profiled_host_mean_ms else "profiled_host_ms"
    share = ratio(measured(run, f"host_ops[{i}].self_us_per_forward", "us", who),
                  scaled(measured(run, whole, "ms", who), 1000, "us"), "share")
    share.of = f"{whose} profiled calls' mean CPU time" if whole == "profiled_host_mean_ms" else \
        f"{whose} profiled call's CPU time"  # the card shows both the range's median and its mean
    return share


def difference(a: Quantity, b: Quantity) -> Quantity:
    return Quantity(a.value - b.value, a.unit, f"diff({a.source}, {b.source})")


def scaled(q: Quantity, factor: float, unit: str) -> Quantity:
    """The same figure in another unit: scaled(gpu_ms, 1000, "us")."""
    return Quantity(q.value * factor, unit, f"product({q.source}, {factor:g})")


def log_fit(xs: Iterable[float], ys: Iterable[float]) -> tuple[float, float]:
    """The least-squares line on log–log axes, the one fit of the project: (its slope, the exponent k of y ∝ x^k;
    R², how much of log y's variance it explains, 1 when every point is on it)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mean_x, mean_y = sum(lx) / len(lx), sum(ly) / len(ly)
    sxx = sum((x - mean_x) ** 2 for x in lx)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(lx, ly))
    syy = sum((y - mean_y) ** 2 for y in ly)
    return sxy / sxx, (sxy * sxy / (sxx * syy) if syy > 0 else 1.0)


def log_slope(xs: Iterable[float], ys: Iterable[float]) -> float:
    """The exponent k of y ∝ x^k that fits the pairs best (`log_fit`'s slope)."""
    return log_fit(xs, ys)[0]


def fit(pairs: Iterable[tuple[Quantity, Quantity]]) -> Quantity:
    """The exponent k of y ∝ S^k that fits (S, y) pairs best: how a sweep's time or memory grows."""
    pairs = list(pairs)
    return Quantity(log_slope([s.value for s, _ in pairs], [y.value for _, y in pairs]), "power",
                    f"fit({', '.join(f'{s.source}, {y.source}' for s, y in pairs)})")


def beyond_median(samples: Quantity, other: Quantity) -> Quantity:
    """How many of `samples`' kept samples lie on the far side of `other`'s median (two Timings, read by `fact` at
    the figure's path): above it where `samples` has the lower median, below it otherwise."""
    return Quantity(float(_beyond_median(samples.value, other.value)), "count",
                    f"beyond_median({samples.source}, {other.source})")


def _beyond_median(timing, other) -> int:
    mine, theirs = statistics.median(timing.samples_ms), statistics.median(other.samples_ms)
    return sum(x > theirs for x in timing.samples_ms) if mine < theirs else sum(x < theirs for x in timing.samples_ms)


def constant(value: float, unit: str, source: str) -> Quantity:
    """A figure that is not the run's: a device limit (`arch[sm90].registers_per_sm`), the blog's A100."""
    return Quantity(value, unit, source)


def resolve(source: str, context: Mapping[str, object]) -> float:
    """The value `source` names, read again from `context` ({'run': Run, 'a': ..., 'peers': ..., 'blog': ...,
    'arch': ARCH}): how a test checks every number of a note against the run it came from."""
    if re.fullmatch(r"-?\d+(\.\d+)?", source):
        return float(source)
    if re.fullmatch(r"'\w+'", source):
        return source[1:-1]
    call = re.fullmatch(r"(\w+)\((.*)\)", source)
    if call and call.group(1) in _FUNCTIONS:
        return _FUNCTIONS[call.group(1)](*(resolve(arg, context) for arg in _split_args(call.group(2))))
    root = re.match(r"\w+", source).group(0)
    return _walk(context[root], source[len(root):])


def _split_args(text_: str) -> list[str]:
    args, depth, current = [], 0, ""
    for ch in text_:
        if ch == "," and depth == 0:
            args.append(current.strip())
            current = ""
            continue
        depth += (ch in "([") - (ch in ")]")
        current += ch
    return args + ([current.strip()] if current.strip() else [])


def _walk(obj, path: str):
    for step in re.findall(r"[^.\[\]]+(?:\([^)]*\))?|\[[^\]]+\]", path):
        if step.startswith("["):
            key = step[1:-1]
            obj = obj[int(key)] if key.lstrip("-").isdigit() else obj[key]
        elif step.endswith(")"):
            name, args = step[:-1].split("(")
            obj = getattr(obj, name)(*[a.strip().strip("'") if "'" in a else int(a) for a in args.split(",") if a])
        else:
            obj = getattr(obj, step)
    return obj


# -- the GPU's limits, and the occupancy they allow -----------------------------------------------------
@dataclass(frozen=True)
class ArchLimits:
    """Per-SM limits of one compute capability (CUDA C Programming Guide, "Technical Specifications")."""
    registers_per_sm: int
    threads_per_sm: int
    blocks_per_sm: int
    shared_per_sm: int           # bytes
    shared_per_block: int        # bytes a block may opt in to
    reserved_shared_per_block: int = 1024  # the runtime keeps 1 KiB per block (sm80 and newer)

    @property
    def warps_per_sm(self) -> int:
        return self.threads_per_sm // 32


_KIB = 1024
ARCH = {  # by SM name; the default 48 KiB per block is what Kineto's estimate assumes
    "sm75": ArchLimits(65536, 1024, 16, 64 * _KIB, 64 * _KIB, 0),
    "sm80": ArchLimits(65536, 2048, 32, 164 * _KIB, 163 * _KIB),
    "sm86": ArchLimits(65536, 1536, 16, 100 * _KIB, 99 * _KIB),
    "sm89": ArchLimits(65536, 1536, 24, 100 * _KIB, 99 * _KIB),
    "sm90": ArchLimits(65536, 2048, 32, 228 * _KIB, 227 * _KIB),
    "sm100": ArchLimits(65536, 2048, 32, 228 * _KIB, 227 * _KIB),
    "sm120": ArchLimits(65536, 1536, 32, 128 * _KIB, 99 * _KIB),
}
KINETO_SHARED_PER_BLOCK = 48 * _KIB


@dataclass(frozen=True)
class Occupancy:
    blocks: int                  # resident blocks per SM
    warps: int
    fraction: float              # of the SM's warp slots
    limiter: str                 # what caps it: "registers", "shared memory", "threads", "blocks" (or several)


def occupancy(k: Kernel, limits: ArchLimits) -> Occupancy | None:
    """The occupancy CUDA's calculator gives from the kernel's registers, block and shared memory on this
    device (registers allocated per warp in 256s); None when the trace lacks a figure."""
    if k.registers_per_thread is None or not k.block or k.shared_memory_bytes is None:
        return None
    threads = k.block[0] * k.block[1] * k.block[2]
    warps_per_block = -(-threads // 32)
    registers_per_warp = -(-k.registers_per_thread * 32 // 256) * 256
    by = {"registers": (limits.registers_per_sm // registers_per_warp) // warps_per_block if registers_per_warp else 99,
          "threads": limits.warps_per_sm // warps_per_block,
          "blocks": limits.blocks_per_sm}
    if k.shared_memory_bytes:
        by["shared memory"] = limits.shared_per_sm // (k.shared_memory_bytes + limits.reserved_shared_per_block)
    blocks = min(by.values())
    limiter = " and ".join(name for name, n in by.items() if n == blocks)
    return Occupancy(blocks, blocks * warps_per_block, blocks * warps_per_block / limits.warps_per_sm, limiter)


def occupancy_pct(k: Kernel, limits: ArchLimits) -> float:
    return 100.0 * occupancy(k, limits).fraction


def occupancy_blocks(k: Kernel, limits: ArchLimits) -> float:
    return float(occupancy(k, limits).blocks)


def unpredicted_rows(run: Run) -> float:
    """How many rows of the run's phase the guess did not predict at all."""
    return float(sum(u.whole and in_phase(u.kernel, run.phase) for u in match_guess(run, guess(run))[1]))


def _share(run: Run, phase: str, *index: float) -> float:
    return sum(run.kernels[int(i)].us_per_forward for i in index) / run.gpu_us(phase)


def _launch_share(run: Run, phase: str, *refs: float) -> float:
    pairs = zip(refs[0::2], refs[1::2])
    return sum(run.kernels[int(i)].launched_by[int(j)].us_per_forward for i, j in pairs) / run.gpu_us(phase)


_FUNCTIONS = {"sum": lambda *xs: sum(xs), "ratio": lambda a, b: a / b, "diff": lambda a, b: a - b,
              "moved": lambda run, phase: float(moved(run, phase).value),
              "working_set": lambda run, phase: float(working_set(run, phase).value),
              "written": lambda run, phase: float(written(run, phase).value),
              "share": _share, "launch_share": _launch_share,
              "product": lambda a, b: a * b, "max": lambda *xs: max(xs),
              "rows": lambda run: float(len(run.kernels_of())),
              "fit": lambda *sy: log_slope(sy[0::2], sy[1::2]),
              "unpredicted_rows": unpredicted_rows, "beyond_median": _beyond_median,
              "occupancy_pct": occupancy_pct, "occupancy_blocks": occupancy_blocks}


def context(run: Run, peers: Peers | None = None, **others: Run) -> dict:
    """What `resolve` reads a note's sources against."""
    return {"run": run, "peers": peers or {}, "blog": BLOG, "arch": ARCH, "hbm": HBM_BYTES_PER_US,
            "kineto_shared_per_block": KINETO_SHARED_PER_BLOCK, **others}


# -- the guess against the table -----------------------------------------------------------------
@dataclass
class Unpredicted:
    kernel: Kernel
    extra_calls: float           # launches per forward beyond what the guess expected of this row
    whole: bool                  # no guessed kernel matches this row at all


def match_guess(run: Run, g: Guess) -> tuple[dict[int, list[str]], list[Unpredicted], list[str]]:
    """Pair each kernel the guess expects with one launch in the table: the row of its category and phase (launched
    by the op the guess names, where it names one) with a launch left that takes the most time (flash's backward
    launches a 16 µs dot(dO, O) before its 220 µs dq/dk/dv kernel: the guess's one backward kernel is the latter).
    Returns {row index: what the guess called its launches}, the rows or extra launches it did not predict, and the
    expected kernels no row matched."""
    left = [k.calls_per_forward for k in run.kernels]
    taken: dict[int, list[str]] = {}
    missing = []
    for expected in g.kernels:
        index = max((i for i, k in enumerate(run.kernels) if left[i] > 0.5 and k.category == expected.category
                     and k.phase == expected.phase
                     and (expected.op is None or _launched_by_op(run, k, expected.op))),
                    key=lambda i: run.kernels[i].us_per_forward, default=None)
        if index is None:
            missing.append(expected.what)
        else:
            left[index] -= 1
            taken.setdefault(index, []).append(expected.what)
    # on a CPU an op the guess names and found ran also lists its own self time (repeat_interleave's row beside the
    # copy_ it launched, which the guess's line was matched to): that row is the guessed op, not an unpredicted one
    found_ops = {e.op for e in g.kernels if e.op and e.what not in missing}
    unpredicted = [Unpredicted(k, k.calls_per_forward, whole=True) if i not in taken else
                   Unpredicted(k, left[i], whole=False)
                   for i, k in enumerate(run.kernels) if (i not in taken or round(left[i], 2) > 0)
                   and not (i not in taken and k.name in found_ops)]
    return taken, unpredicted, missing


def _launched_by_op(run: Run, k: Kernel, op: str) -> bool:
    if k.launched_by is None:  # a CPU row is the op itself
        return k.name in (op, op + "_") or (op.endswith("_") and k.name == op)
    return launched_under(k, op, op + "_")


def innermost_op(k: Kernel) -> str | None:
    """The op that made the launch call for most of this kernel's time: its innermost aten op, else its innermost op
    of another name (a Triton kernel's launch sits in a host op named after the kernel itself, which launched
    nothing: the op around it did); None where the chain holds no other."""
    if not k.launched_by:
        return k.name if k.name.startswith("aten::") else None
    top = max(k.launched_by, key=lambda launch: launch.us_per_forward)
    around = [o for o in top.ops if o != k.name]
    return next((o for o in reversed(around) if o.startswith("aten::")), around[-1] if around else None)


# -- notes -------------------------------------------------------------------------------------
def note(rule: str, kind: str, title: str, body: str, *, weight: float, facts: Mapping[str, Quantity] | None = None,
         names: Mapping[str, str] | None = None, kernels: Iterable[Kernel] = (), ops: Iterable[str] = (),
         evidence: Iterable[str] = (), links: Iterable[str] = ()) -> Note:
    """A note whose title and body profiling.text writes from `facts` (numbers) and `names` (kernel and op names,
    quoted words); `evidence` lines are written already (with profiling.text's kernel and host lines)."""
    facts, names = dict(facts or {}), dict(names or {})
    return Note(rule=rule, kind=kind, title=text.fill(title, facts, names), body=text.fill(body, facts, names),
                weight=max(0.0, min(1.0, weight)), facts=facts, kernels=[k.name for k in kernels],
                ops=list(dict.fromkeys(ops)), evidence=list(evidence),
                links=list(links))


def peers_for(run: Run, runs: Iterable[Run]) -> Peers:
    """The runs among `runs` a ratio with `run` means something for: ok with a right answer (`rankable`), another
    variant, same workload (seed aside), same GPU and torch."""
    def same(other: Run) -> bool:
        a, b = other.workload, run.workload  # (a replace re-checks the workload: only where the seeds differ)
        return ((a == b or (a.seed != b.seed and a.replace(seed=0) == b.replace(seed=0)))
                and other.environment.device_name == run.environment.device_name
                and other.environment.torch_version == run.environment.torch_version)
    return {p.variant: p for p in runs if rankable(p) and p.variant != run.variant and same(p)}
