"""Watch it scale: A and B over a list of sequence lengths, everything else fixed.

Each point is one `measurement.measure` call kept light (numbers, statuses and the kernels'
short names, no trace). A point whose memory estimate does not fit is refused before anything
is allocated and kept as data (needed vs available bytes); a real out-of-memory comes back from
`measure` as an error. A variant stops at its first point that does not fit or runs out of
memory: longer sequences would only need more. The facts about the curves (fitted exponents,
a crossover, where each variant stops fitting, a bound change, a kernel switch) are data;
`profiling.explain.sweep_notes` words them.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

import pandas as pd

from attention_variants import Variant, get_variant

from .environment import Environment, detect
from .results import Run, Timing
from .workload import (LIMITS, LIVE_BUDGET_S, Workload, WorkloadError, measure_bytes, memory_budget_bytes,
                       predicted_seconds)

Progress = Callable[[float, str], None]
MAX_POINTS = 12                    # per variant: a sweep is a curve, not a matrix
FIRST_SEQ, LAST_SEQ = 128, LIMITS["seq_len"][1]
CPU_BUDGET_S = 60.0                # a CPU sweep stops cleanly past this, with the points done
FORWARDS_PER_POINT = 15            # warm-up, timing, peak memory and profiled forwards of one measure()
TAIL_POINTS = 4                    # the top of the range, where a fixed cost per call no longer hides S²


def _no_progress(fraction: float, message: str) -> None:
    pass


def _never() -> bool:
    return False


# -- the data ---------------------------------------------------------------------------------
@dataclass
class KernelCount:
    """One kernel (an aten op on CPU) of a point: enough to name what changed between two lengths."""
    short_name: str
    category: str
    calls_per_forward: float
    us_per_forward: float


@dataclass
class SweepPoint:
    variant: str
    seq_len: int
    status: str                               # ok | unsupported | error | does not fit | refused (too slow here)
    reason: str | None = None                 # PyTorch's words, the OOM, or the memory refusal in words
    timing: Timing | None = None              # device time per forward (wall on CPU)
    host_cost: Timing | None = None           # CPU time to issue one forward, GPU kept busy
    pin_cost_ms: float | None = None          # entering and leaving a pinned variant's sdpa_kernel, apart
    back_to_back_ms: float | None = None
    bound: str | None = None                  # "host" | "gpu"
    peak_extra_bytes: int | None = None
    estimated_extra_bytes: int | None = None
    needed_bytes: int | None = None           # does not fit: what the point would need ...
    available_bytes: int | None = None        # ... and what was free
    reference_bytes: int | None = None        # the part of needed_bytes that is measure's fp64 reference
    tflops: float | None = None
    peak_share: float | None = None
    kernels_per_forward: float | None = None
    kernels: list[KernelCount] = field(default_factory=list)
    backend: str | None = None                # the SDPA backend that ran (auto may switch with S)
    first_call_ms: float | None = None
    wall_s: float | None = None               # what measuring this point cost, for the time budget

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def gpu_ms(self) -> float | None:
        return self.timing.median_ms if self.timing else None

    @property
    def out_of_memory(self) -> bool:
        return self.status == "error" and "out of memory" in (self.reason or "")

    @property
    def stops(self) -> bool:
        """Longer sequences need more memory still: the variant is not tried past this point."""
        return self.status in ("does not fit", "refused") or self.out_of_memory

    @classmethod
    def of_run(cls, run: Run, wall_s: float | None = None) -> "SweepPoint":
        kernels = [KernelCount(k.short_name, k.category, k.calls_per_forward, k.us_per_forward) for k in run.kernels]
        return cls(variant=run.variant, seq_len=run.workload.seq_len, status=run.status, reason=run.reason,
                   timing=run.timing, host_cost=run.host_cost, pin_cost_ms=run.pin_cost_ms,
                   back_to_back_ms=run.back_to_back_ms,
                   bound=run.bound, peak_extra_bytes=run.peak_extra_bytes,
                   estimated_extra_bytes=run.estimated_extra_bytes, tflops=run.tflops, peak_share=run.peak_share,
                   kernels_per_forward=run.kernels_per_forward, kernels=kernels, backend=run.backend,
                   first_call_ms=run.first_call_ms, wall_s=wall_s)

    @classmethod
    def from_dict(cls, data: dict) -> "SweepPoint":
        data = dict(data)
        data["kernels"] = [KernelCount(**k) for k in data.get("kernels", [])]
        for key in ("timing", "host_cost"):
            if data.get(key) is not None:
                data[key] = Timing(**data[key])
        return cls(**data)


@dataclass
class Sweep:
    variants: list[str]                       # A and B; a recording holds every variant
    workload: Workload                        # the fixed fields; its seq_len is the first length
    seq_lens: list[int]
    environment: Environment
    points: list[SweepPoint] = field(default_factory=list)
    available_bytes: int | None = None        # the memory budget when the sweep began
    budget_s: float | None = None
    predicted_s: float | None = None          # the whole sweep's cost, predicted from its first points
    stopped: str | None = None                # why it ended before its last point, if it did

    @property
    def a(self) -> str:
        return self.variants[0]

    @property
    def b(self) -> str:
        return self.variants[1]

    def of(self, variant: str) -> list[SweepPoint]:
        """The points of one variant, shortest sequence first."""
        return sorted((p for p in self.points if p.variant == variant), key=lambda p: p.seq_len)

    def select(self, variants: Iterable[str], seq_lens: Iterable[int] | None = None) -> "Sweep":
        """The same sweep narrowed to some variants (in that order) and lengths."""
        variants = list(variants)
        lengths = [s for s in self.seq_lens if seq_lens is None or s in set(seq_lens)]
        points = [p for v in variants for p in self.of(v) if p.seq_len in lengths]
        return Sweep(variants, self.workload, lengths, self.environment, points, self.available_bytes,
                     self.budget_s, self.predicted_s, self.stopped)

    def to_frame(self) -> pd.DataFrame:
        """One row per point, shortest S first (the time column says what it measures: GPU or wall)."""
        time_label = "GPU ms" if self.workload.device == "cuda" else "wall ms"
        rows = []
        for s in self.seq_lens:
            for p in (p for v in self.variants for p in self.of(v) if p.seq_len == s):
                rows.append({
                    "S": s, "variant": p.variant, "status": p.status, time_label: p.gpu_ms,
                    "host µs": p.host_cost.median_ms * 1000 if p.host_cost else None, "bound": p.bound,
                    "peak MiB": p.peak_extra_bytes / 2**20 if p.peak_extra_bytes is not None else None,
                    "TFLOP/s": p.tflops, "% peak": 100 * p.peak_share if p.peak_share else None,
                    "kernels/fwd": p.kernels_per_forward, "first call ms": p.first_call_ms, "wall s": p.wall_s,
                    "kernels or reason": p.reason or ", ".join(k.short_name for k in p.kernels[:3])})
        return pd.DataFrame(rows)

    def to_dict(self) -> dict:
        return {"variants": self.variants, "workload": asdict(self.workload), "seq_lens": self.seq_lens,
                "environment": self.environment.to_dict(), "points": [asdict(p) for p in self.points],
                "available_bytes": self.available_bytes, "budget_s": self.budget_s,
                "predicted_s": self.predicted_s, "stopped": self.stopped}

    @classmethod
    def from_dict(cls, data: dict) -> "Sweep":
        data = dict(data)
        data["workload"] = Workload(**data["workload"])
        data["environment"] = Environment.from_dict(data["environment"])
        data["points"] = [SweepPoint.from_dict(p) for p in data["points"]]
        return cls(**data)

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_json(cls, text: str) -> "Sweep":
        return cls.from_dict(json.loads(text))


def family_label(workload: Workload) -> str:
    """The workload with S left free: '8x16xSx64 bf16 causal (rank 4)'."""
    dims = [str(n) for n in workload.shape]
    dims[-2] = "S"
    return f"{'x'.join(dims)} {workload.dtype}{' causal' if workload.causal else ''} (rank {workload.rank})"


# -- which lengths ------------------------------------------------------------------------------
def needed_bytes(variant: Variant, workload: Workload) -> int:
    """What measuring `variant` at this point may allocate, from nothing: inputs, a forward, the fp64 check."""
    return measure_bytes(workload, variant.scratch_bytes(workload), inputs_ready=False, reference_ready=False)


def reference_bytes(variant: Variant, workload: Workload) -> int:
    """The part of `needed_bytes` that is the fp64 accuracy check."""
    return needed_bytes(variant, workload) - measure_bytes(workload, variant.scratch_bytes(workload),
                                                           inputs_ready=False, reference_ready=True)


def default_seq_lens(variants: Iterable[str], base: Workload, budget_bytes: int | None = None) -> list[int]:
    """Powers of two from 128 up to the largest that fits for the fused variants among `variants`
    (for all of them when none is fused), within the workload's limits and MAX_POINTS; on a CPU, up to the
    length one point of them alone would be refused for time."""
    chosen = [get_variant(v) for v in variants]
    bounding = [v for v in chosen if v.fused] or chosen
    budget = memory_budget_bytes(base.device) if budget_bytes is None else budget_bytes
    lengths = []
    s = FIRST_SEQ
    while s <= LAST_SEQ and len(lengths) < MAX_POINTS:
        w = base.replace(seq_len=s)
        if base.device == "cpu" and predicted_seconds(w, bounding) > LIVE_BUDGET_S["cpu"]:
            break  # one point alone would take longer than a live run may hold this CPU
        if all(needed_bytes(v, w) > budget for v in bounding):
            break
        lengths.append(s)
        s *= 2
    return lengths or [FIRST_SEQ]


def parse_seq_lens(text: str | Iterable[int]) -> list[int]:
    """'128, 256,512' (or a list) -> sorted unique lengths within the limits; at most MAX_POINTS."""
    items = text.replace(",", " ").split() if isinstance(text, str) else list(text)
    low, high = LIMITS["seq_len"]
    lengths = set()
    for item in items:
        try:
            s = int(item)
        except (TypeError, ValueError):
            raise WorkloadError("seq_lens", item, "each length must be a whole number") from None
        if not low <= s <= high:
            raise WorkloadError("seq_lens", s, f"each length must be between {low} and {high}")
        lengths.add(s)
    if not lengths:
        raise WorkloadError("seq_lens", text, "give at least one length")
    if len(lengths) > MAX_POINTS:
        raise WorkloadError("seq_lens", len(lengths), f"at most {MAX_POINTS} lengths per sweep")
    return sorted(lengths)


# -- running ------------------------------------------------------------------------------------
def sweep(a: str, b: str, base_workload: Workload, seq_lens: Iterable[int] | str | None = None, *,
          progress: Progress = _no_progress, should_stop: Callable[[], bool] = _never,
          budget_s: float | None = None) -> Sweep:
    """A and B over `seq_lens` (default: `default_seq_lens`) with the other fields of `base_workload`."""
    return sweep_variants([a, b], base_workload, seq_lens, progress=progress, should_stop=should_stop,
                          budget_s=budget_s)


def sweep_variants(keys: list[str], base: Workload, seq_lens: Iterable[int] | str | None = None, *,
                   progress: Progress = _no_progress, should_stop: Callable[[], bool] = _never,
                   budget_s: float | None = None) -> Sweep:
    """Every variant in `keys` at every length, shortest first (so the variants of one length share
    its inputs and reference). A CPU sweep gets CPU_BUDGET_S unless told otherwise."""
    from .measurement import measure

    variants = [get_variant(k) for k in keys]  # unknown keys fail here, before any work
    lengths = parse_seq_lens(seq_lens) if seq_lens is not None else default_seq_lens(keys, base)
    if budget_s is None and base.device == "cpu":
        budget_s = CPU_BUDGET_S
    if base.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise WorkloadError("device", "cuda", "no CUDA GPU is visible to this process")
    env = detect(base.device)
    result = Sweep(keys, base.replace(seq_len=lengths[0]), lengths, env,
                   available_bytes=memory_budget_bytes(base.device), budget_s=budget_s)
    stopped: set[str] = set()
    total = len(lengths) * len(variants)
    start = time.perf_counter()
    done = 0
    for i, s in enumerate(lengths):
        workload = base.replace(seq_len=s)
        for variant in variants:
            if variant.key in stopped:
                total -= 1
                continue
            spent = time.perf_counter() - start
            if should_stop():
                result.stopped = f"cancelled after {done} of {total} points"
                return result
            if budget_s is not None:
                ahead = _predict_s(result, variant.key, s)
                if ahead is not None and spent + ahead > budget_s:
                    result.stopped = (f"time budget: {variant.key} at S={s} would take about {ahead:.0f} s, "
                                      f"{max(0.0, budget_s - spent):.0f} s of {budget_s:.0f} s left")
                    return result
            point = _measure_point(measure, variant, workload, env,
                                   lambda f, m: progress((done + f) / total, f"S={s} · {m}"),
                                   None if budget_s is None else budget_s - spent)
            result.points.append(point)
            done += 1
            if point.status == "stopped":  # it ran past what was left of the budget: stopped cleanly
                result.stopped = f"time budget: {budget_s:.0f} s spent during {variant.key} at S={s}"
                return result
            if point.stops:
                stopped.add(variant.key)
        if i == 0:  # the first length measured: predict the whole sweep and say so up front
            result.predicted_s = (time.perf_counter() - start) + sum(
                _predict_s(result, v.key, later) or 0.0 for later in lengths[1:] for v in variants
                if v.key not in stopped)
            limit = f" of a {budget_s:.0f} s budget" if budget_s is not None else ""
            progress(done / max(total, 1), f"predicted {result.predicted_s:.0f} s for {total} points{limit}")
    progress(1.0, f"sweep done: {done} points in {time.perf_counter() - start:.1f} s")
    return result


def _measure_point(measure, variant: Variant, workload: Workload, env: Environment,
                   progress: Progress, budget_s: float | None = None) -> SweepPoint:
    """One point: refused before allocating when it does not fit; else measured within `budget_s` (what is left
    of the sweep's), refused up front when predicted to take longer."""
    budget = memory_budget_bytes(workload.device)
    needed = needed_bytes(variant, workload)
    if needed > budget:  # refused here, before measure() allocates anything
        scratch, reference = variant.scratch_bytes(workload), reference_bytes(variant, workload)
        return SweepPoint(variant.key, workload.seq_len, "does not fit",
                          reason=(f"needs about {needed / 2**30:.1f} GiB ({scratch / 2**30:.1f} GiB its own, "
                                  f"{reference / 2**30:.1f} GiB the fp64 accuracy reference), "
                                  f"{budget / 2**30:.1f} GiB free"),
                          estimated_extra_bytes=scratch, needed_bytes=needed, available_bytes=budget,
                          reference_bytes=reference)
    t0 = time.perf_counter()
    try:
        run = measure(variant, workload, env=env, progress=progress, budget_s=budget_s)
    except WorkloadError as error:  # measure's own checks: less memory free than a moment ago, the time budget
        memory = "GiB" in error.limit
        return SweepPoint(variant.key, workload.seq_len, "does not fit" if memory else "refused", reason=error.limit,
                          needed_bytes=needed if memory else None,
                          available_bytes=memory_budget_bytes(workload.device) if memory else None)
    return SweepPoint.of_run(run, wall_s=time.perf_counter() - t0)


def _predict_s(result: Sweep, key: str, seq_len: int) -> float | None:
    """Cost of measuring `key` at `seq_len`, from its longest point so far: the same fixed cost,
    plus FORWARDS_PER_POINT forwards each longer by (S/S_last)²."""
    ran = [p for p in result.of(key) if p.wall_s is not None and p.seq_len <= seq_len]
    if not ran:
        return None
    last = ran[-1]
    forward_s = (last.gpu_ms or 0.0) / 1000.0
    return last.wall_s + FORWARDS_PER_POINT * forward_s * ((seq_len / last.seq_len) ** 2 - 1)


# -- facts about the curves ---------------------------------------------------------------------
QUANTITIES = {"time": lambda p: p.gpu_ms, "memory": lambda p: p.peak_extra_bytes}


def fit_exponent(points: list[SweepPoint], quantity: str = "time") -> float | None:
    """Least-squares slope of log(quantity) against log(S) over the points that ran; None under 2."""
    xy = [(p.seq_len, v) for p in points if p.ok and (v := QUANTITIES[quantity](p)) is not None and v > 0]
    if len({x for x, _ in xy}) < 2:
        return None
    return log_slope([x for x, _ in xy], [y for _, y in xy])


def log_slope(xs: Iterable[float], ys: Iterable[float]) -> float:
    """The exponent k of y ∝ x^k that fits the pairs best (least squares on log–log axes)."""
    xy = [(math.log(x), math.log(y)) for x, y in zip(xs, ys)]
    mean_x = sum(x for x, _ in xy) / len(xy)
    mean_y = sum(y for _, y in xy) / len(xy)
    return (sum((x - mean_x) * (y - mean_y) for x, y in xy)
            / sum((x - mean_x) ** 2 for x, _ in xy))


@dataclass
class Slope:
    """quantity ∝ S^exponent over [s_from, s_to], against what the algorithm says it should be."""
    variant: str
    quantity: str                 # time | memory
    exponent: float
    expected: float
    s_from: int
    s_to: int
    points: int
    whole_range_exponent: float | None = None  # over every point; lower when a fixed cost dominates short S

    @property
    def as_expected(self) -> bool:
        return abs(self.exponent - self.expected) <= 0.25


@dataclass
class Crossover:
    """Where the faster of the two changes, interpolated on log axes between two measured lengths."""
    seq_len: float
    s_before: int
    s_after: int
    faster_before: str
    faster_after: str
    ratio_before: float           # slower / faster at s_before
    ratio_after: float            # slower / faster at s_after
    exponent_overtaken: float     # time's slope across the step of the one that was faster ...
    exponent_overtaking: float    # ... and of the one that overtakes it: the steeper one loses


@dataclass
class StopsFitting:
    variant: str
    seq_len: int                  # the first length that did not fit (or ran out of memory)
    status: str                   # does not fit | refused | error (out of memory)
    needed_bytes: int | None
    available_bytes: int | None
    last_ran: int | None          # the longest length that ran
    own_bytes: int | None = None  # the variant's own scratch: when it fits alone, the reference is what stops it
    reason: str | None = None

    @property
    def stopped_by_reference(self) -> bool:
        return None not in (self.own_bytes, self.available_bytes) and self.own_bytes <= self.available_bytes


@dataclass
class BoundChange:
    variant: str
    last_host: int                # longest S where back-to-back calls waited on the host
    first_gpu: int                # shortest S after it where they waited on the GPU


@dataclass
class KernelChange:
    """Between two neighbouring lengths the forward's kernels changed: a trend break with a name."""
    variant: str
    s_before: int
    s_after: int
    kernels_before: float | None
    kernels_after: float | None
    added: dict[str, float]             # short name -> calls per forward after, where more than before
    removed: dict[str, float]           # short name -> calls per forward before, where more than after
    backend_before: str | None = None
    backend_after: str | None = None
    step_exponent: float | None = None  # time's local slope across the step


def expected_exponent(variant: str, quantity: str) -> float:
    """Time grows as S² for every variant at fixed B·H·D; memory as S² only where the scores go through it."""
    if quantity == "time":
        return 2.0
    return 1.0 if get_variant(variant).fused else 2.0


def slopes(result: Sweep) -> list[Slope]:
    facts = []
    for variant in result.variants:
        for quantity in QUANTITIES:
            ran = [p for p in result.of(variant) if p.ok and QUANTITIES[quantity](p)]
            tail = ran[-TAIL_POINTS:]
            exponent = fit_exponent(tail, quantity)
            if exponent is None:
                continue
            facts.append(Slope(variant, quantity, exponent, expected_exponent(variant, quantity),
                               tail[0].seq_len, tail[-1].seq_len, len(tail),
                               fit_exponent(ran, quantity) if len(ran) > len(tail) else None))
    return facts


def _spread(timing: Timing) -> tuple[float, float]:
    """The interval an order must clear: the quartiles where recorded, else min–max."""
    if timing.p25_ms is not None and timing.p75_ms is not None:
        return timing.p25_ms, timing.p75_ms
    return timing.min_ms, timing.max_ms


def crossovers(result: Sweep) -> list[Crossover]:
    """Every length where the faster of A and B changes. Only lengths where their timing spreads do not
    overlap have an order; the crossing is interpolated on log axes between two such lengths."""
    a = {p.seq_len: p.timing for p in result.of(result.a) if p.ok and p.timing}
    b = {p.seq_len: p.timing for p in result.of(result.b) if p.ok and p.timing}
    ordered = []                                   # (S, log(B/A)), where the order is firm
    for s in sorted(set(a) & set(b)):
        (a_low, a_high), (b_low, b_high) = _spread(a[s]), _spread(b[s])
        if a_high < b_low or b_high < a_low:
            ordered.append((s, math.log(b[s].median_ms / a[s].median_ms)))  # > 0: A is faster
    found = []
    for (s0, r0), (s1, r1) in zip(ordered, ordered[1:]):
        if (r0 > 0) == (r1 > 0):
            continue
        x = math.log(s0) + (math.log(s1) - math.log(s0)) * r0 / (r0 - r1)
        first, second = (a, b) if r0 > 0 else (b, a)
        names = (result.a, result.b) if r0 > 0 else (result.b, result.a)
        step = math.log(s1 / s0)
        found.append(Crossover(
            math.exp(x), s0, s1, *names, math.exp(abs(r0)), math.exp(abs(r1)),
            math.log(first[s1].median_ms / first[s0].median_ms) / step,
            math.log(second[s1].median_ms / second[s0].median_ms) / step))
    return found


def stops_fitting(result: Sweep) -> list[StopsFitting]:
    facts = []
    for variant in result.variants:
        points = result.of(variant)
        stop = next((p for p in points if p.stops), None)
        if stop:
            ran = [p.seq_len for p in points if p.ok and p.seq_len < stop.seq_len]
            facts.append(StopsFitting(variant, stop.seq_len, stop.status, stop.needed_bytes,
                                      stop.available_bytes, ran[-1] if ran else None,
                                      stop.estimated_extra_bytes if stop.status == "does not fit" else None,
                                      stop.reason))
    return facts


def bound_changes(result: Sweep) -> list[BoundChange]:
    facts = []
    for variant in result.variants:
        bounded = [p for p in result.of(variant) if p.ok and p.bound]
        for before, after in zip(bounded, bounded[1:]):
            if before.bound == "host" and after.bound == "gpu":
                facts.append(BoundChange(variant, before.seq_len, after.seq_len))
                break
    return facts


def kernel_changes(result: Sweep) -> list[KernelChange]:
    facts = []
    for variant in result.variants:
        # GPU points only: a CPU point's "kernels" are the aten ops with measurable self time, which flicker
        ran = [p for p in result.of(variant) if p.ok and p.kernels_per_forward is not None]
        for before, after in zip(ran, ran[1:]):
            names_before = _counts(before)
            names_after = _counts(after)
            if names_before == names_after and before.backend == after.backend:
                continue
            step = None
            if before.gpu_ms and after.gpu_ms:
                step = math.log(after.gpu_ms / before.gpu_ms) / math.log(after.seq_len / before.seq_len)
            facts.append(KernelChange(
                variant, before.seq_len, after.seq_len, before.kernels_per_forward, after.kernels_per_forward,
                added=_more_calls(names_after, names_before), removed=_more_calls(names_before, names_after),
                backend_before=before.backend, backend_after=after.backend, step_exponent=step))
    return facts


def _counts(point: SweepPoint) -> dict[str, float]:
    counts: dict[str, float] = {}
    for k in point.kernels:
        counts[k.short_name] = counts.get(k.short_name, 0.0) + round(k.calls_per_forward, 2)
    return counts


def _more_calls(these: dict[str, float], others: dict[str, float]) -> dict[str, float]:
    """The kernels of `these` that are new, or launched more often, than in `others`, with their calls."""
    return {name: calls for name, calls in these.items() if calls > others.get(name, 0.0)}


def facts(result: Sweep) -> list:
    """Everything the curves say, as data: slopes, crossovers, stops, bound changes, kernel changes."""
    return [*slopes(result), *crossovers(result), *stops_fitting(result), *bound_changes(result),
            *kernel_changes(result)]


# -- recording on a GPU ---------------------------------------------------------------------------
DOUBLING = [2**i for i in range(7, 18)]   # 128 … 131072
FUSED = ("sdpa_efficient", "sdpa_flash", "sdpa_cudnn", "sdpa_auto", "flex")
# What `record-sweeps` runs: the blog's workload for every variant, and a long-context one for the fused.
RECORDED_FAMILIES = (
    (Workload.blog(), None),                                  # None: every variant
    (Workload.blog(batch=1, head_dim=128), FUSED),
)


def record_sweeps(out_dir, families=RECORDED_FAMILIES, progress: Callable[[str], None] = print) -> list[Sweep]:
    """Each family over 128…131072, every variant stopping at its first point that does not fit;
    written to out_dir/sweeps.json after each family (no traces: a sweep keeps numbers and kernel names)."""
    from pathlib import Path

    from attention_variants import VARIANTS

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sweeps = []
    for base, keys in families:
        t0 = time.perf_counter()
        result = sweep_variants(list(keys or VARIANTS), base, DOUBLING,
                                progress=lambda f, m: progress(f"{time.perf_counter() - t0:6.1f} s  {m}")
                                if m.endswith(": done") or m.startswith("predicted") else None)
        table = result.to_frame().drop(columns=["host µs", "bound", "TFLOP/s", "first call ms"])
        progress(f"{family_label(base)}: {len(result.points)} points in {time.perf_counter() - t0:.0f} s\n"
                 f"{table.to_string(index=False, max_colwidth=60)}")
        sweeps.append(result)
        (out_dir / "sweeps.json").write_text(json.dumps([s.to_dict() for s in sweeps], indent=1))
    return sweeps
