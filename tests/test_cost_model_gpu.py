"""The GPU wall-time model against the recorded H200 runs, as test_cost_model_cpu.py holds the CPU's to its CSV rows:
a recorded group is one `measure_runs` of every variant of its workload (`Run.wall_s`, shared by the group's runs: its
inputs, each variant's setup, first call, accuracy and warm-up, the interleaved timing, the host figures and the
profiled window), and is re-predicted by the model as it stands for the variants that ran (those the plan refused
cost nothing). Each must have taken no more than its prediction (the model errs long); one measured from nothing must
have taken at least a fifth of it. A recording is one process for many groups: its first-call costs
(`per_comparison_s`, CUPTI's start) are paid once, and a shape compiled for one group (its cold timing) is not
compiled again for the next (its graph), so the lower bound is held where the group's compiling variants compiled in
it (a first call of 1 s or more), against the prediction less the process's first costs."""
from __future__ import annotations

from collections import defaultdict

import pytest

from attention_variants import VARIANTS
from profiling import budget
from profiling.replay import recorded_runs

RECORDING = "h200-torch2.11"
LOWEST = 0.2
COMPILED_S = 1.0  # a first call this long compiled


def groups() -> list[list]:
    """The recording's groups: the runs of one measurement (a training step's backward views set aside: the same
    calls)."""
    by_session = defaultdict(list)
    for run in recorded_runs(RECORDING):
        if run.wall_s is not None and run.workload.passes != "bwd":
            by_session[run.session].append(run)
    return list(by_session.values())


def predicted(runs) -> float:
    first = runs[0]
    reasons = {r.variant: r.reason if r.status == "unsupported" else None for r in runs}
    return budget.predicted_seconds(first.workload, [VARIANTS[r.variant] for r in runs], first.environment,
                                    reasons=reasons)


def whole(runs) -> bool:
    """Every compiling variant that ran compiled in this group."""
    return all((r.first_call_ms or 0) >= COMPILED_S * 1000 for r in runs
               if r.ok and (VARIANTS[r.variant].compiled or VARIANTS[r.variant].jit_s))


def test_the_recorded_groups_cover_the_model():
    """Forward and training, every timing mode, decode steps and packed documents, compiled from nothing and not."""
    table = groups()
    assert len(table) >= 100
    workloads = [runs[0].workload for runs in table]
    assert {w.timing for w in workloads} == {"warm", "cold", "graph"} and {w.passes for w in workloads} == {
        "fwd", "fwd+bwd"}
    assert any(w.q_len for w in workloads) and any(w.lengths for w in workloads)
    assert sum(map(whole, table)) >= 20 and max(runs[0].wall_s for runs in table) > 30


@pytest.mark.parametrize("runs", groups(), ids=lambda runs: runs[0].workload.tag())
def test_a_recorded_group_took_at_most_its_prediction_and_a_fifth_of_it_from_nothing(runs):
    seconds, took = predicted(runs), runs[0].wall_s
    said = f"{runs[0].workload.words()}: took {took:.1f} s, predicted {seconds:.1f} s"
    assert took <= seconds, f"{said}: {took / seconds:.2f}x"
    if whole(runs):
        own = seconds - budget._device_cost("cuda", runs[0].environment).per_comparison_s
        assert took >= LOWEST * own, f"{said}, {own:.1f} s of it its own: {took / own:.2f}x"
