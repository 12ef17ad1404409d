"""A live run is refused up front when it would hold the machine past its budget; the cost model behind
it knows that 16-bit arithmetic is slow on a CPU, and errs long rather than short."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

import app
from attention_variants import VARIANTS
from profiling.measurement import compare
from profiling.workload import LIVE_BUDGET_S, Workload, WorkloadError, check_time_budget, predicted_seconds

cpu_only = pytest.mark.skipif(app.ENV.device != "cpu", reason="the CPU's cost model")
MID = dict(batch=1, heads=8, seq_len=2048, head_dim=64, causal=True, rank=4)


def variants(*keys: str) -> list:
    return [VARIANTS[k] for k in keys]


@cpu_only
def test_bf16_over_budget_is_refused_where_fp32_is_not(monkeypatch):
    def measured(*args, **kwargs):
        raise AssertionError("refused before measuring")
    monkeypatch.setattr(app, "measure_live", measured)
    fp32 = Workload(dtype="fp32", device="cpu", **MID)
    assert predicted_seconds(fp32, variants("naive", "sdpa_flash")) <= LIVE_BUDGET_S["cpu"]
    with pytest.raises(app.gr.Error) as refused:
        app.run_comparison("live", "naive", "sdpa_flash", MID["seq_len"], MID["heads"], "bf16", MID["batch"],
                           MID["head_dim"], True, 4, progress=lambda *a, **k: None)
    message = refused.value.message
    assert message.startswith("seq_len=2048 is not allowed: naive vs sdpa_flash at 1x8x2048x64 bf16")
    assert "over the 60 s a live run may hold the machine" in message and "choose fp32" in message


@cpu_only
def test_the_model_prices_dtype_size_and_what_cannot_run():
    w = Workload(dtype="fp32", device="cpu", **MID)
    pair = variants("naive", "naive_inplace")
    assert predicted_seconds(w.replace(dtype="bf16"), pair) > 3 * predicted_seconds(w, pair)
    assert predicted_seconds(w.replace(seq_len=4096), pair) > 3 * predicted_seconds(w, pair)
    # on a CPU the efficient and cuDNN pins are refused before their first call: they cost nothing
    assert predicted_seconds(w, variants("sdpa_efficient", "sdpa_cudnn"), reference_ready=True) == 0
    assert predicted_seconds(w, variants("flex")) > predicted_seconds(w, variants("sdpa_flash")) + 20  # compiling
    with pytest.raises(WorkloadError) as caught:
        check_time_budget(w.replace(seq_len=16384), pair)
    assert caught.value.field == "seq_len" and caught.value.value == 16384


def test_the_model_needs_a_variant_s_traits_not_its_registry():
    w = Workload(dtype="fp32", device="cpu", **MID)
    flash = VARIANTS["sdpa_flash"]
    alike = SimpleNamespace(key="alike", fused=True, compiled=False, sdpa_backend=flash.sdpa_backend,
                            scratch_bytes=flash.scratch_bytes, supports=flash.supports)
    assert predicted_seconds(w, [alike]) == predicted_seconds(w, [flash])


@cpu_only
@pytest.mark.parametrize("a, b, workload", [
    ("naive", "naive_inplace", Workload(batch=1, heads=2, seq_len=1024, head_dim=64, dtype="bf16", device="cpu")),
    ("sdpa_math", "sdpa_flash", Workload(batch=1, heads=1, seq_len=2048, head_dim=16, dtype="fp32", device="cpu")),
])
def test_a_real_comparison_takes_no_longer_than_predicted(a, b, workload):
    predicted = predicted_seconds(workload, variants(a, b))
    start = time.perf_counter()
    result = compare(a, b, workload)
    took = time.perf_counter() - start
    assert result.a.ok and result.b.ok
    assert took <= predicted, f"took {took:.1f} s, predicted {predicted:.1f} s"
