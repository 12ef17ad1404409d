"""A sweep in words: a headline (at the longest length both A and B ran, who is faster, by how much, on which
device) and a note for each fact `profiling.sweep` finds in the curves, ranked: where the faster one changes
and where a variant stops fitting first, then slopes that break the expectation, bound changes, kernel changes,
and slopes as expected last.

Every number is read from the sweep's points with its source (`sweep.points[12].timing.median_ms`); an
exponent is the fit over the points it names (`fit(...)`), so a test can read each one again.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import text
from ..results import Note, Quantity
from ..sweep import (QUANTITIES, BoundChange, Crossover, KernelChange, Slope, StopsFitting, Sweep, SweepPoint,
                     bound_changes, crossovers, kernel_changes, slopes, stops_fitting)
from .facts import fit, label, measured, note, ratio
from .verdict import bounding, ordered

MAX_WORDS = 40  # a note's title and body together
WEIGHTS = {"sweep_crossover": 0.9, "sweep_stops": 0.8, "sweep_slope_unexpected": 0.6, "sweep_bound": 0.4,
           "sweep_kernels": 0.3, "sweep_slope": 0.1}


@dataclass
class SweepExplanation:
    headline: str                             # one sentence about the longest length where both A and B ran
    notes: list[Note] = field(default_factory=list)  # ranked, most important first


def explain_sweep(result: Sweep) -> SweepExplanation:
    notes = ([_crossover(result, f) for f in crossovers(result)] + [_stops(result, f) for f in stops_fitting(result)]
             + [_slope(result, f) for f in slopes(result)] + [_bound(result, f) for f in bound_changes(result)]
             + [_kernels(result, f) for f in kernel_changes(result)])
    notes.sort(key=lambda n: -n.weight)  # stable: within a weight, in the order of the sweep's variants
    return SweepExplanation(headline(result), notes)


def _sided(n: Note, result: Sweep, variant: str | None) -> Note:
    """The note's side: 'a' or 'b' for A's or B's curve, the variant's key for another's, 'pair' for both."""
    n.side = "pair" if variant is None else {result.a: "a", result.b: "b"}.get(variant, variant)
    return n


# -- reading the points -------------------------------------------------------------------------------
def _index(result: Sweep, variant: str, seq_len: int) -> int:
    return next(i for i, p in enumerate(result.points) if p.variant == variant and p.seq_len == seq_len)


def _point(result: Sweep, variant: str, seq_len: int) -> SweepPoint:
    return result.points[_index(result, variant, seq_len)]


def _of(result: Sweep, variant: str, seq_len: int, path: str, unit: str) -> Quantity:
    """A figure of the point of `variant` at `seq_len`, with its source in the sweep."""
    return measured(result, f"points[{_index(result, variant, seq_len)}].{path}", unit, "sweep")


_PATHS = {"time": ("timing.median_ms", "ms"), "memory": ("peak_extra_bytes", "bytes")}


def _fit(result: Sweep, variant: str, lengths: list[int], quantity: str) -> Quantity:
    path, unit = _PATHS[quantity]
    return fit((_of(result, variant, s, "seq_len", "count"), _of(result, variant, s, path, unit)) for s in lengths)


def _s(seq_len: float) -> str:
    return f"S={round(seq_len)}"


# -- the headline ------------------------------------------------------------------------------------
def headline(result: Sweep) -> str:
    """At the longest length where both ran: who is faster, by how much, on what; or level within noise."""
    a, b, on = result.a, result.b, text.on_device(result.environment)
    name = {a: f"{label(a)} [A]", b: f"{label(b)} [B]"}
    ran = {v: [p.seq_len for p in result.of(v) if p.ok and p.timing] for v in (a, b)}
    both = sorted(set(ran[a]) & set(ran[b]))
    if not both:
        def alone(v: str) -> str:
            points = result.of(v)
            if ran[v]:
                return f"{name[v]} ran {_s(ran[v][0])}–{ran[v][-1]}"
            return f"{name[v]} did not run ({points[0].status})" if points else f"{name[v]} has no points"
        return f"No length where both ran {on}: {alone(a)}; {alone(b)}."
    s = both[-1]
    device = result.environment.device
    (ta, pa, wa), (tb, pb, wb) = bounding(_point(result, a, s), device), bounding(_point(result, b, s), device)
    facts = {"a": _of(result, a, s, f"{pa}.median_ms", "ms"), "b": _of(result, b, s, f"{pb}.median_ms", "ms")}
    what = wa if wa == wb else f"{wa} vs {wb}"
    fast, slow = (a, b) if ta.median_ms <= tb.median_ms else (b, a)
    (tf, ts), (first, second) = ((ta, tb), ("a", "b")) if fast == a else ((tb, ta), ("b", "a"))
    gap = {"ratio": ratio(facts[second], facts[first])}
    if a != b and ordered(tf, ts):
        return text.fill(f"At {_s(s)} {name[fast]} is {{ratio}} faster than {name[slow]} {on}: "
                         f"{{{first}}} vs {{{second}}} per forward ({what}).", facts | gap)
    if a != b and tf.max_ms < ts.min_ms:  # apart, but from too few samples for the named test to call it
        fewer, path = min(((a, pa), (b, pb)), key=lambda vp: _point(result, vp[0], s).timing.samples)
        gap["samples"] = _of(result, fewer, s, f"{path}.samples", "count")
        return text.fill(f"At {_s(s)} {name[fast]} reads {{ratio}} faster than {name[slow]} {on}, {{{first}}} vs "
                         f"{{{second}}} per forward ({what}), but from {{samples}} samples: too few to call it.",
                         facts | gap)
    facts |= {"spread_a": _of(result, a, s, f"{pa}.spread_pct", "pct"),
              "spread_b": _of(result, b, s, f"{pb}.spread_pct", "pct")}
    why = "the same variant, so no winner" if a == b else "level within noise"
    return text.fill(f"At {_s(s)} {name[a]} and {name[b]} are {why} {on}: {{a}} vs {{b}} per forward ({what}; "
                     "spread {spread_a} / {spread_b}).", facts)


# -- one note per fact ---------------------------------------------------------------------------------
def _crossover(result: Sweep, f: Crossover) -> Note:
    before, after = f.faster_before, f.faster_after
    t = {(v, s): _of(result, v, s, "timing.median_ms", "ms") for v in (before, after) for s in (f.s_before, f.s_after)}
    facts = {"r0": ratio(t[after, f.s_before], t[before, f.s_before]),
             "r1": ratio(t[before, f.s_after], t[after, f.s_after]),
             "e0": _fit(result, before, [f.s_before, f.s_after], "time"),
             "e1": _fit(result, after, [f.s_before, f.s_after], "time")}
    return _sided(note(
        "sweep_crossover", "sweep", f"{label(after)} overtakes {label(before)} near {_s(f.seq_len)}",
        f"{label(before)} is {{r0}} faster at {_s(f.s_before)}, {label(after)} {{r1}} at {_s(f.s_after)}; "
        "between them their times grow as {e0} and {e1}.",
        weight=WEIGHTS["sweep_crossover"], facts=facts,
        evidence=[f"{_s(s)}: {label(v)} {text.quantity(t[v, s])}" for s in (f.s_before, f.s_after)
                  for v in (before, after)]
        + ["a crossing is interpolated on log axes between two lengths whose timing spreads do not overlap"]),
        result, None)


def _stops(result: Sweep, f: StopsFitting) -> Note:
    v = f.variant
    last = f"The longest length it ran is {_s(f.last_ran)}." if f.last_ran else "It ran at no shorter length."
    facts: dict[str, Quantity] = {}
    reason = " ".join((f.reason or f.status).split(";")[0].split()[:18]).rstrip(".")
    names = {"reason": reason[:1].upper() + reason[1:]}
    if f.status == "error":  # a point stops on an error only when it ran out of memory
        title = f"{label(v)} ran out of memory at {_s(f.seq_len)}"
        body = "The allocator failed during the measurement; longer sequences are not tried. " + last
    elif f.needed_bytes is not None and f.available_bytes is not None:
        facts = {"needed": _of(result, v, f.seq_len, "needed_bytes", "bytes"),
                 "available": _of(result, v, f.seq_len, "available_bytes", "bytes")}
        title = f"{label(v)} stops at {_s(f.seq_len)}: needs {{needed}}, {{available}} available"
        if f.stopped_by_reference:
            facts["own"] = _of(result, v, f.seq_len, "estimated_extra_bytes", "bytes")
            body = "Its forward alone needs {own}; the fp64 accuracy check brings the point to {needed}. " + last
        else:
            body = "Refused before anything was allocated; longer sequences need more still. " + last
    else:
        title = f"{label(v)} stops at {_s(f.seq_len)}: {f.status}"
        body = "{reason}. " + last
    return _sided(note("sweep_stops", "sweep", title, body, weight=WEIGHTS["sweep_stops"], facts=facts, names=names,
                       evidence=[f"{_s(f.seq_len)}: {f.status}" + (f": {f.reason}" if f.reason else "")]), result, v)


_EXPECTED = {("time", 2.0): "the work is S²·D per head",
             ("memory", 2.0): "the S×S scores go through memory",
             ("memory", 1.0): "a fused kernel stores no S×S scores"}


def _slope(result: Sweep, f: Slope) -> Note:
    v, quantity = f.variant, f.quantity
    ran = [p.seq_len for p in result.of(v) if p.ok and QUANTITIES[quantity](p)]
    tail = [s for s in ran if f.s_from <= s <= f.s_to]
    facts = {"exponent": _fit(result, v, tail, quantity)}
    what = "time per forward" if quantity == "time" else "peak memory"
    expected = text.power(f.expected)
    span = f"Fitted over {_s(f.s_from)}–{f.s_to} ({text.plural(len(tail), 'length')})"
    if f.as_expected:
        title = f"{label(v)}: {what} grows as {{exponent}}, as expected"
        body = f"{span}: {_EXPECTED[quantity, f.expected]}."
    else:
        title = f"{label(v)}: {what} grows as {{exponent}}, not {expected}"
        body = f"{span}; {expected} was expected: {_EXPECTED[quantity, f.expected]}."
    if f.whole_range_exponent is not None and f.whole_range_exponent < f.exponent - 0.25:
        facts["whole"] = _fit(result, v, ran, quantity)
        fixed = "a fixed per-call cost" if quantity == "time" else "a fixed workspace"
        body += f" Over all {text.plural(len(ran), 'length')} {{whole}}: {fixed} hides short S."
    rule = "sweep_slope" if f.as_expected else "sweep_slope_unexpected"
    path, unit = _PATHS[quantity]
    return _sided(note(rule, "sweep", title, body, weight=WEIGHTS[rule], facts=facts,
                       evidence=[f"{_s(s)}: {text.quantity(_of(result, v, s, path, unit))}" for s in ran]), result, v)


def _bound(result: Sweep, f: BoundChange) -> Note:
    v = f.variant
    facts: dict[str, Quantity] = {}
    host = _point(result, v, f.last_host)
    said = "Back to back, calls waited on the CPU that issues them, then on the GPU."
    if host.host_cost is not None and host.timing is not None:
        facts = {"host": _of(result, v, f.last_host, "host_cost.median_ms", "ms"),
                 "gpu": _of(result, v, f.last_host, "timing.median_ms", "ms")}
        said = f"At {_s(f.last_host)} issuing a call costs the CPU {{host}}; the GPU runs it in {{gpu}}."
    return _sided(note(
        "sweep_bound", "sweep", f"{label(v)}: host-bound up to {_s(f.last_host)}, GPU-bound from {_s(f.first_gpu)}",
        said, weight=WEIGHTS["sweep_bound"], facts=facts,
        evidence=[f"{_s(p.seq_len)}: {p.bound}-bound, back to back {text.ms(p.back_to_back_ms)} per call"
                  for p in result.of(v) if p.ok and p.bound and p.back_to_back_ms is not None]), result, v)


def _named(kernels: dict[str, float], labels: dict[str, str], shown: int) -> str:
    """'vectorized · mul ×8, elementwise · masked_fill ×8 and 1 more': table labels, the calls where not one."""
    words = [labels[name] + (f" ×{text.count(calls)}" if round(calls, 2) != 1 else "")
             for name, calls in kernels.items()]
    more = len(words) - shown
    return ", ".join(words[:shown]) + (f" and {more} more" if more > 0 else "")


def _kernels(result: Sweep, f: KernelChange) -> Note:
    v = f.variant
    facts: dict[str, Quantity] = {}
    if f.backend_before != f.backend_after:
        title = f"{label(v)}: backend {f.backend_before} → {f.backend_after} from {_s(f.s_before)} to {f.s_after}"
    elif f.kernels_before is not None and f.kernels_after is not None and f.kernels_before != f.kernels_after:
        facts = {"before": _of(result, v, f.s_before, "kernels_per_forward", "count"),
                 "after": _of(result, v, f.s_after, "kernels_per_forward", "count")}
        title = f"{label(v)}: {{before}} → {{after}} kernels per forward from {_s(f.s_before)} to {f.s_after}"
    else:
        title = f"{label(v)}: other kernels from {_s(f.s_before)} to {f.s_after}"
    changed = [*f.added, *f.removed]
    labels = dict(zip(changed, text.kernel_labels(changed)))  # told apart where an added and a dropped one look alike
    said = "; ".join((["adds {added}"] if f.added else []) + (["drops {removed}"] if f.removed else []))
    body = f"{said[0].upper()}{said[1:]}." if said else "The same kernels, another backend."
    if f.step_exponent is not None:
        facts["step"] = _fit(result, v, [f.s_before, f.s_after], "time")
        body += " Time grows as {step} across the step."
    evidence = [f"added at {_s(f.s_after)}: {name} ×{text.count(calls)}" for name, calls in f.added.items()] + \
        [f"gone at {_s(f.s_after)}: {name} (×{text.count(calls)} before)" for name, calls in f.removed.items()]
    for shown in range(max(len(f.added), len(f.removed), 1), 0, -1):  # as many names as the words allow
        made = note("sweep_kernels", "sweep", title, body, weight=WEIGHTS["sweep_kernels"], facts=facts,
                    names={"added": _named(f.added, labels, shown), "removed": _named(f.removed, labels, shown)},
                    evidence=evidence)
        if text.word_count(f"{made.title} {made.body}") <= MAX_WORDS:
            break
    return _sided(made, result, v)
