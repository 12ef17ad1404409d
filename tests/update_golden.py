"""Rewrite tests/golden/recorded_pairs*.txt and recorded_sweeps*.txt (one of each per recording) from today's
explainer: run it only after reading what changed, then read its diff (`git diff tests/golden`) as a reviewer before
committing it.

    python tests/update_golden.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent)]

from test_explain_recorded import (GOLDENS, GOLDENS_SWEEPS, PAIRS_OF, golden_lines,  # noqa: E402
                                   golden_sweep_lines)

from profiling.explain import explain  # noqa: E402

if __name__ == "__main__":
    for name, golden in GOLDENS.items():  # one file per recording (per GPU)
        golden.write_text("\n".join(golden_lines([(c, explain(c)) for c in PAIRS_OF[name]])) + "\n")
        GOLDENS_SWEEPS[name].write_text("\n".join(golden_sweep_lines(name)) + "\n")
        print(f"wrote {golden} ({len(PAIRS_OF[name])} pairs) and {GOLDENS_SWEEPS[name]}")
