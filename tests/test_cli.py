"""`python -m profiling` as a user runs it."""
import json
import subprocess
import sys

import torch

from attention_variants import VARIANTS
from profiling.results import Comparison


def cli(*args):
    return subprocess.run([sys.executable, "-m", "profiling", *args], capture_output=True, text=True, timeout=300)


def test_list_shows_every_variant_and_why_it_cannot_run():
    out = cli("list", "--device", "cpu")
    assert out.returncode == 0, out.stderr
    for key in VARIANTS:
        assert key in out.stdout
    assert "PyTorch has no CPU kernel for cuDNN attention" in out.stdout


def test_compare_prints_both_tables_and_writes_json(tmp_path):
    path = tmp_path / "result.json"
    out = cli("compare", "naive", "sdpa_math", "--device", "cpu", "--seq", "64", "--heads", "2",
              "--json", str(path), "--trace-dir", str(tmp_path / "traces"))
    assert out.returncode == 0, out.stderr
    assert "naive: wall" in out.stdout and "sdpa_math: wall" in out.stdout and "_safe_softmax" in out.stdout
    result = Comparison.from_dict(json.loads(path.read_text()))
    assert result.a.ok and result.b.backend == "math" and result.a.workload.seq_len == 64
    assert len(list((tmp_path / "traces").glob("*.json"))) == 2
    assert "USDT" not in out.stderr and "STAGE" not in out.stderr  # the profiler's own log noise is silenced


def test_bad_input_is_one_clear_line_not_a_traceback():
    out = cli("compare", "naive", "sdpa_flash", "--device", "cpu", "--seq", "0")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == ("python -m profiling compare: error: argument --seq: "
                                                   "seq_len=0 is not allowed: must be between 1 and 131072")
    out = cli("compare", "naive", "nope", "--device", "cpu")
    assert out.returncode == 2 and "variant='nope'" in out.stderr and "Traceback" not in out.stderr


# -- bad invocations: one line naming what is wrong, never a traceback, nothing measured or created ------
import pytest  # noqa: E402

from profiling import __main__ as cli_main  # noqa: E402

HUGE = "9" * 5000  # past Python's 4,300-digit limit for int()
BAD = [
    ([], "required"),
    (["nope"], "invalid choice: 'nope'"),
    (["list", "--device", "cuda"], "device='cuda' is not allowed: no CUDA GPU"),
    (["list", "--device", "tpu"], "invalid choice: 'tpu'"),
    (["list", "--seq", "abc"], "seq_len='abc' is not allowed: must be a whole number"),
    (["list", "--seq", "0"], "seq_len=0 is not allowed: must be between 1 and 131072"),
    (["list", "--seq", HUGE], "(5000 characters) is not allowed: must be between 1 and 131072"),
    (["list", "--seq", "12.5"], "seq_len='12.5' is not allowed: must be a whole number"),
    (["list", "--seq", "nan"], "seq_len='nan' is not allowed"),
    (["list", "--seq", "inf"], "seq_len='inf' is not allowed"),
    (["list", "--heads", "-3"], "heads=-3 is not allowed: must be between 1 and 1024"),
    (["list", "--batch", ""], "batch='' is not allowed"),
    (["list", "--head-dim", "513"], "head_dim=513 is not allowed: must be between 1 and 512"),
    (["list", "--dtype", "fp8"], "invalid choice: 'fp8'"),
    (["list", "--rank", "5"], "invalid choice: 5"),
    (["list", "--rank", "3.0"], "invalid int value: '3.0'"),
    (["list", "extra"], "unrecognized arguments: extra"),
    (["list", "--causal", "maybe"], "unrecognized arguments: maybe"),
    (["compare", "naive"], "required: b"),
    (["compare", "--json"], "expected one argument"),
    (["compare", "nope", "naive", "--device", "cpu"], "variant='nope' is not allowed: choose one of naive"),
    (["compare", "naive", "sdpa_flash", "--device", "cuda"], "device='cuda' is not allowed"),
    (["compare", "naive", "sdpa_flash", "--device", "cpu", "--json", "/nonexistent/dir/x.json"],
     "--json='/nonexistent/dir/x.json' is not allowed: cannot be written"),
    (["compare", "naive", "sdpa_flash", "--device", "cpu", "--json", "/proc/x.json"], "--json='/proc/x.json'"),
    (["compare", "naive", "sdpa_flash", "--device", "cpu", "--json", "/tmp"], "is a folder"),
    (["compare", "naive", "sdpa_flash", "--device", "cpu", "--trace-dir", "/proc/x"], "--trace-dir='/proc/x'"),
    (["compare", "naive", "sdpa_flash", "--device", "cpu", "--trace-dir", "/etc/hostname"], "is a file"),
    (["compare", "naive", "sdpa_math", "--device", "cpu", "--seq", "131072"], "over the 60 s a live run"),
    (["compare", "naive", "sdpa_math", "--device", "cpu", "--seq", "4096", "--heads", "16", "--dtype", "bf16"],
     "bf16 arithmetic runs many times slower than fp32"),
    (["compare", "naive", "flex", "--source", "h200-torch2.11", "--seq", "2048"],
     "The H200 recording has no run of B=8, H=16, S=2048, D=64, bf16, causal. Nearest recorded: "
     "B=8, H=16, S=1024, D=64, bf16, causal; "),
    (["record"], "required: --out"),
    (["record", "--out", "{tmp}/recording"], "record measures the GPU matrix: it needs a CUDA GPU"),
]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the bad invocations include a GPU on a machine without one")
@pytest.mark.parametrize("argv, says", BAD, ids=[" ".join(a)[:60] or "(none)" for a, _ in BAD])
def test_a_bad_invocation_is_one_message_and_nothing_runs(argv, says, tmp_path, capsys, monkeypatch):
    def measured(*args, **kwargs):
        raise AssertionError("a bad invocation must fail before measuring")
    monkeypatch.setattr(cli_main, "compare", measured)
    monkeypatch.setattr(cli_main, "record", measured)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    try:
        code = cli_main.main(argv)
    except SystemExit as exit:  # argparse's own refusals
        code = exit.code
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    *usage, message = err.strip().splitlines()  # argparse shows its usage first
    assert says in message and "error: " in message
    assert all(line.startswith(("usage:", " ")) for line in usage)
    assert list(tmp_path.iterdir()) == []      # nothing created (record --out on a CPU)


def test_a_bad_invocation_in_a_real_process_prints_no_traceback():
    for argv in (["list", "--device", "cuda"], ["list", "--seq", HUGE], ["record", "--out", "/nonexistent/x"]):
        out = cli(*argv)
        if torch.cuda.is_available() and "cuda" in argv:
            continue
        assert out.returncode == 2 and "Traceback" not in out.stderr and out.stderr.strip()


def test_every_option_has_help_text():
    import argparse
    top = cli_main.build_parser()
    (subcommands,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    for name, parser in subcommands.choices.items():
        assert parser.description, name
        for action in parser._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"{name} {action.option_strings or action.dest} has no help text"
    assert cli("compare", "--help").returncode == 0
