"""The explainer against real runs: the H200 recording (torch 2.11, cuDNN 9.19, sm90) and CPU runs made live.

For each rule, a run where its lesson shows and one where it does not; every note's evidence is
checked against the run it quotes. Environments are varied with dataclasses.replace, never by GPU name.
"""
from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path

import pytest

from attention_variants import VARIANTS
from profiling import dispatch
from profiling import explanation as ex
from profiling.dispatch import clean_warning
from profiling.measurement import _refusal_reason, measure
from profiling.recording import load_recorded
from profiling.reference import BLOG
from profiling.results import Comparison, Run
from profiling.workload import Workload

RECORDING = Path(__file__).parents[1] / "profiling" / "recorded" / "h200-torch2.11"
RUNS = load_recorded(RECORDING)


def recorded(variant: str, **changes) -> Run:
    """A copy of the recorded H200 run of `variant` at the blog workload with `changes`."""
    workload = Workload.blog(**changes)
    (run,) = [r for r in RUNS if r.variant == variant and r.workload == workload]
    return copy.deepcopy(run)


def peers(run: Run) -> ex.Peers:
    return ex.peers_for(run, RUNS)


def with_env(run: Run, **changes) -> Run:
    return dataclasses.replace(run, environment=dataclasses.replace(run.environment, **changes))


def apply(rule: ex.Rule, run: Run, with_peers: bool = True):
    others = peers(run) if with_peers else {}
    note = rule(run, others)
    if note is not None:
        assert_quotes_run(note, run, *others.values())
    return note


def assert_quotes_run(note, run: Run, *peer_runs: Run) -> None:
    """Each kernel or host op a note names exists in `run` (or, for a ratio, in a peer it was given), with the
    µs, occupancy and registers it quotes."""
    kernels: dict[str, list] = {}
    for k in [k for r in (run, *peer_runs) for k in r.kernels]:  # names may repeat (fill of bool, fill of float)
        for name in {ex.kernel_name(k), k.name}:  # quoted readable, or in full (CPU op rows)
            kernels.setdefault(name, []).append(k)
    ops = {h.name: h for h in run.host_ops}
    for line in note.evidence:
        head = line.split(" · ")[0]
        if head in ops and "call" in line:  # a host op line (on CPU the kernel table has the same names)
            assert f"{ops[head].total_us_per_forward:.1f} µs ({ops[head].self_us_per_forward:.1f} µs self)" in line
        elif head in kernels:
            if "µs" in line:
                assert any(f"{k.us_per_forward:.1f} µs" in line
                           and (k.occupancy_pct is None or f"occupancy {k.occupancy_pct:g}%" in line)
                           and (k.registers_per_thread is None or f"{k.registers_per_thread} registers" in line)
                           for k in kernels[head])
        elif re.fullmatch(r"[\w:<>\[\] .…-]+", head) and ("_kernel" in head or head.startswith(("aten::", "nvjet"))):
            pytest.fail(f"note {note.title!r} quotes {head!r}, which is not in this run")


def kernels_named(note, run: Run) -> set[str]:
    names = {ex.kernel_name(k) for k in run.kernels}
    return {line.split(" · ")[0] for line in note.evidence} & names


# -- CPU runs, made live once ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cpu_runs() -> dict[str, Run]:
    workload = Workload.cpu_default(seq_len=512, batch=1, heads=2)
    return {key: measure(key, workload) for key in
            ("naive", "naive_inplace", "sdpa_math", "sdpa_flash", "sdpa_efficient", "sdpa_auto")}


@pytest.fixture(scope="module")
def cpu_rank3_auto() -> Run:
    return measure("sdpa_auto", Workload.cpu_default(seq_len=64, rank=3))


# -- the data the explainer starts from -----------------------------------------------------------
@pytest.mark.parametrize("key", list(VARIANTS))
def test_every_variant_has_a_consistent_guess(key):
    guess = VARIANTS[key].guess
    assert guess.summary and guess.precision and guess.kernels
    assert guess.kernels_per_forward == len(guess.kernels)
    assert 1 <= guess.speed_rank <= len(VARIANTS) and 1 <= guess.host_rank <= len(VARIANTS)


def test_the_blog_reference_is_the_blog():
    assert BLOG.compute_capability == (8, 0) and "A100" in BLOG.device_name
    assert BLOG.matches(Workload.blog()) and BLOG.profiler_schedule == {"wait": 1, "warmup": 1, "active": 3}
    assert BLOG.differences(Workload.blog(seq_len=4096, rank=3)) == ["seq_len 4096 vs 1024", "rank 3 vs 4"]
    assert not BLOG.matches(Workload.blog(device="cpu"))
    math, inplace = BLOG.results["sdpa_math"], BLOG.results["naive_inplace"]
    naive = BLOG.results["naive"]
    assert (math.kernels_per_forward, inplace.kernels_per_forward, naive.kernels_per_forward) == (20, 5, 6)
    assert round(math.gpu_us / inplace.gpu_us, 1) == 3.7
    host_us = {key: BLOG.results[key].host_us for key in ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient")}
    assert host_us["sdpa_cudnn"] > host_us["sdpa_flash"] > host_us["sdpa_efficient"]
    assert BLOG.results["sdpa_efficient"].kernels == ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80",)


@pytest.mark.parametrize("cc, cudnn, device, first", [
    ((9, 0), 91900, "cuda", "cudnn"),      # the H200 recording
    ((10, 0), 91600, "cuda", "cudnn"),
    ((9, 0), 91500, "cuda", "flash"),      # 9.15.0 is not newer than 9.15
    ((8, 0), 91900, "cuda", "flash"),      # the blog's A100
    ((8, 9), 91900, "cuda", "flash"),
    ((12, 0), 91900, "cuda", "flash"),
    (None, None, "cpu", "flash"),
])
def test_sdpa_priority_follows_compute_capability_and_cudnn(cc, cudnn, device, first):
    env = dataclasses.replace(RUNS[0].environment, compute_capability=cc, cudnn_version=cudnn, device=device)
    order = dispatch.priority(env)
    assert order[0] == first and "math" in order
    assert set(order) == ({"flash", "math"} if device == "cpu" else {"cudnn", "flash", "efficient", "math"})


@pytest.mark.parametrize("backend, changes, torch_version, expected", [
    ("flash", {"dtype": "fp32"}, "2.11.0", "fp16 and bf16 only"),
    ("cudnn", {"dtype": "fp32"}, "2.11.0", "fp16 and bf16 only"),
    ("efficient", {"dtype": "fp32"}, "2.11.0", None),
    ("flash", {"rank": 3}, "2.11.0", "4-D"),
    ("flash", {"rank": 3}, "2.14.1", None),
    ("math", {"rank": 3}, "2.11.0", None),
])
def test_known_refusals(backend, changes, torch_version, expected):
    env = dataclasses.replace(RUNS[0].environment, torch_version=torch_version)
    why = dispatch.known_refusal(backend, Workload.blog(**changes), env)
    assert why == expected if expected is None else expected in why


@pytest.mark.parametrize("name, key", [("Memory efficient", "efficient"), ("flash (CPU)", "flash"),
                                       ("CUDNN_ATTENTION", "cudnn"), ("MATH", "math"), ("auto", None), (None, None)])
def test_backend_keys(name, key):
    assert dispatch.backend_key(name) == key


def test_refusal_reasons_read_both_warning_formats():
    raw = recorded("sdpa_flash", dtype="fp32").pytorch_warnings  # as recorded: with "(Triggered internally at ...)"
    for warnings in (raw, [clean_warning(w) for w in raw]):
        (reason,) = dispatch.refusal_reasons("flash", warnings)
        assert reason.startswith("Expected query, key and value to all be of dtype: {Half, BFloat16}")
        assert dispatch.refusal_reasons("cudnn", warnings) == []  # "runtime disabled" only: it was not pinned


# -- each rule: where its lesson shows, and where it does not -------------------------------------
def test_hidden_memcpy_in_out_of_place_masked_fill():
    naive = recorded("naive")
    note = apply(ex.hidden_memcpy, naive)
    (memcpy,) = [k for k in naive.kernels if k.category == "memcpy"]
    assert kernels_named(note, naive) == {ex.kernel_name(memcpy)} == {"Memcpy DtoD"}
    assert "cudaMemcpyAsync" in note.evidence[0] and any(line.startswith("aten::clone") for line in note.evidence)
    assert "7 kernels per forward; the guess was 5" in " ".join(note.evidence)
    assert "256.0 MiB" in note.cause
    assert apply(ex.hidden_memcpy, recorded("naive_inplace")) is None
    assert apply(ex.hidden_memcpy, recorded("sdpa_math")) is None


def test_masked_fill_in_place_leaves_no_copy():
    inplace = recorded("naive_inplace")
    note = apply(ex.inplace_no_copy, inplace)
    assert "no Memcpy among the 6 kernels per forward" in note.evidence
    assert "elementwise_kernel [masked_fill]" in kernels_named(note, inplace)
    naive = recorded("naive")
    assert f"GPU {naive.gpu_ms:.3f} ms vs {inplace.gpu_ms:.3f} ms here" in note.evidence[-1]
    assert apply(ex.inplace_no_copy, recorded("naive")) is None


def test_the_copy_on_cpu_is_a_clone_op(cpu_runs):
    note = apply(ex.hidden_memcpy, cpu_runs["naive"])
    assert "aten::clone → aten::copy_" in note.cause and not any("Memcpy" in line for line in note.evidence)
    assert apply(ex.hidden_memcpy, cpu_runs["naive_inplace"]) is None
    assert apply(ex.inplace_no_copy, cpu_runs["naive_inplace"]) is not None


@pytest.mark.parametrize("variant, changes, count, before", [
    ("naive", {}, 1, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"),
    ("naive", {"seq_len": 4096}, 2, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"),
    ("sdpa_cudnn", {}, 1, "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_kno…"),
])
def test_library_workspace_memsets(variant, changes, count, before):
    run = recorded(variant, **changes)
    note = apply(ex.workspace_memsets, run)
    assert note.title.startswith(f"{count} Memset") and f"launched just before: {before}" in note.evidence
    assert ("cuDNN" if "cudnn" in before else "cuBLAS") in note.cause


@pytest.mark.parametrize("variant", ["sdpa_flash", "sdpa_efficient", "flex"])
def test_no_memset_no_memset_note(variant):
    assert apply(ex.workspace_memsets, recorded(variant)) is None


def test_past_32_bit_indexing_ops_launch_twice():
    run = recorded("naive", seq_len=4096)
    note = apply(ex.split_launches, run)
    assert "mul: 2 kernel launches per forward for 1 aten::mul call" in note.evidence
    assert "2,147,483,648 elements" in note.evidence[-1]
    assert apply(ex.split_launches, recorded("naive")) is None
    assert apply(ex.split_launches, recorded("sdpa_flash", seq_len=4096)) is None  # one kernel, nothing split


def test_math_is_twenty_kernels_and_slower_than_naive_in_place():
    math = recorded("sdpa_math")
    note = apply(ex.math_kernel_count, math)
    assert note.title == "SDPA math: 20 kernels for one line of Python"
    assert "(guess: 5)" in note.evidence[0] and "GEMM ×2" in note.evidence[0] and "direct_copy ×3" in note.evidence[0]
    ratio = math.gpu_ms / recorded("naive_inplace").gpu_ms
    assert f"{ratio:.1f}x slower" in note.evidence[1] and round(ratio, 1) == 2.8
    assert apply(ex.math_kernel_count, math, with_peers=False).evidence == note.evidence[:1]
    assert apply(ex.math_kernel_count, recorded("sdpa_flash")) is None
    assert "(guess: 1)" in apply(ex.math_kernel_count, recorded("sdpa_auto", rank=3)).evidence[0]


@pytest.mark.parametrize("variant, dtype, cause", [
    ("sdpa_math", "bf16", "allow_fp16_bf16_reduction_math_sdp"),
    ("naive", "fp32", "allow_tf32"),
    ("naive_inplace", "fp32", "allow_tf32"),
])
def test_fp32_gemms_on_cuda_cores(variant, dtype, cause):
    run = recorded(variant, dtype=dtype)
    note = apply(ex.fp32_on_cuda_cores, run)
    gemms = [k for k in run.kernels if k.precision == "FP32 on CUDA cores (ffma)"]
    assert len(gemms) == 2 and kernels_named(note, run) == {ex.kernel_name(k) for k in gemms}
    assert cause in note.cause


@pytest.mark.parametrize("variant", ["naive", "sdpa_flash", "sdpa_cudnn"])
def test_tensor_core_runs_get_no_precision_note(variant):
    assert apply(ex.fp32_on_cuda_cores, recorded(variant)) is None


def test_math_rebuilds_the_mask_only_when_causal():
    note = apply(ex.math_mask_rebuilt, recorded("sdpa_math"))
    assert "triu_tril_kernel" in kernels_named(note, recorded("sdpa_math"))
    assert any(line.startswith("aten::tril · 1 call/fwd") for line in note.evidence)
    assert apply(ex.math_mask_rebuilt, recorded("sdpa_math", causal=False)) is None
    assert apply(ex.math_mask_rebuilt, recorded("naive")) is None


def test_safe_softmax():
    math = recorded("sdpa_math")
    note = apply(ex.safe_softmax, math)
    assert note.evidence[0].startswith("aten::_safe_softmax")
    assert {"vectorized_elementwise_kernel [isneginf]", "reduce_kernel [and]"} <= kernels_named(note, math)
    assert apply(ex.safe_softmax, recorded("sdpa_math", causal=False)) is not None  # it guards with or without a mask
    assert apply(ex.safe_softmax, recorded("naive")) is None


def test_math_on_cpu_shows_its_extra_ops(cpu_runs):
    assert apply(ex.safe_softmax, cpu_runs["sdpa_math"]) is not None
    assert apply(ex.math_mask_rebuilt, cpu_runs["sdpa_math"]) is not None
    assert apply(ex.math_kernel_count, cpu_runs["sdpa_math"]) is None  # no kernels on CPU


def test_flex_without_a_mask_builds_one_per_call():
    run = recorded("flex", causal=False)
    note = apply(ex.flex_mask_per_call, run)
    assert note.title.startswith("3 kernels, not 1")
    assert {"triton_poi_fused_ones_0", "triton_poi_fused_zeros_1"} <= kernels_named(note, run)
    assert apply(ex.flex_mask_per_call, recorded("flex")) is None


def test_flash_low_occupancy_is_by_design():
    flash = recorded("sdpa_flash")
    note = apply(ex.occupancy_by_design, flash)
    assert note.title == "13% occupancy for pytorch_flash::flash_fwd_kernel is by design"
    assert "255 registers × 128 threads = 32,640 registers per block: 2 blocks (8 warps)" in note.evidence[1]
    assert "fastest, so high occupancy" in note.cause
    assert "25%" in apply(ex.occupancy_by_design, recorded("sdpa_efficient")).title
    assert apply(ex.occupancy_by_design, recorded("sdpa_cudnn")) is None   # 0%: the other rule's business
    assert apply(ex.occupancy_by_design, recorded("naive")) is None


@pytest.mark.parametrize("variant, changes, zeros, runtime_api", [
    ("sdpa_cudnn", {}, 1, False),                   # cuLaunchKernelEx, 131 KiB shared
    ("naive", {}, 2, False),                        # cuBLAS nvjet, cuLaunchKernelEx
    ("flex", {}, 1, False),                         # Triton, cuLaunchKernel (driver API)
    ("sdpa_flash", {"head_dim": 128}, 1, True),     # cudaLaunchKernel with 64 KiB shared: zero too
    ("sdpa_efficient", {"head_dim": 128}, 1, True),
])
def test_zero_occupancy_is_not_a_real_zero(variant, changes, zeros, runtime_api):
    run = recorded(variant, **changes)
    note = apply(ex.occupancy_zero, run)
    named = kernels_named(note, run)
    assert len(named) == zeros
    for k in run.kernels:
        if ex.kernel_name(k) in named:
            assert k.occupancy_pct == 0 and k.shared_memory_bytes > 48 * 1024 and k.us_per_forward > 10
    assert ("cudaLaunchKernel" in note.cause) == runtime_api


@pytest.mark.parametrize("variant", ["sdpa_flash", "sdpa_efficient", "sdpa_math"])
def test_computed_occupancy_gets_no_zero_note(variant):
    assert apply(ex.occupancy_zero, recorded(variant)) is None


@pytest.mark.parametrize("run", [r for r in RUNS if r.ok], ids=lambda r: f"{r.variant}-{r.workload.label()}")
def test_the_host_bound_note_follows_the_bound(run):
    note = apply(ex.host_heavier_than_gpu, run)
    assert (note is not None) == (run.bound == "host")
    if note:
        assert f"CPU {run.host_cost.median_ms * 1000:.1f} µs to issue one forward" in note.evidence[0]


@pytest.mark.parametrize("variant, changes, materialised, guessed_wrong", [
    ("naive", {}, True, False),
    ("sdpa_math", {}, True, False),
    ("sdpa_flash", {}, False, False),
    ("sdpa_cudnn", {"seq_len": 4096}, False, False),
    ("sdpa_auto", {"rank": 3}, True, True),          # auto took math: the guess said fused
])
def test_scores_in_memory(variant, changes, materialised, guessed_wrong):
    run = recorded(variant, **changes)
    note = apply(ex.scores_in_memory, run)
    share = run.peak_extra_bytes / run.workload.scores_bytes()
    assert f"= {share:.2f}× one score matrix" in note.evidence[0]
    assert (share >= 1) == materialised and note.title.startswith("Guess was wrong") == guessed_wrong


def test_scores_in_memory_on_cpu(cpu_runs, cpu_rank3_auto):
    assert "S×S in memory" in apply(ex.scores_in_memory, cpu_runs["sdpa_math"]).title
    flash = apply(ex.scores_in_memory, cpu_runs["sdpa_flash"])
    # a many-core CPU's per-thread blocks can outweigh one small S×S matrix; the scores are never written
    assert flash.title.startswith(("No S×S matrix", "Peak above one S×S matrix, from per-thread blocks"))
    assert apply(ex.scores_in_memory, cpu_rank3_auto) is None  # S = D: the scores are no bigger than q


def test_first_call_cost():
    flex = recorded("flex")
    note = apply(ex.first_call_cost, flex)
    assert note.title == f"The first call took {flex.first_call_ms / 1000:.2f} s" and "Triton" in note.cause
    flex.first_call_ms = None  # a recording without first-call times
    assert apply(ex.first_call_cost, flex) is None
    cudnn = recorded("sdpa_cudnn")
    cudnn.first_call_ms = 0.2
    assert apply(ex.first_call_cost, cudnn) is None


def test_flex_compiles_on_its_first_call_on_cpu():
    run = measure("flex", Workload.cpu_default(seq_len=128, batch=1, heads=2))
    note = apply(ex.first_call_cost, run)
    assert run.first_call_ms > 20 * run.gpu_ms and f"first call {run.first_call_ms:,.1f} ms" in note.evidence[0]
    assert "torch.compile" in note.cause


@pytest.mark.parametrize("variant, changes, why, quoted", [
    ("sdpa_flash", {"dtype": "fp32"}, "fp32 inputs", "Expected query, key and value to all be of dtype"),
    ("sdpa_cudnn", {"dtype": "fp32"}, "fp32 inputs", "Expected query, key and value to all be of dtype"),
    ("sdpa_flash", {"rank": 3}, "rank-3 inputs", "All fused kernels requires query, key and value to be 4 dimensional"),
    ("sdpa_efficient", {"rank": 3}, "rank-3 inputs", "All fused kernels requires"),
])
def test_a_pinned_backend_that_cannot_run_quotes_pytorch(variant, changes, why, quoted):
    run = recorded(variant, **changes)
    note = apply(ex.pinned_refused, run)
    assert note.kind == "environment" and note.title.endswith(f"cannot run here: {why}")
    assert note.evidence[0].startswith(f"PyTorch: {quoted}") and "Triggered internally" not in note.evidence[0]
    assert note.evidence[0].removeprefix("PyTorch: ") in [clean_warning(w) for w in run.pytorch_warnings]
    if why == "rank-3 inputs":
        assert "Up to torch 2.13 (this is 2.11.0+cu130)" in note.cause


def test_refusal_notes_survive_a_re_recording():
    """Warnings recorded clean and the reason as measurement formats it now give the same note."""
    run = recorded("sdpa_flash", dtype="fp32")
    clean = [clean_warning(w) for w in run.pytorch_warnings]
    again = dataclasses.replace(run, pytorch_warnings=clean,
                                reason=_refusal_reason(clean, RuntimeError("No available kernel. Aborting execution.")))
    assert apply(ex.pinned_refused, again) == apply(ex.pinned_refused, run)


def test_an_aggregated_refusal_falls_back_to_the_reason():
    run = dataclasses.replace(recorded("sdpa_flash", dtype="fp32"), pytorch_warnings=[],
                              reason="Rejected backends: flash: dtype float not supported")
    note = apply(ex.pinned_refused, run)
    assert note.evidence == ["Rejected backends: flash: dtype float not supported"] and "fp32" in note.title


def test_pinned_cuda_backend_on_cpu(cpu_runs):
    note = apply(ex.pinned_refused, cpu_runs["sdpa_efficient"])
    assert note.title.endswith("no CPU kernel") and note.evidence == [cpu_runs["sdpa_efficient"].reason]
    assert apply(ex.pinned_refused, cpu_runs["sdpa_flash"]) is None
    assert apply(ex.pinned_refused, recorded("sdpa_flash")) is None


def test_rank3_before_torch_2_14_takes_math():
    run = recorded("sdpa_auto", rank=3)
    note = apply(ex.rank3_path, run)
    assert note.title == "Rank-3 input: the math path" and "Up to torch 2.13" in note.cause
    assert "ran: aten::_scaled_dot_product_attention_math" in note.evidence


def test_rank3_is_stated_for_the_torch_that_runs():
    run = with_env(recorded("sdpa_auto", rank=3), torch_version="2.14.1+cu130")
    note = apply(ex.rank3_path, run, with_peers=False)
    assert "torch 2.14.1+cu130 (2.14 or newer) prepends a batch dimension" in note.cause
    assert "still ran math" in note.cause  # the trace says math; the note does not pretend otherwise
    assert apply(ex.rank3_path, recorded("sdpa_auto")) is None
    assert apply(ex.rank3_path, recorded("sdpa_math", rank=3)) is None  # math takes rank 3 on any torch


def test_rank3_on_cpu_follows_the_running_torch(cpu_rank3_auto):
    note = apply(ex.rank3_path, cpu_rank3_auto)
    if cpu_rank3_auto.environment.torch_release < (2, 14):
        assert cpu_rank3_auto.backend == "math" and "math" in note.title
        return
    assert note.title == "Rank-3 input: flash (CPU) despite rank 3"
    assert "ran: aten::_scaled_dot_product_flash_attention_for_cpu" in note.evidence
    assert any(line.startswith("aten::unsqueeze") for line in note.evidence)


def test_auto_picks_cudnn_on_sm90_with_a_new_cudnn():
    note = apply(ex.auto_choice, recorded("sdpa_auto"))
    assert note.title == "sdpa_auto picked cudnn on this GPU" and note.kind == "environment"
    assert "priority here: cudnn → flash → efficient → math (sm90, cuDNN 9.19.0, torch 2.11.0+cu130)" \
        in note.evidence
    assert "newer than 9.15" in note.cause


def test_auto_falls_through_to_efficient_for_fp32():
    note = apply(ex.auto_choice, recorded("sdpa_auto", dtype="fp32"))
    assert note.title == "sdpa_auto picked efficient on this GPU"
    assert "cudnn: refused, fp16 and bf16 only (the inputs are fp32)" in note.evidence
    assert "flash: refused, fp16 and bf16 only (the inputs are fp32)" in note.evidence


def test_auto_on_an_sm80_environment_says_the_trace_disagrees():
    run = with_env(recorded("sdpa_auto"), compute_capability=(8, 0))
    note = apply(ex.auto_choice, run, with_peers=False)
    assert "priority here: flash → efficient → math → cudnn" in note.evidence[1]
    assert "The trace shows cudnn, which this order never reaches" in note.cause and "PyTorch's default" in note.cause
    assert apply(ex.auto_choice, recorded("sdpa_flash")) is None


def test_cpu_runs_say_what_sdpa_dispatched_to(cpu_runs):
    note = apply(ex.cpu_dispatch, cpu_runs["sdpa_flash"])
    assert note.evidence[0].startswith("SDPA ran: aten::_scaled_dot_product_flash_attention_for_cpu")
    assert "do not apply" in note.cause
    assert apply(ex.cpu_dispatch, cpu_runs["sdpa_math"]).evidence[0].startswith(
        "SDPA ran: aten::_scaled_dot_product_attention_math")
    assert apply(ex.cpu_dispatch, recorded("sdpa_flash")) is None


@pytest.mark.parametrize("rule", [ex.workspace_memsets, ex.occupancy_zero, ex.occupancy_by_design,
                                  ex.host_heavier_than_gpu, ex.kernel_generation, ex.against_blog, ex.auto_choice])
def test_gpu_rules_stay_quiet_on_cpu(rule, cpu_runs):
    assert all(apply(rule, run) is None for run in cpu_runs.values())


# -- the blog's A100 ---------------------------------------------------------------------------------
def test_against_the_blog_on_its_workload():
    inplace = recorded("naive_inplace")
    note = apply(ex.against_blog, inplace)
    assert note.kind == "reference"
    assert "kernels per forward: 6 here, 5 on the A100" in note.evidence
    assert f"GPU: {inplace.gpu_ms * 1000:.1f} µs here, 1955 µs on the A100" in note.evidence[1]
    math = apply(ex.against_blog, recorded("sdpa_math"))
    assert "math / naive in-place: 2.8x here, 3.7x on the A100" in math.evidence
    cudnn = apply(ex.against_blog, recorded("sdpa_cudnn"))
    assert any(line.startswith("CPU time, lightest first: here sdpa_") and "A100 sdpa_efficient" in line
               for line in cudnn.evidence)


@pytest.mark.parametrize("variant, changes", [("naive_inplace", {"seq_len": 4096}), ("sdpa_flash", {"dtype": "fp32"}),
                                              ("flex", {}), ("sdpa_auto", {})])
def test_no_blog_numbers_off_its_workload_or_variants(variant, changes):
    assert apply(ex.against_blog, recorded(variant, **changes)) is None


def test_sm80_kernels_on_sm90():
    efficient = recorded("sdpa_efficient")
    note = apply(ex.kernel_generation, efficient)
    assert note.title == "Kernels built for sm80 running on sm90"
    assert kernels_named(note, efficient) == {"fmha_cutlassF_bf16_aligned_64x64_rf_sm80"}
    # the same kernel on the blog's generation is native: no note
    assert apply(ex.kernel_generation, with_env(efficient, compute_capability=(8, 0))) is None
    assert apply(ex.kernel_generation, recorded("sdpa_cudnn")) is None  # built for sm90, on sm90


def test_a_renamed_kernel_changes_the_generation_note():
    cudnn = recorded("sdpa_cudnn")
    for k in cudnn.kernels:  # as a trace from an sm80 build would name it
        k.name, k.short_name = (n.replace("_sm90_", "_sm80_") for n in (k.name, k.short_name))
    assert "built for sm80" in apply(ex.kernel_generation, cudnn).evidence[0]
    on_sm80 = with_env(cudnn, compute_capability=(8, 0))
    assert apply(ex.kernel_generation, on_sm80) is None


def test_kernel_generation_says_when_the_workload_differs():
    assert "seq_len 4096 vs 1024" in apply(ex.kernel_generation, recorded("sdpa_efficient", seq_len=4096)).cause
    assert "differs" not in apply(ex.kernel_generation, recorded("sdpa_efficient")).cause


def test_nvjet_gemms():
    naive = recorded("naive")
    note = apply(ex.nvjet_gemms, naive)
    assert kernels_named(note, naive) == {"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT",
                                          "nvjet_sm90_tst_64x512_64x2_1x2_h_bz_coopB_NNT"}
    assert all("cuLaunchKernelEx" in line for line in note.evidence)
    assert apply(ex.nvjet_gemms, recorded("sdpa_math")) is None  # FP32 GEMMs: sm80 xmma, not nvjet


def test_cudnn_beats_flash_here_unlike_on_the_a100():
    flash, cudnn = recorded("sdpa_flash"), recorded("sdpa_cudnn")
    note = apply(ex.fused_ranking_vs_blog, flash)
    assert note.title == "SDPA · FlashAttention ranks #2 of 3 here, #1 on the blog's A100"
    assert note.evidence[0].startswith(f"GPU here: sdpa_cudnn {cudnn.gpu_ms * 1000:.1f} µs < sdpa_flash")
    assert "pytorch_flash::flash_fwd_kernel · no architecture in its name" in note.evidence
    assert any(line.startswith("cudnn_generated_fort_native_sdpa_sm90") and line.endswith("· built for sm90")
               for line in note.evidence)
    assert "#1 of 3 here, #2" in apply(ex.fused_ranking_vs_blog, cudnn).title
    assert apply(ex.fused_ranking_vs_blog, recorded("sdpa_efficient")) is None  # last in both
    assert apply(ex.fused_ranking_vs_blog, flash, with_peers=False) is None     # nothing to rank against
    assert apply(ex.fused_ranking_vs_blog, recorded("sdpa_flash", seq_len=4096)) is None  # not the blog's workload


# -- every recorded run, the whole explainer ------------------------------------------------------------
@pytest.mark.parametrize("run", RUNS, ids=lambda r: f"{r.variant}-{Path(r.trace_path or r.variant).name}")
def test_every_note_on_every_recorded_run_quotes_its_run(run):
    notes = ex.explain_run(run, RUNS)
    assert notes, "every recorded run has at least one lesson"
    for note in notes:
        assert note.title and note.evidence and note.cause and note.kind in ex.KIND_LABELS
        assert_quotes_run(note, run, *peers(run).values())
    if run.ok and run.environment.device == "cuda":
        assert not any(n.title.startswith("CPU run") for n in notes)


def test_blog_workload_notes():
    titles = {key: [n.title for n in ex.explain_run(recorded(key), RUNS)] for key in
              ("naive", "naive_inplace", "sdpa_math", "sdpa_flash", "sdpa_cudnn", "sdpa_auto")}
    assert "A hidden copy: out-of-place masked_fill clones the scores" in titles["naive"]
    assert "In place is faster too: masked_fill_ leaves no copy" in titles["naive_inplace"]
    assert {"The causal mask is rebuilt on every call",
            "FP32 GEMMs on CUDA cores, not tensor cores"} <= set(titles["sdpa_math"])
    assert "13% occupancy for pytorch_flash::flash_fwd_kernel is by design" in titles["sdpa_flash"]
    assert "0% occupancy on 1 kernel that ran: not a real zero" in titles["sdpa_cudnn"]
    assert "sdpa_auto picked cudnn on this GPU" in titles["sdpa_auto"]


# -- A vs B, rendering, JSON --------------------------------------------------------------------------
def test_explain_fills_notes_verdict_and_ranking():
    comparison = ex.explain(Comparison(recorded("sdpa_flash"), recorded("sdpa_cudnn")))
    a, b = comparison.a, comparison.b
    assert a.notes and b.notes
    assert comparison.verdict.startswith(
        f"B (SDPA · cuDNN) is {a.gpu_ms / b.gpu_ms:.1f}x faster than A (SDPA · FlashAttention)")
    assert "A vs B: 1 vs 2 kernels per forward" in comparison.verdict
    (note,) = [n for n in comparison.notes if "faster" in n.title]
    assert note.kind == "verdict" and note.title.startswith("Guessed SDPA · FlashAttention faster; SDPA · cuDNN is")
    # the pair alone is enough for the ranking note against the blog
    assert any(n.kind == "reference" and "ranks #2 of 2" in n.title for n in a.notes)


def test_the_ranking_note_gives_the_reasons_the_traces_show():
    comparison = ex.explain(Comparison(recorded("naive"), recorded("sdpa_math")))
    speed, host = comparison.notes
    a, b = recorded("naive"), recorded("sdpa_math")
    assert speed.title == f"Guessed SDPA · math faster; Naive (masked_fill) is, by {b.gpu_ms / a.gpu_ms:.1f}x"
    assert "SDPA · math launches 20 kernels to 7." in speed.cause and "FP32 on CUDA cores" in speed.cause
    assert host.title.startswith("Guessed SDPA · math lighter on the host") and "aten calls per forward" in host.cause
    flash_vs_cudnn = ex.explain(Comparison(recorded("sdpa_flash"), recorded("sdpa_cudnn"))).notes[0]
    assert "SDPA · cuDNN's main kernel is built for this GPU (sm90); SDPA · FlashAttention's is not." \
        in flash_vs_cudnn.cause


@pytest.mark.parametrize("a, b", [("sdpa_auto", "sdpa_cudnn"), ("naive_inplace", "naive")])
def test_no_ranking_note_when_the_guess_holds(a, b):
    comparison = ex.explain(Comparison(recorded(a), recorded(b)))
    assert not [n for n in comparison.notes if "faster" in n.title.split(";")[0]]
    # auto runs cuDNN's kernel: the same GPU time, which the verdict calls level rather than "1.0x faster"
    assert ("are level on the GPU" in comparison.verdict) == (b == "sdpa_cudnn")


@pytest.mark.parametrize("a, b", [("sdpa_flash", "sdpa_efficient"), ("sdpa_efficient", "sdpa_flash"),
                                  ("sdpa_flash", "sdpa_cudnn")])
def test_either_side_unsupported(a, b):
    comparison = ex.explain(Comparison(recorded(a, dtype="fp32"), recorded(b, dtype="fp32")))
    failed = [r for r in (comparison.a, comparison.b) if not r.ok]
    assert comparison.notes == []
    for run in failed:
        assert f"({ex._label(run)}) could not run here: Expected query, key and value" in comparison.verdict
    assert ("ran at" in comparison.verdict) == (len(failed) == 1)


def test_verdict_on_cpu(cpu_runs):
    comparison = ex.explain(Comparison(copy.deepcopy(cpu_runs["naive"]), copy.deepcopy(cpu_runs["sdpa_flash"])))
    assert "in wall time on the CPU" in comparison.verdict and "kernels per forward" not in comparison.verdict


def test_rendering_keeps_titles_evidence_and_kinds():
    notes = ex.explain_run(recorded("naive"), RUNS)
    text, markdown = ex.render_text(notes), ex.render_markdown(notes)
    for note in notes:
        assert note.title in text and ex.KIND_LABELS[note.kind] in text
        assert ex._md(note.title) in markdown
    assert "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT" in text
    assert r"nvjet\_sm90\_tst\_256x128\_64x4\_1x2\_h\_bz\_coopA\_TNT" in markdown  # not italics
    assert "`masked_fill_`" in markdown and "`" not in text
    assert ex.render_text([]) == ex.render_markdown([]) == ""


def test_an_explained_comparison_round_trips_through_json():
    comparison = ex.explain(Comparison(recorded("naive"), recorded("sdpa_math")))
    again = Comparison.from_json(comparison.to_json())
    assert again == comparison and again.a.notes == comparison.a.notes and again.verdict == comparison.verdict


def test_an_order_inside_the_timing_spread_is_level_not_a_win():
    # the same two recorded runs, once with their real (tight) GPU samples, once as a busy CPU spreads them
    fast, slow = recorded("sdpa_cudnn"), recorded("sdpa_flash")
    assert "faster than" in ex.explain(Comparison(fast, slow)).verdict
    noisy_fast, noisy_slow = copy.deepcopy(fast), copy.deepcopy(slow)
    noisy_slow.timing.min_ms = noisy_fast.timing.median_ms * 0.9  # its best sample beats the other's median
    comparison = ex.explain(Comparison(noisy_fast, noisy_slow))
    assert "are level on the GPU" in comparison.verdict
    assert not [n for n in comparison.notes if n.kind == "verdict" and "faster" in n.title]
