"""Guess + reference + trace + environment -> notes. (Placeholder: the explainer is being written.)"""
from __future__ import annotations

from .results import Comparison, Note, Run


def explain_run(run: Run) -> list[Note]:
    return []


def explain(comparison: Comparison) -> Comparison:
    """Fill each run's notes, the verdict and the A-vs-B notes; returns the same object."""
    comparison.a.notes = explain_run(comparison.a)
    comparison.b.notes = explain_run(comparison.b)
    return comparison


def render_markdown(notes: list[Note]) -> str:
    return "\n\n".join(f"**{n.title}**\n\n" + "\n".join(f"- {e}" for e in n.evidence) + f"\n\n{n.cause}"
                       for n in notes)


def render_text(notes: list[Note]) -> str:
    return "\n\n".join(f"* {n.title}\n" + "\n".join(f"  - {e}" for e in n.evidence) + f"\n  {n.cause}"
                       for n in notes)
