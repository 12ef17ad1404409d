"""Energy per call: where the faster run is not the cheaper one in joules a call, and why a run's energy was not
measured. Both read what the measurement stored (`Run.energy`, `Run.energy_refused`); nothing here guesses a figure
the counter did not give.
"""
from __future__ import annotations

from ..results import Note, Run
from .facts import Peers, label, measured, note, ratio

# NVML's energy counter moves every 20-100 ms (issue 56), so either reading of a loop may lag its moment by up to
# COUNTER_STEP_S: a loop's joules are known to within COUNTER_STEP_S over its seconds, a part. Two runs are said to
# differ in joules a call only past both parts.
COUNTER_STEP_S = 0.1


def resolution(run: Run) -> float:
    """The part of the run's joules a call the counter's steps leave unknown."""
    return COUNTER_STEP_S / run.energy.seconds


def apart(costly: Run, cheap: Run) -> bool:
    """`costly` drew more joules a call than `cheap` beyond what the counter's steps can make of a loop each."""
    return (costly.energy.joules_per_call * (1 - resolution(costly))
            > cheap.energy.joules_per_call * (1 + resolution(cheap)))


def not_measured(run: Run, peers: Peers) -> Note | None:
    """Energy was asked for and not measured: why, in the measurement's one line."""
    if run.energy is not None or not run.energy_refused:
        return None
    why = run.energy_refused
    return note("energy_not_measured", "environment", "Energy per call not measured",
                why[0].upper() + why[1:].replace("{", "{{").replace("}", "}}") + ".", weight=0.05)


def faster_not_cheaper(fast: Run, slow: Run, path: str, sides: dict[int, str]) -> Note | None:
    """The faster run (by the verdict's figure at `path`) drew more joules a call than the slower one, beyond the
    counter's resolution: said, with both runs' joules and mean watts."""
    if fast.energy is None or slow.energy is None or not apart(fast, slow):
        return None
    f, s = sides[id(fast)], sides[id(slow)]
    facts = {"speed": ratio(measured(slow, f"{path}.median_ms", "ms", s), measured(fast, f"{path}.median_ms", "ms", f)),
             "fast_j": measured(fast, "energy.joules_per_call", "J", f),
             "slow_j": measured(slow, "energy.joules_per_call", "J", s),
             "fast_w": measured(fast, "energy.watts", "W", f), "slow_w": measured(slow, "energy.watts", "W", s)}
    facts["more"] = ratio(facts["fast_j"], facts["slow_j"])
    return note("faster_not_cheaper", "verdict",
                f"{label(fast)} is {{speed}} faster, {label(slow)} the cheaper: {{slow_j}} a call against {{fast_j}}",
                f"NVML's energy counter (the whole GPU's) over a loop of a second or more of each: the faster drew "
                f"{{fast_w}}, the slower {{slow_w}}, so the faster spent {{more}} the energy a call.",
                weight=0.3, facts=facts)
