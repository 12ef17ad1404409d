"""Nsight Compute's counters: ncu's raw CSV read as it prints it, its refusals kept, a recording's counters found for
the run on screen, and the notes' arithmetic against the bytes model re-derived by hand. No GPU: ncu's output is a
hand-made CSV in its documented `--csv --page raw` layout (a header row of ncu's columns then metric names, a row of
units, a row per kernel), and its figures for cuDNN's kernel are those the issue read on an H100 (50.36 MB read,
10.05 MB written)."""
from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest
from explain_helpers import apply, recorded

from profiling import counters, recording, replay, text
from profiling.counters import METRICS, Counters, parse_raw_csv
from profiling.explain import counter_rules
from profiling.results import Run, read_stored
from profiling.workload import Workload

H200 = "h200-torch2.11"
BLOG = Workload.blog()
CUDNN = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"
FLASH = ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
         "cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, "
         "true, true, false, false>(pytorch_flash::Flash_fwd_params)")
NCU_COLUMNS = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",' \
              '"Device","CC"'
METRIC_NAMES = sorted(METRICS.values())  # ncu prints the metric columns sorted by name


def raw_csv(kernels: list[tuple[str, dict[str, str]]], units: dict[str, str], before: str = "", after: str = "") -> str:
    """ncu's stdout for `--csv --page raw`: what came before the report (the program's lines, ==PROF== lines), the
    header, the units row, one row per kernel, then what came after. `kernels`: (name, metric -> cell as printed)."""
    head = NCU_COLUMNS + "," + ",".join(f'"{m}"' for m in METRIC_NAMES)
    unit_row = ",".join(['""'] * 11 + [f'"{units.get(m, "")}"' for m in METRIC_NAMES])
    rows = [",".join([f'"{i}"', '"4242"', '"python3.12"', '"gpu-host"', f'"{name}"', '"1"', '"7"', '"(384, 1, 1)"',
                      '"(8, 16, 8)"', '"0"', '"9.0"'] + [f'"{cells.get(m, "n/a")}"' for m in METRIC_NAMES])
            for i, (name, cells) in enumerate(kernels)]
    return "\n".join(x for x in (before, head, unit_row, *rows, after) if x) + "\n"


BASE_UNITS = {METRICS["dram_read"]: "byte", METRICS["dram_write"]: "byte", METRICS["time"]: "nsecond",
              METRICS["l2_hit"]: "%", METRICS["occupancy"]: "%", METRICS["hmma"]: "%", METRICS["gmma"]: "%"}
CUDNN_CSV = raw_csv(
    [(CUDNN, {METRICS["dram_read"]: "50,360,832", METRICS["dram_write"]: "10,051,584", METRICS["time"]: "71,488",
              METRICS["l2_hit"]: "41.37", METRICS["occupancy"]: "11.94", METRICS["hmma"]: "0",
              METRICS["gmma"]: "38.52"})],
    BASE_UNITS,
    before="==PROF== Connected to process 4242 (/usr/bin/python3.12)\n"
           f'==PROF== Profiling "{CUDNN}": 0%....50%....100% - 9 passes\n==PROF== Disconnected from process 4242',
)
PERM = ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on "
        "the target device 0. For instructions on enabling permissions and to get more information see "
        "https://developer.nvidia.com/ERR_NVGPUCTRPERM")


def cudnn_counters() -> Counters:
    return Counters(BLOG, "sdpa_cudnn", parse_raw_csv(CUDNN_CSV), CUDNN_CSV, "Version 2025.3.0.0")


def test_the_raw_page_is_read_kernel_by_kernel_in_base_units_past_ncu_s_own_lines():
    """Thousands separators read, scaled units (Mbyte, usecond) brought to bytes and ns, 'n/a' no number, and the lines
    around the report (==PROF==, the program's) not taken for kernels."""
    (k,) = parse_raw_csv(CUDNN_CSV)
    assert k.name == CUDNN
    assert k.value("dram_read") == 50_360_832 and k.value("dram_write") == 10_051_584 and k.value("time") == 71_488
    assert k.value("occupancy") == 11.94 and k.tensor_pct == 38.52  # the larger of hmma (0) and gmma
    scaled = raw_csv([("k1(float*)", {METRICS["dram_read"]: "1.50", METRICS["time"]: "2.00"}),
                      ("k2(float*)", {METRICS["dram_read"]: "1,024", METRICS["time"]: "500"})],
                     {METRICS["dram_read"]: "Mbyte", METRICS["time"]: "usecond"},
                     before="the program printed this", after="==PROF== Report: nothing more")
    k1, k2 = parse_raw_csv(scaled)
    assert (k1.value("dram_read"), k1.value("time")) == (1.5e6, 2000.0)
    assert (k2.value("dram_read"), k2.value("time")) == (1.024e9, 500_000.0)
    assert k1.value("occupancy") is None and k1.metrics[METRICS["occupancy"]][0] == "n/a"
    assert parse_raw_csv(PERM + "\n==PROF== Disconnected") == []


def test_a_call_s_figures_sum_its_kernels_bytes_and_weight_its_percentages_by_their_time():
    csv = raw_csv([("a", {METRICS["dram_read"]: "100", METRICS["dram_write"]: "10", METRICS["time"]: "3",
                          METRICS["occupancy"]: "50", METRICS["l2_hit"]: "10", METRICS["hmma"]: "80", METRICS["gmma"]: "0"}),
                   ("b", {METRICS["dram_read"]: "300", METRICS["dram_write"]: "30", METRICS["time"]: "1",
                          METRICS["occupancy"]: "10", METRICS["l2_hit"]: "90", METRICS["hmma"]: "0", METRICS["gmma"]: "0"})],
                  BASE_UNITS)
    c = Counters(BLOG, "naive", parse_raw_csv(csv))
    assert (c.dram_read_bytes, c.dram_write_bytes) == (400, 40)
    assert c.occupancy_pct == pytest.approx((3 * 50 + 1 * 10) / 4)
    assert c.l2_hit_pct == pytest.approx((3 * 10 + 1 * 90) / 4) and c.tensor_pct == pytest.approx(60)
    assert c.main.name == "a"
    again = Counters.from_dict(c.to_dict())
    assert again.to_dict() == c.to_dict() and c.to_dict()["call"]["dram_read_bytes"] == 400


def _ran(outputs: list[str], seen: list):
    """subprocess.run as ncu would answer: each call the next of `outputs` on stdout (ncu prints its CSV there)."""
    def run(cmd, **kw):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout=outputs[len(seen) - 1], stderr="")
    return run


def test_a_refusal_is_kept_in_one_line_never_raised(monkeypatch):
    monkeypatch.setattr(counters, "ncu_version", lambda ncu="ncu": "Version 2025.3.0.0")
    seen = []
    refused = counters.read(BLOG, "sdpa_cudnn", run=_ran([PERM + "\n==PROF== Disconnected from process 1"], seen))
    assert refused.refusal == PERM and refused.kernels == [] and refused.ncu_version == "Version 2025.3.0.0"
    cmd = seen[0]
    assert cmd[:3] == ["ncu", "--profile-from-start", "off"] and "--csv" in cmd and cmd[cmd.index("--page") + 1] == "raw"
    assert cmd[cmd.index("--variant") + 1] == "sdpa_cudnn" and "counters-one" in cmd
    assert set(cmd[cmd.index("--metrics") + 1].split(",")) == set(METRICS.values())
    runner = counters.read(BLOG, "fa3", run=_ran(["counters-one: fa3 cannot run B=8: not installed\n"
                                                  "==WARNING== No kernels were profiled."], []))
    assert runner.refusal == "counters-one: fa3 cannot run B=8: not installed"

    def late(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, 240)
    assert counters.read(BLOG, "flex", run=late).refusal == "ncu did not finish in 240 s"
    monkeypatch.setattr(counters, "ncu_version", lambda ncu="ncu": None)
    assert counters.read(BLOG, "naive").refusal == "no ncu on this machine's PATH"


def test_the_runner_s_refusal_is_the_line_the_launcher_keeps(capsys):
    """`counters-one` for a variant that cannot run here says why on stderr, in the line `read` keeps as the refusal
    (before CUDA is touched: this CPU runs it)."""
    from profiling.__main__ import main

    workload = Workload.cpu_default()
    assert main(["counters-one", "--workload-json", json.dumps(dataclasses.asdict(workload)), "--variant", "fa3"]) == 2
    said = capsys.readouterr().err
    line = counters.refusal_line(said)
    assert line == said.strip() and line.startswith(f"counters-one: fa3 cannot run {workload.words()}: ")


def test_a_metric_ncu_does_not_know_is_dropped_and_the_call_read_again(monkeypatch):
    monkeypatch.setattr(counters, "ncu_version", lambda ncu="ncu": "Version 2025.3.0.0")
    gmma = METRICS["gmma"]
    seen = []
    got = counters.read(BLOG, "sdpa_cudnn", run=_ran([f"==ERROR== Failed to find metric {gmma}", CUDNN_CSV], seen))
    assert len(seen) == 2 and gmma in seen[0][seen[0].index("--metrics") + 1]
    assert gmma not in seen[1][seen[1].index("--metrics") + 1].split(",")
    assert got.refusal is None and got.kernels[0].name == CUDNN


def test_the_part_stores_each_call_s_counters_or_its_refusal_in_place(tmp_path, monkeypatch):
    """counters.json.gz holds ncu's refusal where it refused (the part does not fail), and a call read again replaces
    its own entry only."""
    monkeypatch.setattr(counters, "ncu_version", lambda ncu="ncu": "Version 2025.3.0.0")
    refuse = lambda w, k: counters.read(w, k, run=_ran([PERM], []))  # noqa: E731
    recording.record_counters(tmp_path, ((BLOG, ("sdpa_cudnn", "sdpa_flash")),), progress=lambda m: None, read=refuse)
    held = [Counters.from_dict(d) for d in read_stored(tmp_path / counters.COUNTERS_FILE)]
    assert [(c.variant, c.refusal) for c in held] == [("sdpa_cudnn", PERM), ("sdpa_flash", PERM)]
    recording.record_counters(tmp_path, ((BLOG, ("sdpa_cudnn",)),), progress=lambda m: None,
                              read=lambda w, k: cudnn_counters())
    held = [Counters.from_dict(d) for d in read_stored(tmp_path / counters.COUNTERS_FILE)]
    assert [(c.variant, c.refusal, c.dram_read_bytes) for c in held] == [("sdpa_flash", PERM, None),
                                                                        ("sdpa_cudnn", None, 50_360_832)]
    assert held[1].raw_csv == CUDNN_CSV
    assert "counters" in recording.PARTS


def test_a_counters_part_stopped_at_its_deadline_goes_on_with_the_variants_it_has_not_read(tmp_path, monkeypatch):
    """A lent GPU's call is 10 minutes: the part stops between two variants when the next would not fit, and recorded
    again reads those it has not read first (a refused read counts as not read)."""
    import time

    monkeypatch.setattr(counters, "ncu_version", lambda ncu="ncu": "Version 2025.3.0.0")
    keys = ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient")
    read_order = []

    def read(w, k):
        read_order.append(k)
        return cudnn_counters() if k == "sdpa_cudnn" else counters.read(w, k, run=_ran([PERM], []))

    clock = iter([0.0, 0.0, 60.0, 60.0, 60.0])  # the first read takes 60 s; 60 + 72 passes the deadline of 100
    monkeypatch.setattr(time, "monotonic", lambda: next(clock, 1000.0))
    said = []
    recording.record_counters(tmp_path, ((BLOG, keys),), progress=said.append, read=read, deadline=100.0)
    monkeypatch.undo()
    assert read_order == ["sdpa_cudnn"] and "stopped at its deadline before sdpa_flash" in said[-1]
    recording.record_counters(tmp_path, ((BLOG, keys),), progress=lambda m: None, read=read)
    assert read_order == ["sdpa_cudnn", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn"]  # the read one last


def test_a_replay_shows_the_counters_of_its_own_workload_and_variant_only(monkeypatch):
    monkeypatch.setattr(replay, "recorded_counters", lambda name: (cudnn_counters(),))
    cold = replay.find_recorded(H200, "sdpa_cudnn", BLOG.replace(timing="cold"))
    assert cold.counters is not None and cold.counters.dram_read_bytes == 50_360_832  # ncu's call: timing aside
    assert replay.find_recorded(H200, "sdpa_flash", BLOG).counters is None
    assert replay.find_recorded(H200, "sdpa_cudnn", BLOG.replace(seq_len=4096)).counters is None
    assert Run.from_dict(cold.to_dict()).counters.to_dict() == cold.counters.to_dict()


def test_the_dram_note_is_the_counted_bytes_against_q_k_v_in_and_out_out_re_derived_by_hand():
    """B=8, H=16, S=1024, D=64 in bf16: q, K and V are 3 · 8·16·1024·64·2 = 50,331,648 bytes to read, out 16,777,216 to
    write. ncu read 50,360,832 (within 5%: read once) and wrote 10,051,584: the L2 kept 6,725,632 of the output."""
    run = recorded("sdpa_cudnn")
    run.counters = cudnn_counters()
    note = apply(counter_rules.dram_bytes, run)
    tensor = 8 * 16 * 1024 * 64 * 2
    read = sum(k.value("dram_read") for k in parse_raw_csv(CUDNN_CSV))
    assert read == 50_360_832
    assert note.facts["in"].value == 3 * tensor and note.facts["out"].value == tensor
    assert note.facts["kept"].value == tensor - 10_051_584
    assert f"{text.size(read)} read from DRAM against the {text.size(3 * tensor)} it must read (q, K and V" in note.body
    assert f"the L2 kept {text.size(tensor - 10_051_584)} of the output" in note.body
    assert "its inputs read once" in note.body.lower()
    assert note.title.startswith(f"DRAM by the counters: {text.size(read)} read and {text.size(10_051_584)} written")


def test_a_training_step_s_bytes_are_said_pass_by_pass_as_the_model_counts_them():
    """A step's model reads q, K and V in both passes and the forward's out in the backward: 2·3 + 2 tensors in, 4 out."""
    run = recorded("sdpa_cudnn", passes="fwd+bwd")
    run.counters = Counters(run.workload, "sdpa_cudnn", parse_raw_csv(CUDNN_CSV), CUDNN_CSV)
    note = apply(counter_rules.dram_bytes, run)
    tensor = 8 * 16 * 1024 * 64 * 2
    assert (note.facts["in"].value, note.facts["out"].value) == (8 * tensor, 4 * tensor)
    assert ("(q, K and V in the forward; q, K, V, out and dout in the backward)" in note.body
            and "(out in the forward; dq, dK and dV in the backward)" in note.body), note.body


def test_reading_more_than_the_model_is_said_as_rereads():
    run = recorded("sdpa_cudnn")
    twice = CUDNN_CSV.replace('"50,360,832"', '"100,663,296"')
    run.counters = Counters(BLOG, "sdpa_cudnn", parse_raw_csv(twice), twice)
    note = apply(counter_rules.dram_bytes, run)
    assert note.facts["reread"].value == 100_663_296 - 3 * 8 * 16 * 1024 * 64 * 2
    assert f"{text.size(50_331_648)} more read than its inputs once" in note.body


def test_the_occupancy_counter_stands_beside_kineto_s_estimate_for_the_same_kernel():
    """The blog's '13% occupancy' for flash, answered by the counter: Kineto's figure is the trace's for the kernel of
    the same name."""
    run = recorded("sdpa_flash")
    csv = CUDNN_CSV.replace(CUDNN, FLASH)
    run.counters = Counters(BLOG, "sdpa_flash", parse_raw_csv(csv), csv)
    note = apply(counter_rules.occupancy_counted, run)
    (traced,) = run.kernels_of()
    assert traced.occupancy_pct == 13 and note.facts["kineto"].value == 13 and note.facts["achieved"].value == 11.94
    assert note.title.startswith(text.percent(11.94) + " achieved occupancy by the counter")
    assert "estimated 13% for it" in note.body


def test_a_refused_or_absent_count_makes_no_note_and_the_card_says_the_refusal():
    from profiling import reports
    run = recorded("sdpa_cudnn")
    assert counter_rules.dram_bytes(run, {}) is None
    run.counters = Counters(BLOG, "sdpa_cudnn", refusal=PERM)
    assert counter_rules.dram_bytes(run, {}) is None and counter_rules.occupancy_counted(run, {}) is None
    assert f"no counters: {PERM}" in reports.run_card("A", run, "cuDNN")
    run.counters = cudnn_counters()
    assert "DRAM 48.0 MiB read, 9.6 MiB written · L2 hit 41.4% · achieved occupancy 11.9% · tensor pipe 38.5%" \
        in reports.run_card("A", run, "cuDNN")


def test_the_h100_recording_s_counters_replay_beside_its_runs_with_the_dram_note():
    """Counters recorded on the H100 (record --part counters) are read back beside the runs of a replay: cuDNN's
    frontend at the blog workload read 50,355,200 bytes from DRAM (issue 56 saw 50.36 MB for SDPA's cuDNN kernel on
    an H100), its inputs once, and the note says so in the figures re-derived from the stored counters."""
    from profiling import session
    from profiling.request import Request

    stored = replay.find_counters("h100-torch2.11", "cudnn_fe", Workload.blog())
    read = sum(k.metrics["dram__bytes_read.sum"][0] for k in stored.kernels)
    written = sum(k.metrics["dram__bytes_write.sum"][0] for k in stored.kernels)
    assert read == 50_355_200 and all(k.metrics["dram__bytes_read.sum"][1] == "byte" for k in stored.kernels)
    answer = session.compare(Request.build("h100-torch2.11", "fa3", "cudnn_fe", {}, "cpu"))
    note = next(n for n in answer.explanation.notes if (n.side, n.rule) == ("b", "dram_bytes"))
    w = Workload.blog()
    must = 4 * w.batch * w.heads * w.seq_len * w.head_dim * 2  # q, K, V read and out written once, in bf16
    assert note.title == (f"DRAM by the counters: {text.size(read)} read and {text.size(written)} written, against "
                          f"the {text.size(must)} a forward must move")
    assert "Its inputs read once, as the model says" in note.body
