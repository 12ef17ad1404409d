"""What a recording holds, looked up by nearness, against the real H200 recording."""
import pytest

from profiling import recording
from profiling.recording import nearest_recorded, unrecorded_message
from profiling.workload import Workload

H200 = "h200-torch2.11"
BLOG = Workload.blog()


def words(workloads) -> list[str]:
    return [w.words() for w in workloads]


def without(variant: str, workload: Workload):
    """The recording's runs less `variant`'s on `workload`: a recording that misses one run."""
    runs = tuple(r for r in recording.recorded_runs(H200) if not (r.variant == variant and r.workload == workload))
    return lambda name: runs


def test_nearest_counts_differing_fields_then_log2_distance():
    assert words(nearest_recorded(H200, BLOG.replace(seq_len=2048))) == [
        "B=8, H=16, S=1024, D=64, bf16, causal",   # one field off, S a factor 2 away (recorded first)
        "B=8, H=16, S=4096, D=64, bf16, causal",   # one field off, S a factor 2 away
        "B=8, H=16, S=1024, D=64, fp32, causal",   # two fields off
    ]
    assert words(nearest_recorded(H200, BLOG.replace(head_dim=96, device="cpu", seed=7), n=2)) == [
        "B=8, H=16, S=1024, D=128, bf16, causal", "B=8, H=16, S=1024, D=64, bf16, causal"]  # 96 is nearer 128


def test_nearest_prefers_workloads_holding_every_variant_asked_for(monkeypatch):
    monkeypatch.setattr(recording, "recorded_runs", without("flex", BLOG))
    assert nearest_recorded(H200, BLOG.replace(seq_len=2048), n=1) == [BLOG]
    assert nearest_recorded(H200, BLOG.replace(seq_len=2048), ("naive", "flex"), n=1) == [BLOG.replace(seq_len=4096)]


@pytest.mark.parametrize("workload, variants", [
    (BLOG, ("naive", "flex")),
    (BLOG.replace(rank=3), ("sdpa_flash",)),                  # recorded, though it could not run there
    (BLOG.replace(device="cpu", seed=3), ("sdpa_cudnn",)),    # device and seed are not the problem
    (BLOG.replace(causal=False), ()),
])
def test_a_recorded_workload_has_no_message(workload, variants):
    assert unrecorded_message(H200, workload, variants) is None


def test_an_unrecorded_workload_names_itself_and_the_nearest_in_words():
    assert unrecorded_message(H200, BLOG.replace(seq_len=2048), ("naive", "sdpa_flash")) == (
        "The H200 recording has no run of B=8, H=16, S=2048, D=64, bf16, causal. Nearest recorded: "
        "B=8, H=16, S=1024, D=64, bf16, causal; B=8, H=16, S=4096, D=64, bf16, causal; "
        "B=8, H=16, S=1024, D=64, fp32, causal.")


def test_a_missing_variant_is_named_and_the_nearest_hold_it(monkeypatch):
    monkeypatch.setattr(recording, "recorded_runs", without("flex", BLOG))
    assert unrecorded_message(H200, BLOG, ("naive", "flex")) == (
        "The H200 recording has no run of flex on B=8, H=16, S=1024, D=64, bf16, causal. Nearest recorded: "
        "B=8, H=16, S=1024, D=64, fp32, causal; B=8, H=16, S=1024, D=64, bf16, causal, rank 3; "
        "B=8, H=16, S=1024, D=64, bf16, not causal.")
