"""A decode step: fewer queries than keys, the queries the last q_len positions. Every variant that runs on this CPU
gives the lower-right causal answer of an fp64 oracle written here (and SDPA's is_causal=True the top-left one, a
different answer); a paged cache is the same cache, really shuffled, read back page by page; what does not make
sense is refused in one line naming the field."""
from __future__ import annotations

import dataclasses
import json
import warnings

import pytest
import torch
from oracles import attention_fp64, paged_kv

from attention_variants import VARIANTS, flex
from profiling.environment import detect
from profiling.measurement import measure_runs
from profiling.workload import NAMED, Refusal, Workload

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


# -- what the trace shows for decode: the rules on synthetic runs (kernel names and grids as the launchers make them) ---
from explain_helpers import RUNS, apply  # noqa: E402

from profiling import text  # noqa: E402
from profiling.explain import decode_rules, explain, timing_rules  # noqa: E402
from profiling.results import Accuracy, Comparison, Kernel, Run, Timing, share_by_phase  # noqa: E402

H200 = next(r.environment for r in RUNS if r.environment.device == "cuda")
DECODE = NAMED["decode"]


def kernel(name: str, us: float, grid: list[int] | None = None, category: str = "fused attention") -> Kernel:
    return Kernel(name=name, short_name=name, category=category, calls_per_forward=1.0, us_per_forward=us, grid=grid)


def synthetic(variant: str, kernels: list[Kernel], workload: Workload = DECODE, ms: float | None = None,
              **fields) -> Run:
    ms = ms if ms is not None else sum(k.us_per_forward for k in kernels) / 1000
    return Run(variant, workload, H200, kernels=share_by_phase(kernels),
               timing=Timing.of([ms * (1 + i / 1000) for i in range(9)], "cuda events"), **fields)


SPLIT = [kernel("pytorch_flash::flash_fwd_splitkv_kernel", 30.0, [1, 4, 64]),
         kernel("pytorch_flash::flash_fwd_splitkv_combine_kernel", 3.0, [64])]


def test_pytorchs_split_kv_is_named_with_its_splits_from_the_grid_and_its_combine():
    run = synthetic("sdpa_flash", SPLIT)
    note = apply(decode_rules.decode_kernels, run)
    assert note.facts["splits"].value == 4 and note.facts["splits"].source == "run.kernels[0].grid[1]"
    assert note.facts["merge"].value == pytest.approx(3 / 33) and note.facts["merge"].of == "the forward"
    assert "flash_fwd_splitkv_kernel" in note.title and "in 4 splits" in note.title and "the combine merges them" in note.body
    assert note.kernels == [k.name for k in SPLIT]
    packed = apply(decode_rules.gqa_packing, run)   # grid[2] = B·Hkv = 64, not B·H = 256
    assert packed.facts["grid"].value == 64 and "4 query heads" in packed.title
    one_query_head_each = synthetic("sdpa_flash", [kernel(SPLIT[0].name, 30, [1, 4, 256]), SPLIT[1]])
    assert apply(decode_rules.gqa_packing, one_query_head_each) is None


def test_flex_decoding_kernel_and_its_prefill_kernel_are_told_apart_by_the_grid():
    decoding = synthetic("flex", [kernel("triton_tem_fused_flex_attention_0", 20.0, [1, 64, 4], "triton"),
                                  kernel("triton_per_fused_flex_attention_1", 2.0, [8192], "triton")])
    note = apply(decode_rules.decode_kernels, decoding)
    assert note.title.startswith("flex took its decoding kernel") and note.facts["splits"].value == 4
    assert note.facts["merge"].value == pytest.approx(2 / 22)
    assert apply(decode_rules.gqa_packing, decoding).facts["grid"].value == 64
    prefill = synthetic("flex", [kernel("triton_tem_fused_flex_attention_0", 40.0, [1, 8, 24], "triton")],
                        DECODE.replace(heads=24, kv_heads=8))
    note = apply(decode_rules.decode_kernels, prefill)
    assert note.title.startswith("flex ran its prefill kernel") and note.facts["group"].value == 3
    assert "splits" not in note.facts and apply(decode_rules.gqa_packing, prefill) is None


@pytest.mark.parametrize("batch, kv_heads, splits, merge", [(8, 8, 4, "triton_poi_"), (1, 8, 32, "triton_per_"),
                                                           (8, 1, 32, "triton_per_"), (64, 8, 1, "triton_poi_")])
def test_flex_decoding_splits_are_read_from_its_grid_whatever_kernels_merge_them(batch, kv_heads, splits, merge):
    """The recorded H200 decode steps: flex_decoding_grid is (query blocks, B·Hkv, SPLIT_KV), SPLIT_KV =
    2·⌊132 SMs ÷ B·Hkv⌋ (get_split_k): at B=8 its 4 splits are merged by 3 pointwise kernels, at B·Hkv = 8 its 32
    by reductions, at B=64 there is one. The audit found 209 notes saying of the pointwise case that the trace does
    not show whether it splits; and with one kv head the grid [1, 8, 32] is a prefill grid's (1, B, H) in numbers."""
    w = Workload(batch=batch, heads=32, kv_heads=kv_heads, seq_len=8192, head_dim=128, q_len=1, dtype="bf16")
    (run,) = [r for r in RUNS if r.variant == "flex" and r.workload == w]
    template = next(k for k in run.kernels if k.short_name.startswith("triton_tem_"))
    assert template.grid == [1, batch * kv_heads, splits] == [1, batch * kv_heads, max(1, 132 // (batch * kv_heads) * 2)]
    note = apply(decode_rules.decode_kernels, run)
    assert note.title.startswith("flex took its decoding kernel") and note.facts["splits"].value == splits
    assert ("4 key splits" in note.title or "32 key splits" in note.title) == (splits > 1)
    assert ("no split" in note.title) == (splits == 1) and "does not show" not in note.body
    assert all(k.short_name.startswith(merge) for k in run.kernels_of("forward")[1:])
    assert note.kernels == [k.name for k in run.kernels_of("forward")]  # the template and what runs after it
    assert ("merge them" in note.body) == (splits > 1)


def test_math_on_a_decode_step_is_given_a_materialised_lower_right_mask_never_is_causal():
    """A causal decode step calls SDPA with `causal_lower_right` (is_causal=False): the recorded H200 trace shows
    ones → fill and tril before SDPA, SDPA's where converting the bool mask, and math's add_. The audit found the
    note saying "Given is_causal" with a build of "0.0 µs" (it read only launches inside the math op)."""
    from profiling.explain import guess_rules
    w = DECODE.replace(q_len=4, dtype="bf16")
    (run,) = [r for r in RUNS if r.variant == "sdpa_math" and r.workload == w]
    note = apply(guess_rules.math_mask, run)
    built = [launch.us_per_forward for k in run.kernels_of("forward") for launch in k.launched_by
             if "aten::_scaled_dot_product_attention_math" not in launch.ops
             and launch.ops[0] in ("aten::ones", "aten::tril")]
    converted = [launch.us_per_forward for k in run.kernels_of("forward") for launch in k.launched_by
                 if launch.ops[:2] == ["aten::scaled_dot_product_attention", "aten::where"]]
    assert len(built) == 2 and len(converted) == 2
    assert note.facts["materialise"].value == pytest.approx(sum(built)) and sum(built) > 0
    assert note.facts["convert"].value == pytest.approx(sum(converted)) and sum(converted) > 0
    assert note.facts["build"].value == pytest.approx(sum(built) + sum(converted))
    assert "is_causal=False" in note.body and "Given is_causal" not in note.body and "0.0 µs" not in note.body


def test_one_kernel_for_four_queries_says_so_with_the_tiles_its_grid_holds():
    run = synthetic("sdpa_flash", [kernel("pytorch_flash::flash_fwd_kernel", 50.0, [1, 8, 32])], DECODE.replace(q_len=4))
    note = apply(decode_rules.decode_kernels, run)
    assert note.facts["blocks"].value == 256 and "no combine" not in note.body and "splits" not in note.facts
    cudnn = synthetic("sdpa_cudnn", [kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16", 45.0,
                                            [132, 1, 1])])
    # of a kernel whose source is not read (cuDNN's), the note does not say whether it splits the keys
    body = apply(decode_rules.decode_kernels, cudnn).body
    assert "No split" not in body and "whether it splits them across blocks, the trace does not show" in body
    # and a reduction launched after it is named (cuDNN's sm80 decode kernel is followed by lean_reduction_kernel)
    lean = synthetic("sdpa_cudnn", [kernel("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16", 65.0, [4, 8, 8]),
                                    dataclasses.replace(kernel("void cudnn::fusion::lean_reduction_kernel<false>", 2.5,
                                                               [1, 32, 8], "other"),
                                                        short_name="cudnn::fusion::lean_reduction_kernel")])
    body = apply(decode_rules.decode_kernels, lean).body
    assert "After it runs `cudnn::fusion::lean_reduction_kernel`" in body and "no combine" not in body


def test_no_decode_note_for_a_square_problem_or_a_cpu():
    square = synthetic("sdpa_flash", [kernel("pytorch_flash::flash_fwd_kernel", 50.0, [8, 8, 16])], Workload.blog())
    for rule in (decode_rules.decode_kernels, decode_rules.gqa_packing, decode_rules.paged_cache,
                 decode_rules.causal_alignment):
        assert apply(rule, square) is None, rule.__name__
    import dataclasses
    on_cpu = dataclasses.replace(synthetic("sdpa_flash", SPLIT, DECODE.replace(device="cpu")), environment=ENV)
    assert decode_rules.decode_path(on_cpu) is None and apply(timing_rules.memory_traffic, on_cpu) is None


def _bytes_of_the_tensors(w: Workload) -> int:
    """What a call reads and writes, from the tensors themselves (a small copy of the workload on the CPU): q, k, v
    and an output shaped as q."""
    x = w.replace(device="cpu").make_inputs()
    return x.q.nbytes + x.k.nbytes + x.v.nbytes + x.q.nbytes + (x.page_table.nbytes if x.page_table is not None else 0)


def test_the_decode_kernel_note_speaks_of_attention_kernels_only():
    """Every recorded decode step (warm, cold, graph): the fused and compiled ways get the note of the kernel that
    walks the keys; attention written by hand (naive, SDPA's math) runs GEMMs and elementwise kernels, none of them
    such a kernel, and gets none (it was told "ran one kernel for q_len 1: `elementwise_kernel [direct_copy]`")."""
    by_hand = {"naive", "naive_inplace", "sdpa_math"}
    decode = [r for r in RUNS if r.ok and r.workload.q_len is not None and r.environment.device == "cuda"]
    assert len(decode) >= 150 and by_hand & {r.variant for r in decode}
    for run in decode:
        note = apply(decode_rules.decode_kernels, run)
        assert (note is None) == (run.variant in by_hand), (run.variant, run.workload.words())


@pytest.mark.parametrize("w, ms", [(DECODE.replace(seq_len=1024), 0.010),
                                   (DECODE.replace(seq_len=1024), 0.005),          # faster than HBM: the L2's
                                   (DECODE.replace(seq_len=1024, kv_heads=1, q_len=4), 0.010),
                                   (DECODE.replace(seq_len=1024, kv_heads=None, page_size=64, batch=2), 0.010)],
                         ids=["gqa", "gqa-from-l2", "mqa-q4", "mha-paged"])
def test_the_bytes_a_decode_call_moves_are_its_tensors_and_the_rate_is_bytes_over_time(w, ms):
    """The one bytes note of every GPU run (timing_rules.memory_traffic) on a decode step: its tensors, a page table
    included, over the median call, against the copy the recording measured."""
    run = synthetic("sdpa_flash", SPLIT, w, ms=ms)
    note = apply(timing_rules.memory_traffic, run)
    moved = _bytes_of_the_tensors(w)
    assert note.facts["moved"].value == moved == _read(w)
    per_us = moved / (run.timing.median_ms * 1000)                                 # bytes per µs of the median call
    ceiling = H200.copy_bytes_per_s / 1e6
    assert note.facts["rate"].value == pytest.approx(per_us)
    assert note.facts["ceiling"].value == pytest.approx(ceiling)
    assert note.facts["share"].value == pytest.approx(per_us / ceiling) and "of the copy ceiling" in note.title
    assert ("page table" in note.title) == (w.page_size is not None)
    assert text.size(moved) in note.title and text.bandwidth(per_us) in note.title
    assert ("Above it: the 60.0 MiB L2 served part of its" in note.body) == (per_us > ceiling)  # warm, 32 MiB: fits
    # above the copy with the L2 flushed, or a working set far past it: HBM reads, not the L2
    for changed in (dict(timing="cold"), dict(seq_len=131072, batch=1)):
        past = synthetic("sdpa_flash", SPLIT, w.replace(**changed), ms=ms * moved_ratio(w, w.replace(**changed)))
        body = apply(timing_rules.memory_traffic, past).body
        assert "L2 served" not in body
        assert ("Above it: this call mostly reads" in body) == (per_us > ceiling)


def _read(w: Workload) -> int:
    """q and out, k and v, and the page table, from the shapes: B·H·Lq·D twice, B·Hkv·S·D twice, B·S/P int32."""
    pages = w.seq_len // w.page_size if w.page_size else 0
    return (2 * w.batch * w.heads * w.queries + 2 * w.batch * w.kv_head_count * w.seq_len) * w.head_dim \
        * w.element_bytes + 4 * w.batch * pages


def moved_ratio(w, other) -> float:
    """How many times the bytes of `w` another workload's call moves (the same rate at another size)."""
    return _read(other) / _read(w)  # both: their tensors


def test_without_a_measured_copy_the_rate_is_held_against_the_datasheet_and_said_so():
    import dataclasses
    older = dataclasses.replace(H200, copy_bytes_per_s=None)
    note = apply(timing_rules.memory_traffic, dataclasses.replace(synthetic("sdpa_flash", SPLIT), environment=older))
    assert note.facts["ceiling"].value == 4.8e6 and note.facts["ceiling"].source == "hbm[H200]"
    assert "datasheet" in note.body and "datasheet" in note.title
    unknown = dataclasses.replace(older, device_name="X9")
    assert apply(timing_rules.memory_traffic, dataclasses.replace(synthetic("sdpa_flash", SPLIT),
                                                                  environment=unknown)) is None


def test_is_causal_true_is_shown_as_measured_or_as_refused():
    shown = synthetic("sdpa_cudnn", SPLIT, accuracy=Accuracy(1e-3, 1e-3, top_left_max_abs_error=2.61))
    note = apply(decode_rules.causal_alignment, shown)
    assert note.facts["wrong"].value == 2.61 and note.facts["right"].value == 1e-3 and "off by 2.6e+00" in note.title
    refused = synthetic("sdpa_flash", SPLIT, accuracy=Accuracy(1e-3, 1e-3, top_left_refused=(
        "Flash attention not used because: Flash attention does not support the is_causal flag when seqlen_q != "
        "seqlen_k. → No available kernel. Aborting execution.")))
    note = apply(decode_rules.causal_alignment, refused)
    assert note.title.startswith("is_causal=True is refused for this step") and "seqlen_q != seqlen_k" in note.body
    assert apply(decode_rules.causal_alignment, synthetic("sdpa_flash", SPLIT, accuracy=Accuracy(1e-3, 1e-3))) is None


def test_a_paged_run_says_how_it_reads_its_table():
    w = DECODE.replace(page_size=16)
    note = apply(decode_rules.paged_cache, synthetic("flex", SPLIT, w))
    assert note.facts["pages"].value == 512 and note.facts["pool"].value == 8 * 512
    assert note.facts["table"].value == 4 * 8 * 512 and "PagedAttention" in note.body
    assert "page_table" in apply(decode_rules.paged_cache, synthetic("fa4", SPLIT, w)).body
    assert "512 pages of 16 tokens a sequence" in note.title and "holds 4,096 pages" in note.body
    one = DECODE.replace(batch=1, seq_len=64, page_size=64)  # a cache of one page: said so, not "1 pages"
    note = apply(decode_rules.paged_cache, synthetic("flex", SPLIT, one))
    assert "1 page of 64 tokens a sequence" in note.title and "holds 1 page in" in note.body


def test_a_decode_comparison_explains_and_every_number_is_the_runs():
    from explain_helpers import assert_numbers_are_the_runs, comparison_context
    a = synthetic("sdpa_flash", SPLIT, accuracy=Accuracy(1e-3, 1e-3, top_left_refused="No available kernel."))
    b = synthetic("flex", [kernel("triton_tem_fused_flex_attention_0", 20.0, [1, 64, 4], "triton"),
                           kernel("triton_per_fused_flex_attention_1", 2.0, [8192], "triton")])
    explained = explain(Comparison(a, b))
    rules = {n.rule for n in explained.notes}
    assert {"decode_kernels", "gqa_packing", "memory_traffic", "causal_alignment"} <= rules
    for n in explained.notes:
        assert_numbers_are_the_runs(n, comparison_context(Comparison(a, b), n))


# -- sweeps over the batch, beside S -----------------------------------------------------------------------------
from profiling import session  # noqa: E402
from profiling.explain.curves import expected_exponent  # noqa: E402
from profiling.request import LIVE, Request, parse_lengths  # noqa: E402
from profiling.results import Sweep  # noqa: E402


@pytest.mark.parametrize("variant, quantity, w, axis, expected", [
    ("sdpa_flash", "time", DECODE, "batch", 1.0),           # each sequence adds the same work
    ("naive", "memory", DECODE, "batch", 1.0),               # the B·H·Lq×S scores
    ("sdpa_flash", "memory", DECODE, "batch", 1.0),          # the B·H·Lq rows
    ("sdpa_flash", "time", DECODE, "seq_len", 1.0),          # q_len fixed: the work grows with S, not S²
    ("sdpa_flash", "memory", DECODE, "seq_len", 0.0),        # a decode step's rows do not grow with S
    ("sdpa_flash", "time", Workload.blog(causal=False), "seq_len", 2.0),
])
def test_the_expected_growth_follows_the_work_along_either_axis(variant, quantity, w, axis, expected):
    low, high = (1, 64) if axis == "batch" else (1024, 8192)
    assert expected_exponent(variant, quantity, w, low, high, axis)[0] == pytest.approx(expected, abs=0.02)


def test_a_live_sweep_over_the_batch_says_b_and_replays_as_it_was_taken():
    fields = {"heads": 2, "seq_len": 64, "q_len": 4, "head_dim": 16, "dtype": "fp32"}
    request = Request.build(LIVE, "naive", "sdpa_math", fields, "cpu", (1, 2, 4), "batch")
    answer = session.sweep(request, budget_s=120)
    result = answer.result
    assert result.axis == "batch" and result.seq_lens == [1, 2, 4] and result.workload.batch == 1
    assert sorted({result.value(r) for r in result.runs}) == [1, 2, 4]
    assert {r.workload.seq_len for r in result.runs} == {64}
    assert "B=4" in answer.explanation.headline.title and "S=" not in answer.explanation.headline.title
    for n in answer.explanation.notes:
        assert "S=" not in n.title, n.title
        assert all(q.unit != "power" for q in n.facts.values()), n.title     # exponents of B, said B^k
    again = Sweep.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result and again.select(["sdpa_math"], [2, 4]).seq_lens == [2, 4]
    from profiling import reports
    assert list(reports.sweep_table(result).columns)[0] == "B"
    assert "over B" in reports.sweep_markdown(answer.explanation, result.axis)


def test_the_axis_goes_to_a_link_and_back_and_bad_values_are_refused_by_the_batchs_limits():
    request = Request.build(LIVE, "naive", "sdpa_math", {}, "cpu", (1, 8, 64), "batch")
    query = request.to_query()
    assert query["axis"] == "batch" and query["seqs"] == "1,8,64"
    back, problems = Request.from_query(query, "cpu", LIVE)
    assert back == request and problems == []
    assert "axis" not in Request.build(LIVE, "naive", "sdpa_math", {}, "cpu", (128,)).to_query()
    assert parse_lengths("1, 8,64", axis="batch") == (1, 8, 64)
    with pytest.raises(Refusal) as caught:
        parse_lengths("2048", axis="batch")
    assert str(caught.value) == "seq_lens=2048 is not allowed: must be between 1 and 1024"
    from profiling.request import KEYS
    values = dict(zip(KEYS, request.values()))
    assert Request.from_values(values, "cpu", "1,8,64", axis="batch") == request
    with pytest.raises(Refusal) as caught:
        Request.from_values(values, "cpu", "1,2", axis="heads")
    assert str(caught.value) == "axis='heads' is not allowed: choose one of seq_len, batch"
    _, problems = Request.from_query({"axis": "heads"}, "cpu", LIVE)
    assert problems and problems[0][0] == "axis=heads"


def test_why_naive_loses_a_decode_step_counts_its_k_and_v_copies():
    """B=8, H=32 over 8 kv heads, S=8,192, one query (recorded on the H200): naive's forward takes 1.372 ms, of which
    its repeat_interleave copies of K and V take 1.132 ms; the scores are 4 MiB. The reason list names the copies
    with their time, read from the launches under repeat_interleave. The audit found it blaming the scores alone."""
    w = DECODE.replace(dtype="bf16")
    naive, flash = ([r for r in RUNS if r.variant == key and r.workload == w][0] for key in ("naive", "sdpa_flash"))
    copies = sum(launch.us_per_forward for k in naive.kernels_of("forward") for launch in k.launched_by
                 if "aten::repeat_interleave" in launch.ops)
    assert copies > 0.5 * naive.gpu_us("forward")
    why = next(n for n in explain(Comparison(naive, flash)).notes if n.rule == "speed")
    assert why.facts["copies"].value == pytest.approx(copies) and "copies K and V to every query head" in why.body
    assert why.body.index("copies K and V") < why.body.index("scores")  # the larger cause first
