"""Watch it scale: variants over a list of sequence lengths (or batches: the sweep's axis), everything else fixed.

At each point the variants still going are measured together, one session (their timings interleaved), and
kept light (`Run.light`: numbers, statuses and kernel rows, no trace). A variant whose memory estimate does not
fit is refused before anything is allocated and kept as a run of status "does not fit" (needed vs available
bytes); a real out-of-memory comes back from the measurement as "out of memory". Either stops the variant: longer
sequences would only need more. Past the request's budget (predicted from the points so far, and checked inside
every measurement) or once cancelled, the sweep ends with the points done and says why. What the curves say is
the explainer's (`explain.curves`).
"""
from __future__ import annotations

import time

from attention_variants import Variant, reasons as why_not

from . import text
from .budget import available_bytes, call_bytes, measured_calls, memory_refusal, reference_bytes
from .environment import Environment
from .measurement import Guard, Progress, Stopped, measure_runs
from .results import DOES_NOT_FIT, STOPPED, Run, Sweep
from .workload import Workload



def _no_progress(fraction: float, message: str) -> None:
    pass


def fitting(variants: list[Variant], workload: Workload, env: Environment, free: int,
            reasons: dict[str, str | None] | None = None) -> tuple[list[Variant], list[Run]]:
    """The variants whose measurement of `workload` fits in `free` bytes, and for each that does not, a run saying
    so (needed against available, the fp64 check's part) with nothing allocated. One that cannot run at all
    (`reasons`, asked here where not given) is not priced: measurement says why, and its memory model may not hold
    there (a packed way's one sequence of B·S tokens past what a workload may hold)."""
    reasons = reasons if reasons is not None else why_not(variants, workload, env)
    fit, refused = [], []
    for v in variants:
        refusal = memory_refusal(v, workload, env, free) if not reasons.get(v.key) else None
        if refusal is None:
            fit.append(v)
            continue
        runs = v.runs_on(workload)  # a twin's run is of its quantised workload
        scratch = v.scratch_bytes(runs, env)
        refused.append(Run(v.key, runs, env, status=DOES_NOT_FIT, reason=refusal.limit,
                           estimated_extra_bytes=call_bytes(v, workload, env), needed_bytes=refusal.needed,
                           available_bytes=refusal.available, reference_bytes=reference_bytes(runs, scratch)))
    return fit, refused


def run_sweep(variants: list[Variant], base: Workload, lengths: list[int], env: Environment, *,
              progress: Progress = _no_progress, guard: Guard | None = None, axis: str = "seq_len") -> Sweep:
    """Every variant at every point of `axis` (its values `lengths`), smallest first, each point one session."""
    guard = guard or Guard()
    result = Sweep([v.key for v in variants], base.replace(**{axis: lengths[0]}), list(lengths), env,
                   available_bytes=available_bytes(base.device), budget_s=guard.budget_s, axis=axis)
    stopped: set[str] = set()
    start = time.perf_counter()
    total, done = len(lengths) * len(variants), 0
    for i, s in enumerate(lengths):
        workload = base.replace(**{axis: s})
        at = text.point(axis, s)
        going = [v for v in variants if v.key not in stopped]
        if not going:
            break
        reasons = why_not(going, workload, env)
        fit, refused = fitting(going, workload, env, available_bytes(workload.device), reasons)
        result.runs += refused
        stopped |= {r.variant for r in refused}
        done += len(refused)
        try:
            guard.check()
            left = guard.left_s()
            ahead = sum(_predict_s(result, v.key, s) or 0.0 for v in fit)
            if left is not None and ahead > left:
                result.stopped = (f"time budget: {at} would take about {text.seconds(ahead)}, "
                                  f"{text.seconds(max(0.0, left))} of {text.seconds(guard.budget_s)} left")
                break
        except Stopped as stop:
            result.stopped = f"{stop} after {done} of {total} points"
            break
        if fit:
            runs = measure_runs(fit, workload, env=env, guard=guard, reasons=reasons,
                                progress=lambda f, m: progress((done + f * len(fit)) / total, f"{at} · {m}"))
            for run in runs:
                result.runs.append(run.light())
                if run.stops:
                    stopped.add(run.variant)
            done += len(runs)
            halted = next((r for r in runs if r.status == STOPPED), None)
            if halted:
                result.stopped = f"{halted.reason.split(': ', 1)[-1]} during {at}"
                break
        if i == 0:  # the first point measured: predict the whole sweep and say so up front
            result.predicted_s = (time.perf_counter() - start) + sum(
                _predict_s(result, v.key, later) or 0.0 for later in lengths[1:] for v in variants
                if v.key not in stopped)
            limit = f" of a {text.seconds(guard.budget_s)} budget" if guard.budget_s is not None else ""
            progress(done / max(total, 1), f"predicted {text.seconds(result.predicted_s)} for {total} points{limit}")
    progress(1.0, f"sweep done: {done} points in {text.seconds(time.perf_counter() - start)}")
    return result


def _predict_s(result: Sweep, key: str, value: int) -> float | None:
    """Cost of measuring `key` at the axis' `value`, from its largest run so far: its share of that session's wall
    time, plus the calls a measurement makes (`budget.measured_calls`) each longer by the ratio of their FLOPs ((S/S_last)² for a square
    problem, S/S_last for a decode step, B/B_last over batches)."""
    timed = [r for r in result.of(key) if r.wall_s is not None and result.value(r) <= value and r.timing]
    if not timed:
        return None
    last = timed[-1]
    peers = [r for r in result.runs if r.session == last.session]
    forward_s = last.gpu_ms / 1000.0
    grown = last.workload.replace(**{result.axis: value}).dense_flops / last.workload.dense_flops
    return last.wall_s / len(peers) + sum(measured_calls(last.workload.device, forward_s)) * forward_s * (grown - 1)
