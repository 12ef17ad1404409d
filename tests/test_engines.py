"""The serving engines' kernels as variants (FA3's forward, cuDNN's frontend, FlashInfer's decode), on a machine
without them: each refuses in one line with the reason its own file gives (not installed with the install line, the
build's flags, what the kernel takes), its kernels are filed and its decode split told from the names its file
declares, and a variant's knowledge stays in its file."""
from __future__ import annotations

import dataclasses
import pathlib

import pytest
from explain_helpers import apply

from attention_variants import VARIANTS, cudnn_frontend, fa3, flashinfer
from attention_variants.optional import Library
from profiling import text, trace
from profiling.explain import decode_rules
from profiling.workload import NAMED, Workload
from test_decode import H200, kernel, synthetic

ENGINES = ("fa3", "cudnn_fe", "flashinfer")
DECODE = NAMED["decode"]
PREFILL = Workload.blog(head_dim=128)


@pytest.mark.parametrize("key", ENGINES)
def test_without_its_library_it_says_so_with_the_install_line(key, monkeypatch):
    library = {"fa3": fa3, "cudnn_fe": cudnn_frontend, "flashinfer": flashinfer}[key].LIBRARY
    monkeypatch.setattr(Library, "version", lambda self: None)
    reason = VARIANTS[key].supports(DECODE, H200)
    assert reason == (f"{library.dist} is not installed (an optional dependency); to add it: "
                      f'pip install "{library.dist}=={library.pin}"')
    assert VARIANTS[key].supports(DECODE.replace(device="cpu"), H200).endswith("runs on NVIDIA GPUs only")


def test_a_library_that_fails_to_import_says_how(monkeypatch):
    library = Library("some-dist", "no_such_module_here", "1.0", "Some")
    monkeypatch.setattr(Library, "version", lambda self: "1.0")
    assert library.missing() == ("import no_such_module_here (some-dist 1.0) failed: ModuleNotFoundError: No module "
                                 "named 'no_such_module_here'")


@pytest.fixture
def installed(monkeypatch):
    """The libraries as if installed and importable (their checks beyond that are what is tested)."""
    monkeypatch.setattr(Library, "missing", lambda self: None)
    monkeypatch.setattr(Library, "version", lambda self: self.pin)
    monkeypatch.setattr(flashinfer.shutil, "which", lambda name: "/usr/local/cuda/bin/nvcc")


FA3_BUILD = {"FLASHATTENTION_DISABLE_BACKWARD": True, "FLASHATTENTION_DISABLE_PAGEDKV": True,
             "FLASHATTENTION_DISABLE_LOCAL": True, "FLASHATTENTION_DISABLE_FP16": True,
             "FLASHATTENTION_DISABLE_VARLEN": False}  # fa3-fwd 0.0.3's fa3_fwd_config.CONFIG, in part


@pytest.mark.parametrize("changes, says", [
    ({}, None),
    ({"q_len": 1, "kv_heads": 8, "heads": 32}, None),
    ({"lengths": (512, 256, 256)}, None),
    ({"passes": "fwd+bwd"}, "compiled without its backward (FLASHATTENTION_DISABLE_BACKWARD): forward only"),
    ({"dtype": "fp16"}, "compiled without fp16: it runs bf16 (and fp8) only"),
    ({"dtype": "fp32"}, "FlashAttention-3 runs bf16 (and fp8) only (the inputs are fp32)"),
    ({"mask": "window", "window": 256}, "compiled without sliding windows (FLASHATTENTION_DISABLE_LOCAL)"),
    ({"q_len": 1, "page_size": 16}, "compiled without paged KV caches (FLASHATTENTION_DISABLE_PAGEDKV)"),
    ({"mask": "bias"}, "FlashAttention-3 takes no dense mask or bias"),
])
def test_fa3_refuses_what_its_build_left_out_read_from_the_build(installed, monkeypatch, changes, says):
    monkeypatch.setattr(fa3, "build_flags", lambda: FA3_BUILD)
    reason = VARIANTS["fa3"].supports(PREFILL.replace(**changes), H200)
    assert (reason is None) if says is None else (says in reason), reason
    if says and "compiled without" in says:
        assert "this build of FA3 (fa3-fwd 0.0.3)" in reason
    # a build with everything: the same workloads run (but for what FA3 itself never takes)
    monkeypatch.setattr(fa3, "build_flags", lambda: {})
    again = VARIANTS["fa3"].supports(PREFILL.replace(**changes), H200)
    assert (again is None) == (says is None or "compiled without" in says), again


@pytest.mark.parametrize("changes, says", [
    ({"q_len": None}, "FlashInfer's decode kernel: one new query per sequence"),
    ({"q_len": 4}, "FlashInfer's decode kernel: one new query per sequence"),
    ({"dtype": "fp32"}, "fp16 and bf16"),
    ({"head_dim": 96}, "head dims 64, 128, 256 (it is 96)"),
    ({"page_size": 16}, None),
    ({"mask": "window", "window": 1024}, None),
    ({}, None),
])
def test_flashinfer_takes_decode_steps_and_says_what_else_it_does_not(installed, changes, says):
    reason = VARIANTS["flashinfer"].supports(DECODE.replace(**changes), H200)
    assert (reason is None) if says is None else (says in reason), reason


def test_flashinfer_without_nvcc_says_so_in_one_line(installed, monkeypatch):
    monkeypatch.setattr(flashinfer.shutil, "which", lambda name: None)
    reason = VARIANTS["flashinfer"].supports(DECODE, H200)
    assert reason == "FlashInfer compiles its kernels on first use with CUDA's nvcc, which is not on this machine's PATH"


@pytest.mark.parametrize("changes, says", [
    ({}, None), ({"passes": "fwd+bwd"}, None), ({"mask": "window", "window": 256}, None),
    ({"lengths": (512, 256, 256)}, None), ({"q_len": 1, "kv_heads": 8, "heads": 32}, None),
    ({"q_len": 1, "page_size": 16}, "takes no page table"), ({"mask": "bool"}, "takes no dense mask or bias"),
    ({"dtype": "fp32"}, "fp16 and bf16"),
])
def test_cudnn_frontend_takes_what_sdpa_cannot_express_and_says_what_it_does_not(installed, changes, says):
    reason = VARIANTS["cudnn_fe"].supports(PREFILL.replace(**changes), H200)
    assert (reason is None) if says is None else (says in reason), reason


@pytest.mark.parametrize("name, category", [
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<...>>>(...)",
     "fused attention"),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdCombine<...>>>(...)",
     "fused attention"),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<...>(...)", "fused attention"),
    ("void flashinfer::PersistentVariableLengthMergeStatesKernel<...>(...)", "fused attention"),
])
def test_the_engines_kernels_are_filed_as_attention_from_their_own_files(name, category):
    """FA3's kernels are CUTLASS device kernels: without its file's patterns they would be filed as GEMMs."""
    assert trace.category(name) == category


def test_a_declared_split_is_told_from_its_merge_kernel_in_the_variants_own_words():
    split = [kernel("flashinfer::BatchDecodeWithPagedKVCacheKernel", 100.0, [8, 8, 4]),
             kernel("flashinfer::PersistentVariableLengthMergeStatesKernel", 4.0, [132])]
    note = apply(decode_rules.decode_kernels, synthetic("flashinfer", split))
    assert note.title == (f"FlashInfer decode split the keys: `{text.kernel(split[0])}`, then `{text.kernel(split[1])}` "
                          "merges them")
    assert "BatchDecodeWithPagedKVCacheKernel" in note.title and "PersistentVariableLengthMergeStatesKernel" in note.title
    assert note.body.startswith(VARIANTS["flashinfer"].words["split"])
    assert note.facts["merge"].value == pytest.approx(4 / 104) and note.facts["merge"].of == "the forward"
    alone = apply(decode_rules.decode_kernels, synthetic("flashinfer", split[:1]))
    assert "ran one kernel" in alone.title and "merges" not in alone.title


def test_fa3s_decode_scratch_bounds_its_split_partials():
    """FA3 with num_splits=0 splits a decode step whose tiles are few: its partials (fp32 out and log-sum-exp per
    split) are in the estimate; a prefill of many tiles has none."""
    few = DECODE.replace(batch=1)
    assert fa3.splits(few, 132) > 1
    rows = few.heads * few.batch * few.queries
    assert fa3._scratch(few, H200) >= fa3.splits(few, 132) * rows * (few.head_dim + 1) * 4
    assert fa3.splits(PREFILL, 132) == 1


def test_a_variants_knowledge_stays_in_its_file():
    """The explainer and the measurement never name an engine's kernels: each file declares its own."""
    root = pathlib.Path(__file__).resolve().parent.parent
    for path in [*(root / "profiling").rglob("*.py")]:
        text = path.read_text().lower()
        for piece in ("flashattnfwd", "batchdecodewithpagedkvcache", "mergestates", "fa3_fwd", "import flashinfer",
                      "sdpa_torch", "import cudnn"):
            assert piece not in text, f"{path.relative_to(root)} names {piece}"


def test_a_contiguous_cache_is_read_by_flashinfer_as_pages_in_place():
    """Page j of sequence b in the strided view is tokens 16j…16j+15 of that sequence, every kv head, with no copy."""
    import torch
    b, h, s, d = 3, 2, 64, 8
    k = torch.randn(b, h, s, d)
    pages, per = flashinfer.contiguous_pages(k), s // flashinfer.PAGE
    assert pages.data_ptr() == k.data_ptr()
    for row in range(b):
        for j in range(per):
            assert torch.equal(pages[row * h * per + j], k[row, :, 16 * j:16 * (j + 1)])
    assert pages.storage_offset() + sum((n - 1) * st for n, st in zip(pages.shape, pages.stride())) == k.numel() - 1


def test_softcap_reaches_the_engines_that_take_it_and_is_refused_by_the_rest(installed, monkeypatch):
    """FA3 (softcap=) and FlashInfer (logits_soft_cap=) apply it; cuDNN's frontend has no argument for it."""
    monkeypatch.setattr(fa3, "build_flags", lambda: FA3_BUILD)
    assert VARIANTS["fa3"].supports(PREFILL.replace(softcap=30.0), H200) is None
    assert VARIANTS["flashinfer"].supports(DECODE.replace(softcap=30.0), H200) is None
    reason = VARIANTS["cudnn_fe"].supports(PREFILL.replace(softcap=30.0), H200)
    assert reason.startswith("cudnn.sdpa_torch has no softcap") and "fa3" in reason and "flashinfer" in reason
    monkeypatch.setattr(fa3, "build_flags", lambda: FA3_BUILD | {"FLASHATTENTION_DISABLE_SOFTCAP": True})
    assert "compiled without softcap" in VARIANTS["fa3"].supports(PREFILL.replace(softcap=30.0), H200)


def test_a_setup_is_named_by_its_own_variant_never_as_another_s():
    """FlashInfer's setup is its plan, flex's its block mask: the note says which (on the H100 the plan's note once
    said 'Building the block mask took 30.686 ms' of FlashInfer)."""
    from profiling.explain import mask_rules
    run = synthetic("flashinfer", [kernel("flashinfer::BatchDecodeWithPagedKVCacheKernel", 100.0)], setup_ms=30.7,
                    setup_reused=False)
    note = apply(mask_rules.block_mask_setup, run)
    assert note.title.startswith("Building its plan took") and "block mask" not in note.title + note.body
    assert note.body == VARIANTS["flashinfer"].words["setup_how"]
    flex = synthetic("flex", [kernel("triton_tem_fused_flex_attention_0", 100.0, category="triton")], setup_ms=3.0,
                     setup_reused=True)
    assert apply(mask_rules.block_mask_setup, flex).title.startswith("The block mask was found built")


def test_a_jit_estimate_names_the_gpu_its_prior_was_measured_on():
    from profiling import budget
    for key, gpu in (("flashinfer", "an H100"), ("cudnn_fe", "an H100"), ("fa4", "an H200")):
        seconds, basis = budget.CompileClock().estimate("cuda", VARIANTS[key])
        assert seconds == VARIANTS[key].jit_s[0] and basis == f"as its first calls took on {gpu}"


def test_a_recording_made_without_a_variant_says_so_rather_than_name_workloads_that_lack_it_too():
    from profiling.replay import unrecorded_message
    said = unrecorded_message("h200-torch2.11", Workload.blog(), ["fa3", "sdpa_cudnn"])
    assert said.endswith("holds no run of fa3 on any workload: it was recorded without it. Measure it live on a GPU, "
                         "or choose recorded variants.") and "Nearest" not in said
    assert "Nearest recorded" in unrecorded_message("h200-torch2.11", Workload.blog(seq_len=3000), ["sdpa_cudnn"])


def test_an_fp8_cache_reads_half_the_bytes_and_the_traffic_note_says_what_it_saved():
    from profiling.explain import timing_rules
    kernels = [kernel("flashinfer::BatchDecodeWithPagedKVCacheKernel", 100.0)]
    bf16 = apply(timing_rules.memory_traffic, synthetic("flashinfer", kernels))
    fp8 = apply(timing_rules.memory_traffic, synthetic("flashinfer", kernels, DECODE.replace(kv_dtype="fp8")))
    kv = DECODE.kv_bytes  # K and V in bf16: 2 bytes an element
    assert bf16.facts["moved"].value - fp8.facts["moved"].value == kv // 2
    assert fp8.facts["saved"].value == kv // 2 and "saved" not in bf16.facts
    assert "e4m3 K and V: 128.0 MiB fewer than bf16." in fp8.body


def test_flashinfer_refuses_a_group_of_heads_its_header_does_not_dispatch(installed, monkeypatch, tmp_path):
    """The group sizes come from DISPATCH_GQA_GROUP_SIZE in the installed header: on an H100 a plan at 32 query heads
    over one kv head failed inside FlashInfer ("Unsupported group_size: 32") and took the recording down with it."""
    include = tmp_path / "flashinfer" / "data" / "include" / "flashinfer"
    include.mkdir(parents=True)
    (include / "utils.cuh").write_text(
        "#define DISPATCH_HEAD_DIM(head_dim, HEAD_DIM, ...) if (head_dim == 64) {}\n"
        "#define DISPATCH_GQA_GROUP_SIZE(group_size, GROUP_SIZE, ...) \\\n  if (group_size == 1) { } \\\n"
        "  else if (group_size == 4) { } else if (group_size == 8) { } else { error(group_size); }\n"
        "#define DISPATCH_OTHER(group_size) if (group_size == 32) {}\n")
    spec = dataclasses.make_dataclass("Spec", ["submodule_search_locations"])([str(tmp_path / "flashinfer")])
    monkeypatch.setattr(flashinfer.importlib.util, "find_spec", lambda name: spec)
    flashinfer.group_sizes.cache_clear()
    try:
        assert flashinfer.group_sizes() == (1, 4, 8)
        assert VARIANTS["flashinfer"].supports(DECODE, H200) is None  # 32 over 8: a group of 4
        mqa = DECODE.replace(kv_heads=1)
        assert VARIANTS["flashinfer"].supports(mqa, H200) == (
            "FlashInfer's decode kernels are compiled for 1, 4, 8 query heads per kv head; this workload has 32 "
            "(32 over 1)")
        monkeypatch.setattr(flashinfer.importlib.util, "find_spec", lambda name: None)
        flashinfer.group_sizes.cache_clear()
        assert flashinfer.group_sizes() == flashinfer.GROUP_SIZES  # not installed: the pinned version's
    finally:
        flashinfer.group_sizes.cache_clear()


def test_cudnn_frontend_sees_the_window_the_workload_means(monkeypatch):
    """A window of W is a query and the W-1 keys before it. `cudnn.sdpa_torch` hands `window_left` on as cuDNN's
    diagonal_band_left_bound: "masks j <= i-lb, i.e. lb visible tokens including self" (its torch/sdpa_provider.py,
    1.32.0). A stand-in library keeping exactly that contract must give the workload's own masked attention (W-1,
    FlashAttention's convention, read one key short: an error of 0.39 on the H100's recording)."""
    import sys
    import types

    import torch

    def sdpa_torch(q, k, v, *, scale, is_causal=False, window_left=-1, return_lse=False, **_):
        i, j = torch.arange(q.shape[-2])[:, None], torch.arange(k.shape[-2])[None, :]
        seen = (j <= i) if is_causal else torch.ones_like(i * j, dtype=torch.bool)
        if window_left >= 0:
            seen &= j > i - window_left
        out = torch.softmax((q @ k.transpose(-1, -2) * scale).masked_fill(~seen, float("-inf")), -1) @ v
        return (out, None) if return_lse else out

    monkeypatch.setitem(sys.modules, "cudnn", types.SimpleNamespace(sdpa_torch=sdpa_torch))
    w = Workload.blog(batch=1, heads=2, seq_len=64, head_dim=16, dtype="fp32", mask="window", window=8, device="cpu")
    x = w.make_inputs()
    scores = (x.q @ x.k.transpose(-1, -2) * x.scale).masked_fill(~x.allowed, float("-inf"))
    assert int(x.allowed[-1].sum()) == 8  # the workload's window: the last query sees 8 keys, itself among them
    torch.testing.assert_close(cudnn_frontend.cudnn_frontend_attention(x), torch.softmax(scores, -1) @ x.v)


def test_a_first_call_is_said_in_the_variants_own_words():
    """cuDNN's frontend compiles nothing of its own on its first call: sdpa_torch builds a cuDNN graph and its
    execution plans (its _build_graph: build_operation_graph, create_execution_plans, build_plans), cached per
    configuration. The note says that; a JIT library (FA4 on the same recording) is said to compile."""
    from profiling.explain import explain
    from profiling.replay import find_recorded
    from profiling.results import Comparison

    runs = [find_recorded("h100-torch2.11", k, Workload.blog()) for k in ("cudnn_fe", "fa4")]
    notes = {n.side: n for n in explain(Comparison(*runs)).notes if n.rule == "first_call"}
    assert notes["a"].body.startswith("cuDNN frontend (sdpa_torch) built its cuDNN graph and execution plans for the "
                                      "forward of this configuration on the first call"), notes["a"].body
    assert "compiled" not in notes["a"].body
    assert notes["b"].body.startswith("FlashAttention-4 JIT-compiled its kernels for the forward"), notes["b"].body
