"""What a recording holds, looked up by nearness, against the real H200 recording; and what `record` and
`record_sweeps` write, read back as written (a tiny CPU recording made here)."""
import dataclasses
from pathlib import Path

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


# -- what a recording is made of, and how it is read back -------------------------------------------------------
TINY = Workload(batch=1, heads=2, seq_len=64, head_dim=16, dtype="fp32", device="cpu")


def test_a_recording_is_read_back_as_written_with_todays_memory_model(tmp_path):
    """`record` on a tiny CPU workload: runs.json and a gzipped trace per run that ran; read back, every run is the
    one measured (its trace made absolute, its estimate today's model's) and its trace parses to its stored table."""
    from attention_variants import VARIANTS
    from profiling.budget import forward_bytes
    from profiling.trace import load_trace, summarize_trace

    said = []
    made = recording.record(tmp_path, workloads=(TINY,), variants=("naive", "sdpa_cudnn", "sdpa_flash"),
                            progress=said.append)
    assert [r.variant for r in made] == ["naive", "sdpa_cudnn", "sdpa_flash"] and len(said) == 3
    assert [r.status for r in made] == ["ok", "unsupported", "ok"] and made[0].session == made[2].session
    assert not (tmp_path / "raw").exists()
    back = recording.load_recorded(tmp_path)
    for measured, loaded in zip(made, back):
        assert dataclasses.replace(loaded, trace_path=measured.trace_path) == measured
        assert loaded.estimated_extra_bytes == forward_bytes(TINY, VARIANTS[loaded.variant].scratch_bytes(TINY))
        if measured.ok:
            assert measured.trace_path == f"traces/{Path(loaded.trace_path).name}"
            assert Path(loaded.trace_path) == tmp_path / measured.trace_path and loaded.trace_path.endswith(".json.gz")
            assert summarize_trace(load_trace(loaded.trace_path)).kernels == loaded.kernels
        else:
            assert loaded.trace_path is None
    assert recording.load_recorded(tmp_path)[0] is not back[0]


def test_recorded_sweeps_are_written_read_and_found_by_family(tmp_path, monkeypatch):
    said = []
    (made,) = recording.record_sweeps(tmp_path / "cpu-x", families=((TINY, ("naive", "sdpa_flash"), [64, 128]),),
                                      progress=said.append)
    assert [(r.variant, r.workload.seq_len) for r in made.runs] == [
        ("naive", 64), ("sdpa_flash", 64), ("naive", 128), ("sdpa_flash", 128)]
    assert any(m.startswith("B=1, H=2, D=16, fp32, causal: 4 points in") for m in said)
    (tmp_path / "cpu-x" / "runs.json").write_text("[]")
    monkeypatch.setattr(recording, "RECORDED_DIR", tmp_path)
    recording.recorded_sweeps.cache_clear()
    assert recording.recordings() == {"cpu-x": tmp_path / "cpu-x"}
    try:
        (read,) = recording.recorded_sweeps("cpu-x")
        assert read == made
        found = recording.find_recorded_sweep("cpu-x", "sdpa_flash", "naive", TINY.replace(seq_len=999,
                                                                                           device="cuda"))
        assert found.variants == ["sdpa_flash", "naive"] and found.runs == made.select(["sdpa_flash", "naive"]).runs
        found.runs.clear()
        assert recording.recorded_sweeps("cpu-x")[0].runs == made.runs  # what is handed out is a copy
        assert recording.find_recorded_sweep("cpu-x", "naive", "sdpa_math", TINY) is None  # not in it
        assert recording.find_recorded_sweep("cpu-x", "naive", "sdpa_flash", TINY.replace(head_dim=32)) is None
        assert recording.recorded_sweeps("../cpu-x") == () and recording.recorded_sweeps("nowhere") == ()
    finally:
        recording.recorded_sweeps.cache_clear()


def test_the_shipped_sweeps_run_each_variant_over_doubling_lengths_until_its_first_stop():
    sweeps = recording.recorded_sweeps(H200)
    assert len(sweeps) >= 2
    for result in sweeps:
        start = recording.DOUBLING.index(result.seq_lens[0])
        assert result.seq_lens == recording.DOUBLING[start:start + len(result.seq_lens)]
        assert result.workload.seq_len == result.seq_lens[0] and result.stopped is None
        assert {r.variant for r in result.runs} == set(result.variants)
        for variant in result.variants:  # every length until the first stop, none after
            runs = result.of(variant)
            stop = next((i for i, r in enumerate(runs) if r.stops), None)
            assert [r.workload.seq_len for r in runs] == result.seq_lens[:len(runs)], variant
            assert (len(runs) == len(result.seq_lens)) if stop is None else (stop == len(runs) - 1), variant
            # each length up to the stop ran, or the variant is refused at every length for a reason S does not change
            assert all(r.ok for r in runs[:stop]) or {(r.status, r.reason) for r in runs} == {
                ("unsupported", runs[0].reason)}, variant
            for r in runs:
                assert r.workload == result.workload.replace(seq_len=r.workload.seq_len)
                if r.status == "does not fit":
                    assert r.needed_bytes > r.available_bytes and r.timing is None


def test_a_recorded_run_is_handed_out_as_a_copy():
    run = recording.find_recorded(H200, "naive", BLOG)
    run.kernels.clear()
    assert recording.find_recorded(H200, "naive", BLOG).kernels
    assert recording.find_recorded(H200, "naive", BLOG.replace(device="cpu", seed=5)).workload == BLOG
    assert recording.find_recorded(H200, "naive", BLOG.replace(seq_len=2048)) is None
