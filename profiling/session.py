"""The front door: every request (page, API, command line, bench) goes through here, the same way.

`plan(request)` decides, before anything runs, whether the request can be served: the recording holds it, or it
fits this machine's memory and time budget; else a `Refusal` of a kind ("invalid", "memory", "time",
"unrecorded") with what it needs and what is available. `compare(request)` and `sweep(request)` then measure live
or replay the recording, explain once, and return one `Answer` shape: the request, the result and the explanation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from attention_variants import VARIANTS, Variant, reasons as why_not

from . import text
from . import context_parallel as cp
from .phases import spent
from .budget import available_bytes, check_time, memory_refusal, predicted_seconds
from .environment import Environment, detect
from .explain import Explanation, explain, explain_sweep
from .measurement import Guard, Progress, measure_runs
from .replay import find_recorded, find_recorded_sweep, recorded_runs, recorded_sweeps, unrecorded_message
from .request import LIVE, MAX_LENGTHS, Request
from .results import Comparison, Run, Sweep
from .sweep import fitting, run_sweep
from .workload import FIELDS, Refusal, Workload, spec_of

visible_refusal = cp.visible_refusal

FIRST_LENGTH = 128
CP_ELSEWHERE = ("the comparison and the sweep run on one GPU: a run over several is served by "
                "session.context_parallel (profiling/context_parallel.py), rank by rank")


def _no_progress(fraction: float, message: str) -> None:
    pass


def _never() -> bool:
    return False


@dataclass(frozen=True)
class Plan:
    """What serving a request will do: its variants, where, which lengths (a sweep), and what it should cost."""
    request: Request
    variants: tuple[Variant, Variant]
    environment: Environment                   # the live device's, or the recording's
    lengths: tuple[int, ...] | None = None     # a sweep's values of its axis
    predicted_s: float | None = None           # a live request's wall time (a sweep's: its first length)
    budget_s: float | None = None
    reasons: dict[str, str | None] = field(default_factory=dict)  # live: why each variant cannot run here (None:
                                                                  # it can), decided once, read by all that follow
    energy: bool = False                       # a live GPU comparison: each variant's energy per call measured (and
                                               # its loop priced in predicted_s)


@dataclass
class Answer:
    """A served request: what was asked, what was measured or replayed, and what the explainer says of it."""
    request: Request
    result: Comparison | Sweep
    explanation: Explanation

    @property
    def measured(self) -> str:
        """One line of what this answer is of: where it ran, live or which recording, the problem and its pass."""
        r = self.result
        if isinstance(r, Comparison):
            return text.measured(self.request.live, self.request.source, r.a.environment, r.workload,
                                 quantised=r.quantised_sides())
        reached = sorted({r.value(run) for run in r.runs})  # a sweep stopped early: the lengths it reached, not its plan
        return text.measured(self.request.live, self.request.source, r.environment, r.workload, r.axis, reached)

    def to_dict(self) -> dict:
        """What a client is sent: the source, what was measured in one line, the result (naming no file of this
        machine) and the explanation."""
        result = self.result.without_files() if isinstance(self.result, Comparison) else self.result
        return {"source": self.request.source, "measured": self.measured, **result.to_dict(),
                **self.explanation.to_dict()}


def plan(request: Request, *, budget_s: float | None = None, sweep: bool = False, energy: bool = True) -> Plan:
    """Whether `request` can be served, and how; a Refusal if not. A live request is checked against the memory
    free now and, given `budget_s`, the wall time it may hold the machine. A live comparison on a GPU measures each
    variant's energy per call unless `energy` is off (a sweep never does: a second a variant and point)."""
    variants = (VARIANTS[request.a], VARIANTS[request.b])
    w = request.workload
    if sweep and w.lengths is not None:  # every point would be the same documents: S and B follow from them
        raise Refusal("lengths", w.lengths, f"a sweep varies {text.axis_symbol(request.axis)}, which packed documents "
                                            "set (B their count, S the longest): leave lengths empty to sweep")
    if not request.live:
        if sweep:
            axis = request.axis
            recorded = find_recorded_sweep(request.source, request.a, request.b, w, axis)
            if recorded is None:
                def over(a: str) -> str:  # a sweep over S is said as it always was; another axis is named
                    return "" if a == "seq_len" else f" over {text.axis_symbol(a)}"
                # one or two lines: the sweeps that hold this pair (an embed's frame was half filled with all)
                sweeps = recorded_sweeps(request.source)
                pair = sorted((s for s in sweeps if {request.a, request.b} <= set(s.variants)),  # nearest first
                              key=lambda s: (s.axis != axis, sum(getattr(s.workload, f.name) != getattr(w, f.name)
                                                                 for f in FIELDS if f.name != axis)))
                more = f" (and {text.plural(len(pair) - 1, 'other')})" if len(pair) > 1 else ""
                held = (f"Of {request.a} and {request.b} it holds {pair[0].workload.family(pair[0].axis)}"
                        f"{over(pair[0].axis)}{more}" if pair else
                        f"It holds no sweep of both ({text.plural(len(sweeps), 'sweep')} of other pairs)")
                raise Refusal("source", request.source,
                              f"The recording '{request.source}' has no sweep{over(axis)} of {request.a} and "
                              f"{request.b} at {w.family(axis)}. {held}.", kind="unrecorded")
            missing = [s for s in request.seq_lens or () if s not in recorded.seq_lens]
            if missing:
                raise Refusal("seq_lens", ",".join(map(str, missing)),
                              f"The recorded sweep has no {text.axis_symbol(axis)}="
                              f"{', '.join(map(text.count, missing))}; it holds "
                              + ", ".join(map(text.count, recorded.seq_lens)) + ".", kind="unrecorded")
            return Plan(request, variants, recorded.environment, request.seq_lens or tuple(recorded.seq_lens))
        missing = unrecorded_message(request.source, w, (request.a, request.b))
        if missing:
            raise Refusal("source", request.source, missing, kind="unrecorded")
        return Plan(request, variants, recorded_runs(request.source)[0].environment)
    if w.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise Refusal("device", "cuda", "no CUDA GPU is visible to this process")
    if w.gpus > 1:
        raise visible_refusal(w) or Refusal("gpus", w.gpus, CP_ELSEWHERE)
    env = detect(w.device)
    lengths = None
    if sweep:
        axis = request.axis
        lengths = request.seq_lens or default_lengths(variants, w, env, budget_s, axis)
        for s in lengths:  # every point must make a workload with the other fields (a window, a query length)
            try:
                w.replace(**{axis: s})
            except Refusal as error:
                raise Refusal(error.field, error.value, f"{error.limit.rstrip('.')} (at the sweep's point "
                              f"{text.axis_symbol(axis)}={s} of seq_lens)") from None
        w = w.replace(**{axis: lengths[0]})
    reasons = why_not(variants, w, env)
    free = available_bytes(w.device)
    for v in variants:
        refusal = memory_refusal(v, w, env, free) if reasons[v.key] is None else None
        if refusal and not sweep:  # a sweep keeps a point that does not fit as data
            raise refusal
    energy = energy and not sweep and w.device == "cuda"
    predicted = check_time(w, variants, env, budget_s, reasons=reasons, energy=energy) if budget_s is not None else \
        predicted_seconds(w, variants, env, reasons=reasons, energy=energy)
    return Plan(request, variants, env, lengths, predicted, budget_s, reasons, energy)


@dataclass(frozen=True)
class Preview:
    """What the page shows as the controls change, before anything runs: the request the values make (None when
    they make none), why it could not be served as it stands (a Refusal of any kind: a bad field, memory, time, a
    workload the recording lacks), and for a live one why each variant could not run here (None: it can)."""
    request: Request | None
    refusal: Refusal | None
    reasons: dict[str, str | None]


def preview(values, live_device: str, *, budget_s: float | None = None, sweep: bool = False,
            seq_lens: str | None = None) -> Preview:
    """`plan`, asked as the controls change: never raises, says what would happen on Run."""
    try:
        request = Request.from_values(values, live_device, seq_lens)
    except Refusal as error:
        return Preview(None, error, {})
    try:
        p = plan(request, budget_s=budget_s, sweep=sweep)
    except Refusal as error:
        return Preview(request, error, {})
    return Preview(request, None, p.reasons)


def default_lengths(variants, base: Workload, env: Environment, budget_s: float | None,
                    axis: str = "seq_len") -> tuple[int, ...]:
    """Powers of two from 128 (S; the batch from 1) up to the largest the fused variants among `variants` fit in
    memory (all of them when none is fused), at most MAX_LENGTHS; given a budget, up to the point one alone would
    overrun. S starts high enough for the window, the query length and a whole number of pages."""
    bounding = [v for v in variants if v.fused] or list(variants)
    free = available_bytes(base.device)
    lengths = []
    s = FIRST_LENGTH if axis == "seq_len" else 1
    while axis == "seq_len" and s < max(base.window or 0, base.q_len or 0, base.page_size or 0):
        s *= 2
    high = spec_of(axis).limits[1]
    while s <= high and len(lengths) < MAX_LENGTHS:
        w = base.replace(**{axis: s})
        if budget_s is not None and predicted_seconds(w, bounding, env) > budget_s:
            break
        if all(memory_refusal(v, w, env, free) for v in bounding):
            break
        lengths.append(s)
        s *= 2
    return tuple(lengths) or (s if axis == "seq_len" else 1,)


def compare(request: Request, *, budget_s: float | None = None, progress: Progress = _no_progress,
            cancelled: Callable[[], bool] = _never, trace_dir=None, energy: bool = True) -> Answer:
    """A vs B on the request's workload, measured live (within `budget_s`, stopping cleanly when `cancelled`; on a
    GPU with each one's energy per call unless `energy` is off) or replayed from the recording; explained."""
    with spent("plan"):
        p = plan(request, budget_s=budget_s, energy=energy)
    if request.live:
        runs = measure_runs(list(p.variants), request.workload, env=p.environment, trace_dir=trace_dir,
                            progress=progress, guard=Guard.within(budget_s, cancelled), labels=["A", "B"],
                            reasons=p.reasons, energy=p.energy)
        comparison = Comparison(*runs)
    else:
        with spent("replay lookup"):
            comparison = Comparison(*(find_recorded(request.source, key, request.workload)
                                      for key in (request.a, request.b)))
    with spent("explain"):
        return Answer(request, comparison, explain(comparison))


def sweep(request: Request, *, budget_s: float | None = None, progress: Progress = _no_progress,
          cancelled: Callable[[], bool] = _never) -> Answer:
    """A and B over the request's lengths (or the plan's), the other fields fixed; live or replayed; explained."""
    with spent("plan"):
        p = plan(request, budget_s=budget_s, sweep=True)
    if request.live:
        result = run_sweep(list(p.variants), request.workload, list(p.lengths), p.environment, progress=progress,
                           guard=Guard.within(budget_s, cancelled), axis=request.axis)
    else:
        with spent("replay lookup"):
            recorded = find_recorded_sweep(request.source, request.a, request.b, request.workload, request.axis)
            result = recorded.select([request.a, request.b], p.lengths)
    with spent("explain"):
        return Answer(request, result, explain_sweep(result))


def measure(workload: Workload, keys, *, trace_dir=None, progress: Progress = _no_progress,
            guard: Guard | None = None, energy: bool = False) -> list[Run]:
    """The door of the recordings, the benches and the warm-up: every variant of `keys` on `workload`, measured live
    as one session (their timings interleaved), each planned as a request is: one that cannot run, or does not fit
    the memory free now, comes back as a run saying so, without a byte allocated for it. No time budget: a recording
    runs as long as it needs (`guard`: when to stop, at the next safe point). With `energy` (a recording's runs), each
    variant's energy per call too."""
    env = detect(workload.device)
    variants = [VARIANTS[k] for k in keys]
    reasons = why_not(variants, workload, env)
    going, refused = fitting(variants, workload, env, available_bytes(workload.device), reasons)
    runs = {r.variant: r for r in refused}
    if going:
        runs |= {r.variant: r for r in measure_runs(going, workload, env=env, trace_dir=trace_dir,
                                                    progress=progress, reasons=reasons, guard=guard,
                                                    energy=energy)}
    return [runs[k] for k in keys]


def sweep_all(base: Workload, keys, lengths, *, progress: Progress = _no_progress, axis: str = "seq_len") -> Sweep:
    """The door of recorded sweeps: every variant of `keys` over `lengths` of `axis`, each point planned for memory
    as a sweep's are (a point that does not fit is kept as such and stops that variant)."""
    return run_sweep([VARIANTS[k] for k in keys], base.replace(**{axis: lengths[0]}), list(lengths),
                     detect(base.device), progress=progress, axis=axis)


@dataclass
class CPAnswer:
    """A context-parallel request served: A's and B's runs (with and without the load balancer) and the notes."""
    request: Request
    runs: list[cp.CPRun]
    notes: list

    def to_dict(self) -> dict:
        from dataclasses import asdict
        return {"source": self.request.source, "runs": [r.to_dict() for r in self.runs],
                "notes": [asdict(n) for n in self.notes]}


def context_parallel(request: Request, *, out_dir=None) -> CPAnswer:
    """A and B over request.workload.gpus GPUs, sharded by PyTorch's context_parallel, measured live (one process a
    GPU; on a CPU, gloo processes) or replayed from the recording's context_parallel/runs.json; explained."""
    from .explain.cp_rules import explain_cp
    from .replay import recordings
    from .scratch import process_folder

    w = request.workload
    if w.gpus == 1:
        raise Refusal("gpus", 1, "context parallel shards the sequence over 2, 4 or 8 GPUs: choose one of those")
    keys = list(dict.fromkeys((request.a, request.b)))
    if request.live:
        refused = visible_refusal(w)
        if refused:
            raise refused
        runs = cp.measure(cp.jobs_for(keys, w, out_dir or process_folder("cp")))
    else:
        held = cp.load(recordings()[request.source])
        runs = [r for key in keys for r in cp.find(held, key, w)]
        missing = [key for key in keys if not any(r.variant == key for r in runs)]
        if missing:
            recorded = sorted({r.workload.words() for r in held})
            raise Refusal("source", request.source,
                          f"The recording '{request.source}' has no context-parallel run of {' or '.join(missing)} at "
                          f"{w.words()}. It holds: {'; '.join(recorded) or 'none'}.", kind="unrecorded")
    return CPAnswer(request, runs, explain_cp(runs))


__all__ = ["LIVE", "Answer", "CPAnswer", "context_parallel", "Plan", "Preview", "Refusal", "Request", "compare", "measure", "plan", "preview", "sweep",
           "sweep_all"]
