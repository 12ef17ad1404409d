"""Context parallel, on a CPU: PyTorch's context_parallel run end to end in gloo processes (its ring on SDPA's CPU op),
the answer against fp64; the per-rank interval arithmetic against hand-built multi-rank traces with known intervals;
the source's model of each rank's causal work re-derived by counting a mask; the refusals, in PyTorch's own words
(checked against the running torch's source)."""
from __future__ import annotations

import gzip
import inspect
import json

import pytest
import torch

from attention_variants import flex
from profiling import context_parallel as cp
from profiling import session
from profiling.explain.cp_rules import causal_imbalance, explain_cp, exposed_communication, rotation_memory
from profiling.request import LIVE, Request
from profiling.results import Accuracy
from profiling.trace import CALL_RANGE
from profiling.workload import Refusal, Workload

SMALL = dict(batch=1, heads=2, seq_len=64, head_dim=16)


# -- hand-built traces: every interval known --------------------------------------------------------------------
def kernel(name: str, start: float, end: float, stream: int = 7) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": start, "dur": end - start, "pid": 0, "tid": stream}


def step_range(start: float, end: float) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": CALL_RANGE, "ts": start, "dur": end - start, "pid": 1,
            "tid": 1}


ATTN = "void pytorch_flash::flash_fwd_kernel<X>(Params)"
MERGE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"
NCCL = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def two_rank_traces() -> list[dict]:
    """Rank 0: attention [0,10] and [20,30], NCCL [5,25] → 10 µs exposed (10..20); rank 1: attention [0,10] and a
    merge [5,15] on another stream, NCCL [12,20] → 5 µs exposed (15..20). Each trace holds two steps, the second the
    first shifted by 100 µs, so per step: the one step's figures."""
    ranks = []
    for kernels in ([(ATTN, 0, 10), (ATTN, 20, 30), (NCCL, 5, 25)],
                    [(ATTN, 0, 10), (MERGE, 5, 15), (NCCL, 12, 20)]):
        events = [step_range(0, 40), step_range(100, 140)]
        for shift in (0, 100):
            events += [kernel(n, s + shift, e + shift, 13 if n == NCCL else 7 + (n == MERGE)) for n, s, e in kernels]
        ranks.append({"traceEvents": events})
    return ranks


def test_each_rank_s_exposed_communication_is_the_collectives_time_no_compute_kernel_overlaps():
    t0, t1 = (cp.rank_timeline(t) for t in two_rank_traces())
    assert (t0.steps, t0.compute_us, t0.collective_us, t0.exposed_us, t0.busy_us) == (2, 20, 20, 10, 30)
    assert t0.attention_us == 20
    assert (t1.compute_us, t1.collective_us, t1.exposed_us, t1.busy_us) == (15, 8, 5, 20)
    assert t1.attention_us == 10          # the merge's add is compute, not attention
    rows = {k.short_name: k for k in t1.kernels}
    assert rows["ncclDevKernel_AllGather_RING_LL"].category == "collective"
    assert rows["ncclDevKernel_AllGather_RING_LL"].calls_per_step == 1


@pytest.mark.parametrize("comm, compute, exposed", [
    ([(0, 10)], [], 10), ([(0, 10)], [(0, 10)], 0), ([(0, 10)], [(2, 4), (3, 6), (8, 20)], 10 - 4 - 2),
    ([(0, 4), (2, 6)], [(5, 5.5)], 5.5), ([(10, 20)], [(0, 5), (25, 30)], 10),
])
def test_uncovered_time_by_interval_arithmetic(comm, compute, exposed):
    assert cp.uncovered(comm, compute) == pytest.approx(exposed)


def test_the_straggler_is_the_rank_that_computed_longest_and_the_note_names_the_worst_exposure():
    w = Workload.blog(gpus=2, seq_len=4096)
    ranks = [cp.RankResult(i, [0.040, 0.041, 0.042], 1 << 20, cp.rank_timeline(t), None)
             for i, t in enumerate(two_rank_traces())]
    run = cp.CPRun("sdpa_flash", w, True, "NVIDIA H200", "2.14", ranks=ranks)
    assert run.straggler().rank == 0 and run.step_ms() == pytest.approx(0.041)
    n = exposed_communication(run)
    assert n.facts["exposed"].value == 10 and n.facts["share"].value == pytest.approx(10 / 41)
    assert "Rank 0" in n.title and "24% of the step" in n.title
    again = cp.CPRun.from_dict(json.loads(json.dumps(run.to_dict())))
    assert again == run


# -- the source's model of each rank's work, re-derived by counting a causal mask ----------------------------------
@pytest.mark.parametrize("gpus", [2, 4, 8])
@pytest.mark.parametrize("balanced", [True, False])
def test_each_rank_s_causal_pairs_count_its_rows_of_the_mask(gpus, balanced):
    s = 128
    mask = torch.ones(s, s, dtype=torch.bool).tril()
    index = torch.arange(s)
    if balanced:  # PyTorch's own head-tail balancer orders the positions; chunk r of the order is rank r's
        from torch.distributed.tensor.experimental._attention import _HeadTailLoadBalancer
        index = _HeadTailLoadBalancer(s, gpus, "cpu")._generate_indices()[0]
    counted = [int(mask[rows].sum()) for rows in index.chunk(gpus)]
    assert cp.causal_pairs(s, gpus, balanced) == counted
    if balanced:
        assert len(set(counted)) == 1


def test_all_gather_holds_the_whole_kv_and_all_to_all_a_few_shards():
    w = Workload.blog(gpus=4, seq_len=8192)
    shard = w.kv_bytes // 4
    assert cp.kv_rotation_bytes(w, "allgather") == shard + w.kv_bytes
    assert cp.kv_rotation_bytes(w, "alltoall") == 3 * shard              # receiving, in use, sending
    assert cp.kv_rotation_bytes(w.replace(gpus=2), "alltoall") == w.kv_bytes   # two shards of a half


# -- refusals, naming the field, in PyTorch's words ----------------------------------------------------------------
@pytest.mark.parametrize("changes, field, says", [
    ({"gpus": 3}, "gpus", "choose one of 1, 2, 4, 8"),
    ({"cp_rotate": "alltoall"}, "cp_rotate", "gpus > 1"),
    ({"cp_rotate": "ring"}, "cp_rotate", "choose one of allgather, alltoall"),
    ({"gpus": 2, "mask": "bias"}, "gpus", "attn_bias is not supported yet"),
    ({"gpus": 2, "q_len": 1}, "gpus", "is_causal requires the same query and context sequence lengths"),
    ({"gpus": 2, "rank": 3}, "gpus", "rank 4"),
    ({"gpus": 2, "timing": "graph"}, "gpus", "timing=warm"),
    ({"gpus": 4, "seq_len": 1100}, "seq_len", "multiple of 8"),
    ({"gpus": 4, "seq_len": 1102, "causal": False}, "seq_len", "multiple of 4"),
])
def test_what_context_parallel_cannot_take_is_refused_naming_the_field(changes, field, says):
    with pytest.raises(Refusal) as caught:
        Workload.blog(**changes)
    assert caught.value.field == field and says in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1


def test_the_words_quoted_as_pytorch_s_are_in_the_running_torch_s_source():
    from torch.distributed.tensor.experimental._context_parallel import _attention
    source = inspect.getsource(_attention)
    for quoted in (cp.NO_HANDLER, flex.FLEX_ALLTOALL, "attn_bias is not supported yet",
                   "is_causal requires the same query and context sequence lengths",
                   "Load balancing requires `is_causal=True`.", "seq_dim = 2"):
        assert quoted in source, quoted


@pytest.mark.parametrize("key, says", [("naive", "does not call it"), ("sdpa_math", cp.NO_HANDLER),
                                       ("flex", "all-gather only"), ("sdpa_flash", None), ("sdpa_cudnn", None)])
def test_variants_without_a_ring_handler_are_refused(key, says):
    reason = cp.unsupported(key, Workload.blog(gpus=2))
    assert reason is None if says is None else says in reason
    assert flex.FLEX_ALLTOALL in cp.unsupported("flex", Workload.blog(gpus=2, cp_rotate="alltoall"))
    assert "untried under context parallel" in cp.unsupported("sdpa_fa4", Workload.blog(gpus=2))
    assert "attn_bias is not supported yet" in cp.unsupported("sdpa_docmask", Workload.blog(gpus=2))
    assert "nested jagged" in cp.unsupported("sdpa_nested", Workload.blog(gpus=2))


def test_a_variant_that_cannot_run_the_workload_on_one_device_is_refused_in_its_own_words(tmp_path):
    from attention_variants import VARIANTS
    from profiling.environment import detect

    w, env = Workload.cpu_default(**SMALL, gpus=2), detect("cpu")
    own = VARIANTS["sdpa_efficient"].supports(w, env)
    assert own and cp.refusal(cp.Job("sdpa_efficient", w, True, tmp_path), env) == own
    (run,) = cp.measure([cp.Job("sdpa_efficient", w, True, tmp_path / "job")])   # no process started: none needed
    assert run.status == "unsupported" and run.reason == own and not (tmp_path / "job").exists()


def test_more_gpus_than_visible_and_one_gpu_views_are_refused_naming_gpus():
    refused = cp.visible_refusal(Workload.blog(gpus=8))
    if torch.cuda.device_count() < 8:
        assert refused.field == "gpus" and "visible" in str(refused)
    request = Request.build(LIVE, "sdpa_flash", "sdpa_auto", {**SMALL, "gpus": 2}, "cpu")
    with pytest.raises(Refusal) as caught:
        session.plan(request)
    assert caught.value.field == "gpus" and "context_parallel" in str(caught.value)


# -- end to end: gloo processes, PyTorch's ring, the answer against fp64 --------------------------------------------
@pytest.fixture(scope="module")
def gloo_runs(tmp_path_factory):
    """Five jobs in one group of two gloo processes (one group: each process imports torch once): a forward and a
    training step, both rotations, with and without the balancer, and SDPA on auto without a causal mask; and a
    variant refused before any process starts."""
    out = tmp_path_factory.mktemp("cp")
    jobs = []
    for passes, rotate in (("fwd", "allgather"), ("fwd+bwd", "alltoall")):
        w = Workload.cpu_default(**SMALL, gpus=2, passes=passes, cp_rotate=rotate)
        jobs += cp.jobs_for(["sdpa_flash", "naive"], w, out)
    jobs += cp.jobs_for(["sdpa_auto"], Workload.cpu_default(**SMALL, gpus=2, causal=False), out)
    return cp.measure(jobs, timed_steps=2), out


def test_the_sharded_answer_equals_the_fp64_oracle_as_closely_as_one_process_s(gloo_runs):
    runs, _ = gloo_runs
    ran = [r for r in runs if r.variant == "sdpa_flash"]
    (auto,) = [r for r in runs if r.variant == "sdpa_auto"]        # not causal: without the balancer only
    assert (auto.status, auto.balanced) == ("ok", False)
    assert auto.accuracy.max_abs_error <= 2 * auto.alone_accuracy.max_abs_error
    assert [(r.status, r.workload.passes, r.balanced) for r in ran] == [
        ("ok", "fwd", True), ("ok", "fwd", False), ("ok", "fwd+bwd", True), ("ok", "fwd+bwd", False)]
    for r in ran:
        assert r.accuracy.max_abs_error < 2e-6 and r.accuracy.max_abs_error <= 2 * r.alone_accuracy.max_abs_error
        assert r.accuracy.rows_checked is None                      # every row compared
        if r.workload.training:
            for g in ("dq", "dk", "dv"):
                assert r.accuracy.grads[g] < 4e-6, g
        assert [x.rank for x in r.ranks] == [0, 1] and all(len(x.step_ms) == 2 for x in r.ranks)


def test_each_rank_left_a_trace_of_its_profiled_steps(gloo_runs):
    runs, out = gloo_runs
    for r in (r for r in runs if r.ok):
        for rank in r.ranks:
            with gzip.open(out / rank.trace_file, "rt") as f:
                events = json.load(f)["traceEvents"]
            names = [e["name"] for e in events if e.get("cat") == "user_annotation" and e.get("ph") == "X"]
            assert sorted(n for n in names if n.startswith(CALL_RANGE)) == [f"{CALL_RANGE}#{i}" for i in
                                                                             range(1, cp.PROFILED_STEPS + 1)]
            assert rank.timeline.steps == cp.PROFILED_STEPS and rank.timeline.busy_us == 0   # a CPU: no kernels


def test_a_variant_without_a_ring_handler_comes_back_refused_without_a_process(gloo_runs):
    runs, out = gloo_runs
    refused = [r for r in runs if r.variant == "naive"]
    assert refused and all(r.status == "unsupported" and not r.ranks for r in refused)
    assert not any(p.name.startswith("naive") for p in out.iterdir())


def test_notes_from_the_runs_are_true_of_them(gloo_runs):
    runs, _ = gloo_runs
    fwd = [r for r in runs if r.ok and not r.workload.training]
    n = causal_imbalance(fwd)
    w = fwd[0].workload
    rows = torch.ones(w.seq_len, w.seq_len).tril().sum(1)
    halves = [float(h.sum()) for h in rows.chunk(2)]
    assert n.facts["model_off"].value == pytest.approx(halves[1] / halves[0])
    assert n.facts["model_on"].value == 1.0
    assert n.facts["step_off"].value == max(x.median_ms for x in fwd[1].ranks)
    assert "measured_off" not in n.facts          # a CPU trace has no attention kernels to set beside the model
    assert rotation_memory(fwd) is None            # one rotation: no pair to compare
    notes = explain_cp(runs)
    assert {x.rule for x in notes} >= {"cp_causal_imbalance", "cp_accuracy"}


def test_the_session_serves_a_live_context_parallel_request_through_measure(gloo_runs, tmp_path, monkeypatch):
    """The session's door builds A's and B's jobs, with and without the balancer, and explains what comes back (the
    processes are the fixture's: one group per test file keeps the suite fast)."""
    asked = []

    def measured(jobs, **kwargs):
        asked.extend(jobs)
        return [r for r in gloo_runs[0] if r.workload.passes == "fwd"][:len(jobs)]

    monkeypatch.setattr(cp, "measure", measured)
    request = Request.build(LIVE, "sdpa_flash", "sdpa_math", {**SMALL, "gpus": 2}, "cpu")
    answer = session.context_parallel(request, out_dir=tmp_path)
    assert [(j.variant, j.balanced) for j in asked] == [("sdpa_flash", True), ("sdpa_flash", False),
                                                        ("sdpa_math", True), ("sdpa_math", False)]
    assert all(j.workload == request.workload and j.out_dir.parent == tmp_path for j in asked)
    assert "cp_causal_imbalance" in {n.rule for n in answer.notes}
    assert json.loads(json.dumps(answer.to_dict()))["runs"][0]["variant"] == "sdpa_flash"
    assert cp.NO_HANDLER in cp.refusal(asked[2])


def test_a_recording_without_context_parallel_runs_says_what_it_holds():
    request = Request.build("h200-torch2.11", "sdpa_flash", "sdpa_cudnn", {"gpus": 2}, "cpu")
    with pytest.raises(Refusal) as caught:
        session.context_parallel(request)
    assert caught.value.kind == "unrecorded" and "It holds: none" in str(caught.value)


def test_a_recording_s_runs_round_trip_and_are_found_by_workload(tmp_path):
    w = Workload.blog(gpus=2, seq_len=4096)
    ranks = [cp.RankResult(i, [1.0], 10, cp.rank_timeline(t), f"job/rank{i}.trace.json.gz")
             for i, t in enumerate(two_rank_traces())]
    runs = [cp.CPRun("sdpa_flash", w, b, "NVIDIA H200", "2.14", ranks=ranks,
                     accuracy=Accuracy(1e-3, 1e-3), alone_accuracy=Accuracy(1e-3, 1e-3)) for b in (False, True)]
    cp.save(runs, tmp_path)
    cp.save(runs[:1], tmp_path)   # the same run again replaces, never duplicates
    held = cp.load(tmp_path)
    assert len(held) == 2
    assert [r.balanced for r in cp.find(held, "sdpa_flash", w.replace(seed=3))] == [True, False]
    assert cp.find(held, "sdpa_flash", w.replace(cp_rotate="alltoall")) == []


def test_exposed_communication_over_s_says_where_it_stops_being_hidden():
    """Three runs that differ only in S, their ranks' exposed time set so the worst rank's share is 20%, 8%, 2%."""
    from profiling.explain.cp_rules import exposure_trend

    def run(s: int, exposed_us: float) -> cp.CPRun:
        t = cp.RankTimeline(3, 900.0, 800.0, 300.0, exposed_us, 1000.0)
        quiet = cp.RankTimeline(3, 900.0, 800.0, 300.0, 1.0, 1000.0)
        return cp.CPRun("sdpa_flash", Workload.blog(gpus=2, seq_len=s), True, "NVIDIA H200", "2.14",
                        ranks=[cp.RankResult(0, [1.0], 0, quiet), cp.RankResult(1, [1.0], 0, t)])

    runs = [run(65536, 20.0), run(4096, 200.0), run(16384, 80.0)]
    n = exposure_trend(runs, "seq_len")
    assert [q.value for q in n.facts.values()] == pytest.approx([0.2, 0.08, 0.02])
    assert "20% at S=4,096, 8% at S=16,384, 2% at S=65,536" in n.body
    assert "hidden, near enough) at S=65,536; not at 4,096, 16,384" in n.body
    assert exposure_trend(runs[:1], "seq_len") is None
    notes = explain_cp(runs)
    assert "cp_exposure_over_seq_len" in {x.rule for x in notes}


def test_the_rotation_memory_note_sets_each_rotation_s_peak_beside_the_source_s_model():
    w = Workload.blog(gpus=2, seq_len=8192)

    def run(rotate: str, peak: int) -> cp.CPRun:
        t = cp.RankTimeline(3, 900.0, 800.0, 300.0, 10.0, 1000.0)
        return cp.CPRun("sdpa_flash", w.replace(cp_rotate=rotate), False, "NVIDIA H200", "2.14",
                        ranks=[cp.RankResult(i, [1.0], peak - i, t) for i in range(2)])

    n = rotation_memory([run("allgather", 3 << 20), run("alltoall", 2 << 20)])
    assert n.facts["gather_peak"].value == 3 << 20 and n.facts["ring_peak"].value == 2 << 20   # the worst rank's
    assert n.facts["gather_model"].value == 1.5 * w.kv_bytes and n.facts["ring_model"].value == w.kv_bytes
    assert "3.0 MiB against 2.0 MiB" in n.body


def test_the_command_line_refuses_in_one_line_naming_the_field(capsys):
    from profiling.__main__ import main

    code = main(["context-parallel", "sdpa_flash", "sdpa_cudnn", "--gpus", "2", "--mask", "bias", "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: gpus=2 is not allowed:")
    code = main(["context-parallel", "sdpa_flash", "sdpa_cudnn", "--gpus", "2", "--source", "h200-torch2.11"])
    assert code == 2 and "no context-parallel run" in capsys.readouterr().err
