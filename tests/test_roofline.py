"""The roofline: a run's point re-derived by hand from its workload and its timing, the roofs measured where the
recording measured them and the datasheet's (named so) elsewhere, warm and cold points from their own timings, the
L2 said only where a point shows it, and a CPU run's refusal in one line."""
from __future__ import annotations

import dataclasses

from explain_helpers import RUNS, recorded, with_env

from profiling import figures, roofline, text
from profiling.environment import Environment
from profiling.results import Comparison, Run
from profiling.workload import Workload


def test_the_blog_runs_point_is_its_flops_over_its_bytes_and_its_time_re_derived_by_hand():
    run = recorded("sdpa_flash")  # B=8, H=16, S=1024, D=64, bf16, causal, a forward, warm
    b, h, s, d = 8, 16, 1024, 64
    flops = 4 * d * h * b * s * (s + 1) // 2           # two matmuls, 2 FLOPs a multiply-add, the causal pairs
    tensor = b * h * s * d * 2                          # one of q, K, V, out in bf16
    moved = 4 * tensor                                  # q, K, V read once, out written once
    (point,) = roofline.points(run)
    assert point.flops == flops and point.bytes == moved == 67_108_864 and not point.cold
    assert point.ms == run.timing.median_ms
    assert abs(point.intensity - flops / moved) < 1e-9
    assert abs(point.tflops - flops / (run.timing.median_ms / 1e3) / 1e12) < 1e-9
    assert abs(point.tflops - run.tflops) < 1e-9       # the TFLOP/s line of the report, the same figure


def test_the_roofs_are_the_recordings_measured_copy_and_the_datasheets_peak_named_so():
    run = recorded("sdpa_flash")
    roofs = roofline.roofs_of([run])
    assert roofs.memory.measured and roofs.memory.value == run.environment.copy_bytes_per_s
    assert not roofs.compute.measured and roofs.compute.value == 989e12 and "datasheet" in roofs.compute.label
    assert [(r.kind, r.value, r.measured) for r in roofs.beside] == [("memory", 4.8e12, False)]
    bare = with_env(run, copy_bytes_per_s=None)  # no copy measured: the datasheet's HBM, said to be
    assert roofline.roofs_of([bare]).memory == roofline.Roof("memory", 4.8e12, False, "HBM")
    timed = with_env(run, matmul_flops_per_s={"bf16": 793e12})  # a measured matmul: the roof, the datasheet beside
    roofs = roofline.roofs_of([timed])
    assert roofs.compute.measured and roofs.compute.value == 793e12
    assert ("compute", 989e12, False) in [(r.kind, r.value, r.measured) for r in roofs.beside]


def test_the_matmul_rate_is_serialised_and_an_older_environment_loads_without_it():
    env = dataclasses.replace(RUNS[0].environment, matmul_flops_per_s={"bf16": 793e12})
    assert Environment.from_dict(env.to_dict()) == env
    older = RUNS[0].environment.to_dict()
    del older["matmul_flops_per_s"]
    assert Environment.from_dict(older).matmul_flops_per_s is None


def test_a_cold_run_has_a_warm_point_filled_and_a_cold_one_hollow_each_from_its_own_timing():
    run = recorded("sdpa_flash", timing="cold")
    warm, cold = roofline.points(run)
    assert (warm.cold, warm.ms) == (False, run.warm_timing.median_ms)
    assert (cold.cold, cold.ms) == (True, run.timing.median_ms)
    backward = recorded("sdpa_flash", timing="cold", passes="bwd")  # its warm events are a whole step's: not drawn
    assert [p.cold for p in roofline.points(backward)] == [True]


def test_the_l2_is_named_only_where_a_warm_point_stands_above_the_memory_roof_and_its_working_set_fits_it():
    run = recorded("sdpa_flash")
    assert "Above the memory roof" not in roofline.caption([run])
    (point,) = roofline.points(run)
    assert point.working_set == point.bytes == 67_108_864  # q, K, V, out: each touched once
    slow = with_env(run, copy_bytes_per_s=point.bytes_per_s / 2)  # a copy half as fast as the run moved its bytes
    assert roofline.above_memory_roof(roofline.points(slow), roofline.roofs_of([slow])) == [point]
    assert run.environment.l2_cache_bytes < point.working_set  # 64 MiB of tensors, a 60 MiB L2: not resident
    assert "fits" not in roofline.caption([slow]) and f"beyond the {text.size(60 * 2**20)} L2 (sdpa_flash (warm))" in \
        roofline.caption([slow])
    big_l2 = with_env(slow, l2_cache_bytes=2 * point.working_set)
    assert f"Above the memory roof, warm (sdpa_flash): its working set fits the {text.size(2**27)} L2" in \
        roofline.caption([big_l2])


def test_a_recorded_decode_step_above_the_copy_is_not_called_l2_residency():
    """A decode step over a 2 GiB KV cache read faster than the copy, warm and cold alike: HBM, not the L2."""
    run = recorded("sdpa_cudnn", batch=64, heads=32, kv_heads=8, seq_len=8192, q_len=1, head_dim=128, timing="cold")
    warm, cold = roofline.points(run)
    assert min(warm.bytes_per_s, cold.bytes_per_s) > run.environment.copy_bytes_per_s  # the recording's figures
    said = roofline.caption([run])
    assert "beyond the" in said and "fits the" not in said


def test_a_cpu_run_has_no_roofline_and_says_why_in_one_line():
    run = recorded("sdpa_flash")
    cpu = dataclasses.replace(run, environment=dataclasses.replace(run.environment, device="cpu"),
                              workload=Workload.blog(device="cpu"))
    reason = roofline.refusal([cpu, cpu])
    assert reason.startswith("No roofline: a CPU run") and "\n" not in reason
    assert figures.roofline_figure(Comparison(cpu, cpu)) is None
    assert roofline.refusal([run]) is None and figures.roofline_figure(Comparison(run, run)) is not None


def test_an_fp8_twin_beside_its_base_draws_both_dtypes_measured_matmul_roofs():
    """FA3 in fp8 beside FA3 in bf16 (the H100 recording's 16k prefill): the compute roof is the fp8 matmul the
    process measured, and the bf16 matmul it measured is drawn thin beside it, so B is read against its own dtype's
    ceiling (there, within 2% of it); the caption names each and the one process they came from."""
    from profiling import session
    from profiling.request import Request

    answer = session.compare(Request.build("h100-torch2.11", "fa3_fp8", "fa3",
                                           {"batch": 1, "heads": 16, "seq_len": 16384, "head_dim": 128}, "cpu"))
    a, b = answer.result.a, answer.result.b
    r = roofline.roofs_of([a, b])
    rates = a.environment.matmul_flops_per_s
    assert (r.compute.what, r.compute.value, r.compute.measured) == ("fp8 matmul", rates["fp8"], True)
    (bf16,) = [x for x in r.beside if x.kind == "compute"]
    assert (bf16.what, bf16.value, bf16.measured) == ("bf16 matmul", b.environment.matmul_flops_per_s["bf16"], True)
    (point,) = roofline.points(b)
    assert 0.95 < point.tflops * 1e12 / bf16.value < 1.0  # FA3's bf16 forward at the bf16 matmul's pace
    said = roofline.caption([a, b])
    assert "a large fp8 matmul measured on this GPU in the run’s process" in said
    assert f"Thin beside it, the bf16 matmul measured the same way for the runs in bf16: {bf16.figure}." in said
