"""Command line: `python -m profiling list | compare A B [...] | record --out DIR`."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pandas as pd
import torch

from attention_variants import VARIANTS

from . import reports, scratch
from .environment import detect
from .explanation import render_text
from .measurement import compare
from .recording import record
from .workload import DTYPES, LIMITS, Workload, WorkloadError, check_time_budget, whole_number_from_text


def _whole_number(field: str):
    """An argparse type: a whole number within the field's limits, refused with the core's own words."""
    def parse(text: str) -> int:
        try:
            return whole_number_from_text(field, text, *LIMITS[field])
        except WorkloadError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    parse.__name__ = field  # argparse names the type in some messages
    return parse


def _workload(args) -> Workload:
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise WorkloadError("device", "cuda", "no CUDA GPU is visible to this process")
    base = Workload.blog() if device == "cuda" else Workload.cpu_default()
    changes = {"device": device}
    for field, value in (("seq_len", args.seq), ("heads", args.heads), ("batch", args.batch),
                         ("head_dim", args.head_dim), ("dtype", args.dtype), ("rank", args.rank),
                         ("causal", args.causal)):
        if value is not None:
            changes[field] = value
    return base.replace(**changes)


def _writable_file(option: str, path: str) -> Path:
    """`path` once a file could really be opened for writing there (and removed again if it was not there
    before): checked before measuring, so no result is lost to a typo or a read-only folder."""
    path = Path(path)
    if path.is_dir():
        raise WorkloadError(option, str(path), "is a folder: give a file name")
    existed = path.exists()
    try:
        with open(path, "a"):
            pass
    except OSError as error:
        raise WorkloadError(option, str(path), f"cannot be written ({error.strerror})") from None
    if not existed:
        path.unlink()
    return path


def _writable_folder(option: str, path: str) -> Path:
    """`path` as a folder this user can write into, created if missing."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise WorkloadError(option, str(path), "is a file: give a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise WorkloadError(option, str(path), f"cannot be created ({error.strerror})") from None
    if not os.access(path, os.W_OK):
        raise WorkloadError(option, str(path), "cannot be written by this user")
    return path


def cmd_list(args) -> int:
    workload = _workload(args)
    env = detect(workload.device)
    print(f"{env.summary()}\nworkload: {workload.label()}\n")
    rows = [{"variant": v.key, "label": v.label, "here": v.supports(workload, env) or "can run",
             "guess": v.guess.summary} for v in VARIANTS.values()]
    print(pd.DataFrame(rows).to_string(index=False))
    return 0


def cmd_compare(args) -> int:
    workload = _workload(args)
    json_path = _writable_file("--json", args.json) if args.json else None
    trace_dir = _writable_folder("--trace-dir", args.trace_dir) if args.trace_dir else None
    check_time_budget(workload, (args.a, args.b))  # also refuses unknown variants, before any work
    progress = (lambda f, m: print(f"[{100 * f:3.0f}%] {m}", file=sys.stderr)) if args.verbose else None
    result = compare(args.a, args.b, workload, trace_dir=trace_dir, **({"progress": progress} if progress else {}))
    print(f"{result.a.environment.summary()}\nworkload: {workload.label()}\n")
    for run in (result.a, result.b):
        print(reports.summary_line(run))
        if run.ok:
            print(reports.kernel_table(run).drop(columns=["full name"]).to_string(index=False), "\n")
    print(f"Verdict: {result.verdict}\n")
    for title, notes in (("A vs B", result.notes), (f"A · {result.a.variant}", result.a.notes),
                         (f"B · {result.b.variant}", result.b.notes)):
        if notes:
            print(f"== Notes: {title} ==\n{render_text(notes)}\n")
    if json_path:
        json_path.write_text(json.dumps(result.to_dict(), indent=1))
    return 0


def cmd_record(args) -> int:
    if not torch.cuda.is_available():  # before anything is created
        raise WorkloadError("device", "cpu", "record measures the GPU matrix: it needs a CUDA GPU, and none is visible")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise WorkloadError("--out", args.out, "is a file: give a folder")
    record(out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m profiling", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{list,compare,record}")
    for name, help_text in (("list", "the variants, and whether each can run here on the workload"),
                            ("compare", "measure variant A and variant B on one workload, then explain both")):
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == "compare":
            p.add_argument("a", help="variant A (see `list`)")
            p.add_argument("b", help="variant B")
            p.add_argument("--json", help="write the comparison to this JSON file (checked before measuring)")
            p.add_argument("--trace-dir", help="keep the Chrome traces in this folder (created if missing)")
            p.add_argument("-v", "--verbose", action="store_true", help="print progress")
        p.add_argument("--seq", type=_whole_number("seq_len"), dest="seq", metavar="S",
                       help=f"sequence length S, {LIMITS['seq_len'][0]}-{LIMITS['seq_len'][1]}")
        p.add_argument("--heads", type=_whole_number("heads"), metavar="H",
                       help=f"heads H, {LIMITS['heads'][0]}-{LIMITS['heads'][1]}")
        p.add_argument("--batch", type=_whole_number("batch"), metavar="B",
                       help=f"batch B, {LIMITS['batch'][0]}-{LIMITS['batch'][1]}")
        p.add_argument("--head-dim", type=_whole_number("head_dim"), dest="head_dim", metavar="D",
                       help=f"head dim D, {LIMITS['head_dim'][0]}-{LIMITS['head_dim'][1]}")
        p.add_argument("--dtype", choices=list(DTYPES), help="element type of q, k, v")
        p.add_argument("--rank", type=int, choices=[3, 4], help="input rank: 4 is [B, H, S, D], 3 is [B*H, S, D]")
        p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=None,
                       help="causal mask (default: on)")
        p.add_argument("--device", choices=["cuda", "cpu"], help="where to run (default: the GPU when there is one)")
        p.set_defaults(func=cmd_list if name == "list" else cmd_compare)
    p = sub.add_parser("record", help="run the GPU matrix and keep runs and traces (needs a CUDA GPU)",
                       description="run the GPU matrix and keep runs and traces (needs a CUDA GPU)")
    p.add_argument("--out", required=True, help="folder for runs.json and traces/ (profiling/recorded/<name>)")
    p.set_defaults(func=cmd_record)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    scratch.clean_stale_folders()
    try:
        return args.func(args)
    except WorkloadError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # the disk filled, a folder vanished: said in one line
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
