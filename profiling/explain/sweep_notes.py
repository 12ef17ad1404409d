"""A sweep in words: a headline (at the longest length both A and B ran, what the verdict's test says on the
verdict's figure, or why the sweep ended early) and a note for each fact `curves` finds, ranked: where the faster
one changes and where a variant stops fitting first, then slopes that break the expectation, bound changes, kernel
changes, and slopes as expected last. A slope the points do not support is said to be too noisy to fit.

Every number is read from the sweep's runs with its source (`sweep.runs[12].timing.median_ms`); an exponent is the
fit over the runs it names (`fit(...)`), so a test can read each one again.
"""
from __future__ import annotations

from .. import text
from ..results import OUT_OF_MEMORY, Note, Quantity, Run, Sweep
from .curves import (MIN_FIT_POINTS, BoundChange, Crossover, KernelChange, Slope, StopsFitting, bound_changes,
                     crossovers, kernel_changes, ran, slopes, stops_fitting)
from .environment_rules import failure
from .facts import fit, label, measured, note, ratio
from .verdict import decision, said

FIGURE_WORDS = {"timing": "GPU time", "back_to_back": "back to back"}

MAX_WORDS = 40  # a note's title and body together
WEIGHTS = {"sweep_crossover": 0.9, "sweep_stops": 0.8, "sweep_slope_unexpected": 0.6, "sweep_bound": 0.4,
           "sweep_kernels": 0.3, "sweep_slope": 0.1, "sweep_noisy": 0.05}


def explain_sweep(result: Sweep) -> tuple[Note, list[Note]]:
    """The sweep's headline and its notes, ranked."""
    notes = ([_crossover(result, f) for f in crossovers(result)] + [_stops(result, f) for f in stops_fitting(result)]
             + [_slope(result, f) for f in slopes(result) if f.points >= MIN_FIT_POINTS]  # two points: no finding
             + [_bound(result, f) for f in bound_changes(result)]
             + [_kernels(result, f) for f in kernel_changes(result)])
    notes.sort(key=lambda n: -n.weight)  # stable: within a weight, in the order of the sweep's variants
    return headline(result), notes


def _sided(n: Note, result: Sweep, variant: str | None) -> Note:
    """The note's side: 'a' or 'b' for A's or B's curve, the variant's key for another's, 'pair' for both."""
    n.side = "pair" if variant is None else {result.a: "a", result.b: "b"}.get(variant, variant)
    return n


# -- reading the runs ---------------------------------------------------------------------------------
def _index(result: Sweep, variant: str, seq_len: int) -> int:
    return next(i for i, r in enumerate(result.runs) if r.variant == variant and result.value(r) == seq_len)


def _point(result: Sweep, variant: str, seq_len: int) -> Run:
    return result.runs[_index(result, variant, seq_len)]


def _of(result: Sweep, variant: str, seq_len: int, path: str, unit: str) -> Quantity:
    """A figure of the run of `variant` at `seq_len`, with its source in the sweep."""
    return measured(result, f"runs[{_index(result, variant, seq_len)}].{path}", unit, "sweep")


_PATHS = {"time": ("timing.median_ms", "ms"), "memory": ("peak_extra_bytes", "bytes")}


def _fit(result: Sweep, variant: str, lengths: list[int], quantity: str) -> Quantity:
    path, unit = _PATHS[quantity]
    exponent = fit((_of(result, variant, s, f"workload.{result.axis}", "count"), _of(result, variant, s, path, unit))
                   for s in lengths)
    exponent.unit = text.power_unit(result.axis)
    return exponent


def _s(result: Sweep, value: float) -> str:
    """A point of the sweep's axis in words: 'S=1,024', 'B=64'."""
    return text.point(result.axis, value)


POINTS = {"seq_len": ("length", "lengths"), "batch": ("batch", "batches")}  # what a sweep's points are called


def _word(result: Sweep, n: float | None = None) -> str:
    """The sweep's points in words: 'lengths', or '3 lengths' ('batches', '3 batches')."""
    one, many = POINTS[result.axis]
    return many if n is None else text.plural(n, one, many)


# -- the headline ------------------------------------------------------------------------------------
def headline(result: Sweep) -> Note:
    """At the longest length where both ran: what the verdict's test says on the verdict's figure; or why no
    length has both. A sweep that ended early says so first."""
    a, b, on = result.a, result.b, text.on_device(result.environment)
    name = {a: f"{label(a)} [A]", b: f"{label(b)} [B]"}
    lengths = {v: [result.value(r) for r in ran(result, v)] for v in (a, b)}
    both = sorted(set(lengths[a]) & set(lengths[b]))
    ended = f"The sweep stopped early ({result.stopped}). " if result.stopped else ""
    if not both:
        facts = {}

        def alone(v: str, who: str) -> str:
            runs = result.of(v)
            if len(lengths[v]) == 1:
                return f"{name[v]} ran only at {_s(result, lengths[v][0])}"
            if lengths[v]:
                return f"{name[v]} ran {_s(result, lengths[v][0])}–{text.count(lengths[v][-1])}"
            if not runs:
                return f"{name[v]} has no points"
            why, more = failure(runs[0], who, lambda run, path, unit, _: measured(
                result, f"runs[{result.runs.index(run)}].{path}", unit, "sweep"))
            facts.update(more)
            return f"{name[v]} did not run ({why})"
        sides = f"{alone(a, 'a')}; {alone(b, 'b')}"
        return note("sweep_headline", "sweep", f"{ended}No {POINTS[result.axis][0]} where both ran {on}: {sides}.", "",
                    weight=1.0, facts=facts)
    s = both[-1]
    ra, rb = _point(result, a, s), _point(result, b, s)
    v = decision(ra, rb)
    facts = {"a": _of(result, a, s, f"{v.path}.median_ms", "ms"), "b": _of(result, b, s, f"{v.path}.median_ms", "ms")}
    index = {"a": _index(result, a, s), "b": _index(result, b, s)}
    title, more = said(ra, rb, v, (name[a], name[b]), on, facts, lambda run, path, unit, who:
                       measured(result, f"runs[{index[who]}].{path}", unit, "sweep"))
    title, facts = f"At {_s(result, s)} {title}", facts | more
    return note("sweep_headline", "sweep", ended + title, "", weight=1.0, facts=facts)


# -- one note per fact ---------------------------------------------------------------------------------
def _crossover(result: Sweep, f: Crossover) -> Note:
    before, after = f.faster_before, f.faster_after
    paths = {f.s_before: f.path, f.s_after: f.path_after or f.path}
    t = {(v, s): _of(result, v, s, f"{paths[s]}.median_ms", "ms") for v in (before, after)
         for s in (f.s_before, f.s_after)}
    facts = {"r0": ratio(t[after, f.s_before], t[before, f.s_before]),
             "r1": ratio(t[before, f.s_after], t[after, f.s_after])}
    gpu_times = f.same_figure and f.path == "timing"
    if f.same_figure:  # the figure compared is said, so a chart of another figure is never read for it
        where, on0, on1 = f"near {_s(result, f.seq_len)} ({FIGURE_WORDS[f.path]})", "", ""
    else:  # a host-bound side is compared back to back, a GPU-bound pair on GPU time: no one curve crosses
        where = f"between {_s(result, f.s_before)} and {text.count(f.s_after)}"
        on0, on1 = (f" ({FIGURE_WORDS[paths[s]]})" for s in (f.s_before, f.s_after))
    if gpu_times:  # how the work grows; a host-bound pace says how the host's cost does, which is not the point
        facts |= {"e0": _fit(result, before, [f.s_before, f.s_after], "time"),
                  "e1": _fit(result, after, [f.s_before, f.s_after], "time")}
    # a pace crossing where the GPU times had already crossed: said, so no one reads it as the GPU times'
    already, end = [], "."
    if paths[f.s_before] != "timing":
        g = {(v, s): _of(result, v, s, "timing.median_ms", "ms") for v in (before, after)
             for s in (f.s_before, f.s_after)}
        if g[after, f.s_before].value < g[before, f.s_before].value:
            already = [f"{_s(result, s)}, GPU time: {label(v)} {text.quantity(g[v, s])}"
                       for s in (f.s_before, f.s_after) for v in (after, before)]
            end = ("; on GPU time the latter leads at both." if g[after, f.s_after].value < g[before, f.s_after].value
                   else f"; on GPU time the latter leads at {_s(result, f.s_before)} already.")
    return _sided(note(
        "sweep_crossover", "sweep", f"{label(after)} overtakes {label(before)} {where}",
        f"{label(before)} is {{r0}} faster at {_s(result, f.s_before)}{on0}, {label(after)} {{r1}} at {_s(result, f.s_after)}{on1}"
        + ("; between them their GPU times grow as {e0} and {e1}." if gpu_times else end),
        weight=WEIGHTS["sweep_crossover"], facts=facts,
        evidence=[f"{_s(result, s)}: {label(v)} {text.quantity(t[v, s])}" for s in (f.s_before, f.s_after)
                  for v in (before, after)]
        + already + ["a crossing is interpolated on log axes between two lengths where the verdict's test ranked A and "
                     "B in opposite orders"]),
        result, None)


def _stops(result: Sweep, f: StopsFitting) -> Note:
    v = f.variant
    last = f"The longest length it ran is {_s(result, f.last_ran)}." if f.last_ran else "It ran at no shorter length."
    facts: dict[str, Quantity] = {}
    if f.status == OUT_OF_MEMORY:
        point = _point(result, v, f.seq_len)
        why, facts = failure(point, "oom", lambda run, path, unit, _: _of(result, v, f.seq_len, path, unit))
        title = f"{label(v)} ran out of memory at {_s(result, f.seq_len)}" + why.removeprefix("out of memory")
        body = "Longer sequences are not tried. " + last
    else:
        facts = {"needed": _of(result, v, f.seq_len, "needed_bytes", "bytes"),
                 "available": _of(result, v, f.seq_len, "available_bytes", "bytes")}
        title = f"{label(v)} stops at {_s(result, f.seq_len)}: needs {{needed}}, {{available}} available"
        if f.stopped_by_reference:
            facts["reference"] = _of(result, v, f.seq_len, "reference_bytes", "bytes")
            body = ("Without the fp64 accuracy check ({reference}) it would have fitted; the check is what refused "
                    "it. " + last)
        else:
            body = "Refused before anything was allocated; longer sequences need more still. " + last
    return _sided(note("sweep_stops", "sweep", title, body, weight=WEIGHTS["sweep_stops"], facts=facts,
                       evidence=[f"{_s(result, f.seq_len)}: {f.status}" + (f": {f.reason}" if f.reason else "")]),
                   result, v)


def _expected(result: Sweep, f: Slope) -> str:
    """Why the expected exponent is what it is, in words, from what it follows (`curves.expected_exponent`)."""
    w = result.workload
    if result.axis != "seq_len":
        symbol = text.axis_symbol(result.axis)
        if f.basis == "rows":
            return f"a fused kernel stores no scores: its memory is its {symbol}·H·Lq rows"
        if f.basis == "scores":
            return f"the {symbol}·H·Lq×S scores go through memory"
        return f"each of the {symbol} sequences adds the same work"
    if f.basis == "rows":
        return "a fused kernel stores no S×S scores"
    if f.basis == "scores":
        return "the scores go through memory" + (f", {text.plural(w.queries, 'query row')} by S keys"
                                                 if w.q_len else "")
    if f.basis == "pairs" and w.mask == "window":
        return f"it skips the tiles outside the window of {w.window} keys: the work grows as S·W"
    if w.q_len:
        return f"{text.plural(w.queries, 'query', 'queries')} against S keys: the work grows with S"
    return "the work is S²·D per head" + (" (a dense mask: every tile)" if w.mask in ("bool", "window") else "")


def _slope(result: Sweep, f: Slope) -> Note:
    v, quantity = f.variant, f.quantity
    lengths = [result.value(r) for r in ran(result, v, quantity)]
    tail = [s for s in lengths if f.s_from <= s <= f.s_to]
    what = f"time per {text.call(result.workload)}" if quantity == "time" else "peak memory"
    span = f"{_s(result, f.s_from)}–{text.count(f.s_to)} ({_word(result, len(tail))})"
    path, unit = _PATHS[quantity]
    evidence = [f"{_s(result, s)}: {text.quantity(_of(result, v, s, path, unit))}" for s in lengths] + \
        [f"fit over {span}: R² {text.count(round(f.r2, 2))}; stated when R² is at least 0.9 over 3 {_word(result)} or more and the "
         f"first and last {_word(result)}' quartile ranges are apart"]
    if not f.supported:
        return _sided(note("sweep_noisy", "sweep", f"{label(v)}: {what} too noisy to fit over {span}",
                           "The points do not make a line on log–log axes, or their spread is as large as their rise; "
                           "no exponent is stated.", weight=WEIGHTS["sweep_noisy"], evidence=evidence), result, v)
    facts = {"exponent": _fit(result, v, tail, quantity)}
    expected = text.power(f.expected, text.axis_symbol(result.axis))
    busy = _busy([r for r in ran(result, v, quantity) if f.s_from <= result.value(r) <= f.s_to]) \
        if quantity == "time" else None
    if busy:  # timed beside other work: the exponent is of the load as much as of the kernel, and said with it
        title = f"{label(v)}: {what} grows as {{exponent}} on a busy machine ({busy})"
        body = (f"Over {span}; expected {expected}: {_expected(result, f)}. Other work shared the CPU while these "
                "points were timed, so the fit is not the variant's alone: rerun on a quiet machine to read it.")
        evidence.append(f"load average up to {busy}: more runnable work than CPU threads")
    elif f.as_expected:
        title = f"{label(v)}: {what} grows as {{exponent}}, as expected"
        body = f"Fitted over {span}: {_expected(result, f)}."
    else:
        title = f"{label(v)}: {what} grows as {{exponent}}, not {expected}"
        body = f"Over {span}; expected {expected}: {_expected(result, f)}."
    if f.whole_range_exponent is not None and f.whole_range_exponent < f.exponent - 0.25:
        facts["whole"] = _fit(result, v, lengths, quantity)
        fixed = "a fixed per-call cost" if quantity == "time" else "a fixed workspace"
        short = "short S" if result.axis == "seq_len" else f"small {text.axis_symbol(result.axis)}"
        body += f" All {_word(result, len(lengths))}: {{whole}}; {fixed} hides {short}."
    rule = "sweep_slope" if f.as_expected else "sweep_slope_unexpected"
    return _sided(note(rule, "sweep", title, body, weight=WEIGHTS[rule], facts=facts, evidence=evidence), result, v)


def _busy(runs: list[Run]) -> str | None:
    """'load average 8.8 on 2 CPU threads' where the machine's load as any of `runs` was timed live exceeded its CPU
    threads (other work ran beside it); None where it did not, or no load was read (a GPU's, a replay without it)."""
    loads = [x for r in runs for x in (r.load_before, r.load_after) if x is not None]
    threads = next((r.environment.cpu_threads for r in runs if r.environment.cpu_threads), None)
    if not loads or not threads or max(loads) <= threads:
        return None
    return f"load average {max(loads):.1f} on {text.plural(threads, 'CPU thread')}"


def _bound(result: Sweep, f: BoundChange) -> Note:
    v = f.variant
    facts: dict[str, Quantity] = {}
    host = _point(result, v, f.last_host)
    said = "Back to back, calls waited on the CPU that issues them, then on the GPU."
    if host.host_cost is not None and host.timing is not None:
        facts = {"host": _of(result, v, f.last_host, "host_cost.median_ms", "ms"),
                 "gpu": _of(result, v, f.last_host, "warm_call_ms", "ms")}  # the call the host issues, warm
        warm = "" if host.workload.timing == "warm" else " warm"
        said = (f"At {_s(result, f.last_host)} issuing a {host.call} costs the CPU {{host}}; the GPU runs it in "
                f"{{gpu}}{warm}.")
    return _sided(note(
        "sweep_bound", "sweep", f"{label(v)}: host-bound up to {_s(result, f.last_host)}, GPU-bound from {_s(result, f.first_gpu)}",
        said, weight=WEIGHTS["sweep_bound"], facts=facts,
        evidence=[f"{_s(result, result.value(r))}: {r.bound}-bound, back to back {text.ms(r.back_to_back_ms)} per {r.call}"
                  for r in result.of(v) if r.ok and r.bound and r.back_to_back is not None]), result, v)


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
        title = (f"{label(v)}: backend {f.backend_before} → {f.backend_after} from {_s(result, f.s_before)} to "
                 f"{text.count(f.s_after)}")
    elif f.kernels_before is not None and f.kernels_after is not None and f.kernels_before != f.kernels_after:
        facts = {"before": _of(result, v, f.s_before, "kernels_per_forward", "count"),
                 "after": _of(result, v, f.s_after, "kernels_per_forward", "count")}
        title = (f"{label(v)}: {{before}} → {{after}} kernels per {text.call(result.workload)} from {_s(result, f.s_before)} "
                 f"to {text.count(f.s_after)}")
    else:
        title = f"{label(v)}: other kernels from {_s(result, f.s_before)} to {text.count(f.s_after)}"
    changed = [*f.added, *f.removed]
    labels = dict(zip(changed, text.kernel_labels(changed)))  # told apart where an added and a dropped one look alike
    said = "; ".join((["adds {added}"] if f.added else []) + (["drops {removed}"] if f.removed else []))
    body = f"{text.sentence(said)}." if said else "The same kernels, another backend."
    if f.step_exponent is not None:
        facts["step"] = _fit(result, v, [f.s_before, f.s_after], "time")
        body += " Time grows as {step} across the step."
    evidence = [f"added at {_s(result, f.s_after)}: {name} ×{text.count(calls)}" for name, calls in f.added.items()] + \
        [f"gone at {_s(result, f.s_after)}: {name} (×{text.count(calls)} before)" for name, calls in f.removed.items()]
    for shown in range(max(len(f.added), len(f.removed), 1), 0, -1):  # as many names as the words allow
        made = note("sweep_kernels", "sweep", title, body, weight=WEIGHTS["sweep_kernels"], facts=facts,
                    names={"added": _named(f.added, labels, shown), "removed": _named(f.removed, labels, shown)},
                    evidence=evidence)
        if text.word_count(f"{made.title} {made.body}") <= MAX_WORDS:
            break
    return _sided(made, result, v)
