"""The ledger: every kernel (on a CPU, every op) of a run's table the guess did not predict, with the op that
launched it and its share of the time, and what the guess predicted that did not run. `explain_run` adds it after
the rules, naming only what their notes left unexplained.
"""
from __future__ import annotations

from ..results import Note, Run
from .. import text
from ..results import in_phase
from .facts import NEGLIGIBLE, constant, guess, innermost_op, match_guess, note, share_of


def unpredicted_kernels(run: Run, explained: set[str]) -> Note | None:
    """Every row of the table the guess did not predict (or a launch beyond what it predicted), with the op that
    launched it and its share of the time. `explained`: kernels other notes already explain; the visible words
    name only the largest of the rest."""
    g = guess(run)
    if not run.ok or g is None or not run.kernels:
        return None
    _, unpredicted, missing = match_guess(run, g)
    unpredicted = [u for u in unpredicted if in_phase(u.kernel, run.phase)]  # a backward view: its own rows
    whole = [u.kernel for u in unpredicted if u.whole]
    extra = [u for u in unpredicted if not u.whole]
    if not unpredicted and not missing:
        return None
    unit = "kernels" if run.environment.device == "cuda" else "ops"
    facts = {"rows": constant(len(whole), "count", "unpredicted_rows(run)"),
             "table": constant(len(run.kernels_of()), "count", "rows(run)")}
    if whole:
        facts["share"] = share_of(run, whole, run.phase)
    rest = sorted((k for k in whole if k.name not in explained), key=lambda k: -k.share)
    named = [k for k in rest if k.share >= NEGLIGIBLE][:2]
    sentences = []
    if whole:
        sentences.append("They take {share}; the evidence lists each with the op that launched it." if len(whole) > 1
                         else "It takes {share}; the evidence gives the op that launched it.")
    if named:
        for i, k in enumerate(named):
            facts[f"k{i}"] = share_of(run, [k], run.phase)
        sentences.append("Not explained elsewhere: " + ", ".join(
            (f"{text.kernel(k, 40)} from `{text.host_op(text.op(innermost_op(k)))}`" if innermost_op(k) and
             k.launched_by else text.kernel(k, 40) if k.launched_by else f"`{text.op(k.name)}`")
            + f" ({{k{i}}})" for i, k in enumerate(named)) + ".")
    elif whole:
        sentences.append("The notes explain the ones that matter." if len(whole) > 1 else
                         "A note explains it." if whole[0].name in explained else "Too small to need a note.")
    if extra:
        sentences.append(f"{text.plural(len(extra), unit[:-1])} ran more often than guessed.")
    if missing:
        sentences.append("Guessed but not run: " + ", ".join(f"“{what}”" for what in missing) + ".")
    title = ("{rows} of {table} " + unit + (" was" if len(whole) == 1 else " were") + " not in the guess") \
        if whole else f"The {unit} differ from the guess"
    unexplained = sum(k.us_per_forward for k in rest) / (run.gpu_us() or 1.0)
    return note("unpredicted_kernels", "guess", title, " ".join(sentences),
                weight=unexplained + (0.3 if missing else 0), facts=facts, kernels=whole + [u.kernel for u in extra],
                evidence=[f"{text.kernel(u.kernel, 64)} · ×{text.count(u.extra_calls)}"
                          f"{' unpredicted' if u.whole else ' more than guessed'} · {u.kernel.phase} · "
                          f"{text.share(u.kernel.share)} of the {u.kernel.phase} · "
                          + ("; ".join(f"from {text.chain(launch.ops)}" for launch in (u.kernel.launched_by or []))
                             or "a CPU op, by self time")
                          + (" · explained in a note" if u.kernel.name in explained else "")
                          for u in unpredicted]
                + [f"guessed, did not run: “{what}”" for what in missing])
