"""fp8 twins (`Variant.twins`): a variant that takes fp8 beside itself in 16 bits on ONE screen. FA3 and FlashInfer are
GPU-only, so a CPU stand-in that takes fp8 q, k and v (it reads them back with their scales and runs plain attention
in fp32, as a kernel applying its descales computes) is registered for the test's duration with its twin, made by
the same rule as the real ones; it runs live through session.compare and the explainer. What is checked: the twin's
run carries the quantised workload and its partner the 16-bit one, the values drawn once and quantised from the
partner's own tensors; both errors against fp64 on the headline's line; the twin refusing what it cannot quantise
with the field named; the budget pricing its quantised workload; a twin found in a recording under its workload."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import attention_variants
from attention_variants import VARIANTS
from attention_variants.base import Variant
from profiling import replay, session, text
from profiling.budget import call_bytes, predicted_seconds
from profiling.environment import detect
from profiling.explain.verdict import headline
from profiling.request import LIVE, Request
from profiling.results import RUNS_FILE, write_stored
from profiling.workload import NAMED, Workload
from test_fp8 import E4M3_STEP, E4M3_SUBNORMAL, H200, _attention64

W = Workload.cpu_default(batch=2, heads=4, kv_heads=2, seq_len=64, head_dim=32, dtype="bf16")
SEEN: list = []  # the inputs each stand-in call was handed, in order


def _stand_in(scaled: bool = True):
    """A CPU variant that takes fp8 q, k and v: each read back times its scale (`Inputs.dequantised`; without the
    scales when `scaled` is off: the planted fault), plain attention in fp32, the output in bf16."""
    def forward(x):
        SEEN.append(x)
        if x.quantised is not None:
            x = x.dequantised() if scaled else x._with({n: t.float() for n, t in x.quantised.fp8.items()})
        q, k, v = (t.float() for t in (x.q, x.k, x.v))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return out.to(torch.bfloat16)
    return Variant(key="cpu8", label="CPU fp8 stand-in", forward=forward, scratch_bytes=lambda w, env: 0,
                   fp8=("qkv",), call="the stand-in", guess=VARIANTS["sdpa_math"].guess)


def register(monkeypatch):
    """The stand-in and its twin registered as VARIANTS holds a family's (the twin by `Variant.twins`), for the
    test's duration."""
    base = _stand_in()
    (twin,) = base.twins()
    for v in (base, twin):
        monkeypatch.setitem(VARIANTS, v.key, v)
    monkeypatch.setattr(attention_variants, "KEYS", tuple(VARIANTS))
    SEEN.clear()
    return base, twin


@pytest.fixture
def stand_in(monkeypatch):
    return register(monkeypatch)


def test_the_twins_are_derived_by_one_rule_for_every_variant_that_takes_fp8():
    """Each variant with `fp8` is followed in VARIANTS by one twin per quantisation it takes, named by it, its label
    saying which; no other variant has one."""
    keys = list(VARIANTS)
    for v in [v for v in VARIANTS.values() if not v.quantises]:
        twins = [VARIANTS[f"{v.key}_fp8"]] if v.fp8 else []
        assert [t.key for t in v.twins()] == [t.key for t in twins]
        for t in twins:
            assert keys.index(t.key) == keys.index(v.key) + 1 and t.twin_of is v and t.fp8 == ()
            assert t.forward is v.forward and t.label.startswith(v.label + ", fp8")
    assert VARIANTS["fa3_fp8"].label == "FA3 (fa3-fwd build), fp8"
    assert VARIANTS["flashinfer_fp8"].label == "FlashInfer decode, fp8 KV cache"
    assert VARIANTS["fa3_fp8"].effective(Workload.blog()) == Workload.blog(dtype="fp8")
    assert VARIANTS["flashinfer_fp8"].effective(NAMED["decode"]) == NAMED["decode"].replace(kv_dtype="fp8")


@pytest.mark.parametrize("key, w, said", [
    ("fa3_fp8", Workload.blog(dtype="fp8"), "dtype=fp8 quantises it already: choose fa3"),
    ("fa3_fp8", Workload.blog(dtype="fp16"), "not those of dtype=fp16 beside it: choose dtype bf16"),
    ("flashinfer_fp8", NAMED["decode"].replace(kv_dtype="fp8"), "kv_dtype=fp8 quantises it already"),
    ("flashinfer_fp8", Workload.blog(), "kv_dtype=fp8 on its side, which this workload cannot take: an fp8 KV "
                                        "cache is read by a decode step: set q_len"),
    ("flashinfer_fp8", NAMED["decode"].replace(dtype="fp32"), "choose dtype bf16 or fp16"),
])
def test_a_twin_refuses_what_it_cannot_quantise_in_one_line_naming_the_field(key, w, said):
    reason = VARIANTS[key].supports(w, H200)
    assert reason is not None and said in reason and "\n" not in reason, reason
    assert "leave kv_dtype empty" not in reason or w.kv_dtype  # never advice on a field the user did not set


def test_a_twin_passes_its_base_s_reasons_on_the_quantised_workload(monkeypatch):
    """Its base's reason, asked of the effective workload: FA3's fp8 refusals (training) reach the twin."""
    from attention_variants import fa3
    from attention_variants.optional import Library
    monkeypatch.setattr(Library, "missing", lambda self: None)
    monkeypatch.setattr(fa3, "build_flags", lambda: {})
    assert VARIANTS["fa3_fp8"].supports(Workload.blog(), H200) is None
    assert VARIANTS["fa3_fp8"].supports(Workload.blog(passes="fwd+bwd"), H200) == \
        VARIANTS["fa3"].supports(Workload.blog(passes="fwd+bwd", dtype="fp8"), H200)


def test_the_budget_prices_a_twin_on_its_quantised_workload(stand_in):
    """Its call's bytes and its measurement's time are its effective workload's, its reference's extra fp64 pass on
    the dequantised inputs counted once."""
    base, twin = stand_in
    env = detect("cpu")
    assert call_bytes(twin, W, env) == call_bytes(base, W.replace(dtype="fp8"), env)
    both = predicted_seconds(W, [base, twin], env, load=0.0)
    assert both > predicted_seconds(W, [base, base], env, load=0.0)
    assert both == pytest.approx(predicted_seconds(W.replace(dtype="fp8"), [base, base], env, load=0.0), rel=0.2)


def _compared(a: str, b: str):
    return session.compare(Request(LIVE, a, b, W))


def test_a_twin_beside_its_base_runs_live_on_one_draw_and_the_headline_states_both_errors(stand_in):
    """A = the twin, B = its base, one live comparison: A's run is of dtype fp8, B's of bf16, the two workloads the
    same but for it; the twin's fp8 inputs are quantised from the very tensors B was handed (drawn once) and read
    back within e4m3's step of them; A errs against fp64 by about the quantisation's part, B by bf16's; the
    headline and the measured line say each side's precision and error on one line."""
    answer = _compared("cpu8_fp8", "cpu8")
    a, b = answer.result.a, answer.result.b
    assert (a.status, b.status) == ("ok", "ok"), (a.reason, b.reason)
    assert a.workload == W.replace(dtype="fp8") and b.workload == W
    assert a.workload.unquantised == b.workload and answer.result.workload == W
    fp8 = next(x for x in SEEN if x.quantised is not None)
    plain = next(x for x in SEEN if x.quantised is None)
    for name in "qkv":
        drawn = getattr(plain, name)
        assert fp8.quantised.drawn[name] is drawn  # the same tensor: drawn once, quantised from it
        back = fp8.quantised.fp8[name].double() * fp8.quantised.scales[name].double()
        scale = drawn.double().abs().max() / 448.0
        bound = torch.maximum(drawn.double().abs() * E4M3_STEP / 2, torch.full_like(back, scale * E4M3_SUBNORMAL / 2))
        assert ((back - drawn.double()).abs() <= bound * (1 + 1e-6)).all()
    truth = _attention64(W, plain.q, plain.k, plain.v)
    deq = _attention64(W, *(fp8.quantised.fp8[n].double() * fp8.quantised.scales[n].double() for n in "qkv"))
    assert a.accuracy.quantisation_max_abs_error == pytest.approx((deq - truth).abs().max().item(), rel=1e-5)
    assert b.accuracy.quantisation_max_abs_error is None
    assert a.accuracy.naive_max_abs_error == b.accuracy.naive_max_abs_error  # one fp64 truth, one plain bf16
    assert b.accuracy.max_abs_error < a.accuracy.quantisation_max_abs_error <= 2 * a.accuracy.max_abs_error
    title = answer.explanation.headline.title
    assert "\n" not in title and "Error against fp64 on the unquantised inputs" in title
    assert title.endswith(f" Error against fp64 on the unquantised inputs: A {text.error(a.accuracy.max_abs_error)} "
                          f"(quantising alone: {text.error(a.accuracy.quantisation_max_abs_error)}); "
                          f"B {text.error(b.accuracy.max_abs_error)}."), title
    assert "stand-in, fp8 [A]" in title and "stand-in [B]" in title
    assert answer.measured.endswith(
        "bf16, causal, forward · A in fp8 (q, k and v in e4m3, quantised from the same drawn values)"), answer.measured
    for n in answer.explanation.notes:  # no note calls a side faster without both errors on its line
        if "faster" in n.title:
            assert text.error(a.accuracy.max_abs_error) in n.title, n.title


def test_a_twin_that_ignores_its_scales_is_caught_by_the_correctness_gate(stand_in, monkeypatch):
    """The planted fault, live: the twin reads its fp8 values without their scales. Its answer is off by orders of
    magnitude; the gate marks it wrong and the headline ranks nothing."""
    faulty = _stand_in(scaled=False)
    (twin,) = faulty.twins()
    monkeypatch.setitem(VARIANTS, twin.key, twin)
    answer = _compared("cpu8_fp8", "cpu8")
    a = answer.result.a
    assert a.accuracy.max_abs_error > 100 * a.accuracy.quantisation_max_abs_error
    title = headline(a, answer.result.b).title
    assert "gives a wrong answer" in title and "not ranked" in title and "faster" not in title, title


def test_a_twin_s_run_is_found_in_a_recording_under_its_quantised_workload(stand_in, tmp_path, monkeypatch):
    """A recording holding the twin's run (of dtype fp8) and its base's (bf16): asked for both on the bf16 workload,
    replay finds each under the workload it ran; a recording without the twin says so."""
    answer = _compared("cpu8_fp8", "cpu8")
    folder = tmp_path / "cpu-fp8"
    folder.mkdir()
    write_stored(folder / RUNS_FILE, [dataclasses.replace(r, trace_path=None) for r in
                                      (answer.result.a, answer.result.b)])
    monkeypatch.setattr(replay, "RECORDED_DIR", tmp_path)
    replay.recorded_runs.cache_clear()
    try:
        assert replay.unrecorded_message("cpu-fp8", W, ("cpu8_fp8", "cpu8")) is None
        found = replay.find_recorded("cpu-fp8", "cpu8_fp8", W)
        assert found.workload == W.replace(dtype="fp8") and found.variant == "cpu8_fp8"
        assert replay.find_recorded("cpu-fp8", "cpu8", W).workload == W
        assert replay.find_recorded("cpu-fp8", "cpu8", W.replace(dtype="fp8")) is None  # base's fp8 run: not held
        replayed = session.compare(Request("cpu-fp8", "cpu8_fp8", "cpu8", W))
        assert replayed.result.a.accuracy == answer.result.a.accuracy
        assert replayed.measured.endswith("· A in fp8 (q, k and v in e4m3, quantised from the same drawn values)")
    finally:
        replay.recorded_runs.cache_clear()


def test_the_trace_says_whether_an_fp8_run_s_kernel_was_built_for_an_8_bit_type():
    """An fp8 run's longest kernel: a name carrying e4m3 (FA3's cutlass::float_e4m3_t) says the fp8 path ran; a name
    without one (cuDNN's) says the trace does not show it, and why that proves nothing; a 16-bit run gets no note."""
    from explain_helpers import apply, recorded
    from profiling.explain.facts import main_kernel
    from profiling.explain.guess_rules import fp8_kernel

    plain = recorded("sdpa_cudnn")
    assert apply(fp8_kernel, plain) is None
    run = dataclasses.replace(plain, workload=plain.workload.quantise("qkv"))
    unsaid = apply(fp8_kernel, run)
    main = main_kernel(run, run.phase)
    assert unsaid.title == f"The trace does not show fp8: `{text.clip(main.short_name, 48)}` names no 8-bit type"
    assert "q, k and v in e4m3" in unsaid.body and "the error against fp64 is the check" in unsaid.body
    main.name = ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::"
                 "CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>>, cutlass::float_e4m3_t, float>>>>")
    said = apply(fp8_kernel, run)
    assert said.title.endswith("is built for e4m3: the fp8 path ran") and said.kernels == [main.name]
    assert "its main kernel (" in said.body and "of the forward" in said.body  # its share, with its total
    cache = dataclasses.replace(plain, workload=NAMED["decode"].quantise("kv"))
    assert "an e4m3 KV cache" in apply(fp8_kernel, cache).body
