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
from profiling.replay import load_recorded
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
    words = f"{note.title} {note.body}"
    written = {text.FORMATS[q.unit](q.value) for q in note.facts.values()}
    for number, unit in UNITS.findall(words):
        assert any(w.startswith(number) and w.endswith(unit) for w in written), \
            f"{note.rule}: '{number}{unit}' in the words is none of the note's facts {sorted(written)}"
    for name, q in note.facts.items():  # a share is written with the total it is of, wherever it is written
        bare = text.FORMATS[q.unit](q.value)
        if q.unit == "share" and q.of and re.search(rf"(?<![\d.]){re.escape(bare)}", words):
            assert text.quantity(q) in words, f"{note.rule}: the share {name} = {bare} is not said with its total"


def comparison_context(c: Comparison, note: Note) -> dict:
    run = c.b if note.side == "b" else c.a
    other = c.a if run is c.b else c.b
    return facts.context(run, facts.peers_for(run, [other]), a=c.a, b=c.b)
