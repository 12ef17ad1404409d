"""What the explainer's tests share: the H200 recording, runs changed the way a test needs, and the check that
every number a note states is the figure its source names."""
from __future__ import annotations

import copy
import dataclasses
import math
import re
from pathlib import Path

from profiling import text
from profiling.explain import facts
from profiling.recording import load_recorded
from profiling.results import Comparison, Note, Run
from profiling.workload import Workload

RECORDING = Path(__file__).parent / "data" / "h200-torch2.11"
RUNS = load_recorded(RECORDING)
UNITS = re.compile(r"(\d[\d,]*(?:\.\d+)?) ?(µs|ms|s|B|KiB|MiB|GiB|%|×)(?![\w])")


def recorded(variant: str, **changes) -> Run:
    """A copy of the recorded H200 run of `variant` at the blog workload with `changes`."""
    workload = Workload.blog(**changes)
    (run,) = [r for r in RUNS if r.variant == variant and r.workload == workload]
    return copy.deepcopy(run)


def with_env(run: Run, **changes) -> Run:
    return dataclasses.replace(run, environment=dataclasses.replace(run.environment, **changes))


def apply(rule, run: Run, *peers: Run) -> Note | None:
    """One rule on `run`, with `peers` as the other runs of the comparison; checks the note's numbers."""
    note = rule(run, facts.peers_for(run, peers))
    if note is not None:
        assert_numbers_are_the_runs(note, facts.context(run, facts.peers_for(run, peers)))
    return note


def assert_numbers_are_the_runs(note: Note, context: dict) -> None:
    """Every fact of the note is the figure its source names, read again from the run(s); and every number with a
    unit in the visible words is one of the note's facts, written by profiling.text."""
    for name, q in note.facts.items():
        value = facts.resolve(q.source, context)
        assert math.isclose(value, q.value, rel_tol=1e-9, abs_tol=1e-12), (note.rule, name, q, value)
    written = {text.quantity(q) for q in note.facts.values()}
    for number, unit in UNITS.findall(f"{note.title} {note.body}"):
        assert any(w.startswith(number) and w.endswith(unit) for w in written), \
            f"{note.rule}: '{number}{unit}' in the words is none of the note's facts {sorted(written)}"


def comparison_context(c: Comparison, note: Note) -> dict:
    run = c.b if note.side == "b" else c.a
    other = c.a if run is c.b else c.b
    return facts.context(run, facts.peers_for(run, [other]), a=c.a, b=c.b)
