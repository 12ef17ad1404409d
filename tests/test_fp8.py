"""fp8 (e4m3) inputs: q, k and v quantised per tensor (dtype fp8), or a decode step's KV cache beside 16-bit queries
(kv_dtype fp8). What is checked here without a GPU: the quantisation round trip and its scales, re-derived; the
accuracy's decomposition (the error against fp64 on the unquantised inputs, and the part the quantisation alone
explains), re-derived from the formula; FA3's call on a CPU stand-in of its interface that applies the descales as
its kernel does, right with them and caught by the correctness gate without them; every variant that takes no fp8
refusing it from its file's declaration; the fields at every door; a replay saying the recording lacks fp8."""
from __future__ import annotations

import argparse
import dataclasses
import sys
import types

import pytest
from conftest import assert_refused_by_link_and_command_line
import torch
from explain_helpers import RUNS

from attention_variants import VARIANTS, fa3
from profiling import accuracy, session, text
from profiling.explain import facts
from profiling.explain.verdict import decision, headline
from profiling.request import LIVE, Request
from profiling.results import Comparison
from profiling.workload import Refusal, Workload
from test_decode import H200

RECORDING = "h200-torch2.11"
SMALL = Workload.cpu_default(batch=2, heads=4, kv_heads=2, seq_len=64, head_dim=32, dtype="fp8")
DECODE = Workload.cpu_default(batch=2, heads=4, kv_heads=2, seq_len=64, head_dim=32, dtype="bf16", q_len=1,
                              kv_dtype="fp8")
E4M3_STEP = 2.0 ** -3        # e4m3's relative spacing of normal numbers (3 mantissa bits): rounding errs by half
E4M3_SUBNORMAL = 2.0 ** -9   # its smallest subnormal: the spacing below 2^-6


def _attention64(w: Workload, q, k, v) -> torch.Tensor:
    """softmax(q·kᵀ/√D + causal mask aligned bottom right)·v in fp64, each kv head at its query heads: [B, H, Lq, D]."""
    q, k, v = (t.double() for t in (q, k, v))
    k, v = (t.repeat_interleave(w.groups, dim=1) for t in (k, v))
    s = q @ k.transpose(-2, -1) / w.head_dim ** 0.5
    if w.causal:
        queries = torch.arange(w.seq_len - w.queries, w.seq_len)[:, None]
        s = s.masked_fill(queries < torch.arange(w.seq_len)[None, :], float("-inf"))
    return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("w", [SMALL, DECODE], ids=["qkv", "kv cache"])
def test_the_quantised_inputs_read_back_within_e4m3_s_step_of_the_drawn_values(w):
    """The drawn values are the 16-bit workload's own (the same seed); each quantised tensor's scale is its amax/448,
    and fp8·scale is within half of e4m3's relative step of the drawn value (or, below e4m3's normal range, within
    half a subnormal step of scale); q stays 16-bit beside an fp8 cache. The quantisation's time is its own figure."""
    x, plain = w.make_inputs(), w.replace(dtype="bf16", kv_dtype=None).make_inputs()
    quantised = ("q", "k", "v") if w.dtype == "fp8" else ("k", "v")
    assert set(x.quantised.fp8) == set(quantised) and x.quantised.ms > 0
    for name in ("q", "k", "v"):
        drawn, handed = getattr(plain, name), getattr(x, name)
        if name not in quantised:
            assert handed.dtype == torch.bfloat16 and torch.equal(handed, drawn)
            continue
        assert handed.dtype == torch.float8_e4m3fn and torch.equal(x.quantised.drawn[name], drawn)
        scale = drawn.double().abs().max() / 448.0
        assert x.descales()[name].dtype == torch.float32
        assert x.descales()[name].double().item() == pytest.approx(scale.item(), rel=2 ** -23)
        back = handed.double() * x.descales()[name].double()
        bound = torch.maximum(drawn.double().abs() * E4M3_STEP / 2, torch.full_like(back, scale * E4M3_SUBNORMAL / 2))
        assert ((back - drawn.double()).abs() <= bound * (1 + 1e-6)).all()
        assert (back - drawn.double()).abs().max() > 0  # quantised, not passed through
        assert back.abs().max().item() == pytest.approx(drawn.double().abs().max().item(), rel=2 ** -4)


@pytest.mark.parametrize("w", [SMALL, DECODE], ids=["qkv", "kv cache"])
def test_the_accuracy_splits_into_the_quantisation_s_part_re_derived_from_the_formula(w):
    """The truth is fp64 on the inputs as drawn (the bf16 workload's reference, unchanged); plain attention beside it
    is bf16's on them; the quantisation's part is fp64 on the dequantised inputs against that truth, each re-derived
    here from the formula and an own dequantisation (fp8 · scale in fp64)."""
    x = w.make_inputs()
    ref = accuracy.Reference(x)
    plain = w.replace(dtype="bf16", kv_dtype=None)
    plain_ref = accuracy.Reference(plain.make_inputs())
    exact = _attention64(w, *(x.quantised.drawn.get(n, getattr(x, n)) for n in "qkv"))
    assert torch.allclose(ref.out.reshape(exact.shape), exact, rtol=0, atol=1e-12)
    assert ref.naive_error == plain_ref.naive_error and plain_ref.quantisation_error is None
    deq = {n: x.quantised.fp8[n].double() * x.quantised.scales[n].double() for n in x.quantised.fp8}
    alone = (_attention64(w, *(deq.get(n, getattr(x, n)) for n in "qkv")) - exact).abs().max().item()
    assert ref.quantisation_error == pytest.approx(alone, rel=1e-5)
    assert ref.quantisation_error > 4 * ref.naive_error  # e4m3's 3 bits against bf16's 8: the quantisation rules
    # an answer computed exactly on the dequantised inputs errs by the quantisation's part, no more
    a = ref.of(_attention64(w, *(deq.get(n, getattr(x, n)) for n in "qkv")).to(torch.bfloat16))
    assert a.quantisation_max_abs_error == ref.quantisation_error
    assert a.max_abs_error <= ref.quantisation_error + 2 * ref.naive_error


def _fa3_on_the_cpu(monkeypatch):
    """A stand-in for `fa3_fwd_interface` that computes what FA3's fp8 kernel computes, on the CPU: each input times
    its descale (1 where none is passed, as FA3 reads a missing descale), attention in fp32, causal bottom right,
    [B, S, H, D] in and out, bf16 out for fp8 inputs (its interface's)."""
    def flash_attn_func(q, k, v, softmax_scale=None, causal=False, q_descale=None, k_descale=None, v_descale=None,
                        **kwargs):
        def read(t, descale):
            t = t.float()
            return t if descale is None else t * descale[:, None, :, None].repeat_interleave(
                t.shape[2] // descale.shape[1], dim=2)
        q, k, v = (read(t, d) for t, d in ((q, q_descale), (k, k_descale), (v, v_descale)))
        b, lq, h, d = q.shape
        w = SMALL.replace(batch=b, heads=h, kv_heads=k.shape[2], seq_len=k.shape[1], head_dim=d,
                          q_len=lq if lq != k.shape[1] else None, causal=causal)
        out = _attention64(w, *(t.transpose(1, 2) for t in (q, k, v))).float()
        return out.transpose(1, 2).to(torch.bfloat16)
    module = types.SimpleNamespace(flash_attn_func=flash_attn_func,
                                   flash_attn_with_kvcache=lambda q, k, v, num_splits=0, **kw:
                                   flash_attn_func(q, k, v, **kw))
    monkeypatch.setitem(sys.modules, "fa3_fwd_interface", module)


def _synthetic(w: Workload, acc, variant="fa3", ms=0.05, seed=1):
    """A recorded H200 run re-dressed as `variant` on `w`, with accuracy `acc` and a GPU time of `ms`."""
    from test_verdict import run
    base = next(r for r in RUNS if r.variant == "sdpa_flash" and r.workload == Workload.blog())
    return run(dataclasses.replace(base, variant=variant, workload=w, accuracy=acc), ms, seed=seed)


def fa3_fp8_accuracy(monkeypatch, w: Workload = SMALL):
    """FA3's own call (fa3.fa3_attention, its descales as `fa3.descales` makes them) on the CPU stand-in, against the
    reference: (the accuracy, the reference)."""
    _fa3_on_the_cpu(monkeypatch)
    x = w.make_inputs()
    return accuracy.Reference(x).of(fa3.fa3_attention(x)), x


def test_fa3_s_fp8_call_with_its_descales_passes_the_gate_and_its_headline_states_both_errors(monkeypatch):
    """FA3's call carries the descales: its answer errs by the quantisation's part, within the fp8 gate; the headline
    of FA3 fp8 beside a bf16 run gives each side's error against fp64 on the same line as the speed."""
    acc, _ = fa3_fp8_accuracy(monkeypatch)
    assert acc.max_abs_error <= 2 * acc.quantisation_max_abs_error
    fp8 = _synthetic(SMALL.replace(device="cuda"), acc, ms=0.03)
    assert facts.wrong_answer(fp8) is None
    bf16_base = next(r for r in RUNS if r.variant == "sdpa_flash" and r.workload == Workload.blog())
    bf16 = _synthetic(bf16_base.workload, bf16_base.accuracy, variant="sdpa_flash", ms=0.06, seed=2)
    title = headline(fp8, bf16).title
    assert "faster" in title
    line = title.split(". ")
    said = next(s for s in line if "faster" in s)
    assert title.index("Error against fp64 on the unquantised inputs") > title.index(said)
    assert text.error(acc.max_abs_error) in title and text.error(acc.quantisation_max_abs_error) in title
    assert text.error(bf16.accuracy.max_abs_error) in title
    assert "\n" not in title  # one line


def test_fa3_with_its_descales_dropped_is_caught_by_the_correctness_gate(monkeypatch):
    """The planted fault: FA3 called without its descales, the answer off by orders of magnitude, and fast: the gate
    (10x the quantisation's own error) calls it wrong, and the headline ranks nothing."""
    acc, x = fa3_fp8_accuracy(monkeypatch)
    right = _synthetic(SMALL.replace(device="cuda"), acc, ms=0.03)
    assert facts.wrong_answer(right) is None, "the call with its descales must pass the gate"
    monkeypatch.setattr(fa3, "descales", lambda x: {})
    dropped, _ = fa3_fp8_accuracy(monkeypatch)
    assert dropped.max_abs_error > 100 * dropped.quantisation_max_abs_error
    fast = _synthetic(SMALL.replace(device="cuda"), dropped, ms=0.01)
    gate = facts.wrong_answer(fast)
    assert gate is not None and gate.quantised == "accuracy.quantisation_max_abs_error"
    other = _synthetic(SMALL.replace(device="cuda"), acc, ms=0.03, seed=2)
    assert decision(fast, other).kind == "wrong"
    title = headline(fast, other).title
    assert "gives a wrong answer" in title and "faster" not in title
    assert text.error(facts.WRONG_FACTOR * dropped.quantisation_max_abs_error) in title
    assert "the fp8 quantisation's own error" in title


def test_the_fp8_gate_sits_between_a_right_fp8_answer_and_a_dropped_scale():
    """An fp8 answer 9x the quantisation's own error is ranked, one 11x is not, whatever plain bf16's error (smaller);
    an answer without quantised inputs keeps the gate of plain attention's error."""
    base = next(r for r in RUNS if r.variant == "sdpa_flash" and r.workload == Workload.blog())
    acc = dataclasses.replace(base.accuracy, quantisation_max_abs_error=0.02)
    w = Workload.blog(dtype="fp8")
    assert facts.wrong_answer(_synthetic(w, dataclasses.replace(acc, max_abs_error=0.18))) is None
    assert facts.wrong_answer(_synthetic(w, dataclasses.replace(acc, max_abs_error=0.22))).what == "output"
    plain = base.accuracy.naive_max_abs_error
    assert facts.wrong_answer(_synthetic(Workload.blog(), dataclasses.replace(
        base.accuracy, max_abs_error=11 * plain))) is not None


def test_a_pair_without_fp8_has_no_error_clause():
    a = next(r for r in RUNS if r.variant == "sdpa_flash" and r.workload == Workload.blog())
    b = next(r for r in RUNS if r.variant == "sdpa_cudnn" and r.workload == Workload.blog())
    assert "unquantised" not in headline(a, b).title


def test_an_fp8_side_beside_a_refusal_still_states_its_error():
    """FA3 fp8 ran, its partner refused fp8: the line that gives FA3's time gives its error against fp64 too."""
    base = next(r for r in RUNS if r.variant == "sdpa_flash" and r.workload == Workload.blog())
    w = Workload.blog(dtype="fp8")
    acc = dataclasses.replace(base.accuracy, quantisation_max_abs_error=0.02, max_abs_error=0.03)
    ran = _synthetic(w, acc)
    refused = dataclasses.replace(base, workload=w, status="unsupported", reason=VARIANTS["sdpa_flash"].supports(
        w, H200), timing=None, accuracy=None)
    title = headline(ran, refused).title
    assert "could not run" in title and "ran at" in title and text.error(0.03) in title and text.error(0.02) in title


# -- refusals, from each variant's declaration ----------------------------------------------------------
@pytest.mark.parametrize("key", [k for k in VARIANTS if k != "fa3" and not VARIANTS[k].quantises])
def test_every_variant_but_fa3_refuses_fp8_inputs_from_its_declaration(key):
    reason = VARIANTS[key].supports(Workload.blog(dtype="fp8", head_dim=128), H200)
    v = VARIANTS[key]
    if v.gpu_only and key in ("cudnn_fe", "flashinfer"):
        assert reason.startswith(v.no_fp8)
    assert reason is not None and "dtype=fp8 (q, k and v in e4m3) runs on fa3 in this tool" in reason, reason
    assert reason.startswith(v.no_fp8 or f"{v.calls} takes no fp8 inputs"), reason


@pytest.mark.parametrize("key", [k for k in VARIANTS if k != "flashinfer" and not VARIANTS[k].quantises])
def test_every_variant_but_flashinfer_refuses_an_fp8_cache_from_its_declaration(key):
    w = Workload.blog(batch=8, heads=32, kv_heads=8, seq_len=8192, head_dim=128, q_len=1, kv_dtype="fp8")
    reason = VARIANTS[key].supports(w, H200)
    assert reason is not None and "kv_dtype=fp8 (an e4m3 KV cache) runs on flashinfer in this tool" in reason, reason


def test_the_declared_reasons_are_the_ones_asked_for():
    assert "no fp8 inputs or descales" in VARIANTS["sdpa_flash"].no_fp8
    assert "Blackwell-only" in VARIANTS["fa4"].no_fp8
    for key in ("naive", "naive_inplace", "flex", "naive_docmask"):
        assert VARIANTS[key].no_fp8 and not VARIANTS[key].fp8
    assert VARIANTS["fa3"].fp8 == ("qkv",) and VARIANTS["flashinfer"].fp8 == ("kv",)


def test_fa3_takes_fp8_unless_its_build_left_it_out(monkeypatch):
    from test_engines import FA3_BUILD
    from attention_variants.optional import Library
    monkeypatch.setattr(Library, "missing", lambda self: None)
    monkeypatch.setattr(Library, "version", lambda self: self.pin)
    w = Workload.blog(dtype="fp8", head_dim=128)
    monkeypatch.setattr(fa3, "build_flags", lambda: FA3_BUILD | {"FLASHATTENTION_DISABLE_FP8": False})
    assert VARIANTS["fa3"].supports(w, H200) is None
    assert VARIANTS["fa3"].supports(w.replace(q_len=1, kv_heads=8, heads=32), H200) is None
    assert "runs no fp8 over packed documents" in VARIANTS["fa3"].supports(w.replace(lengths=(512, 256)), H200)
    assert "forward only" in VARIANTS["fa3"].supports(w.replace(passes="fwd+bwd"), H200)
    monkeypatch.setattr(fa3, "build_flags", lambda: {})  # a build with its backward: fp8 is still forward only
    assert VARIANTS["fa3"].supports(w.replace(passes="fwd+bwd"), H200) == \
        "FA3 runs fp8 forward only (its backward takes fp16 and bf16)"
    monkeypatch.setattr(fa3, "build_flags", lambda: FA3_BUILD | {"FLASHATTENTION_DISABLE_FP8": True})
    assert "compiled without fp8 (FLASHATTENTION_DISABLE_FP8)" in VARIANTS["fa3"].supports(w, H200)


# -- the fields at every door ------------------------------------------------------------------------------
def test_dtype_fp8_and_kv_dtype_read_back_from_every_door():
    request = Request.build(LIVE, "naive", "flex", {"kv_dtype": "fp8", "q_len": 1, "dtype": "bf16"}, "cpu")
    assert request.workload.kv_dtype == "fp8" and request.to_query()["kv_dtype"] == "fp8"
    assert Request.from_query(request.to_query(), "cpu", RECORDING)[0] == request
    fp8 = Request.build(LIVE, "naive", "flex", {"dtype": "fp8"}, "cpu")
    assert Request.from_query(fp8.to_query(), "cpu", RECORDING)[0] == fp8
    assert "fp8 KV cache" in request.workload.words() and "_kvfp8" in request.workload.tag()
    assert fp8.workload.tag() != Workload.cpu_default().tag() and ", fp8," in fp8.workload.words()
    parser = argparse.ArgumentParser()
    Request.add_arguments(parser)
    args = parser.parse_args(["naive", "flex", "--kv-dtype", "fp8", "--q-len", "1"])
    assert args.kv_dtype == "fp8"


@pytest.mark.parametrize("fields, field, says", [
    ({"kv_dtype": "fp8"}, "kv_dtype", "read by a decode step: set q_len"),
    ({"kv_dtype": "fp8", "q_len": 1, "dtype": "fp8"}, "kv_dtype", "quantises k and v already"),
    ({"kv_dtype": "fp8", "q_len": 1, "dtype": "fp32"}, "kv_dtype", "choose dtype bf16 or fp16"),
    ({"kv_dtype": "FP8", "q_len": 1}, "kv_dtype", "choose one of fp8"),
    ({"kv_dtype": "bf16", "q_len": 1}, "kv_dtype", "choose one of fp8"),
    ({"dtype": "e4m3"}, "dtype", "choose one of fp32, fp16, bf16, fp8"),
])
def test_a_bad_fp8_request_is_refused_naming_the_field(fields, field, says):
    with pytest.raises(Refusal) as refused:
        Request.build(LIVE, "naive", "flex", {"dtype": "bf16"} | fields, "cpu")
    assert refused.value.field == field and says in str(refused.value), str(refused.value)


@pytest.mark.parametrize("spelled", ["FP8", "e4m3", "1"])
def test_a_bad_kv_dtype_is_refused_from_a_link_and_the_command_line(spelled):
    assert_refused_by_link_and_command_line("kv_dtype", spelled, "--q-len", "1")


@pytest.mark.parametrize("fields", [{"dtype": "fp8"}, {"kv_dtype": "fp8", "q_len": 1}], ids=["qkv", "kv cache"])
def test_a_replay_of_an_fp8_request_says_the_recording_lacks_it(fields):
    request = Request.build(RECORDING, "sdpa_flash", "sdpa_cudnn", fields, "cpu")
    with pytest.raises(Refusal) as refused:
        session.compare(request)
    said = str(refused.value)
    assert refused.value.kind == "unrecorded"
    assert said.startswith(f"The H200 recording has no run of {request.workload.words()}. Nearest recorded: ")
