"""How long a call takes, and which side sets the pace: CUDA events on a GPU, wall time on a CPU, the host figures
(back to back, host cost, host- or GPU-bound) and what a variant's `sdpa_kernel` pin costs.

A GPU call is timed as the workload's `timing` says: warm (calls behind a parked GPU, what the last one left in L2
still there), cold (the L2 flushed before every timed call, the flush outside the events) or in a CUDA graph (calls
captured once, replayed; no launch cost). The warm figure and the host figures are taken in every mode: a cold or
graph run carries both. The variants of one measurement take their samples in interleaved rounds, so a drift of the
machine hits them alike. What is timed comes prepared and warm from `measurement` (a `Timed`); its `check` is called
at every safe point and raises to stop, keeping the samples taken.

Beside the timings: the GPU's clocks read under load, its device-to-device copy ceiling and its matmul rate by dtype,
each measured once per process, and the energy a loop of a call draws (NVML's counter, read around it).
"""
from __future__ import annotations

import functools
import itertools
import math
import statistics
import time
from contextlib import AbstractContextManager
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Protocol

import torch

from attention_variants import Variant

from .environment import Clocks, Environment, NoEnergy, energy_mj, read_clocks
from .results import UNSUPPORTED, Energy, Run, Timing

TIMING_BUDGET_S = 0.06        # GPU, per variant: CUDA events are steady, this gives a stable median
MIN_SAMPLES, MAX_SAMPLES = 8, 50  # 8 a side: the rank test can separate at p = 2/12870
LONG_CALL_S = 1e-3            # a forward this long is GPU-bound beyond doubt: fewer probe and settle calls (and
                              # the budget prices fewer timed calls: budget.measured_calls)
LONG_MAX_SAMPLES = 16         # ... for a call of LONG_CALL_S or more, warm or cold: of the H200 recording's 2,730 pairs with a
                              # side that long, all but one get from that side's first 16 samples the verdict all of them
                              # (up to 50) gave, and that one's two verdicts both find no winner; its median moves 1.3% at
                              # most (bench/rounds_needed.py). A 1.26 ms naive call took 47: 0.06 s, a third of a warm
                              # naive pair's server time on an H100
HOST_MIN_SAMPLES = 25         # ... for a call the host issues slower than the GPU runs it (SDPA on nested jagged tensors:
                              # 2.4-15 ms of Python a call for 0.1-0.8 ms of GPU work in the H200 recording; on the
                              # start-up warm-up's tiny workload, 3.6 s of timing rounds on a lent H100): of the
                              # recording's 4,375 warm and cold pairs, 461 have a side cut to what the host's budget
                              # allows; no verdict gains or loses a winner, 2 move between "level" and "no practical
                              # difference" (at 8: 10; at 16: 5, one of them gaining a winner; at 20: 3)
GROUP_S, GROUP_MAX = 200e-6, 64  # forwards shorter than 200 µs are timed in groups of up to 64
CPU_TIMING_BUDGET_S = 1.0     # CPU, per comparison: more samples while the spread is wide, up to this
CPU_MAX_SAMPLES = 200
CPU_MIN_ROUNDS = 20
SETTLED_SPREAD = 0.10         # a CPU timing has settled when its quartiles are within 10% of its median
HOST_FIGURES_BUDGET_S = 0.02  # back-to-back and host cost: this long each, 20 to 300 calls
HOST_COST_CALLS = (20, 300)
HOST_ROUNDS = 8               # back-to-back samples per variant, one per round
LONG_HOST_ROUNDS = 4          # ... for a call of LONG_CALL_S or more: GPU-bound beyond doubt, and each round costs
                              # 5 to 13 whole calls (flash at S=16,384 in the H200 recording: 14 ms a call, 8 rounds
                              # of 5 are 0.57 s a variant, a live sweep's largest share); budget prices 4
LOOP_CALLS = 10               # the fewest calls of a back-to-back sample of calls under 10 ms (the most, for calls of
                              # a millisecond or more whose issue `time_gpu` has measured: `_loop_calls`)
LOOP_BIAS = 0.01              # ... which take as many as make their first call's issue at most 1% of the loop
QUEUE_LAUNCHES = 512          # launches queued behind the parked GPU, well under CUDA's queue depth (a full queue
                              # makes the host wait while the GPU, its park over, reaches samples still being issued:
                              # taken again in vain, then marked as gaps)
MIN_LAUNCH_S = 2.5e-6         # no launch holds the GPU less (the H200 recording's fewest: 2.9 µs a launch, cuDNN's 7
                              # a call in a graph): a call of t seconds queues t / MIN_LAUNCH_S launches at most
MIN_LAUNCH_HOST_S = 1e-6      # nor does a launch take the host less (a kernel launch costs the host microseconds): a
                              # call the host issues in t seconds queues t / MIN_LAUNCH_HOST_S launches at most (naive
                              # at 1.26 ms of GPU, ~0.25 ms to issue: 250, not the GPU bound's 504, which let no two
                              # samples share a park)
MAX_LAUNCHES_PER_CALL = 64    # more than any variant launches per call (math at S=4096: 24 kernels); the host
                              # figures come before the profile, so the real count is not known yet
HOST_CALL_MAX_S = 5e-4        # a first guess of the host's time to issue a call, before it is measured (math: ~0.16
                              # ms; flex's and FA4's steps more: the park follows what the probe measures)
PROBE_PARK_S = 0.002          # the probe's park beyond its guess: its calls are not timed yet
PARK_MARGIN = 1.5             # park for this many times the host's measured lead ...
PARK_SLACK_S = 20e-6          # ... plus this
HOST_PARK_SLACK_S = 1e-4      # the host cost's park beyond PARK_MARGIN times its calls' issue as time_gpu measured it
                              # (PROBE_PARK_S beyond a guess where it did not, as before: ~32 ms of idle GPU in a fused
                              # pair's 16 rounds)
PARK_RETRIES = 2              # a sample the GPU reached before the host had issued it is taken again, parked longer
ISSUE_WINDOW = 5              # a park follows the median issue of its variant's last 5 samples: a stall of the host
                              # (another thread taking the GIL, which torch releases in each event's record; the
                              # collector) is retaken, and lengthens no park
BATCH_GPU_S = 3e-3            # samples queued behind one park: up to this much GPU work, BATCH_CALLS calls and
BATCH_CALLS = 128             # QUEUE_LAUNCHES launches at most (`_entries`) (0: one sample a park)
PIN_CALLS = 100               # the pin's median: 200 calls came no closer to 5×1,000 calls' (95th percentile 0.9%
                              # off for both; 50 calls 1.2%, worst 62%: this CPU); H200: ~35 µs a call, 3.5 ms a variant
FLUSH_FALLBACK_BYTES = 256 * 2**20  # tritonbench's flush, where the device does not report its L2
GRAPH_WARMUP_CALLS = 3        # on a side stream before a capture, as PyTorch's CUDA graph docs ask
GRAPH_LAUNCH_GUESS_S = 1e-4   # a first guess of the host's time to launch a graph replay, before it is measured
CLOCK_PARK_S = 0.002          # the clocks' park beyond the read's own time: the launch's latency, with room (10 ms
                              # before: 20 ms of GPU wait a measurement)
COPY_BYTES = 512 * 2**20      # the copy ceiling's buffer: far past any L2
COPY_REPEATS = 10
MATMUL_N = 8192               # the matmul rate's square product: 2·8192³ = 1.1 TFLOP, ~1.4 ms in bf16 on an H100
MATMUL_REPEATS = 5            # its median of this many, after one untimed product
ENERGY_LOOP_S = 1.0           # the energy loop's least wall time: NVML's energy counter moves every 20-100 ms


class Captured(NamedTuple):
    """A graph `time_graph` captured, its calls a replay, and the events recorded inside it (a training step's
    forward and backward): a CUDA graph holds their handles, not the events, so they live as long as it does (the
    energy loop replays it after the timing: with them let go, the H100's graph part died in cuGraphLaunch at its
    first training step)."""
    graph: "torch.cuda.CUDAGraph"
    calls: int
    events: "Marks | None"


class Timed(Protocol):
    """A variant ready to time (`measurement._Subject`): its calls, a warm call's length, and the run it fills in."""
    run: Run
    phases: list[Callable[[], None]]  # one call: the forward, or a training step's forward then backward
    estimate_s: float                 # a warm call's wall time, from the warm-up
    issue_s: float | None             # the host's time to issue one call, its events included: `time_gpu` measures it
    graph: "Captured | None"          # graph timing: what `time_graph` captured, kept for the energy loop; the
                                      # measurement lets it go

    def call(self) -> None: ...

    def context(self) -> AbstractContextManager[None]:
        """What every loop of calls runs inside, entered outside the timed region."""


def sync(device: str) -> None:
    """Wait for the work queued on the device (nothing to wait for on a CPU)."""
    if device == "cuda":
        torch.cuda.synchronize()


def _park_gpu(seconds: float) -> None:
    """Queue a spin on the GPU so the host runs ahead of it: what follows is timed without host gaps."""
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(int(min(seconds, 1.0) * 2e9))  # ~2 GHz: a little longer on slower clocks


def _pass_timings(run: Run, per_phase: list[list[float]], method: str) -> None:
    """The pass's timing from its phases' samples (same calls): a forward; a step (their sum); the backward alone."""
    if len(per_phase) == 1:
        run.timing = Timing.of(per_phase[0], method)
        return
    run.forward_timing, run.backward_timing = (Timing.of(p, method) for p in per_phase)
    step = [f + b for f, b in zip(*per_phase)]
    run.timing = run.backward_timing if run.workload.passes == "bwd" else Timing.of(step, method)


@dataclass
class Park:
    """A variant's park: the host's time to issue one of its calls (measured: the median of its last ISSUE_WINDOW
    samples; a guess before the first), how many calls a sample holds, and whether a sample still found the GPU
    waiting after PARK_RETRIES retakes (`ran_out` -> `Timing.host_gaps`)."""
    issue_s: float                 # the host's time to issue one call
    calls: int                     # calls a sample holds
    slack_s: float = PARK_SLACK_S
    ran_out: bool = False
    seen: deque = field(default_factory=lambda: deque(maxlen=ISSUE_WINDOW), repr=False)

    def learn(self, issued_s: float) -> None:
        """A sample's calls took the host `issued_s` to issue. (The longest ever seen, kept for good, let every stall
        of the host lengthen all later parks, and each retake's doubling stayed too: on an H100 behind gradio's
        server, whose threads take the GIL now and then, the parks grew to 12 ms a call and a warm fused pair's
        timing from 0.05-0.09 s to 0.20-0.40 s.)"""
        self.seen.append(issued_s / self.calls)
        self.issue_s = statistics.median(self.seen)


@dataclass
class _Queued:
    """One sample to take: its variant's park, how to issue it, whether the GPU has got to its first event, and the
    GPU's time for it (as its probe measured; 0 before that)."""
    park: Park
    issue: Callable[[], None]
    reached: Callable[[], bool]
    gpu_s: float = 0.0
    retries: int = 0


def _lead_s(batch: list[_Queued]) -> float:
    """How far ahead of the GPU the host must start for the GPU never to reach a sample the host is still issuing:
    the most, over the batch, that the host's issue up to the end of a sample exceeds the GPU's work before it
    (GPU-bound samples: about the first one's issue; host-bound ones: what the host falls behind over them all)."""
    lead = issued = ran = 0.0
    for q in batch:
        issued += q.park.calls * q.park.issue_s * 2 ** q.retries
        lead = max(lead, issued - ran)
        ran += q.gpu_s
    return lead


def _sample(batch: list[_Queued]) -> list[_Queued]:
    """Queue `batch` behind one parked GPU, parked for the host's lead (`_lead_s`, with a margin), and issue it; the
    samples whose first event the GPU had reached before the host finished issuing them may hold a wait on the host:
    they come back to be taken again, their issue time doubled for each retake (`_lead_s`), up to PARK_RETRIES
    times; one that still found the GPU there is kept and marks its timing (`Park.ran_out`)."""
    torch.cuda.synchronize()
    _park_gpu(PARK_MARGIN * _lead_s(batch) + max(q.park.slack_s for q in batch))
    caught = []
    for q in batch:
        t0 = time.perf_counter()
        q.issue()
        q.park.learn(time.perf_counter() - t0)
        if q.reached():
            caught.append(q)
    again = [q for q in caught if q.retries < PARK_RETRIES]
    for q in caught:
        if q.retries < PARK_RETRIES:
            q.retries += 1
        else:
            q.park.ran_out = True
    return again


def _take(batch: list[_Queued]) -> None:
    """`_sample` until no sample of the batch is to be taken again."""
    while batch:
        batch = _sample(batch)


Marks = list[list["torch.cuda.Event | None"]]  # per call: an event before each phase and one after the last


def _marks(s: Timed, calls: int, **kind) -> Marks:
    """A sample's events: before each phase of each call and after the last. (Two events around a whole sample of
    calls, timed with no gap, read S=256 8-11% below per-call event pairs on an H100, the convention a bare loop
    and triton's do_bench keep: the pairs stay.)"""
    return [[torch.cuda.Event(enable_timing=True, **kind) for _ in range(len(s.phases) + 1)] for _ in range(calls)]


def _issuing(s: Timed, marks: Marks, flush: Callable[[], None] | None = None) -> Callable[[], None]:
    """Issue one call per entry of `marks`, each phase after its event (None: no event), the L2 flushed before each
    call (cold), outside its events; every event recorded on the stream current when it issues (fetched once)."""
    def issue() -> None:
        stream = torch.cuda.current_stream()
        for call in marks:
            if flush is not None:
                flush()
            for mark, phase in zip(call, s.phases):
                if mark is not None:
                    mark.record(stream)
                phase()
            if call[-1] is not None:
                call[-1].record(stream)
    return issue


def _group(per_call_s: float) -> int:
    """Calls per sample: a call of a few microseconds is timed in groups (each sample is a group's mean), since an
    event pair costs about as much as such a kernel."""
    return int(min(GROUP_MAX, max(1, GROUP_S // per_call_s)))


def _wanted(group: int, per_call_s: float, most: int = MAX_SAMPLES, issue_s: float = 0.0) -> int:
    """Samples of `group` calls that fill the budget (TIMING_BUDGET_S) of the GPU's work, within MIN_SAMPLES and
    `most`; where the host issues a call slower than the GPU runs it (`issue_s` a call), the rounds' wall is the
    host's: no more than fill the budget with the host's issue, and HOST_MIN_SAMPLES at least."""
    wanted = min(most, max(MIN_SAMPLES, TIMING_BUDGET_S / (group * per_call_s)))
    if issue_s > per_call_s:
        wanted = min(wanted, max(HOST_MIN_SAMPLES, TIMING_BUDGET_S / (group * issue_s)))
    return int(wanted)


def _entries(s: Timed, per_call_s: float, flush: Callable[[], None] | None, issue_s: float | None = None) -> int:
    """The most a call of `per_call_s` on the GPU, issued in `issue_s` by the host (events included; None: not
    measured), adds to its queue: a launch per MIN_LAUNCH_S of the one or per MIN_LAUNCH_HOST_S of the other, the
    fewer, then its events and the flush before it (cold)."""
    launches = math.ceil(round(per_call_s / MIN_LAUNCH_S, 6))
    if issue_s:
        launches = min(launches, math.ceil(round(issue_s / MIN_LAUNCH_HOST_S, 6)))
    return launches + len(s.phases) + 1 + (flush is not None)


def _per_phase(marks_per_sample: list[Marks], phases: int, calls: int) -> list[list[float]]:
    """Each phase's ms per call, sample by sample: the sum over a sample's calls over their number."""
    return [[sum(call[p].elapsed_time(call[p + 1]) for call in marks) / calls for marks in marks_per_sample]
            for p in range(phases)]


def time_gpu(subjects: list[Timed], check: Callable[[], None], flush: Callable[[], None] | None = None) -> None:
    """CUDA events around groups of calls, queued behind a parked GPU (`_sample`: the host's measured lead), so the
    events time the GPU's work alone and not the gaps a slow host would leave between launches; the variants take
    their samples in turn, round by round, up to BATCH_GPU_S of GPU work, BATCH_CALLS calls and QUEUE_LAUNCHES
    launches behind one park (one wait for the GPU a batch, not a sample). Within a call an event between the forward and the backward times each
    apart. With `flush` (cold), the L2 is flushed before every call, outside its events."""
    plans = {}
    for s in subjects:
        probes = 10 if s.estimate_s < LONG_CALL_S else 2  # a call of a millisecond or more: two tell its length
        park = Park(min(s.estimate_s, HOST_CALL_MAX_S), probes, slack_s=PROBE_PARK_S)  # a guess: measured next
        marks = _marks(s, probes)
        _take([_Queued(park, _in_context(s, _issuing(s, marks, flush)), marks[0][0].query)])
        torch.cuda.synchronize()
        per_call_s = max(sum(sum(_per_phase([marks], len(s.phases), probes), [])) / 1000.0, 1e-7)
        group = _group(per_call_s)
        most = LONG_MAX_SAMPLES if per_call_s >= LONG_CALL_S else MAX_SAMPLES
        plans[id(s)] = (group, _wanted(group, per_call_s, most, park.issue_s), [], Park(park.issue_s, group),
                        group * per_call_s, group * _entries(s, per_call_s, flush, park.issue_s))
    # the samples in the order they are taken: round by round, each variant that still wants one
    order = [s for round_ in range(max((plan[1] for plan in plans.values()), default=0))
             for s in subjects if round_ < plans[id(s)][1]]
    while order:
        check()
        batch, batch_s, calls, queued = [], 0.0, 0, 0
        while order and (not batch or (batch_s + plans[id(order[0])][4] <= BATCH_GPU_S
                                       and calls + plans[id(order[0])][0] <= BATCH_CALLS
                                       and queued + plans[id(order[0])][5] <= QUEUE_LAUNCHES)):
            s = order.pop(0)
            group, _, samples, park, sample_s, entries = plans[id(s)]
            marks = _marks(s, group)
            samples.append(marks)
            batch.append(_Queued(park, _in_context(s, _issuing(s, marks, flush)), marks[0][0].query, sample_s))
            batch_s, calls, queued = batch_s + sample_s, calls + group, queued + entries
        _take(batch)
    torch.cuda.synchronize()
    for s in subjects:
        group, _, samples, park, *_ = plans[id(s)]
        method = ("cuda events" if group == 1 else f"cuda events per {group} calls") + \
            (", L2 flushed before each call" if flush is not None else "")
        _pass_timings(s.run, _per_phase(samples, len(s.phases), group), method)
        _mark_gaps(s.run, park.ran_out)
        s.issue_s = park.issue_s


def _in_context(s: Timed, issue: Callable[[], None]) -> Callable[[], None]:
    """`issue` inside the subject's context (entered outside its events)."""
    def issued() -> None:
        with s.context():
            issue()
    return issued


def _mark_gaps(run: Run, gaps: bool) -> None:
    for t in (run.timing, run.forward_timing, run.backward_timing):
        if t is not None:
            t.host_gaps = gaps


# -- cold and graph: the mode's own figure, beside the warm one -------------------------------------------------
def flush_bytes(env: Environment) -> int:
    """The buffer cold timing writes before every timed call: twice the device's L2 (FlashInfer's flush), or
    tritonbench's 256 MiB where the device does not report its L2."""
    return 2 * env.l2_cache_bytes if env.l2_cache_bytes else FLUSH_FALLBACK_BYTES


class L2Flush:
    """Writes a buffer of `n_bytes` on `device` (zeros, one memset): every line the last call left in L2 is evicted
    by it. Every byte is written each time (tests/test_timing_modes.py checks it on a CPU, test_gpu_live on a GPU)."""

    def __init__(self, n_bytes: int, device: str = "cuda"):
        self.n_bytes = n_bytes
        self.buffer = torch.empty(n_bytes, dtype=torch.uint8, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


def call_timing(run: Run) -> Timing | None:
    """The run's timing of one whole call: its figure for a forward or a step; a backward view's forward + backward,
    sample by sample (the same calls)."""
    f, b = run.forward_timing, run.backward_timing
    if run.workload.passes != "bwd" or f is None or b is None:
        return run.timing
    whole = Timing.of([x + y for x, y in zip(f.samples_ms, b.samples_ms)], f.method)
    whole.host_gaps = f.host_gaps or b.host_gaps
    return whole


def time_mode(subjects: list[Timed], check: Callable[[], None]) -> None:
    """After the warm timing (`time_gpu`), the workload's own mode where it is not warm: the warm figure of a whole
    call kept as `warm_timing`, then the calls timed cold or in a CUDA graph."""
    mode = subjects[0].run.workload.timing
    if mode == "warm":
        return
    for s in subjects:
        s.run.warm_timing = call_timing(s.run)
    if mode == "graph":
        time_graph(subjects, check)
        return
    flush = L2Flush(flush_bytes(subjects[0].run.environment), subjects[0].run.workload.device)
    for s in subjects:
        s.run.flush_bytes = flush.n_bytes
    time_gpu(subjects, check, flush)


class CaptureRefused(Exception):
    """PyTorch or CUDA refused to capture a variant's calls in a CUDA graph; the message is their words."""


def _first_line(error: Exception) -> str:
    said = str(error).strip().splitlines()
    return (said[0] if said else type(error).__name__)[:300]


def capture(s: Timed, marks: Marks) -> "torch.cuda.CUDAGraph":
    """One call per entry of `marks` captured in one CUDA graph, after warm-up calls on a side stream (PyTorch's
    CUDA graph docs: lazy initialisation and first-use work stay out of the capture). A failure inside the capture
    is CaptureRefused in the first error's words (the capture's end then fails too, saying only that it was
    invalidated), with the stream the capture left current restored."""
    with s.context():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARMUP_CALLS):
                s.call()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        current = torch.cuda.current_stream()
        graph = torch.cuda.CUDAGraph()
        failure = None
        try:
            with torch.cuda.graph(graph):
                try:
                    _issuing(s, marks)()
                except Exception as error:  # let the capture end; its words are the ones to give
                    failure = error
        except Exception as error:
            failure = failure or error
    if failure is not None:
        torch.cuda.set_stream(current)  # a failed capture_end leaves the capture's stream current
        raise CaptureRefused(_first_line(failure))
    return graph


def _inner_marks(s: Timed, calls: int) -> Marks | None:
    """A step's events inside its graph, one before each phase and one after the last, per call: recorded as event
    nodes of the graph (torch.cuda.Event(external=True), torch 2.8 on). A forward needs none (the replay's events
    time it); None where this torch has no such events."""
    if len(s.phases) == 1:
        return [[None, None] for _ in range(calls)]
    try:
        return _marks(s, calls, external=True)
    except TypeError:  # torch before 2.8: no external events
        return None


def _refuse(run: Run, reason: str) -> None:
    """No graph figure: the run is unsupported in this mode, its warm figure kept apart (`warm_timing`) and none
    shown as the mode's."""
    run.status, run.reason = UNSUPPORTED, reason
    run.timing = run.forward_timing = run.backward_timing = None


def time_graph(subjects: list[Timed], check: Callable[[], None]) -> None:
    """N calls of each variant captured in one CUDA graph (N as a warm group's: calls under 200 µs together) and
    replayed behind a parked GPU, round by round: a call's time is the replay's events over N. A training step's
    forward and backward are timed apart by events inside the graph; a backward view needs them (without them a
    step is timed whole, and a backward is refused). A variant the capture refuses comes back unsupported, in
    PyTorch's words. The warm figures must be in (`Run.warm_call_ms`). Each graph is kept on its subject (`graph`),
    for the energy loop to replay."""
    plans = {}
    for s in subjects:
        per_call_s = max(s.run.warm_call_ms / 1000.0, 1e-7)
        calls = _group(per_call_s)
        inner = _inner_marks(s, calls)
        if inner is None and s.run.workload.passes == "bwd":
            _refuse(s.run, f"torch {torch.__version__} records no timing events inside a CUDA graph "
                           "(torch.cuda.Event(external=True) comes with 2.8): its backward cannot be timed apart")
            continue
        try:
            graph = capture(s, inner or [[None] * (len(s.phases) + 1) for _ in range(calls)])
        except CaptureRefused as refused:
            _refuse(s.run, f"cannot be captured in a CUDA graph: {refused}")
            continue
        graph.replay()  # the first replay uploads the graph
        plans[id(s)] = (graph, calls, inner, _wanted(calls, per_call_s), [], [], Park(GRAPH_LAUNCH_GUESS_S, 1))
    timed = [s for s in subjects if id(s) in plans]
    for _ in range(max((plan[3] for plan in plans.values()), default=0)):
        check()
        for s in timed:
            graph, calls, inner, wanted, whole, parts, park = plans[id(s)]
            if len(whole) >= wanted:
                continue
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

            def replay(graph=graph, start=start, end=end) -> None:
                start.record()
                graph.replay()
                end.record()
            _take([_Queued(park, replay, start.query)])
            end.synchronize()  # the events inside the graph are recorded again by the next replay: read them now
            whole.append(start.elapsed_time(end) / calls)
            if len(s.phases) > 1 and inner is not None:
                parts.append([p[0] for p in _per_phase([inner], len(s.phases), calls)])
    for s in timed:
        graph, calls, inner, _, whole, parts, park = plans.pop(id(s))
        method = f"cuda graph of {calls} call{'s' if calls > 1 else ''}, replay events" + \
            (" (forward and backward by events inside it)" if parts else "")
        run = s.run
        run.forward_timing = run.backward_timing = None
        if parts:
            run.forward_timing, run.backward_timing = (Timing.of(list(p), method) for p in zip(*parts))
        run.timing = run.backward_timing if run.workload.passes == "bwd" else Timing.of(whole, method)
        _mark_gaps(run, park.ran_out)
        s.graph = Captured(graph, calls, inner)
    torch.cuda.synchronize()


def _settled(times: list[list[float]]) -> bool:
    """Every timing's quartiles are tight. (Never "already apart": stopping as soon as two samples look
    different would make noise look like a result.)"""
    stats = [Timing.of(t, "") for t in times]
    return all(s.p75_ms - s.p25_ms <= SETTLED_SPREAD * s.median_ms for s in stats)


def time_cpu(subjects: list[Timed], check: Callable[[], None]) -> None:
    """Wall time per call on the CPU (each phase apart), the variants interleaved call by call (so a burst of load
    hits all), with more rounds while the spread is wide, up to CPU_TIMING_BUDGET_S."""
    times: list[list[list[float]]] = [[[] for _ in s.phases] for s in subjects]
    until = time.perf_counter() + CPU_TIMING_BUDGET_S
    try:
        for rounds in itertools.count(1):
            check()
            for subject, per_phase in zip(subjects, times):
                with subject.context():  # entered outside the timed call
                    for phase, samples in zip(subject.phases, per_phase):
                        t0 = time.perf_counter()
                        phase()
                        samples.append((time.perf_counter() - t0) * 1000.0)
            totals = [[sum(call) for call in zip(*per_phase)] for per_phase in times]
            if rounds >= CPU_MIN_ROUNDS and (time.perf_counter() > until or rounds >= CPU_MAX_SAMPLES
                                             or _settled(totals)):
                break
    finally:  # a stop keeps the samples taken
        for subject, per_phase in zip(subjects, times):
            done = min(len(p) for p in per_phase)  # a round cut short between phases is dropped
            if done:
                _pass_timings(subject.run, [p[:done] for p in per_phase], "perf_counter")


def _calls(per_call_s: float, wanted: float) -> int:
    """How many calls a host figure takes: what the budget allows, within HOST_COST_CALLS; a call of a
    millisecond or more is GPU-bound beyond doubt, and a few of them settle it."""
    least = HOST_COST_CALLS[0] if per_call_s < LONG_CALL_S else 8
    return int(min(HOST_COST_CALLS[1], max(least, wanted)))


def host_rounds(gpu_ms: float) -> int:
    """Rounds of host figures for a call of `gpu_ms`: one back-to-back sample each."""
    return HOST_ROUNDS if gpu_ms < LONG_CALL_S * 1000 else LONG_HOST_ROUNDS


def _host_plan(s: Timed) -> tuple[int, int, float]:
    """Per round: (back-to-back calls, host-cost calls, the park before the host-cost calls in seconds: PARK_MARGIN
    times their issue as `time_gpu` measured it, or a generous guess of it where it did not)."""
    gpu_s = s.run.warm_call_ms / 1000.0
    host_guess_s = max(s.estimate_s, 1e-4) if gpu_s < LONG_CALL_S else HOST_CALL_MAX_S  # a warm call: an upper bound
    per_call_s = max(gpu_s, host_guess_s)
    rounds = host_rounds(s.run.warm_call_ms)
    loop = _calls(per_call_s, HOST_FIGURES_BUDGET_S / per_call_s) // rounds
    calls = min(_calls(per_call_s, HOST_FIGURES_BUDGET_S / per_call_s) // rounds,
                QUEUE_LAUNCHES // MAX_LAUNCHES_PER_CALL)
    calls = max(2, calls)
    park_s = (PARK_MARGIN * calls * s.issue_s + HOST_PARK_SLACK_S if s.issue_s
              else PARK_MARGIN * calls * host_guess_s + PROBE_PARK_S)
    return max(LOOP_CALLS, loop) if gpu_s < LONG_CALL_S else _loop_calls(gpu_s, s.issue_s), calls, park_s


def _loop_calls(gpu_s: float, issue_s: float | None) -> int:
    """Back-to-back calls a round of a call of a millisecond or more: a loop's first call is issued before the GPU
    has work, which a GPU-bound loop adds to its pace (a 1.1 ms step read 10% slow over 2 calls), so as many as make
    that issue (as `time_gpu` measured it) at most LOOP_BIAS of the loop, 2 to LOOP_CALLS (fused calls of 1-10 ms
    issue in ~0.03-0.06 ms: 10 calls were 4-8 whole calls more a round than that needs); where it is not measured,
    LOOP_CALLS under 10 ms and 2 from there."""
    if not issue_s:
        return LOOP_CALLS if gpu_s < 10 * LONG_CALL_S else 2
    return min(LOOP_CALLS, max(2, math.ceil(round(issue_s / (LOOP_BIAS * gpu_s), 6))))


def _settle_calls(gpu_ms: float) -> int:
    """Calls that settle the GPU after whatever ran before a round's loop (another variant's calls): three short ones,
    one of a millisecond or more; none before a call of 10 ms or more, which nothing before it changes (an L2 of
    50-60 MB is refilled within its first microseconds) and whose settling call cost 8 whole calls a measurement:
    0.4 s of a live sweep's 9 at S=32,768 on an H100."""
    return 3 if gpu_ms < LONG_CALL_S * 1000 else 1 if gpu_ms < 10 * LONG_CALL_S * 1000 else 0


def host_figures(subjects: list[Timed], check: Callable[[], None]) -> None:
    """Back-to-back time per call (a plain loop: what a model sees) and host cost per call (each call timed
    while the GPU is parked, so the host never waits on it), in every timing mode; which side sets the pace is
    `Run.bound`'s.
    Taken in rounds (`host_rounds`: fewer for a call of a millisecond or more) that alternate between the variants,
    so a drift in the host's speed (seen on the H200: one variant's median moving from 17 to 26 µs between two
    moments) hits all alike."""
    plans = {id(s): _host_plan(s) for s in subjects}
    loops: dict[int, list[float]] = {id(s): [] for s in subjects}
    host_ms: dict[int, list[float]] = {id(s): [] for s in subjects}
    try:
        for round_ in range(HOST_ROUNDS):
            check()
            for s in subjects:
                if round_ >= host_rounds(s.run.warm_call_ms):
                    continue
                loop, calls, park_s = plans[id(s)]
                with s.context():  # entered outside every timed call
                    for _ in range(_settle_calls(s.run.warm_call_ms)):
                        s.call()
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(loop):
                        s.call()
                    torch.cuda.synchronize()
                    loops[id(s)].append((time.perf_counter() - t0) * 1000.0 / loop)
                    _park_gpu(park_s)
                    for _ in range(calls):
                        t0 = time.perf_counter()
                        s.call()
                        host_ms[id(s)].append((time.perf_counter() - t0) * 1000.0)
                    torch.cuda.synchronize()
    finally:  # a stop keeps the rounds taken
        for s in subjects:
            if loops[id(s)] and host_ms[id(s)]:
                run = s.run
                run.back_to_back = Timing.of(loops[id(s)], "perf_counter per loop of calls")
                run.host_cost = Timing.of(host_ms[id(s)], "perf_counter per call, GPU parked")


def pin_cost_ms(variant: Variant) -> float | None:
    """What entering and leaving the variant's `sdpa_kernel` pin costs, alone."""
    if not variant.pinned:
        return None
    times = []
    for _ in range(PIN_CALLS):
        t0 = time.perf_counter()
        with variant.pin():
            pass
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


# -- beside the timings: the clocks under load, the copy ceiling ---------------------------------------------
_clock_read_s: list[float | None] = [0.02]  # how long the last read took (NVML: µs; nvidia-smi: ~0.1-0.3 s); None: none


def clocks_under_load() -> Clocks | None:
    """The GPU's clocks read while it spins on a parked kernel (an idle GPU drops its clocks: an H200 idles at 345
    MHz), parked a little longer than the last read took (NVML's library: microseconds; nvidia-smi's run: ~0.1 s;
    two a measurement): the read comes at the park's start, so more park reads nothing more and only adds to the
    wait. None where neither NVML nor nvidia-smi answers."""
    if _clock_read_s[0] is None:
        return None
    _park_gpu(1.2 * _clock_read_s[0] + CLOCK_PARK_S)
    t0 = time.perf_counter()
    clocks = read_clocks(torch.cuda.current_device())
    _clock_read_s[0] = time.perf_counter() - t0 if clocks is not None else None
    torch.cuda.synchronize()
    return clocks


@functools.cache
def copy_ceiling() -> float | None:
    """Bytes read + written per second by the best of COPY_REPEATS device-to-device copies of a buffer far past the
    L2, measured once per process: the ceiling a call's memory traffic is set against (DESIGN: ~4.3 TB/s on the
    H200). None where memory is too short for the buffers."""
    free, _ = torch.cuda.mem_get_info()
    n = min(COPY_BYTES, free // 4)
    if n < 64 * 2**20:
        return None
    try:
        return 2 * n / _best_copy_s(n)
    except torch.OutOfMemoryError:
        return None
    finally:  # the buffers are gone by now: give their memory back
        torch.cuda.empty_cache()


def _best_copy_s(n: int) -> float:
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)  # the first copy's one-off costs
    best = math.inf
    for _ in range(COPY_REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1000.0)
    return best


def matmul_tf32() -> bool:
    """Whether torch lets an fp32 product run on TF32 tensor cores (`torch.backends.cuda.matmul.allow_tf32`, which
    `torch.set_float32_matmul_precision` sets): the fp32 matmul rate is of what the setting leaves."""
    return bool(torch.backends.cuda.matmul.allow_tf32)


def matmul_rate(dtype: str) -> float | None:
    """FLOPs per second of a MATMUL_N³ square product in `dtype` on the GPU (2·n³ FLOPs over the median of
    MATMUL_REPEATS timed by CUDA events): the roofline's compute roof, measured once per process and dtype (fp32's
    per TF32 setting too: `matmul_tf32`). fp8 is e4m3 through torch._scaled_mm with unit scales, on a GPU of compute
    capability 8.9 or more (none before: None). None where memory is too short for the three matrices."""
    if dtype == "fp8" and torch.cuda.get_device_capability() < (8, 9):
        return None
    return _matmul_rate(dtype, matmul_tf32() if dtype == "fp32" else None)


@functools.cache
def _matmul_rate(dtype: str, tf32: bool | None) -> float | None:
    n = MATMUL_N
    from .workload import DTYPE_BYTES
    free, _ = torch.cuda.mem_get_info()
    if 3 * n * n * max(DTYPE_BYTES[dtype], 2) > free // 2:  # fp8's output is bf16
        return None
    try:
        return 2 * n**3 / statistics.median(_product_seconds(dtype, n, MATMUL_REPEATS))
    except torch.OutOfMemoryError:
        return None
    finally:
        torch.cuda.empty_cache()


def _product_seconds(dtype: str, n: int, repeats: int) -> list[float]:
    """`repeats` n×n products in `dtype`, each timed by CUDA events, after one untimed (its one-off costs)."""
    from .workload import DTYPES
    if dtype == "fp8":
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # _scaled_mm's second operand: column-major
        one = torch.ones((), device="cuda")

        def product():
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        a, b = (torch.randn(n, n, device="cuda", dtype=getattr(torch, DTYPES[dtype])) for _ in range(2))

        def product():
            return a @ b
    product()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        product()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
    return times


# -- energy: NVML's counter read around a loop of the call ---------------------------------------------------------
def energy(subjects: list[Timed], check: Callable[[], None],
           left_s: Callable[[], float | None] = lambda: None) -> None:
    """Each variant's energy per call (`Run.energy`), or why none was measured in one line (`Run.energy_refused`):
    NVML's total-energy counter read before and after a loop of the same call lasting ENERGY_LOOP_S at least, the GPU
    synchronised before and after. The loop replays the CUDA graph the timing captured (graph timing), else makes
    the calls back to back. Refused on a MIG slice (NVML's counter is the whole GPU's), where NVML gives no counter,
    where the budget left (`left_s`) is shorter than a loop, and where the counter did not move over the loop."""
    for s in subjects:
        check()
        s.run.energy, s.run.energy_refused = _energy_of(s, left_s())


def _loop_step(s: Timed) -> tuple[Callable[[], None], int, str]:
    """What the energy loop repeats, the calls each makes, and the loop in words: a replay of the graph the timing
    captured (its calls), else one call, back to back."""
    if s.graph is not None:
        calls = s.graph.calls
        return s.graph.graph.replay, calls, f"calls replayed in the timing's CUDA graph ({calls} a replay)"
    return s.call, 1, "calls back to back"


def _energy_of(s: Timed, left_s: float | None) -> tuple[Energy | None, str | None]:
    env, seconds = s.run.environment, ENERGY_LOOP_S
    if env.mig:
        return None, ("a MIG slice: NVML's energy counter is the whole GPU's, the other slices' work in it too, so "
                      "none of it can be told to be this call's")
    if left_s is not None and left_s < 2 * seconds:
        return None, (f"the time budget had {left_s:.1f} s left, short of a loop of {seconds:g} s or more beside "
                      "what follows it")
    index = torch.cuda.current_device() if torch.cuda.is_available() else 0
    try:
        energy_mj(index)
    except NoEnergy as absent:
        return None, str(absent)
    step, per_step, loop = _loop_step(s)
    with s.context():
        torch.cuda.synchronize()
        start_mj, t0, calls = energy_mj(index), time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            step()
            calls += per_step
        torch.cuda.synchronize()
        took, end_mj = time.perf_counter() - t0, energy_mj(index)
    if end_mj <= start_mj:
        return None, (f"NVML's energy counter did not move over {calls:,} {loop} in {took:.2f} s (it read "
                      f"{start_mj:,} mJ before and {end_mj:,} mJ after)")
    return Energy(start_mj, end_mj, took, calls, loop), None
