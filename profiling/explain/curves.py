"""What a sweep's curves say, as data: fitted exponents (only where the points support one), the points where
the faster of A and B changes (by the verdict's own test and figure), where each variant stops fitting, bound
changes and kernel changes. `sweep_notes` words them; `figures` draws them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from attention_variants import VARIANTS

from ..results import Run, Sweep
from ..workload import Workload
from .facts import log_fit, log_slope
from .verdict import decision, quartiles_apart

TAIL_POINTS = 4         # the top of the range, where a fixed cost per call no longer hides S²
MIN_FIT_POINTS = 3      # two points always fit a line: a slope needs three to be a finding
MIN_R2 = 0.90           # the named rule: a log–log fit explains at least 90% of the variance ...
QUANTITIES = {"time": lambda r: r.gpu_ms, "memory": lambda r: r.peak_extra_bytes}


def r_squared(xs: Iterable[float], ys: Iterable[float]) -> float:
    """How much of log y's variance the log–log line explains (`facts.log_fit`'s R²)."""
    return log_fit(xs, ys)[1]


def ran(result: Sweep, variant: str, quantity: str = "time") -> list[Run]:
    """The runs of `variant` that ran and have the quantity, smallest point of the axis first."""
    return [r for r in result.of(variant) if r.ok and QUANTITIES[quantity](r)]


@dataclass
class Slope:
    """quantity ∝ S^exponent (or B^) over the axis' [s_from, s_to], against what the algorithm says it should be;
    `supported` only
    when the points make a line (R² ≥ MIN_R2) and rise beyond their own noise (the first and last points'
    quartile ranges apart, for time)."""
    variant: str
    quantity: str                 # time | memory
    exponent: float
    expected: float
    s_from: int
    s_to: int
    points: int
    r2: float
    supported: bool
    whole_range_exponent: float | None = None  # over every point; lower when a fixed cost dominates short S
    basis: str = ""               # what the expectation follows: "pairs" (the mask's, counted), "all pairs" (a
                                  # kernel that skips no tile), "scores" (the S×S matrix in memory), "rows" (fused)

    @property
    def as_expected(self) -> bool:
        return abs(self.exponent - self.expected) <= 0.25


def expected_exponent(variant: str, quantity: str, base: Workload, s_from: int, s_to: int,
                      axis: str = "seq_len") -> tuple[float, str]:
    """How `quantity` should grow along `axis` between two of its points, from what grows: time with the pairs the
    kernel computes over the batch and heads (the mask's where it skips masked tiles, all of them where it cannot:
    S² for a square problem, S·W for a fixed window, S for a fixed number of queries; B over batches); memory with
    the B·H·Lq×S scores where they go through memory, with the B·H·Lq rows for a fused kernel (S for a square
    problem, nothing for a decode step's fixed queries). (The exponent, and what it follows.)"""
    a, b = base.replace(**{axis: s_from}), base.replace(**{axis: s_to})
    if quantity == "time":
        v = VARIANTS[variant]
        basis = "pairs" if v.skips_masked_tiles(base) else "all pairs"
        work = v.forward_flops
    else:
        basis = "rows" if VARIANTS[variant].fused else "scores"
        work = (lambda w: w.batch * w.heads * w.queries) if basis == "rows" else (lambda w: w.score_elements)
    return math.log(work(b) / work(a)) / math.log(s_to / s_from), basis


def _apart(first: Run, last: Run) -> bool:
    """The rise from `first` to `last` is beyond their noise: quartile ranges that do not overlap."""
    return quartiles_apart(first.timing, last.timing)


def slopes(result: Sweep) -> list[Slope]:
    facts = []
    for variant in result.variants:
        for quantity, value in QUANTITIES.items():
            points = ran(result, variant, quantity)
            tail = points[-TAIL_POINTS:]
            if len({result.value(r) for r in tail}) < 2:
                continue
            xs, ys = [result.value(r) for r in tail], [value(r) for r in tail]
            slope, r2 = log_fit(xs, ys)
            supported = len(tail) >= MIN_FIT_POINTS and r2 >= MIN_R2 and (quantity == "memory" or _apart(tail[0], tail[-1]))
            whole = log_slope([result.value(r) for r in points], [value(r) for r in points]) \
                if len(points) > len(tail) else None
            expected, basis = expected_exponent(variant, quantity, result.workload, xs[0], xs[-1], result.axis)
            facts.append(Slope(variant, quantity, slope, expected, xs[0], xs[-1], len(tail), r2, supported, whole,
                               basis))
    return facts


@dataclass
class Crossover:
    """Where the faster of the two changes, interpolated on log axes between two points where the verdict's test
    ranked them, in opposite orders (`seq_len`, `s_before`, `s_after`: points of the sweep's axis)."""
    seq_len: float
    s_before: int
    s_after: int
    faster_before: str
    faster_after: str
    ratio_before: float           # slower / faster at s_before
    ratio_after: float            # slower / faster at s_after
    path: str                     # the figure compared at s_before: "timing" or "back_to_back"
    path_after: str = ""          # the figure compared at s_after; where it differs no crossing S is interpolated

    @property
    def same_figure(self) -> bool:
        return self.path_after in ("", self.path)


def crossovers(result: Sweep) -> list[Crossover]:
    ranked = []                                    # (S, log(slower/faster) signed: > 0 when A is faster, path)
    for s in result.seq_lens:
        a, b = result.at(result.a, s), result.at(result.b, s)
        if not (a and b and a.ok and b.ok):
            continue
        verdict = decision(a, b)
        if verdict.kind == "ranked":
            sign = 1 if verdict.faster == "a" else -1
            ranked.append((s, sign * math.log(verdict.ratio), verdict.path))
    found = []
    for (s0, r0, p0), (s1, r1, p1) in zip(ranked, ranked[1:]):
        if (r0 > 0) == (r1 > 0):
            continue
        x = math.log(s0) + (math.log(s1) - math.log(s0)) * r0 / (r0 - r1)
        names = (result.a, result.b) if r0 > 0 else (result.b, result.a)
        found.append(Crossover(math.exp(x), s0, s1, *names, math.exp(abs(r0)), math.exp(abs(r1)), p0, p1))
    return found


@dataclass
class StopsFitting:
    variant: str
    seq_len: int                  # the first point that did not fit (or ran out of memory)
    status: str                   # does not fit | out of memory
    needed_bytes: int | None
    available_bytes: int | None
    last_ran: int | None          # the largest point that ran
    own_bytes: int | None = None  # the model's figure for the variant's own forward (output + scratch)
    reason: str | None = None
    reference_bytes: int | None = None  # the fp64 accuracy reference's share of needed_bytes

    @property
    def stopped_by_reference(self) -> bool:
        """Without the fp64 check the point would have fitted: the check is what stopped it."""
        return (None not in (self.needed_bytes, self.reference_bytes, self.available_bytes)
                and self.needed_bytes - self.reference_bytes <= self.available_bytes)


def stops_fitting(result: Sweep) -> list[StopsFitting]:
    facts = []
    for variant in result.variants:
        runs = result.of(variant)
        stop = next((r for r in runs if r.stops), None)
        if stop:
            lengths = [result.value(r) for r in runs if r.ok and result.value(r) < result.value(stop)]
            facts.append(StopsFitting(variant, result.value(stop), stop.status, stop.needed_bytes,
                                      stop.available_bytes, lengths[-1] if lengths else None,
                                      stop.estimated_extra_bytes if stop.needed_bytes else None, stop.reason,
                                      stop.reference_bytes))
    return facts


@dataclass
class BoundChange:
    variant: str
    last_host: int                # the largest point where back-to-back calls waited on the host
    first_gpu: int                # the smallest point after it where they waited on the GPU


def bound_changes(result: Sweep) -> list[BoundChange]:
    facts = []
    for variant in result.variants:
        bounded = [r for r in result.of(variant) if r.ok and r.bound]
        for before, after in zip(bounded, bounded[1:]):
            if before.bound == "host" and after.bound == "gpu":
                facts.append(BoundChange(variant, result.value(before), result.value(after)))
                break
    return facts


@dataclass
class KernelChange:
    """Between two neighbouring points the forward's kernels changed: a trend break with a name."""
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


def kernel_changes(result: Sweep) -> list[KernelChange]:
    facts = []
    for variant in result.variants:
        # GPU runs only: a CPU run's "kernels" are the aten ops with measurable self time, which flicker
        runs = [r for r in result.of(variant) if r.ok and r.kernels_per_forward is not None]
        for before, after in zip(runs, runs[1:]):
            names_before, names_after = _counts(before), _counts(after)
            if names_before == names_after and before.backend == after.backend:
                continue
            s0, s1 = result.value(before), result.value(after)
            step = math.log(after.gpu_ms / before.gpu_ms) / math.log(s1 / s0) if before.gpu_ms and after.gpu_ms \
                else None
            facts.append(KernelChange(
                variant, s0, s1, before.kernels_per_forward, after.kernels_per_forward,
                added=_more_calls(names_after, names_before), removed=_more_calls(names_before, names_after),
                backend_before=before.backend, backend_after=after.backend, step_exponent=step))
    return facts


def _counts(run: Run) -> dict[str, float]:
    counts: dict[str, float] = {}
    for k in run.kernels:
        counts[k.short_name] = counts.get(k.short_name, 0.0) + round(k.calls_per_forward, 2)
    return counts


def _more_calls(these: dict[str, float], others: dict[str, float]) -> dict[str, float]:
    """The kernels of `these` that are new, or launched more often, than in `others`, with their calls."""
    return {name: calls for name, calls in these.items() if calls > others.get(name, 0.0)}
