"""Command line: `python -m profiling list | compare A B [...] | sweep A B [...] | record --out DIR |
record-sweeps --out DIR`."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pandas as pd
import torch

from attention_variants import VARIANTS, get_variant, guess_for

from . import reports, scratch
from .environment import detect
from .explain import explain, explain_sweep
from .measurement import compare
from .results import Comparison
from .recording import find_recorded, find_recorded_sweep, record, recorded_sweeps, recordings, unrecorded_message
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
    """The workload the options describe: on a replay (--source) the recording's GPU, else this machine's."""
    if getattr(args, "source", None):
        if args.device not in (None, "cuda"):
            raise WorkloadError("--device", args.device, "a recording replays the GPU it was made on: leave it out")
        device = "cuda"
    else:
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device == "cuda" and not torch.cuda.is_available():
            raise WorkloadError("device", "cuda", "no CUDA GPU is visible to this process")
    base = Workload.blog() if device == "cuda" else Workload.cpu_default()
    changes = {"device": device}
    for field, value in (("seq_len", getattr(args, "seq", None)), ("heads", args.heads), ("batch", args.batch),
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
             "guess": guess_for(v.key, workload).summary} for v in VARIANTS.values()]
    print(pd.DataFrame(rows).to_string(index=False))
    return 0


def cmd_compare(args) -> int:
    workload = _workload(args)
    json_path = _writable_file("--json", args.json) if args.json else None
    variants = [get_variant(args.a), get_variant(args.b)]  # unknown keys refused before any work
    if args.source:  # replay: the recorded runs of A and B, explained now like live ones
        if args.source not in recordings():
            raise WorkloadError("--source", args.source, f"choose one of {', '.join(recordings()) or 'none'}")
        missing = unrecorded_message(args.source, workload, (args.a, args.b))
        if missing:
            raise WorkloadError("--source", args.source, missing)
        result = explain(Comparison(*(find_recorded(args.source, key, workload) for key in (args.a, args.b))))
    else:
        trace_dir = _writable_folder("--trace-dir", args.trace_dir) if args.trace_dir else None
        check_time_budget(workload, variants)
        progress = (lambda f, m: print(f"[{100 * f:3.0f}%] {m}", file=sys.stderr)) if args.verbose else None
        result = explain(compare(args.a, args.b, workload, trace_dir=trace_dir,
                                 **({"progress": progress} if progress else {})))
    where = f"recorded: {args.source}" if args.source else "live"
    print(f"{result.a.environment.summary()} ({where})\nworkload: {workload.label()}\n")
    for run in (result.a, result.b):
        print(reports.summary_line(run))
        if run.ok:
            print(reports.kernel_table(run).drop(columns=["full name"]).to_string(index=False), "\n")
    print(reports.notes_text(result), "\n")
    if json_path:
        json_path.write_text(json.dumps(result.to_dict(), indent=1))
    return 0


def cmd_sweep(args) -> int:
    from . import sweep as sweep_mod

    base = _workload(args)
    json_path = _writable_file("--json", args.json) if args.json else None
    seq_lens = sweep_mod.parse_seq_lens(args.seq_lens) if args.seq_lens else None
    if args.source:
        result = find_recorded_sweep(args.source, args.a, args.b, base)
        if result is None:
            held = [f"{sweep_mod.family_label(s.workload)}: {', '.join(s.variants)}"
                    for s in recorded_sweeps(args.source)]
            raise WorkloadError("--source", args.source, f"has no sweep of {args.a} and {args.b} at "
                                f"{sweep_mod.family_label(base)}; it holds: " + ("; ".join(held) or "no sweeps"))
        if seq_lens:
            result = result.select(result.variants, seq_lens)
    else:
        progress = (lambda f, m: print(f"[{100 * f:3.0f}%] {m}", file=sys.stderr)) if args.verbose else None
        result = sweep_mod.sweep(args.a, args.b, base, seq_lens, budget_s=args.budget,
                                 **({"progress": progress} if progress else {}))
    print(f"{result.environment.summary()}\nworkload: {sweep_mod.family_label(result.workload)} "
          f"({'recorded: ' + args.source if args.source else result.workload.device})\n")
    table = result.to_frame().drop(columns=["first call ms", "wall s"])
    # cell by cell, not DataFrame.map: that needs pandas 2.1, and the GPU machine may have 2.0
    cells = pd.DataFrame([[_cell(v) for v in row] for row in table.itertuples(index=False)], columns=table.columns)
    print(cells.to_string(index=False), "\n")
    print(reports.sweep_text(explain_sweep(result)))
    if result.stopped:
        print(f"\nstopped: {result.stopped}")
    if json_path:
        json_path.write_text(json.dumps(result.to_dict(), indent=1))
    return 0


def _cell(value):
    if value is None or (isinstance(value, float) and value != value):
        return "—"
    return f"{value:.4g}" if isinstance(value, float) else value


def cmd_record(args) -> int:
    if not torch.cuda.is_available():  # before anything is created
        raise WorkloadError("device", "cpu", "record measures the GPU matrix: it needs a CUDA GPU, and none is visible")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise WorkloadError("--out", args.out, "is a file: give a folder")
    record(out)
    return 0


def cmd_record_sweeps(args) -> int:
    from .sweep import record_sweeps

    if not torch.cuda.is_available():  # before anything is created
        raise WorkloadError("device", "cpu", "record-sweeps measures on the GPU: it needs a CUDA GPU, and none is visible")
    record_sweeps(_writable_folder("--out", args.out))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m profiling", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{list,compare,sweep,record,record-sweeps}")
    for name, help_text in (("list", "the variants, and whether each can run here on the workload"),
                            ("compare", "variant A against variant B on one workload, measured (or replayed), "
                                        "then explained"),
                            ("sweep", "variant A and variant B over sequence lengths, measured (or replayed)")):
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name in ("compare", "sweep"):
            p.add_argument("a", help="variant A (see `list`)")
            p.add_argument("b", help="variant B")
            p.add_argument("--source", help="replay a recording instead of measuring, e.g. "
                                            + (", ".join(recordings()) or "h200-torch2.11"))
            p.add_argument("--json", help=f"write the {name} to this JSON file (checked before measuring)")
            p.add_argument("-v", "--verbose", action="store_true", help="print progress")
        if name == "compare":
            p.add_argument("--trace-dir", help="keep the Chrome traces in this folder (created if missing)")
        if name == "sweep":
            p.add_argument("--seq", dest="seq_lens", metavar="S,S,...",
                           help="lengths, e.g. 128,256,512 (default: powers of two from 128 up to what the fused "
                                "variants fit)")
            p.add_argument("--budget", type=float, help="stop after about this many seconds (CPU default 60)")
        else:
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
        p.set_defaults(func={"list": cmd_list, "compare": cmd_compare, "sweep": cmd_sweep}[name])
    p = sub.add_parser("record", help="run the GPU matrix and keep runs and traces (needs a CUDA GPU)",
                       description="run the GPU matrix and keep runs and traces (needs a CUDA GPU)")
    p.add_argument("--out", required=True, help="folder for runs.json and traces/ (profiling/recorded/<name>)")
    p.set_defaults(func=cmd_record)
    p = sub.add_parser("record-sweeps", help="on a GPU: the recorded sweeps, written to DIR/sweeps.json",
                       description="on a GPU: the recorded sweeps, written to DIR/sweeps.json")
    p.add_argument("--out", required=True, help="folder for sweeps.json (profiling/recorded/<name>)")
    p.set_defaults(func=cmd_record_sweeps)
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
