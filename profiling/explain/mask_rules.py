"""Masks and grouped-query heads against the guess: a bool mask turned into an additive one on every call, a
window SDPA can only take as a dense mask, k and v copied to every head where the code or the math path expands
them, what grouped-query heads save, and what building flex's block mask costs and when it is paid."""
from __future__ import annotations

from .. import text
from ..results import Note, Run
from .facts import (Peers, variant, constant, fused, label, launch_share, launches, measured, note, of_kernel, of_launch, on_gpu, ran,
                    packing, ratio, scaled, share_of, total, variant)


def mask_conversion(run: Run, peers: Peers) -> Note | None:
    """SDPA given a bool mask converts it into an additive one (−inf where False) on every call: a `where` over the
    S×S mask, launched inside scaled_dot_product_attention (not the math path's softmax guard, whose `where` is
    over the scores); the kernel then reads it, tile by tile."""
    w = run.workload
    if not on_gpu(run) or w.mask not in ("bool", "window") or not (variant(run) and variant(run).sdpa_backend):
        return None
    where = [(k, launch) for k, launch in launches(run, "aten::scaled_dot_product_attention", phase="forward")
             if launch.ops[-1] == "aten::where" and "aten::_safe_softmax" not in launch.ops]
    if not where:
        return None
    facts = {"time": total(of_launch(run, k, launch, "us_per_forward", "us") for k, launch in where),
             "bytes": scaled(measured(run, "workload.mask_elements", "count"), w.element_bytes, "bytes"),
             "share": launch_share(run, where, "forward")}
    then = ("the math path then adds it to the scores, as it would any bias." if ran(run) == "math" else
            "the kernel then reads it. Given a mask instead of is_causal, a kernel cannot know which tiles are empty, "
            "so it skips none.")
    return note("mask_conversion", "guess", "The bool mask becomes an additive one in every forward ({time})",
                "SDPA turns the S×S bool mask into a float one ({bytes}) with a `where` before each call, {share}; "
                + then,
                weight=max(0.15, facts["share"].value), facts=facts, kernels=[k for k, _ in where],
                ops=["aten::where"], evidence=[f"{text.kernel(k)} · {text.us(launch.us_per_forward)} · launched by "
                                               f"{text.chain(launch.ops)}" for k, launch in where])


def masked_fill_rate(run: Run, peers: Peers) -> Note | None:
    """Naive's masked_fill and its scale `mul` each read and write the S×S scores, the same bytes; the mask is one
    S×S matrix broadcast over B·H, which keeps masked_fill off TensorIterator's vectorized path (taken only when
    every operand is contiguous), so it moves those bytes more slowly than the vectorized `mul`."""
    v = variant(run)
    forward = [k for k in run.kernels if k.phase == "forward"]
    fill = next((k for k in forward if k.short_name == "elementwise_kernel [masked_fill]"), None)
    mul = next((k for k in forward if k.short_name == "vectorized_elementwise_kernel [mul]"), None)
    if not on_gpu(run) or not (v and v.handwritten and packing(run) == "padded") or not (fill and mul):
        return None
    moved = scaled(measured(run, "workload.scores_bytes()", "bytes"), 2, "bytes")  # read once, written once
    facts = {"bytes": moved, "share": share_of(run, [fill], "forward"),
             "fill": ratio(moved, of_kernel(run, fill, "us_per_forward", "us"), "bytes_per_us"),
             "mul": ratio(moved, of_kernel(run, mul, "us_per_forward", "us"), "bytes_per_us")}
    facts["slower"] = ratio(facts["mul"], facts["fill"])
    largest = fill is max(forward, key=lambda k: k.us_per_forward)
    mask = {"flag": "causal", "bool": "bool", "window": "window"}.get(run.workload.mask, "causal")
    return note("masked_fill_rate", "guess",
                ("masked_fill, the forward's largest kernel," if largest else "masked_fill") +
                " moves {fill}; the scale's mul {mul}",
                f"Both read and write the S×S scores ({{bytes}}); the {mask} mask, one S×S matrix broadcast over B·H, "
                "keeps masked_fill on the generic `elementwise_kernel`, without `mul`'s vectorized loads: {slower} "
                "slower per byte, {share}.",
                weight=0.05 + facts["share"].value / 2, facts=facts, kernels=[fill, mul],
                evidence=[text.kernel_line(fill), text.kernel_line(mul)])


def dense_window(run: Run, peers: Peers) -> Note | None:
    """SDPA has no sliding-window argument: the window reaches it as a dense S×S mask, so the kernel computes every
    tile and masks most of them, where a block-sparse kernel (flex, FlashAttention-4) skips them."""
    w = run.workload
    v = variant(run)
    if not run.ok or w.mask != "window" or not (v and v.sdpa_backend):
        return None
    facts = {"window": measured(run, "workload.window", "count"), "seq": measured(run, "workload.seq_len", "count"),
             "outside": constant(1 - w.pairs / w.mask_elements, "share",
                                 "diff(1, ratio(run.workload.pairs, run.workload.mask_elements))")}
    return note("dense_window", "guess", "A window of {window} keys reaches SDPA as a dense {seq}×{seq} mask",
                "SDPA has no window argument, so the window is an S×S mask and the kernel computes every tile: "
                "{outside} of the query–key pairs are outside the window, work a block-sparse kernel skips.",
                weight=0.4, facts=facts)


def kv_expansion(run: Run, peers: Peers) -> Note | None:
    """With fewer kv heads, the naive code (repeat_interleave) and SDPA's math path copy k and v to every query
    head before their GEMMs: memory and bandwidth a grouped-query kernel never spends."""
    w = run.workload
    if not run.ok or w.groups == 1:
        return None
    copies = [(k, launch) for k, launch in launches(run, "aten::repeat_interleave") if k.phase == "forward"]
    if not copies and not (run.environment.device == "cpu" and any(
            h.name == "aten::repeat_interleave" for h in run.host_ops)):
        return None
    facts = {"kv": measured(run, "workload.kv_heads", "count"), "heads": measured(run, "workload.heads", "count")}
    if copies:
        facts["time"] = total(of_launch(run, k, launch, "us_per_forward", "us") for k, launch in copies)
    who = "SDPA's math path" if ran(run) == "math" else f"{label(run)}'s code"
    return note("kv_expansion", "guess", f"{label(run)} copies k and v from {{kv}} to {{heads}} heads"
                + (" ({time} per forward)" if copies else ""),
                f"{who} repeats each kv head for its query heads (`repeat_interleave`) before the GEMMs: full-size "
                "copies of k and v, which grouped-query kernels (flash, cuDNN, flex) read in place.",
                weight=0.3, facts=facts, kernels=[k for k, _ in copies], ops=["aten::repeat_interleave"])


def kv_savings(run: Run, peers: Peers) -> Note | None:
    """Grouped-query heads read k and v once per group: K/V bytes over H/Hkv fewer."""
    w = run.workload
    if not run.ok or w.groups == 1 or not fused(run):
        return None
    facts = {"heads": measured(run, "workload.heads", "count"), "groups": measured(run, "workload.groups", "count"),
             "bytes": measured(run, "workload.kv_bytes", "bytes"), "less": measured(run, "workload.groups", "x")}
    return note("kv_savings", "guess", "Grouped-query: k and v hold {kv} for {heads} query heads",
                "Each kv head serves {groups} query heads, so the kernel reads {bytes} of k and v, {less} less than "
                "with a kv head per query head; the scores' work is the same.",
                weight=0.05, facts=facts, names={"kv": text.plural(w.kv_heads, "head")})


def block_mask_setup(run: Run, peers: Peers) -> Note | None:
    """What a variant's setup builds before its first call (flex's block map from `create_block_mask`, FlashInfer's
    plan), in its own file's words (`Variant.words`: "setup", "setup_how"): paid once per workload, not per call; and
    once in a process (a second run of the same workload finds it built, which says nothing of what a build costs)."""
    v = variant(run)
    if not run.ok or run.setup_ms is None or not run.workload.causal or not run.gpu_ms or v is None \
            or "setup" not in v.words:
        return None
    what = v.words["setup"]
    facts = {"setup": measured(run, "setup_ms", "ms"), "call": measured(run, "timing.median_ms", "ms")}
    call = f"a {run.phase} takes {{call}}"  # the run's figure, of its pass
    if run.setup_reused:
        return note("block_mask_setup", "guess", f"{what[0].upper() + what[1:]} was found built, in {{setup}}; " + call,
                    f"This process had built {what} for this workload before, and reused it: it is built once, before "
                    "the first call, never per call.", weight=0.05, facts=facts)
    if run.setup_reused is None:  # a run recorded before reuse was told apart
        return note("block_mask_setup", "guess", f"Preparing {what} took {{setup}}; " + call,
                    f"{what[0].upper() + what[1:]} is built once, before the first call, never per call; this recording "
                    "does not say whether it was built then or found built earlier in the process.",
                    weight=0.05, facts=facts)
    return note("block_mask_setup", "guess", f"Building {what} took {{setup}}; " + call, v.words["setup_how"],
                weight=0.1 if facts["setup"].value < 10 * facts["call"].value else 0.3, facts=facts)
