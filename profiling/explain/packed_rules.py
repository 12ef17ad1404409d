"""Packed documents in the trace (`lengths`): what each way of attending within a document costs. Padding to B×S
computes pairs no document has (counted from the lengths, not guessed); a block-diagonal bool mask over the T tokens is
built on every call and all T² pairs are computed; each way reaches its own kernel (SDPA's nested path, varlen's
FlashAttention or cuDNN op, FlexAttention's document BlockMask, FlashAttention-4's varlen entry); and the Python
paths of nested tensors and varlen_attn cost host time, read from the trace and the host figures.

Every number a note states is a fact of the run: the workload's pair counts, a kernel's time and share, the host
cost per call.
"""
from __future__ import annotations

from attention_variants import VARIANTS

from .. import text
from ..results import Note, Quantity, Run
from .facts import (Peers, call_gpu, label, launched_under, measured, note, of_kernel, on_gpu, ran, ratio, share_of,
                    variant)

# The ops that build a block-diagonal mask from the tokens' document ids and positions (attention_variants/packed.py):
# the document comparison, the causal one, and their in-place `and` (SDPA's allowed mask) or `or` (naive's hidden one)
MASK_BUILD_OPS = ("aten::eq", "aten::ge", "aten::bitwise_and_", "aten::__iand__", "aten::ne", "aten::lt",
                  "aten::bitwise_or_", "aten::__ior__")
# The Python level of a packed way, as the profiler names it: a tensor subclass's dispatch (nested jagged tensors), a
# custom op's Python body (varlen_attn), a jagged view made or read
PYTHON_OPS = ("PythonSubclass", "torch_attn::_varlen_attn", "aten::_nested_view_from_jagged", "aten::_nested_get_values")
# varlen_attn's own choice of kernel, by the aten op it calls (torch/nn/attention/varlen.py, _varlen_attn)
VARLEN_OPS = {"aten::_flash_attention_forward": "FlashAttention", "aten::_cudnn_attention_forward": "cuDNN"}


def _packing(run: Run) -> str | None:
    """How the run's variant laid the documents out (base.PACKINGS), for a run of packed documents."""
    v = VARIANTS.get(run.variant)
    if not (run.ok and v is not None and run.workload.lengths is not None):
        return None
    return v.packing(run.workload)


def _share_of_pairs(part: Quantity, whole: Quantity, of: str) -> Quantity:
    q = ratio(part, whole, "share")
    q.of = of
    return q


def padding_waste(run: Run, peers: Peers) -> Note | None:
    """A padded batch runs every row to the longest document: the pairs of its padding rows (under the causal flag) or
    of its padding keys and rows (under a key-padding mask) are computed and thrown away. Σ (pairs(S) − pairs(Lᵢ))."""
    w = run.workload
    if _packing(run) != "padded" or w.wasted_pairs == 0:
        return None
    facts = {"padded": measured(run, "workload.padded_pairs", "count"),
             "real": measured(run, "workload.attended_pairs", "count"),
             "wasted": measured(run, "workload.wasted_pairs", "count"),
             "rows": measured(run, "workload.batch", "count"), "longest": measured(run, "workload.seq_len", "count"),
             "tokens": measured(run, "workload.tokens", "count")}
    facts["share"] = _share_of_pairs(facts["wasted"], facts["padded"], "the pairs computed")
    how = ("the causal flag puts padding keys after every real query, yet the padding rows' pairs are computed"
           if w.causal else "the key-padding mask hides the padding keys, yet a dense mask skips no tile")
    return note("padding_waste", "guess", "Padding wastes {share}: {wasted} pairs a head",
                "The {tokens} tokens are padded to {rows} rows of {longest}: " + how + ": {padded} pairs a head for "
                "{real} real ones (Σ pairs(S) − pairs(Lᵢ)).",
                weight=0.6 * facts["share"].value, facts=facts)


def mask_build(run: Run, peers: Peers) -> Note | None:
    """A block-diagonal mask over the T tokens, built on every call from the tokens' document ids (each batch brings
    new lengths), and for SDPA made additive (its `where`): the share of the forward they take, and the T² pairs then
    computed, a dense mask telling no kernel which tiles are empty."""
    if _packing(run) != "block" or not VARIANTS[run.variant].packed_only:  # flex's block mask is built in setup
        return None
    if run.workload.passes == "bwd":  # a backward view: the mask is built in the forward, not in what it shows
        return None
    forward = run.kernels_of("forward")
    built = [k for k in forward if k.name in MASK_BUILD_OPS or launched_under(k, *MASK_BUILD_OPS)]
    made_additive = [k for k in forward if k.name == "aten::where" or launched_under(k, "aten::where")]
    if not built:
        return None
    facts = {"share": share_of(run, built + made_additive, "forward"),
             "tokens": measured(run, "workload.tokens", "count"),
             "bytes": measured(run, "workload.block_mask_bytes", "bytes"),
             "grid": measured(run, "workload.block_pairs", "count"),
             "real": measured(run, "workload.attended_pairs", "count")}
    facts["used"] = _share_of_pairs(facts["real"], facts["grid"], "the pairs computed")
    units = ("kernel" if on_gpu(run) else "aten op") + ("s" if len(built) > 1 else "")
    then = ", then made additive by SDPA's `where`" if made_additive else ""
    return note("mask_build", "guess", "The block-diagonal mask costs {share} every call",
                f"{{tokens}}×{{tokens}} bool ({{bytes}}) built from the tokens' document ids by {len(built)} {units}"
                f"{then}. Given a dense mask, nothing skips the empty tiles: {{grid}} pairs a head are computed, "
                "{real} of them attended ({used}).",
                weight=max(0.2, facts["share"].value), facts=facts, kernels=built + made_additive,
                evidence=[text.kernel_line(k) for k in built + made_additive])


def _called(run: Run, ops) -> str | None:
    return next((o for o in ops if any(h.name == o for h in run.host_ops)), None)


def packed_kernel(run: Run, peers: Peers) -> Note | None:
    """The kernel each packed way reaches on a GPU, named from the trace: SDPA's backend for nested tensors or a mask
    over one sequence, the aten op varlen_attn called, FlexAttention's or FlashAttention-4's own kernel."""
    packing = _packing(run)
    if not on_gpu(run):  # a CPU's op table: the environment's note names the op SDPA ran
        return None
    k = max((k for k in run.kernels_of("forward") if k.name not in PYTHON_OPS), key=lambda k: k.us_per_forward,
            default=None)  # the longest kernel (on a CPU, aten op) that is not the Python level's
    if packing not in ("block", "packed") or k is None:
        return None
    facts = {"time": of_kernel(run, k, "us_per_forward", "us"), "share": share_of(run, [k], "forward")}
    names = {"who": label(run), "main": text.kernel(k)}
    v = variant(run)
    how = v.words.get("packed") if v else None  # the variant's own words (base.WORD_TOPICS)
    if how is None:
        return None
    if v.packed_ops:  # its own choice of kernel, by the aten op it called
        names["op"] = _called(run, v.packed_ops)
        if names["op"] is None:
            return None
        names["lib"] = v.packed_ops[names["op"]]
    if "{backend}" in how:  # SDPA's choice, read from the trace
        names["backend"] = ran(run)
        if names["backend"] is None:
            return None
    return note("packed_kernel", "guess", "{who} reached `{main}` ({time} per forward)", how + ": {share}.", weight=0.15,
                facts=facts, names=names, kernels=[k], evidence=[text.kernel_line(k)])


def _python_ops(run: Run) -> list:
    return [h for h in run.host_ops if h.name in PYTHON_OPS]


def packed_host(run: Run, peers: Peers) -> Note | None:
    """The Python paths of nested tensors and varlen_attn, on the host: on a GPU the host cost of a call against its
    GPU time (with the Python-level ops the trace shows); on a CPU the share of the forward's op time that the nested
    tensors' Python dispatch (`PythonSubclass`) takes."""
    v = variant(run)
    if _packing(run) != "packed" or not (v and "host_path" in v.words):
        return None
    python = _python_ops(run)
    evidence = [f"{h.name} · {text.us(h.self_us_per_forward)} self per {run.call}" for h in python]
    if on_gpu(run) and run.host_cost is not None and run.warm_call_ms:
        if run.bound == "host":  # the host-bound note says these figures, and what the trace shows of the cause
            return None
        facts = {"host": measured(run, "host_cost.median_ms", "ms"), "gpu": call_gpu(run)}
        facts["ratio"] = ratio(facts["host"], facts["gpu"])
        if facts["ratio"].value < 0.5:
            return None
        return note("packed_host", "timing", "{who} costs the host {host} per " + run.call + ", {ratio} its GPU time",
                    "Its Python path (" + v.words["host_path"] + ") issues each " + run.call + " in {host} against {gpu} on the GPU; the trace's Python-level ops are below.",
                    weight=min(0.5, 0.25 * facts["ratio"].value), facts=facts, names={"who": label(run)},
                    evidence=evidence)
    subclass = [k for k in run.kernels_of("forward") if k.name == "PythonSubclass"]
    if on_gpu(run) or not subclass:
        return None
    facts = {"share": share_of(run, subclass, "forward")}
    return note("packed_host", "timing", "Nested tensors' Python dispatch takes {share}",
                "`PythonSubclass`, the jagged tensor's Python-level handling of each op it meets, by the profiler's "
                "self time; SDPA's own math runs in the rest.",
                weight=min(0.5, facts["share"].value), facts=facts, kernels=subclass, evidence=evidence)
