"""The environment: which backend SDPA chose or refused and why, as the torch version, the GPU and PyTorch's own
warnings say; and what a CPU run measures instead of kernels.
"""
from __future__ import annotations

import re

from .. import dispatch, text
from ..results import DOES_NOT_FIT, OUT_OF_MEMORY, STOPPED, Note, Run
from .facts import (Peers, label, measured, note, on_gpu, packing, pinned, ran, rankable, ratio, sdpa_op,
                    variant)


def _rank3_story(run: Run) -> str:
    env = run.environment
    if dispatch.rank3_is_fused(env):
        return (f"torch {env.torch_version} (2.14 or newer) views rank-3 q, k, v as one batch before choosing a "
                "backend, so [B·H, S, D] inputs reach the fused kernels.")
    return (f"With no pin, SDPA quietly fell back to math: up to torch 2.13 (this is {env.torch_version}) its fused "
            "backends want 4-D q, k, v. Reshape [B·H, S, D] to [B, H, S, D] to reach them.")


def failure(run: Run, who: str, fact=measured) -> tuple[str, dict]:
    """Which of five things kept a run from a result, in a few words with its figures (a template, and its facts
    named `{who}_...`): out of memory (the allocation that failed, the free memory, what PyTorch's allocator held
    unallocated), stopped by the time budget (the budget, the time it ran) or cancelled, refused for memory before
    it ran (what it needs, what was free), or not supported here (why: `refusal`). A request refused for time is
    refused whole, before any run (`budget.check_time`). `fact(run, path, unit, who)` reads a figure of the run."""
    facts, said = {}, []
    figures = {OUT_OF_MEMORY: (("needed_bytes", "{} asked"), ("available_bytes", "{} free"),
                               ("held_bytes", "{} held unallocated by PyTorch")),
               DOES_NOT_FIT: (("needed_bytes", "needs {}"), ("available_bytes", "{} free")),
               STOPPED: (("budget_s", "over its {} budget"), ("wall_s", "after {}"))}
    for path, words in figures.get(run.status, ()):
        if getattr(run, path) is not None:
            facts[f"{who}_{path}"] = fact(run, path, "s" if path.endswith("_s") else "bytes", who)
            said.append(words.format("{" + f"{who}_{path}" + "}"))
    lead = {OUT_OF_MEMORY: "out of memory", DOES_NOT_FIT: "refused for memory",
            STOPPED: "stopped by the time budget" if run.budget_s is not None else "cancelled"}
    if run.status not in lead:
        return refusal(run)[0], {}
    return lead[run.status] + (": " + ", ".join(said) if said else ""), facts


def refusal(run: Run) -> tuple[str, str, str]:
    """Why a run did not happen: (in a few words, the cause, PyTorch's own first reason)."""
    backend = pinned(run)
    reasons = dispatch.refusal_reasons(backend, run.pytorch_warnings) if backend else []
    quoted = reasons[0] if reasons else dispatch.clean_warning(run.reason or run.status)
    said = " ".join(reasons).lower() or (run.reason or "").lower()
    w, env = run.workload, run.environment
    pin = backend if backend != "auto" else None  # SDPA left to choose falls back by itself: not pinned
    if run.status == STOPPED:  # the budget or a cancel: nothing of the backend's
        return run.reason or run.status, text.as_sentence(run.reason or run.status), run.reason or run.status
    if run.status == "error":
        return "it failed", "The run stopped with this error; nothing was measured.", quoted
    if "4 dimensional" in said:
        return ("rank-3 inputs", f"Before torch 2.14 (this is {env.torch_version}) every fused backend wants 4-D q, "
                "k, v; pinned, SDPA has no fallback, so the call fails. Reshape to [B, H, S, D].", quoted)
    if "dtype" in said or "bf16 only" in said:
        return (f"{w.dtype} inputs", "Its kernels exist for fp16 and bf16 only." + (
            " Pinned, SDPA has no fallback, so the call fails instead of running another backend." if pin else
            ""), quoted)
    if "head_dim" in said or "head dim" in said or "last dimension" in said:
        known = dispatch.known_refusal(backend, w, env) if backend else None
        return (f"head_dim {w.head_dim}", (known or "PyTorch's head-dim check refused it")
                + ": the kernels exist for a limited set of head sizes on each GPU generation.", quoted)
    if "architecture" in said or re.search(r"\bsm\s?\d", said):
        return (f"this GPU ({env.sm})", "The kernel is built for a range of GPU generations that does not include "
                "this one.", quoted)
    if "cpu kernel" in said:
        if backend in ("efficient", "cudnn"):
            return ("no CPU kernel", "Memory-efficient and cuDNN attention are CUDA kernels; on a CPU SDPA has its CPU "
                    "flash kernel and math.", quoted)
        return "no CPU kernel", "Its kernels are CUDA kernels only: it runs on a GPU.", quoted
    if "attn_mask" in said or "dense mask" in said:
        return ("a dense mask", "This kernel takes no attn_mask: causal attention it does with a flag, a window (where "
                "it has one) with its own argument, not with an S×S mask.", quoted)
    if "same num_heads" in said:
        return ("grouped-query heads", f"torch {env.torch_version}'s memory-efficient kernel has no grouped-query "
                "path (added in 2.14): k and v must have as many heads as q.", quoted)
    if "not installed" in said:
        return ("its package is missing", "An optional dependency, not installed where this ran: " + quoted,
                quoted)
    if "does not pair" in said or "too many values to unpack" in said or "pair with" in said:
        release = re.search(r"flash-attn-4 (\S+) returns", quoted)
        pairs = re.search(r"torch [\d.]+-[\d.]+ pair with [^(;]*[^(; ]", quoted)
        return ((f"flash-attn-4 {release.group(1)}" if release else "this flash-attn-4") +
                f" does not pair with torch {env.torch_version}",
                "This torch's SDPA route unpacks two values from flash_attn.cute's forward, and this release "
                "returns more" + (f"; {pairs.group(0)}." if pairs else "."), quoted)
    if "does not support backward" in said or "no backward" in said or "windowed backward" in said:
        return "no backward for this input", "PyTorch says so: " + quoted, quoted
    if not reasons:  # refused by the app's own check before it ran (its words, quoting PyTorch's where it probed)
        return "not supported", text.as_sentence(quoted), quoted
    return "not supported", ("Pinned, SDPA does not fall back to another backend." if pin else
                             "PyTorch says so: " + quoted), quoted


def pinned_refused(run: Run, peers: Peers) -> Note | None:
    """A pinned backend that cannot take this input fails instead of falling back; PyTorch's warnings say why."""
    if run.ok:
        return None
    if run.status == STOPPED:  # the budget or a cancel, not the backend: it could have run
        if run.timing is not None and run.timing.kept > 0:
            return None  # timed, then stopped: the headline compares its figures and says so
        why, cause, _ = refusal(run)
        return note("stopped", "environment", f"{label(run)} was stopped before it was timed", cause, weight=1.0,
                    evidence=[f"stopped: {why}"])
    if run.status == DOES_NOT_FIT and None not in (run.needed_bytes, run.available_bytes):
        facts = {"needed": measured(run, "needed_bytes", "bytes"), "available": measured(run, "available_bytes", "bytes")}
        body = "Refused before a byte was allocated for it; nothing was measured."
        if run.reference_bytes:  # the fp64 accuracy check's inputs and output, counted in what it needs
            facts["reference"] = measured(run, "reference_bytes", "bytes")
            body = "The fp64 accuracy check's {reference} is counted in. " + body
        return note("does_not_fit", "environment", f"{label(run)} does not fit {text.on_device(run.environment)}: "
                    "needs {needed}, {available} free", body, weight=1.0, facts=facts, evidence=[run.status])
    why, cause, quoted = refusal(run)
    backend = pinned(run)
    reasons = dispatch.refusal_reasons(backend, run.pytorch_warnings) if backend else []
    return note("pinned_refused", "environment", f"{label(run)} cannot run {text.on_device(run.environment)}: {why}",
                cause, weight=1.0,
                evidence=[f"PyTorch: {r}" for r in reasons] or [f"refused: {quoted}"])


def rank3_path(run: Run, peers: Peers) -> Note | None:
    """Rank-3 inputs: math before torch 2.14, fused kernels from 2.14, stated for the torch that ran."""
    backend = pinned(run)
    if not run.ok or run.workload.rank != 3 or backend in (None, "math"):
        return None
    op = sdpa_op(run)
    took_math = ran(run) == "math"
    cause = _rank3_story(run)
    if took_math and dispatch.rank3_is_fused(run.environment):
        cause += " This trace still ran math, so another of SDPA's checks refused the fused backends."
    return note("rank3_path", "environment",
                "Rank-3 input: " + ("SDPA took the math path" if took_math else f"{run.backend} despite rank 3"),
                cause, weight=0.6 if took_math else 0.2, ops=[op.name] if op else [],
                evidence=[f"ran: {op.name}" if op else f"backend: {run.backend}", f"torch {run.environment.torch_version}"])


def auto_choice(run: Run, peers: Peers) -> Note | None:
    """With no pin SDPA takes the first backend in its priority order that accepts the input; the order depends
    on the torch version, the GPU and the cuDNN it loads (dispatch.priority)."""
    if not on_gpu(run) or pinned(run) != "auto" or ran(run) is None:
        return None
    env, chosen = run.environment, ran(run)
    # sdpa_auto is "auto"; another unpinned SDPA call (a variant given a mask, packed documents) is named as itself
    chooser = (variant(run).words if variant(run) else {}).get("chooser")  # the variant whose point is the choice
    who, it = (chooser.capitalize(), chooser) if chooser else (label(run), "SDPA")
    priority = dispatch.priority(env, run.workload)
    order = priority.order
    skipped = order[:order.index(chosen)] if chosen in order else list(order)
    how = "read from PyTorch" if priority.read_live else "predicted from the version rules"
    sdpa = priority.sdpa or priority  # SDPA's own order: after causal_lower_right's own tries, where it has them
    evidence = [f"priority ({how}): {' → '.join(order)}" + (f" ({priority.rule})" if priority.sdpa else ""),
                f"why cuDNN is{'' if sdpa.order[0] == 'cudnn' else ' not'} first in SDPA's own order: {sdpa.rule}"]
    if "math" in skipped:  # math accepts every input: this order cannot be the one that ran
        result = (f" The trace shows {chosen}, which this order never reaches, so the order that ran differed "
                  "(an environment variable, or code that set it).")
    elif skipped:
        refusals = {b: dispatch.known_refusal(b, run.workload, env) for b in skipped}
        evidence += [f"{b}: refused, {why or 'by a check PyTorch reports only when no backend runs'}"
                     for b, why in refusals.items()]
        by_reason: dict[str, list[str]] = {}
        for b, why in refusals.items():
            by_reason.setdefault(why or "a check PyTorch reports only when no backend runs", []).append(b)
        result = " " + "; ".join(f"{_and(bs)} refused it: {why}" for why, bs in by_reason.items()) + "."
    else:
        result = f" {chosen} accepted this input, so {it} ran it."
    facts, weight = {}, 0.25
    faster = [p for p in peers.values() if rankable(run) and pinned(p) not in (None, "auto") and p.gpu_ms and run.gpu_ms
              and p.timing.max_ms < run.timing.min_ms]
    # a faster backend is named only where the peer ran another backend over the same layout: a gap to one of the
    # same backend, or over another layout (a dense T×T block-diagonal mask over one sequence against the causal flag
    # over B×S), is not the backend's
    faster = [p for p in faster if packing(p) == packing(run) and ran(p) != chosen]
    if faster:
        best = min(faster, key=lambda p: p.gpu_ms)
        facts = {"ratio": ratio(measured(run, "timing.median_ms", "ms"),
                                measured(best, "timing.median_ms", "ms", f"peers[{best.variant}]"))}
        result += f" It is not the fastest {text.on_device(env)}: {label(best)} is {{ratio}} faster."
        weight = 0.45
    title = f"{who} ran {chosen}, " + (f"first in {priority.by}'s order {text.on_device(env)}" if not skipped else
                                        f"after {_and(skipped)} refused this input")
    tries = f"SDPA tries {sdpa.order[0]} first {text.on_device(env)}: {sdpa.rule}."
    if priority.sdpa:
        tries = f"{priority.rule[0].upper()}{priority.rule[1:]}, which tries {sdpa.order[0]} first {text.on_device(env)}."
    return note("auto_choice", "environment", title, tries + result,
                weight=weight, facts=facts, ops=[sdpa_op(run).name] if sdpa_op(run) else [], evidence=evidence,
                links=[dispatch.SOURCE + " (priority_order, check_prefer_cudnn_attention)"])


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def cpu_dispatch(run: Run, peers: Peers) -> Note | None:
    """On a CPU there are no kernels: the table lists aten ops, and SDPA dispatches to its CPU flash kernel or math."""
    if not run.ok or run.environment.device != "cpu":
        return None
    op = sdpa_op(run)
    what = f"SDPA ran `{text.op(op.name)}`. " if op else ""
    facts, slowed = {}, ""
    if run.profiled_host_ms and run.timing:
        facts = {"profiled": measured(run, "profiled_host_ms", "ms"), "timed": measured(run, "timing.median_ms", "ms")}
        facts["slower"] = ratio(facts["profiled"], facts["timed"])
        slowed = (" The op table's times are self times under the profiler, whose calls took {profiled} against "
                  "{timed} timed ({slower}): read their shares, not their µs beside the wall time.")
    return note("cpu_dispatch", "environment", "A CPU run: aten ops by CPU time, not GPU kernels",
                what + "On a CPU, SDPA tries its CPU flash kernel, then math; memory-efficient and cuDNN have no CPU "
                "kernel. GPU facts (tensor cores, occupancy, Memsets) do not apply." + slowed,
                weight=0.05, facts=facts, ops=[op.name] if op else [],
                evidence=[f"{k.name} · {text.us(k.us_per_forward)} self/fwd ({text.share(k.share)})"
                          for k in run.kernels[:5]] + [f"CPU: {run.environment.device_name}"])
