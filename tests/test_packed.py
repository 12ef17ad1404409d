"""Packed documents: every way that runs on this CPU gives each document the answer of an fp64 oracle written here,
document by document (a padded batch, one packed sequence under a block-diagonal mask, nested jagged tensors,
FlexAttention's document mask); the wasted pairs of padding are counted again from the masks themselves; what cannot
be combined with packed documents is refused in one line naming `lengths`; and `lengths` goes through every door."""
from __future__ import annotations

import argparse
import re
import warnings

import pytest
import torch
from oracles import documents_fp64, documents_gradients_fp64

from attention_variants import VARIANTS, flex
from profiling.environment import detect
from profiling.request import KEYS, Request
from profiling.workload import Refusal, Workload

ENV = detect("cpu")
RECORDING = "h200-torch2.11"


def packed(**changes) -> Workload:
    return Workload(**{"lengths": (5, 17, 1, 12), "heads": 4, "head_dim": 8, "dtype": "fp32", "device": "cpu"}
                    | changes)


@pytest.fixture
def eager_flex(monkeypatch):
    """FlexAttention without torch.compile (a compile per shape takes tens of seconds on this CPU): its document
    mask runs as written."""
    from torch.nn.attention.flex_attention import flex_attention
    monkeypatch.setattr(flex, "_compiled_flex", lambda: flex_attention)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager flex warns that it is not compiled; nested tensors that they are new
        yield


# On this CPU: every padded way, the block-diagonal masks (SDPA and by hand), FlexAttention's document mask; nested tensors where SDPA's
# math path takes them (not under is_causal=True, torch 2.14 refuses it: the refusal is the check's)
RUNS_HERE = {"naive", "naive_inplace", "sdpa_math", "sdpa_flash", "sdpa_auto", "sdpa_docmask", "naive_docmask", "flex"}


@pytest.mark.parametrize("changes", [{}, {"causal": False}, {"kv_heads": 2}, {"lengths": (9,)},
                                     {"lengths": (3, 3, 3)}],
                         ids=["causal", "full", "gqa", "one", "uniform"])
def test_every_way_that_runs_here_gives_each_document_its_own_answer(changes, eager_flex):
    w = packed(**changes)
    x = w.make_inputs()
    truth = documents_fp64(w, x.q, x.k, x.v)                                  # [T, H, D]
    checked = set()
    for key, variant in VARIANTS.items():
        if variant.supports(w, ENV):
            continue
        with variant.pin(), torch.no_grad():
            out = x.as_reference(variant.forward(x), variant.packing(w))
        assert out.shape == truth.shape and (out.double() - truth).abs().max().item() < 1e-5, key
        checked.add(key)
    assert checked == RUNS_HERE | ({"sdpa_nested"} if not w.causal else set())


@pytest.mark.parametrize("key", ["naive", "sdpa_flash", "sdpa_docmask", "naive_docmask", "sdpa_nested", "flex"])
def test_a_training_step_gives_each_document_its_gradients(key, eager_flex):
    w = packed(causal=key != "sdpa_nested", passes="fwd+bwd", kv_heads=2)
    variant = VARIANTS[key]
    if key == "sdpa_nested":  # SDPA's math path on nested tensors takes no grouped heads: refused in its words
        assert "batch dimensions must have the same sizes" in variant.supports(w, ENV)
        w = w.replace(kv_heads=None)
    if key == "flex" and variant.supports(w, ENV):
        pytest.skip(variant.supports(w, ENV))  # this torch has no FlexAttention backward on a CPU
    assert variant.supports(w, ENV) is None
    x = w.make_inputs().with_grad()
    truth = documents_gradients_fp64(w, x.q, x.k, x.v, x.grad_out)
    out = variant.forward(x)
    out.backward(variant.grad_out(x))
    leaves = "packed" if variant.packing(w) == "block" else variant.packing(w)  # views of the packed leaves
    for name, leaf in zip(("dq", "dk", "dv"), variant.leaves(x)):
        got = x.as_reference(leaf.grad, leaves).double()
        assert (got - truth[name]).abs().max().item() < 1e-5, (key, name)


def test_the_app_s_reference_is_the_oracle_s():
    from profiling.accuracy import Reference

    w = packed(passes="fwd+bwd", kv_heads=2)
    x = w.make_inputs()
    ref = Reference(x)
    assert (ref.out - documents_fp64(w, x.q, x.k, x.v)).abs().max().item() < 1e-12
    truth = documents_gradients_fp64(w, x.q, x.k, x.v, x.grad_out)
    assert all((ref.grads[n] - truth[n]).abs().max().item() < 1e-12 for n in truth)


@pytest.mark.parametrize("causal", [True, False])
def test_the_wasted_pairs_of_padding_are_the_masks_counted(causal):
    """Counted from masks built here: what a padded B×S batch computes (every row's pairs as long as the longest, the
    causal ones under the flag), what the documents attend (a block-diagonal mask over the T tokens)."""
    w = packed(causal=causal)
    square = torch.ones(w.seq_len, w.seq_len, dtype=torch.bool)
    padded = (square.tril() if causal else square).sum().item() * w.batch
    document = torch.repeat_interleave(torch.arange(w.batch), torch.tensor(w.lengths))
    block = document[:, None] == document[None, :]
    if causal:
        block &= torch.ones(w.tokens, w.tokens, dtype=torch.bool).tril()
    attended = block.sum().item()
    assert (w.attended_pairs, w.padded_pairs, w.wasted_pairs) == (attended, padded, padded - attended)
    assert w.flops == 4 * w.heads * w.head_dim * attended
    assert w.replace(lengths=None, batch=3, seq_len=8).wasted_pairs == 0


@pytest.mark.parametrize("changes, says", [
    ({"lengths": (0, 4)}, "between 1 and 131072"),
    ({"lengths": (4,) * 65}, "at most 64 numbers"),
    ({"lengths": (70000, 70000)}, "140000 tokens: at most 131072"),
    ({"lengths": "4, x"}, "whole number"),
    ({"q_len": 2}, "leave q_len empty"),
    ({"gpus": 2}, "choose gpus=1"),
    ({"rank": 3}, "choose rank 4"),
    ({"mask": "bool"}, "choose mask=flag"),
    ({"mask": "window", "window": 4}, "choose mask=flag"),
])
def test_what_packed_documents_cannot_be_is_refused_naming_the_field(changes, says):
    with pytest.raises(Refusal) as caught:
        packed(**changes)
    assert caught.value.field == "lengths" and says in str(caught.value) and "\n" not in str(caught.value)


def test_b_and_s_follow_from_the_lengths_and_are_said_so():
    w = packed(batch=99, seq_len=3)
    assert (w.batch, w.seq_len, w.tokens) == (4, 17, 35)
    assert w.words().startswith("B=4, H=4, S=17, documents 5, 17, 1, 12 packed")
    assert packed(lengths=tuple(range(1, 21))).words().count("20 documents of 1…20 packed, 210 tokens") == 1


def test_varlen_says_why_it_cannot_run_here():
    reason = VARIANTS["varlen"].supports(packed(), ENV)
    assert reason and ("no CPU kernel" in reason or "has no torch.nn.attention.varlen" in reason)


def test_lengths_go_through_the_link_the_api_and_the_command_line():
    request = Request.build("live", "sdpa_flash", "varlen", {"lengths": "512, 1536,1024", "heads": 2, "head_dim": 8,
                                                             "dtype": "fp32"}, "cpu")
    assert request.workload.lengths == (512, 1536, 1024) and request.workload.batch == 3
    assert request.to_query()["lengths"] == "512,1536,1024"
    again, problems = Request.from_query(request.to_query(), "cpu", RECORDING)
    assert again == request and problems == []
    values = dict(zip(KEYS, request.values()))                          # the API's values, in order
    assert values["lengths"] == "512,1536,1024"
    assert Request.from_values(values, "cpu") == request
    assert Request.from_values({**values, "lengths": [512, 1536, 1024]}, "cpu") == request
    _, problems = Request.from_query({"lengths": "512,0"}, "cpu", RECORDING)
    assert problems and problems[0][0] == "lengths=512,0"
    parser = argparse.ArgumentParser()
    Request.add_arguments(parser)
    args = parser.parse_args(["naive", "sdpa_docmask", "--lengths", "64,128", "--dtype", "fp32"])
    assert Request.from_args(args, "cpu").workload.lengths == (64, 128)
    with pytest.raises(SystemExit):
        parser.parse_args(["a", "b", "--lengths", "64,1_0"])


@pytest.mark.parametrize("sent, says", [
    ({"batch": 2}, "batch=2 is not allowed: lengths=2048,2048,2048,2048 set B=4 (their count): send 4 or leave batch out"),
    ({"seq_len": 1024}, "seq_len=1024 is not allowed: lengths=2048,2048,2048,2048 set S=2048 (the longest): send 2048 or "
                        "leave seq_len out"),
])
def test_a_batch_or_seq_len_that_contradicts_the_lengths_is_refused_in_one_line(sent, says):
    """The lengths own B and S: the API (every field sent), a link and the command line refuse a batch or seq_len
    that is not theirs, naming the field, its value and what the lengths set (it was replaced without a word: B=2,
    S=1024 sent, B=4, S=2048 run); the values they set, or none, are taken."""
    lengths = {"lengths": "2048,2048,2048,2048"}
    values = dict(zip(KEYS, Request.build(RECORDING, "sdpa_flash", "varlen", lengths, "cpu").values()))
    assert (values["batch"], values["seq_len"]) == (4, 2048)
    assert Request.from_values(values, "cpu").workload.batch == 4  # what they set, sent back: taken
    with pytest.raises(Refusal) as refused:
        Request.from_values({**values, **sent}, "cpu")
    assert str(refused.value) == says and "\n" not in says
    link = {"batch": "batch", "seq_len": "seq"}  # the fields' keys in a link
    _, problems = Request.from_query({**lengths, **{link[k]: str(v) for k, v in sent.items()}}, "cpu", RECORDING)
    assert problems and problems[0][1] == refused.value.limit
    parser = argparse.ArgumentParser()
    Request.add_arguments(parser)
    option = "--batch" if "batch" in sent else "--seq"
    args = parser.parse_args(["naive", "sdpa_docmask", "--lengths", "2048,2048,2048,2048", option,
                              str(next(iter(sent.values())))])
    with pytest.raises(Refusal, match=re.escape(says)):
        Request.from_args(args, "cpu")


# -- the notes, on recorded H200 runs made packed (the numbers each states are checked against the run by `apply`) -----
def _packed_run(variant: str, key: str, mask: str = "flag"):
    import dataclasses

    from explain_helpers import recorded
    run = recorded(variant, mask=mask)
    lengths = (1024, 512, 256, 128, 1024, 64, 32, 1000)
    return dataclasses.replace(run, variant=key, workload=Workload.blog(lengths=lengths))


def test_padding_waste_states_the_pairs_the_lengths_give():
    import dataclasses

    from explain_helpers import apply

    from profiling.explain import packed_rules
    run = _packed_run("sdpa_flash", "sdpa_flash")
    note = apply(packed_rules.padding_waste, run)
    lengths, s = run.workload.lengths, max(run.workload.lengths)
    padded, real = len(lengths) * s * (s + 1) // 2, sum(n * (n + 1) // 2 for n in lengths)
    assert note.facts["wasted"].value == padded - real and note.facts["share"].value == (padded - real) / padded
    assert len(f"{note.title} {note.body}".split()) <= 60
    assert apply(packed_rules.padding_waste, _packed_run("sdpa_flash", "varlen")) is None   # a packed way pads nothing
    assert apply(packed_rules.padding_waste, dataclasses.replace(run, workload=Workload.blog())) is None  # no documents


def test_the_mask_build_is_the_share_its_kernels_take():
    from explain_helpers import apply

    from profiling.explain import packed_rules
    from profiling.results import Kernel, Launch, share_by_phase
    run = _packed_run("sdpa_auto", "sdpa_docmask", mask="bool")
    built = Kernel("elementwise_kernel<eq>", "elementwise [eq]", "elementwise", 1, 7.5,
                   launched_by=[Launch(["aten::eq"], 1, 7.5)])
    run.kernels = share_by_phase(run.kernels + [built])
    note = apply(packed_rules.mask_build, run)
    forward = run.kernels_of("forward")
    where = sum(k.us_per_forward for k in forward if any("aten::where" in launch.ops for launch in k.launched_by or []))
    assert where > 0  # the recorded run's own conversion of its bool mask: SDPA's, on every call
    assert abs(note.facts["share"].value - (7.5 + where) / sum(k.us_per_forward for k in forward)) < 1e-12
    assert note.facts["grid"].value == run.workload.tokens ** 2 and built.name in note.kernels
    assert len(f"{note.title} {note.body}".split()) <= 60


def test_the_host_note_says_a_packed_way_s_python_path_when_it_costs_the_host():
    import dataclasses

    from explain_helpers import apply

    from profiling.explain import packed_rules
    run = _packed_run("sdpa_auto", "sdpa_nested")
    heavy = dataclasses.replace(run, host_cost=dataclasses.replace(run.host_cost, median_ms=2 * run.warm_call_ms))
    note = apply(packed_rules.packed_host, heavy)
    assert abs(note.facts["ratio"].value - 2) < 1e-9 and len(f"{note.title} {note.body}".split()) <= 60
    light = dataclasses.replace(run, host_cost=dataclasses.replace(run.host_cost, median_ms=0.1 * run.warm_call_ms))
    assert apply(packed_rules.packed_host, light) is None


def test_a_call_s_bytes_count_what_each_way_holds():
    """A padded way moves B×S rows (and without the causal flag its [B, S] key-padding mask); a packed way the T real
    tokens, over one sequence with its [T, T] block-diagonal mask."""

    w = packed(dtype="bf16")
    rows = w.heads * w.head_dim * 2                                   # bytes of one token's q (or k, v, out)
    assert w.moved_bytes("forward") == 4 * w.batch * w.seq_len * rows
    assert w.replace(causal=False).moved_bytes("forward") == 4 * w.batch * w.seq_len * rows + w.batch * w.seq_len
    assert w.moved_bytes("forward", "packed") == 4 * sum(w.lengths) * rows
    assert w.moved_bytes("forward", "block") == 4 * sum(w.lengths) * rows + sum(w.lengths) ** 2


def test_flex_over_packed_documents_reads_its_block_mask_and_document_ids_never_a_t_by_t_mask():
    """Flex over one packed sequence reads the BlockMask its setup built and the [T] document ids its mask_mod
    indexes: the bytes are those of the BlockMask itself (its key-side tables in a forward, every table in a
    backward), read off one built here; SDPA · block-diagonal mask reads the dense [T, T] mask. The audit found
    flex's traffic and cold-L2 notes stating 128 MiB where 64 MiB are moved (T = 8,192), rate and share doubled."""
    import dataclasses

    from explain_helpers import recorded

    from profiling.explain import facts
    lengths = (2048, 2048, 2048, 2048)
    mask = flex._document_mask(lengths, True, "cpu")
    side = {"forward": ("kv",), "backward": ("kv", "q")}
    table = {phase: sum(t.numel() * t.element_size() for s in sides for name in ("num_blocks", "indices")
                        for t in (getattr(mask, f"{s}_{name}"), getattr(mask, f"full_{s}_{name}")))
             for phase, sides in side.items()}
    w = Workload.blog(lengths=lengths, dtype="bf16")
    tokens = 4 * 8192 * w.heads * w.head_dim * 2     # q, K, V and out over the T tokens (a backward: 8 such)
    ids = 8 * 8192                                                      # int64 document ids
    for key, phase, expected in [("flex", "forward", tokens + table["forward"] + ids),
                                 ("flex", "backward", 2 * tokens + table["backward"] + ids),
                                 ("sdpa_docmask", "forward", tokens + 8192 ** 2)]:
        run = dataclasses.replace(recorded("flex"), variant=key, workload=w)
        assert facts.moved(run, phase).value == expected, (key, phase)
        names = [n for n, _ in facts.run_tensors(run, phase)]
        assert ("mask" in names) == (key == "sdpa_docmask") and ("document ids" in names) == (key == "flex")


def test_a_faster_peer_on_the_same_backend_or_another_layout_is_never_called_a_faster_backend():
    """Every recorded pair where SDPA chose a backend: "not the fastest" names only a pinned peer of the same layout
    that ran another backend and was faster. SDPA · cuDNN over B×S with the causal flag is 15× faster than the
    block-diagonal mask's dense T×T over one sequence, on the same cuDNN: that gap is the layout's, and no note
    calls it the backend's. The audit found 59 notes doing so (and 83 across layouts)."""
    import collections

    from explain_helpers import RUNS

    from profiling.explain import environment_rules, facts
    by = collections.defaultdict(list)
    for r in RUNS:
        by[r.workload].append(r)
    claims = layout_gaps = 0
    for run in RUNS:
        peers = facts.peers_for(run, by[run.workload])
        note = environment_rules.auto_choice(run, peers)
        if note is None:
            continue
        if "ratio" in note.facts:
            best = peers[note.facts["ratio"].source.split("peers[")[1].split("]")[0]]
            assert facts.ran(best) != facts.ran(run) and facts.packing(best) == facts.packing(run)
            assert "not the fastest" in note.body
            claims += 1
        layout_gaps += any(facts.ran(p) == facts.ran(run) and facts.packing(p) != facts.packing(run)
                           and p.timing and p.timing.max_ms < run.timing.min_ms for p in peers.values())
    assert claims and layout_gaps  # both kinds are in the recording


@pytest.mark.parametrize("changes", [dict(batch=64, seq_len=8192), dict(batch=64, seq_len=8192, q_len=1)],
                         ids=["B·S past one sequence", "a decode step of that batch"])
def test_a_batch_past_what_one_packed_sequence_holds_is_a_reason_never_a_refusal_of_a_field_the_user_did_not_set(
        changes):
    """B equal sequences of 524,288 tokens in all: the packed ways (one sequence of every token) say why they cannot
    run it; every other way is priced. On the H200, timed cold, this raised "seq_len=524288 is not allowed" from a
    packed way's memory model and stopped a recording (a value nobody typed, for a field nobody set)."""
    from attention_variants import reasons
    from profiling.budget import call_bytes
    from test_timing_modes import GPU

    w = Workload(heads=32, kv_heads=8, head_dim=128, dtype="bf16", timing="cold", **changes)
    why = reasons(list(VARIANTS.values()), w, GPU)
    for key in ("sdpa_docmask", "naive_docmask", "sdpa_nested", "varlen"):
        assert why[key], key
    assert "524,288 tokens" in why["sdpa_docmask"] or "q_len" in why["sdpa_docmask"]
    for key, variant in VARIANTS.items():
        if not why[key]:
            assert call_bytes(variant, w, GPU) > 0, key


def test_a_sweep_of_packed_documents_is_refused_naming_lengths():
    from profiling import session

    request = Request.build("live", "naive", "sdpa_docmask", {"lengths": "8,16", "heads": 2, "dtype": "fp32"}, "cpu",
                            (32, 64))
    with pytest.raises(Refusal) as caught:
        session.plan(request, sweep=True)
    assert caught.value.field == "lengths" and "a sweep varies S" in str(caught.value)


def test_the_page_draws_the_documents_block_diagonal():
    from profiling import figures

    fig = figures.mask_figure(packed())
    (axes,) = fig.axes
    cells = axes.images[0].get_array()
    assert axes.get_title() == "causal within 4 documents" and cells.shape[0] == cells.shape[1]
    assert not cells[-1, 0] and cells[-1, -1]  # the last token sees its own document only


def test_asking_whether_nested_tensors_run_here_writes_nothing_to_the_log(caplog):
    """torch logs each SDPA backend's reason as it refuses nested tensors: the question's answer is the refusal the
    app shows; none of its lines reaches the server's log (the quiet-log rule)."""
    import logging

    from attention_variants import packed

    packed._nested_refusal.cache_clear()
    with caplog.at_level(logging.DEBUG):
        packed._nested_refusal("cpu", "fp32", True, 2, 2, 16, False)
    assert [r for r in caplog.records if r.name.startswith("torch.nested")] == []
    assert logging.getLogger("torch.nested._internal.sdpa").propagate


def test_making_nested_tensors_writes_nothing_to_the_log():
    """nested_tensor_from_jagged asks torch.fx whether it is tracing, and torch.fx logs a deprecation notice the first
    time in a process (on the H200 it was the one foreign line of the server's log): dropped, and nothing else."""
    import logging

    from torch.fx import _symbolic_trace

    import attention_variants.packed  # noqa: F401  (its filter)

    class Heard(logging.Handler):
        def __init__(self):
            super().__init__(logging.DEBUG)
            self.lines = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    logger, heard = logging.getLogger("torch.fx._symbolic_trace"), Heard()
    logger.addHandler(heard)
    try:
        _symbolic_trace.is_fx_tracing_warning.cache_clear()
        torch.nested.nested_tensor_from_jagged(torch.zeros(5, 2), torch.tensor([0, 2, 5]))
        logger.warning("another line of torch.fx's")
    finally:
        logger.removeHandler(heard)
    assert heard.lines == ["another line of torch.fx's"]


def test_on_the_recorded_h200_runs_the_mask_build_speaks_of_the_forward_and_never_in_a_backward_view():
    """Every recorded block-diagonal run (SDPA's and the hand-written one, forward, step and backward view): the share
    the note states is its mask-building kernels' time over the forward's, re-derived from the trace's kernels; a
    backward view, whose table is the backward, has no such note (the mask is built in the forward)."""
    from explain_helpers import RUNS, apply

    from profiling.explain import packed_rules
    block = [r for r in RUNS if r.ok and r.workload.lengths and r.variant in ("sdpa_docmask", "naive_docmask")]
    assert {r.workload.passes for r in block} == {"fwd", "fwd+bwd", "bwd"}
    for run in block:
        note = apply(packed_rules.mask_build, run)
        if run.workload.passes == "bwd":
            assert note is None, run.workload.words()
            continue
        forward = run.kernels_of("forward")
        built = sum(k.us_per_forward for k in forward if k.name in note.kernels)
        assert abs(note.facts["share"].value - built / sum(k.us_per_forward for k in forward)) < 1e-9
        assert note.facts["share"].of == "the forward" and "of the forward" in note.title
