"""A decode step: fewer queries than keys, the queries the last q_len positions. Every variant that runs on this CPU
gives the lower-right causal answer of an fp64 oracle written here (and SDPA's is_causal=True the top-left one, a
different answer); a paged cache is the same cache, really shuffled, read back page by page; what does not make
sense is refused in one line naming the field."""
from __future__ import annotations

import warnings

import pytest
import torch
from oracles import attention_fp64, paged_kv

from attention_variants import VARIANTS, flex
from profiling.environment import detect
from profiling.measurement import measure_runs
from profiling.workload import Refusal, Workload

ENV = detect("cpu")


def decode(**changes) -> Workload:
    return Workload(**{"batch": 2, "heads": 4, "seq_len": 64, "q_len": 4, "head_dim": 16, "dtype": "fp32",
                       "device": "cpu"} | changes)


@pytest.fixture
def eager_flex(monkeypatch):
    """FlexAttention without torch.compile (what compiling would change is speed, not the answer; a compile per
    shape takes tens of seconds on this CPU): its mask and page-table logic run as written."""
    from torch.nn.attention.flex_attention import flex_attention
    monkeypatch.setattr(flex, "_compiled_flex", lambda: flex_attention)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager flex warns that it is not compiled
        yield


SHAPES = [{"q_len": 1}, {"q_len": 4}, {"q_len": 4, "kv_heads": 2}, {"q_len": 16, "kv_heads": 1},
          {"q_len": 4, "causal": False}, {"q_len": 4, "mask": "window", "window": 8}, {"q_len": 4, "rank": 3},
          {"q_len": 3, "page_size": 16, "kv_heads": 2}, {"q_len": 1, "page_size": 32}]


@pytest.mark.parametrize("changes", SHAPES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_every_variant_that_runs_here_gives_the_lower_right_answer(changes, eager_flex):
    w = decode(**changes)
    x = w.make_inputs()
    truth = attention_fp64(w, x.q, x.k, x.v)
    checked = []
    for key, variant in VARIANTS.items():
        if variant.supports(w, ENV):
            continue
        with variant.pin(), torch.no_grad():
            out = variant.forward(x)
        assert (out.double().reshape(truth.shape) - truth).abs().max().item() < 1e-5, key
        checked.append(key)
    runnable = {"flex"} | ({"naive", "naive_inplace", "sdpa_math", "sdpa_flash", "sdpa_auto"}
                           if w.page_size is None else set())
    assert set(checked) == runnable


@pytest.mark.parametrize("changes", [{"q_len": 1}, {"q_len": 4, "kv_heads": 2}])
def test_is_causal_true_gives_the_top_left_answer_which_is_not_the_decode_step(changes):
    """The oracle's top-left mask (query i sees keys 0…i) is what SDPA's flag computes; it differs from the right
    answer by far more than rounding: the measurement's figure of it is that distance."""
    w = decode(**changes)
    x = w.make_inputs()
    right, wrong = attention_fp64(w, x.q, x.k, x.v), attention_fp64(w, x.q, x.k, x.v, top_left=True)
    keys = [k for k, v in VARIANTS.items() if v.top_left and not v.supports(w, ENV)]
    assert set(keys) == {"sdpa_math", "sdpa_flash", "sdpa_auto"}
    runs = measure_runs([VARIANTS[k] for k in keys], w)
    for key, run in zip(keys, runs):
        with VARIANTS[key].pin(), torch.no_grad():
            flagged = VARIANTS[key].top_left(x).double().reshape(right.shape)
        assert (flagged - wrong).abs().max().item() < 1e-5, key
        gap = (flagged - right).abs().max().item()
        assert gap > 0.1 and run.accuracy.top_left_max_abs_error == pytest.approx(gap, rel=1e-4), key
        assert run.accuracy.max_abs_error < 1e-5 and run.accuracy.top_left_refused is None


def test_the_flag_is_not_tried_where_it_means_the_same_or_nothing():
    """Square (no q_len), not causal, or an explicit mask: is_causal=True is not this run's question."""
    for w in (decode(q_len=None), decode(causal=False), decode(mask="bool")):
        run = measure_runs([VARIANTS["sdpa_math"]], w)[0]
        assert run.accuracy.top_left_max_abs_error is None and run.accuracy.top_left_refused is None, w.words()


def test_a_paged_cache_is_the_same_cache_in_shuffled_pages():
    w = decode(q_len=1, page_size=16, kv_heads=2, seq_len=128)
    x = w.make_inputs()
    assert x.k_pages.shape == (w.batch * 8, 16, 2, 16) and x.page_table.shape == (2, 8)
    assert x.page_table.dtype == torch.int32 and sorted(x.page_table.flatten().tolist()) == list(range(16))
    assert x.page_table.flatten().tolist() != list(range(16))          # shuffled: a kernel must gather
    assert torch.equal(paged_kv(w, x.k_pages, x.page_table), x.k)
    assert torch.equal(paged_kv(w, x.v_pages, x.page_table), x.v)
    plain = w.replace(page_size=None).make_inputs()                     # the same values as the contiguous cache
    assert all(torch.equal(a, b) for a, b in ((plain.q, x.q), (plain.k, x.k), (plain.v, x.v)))
    assert torch.equal(w.replace(seed=1).make_inputs().page_table, w.replace(seed=1).make_inputs().page_table)


@pytest.mark.parametrize("changes, says", [
    ({"page_size": 24}, "page_size=24 is not allowed: must be a power of two"),
    ({"page_size": 8}, "page_size=8 is not allowed: must be between 16 and 256"),
    ({"page_size": 16, "q_len": None}, "page_size=16 is not allowed: a paged KV cache is read by a decode step: set "
                                       "q_len"),
    ({"page_size": 16, "rank": 3}, "page_size=16 is not allowed: a paged cache holds [pages, page_size, kv heads, D]"),
    ({"page_size": 128, "seq_len": 192}, "page_size=128 is not allowed: S=192 must be a whole number of pages"),
    ({"page_size": 16, "mask": "bool"}, "page_size=16 is not allowed: a paged cache is read here with the causal flag "
                                        "or no mask, not mask=bool"),
    ({"q_len": 65}, "q_len=65 is not allowed: must be between 1 and S=64"),
    ({"passes": "fwd+bwd"}, "q_len=4 is not allowed: a decode step is inference"),
])
def test_what_makes_no_sense_is_refused_in_one_line_naming_the_field(changes, says):
    with pytest.raises(Refusal) as caught:
        decode(**changes)
    assert str(caught.value).startswith(says) and "\n" not in str(caught.value)
    assert caught.value.field == says.split("=")[0]


def test_variants_that_take_no_page_table_say_so():
    w = decode(page_size=16)
    reasons = {key: v.supports(w, ENV) for key, v in VARIANTS.items()}
    for key in ("naive", "naive_inplace", "sdpa_math", "sdpa_flash", "sdpa_auto"):
        assert "no page table" in reasons[key], key
    assert reasons["flex"] is None
