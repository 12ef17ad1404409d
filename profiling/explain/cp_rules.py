"""What a context-parallel run teaches, rank by rank: the communication the compute did not hide, the causal imbalance
the load balancer removes, what all-gather holds in memory against all-to-all, and whether the merge kept the answer.

Every figure is a run's (`CPRun`, its ranks' timelines) or the source's model beside it (`context_parallel`'s
`causal_pairs` and `kv_rotation_bytes`, read from PyTorch's ring). A note about a pair of runs (balanced or not, the
two rotations, several S or GPU counts) is made only where the runs hold that pair.
"""
from __future__ import annotations

from ..context_parallel import CPRun, causal_pairs, kv_rotation_bytes
from .. import text
from ..results import Note, Quantity
from .facts import note

NOTICEABLE = 0.05     # exposed communication under 5% of a step is not worth a note
IMBALANCED = 1.10     # ranks whose attention time differs by more than this


def _q(value: float, unit: str, source: str, of: str | None = None) -> Quantity:
    return Quantity(value, unit, source, of)


def _ranks(run: CPRun) -> str:
    return f"{run.workload.gpus} {'GPUs' if run.workload.device == 'cuda' else 'gloo processes'}"


def _label(run: CPRun) -> str:
    return f"{run.variant}, {_ranks(run)}, {run.workload.cp_rotate}, " \
           f"{'load balancer' if run.balanced else 'no load balancer'}"


def exposed_communication(run: CPRun) -> Note | None:
    """The collectives' time no compute kernel overlapped, on the rank where it is largest, as a share of its step."""
    timed = [r for r in run.ranks if r.timeline.busy_us]
    if not run.ok or not timed:
        return None
    worst = max(timed, key=lambda r: r.timeline.exposed_us)
    step_us = worst.median_ms * 1000
    share = worst.timeline.exposed_us / step_us if step_us else 0.0
    if share < NOTICEABLE:
        return None
    facts = {"exposed": _q(worst.timeline.exposed_us, "us", f"ranks[{worst.rank}].timeline.exposed_us"),
             "nccl": _q(worst.timeline.collective_us, "us", f"ranks[{worst.rank}].timeline.collective_us"),
             "share": _q(share, "share", f"ratio(ranks[{worst.rank}].timeline.exposed_us, step)", "the step"),
             "compute": _q(worst.timeline.compute_us, "us", f"ranks[{worst.rank}].timeline.compute_us")}
    rotate = run.workload.cp_rotate
    why = ("All-gather is issued once, before the rank's block on its own K/V, and waited for before the next: it can "
           "hide only behind that first of {n} blocks." if rotate == "allgather" else
           "All-to-all passes one shard a step, each behind the block computed meanwhile: a step whose transfer "
           "outlasts its block leaves the rest exposed.")
    body = (f"NCCL kernels ran {{nccl}} per step on rank {worst.rank}, {{exposed}} of it with no compute kernel "
            f"beside them (compute {{compute}}). " + why.format(n=run.workload.gpus)
            + " A collective that waits for a slower rank runs all the while, so a fast rank's exposed time includes "
              "waiting for the straggler.")
    return note("cp_exposed_communication", "cp", f"Rank {worst.rank}: {{share}} is communication nothing hid",
                body, weight=share, facts=facts,
                evidence=[f"rank {r.rank} · step {r.median_ms:.3f} ms · compute {r.timeline.compute_us:.1f} µs · "
                          f"NCCL {r.timeline.collective_us:.1f} µs · exposed {r.timeline.exposed_us:.1f} µs"
                          for r in run.ranks])


def causal_imbalance(runs: list[CPRun]) -> Note | None:
    """Under a causal mask: the work each rank's queries have without the balancer (rank r: r + 1 blocks) against
    with it (chunk r and chunk 2n−1−r), by the source's positions; and each rank's attention kernels' time."""
    pair = {r.balanced: r for r in runs if r.ok and r.workload.causal and r.ranks}
    if set(pair) != {True, False}:
        return None
    off, on = pair[False], pair[True]
    w = off.workload
    pairs_off, pairs_on = causal_pairs(w.seq_len, w.gpus, False), causal_pairs(w.seq_len, w.gpus, True)
    facts = {"model_off": _q(max(pairs_off) / min(pairs_off), "x", "ratio(max(causal_pairs(off)), min(...))"),
             "model_on": _q(max(pairs_on) / min(pairs_on), "x", "ratio(max(causal_pairs(on)), min(...))"),
             "step_off": _q(off.step_ms(), "ms", "off.step_ms()"), "step_on": _q(on.step_ms(), "ms", "on.step_ms()")}
    attention = {b: [r.timeline.attention_us for r in run.ranks] for b, run in pair.items()}
    measured = ""
    if all(min(a) > 0 for a in attention.values()):
        facts["measured_off"] = _q(max(attention[False]) / min(attention[False]), "x", "ratio(attention, off)")
        facts["measured_on"] = _q(max(attention[True]) / min(attention[True]), "x", "ratio(attention, on)")
        measured = (" The attention kernels' time differed by {measured_off} between ranks without it and "
                    "{measured_on} with it.")
    slowest = off.straggler().rank
    by = "computed longest" if any(r.timeline.busy_us for r in off.ranks) else "took longest per step"
    body = ("Without the load balancer rank r holds the r-th slice of the sequence, so its queries see more keys the "
            "later it sits: the ranks' causal work differs by {model_off} (the positions' pairs), the last rank's the "
            f"most; measured, rank {slowest} {by}. The head-tail balancer gives rank r chunk r and chunk 2n−1−r of "
            "2n: {model_on}." + measured
            + " The step, as the slowest rank finished it: {step_off} without, {step_on} with.")
    weight = abs(off.step_ms() - on.step_ms()) / max(off.step_ms(), on.step_ms())
    return note("cp_causal_imbalance", "cp", "Causal work per rank differs by {model_off} without the load balancer, "
                                             "{model_on} with it",
                body, weight=weight, facts=facts,
                evidence=[f"{'with' if b else 'without'} balancer · rank {i} · {p:,} pairs per head · attention "
                          f"{a:.1f} µs" for b, run in sorted(pair.items(), reverse=True)
                          for i, (p, a) in enumerate(zip(pairs_on if b else pairs_off, attention[b]))])


def rotation_memory(runs: list[CPRun]) -> Note | None:
    """All-gather against all-to-all on the same problem: the K/V each holds for the rotation (the source's model)
    beside the peak each rank allocated during its steps."""
    ok = [r for r in runs if r.ok and r.ranks and all(x.peak_extra_bytes is not None for x in r.ranks)]
    by = {r.workload.cp_rotate: r for r in ok if not r.balanced} or {r.workload.cp_rotate: r for r in ok}
    if set(by) != {"allgather", "alltoall"}:
        return None
    w = by["allgather"].workload
    peak = {k: max(x.peak_extra_bytes for x in r.ranks) for k, r in by.items()}
    facts = {"gather_model": _q(kv_rotation_bytes(w, "allgather"), "bytes", "kv_rotation_bytes(allgather)"),
             "ring_model": _q(kv_rotation_bytes(w, "alltoall"), "bytes", "kv_rotation_bytes(alltoall)"),
             "gather_peak": _q(peak["allgather"], "bytes", "max(allgather.ranks[].peak_extra_bytes)"),
             "ring_peak": _q(peak["alltoall"], "bytes", "max(alltoall.ranks[].peak_extra_bytes)"),
             "kv": _q(w.kv_bytes, "bytes", "workload.kv_bytes")}
    body = ("All-gather receives every rank's K/V at once, the whole {kv} on each GPU, beside a shard cat into a "
            "send buffer: {gather_model}; all-to-all receives one shard a step while it computes on the last and sends "
            "the next: {ring_model}. Measured, the peak "
            "each rank allocated during its steps beyond its inputs: {gather_peak} against {ring_peak}"
            + (" (a training step adds the backward's buffers, which rotate dK/dV by all-to-all either way)."
               if w.training else "."))
    return note("cp_rotation_memory", "cp", "All-gather holds the whole K/V on every GPU; all-to-all one shard",
                body, weight=abs(peak["allgather"] - peak["alltoall"]) / max(peak.values(), default=1) if any(
                    peak.values()) else 0.0, facts=facts)


def merged_accuracy(run: CPRun) -> Note | None:
    """The unsharded answer against fp64, beside the same variant's on one device: the merge runs in fp32."""
    if not run.ok or run.accuracy is None or run.alone_accuracy is None:
        return None
    facts = {"cp": _q(run.accuracy.max_abs_error, "error", "accuracy.max_abs_error"),
             "alone": _q(run.alone_accuracy.max_abs_error, "error", "alone_accuracy.max_abs_error")}
    worse = run.accuracy.max_abs_error > 2 * max(run.alone_accuracy.max_abs_error, 1e-12)
    title = "The sharded answer is {cp} from fp64" + (", over twice one device's {alone}" if worse else
                                                     ", as close as one device's {alone}")
    body = ("PyTorch merges each block's partial output by its log-sum-exp in fp32 (`convert_to_f32`), then casts "
            "back to the inputs' dtype; the output gathered from the ranks is compared with fp64 on the same inputs.")
    return note("cp_accuracy", "cp", title, body, weight=0.5 if worse else 0.05, facts=facts)


def exposed_share(run: CPRun) -> float:
    """The largest share of a rank's step that its collectives ran with no compute kernel beside them."""
    return max(r.timeline.exposed_us / (r.median_ms * 1000) for r in run.ranks)


def exposure_trend(runs: list[CPRun], axis: str) -> Note | None:
    """Runs that differ only in `axis` (seq_len or gpus): the exposed share at each value, and where it first passes
    NOTICEABLE, if it does."""
    points = sorted((r for r in runs if r.ok and r.ranks and any(x.timeline.busy_us for x in r.ranks)),
                    key=lambda r: getattr(r.workload, axis))
    if len({getattr(r.workload, axis) for r in points}) < 2 or len(points) != len({getattr(r.workload, axis)
                                                                                   for r in points}):
        return None
    symbol = "S" if axis == "seq_len" else "GPUs"
    facts = {f"p{i}": _q(exposed_share(r), "share", f"exposed_share(runs[{i}])") for i, r in enumerate(points)}
    said = ", ".join(f"{{p{i}}} at {symbol}={getattr(r.workload, axis):,}" for i, r in enumerate(points))
    shares = [exposed_share(r) for r in points]
    hidden = [getattr(r.workload, axis) for r, x in zip(points, shares) if x < NOTICEABLE]
    shown = [getattr(r.workload, axis) for r, x in zip(points, shares) if x >= NOTICEABLE]
    if hidden and shown:
        where = (f" Under {text.share(NOTICEABLE)} (hidden, near enough) at {symbol}="
                 f"{', '.join(f'{v:,}' for v in hidden)}; not at {', '.join(f'{v:,}' for v in shown)}.")
    else:
        where = f" {'Above' if shown else 'Under'} {text.share(NOTICEABLE)} at every {symbol} measured."
    body = ("The share of the step the collectives ran with nothing to hide behind, on the worst rank: " + said + "."
            + where + (" Each rank's attention grows as S² and the K/V it receives as S: a longer sequence gives the "
                       "transfer more compute to hide behind." if axis == "seq_len" else
                       " More GPUs shrink each rank's blocks (its queries) while the K/V it must receive stays near "
                       "the whole sequence's."))
    w = points[0].workload
    return note(f"cp_exposure_over_{axis}", "cp", f"Exposed communication over {symbol}", body,
                weight=max(shares) - min(shares), facts=facts,
                evidence=[f"{r.variant} · {symbol}={getattr(r.workload, axis):,} · {w.cp_rotate} · "
                          f"{'balanced' if r.balanced else 'unbalanced'} · exposed {text.share(x)}"
                          for r, x in zip(points, shares)])


def explain_cp(runs: list[CPRun]) -> list[Note]:
    """Every note the runs support, per variant: each run's own, then those of its pairs; the heaviest first."""
    notes: list[Note] = []
    for variant in dict.fromkeys(r.variant for r in runs):
        mine = [r for r in runs if r.variant == variant]
        for r in mine:
            for rule in (exposed_communication, merged_accuracy):
                n = rule(r)
                if n:
                    n.side = _label(r)
                    notes.append(n)
        problems = {r.workload.replace(cp_rotate="allgather").problem() for r in mine}
        for problem in problems:
            same = [r for r in mine if r.workload.replace(cp_rotate="allgather").problem() == problem]
            for rotate in ("allgather", "alltoall"):
                n = causal_imbalance([r for r in same if r.workload.cp_rotate == rotate])
                if n:
                    n.side = f"{variant}, {rotate}"
                    notes.append(n)
            n = rotation_memory(same)
            if n:
                n.side = variant
                notes.append(n)
        for axis in ("seq_len", "gpus"):
            families: dict[tuple, list[CPRun]] = {}
            for r in mine:
                families.setdefault((r.balanced, r.workload.problem(free=(axis,))), []).append(r)
            for family in families.values():
                n = exposure_trend(family, axis)
                if n:
                    n.side = variant
                    notes.append(n)
    notes.sort(key=lambda n: -n.weight)
    return notes
