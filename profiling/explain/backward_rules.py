"""A training pass against the guess: how much the backward costs next to the forward, the kernels a fused backward
really runs and why, and what autograd keeps from the forward. Each rule reads one run of a training pass."""
from __future__ import annotations

from .. import scores, text
from ..results import Note, Run
from .facts import (Peers, constant, guess, label, measured, note, of_kernel, on_gpu, ran, ratio, scaled, scores_bytes,
                    square_scores, total, variant)

# What each step of the fused backwards does, by a token of its kernel's name (PyTorch's flash_bwd_*, cuDNN's), and
# where one kernel runs once per gradient of a grouped-query backward, what it does at that count of launches.
# FA4's CuTe kernels (flash_attn/cute/flash_bwd_preprocess.py, flash_bwd_sm90.py, flash_bwd_postprocess.py) do the
# same three steps under other names; with grouped-query attention FA4 also accumulates dK and dV in fp32 over each
# group's query heads, and its postprocess converts all three.
_MAIN = "then the main kernel over blocks of keys, each adding its part of every row's dQ to an fp32 buffer"
_LAST_DQ = "last dQ converted from fp32 to the inputs' dtype"
_STEPS = (
    ("dot_do_o", "first dot(dO, O) per query row"),
    ("bwd_preprocess", "first dot(dO, O) per query row"),
    ("dq_dk_dv", _MAIN),
    ("flash_bwd_sm", _MAIN),
    ("bprop", "then the main kernel over blocks of keys, dQ summed in fp32"),
    ("triton_per_fused_flex_attention_backward", "first a Triton reduction per query row, dot(dO, O)"),
    ("triton_tem_fused_flex_attention_backward", "then the generated flex_attention_backward kernel over blocks"),
    ("fmha_cutlassB", "one CUTLASS kernel computes dQ, dK and dV over blocks of keys"),
    ("reduce_head", "dK and dV summed over each group's query heads",
     {2: "dK and dV summed over each group's query heads, a launch each"}),
    ("convert_dq", _LAST_DQ),
    ("bwd_postprocess", _LAST_DQ,
     {3: "last dQ, dK and dV converted from fp32, a launch each"}),
)


def _step_words(token: str, words: str, by_count: dict | None = None, *, kernels) -> str | None:
    """What the kernel named by `token` does, at the launches per call the trace shows; None where none ran."""
    k = next((k for k in kernels if token in k.name), None)
    return None if k is None else (by_count or {}).get(round(k.calls_per_forward), words)


def _backward(run: Run):
    return [k for k in run.kernels if k.phase == "backward"]


def backward_ratio(run: Run, peers: Peers) -> Note | None:
    """The backward against the forward, timed in the same calls, beside the guess's (the anchors' FLOP model)."""
    g = guess(run)
    if not run.ok or run.forward_timing is None or run.backward_timing is None or g is None or not g.backward_ratio:
        return None
    facts = {"ratio": ratio(measured(run, "backward_timing.median_ms", "ms"), measured(run, "forward_timing.median_ms", "ms")),
             "forward": measured(run, "forward_timing.median_ms", "ms"),
             "backward": measured(run, "backward_timing.median_ms", "ms")}
    facts["model"] = constant(g.backward_ratio, "x", repr(g.backward_ratio))
    said = "The guess is the anchors' model (tritonbench, attention-gym): a backward is {model} a forward's FLOPs."
    bwd = _backward(run)
    if bwd and on_gpu(run):
        top = max(bwd, key=lambda k: k.us_per_forward)
        facts["top"] = of_kernel(run, top, "us_per_forward", "us")
        said += f" Its largest kernel is {text.kernel(top, 40)} ({{top}} per backward)."
    off = abs(facts["ratio"].value - g.backward_ratio) / g.backward_ratio
    return note("backward_ratio", "guess", f"{label(run)}: backward {{ratio}} the forward, {{backward}} vs {{forward}}",
                said, weight=min(0.5, 0.15 + off / 2), facts=facts, kernels=bwd,
                evidence=[text.kernel_line(k) for k in bwd])


def fused_backward(run: Run, peers: Peers) -> Note | None:
    """A fused kernel's backward is several kernels: the guess said one. Count every kernel the backward launches,
    and say what each step of the fused attention does, from the names; the others (Memsets, grouped-query
    reductions) by what they are."""
    v = variant(run)
    bwd = _backward(run)
    fused = [k for k in bwd if k.category in ("fused attention", "triton")]
    if not on_gpu(run) or not (v and v.fused) or not fused or sum(k.calls_per_forward for k in bwd) < 2:
        return None
    # the steps named by their kernels, whatever their category (cuDNN's GQA head reduction is a reduction)
    described = [k for k in bwd if k in fused or any(step[0] in k.name for step in _STEPS)]
    steps = [words for step in _STEPS if (words := _step_words(*step, kernels=described))]
    facts = {"count": total(of_kernel(run, k, "calls_per_forward", "count") for k in bwd),
             "time": total(of_kernel(run, k, "us_per_forward", "us") for k in bwd)}
    body = ("; ".join(steps) + "." if steps else "The trace names the kernels; this tool has no description of their roles.")
    others = [k for k in bwd if k not in described]
    if others:
        body += f" Beside {'it' if len(described) == 1 else 'them'}: " + ", ".join(f"{text.kernel(k, 32)}" + (f" ×{text.count(k.calls_per_forward)}" if
                                                                       round(k.calls_per_forward, 2) != 1 else "")
                                             for k in others) + "."
    return note("fused_backward", "guess", f"{label(run)}'s backward is {{count}} kernels, not one ({{time}})",
                text.sentence(body), weight=0.3, facts=facts, kernels=bwd,
                evidence=[text.kernel_line(k) for k in bwd])


def saved_for_backward(run: Run, peers: Peers) -> Note | None:
    """What autograd keeps from the forward: the S×S probabilities for naive and math, O(B·H·S) statistics (and
    the output) for the fused kernels, which recompute the scores in the backward."""
    if not run.ok or run.saved_bytes is None or not square_scores(run):
        return None
    facts = {"saved": measured(run, "saved_bytes", "bytes"), "scores": scores_bytes(run)}
    facts["matrices"] = ratio(facts["saved"], facts["scores"])
    v, g = variant(run), guess(run)
    keeps_scores = facts["matrices"].value >= 0.9
    # math computes in fp32: it also keeps q, and K and V at every query head, in fp32 for its backward's GEMMs
    if ran(run) == "math":
        facts["inputs"] = total([scaled(measured(run, "workload.q_bytes", "bytes"), 4 / run.workload.element_bytes,
                                        "bytes"), scaled(measured(run, "workload.repeated_kv_bytes(4)", "bytes"), 2,
                                                         "bytes")])
    upcast = "inputs" in facts and abs(facts["saved"].value - facts["scores"].value - facts["inputs"].value) \
        <= 0.02 * facts["saved"].value
    if not upcast:
        facts.pop("inputs", None)
    if keeps_scores and upcast:
        body = ("It keeps the S×S probabilities ({scores}), the softmax's output, and math's fp32 q and K, V at every "
                "query head ({inputs}), which its backward's GEMMs read. Memory for training grows with S².")
        title = "Autograd keeps {saved} for the backward: the S×S probabilities and fp32 inputs"
    elif keeps_scores:
        inplace = " In place or not, the multiply that made the scores keeps no copy of them." \
            if v and v.in_place else ""
        transforms = "".join(f", and {kept}" for kept in scores.kept(run.workload))  # what a score transform keeps
        body = ("It keeps {matrices} one S×S matrix ({scores}): the softmax's output, which its backward reads"
                + transforms + "." + inplace + " Memory for training grows with S².")
        title = "Autograd keeps {saved} for the backward: the S×S probabilities"
    else:
        facts["matrices"].unit, facts["matrices"].of = "share", "one S×S matrix"
        body = ("The fused kernel saves its output and a log-sum-exp per query row, and recomputes the scores in the "
                "backward: {matrices} ({scores}).")
        title = "Autograd keeps only {saved} for the backward"
    wrong = g is not None and g.saves_scores is not None and keeps_scores != g.saves_scores
    return note("saved_for_backward", "guess", ("Guess was wrong: " if wrong else "") + title, body,
                weight=0.6 if wrong else 0.25, facts=facts)


def gradient_accuracy(run: Run, peers: Peers) -> Note | None:
    """A gradient further from fp64 than twice plain attention's in the same dtype: worth a look before training."""
    a = run.accuracy
    if not run.ok or a is None or not a.grads or not a.naive_grads:
        return None
    worst = max(a.grads, key=lambda g: a.grads[g] / max(a.naive_grads[g], 1e-30))
    if a.grads[worst] <= 2 * a.naive_grads[worst] + 1e-6:
        return None
    facts = {"error": measured(run, f"accuracy.grads[{worst}]", "count"),
             "plain": measured(run, f"accuracy.naive_grads[{worst}]", "count")}
    facts["times"] = ratio(facts["error"], facts["plain"])
    dtype = run.workload.dtype
    return note("gradient_accuracy", "guess", f"{worst}'s error is {{times}} plain attention's in {dtype}",
                f"Against fp64, {worst} is off by up to {text.error(facts['error'].value)}; the same computation "
                f"written plainly in {dtype} is off by {text.error(facts['plain'].value)}.",
                weight=0.5, facts={"times": facts["times"]})
