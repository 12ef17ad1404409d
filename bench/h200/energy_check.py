"""Energy per call and the measured compute roof on the lent GPU (issue 56), through the app's path: for the blog
workload and a decode step, SDPA's cuDNN against its flash backend as a live comparison (`session.compare`, energy on
as the page has it), each run's joules a call, mean watts, its loop's seconds and calls (checked: at least
timing.ENERGY_LOOP_S), or the one line saying why none was measured; the energy notes; the roofs the roofline draws
(the matmul rate measured in this process beside the datasheet's); and the plan's predicted seconds against the wall.

    python bench/h200/energy_check.py          # ~30 s on an H100 or H200

Prints a table and writes it to $OUT/energy_check.txt (where $OUT is set).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from profiling import roofline, session, text, timing  # noqa: E402
from profiling.request import LIVE, LIVE_BUDGET_S, Request  # noqa: E402
from profiling.workload import NAMED, Workload  # noqa: E402

WORKLOADS = {"blog": Workload.blog(), "decode": NAMED["decode"]}
PAIR = ("sdpa_cudnn", "sdpa_flash")


def main() -> int:
    lines, failures = [], []

    def say(line: str = "") -> None:
        print(line, flush=True)
        lines.append(line)

    for name, w in WORKLOADS.items():
        request = Request(LIVE, *PAIR, w)
        plan = session.plan(request, budget_s=LIVE_BUDGET_S["cuda"])
        t0 = time.perf_counter()
        answer = session.compare(request, budget_s=LIVE_BUDGET_S["cuda"])
        wall = time.perf_counter() - t0
        c = answer.result
        say(f"{name}: {w.words()} on {c.a.environment.device_name}: predicted {plan.predicted_s:.1f} s (energy "
            f"{'on' if plan.energy else 'off'}), took {wall:.1f} s")
        for run in (c.a, c.b):
            e = run.energy
            if e is None:
                say(f"  {run.variant:12s} {run.status}; energy not measured: {run.energy_refused}")
                continue
            say(f"  {run.variant:12s} GPU {text.ms(run.gpu_ms)} ({run.timing.method}); {text.energy(e, run.call)}; "
                f"{e.joules:.1f} J, counter {e.start_mj:,} -> {e.end_mj:,} mJ")
            if e.seconds < timing.ENERGY_LOOP_S:
                failures.append(f"{name} {run.variant}: loop {e.seconds:.3f} s < {timing.ENERGY_LOOP_S} s")
        for n in answer.explanation.notes:
            if n.rule in ("faster_not_cheaper", "energy_not_measured"):
                say(f"  note ({n.side}): {n.title} — {n.body}")
        say(f"  headline: {answer.explanation.headline.title}")
        r = roofline.roofs_of([c.a, c.b])
        say(f"  roofs: {' · '.join(f'{x.kind}: {x.label}' for x in (r.memory, r.compute, *r.beside) if x)}")
        rates = c.a.environment.matmul_flops_per_s or {}
        say(f"  matmul rates (TFLOP/s): {({d: round(v / 1e12) for d, v in rates.items()})}, TF32 "
            f"{c.a.environment.matmul_tf32}")
        if rates.get(w.dtype) is None:
            failures.append(f"{name}: no {w.dtype} matmul rate measured")
    say()
    say("FAIL: " + "; ".join(failures) if failures else "ok: every loop lasted at least "
        f"{timing.ENERGY_LOOP_S:g} s and the run's dtype has a measured compute roof")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "energy_check.txt").write_text("\n".join(lines) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
