"""Which SDPA backend goes first on which torch and GPU, and why a backend is refused (PyTorch's sdp_utils.cpp,
read per release in PyTorch's source)."""
from __future__ import annotations

import dataclasses

import pytest
from explain_helpers import RUNS, recorded

from profiling import dispatch
from profiling.dispatch import clean_warning
from profiling.workload import Workload

ENV = RUNS[0].environment  # the H200 recording: sm90, torch 2.11.0+cu130, cuDNN 9.19.0


def env(torch_version="2.11.0", cc=(9, 0), cudnn=91900, cuda="13.0", device="cuda"):
    return dataclasses.replace(ENV, torch_version=torch_version, compute_capability=cc, cudnn_version=cudnn,
                               cuda_version=cuda, device=device)


@pytest.mark.parametrize("torch_version, cc, cudnn, cuda, compiled, first", [
    ("2.8.0", (9, 0), 91002, "12.8", None, False),      # 2.8 never
    ("2.9.1", (9, 0), 91002, "12.8", 90800, False),     # 2.9 cu128 wheels were built against cuDNN 9.8
    ("2.9.1", (9, 0), 91002, "12.8", 91000, True),      # built against 9.9 or newer
    ("2.9.1", (9, 0), 91002, "12.8", None, None),       # a recording does not say what it was built against
    ("2.9.1", (10, 3), 91002, "12.8", 91000, False),    # 2.9: minor 0 only
    ("2.10.0", (9, 0), 91701, "12.8", None, True),      # 2.10: runtime cuDNN 9.15.1 or newer
    ("2.10.0", (9, 0), 91500, "12.8", None, False),     # 9.15.0 is not enough
    ("2.10.0", (10, 3), 91701, "12.8", None, False),    # sm103 arrives in 2.11
    ("2.11.0", (10, 3), 91701, "13.0", None, True),
    ("2.11.0", (9, 0), 91002, "12.6", None, False),     # stock cu126 wheels ship cuDNN 9.10.2
    ("2.11.0", (9, 0), 91900, "13.0", None, True),      # the H200 recording
    ("2.11.0", (10, 1), 91900, "13.0", None, False),
    ("2.13.0", (10, 1), 91900, "13.0", None, True),     # 2.13+ CUDA-13 builds: any minor of sm9x/sm10x
    ("2.13.0", (10, 1), 91900, "12.9", None, False),    # ... CUDA-12 builds: 0 or 3
    ("2.14.1", (8, 9), 91900, "13.0", None, False),     # never on sm89 (L4)
    ("2.14.1", (12, 0), 91900, "13.0", None, False),    # never on sm120 (ZeroGPU's RTX Pro 6000)
    ("2.11.0", (8, 0), 91900, "13.0", None, False),     # the blog's A100
])
def test_cudnn_first_per_torch_release_and_gpu(torch_version, cc, cudnn, cuda, compiled, first):
    decided, rule = dispatch.cudnn_first(env(torch_version, cc, cudnn, cuda), compiled)
    assert decided is first and rule


def test_environment_variables_undo_it_where_this_process_is_asked():
    assert dispatch.cudnn_first(env("2.9.1"), 91000, {"TORCH_CUDNN_SDPA_PREFERRED": "0"})[0] is False
    assert dispatch.cudnn_first(env("2.11.0"), None, {"TORCH_CUDNN_SDPA_DEPRIORITIZED": "1"})[0] is False


def test_priority_of_a_recording_is_predicted():
    priority = dispatch.priority(ENV)
    assert priority.order == ("cudnn", "flash", "efficient", "math") and not priority.read_live
    assert dispatch.priority(env(cc=(8, 9))).order == ("flash", "efficient", "math", "cudnn")
    assert dispatch.priority(env(device="cpu", cc=None)).order == ("flash", "math")
    assert not dispatch.is_this_process(ENV)


@pytest.mark.parametrize("backend, changes, environment, expected", [
    ("flash", {"dtype": "fp32"}, {}, "fp16 and bf16 only"),
    ("cudnn", {"dtype": "fp32"}, {}, "fp16 and bf16 only"),
    ("efficient", {"dtype": "fp32"}, {}, None),
    ("flash", {"rank": 3}, {}, "4-D"),
    ("flash", {"rank": 3}, {"torch_version": "2.14.1"}, None),
    ("math", {"rank": 3}, {}, None),
    ("flash", {"head_dim": 320}, {}, "head_dim up to 256"),
    ("cudnn", {"head_dim": 192}, {"cc": (8, 9)}, "head_dim up to 128 on sm89"),
    ("cudnn", {"head_dim": 192}, {"cc": (12, 0)}, "head_dim up to 128 on sm120"),
    ("cudnn", {"head_dim": 192}, {}, None),                 # sm90 takes up to 256 with a recent cuDNN
    ("cudnn", {"head_dim": 100}, {}, "multiple of 8"),
    ("efficient", {"head_dim": 100}, {}, "multiple of 8 in bf16"),
    ("efficient", {"head_dim": 100, "dtype": "fp32"}, {}, None),   # fp32 needs a multiple of 4
    ("efficient", {"head_dim": 102, "dtype": "fp32"}, {}, "multiple of 4 in fp32"),
])
def test_known_refusals_know_the_per_arch_head_dim_limits(backend, changes, environment, expected):
    why = dispatch.known_refusal(backend, Workload.blog(**changes), env(**environment))
    assert why == expected if expected is None else expected in why


@pytest.mark.parametrize("name, key", [("Memory efficient", "efficient"), ("flash (CPU)", "flash"),
                                       ("CUDNN_ATTENTION", "cudnn"), ("MATH", "math"), ("auto", None), (None, None)])
def test_backend_keys(name, key):
    assert dispatch.backend_key(name) == key


def test_refusal_reasons_read_both_warning_formats():
    raw = recorded("sdpa_flash", dtype="fp32").pytorch_warnings  # as recorded: with "(Triggered internally at ...)"
    for warnings in (raw, [clean_warning(w) for w in raw]):
        (reason,) = dispatch.refusal_reasons("flash", warnings)
        assert reason.startswith("Expected query, key and value to all be of dtype: {Half, BFloat16}")
        assert dispatch.refusal_reasons("cudnn", warnings) == []  # "runtime disabled" only: it was not pinned


def test_the_rules_predict_every_recorded_h200_outcome():
    """Held against what really ran on the H200: a pinned backend ran exactly where no known refusal applies (and
    ran the backend it was pinned to), and auto ran the first backend of the predicted order that none refuses."""
    from attention_variants import VARIANTS
    checked = 0
    for run in RUNS:
        variant = VARIANTS[run.variant]
        if variant.sdpa_backend is None or run.variant in ("sdpa_fa4", "sdpa_nested"):
            continue  # FA4's route refuses by its own rules; nested tensors choose in torch/nested/_internal/sdpa.py
        where = f"{run.variant} · {run.workload.words()}"
        own = variant.supports(run.workload, run.environment)  # the app's own refusal (a paged cache), not SDPA's
        if own is not None:
            assert not run.ok and run.reason == own, where
            checked += 1
            continue
        if variant.pinned:
            backend = dispatch.backend_key(variant.sdpa_backend)
            refused = dispatch.known_refusal(backend, run.workload, run.environment)
            assert (refused is None) == run.ok, (where, refused, run.status)
            assert not run.ok or dispatch.backend_key(run.backend) == backend, where
        else:
            first = next(b for b in dispatch.priority(run.environment, run.workload).order
                         if dispatch.known_refusal(b, run.workload, run.environment) is None)
            assert dispatch.backend_key(run.backend) == first, where
        checked += 1
    # every workload × at least (4 pinned + auto; packed documents: 3 pinned, auto and the block-diagonal mask; the
    # block-diagonal mask beside the rest where it was recorded later), less sdpa_math's decode step whose trace
    # lost its GPU work (dropped)
    assert checked >= 5 * len({r.workload for r in RUNS}) - 1


def test_every_note_on_a_page_tells_one_order_and_auto_is_first_only_where_it_is():
    """On the H200 (torch 2.11, cuDNN 9.19, sm90; DESIGN's version facts) SDPA's own order tries cuDNN first; a causal
    decode step (fewer queries than keys) goes through causal_lower_right, whose `CausalBias._dispatch` calls flash,
    then memory-efficient, itself, and only then SDPA. So on every recorded page with SDPA on auto: every "SDPA tries
    X first" says cudnn, and the auto-choice title calls the backend that ran first in the order that really put it
    first (causal_lower_right's for a decode step's flash, SDPA's for cudnn). The speculative-decode page once said
    "Auto ran flash, first in SDPA's order" beside "SDPA tries cudnn first on the H200"."""
    import re

    from profiling.explain import explain
    from profiling.results import Comparison

    by_workload: dict = {}
    for run in RUNS:
        by_workload.setdefault(run.workload, {})[run.variant] = run
    seen = set()
    for w, runs in by_workload.items():
        auto = runs.get("sdpa_auto")
        if auto is None or not auto.ok or w.timing != "warm":
            continue
        other = runs.get("flex") or runs.get("sdpa_flash")
        notes = explain(Comparison(auto, other)).notes
        words = " ".join(f"{n.title} {n.body}" for n in notes)
        assert set(re.findall(r"SDPA tries (\w+) first", words)) <= {"cudnn"}, (w.words(), words)
        decode = w.causal and w.mask == "flag" and w.q_len is not None and w.q_len < w.seq_len
        for n in (n for n in notes if n.rule == "auto_choice" and n.side in ("a", "both")):
            first = re.search(r"ran (\w+), first in (\S+) order", n.title)
            if first is None:
                continue  # "after X refused this input"
            backend, whose = first.groups()
            assert backend == dispatch.backend_key(auto.backend)
            expected = ("causal_lower_right's", "flash") if decode else ("SDPA's", "cudnn")
            assert (whose, backend) == expected, (w.words(), n.title)
            seen.add(decode)
    assert seen == {True, False}  # both kinds of page were checked
