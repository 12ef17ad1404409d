"""Rewrite tests/golden/recorded_pairs.txt and recorded_sweeps.txt from today's explainer: run it only after reading what changed, then read
its diff (`git diff tests/golden`) as a reviewer before committing it.

    python tests/update_golden.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent)]

from test_explain_recorded import GOLDEN, GOLDEN_SWEEPS, PAIRS, golden_lines, golden_sweep_lines  # noqa: E402

from profiling.explain import explain  # noqa: E402

if __name__ == "__main__":
    GOLDEN.write_text("\n".join(golden_lines([(c, explain(c)) for c in PAIRS])) + "\n")
    GOLDEN_SWEEPS.write_text("\n".join(golden_sweep_lines()) + "\n")
    print(f"wrote {GOLDEN} ({len(PAIRS)} pairs) and {GOLDEN_SWEEPS}")
