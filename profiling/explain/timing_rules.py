"""The run's time figures against each other and the guess: the host's cost per call against the GPU's time
(host-bound, or a loop slower than both), the first call against a warm one, and the profiled kernel table against
CUDA events. Each rule reads one run and returns a `Note` or None. The host figures are of one call the host issues:
a forward, or a whole training step (a backward view's calls are steps too).
"""
from __future__ import annotations

from ..results import Note, Run
from .. import text
from .facts import Peers, call_gpu, measured, note, on_gpu, phase_total, ran, ratio, scaled, variant


# -- the host against the GPU ---------------------------------------------------------------------------
def _host_cause(run: Run) -> tuple[str, dict, list[str]]:
    """Why issuing a call costs the CPU what it does, from the profiled call's own host ops: the op whose own (self)
    time is largest, and for a Python-level wrapper what that wrapper is. (Sentence, facts, evidence.)"""
    ops = sorted(run.host_ops, key=lambda h: -h.self_us_per_forward)
    evidence = [text.host_line(h) for h in ops[:4]]
    if not ops or not run.profiled_host_ms:
        return "", {}, evidence
    top = ops[0]
    i = run.host_ops.index(top)
    # the profiler inflates every op's time (2.3-3.7x on the H200): only the share of the profiled call is stated
    share = ratio(measured(run, f"host_ops[{i}].self_us_per_forward", "us"),
                  scaled(measured(run, "profiled_host_ms", "ms"), 1000, "us"), "share")
    share.of = "the profiled call's CPU time"
    facts = {"top_share": share}
    v = variant(run)
    if top.name.startswith("aten::"):
        aten = sum(h.calls_per_forward for h in run.host_ops if h.name.startswith("aten::"))
        return (f"each of its {text.count(aten)} aten calls goes through the dispatcher (the largest, "
                f"`{text.op(top.name)}`, is {{top_share}})"), facts, evidence
    if v and v.compiled:
        what = "TorchDynamo's guards and the graph's wrapper, in Python"
    elif v and v.jit_s:
        what = "flash_attn.cute's Python launch path"
    elif ran(run) == "cudnn":
        what = "cuDNN's execution-plan lookup and argument packing"
    else:
        what = "code outside the aten ops"
    return f"`{text.host_op(top.name)}`'s own time is {{top_share}}: {what}", facts, evidence


def host_bound(run: Run, peers: Peers) -> Note | None:
    """When issuing a call costs the CPU about as long as the GPU takes to run it, back-to-back calls wait on the
    host (`Run.bound`). Uses the unprofiled host figures for the claim, the profiled host ops for the cause."""
    if not on_gpu(run) or run.bound != "host":
        return None
    gpu = call_gpu(run)
    facts = {"host": measured(run, "host_cost.median_ms", "ms"), "gpu": gpu,
             "pace": measured(run, "back_to_back.median_ms", "ms")}
    cause, more, evidence = _host_cause(run)
    facts |= more
    pin = ""
    if run.pin_cost_ms:
        facts["pin"] = measured(run, "pin_cost_ms", "ms")
        pin = " Entering the `sdpa_kernel` pin adds {pin} per call where it is entered each time."
    return note("host_bound", "guess", f"Host-bound: {{host}} of CPU per {run.call} for {{gpu}} of GPU",
                f"Issuing one {run.call} costs the CPU {{host}} (unprofiled)" + (f"; {cause}" if cause else "")
                + ". Back to back, calls come every {pace}: the host's pace." + pin,
                weight=1 - gpu.value / run.host_cost.median_ms if run.host_cost.median_ms > gpu.value else 0.2,
                facts=facts, evidence=evidence)


def loop_waits(run: Run, peers: Peers) -> Note | None:
    """A loop slower than both its GPU time and its host cost per call (`Run.bound` "other"): neither side sets that
    pace, so it is no host bound; the figures say so, and the verdict compares GPU times unless the other side is
    host-bound."""
    if not on_gpu(run) or run.bound != "other":
        return None
    facts = {"host": measured(run, "host_cost.median_ms", "ms"), "gpu": call_gpu(run),
             "pace": measured(run, "back_to_back.median_ms", "ms")}
    facts["over"] = ratio(facts["pace"], facts["gpu"])
    return note("loop_waits", "guess", "A loop of {call}s runs {over} its GPU time, and not for the host",
                "Back to back, calls come every {pace}; the GPU needs {gpu} and the CPU {host} to issue one, so the "
                "host keeps ahead. The loop waits on something neither figure measures (a launch queue, a "
                "synchronisation, clocks).", weight=0.15, facts=facts, names={"call": run.call})


# -- one-off costs and the profiler ----------------------------------------------------------------
def first_call(run: Run, peers: Peers) -> Note | None:
    """The first call pays one-time costs (compilation, cuDNN plans, lazy loading) that the timed calls do not."""
    if not run.ok or run.first_call_ms is None or not run.call_gpu_ms \
            or run.first_call_ms < max(50.0, 20 * run.call_gpu_ms):
        return None
    facts = {"first": scaled(measured(run, "first_call_ms", "ms"), 0.001, "s"), "warm": call_gpu(run)}
    v = variant(run)
    what = "the forward and, separately, the backward" if run.workload.training else "the forward"
    if v and v.compiled:
        made = "Triton kernels" if run.environment.device == "cuda" else "C++ code"
        cause = (f"torch.compile traced {what} and generated {made} on the first call; later calls reuse them "
                 "while shape and dtype match.")
    elif v and v.jit_s:
        cause = (f"{v.label} JIT-compiled its kernels for {what} of this configuration on the first call; later "
                 "calls with the same shapes reuse them.")
    elif ran(run) == "cudnn":
        cause = "cuDNN built an execution plan for this shape on the first call; later calls find it cached."
    else:
        cause = "Libraries load their kernels and create their handles on first use; the timed calls come after."
    return note("first_call", "guess", f"The first {run.call} took {{first}}",
                cause + f" A warm {run.call} takes {{warm}} on the GPU.",
                weight=0.25 if (v and (v.compiled or v.jit_s)) else 0.05, facts=facts)


def profiled_vs_events(run: Run, peers: Peers) -> Note | None:
    """The kernel table sums the profiled calls' kernel durations; the timing is CUDA events around unprofiled
    calls, of the same phase. Where they part by more than 10%, say which is which."""
    if not on_gpu(run) or not run.kernels_of() or not run.gpu_ms:
        return None
    facts = {"table": phase_total(run, run.phase), "events": measured(run, "timing.median_ms", "ms")}
    facts["ratio"] = ratio(facts["table"], scaled(facts["events"], 1000, "us"))
    if abs(facts["ratio"].value - 1) <= 0.10:
        return None
    return note("profiled_vs_events", "guess", f"Two GPU times of the {run.phase}: {{table}} profiled, {{events}} "
                "by CUDA events",
                f"The kernel table adds up the {run.phase}'s kernels over {{calls}} profiled calls; the verdict's "
                f"time is the median of CUDA events around the {run.phase} of unprofiled calls. They differ by more "
                "than the timings' spread: read ratios from one of them, never across.",
                weight=0.2, facts=facts | {"calls": measured(run, "profiled_forwards", "count")})
