"""Issue 56 on a CPU: the matmul rate behind the roofline's compute roof (a fake timer: the FLOPs over the median,
once a process and dtype), and the energy per call (a fake NVML whose counter runs at a set power on the fake GPU's
clock: joules a call re-derived from the power and a call's time; each refusal in its one line; the note where the
faster run is not the cheaper one, word for word; the fields' round trip). The GPU's own figures are
bench/h200/energy_check.py's."""
from __future__ import annotations

import copy
import gc
import dataclasses
import json
from types import SimpleNamespace

import pytest
import torch

from explain_helpers import assert_numbers_are_the_runs, comparison_context, recorded, with_env
from test_timing_modes import GPU, FakeGPU, FakeGraphs, FakeNVML, subject, warm

from attention_variants import VARIANTS
from profiling import budget, environment, measurement, reports, roofline, text, timing
from profiling.explain import energy_rules, explain
from profiling.results import Comparison, Energy, Run
from profiling.workload import Workload

N = timing.MATMUL_N


# -- the matmul rate: the roofline's compute roof ---------------------------------------------------------------------
@pytest.fixture
def products(monkeypatch):
    """A fake timer of the square products: each dtype's seconds as given, every call logged."""
    asked = []
    seconds = {"bf16": [2.0e-3, 1.4e-3, 1.5e-3, 1.4e-3, 9.0e-3], "fp8": [0.8e-3] * 5, "fp32": [20e-3] * 5}

    def product_seconds(dtype, n, repeats):
        asked.append((dtype, n, repeats))
        return seconds[dtype]
    timing._matmul_rate.cache_clear()
    monkeypatch.setattr(timing, "_product_seconds", product_seconds)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (80 * 2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda: (9, 0))
    yield asked
    timing._matmul_rate.cache_clear()


def test_the_matmul_rate_is_2n3_flops_over_the_median_product_measured_once_a_process_and_dtype(products):
    rate = timing.matmul_rate("bf16")
    assert rate == 2 * 8192**3 / 1.5e-3                            # the median of the five, not the best or the mean
    assert timing.matmul_rate("bf16") == rate and products == [("bf16", N, timing.MATMUL_REPEATS)]  # once
    assert timing.matmul_rate("fp8") == 2 * 8192**3 / 0.8e-3 and len(products) == 2   # a dtype of its own


def test_fp8_s_rate_is_absent_before_compute_capability_8_9_and_fp32_s_follows_the_tf32_setting(products, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda: (8, 0))   # an A100: no e4m3 tensor cores
    assert timing.matmul_rate("fp8") is None and products == []
    monkeypatch.setattr(timing, "matmul_tf32", lambda: False)
    timing.matmul_rate("fp32")
    monkeypatch.setattr(timing, "matmul_tf32", lambda: True)
    timing.matmul_rate("fp32")
    assert [p[0] for p in products] == ["fp32", "fp32"]           # measured again under the other setting


def test_a_gpu_short_of_memory_for_the_three_matrices_has_no_rate(products, monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (300 * 2**20, 80 * 2**30))
    assert timing.matmul_rate("bf16") is None and products == []


def test_a_measurement_fills_the_rates_of_its_dtype_and_of_an_fp8_run_s_drawn_dtype(products, monkeypatch):
    monkeypatch.setattr(timing, "copy_ceiling", lambda: 4.0e12)
    env = measurement._roofs(GPU, [Workload.blog(dtype="fp8")])
    assert env.copy_bytes_per_s == 4.0e12
    assert env.matmul_flops_per_s == {"bf16": 2 * N**3 / 1.5e-3, "fp8": 2 * N**3 / 0.8e-3}
    monkeypatch.setattr(timing, "matmul_tf32", lambda: False)
    fp32 = measurement._roofs(GPU, [Workload.blog(dtype="fp32")])
    assert set(fp32.matmul_flops_per_s) == {"fp32"} and fp32.matmul_tf32 is False


def test_a_roofline_point_re_derived_against_the_measured_compute_roof():
    """The blog run's point under a bf16 matmul measured at 700 TFLOP/s: its share of the roof by hand."""
    run = with_env(recorded("sdpa_flash"), matmul_flops_per_s={"bf16": 700e12})
    b, h, s, d = 8, 16, 1024, 64
    flops = 4 * d * h * b * s * (s + 1) // 2                      # the causal pairs' two products
    achieved = flops / (run.timing.median_ms / 1e3)               # FLOPs per second
    roofs = roofline.roofs_of([run])
    assert roofs.compute == roofline.Roof("compute", 700e12, True, "bf16 matmul")
    assert roofs.compute.label == "bf16 matmul 700 TFLOP/s, measured"
    assert roofline.Roof("compute", 989e12, False, "bf16 peak") in roofs.beside   # the datasheet's, drawn thin
    (point,) = roofline.points(run)
    assert point.tflops * 1e12 / roofs.compute.value == pytest.approx(achieved / 700e12, rel=1e-12)
    said = roofline.caption([run])
    assert "Compute roof: a large bf16 matmul measured on this GPU in the run’s process, 700 TFLOP/s in bf16; the " \
           "datasheet’s peak drawn thin beside it." in said
    fp32 = with_env(recorded("sdpa_flash"), matmul_flops_per_s={"fp32": 300e12}, matmul_tf32=True)
    fp32 = dataclasses.replace(fp32, workload=fp32.workload.replace(dtype="fp32"))
    assert roofline.roofs_of([fp32]).compute.what == "fp32 matmul (TF32 allowed)"


# -- energy per call: a fake NVML whose counter runs at a set power on the fake GPU's clock ---------------------------
class EnergyNVML(FakeNVML):
    """The fake library with an energy counter: `watts` times the fake GPU's clock, in mJ (None: not supported)."""

    def __init__(self, gpu, watts: float | None = 500.0):
        super().__init__()
        self.gpu, self.watts = gpu, watts

    def nvmlDeviceGetTotalEnergyConsumption(self, handle, value):
        if self.watts is None:
            return 3                                              # NVML_ERROR_NOT_SUPPORTED
        self._put(value, 7_000_000 + round(self.watts * self.gpu.clock * 1000))
        return 0


def fake_gpu_and_nvml(mp) -> tuple[FakeGPU, EnergyNVML]:
    """test_timing_modes' fake GPU in torch.cuda's and timing's place (its `gpu` fixture), and the fake library at
    its PCI address."""
    fake = FakeGPU()
    mp.setattr(torch.cuda, "Event", fake.Event)
    mp.setattr(torch.cuda, "current_stream", lambda: None)
    mp.setattr(torch.cuda, "synchronize", fake.synchronize)
    mp.setattr(timing, "_park_gpu", fake.park)
    mp.setattr(timing, "time", SimpleNamespace(perf_counter=fake.now))
    library = EnergyNVML(fake)
    mp.setattr(environment, "_nvml_library", lambda: library)
    mp.setattr(environment, "_device_pci", lambda index: (0, 0x17, 0))
    return fake, library


@pytest.fixture
def faked(monkeypatch):
    return fake_gpu_and_nvml(monkeypatch)


@pytest.fixture
def gpu(faked):
    return faked[0]


@pytest.fixture
def nvml(faked):
    return faked[1]


def energy_of(s) -> tuple[Energy | None, str | None]:
    timing.energy([s], lambda: None)
    return s.run.energy, s.run.energy_refused


def test_joules_a_call_are_the_power_times_a_call_s_time_over_back_to_back_calls(gpu, nvml):
    s = subject(gpu, host_s=(2e-4,))                              # each call 0.2 ms on the GPU, as long to issue
    s.graph = None
    e, refused = energy_of(s)
    assert refused is None and e.loop == "calls back to back"
    assert e.seconds >= timing.ENERGY_LOOP_S and e.calls == pytest.approx(e.seconds / 2e-4, abs=1)
    assert e.watts == pytest.approx(500.0, rel=1e-3)
    assert e.joules_per_call == pytest.approx(500.0 * 2e-4, rel=1e-3)   # 0.1 J: the power times a call's time


def test_a_graph_run_s_loop_replays_its_graph_and_counts_its_calls_not_its_replays(gpu, nvml, monkeypatch):
    FakeGraphs(gpu, monkeypatch, call_s=1e-4)
    s = warm(subject(gpu, host_s=(1e-4,), timing="graph"), 0.1)
    timing.time_graph([s], lambda: None)
    graph, calls = s.graph.graph, s.graph.calls
    assert calls == 2                                              # 0.1 ms calls: two a graph
    replay = graph.replay
    graph.replay = lambda: (gpu.host(5e-5), replay())             # a replay costs the host 50 µs, the GPU 0.2 ms
    e, refused = energy_of(s)
    assert refused is None and e.loop == "calls replayed in the timing's CUDA graph (2 a replay)"
    assert e.seconds == pytest.approx(4 * timing.ENERGY_LOOP_S, rel=0.01)  # the GPU's queue: 4x the host's second
    assert e.joules_per_call == pytest.approx(500.0 * 1e-4, rel=1e-3)   # the power times one call's 0.1 ms
    assert "phase0" not in gpu.log[-10:]                           # replays, no calls made afresh


def test_a_training_step_s_graph_keeps_the_events_inside_it_alive_for_the_energy_loop(gpu, nvml, monkeypatch):
    """Found on the lent H100: the graph part died in cuGraphLaunch (a segfault) at its first training step, the
    energy loop replaying the graph whose forward/backward events, recorded inside it, the timing had let go (a
    graph holds their handles only). The forward-only graphs before it hold no events and replayed fine."""
    FakeGraphs(gpu, monkeypatch, call_s=1e-4)
    s = warm(subject(gpu, host_s=(1e-4, 3e-4), passes="fwd+bwd", timing="graph"), 0.4)
    timing.time_graph([s], lambda: None)
    gc.collect()
    graph = s.graph.graph
    assert len(graph.events) == 3 * s.graph.calls  # before the forward, the backward, and after: each captured call
    replay = graph.replay
    graph.replay = lambda: (gpu.host(5e-5), replay())             # a replay costs the host 50 µs (the loop's clock)
    e, refused = energy_of(s)
    assert refused is None and e.loop.startswith("calls replayed in the timing's CUDA graph")


def test_a_mig_slice_is_refused_in_one_line_before_any_call(gpu, nvml):
    s = subject(gpu, env=dataclasses.replace(GPU, mig=True))
    s.graph = None
    e, refused = energy_of(s)
    assert e is None and "\n" not in refused and refused.startswith("a MIG slice: NVML's energy counter is the whole "
                                                                    "GPU's")
    assert "phase0" not in gpu.log


def test_no_nvml_and_no_counter_are_refused_each_in_its_line(gpu, nvml, monkeypatch):
    s = subject(gpu)
    s.graph = None
    nvml.watts = None
    assert energy_of(s) == (None, "NVML gives no energy counter for this GPU (nvmlDeviceGetTotalEnergyConsumption "
                                  "returned error 3)")
    monkeypatch.setattr(environment, "_nvml_library", lambda: None)
    assert energy_of(s) == (None, "NVML is absent (libnvidia-ml.so.1 did not load or start): no energy counter to "
                                  "read")
    assert "phase0" not in gpu.log


def test_a_counter_that_does_not_move_is_refused_with_its_readings(gpu, nvml):
    s = subject(gpu, host_s=(2e-4,))
    s.graph = None
    nvml.watts = 0.0
    e, refused = energy_of(s)
    calls = gpu.log.count("phase0")
    assert e is None and refused == (f"NVML's energy counter did not move over {calls:,} calls back to back in 1.00 s "
                                     "(it read 7,000,000 mJ before and 7,000,000 mJ after)")


def test_a_budget_too_short_for_the_loop_is_refused_not_stopped(gpu, nvml):
    s = subject(gpu)
    s.graph = None
    timing.energy([s], lambda: None, left_s=lambda: 1.5)
    assert s.run.energy is None and s.run.energy_refused.startswith("the time budget had 1.5 s left")


# -- what is stored, shown and said ------------------------------------------------------------------------------------
FLASH = Energy(start_mj=1_000_000, end_mj=1_300_000, seconds=1.0, calls=10_000, loop="calls back to back")  # 300 W
CUDNN = Energy(start_mj=2_000_000, end_mj=2_704_000, seconds=1.0, calls=16_000, loop="calls back to back")  # 704 W


def with_energy(variant: str, energy: Energy | None = None, refused: str | None = None) -> Run:
    return dataclasses.replace(recorded(variant), energy=copy.deepcopy(energy), energy_refused=refused)


def test_the_energy_fields_round_trip_and_an_older_run_reads_them_as_absent():
    run = with_energy("sdpa_cudnn", CUDNN)
    data = json.loads(json.dumps(run.to_dict()))
    assert (data["energy"]["joules_per_call"], data["energy"]["watts"]) == (pytest.approx(0.044), 704.0)  # a client's
    back = Run.from_dict(data)
    assert back.energy == CUDNN and back.energy_refused is None
    refused = Run.from_dict(with_energy("sdpa_cudnn", refused="a MIG slice: …").to_dict())
    assert refused.energy is None and refused.energy_refused == "a MIG slice: …"
    older = recorded("sdpa_cudnn").to_dict()
    del older["energy"], older["energy_refused"]
    assert Run.from_dict(older).energy is None and Run.from_dict(older).energy_refused is None


def test_the_faster_run_that_is_not_the_cheaper_is_said_word_for_word():
    """cuDNN is 1.6× faster than flash at the blog workload (the H200 recording), and here drew 704 W against 300 W."""
    c = Comparison(with_energy("sdpa_flash", FLASH), with_energy("sdpa_cudnn", CUDNN))
    (n,) = [n for n in explain(c).notes if n.rule == "faster_not_cheaper"]
    assert n.side == "pair"
    assert n.title == ("SDPA · cuDNN is 1.6× faster, SDPA · FlashAttention the cheaper: 30.0 mJ a call against "
                       "44.0 mJ")
    assert n.body == ("NVML's energy counter (the whole GPU's) over a loop of a second or more of each: the faster "
                      "drew 704 W, the slower 300 W, so the faster spent 1.5× the energy a call.")
    assert_numbers_are_the_runs(n, comparison_context(c, n))
    assert n.facts["more"].value == pytest.approx((0.704 / 16) / (0.3 / 10))


def test_no_such_note_within_what_the_counter_s_steps_leave_unknown_or_where_the_faster_is_the_cheaper():
    close = dataclasses.replace(CUDNN, end_mj=2_000_000 + round(0.03 * 1.15 * 16_000 * 1000))  # 15% above flash's
    assert energy_rules.resolution(with_energy("sdpa_cudnn", close)) == pytest.approx(0.1)
    for cudnn in (close, dataclasses.replace(CUDNN, end_mj=2_300_000)):  # within the steps; cheaper and faster
        c = Comparison(with_energy("sdpa_flash", FLASH), with_energy("sdpa_cudnn", cudnn))
        assert not [n for n in explain(c).notes if n.rule == "faster_not_cheaper"]


def test_a_refusal_is_a_note_and_a_row_and_the_measured_figures_stand_beside_each_other():
    why = "a MIG slice: NVML's energy counter is the whole GPU's"
    c = Comparison(with_energy("sdpa_flash", refused=why), with_energy("sdpa_cudnn", refused=why))
    (n,) = [n for n in explain(c).notes if n.rule == "energy_not_measured"]
    assert (n.side, n.title, n.body) == ("both", "Energy per call not measured", "A MIG slice: NVML's energy counter "
                                                                                  "is the whole GPU's.")
    assert "| energy per forward (whole GPU) | not measured | not measured |" in reports.comparison_table(c)
    shown = reports.comparison_table(Comparison(with_energy("sdpa_flash", FLASH), with_energy("sdpa_cudnn", CUDNN)))
    assert "| energy per forward (whole GPU) | 30.0 mJ | 44.0 mJ |" in shown
    assert "| mean power over its loop | 300 W | 704 W |" in shown
    assert "energy per forward" not in reports.comparison_table(Comparison(recorded("sdpa_flash"),
                                                                           recorded("sdpa_cudnn")))  # not asked
    assert reports.summary_line(with_energy("sdpa_flash", FLASH)).endswith(
        "energy 30.0 mJ per forward at 300 W (10,000 calls back to back over 1.00 s)")


def test_a_live_gpu_comparison_prices_its_energy_loops_and_a_sweep_does_not():
    w = Workload.blog()
    pair = [VARIANTS["sdpa_flash"], VARIANTS["sdpa_cudnn"]]
    reasons = {"sdpa_flash": None, "sdpa_cudnn": None}
    plain = budget.predicted_seconds(w, pair, GPU, reasons=reasons)
    assert budget.predicted_seconds(w, pair, GPU, reasons=reasons, energy=True) - plain == \
        pytest.approx(2 * (timing.ENERGY_LOOP_S + 0.1))
    assert budget.energy_seconds(Workload.cpu_default()) == 0.0
    assert [text.joules(j) for j in (0.704 / 16, 0.9999, 4.1e-5)] == ["44.0 mJ", "1.00 J", "41.0 µJ"]


def test_the_command_line_measures_energy_by_default_and_no_energy_switches_it_off():
    from profiling.__main__ import build_parser
    parse = build_parser().parse_args
    assert parse(["record", "--out", "x"]).energy and not parse(["record", "--out", "x", "--no-energy"]).energy
    assert parse(["compare", "naive", "sdpa_flash"]).energy and \
        not parse(["compare", "naive", "sdpa_flash", "--no-energy"]).energy
