"""Command line: `python -m profiling list | compare A B [...] | sweep A B [...] | record --out DIR |
record-sweeps --out DIR`."""
from __future__ import annotations

import argparse
import json
import sys

import pandas as pd
import torch

from attention_variants import VARIANTS, guess_for

from . import reports
from .environment import detect
from .explain import explain
from .measurement import compare
from .recording import find_recorded_sweep, record, recorded_sweeps
from .workload import Workload, WorkloadError


def _workload(args) -> Workload:
    if getattr(args, "source", None):  # a replay: the recording's GPU workload, whatever runs here
        device = "cuda"
    else:
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    base = Workload.blog() if device == "cuda" else Workload.cpu_default()
    changes = {"device": device}
    for field, value in (("seq_len", args.seq), ("heads", args.heads), ("batch", args.batch),
                         ("head_dim", args.head_dim), ("dtype", args.dtype), ("rank", args.rank),
                         ("causal", args.causal)):
        if value is not None:
            changes[field] = value
    return base.replace(**changes)


def cmd_list(args) -> int:
    workload = _workload(args)
    env = detect(workload.device)
    print(f"{env.summary()}\nworkload: {workload.label()}\n")
    rows = [{"variant": v.key, "label": v.label, "here": v.supports(workload, env) or "can run",
             "guess": guess_for(v.key, workload).summary} for v in VARIANTS.values()]
    print(pd.DataFrame(rows).to_string(index=False))
    return 0


def cmd_compare(args) -> int:
    workload = _workload(args)
    progress = (lambda f, m: print(f"[{100 * f:3.0f}%] {m}", file=sys.stderr)) if args.verbose else None
    result = explain(compare(args.a, args.b, workload, trace_dir=args.trace_dir,
                             **({"progress": progress} if progress else {})))
    print(f"{result.a.environment.summary()}\nworkload: {workload.label()}\n")
    for run in (result.a, result.b):
        print(reports.summary_line(run))
        if run.ok:
            print(reports.kernel_table(run).drop(columns=["full name"]).to_string(index=False), "\n")
    print(reports.notes_text(result), "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.to_dict(), f, indent=1)
    return 0


def cmd_sweep(args) -> int:
    from . import sweep as sweep_mod

    base = _workload(args)
    if args.source:
        result = find_recorded_sweep(args.source, args.a, args.b, base)
        if result is None:
            held = [f"{sweep_mod.family_label(s.workload)}: {', '.join(s.variants)}"
                    for s in recorded_sweeps(args.source)]
            print(f"error: no recorded sweep of {args.a} and {args.b} at {sweep_mod.family_label(base)} in "
                  f"'{args.source}'; it holds: " + ("; ".join(held) or "no sweeps"), file=sys.stderr)
            return 2
        if args.seq_lens:
            result = result.select(result.variants, sweep_mod.parse_seq_lens(args.seq_lens))
    else:
        progress = (lambda f, m: print(f"[{100 * f:3.0f}%] {m}", file=sys.stderr)) if args.verbose else None
        result = sweep_mod.sweep(args.a, args.b, base, args.seq_lens, budget_s=args.budget,
                                 **({"progress": progress} if progress else {}))
    print(f"{result.environment.summary()}\nworkload: {sweep_mod.family_label(result.workload)} "
          f"({'recorded: ' + args.source if args.source else result.workload.device})\n")
    table = result.to_frame().drop(columns=["first call ms", "wall s"])
    # cell by cell, not DataFrame.map: that needs pandas 2.1, and the GPU machine may have 2.0
    cells = pd.DataFrame([[_cell(v) for v in row] for row in table.itertuples(index=False)], columns=table.columns)
    print(cells.to_string(index=False), "\n")
    for fact in sweep_mod.facts(result):
        print(f"- {sweep_mod.describe(fact)}")
    if result.stopped:
        print(f"\nstopped: {result.stopped}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.to_dict(), f, indent=1)
    return 0


def _cell(value):
    if value is None or (isinstance(value, float) and value != value):
        return "—"
    return f"{value:.4g}" if isinstance(value, float) else value


def cmd_record(args) -> int:
    record(args.out)
    return 0


def cmd_record_sweeps(args) -> int:
    from .sweep import record_sweeps

    record_sweeps(args.out)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m profiling", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("list", "compare", "sweep"):
        p = sub.add_parser(name)
        if name == "sweep":
            p.add_argument("a", help="variant A (see `list`)")
            p.add_argument("b", help="variant B")
            p.add_argument("--seq", dest="seq_lens", help="lengths, e.g. 128,256,512 (default: powers of two "
                                                          "from 128 up to what the fused variants fit)")
            p.add_argument("--source", help="replay a recorded sweep, e.g. h200-torch2.11, instead of measuring")
            p.add_argument("--budget", type=float, help="stop after about this many seconds (CPU default 60)")
            p.add_argument("--json", help="write the sweep to this JSON file")
            p.add_argument("-v", "--verbose", action="store_true", help="print progress")
            p.set_defaults(seq=None)
        if name == "compare":
            p.add_argument("a", help="variant A (see `list`)")
            p.add_argument("b", help="variant B")
            p.add_argument("--json", help="write the comparison to this JSON file")
            p.add_argument("--trace-dir", help="keep the Chrome traces in this folder")
            p.add_argument("-v", "--verbose", action="store_true", help="print progress")
        if name != "sweep":
            p.add_argument("--seq", type=int, dest="seq")
        p.add_argument("--heads", type=int)
        p.add_argument("--batch", type=int)
        p.add_argument("--head-dim", type=int, dest="head_dim")
        p.add_argument("--dtype", choices=["fp32", "fp16", "bf16"])
        p.add_argument("--rank", type=int, choices=[3, 4])
        p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=None)
        p.add_argument("--device", choices=["cuda", "cpu"])
        p.set_defaults(func={"list": cmd_list, "compare": cmd_compare, "sweep": cmd_sweep}[name])
    p = sub.add_parser("record", help="run the GPU matrix and keep runs and traces")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_record)
    p = sub.add_parser("record-sweeps", help="on a GPU: the recorded sweeps, written to DIR/sweeps.json")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_record_sweeps)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except WorkloadError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
