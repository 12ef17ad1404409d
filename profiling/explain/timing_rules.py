"""The run's time figures against each other and the guess: the host's cost per call against the GPU's time
(host-bound, or a loop slower than both), the first call against a warm one, the profiled kernel table against
CUDA events; and what a figure depends on beyond the kernel: the L2 a warm loop reads from and what a cold one
changed, a CUDA graph that removes the launch cost and changes the winner, the bytes moved against the GPU's copy
ceiling, the clocks and the slice of GPU it ran on. Each rule reads one run (and for a ratio the other of the
comparison) and returns a `Note` or None. The host figures are of one call the host issues: a forward, or a whole
training step (a backward view's calls are steps too), taken as a warm loop whatever the timing mode.
"""
from __future__ import annotations

from .. import stats, text
from ..environment import HBM_BYTES_PER_US, hbm_key
from ..results import Note, Run
from ..workload import DTYPE_BYTES, spec_of
from .facts import (Peers, call_gpu, constant, fused, host_op, host_share, label, measured, moved, note, on_gpu,
                    phase_total, ran, rankable, ratio, run_tensors, scaled, variant, working_set)


# -- the host against the GPU ---------------------------------------------------------------------------
_COMPILED_OPS = (("TorchDynamo Cache Lookup", "TorchDynamo's guard checks, in Python"),
                 ("CompiledFxGraph", "the compiled graph's Python wrapper, which launches its kernels"),
                 ("CompiledFunction", "AOTAutograd's wrapper around the compiled graph, in Python"),
                 ("Torch-Compiled Region", "the compiled region's entry, in Python"))


def _host_cause(run: Run) -> tuple[str, dict, list[str]]:
    """Why issuing a call costs the CPU what it does, from the profiled call's own host ops: the op whose own (self)
    time is largest, and for a Python-level wrapper what that wrapper is. (Sentence, facts, evidence.)"""
    ops = sorted(run.host_ops, key=lambda h: -h.self_us_per_forward)
    evidence = [text.host_line(h) for h in ops[:4]]
    if not ops or not run.profiled_host_ms:
        return "", {}, evidence
    top = ops[0]
    # the profiler inflates every op's time (2.3-3.7x on the H200): only the share of the profiled call is stated
    facts = {"top_share": host_share(run, run.host_ops.index(top), "the")}
    v = variant(run)
    if top.name.startswith("aten::"):
        aten = sum(h.calls_per_forward for h in run.host_ops if h.name.startswith("aten::"))
        return (f"Its {text.count(aten)} aten calls each go through the dispatcher (the largest, "
                f"`{text.op(top.name)}`, is {{top_share}})"), facts, evidence
    if v and v.compiled:  # each of torch.compile's ranges by what it is: its guards are one op of their own
        what = next((words for token, words in _COMPILED_OPS if token in top.name),
                    "the compiled graph's Python around its kernels")
    elif v and "host" in v.words:  # what its own file says its host op does
        what = v.words["host"]
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
        pin = " Entering the `sdpa_kernel` pin each call adds {pin}."
    # the host figures are a plain warm loop's in every mode: where the figure on screen is not, the note says so
    looped = "Host-bound" if run.workload.timing == "warm" else "Looped, host-bound"
    graph = " The timed CUDA graph issues them at once." if run.workload.timing == "graph" else ""
    return note("host_bound", "guess", f"{looped}: {{host}} of CPU per {run.call} for {{gpu}} of GPU",
                (f"{cause}. " if cause else "") + "Back to back, calls come every {pace}." + graph + pin,
                weight=(1 - gpu.value / run.host_cost.median_ms if run.host_cost.median_ms > gpu.value else 0.2)
                * (0.5 if graph else 1),  # under a graph's figure, what a plain loop would wait on ranks lower
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
        made = v.words.get("first_call", "JIT-compiled its kernels")
        cause = (f"{v.label} {made} for {what} of this configuration on the first call; later calls with the same "
                 "shapes reuse them.")
    elif ran(run) == "cudnn":
        cause = "cuDNN built an execution plan for this shape on the first call; later calls find it cached."
    else:
        cause = "Libraries load their kernels and create their handles on first use; the timed calls come after."
    return note("first_call", "guess", f"The first {run.call} took {{first}}",
                cause + f" A warm {run.call} takes {{warm}}" + (" on the GPU." if run.environment.device == "cuda"
                                                                 else " (wall time)."),
                weight=0.25 if (v and (v.compiled or v.jit_s)) else 0.05, facts=facts)


def profiled_vs_events(run: Run, peers: Peers) -> Note | None:
    """The kernel table sums the profiled calls' kernel durations; the timing is CUDA events around unprofiled
    calls, of the same phase. Where they part by more than 10%, say which is which. The profiled calls run warm:
    a cold or graph run's table is held against its warm events where they are of the same phase (a whole call)."""
    if not on_gpu(run) or not run.kernels_of() or not run.gpu_ms:
        return None
    warm = run.warm_timing is not None and run.phase == run.call
    facts = {"table": phase_total(run, run.phase),
             "events": measured(run, "warm_timing.median_ms" if warm else "timing.median_ms", "ms")}
    facts["ratio"] = ratio(facts["table"], scaled(facts["events"], 1000, "us"))
    if abs(facts["ratio"].value - 1) <= 0.10:
        return None
    events = "warm CUDA events" if warm else "CUDA events"
    figure = ("the events, the warm median of unprofiled calls (the verdict's is the "
              f"{spec_of('timing').said(run.workload.timing)} one)" if warm else
              "the verdict's time is the median of CUDA events around the {phase} of unprofiled calls").format(
                  phase=run.phase)
    return note("profiled_vs_events", "guess", f"Two GPU times of the {run.phase}: {{table}} profiled, {{events}} "
                f"by {events}",
                f"The kernel table adds up the {run.phase}'s kernels over {{calls}} profiled calls; {figure}. They "
                "differ beyond the timings' spread: read ratios within one of them, never across.",
                weight=0.2, facts=facts | {"calls": measured(run, "profiled_forwards", "count")})


# -- the L2: what a warm loop reads from it, what a cold one changed ------------------------------------------------
COLD_CHANGE = 0.03   # cold within 3% of warm: the flush changed nothing worth a word


def _written_between(run: Run) -> int:
    """Bytes an unfused call writes between its reads of the inputs, which evict them from the L2: its scores (in the
    dtype it computes them in) and, where it copies K and V to every query head (`repeat_interleave`), those copies;
    0 for a fused kernel, which keeps its tiles on chip."""
    if fused(run):
        return 0
    w, element = run.workload, 4 if ran(run) == "math" else run.workload.element_bytes
    copies = 2 * w.repeated_kv_bytes(element) if w.groups > 1 and host_op(run, "aten::repeat_interleave") else 0
    return w.scores_bytes(element) + copies


def l2_resident(run: Run, peers: Peers) -> Note | None:
    """Warm, a call whose working set (the distinct tensors it reads and writes, `Workload.tensors`) fits in the L2 finds
    it there, left by the call before: its figure is an L2-fed one, which a model's layer does not see."""
    if not on_gpu(run) or run.workload.timing != "warm" or not run.environment.l2_cache_bytes:
        return None
    facts = {"set": working_set(run), "l2": measured(run, "environment.l2_cache_bytes", "bytes")}
    if facts["set"].value + _written_between(run) > facts["l2"].value:
        return None
    names = text.tensor_list(dict(run_tensors(run)))
    return note("l2_resident", "guess", f"{names} ({{set}}) fit in the {{l2}} L2: a warm loop reads them from there",
                f"Each timed {run.call} follows another on the same tensors, which the L2 still holds; a model's layer "
                "finds its inputs in HBM. timing=cold flushes the L2 before every call.", weight=0.3, facts=facts)


def cold_l2(run: Run, peers: Peers) -> Note | None:
    """Cold, beside the warm events of the same calls: what flushing the L2 before each call changed."""
    if not on_gpu(run) or run.workload.timing != "cold" or run.warm_timing is None or not run.call_gpu_ms \
            or not run.flush_bytes:
        return None
    facts = {"cold": measured(run, "call_gpu_ms", "ms"), "warm": measured(run, "warm_timing.median_ms", "ms"),
             "flush": measured(run, "flush_bytes", "bytes"), "set": working_set(run, run.call)}
    facts["ratio"] = ratio(facts["cold"], facts["warm"])
    change = facts["ratio"].value - 1
    if abs(change) < COLD_CHANGE:
        facts["threshold"] = constant(COLD_CHANGE, "share", repr(COLD_CHANGE))
        title = f"Flushing the L2 changed a {run.call} by under {{threshold}}: {{cold}} cold, {{warm}} warm"
    else:
        title = f"With the L2 flushed, a {run.call} takes {{cold}}: {{ratio}} the warm {{warm}}"
    if run.environment.l2_cache_bytes:
        facts["l2"] = measured(run, "environment.l2_cache_bytes", "bytes")
        buffer = "twice the {l2} L2"
        fits, evicted = facts["set"].value <= facts["l2"].value, \
            facts["set"].value + _written_between(run) > facts["l2"].value
        warm = ("exceeds the L2: warm, only the last call's leftovers came from it" if not fits else
                "fits in that L2, but not with the scores and copies the call writes: warm, it need not come from there"
                if evicted else "fits in that L2: warm, a loop read it from there")
    else:
        buffer = "tritonbench's size: this GPU does not report its L2"
        warm = "may partly stay in the L2 from call to call"
    hbm = ": inputs came from HBM" if abs(change) >= COLD_CHANGE else ""  # said where it mattered
    return note("cold_l2", "guess", title,
                f"Before each call, untimed, a {{flush}} buffer ({buffer}) was written{hbm}. Its {{set}} "
                f"working set {warm}.",
                weight=0.15 + min(0.5, 2 * abs(change)), facts=facts)


# -- a CUDA graph: no launch cost, and the order it gives ---------------------------------------------------------
def graph_winner(run: Run, peers: Peers) -> Note | None:
    """In a CUDA graph, the side the test ranks faster where the other was the faster back to back (one side
    host-bound): the replay removed the launch cost that held this one back. Said on the graph's winner only."""
    if not on_gpu(run) or run.workload.timing != "graph" or run.back_to_back is None or run.host_cost is None \
            or not rankable(run):
        return None
    from .verdict import CROSS_SESSION_DRIFT
    for key, other in peers.items():
        if other.back_to_back is None or other.timing is None or "host" not in (run.bound, other.bound):
            continue
        same = run.session is not None and run.session == other.session
        replayed = stats.decide(run.timing.samples_ms or [], other.timing.samples_ms or [],
                                drift=0.0 if same else CROSS_SESSION_DRIFT["timing"])
        paced = stats.decide(run.back_to_back.samples_ms or [], other.back_to_back.samples_ms or [],
                             drift=0.0 if same else CROSS_SESSION_DRIFT["back_to_back"])
        if not (replayed.kind == paced.kind == "ranked" and replayed.faster == "a" and paced.faster == "b"):
            continue
        who = f"peers[{key}]"
        facts = {"graph": measured(run, "timing.median_ms", "ms"),
                 "other_graph": measured(other, "timing.median_ms", "ms", who),
                 "pace": measured(run, "back_to_back.median_ms", "ms"),
                 "other_pace": measured(other, "back_to_back.median_ms", "ms", who),
                 "host": measured(run, "host_cost.median_ms", "ms")}
        facts["ratio"] = ratio(facts["other_graph"], facts["graph"])
        facts["pace_ratio"] = ratio(facts["pace"], facts["other_pace"])
        return note("graph_winner", "verdict",
                    f"In a CUDA graph {label(run)} is {{ratio}} faster; back to back {label(other)} is, by "
                    "{pace_ratio}",
                    "Replayed: {graph} against {other_graph}. Looped, calls come every {pace} against {other_pace}: "
                    "each costs its CPU {host}, while a replay issues the whole graph at once"
                    + (", as serving engines run attention." if not run.workload.training else
                       f", a {run.call} captured whole."),
                    weight=0.7, facts=facts)
    return None


# -- bytes moved, against this GPU's copy ceiling -------------------------------------------------------------------
def _formula(run: Run) -> str:
    """The tensors the run's figure moves, as a sum: 'q + K + V + out'; a step's forward and backward apart."""
    if run.phase != "step":
        return text.tensor_sum(name for name, _ in run_tensors(run))
    return " + ".join(f"{phase} ({text.tensor_sum(name for name, _ in run_tensors(run, phase))})"
                      for phase in ("forward", "backward"))


def memory_traffic(run: Run, peers: Peers) -> Note | None:
    """The fewest bytes the run's phase moves (`Workload.tensors`, each tensor once) over its figure's time, against
    this GPU's device-to-device copy, measured once per process (bytes read + written)."""
    env = run.environment
    hbm = hbm_key(env.device_name) if env.device_name else None
    if not on_gpu(run) or not run.gpu_ms or not (env.copy_bytes_per_s or hbm):
        return None
    facts = {"moved": moved(run), "time": measured(run, "timing.median_ms", "ms")}
    if env.copy_bytes_per_s:
        facts["ceiling"] = ratio(measured(run, "environment.copy_bytes_per_s", "count"),
                                 constant(1e6, "count", "1000000"), "bytes_per_us")
        ceiling, of = "A device-to-device copy ran at {ceiling}, read + written.", "the copy ceiling"
    else:  # a recording made before the copy was measured: the datasheet's figure, said so
        facts["ceiling"] = constant(HBM_BYTES_PER_US[hbm], "bytes_per_us", f"hbm[{hbm}]")
        ceiling, of = "The datasheet gives this GPU's HBM {ceiling}.", "the datasheet's HBM bandwidth"
    facts["rate"] = ratio(facts["moved"], scaled(facts["time"], 1000, "us"), "bytes_per_us")
    facts["share"] = ratio(facts["rate"], facts["ceiling"], "share")
    facts["share"].of = of
    mode = {"warm": "warm: bytes the L2 kept count too",
            "cold": "L2 flushed before each call", "graph": "replayed in a CUDA graph"}[run.workload.timing]
    warm = ""
    if run.workload.timing == "cold" and run.warm_timing is not None and run.phase == run.call:  # what L2 changed
        facts["warm"] = measured(run, "warm_timing.median_ms", "ms")
        facts["warm_rate"] = ratio(facts["moved"], scaled(facts["warm"], 1000, "us"), "bytes_per_us")
        warm = " Warm: {warm}, {warm_rate}."
    over = ""
    if facts["share"].value > 1:  # past what a copy reaches: which of two causes the run allows
        facts["set"] = working_set(run, run.call)
        l2 = env.l2_cache_bytes
        if run.workload.timing == "warm" and l2 and facts["set"].value <= 2 * l2:
            facts["l2"] = measured(run, "environment.l2_cache_bytes", "bytes")
            over = " Above it: the {l2} L2 served part of its {set}."
        else:  # flushed, or far past the L2: HBM itself, read faster than a copy's even mix of reads and writes
            over = " Above it: this call mostly reads."
    fp8 = ""
    if run.workload.quantised:  # K and V in e4m3, a byte an element: what the drawn dtype would have moved beside
        drawn = run.workload.drawn
        facts["saved"] = scaled(measured(run, "workload.kv_bytes", "bytes"), DTYPE_BYTES[drawn] - 1, "bytes")
        fp8 = f" e4m3 K and V: {{saved}} fewer than {drawn}."
    return note("memory_traffic", "guess", f"{_formula(run)} = {{moved}} in {{time}}: {{rate}}, {{share}}",
                f"The least a {run.phase} moves, each tensor once ({mode}). " + ceiling
                + warm + over + fp8,
                weight=min(0.5, 0.5 * facts["share"].value), facts=facts)


# -- the GPU it ran on: its clocks, a slice of it ------------------------------------------------------------------
CLOCK_MOVE = 0.10    # a clock that moved by more than this between the timing's start and end


def clocks(run: Run, peers: Peers) -> Note | None:
    """The GPU the figures were taken on: its SM or memory clock moved by more than 10% between the readings under
    load as the timing began and ended, or it is a MIG slice (its own SMs: not the GPU of a whole-GPU recording)."""
    if not on_gpu(run):
        return None
    env, before, after = run.environment, run.clocks_before, run.clocks_after
    facts, said = {}, []
    for name, attribute in (("SM", "sm_mhz"), ("memory", "memory_mhz")):
        b, a = (getattr(c, attribute, None) if c is not None else None for c in (before, after))
        if b and a and abs(a - b) / b > CLOCK_MOVE:
            facts[f"{attribute}_before"] = measured(run, f"clocks_before.{attribute}", "mhz")
            facts[f"{attribute}_after"] = measured(run, f"clocks_after.{attribute}", "mhz")
            said.append(f"the {name} clock moved from {{{attribute}_before}} to {{{attribute}_after}}")
    if not said and not env.mig:
        return None
    parts = []
    if said:
        if env.max_sm_clock_mhz:
            facts["max"] = measured(run, "environment.max_sm_clock_mhz", "mhz")
        parts.append("Read under load as the timing began and as it ended" + (" (the SM clock's maximum is {max})"
                     if "max" in facts else "") + ": a GPU that throttles or boosts during a run times its calls at "
                     "different speeds, and the samples mix them.")
    if env.mig:
        slice_ = "a MIG slice" + (" of {sms} SMs" if env.sm_count else "")
        if env.sm_count:
            facts["sms"] = measured(run, "environment.sm_count", "count")
        parts.append(f"{env.device_name} is {slice_}: its figures are not a whole GPU's, and a share of the datasheet "
                     "peak is of the whole GPU's.")
    title = "; ".join(said) + " while this was timed" if said else f"Timed on {slice_}"
    return note("clocks", "environment", title[0].upper() + title[1:], " ".join(parts),
                weight=0.45 if said else 0.4, facts=facts)
