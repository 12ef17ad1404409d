"""Plant faults a user would see as a wrong answer, one at a time, in a copy of the tree, and show each is caught by
at least one test. Prints a table: the fault, caught or MISSED, the first failing test, seconds.

    python bench/mutations.py            # every fault (a few minutes on 2 cores)
    python bench/mutations.py verdict    # the faults whose name contains "verdict"
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The tests that should catch them: every CPU test but the slow app, browser and memory ones (each fault is a unit of
# the core, and a test of the core must catch it).
TESTS = ["tests/test_verdict.py", "tests/test_explain_recorded.py", "tests/test_explain_rules.py", "tests/test_stats.py",
         "tests/test_text.py", "tests/test_trace_h200.py", "tests/test_workload.py", "tests/test_session.py",
         "tests/test_measurement_cpu.py", "tests/test_sweep.py", "tests/test_sweep_notes.py"]

# (name, file, the text it changes, what it becomes)
FAULTS = [
    ("verdict: the winner and the loser swapped", "profiling/explain/verdict.py",
     'fast, slow = (a, b) if v.faster == "a" else (b, a)\n        facts["ratio"]',
     'slow, fast = (a, b) if v.faster == "a" else (b, a)\n        facts["ratio"]'),
    ("verdict: the ratio upside down", "profiling/explain/verdict.py",
     'facts["ratio"] = ratio(facts["b" if fast is a else "a"], facts[v.faster])',
     'facts["ratio"] = ratio(facts[v.faster], facts["b" if fast is a else "a"])'),
    ("verdict: noise called a winner (level 0.5)", "profiling/stats.py", "LEVEL = 0.01", "LEVEL = 0.5"),
    ("verdict: no practical threshold", "profiling/stats.py", "PRACTICAL = 0.03", "PRACTICAL = 0.0"),
    ("verdict: a host cost as the headline's figure", "profiling/explain/verdict.py",
     'return "back_to_back", FIGURES["back_to_back"]', 'return "host_cost", FIGURES["back_to_back"]'),
    ("rule switched off: the hidden copy", "profiling/explain/__init__.py",
     "guess_rules.hidden_copy, ", ""),
    ("rule switched off: the fp32 GEMMs", "profiling/explain/__init__.py", "guess_rules.fp32_gemms, ", ""),
    ("a kernel dropped from the parsed table", "profiling/trace.py",
     "return list(rows.values())  # in order of first launch", "return list(rows.values())[:-1]"),
    ("backward kernels filed as the forward's", "profiling/trace.py",
     'phase = "backward" if any(op.startswith(BACKWARD_MARK) for op in chain) else "forward"', 'phase = "forward"'),
    ("a unit off by 1000: ms written as µs figures", "profiling/text.py",
     'return f"{value:,.0f} ms" if value >= 1000 else f"{value:.3f} ms"',
     'return f"{value * 1000:,.0f} ms" if value >= 1 else f"{value * 1000:.3f} ms"'),
    ("a unit off by 1000: CPU timings in seconds", "profiling/timing.py",
     "samples.append((time.perf_counter() - t0) * 1000.0)", "samples.append(time.perf_counter() - t0)"),
    ("accuracy against fp32, not fp64", "profiling/accuracy.py",
     "self.out = attention(x, torch.float64, self.rows)", "self.out = attention(x, torch.float32, self.rows).double()"),
    ("gradients' reference without the mask", "profiling/accuracy.py",
     "p = torch.softmax(_masked(q[h, r] @ k[h].T * x.scale, x, r), dim=-1)",
     "p = torch.softmax(q[h, r] @ k[h].T * x.scale, dim=-1)"),
    ("a sliding window one key too wide", "profiling/workload.py",
     "allowed &= offset < self.window", "allowed &= offset <= self.window"),
    ("FLOPs not halved when causal", "profiling/workload.py",
     "return s * s / 2 if self.causal else s * s", "return s * s"),
    ("a crossover without the test", "profiling/explain/curves.py",
     'if verdict.kind == "ranked":', 'if verdict.kind != "too_few":'),
    ("a slope stated over noise", "profiling/explain/curves.py",
     'supported = len(tail) >= MIN_FIT_POINTS and r2 >= MIN_R2', 'supported = True or r2'),
]


def run(fault: tuple[str, str, str, str], scratch: Path) -> tuple[bool, str, float]:
    name, file, old, new = fault
    target = scratch / file
    original = target.read_text()
    if old not in original:
        return False, f"(the text to change is not in {file}: update this fault)", 0.0
    target.write_text(original.replace(old, new, 1))
    try:
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *TESTS],
                              cwd=scratch, capture_output=True, text=True)
        first = next((line.split(" - ")[0].removeprefix("FAILED ") for line in done.stdout.splitlines()
                      if line.startswith(("FAILED", "ERROR"))), "")
        return done.returncode != 0, first, time.perf_counter() - t0
    finally:
        target.write_text(original)


def main(pattern: str = "") -> int:
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder) / "tree"
        shutil.copytree(ROOT, scratch, ignore=shutil.ignore_patterns(".git", "artifacts", ".whl", "wh", "__pycache__"))
        missed = 0
        print(f"{'fault':50s} {'':7s} {'s':>5s}  first failing test")
        for fault in FAULTS:
            if pattern not in fault[0]:
                continue
            caught, first, seconds = run(fault, scratch)
            missed += not caught
            print(f"{fault[0]:50s} {'caught' if caught else 'MISSED':7s} {seconds:5.0f}  {first}", flush=True)
        return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
