"""`python -m profiling` as a user runs it."""
import json
import subprocess
import sys

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
    assert out.stderr.strip() == "error: seq_len=0 is not allowed: must be between 1 and 131072"
    out = cli("compare", "naive", "nope", "--device", "cpu")
    assert out.returncode == 2 and "variant='nope'" in out.stderr and "Traceback" not in out.stderr
