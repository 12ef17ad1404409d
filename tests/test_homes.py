"""Each decision has one home: one planted change of the home changes every reader (a second home would keep its
own answer and fail here), and the bytes model against the tensors themselves."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from attention_variants import VARIANTS, Variant
from explain_helpers import RUNS
from attention_variants.guesses import guess_for
from profiling import budget, dispatch, recording, timing
from profiling.environment import detect
from profiling.explain import curves
from profiling.workload import NAMED, Packed, Workload

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [*ROOT.glob("profiling/**/*.py"), *ROOT.glob("attention_variants/*.py"), ROOT / "app.py",
           ROOT / "handlers.py", ROOT / "links.py"]
CPU = detect("cpu")


def _defined(name: str) -> list[str]:
    """The source files that assign `name` at module level."""
    return [str(p.relative_to(ROOT)) for p in SOURCES if re.search(rf"^{name}\b[^\n]*=", p.read_text(), re.M)]


def test_the_causal_decode_test_is_read_from_the_workload_by_dispatch_the_call_and_the_scratch(monkeypatch):
    decode = Workload.cpu_default(q_len=4, seq_len=64, heads=2)
    h200 = next(r.environment for r in RUNS if r.environment.device == "cuda")
    math = VARIANTS["sdpa_math"]
    x = decode.make_inputs()
    before = (dispatch.priority(h200, decode).by, math.scratch_bytes(decode, CPU), math.forward(x))
    monkeypatch.setattr(Workload, "lower_right", property(lambda self: False))
    after = (dispatch.priority(h200, decode).by, math.scratch_bytes(decode, CPU), math.forward(x))
    assert before[0] == "causal_lower_right" and after[0] != before[0]
    assert after[1] == before[1] - decode.mask_elements * 5           # the materialised Lq×S mask's bytes, gone
    assert torch.allclose(after[2], VARIANTS["sdpa_math"].top_left(x))  # the call fell back to is_causal=True
    assert not torch.allclose(after[2], before[2])


def _passed(w: Workload, variant: str, phase: str = "forward") -> dict[str, int]:
    """The tensors one call is given and gives back, from the tensors themselves (built on the CPU)."""
    x = w.replace(device="cpu").make_inputs()
    v = VARIANTS[variant]
    packing = v.packing(w)
    if packing == "padded":
        q, k, out = x.q.nbytes, x.k.nbytes, x.q.nbytes
        mask = x.bias if w.mask == "bias" else x.padding if x.padding is not None else \
            x.allowed if w.mask in ("bool", "window") and not v.sparse else None
    else:
        p = Packed.of(x)
        q, k, out = p.q.nbytes, p.k.nbytes, p.q.nbytes
        mask = torch.ones(w.tokens, w.tokens, dtype=torch.bool) if packing == "block" else None  # [T, T]
    tensors = {"q": q, "K": k, "V": k, "out": out}
    if mask is not None:
        tensors["bias" if w.mask == "bias" else "mask"] = mask.nbytes
    if x.page_table is not None:
        tensors["page table"] = x.page_table.nbytes
    return tensors


@pytest.mark.parametrize("w, variant", [
    (NAMED["cpu"].replace(kv_heads=2), "sdpa_flash"),                                  # GQA: K and V of 2 heads
    (NAMED["cpu"].replace(mask="window", window=64), "sdpa_auto"),                     # SDPA: a dense bool mask
    (NAMED["cpu"].replace(mask="window", window=64), "naive"),                         # naive reads it too
    (NAMED["cpu"].replace(mask="window", window=64), "fa4"),                           # a window argument: none
    (NAMED["cpu"].replace(mask="bool"), "sdpa_math"),
    (NAMED["cpu"].replace(mask="bias", dtype="bf16"), "sdpa_math"),                    # Lq×S in the dtype
    (NAMED["decode"].replace(batch=1, seq_len=1024, dtype="fp32"), "sdpa_flash"),      # Lq = 1
    (NAMED["decode"].replace(batch=1, seq_len=1024, page_size=64), "flex"),            # a page table
    (NAMED["cpu"].replace(lengths=(64, 32, 16), causal=False), "sdpa_math"),          # padded: [B,1,1,S] padding
    (NAMED["cpu"].replace(lengths=(64, 32, 16)), "varlen"),                            # packed: T tokens
    (NAMED["cpu"].replace(lengths=(64, 32, 16)), "sdpa_docmask"),                      # one sequence, [T, T]
])
def test_the_bytes_model_is_the_tensors_nbytes(w, variant):
    v = VARIANTS[variant]
    modelled = w.tensors("forward", v.packing(w), v.sparse)
    assert dict(modelled) == _passed(w, variant)
    assert w.moved_bytes("forward", v.packing(w), v.sparse) == sum(_passed(w, variant).values())


def test_whether_a_kernel_skips_masked_tiles_is_the_variant_s_one_answer(monkeypatch):
    w = NAMED["blog"].replace(mask="window", window=256, device="cpu", dtype="fp32")
    flex = VARIANTS["flex"]
    before = (budget._forward_seconds(w, flex, budget.COSTS["cpu"], CPU),
              curves.expected_exponent("flex", "time", w, 1024, 4096))
    monkeypatch.setattr(Variant, "skips_masked_tiles", lambda self, workload: False)
    after = (budget._forward_seconds(w, flex, budget.COSTS["cpu"], CPU),
             curves.expected_exponent("flex", "time", w, 1024, 4096))
    assert after[0] > before[0] and before[1][1] == "pairs" and after[1] == (pytest.approx(2.0), "all pairs")


def test_the_work_of_a_pair_is_one_figure_read_by_the_figures_the_cost_model_and_the_reference(monkeypatch):
    w, flash = NAMED["cpu"], VARIANTS["sdpa_flash"]
    cost = budget.COSTS["cpu"]
    before = (w.flops, w.dense_flops, flash.forward_flops(w), budget._forward_seconds(w, flash, cost, CPU),
              budget._reference_seconds(w, cost))
    real = Workload.pair_flops
    monkeypatch.setattr(Workload, "pair_flops", lambda self, pairs: 2 * real(self, pairs))
    after = (w.flops, w.dense_flops, flash.forward_flops(w), budget._forward_seconds(w, flash, cost, CPU),
             budget._reference_seconds(w, cost))
    assert all(a > b for a, b in zip(after, before))
    assert after[:3] == tuple(2 * b for b in before[:3])


def test_whether_a_call_writes_its_scores_is_the_variant_s_fused_flag(monkeypatch):
    w = NAMED["cpu"]
    for key, v in VARIANTS.items():
        assert guess_for(key, w).materialises_scores == (not v.fused)
    monkeypatch.setitem(VARIANTS, "sdpa_flash", dataclasses.replace(VARIANTS["sdpa_flash"], fused=False))
    assert guess_for("sdpa_flash", w).materialises_scores


def test_the_calls_of_a_measurement_and_the_long_call_are_set_once():
    for name in ("WARMUP_CALLS", "PROFILED_CALLS"):
        assert _defined(name) == ["profiling/budget.py"], name
    assert _defined("LONG_CALL_S") == ["profiling/timing.py"]  # timing's policy; budget reads it (no circle)
    assert not _defined("FORWARDS_PER_POINT") and not _defined("_UNTIMED_CALLS")


def test_the_named_workloads_are_one_table():
    assert recording.LLAMA is NAMED["llama"] and recording.DECODE is NAMED["decode"]
    assert Workload.blog() == NAMED["blog"] and Workload.cpu_default() == NAMED["cpu"]
    spelled = [p for p in SOURCES if p.name != "workload.py" and re.search(r"heads\W+32\W+kv_heads\W+8", p.read_text())]
    assert not spelled, spelled


def test_the_log_log_fit_is_one_function(monkeypatch):
    from profiling.explain import facts
    monkeypatch.setattr(facts, "log_fit", lambda xs, ys: (7.0, 0.5))
    monkeypatch.setattr(curves, "log_fit", facts.log_fit)  # what `from .facts import log_fit` bound: the same function
    assert facts.log_slope([1, 2], [1, 4]) == 7.0 and curves.r_squared([1, 2], [1, 4]) == 0.5
