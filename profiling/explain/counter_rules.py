"""Hardware counters against the models: where the recording read the run's call under Nsight Compute
(`Run.counters`), the DRAM bytes it counted against the one bytes model (`Workload.tensors`: what a call must read and
write, each once), and the occupancy the counter measured beside Kineto's estimate from the launch.

ncu reads one call of its own with the caches flushed before each kernel (its default): its bytes are a cold call's,
whatever the timing of the run they are shown beside.
"""
from __future__ import annotations

import re

from .. import text
from ..results import Note, Run
from .facts import (KINETO_SHARED_PER_BLOCK, Peers, constant, difference, measured, moved, note, of_kernel, on_gpu,
                    packing, sparse, written)

AGREE = 0.05   # counted bytes within 5% of the model's: as the model says


def _counted(run: Run) -> bool:
    """The run has counters of its own call (a backward view's would be its whole step's) that ncu did not refuse."""
    c = run.counters
    return on_gpu(run) and c is not None and not c.refusal and bool(c.kernels) and run.phase == run.call


def _sides(run: Run) -> tuple[str, str]:
    """The tensors the call reads and those it writes (`Workload.outputs`), in words, each as often as the bytes model
    counts it: a forward's once; a step's pass by pass (its backward reads q, K and V again, and the out its forward
    wrote)."""
    phases = ("forward", "backward") if run.call == "step" else (run.call,)
    reads, writes = [], []
    for phase in phases:
        laid = (phase, packing(run), sparse(run))
        out = [n for n, _ in run.workload.outputs(*laid)]
        reads.append(text.tensor_list([n for n, _ in run.workload.tensors(*laid)][:-len(out)]))
        writes.append(text.tensor_list(out))
    if len(phases) == 1:
        return f"{reads[0]}, each once", writes[0]
    return ("; ".join(f"{r} in the {p}" for r, p in zip(reads, phases)),
            "; ".join(f"{w} in the {p}" for w, p in zip(writes, phases)))


def dram_bytes(run: Run, peers: Peers) -> Note | None:
    """The DRAM bytes ncu counted over the call against the bytes it must move: read against its inputs, written against
    its outputs. Fewer written: the L2 still held part of the output when the kernel that wrote it ended (written
    back later, outside ncu's count of that kernel); more read: data read again (intermediates written and read back, as an unfused call's scores,
    or tiles the L2 let go)."""
    c = run.counters
    if not _counted(run) or c.dram_read_bytes is None or c.dram_write_bytes is None:
        return None
    facts = {"read": measured(run, "counters.dram_read_bytes", "bytes"),
             "wrote": measured(run, "counters.dram_write_bytes", "bytes"),
             "moved": moved(run, run.call), "out": written(run, run.call)}
    facts["in"] = difference(facts["moved"], facts["out"])
    reads, writes = _sides(run)
    clauses = []
    read_gap = difference(facts["read"], facts["in"])
    if read_gap.value > AGREE * facts["in"].value:
        facts["reread"] = read_gap
        clauses.append("{reread} more read than its inputs once: data read again from DRAM (intermediates written "
                       "and read back, or tiles the L2 did not keep)")
    elif -read_gap.value > AGREE * facts["in"].value:
        facts["unread"] = difference(facts["in"], facts["read"])
        clauses.append("{unread} of its inputs never came from DRAM")
    else:
        clauses.append("its inputs read once, as the model says")
    write_gap = difference(facts["wrote"], facts["out"])
    if -write_gap.value > AGREE * facts["out"].value:
        facts["kept"] = difference(facts["out"], facts["wrote"])
        clauses.append("the L2 kept {kept} of the output: still there when the kernel that wrote it ended (ncu "
                       "counts kernel by kernel), written back after the count")
    elif write_gap.value > AGREE * facts["out"].value:
        facts["extra"] = write_gap
        clauses.append("{extra} more written than its output: intermediates that went out to DRAM")
    else:
        clauses.append("its output written once")
    agree = "reread" not in facts and "unread" not in facts and "kept" not in facts and "extra" not in facts
    return note("dram_bytes", "guess",
                "DRAM by the counters: {read} read and {wrote} written, against the {moved} a " + run.call
                + " must move",
                f"Nsight Compute counted one {run.call} (the caches flushed before each kernel): {{read}} read from "
                f"DRAM against the {{in}} it must read ({reads}), {{wrote}} written "
                f"against the {{out}} it must write ({writes}). "
                + text.as_sentence("; ".join(clauses)),
                weight=0.1 if agree else 0.3, facts=facts)


def _base(name: str) -> str:
    """A kernel's function name without 'void ', its template arguments and parameters: how ncu's name and the
    trace's are matched when they are not spelled alike."""
    return re.split(r"[<(]", name.removeprefix("void ").strip(), maxsplit=1)[0]


def occupancy_counted(run: Run, peers: Peers) -> Note | None:
    """The achieved occupancy ncu counted for the call's longest kernel (sm__warps_active: the SMs' warp slots that held
    a warp, on average over its cycles), beside Kineto's estimate from the launch where the trace has one."""
    if not _counted(run):
        return None
    c = run.counters
    main = c.main
    i = c.kernels.index(main)
    if main.value("occupancy") is None:
        return None
    facts = {"achieved": measured(run, f"counters.kernels[{i}].value('occupancy')", "pct")}
    traced = next((k for k in run.kernels_of() if k.name == main.name), None) \
        or next((k for k in run.kernels_of() if _base(k.name) == _base(main.name)), None)
    if traced is not None and traced.occupancy_pct is not None:
        facts["kineto"] = of_kernel(run, traced, "occupancy_pct", "pct")
        facts["assumed"] = constant(KINETO_SHARED_PER_BLOCK, "bytes", "kineto_shared_per_block")
        beside = (" Kineto's trace estimated {kineto} for it from the launch (registers and block, assuming {assumed} "
                  "of shared memory a block): the counter is what the warps did.")
    else:
        beside = " The trace gives no occupancy estimate for this kernel to set beside it."
    many = f" (the longest of its {text.plural(len(c.kernels), 'kernel')} under ncu)" if len(c.kernels) > 1 else ""
    return note("occupancy_counted", "guess", "{achieved} achieved occupancy by the counter for {kernel}",
                "Nsight Compute's sm__warps_active: the share of the SMs' warp slots that held a warp, on average "
                "while the kernel ran" + many + "." + beside,
                weight=0.12, facts=facts, names={"kernel": text.clip(_base(main.name), 40)})

