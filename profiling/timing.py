"""How long a warm call takes, and which side sets the pace: CUDA events on a GPU, wall time on a CPU, the host
figures (back to back, host cost, host- or GPU-bound) and what a variant's `sdpa_kernel` pin costs.

The variants of one measurement take their samples in interleaved rounds, so a drift of the machine hits them
alike. What is timed comes prepared and warm from `measurement` (a `Timed`); its `check` is called at every safe
point and raises to stop, keeping the samples taken.
"""
from __future__ import annotations

import itertools
import statistics
import time
from contextlib import AbstractContextManager
from typing import Callable, Protocol

import torch

from attention_variants import Variant

from .results import Run, Timing

TIMING_BUDGET_S = 0.06        # GPU, per variant: CUDA events are steady, this gives a stable median
MIN_SAMPLES, MAX_SAMPLES = 8, 50  # 8 a side: the rank test can separate at p = 2/12870
GROUP_S, GROUP_MAX = 200e-6, 64  # forwards shorter than 200 µs are timed in groups of up to 64
CPU_TIMING_BUDGET_S = 1.0     # CPU, per comparison: more samples while the spread is wide, up to this
CPU_MAX_SAMPLES = 200
CPU_MIN_ROUNDS = 20
SETTLED_SPREAD = 0.10         # a CPU timing has settled when its quartiles are within 10% of its median
HOST_FIGURES_BUDGET_S = 0.02  # back-to-back and host cost: this long each, 20 to 300 calls
HOST_COST_CALLS = (20, 300)
HOST_ROUNDS = 8               # back-to-back samples per variant, one per round
LOOP_CALLS = 10               # the fewest calls of a back-to-back sample of calls under 10 ms
QUEUE_LAUNCHES = 512          # launches queued behind the parked GPU, well under CUDA's queue depth
MAX_LAUNCHES_PER_CALL = 64    # more than any variant launches per call (math at S=4096: 24 kernels); the host
                              # figures come before the profile, so the real count is not known yet
LONG_CALL_S = 1e-3            # a forward this long is GPU-bound beyond doubt: fewer probe and settle calls
                              # (budget._LONG_TIMED_CALLS prices what it takes)
HOST_CALL_MAX_S = 5e-4        # no variant here takes the host longer than this to issue (math: ~0.16 ms)
PIN_CALLS = 200


class Timed(Protocol):
    """A variant ready to time (`measurement._Subject`): its calls, a warm call's length, and the run it fills in."""
    run: Run
    phases: list[Callable[[], None]]  # one call: the forward, or a training step's forward then backward
    estimate_s: float                 # a warm call's wall time, from the warm-up

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


def time_gpu(subjects: list[Timed], check: Callable[[], None]) -> None:
    """CUDA events around groups of calls, every sample queued behind its own parked GPU, so the events time the
    GPU's work alone and not the gaps a slow host would leave between launches; the variants take their samples in
    turn, round by round. Within a call an event between the forward and the backward times each apart. A call of a
    few microseconds is timed in groups (each sample is a group's mean): an event pair costs about as much as such
    a kernel and would otherwise be most of what it measures."""
    plans = {}
    for s in subjects:
        probes = 10 if s.estimate_s < LONG_CALL_S else 2  # a call of a millisecond or more: two tell its length
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with s.context():
            torch.cuda.synchronize()
            _park_gpu(0.002 + probes * min(s.estimate_s, HOST_CALL_MAX_S))
            start.record()
            for _ in range(probes):
                s.call()
            end.record()
            torch.cuda.synchronize()
        per_call_s = max(start.elapsed_time(end) / probes / 1000.0, 1e-7)
        group = int(min(GROUP_MAX, max(1, GROUP_S // per_call_s)))
        wanted = int(min(MAX_SAMPLES, max(MIN_SAMPLES, TIMING_BUDGET_S / (group * per_call_s))))
        plans[id(s)] = (group, wanted, [])
    for _ in range(max(wanted for _, wanted, _ in plans.values())):
        check()
        for s in subjects:
            group, wanted, samples = plans[id(s)]
            if len(samples) >= wanted:
                continue
            events = [[torch.cuda.Event(enable_timing=True) for _ in range(len(s.phases) + 1)] for _ in range(group)]
            with s.context():  # entered outside the events
                # never more launches in flight than one group's, far under CUDA's queue depth (a full queue
                # makes the host wait, and the GPU then waits on the host)
                torch.cuda.synchronize()
                _park_gpu(1.5 * group * min(s.estimate_s, HOST_CALL_MAX_S) + 20e-6)
                for marks in events:
                    for mark, phase in zip(marks, s.phases):
                        mark.record()
                        phase()
                    marks[-1].record()
            samples.append(events)
    torch.cuda.synchronize()
    for s in subjects:
        group, _, samples = plans[id(s)]
        per_phase = [[sum(marks[p].elapsed_time(marks[p + 1]) for marks in events) / group for events in samples]
                     for p in range(len(s.phases))]
        _pass_timings(s.run, per_phase, "cuda events" if group == 1 else f"cuda events per {group} calls")


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


def _host_plan(s: Timed) -> tuple[int, int, float]:
    """Per round: (back-to-back calls, host-cost calls, a generous guess of one call's host time in seconds)."""
    gpu_s = s.run.timing.median_ms / 1000.0
    host_guess_s = max(s.estimate_s, 1e-4) if gpu_s < LONG_CALL_S else HOST_CALL_MAX_S  # a warm call: an upper bound
    per_call_s = max(gpu_s, host_guess_s)
    loop = _calls(per_call_s, HOST_FIGURES_BUDGET_S / per_call_s) // HOST_ROUNDS
    calls = min(_calls(per_call_s, HOST_FIGURES_BUDGET_S / per_call_s) // HOST_ROUNDS,
                QUEUE_LAUNCHES // MAX_LAUNCHES_PER_CALL)
    # a loop's first call is issued before the GPU has work: over 10 calls its host time is a tenth of the pace,
    # over 2 half (a 1.1 ms step read 10% slow); only calls of 10 ms and more can afford 2
    return max(LOOP_CALLS if gpu_s < 10 * LONG_CALL_S else 2, loop), max(2, calls), host_guess_s


def host_figures(subjects: list[Timed], check: Callable[[], None]) -> None:
    """Back-to-back time per call (a plain loop: what a model sees) and host cost per call (each call timed
    while the GPU is parked, so the host never waits on it); which side sets the pace is `Run.bound`'s.
    Taken in HOST_ROUNDS rounds that alternate between the variants, so a drift in the host's speed
    (seen on the H200: one variant's median moving from 17 to 26 µs between two moments) hits all alike."""
    plans = {id(s): _host_plan(s) for s in subjects}
    loops: dict[int, list[float]] = {id(s): [] for s in subjects}
    host_ms: dict[int, list[float]] = {id(s): [] for s in subjects}
    try:
        for _ in range(HOST_ROUNDS):
            check()
            for s in subjects:
                loop, calls, host_guess_s = plans[id(s)]
                with s.context():  # entered outside every timed call
                    # settle after whatever ran before (another variant): a long call settles in one
                    for _ in range(3 if s.run.timing.median_ms < LONG_CALL_S * 1000 else 1):
                        s.call()
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(loop):
                        s.call()
                    torch.cuda.synchronize()
                    loops[id(s)].append((time.perf_counter() - t0) * 1000.0 / loop)
                    _park_gpu(1.5 * calls * host_guess_s + 0.002)
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

