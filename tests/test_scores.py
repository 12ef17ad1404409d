"""The score pipeline (profiling/scores.py) and the one transform it has, softcap: what the variants that apply it
compute is re-derived here from the formula alone (not through the pipeline), the fp64 reference's output and
gradients too; those that cannot apply it refuse it in one line; a bad value is refused at every door; and a
recording, which holds no softcapped run, says so rather than answer with another run."""
from __future__ import annotations


import pytest
from conftest import assert_refused_by_link_and_command_line
import torch

from attention_variants import VARIANTS
from profiling import accuracy, session
from profiling.environment import detect
from profiling.request import LIVE, Request
from profiling.workload import Refusal, Workload

RECORDING = "h200-torch2.11"
CAP = 0.5  # well inside the scores' range at this size (|s| reaches ~3): a dropped cap changes the answer


def _formula(w: Workload, q, k, v, bias, cap: float | None) -> torch.Tensor:
    """Attention in fp64 from the formula: softmax(cap·tanh(q·kᵀ/√D / cap) + mask)·v, each head of k and v at its
    query heads; packed documents ([T, H, D]) each on its own."""
    if w.lengths is not None:
        out, start = [], 0
        for n in w.documents:
            one = w.replace(lengths=None, batch=1, seq_len=n)
            part = _formula(one, *(t[start:start + n].transpose(0, 1).unsqueeze(0) for t in (q, k, v)), None, cap)
            out.append(part[0].transpose(0, 1))
            start += n
        return torch.cat(out)
    q, k, v = (t.double() for t in (q, k, v))
    k, v = (t.repeat_interleave(w.groups, dim=-3) for t in (k, v))
    s = q @ k.transpose(-2, -1) / w.head_dim ** 0.5
    s = cap * torch.tanh(s / cap) if cap else s
    if bias is not None:
        s = s + bias.double()
    elif w.causal:
        s = s.masked_fill(~w.allowed(), float("-inf"))
    return torch.softmax(s, -1) @ v


def _inputs(x, packed: bool):
    """q, k, v as the reference lays them out: [B, H, S, D], or packed [T, H, D]."""
    return (x.packed().q, x.packed().k, x.packed().v) if packed else (x.q, x.k, x.v)


SMALL = dict(batch=2, heads=4, seq_len=24, head_dim=16, dtype="fp32", device="cpu", softcap=CAP)


@pytest.mark.parametrize("key, changes", [
    ("naive", {}), ("naive_inplace", {}), ("naive", {"kv_heads": 2}), ("naive", {"mask": "bias"}),
    ("naive_inplace", {"mask": "bias"}), ("naive", {"causal": False}), ("flex", {}), ("flex", {"mask": "bias"}),
    ("flex", {"kv_heads": 2}), ("naive_docmask", {"lengths": (7, 24, 3)}), ("flex", {"lengths": (7, 24, 3)})])
def test_a_softcapped_output_is_the_formula_s(key, changes):
    w = Workload(**SMALL | changes)
    x = w.make_inputs()
    variant = VARIANTS[key]
    assert variant.supports(w, detect("cpu")) is None
    with variant.pin(), torch.no_grad():
        out = x.as_reference(variant.forward(x), variant.packing(w)).double()
    qkv = _inputs(x, w.lengths is not None)
    want = _formula(w, *qkv, x.bias, CAP)
    assert (out - want).abs().max() < 1e-5
    assert (_formula(w, *qkv, x.bias, None) - want).abs().max() > 1e-2  # the cap changes the answer
    reference = accuracy.Reference(x)  # the fp64 reference applies it too: its error against the formula is fp64's
    ref_out = reference.out if w.lengths is not None else reference.out.reshape(want.shape)
    assert (ref_out - want).abs().max() < 1e-12


@pytest.mark.parametrize("changes", [{}, {"kv_heads": 2}, {"mask": "bias"}, {"lengths": (7, 24, 3)}])
def test_the_reference_gradients_of_a_softcapped_step_are_autograd_s_of_the_formula(changes):
    """The reference's backward (written out, each transform's derivative from its declaration) against autograd
    through the formula in fp64; and naive's training step (autograd through the pipeline) within fp32 of it."""
    w = Workload(**SMALL | {"passes": "fwd+bwd"} | changes)
    x = w.make_inputs()
    packed = w.lengths is not None
    q, k, v = (t.detach().double().requires_grad_() for t in _inputs(x, packed))
    out = _formula(w, q, k, v, x.bias, CAP)
    grad_out = (x.packed().grad_out if packed else x.grad_out).double()
    wanted = dict(zip(("dq", "dk", "dv"), torch.autograd.grad(out, (q, k, v), grad_out)))
    ref = accuracy.Reference(x).grads
    for name in wanted:
        assert (ref[name] - wanted[name]).abs().max() < 1e-10, name
    if not packed:
        variant, y = VARIANTS["naive"], x.with_grad()
        variant.forward(y).backward(x.grad_out)
        for name, leaf in zip(("dq", "dk", "dv"), (y.q, y.k, y.v)):
            assert (leaf.grad.double() - wanted[name]).abs().max() < 1e-4, name


def test_a_live_cpu_run_of_naive_against_flex_with_softcap_is_right_and_its_guess_holds():
    """What a user gets: a live comparison on this CPU, both sides measured, their error against the fp64 reference
    (softcapped) small, the words naming the cap, and naive's table holding the three ops the guess adds for it."""
    request = Request.build(LIVE, "naive", "flex", {"softcap": 30.0, "seq_len": 128, "heads": 2, "batch": 1,
                                                    "dtype": "fp32"}, "cpu")
    answer = session.compare(request)
    comparison = answer.result
    for run in (comparison.a, comparison.b):
        assert run.ok, run.error
        assert run.accuracy.max_abs_error < 1e-4
        assert "softcap 30" in run.workload.words()
    from attention_variants import guess_for
    from profiling.explain.facts import match_guess
    g = guess_for("naive", comparison.a.workload)
    assert [e.op for e in g.kernels if e.what.startswith("softcap")] == ["aten::div", "aten::tanh", "aten::mul"]
    _, unpredicted, missing = match_guess(comparison.a, g)
    ops = {"aten::div", "aten::tanh", "aten::mul"}
    assert not missing and not [u.kernel.name for u in unpredicted if u.kernel.name.rstrip("_") in ops], unpredicted


@pytest.mark.parametrize("key", ["sdpa_math", "sdpa_flash", "sdpa_auto", "sdpa_docmask", "sdpa_nested", "varlen",
                                 "sdpa_fa4"])
def test_a_variant_without_softcap_refuses_it_in_one_line(key):
    said = VARIANTS[key].supports(Workload(**SMALL), detect("cpu"))
    call = "varlen_attn" if key == "varlen" else "F.scaled_dot_product_attention"
    assert said is not None and said.startswith(f"{call} has no softcap") and "\n" not in said
    assert "naive, naive_inplace, flex, naive_docmask, fa4" in said or all(
        k in said for k in ("naive", "flex", "fa4")), said


def test_flashattention_4_takes_softcap_forward_only():
    """FA4's forward takes `softcap=`; its backward kernel is given softcap=None (flash_attn/cute/interface.py: 'not
    yet supported in backward'), so a training step is refused rather than run with wrong gradients."""
    fa4 = VARIANTS["fa4"]
    said = fa4.supports(Workload.blog(softcap=30.0, passes="fwd+bwd"), detect("cpu"))
    assert said.startswith("FlashAttention-4's backward does not apply softcap")
    assert not fa4.supports(Workload.blog(softcap=30.0), detect("cpu")).startswith("F")  # forward: not the cap's


@pytest.mark.parametrize("value, says", [(0, "above 0"), (-1.5, "above 0"), (1001, "at most 1000"),
                                         (float("nan"), "a number"), (float("inf"), "a number"), (True, "a number"),
                                         ("50", "a number")])
def test_a_bad_softcap_is_refused_naming_the_field_from_the_api(value, says):
    with pytest.raises(Refusal) as refused:
        Request.build(LIVE, "naive", "flex", {"softcap": value}, "cpu")
    assert refused.value.field == "softcap" and says in str(refused.value)


@pytest.mark.parametrize("text", ["abc", "-1", "0", "nan", "inf", "1_0", "５０", "1e9"])
def test_a_bad_softcap_is_refused_from_a_link_and_the_command_line(text):
    assert_refused_by_link_and_command_line("softcap", text)


def test_a_softcap_reads_back_from_every_door():
    request = Request.build(LIVE, "naive", "flex", {"softcap": 30}, "cpu")
    assert request.workload.softcap == 30.0 and request.to_query()["softcap"] == "30"
    assert Request.from_query({**request.to_query(), "softcap": "30.0"}, "cpu", RECORDING)[0] == request
    assert Request.build(LIVE, "naive", "flex", {"softcap": 12.345678901}, "cpu").workload.tag().count(
        "_softcap12.345678901") == 1


def test_a_replay_of_a_softcap_request_says_the_recording_lacks_it():
    """The recordings hold no softcapped run: a replay says so and names the nearest, never answers with the run of
    the same problem without the cap."""
    request = Request.build(RECORDING, "naive", "flex", {"softcap": 30.0}, "cpu")
    with pytest.raises(Refusal) as refused:
        session.compare(request)
    said = str(refused.value)
    assert refused.value.kind == "unrecorded"
    assert said.startswith(f"The H200 recording has no run of {request.workload.words()}. Nearest recorded: ")
    assert "softcap 30" in request.workload.words() and Workload.blog().words() in said
