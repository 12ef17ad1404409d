"""The score pipeline: what attention does to q·kᵀ before the softmax, in one place and one order: the scale, then
each score transform the workload sets (`SCORE_MODS`), then the additive bias or −inf where a key is hidden.

Attention written by hand (`pipeline`), the fp64 reference (`pipeline`, and `backward` for its gradients) and
FlexAttention (`flex_score_mod`) all go through it, so a transform declared here once (its workload field, its
steps, its derivative, the aten ops its backward runs, the S×S matrices its backward keeps) reaches the variants that
apply it, the reference, the guess, the trace's categories, the memory model and the notes together. Which variants
apply which transform each variant declares (`Variant.score_mods`: the fields of those its call has an argument for,
or one of the predicates below); the others refuse it in `Variant.supports`.

No torch here: a transform is written in tensor methods, which a tensor of scores and flex's scalar score both have.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .workload import Inputs, Workload


@dataclass(frozen=True)
class Step:
    """One op of a transform, as attention written by hand runs it: each step's output replaces its input (as
    `s = s / cap` does), so two S×S matrices at most are alive while it runs."""
    op: str                                     # the elementwise aten op it launches (naive's guess)
    out: Callable[[Any, float], Any]            # the step out of place, of the scores s and the parameter
    into: Callable[[Any, float], Any]           # in place, where autograd allows it (naive_inplace)


@dataclass(frozen=True)
class ScoreMod:
    """A transform of the scaled scores before the mask, set by the workload field `field` (None: off; else its value
    is the transform's parameter)."""
    field: str
    said: str                                   # what it does, in words ("cap·tanh(s/cap)")
    steps: tuple[Step, ...]                     # its ops, in order
    derivative: Callable[[Any, float], Any]     # d f(s) / ds at s, elementwise (the reference's backward)
    backward_ops: tuple[str, ...]               # the ops its backward launches, in order (a training pass's guess)
    kept: tuple[str, ...] = ()                  # the S×S matrices autograd keeps for its backward, in words
    elementwise: bool = True                    # a function of each score alone (what flex's score_mod may apply)

    def apply(self, s, value: float, in_place: bool = False):
        for step in self.steps:
            s = (step.into if in_place else step.out)(s, value)
        return s

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(step.op for step in self.steps)


SCORE_MODS: tuple[ScoreMod, ...] = (  # in the order they apply
    ScoreMod("softcap", "cap·tanh(s/cap)", steps=(  # Gemma 2's logit soft-capping, op by op as its eager code has it
        Step("aten::div", lambda s, cap: s.div(cap), lambda s, cap: s.div_(cap)),
        Step("aten::tanh", lambda s, cap: s.tanh(), lambda s, cap: s.tanh_()),  # keeps its output for the backward:
        Step("aten::mul", lambda s, cap: s.mul(cap), lambda s, cap: s.mul(cap) if s.requires_grad else s.mul_(cap))),
        derivative=lambda s, cap: 1 - s.div(cap).tanh().square(),              # ... which mul_ may not overwrite
        backward_ops=("aten::mul", "aten::tanh_backward", "aten::div"), kept=("softcap's tanh output",)),
)


# -- which transforms a variant applies (`Variant.score_mods`) -----------------------------------------------------
def every(mod: ScoreMod) -> bool:
    """Every transform: the variant writes its scores through `pipeline`."""
    return True


def elementwise(mod: ScoreMod) -> bool:
    """Every elementwise transform: the variant applies them in a score_mod (`flex_score_mod`)."""
    return mod.elementwise


@functools.cache
def elementwise_ops() -> frozenset[str]:
    """Every aten op a score transform declares, forward and backward, in place or not: elementwise ops (a CPU's trace
    files each under its name, which the general rules of `trace.category` may not know: aten::tanh)."""
    names = {op for mod in SCORE_MODS for op in mod.ops + mod.backward_ops}
    return frozenset(names | {op + "_" for op in names})


def active(w: Workload) -> list[tuple[ScoreMod, float]]:
    """The transforms `w` sets, in order, each with its parameter."""
    return [(mod, getattr(w, mod.field)) for mod in SCORE_MODS if getattr(w, mod.field) is not None]


def kept(w: Workload) -> tuple[str, ...]:
    """The S×S matrices the transforms `w` sets keep for a training pass's backward, in words."""
    return tuple(kept for mod, _ in active(w) for kept in mod.kept)


# -- the pipeline -------------------------------------------------------------------------------------------------
def pipeline(q, k, x: Inputs, *, in_place: bool = False, rows=None, hidden=None):
    """The scores of `q` against `k` as the softmax reads them: q·kᵀ, times the scale (an op of its own), each
    transform the workload sets, then the additive bias (−inf where a key is masked) or −inf where a key is hidden
    (`hidden`: the caller's own mask, else the inputs'). `rows`: the query rows `q` holds (None: all). In place: the
    transforms' in-place forms, then `add_` or `masked_fill_` write into the scaled scores. (q·kᵀ is made here, not
    passed in: a caller holding it would keep one more S×S matrix alive through the call.)"""
    scores = q @ k.transpose(-2, -1)
    scores = scores * x.scale
    for mod, value in active(x.workload):
        for step in mod.steps:  # each step's output replacing its input, as written op by op
            scores = (step.into if in_place else step.out)(scores, value)
    bias, hidden = (x.bias, x.hidden) if hidden is None else (None, hidden)
    if bias is not None:
        bias = bias if rows is None else bias[rows]
        bias = bias if bias.dtype == scores.dtype else bias.to(scores.dtype)
        return scores.add_(bias) if in_place else scores + bias
    if hidden is not None:
        hidden = hidden if rows is None else hidden[rows]
        return scores.masked_fill_(hidden, float("-inf")) if in_place else scores.masked_fill(hidden, float("-inf"))
    return scores


def backward(grad, q, k, x: Inputs):
    """The gradient at the scaled scores q·kᵀ·s from the gradient at what the softmax read (`grad`): each
    transform's derivative, the last first (the mask passes a seen key's gradient on unchanged, and a hidden key's
    probability, so its gradient, is 0). The scale's own factor is the caller's."""
    mods = active(x.workload)
    if not mods:
        return grad
    inputs = [(q @ k.transpose(-2, -1)) * x.scale]
    for mod, value in mods[:-1]:
        inputs.append(mod.apply(inputs[-1], value))
    for (mod, value), s in zip(reversed(mods), reversed(inputs)):
        grad = grad * mod.derivative(s, value)
    return grad


def flex_score_mod(x: Inputs):
    """The pipeline past the scale as FlexAttention's `score_mod` takes it, for one score at (q_idx, kv_idx): each
    elementwise transform the workload sets, then the bias (flex scales the scores itself and hides keys by its block
    mask); None where there is nothing to apply."""
    mods, bias = active(x.workload), x.bias
    if not mods and bias is None:
        return None

    def score_mod(score, b, h, q_idx, kv_idx):
        for mod, value in mods:
            score = mod.apply(score, value)
        return score if bias is None else score + bias[q_idx, kv_idx]
    return score_mod
