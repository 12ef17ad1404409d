"""The run's time figures against each other and the guess: the host's cost per call against the GPU's time
(host-bound, or host figures that do not add up), the first call against a warm one, and the profiled kernel table
against CUDA events. Each rule reads one run and returns a `Note` or None.
"""
from __future__ import annotations

from ..results import Note, Run
from .. import text
from .facts import Peers, measured, note, of_kernel, on_gpu, ran, ratio, scaled, total, variant
from .verdict import adds_up


# -- the host against the GPU ---------------------------------------------------------------------------
def host_bound(run: Run, peers: Peers) -> Note | None:
    """When issuing a call costs the CPU more than the GPU takes to run it, back-to-back calls wait on the host.
    Uses the unprofiled host figures; says nothing where the run does not have them."""
    if not on_gpu(run) or run.bound != "host" or run.host_cost is None or run.back_to_back is None or not adds_up(run):
        return None
    gpu = _call_gpu(run)
    facts = {"host": measured(run, "host_cost.median_ms", "ms"), "gpu": gpu,
             "pace": measured(run, "back_to_back.median_ms", "ms")}
    v = variant(run)
    if v and v.compiled:
        cause = "every call first runs TorchDynamo's guards and the compiled graph's wrapper in Python"
    elif ran(run) == "cudnn":
        cause = "cuDNN looks the call's shape up in its execution-plan cache and packs its arguments first"
    elif ran(run) in ("flash", "efficient"):
        cause = "the call goes through the dispatcher, SDPA's checks and its output allocations first"
    else:
        cause = f"each of its {text.count(len(run.host_ops))} aten ops goes through the dispatcher first"
    pin = ""
    if run.pin_cost_ms:
        facts["pin"] = measured(run, "pin_cost_ms", "ms")
        pin = " Entering the `sdpa_kernel` pin adds {pin} per call where it is entered each time."
    call = "step" if run.workload.training else "forward"  # a backward view's host figures are its step's
    return note("host_bound", "guess", "Host-bound: {host} of CPU per call for {gpu} of GPU",
                f"Issuing one {call} costs the CPU {{host}} (unprofiled, GPU kept busy): {cause}. Back to back, "
                "calls come every {pace}, the host's pace, not the GPU's." + pin,
                weight=1 - gpu.value / run.host_cost.median_ms if run.host_cost.median_ms > gpu.value else 0.2,
                facts=facts)


def _call_gpu(run: Run):
    """The GPU time of the call the host figures are of: a backward view's is its whole step's."""
    if run.workload.passes == "bwd":
        return total([measured(run, "forward_timing.median_ms", "ms"), measured(run, "backward_timing.median_ms", "ms")])
    return measured(run, "timing.median_ms", "ms")


def host_figures_disagree(run: Run, peers: Peers) -> Note | None:
    """A host cost per call under the GPU time should give a GPU-bound loop; a host-bound pace beside it means the
    loop waited on something neither figure measures. Flagged: the verdict ranks on such a pace only where the order
    holds with the GPU time in its place."""
    if not on_gpu(run) or adds_up(run):
        return None
    facts = {"host": measured(run, "host_cost.median_ms", "ms"), "gpu": _call_gpu(run),
             "pace": measured(run, "back_to_back.median_ms", "ms")}
    return note("host_figures_disagree", "guess", "Host figures disagree: {host} to issue, {gpu} of GPU, {pace} back "
                "to back",
                "Issuing costs less than the GPU time, yet the loop ran slower than both: it waited on something "
                "neither measures, likely the first call's issue. The verdict uses this pace only where GPU time "
                "gives the same order.", weight=0.15, facts=facts)


# -- one-off costs and the profiler ----------------------------------------------------------------
def first_call(run: Run, peers: Peers) -> Note | None:
    """The first call pays one-time costs (compilation, cuDNN plans, lazy loading) that the timed calls do not."""
    if not run.ok or run.first_call_ms is None or not run.gpu_ms or run.first_call_ms < max(50.0, 20 * run.gpu_ms):
        return None
    facts = {"first": scaled(measured(run, "first_call_ms", "ms"), 0.001, "s"),
             "warm": measured(run, "timing.median_ms", "ms")}
    v = variant(run)
    if v and v.compiled:
        made = "Triton kernels" if run.environment.device == "cuda" else "C++ code"
        what = "the forward and, separately, the backward" if run.workload.training else "the forward"
        cause = (f"torch.compile traced {what} and generated {made} on the first call; later calls reuse them "
                 "while shape and dtype match.")
    elif ran(run) == "cudnn":
        cause = "cuDNN built an execution plan for this shape on the first call; later calls find it cached."
    else:
        cause = "Libraries load their kernels and create their handles on first use; the timed calls come after."
    return note("first_call", "guess", "The first call took {first}", cause + " A warm forward takes {warm}.",
                weight=0.25 if (v and v.compiled) else 0.05, facts=facts)


def profiled_vs_events(run: Run, peers: Peers) -> Note | None:
    """The kernel table sums the profiled forwards' kernel durations; the timing is CUDA events around unprofiled
    calls. Where they part by more than 10%, say which is which."""
    if not on_gpu(run) or not run.kernels or not run.gpu_ms:
        return None
    facts = {"table": total(of_kernel(run, k, "us_per_forward", "us") for k in run.kernels),
             "events": measured(run, "timing.median_ms", "ms")}
    facts["ratio"] = ratio(facts["table"], scaled(facts["events"], 1000, "us"))
    if abs(facts["ratio"].value - 1) <= 0.10:
        return None
    return note("profiled_vs_events", "guess", "Two GPU times: {table} profiled, {events} by CUDA events",
                "The kernel table adds up the kernels of {forwards} forwards recorded under the profiler; the "
                "verdict's time is the median of CUDA events around unprofiled calls. They differ by more than "
                "the timings' spread: read ratios from one of them, never across.",
                weight=0.2, facts=facts | {"forwards": measured(run, "profiled_forwards", "count")})
