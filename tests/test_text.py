"""Numbers into words, one spelling each, and every number written reads back as the value it was given."""
from __future__ import annotations

import random
import re

import pytest

from explain_helpers import RUNS

from profiling import reports, text
from profiling.environment import Environment
from profiling.results import Quantity


@pytest.mark.parametrize("unit, value, words", [
    ("ms", 0.0603, "0.060 ms"), ("ms", 20.1083, "20.108 ms"), ("ms", 1234.4, "1,234 ms"), ("us", 57.34, "57.3 µs"),
    ("us", 7882.6, "7.883 ms"), ("s", 0.1393, "139 ms"), ("s", 3.3304, "3.3 s"), ("s", 61.2, "61 s"),
    ("s", 1234.5, "1,234 s"), ("bytes", 512, "512 B"), ("bytes", 49152, "48.0 KiB"),
    ("bytes", 256 * 2**20, "256.0 MiB"), ("bytes", 8 * 2**30, "8.0 GiB"), ("share", 0.387, "39%"), ("share", 0.03, "3%"),
    ("share", 0.013, "1.3%"), ("share", 0.0, "0%"), ("pct", 12.5, "12.5%"), ("pct", 5.88, "5.9%"), ("x", 1.03, "1.03×"),
    ("x", 1.094, "1.09×"), ("x", 1.1, "1.1×"), ("x", 2.14, "2.1×"), ("x", 21.3, "21×"), ("count", 1.9999999, "2"),
    ("count", 4096, "4,096"),
    ("count", 2.333, "2.33"), ("power", 2.0, "S^2"), ("power", 1.4567, "S^1.46"),
])
def test_each_unit_has_one_spelling(unit, value, words):
    assert text.quantity(Quantity(value, unit, "test")) == words


# what each unit's words are worth: the value they stand for, and how far from it rounding may put them
_READ = {"ms": (r"([\d,.]+) (ms)", {"ms": 1.0}), "us": (r"([\d,.]+) (µs|ms)", {"µs": 1.0, "ms": 1000.0}),
         "s": (r"([\d,.]+) (ms|s)", {"ms": 1e-3, "s": 1.0}),
         "bytes": (r"([\d,.]+) (B|KiB|MiB|GiB)", {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}),
         "share": (r"([\d.]+)(%)", {"%": 0.01}), "x": (r"([\d.]+)(×)", {"×": 1.0})}


def read_back(unit: str, words: str) -> tuple[float, float]:
    """(the value the words say, half a unit of their last digit): what a reader takes from them."""
    pattern, scale = _READ[unit]
    number, suffix = re.fullmatch(pattern, words).groups()
    digits = number.replace(",", "")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return float(digits) * scale[suffix], 0.5 * 10**-decimals * scale[suffix]


@pytest.mark.parametrize("unit", list(_READ))
def test_every_written_number_reads_back_as_its_value(unit):
    """Over five decades of values, the words are the value rounded once, never a digit off or a unit wrong."""
    rng = random.Random(unit)
    low = {"share": 0.001, "x": 1.0}.get(unit, 1e-2)
    high = {"share": 1.0, "x": 500.0, "bytes": 2.0**40}.get(unit, 1e4)
    for _ in range(400):
        value = low * (high / low) ** rng.random()
        if unit == "bytes":
            value = float(round(value))
        said, half = read_back(unit, text.quantity(Quantity(value, unit, "test")))
        assert abs(said - value) <= half * (1 + 1e-9), (unit, value, said)


def test_a_ranked_ratio_never_reads_as_level():
    for k in range(1000, 1200):  # 1.000 … 1.199: the range where "1.0×" would hide a 3% or 9% win
        words = text.times(k / 1000)
        assert words != "1.0×", (k, words)
        assert float(words.rstrip("×")) == pytest.approx(k / 1000, abs=0.0051 if k < 1095 else 0.051)


def test_the_other_writers():
    assert text.error(3.9e-3) == "3.9e-03" and text.error(1.234e-7) == "1.2e-07"
    assert text.rate(512.3, 0.52) == "512 TFLOP/s, 52% of the datasheet peak"
    assert text.rate(0.0123) == "12.3 GFLOP/s" and text.rate(2.0, None) == "2 TFLOP/s"
    assert text.device_words("cuda") == "the GPU" and text.device_words("cpu") == "the CPU"
    assert text.plural(1, "length") == "1 length" and text.plural(4, "length") == "4 lengths"
    assert text.chain(["aten::masked_fill", "aten::clone", "aten::copy_"]) == "masked_fill → clone → copy_"


def test_a_percent_is_never_written_in_powers_of_ten():
    """A run-to-run spread of a busy CPU reaches thousands of percent: written out, never as 1.16e+03%."""
    assert [text.percent(v) for v in (5.9, 12.5, 646.2, 999.6, 1160.3, 12345.6)] == \
        ["5.9%", "12.5%", "646%", "1,000%", "1,160%", "12,346%"]
    assert not any("e+" in text.percent(10 ** (k / 10)) for k in range(-20, 60))


def test_one_truncation_rule():
    assert text.clip("cudnn_generated_fort_native_sdpa", 10) == "cudnn_gen…" and text.clip("short", 10) == "short"


def test_sentences_are_filled_from_facts_and_names():
    facts = {"time": Quantity(126.8, "us", "run.kernels[3].us_per_forward")}
    assert text.fill("{kernel} takes {time}", facts, {"kernel": "Memcpy DtoD"}) == "Memcpy DtoD takes 126.8 µs"


def test_the_glossary_finds_whole_terms():
    assert text.terms_in("cuDNN's wgmma kernel, launched with cuLaunchKernelEx") == ["wgmma", "cuLaunchKernelEx"]
    assert text.terms_in("no jargon here") == [] and text.terms_in("32-bit indexing splits it") == ["32-bit indexing"]
    assert all(len(gloss.split()) <= 20 for gloss in text.GLOSSARY.values())  # one line each


@pytest.mark.parametrize("device, name, words", [
    ("cuda", "NVIDIA H200", "on the H200"), ("cuda", "NVIDIA A100-SXM4-80GB", "on the A100"),
    ("cuda", "NVIDIA H100 80GB HBM3", "on the H100"),
    ("cuda", "Tesla T4", "on the T4"), ("cpu", "Intel(R) Xeon(R) Platinum 8480+", "on the CPU"),
])
def test_a_run_is_placed_on_its_own_machine_never_here(device, name, words):
    env = Environment(device, name, None, "2.11.0", None, None, None, "3.12", None, None)
    assert text.on_device(env) == words


def test_exponents_and_clipping_that_keeps_the_end():
    assert text.power(2.0) == "S^2" and text.power(1.4567) == "S^1.46"
    assert text.clip("triton_tem_fused_a_very_long_list_of_ops_2", 16, keep_end=2) == "triton_tem_fu…_2"
    assert len(text.clip("x" * 40, 28, keep_end=4)) == 28


@pytest.mark.parametrize("short_name, label", [
    ("vectorized_elementwise_kernel [mul]", "vectorized · mul"),
    ("elementwise_kernel [masked_fill]", "elementwise · masked_fill"),
    ("reduce_kernel [and]", "reduce · and"),
    ("nvjet_sm90_tst_64x512_64x2_1x2_h_bz_coopB_NNT", "nvjet sm90 64x512 NNT"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4...",
     "sm80 gemm ffma tn 128x128x8"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kerne...",
     "cudnn sm90 wgmma 64x128x64"),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80", "fmha bf16 64x128 sm80"),
    ("pytorch_flash::flash_fwd_kernel", "flash_fwd_kernel"),           # namespace dropped only to fit
    ("pytorch_flash::flash_fwd_splitkv_combine_kernel", "flash_fwd_splitkv_combine"),
    ("cutlass::Kernel2", "cutlass::Kernel2"), ("triu_tril_kernel", "triu_tril_kernel"), ("Memcpy DtoD", "Memcpy DtoD"),
    ("_scaled_dot_product_flash_attention_for_cpu", "_sdpa_flash_attention_cpu"),
    ("triton_tem_fused__to_copy_flex_attention_ones_slice_sort_sum_transpose_zeros_2", "triton_tem to_copy_flex_o…_2"),
])
def test_kernel_labels_are_short_and_keep_what_tells_them_apart(short_name, label):
    assert text.kernel_label(short_name) == label and len(label) <= text.LABEL_WIDTH


def test_colliding_labels_are_told_apart():
    fills = ["vectorized_elementwise_kernel [fill]"] * 2
    full = ["void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<bool>, std::array<char*, 1ul> >",
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"]
    assert text.kernel_labels(fills, full) == ["vectorized · fill<bool>", "vectorized · fill<float>"]
    nvjet = ["nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", "nvjet_sm90_tst_128x128_64x6_1x1_h_bz_TNT"]
    assert text.kernel_labels(nvjet) == ["nvjet sm90 128x128 TNT 2x1", "nvjet sm90 128x128 TNT 1x1"]
    assert text.kernel_labels(["a", "a", "b"]) == ["a", "a #2", "b"]


def test_every_recorded_summary_table_names_its_rows_uniquely_and_readably():
    for run in (r for r in RUNS if r.ok):
        where = f"{run.variant} · {run.workload.words()}"
        summary = reports.kernel_summary(run)
        names, rows = list(summary.iloc[:, 0]), list(zip(summary.iloc[:, 0], summary["category"]))
        # unique within a phase (a kernel of the forward and the backward is one label, two categories)
        assert len(rows) == len(set(rows)) and all(len(n) <= text.LABEL_WIDTH for n in names), (where, names)
        for name in names:  # a clipped name never reads as a bare cut of another's prefix
            if "…" in name:
                head = name.split("…")[0]
                assert not any(other != name and other.startswith(head) for other in names), (where, names)
        table = reports.kernel_table(run)
        rows = run.kernels_of()  # the run's phase: a backward view lists its backward's rows
        assert list(table["full name"]) == [k.name for k in rows], where
        # the five columns on screen: label, µs, share of the phase (named), calls, category (rounded for reading)
        total = sum(k.us_per_forward for k in rows)
        assert list(table.columns[1:4]) == [f"GPU µs per {run.phase}" if run.workload.device == "cuda" else
                                            f"self µs per {run.phase}, profiled", f"% of {run.phase}",
                                            "calls"], where
        assert list(table.iloc[:, 1]) == [round(k.us_per_forward, 1) for k in rows], where
        assert list(table.iloc[:, 2]) == [round(100 * k.us_per_forward / total, 1) for k in rows], where
        assert list(table.iloc[:, 3]) == [round(k.calls_per_forward, 2) for k in rows], where


def test_a_kernel_line_and_a_host_line_say_the_rows_numbers():
    run = next(r for r in RUNS if r.ok and r.variant == "naive" and r.workload.seq_len == 1024)
    memcpy = next(k for k in run.kernels if k.category == "memcpy")
    line = text.kernel_line(memcpy)
    assert line.startswith(text.kernel(memcpy, 64)) and f"{text.us(memcpy.us_per_forward)} per forward" in line
    assert f"({text.share(memcpy.share)} of the forward)" in line and memcpy.launch_api in line and "×" not in line
    # a backward's kernel launched twice a call: each launch's time and the pass's, both named
    twice = next(k for r in RUNS if r.ok and r.workload.passes == "bwd" for k in r.kernels
                 if k.phase == "backward" and round(k.calls_per_forward, 2) == 2)
    line = text.kernel_line(twice)
    assert (f"×2, {text.us(twice.us_per_forward / 2)} each · {text.us(twice.us_per_forward)} per backward "
            f"({text.share(twice.share)} of the backward)") in line, line
    assert " a call" not in line
    op = run.host_ops[0]
    assert text.host_line(op) == (f"{op.name} · forward · {text.plural(op.calls_per_forward, 'call')} · "
                                  f"{text.us(op.total_us_per_forward)} ({text.us(op.self_us_per_forward)} self) "
                                  "profiled")


def test_a_cold_or_graph_runs_card_says_its_host_figures_are_a_warm_loops():
    """The host figures are a plain warm loop's in every timing mode: a cold or graph run's card says so beside them,
    a warm run's has nothing to add."""
    from profiling import reports

    for timing in ("warm", "cold", "graph"):
        run = next(r for r in RUNS if r.ok and r.host_cost and r.back_to_back and r.workload.timing == timing)
        card = reports.run_card("A", run, "x")
        assert ("taken as a plain warm loop" in card) == (timing != "warm"), (timing, card)


def test_the_timeline_caption_names_the_call_it_shows_and_a_backward_view_s_is_the_whole_step():
    from types import SimpleNamespace

    from profiling import reports

    side = SimpleNamespace(label="x", gpu=[SimpleNamespace(end_us=10.0)], range_us=9.0, gpu_idle_us=0.0,
                           gpu_busy_us=5.0)
    assert reports.timeline_caption(side, side).startswith("One profiled forward of each (")
    assert reports.timeline_caption(side, side, "step", "step").startswith("One profiled training step of each (")
    assert reports.timeline_caption(side, side, "step", "backward").startswith(
        "One profiled training step of each, the whole step: a backward runs inside one (")
