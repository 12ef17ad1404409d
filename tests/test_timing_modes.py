"""How a call is timed (`workload.timing`: warm, cold L2, CUDA graph) and how long the GPU is parked before it, on a
CPU: a fake GPU whose events read the host's clock and whose park lasts its seconds of host time stands in for CUDA,
so the orchestration (what is flushed where, what is captured, what is refused and in whose words, when a sample
is taken again and when it is marked) is checked for real; the GPU figures themselves are bench/h200/timing_check.py's.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import statistics
import time
import weakref
from types import SimpleNamespace

import pytest
import torch

from attention_variants import VARIANTS
from profiling import budget, environment, timing
from profiling.environment import Environment, parse_smi
from profiling.explain import facts
from profiling.replay import find_recorded, recorded_runs, unrecorded_message
from profiling.request import LIVE, Request
from profiling.results import UNSUPPORTED, Run, Timing
from profiling.workload import Refusal, Workload

GPU = Environment(device="cuda", device_name="NVIDIA H200", compute_capability=(9, 0), torch_version="2.11.0+cu130",
                  cuda_version="13.0", cudnn_version=91900, triton_version=None, python_version="3.11",
                  total_memory_bytes=141 * 2**30, peak_tflops=None, l2_cache_bytes=60 * 10**6)


class FakeGPU:
    """Runs nothing and keeps a log, on a clock of its own that `timing` reads too: the host's time moves only as a
    call says it takes (`host`), a wait for the GPU (`synchronize`) jumps to when the GPU is done; so no figure
    depends on this machine's load. Work is queued in order: a park lasts its seconds, a kernel (`run`) its own,
    each starting once both the work before it is done and the host has queued it; an event happens there, and
    `query` says whether it has (`always_reached`: the GPU always got there first)."""

    def __init__(self, always_reached: bool = False):
        self.clock = 0.0           # the host's time, as its calls and its waits for the GPU have moved it
        self.free_at = 0.0         # when the GPU is done with what is queued
        self.parks: list[float] = []
        self.log: list[str] = []
        self.always_reached = always_reached
        self.external = True      # this torch has torch.cuda.Event(external=True)
        self.captured = None      # during a capture: the events recorded inside it
        gpu = self

        class Event:
            def __init__(self, enable_timing=False, blocking=False, interprocess=False, **kind):
                if kind and not gpu.external:
                    raise TypeError("__new__() got an unexpected keyword argument 'external'")
                self.at = None

            def record(self, stream=None):
                self.at = max(gpu.free_at, gpu.now())
                gpu.log.append("record")
                if gpu.captured is not None:  # an event node of the graph being captured: the graph keeps its handle
                    gpu.captured.append(weakref.ref(self))

            def query(self):
                return gpu.always_reached or gpu.now() >= self.at

            def synchronize(self):
                gpu.synchronize()

            def elapsed_time(self, end):
                return (end.at - self.at) * 1000.0
        self.Event = Event

    def now(self) -> float:
        return self.clock

    def host(self, seconds: float) -> None:
        """The host spends `seconds` (issuing a call, or stalled)."""
        self.clock += seconds

    def run(self, seconds: float) -> None:
        self.free_at = max(self.free_at, self.now()) + seconds

    def park(self, seconds: float) -> None:
        self.parks.append(seconds)
        self.run(seconds)

    def synchronize(self, *args) -> None:
        self.clock = max(self.clock, self.free_at)


@pytest.fixture
def gpu(monkeypatch):
    fake = FakeGPU()
    monkeypatch.setattr(torch.cuda, "Event", fake.Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: None)  # the fake GPU has one queue
    monkeypatch.setattr(torch.cuda, "synchronize", fake.synchronize)
    monkeypatch.setattr(timing, "_park_gpu", fake.park)
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=fake.now))
    return fake


@dataclasses.dataclass
class Subject:
    """A `timing.Timed` whose phases hold the host for given times, queue GPU work of given times (as long as the
    host's, unless given) and log themselves."""
    run: Run
    host_s: tuple[float, ...]                # each phase's host time
    log: list[str]
    gpu: FakeGPU
    gpu_s: tuple[float, ...] | None = None   # each phase's GPU time (None: its host time)
    estimate_s: float = 1e-5                 # a bad guess of a call's length: the park must not rely on it
    issue_s: float | None = None             # the host's time to issue a call, as time_gpu measures it
    given: list | None = None                # phases given as they are, instead

    @property
    def phases(self):
        if self.given is not None:
            return self.given

        def phase(i, seconds, gpu_seconds):
            def call():
                self.log.append(f"phase{i}")
                self.gpu.host(seconds)
                self.gpu.run(gpu_seconds)
            return call
        return [phase(i, s, g) for i, (s, g) in enumerate(zip(self.host_s, self.gpu_s or self.host_s))]

    def call(self):
        for p in self.phases:
            p()

    def context(self):
        return contextlib.nullcontext()


def subject(gpu: FakeGPU, host_s=(2e-4,), env: Environment = GPU, gpu_s=None, **workload) -> Subject:
    w = Workload.blog(**workload)
    return Subject(Run("fake", w, env), host_s, gpu.log, gpu, gpu_s)


# -- warm: the park is the host's measured lead (issues #25, #29) --------------------------------------------------
def queued(issue_s: float, calls: int, gpu_s: float) -> "timing._Queued":
    return timing._Queued(timing.Park(issue_s, calls), lambda: None, lambda: False, gpu_s)


def test_the_lead_is_what_the_host_falls_behind_the_gpu_at_worst():
    gpu_bound = [queued(1e-5, 2, 1e-4) for _ in range(10)]        # 20 µs to issue, 100 µs to run: ahead after one
    assert timing._lead_s(gpu_bound) == pytest.approx(2e-5)
    host_bound = [queued(1e-4, 1, 2e-5) for _ in range(10)]       # 100 µs to issue, 20 µs to run: behind by 80 a sample
    assert timing._lead_s(host_bound) == pytest.approx(1e-4 + 9 * 8e-5)
    assert timing._lead_s([queued(2e-4, 4, 0.0)]) == pytest.approx(8e-4)  # one sample alone: its whole issue


def test_a_park_follows_the_median_of_its_last_samples_issues():
    park = timing.Park(issue_s=2e-4, calls=4)
    park.learn(4 * 3e-4)
    assert park.issue_s == pytest.approx(3e-4)                    # measured, not the guess
    for _ in range(timing.ISSUE_WINDOW - 1):
        park.learn(4 * 1e-4)
    assert park.issue_s == pytest.approx(1e-4)                    # one long issue (a stall) among them: not followed
    for _ in range(timing.ISSUE_WINDOW // 2 + 1):
        park.learn(4 * 5e-4)
    assert park.issue_s == pytest.approx(5e-4)                    # a host that stays slower: followed


def test_a_retake_is_parked_longer_for_itself_alone():
    again = queued(1e-4, 1, 0.0)
    again.retries = 2
    assert timing._lead_s([again]) == pytest.approx(4e-4)        # doubled per retake ...
    assert again.park.issue_s == pytest.approx(1e-4)              # ... the variant's own issue time untouched


def test_stalls_of_the_host_do_not_lengthen_every_later_park(gpu):
    """A server's other threads take the GIL now and then: each stall the GPU caught up with is taken again, and the
    parks after it come back to the host's own issue time (kept for good, the longest issue and each retake's
    doubling made every stall lengthen all later parks: 0.05 s of timing grew to 0.40 s behind gradio on an H100)."""
    s = subject(gpu)
    stalls_at = set(range(20, 80, 12))                            # 5 stalls in the first half of the samples

    def stalling():
        if gpu.log.count("phase0") in stalls_at:
            stalls_at.discard(gpu.log.count("phase0"))
            gpu.host(5e-3)
        gpu.log.append("phase0")
        gpu.host(2e-5)
        gpu.run(9e-5)
    s.given = [stalling]
    timing.time_gpu([s], lambda: None)
    assert not stalls_at and not s.run.timing.host_gaps
    assert s.run.timing.max_ms == pytest.approx(0.09)             # no sample holds a stall
    calm = timing.PARK_MARGIN * timing._group(9e-5) * 2e-5 + timing.PARK_SLACK_S
    assert gpu.parks[-1] == pytest.approx(calm)                   # the last park is the calm one again
    assert sum(gpu.parks[1:]) < 0.05                              # 5 stalls of 5 ms cost their own retakes


def test_the_park_is_planned_from_the_host_s_issue_time_not_from_a_guess(gpu):
    s = subject(gpu, host_s=(1e-3,), gpu_s=(1e-5,))  # a host-bound call: 1 ms to issue, 10 µs to run, guessed at 10 µs
    timing.time_gpu([s], lambda: None)
    # the host sets the rounds' wall: 20 calls a sample of 1 ms each, the budget's 3 samples, so HOST_MIN_SAMPLES
    assert s.run.timing.samples == timing.HOST_MIN_SAMPLES and not s.run.timing.host_gaps
    # every batch's park covers what the host falls behind over it: ~1 ms a sample, 1.5 times
    batches = gpu.parks[1:]
    per_batch = timing.QUEUE_LAUNCHES // (timing._group(1e-5) * timing._entries(s, 1e-5, None))  # the queue's bound
    assert per_batch > 1 and len(batches) < s.run.timing.samples / 2  # several samples a park (and a few retaken)
    assert sum(batches) >= timing.PARK_MARGIN * s.run.timing.samples * 0.99e-3
    assert s.run.timing.median_ms == pytest.approx(0.01, rel=0.5)  # the GPU's 10 µs, not the host's 1 ms


def test_a_gpu_bound_batch_is_parked_for_one_sample_s_issue_not_for_all():
    """Samples the GPU takes longer to run than the host to issue: the host, ahead after the first, stays ahead: the
    batch's park is the first one's issue with the margin, and the GPU runs the rest back to back."""
    batch = [queued(2e-5, 1, 1e-4) for _ in range(20)]
    assert timing.PARK_MARGIN * timing._lead_s(batch) == pytest.approx(3e-5)


def test_a_gpu_that_keeps_reaching_the_calls_first_is_retried_then_marked(gpu):
    gpu.always_reached = True
    s = subject(gpu, host_s=(1e-4, 1e-4), passes="fwd+bwd")
    timing.time_gpu([s], lambda: None)
    run = s.run
    assert run.timing.host_gaps and run.forward_timing.host_gaps and run.backward_timing.host_gaps
    # every sample (and the probe) was issued 1 + PARK_RETRIES times, each retake parked longer than the last
    calls = 10 + run.timing.samples * timing._group(2e-4)
    assert gpu.log.count("phase0") == (1 + timing.PARK_RETRIES) * calls
    probe = gpu.parks[:1 + timing.PARK_RETRIES]
    assert probe == sorted(probe) and probe[0] < probe[-1]


def test_only_the_samples_the_gpu_reached_are_taken_again(gpu, monkeypatch):
    """A host that stalls once (another thread, the collector) lets the GPU catch up with it: the samples it reached
    are taken again behind a longer park, the others kept, and nothing is marked; the figure is the GPU's alone."""
    stalls = {"left": 1}
    s = subject(gpu)

    def stalling():
        if stalls["left"] and gpu.log.count("phase0") == 40:  # well into the samples, after the probe
            stalls["left"] = 0
            gpu.host(5e-3)                                   # far longer than the GPU work queued ahead
        gpu.log.append("phase0")
        gpu.host(2e-5)
        gpu.run(9e-5)
    s.given = [stalling]
    timing.time_gpu([s], lambda: None)
    taken = gpu.log.count("phase0") - 10                     # after the probe's 10
    group = timing._group(9e-5)
    assert group == 2 and not s.run.timing.host_gaps and stalls["left"] == 0
    assert taken == (s.run.timing.samples + 1) * group       # the one sample the GPU reached, taken again
    assert s.run.timing.max_ms == pytest.approx(0.09)        # no sample holds the stall: the GPU's 90 µs alone


def test_rounds_are_queued_together_behind_one_park(gpu, monkeypatch):
    """Short calls: both variants' samples, up to BATCH_GPU_S of GPU work, behind one park (one wait for the GPU a
    batch), the host's lead the first sample's issue with the margin; the samples still alternate, and each times
    the GPU's work alone."""
    waits = []
    real = gpu.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: waits.append(1) or real())

    def call():
        gpu.log.append("phase0")
        gpu.host(2e-5)
        gpu.run(9e-5)
    a, b = subject(gpu), subject(gpu)
    a.given = b.given = [call]
    made, queued_as = [], timing._Queued
    monkeypatch.setattr(timing, "_Queued", lambda park, *rest: made.append(park) or queued_as(park, *rest))
    timing.time_gpu([a, b], lambda: None)
    samples = a.run.timing.samples + b.run.timing.samples
    assert a.run.timing.samples == b.run.timing.samples == timing.MAX_SAMPLES
    group = timing._group(9e-5)
    most = min(int(timing.BATCH_GPU_S // (group * 9e-5)),         # samples a batch holds: 16 of 180 µs, but
               timing.QUEUE_LAUNCHES // (group * timing._entries(a, 9e-5, None, a.issue_s)))  # 11 by the launches
    assert most == 11                                             # they may queue: 20 µs to issue, 20 at most
    batches = gpu.parks[2:]                                       # after a probe each
    assert len(batches) == -(-samples // most) and len(waits) == len(batches) + 2 * 2 + 1  # one a batch, two a probe
    lead = timing.PARK_MARGIN * group * 2e-5 + timing.PARK_SLACK_S
    assert batches == [pytest.approx(lead)] * len(batches)        # one sample's issue, not the batch's
    scheduled = [id(park) for park in made[2:]]                   # after the probes: a, b, a, b, ...
    assert len(set(scheduled[0::2])) == len(set(scheduled[1::2])) == 1 != len(set(scheduled))
    assert a.run.timing.max_ms == pytest.approx(0.09) and b.run.timing.min_ms == pytest.approx(0.09)
    assert not a.run.timing.host_gaps

    gpu.parks.clear()
    monkeypatch.setattr(timing, "BATCH_GPU_S", 0.0)              # none: a park for every sample, as before batches
    timing.time_gpu([a, b], lambda: None)
    assert len(gpu.parks) == 2 + a.run.timing.samples + b.run.timing.samples


def test_a_batch_holds_at_most_batch_calls_calls(gpu, monkeypatch):
    """Calls of a few microseconds come in groups (up to 64 a sample): a batch is also bounded by its calls."""
    issued = []
    s = subject(gpu)
    s.given = [lambda: issued.append(len(gpu.parks))]  # a call that takes no time: the largest groups
    timing.time_gpu([s], lambda: None)
    per_park = [issued.count(i) for i in range(2, len(gpu.parks) + 1)]  # after the probe's park
    assert max(per_park) <= timing.BATCH_CALLS and sum(per_park) >= s.run.timing.samples * timing.GROUP_MAX


def test_a_batch_never_queues_more_launches_than_queue_launches(gpu):
    """A call may launch a kernel for every MIN_LAUNCH_S of its GPU time (cuDNN: 7 in 27 µs): a batch holds no more
    calls than QUEUE_LAUNCHES of those, with their events, can queue (a full queue would make the host wait with the
    GPU past its park, and the samples it reached would be taken again in vain); a batch still holds several."""
    issued = []

    def call():
        issued.append(len(gpu.parks))
        gpu.host(2e-5)                                  # time for 20 launches: the GPU's bound is the tighter
        gpu.run(2.7e-5)
    s = subject(gpu)
    s.given = [call]
    timing.time_gpu([s], lambda: None)
    per_park = [issued.count(i) for i in range(2, len(gpu.parks) + 1)]  # after the probe's park
    assert timing._entries(s, 2.7e-5, None) == 11 + 2
    assert max(per_park) * 13 <= timing.QUEUE_LAUNCHES and max(per_park) > timing._group(2.7e-5)
    assert sum(per_park) == s.run.timing.samples * timing._group(2.7e-5) and not s.run.timing.host_gaps


def test_a_long_call_s_launches_are_bounded_by_its_issue_too(gpu):
    """A call of 1.26 ms on the GPU (naive at the blog's size) could hold 504 launches by its GPU time alone, and no
    two samples would share a park; the host issues it in 0.25 ms, and a launch takes the host MIN_LAUNCH_HOST_S at
    least: 250 at most, two samples a park."""
    issued = []

    def call():
        issued.append(len(gpu.parks))
        gpu.host(2.5e-4)
        gpu.run(1.26e-3)
    s = subject(gpu)
    s.given, s.estimate_s = [call], 1.3e-3              # the warm-up's wall time: the probe takes two calls
    assert timing._entries(s, 1.26e-3, None) == 504 + 2
    assert timing._entries(s, 1.26e-3, None, 2.5e-4) == 250 + 2
    timing.time_gpu([s], lambda: None)
    per_park = [issued.count(i) for i in range(2, len(gpu.parks) + 1)]  # after the probe's park
    assert max(per_park) == 2 and sum(per_park) == s.run.timing.samples and not s.run.timing.host_gaps


def test_a_gpu_that_waits_on_nothing_is_not_marked(gpu):
    s = subject(gpu, host_s=(5e-5,), gpu_s=(1e-4,))
    timing.time_gpu([s], lambda: None)
    assert not s.run.timing.host_gaps and s.run.timing.samples >= timing.MIN_SAMPLES


def test_host_cost_is_a_call_s_issue_and_back_to_back_the_pace_of_the_slower_side(gpu, monkeypatch):
    """Host figures on the fake GPU's clock: a host-bound call (0.2 ms to issue, 20 µs to run) and a GPU-bound one
    (the other way round): the host cost is the issue, each call timed apart behind a parked GPU (in a GPU-bound
    loop a call's issue can wait on the GPU: naive_inplace's read 0.42 ms there on an H100, more than its profiled
    range), the pace the slower side's, in HOST_ROUNDS rounds each."""
    host_bound = subject(gpu, host_s=(2e-4,), gpu_s=(2e-5,))
    gpu_bound = subject(gpu, host_s=(2e-5,), gpu_s=(2e-4,))
    for s, ms in ((host_bound, 0.02), (gpu_bound, 0.2)):
        s.run.timing = Timing.of([ms] * 8, "cuda events")
    timing.host_figures([host_bound, gpu_bound], lambda: None)
    for s, host_ms, pace_ms in ((host_bound, 0.2, 0.2), (gpu_bound, 0.02, 0.2)):
        run = s.run
        assert run.host_cost.median_ms == pytest.approx(host_ms, abs=0.02)
        assert run.back_to_back.median_ms == pytest.approx(pace_ms, rel=0.1)
        assert run.back_to_back.samples == timing.HOST_ROUNDS
    assert host_bound.run.bound == "host" and gpu_bound.run.bound == "gpu"
    assert gpu_bound.run.host_cost.method == "perf_counter per call, GPU parked" and len(gpu.parks) > 0


def test_the_host_cost_s_park_covers_its_calls_issue_as_time_gpu_measured_it(gpu, monkeypatch):
    """After `time_gpu` has measured a variant's issue, the host cost's calls are parked for that (with the margin),
    not a guess plus 2 ms: every one of them is issued whole before the park ends, a host-bound call's too, and the
    GPU idles for a fraction of what it did."""
    park_ends, inside = [None], []
    real_park, real_sync = gpu.park, gpu.synchronize

    def park(seconds):
        real_park(seconds)
        park_ends[0] = gpu.free_at
    monkeypatch.setattr(timing, "_park_gpu", park)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: park_ends.__setitem__(0, None) or real_sync())

    def issued(host_s, gpu_s):
        def call():
            gpu.host(host_s)
            if park_ends[0] is not None:
                inside.append(gpu.now() <= park_ends[0])  # its issue over, and the GPU still in the park
            gpu.run(gpu_s)
        return call
    host_bound, gpu_bound = subject(gpu), subject(gpu)
    host_bound.given, gpu_bound.given = [issued(2e-4, 2e-5)], [issued(2e-5, 2e-4)]
    host_bound.estimate_s = gpu_bound.estimate_s = 5e-4  # the warm-up's wall time: a generous guess
    timing.time_gpu([host_bound, gpu_bound], lambda: None)
    assert host_bound.issue_s == pytest.approx(2e-4, rel=0.05) and gpu_bound.issue_s == pytest.approx(2e-5, rel=0.05)
    inside.clear()
    gpu.parks.clear()
    timing.host_figures([host_bound, gpu_bound], lambda: None)
    calls = sum(timing._host_plan(s)[1] for s in (host_bound, gpu_bound)) * timing.HOST_ROUNDS
    assert len(inside) == calls and all(inside)
    assert host_bound.run.host_cost.median_ms == pytest.approx(0.2)
    guessed = sum(1.5 * timing._host_plan(s)[1] * 5e-4 + 0.002 for s in (host_bound, gpu_bound)) * timing.HOST_ROUNDS
    assert sum(gpu.parks) < guessed / 3


@pytest.mark.parametrize("issue_s, gpu_s, loop", [(3e-5, 3e-3, 2), (1e-4, 2e-3, 5), (3e-4, 1.2e-3, timing.LOOP_CALLS)])
def test_a_long_call_s_loop_is_as_long_as_its_measured_issue_needs(gpu, issue_s, gpu_s, loop):
    """A GPU-bound loop's first call is issued before the GPU has work, which the loop's pace carries: calls of a
    millisecond or more take as many back to back as keep that within LOOP_BIAS (1%) of the loop, by the issue
    time_gpu measured, up to LOOP_CALLS (naive at 1.2 ms issues in ~0.3 ms: 2.5% over 10); the pace then is the
    GPU's within that."""
    s = subject(gpu, host_s=(issue_s,), gpu_s=(gpu_s,))
    timing.time_gpu([s], lambda: None)
    assert s.issue_s == pytest.approx(issue_s, rel=0.05)
    gpu.log.clear()
    timing.host_figures([s], lambda: None)
    settle, parked = timing._settle_calls(gpu_s * 1000), timing._host_plan(s)[1]
    assert timing._host_plan(s)[0] == loop
    assert gpu.log.count("phase0") == timing.LONG_HOST_ROUNDS * (settle + loop + parked)
    bias = issue_s / (loop * gpu_s)
    assert bias <= timing.LOOP_BIAS or loop == timing.LOOP_CALLS
    assert s.run.back_to_back.median_ms == pytest.approx(gpu_s * 1000 * (1 + bias), rel=1e-3)
    assert s.run.bound == "gpu"


def test_every_call_of_a_sample_is_timed_between_its_own_events(gpu):
    """Each call of a sample (a group of short calls) between its own events, before each phase and after the last,
    as a bare loop and triton's do_bench time them (two events around a whole group read S=256 8-11% lower on an
    H100); cold alike, the flush between calls outside them. Each figure is the GPU's work per call."""
    def records_and_calls(s, flush=None) -> tuple[int, int]:
        gpu.log.clear()
        timing.time_gpu([s], lambda: None, flush)
        return gpu.log.count("record"), gpu.log.count("phase0")

    forward = subject(gpu, host_s=(2e-5,), gpu_s=(9e-5,))
    records, calls = records_and_calls(forward)
    assert timing._group(9e-5) > 1 and records == 2 * calls
    assert forward.run.timing.median_ms == pytest.approx(0.09) and forward.run.timing.max_ms == pytest.approx(0.09)
    step = subject(gpu, host_s=(2e-5, 2e-5), gpu_s=(9e-5, 9e-5), passes="fwd+bwd")
    records, calls = records_and_calls(step)
    assert records == 3 * calls and step.run.forward_timing.median_ms == pytest.approx(0.09)
    cold = subject(gpu, host_s=(2e-5,), gpu_s=(9e-5,))
    records, calls = records_and_calls(cold, lambda: gpu.log.append("flush"))
    assert records == 2 * calls == 2 * gpu.log.count("flush") and cold.run.timing.median_ms == pytest.approx(0.09)


@pytest.mark.parametrize("gpu_s, samples", [(2e-4, timing.MAX_SAMPLES),       # the budget (0.06 s) would take 300
                                             (9e-4, timing.MAX_SAMPLES),       # ... 66: under 1 ms, 50 still
                                             (1.26e-3, timing.LONG_MAX_SAMPLES),  # naive at the blog's size: 47 before
                                             (5e-3, 12),                       # the budget's 12, under the cap
                                             (2e-2, timing.MIN_SAMPLES)])      # the budget's 3: never under 8
@pytest.mark.parametrize("cold", [False, True])
def test_a_call_of_a_millisecond_or_more_takes_the_samples_its_verdict_needs_and_no_more(gpu, gpu_s, samples, cold):
    """Under 1 ms: the samples that fill the budget (TIMING_BUDGET_S), within MIN_SAMPLES and MAX_SAMPLES. From 1 ms
    (GPU-bound beyond doubt; the recording's pairs with a side that long got their verdict from its first 16):
    LONG_MAX_SAMPLES at most, warm or cold, and still MIN_SAMPLES at least."""
    s = subject(gpu, host_s=(2e-5,), gpu_s=(gpu_s,))
    timing.time_gpu([s], lambda: None, (lambda: gpu.log.append("flush")) if cold else None)
    assert s.run.timing.samples == samples
    assert s.run.timing.median_ms == pytest.approx(gpu_s * 1000)


@pytest.mark.parametrize("host_s, samples", [(1e-5, timing.MAX_SAMPLES),   # the GPU the slower: its budget, 50
                                              (1e-4, 30),                   # the host's 2 ms a sample: 30 of them
                                              (4.5e-3, timing.HOST_MIN_SAMPLES)])  # nested jagged tensors: 25
def test_a_call_the_host_issues_slower_than_the_gpu_runs_takes_the_samples_the_host_s_budget_allows(gpu, host_s,
                                                                                                   samples):
    """Where the host issues a call slower than the GPU runs it, the host's issue sets the timing rounds' wall: the
    samples fill the budget with the host's time, not the GPU's (nested jagged tensors' tiny calls, milliseconds of
    Python each, took 3.6 s of rounds on a lent H100), and the GPU's figure is still the GPU's."""
    s = subject(gpu, host_s=(host_s,), gpu_s=(1e-5,))
    started = gpu.clock
    timing.time_gpu([s], lambda: None)
    assert s.run.timing.samples == pytest.approx(samples, abs=1)  # the host's issue as the probe measured it
    assert s.run.timing.median_ms == pytest.approx(0.01, rel=0.5)
    issued_s = s.run.timing.samples * timing._group(1e-5) * host_s  # the samples' calls, as the host issues them
    assert gpu.clock - started < 1.6 * max(timing.TIMING_BUDGET_S, issued_s) + 0.05  # probes, parks, retakes


def test_the_cap_on_a_long_call_s_samples_keeps_the_verdicts_of_the_h200_recording():
    """Re-derived from real samples: every warm or cold pair the H200 recording timed together with a side of 1 ms or
    more, that side cut to its first LONG_MAX_SAMPLES (as `time_gpu` now stops it), the other kept whole. No winner
    changes, no pair without one gains one; a change between the two verdicts that find no winner ("level",
    "no practical difference") in at most 1 pair in 1,000; each cut side's median within 2% of all its samples'."""
    from profiling.stats import decide

    def call_ms(run: Run) -> float:  # what time_gpu measures a call by: a step's forward and backward together
        if run.forward_timing and run.backward_timing:
            return run.forward_timing.median_ms + run.backward_timing.median_ms
        return run.timing.median_ms
    sessions: dict[tuple[str, str], list[Run]] = {}
    for run in recorded_runs("h200-torch2.11"):
        if run.ok and run.timing and run.timing.samples_ms and run.workload.timing in ("warm", "cold"):
            sessions.setdefault((run.session, run.workload.timing), []).append(run)
    pairs = shifts = 0
    for runs in sessions.values():
        for a, b in itertools.combinations(runs, 2):
            whole = [r.timing.samples_ms for r in (a, b)]
            long = [call_ms(r) >= timing.LONG_CALL_S * 1000 for r in (a, b)]
            if not any(long):
                continue
            cut = [s[:timing.LONG_MAX_SAMPLES] if is_long else s for s, is_long in zip(whole, long)]
            full, early = decide(*whole), decide(*cut)
            pairs += 1
            assert (full.kind == "ranked") == (early.kind == "ranked") and full.faster == early.faster or \
                {full.kind, early.kind} == {"level", "no_practical_difference"}, (a.variant, b.variant, full, early)
            shifts += full.kind != early.kind
            for c, s in zip(cut, whole):
                assert abs(statistics.median(c) / statistics.median(s) - 1) <= 0.02
    assert pairs > 2000 and shifts <= pairs / 1000


def host_cap_shifts(floor: int) -> tuple[int, int, list]:
    """Every warm or cold pair the H200 recording timed together, each side cut to its first samples as `time_gpu`
    now plans them from its recorded GPU time and host cost, with HOST_MIN_SAMPLES at `floor`, against the same
    pair cut as planned without the host's issue: (pairs, pairs the host's issue cuts, their verdicts' changes)."""
    from profiling.stats import decide

    def call_ms(run: Run) -> float:
        if run.forward_timing and run.backward_timing:
            return run.forward_timing.median_ms + run.backward_timing.median_ms
        return run.timing.median_ms

    def planned(run: Run, host: bool) -> int:
        per_call_s = call_ms(run) / 1000
        most = timing.LONG_MAX_SAMPLES if per_call_s >= timing.LONG_CALL_S else timing.MAX_SAMPLES
        issue_s = run.host_cost.median_ms / 1000 if host else 0.0
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(timing, "HOST_MIN_SAMPLES", floor)
            return timing._wanted(timing._group(per_call_s), per_call_s, most, issue_s)
    sessions: dict[tuple[str, str], list[Run]] = {}
    for run in recorded_runs("h200-torch2.11"):
        if run.ok and run.timing and run.timing.samples_ms and run.host_cost and run.workload.timing in ("warm", "cold"):
            sessions.setdefault((run.session, run.workload.timing), []).append(run)
    pairs, cut, changes = 0, 0, []
    for runs in sessions.values():
        for a, b in itertools.combinations(runs, 2):
            pairs += 1
            before = [r.timing.samples_ms[:planned(r, False)] for r in (a, b)]
            after = [r.timing.samples_ms[:planned(r, True)] for r in (a, b)]
            if after == before:
                continue
            cut += 1
            old, new = decide(*before), decide(*after)
            if old.kind != new.kind or old.faster != new.faster:
                changes.append((a.variant, b.variant, a.workload.seq_len, old.kind, new.kind, old.faster, new.faster))
            for c, s in zip(after, before):
                assert abs(statistics.median(c) / statistics.median(s) - 1) <= 0.02
    return pairs, cut, changes


def test_the_host_s_cap_on_samples_keeps_the_verdicts_of_the_h200_recording():
    """Re-derived from real samples (sdpa_nested: 2.4-15 ms of the host's issue a call for 0.1-0.8 ms of GPU work;
    flex and FA4 at small sizes): no verdict gains or loses a winner, a change between the two that find none
    ("level", "no practical difference") in at most 1 pair in 1,000, each cut side's median within 2%."""
    pairs, cut, changes = host_cap_shifts(timing.HOST_MIN_SAMPLES)
    assert pairs > 2000 and cut > 300
    assert all({old, new} == {"level", "no_practical_difference"} for *_, old, new, _, _ in changes), changes
    assert len(changes) <= pairs / 1000, changes


# -- cold: the L2 flushed before every timed call, outside its events ---------------------------------------------
def test_cold_flushes_before_every_call_and_outside_its_events(gpu):
    s = subject(gpu, host_s=(1e-5, 1e-5), passes="fwd+bwd")
    flush = lambda: gpu.log.append("flush")  # noqa: E731
    timing.time_gpu([s], lambda: None, flush)
    calls = 0
    for i, entry in enumerate(gpu.log):
        if entry == "phase0":
            calls += 1
            # each call: flush, then its first event, then the forward; its last event after the backward
            assert gpu.log[i - 2:i] == ["flush", "record"], gpu.log[i - 3:i + 1]
            assert gpu.log[i + 1:i + 4] == ["record", "phase1", "record"]
    assert calls == gpu.log.count("flush") > 0
    assert "L2 flushed before each call" in s.run.timing.method


def test_the_flush_is_twice_the_l2_the_device_reports(monkeypatch):
    props = SimpleNamespace(name="NVIDIA H200", major=9, minor=0, total_memory=141 * 2**30, multi_processor_count=132,
                            L2_cache_size=52_428_800)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(environment.shutil, "which", lambda name: None)   # no nvidia-smi, no NVML: never a failure
    monkeypatch.setattr(environment, "_nvml", lambda pci, static=True: None)
    environment._static_state.cache_clear()
    env = environment.detect("cuda")
    environment._static_state.cache_clear()
    assert env.l2_cache_bytes == 52_428_800 and env.sm_count == 132 and env.mig is None
    assert timing.flush_bytes(env) == 2 * 52_428_800
    props.L2_cache_size = 126 * 2**20                                      # a larger L2 (B200): a larger flush
    assert timing.flush_bytes(environment.detect("cuda")) == 2 * 126 * 2**20
    environment._static_state.cache_clear()
    assert timing.flush_bytes(dataclasses.replace(env, l2_cache_bytes=None)) == 256 * 2**20  # tritonbench's


def flush_writes_every_byte(device: str) -> None:
    """The cold flush, run for real on `device`: its buffer filled with non-zero bytes, flushed once, read back; a
    flush that writes nothing, or part of the buffer, leaves bytes of the fill."""
    flush = timing.L2Flush(3 * 2**20 + 17, device)  # an odd size: a flush of whole blocks or pages only misses bytes
    buffer = flush.buffer
    assert buffer.numel() == flush.n_bytes and buffer.device.type == device
    buffer.fill_(0xA5)
    flush()
    written = (buffer == 0).sum().item()  # read back (on a GPU: after the memset, on its stream)
    assert written == flush.n_bytes, f"the flush wrote {written} of its {flush.n_bytes} bytes"


def test_the_cold_flush_writes_every_byte_of_its_buffer():
    flush_writes_every_byte("cpu")


def test_cold_timing_keeps_the_warm_figure_and_records_its_flush(gpu, monkeypatch):
    made = []

    class Flush:
        def __init__(self, n_bytes, device):
            self.n_bytes = n_bytes
            made.append((n_bytes, device))

        def __call__(self):
            gpu.log.append("flush")
    monkeypatch.setattr(timing, "L2Flush", Flush)
    s = subject(gpu, timing="cold")
    timing.time_gpu([s], lambda: None)
    warm = s.run.timing
    timing.time_mode([s], lambda: None)
    assert s.run.warm_timing is warm and s.run.timing is not warm
    assert made == [(s.run.flush_bytes, "cuda")] and s.run.flush_bytes == 2 * GPU.l2_cache_bytes


def test_a_cold_or_graph_run_holds_the_flush_or_the_graph_s_pool_beside_a_call_in_the_memory_plan():
    v = VARIANTS["sdpa_flash"]
    w = Workload.blog()
    scratch = v.scratch_bytes(w, GPU)
    held = {"warm": 0, "cold": 2 * GPU.l2_cache_bytes, "graph": budget.forward_bytes(w, scratch)}
    for mode, extra in held.items():
        assert budget.memory_refusal(v, w.replace(timing=mode), GPU, 0).needed == \
            budget.measure_bytes(w, scratch, timing_bytes=extra)
    # beside the call, not beside the accuracy check (done before the timing): once it is the largest phase, every
    # byte it holds counts, with the plan's 5%
    big = 10 * 2**30
    grown = budget.measure_bytes(w, scratch, timing_bytes=2 * big) - budget.measure_bytes(w, scratch, timing_bytes=big)
    assert grown == pytest.approx(1.05 * big, abs=2)


# -- graph: calls captured once, replayed; a refusal in PyTorch's words ---------------------------------------
class FakeGraphs:
    """torch.cuda's graph API on a CPU: a capture runs the calls once (the subject raises where told to) and counts
    them; a replay moves the fake GPU's clock on by `call_s` a captured call, so the replay's events time them. As
    CUDA's, a graph holds the handles of the events recorded inside it, not the events: a replay after one was
    destroyed fails (on the H100 a segfault in cuGraphLaunch)."""

    def __init__(self, gpu: FakeGPU, monkeypatch, end_says: str | None = None, always: bool = False,
                 call_s: float = 1e-4):
        self.capturing = self.invalidated = False
        self.set_to = []
        graphs = self

        class CUDAGraph:
            def __init__(self):
                self.took = 0.0
                self.events = []

            def replay(self):
                if any(alive() is None for alive in self.events):
                    raise RuntimeError("replayed a CUDA graph whose event nodes' events were destroyed")
                gpu.run(self.took)

        class Capture:
            def __init__(self, graph):
                self.graph = graph

            def __enter__(self):
                graphs.capturing, self.logged = True, len(gpu.log)
                gpu.captured = self.graph.events

            def __exit__(self, *exc):
                graphs.capturing, gpu.captured = False, None
                self.graph.took = gpu.log[self.logged:].count("phase0") * call_s
                if end_says and (always or graphs.invalidated):  # capture_end fails: the capture was invalidated
                    graphs.invalidated = False
                    raise RuntimeError(end_says)

        stream = SimpleNamespace(wait_stream=lambda other: None)
        monkeypatch.setattr(torch.cuda, "CUDAGraph", CUDAGraph)
        monkeypatch.setattr(torch.cuda, "graph", Capture)
        monkeypatch.setattr(torch.cuda, "Stream", lambda: stream)
        monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "current_stream", lambda: stream)
        monkeypatch.setattr(torch.cuda, "set_stream", self.set_to.append)


def warm(s: Subject, ms: float) -> Subject:
    s.run.warm_timing = Timing.of([ms] * 8, "cuda events")
    return s


def test_graph_timing_is_the_replay_over_its_calls(gpu, monkeypatch):
    FakeGraphs(gpu, monkeypatch)
    s = warm(subject(gpu, host_s=(1e-4,), timing="graph"), 0.1)
    timing.time_graph([s], lambda: None)
    calls = timing._group(1e-4)                                  # 200 µs of calls of 0.1 ms: two per graph
    assert calls == 2 and s.run.timing.method.startswith("cuda graph of 2 calls")
    assert s.run.timing.median_ms == pytest.approx(0.1, rel=0.2)  # the replay's 0.2 ms over its 2 calls
    assert s.run.forward_timing is None and s.run.ok


def test_a_graph_step_is_split_by_events_inside_its_graph(gpu, monkeypatch):
    FakeGraphs(gpu, monkeypatch)
    s = warm(subject(gpu, host_s=(1e-4, 3e-4), passes="fwd+bwd", timing="graph"), 0.4)
    timing.time_graph([s], lambda: None)
    run = s.run
    assert run.forward_timing.median_ms < run.backward_timing.median_ms  # 0.1 ms and 0.3 ms of host a call
    assert "events inside it" in run.timing.method


def test_without_events_inside_a_graph_a_backward_is_refused_and_a_step_timed_whole(gpu, monkeypatch):
    FakeGraphs(gpu, monkeypatch)
    gpu.external = False                                          # torch before 2.8
    backward = warm(subject(gpu, host_s=(1e-4, 1e-4), passes="bwd", timing="graph"), 0.2)
    step = warm(subject(gpu, host_s=(1e-4, 1e-4), passes="fwd+bwd", timing="graph"), 0.2)
    timing.time_graph([backward, step], lambda: None)
    assert backward.run.status == UNSUPPORTED and "torch.cuda.Event(external=True)" in backward.run.reason
    assert step.run.ok and step.run.forward_timing is None and step.run.timing.samples >= timing.MIN_SAMPLES


def test_a_capture_pytorch_refuses_is_unsupported_in_its_words(gpu, monkeypatch):
    graphs = FakeGraphs(gpu, monkeypatch, end_says="CUDA error: operation failed due to a previous error during capture")
    said = "CUDA error: operation not permitted when stream is capturing"
    s = warm(subject(gpu, timing="graph"), 0.1)

    def refuses():
        if graphs.capturing:
            graphs.invalidated = True
            raise RuntimeError(f"{said}\nCUDA kernel errors might be asynchronously reported")
    s.given = [refuses]
    s.run.timing = s.run.warm_timing                    # the warm figure time_gpu left: not the graph's
    fine = warm(subject(gpu, timing="graph"), 0.1)
    timing.time_graph([s, fine], lambda: None)
    assert s.run.status == UNSUPPORTED and s.run.reason == f"cannot be captured in a CUDA graph: {said}"
    assert graphs.set_to, "the stream a failed capture left current is set back"
    assert s.run.timing is None and s.run.warm_timing is not None and fine.run.ok and fine.run.timing is not None


def test_a_capture_whose_end_fails_is_refused_in_those_words(gpu, monkeypatch):
    FakeGraphs(gpu, monkeypatch, end_says="CUDA error: operation not supported when stream is capturing", always=True)
    s = warm(subject(gpu, timing="graph"), 0.1)
    timing.time_graph([s], lambda: None)
    assert s.run.reason == "cannot be captured in a CUDA graph: CUDA error: operation not supported when stream is " \
                           "capturing"


def test_a_training_step_s_graph_resets_the_gradients_before_each_captured_forward(monkeypatch):
    """The phases a graph captures are measurement's: each forward sets q, k, v's grads to None first, so a
    captured step never accumulates into the grads of the one before."""
    from profiling import measurement
    w = Workload.cpu_default(seq_len=16, passes="fwd+bwd")
    x = w.make_inputs().with_grad()
    forward, backward = measurement._phases(VARIANTS["naive"], x)
    forward()
    backward()
    first = x.q.grad
    forward()
    assert x.q.grad is None
    backward()
    assert x.q.grad is not first and torch.allclose(x.q.grad, first)


# -- the field: refused on a CPU, said in words and names, never mixed ---------------------------------------------
@pytest.mark.parametrize("mode", ["cold", "graph"])
def test_cold_and_graph_are_refused_on_a_cpu_in_one_line_naming_the_field(mode):
    with pytest.raises(Refusal) as refused:
        Request.build(LIVE, "naive", "sdpa_flash", {"timing": mode}, "cpu")
    assert refused.value.field == "timing" and "\n" not in str(refused.value)
    assert str(refused.value).startswith(f"timing='{mode}' is not allowed: cold and graph time a GPU")
    request = Request.build("h200-torch2.11", "naive", "sdpa_flash", {"timing": mode}, "cpu")  # a recording's GPU
    assert request.workload.timing == mode and request.workload.device == "cuda"


def test_the_timing_is_said_in_the_workload_s_words_and_names_its_traces():
    warm, cold, graph = (Workload.blog(timing=m) for m in ("warm", "cold", "graph"))
    assert warm.words() == "B=8, H=16, S=1024, D=64, bf16, causal"           # warm is what every recording was
    assert cold.words().endswith(", cold L2") and graph.words().endswith(", CUDA graph")
    assert len({warm.tag(), cold.tag(), graph.tag()}) == 3 and warm.tag() == "B8H16S1024D64_bf16_causal_r4"
    assert Request.build("h200-torch2.11", "naive", "sdpa_flash", {"timing": "graph"}, "cpu") \
        .to_query()["timing"] == "graph"


def test_a_comparison_never_mixes_timing_modes():
    flash = find_recorded("h200-torch2.11", "sdpa_flash", Workload.blog())
    cold = dataclasses.replace(flash, variant="sdpa_cudnn", workload=Workload.blog(timing="cold"))
    assert facts.peers_for(flash, [cold]) == {}                                # a cold run is no warm run's peer
    found = find_recorded("h200-torch2.11", "sdpa_flash", Workload.blog(timing="cold"))
    assert found.workload.timing == "cold" and found.timing is not found.warm_timing   # the cold run, not the warm
    assert found.timing.median_ms != flash.timing.median_ms
    unrecorded = Workload.blog(seq_len=2048, timing="cold")
    assert "S=2048, D=64, bf16, causal, cold L2" in unrecorded_message("h200-torch2.11", unrecorded)


# -- the clocks: read where a tool answers, never a failure where none does --------------------------------------
def test_nvidia_smi_s_row_is_the_gpu_torch_uses():
    out = "00000000:17:00.0, 1980, 3201, 1980, Disabled\n00000000:2A:00.0, 345, 3201, 1980, [N/A]\n"
    assert parse_smi(out, (0, 0x2A, 0)) == {"sm": 345, "mem": 3201, "max_sm": 1980, "mig": None}
    assert parse_smi(out, (0, 0x17, 0))["mig"] is False
    assert parse_smi("00000000:17:00.0, 1755, 3201, 1980, Enabled\n", None) == {"sm": 1755, "mem": 3201,
                                                                                  "max_sm": 1980, "mig": True}
    assert parse_smi(out, None) is None and parse_smi(out, (0, 0x99, 0)) is None  # not knowing which: none
    assert parse_smi("", (0, 0x17, 0)) is None


def test_no_nvml_and_no_nvidia_smi_reads_no_clocks_and_fails_nothing(monkeypatch):
    monkeypatch.setattr(environment.shutil, "which", lambda name: None)
    monkeypatch.setattr(environment, "_nvml", lambda pci, static=True: None)
    assert environment.read_clocks(0) is None and environment.gpu_state(0) is None


def test_a_failing_nvidia_smi_reads_no_clocks(monkeypatch):
    monkeypatch.setattr(environment.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(environment, "_nvml", lambda pci, static=True: None)

    def fails(*args, **kwargs):
        raise OSError("nvidia-smi: no devices were found")
    monkeypatch.setattr(environment.subprocess, "run", fails)
    assert environment.read_clocks(0) is None


class FakeNVML:
    """libnvidia-ml as ctypes sees it: each function writes through its pointer arguments and returns NVML's code
    (0 success, 3 not supported). The clocks of one H200 under load, at the PCI address 0000:17:00.0."""
    def __init__(self, mig_supported=True):
        self.asked, self.mig_supported = [], mig_supported

    @staticmethod
    def _put(pointer, value):
        import ctypes
        ctypes.cast(pointer, ctypes.POINTER(type(pointer._obj))).contents.value = value

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id, handle):
        self.asked.append(bus_id)
        return 0 if bus_id == b"00000000:17:00.0" else 6  # NVML_ERROR_NOT_FOUND

    def nvmlDeviceGetClockInfo(self, handle, kind, value):
        self._put(value, {1: 1980, 2: 3201}[kind])        # NVML_CLOCK_SM, NVML_CLOCK_MEM
        return 0

    def nvmlDeviceGetMaxClockInfo(self, handle, kind, value):
        self._put(value, 1980)
        return 0

    def nvmlDeviceGetMigMode(self, handle, current, pending):
        if not self.mig_supported:
            return 3
        self._put(current, 1)
        return 0


def test_the_clocks_are_read_through_nvmls_library_by_the_gpus_pci_address(monkeypatch):
    fake = FakeNVML()
    monkeypatch.setattr(environment, "_nvml_library", lambda: fake)
    assert environment._nvml((0, 0x17, 0)) == {"sm": 1980, "mem": 3201, "max_sm": 1980, "mig": True}
    assert environment._nvml((0, 0x18, 0)) is None and fake.asked == [b"00000000:17:00.0", b"00000000:18:00.0"]
    monkeypatch.setattr(environment, "_nvml_library", lambda: FakeNVML(mig_supported=False))
    assert environment._nvml((0, 0x17, 0))["mig"] is None   # a GPU without MIG: not known, not "off"
    monkeypatch.setattr(environment, "_nvml_library", lambda: None)
    assert environment._nvml((0, 0x17, 0)) is None          # no library here: nvidia-smi is asked instead


def test_a_measurement_s_clock_read_asks_nvml_for_the_two_clocks_alone(monkeypatch):
    """Each NVML query took ~4 ms on a lent H100's host, the GPU parked while it ran: the clocks read under load ask
    for the SM and memory clocks alone (the maximum and the MIG mode are read once a process)."""
    fake = FakeNVML()
    asked = []
    for name in ("nvmlDeviceGetClockInfo", "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetMigMode"):
        original = getattr(fake, name)
        setattr(fake, name, lambda *args, name=name, original=original: asked.append(name) or original(*args))
    monkeypatch.setattr(environment, "_nvml_library", lambda: fake)
    monkeypatch.setattr(environment, "_device_pci", lambda index: (0, 0x17, 0))
    assert environment.read_clocks(0) == environment.Clocks(1980, 3201)
    assert asked == ["nvmlDeviceGetClockInfo"] * 2


def test_no_nvml_library_on_this_machine_is_none_not_a_failure():
    environment._nvml_library.cache_clear()
    try:
        library = environment._nvml_library()
    finally:
        environment._nvml_library.cache_clear()
    assert library is None or hasattr(library, "nvmlDeviceGetClockInfo")  # there or not; never an exception


def test_the_readme_says_the_batches_and_the_park_the_code_takes():
    from pathlib import Path
    readme = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text().split())
    assert (f"up to {timing.BATCH_GPU_S * 1000:g} ms of GPU work, {timing.BATCH_CALLS} calls and "
            f"{timing.QUEUE_LAUNCHES} launches (a call counted as one launch per {timing.MIN_LAUNCH_S * 1e6:g} µs of its "
            f"GPU time") in readme
    assert f"or per {timing.MIN_LAUNCH_HOST_S * 1e6:g} µs of the host's issue of it, the fewer" in readme
    assert f"behind one park, which lasts {timing.PARK_MARGIN:g}× the host's measured lead" in readme
    assert "twice at most" in readme and timing.PARK_RETRIES == 2
    assert f"the median of its last {timing.ISSUE_WINDOW} samples'" in readme
    assert (f"within {timing.LOOP_BIAS:.0%} of the loop, 2 to {timing.LOOP_CALLS}" in readme
            and f"parked for {timing.PARK_MARGIN:g}× the calls' issue" in readme)
