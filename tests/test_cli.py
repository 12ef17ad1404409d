"""`python -m profiling` as a user runs it: in this process through `main(argv)` (what a shell would print), and
once in a real process, where the profiler's own log and an uncaught error would show."""
from __future__ import annotations

import argparse
import json
import re
import os
import subprocess
import sys

from pathlib import Path

import pytest
import torch

from attention_variants import VARIANTS
from conftest import check_headline
from profiling import __main__ as cli_main
from profiling import session
from profiling.replay import find_recorded_sweep
from profiling.request import Request
from profiling.results import Comparison, Sweep
from profiling.workload import FIELDS, Refusal, Workload

RECORDING = "h200-torch2.11"
HUGE = "9" * 5000  # past Python's 4,300-digit limit for int()
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a machine without a GPU says")


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """main(argv) as a shell runs it: (exit status, stdout, stderr); argparse's refusals exit."""
    try:
        code = cli_main.main(argv)
    except SystemExit as exit:
        code = exit.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_shows_every_variant_and_why_it_cannot_run_in_lines_of_at_most_100_characters(capsys):
    code, out, err = run(["list", "--device", "cpu"], capsys)
    assert code == 0, err
    for key in VARIANTS:
        assert f"\n{key}: {VARIANTS[key].label}\n" in out
    assert "PyTorch has no CPU kernel for cuDNN attention" in out
    assert f"workload: {Workload.cpu_default().words()}" in out
    assert max(map(len, out.splitlines())) <= cli_main.WIDTH == 100


def test_compare_in_a_real_process_prints_both_tables_and_writes_the_answer_as_json(tmp_path):
    path = tmp_path / "result.json"
    out = subprocess.run([sys.executable, "-m", "profiling", "compare", "naive", "sdpa_math", "--device", "cpu",
                          "--seq", "64", "--heads", "2", "--head-dim", "32", "--dtype", "fp32",
                          "--json", str(path), "--trace-dir", str(tmp_path / "traces")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "naive: wall" in out.stdout and "sdpa_math: wall" in out.stdout and "_safe_softmax" in out.stdout
    answer = json.loads(path.read_text())
    assert set(answer) == {"source", "measured", "a", "b", "verdict", "headline", "notes"} and answer["source"] == "live"
    result = Comparison.from_dict(answer)
    assert result.a.ok and result.b.backend == "math"
    assert result.a.workload == Request.build("live", "naive", "sdpa_math", dict(seq_len=64, heads=2, head_dim=32,
                                                                                 dtype="fp32"), "cpu").workload
    assert f"Verdict: {check_headline(answer)}" in out.stdout  # the words printed are the answer's
    traces = sorted(p.name for p in (tmp_path / "traces").iterdir())  # kept where asked, one a side
    assert len(traces) == 2 and traces[0].startswith("naive_") and traces[1].startswith("sdpa_math_"), traces
    assert "Traceback" not in out.stderr
    assert "USDT" not in out.stderr and "STAGE" not in out.stderr  # the profiler's own log noise is silenced


def test_a_recorded_sweep_prints_every_point_and_writes_the_answer(tmp_path, capsys, monkeypatch):
    def measured(*args, **kwargs):
        raise AssertionError("a replay measures nothing")
    monkeypatch.setattr(session, "run_sweep", measured)
    path = tmp_path / "sweep.json"
    code, out, err = run(["sweep", "sdpa_flash", "sdpa_cudnn", "--source", RECORDING, "--seq", "4096,1024",
                          "--json", str(path)], capsys)
    assert code == 0, err
    answer = json.loads(path.read_text())
    result = Sweep.from_dict({k: answer[k] for k in answer
                              if k not in ("source", "measured", "verdict", "headline", "notes")})
    recorded = find_recorded_sweep(RECORDING, "sdpa_flash", "sdpa_cudnn", Workload.blog())
    assert result.seq_lens == [1024, 4096] and result.runs == recorded.select(["sdpa_flash", "sdpa_cudnn"],
                                                                              [1024, 4096]).runs
    assert f"S over 1024, 4096 (recorded: {RECORDING})" in out and f"Verdict: {answer['verdict']}" in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(("1024 ", "4096 "))]
    assert [(r[0], r[1], r[2]) for r in rows] == [("1024", "sdpa_flash", "ok"), ("1024", "sdpa_cudnn", "ok"),
                                                  ("4096", "sdpa_flash", "ok"), ("4096", "sdpa_cudnn", "ok")]


def test_a_recorded_batch_sweeps_notes_are_labelled_over_its_axis(capsys):
    """The terminal labels a sweep's own notes with its axis, as the page does (`reports.sweep_kinds`): a sweep over
    the batch says "over B" and never "over S"; one over S says "over S"."""
    code, out, err = run(["sweep", "sdpa_flash", "sdpa_cudnn", "--source", RECORDING, "--axis", "batch",
                          "--batches", "1,4,16,64", "--q-len", "1", "--kv-heads", "8", "--heads", "32", "--seq", "8192",
                          "--head-dim", "128"], capsys)
    assert code == 0, err
    labels = re.findall(r"\[(?:A|B|A vs B|A and B) · ([^\]]+)\]", out)
    assert "over B" in labels and "over S" not in labels, labels
    code, out, err = run(["sweep", "naive", "sdpa_flash", "--source", RECORDING, "--seq", "128,256,512,1024,2048,4096"],
                         capsys)
    assert code == 0 and "over S" in re.findall(r"\[(?:A|B|A vs B|A and B) · ([^\]]+)\]", out), err


# -- bad invocations: one line naming what is wrong, never a traceback, nothing measured or created ------------------
BAD = [
    ([], "required"),
    (["nope"], "invalid choice: 'nope'"),
    (["list", "--device", "cuda"], "--device='cuda' is not allowed: no CUDA GPU"),
    (["list", "--device", "tpu"], "invalid choice: 'tpu'"),
    (["list", "--seq", "abc"], "seq_len='abc' is not allowed: must be a whole number"),
    (["list", "--seq", "0"], "seq_len=0 is not allowed: must be between 1 and 131072"),
    (["list", "--seq", HUGE], "(5000 characters) is not allowed: must be between 1 and 131072"),
    (["list", "--seq", "12.5"], "seq_len='12.5' is not allowed: must be a whole number"),
    (["list", "--seq", "nan"], "seq_len='nan' is not allowed"),
    (["list", "--seq", "inf"], "seq_len='inf' is not allowed"),
    # ASCII digits only, as in a link: int() would read all three
    (["list", "--seq", "１２８"], "seq_len='１２８' is not allowed: must be a whole number"),
    (["list", "--heads", "٣٢"], "heads='٣٢' is not allowed: must be a whole number"),
    (["list", "--batch", "1_024"], "batch='1_024' is not allowed: must be a whole number"),
    (["list", "--heads", "-3"], "heads='-3' is not allowed: must be a whole number between 1 and 1024"),
    (["list", "--batch", ""], "batch='' is not allowed"),
    (["list", "--head-dim", "513"], "head_dim=513 is not allowed: must be between 1 and 512"),
    # one spelling of each dtype, exactly: as on the API and in a link
    (["list", "--dtype", "e4m3"], "dtype='e4m3' is not allowed: choose one of fp32, fp16, bf16, fp8"),
    (["compare", "naive", "flex", "--dtype", "bf16", "--kv-dtype", "fp8"], "kv_dtype='fp8' is not allowed: an fp8 KV cache is read by a decode step"),
    (["list", "--dtype", "BF16"], "dtype='BF16' is not allowed: choose one of fp32, fp16, bf16"),
    (["list", "--dtype", "float32"], "dtype='float32' is not allowed: choose one of fp32, fp16, bf16"),
    (["list", "--dtype", " fp32 "], "dtype=' fp32 ' is not allowed: choose one of fp32, fp16, bf16"),
    (["list", "--rank", "5"], "rank='5' is not allowed: choose one of 4, 3"),
    (["list", "--rank", "3.0"], "rank='3.0' is not allowed: choose one of 4, 3"),
    (["list", "extra"], "unrecognized arguments: extra"),
    # an empty source is refused, as the API refuses it (it was read as not given: a live run)
    (["compare", "sdpa_flash", "sdpa_cudnn", "--source", ""], "source='' is not allowed: choose one of live"),
    (["list", "--causal", "maybe"], "unrecognized arguments: maybe"),
    (["compare", "naive"], "required: b"),
    (["compare", "--json"], "expected one argument"),
    (["compare", "nope", "naive", "--device", "cpu"], "a='nope' is not allowed: choose one of naive"),
    (["compare", "naive", "sdpa_flash", "--device", "cuda"], "--device='cuda' is not allowed"),
    # --budget: seconds, a positive finite number, in ASCII
    (["compare", "naive", "sdpa_flash", "--budget", "nan"], "--budget='nan' is not allowed: seconds, more than 0"),
    (["compare", "naive", "sdpa_flash", "--budget", "inf"], "--budget='inf' is not allowed"),
    (["compare", "naive", "sdpa_flash", "--budget", "-1"], "--budget='-1' is not allowed"),
    (["compare", "naive", "sdpa_flash", "--budget", "0"], "--budget='0' is not allowed"),
    (["compare", "naive", "sdpa_flash", "--budget", "１２"], "--budget='１２' is not allowed"),
    (["compare", "naive", "sdpa_flash", "--budget", "1_0"], "--budget='1_0' is not allowed"),
    (["sweep", "naive", "sdpa_flash", "--budget", "nan"], "--budget='nan' is not allowed"),
    (["compare", "naive", "sdpa_flash", "--device", "cpu", "--json", "/nonexistent/dir/x.json"],
     "--json='/nonexistent/dir/x.json' is not allowed: cannot be written"),
    (["compare", "naive", "sdpa_flash", "--device", "cpu", "--json", "/proc/x.json"], "--json='/proc/x.json'"),
    (["compare", "naive", "sdpa_flash", "--device", "cpu", "--json", "/tmp"], "is a folder"),
    (["compare", "naive", "sdpa_flash", "--device", "cpu", "--json", "{fifo}"],
     "is not a regular file (a pipe or a device)"),
    (["sweep", "naive", "sdpa_flash", "--device", "cpu", "--json", "{fifo}"], "is not a regular file"),
    (["compare", "naive", "sdpa_flash", "--device", "cpu", "--trace-dir", "/proc/x"], "--trace-dir='/proc/x'"),
    (["compare", "naive", "sdpa_flash", "--device", "cpu", "--trace-dir", "/etc/hostname"], "is a file"),
    (["compare", "naive", "sdpa_math", "--device", "cpu", "--seq", "131072"], "GiB free on the CPU"),
    (["compare", "naive", "sdpa_math", "--device", "cpu", "--seq", "4096", "--heads", "16", "--dtype", "bf16"],
     "bf16 matrix products run 20× slower than fp32 on this CPU"),  # as the test's CPU is made to measure
    (["compare", "naive", "flex", "--source", RECORDING, "--seq", "2048"],
     f"The H200 recording has no run of {Workload.blog(seq_len=2048).words()}. Nearest recorded: "),
    (["sweep", "sdpa_flash", "sdpa_cudnn", "--source", RECORDING, "--seq", "1024,2000"],
     "The recorded sweep has no S=2,000; it holds 128, 256, "),
    (["sweep", "sdpa_flash", "sdpa_cudnn", "--source", RECORDING, "--heads", "8"],
     f"The recording '{RECORDING}' has no sweep of sdpa_flash and sdpa_cudnn at {Workload.blog(heads=8).family()}"),
    (["sweep", "naive", "sdpa_flash", "--device", "cpu", "--seq", "abc"], "--seq='abc' is not allowed"),
    (["sweep", "naive", "sdpa_flash", "--device", "cpu", "--seq", "１２８"], "--seq='１２８' is not allowed"),
    (["sweep", "naive", "sdpa_flash", "--device", "cpu", "--seq", ",".join(map(str, range(1, 14)))],
     "at most 12 lengths per sweep (13 given)"),
    (["record"], "required: --out"),
    (["record", "--out", "{tmp}/recording"], "record measures on the GPU: it needs a CUDA GPU"),
    (["record", "--out", "{tmp}/recording", "--part", "decode"], "record measures on the GPU: it needs a CUDA GPU"),
    (["record", "--out", "{tmp}/recording", "--part", "sweep"], "--part='sweep' is not allowed: choose one or more of"),
    (["record", "--out", "{tmp}/recording", "--part", "decode", "--start", "99"], "--start='99' is not allowed: the part decode has workloads 0 to"),
    (["record", "--out", "{tmp}/recording", "--part", "decode", "matrix", "--start", "1"], "--start='1' is not allowed: goes on within one part"),
    (["record", "--out", "{tmp}/recording", "--until", "-5"], "--until='-5.0' is not allowed: a number of seconds above 0"),
    (["sweep", "naive", "sdpa_math", "--axis", "batch", "--seq", "128,256"], "a sweep over the batch takes one S"),
    (["sweep", "naive", "sdpa_math", "--batches", "1,2"], "batches are the points of a sweep with --axis batch"),
]


@no_gpu
@pytest.mark.parametrize("argv, says", BAD, ids=[" ".join(a)[:60] or "(none)" for a, _ in BAD])
def test_a_bad_invocation_is_one_message_and_nothing_runs(argv, says, tmp_path, capsys, monkeypatch):
    def measured(*args, **kwargs):
        raise AssertionError("a bad invocation must fail before measuring")
    for name in ("measure_runs", "run_sweep"):
        monkeypatch.setattr(session, name, measured)
    import profiling.recording
    monkeypatch.setattr(profiling.recording, "record", measured)
    monkeypatch.setattr(profiling.recording, "record_sweeps", measured)
    monkeypatch.setattr(profiling.recording, "record_part", measured)
    from profiling import budget
    monkeypatch.setattr(budget, "cpu_16bit_speed", lambda: {"bf16": 0.05, "fp16": 0.05})  # a CPU without bf16
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{fifo}", str(fifo)) for a in argv]
    code, out, err = run(argv, capsys)
    assert code == 2
    assert "Traceback" not in err and out == ""
    *usage, message = err.strip().splitlines()  # argparse shows its usage first
    assert says in message and "error: " in message, message
    assert all(line.startswith(("usage:", " ")) for line in usage)
    assert sorted(tmp_path.iterdir()) == [fifo]  # nothing created (record --out on a CPU, a --json checked)


@pytest.mark.parametrize("command", [["compare", "naive", "sdpa_math"], ["sweep", "naive", "sdpa_math", "--seq", "64"]])
def test_json_on_a_dangling_link_is_refused_creating_and_removing_nothing(command, tmp_path, capsys, monkeypatch):
    """The check that --json can be written opened the path to append: through a dangling link that created the
    link's target, and then removed the link, before the run."""
    def measured(*args, **kwargs):
        raise AssertionError("a refused --json must fail before measuring")
    for name in ("measure_runs", "run_sweep"):
        monkeypatch.setattr(session, name, measured)
    monkeypatch.chdir(tmp_path)
    link, target = tmp_path / "out.json", tmp_path / "elsewhere.json"
    link.symlink_to(target)
    code, out, err = run([*command, "--device", "cpu", "--json", "out.json"], capsys)
    assert code == 2 and out == ""
    assert err == "error: --json='out.json' is not allowed: is a link to nothing (a dangling link): give a file name\n"
    assert link.is_symlink() and not target.exists() and sorted(tmp_path.iterdir()) == [link]


@no_gpu
def test_a_bad_invocation_in_a_real_process_prints_one_line_and_no_traceback():
    out = subprocess.run([sys.executable, "-m", "profiling", "list", "--seq", HUGE], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].endswith("(5000 characters) is not allowed: must be between 1 and "
                                                        "131072")


def test_every_workload_field_is_an_option_and_every_option_has_help_text(capsys):
    top = cli_main.build_parser()
    (subcommands,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    for name, parser in subcommands.choices.items():
        assert parser.description, name
        for action in parser._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"{name} {action.option_strings or action.dest} has no help text"
        if name in ("list", "compare", "sweep"):
            options = {o for action in parser._actions for o in action.option_strings}
            for f in FIELDS:
                option = "--" + f.metadata["spec"].query.replace("_", "-")
                assert option in options or (name, f.name) == ("sweep", "seq_len"), (name, option)
    code, out, _ = run(["compare", "--help"], capsys)
    assert code == 0 and "--dtype" in out and "--budget" in out


# -- answering at once: help and the options' refusals before torch is imported --------------------------------------
NO_TORCH = """
import sys
from profiling.__main__ import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    print("torch imported" if "torch" in sys.modules else "no torch", exit.code, file=sys.stderr)
"""


@pytest.mark.parametrize("argv, code", [(["--help"], 0), (["list", "--help"], 0), (["compare", "--help"], 0),
                                        (["sweep", "--help"], 0), (["record", "--help"], 0),
                                        (["compare", "naive", "sdpa_flash", "--dtype", "bf17"], 2),
                                        (["compare", "naive"], 2), (["sweep", "a", "b", "--heads", "x"], 2),
                                        (["bogus"], 2)])
def test_help_and_the_options_refusals_come_before_torch_is_imported_in_one_line(argv, code):
    """What makes them answer at once, whatever this machine's speed: torch (seconds to import) is never loaded."""
    out = subprocess.run([sys.executable, "-c", NO_TORCH, *argv], capture_output=True, text=True, timeout=120)
    *said, last = out.stderr.strip().splitlines()
    assert last == f"no torch {code}", out.stderr
    if code:
        assert len(said) == 1 and said[0].startswith("python -m profiling") and ": error: " in said[0], said
    else:
        assert "usage: python -m profiling" in out.stdout


def test_a_table_prints_whole_numbers_as_integers_and_a_missing_value_as_a_dash():
    import pandas as pd

    frame = pd.DataFrame({"calls": [1, None, 3], "ms": [0.5, float("nan"), 2.0], "name": ["a", None, "c"]})
    lines = cli_main.table_text(frame).splitlines()
    assert lines[1].split() == ["1", "0.5", "a"] and lines[2].split() == ["–", "–", "–"]
    assert lines[3].split() == ["3", "2.0", "c"] and "NaN" not in "".join(lines) and "1.0" not in lines[1]


@no_gpu
def test_without_a_gpu_a_recorded_workload_replays_the_pages_recording_and_says_so(capsys):
    parse = cli_main.build_parser().parse_args
    assert cli_main._source(parse(["compare", "sdpa_flash", "sdpa_cudnn", "--pass", "fwd+bwd"]), "cpu") == RECORDING
    assert capsys.readouterr().err.strip().splitlines() == [
        f"No GPU here: replaying the recorded runs {RECORDING} (--device cpu measures on this CPU)."]
    assert cli_main._source(parse(["compare", "sdpa_flash", "sdpa_cudnn", "--device", "cpu"]), "cpu") == "live"
    assert cli_main._source(parse(["compare", "naive", "sdpa_math", "--seq", "256"]), "cpu") == "live"  # not recorded
    said = capsys.readouterr().err.strip().splitlines()  # in one line, as the page says it: what is missing, what runs
    assert said == ["No GPU here, and not recorded: The H200 recording has no run of B=8, H=16, S=256, D=64, bf16, "
                    "causal. Nearest recorded: B=8, H=16, S=1024, D=64, bf16, causal; B=8, H=16, S=4096, D=64, bf16, "
                    "causal; B=8, H=16, S=1024, D=64, fp32, causal. Measuring live on this CPU instead, at B=1, H=8, "
                    "S=256, D=64, fp32, causal (--device cpu to ask for that)."], said
    assert cli_main._source(parse(["sweep", "naive", "sdpa_flash", "--seq", "128,256,512"]), "cpu") == RECORDING
    assert capsys.readouterr().err.count("No GPU here") == 1


def readme_commands() -> list[list[str]]:
    """The README's `compare` and `sweep` examples that name neither a device nor a source, as argument lists."""
    import shlex

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    lines = re.findall(r"^    python -m profiling ((?:compare|sweep) [^#\n]*)", readme, re.M)
    return [shlex.split(line) for line in lines if "--device" not in line and "--source" not in line]


@no_gpu
@pytest.mark.parametrize("argv", readme_commands(), ids=" ".join)
def test_every_readme_example_without_a_device_replays_the_recording_here(argv, capsys, monkeypatch, tmp_path):
    """Two of them were not in the recording and ran live at CPU size (33 s) with only '(live)' in the header. The
    command runs as typed up to the request it serves (its source, as `_source` chose it), and stops there."""
    served = []

    def serve(request, **kwargs):
        served.append(request.source)
        raise Refusal("test", None, "served")
    monkeypatch.setattr(session, "compare", serve)
    monkeypatch.setattr(session, "sweep", serve)
    paths = {"--json": str(tmp_path / "out.json"), "--trace-dir": str(tmp_path / "traces")}  # not the cwd's
    code, _, err = run([paths.get(before, a) for before, a in zip([None] + argv, argv)], capsys)
    assert served == [RECORDING], err
    assert err.startswith(f"No GPU here: replaying the recorded runs {RECORDING}"), err


def test_a_live_command_leaves_nothing_in_the_temp_folder_and_removes_no_lockless_folder(tmp_path, capsys,
                                                                                          monkeypatch):
    """Each measurement left its traces in $TMPDIR (attention_profiler_<pid>) after the command; now its folders go
    as it ends (the tables were read from them first), and another process's folder without a lock stays."""
    import tempfile

    from profiling import scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    others = tmp_path / "attention_profiler_999999999"  # a pid dead here, an hour old, no lock: not ours to judge
    others.mkdir()
    os.utime(others, (0, 0))
    made, real = [], scratch.process_folder
    monkeypatch.setattr(scratch, "process_folder", lambda kind="": made.append(real(kind)) or made[-1])
    code, out, err = run(["compare", "naive", "sdpa_math", "--device", "cpu", "--seq", "64", "--heads", "2",
                          "--head-dim", "16"], capsys)
    assert code == 0, err
    assert made and "naive: wall" in out  # the traces were written there, and read
    assert [p.name for p in tmp_path.iterdir()] == [others.name]


@no_gpu
def test_a_replay_writes_the_recorded_traces_of_its_runs_to_the_trace_dir(tmp_path, capsys):
    """`--trace-dir` on a replay made an empty folder and said nothing, though the recording holds the traces."""
    import gzip

    folder = tmp_path / "traces"
    code, out, err = run(["compare", "sdpa_flash", "sdpa_cudnn", "--trace-dir", str(folder)], capsys)
    assert code == 0 and "replaying the recorded runs" in err, err
    answer = session.compare(Request.build(RECORDING, "sdpa_flash", "sdpa_cudnn", {}, "cpu"))
    names = []
    for run_ in (answer.result.a, answer.result.b):
        written = folder / Path(run_.trace_path).name.removesuffix(".gz")
        assert written.read_bytes() == gzip.decompress(Path(run_.trace_path).read_bytes())  # the recorded trace
        assert json.loads(written.read_text())["traceEvents"]  # Chrome trace JSON, as a live run writes
        names.append(written.name)
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)
    assert f"traces: {', '.join(names)} written to {folder} (as recorded)" in out
