"""Guess + trace + environment + the blog's A100 -> a headline and ranked notes, for A vs B or a sweep over S.

Each rule is a small function `(run, peers) -> Note | None` that looks for one lesson in a measured run; it
reads only the run, the variant's guess for this workload, the blog's reference and, for a ratio, the other
run of the comparison. `explain` runs them on both sides, adds the ledger of kernels the guess did not
predict, states a note true of both sides once (side "both"), and ranks the notes by weight: the share of
time or memory they explain, or how far they contradict the guess. The first `TOP` are the ones to show.
A sweep over S is told the same way (`sweep_notes`). Nothing here changes the runs it reads.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from .. import text
from ..results import Comparison, Note, Run, Sweep
from . import (backward_rules, blog_rules, counter_rules, decode_rules, energy_rules, environment_rules, guess_rules,
               ledger, mask_rules, packed_rules, sweep_notes, timing_rules, verdict)
from .facts import Peers, Rule, peers_for

TOP = 3  # notes shown before "more"

RULES: tuple[Rule, ...] = (
    # the guess against the trace, and the time figures (in their old order: it breaks ties in the ranking)
    guess_rules.hidden_copy, guess_rules.in_place, guess_rules.library_memsets, guess_rules.split_launches,
    guess_rules.fp32_gemms, guess_rules.math_mask, guess_rules.math_guard, guess_rules.math_cast_back,
    guess_rules.softmax_kernel, guess_rules.flex_mask_per_call, guess_rules.occupancy_by_design,
    guess_rules.occupancy_not_zero, guess_rules.fp8_kernel, timing_rules.host_bound, timing_rules.loop_waits,
    guess_rules.scores_in_memory, timing_rules.first_call, timing_rules.profiled_vs_events,
    # how it was timed: the L2, a CUDA graph, the bytes against the copy ceiling, the clocks
    timing_rules.l2_resident, timing_rules.cold_l2, timing_rules.graph_winner, timing_rules.memory_traffic,
    timing_rules.clocks,
    # the recording's hardware counters of the call (Nsight Compute) against the bytes model and Kineto's occupancy
    counter_rules.dram_bytes, counter_rules.occupancy_counted,
    # a training pass
    backward_rules.backward_ratio, backward_rules.fused_backward, backward_rules.saved_for_backward,
    backward_rules.gradient_accuracy,
    # masks and grouped-query heads
    mask_rules.mask_conversion, mask_rules.masked_fill_rate, mask_rules.dense_window, mask_rules.kv_expansion, mask_rules.kv_savings,
    mask_rules.block_mask_setup,
    # a decode step: fewer queries than keys
    decode_rules.causal_alignment, decode_rules.decode_kernels, decode_rules.gqa_packing,
    decode_rules.paged_cache,
    # packed documents: padding, a block-diagonal mask, the kernel each way reaches, the host's Python paths
    packed_rules.padding_waste, packed_rules.mask_build, packed_rules.packed_kernel, packed_rules.packed_host,
    # the environment
    environment_rules.pinned_refused, environment_rules.rank3_path, environment_rules.auto_choice,
    environment_rules.cpu_dispatch, energy_rules.not_measured,
    # the blog's A100
    blog_rules.against_blog, blog_rules.kernel_generation, blog_rules.nvjet_gemms, blog_rules.ranking_vs_blog,
)


@dataclass
class Explanation:
    """What the explainer says of a result: its headline, and its notes, most important first."""
    headline: Note
    notes: list[Note] = field(default_factory=list)

    def to_dict(self) -> dict:
        from dataclasses import asdict
        return {"verdict": self.headline.title, "headline": asdict(self.headline),
                "notes": [asdict(n) for n in self.notes]}

    @classmethod
    def from_dict(cls, data: dict) -> "Explanation":
        return cls(Note.from_dict(data["headline"]), [Note.from_dict(n) for n in data.get("notes", [])])


def explain_run(run: Run, peers: Iterable[Run] = ()) -> list[Note]:
    """Every note the rules find in `run`, then the ledger of the kernels the guess did not predict."""
    others: Peers = peers_for(run, peers)
    notes = [n for rule in RULES if (n := rule(run, others)) is not None]
    explained = {name for n in notes for name in n.kernels}
    unpredicted = ledger.unpredicted_kernels(run, explained)
    return notes + ([unpredicted] if unpredicted else [])


def explain(comparison: Comparison) -> Explanation:
    """The headline and the ranked notes of A vs B."""
    a, b = comparison.a, comparison.b
    notes = []
    a_notes, b_notes = explain_run(a, [b]), explain_run(b, [a])
    for n in a_notes:
        twin = next((m for m in b_notes if (m.rule, m.title, m.body) == (n.rule, n.title, n.body)), None)
        n.side = "both" if twin else "a"
        if twin:
            b_notes.remove(twin)
            if twin.kernels != n.kernels:  # the same words of other kernels: the note lists both sides' (each line
                n.kernels += [k for k in twin.kernels if k not in n.kernels]            # names its kernel)
                n.evidence += [line for line in twin.evidence if line not in n.evidence]
        notes.append(n)
    for n in b_notes:
        n.side = "b"
        notes.append(n)
    for n in verdict.ranking_notes(a, b) + energy_notes(a, b):
        n.side = "pair"
        notes.append(n)
    order = {rule.__name__: i for i, rule in enumerate(RULES)}
    notes.sort(key=lambda n: (-round(n.weight, 3), order.get(n.rule, len(order))))
    headline = verdict.headline(a, b)
    headline.side = "pair"
    w = a.workload
    for n in [headline, *notes]:
        n.title, n.body = (text.score_grid(t, w.queries, w.seq_len) for t in (n.title, n.body))
    return Explanation(headline, notes)


def energy_notes(a: Run, b: Run) -> list[Note]:
    """Where the run the verdict ranks faster drew more joules a call than the other."""
    if a.energy is None or b.energy is None:  # nothing to weigh (and the verdict's decision is not cheap)
        return []
    v = verdict.decision(a, b)
    if v.kind != "ranked" or a.variant == b.variant:
        return []
    fast, slow = (a, b) if v.faster == "a" else (b, a)
    found = energy_rules.faster_not_cheaper(fast, slow, v.path, {id(a): "a", id(b): "b"})
    return [found] if found else []


def explain_sweep(result: Sweep) -> Explanation:
    """A sweep's headline and ranked notes."""
    headline, notes = sweep_notes.explain_sweep(result)
    headline.side = "pair"
    return Explanation(headline, notes)


__all__ = ["RULES", "TOP", "Explanation", "explain", "explain_run", "explain_sweep", "peers_for"]
