"""The trace parser against real Chrome traces recorded on an NVIDIA H200 (torch 2.11, cuDNN 9.19).

tests/data/h200-torch2.11 holds the runs and gzipped traces that `python -m profiling record` wrote there. The
recording stores each run's kernel table and host ops once (`load_recorded` no longer re-parses them); here the
parser of today is run on every trace and must give those stored tables back, row by row. A parser change that
alters a row the notes read shows up as a difference, and the recording is re-recorded or the change undone.
"""
import dataclasses
import math
import re
import statistics
from pathlib import Path

import pytest

from explain_helpers import RUNS as RECORDED  # the tests' one load of the recording (read-only)
from profiling.results import RUNS_FILE, HostOp, Kernel, Run, read_stored, share_by_phase
from profiling.trace import RANGES, load_trace, summarize_trace
from profiling.workload import Workload

DATA = Path(__file__).parent / "data" / "h200-torch2.11"
RUNS = RECORDED
TRACED = [r for r in RUNS if r.trace_path]


def recorded(variant: str, **changes) -> Run:
    """The recorded run of `variant` at the blog workload with `changes`."""
    workload = Workload.blog(**changes)
    (run,) = [r for r in RUNS if r.variant == variant and r.workload == workload]
    return run


def parsed(variant: str, **changes):
    return summarize_trace(load_trace(recorded(variant, **changes).trace_path))


def by_category(summary, category):
    return [k for k in summary.kernels if k.category == category]


def differences(parsed_value, stored_value, path: str = "") -> list[str]:
    """Where two rows (dataclasses, lists, numbers) differ: equal but for the last bits of a float sum (Python
    3.12's sum() rounds differently from 3.11's, and the Space runs 3.10)."""
    if dataclasses.is_dataclass(parsed_value) and dataclasses.is_dataclass(stored_value):
        if type(parsed_value) is not type(stored_value):
            return [f"{path}: {type(parsed_value).__name__} vs {type(stored_value).__name__}"]
        return [d for f in dataclasses.fields(parsed_value)
                for d in differences(getattr(parsed_value, f.name), getattr(stored_value, f.name), f"{path}.{f.name}")]
    if isinstance(parsed_value, list) and isinstance(stored_value, list):
        if len(parsed_value) != len(stored_value):
            return [f"{path}: {len(parsed_value)} rows parsed, {len(stored_value)} stored"]
        return [d for i, (p, s) in enumerate(zip(parsed_value, stored_value))
                for d in differences(p, s, f"{path}[{i}]")]
    if isinstance(parsed_value, float) and isinstance(stored_value, (int, float)) \
            and not isinstance(stored_value, bool):
        return [] if math.isclose(parsed_value, stored_value, rel_tol=1e-9, abs_tol=1e-12) else \
            [f"{path}: parsed {parsed_value!r}, stored {stored_value!r}"]
    return [] if parsed_value == stored_value else [f"{path}: parsed {parsed_value!r}, stored {stored_value!r}"]


def test_differences_finds_a_changed_row():
    """The comparison below would catch a parser that moved one number, renamed one kernel or dropped a launch."""
    run = recorded("naive")
    moved = [dataclasses.replace(k) for k in run.kernels]
    moved[2] = dataclasses.replace(moved[2], us_per_forward=moved[2].us_per_forward * 1.001)
    assert differences(moved, run.kernels) == [f"[2].us_per_forward: parsed {moved[2].us_per_forward!r}, "
                                               f"stored {run.kernels[2].us_per_forward!r}"]
    renamed = [dataclasses.replace(k) for k in run.kernels]
    renamed[0] = dataclasses.replace(renamed[0], short_name=renamed[0].short_name + " (renamed)")
    assert differences(renamed, run.kernels) and differences(run.kernels[:-1], run.kernels)
    fewer = [dataclasses.replace(k, launched_by=k.launched_by[:0]) for k in run.kernels]
    assert differences(fewer, run.kernels)


def test_recording_is_from_an_h200():
    env = RUNS[0].environment
    assert env.device_name == "NVIDIA H200" and env.compute_capability == (9, 0) and env.sm == "sm90"
    assert env.torch_release == (2, 11) and env.cudnn_version == 91900
    machine = dataclasses.replace(env, copy_bytes_per_s=None)  # the copy ceiling is measured once per process
    assert all(dataclasses.replace(r.environment, copy_bytes_per_s=None) == machine for r in RUNS)
    ceilings = {r.environment.copy_bytes_per_s for r in RUNS if r.ok}  # a refused run measured nothing, this neither
    assert None not in ceilings  # and the same HBM each time (~4.8 TB/s peak):
    assert max(ceilings) / min(ceilings) < 1.05 and 3.5e12 < min(ceilings)


def test_the_stored_tables_are_what_the_runs_file_holds_not_a_parse_at_load():
    stored = read_stored(DATA / RUNS_FILE)
    assert len(stored) == len(RUNS)
    for data, run in zip(stored, RUNS):
        assert run.kernels == share_by_phase([Kernel.from_dict(k) for k in data.get("kernels", [])]), run.variant
        assert run.host_ops == [HostOp(**h) for h in data.get("host_ops", [])], run.variant
    # every run that ran kept its trace; one that did not has none
    assert [r.ok for r in RUNS] == [r.trace_path is not None for r in RUNS] and len(TRACED) >= 40
    assert all(Path(r.trace_path).is_file() for r in TRACED)


def test_every_recorded_trace_parses_to_its_stored_tables_row_by_row():
    """The recorded kernel tables, stored once, against the parser run on the traces: every kernel row (name,
    category, calls, µs, share, launch dimensions, registers, occupancy, launch API, precision, launching op
    chains), every host op, the backend, the count per forward and the profiled range."""
    found = []
    for run in TRACED:
        summary = summarize_trace(load_trace(run.trace_path))
        where = f"{run.variant} · {run.workload.words()}"
        found += [f"{where} kernels{d}" for d in differences(summary.kernels, run.kernels)]
        found += [f"{where} host_ops{d}" for d in differences(summary.host_ops, run.host_ops)]
        found += [f"{where} {name}{d}" for name, parsed_value, stored_value in (
            ("backend", summary.backend, run.backend), ("launches", summary.launches, run.launches("step")),
            ("forwards", summary.forwards, run.profiled_forwards),
            ("profiled_host_ms", summary.profiled_host_ms, run.profiled_host_ms),
            ("profiled_host_mean_ms", summary.profiled_host_mean_ms, run.profiled_host_mean_ms))
            for d in differences(parsed_value, stored_value)]
        assert summary.forwards == 3 and summary.kernels and summary.host_ops, where
        for phase in {k.phase for k in summary.kernels}:  # each phase's shares add up to its whole
            assert abs(sum(k.share for k in summary.kernels if k.phase == phase) - 1) < 1e-6, where
        assert all(k.launched_by for k in summary.kernels), where  # every GPU row knows who launched it
        if len(found) >= 20:  # enough to read (and a planted fault is caught without parsing every trace)
            break
    assert found == [], "\n".join(found[:20])


def test_naive_hides_a_memcpy_that_in_place_does_not():
    naive, inplace = parsed("naive"), parsed("naive_inplace")
    assert naive.launches == 7 and inplace.launches == 6
    (memcpy,) = by_category(naive, "memcpy")
    assert memcpy.short_name == "Memcpy DtoD" and memcpy.launch_api == "cudaMemcpyAsync"
    assert memcpy.occupancy_pct is None and memcpy.registers_per_thread is None
    assert by_category(inplace, "memcpy") == []
    # the rest is the same five ops plus cuBLAS's workspace memset
    assert [k.category for k in inplace.kernels] == ["memset", "gemm", "elementwise", "elementwise", "softmax", "gemm"]
    assert [k.short_name for k in inplace.kernels][2:5] == [
        "vectorized_elementwise_kernel [mul]", "elementwise_kernel [masked_fill]", "softmax_warp_forward"]


def test_cublas_nvjet_gemms_are_cluster_launches_with_no_occupancy():
    gemms = by_category(parsed("naive_inplace"), "gemm")
    assert len(gemms) == 2
    for gemm in gemms:
        assert gemm.name.startswith("nvjet_sm90_")
        assert gemm.launch_api == "cuLaunchKernelEx" and gemm.occupancy_pct == 0
        assert gemm.registers_per_thread == 168 and gemm.precision == "tensor cores (cuBLAS nvjet)"
        assert gemm.grid and gemm.block == [384, 1, 1]


def test_sdpa_math_upcasts_to_fp32_gemms_on_cuda_cores():
    summary = parsed("sdpa_math")
    assert summary.launches == 20 and summary.backend == "math"
    gemms = by_category(summary, "gemm")
    assert len(gemms) == 2 and all("f32f32" in g.name and g.precision == "FP32 on CUDA cores (ffma)" for g in gemms)
    assert all(g.launch_api == "cudaLaunchKernelExC" for g in gemms)
    names = {k.short_name for k in summary.kernels}
    assert "triu_tril_kernel" in names  # the causal mask, rebuilt on every call
    assert "vectorized_elementwise_kernel [bfloat16_copy]" in names  # and the cast back to bf16
    ops = {op.name for op in summary.host_ops}
    assert {"aten::_safe_softmax", "aten::_scaled_dot_product_attention_math"} <= ops


def test_flash_is_one_kernel_at_low_occupancy_by_design():
    (kernel,) = parsed("sdpa_flash").kernels
    assert kernel.short_name == "pytorch_flash::flash_fwd_kernel" and kernel.category == "fused attention"
    assert kernel.launch_api == "cudaLaunchKernel"
    assert kernel.occupancy_pct == 13 and kernel.registers_per_thread == 255 and kernel.shared_memory_bytes == 49152


def test_cudnn_is_a_generated_wgmma_kernel_and_a_memset():
    summary = parsed("sdpa_cudnn")
    assert summary.launches == 2 and summary.backend == "cudnn"
    memset, kernel = summary.kernels
    assert memset.category == "memset" and memset.launch_api == "cudaMemsetAsync"
    assert kernel.name.startswith("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma")
    assert kernel.launch_api == "cuLaunchKernelEx" and kernel.occupancy_pct == 0
    assert kernel.precision == "tensor cores (wgmma)"


def test_efficient_is_the_sm80_cutlass_kernel_on_hopper():
    (kernel,) = parsed("sdpa_efficient").kernels
    assert kernel.short_name == "fmha_cutlassF_bf16_aligned_64x64_rf_sm80" and kernel.launch_api == "cudaLaunchKernel"


@pytest.mark.parametrize("changes, backend, kernels_per_forward", [
    ({}, "cudnn", 2),                       # Hopper + cuDNN 9.19: cuDNN first
    ({"dtype": "fp32"}, "efficient", 1),    # flash and cuDNN take no fp32
    ({"rank": 3}, "math", 20),              # torch 2.11: rank 3 cannot reach a fused kernel
])
def test_what_auto_picked(changes, backend, kernels_per_forward):
    summary = parsed("sdpa_auto", **changes)
    assert summary.backend == backend and summary.launches == kernels_per_forward


def test_flex_is_one_triton_kernel_launched_through_the_driver():
    (kernel,) = parsed("flex").kernels
    assert kernel.name == "triton_tem_fused_flex_attention_0" and kernel.category == "triton"
    assert kernel.launch_api == "cuLaunchKernel" and kernel.occupancy_pct == 0
    assert parsed("flex", causal=False).launches == 3  # no block mask: one is built per call


def test_more_kernels_at_larger_sequence_length():
    assert parsed("naive", seq_len=4096).launches > parsed("naive").launches
    assert parsed("sdpa_math", seq_len=4096).launches > parsed("sdpa_math").launches


def test_profiled_host_time_is_the_median_forward_range():
    trace = load_trace(recorded("sdpa_cudnn").trace_path)
    ranges = [e for e in trace["traceEvents"] if e.get("cat") == "user_annotation"
              and e.get("name", "").startswith(RANGES)]
    summary = summarize_trace(trace)
    assert len(ranges) == 3
    assert summary.profiled_host_ms == pytest.approx(statistics.median(r["dur"] for r in ranges) / 1000)
    assert summary.profiled_host_mean_ms == pytest.approx(statistics.mean(r["dur"] for r in ranges) / 1000)
    for r in ranges:  # every op of a forward lies inside its range
        inside = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op" and r["ts"] <= e["ts"] <= r["ts"] + r["dur"]]
        assert inside and all(e["ts"] + e["dur"] <= r["ts"] + r["dur"] + 1 for e in inside)


@pytest.mark.parametrize("variant, changes", [("sdpa_flash", {"dtype": "fp32"}), ("sdpa_cudnn", {"dtype": "fp32"}),
                                               ("sdpa_flash", {"rank": 3}), ("sdpa_efficient", {"rank": 3}),
                                               ("sdpa_cudnn", {"rank": 3})])
def test_refused_pins_keep_pytorchs_reason(variant, changes):
    run = recorded(variant, **changes)
    assert run.status == "unsupported" and "No available kernel" in run.reason
    expected = "dtype" if "dtype" in changes else "4 dimensional"
    assert any(expected in w for w in run.pytorch_warnings)


def test_recorded_bound_follows_the_back_to_back_figure():
    """Host-bound means a plain loop of calls runs slower than the GPU needs AND the host needs about as long to issue
    a call as the GPU to run it; a loop slower than both is neither's; a loop is never faster than one call's GPU
    time. The bound is of a whole call: a backward-only view keeps its step's (forward + backward) figures."""
    from profiling.results import share_by_phase, HOST_BOUND
    for run in (r for r in RUNS if r.ok):
        where = f"{run.variant} · {run.workload.words()}"
        assert run.back_to_back_ms == run.back_to_back.median_ms, where
        call_ms = run.forward_timing.median_ms + run.backward_timing.median_ms if run.workload.passes == "bwd" \
            else run.gpu_ms
        if run.warm_timing is not None:  # timed cold or in a graph: a plain loop is set against the warm events
            call_ms = run.warm_timing.median_ms
        slow_loop = run.back_to_back_ms > HOST_BOUND * call_ms
        host_slow = run.host_cost.median_ms * HOST_BOUND >= call_ms
        assert run.bound == ("gpu" if not slow_loop else "host" if host_slow else "other"), where
        assert run.back_to_back_ms >= 0.95 * call_ms, where
def test_each_kernel_knows_the_aten_ops_that_launched_it():
    """The launch call's correlation id ties a kernel to the CPU lane, and the ops around that call launched it."""
    (memcpy,) = by_category(parsed("naive"), "memcpy")
    (launch,) = memcpy.launched_by
    assert launch.ops == ["aten::masked_fill", "aten::clone", "aten::copy_"] and launch.calls_per_forward == 1
    (where,) = [k for k in parsed("sdpa_math").kernels if k.short_name == "elementwise_kernel [where]"]
    assert [x.ops[-2:] for x in where.launched_by] == [["aten::where", "aten::where"],
                                                       ["aten::_safe_softmax", "aten::where"]]
    assert sum(x.us_per_forward for x in where.launched_by) == pytest.approx(where.us_per_forward)
    assert all(k.launched_by for run in RUNS if run.ok for k in run.kernels)  # stored with the table


def test_a_kernel_name_tells_the_instruction_family_not_the_dtype():
    assert {k.precision for k in parsed("sdpa_flash").kernels} == {None}  # "bf16" in a template is no precision


# -- the backward, attributed --------------------------------------------------------------------------------------
FLASH_BWD = ["flash_bwd_dot_do_o_kernel", "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", "flash_bwd_convert_dq_kernel"]


def test_every_backward_kernel_is_attributed_to_the_autograd_op_that_launched_it():
    """torch.profiler puts no GPU range on the backward; each kernel is filed by the autograd engine's
    `evaluate_function: <Op>Backward0` event (a Python Function's `<Name>Backward`, or AccumulateGrad) above its
    launch. 0 unattributed rows, in every recorded step."""
    steps = [r for r in RUNS if r.ok and r.workload.training and r.kernels]
    assert {r.variant for r in steps} >= {"naive", "sdpa_math", "sdpa_flash", "sdpa_cudnn", "flex", "fa4"}
    for run in steps:
        backward = [k for k in run.kernels if k.phase == "backward"]
        assert backward, run.variant
        for k in backward:
            assert all(any(re.fullmatch(r"autograd::engine::evaluate_function: \S*(Backward\d*|AccumulateGrad)", op)
                           for op in launch.ops) for launch in k.launched_by), (run.variant, k.short_name)
        for k in run.kernels:
            if k.phase == "forward":
                assert not any("evaluate_function" in op for launch in k.launched_by for op in launch.ops)


def test_flash_s_backward_is_its_three_kernels_under_its_backward_op():
    run = next(r for r in RUNS if r.variant == "sdpa_flash" and r.workload == Workload.blog(passes="fwd+bwd"))
    fused = [k for k in run.kernels if k.phase == "backward" and k.category == "fused attention"]
    assert [k.short_name.split("::")[-1] for k in fused] == FLASH_BWD
    assert all(l.ops[0] == "autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0"
               for k in fused for l in k.launched_by)
    assert [k.short_name for k in run.kernels if k.phase == "forward" and k.category == "fused attention"] == [
        "pytorch_flash::flash_fwd_kernel"]


def test_a_host_ops_share_of_the_profiled_call_never_passes_the_whole():
    """An op's own time per call is a mean over the profiled calls; the share it is said as is of the ranges' mean
    (`facts.host_share`), so no op takes more than the whole call. Against the ranges' median, as the notes read it
    before, one slow call carried an op past 100% (FlashAttention-4's varlen, "112%")."""
    from profiling.explain.facts import host_share

    over = []
    for run in (r for r in RUNS if r.ok and r.host_ops and r.profiled_host_ms):
        top = max(range(len(run.host_ops)), key=lambda i: run.host_ops[i].self_us_per_forward)
        assert host_share(run, top, "the call").value <= 1.0, (run.variant, run.workload.words())
        assert run.profiled_host_mean_ms or not run.trace_path, run.variant  # every traced run has its mean
        if run.host_ops[top].self_us_per_forward > 1000 * run.profiled_host_ms:
            over.append(run.variant)
    assert over, "no recorded run to show the median's fault on"
