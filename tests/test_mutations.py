"""Planted faults a user would see as a wrong answer, each caught by the test named beside it: the fault is planted
as behaviour (a function or a table replaced for the test's duration), not as an edit of the source's text, so a
refactor cannot quietly turn it into a fault of nothing. Each check is a test of the suite, called as it is; under
the fault it must fail by an assertion (a crash would prove nothing about the truth it checks).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import pytest

import test_cost_model_gpu
import test_counters
import test_dispatch
import test_energy
import test_environment
import test_explain_recorded
import test_explain_rules
import test_fp8
import test_fp8_twin
import test_measurement_cpu
import test_memory_estimate
import test_sweep
import test_recording
import test_roofline
import test_scores
import test_sweep_notes
import test_text
import test_timing_modes
import test_trace_h200
import test_verdict
import test_workload
import torch
from attention_variants import fa3, flex
from attention_variants.base import Variant
from profiling import scores
from profiling import accuracy, budget, dispatch, environment, explain, gpu_paths, measurement, replay, stats, text, timing, trace
from profiling.explain import blog_rules, curves, facts, guess_rules, ledger, mask_rules, verdict
from profiling.counters import Counters
from profiling.results import Run
from profiling.workload import PASS_FLOPS, Inputs, Workload


@dataclasses.dataclass(frozen=True)
class Fault:
    name: str
    plant: Callable[[pytest.MonkeyPatch], None]
    check: Callable[[pytest.MonkeyPatch], None]  # a test of the suite that must now fail


def _decide_with(**forced):
    real = stats.decide
    return lambda a, b, **kw: real(a, b, **(kw | forced))


def _flipped_decide(a, b, **kw):
    d = _REAL_DECIDE(a, b, **kw)
    swapped = {"a": "b", "b": "a"}.get(d.faster)
    return dataclasses.replace(d, faster=swapped) if d.kind == "ranked" else d


_REAL_DECIDE = stats.decide
_REAL_MOVED = Workload.moved_bytes
_REAL_RATIO = facts.ratio
_REAL_FIGURE = verdict.figure
_REAL_SHARE_BY_PHASE = trace.share_by_phase
_REAL_INPUTS = Workload.make_inputs
_REAL_PASS_TIMINGS = timing._pass_timings
_REAL_SHARE_OF = facts.share_of
_REAL_PROBLEM = replay._problem
_REAL_LIMIT = facts.WrongAnswer.limit
_REAL_LOOP_STEP = timing._loop_step


def _kv_heads_not_looked_up(mp):
    """Replay's lookup key without kv_heads (its index made afresh under it)."""
    mp.setattr(replay, "_problem", lambda w: _REAL_PROBLEM(w).replace(kv_heads=None))
    mp.setattr(replay, "_INDEXES", {})


def _host_cost_figure(a, b):
    path, words = _REAL_FIGURE(a, b)
    return ("host_cost", words) if path == "back_to_back" else (path, words)


def _wider_window(self):
    """make_inputs with a sliding window one key wider than W."""
    x = _REAL_INPUTS(self)
    if self.mask == "window":
        offsets = torch.arange(self.offset, self.seq_len)[:, None] - torch.arange(self.seq_len)[None, :]
        x = dataclasses.replace(x, allowed=(offsets >= 0) & (offsets <= self.window))
    return x


def _step_as_forward(run, per_phase, method):
    _REAL_PASS_TIMINGS(run, per_phase, method)
    if run.workload.passes == "fwd+bwd":
        run.timing = run.forward_timing


def _share_of_the_step(run, kernels, phase, who="run"):
    said = _REAL_SHARE_OF(run, kernels, phase, who)
    return dataclasses.replace(said, value=sum(k.us_per_forward for k in kernels) / run.gpu_us("step"))


def _gpu_cost(**scaled):
    """The GPU cost model with each named figure multiplied by its factor."""
    cost = budget.COSTS["cuda"]
    return {"cuda": dataclasses.replace(cost, **{k: getattr(cost, k) * f for k, f in scaled.items()})} | {
        "cpu": budget.COSTS["cpu"]}


def _every_recorded_gpu_group(mp):
    for runs in test_cost_model_gpu.groups():
        test_cost_model_gpu.test_a_recorded_group_took_at_most_its_prediction_and_a_fifth_of_it_from_nothing(runs)


def _without(rule):
    return tuple(r for r in explain.RULES if r is not rule)


def _call(test, *args):
    return lambda mp: test(*args)


def _twin(check):
    """A check of test_fp8_twin, with its CPU stand-in and twin registered for the check's duration."""
    def run(mp):
        twins = test_fp8_twin.register(mp)
        return check(*([twins, mp] if "monkeypatch" in check.__code__.co_varnames else [twins]))
    return run


FAULTS = [
    Fault("verdict: the winner and the loser swapped",
          lambda mp: mp.setattr(stats, "decide", _flipped_decide),
          _call(test_verdict.test_a_clear_gap_is_ranked_and_its_ratio_is_the_medians_ratio)),
    Fault("verdict: the ratio upside down",
          lambda mp: mp.setattr(verdict, "ratio", lambda n, d, unit="x": _REAL_RATIO(d, n, unit)),
          _call(test_verdict.test_a_clear_gap_is_ranked_and_its_ratio_is_the_medians_ratio)),
    Fault("verdict: noise called a winner (level 0.5)", lambda mp: mp.setattr(stats, "decide", _decide_with(level=0.5)),
          _call(test_verdict.test_a_big_gap_the_test_cannot_confirm_is_not_called_level)),
    Fault("verdict: no practical threshold", lambda mp: mp.setattr(stats, "decide", _decide_with(practical=0.0)),
          _call(test_verdict.test_a_tiny_real_gap_is_no_practical_difference_and_never_1_0x)),
    Fault("verdict: a host cost as the headline's figure", lambda mp: mp.setattr(verdict, "figure", _host_cost_figure),
          _call(test_verdict.test_a_host_bound_side_puts_both_on_the_back_to_back_pace)),
    Fault("rule switched off: the hidden copy",
          lambda mp: mp.setattr(explain, "RULES", _without(guess_rules.hidden_copy)),
          _call(test_explain_recorded.check_golden, "naive vs naive_inplace · B=8, H=16, S=1024, D=64, bf16, causal")),
    Fault("rule switched off: the fp32 GEMMs",
          lambda mp: mp.setattr(explain, "RULES", _without(guess_rules.fp32_gemms)),
          _call(test_explain_recorded.check_golden, "sdpa_math vs sdpa_efficient")),
    Fault("a reason skipped: the speed note without the GPU's reasons",
          lambda mp: mp.setattr(verdict, "_gpu_reasons", lambda fast, slow, side: ([], {})),
          _call(test_explain_rules.test_the_speed_note_gives_a_reason_or_says_none_is_known)),
    Fault("a kernel dropped from the parsed table",
          lambda mp: mp.setattr(trace, "share_by_phase", lambda ks: _REAL_SHARE_BY_PHASE(ks[:-1])),
          _call(test_trace_h200.test_every_recorded_trace_parses_to_its_stored_tables_row_by_row)),
    Fault("backward kernels filed as the forward's", lambda mp: mp.setattr(trace, "BACKWARD_MARK", "no such op:"),
          _call(test_trace_h200.test_every_recorded_trace_parses_to_its_stored_tables_row_by_row)),
    Fault("a forward kernel in a backward view",
          lambda mp: mp.setattr(Run, "kernels_of", lambda self, phase=None: list(self.kernels)),
          _call(test_explain_recorded.test_every_recorded_runs_phases_are_the_oracles)),
    Fault("a note's share taken of the step, said of its phase",
          lambda mp: [mp.setattr(module, "share_of", _share_of_the_step)
                      for module in (facts, guess_rules, mask_rules, blog_rules, ledger)],
          lambda mp: test_explain_recorded.check_shares(
              [(c, explain.explain(c)) for c in test_explain_recorded.PAIRS
               if c.a.workload.passes == "fwd+bwd" and c.a.variant == "naive"])),
    Fault("a unit off by 1000: ms written as µs figures",
          lambda mp: mp.setitem(text.FORMATS, "ms", lambda v: f"{v * 1000:.3f} ms"),
          _call(test_text.test_each_unit_has_one_spelling, "ms", 0.0603, "0.060 ms")),
    Fault("a unit off by 1000: CPU timings in seconds",
          lambda mp: mp.setattr(timing, "_pass_timings", lambda run, per_phase, method: _REAL_PASS_TIMINGS(
              run, [[x / 1000 for x in p] for p in per_phase], method)),
          _call(test_measurement_cpu.test_a_cpu_timing_is_wall_milliseconds_by_an_independent_clock)),
    Fault("a training step's time reported as its forward's", lambda mp: mp.setattr(timing, "_pass_timings",
                                                                                    _step_as_forward),
          _call(test_measurement_cpu.test_a_training_steps_time_is_its_forward_plus_its_backward_of_the_same_calls)),
    Fault("gradients' reference without the mask",
          lambda mp: mp.setattr(accuracy, "pipeline", lambda q, k, x, **kw: (q @ k.transpose(-2, -1)) * x.scale),
          _call(test_measurement_cpu.test_the_app_s_reference_is_the_oracle_s_for_every_mask_and_kv_heads, {})),
    Fault("a sliding window one key too wide", lambda mp: mp.setattr(Workload, "make_inputs", _wider_window),
          _call(test_workload.test_each_mask_kind_allows_what_it_says)),
    Fault("FLOPs not halved when causal",
          lambda mp: mp.setattr(Workload, "pairs", property(lambda self: self.queries * self.seq_len)),
          _call(test_workload.test_the_pairs_and_the_flops_are_the_masks_own_count, {})),
    Fault("GQA FLOPs counted over kv heads",
          lambda mp: mp.setattr(Workload, "flops", property(
              lambda self: 4.0 * self.batch * self.kv_head_count * self.head_dim * self.pairs)),
          _call(test_workload.test_the_pairs_and_the_flops_are_the_masks_own_count, {"kv_heads": 4})),
    Fault("a GQA note's k and v bytes at full heads",
          lambda mp: mp.setattr(Workload, "kv_bytes", property(
              lambda self: 2 * self.batch * self.heads * self.seq_len * self.head_dim * self.element_bytes)),
          _call(test_explain_rules.test_the_grouped_query_notes_figures_are_the_tensors_own)),
    Fault("the H200's bf16 peak doubled",
          lambda mp: mp.setitem(environment.PEAK_TFLOPS, "H200", {"bf16": 1979.0, "fp16": 1979.0, "fp32": 67.0}),
          _call(test_environment.test_the_peak_table_is_the_datasheets, "NVIDIA H200", (989, 67))),
    Fault("flex rebuilding its block mask every call",
          lambda mp: mp.setattr(flex, "_mask_of", lambda x: flex._block_mask.__wrapped__(
              *flex._mask_key(x.workload), x.allowed if x.workload.mask == "bool" else None)
              if flex._mask_key(x.workload) else None),
          lambda mp: test_measurement_cpu.test_flex_builds_its_block_mask_once_not_per_call(mp)),
    Fault("a crossover without the test", lambda mp: mp.setattr(curves, "decision", lambda a, b: dataclasses.replace(
              verdict.decision(a, b), kind="ranked")),
          _call(test_sweep.test_no_crossover_is_claimed_where_the_test_cannot_rank_them)),
    Fault("flash's split-KV partials left out of a decode step's memory",
          lambda mp: mp.setattr(gpu_paths, "flash_splits", lambda w, sm_count: 1),
          _call(test_memory_estimate.test_flash_s_split_count_is_the_one_the_recorded_grids_show)),
    Fault("a decode step's auto dispatch read from SDPA's order alone",
          lambda mp: mp.setattr(Workload, "lower_right", property(lambda self: False)),
          _call(test_dispatch.test_the_rules_predict_every_recorded_h200_outcome)),
    Fault("a decode step's Lq×S scores called S×S",
          lambda mp: mp.setattr(text, "score_grid", lambda text_, queries, keys: text_),
          _call(test_explain_recorded.check_golden, "naive vs sdpa_flash · B=8, H=32, kv 8, S=8192, q_len 1")),
    Fault("a sweep over B said to grow as S",
          lambda mp: mp.setattr(text, "axis_symbol", lambda axis: "S"),
          _call(test_sweep_notes.test_every_recorded_pair_is_told_in_short_true_sentences)),
    Fault("a wrong answer ranked: the correctness gate off",
          lambda mp: mp.setattr(facts, "WRONG_FACTOR", float("inf")),
          _call(test_verdict.test_a_wrong_answer_is_never_ranked_and_the_headline_gives_both_errors_and_the_limit)),
    Fault("a cold-L2 flush that writes nothing", lambda mp: mp.setattr(timing.L2Flush, "__call__", lambda self: None),
          _call(test_timing_modes.test_the_cold_flush_writes_every_byte_of_its_buffer)),
    Fault("a cold-L2 flush that writes half its buffer",
          lambda mp: mp.setattr(timing.L2Flush, "__call__", lambda self: self.buffer[:self.n_bytes // 2].zero_()),
          _call(test_timing_modes.test_the_cold_flush_writes_every_byte_of_its_buffer)),
    Fault("replay's lookup blind to kv_heads: an MHA request answered with the GQA run", _kv_heads_not_looked_up,
          _call(test_recording.test_replay_answers_each_recorded_workload_with_a_run_of_that_workload_in_every_field)),
    Fault("the GPU's seconds a measurement holds beside its calls halved",
          lambda mp: mp.setattr(budget, "COSTS", _gpu_cost(per_measure_s=0.5, training_measure_s=0.5)),
          _every_recorded_gpu_group),
    Fault("the GPU's compile seconds doubled", lambda mp: mp.setattr(budget, "COSTS", _gpu_cost(compile_s=2.0)),
          _every_recorded_gpu_group),
    Fault("a GPU's reserved but unallocated bytes all counted free",
          lambda mp: mp.setattr(budget, "releasable_cached_bytes", lambda: sum(
              seg["total_size"] - seg["allocated_size"] for seg in torch.cuda.memory_snapshot())),
          lambda mp: test_memory_estimate.test_a_gpu_counts_as_free_only_the_cached_segments_the_allocator_can_give_back(
              mp)),
    Fault("a score transform's derivative left out of the reference's backward",
          lambda mp: mp.setattr(accuracy, "backward", lambda grad, q, k, x: grad),
          _call(test_scores.test_the_reference_gradients_of_a_softcapped_step_are_autograd_s_of_the_formula, {})),
    Fault("the score pipeline skipping the transforms the workload sets",
          lambda mp: mp.setattr(scores, "active", lambda w: []),
          _call(test_scores.test_a_softcapped_output_is_the_formula_s, "naive", {})),
    Fault("a variant taken to apply a score transform it does not declare",
          lambda mp: mp.setattr(Variant, "applies", lambda self, mod: True),
          _call(test_scores.test_a_variant_without_softcap_refuses_it_in_one_line, "sdpa_flash")),
    Fault("fp8: FA3 called without its descales (the answer off by orders of magnitude, and fast)",
          lambda mp: mp.setattr(fa3, "descales", lambda x: {}),
          lambda mp: test_fp8.test_fa3_s_fp8_call_with_its_descales_passes_the_gate_and_its_headline_states_both_errors(
              mp)),
    Fault("fp8: the gate blind to the quantisation's own error (plain bf16's alone)",
          lambda mp: mp.setattr(facts.WrongAnswer, "limit", lambda self, plain, quantised=None: _REAL_LIMIT(self, plain)),
          _call(test_fp8.test_the_fp8_gate_sits_between_a_right_fp8_answer_and_a_dropped_scale)),
    Fault("fp8: the quantisation's part taken on the unquantised inputs",
          lambda mp: mp.setattr(Inputs, "dequantised", lambda self: self.exact()),
          _call(test_fp8.test_the_accuracy_splits_into_the_quantisation_s_part_re_derived_from_the_formula,
                test_fp8.SMALL)),
    Fault("fp8 twin: its quantisation not applied (its run and inputs the 16-bit workload's)",
          lambda mp: mp.setattr(Variant, "effective", lambda self, w: w),
          _twin(test_fp8_twin.test_a_twin_beside_its_base_runs_live_on_one_draw_and_the_headline_states_both_errors)),
    Fault("fp8 twin: its inputs drawn anew instead of quantised from its partner's",
          lambda mp: mp.setattr(measurement._WorkloadCache, "inputs_for", lambda self, w: w.make_inputs()),
          _twin(test_fp8_twin.test_a_twin_beside_its_base_runs_live_on_one_draw_and_the_headline_states_both_errors)),
    Fault("fp8 twin: its scales ignored and the gate blind to it (the answer off by orders of magnitude, and fast)",
          lambda mp: mp.setattr(verdict, "wrong_answer", lambda run: None),
          _twin(test_fp8_twin.test_a_twin_that_ignores_its_scales_is_caught_by_the_correctness_gate)),
    Fault("a slope stated over noise", lambda mp: (mp.setattr(curves, "MIN_R2", -1.0),
                                                  mp.setattr(curves, "_apart", lambda first, last: True)),
          _call(test_sweep.test_no_exponent_is_supported_over_noisy_points)),
    Fault("roofline: the intensity over the dense FLOPs (every pair, the causal mask's skipped ones too)",
          lambda mp: mp.setattr(Workload, "pass_flops", property(lambda w: w.dense_flops * PASS_FLOPS[w.passes])),
          _call(test_roofline.test_the_blog_runs_point_is_its_flops_over_its_bytes_and_its_time_re_derived_by_hand)),
    Fault("roofline: the bytes moved counted twice",
          lambda mp: mp.setattr(Workload, "moved_bytes", lambda w, *a, **k: 2 * _REAL_MOVED(w, *a, **k)),
          _call(test_roofline.test_the_blog_runs_point_is_its_flops_over_its_bytes_and_its_time_re_derived_by_hand)),
    Fault("energy: a graph loop's joules divided by its replays, not its calls",
          lambda mp: mp.setattr(timing, "_loop_step", lambda s: (lambda r: (r[0], 1, r[2]))(_REAL_LOOP_STEP(s))),
          lambda mp: test_energy.test_a_graph_run_s_loop_replays_its_graph_and_counts_its_calls_not_its_replays(
              *test_energy.fake_gpu_and_nvml(mp), mp)),
    Fault("counters: the DRAM note's bytes read with the bytes written added to them",
          lambda mp: mp.setattr(Counters, "dram_read_bytes",
                                property(lambda c: c._sum("dram_read") + c._sum("dram_write"))),
          _call(test_counters.test_the_dram_note_is_the_counted_bytes_against_q_k_v_in_and_out_out_re_derived_by_hand)),
]


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_a_planted_fault_is_caught_by_its_test(fault, monkeypatch):
    fault.check(monkeypatch)  # the check passes on the code as it is ...
    fault.plant(monkeypatch)
    with pytest.raises(AssertionError):  # ... and fails, by an assertion, with the fault planted
        fault.check(monkeypatch)
