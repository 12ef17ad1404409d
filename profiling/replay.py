"""Recorded runs from real GPUs, as replay reads them: the recordings shipped with the app, their runs and sweeps,
and the lookups a request makes (the run of a variant on a workload, the nearest recorded workloads, a sweep).
Written by `recording` on a GPU; read here, read-only (what is handed out is a copy).
"""
from __future__ import annotations

import copy
import functools
import math
from pathlib import Path

from . import startup, text
from .budget import call_bytes
from .results import RUNS_FILE, SWEEPS_FILE, UNSUPPORTED, Run, Sweep, read_stored
from .workload import FIELDS, Refusal, Workload

RECORDED_DIR = Path(__file__).parent / "recorded"


def load_recorded(directory: str | Path) -> list[Run]:
    """Runs from a recording, their trace paths made absolute; the memory estimate beside the measured peak is
    today's model (`budget.forward_bytes`), as a live run would show it. The kernel tables are as recorded: tests
    compare them with what the parser reads from the traces today."""
    from attention_variants import VARIANTS

    directory = Path(directory)
    with startup.paused():  # its objects, kept for the process's life
        runs = [Run.from_dict(d) for d in read_stored(directory / RUNS_FILE)]
    for run in runs:
        if run.variant in VARIANTS and run.status != UNSUPPORTED:  # one that cannot run is not priced
            run.estimated_extra_bytes = call_bytes(VARIANTS[run.variant], run.workload, run.environment)
        if run.trace_path:
            run.trace_path = str(directory / run.trace_path)
    return runs


def recordings() -> dict[str, Path]:
    """Name -> folder of every recording shipped with the app."""
    return {p.name: p for p in sorted(RECORDED_DIR.iterdir()) if (p / RUNS_FILE).exists()} \
        if RECORDED_DIR.exists() else {}


# -- replay: look runs up in a recording ------------------------------------------------------
@functools.cache
def recorded_runs(name: str) -> tuple[Run, ...]:
    """Every run of the recording `name`, loaded once (read-only: find_recorded hands out copies)."""
    return tuple(load_recorded(recordings()[name]))


def by_size() -> list[str]:
    """The recordings, the one that holds the most runs first: where a machine without a GPU opens (a second GPU's
    recording, begun part by part, is offered beside it)."""
    return sorted(recordings(), key=lambda name: -len(recorded_runs(name)))


def _problem(workload: Workload) -> Workload:
    """What a recorded run is looked up by: every field a request sets (`workload.FIELDS`: each changes what is
    measured, kv_heads as much as S), the rest (device, seed) at their defaults."""
    return Workload(**{f.name: getattr(workload, f.name) for f in FIELDS})


def recorded_workloads(name: str) -> list[Workload]:
    """The distinct workloads the recording holds, in recording order."""
    return list(dict.fromkeys(run.workload for run in recorded_runs(name)))


_INDEXES: dict[str, tuple[tuple[Run, ...], dict[tuple[Workload, str], Run], dict[Workload, set[str]]]] = {}


def _indexes(name: str) -> tuple[dict[tuple[Workload, str], Run], dict[Workload, set[str]]]:
    """(problem, variant) -> the first recorded run of it, and problem -> the variants run on it (in recording
    order), in the recording `name`: built once per loaded recording (each request looks runs up by problem, and a
    problem is a dataclass that checks itself when made)."""
    runs = recorded_runs(name)
    if name not in _INDEXES or _INDEXES[name][0] is not runs:
        index: dict[tuple[Workload, str], Run] = {}
        held: dict[Workload, set[str]] = {}
        problems: dict[Workload, Workload] = {}  # runs share workloads (H200: 1,567 runs, 132 workloads), each
        for run in runs:                         # problem made (and checked) once: 0.1 -> 0.01 s of a first replay
            if run.workload not in problems:
                problems[run.workload] = _problem(run.workload)
            problem = problems[run.workload]
            index.setdefault((problem, run.variant), run)
            held.setdefault(problem, set()).add(run.variant)
        _INDEXES[name] = (runs, index, held)
    return _INDEXES[name][1], _INDEXES[name][2]


def _index(name: str) -> dict[tuple[Workload, str], Run]:
    return _indexes(name)[0]


def _recorded_as(variant: str, workload: Workload) -> Workload:
    """The problem a run of `variant` given `workload` is recorded under: the workload it ran (`Variant.effective`:
    a twin's quantised), or the one given where it cannot run it at all (a twin whose quantisation the workload
    refuses: its refusal is kept under the workload it refused)."""
    from attention_variants import VARIANTS

    try:
        return _problem(VARIANTS[variant].effective(workload) if variant in VARIANTS else workload)
    except Refusal:
        return _problem(workload)


def find_recorded(name: str, variant: str, workload: Workload) -> Run | None:
    """A copy of the recorded run of `variant` given `workload`'s problem (any device), or None; a twin's is found
    under the workload it ran (`_recorded_as`); with the recording's counters of that call where it holds them
    (`find_counters`)."""
    run = _index(name).get((_recorded_as(variant, workload), variant))
    if run is None:
        return None
    run = copy.deepcopy(run)
    run.counters = find_counters(name, variant, run.workload)
    return run


# -- recorded hardware counters -------------------------------------------------------------------------
@functools.cache
def recorded_counters(name: str) -> tuple:
    """Every call the recording `name` read under Nsight Compute (counters.json.gz, written by `record --part
    counters`), loaded once; () where it holds none."""
    from .counters import COUNTERS_FILE, Counters

    folder = recordings().get(name)
    return tuple(Counters.from_dict(d) for d in read_stored(folder / COUNTERS_FILE)) if folder else ()


def find_counters(name: str, variant: str, workload: Workload):
    """A copy of the counters the recording `name` read of `variant`'s call on `workload`'s problem, or None. How the
    run was timed is set aside: ncu reads one call of its own (the caches flushed before each kernel), whatever the
    timing of the run it is shown beside; ncu's refusals too are kept, and shown as such."""
    wanted = workload.problem(free=("timing",))
    found = next((c for c in recorded_counters(name)
                  if c.variant == variant and c.workload.problem(free=("timing",)) == wanted), None)
    return copy.deepcopy(found) if found is not None else None


def _held(name: str) -> dict[Workload, set[str]]:
    """The problems the recording `name` holds, in recording order, each with the variants run on it (read-only)."""
    return _indexes(name)[1]


def _log2_distance(a: Workload, b: Workload) -> float:
    return sum(abs(math.log2(getattr(a, f) / getattr(b, f))) for f in ("seq_len", "batch", "heads", "head_dim"))


def nearest_recorded(name: str, workload: Workload, variants=(), n: int = 3) -> list[Workload]:
    """The `n` workloads of the recording `name` closest to `workload`'s problem, best first: those holding a
    run of every one of `variants` (keys) before the others, then the fewest fields of the problem that differ
    (how it was timed is not the problem: the same timing first among equals), then the smallest sum of |log2|
    ratios of S, B, H and D (S=2048 is as near 1024 as 4096 is), then recording order. One problem is named once:
    in the request's timing where it is recorded so (a workload recorded warm, cold and in a graph is one answer)."""
    wanted, held = _problem(workload), _held(name)

    def distance(problem: Workload) -> tuple:
        differing = sum(a != b for a, b in zip(problem.problem(free=("timing",)), wanted.problem(free=("timing",))))
        return (not set(variants) <= held[problem], differing, problem.timing != wanted.timing,
                _log2_distance(problem, wanted))

    nearest = {}
    for problem in sorted(held, key=distance):
        nearest.setdefault(problem.problem(free=("timing",)), problem)
    return list(nearest.values())[:n]


def unrecorded_message(name: str, workload: Workload, variants=()) -> str | None:
    """None when the recording `name` holds a run of every one of `variants` (keys) on `workload`'s problem
    (with none given: any run of it); else what is missing and the nearest recorded workloads, in words."""
    wanted = _problem(workload)
    held = _held(name).get(wanted)
    missing = [v for v in variants if v not in _held(name).get(_recorded_as(v, workload), ())]
    if not missing and (variants or held is not None):
        return None
    gpu = text.machine(recorded_runs(name)[0].environment)
    anywhere = set().union(*_held(name).values())
    never = [v for v in variants if v not in anywhere]
    if never:  # no workload would do: the recording was made without it (before it existed, or its library)
        return (f"The {gpu} recording holds no run of {' or '.join(never)} on any workload: it was recorded "
                f"without {'it' if len(never) == 1 else 'them'}. Measure {'it' if len(never) == 1 else 'them'} "
                "live on a GPU, or choose recorded variants.")
    what = workload.words() if held is None else f"{' or '.join(missing)} on {workload.words()}"
    nearest = [w.words() for w in nearest_recorded(name, workload, variants, n=4) if w != wanted][:3]
    said = f"The {gpu} recording has no run of {what}."
    return f"{said} Nearest recorded: {'; '.join(nearest)}." if nearest else said


# -- recorded sweeps ----------------------------------------------------------------------------
@functools.cache
def recorded_sweeps(name: str) -> tuple[Sweep, ...]:
    """Every sweep of the recording `name` (its sweeps, written by `record`), loaded once."""
    folders = {p.name: p for p in RECORDED_DIR.iterdir() if p.is_dir()} if RECORDED_DIR.exists() else {}
    if name not in folders:  # a name, never a path
        return ()
    return tuple(Sweep.from_dict(d) for d in read_stored(folders[name] / SWEEPS_FILE))


def find_recorded_sweep(name: str, a: str, b: str, workload: Workload, axis: str = "seq_len") -> Sweep | None:
    """The recorded sweep of A and B over `axis` on `workload`'s problem with that field left free (any device), or
    None."""
    wanted = workload.problem(free=(axis,))
    for recorded in recorded_sweeps(name):
        if {a, b} <= set(recorded.variants) and recorded.axis == axis \
                and recorded.workload.problem(free=(axis,)) == wanted:
            return copy.deepcopy(recorded.select([a, b]))  # the cached sweep stays as recorded
    return None
