"""The explainer's notes on how a run was timed, on runs of the H200 recording changed as each lesson needs (a cold
or graph mode, an L2, clocks, a copy ceiling): the L2 a warm loop reads from, what a cold one changed, a CUDA graph
that changes the winner, the bytes moved against the copy ceiling, clocks that moved and a MIG slice; and the verdict
that compares each mode's own figure. Every number is checked against its source (`apply`), and the arithmetic is
re-derived here from the workload's shapes."""
from __future__ import annotations

import dataclasses

import pytest
from explain_helpers import apply, recorded, with_env

from profiling import text
from profiling.environment import Clocks
from profiling.explain import explain, timing_rules
from profiling.explain.verdict import decision, figure, headline
from profiling.results import Comparison, Run, Timing
from profiling.workload import NAMED, Workload

L2 = 60 * 10**6           # bytes: the H200's L2 as the issue gives it
CEILING = 4.3e12          # bytes/s: the H200's measured D2D copy (DESIGN)


def moded(run: Run, mode: str, *, scale: float = 1.0, **workload) -> Run:
    """The run as a `mode` measurement would leave it: the recorded warm figure kept as `warm_timing`, its own figure
    the warm samples times `scale`."""
    warm = run.timing
    timing = Timing.of([t * scale for t in warm.samples_ms], "cuda events, L2 flushed before each call")
    w = run.workload.replace(timing=mode, **workload)
    run = dataclasses.replace(run, workload=w, timing=timing, warm_timing=warm,
                              flush_bytes=2 * L2 if mode == "cold" else None)
    return with_env(run, l2_cache_bytes=L2)


# -- the bytes model, re-derived -----------------------------------------------------------------------------
def element_count(*shape: int) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@pytest.mark.parametrize("workload, forward, step", [
    # q and out: B·H·S·D bf16; K and V: B·Hkv·S·D each
    (Workload.blog(), 4 * element_count(8, 16, 1024, 64) * 2, 12 * element_count(8, 16, 1024, 64) * 2),
    (NAMED["llama"],
     (2 * element_count(4, 32, 2048, 128) + 2 * element_count(4, 8, 2048, 128)) * 2,
     (6 * element_count(4, 32, 2048, 128) + 6 * element_count(4, 8, 2048, 128)) * 2),
    # a bias of S×S bf16, read by the forward and again by the backward (it recomputes the scores)
    (Workload.blog(mask="bias"), 4 * element_count(8, 16, 1024, 64) * 2 + 1024 * 1024 * 2,
     12 * element_count(8, 16, 1024, 64) * 2 + 2 * 1024 * 1024 * 2),
])
def test_the_bytes_a_pass_moves_are_its_tensors_once_each(workload, forward, step):
    assert workload.moved_bytes("forward") == forward
    assert workload.moved_bytes("step") == step
    assert workload.moved_bytes("backward") == step - forward
    assert workload.working_set_bytes("forward") == forward
    assert workload.working_set_bytes("step") < step  # q, K, V, out are read by both halves: counted once


def test_memory_traffic_is_bytes_over_the_figure_s_time_against_the_copy_ceiling():
    run = with_env(recorded("sdpa_flash"), copy_bytes_per_s=CEILING)
    note = apply(timing_rules.memory_traffic, run)
    moved = 4 * 8 * 16 * 1024 * 64 * 2                                   # 64 MiB
    seconds = run.timing.median_ms / 1000
    assert note.facts["moved"].value == moved
    assert note.facts["rate"].value * 1e6 == pytest.approx(moved / seconds)             # bytes per µs -> per s
    assert note.facts["share"].value == pytest.approx(moved / seconds / CEILING)
    assert note.title.startswith(f"q + K + V + out = 64.0 MiB in {text.ms(run.timing.median_ms)}: ") \
        and "of the copy ceiling" in note.title and "A device-to-device copy ran at" in note.body
    assert note.weight == pytest.approx(min(0.5, 0.5 * moved / seconds / CEILING))
    # no copy measured: the datasheet's HBM figure for the H200, said so
    older = apply(timing_rules.memory_traffic, with_env(recorded("sdpa_flash"), copy_bytes_per_s=None))
    assert older.facts["ceiling"].source == "hbm[H200]" and "of the datasheet's HBM bandwidth" in older.title


def test_a_step_s_traffic_names_its_forward_and_backward_apart():
    run = with_env(recorded("sdpa_flash", passes="fwd+bwd"), copy_bytes_per_s=CEILING)
    note = apply(timing_rules.memory_traffic, run)
    assert note.title.startswith("forward (q + K + V + out) + backward (q + K + V + out + dout + dq + dK + dV) = "
                                 "192.0 MiB in ")


# -- the L2 -------------------------------------------------------------------------------------------------
def test_a_warm_loop_over_a_working_set_that_fits_the_l2_says_so():
    small = dataclasses.replace(with_env(recorded("sdpa_flash"), l2_cache_bytes=L2), workload=Workload.blog(batch=4))
    note = apply(timing_rules.l2_resident, small)
    assert note.facts["set"].value == 4 * 4 * 16 * 1024 * 64 * 2 <= L2                # 32 MiB of q, K, V, out
    assert note.title == "q, K, V and out (32.0 MiB) fit in the 57.2 MiB L2: a warm loop reads them from there"
    blog = with_env(recorded("sdpa_flash"), l2_cache_bytes=L2)                    # 64 MiB: past the L2
    assert apply(timing_rules.l2_resident, blog) is None
    assert apply(timing_rules.l2_resident, with_env(small, l2_cache_bytes=None)) is None  # an L2 not recorded: none
    assert apply(timing_rules.l2_resident, moded(small, "cold")) is None            # cold: nothing left in L2


def test_cold_says_what_the_flush_changed_against_the_warm_figure():
    run = moded(recorded("sdpa_flash"), "cold", scale=1.3)
    note = apply(timing_rules.cold_l2, run)
    assert note.facts["ratio"].value == pytest.approx(run.timing.median_ms / run.warm_timing.median_ms)
    assert note.title.startswith(f"With the L2 flushed, a forward takes {text.ms(run.timing.median_ms)}: 1.3× the "
                                 f"warm {text.ms(run.warm_timing.median_ms)}")
    assert note.facts["flush"].value == 2 * L2 and "twice the 57.2 MiB L2" in note.body
    assert "exceeds the L2" in note.body                                             # 64 MiB against 57.2 MiB
    level = apply(timing_rules.cold_l2, moded(recorded("sdpa_flash"), "cold", scale=1.01))
    assert level.title.startswith("Flushing the L2 changed a forward by under 3%")
    assert level.weight < note.weight
    assert apply(timing_rules.cold_l2, recorded("sdpa_flash")) is None              # warm: nothing to compare


# -- a CUDA graph ----------------------------------------------------------------------------------------------
def test_a_graph_that_removes_a_host_bound_side_s_launch_cost_and_changes_the_winner_says_so():
    # recorded: FA4 0.071 ms on the GPU but 0.232 ms back to back (host-bound); flash 0.095 ms, GPU-bound
    fa4, flash = (moded(recorded(k), "graph") for k in ("fa4", "sdpa_flash"))
    assert fa4.bound == "host" and flash.bound == "gpu"
    note = apply(timing_rules.graph_winner, fa4, flash)
    assert note.facts["ratio"].value == pytest.approx(flash.timing.median_ms / fa4.timing.median_ms)
    assert note.facts["pace_ratio"].value == pytest.approx(fa4.back_to_back.median_ms / flash.back_to_back.median_ms)
    assert note.title.startswith("In a CUDA graph FlashAttention-4") and "back to back SDPA · FlashAttention is" \
        in note.title
    assert apply(timing_rules.graph_winner, flash, fa4) is None                     # said on the graph's winner
    assert "serving engines" in note.body                                           # a forward: inference's way
    step = [dataclasses.replace(r, workload=r.workload.replace(passes="fwd+bwd")) for r in (fa4, flash)]
    trained = apply(timing_rules.graph_winner, *step)
    assert "serving engines" not in trained.body and "step captured whole" in trained.body  # no server runs a step
    # warm, or a graph that keeps the order: no note
    assert apply(timing_rules.graph_winner, recorded("fa4"), recorded("sdpa_flash")) is None
    cudnn = moded(recorded("sdpa_cudnn"), "graph")                                  # faster both ways
    assert apply(timing_rules.graph_winner, cudnn, fa4) is None and apply(timing_rules.graph_winner, fa4, cudnn) is None


def test_each_mode_s_verdict_compares_its_own_figure_and_says_which():
    fa4, flash = recorded("fa4"), recorded("sdpa_flash")
    assert figure(fa4, flash)[0] == "back_to_back"                                   # warm, FA4 host-bound: the pace
    graphed = [moded(r, "graph") for r in (fa4, flash)]
    assert figure(*graphed) == ("timing", "GPU time in a CUDA graph, replay events")
    title = headline(*graphed).title
    assert title.startswith("FlashAttention-4 [A] is") and "(GPU time in a CUDA graph, replay events)" in title
    cold = [moded(r, "cold", scale=1.2) for r in (fa4, flash)]
    assert "(GPU time with a cold L2, CUDA events)" in headline(*cold).title
    assert decision(*cold).path == "timing"


def test_host_figures_are_set_against_the_warm_figure_in_every_mode():
    run = recorded("fa4")                                   # host-bound warm: 0.071 ms GPU, 0.217 ms host, 0.232 pace
    cold = moded(run, "cold", scale=4.0)                    # cold 0.285 ms: the pace would look GPU-bound against it
    assert cold.warm_call_ms == run.timing.median_ms and cold.bound == "host"
    note = apply(timing_rules.host_bound, cold)
    assert note.facts["gpu"].value == run.timing.median_ms


# -- the clocks and the slice ----------------------------------------------------------------------------------
def test_clocks_that_moved_during_the_timing_are_said_with_both_readings():
    run = dataclasses.replace(with_env(recorded("sdpa_flash"), max_sm_clock_mhz=1980),
                              clocks_before=Clocks(1980, 3201), clocks_after=Clocks(1500, 3201))
    note = apply(timing_rules.clocks, run)
    assert note.title == "The SM clock moved from 1,980 MHz to 1,500 MHz while this was timed"
    assert "maximum is 1,980 MHz" in note.body and note.kind == "environment"
    steady = dataclasses.replace(run, clocks_after=Clocks(1900, 3201))              # 4%: within 10%
    assert apply(timing_rules.clocks, steady) is None
    assert apply(timing_rules.clocks, recorded("sdpa_flash")) is None               # not read: no claim


def test_a_mig_slice_is_named_with_its_sms():
    run = with_env(recorded("sdpa_flash"), device_name="NVIDIA H200 MIG 3g.71gb", mig=True, sm_count=60)
    note = apply(timing_rules.clocks, run)
    assert note.title == "Timed on a MIG slice of 60 SMs" and "NVIDIA H200 MIG 3g.71gb" in note.body


def test_a_note_true_of_both_sides_is_said_once():
    a, b = (dataclasses.replace(recorded(k), clocks_before=Clocks(1980, 3201), clocks_after=Clocks(1200, 3201))
            for k in ("sdpa_flash", "sdpa_cudnn"))
    notes = [n for n in explain(Comparison(a, b)).notes if n.rule == "clocks"]
    assert [n.side for n in notes] == ["both"]


def test_a_cold_run_s_profiled_table_is_held_against_its_warm_events():
    """The profiled calls run warm: against the cold figure the table would part from the events for the flush's
    sake alone."""
    run = moded(recorded("sdpa_flash"), "cold", scale=1.5)
    assert apply(timing_rules.profiled_vs_events, recorded("sdpa_flash")) is None   # warm: table and events agree
    assert apply(timing_rules.profiled_vs_events, run) is None
    parted = dataclasses.replace(run, warm_timing=Timing.of([t * 1.5 for t in run.warm_timing.samples_ms], "x"))
    note = apply(timing_rules.profiled_vs_events, parted)
    assert note.facts["events"].source == "run.warm_timing.median_ms" and "warm CUDA events" in note.title
    assert "(the verdict's is the cold L2 one)" in note.body


@pytest.mark.parametrize("variant", ["naive", "naive_inplace", "sdpa_math"])
def test_a_warm_loop_is_not_said_to_read_from_l2_what_the_call_evicts(variant):
    """A decode step at B=1, H=32 over 8 kv heads, S=8,192: q, K, V and out are 32 MiB, under the H200's 60 MiB L2,
    but naive and math copy K and V to every query head between their reads (128 MiB in bf16, 256 MiB in math's
    fp32): no note says a warm loop read the inputs from the L2. A fused kernel of the same step writes nothing
    between: the note stands."""
    from explain_helpers import RUNS

    from profiling.explain import facts
    w = Workload(batch=1, heads=32, kv_heads=8, seq_len=8192, head_dim=128, q_len=1, dtype="bf16")
    (run,) = [r for r in RUNS if r.variant == variant and r.workload == w]
    (fused,) = [r for r in RUNS if r.variant == "sdpa_flash" and r.workload == w]
    assert facts.working_set(run).value < run.environment.l2_cache_bytes
    assert 2 * 32 * 8192 * 128 * 2 > run.environment.l2_cache_bytes  # the two bf16 copies alone
    assert timing_rules.l2_resident(run, {}) is None
    assert timing_rules.l2_resident(fused, {}) is not None
    cold = [r for r in RUNS if r.variant == variant and r.workload == w.replace(timing="cold")]
    for r in cold:
        body = timing_rules.cold_l2(r, {}).body
        assert "a loop read it from there" not in body and "need not come from there" in body
