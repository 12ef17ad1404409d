"""Bad input is refused before anything is allocated, naming the field, the value and the limit."""
import time

import pytest
import torch

from attention_variants import Variant, get_variant
from profiling.measurement import measure
from profiling.workload import Workload, WorkloadError, check_time_budget


@pytest.mark.parametrize("field, value, limit_words", [
    ("seq_len", 0, "between 1 and"),
    ("seq_len", -5, "between 1 and"),
    ("seq_len", 10**7, "between 1 and 131072"),
    ("heads", 0, "between 1 and"),
    ("batch", -1, "between 1 and"),
    ("batch", 10**6, "between 1 and 1024"),
    ("head_dim", 0, "between 1 and"),
    ("head_dim", 4096, "between 1 and 512"),
    ("seq_len", 1.5, "whole number"),
    ("heads", True, "whole number"),
    ("dtype", "fp8", "fp32, fp16, bf16"),
    ("rank", 5, "3 ([B*H, S, D]) or 4"),
    ("device", "tpu", "'cuda' or 'cpu'"),
])
def test_bad_field_names_field_value_and_limit(field, value, limit_words):
    with pytest.raises(WorkloadError) as caught:
        Workload.cpu_default(**{field: value})
    assert caught.value.field == field
    assert repr(value) in str(caught.value)
    assert limit_words in str(caught.value)


@pytest.mark.parametrize("alias, canonical", [("bfloat16", "bf16"), ("torch.float16", "fp16"), ("FP32", "fp32")])
def test_dtype_aliases(alias, canonical):
    assert Workload.cpu_default(dtype=alias).dtype == canonical


def test_unknown_variant_lists_the_known_ones():
    with pytest.raises(WorkloadError) as caught:
        get_variant("flash3")
    assert caught.value.field == "variant" and "sdpa_flash" in str(caught.value)


def test_memory_over_budget_is_refused_before_allocating(monkeypatch):
    allocated = []
    monkeypatch.setattr(Workload, "make_inputs", lambda self: allocated.append(self))
    huge = Workload(batch=64, heads=64, seq_len=65536, head_dim=128, dtype="fp32", device="cpu")
    start = time.perf_counter()
    with pytest.raises(WorkloadError) as caught:
        measure("naive", huge)
    assert time.perf_counter() - start < 1.0
    assert caught.value.field == "seq_len" and "GiB" in str(caught.value) and "free" in str(caught.value)
    assert allocated == []


def test_cpu_time_budget_names_the_limit():
    w = Workload(batch=1, heads=16, seq_len=4096, head_dim=64, dtype="fp32", device="cpu")  # fits in memory
    with pytest.raises(WorkloadError, match="would take about .* over the 60 s a live run may hold the machine"):
        check_time_budget(w, [get_variant("sdpa_flash")])
    with pytest.raises(WorkloadError, match="would take about .* over the 60 s left of this request's budget"):
        measure("sdpa_flash", w, budget_s=60)  # refused before it runs


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(WorkloadError, match="no CUDA GPU"):
        measure("sdpa_flash", Workload.blog())


def test_flops_and_sizes():
    w = Workload.blog()
    assert w.shape == (8, 16, 1024, 64)
    assert w.replace(rank=3).shape == (128, 1024, 64)
    assert w.flops == 4 * 8 * 16 * 1024**2 * 64 / 2
    assert w.replace(causal=False).flops == 2 * w.flops
    assert w.scores_bytes() == 8 * 16 * 1024**2 * 2
    assert w.scores_bytes(element_bytes=4) == 2 * w.scores_bytes()


@pytest.mark.parametrize("workload, words", [
    (Workload.blog(), "B=8, H=16, S=1024, D=64, bf16, causal"),
    (Workload.blog(causal=False, rank=3), "B=8, H=16, S=1024, D=64, bf16, not causal, rank 3"),
    (Workload.cpu_default(), "B=1, H=8, S=512, D=64, fp32, causal"),
])
def test_a_workload_in_words(workload, words):
    assert workload.words() == words


def test_inputs_are_seeded_and_never_zero():
    a, b = Workload.cpu_default(seq_len=32).make_inputs(), Workload.cpu_default(seq_len=32).make_inputs()
    assert torch.equal(a.q, b.q) and a.q.abs().sum() > 0
    assert not torch.equal(a.q, a.k)
    assert a.mask.shape == (32, 32) and a.mask[0, 1] and not a.mask[1, 0]
    assert Workload.cpu_default(seq_len=32, causal=False).make_inputs().mask is None


def test_out_of_memory_is_a_result_and_the_next_run_works():
    def out_of_memory(inputs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 40.00 GiB")
    broken = Variant("oom", "OOM", out_of_memory, lambda w: 0)
    w = Workload.cpu_default(seq_len=32)
    run = measure(broken, w)
    assert run.status == "error" and "out of memory" in run.reason
    assert measure("naive", w).ok


def test_a_variant_that_raises_is_a_result_not_a_crash():
    def fails(inputs):
        raise ValueError("this variant is broken")
    broken = Variant("broken", "Broken", fails, lambda w: 0)
    run = measure(broken, Workload.cpu_default(seq_len=32))
    assert run.status == "error" and "this variant is broken" in run.reason


def test_workload_error_survives_pickling():
    import pickle
    error = pickle.loads(pickle.dumps(WorkloadError("seq_len", 0, "must be between 1 and 131072")))
    assert (error.field, error.value, error.limit) == ("seq_len", 0, "must be between 1 and 131072")
    assert str(error) == "seq_len=0 is not allowed: must be between 1 and 131072"
