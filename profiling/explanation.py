"""Placeholder until the explainer lands: returns the comparison unchanged."""
from .results import Comparison


def explain(comparison: Comparison) -> Comparison:
    return comparison
