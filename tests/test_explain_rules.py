"""Each rule of the explainer against the H200 recording (torch 2.11, cuDNN 9.19, sm90) and CPU runs made live:
a run where its lesson shows and one where it does not, and for each claim the issue corrected, a test that
would have caught the old wording. Numbers are read from the notes' facts, never parsed back from the words.
"""
from __future__ import annotations

import copy
import dataclasses

import pytest
from explain_helpers import RUNS, apply, recorded, with_env

from attention_variants import VARIANTS, guess_for
from profiling import text
from profiling.explain import (blog_rules, environment_rules, explain, facts, guess_rules, ledger, mask_rules,
                               timing_rules, verdict)
from profiling.measurement import measure_runs
from profiling.reference import BLOG
from profiling.results import Comparison, Kernel, Launch, Timing
from profiling.trace import precision
from profiling.workload import NAMED, Workload

H200 = facts.ARCH["sm90"]


@pytest.fixture(scope="module")
def cpu_runs():
    workload = Workload.cpu_default(seq_len=512, batch=1, heads=2)
    keys = ("naive", "naive_inplace", "sdpa_math", "sdpa_flash", "sdpa_efficient", "sdpa_auto")
    return {run.variant: run for run in measure_runs([VARIANTS[k] for k in keys], workload)}


def kernel(run, short_name):
    (k,) = [k for k in run.kernels if k.short_name == short_name]
    return k


# -- the guesses: one table, filled in for the workload -----------------------------------------------
@pytest.mark.parametrize("key", list(VARIANTS))
@pytest.mark.parametrize("workload", [Workload.blog(), Workload.blog(dtype="fp32"), Workload.blog(causal=False),
                                      Workload.cpu_default()], ids=["bf16", "fp32", "full", "cpu"])
def test_the_guess_is_the_one_a_reader_would_make_for_this_workload(key, workload):
    g = guess_for(key, workload)
    assert g.summary and g.kernels and 1 <= g.speed_rank <= len(VARIANTS) and 1 <= g.host_rank <= len(VARIANTS)
    if workload.dtype == "fp32" or workload.device == "cpu":
        assert "tensor cores" not in g.precision and "16-bit" not in g.precision
    if workload.device == "cpu":
        assert "kernel" not in g.summary and not g.occupancy and all(e.category != "triton" for e in g.kernels)
    if not workload.causal:  # no causal mask; a block-diagonal mask keeps each document to itself, causal or not
        assert all("mask" not in e.what or VARIANTS[key].packs == "block" and VARIANTS[key].packed_only
                   for e in g.kernels)


def test_the_naive_guess_drops_the_mask_without_causality():
    assert guess_for("naive", Workload.blog()).kernels_per_forward == 5
    assert guess_for("naive", Workload.blog(causal=False)).summary == "four ops, so four kernels, one per op"


# -- copies and workspaces ------------------------------------------------------------------------------
def test_hidden_copy_is_out_of_place_masked_fills_memcpy():
    naive = recorded("naive")
    note = apply(guess_rules.hidden_copy, naive)
    (memcpy,) = [k for k in naive.kernels if k.category == "memcpy"]
    assert note.kernels == [memcpy.name] and note.facts["size"].value == 256 * 2**20
    assert note.facts["share"].value == memcpy.share
    assert apply(guess_rules.hidden_copy, recorded("naive_inplace")) is None
    assert apply(guess_rules.hidden_copy, recorded("sdpa_math")) is None


def test_hidden_copy_on_cpu_is_clone_and_copy(cpu_runs):
    note = apply(guess_rules.hidden_copy, cpu_runs["naive"])
    assert "clone → copy_" in note.body and set(note.kernels) <= {"aten::clone", "aten::copy_"}
    assert apply(guess_rules.hidden_copy, cpu_runs["naive_inplace"]) is None


def test_cpu_copies_are_told_apart_by_what_they_copy():
    """A live CPU run of naive with grouped-query attention: one copy_ row holds the K and V copies of
    repeat_interleave (2 calls) and masked_fill's clone of the scores (1): the hidden-copy note counts only the
    latter's time, and the guess's "repeat_interleave k/v" are matched to the former, never "did not run". The audit
    found every copy_ filed as masked_fill's, and the ledger saying repeat_interleave did not run beside a table
    that listed it."""
    w = Workload.cpu_default(seq_len=256, batch=1, heads=4, kv_heads=2)
    (run,) = measure_runs([VARIANTS["naive"]], w)
    (copy_,) = [k for k in run.kernels_of("forward") if k.name == "aten::copy_"]
    by_chain = {tuple(launch.ops): launch for launch in copy_.launched_by}
    kv = by_chain[("aten::repeat_interleave", "aten::clone", "aten::copy_")]
    scores = by_chain[("aten::masked_fill", "aten::clone", "aten::copy_")]
    assert kv.calls_per_forward == pytest.approx(2) and scores.calls_per_forward == pytest.approx(1)
    note = apply(guess_rules.hidden_copy, run)
    clone = sum(launch.us_per_forward for k in run.kernels_of("forward") for launch in k.launched_by
                if launch.ops[:2] == ["aten::masked_fill", "aten::clone"] and k.name in ("aten::clone", "aten::copy_"))
    assert note.facts["time"].value == pytest.approx(clone) and clone < copy_.us_per_forward + 1e-9
    assert all("repeat_interleave" not in line for line in note.evidence)
    ledger_note = ledger.unpredicted_kernels(run, set())
    said = [ledger_note.body, *ledger_note.evidence] if ledger_note else []
    assert all("did not run" not in line for line in said)
    # repeat_interleave's own row (its self time, beside the copy_ the guess's line took) is the guessed op: never
    # listed as unpredicted (it was, at 1.6% of the forward, whenever its share passed the negligible line)
    assert not [line for line in (ledger_note.evidence if ledger_note else [])
                if line.startswith("repeat_interleave ·")]


@pytest.mark.parametrize("shape, inputs", [(dict(), 3 * 8 * 16 * 1024 * 64 * 4),
                                           (NAMED["llama"].changes(),
                                            3 * 4 * 32 * 2048 * 128 * 4)])
def test_math_keeps_its_probabilities_and_its_fp32_inputs_for_the_backward(shape, inputs):
    """Math's recorded training step keeps 608 MiB at the blog's workload: 512 MiB of fp32 probabilities and
    96 MiB of fp32 q, k, v (with grouped-query attention, K and V at every query head: 384 MiB). The audit found
    the note calling all 608 MiB 'the S×S probabilities'."""
    from profiling.explain import backward_rules
    w = Workload.blog(passes="fwd+bwd", **shape)
    (run,) = [r for r in RUNS if r.variant == "sdpa_math" and r.workload == w]
    note = apply(backward_rules.saved_for_backward, run)
    probabilities = w.batch * w.heads * w.seq_len ** 2 * 4
    assert run.saved_bytes == probabilities + inputs
    assert note.facts["scores"].value == probabilities and note.facts["inputs"].value == inputs
    assert "fp32 q and K, V" in note.body
    naive = apply(backward_rules.saved_for_backward, [r for r in RUNS if r.variant == "naive" and r.workload == w][0])
    assert "inputs" not in naive.facts  # naive keeps its own (bf16) tensors: the words of one S×S matrix


def test_in_place_saves_time_but_no_peak_memory():
    inplace, naive = recorded("naive_inplace"), recorded("naive")
    note = apply(guess_rules.in_place, inplace, naive)
    assert note.facts["peak"].value == note.facts["naive_peak"].value == inplace.peak_extra_bytes  # 528 = 528 MiB
    assert note.facts["saved"].value == pytest.approx(1 - inplace.gpu_ms / naive.gpu_ms)
    # the peak is two S×S matrices and the output: where `softmax(scores) @ v` runs, not at `scores * scale`
    w = inplace.workload
    assert inplace.peak_extra_bytes == 2 * w.scores_bytes() + w.output_bytes
    assert "`softmax(scores) @ v`" in note.body and "scores * scale" not in note.body and "only saves memory" in note.body
    assert "naive_peak" not in apply(guess_rules.in_place, inplace).facts  # without naive: no comparison claimed
    assert apply(guess_rules.in_place, recorded("naive_inplace", causal=False)) is None  # no fill at all
    assert apply(guess_rules.in_place, naive) is None


@pytest.mark.parametrize("variant, changes, count, inside, library", [
    ("naive", {}, 1, ["aten::bmm"], "cuBLAS"),
    ("naive", {"seq_len": 4096}, 2, ["aten::bmm"], "cuBLAS"),          # one per GEMM, not "before the first"
    ("sdpa_cudnn", {}, 1, ["aten::_cudnn_attention_forward"], "cuDNN"),
])
def test_memsets_are_attributed_to_the_op_that_launched_them(variant, changes, count, inside, library):
    note = apply(guess_rules.library_memsets, recorded(variant, **changes))
    assert note.facts["count"].value == pytest.approx(count) and note.ops == inside and library in note.body
    assert "before:" not in note.title


@pytest.mark.parametrize("variant", ["sdpa_flash", "sdpa_efficient", "flex"])
def test_no_memset_no_memset_note(variant):
    assert apply(guess_rules.library_memsets, recorded(variant)) is None


def test_split_launches_are_decided_by_byte_offsets():
    naive = recorded("naive", seq_len=4096)
    note = apply(guess_rules.split_launches, naive)
    assert note.facts["scores"].value == 8 * 16 * 4096**2 * 2 > 2**31 - 1 and "bytes" in note.body
    assert note.facts["launches"].value == pytest.approx(2) and note.facts["calls"].value == 1
    math = apply(guess_rules.split_launches, recorded("sdpa_math", seq_len=4096))
    assert math.facts["scores"].value == 8 * 16 * 4096**2 * 4 and "fp32" in math.body  # math computes in fp32
    assert math.facts["launches"].value == pytest.approx(4)
    assert apply(guess_rules.split_launches, recorded("naive")) is None
    assert apply(guess_rules.split_launches, recorded("sdpa_flash", seq_len=4096)) is None


def test_a_split_below_2_31_elements_is_still_explained_by_its_bytes():
    """S=3072 bf16: 1.2e9 elements fit 32-bit indexing, 2.4e9 bytes do not (the old rule said nothing)."""
    run = recorded("naive", seq_len=4096)
    run = dataclasses.replace(run, workload=run.workload.replace(seq_len=3072))
    note = apply(guess_rules.split_launches, run)
    elements = 8 * 16 * 3072**2
    assert elements < 2**31 - 1 < note.facts["scores"].value == 2 * elements


DECODE = NAMED["decode"].replace(batch=64).changes()


@pytest.mark.parametrize("variant, element, pieces", [("naive", 2, 2), ("sdpa_math", 4, 4)])
def test_a_decode_step_s_split_launches_are_the_k_and_v_copies_never_its_scores(variant, element, pieces):
    """B=64, H=32 over 8 kv heads, S=8,192, one query: the scores are 32 MiB (64 MiB in math's fp32), far below
    2³¹−1 bytes; what splits is each `repeat_interleave` copy of K and V at every query head, B·H·S·D elements
    (4 GiB in bf16, 8 GiB in math's fp32): 2 calls, each cut into 2³¹-byte pieces. The audit found the note
    calling the 32 MiB scores past 2³¹−1 bytes."""
    w = Workload.blog(dtype="bf16", **DECODE)
    (run,) = [r for r in RUNS if r.variant == variant and r.workload == w and r.phase == "forward"]
    note = apply(guess_rules.split_launches, run)
    copies = 64 * 32 * 8192 * 128 * element
    assert "scores" not in note.facts and note.facts["copies"].value == copies
    assert note.facts["calls"].value == 2 and note.facts["launches"].value == pytest.approx(2 * copies / 2**31) == 2 * pieces
    assert "repeat_interleave" in note.body and "scores" not in note.body


def test_a_library_kernel_launched_twice_is_not_said_to_pass_32_bit_indexing():
    """cuDNN's GQA backward launches fmha_reduce_head twice (dK's and dV's sums over the group) at B=4, S=2,048:
    no tensor of that workload is past 2³¹−1 bytes, and the fused backward note names the two launches."""
    w = NAMED["llama"].replace(passes="fwd+bwd")
    (run,) = [r for r in RUNS if r.variant == "sdpa_cudnn" and r.workload == w and r.phase == "step"]
    assert apply(guess_rules.split_launches, run) is None
    from profiling.explain import backward_rules
    assert "dK and dV summed over each group's query heads, a launch each" in \
        apply(backward_rules.fused_backward, run).body


# -- arithmetic ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant, dtype, says", [
    ("sdpa_math", "bf16", "allow_fp16_bf16_reduction_math_sdp"),
    ("naive", "fp32", "TF32"),
    ("naive_inplace", "fp32", "TF32"),
])
def test_fp32_gemms_on_cuda_cores(variant, dtype, says):
    run = recorded(variant, dtype=dtype)
    note = apply(guess_rules.fp32_gemms, run)
    gemms = [k.name for k in run.kernels if k.category == "gemm"]
    assert set(gemms) <= set(note.kernels) and says in note.body
    if dtype == "fp32":
        assert "casts" not in note.body  # nothing is upcast when the inputs are fp32 already


@pytest.mark.parametrize("variant", ["naive", "sdpa_flash", "sdpa_cudnn"])
def test_tensor_core_runs_get_no_fp32_note(variant):
    assert apply(guess_rules.fp32_gemms, recorded(variant)) is None


def test_precision_is_not_read_from_a_kernel_name():
    """A cuDNN name with f16 and no wgmma (sm80/86/89) used to be labelled fp16, whatever the inputs."""
    assert precision("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_f16_knob_3_64x64x64_4x1x1_kernel0_0") is None
    assert precision("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, bf16>>") is None
    assert precision("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_ffma") == "FP32 on CUDA cores (ffma)"


# -- the math path --------------------------------------------------------------------------------------
def test_math_masks_by_adding_a_float_mask_and_the_where_is_the_guards():
    math = recorded("sdpa_math")
    mask = apply(guess_rules.math_mask, math)
    assert "add_" in mask.body and mask.facts["add"].value == pytest.approx(395.5, rel=0.05)
    guard = apply(guess_rules.math_guard, math)
    assert guard.facts["where"].value == pytest.approx(409.3, rel=0.05)  # the big where is _safe_softmax's
    assert guard.facts["guard"].value == pytest.approx(662.7, rel=0.05)  # isneginf + all + where (+ fills): ≈661 µs
    assert guard.facts["share"].value == pytest.approx(0.25, abs=0.01)
    assert apply(guess_rules.math_mask, recorded("sdpa_math", causal=False)) is None  # no mask without causality
    assert apply(guess_rules.math_guard, recorded("sdpa_math", causal=False)) is not None  # guards either way
    assert apply(guess_rules.math_guard, recorded("naive")) is None


def test_math_casts_the_weights_back_then_drops_them():
    note = apply(guess_rules.math_cast_back, recorded("sdpa_math"))
    assert note.facts["time"].value == pytest.approx(198.3, rel=0.05) and "bf16" in note.title
    assert apply(guess_rules.math_cast_back, recorded("sdpa_math", dtype="fp32")) is None  # nothing to cast back
    assert apply(guess_rules.math_cast_back, recorded("naive")) is None


def test_softmax_kernel_switch_at_long_rows():
    naive = recorded("naive", seq_len=4096)
    note = apply(guess_rules.softmax_kernel, naive)
    assert note.kernels == [kernel(naive, "cunn_SoftMaxForwardReg").name]
    assert note.facts["share"].value == pytest.approx(0.389, abs=0.001) and note.facts["row"].value == 4096
    assert apply(guess_rules.softmax_kernel, recorded("naive")) is None  # softmax_warp_forward at S=1024


def test_flex_without_a_mask_builds_one_per_call():
    note = apply(guess_rules.flex_mask_per_call, recorded("flex", causal=False))
    assert note.facts["kernels"].value == 3 and len(note.kernels) == 2
    assert apply(guess_rules.flex_mask_per_call, recorded("flex")) is None


# -- occupancy -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant, changes, blocks, percent, limiter", [
    ("sdpa_flash", {}, 2, 12.5, "registers"),              # Kineto: 13%
    ("sdpa_flash", {"head_dim": 128}, 2, 12.5, "registers"),  # 64 KiB shared: Kineto prints 0
    ("sdpa_efficient", {}, 4, 25.0, "registers"),          # Kineto: 25%
    ("sdpa_cudnn", {}, 1, 18.75, "registers and shared memory"),  # 384 threads × 168 registers; 131 KiB
    ("flex", {}, 2, 12.5, "registers and shared memory"),   # 112 KiB + 1 KiB reserved: two fit in 228 KiB
])
def test_occupancy_from_registers_block_and_shared_memory(variant, changes, blocks, percent, limiter):
    k = max(recorded(variant, **changes).kernels, key=lambda x: x.share)
    occ = facts.occupancy(k, H200)
    assert (occ.blocks, 100 * occ.fraction, occ.limiter) == (blocks, percent, limiter)


def test_arch_limits_are_keyed_by_compute_capability():
    assert facts.ARCH["sm90"].shared_per_sm == 228 * 1024 and facts.ARCH["sm90"].shared_per_block == 227 * 1024
    assert facts.ARCH["sm90"].registers_per_sm == 65536 and facts.ARCH["sm90"].threads_per_sm == 2048
    assert facts.ARCH["sm90"].blocks_per_sm == 32 and facts.ARCH["sm89"].threads_per_sm == 1536


def test_low_occupancy_by_design():
    flash = recorded("sdpa_flash")
    note = apply(guess_rules.occupancy_by_design, flash)
    assert note.facts["real"].value == 12.5 and note.facts["blocks"].value == 2
    assert "expected high occupancy" in note.body  # the flash guess says "fastest, so high occupancy"
    assert "expected" not in apply(guess_rules.occupancy_by_design, recorded("sdpa_efficient")).body
    assert apply(guess_rules.occupancy_by_design, recorded("naive")) is None


@pytest.mark.parametrize("variant, changes", [("sdpa_cudnn", {}), ("naive", {}), ("flex", {}),
                                              ("sdpa_flash", {"head_dim": 128})])
def test_zero_occupancy_gets_its_real_figure(variant, changes):
    run = recorded(variant, **changes)
    note = apply(guess_rules.occupancy_not_zero, run)
    for name in note.kernels:
        (k,) = [k for k in run.kernels if k.name == name]
        assert k.occupancy_pct == 0 and k.shared_memory_bytes > 48 * 1024
    assert note.facts["real"].value > 0 and "48.0 KiB" in note.body
    assert "cuLaunchKernelEx" not in note.body or run.kernels[0].launch_api  # the launch API is not the cause


@pytest.mark.parametrize("variant", ["sdpa_flash", "sdpa_efficient", "sdpa_math"])
def test_computed_occupancy_gets_no_zero_note(variant):
    assert apply(guess_rules.occupancy_not_zero, recorded(variant)) is None


# -- host and memory -----------------------------------------------------------------------------------
def host_figures(run, host_ms: float, pace_ms: float | None = None):
    """The run with unprofiled host figures: a host cost of `host_ms` a call and a back-to-back pace (by default the
    slower of the host and the GPU, as a loop runs)."""
    pace = pace_ms or max(host_ms, run.gpu_ms)
    return dataclasses.replace(
        run, host_cost=Timing.of([host_ms * (0.95 + 0.1 * i / 29) for i in range(30)], "perf_counter per call, GPU parked"),
        back_to_back=Timing.of([pace * (0.98 + 0.04 * i / 7) for i in range(8)], "perf_counter per loop of calls"),
        pin_cost_ms=0.02)


def test_host_bound_uses_the_unprofiled_host_cost_and_names_where_the_host_time_goes():
    flex = host_figures(recorded("flex"), 0.122)
    assert flex.bound == "host"
    note = apply(timing_rules.host_bound, flex)
    assert note.facts["host"].value == pytest.approx(0.122)
    # torch.compile's ranges each by what they are: the graph's wrapper is not the guards (their own op)
    assert "Call CompiledFxGraph" in note.body and "the compiled graph's Python wrapper" in note.body \
        and "guard" not in note.body
    # the cause is read from the run's own host ops: the one with the largest own time, as a share of the profile
    top = max(flex.host_ops, key=lambda h: h.self_us_per_forward)
    assert f"`{text.host_op(top.name)}`'s own time is" in note.body and "of the profiled calls' mean CPU time" in note.body
    fa4 = host_figures(recorded("fa4"), 0.217)
    body = apply(timing_rules.host_bound, fa4).body
    own = next(h for h in fa4.host_ops if h.name == "FlashAttnFunc").self_us_per_forward / (fa4.profiled_host_mean_ms
                                                                                              * 1000)
    assert f"`FlashAttnFunc`'s own time is {text.share(own)} of the profiled calls' mean CPU time" in body \
        and "Python launch path" in body
    # the total the share is of is on the run's card, beside the range's median
    from profiling import reports
    assert f"mean {text.ms(fa4.profiled_host_mean_ms)}, what the host ops' shares are of" in reports.run_card("A", fa4, "x")
    assert "dispatcher" not in body
    for run in RUNS:  # the recording's own figures: a note exactly where the pace is the host's ...
        assert (apply(timing_rules.host_bound, run) is not None) == (run.ok and run.bound == "host")
        # ... and where the loop ran slower than both GPU and host, said as that, not as a bound
        assert (apply(timing_rules.loop_waits, run) is not None) == (run.ok and run.bound == "other")
    assert apply(timing_rules.host_bound, host_figures(recorded("sdpa_flash"), 0.047)) is None


@pytest.mark.parametrize("variant, changes, materialised, wrong", [
    ("naive", {}, True, False),
    ("sdpa_math", {}, True, False),
    ("sdpa_flash", {}, False, False),
    ("sdpa_cudnn", {"seq_len": 4096}, False, False),
    ("sdpa_auto", {"rank": 3}, True, True),  # auto took math: the guess said fused
])
def test_scores_in_memory(variant, changes, materialised, wrong):
    run = recorded(variant, **changes)
    note = apply(guess_rules.scores_in_memory, run)
    assert (note.facts["matrices"].value >= 0.9) == materialised and note.title.startswith("Guess was wrong") == wrong


def test_only_flash_writes_a_log_sum_exp():
    assert "log-sum-exp" in apply(guess_rules.scores_in_memory, recorded("sdpa_flash")).body
    for variant in ("sdpa_efficient", "sdpa_cudnn", "flex"):
        assert "log-sum-exp" not in apply(guess_rules.scores_in_memory, recorded(variant)).body


def test_math_peak_does_not_claim_an_s_by_s_mask():
    """The causal mask is [S, S], not [B, H, S, S]: it is no part of the peak."""
    assert "mask" not in apply(guess_rules.scores_in_memory, recorded("sdpa_math")).body


def test_first_call():
    flex = recorded("flex")
    note = apply(timing_rules.first_call, flex)
    assert note.facts["first"].value == flex.first_call_ms / 1000 and note.facts["first"].unit == "s" and "Triton" in note.body
    assert apply(timing_rules.first_call, dataclasses.replace(flex, first_call_ms=None)) is None
    assert apply(timing_rules.first_call, dataclasses.replace(recorded("sdpa_cudnn"), first_call_ms=0.2)) is None


def test_profiled_and_event_times_are_named_when_they_part():
    """At large sizes the profiled kernels and the CUDA events differ (cuDNN 1×32×16384×128: 3.8 vs 3.3 ms)."""
    cudnn = recorded("sdpa_cudnn")
    slow = copy.deepcopy(cudnn)
    for k in slow.kernels:
        k.us_per_forward *= 1.3
    note = apply(timing_rules.profiled_vs_events, slow)
    assert note.facts["ratio"].value == pytest.approx(1.3 * sum(k.us_per_forward for k in cudnn.kernels)
                                                      / (cudnn.gpu_ms * 1000))
    assert "profiled" in note.title and "CUDA events" in note.title
    parted = abs(sum(k.us_per_forward for k in cudnn.kernels) / (cudnn.gpu_ms * 1000) - 1) > 0.10
    assert (apply(timing_rules.profiled_vs_events, cudnn) is not None) == parted


# -- the ledger ------------------------------------------------------------------------------------------
def test_every_unpredicted_kernel_is_in_the_ledger_with_its_launching_op():
    math = recorded("sdpa_math")
    note = ledger.unpredicted_kernels(math, explained=set())
    predicted, unpredicted, missing = facts.match_guess(math, guess_for("sdpa_math", math.workload))
    assert {u.kernel.name for u in unpredicted} == set(note.kernels) and not missing
    assert note.facts["rows"].value == 8 and "add" in note.body  # nothing else explains add_ here
    assert any("from scaled_dot_product_attention → _scaled_dot_product_attention_math → add_" in e
               for e in note.evidence)
    assert ledger.unpredicted_kernels(recorded("sdpa_flash"), set()) is None  # one kernel, as guessed


def test_the_ledger_names_what_did_not_run():
    note = ledger.unpredicted_kernels(recorded("sdpa_auto", rank=3), set())
    assert "Guessed but not run" in note.body and note.facts["rows"].value == note.facts["table"].value


# -- the environment ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant, changes, why", [
    ("sdpa_flash", {"dtype": "fp32"}, "fp32 inputs"),
    ("sdpa_cudnn", {"dtype": "fp32"}, "fp32 inputs"),
    ("sdpa_flash", {"rank": 3}, "rank-3 inputs"),
    ("sdpa_efficient", {"rank": 3}, "rank-3 inputs"),
])
def test_a_pinned_backend_that_cannot_run_quotes_pytorch(variant, changes, why):
    run = recorded(variant, **changes)
    note = apply(environment_rules.pinned_refused, run)
    assert note.title.endswith(f"cannot run on the H200: {why}") and note.weight == 1.0
    assert note.evidence[0].startswith("PyTorch: ") and "Triggered internally" not in note.evidence[0]
    assert apply(environment_rules.pinned_refused, recorded(variant)) is None


def test_a_run_the_apps_own_check_refused_says_that_check_and_quotes_no_pytorch():
    """A run refused before it ran by the app's check (a paged cache for pinned flash; a block-diagonal mask on
    rank-3 inputs for SDPA left to choose) has no PyTorch warning to quote: its note says the check's reason as a
    sentence, never "Pinned, SDPA does not fall back" (a pin is not why) nor "PyTorch says so"."""
    paged = recorded("sdpa_flash", batch=8, heads=32, kv_heads=8, seq_len=8192, q_len=1, page_size=16, head_dim=128)
    rank3 = recorded("sdpa_docmask", rank=3, timing="cold")
    for run in (paged, rank3):
        assert not run.ok and not run.pytorch_warnings
        note = apply(environment_rules.pinned_refused, run)
        assert note.body == text.as_sentence(run.reason) and note.evidence == [f"refused: {run.reason}"]
        assert "Pinned" not in note.body and "PyTorch" not in note.body and "PyTorch" not in note.evidence[0]
    assert apply(environment_rules.pinned_refused, paged).body.startswith("SDPA has no page table")
    assert apply(environment_rules.pinned_refused, rank3).body.startswith("A block-diagonal mask: it reads")


def test_pinned_cuda_backend_on_cpu(cpu_runs):
    efficient = apply(environment_rules.pinned_refused, cpu_runs["sdpa_efficient"])
    assert efficient.title.endswith("no CPU kernel") and efficient.body.startswith("Memory-efficient and cuDNN")
    assert apply(environment_rules.pinned_refused, cpu_runs["sdpa_flash"]) is None
    # a variant that is no SDPA pin (varlen_attn) is not told SDPA's CPU story: only that it has no CPU kernel
    (varlen,) = measure_runs([VARIANTS["varlen"]], Workload.cpu_default(lengths=(64, 128), heads=2))
    note = apply(environment_rules.pinned_refused, varlen)
    assert note.title.endswith("no CPU kernel") and "cuDNN" not in note.body and "SDPA" not in note.body, note.body
    # SDPA left to choose (nested jagged tensors, causal: refused on a CPU) is not said to be pinned
    (nested,) = measure_runs([VARIANTS["sdpa_nested"]], Workload.cpu_default(lengths=(64, 128), heads=2))
    note = apply(environment_rules.pinned_refused, nested)
    assert not nested.ok and "Pinned" not in note.body and "is_causal=True" in note.body, note.body


def test_rank3_is_stated_for_the_torch_that_ran():
    note = apply(environment_rules.rank3_path, recorded("sdpa_auto", rank=3))
    assert note.title == "Rank-3 input: SDPA took the math path" and "2.11.0+cu130" in note.body
    newer = apply(environment_rules.rank3_path, with_env(recorded("sdpa_auto", rank=3), torch_version="2.14.1"))
    assert "2.14 or newer" in newer.body and "still ran math" in newer.body
    assert apply(environment_rules.rank3_path, recorded("sdpa_auto")) is None
    assert apply(environment_rules.rank3_path, recorded("sdpa_math", rank=3)) is None


def test_auto_choice_states_the_order_and_its_rule():
    note = apply(environment_rules.auto_choice, recorded("sdpa_auto"))
    assert note.title == "Auto ran cudnn, first in SDPA's order on the H200" and "9.15.1" in note.body
    fp32 = apply(environment_rules.auto_choice, recorded("sdpa_auto", dtype="fp32"))
    assert "cudnn and flash refused it: fp16 and bf16 only" in fp32.body and fp32.title.startswith("Auto ran efficient")
    on_a100 = apply(environment_rules.auto_choice, with_env(recorded("sdpa_auto"), compute_capability=(8, 0)))
    assert "never reaches" in on_a100.body  # the trace says cudnn: the order that ran was another one
    assert apply(environment_rules.auto_choice, recorded("sdpa_flash")) is None


def test_auto_says_when_a_pinned_backend_is_faster():
    auto, cudnn, flash = recorded("sdpa_auto"), recorded("sdpa_cudnn"), recorded("sdpa_flash")
    assert facts.ran(auto) == facts.ran(cudnn) == "cudnn" != facts.ran(flash)
    fast = Timing(0.030, 0.029, 0.031, 50, "cuda events")
    note = apply(environment_rules.auto_choice, auto, dataclasses.replace(flash, timing=fast))
    assert "not the fastest" in note.body and note.facts["ratio"].value == pytest.approx(auto.gpu_ms / 0.030)
    assert "ratio" not in apply(environment_rules.auto_choice, auto, cudnn).facts  # level: no claim
    # the same backend, faster (a planted timing): not a faster backend, and the same layout: no gap to explain
    assert "ratio" not in apply(environment_rules.auto_choice, auto, dataclasses.replace(cudnn, timing=fast)).facts


def test_cpu_dispatch(cpu_runs):
    note = apply(environment_rules.cpu_dispatch, cpu_runs["sdpa_flash"])
    assert "_scaled_dot_product_flash_attention_for_cpu" in note.body
    assert apply(environment_rules.cpu_dispatch, recorded("sdpa_flash")) is None


@pytest.mark.parametrize("rule", [guess_rules.library_memsets, guess_rules.occupancy_not_zero,
                                  guess_rules.occupancy_by_design, guess_rules.split_launches, guess_rules.math_guard,
                                  blog_rules.kernel_generation, blog_rules.against_blog, environment_rules.auto_choice])
def test_gpu_rules_stay_quiet_on_cpu(rule, cpu_runs):
    assert all(apply(rule, run) is None for run in cpu_runs.values())


# -- the blog's A100 -------------------------------------------------------------------------------------------
def test_against_the_blog_on_its_workload():
    inplace = recorded("naive_inplace")
    note = apply(blog_rules.against_blog, inplace)
    assert note.facts["blog_kernels"].value == 5 and note.facts["kernels"].value == 6
    assert note.facts["speed"].value == pytest.approx(1955 / (inplace.gpu_ms * 1000))
    assert "per forward on the H200, 1.955 ms on the A100" in note.body
    assert note.title == "Beside the blog's A100 (same workload)"  # the blog's finding is quoted, never the title
    math = apply(blog_rules.against_blog, recorded("sdpa_math"), recorded("naive_inplace"))
    assert round(math.facts["there"].value, 1) == 3.7 and round(math.facts["here"].value, 1) == 2.8
    for variant, changes in (("naive_inplace", {"seq_len": 4096}), ("flex", {}), ("sdpa_auto", {})):
        assert apply(blog_rules.against_blog, recorded(variant, **changes)) is None


def test_ampere_design_kernels_are_not_said_to_run_sm80_code():
    note = apply(blog_rules.kernel_generation, recorded("sdpa_efficient"))
    assert note.title == "Ampere-design kernels on sm90" and "compiled for sm90 too" in note.body
    assert "unchanged" not in note.body and "built for sm80" not in note.body
    flash = apply(blog_rules.kernel_generation, recorded("sdpa_flash"))
    assert flash.kernels == [recorded("sdpa_flash").kernels[0].name]  # FlashAttention-2: no sm80 in its name
    ffma = apply(blog_rules.kernel_generation, recorded("sdpa_math"))
    assert "FP32 throughput" in ffma.body and "pull ahead" not in ffma.body
    assert apply(blog_rules.kernel_generation, recorded("sdpa_cudnn")) is None  # written for sm90
    assert apply(blog_rules.kernel_generation, with_env(recorded("sdpa_efficient"), compute_capability=(8, 0))) is None


def test_nvjet_gemms():
    note = apply(blog_rules.nvjet_gemms, recorded("naive"))
    assert len(note.kernels) == 2 and "sm90" in note.body
    assert apply(blog_rules.nvjet_gemms, recorded("sdpa_math")) is None  # FP32 GEMMs: sm80 xmma, not nvjet


def test_the_ranking_against_the_blog_is_said_once_with_its_reason():
    flash, cudnn = recorded("sdpa_flash"), recorded("sdpa_cudnn")
    note = apply(blog_rules.ranking_vs_blog, cudnn, flash)
    assert note.title == "SDPA · cuDNN ranks #1 of 2 on the H200, #2 on the blog's A100"
    assert "written for sm90 (its name says so)" in note.body and "Ampere-design" in note.body
    assert apply(blog_rules.ranking_vs_blog, flash, cudnn) is None  # said once, about the run that moved up
    assert apply(blog_rules.ranking_vs_blog, recorded("sdpa_efficient"), flash) is None  # the same order


# -- the verdict's notes on recorded traces (timings given samples around the recorded medians) -----------------
def sampled(run, spread: float = 0.01, n: int = 20, seed: int = 0):
    """The recorded run with `n` timing and pace samples around its recorded medians, one session: the recording
    predates kept samples, and the rules under test read the traces, not the samples."""
    import random
    rng = random.Random(seed)
    def around(t):
        return Timing.of([t.median_ms * (1 + rng.gauss(0, spread)) for _ in range(n)], t.method) if t else None
    return dataclasses.replace(run, session="one", timing=around(run.timing), back_to_back=around(run.back_to_back),
                               host_cost=around(run.host_cost))


def test_either_side_unsupported():
    c = explain(Comparison(recorded("sdpa_flash", dtype="fp32"), recorded("sdpa_efficient", dtype="fp32")))
    assert "SDPA · FlashAttention [A] could not run on the H200 (fp32 inputs)" in c.headline.title
    assert "ran at" in c.headline.title and not [n for n in c.notes if n.side == "pair"]


def test_the_speed_note_gives_a_reason_or_says_none_is_known():
    naive, math = sampled(recorded("naive"), seed=1), sampled(recorded("sdpa_math"), seed=2)
    (speed,) = [n for n in explain(Comparison(naive, math)).notes if n.rule == "speed"]
    assert speed.title == f"Guessed SDPA · math faster; Naive (masked_fill) is, by {text.times(math.gpu_ms / naive.gpu_ms)}"
    assert "FFMA" in speed.body
    flash, cudnn = sampled(recorded("sdpa_flash"), seed=3), sampled(recorded("sdpa_cudnn"), seed=4)
    (flash_loses,) = [n for n in explain(Comparison(flash, cudnn)).notes if n.rule == "speed"]
    assert "SDPA · cuDNN's kernel is written for sm90" in flash_loses.body and "Ampere-design" in flash_loses.body
    inplace = sampled(recorded("naive_inplace"), seed=5)
    (copy_costs,) = [n for n in explain(Comparison(naive, inplace)).notes if n.rule == "speed"]
    (memcpy,) = [k for k in naive.kernels if k.category == "memcpy"]  # compared by role, not by name
    assert f"memcpy kernels take {text.us(memcpy.us_per_forward)} per forward; Naive (in-place masked_fill_) runs none" \
        in copy_costs.body


def test_a_host_bound_loss_is_explained_by_the_host_not_by_kernels():
    flex = host_figures(sampled(recorded("flex"), seed=6), 0.122)
    flex = dataclasses.replace(flex, back_to_back=Timing.of([0.125 * (1 + i / 400) for i in range(8)], "loop"))
    cudnn = sampled(recorded("sdpa_cudnn"), seed=7)
    c = explain(Comparison(flex, cudnn))
    (why,) = [n for n in c.notes if n.rule == "speed"]
    assert "back to back" in c.headline.title and "host-bound" in why.body and "kernels to" not in why.body


def test_host_ranking_needs_the_host_figures_and_the_test():
    flash, cudnn = host_figures(recorded("sdpa_flash"), 0.047), host_figures(recorded("sdpa_cudnn"), 0.060)
    flash, cudnn = dataclasses.replace(flash, session="one"), dataclasses.replace(cudnn, session="one")
    (note,) = [n for n in verdict.ranking_notes(flash, cudnn) if n.rule == "host_ranking"]
    assert note.title.startswith("Guessed SDPA · cuDNN lighter on the host; SDPA · FlashAttention is")
    alike = host_figures(recorded("sdpa_cudnn"), 0.047)
    assert not [n for n in verdict.ranking_notes(flash, dataclasses.replace(alike, session="one"))
                if n.rule == "host_ranking"]


# -- kernels' launchers, read from the trace -------------------------------------------------------------------
def test_the_trace_says_which_op_launched_each_kernel():
    naive = recorded("naive")
    (memcpy,) = [k for k in naive.kernels if k.category == "memcpy"]
    assert memcpy.launched_by == [Launch(["aten::masked_fill", "aten::clone", "aten::copy_"], 1.0,
                                         pytest.approx(memcpy.us_per_forward))]
    where = kernel(recorded("sdpa_math"), "elementwise_kernel [where]")
    assert [launch.ops[-2:] for launch in where.launched_by] == [["aten::where", "aten::where"],
                                                                 ["aten::_safe_softmax", "aten::where"]]
    assert isinstance(where, Kernel) and all(k.launched_by for r in RUNS for k in r.kernels if r.ok)


def test_blog_reference_is_the_blog():
    assert BLOG.compute_capability == (8, 0) and BLOG.matches(Workload.blog())
    assert BLOG.differences(Workload.blog(seq_len=4096, rank=3)) == ["seq_len 4096 vs 1024", "rank 3 vs 4"]
    assert round(BLOG.results["sdpa_math"].gpu_us / BLOG.results["naive_inplace"].gpu_us, 1) == 3.7


def test_masked_fill_moves_the_scores_slower_than_the_scale_and_says_by_how_much():
    """Naive's masked_fill and `mul` each read and write the S×S scores: the note's rates are those bytes over each
    kernel's time, re-derived here from the recorded rows; the generic kernel against the vectorized one."""
    from profiling.explain import mask_rules
    run = recorded("naive")
    fill = next(k for k in run.kernels if k.short_name == "elementwise_kernel [masked_fill]")
    mul = next(k for k in run.kernels if k.short_name == "vectorized_elementwise_kernel [mul]")
    moved = 2 * run.workload.batch * run.workload.heads * run.workload.seq_len ** 2 * 2  # bf16, read + written
    n = mask_rules.masked_fill_rate(run, {})
    assert n.facts["fill"].value == pytest.approx(moved / fill.us_per_forward)
    assert n.facts["mul"].value == pytest.approx(moved / mul.us_per_forward)
    assert n.title == (f"masked_fill, the forward's largest kernel, moves {text.bandwidth(moved / fill.us_per_forward)}; "
                       f"the scale's mul {text.bandwidth(moved / mul.us_per_forward)}")
    assert fill.us_per_forward > mul.us_per_forward and "2.8× slower per byte" in n.body
    assert "The causal mask" not in n.body and "the causal mask, one S×S matrix" in n.body
    assert mask_rules.masked_fill_rate(recorded("sdpa_flash"), {}) is None


def test_the_grouped_query_notes_figures_are_the_tensors_own():
    """What k and v hold, counted on the tensors a workload makes (not on the note's own formula); the FLOPs over
    every query head: the GQA recording's TFLOP/s from its pairs, its heads and its D."""
    (run,) = [r for r in RUNS if r.variant == "sdpa_cudnn" and r.workload.kv_heads == 8 and r.workload.passes == "fwd"
                              and r.workload.q_len is None and r.workload.timing == "warm"]
    note = apply(mask_rules.kv_savings, run)
    x = run.workload.replace(device="cpu", batch=1, seq_len=64).make_inputs()  # the same layout, a small S
    per_token = (x.k.numel() + x.v.numel()) * x.k.element_size() / 64
    assert note.facts["bytes"].value == per_token * run.workload.seq_len * run.workload.batch
    w = run.workload
    assert run.tflops == pytest.approx(4 * w.batch * w.heads * w.head_dim * w.pairs / (run.gpu_ms * 1e-3) / 1e12)


def test_the_guess_s_kernel_is_paired_with_the_launch_of_its_kind_that_takes_the_most_time():
    """Flash's backward launches dot(dO, O) (16 µs) before its dq/dk/dv kernel (220 µs), both fused attention of the
    backward: the guess's one backward kernel is the main one, so the ledger lists the small ones as unpredicted, never
    the kernel that does the backward's work (it named it, 72% of the backward, as 'not in the guess')."""
    from profiling.explain.facts import guess, match_guess

    for variant in ("sdpa_flash", "sdpa_cudnn"):
        run = recorded(variant, passes="bwd")
        taken, unpredicted, _ = match_guess(run, guess(run))
        for index in taken:
            k = run.kernels[index]
            rivals = [r for r in run.kernels if (r.phase, r.category) == (k.phase, k.category)]
            assert k.us_per_forward == max(r.us_per_forward for r in rivals), (variant, k.name)
        main = max(run.kernels_of("backward"), key=lambda k: k.us_per_forward)
        assert all(u.kernel is not main for u in unpredicted if u.whole), (variant, main.name)


def test_the_explainer_reads_traits_and_never_spells_a_variant_s_key():
    """Rules read a variant's traits and its own words (`base.Variant`: handwritten, in_place, no_split_kv_on,
    packed_ops, words), never its key: a new variant's notes then come from its own file. A quoted key anywhere in
    profiling/explain/ fails this."""
    import re
    from pathlib import Path

    from attention_variants import KEYS

    quoted = re.compile(r"""(["'])(%s)\1""" % "|".join(map(re.escape, KEYS)))  # a key as a whole string
    found = [f"{path.name}:{i}: {line.strip()}" for path in sorted(Path(facts.__file__).parent.glob("*.py"))
             for i, line in enumerate(path.read_text().splitlines(), 1) if quoted.search(line)]
    assert not found, found


def test_fused_is_what_the_call_ran_not_how_it_was_built():
    """FlashAttention-4 (compiled just in time, not by torch.compile) and varlen_attn call fused kernels themselves:
    fused; SDPA is fused only where the trace shows a fused backend (auto may take math); plain ops never are."""
    from profiling.replay import recorded_runs

    seen = {}
    for run in recorded_runs("h200-torch2.11"):
        if run.ok and run.variant in ("fa4", "varlen", "naive", "sdpa_math", "flex", "sdpa_cudnn"):
            seen.setdefault(run.variant, set()).add(facts.fused(run))
    assert seen == {"fa4": {True}, "varlen": {True}, "flex": {True}, "sdpa_cudnn": {True}, "naive": {False},
                    "sdpa_math": {False}}, seen
