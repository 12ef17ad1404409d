"""The serving engines' kernels live on the GPU (FA3's forward, cuDNN's frontend, FlashInfer's decode), where their
libraries are installed (`. bench/h200/engines_setup.sh .whl` on the lent GPU): each runs what its file says, gives
the answer within the correctness gate, stays within its memory estimate, launches the kernels its file names, and a
decode step's note says what the trace shows. Collected only where CUDA is available; a variant whose library is
absent is skipped with its reason (the CPU tests hold the refusals)."""
import pytest
import torch

from attention_variants import VARIANTS
from profiling import session
from profiling.budget import call_bytes
from profiling.environment import detect
from profiling.explain import decode_rules, explain
from profiling.measurement import measure_runs
from profiling.request import Request
from profiling.workload import NAMED, Workload

pytestmark = [pytest.mark.gpu, pytest.mark.xdist_group("gpu")]
ENV = detect() if torch.cuda.is_available() else None
PREFILL = Workload.blog(batch=2, seq_len=2048, head_dim=128)
DECODE = NAMED["decode"]


def runs_of(keys, w):
    missing = {k: VARIANTS[k].supports(w, ENV) for k in keys}
    absent = [k for k, r in missing.items() if r and "not installed" in r]
    if absent:
        pytest.skip(f"not installed here: {', '.join(absent)}")
    return {r.variant: r for r in measure_runs([VARIANTS[k] for k in keys], w)}


def within_estimate(run, w):
    estimate = call_bytes(VARIANTS[run.variant], w, ENV)
    assert run.peak_extra_bytes <= estimate, (run.variant, run.peak_extra_bytes, estimate)


@pytest.mark.parametrize("w", [PREFILL, PREFILL.replace(kv_heads=4, heads=16), PREFILL.replace(causal=False)],
                         ids=["causal", "gqa", "no-mask"])
def test_fa3_and_cudnn_frontend_prefill_answer_right_with_their_own_kernels(w):
    runs = runs_of(["fa3", "cudnn_fe", "sdpa_cudnn"], w)
    for key in ("fa3", "cudnn_fe"):
        run = runs[key]
        assert run.ok, run.reason
        assert run.accuracy.max_abs_error <= 2 * runs["sdpa_cudnn"].accuracy.max_abs_error + 1e-3
        attention = [k for k in run.kernels if k.category == "fused attention"]
        assert len(attention) == 1 and attention[0].share > 0.9, [(k.name[:80], k.category) for k in run.kernels]
        within_estimate(run, w)
    assert "FlashAttnFwdSm90" in next(k for k in runs["fa3"].kernels if k.category == "fused attention").short_name
    # cuDNN's frontend and SDPA pinned to cuDNN: cuDNN kernels both, the answer the same
    assert "cudnn" in next(k for k in runs["cudnn_fe"].kernels if k.category == "fused attention").name


def test_cudnn_frontend_trains_and_fa3_says_it_cannot():
    w = PREFILL.replace(passes="fwd+bwd")
    runs = runs_of(["cudnn_fe", "fa3"], w)
    assert runs["cudnn_fe"].ok, runs["cudnn_fe"].reason
    assert runs["cudnn_fe"].accuracy.max_abs_error < 0.05
    assert any(k.phase == "backward" and k.category == "fused attention" for k in runs["cudnn_fe"].kernels)
    assert runs["fa3"].status == "unsupported" and "FLASHATTENTION_DISABLE_BACKWARD" in runs["fa3"].reason


@pytest.mark.parametrize("w", [DECODE, DECODE.replace(batch=1, seq_len=65536), DECODE.replace(page_size=16),
                               DECODE.replace(kv_heads=None)], ids=["decode", "long", "paged", "mha"])
def test_a_decode_step_of_each_engine_is_right_within_its_estimate_and_its_note_follows_the_trace(w):
    keys = [k for k in ("fa3", "flashinfer", "cudnn_fe", "sdpa_cudnn") if VARIANTS[k].supports(w, ENV) is None
            or "not installed" in VARIANTS[k].supports(w, ENV)]
    runs = runs_of(keys, w)
    for key, run in runs.items():
        assert run.ok, (key, run.reason)
        assert run.accuracy.max_abs_error < 5e-3, (key, run.accuracy.max_abs_error)
        within_estimate(run, w)
        path = decode_rules.decode_path(run)
        assert path is not None, (key, [k.name[:80] for k in run.kernels])
        v = VARIANTS[key]
        if v.split_kv:
            merged = any(v.split_kv[1] in k.name.lower() for k in run.kernels_of("forward"))
            assert (path.kind == "declared split") == merged
    if "flashinfer" in runs:  # it reads the cache in pages, so it splits a long one across blocks
        fi = runs["flashinfer"]
        if w.batch == 1:
            assert decode_rules.decode_path(fi).kind == "declared split"


def test_an_engine_comparison_through_the_front_door_explains_every_number():
    request = Request.build("live", "fa3", "flashinfer", DECODE.changes(), "cuda")
    answer = session.compare(request)
    for run in (answer.result.a, answer.result.b):
        if run.reason and "not installed" in run.reason:
            pytest.skip(run.reason)
    assert answer.result.a.ok and answer.result.b.ok
    print(answer.explanation.headline.title)
    for note in answer.explanation.notes[:8]:
        print(" -", note.title)


@pytest.mark.parametrize("key, w", [("fa3", PREFILL.replace(softcap=30.0)), ("flashinfer", DECODE.replace(softcap=30.0))])
def test_softcap_is_applied_as_the_reference_applies_it(key, w):
    """cap·tanh(s/cap) on the scaled scores: the fp64 reference applies it, so an engine that did not (or applied it
    before the scale) would be far off."""
    run = runs_of([key], w)[key]
    assert run.ok, run.reason
    assert run.accuracy.max_abs_error < 2e-2, run.accuracy.max_abs_error


FP8_PREFILL = PREFILL.replace(dtype="fp8")
FP8_DECODE = DECODE.replace(dtype="fp8")
FP8_CACHE = DECODE.replace(kv_dtype="fp8")


@pytest.mark.parametrize("key, w", [("fa3", FP8_PREFILL), ("fa3", FP8_DECODE), ("fa3", FP8_PREFILL.replace(rank=3)),
                                    ("flashinfer", FP8_CACHE), ("flashinfer", FP8_CACHE.replace(page_size=16))],
                         ids=["fa3-prefill", "fa3-decode", "fa3-rank3", "flashinfer-cache", "flashinfer-paged"])
def test_an_fp8_engine_answers_within_the_fp8_gate_with_its_scales_applied(key, w):
    """The descales reach the kernel: the answer is within a small multiple of the quantisation's own error (a dropped
    scale is off by 10^2 or more), inside its memory estimate, its output bf16, the quantisation timed apart."""
    from profiling.explain import facts

    run = runs_of([key], w)[key]
    assert run.ok, run.reason
    a = run.accuracy
    assert a.quantisation_max_abs_error is not None and run.quantise_ms is not None and run.quantise_ms > 0
    assert a.max_abs_error <= 3 * max(a.quantisation_max_abs_error, a.naive_max_abs_error), a
    assert facts.wrong_answer(run) is None
    within_estimate(run, w)
    print(key, w.words(), "error", a.max_abs_error, "quantisation alone", a.quantisation_max_abs_error,
          "plain bf16", a.naive_max_abs_error, "ms", run.timing.median_ms, "quantise ms", run.quantise_ms,
          [k.short_name[:90] for k in run.kernels if k.category == "fused attention"])


@pytest.mark.parametrize("bf16, fp8, key", [(PREFILL, FP8_PREFILL, "fa3"), (DECODE, FP8_CACHE, "flashinfer")],
                         ids=["fa3", "flashinfer"])
def test_fp8_beside_bf16_of_the_same_engine_states_both_errors_on_the_headline(bf16, fp8, key):
    """FA3 fp8 vs FA3 bf16, FlashInfer fp8 cache vs bf16 cache: two measured runs of one engine; the headline gives
    each side's error against fp64 on the same line as the speed."""
    from profiling.explain.verdict import headline

    slow, fast = runs_of([key], bf16)[key], runs_of([key], fp8)[key]
    assert slow.ok and fast.ok, (slow.reason, fast.reason)
    title = headline(fast, slow).title
    print(title)
    assert "Error against fp64 on the unquantised inputs" in title and "quantising alone" in title
