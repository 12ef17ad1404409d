"""What a recording holds, looked up by nearness, against the real H200 recording; and what `record` and
`record_sweeps` write, read back as written (a tiny CPU recording made here)."""
import dataclasses
import json
from pathlib import Path

import pytest

from profiling import recording, replay
from profiling.replay import nearest_recorded, unrecorded_message
from profiling.results import RUNS_FILE, SWEEPS_FILE, read_stored, write_stored
from profiling.workload import Workload

H200 = "h200-torch2.11"
BLOG = Workload.blog()


def words(workloads) -> list[str]:
    return [w.words() for w in workloads]


def without(variant: str, workload: Workload):
    """The recording's runs less `variant`'s on `workload`: a recording that misses one run."""
    runs = tuple(r for r in replay.recorded_runs(H200) if not (r.variant == variant and r.workload == workload))
    return lambda name: runs


def test_replay_answers_each_recorded_workload_with_a_run_of_that_workload_in_every_field():
    """Every (workload, variant) of the recording, asked for as a request would (on a CPU too: the device is the
    source's, not the problem's), is answered with a run of that variant whose every field is the request's: a lookup
    that set a field aside (kv_heads) would answer the MHA decode step with the grouped-query run recorded first."""
    asked = {(r.workload, r.variant) for r in replay.recorded_runs(H200)}
    assert len({w.kv_heads for w, _ in asked if w.q_len}) == 3  # MHA, GQA and MQA decode steps: the lookup is tried
    for workload, variant in asked:
        request = workload if workload.timing != "warm" else workload.replace(device="cpu", seed=3)
        found = replay.find_recorded(H200, variant, request)
        assert found is not None and found.variant == variant
        assert found.workload.problem() == workload.problem(), (workload.words(), found.workload.words())


def test_nearest_counts_differing_fields_then_log2_distance():
    assert words(nearest_recorded(H200, BLOG.replace(seq_len=2048))) == [
        "B=8, H=16, S=1024, D=64, bf16, causal",   # one field off, S a factor 2 away (recorded first)
        "B=8, H=16, S=4096, D=64, bf16, causal",   # one field off, S a factor 2 away
        "B=8, H=16, S=1024, D=64, fp32, causal",   # two off (its S=1024 timed cold and in a graph: named once)
    ]
    assert words(nearest_recorded(H200, BLOG.replace(head_dim=96, device="cpu", seed=7), n=2)) == [
        "B=8, H=16, S=1024, D=128, bf16, causal", "B=8, H=16, S=1024, D=64, bf16, causal"]  # 96 is nearer 128


def test_nearest_prefers_workloads_holding_every_variant_asked_for(monkeypatch):
    monkeypatch.setattr(replay, "recorded_runs", without("flex", BLOG))
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
    monkeypatch.setattr(replay, "recorded_runs", without("flex", BLOG))
    assert unrecorded_message(H200, BLOG, ("naive", "flex")) == (
        "The H200 recording has no run of flex on B=8, H=16, S=1024, D=64, bf16, causal. Nearest recorded: "
        "B=8, H=16, S=1024, D=64, bf16, causal, cold L2; B=8, H=16, S=1024, D=64, fp32, causal; "
        "B=8, H=16, S=1024, D=64, bf16, causal, rank 3.")  # the same problem timed otherwise (once), then one field off


# -- what a recording is made of, and how it is read back -------------------------------------------------------
TINY = Workload(batch=1, heads=2, seq_len=64, head_dim=16, dtype="fp32", device="cpu")


def test_a_recording_is_read_back_as_written_with_todays_memory_model(tmp_path):
    """`record` on a tiny CPU workload: runs.json.gz and a gzipped trace per run that ran; read back, every run is the
    one measured (its trace made absolute, its estimate today's model's) and its trace parses to its stored table."""
    from attention_variants import VARIANTS
    from profiling.budget import call_bytes
    from profiling.trace import load_trace, summarize_trace

    said = []
    made = recording.record(tmp_path, workloads=(TINY,), variants=("naive", "sdpa_cudnn", "sdpa_flash"),
                            progress=said.append)
    assert [r.variant for r in made] == ["naive", "sdpa_cudnn", "sdpa_flash"] and len(said) == 3
    assert [r.status for r in made] == ["ok", "unsupported", "ok"] and made[0].session == made[2].session
    assert not (tmp_path / "raw").exists()
    back = replay.load_recorded(tmp_path)
    for measured, loaded in zip(made, back):
        assert dataclasses.replace(loaded, trace_path=measured.trace_path) == measured
        assert loaded.estimated_extra_bytes == (call_bytes(VARIANTS[loaded.variant], TINY, loaded.environment)
                                                if loaded.status != "unsupported" else None)
        if measured.ok:
            assert measured.trace_path == f"traces/{Path(loaded.trace_path).name}"
            assert Path(loaded.trace_path) == tmp_path / measured.trace_path and loaded.trace_path.endswith(".json.gz")
            assert summarize_trace(load_trace(loaded.trace_path)).kernels == loaded.kernels
        else:
            assert loaded.trace_path is None
    assert replay.load_recorded(tmp_path)[0] is not back[0]


def test_recorded_sweeps_are_written_read_and_found_by_family(tmp_path, monkeypatch):
    said = []
    (made,) = recording.record_sweeps(tmp_path / "cpu-x", families=((TINY, ("naive", "sdpa_flash"), [64, 128], "seq_len"),),
                                      progress=said.append)
    assert [(r.variant, r.workload.seq_len) for r in made.runs] == [
        ("naive", 64), ("sdpa_flash", 64), ("naive", 128), ("sdpa_flash", 128)]
    assert any(m.startswith("B=1, H=2, D=16, fp32, causal: 4 points in") for m in said)
    write_stored(tmp_path / "cpu-x" / RUNS_FILE, [])
    monkeypatch.setattr(replay, "RECORDED_DIR", tmp_path)
    replay.recorded_sweeps.cache_clear()
    assert replay.recordings() == {"cpu-x": tmp_path / "cpu-x"}
    try:
        (read,) = replay.recorded_sweeps("cpu-x")
        assert read == made
        found = replay.find_recorded_sweep("cpu-x", "sdpa_flash", "naive", TINY.replace(seq_len=999,
                                                                                           device="cuda"))
        assert found.variants == ["sdpa_flash", "naive"] and found.runs == made.select(["sdpa_flash", "naive"]).runs
        found.runs.clear()
        assert replay.recorded_sweeps("cpu-x")[0].runs == made.runs  # what is handed out is a copy
        assert replay.find_recorded_sweep("cpu-x", "naive", "sdpa_math", TINY) is None  # not in it
        assert replay.find_recorded_sweep("cpu-x", "naive", "sdpa_flash", TINY.replace(head_dim=32)) is None
        assert replay.recorded_sweeps("../cpu-x") == () and replay.recorded_sweeps("nowhere") == ()
    finally:
        replay.recorded_sweeps.cache_clear()


def test_the_shipped_sweeps_run_each_variant_over_their_familys_points_until_its_first_stop():
    sweeps = replay.recorded_sweeps(H200)
    assert len(sweeps) >= 2
    families = {(base.problem(free=(axis,)), axis): values
                for base, _, values, axis in recording.RECORDED_FAMILIES + recording.DECODE_FAMILIES}
    for result in sweeps:
        values = families[result.workload.problem(free=(result.axis,)), result.axis]
        start = values.index(result.seq_lens[0])
        assert result.seq_lens == values[start:start + len(result.seq_lens)]
        assert result.value(result.runs[0]) == result.seq_lens[0] == getattr(result.workload, result.axis)
        assert result.stopped is None and {r.variant for r in result.runs} == set(result.variants)
        for variant in result.variants:  # every point until the first stop, none after
            runs = result.of(variant)
            stop = next((i for i, r in enumerate(runs) if r.stops), None)
            assert [result.value(r) for r in runs] == result.seq_lens[:len(runs)], variant
            assert (len(runs) == len(result.seq_lens)) if stop is None else (stop == len(runs) - 1), variant
            # each point up to the stop ran, or the variant is refused at every point for a reason the axis does not
            # change
            assert all(r.ok for r in runs[:stop]) or {(r.status, r.reason) for r in runs} == {
                ("unsupported", runs[0].reason)}, variant
            for r in runs:
                assert r.workload == result.workload.replace(**{result.axis: result.value(r)})
                if r.status == "does not fit":
                    assert r.needed_bytes > r.available_bytes and r.timing is None


def test_a_recorded_run_is_handed_out_as_a_copy():
    run = replay.find_recorded(H200, "naive", BLOG)
    run.kernels.clear()
    assert replay.find_recorded(H200, "naive", BLOG).kernels
    assert replay.find_recorded(H200, "naive", BLOG.replace(device="cpu", seed=5)).workload == BLOG
    assert replay.find_recorded(H200, "naive", BLOG.replace(seq_len=2048)) is None


def test_every_recorded_pair_and_every_recorded_sweep_pair_replays_through_the_front_door():
    """What the recording holds, the page can show: each pair of variants recorded on a workload plans and finds
    both runs, and each pair of a recorded sweep replays, explained, with its headline at its longest common S."""
    import itertools

    from profiling import session
    from profiling.request import Request

    by_workload: dict = {}
    for run in replay.recorded_runs(H200):
        by_workload.setdefault(run.workload, []).append(run.variant)
    pairs = 0
    for workload, variants in by_workload.items():
        assert all(replay.find_recorded(H200, v, workload) for v in variants)  # each run found (a copy) once
        for a, b in itertools.combinations(variants, 2):
            plan = session.plan(Request(H200, a, b, workload))
            assert plan.environment.device == "cuda"
            pairs += 1
    assert pairs == sum(len(v) * (len(v) - 1) // 2 for v in by_workload.values()) >= 700
    swept = 0
    for recorded in replay.recorded_sweeps(H200):
        for a, b in itertools.combinations(recorded.variants, 2):
            answer = session.sweep(Request(H200, a, b, recorded.workload))
            assert answer.result.variants == [a, b] and answer.explanation.headline.title, (a, b)
            swept += 1
    assert swept == sum(len(s.variants) * (len(s.variants) - 1) // 2 for s in replay.recorded_sweeps(H200))


def test_a_fixed_window_is_expected_to_grow_as_s_for_a_kernel_that_skips_its_tiles():
    """The recorded window sweep (1×16×S×128, W=1,024): flex and FlashAttention-4 skip the tiles outside the
    window, so their work grows as S·W, not S²; SDPA gets the window as a dense mask and computes every tile."""
    from profiling.explain.curves import slopes

    (window,) = [s for s in replay.recorded_sweeps(H200) if s.workload.mask == "window"]
    expected = {(f.variant, f.quantity): f for f in slopes(window)}
    for variant in ("flex", "fa4"):
        assert 1.0 <= expected[variant, "time"].expected < 1.25  # S·W − W(W−1)/2 pairs: near S, not S²
        assert expected[variant, "time"].basis == "pairs"
    for variant in ("sdpa_auto", "sdpa_cudnn"):
        assert expected[variant, "time"].expected == pytest.approx(2.0) and expected[variant, "time"].basis == "all pairs"


def test_a_part_recorded_twice_replaces_its_own_runs_and_sweeps_and_keeps_the_rest(tmp_path, monkeypatch):
    """A recording with other runs and sweeps: a part (a tiny CPU grid stands in for the H200's decode part) joins
    it, and a second recording of the part replaces the first instead of doubling it; a training step's backward
    view goes with its step."""

    decode = TINY.replace(seq_len=64, q_len=1)
    step = TINY.replace(passes="fwd+bwd")
    monkeypatch.setitem(recording.PARTS, "decode", ((decode, step),
                                                    ((decode, ("naive", "sdpa_math"), [1, 2], "batch"),)))
    out = tmp_path / "rec"
    other = recording.record(out, workloads=(TINY,), variants=["naive"], progress=lambda m: None)
    recording.record_sweeps(out, families=((TINY, ("naive",), [64, 128], "seq_len"),), progress=lambda m: None)
    for _ in range(2):
        recording.record_part(out, "decode", progress=lambda m: None, variants=["naive", "sdpa_math"])
        runs = [r["workload"] for r in read_stored(out / RUNS_FILE)]
        assert runs.count(dataclasses.asdict(TINY)) == len(other) == 1
        assert sum(r == dataclasses.asdict(decode) for r in runs) == 2
        assert sum(r == dataclasses.asdict(step) for r in runs) == 2
        assert sum(r == dataclasses.asdict(step.replace(passes="bwd")) for r in runs) == 2
        sweeps = read_stored(out / SWEEPS_FILE)
        assert [(s["axis"], s["seq_lens"]) for s in sweeps] == [("seq_len", [64, 128]), ("batch", [1, 2])]
        traced = {Path(r["trace_path"]).name for r in read_stored(out / RUNS_FILE) if r["trace_path"]}
        assert {p.name for p in (out / "traces").iterdir()} == traced  # a replaced run's trace goes with it
    with pytest.raises(ValueError, match="part='nope' is not a part of the recording: choose one of matrix"):
        recording.record_part(out, "nope")


def test_the_parts_are_the_whole_recording_plan():
    """Every workload and family of the plan is in exactly one part, so `record` with no --part records it all; the
    part 'fp8' records some variants again beside the others (its own runs and sweeps replaced, no one else's): every
    variant that takes fp8 with its twins, on workloads of the plan."""
    whole = {k: p for k, p in recording.PARTS.items() if k != "fp8"}
    workloads = [w for ws, _ in whole.values() for w in ws]
    families = [f[0].problem() + (f[3],) for _, fs in whole.values() for f in fs]
    from attention_variants import VARIANTS
    takers = {k for v in VARIANTS.values() if v.fp8 for k in (v.key, *(t.key for t in v.twins()))}
    assert takers <= set(recording.PART_VARIANTS["fp8"]) and set(recording.FP8_TAKERS) == takers
    fp8_workloads, fp8_families = recording.PARTS["fp8"]
    assert set(fp8_workloads) - set(recording.FP8_PREFILL) <= set(workloads)
    assert all(set(keys) <= set(recording.PART_VARIANTS["fp8"]) for _, keys, _, _ in fp8_families)
    assert sorted(map(str, workloads)) == sorted(map(str, recording.GPU_MATRIX + recording.DECODE_MATRIX
                                                   + recording.timed(recording.DECODE_MATRIX)
                                                   + recording.PACKED_MATRIX + recording.UNEQUAL
                                                   + recording.timed(recording.PACKED_MATRIX)
                                                   + recording.timed(recording.UNEQUAL)))
    assert len(set(map(str, workloads))) == len(workloads)
    planned = recording.RECORDED_FAMILIES + recording.DECODE_FAMILIES
    assert sorted(map(str, families)) == sorted(str(f[0].problem() + (f[3],)) for f in planned)
    assert len(set(map(str, families))) == len(families)

@pytest.mark.parametrize("collector_on", [True, False])
def test_reading_a_recording_leaves_the_collector_as_it_was_and_its_runs_out_of_later_collections(collector_on):
    """The runs are read with Python's cyclic collector paused (it walked the whole process 216 times during the
    H200 recording's load, half its time) and frozen after; the collector is then as the caller had it."""
    import gc

    was_on = gc.isenabled()
    (gc.enable if collector_on else gc.disable)()
    try:
        runs = replay.load_recorded(replay.recordings()["h200-torch2.11"])
        assert gc.isenabled() == collector_on
        assert runs and gc.get_freeze_count() > 0 and not any(r is runs[0] for r in gc.get_objects())
    finally:
        (gc.enable if was_on else gc.disable)()


def test_stored_json_reads_as_the_standard_library_reads_it_and_what_orjson_refuses_still_reads(tmp_path):
    """read_stored parses with orjson where installed (a server's start reads 20 MB of runs): the shipped recording
    reads back equal to json's reading, and a file orjson refuses (json.dumps writes NaN) is read by json."""
    import gzip
    import json

    from profiling.results import loads
    for name, folder in replay.recordings().items():
        for file in (RUNS_FILE, SWEEPS_FILE):
            with gzip.open(folder / file, "rb") as f:
                assert read_stored(folder / file) == json.loads(f.read()), (name, file)
    planted = tmp_path / "nan.json.gz"
    with gzip.open(planted, "wb") as f:
        f.write(json.dumps([{"x": float("nan"), "big": 2**70}]).encode())
    read = read_stored(planted)
    assert read[0]["big"] == 2**70 and read[0]["x"] != read[0]["x"]
    assert loads(b'[1, 2.5, "a"]') == [1, 2.5, "a"]


def test_the_runs_recorded_cold_and_graph_only_are_those_the_readme_names():
    """README: every workload is recorded warm, cold and in a graph, except the packed-document variants on the
    workloads without documents and SDPA math on the decode step (cold and graph only). Re-derived from the runs."""
    from collections import defaultdict

    from explain_helpers import RUNS

    timings = defaultdict(set)
    for r in RUNS:
        timings[r.variant, r.workload.replace(timing="warm")].add(r.workload.timing)
    no_warm = {(v, w) for (v, w), t in timings.items() if "warm" not in t}
    assert all(t == {"cold", "graph"} for (v, w), t in timings.items() if (v, w) in no_warm)
    packed = {"varlen", "sdpa_nested", "sdpa_docmask", "naive_docmask"}
    assert {(v, w) for v, w in no_warm if v in packed} == {(v, w) for v, w in timings if v in packed and w.lengths is None}
    assert {v for v, _ in no_warm} <= packed | {"sdpa_math"}
    assert all(w.q_len is not None for v, w in no_warm if v == "sdpa_math")  # the decode step
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert "the packed-document\nvariants (varlen, sdpa_nested, sdpa_docmask, naive_docmask) on the workloads without" in readme


def test_the_readme_names_the_recorded_sweeps_and_their_ranges():
    """README's list of recorded sweeps, re-derived from sweeps.json.gz: each range it states is a recorded sweep's
    first and last S (or B), and it names no sweep that is not recorded. It said a training sweep "to S=32,768"
    (recorded to 8,192) and a 1×16×S×128 long-context sweep (none is recorded; the 1×16×S×128 sweep is the window's)."""
    import re

    from profiling import text
    from profiling.replay import recorded_sweeps

    readme = " ".join((Path(__file__).parent.parent / "README.md").read_text().split())
    said = readme[readme.index("`sweeps.json.gz`: "):readme.index("Both are gzipped JSON")]
    sweeps = recorded_sweeps("h200-torch2.11")
    for s in sweeps:
        w, first, last = s.workload, s.seq_lens[0], s.seq_lens[-1]
        if s.axis == "batch":
            assert f"over B ({first}–{last})" in said
        elif w.q_len:
            assert f"{first // 1024}k–{last // 1024}k keys" in said
        elif w.window:
            assert f"window of {text.count(w.window)} keys over 1×16×S×128 from S={text.count(first)} to " \
                   f"{text.count(last)}" in said
        elif w.training:
            assert f"to S={text.count(last)}" in said.split("training step")[1].split(", a window")[0]
        else:
            assert f"{w.timing} to S={text.count(last)}" in said and f"from S={first}" in said
    assert "long-context" not in said and said.count("1×16×S×128") == sum(1 for s in sweeps if s.workload.window)
    assert set(re.findall(r"to S=(\d[\d,]*\d)", said)) == {text.count(s.seq_lens[-1]) for s in sweeps
                                                      if s.axis != "batch" and not s.workload.q_len
                                                      and not s.workload.window}


def test_a_part_stopped_at_its_deadline_keeps_what_it_held_and_goes_on_from_where_it_stopped(tmp_path, monkeypatch):
    """A lent GPU's call is 10 minutes: a part given a deadline stops between two workloads, the workloads it did
    not reach keep the runs the recording held of them (none is lost), no sweep is recorded, and --start goes on."""
    import time

    first, second = TINY, TINY.replace(seq_len=96)
    monkeypatch.setitem(recording.PARTS, "decode", ((first, second), ((first, ("naive",), [64, 128], "seq_len"),)))
    out = tmp_path / "rec"
    quiet = lambda m: None  # noqa: E731
    recording.record_part(out, "decode", progress=quiet, variants=["naive"])
    before = {(r["workload"]["seq_len"], json.dumps(r["timing"])) for r in read_stored(out / RUNS_FILE)}
    said = []
    clock = iter([0.0, 0.0, 50.0, 1000.0])  # the first workload begins, ends 50 s later; the second would not fit
    monkeypatch.setattr(time, "monotonic", lambda: next(clock, 1000.0))
    recording.record_part(out, "decode", progress=said.append, variants=["naive"], deadline=100.0)
    monkeypatch.undo()
    runs = read_stored(out / RUNS_FILE)
    assert sorted(r["workload"]["seq_len"] for r in runs) == [64, 96]
    kept = {(r["workload"]["seq_len"], json.dumps(r["timing"])) for r in runs if r["workload"]["seq_len"] == 96}
    assert kept <= before  # the second workload's runs are the ones held before, untouched
    assert any("go on with --part decode --start 1" in m for m in said)
    assert len(read_stored(out / SWEEPS_FILE)) == 1  # the first recording's sweep, not recorded again
    monkeypatch.setitem(recording.PARTS, "decode", ((first, second), ((first, ("naive",), [64, 128], "seq_len"),)))
    recording.record_part(out, "decode", progress=said.append, variants=["naive"], start=1)
    runs = read_stored(out / RUNS_FILE)
    assert sorted(r["workload"]["seq_len"] for r in runs) == [64, 96]
    assert not {(r["workload"]["seq_len"], json.dumps(r["timing"])) for r in runs if r["workload"]["seq_len"] == 96} & before
