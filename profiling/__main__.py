"""Command line: `python -m profiling list | compare A B [...] | sweep A B [...] | context-parallel A B --gpus N [...] |
record --out DIR [--part ...] | counters A [B ...]`. Every request goes through `profiling.session`, as the page's do.
Help and the options' refusals come before torch is imported (the parser is made from the field specs alone): each command
imports what it measures with."""
from __future__ import annotations

import argparse
import json
import math
import os
import stat
import sys
import textwrap
import time
from pathlib import Path

from attention_variants import optional

from . import scratch, startup, text
from .request import LIVE_BUDGET_S
from .caches import keep_compiles
from .request import LIVE, SWEEP_AXES, Request, add_workload_arguments, parse_lengths
from .workload import FIELDS, Refusal

WIDTH = 100  # characters a line of `list` takes
MISSING = "–"  # a table's cell with no value (a side that did not run, a point that was stopped)


class Parser(argparse.ArgumentParser):
    """argparse, its refusals said in one line (the option, the value, what is allowed), as every other refusal."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def table_text(frame) -> str:
    """A table as the terminal prints it: a column of whole numbers as integers (pandas keeps counts with a gap as
    floats, 1.0), a missing value as "–" (never NaN)."""
    frame = frame.copy()
    for name in frame.columns:
        column = frame[name]
        numbers = column.dropna()
        whole = len(numbers) and all(isinstance(x, (int, float)) and not isinstance(x, bool) and float(x).is_integer()
                                     for x in numbers)
        frame[name] = [MISSING if _missing(x) else int(x) if whole else x for x in column.astype(object)]
    return frame.to_string(index=False)


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _source(args, device: str) -> str:
    """Where a comparison or sweep comes from: --source when given; live where there is a GPU or --device is given;
    on a machine without one, the recording the page opens on when it holds the workload, else the first other
    recording that does (said in one line), so a line written for a GPU still answers; else live on this CPU."""
    from . import session
    from .replay import by_size, recordings

    if args.source is not None or args.device or device == "cuda" or not recordings():
        return LIVE if args.source is None else args.source  # an empty --source is refused as the API refuses it
    first = None
    for recorded in by_size():
        try:
            session.plan(Request.from_args(argparse.Namespace(**{**vars(args), "source": recorded}), device),
                         sweep=args.func is cmd_sweep)
        except Refusal as error:  # said as the page says it: what the recording lacks, and what runs instead
            if error.kind != "unrecorded":
                return LIVE
            first = first or error
            continue
        print(f"No GPU here: replaying the recorded runs {recorded} (--device cpu measures on this CPU).",
              file=sys.stderr)
        return recorded
    live = Request.from_args(argparse.Namespace(**{**vars(args), "source": LIVE}), device).workload
    print(f"No GPU here, and not recorded: {first} Measuring live on this CPU instead, at {live.words()} "
          "(--device cpu to ask for that).", file=sys.stderr)
    return LIVE


def _live_device(args) -> str:
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise Refusal("--device", "cuda", "no CUDA GPU is visible to this process")
    return device


def _budget(text_: str) -> float:
    """An argparse type: seconds, a positive finite number, written in ASCII (float() would also read '１２' and
    '1_0': not here, as for every number on the command line)."""
    try:
        value = float(text_) if text_.isascii() and "_" not in text_ else math.nan
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= 7 * 86400):
        raise argparse.ArgumentTypeError(f"--budget={text_!r} is not allowed: seconds, more than 0 and at most a week")
    return value


def _writable_file(option: str, path: str) -> Path:
    """`path` once a regular file could really be opened for writing there: checked before measuring, so no result
    is lost to a typo, a read-only folder or a pipe that would block. Nothing but `path` itself is created, and only
    what the probe created is removed: a new file is made with O_EXCL (which follows no link), and a link to
    nothing is refused (opening it would create its target elsewhere)."""
    path = Path(path)
    if path.is_dir():
        raise Refusal(option, str(path), "is a folder: give a file name")
    if path.is_symlink() and not path.exists():
        raise Refusal(option, str(path), "is a link to nothing (a dangling link): give a file name")
    existed = path.exists()
    if existed and not stat.S_ISREG(path.stat().st_mode):
        raise Refusal(option, str(path), "is not a regular file (a pipe or a device): give a file name")
    try:
        os.close(os.open(path, os.O_WRONLY | (os.O_APPEND if existed else os.O_CREAT | os.O_EXCL), 0o666))
    except OSError as error:
        raise Refusal(option, str(path), f"cannot be written ({error.strerror})") from None
    if not existed:
        path.unlink()
    return path


def _writable_folder(option: str, path: str) -> Path:
    """`path` as a folder this user can write into, created if missing."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise Refusal(option, str(path), "is a file: give a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise Refusal(option, str(path), f"cannot be created ({error.strerror})") from None
    if not os.access(path, os.W_OK):
        raise Refusal(option, str(path), "cannot be written by this user")
    return path


def _budget_of(args, request: Request) -> float | None:
    """--budget, else a live run's default on its device; a replay takes none."""
    if args.budget is not None or not request.live:
        return args.budget
    return LIVE_BUDGET_S[request.workload.device]


def _progress(args):
    from . import session

    return (lambda f, m: print(f"[{100 * f:3.0f}%] {m}", file=sys.stderr)) if args.verbose else session._no_progress


def cmd_list(args) -> int:
    from attention_variants import VARIANTS, guess_for, reasons

    from .environment import detect

    device = _live_device(args)
    fields = {f.name: getattr(args, f.name) for f in FIELDS if getattr(args, f.name) is not None}
    workload = Request.build(LIVE, "naive", "naive", fields, device).workload
    env = detect(device)
    print(f"{env.summary()}\nworkload: {workload.words()}\n")
    why = reasons(VARIANTS.values(), workload, env)
    for v in VARIANTS.values():
        print(f"{v.key}: {v.label}")
        for name, words in (("here", why[v.key] or "can run"),
                            ("guess", guess_for(v.key, workload).summary)):
            print(textwrap.fill(words, WIDTH, initial_indent=f"  {name}: ", subsequent_indent="    "))
    return 0


def cmd_compare(args) -> int:
    from . import reports, session

    device = _live_device(args)
    args.source = _source(args, device)
    request = Request.from_args(args, device)
    json_path = _writable_file("--json", args.json) if args.json else None
    trace_dir = _writable_folder("--trace-dir", args.trace_dir) if args.trace_dir else None
    answer = session.compare(request, budget_s=_budget_of(args, request), progress=_progress(args), trace_dir=trace_dir,
                             energy=args.energy)
    c = answer.result
    print(f"{c.a.environment.summary()} ({'live' if request.live else 'recorded: ' + request.source})\n"
          f"workload: {request.workload.words()}")
    busy = text.machine_load(c.a, c.b) if request.live else ""
    print(f"while it ran: {busy}\n" if busy else "")
    for run in (c.a, c.b):
        print(reports.summary_line(run))
        if run.counters is not None:
            print(reports.counters_text(run.counters))
        if run.ok:
            print(table_text(reports.kernel_table(run).drop(columns=["full name"])), "\n")
    print(reports.notes_text(answer.explanation), "\n")
    if trace_dir and not request.live:
        print(_recorded_traces((c.a, c.b), trace_dir))
    if json_path:
        json_path.write_text(json.dumps(answer.to_dict(), indent=1))
    return 0


def _recorded_traces(runs, folder: Path) -> str:
    """A replay's traces, which the recording holds gzipped, written into `folder` as a live run writes its own (Chrome
    trace JSON, named as recorded); what was written, in one line."""
    import gzip
    import shutil

    written, without = [], []
    for run in runs:
        if not run.trace_path:
            without.append(run.variant)
            continue
        target = folder / Path(run.trace_path).name.removesuffix(".gz")
        if target.name in written:  # A and B the same run
            continue
        with gzip.open(run.trace_path, "rb") as recorded, open(target, "wb") as out:
            shutil.copyfileobj(recorded, out)
        written.append(target.name)
    said = f"traces: {', '.join(written)} written to {folder} (as recorded)" if written else "traces: none written"
    return said + (f"; the recording holds no trace of {' or '.join(without)} (it did not run)" if without else "")


def cmd_sweep(args) -> int:
    from . import reports, session

    if args.axis == "batch":  # the batches are the points; --seq, if given, is the one S they share
        args.points = parse_lengths(args.batches, "--batches", "batch") if args.batches is not None else None
        if args.seq_lens is not None:
            lengths = parse_lengths(args.seq_lens, "--seq")
            if len(lengths) != 1:
                raise Refusal("--seq", args.seq_lens, "a sweep over the batch takes one S")
            args.seq_len = lengths[0]
    else:
        if args.batches is not None:
            raise Refusal("--batches", args.batches, "batches are the points of a sweep with --axis batch")
        args.points = parse_lengths(args.seq_lens, "--seq") if args.seq_lens is not None else None
    device = _live_device(args)
    args.source = _source(args, device)
    request = Request.from_args(args, device)
    json_path = _writable_file("--json", args.json) if args.json else None
    answer = session.sweep(request, budget_s=_budget_of(args, request), progress=_progress(args))
    result = answer.result
    print(f"{result.environment.summary()}\nworkload: {result.workload.family(result.axis)}, "
          f"{text.axis_symbol(result.axis)} over "
          f"{', '.join(map(str, result.seq_lens))} ({'live' if request.live else 'recorded: ' + request.source})\n")
    print(table_text(reports.sweep_table(result)), "\n")
    print(reports.notes_text(answer.explanation, evidence=False, kinds=reports.sweep_kinds(result.axis)))
    if json_path:
        json_path.write_text(json.dumps(answer.to_dict(), indent=1))
    return 0


def cmd_context_parallel(args) -> int:
    from . import reports, session

    request = Request.from_args(args, _live_device(args))
    json_path = _writable_file("--json", args.json) if args.json else None
    answer = session.context_parallel(request)
    print(f"workload: {request.workload.words()} ({'live' if request.live else 'recorded: ' + request.source})\n")
    print(reports.cp_table(answer.runs).fillna("").to_string(index=False), "\n")
    for n in answer.notes:
        print(f"[{n.side}] {n.title}\n" + textwrap.fill(n.body, WIDTH, initial_indent="  ", subsequent_indent="  "))
    if json_path:
        json_path.write_text(json.dumps(answer.to_dict(), indent=1))
    return 0


def cmd_record(args) -> int:
    import torch

    from .recording import PARTS, record_part

    parts = args.part or list(PARTS)
    for name in parts:
        if name not in PARTS:
            raise Refusal("--part", name, f"choose one or more of {', '.join(PARTS)}")
    if args.start and len(parts) != 1:
        raise Refusal("--start", str(args.start), "goes on within one part: name exactly one --part")
    if args.start and not 0 <= args.start <= len(PARTS[parts[0]][0]):
        n = len(PARTS[parts[0]][0])
        raise Refusal("--start", str(args.start), f"the part {parts[0]} has workloads 0 to {n - 1} ({n}: its sweeps only)")
    if args.until is not None and not args.until > 0:
        raise Refusal("--until", str(args.until), "a number of seconds above 0")
    if not torch.cuda.is_available():  # before anything is created
        raise Refusal("device", "cpu", "record measures on the GPU: it needs a CUDA GPU, and none is visible")
    out = _writable_folder("--out", args.out)
    deadline = time.monotonic() + args.until if args.until else None
    for name in parts:
        record_part(out, name, start=args.start, deadline=deadline, energy=args.energy)
    return 0


def _energy_argument(p: argparse.ArgumentParser, of: str) -> None:
    p.add_argument("--no-energy", dest="energy", action="store_false",
                   help=f"skip the energy per call of {of}: NVML's energy counter read around a loop of a second or "
                        "more a variant (on by default)")


def cmd_counters_one(args) -> int:
    """The call ncu reads (`measurement.counted_call`): run under ncu by `counters.read`, never by hand."""
    from .measurement import counted_call
    from .workload import Workload

    try:
        workload = Workload(**json.loads(args.workload_json))
    except (TypeError, ValueError) as error:
        raise Refusal("--workload-json", args.workload_json, f"is not a workload ({error})") from None
    why = counted_call(workload, args.variant)
    if why:
        print(f"counters-one: {args.variant} cannot run {workload.words()}: {why}", file=sys.stderr)
        return 2
    return 0


def cmd_counters(args) -> int:
    """Live counters: each variant's call under ncu on this GPU, summed over its kernels (`reports.counters_text`)."""
    from attention_variants import KEYS

    from . import reports
    from .counters import read

    if _live_device(args) != "cuda":
        raise Refusal("device", "cpu", "counters are read by Nsight Compute on a CUDA GPU, and none is visible (a "
                                       "replay shows the recording's where it holds them: compare --source NAME)")
    for key in args.variants:
        if key not in KEYS:
            raise Refusal("variant", key, f"choose among {', '.join(KEYS)}")
    fields = {f.name: getattr(args, f.name) for f in FIELDS if getattr(args, f.name) is not None}
    workload = Request.build(LIVE, args.variants[0], args.variants[0], fields, "cuda").workload
    print(f"workload: {workload.words()} (live, under ncu)\n")
    for key in args.variants:
        print(reports.counters_text(read(workload, key)), "\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m profiling", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True,
                                metavar="{list,compare,sweep,context-parallel,record,counters}")
    p = sub.add_parser("list", help="the variants, and whether each can run here on the workload",
                       description="the variants, and whether each can run here on the workload")
    add_workload_arguments(p)
    p.add_argument("--device", choices=["cuda", "cpu"], help="where to run (default: the GPU when there is one)")
    p.set_defaults(func=cmd_list)
    for name, help_text in (("compare", "variant A against variant B on one workload, measured (or replayed), "
                                        "then explained"),
                            ("sweep", "variant A and variant B over sequence lengths, measured (or replayed)")):
        p = sub.add_parser(name, help=help_text, description=help_text)
        Request.add_arguments(p, skip=("seq_len",) if name == "sweep" else ())
        p.add_argument("--json", help=f"write the {name} to this JSON file (checked before measuring)")
        p.add_argument("-v", "--verbose", action="store_true", help="print progress")
        p.add_argument("--device", choices=["cuda", "cpu"], help="where to run (default: the GPU when there is one)")
        p.add_argument("--budget", type=_budget, help="seconds a live run may take: refused up front when predicted "
                                                      "longer, stopped cleanly past it (default: "
                       + ", ".join(f"{text.seconds(s)} on a {'GPU' if d == 'cuda' else 'CPU'}"
                                   for d, s in LIVE_BUDGET_S.items()) + ")")
        if name == "compare":
            p.add_argument("--trace-dir", help="keep the Chrome traces in this folder (created if missing); a replay "
                                                "writes the recorded runs' traces there")
            _energy_argument(p, "a live GPU comparison")
            p.set_defaults(func=cmd_compare)
        else:
            p.add_argument("--seq", dest="seq_lens", metavar="S,S,...",
                           help="lengths, e.g. 128,256,512 (default: powers of two from 128 up to what the fused "
                                "variants fit); with --axis batch, the one S of every point")
            p.add_argument("--axis", choices=list(SWEEP_AXES), default="seq_len",
                           help="the field swept: seq_len (default) or batch")
            p.add_argument("--batches", metavar="B,B,...", help="with --axis batch: the batches, e.g. 1,8,64 "
                                                                "(default: powers of two from 1 up to what fits)")
            p.set_defaults(func=cmd_sweep)
    help_text = ("variants A and B sharded over --gpus GPUs by PyTorch's context_parallel, with and without the load "
                 "balancer, rank by rank (one process a GPU; gloo processes on a CPU); or replayed")
    p = sub.add_parser("context-parallel", help=help_text, description=help_text)
    Request.add_arguments(p)
    p.add_argument("--json", help="write the runs and notes to this JSON file (checked before measuring)")
    p.add_argument("--device", choices=["cuda", "cpu"], help="where to run (default: the GPUs when there are some)")
    p.set_defaults(func=cmd_context_parallel)
    from .recording import PARTS
    p = sub.add_parser("record", help="on a GPU: measure the recording's parts into DIR, in place",
                       description="on a GPU: measure the recording's parts (runs with their traces, and sweeps) into "
                                   "DIR, each in place of the runs and sweeps DIR held of the same workloads; the rest "
                                   "is kept")
    p.add_argument("--out", required=True, help="the recording's folder (profiling/recorded/<gpu>-torch<version>)")
    p.add_argument("--part", nargs="+", metavar="PART",
                   help=f"the parts to record (default: all): {', '.join(PARTS)}")
    p.add_argument("--start", type=int, default=0, metavar="N",
                   help="begin the (one) part at its workload N, keeping the runs it held of those before (default 0; the number of "
                        "its workloads: its sweeps only)")
    p.add_argument("--until", type=float, metavar="SECONDS",
                   help="begin no workload after this many seconds that would not fit in them (what the last took): "
                        "the part stops between two workloads and says the --start that goes on")
    _energy_argument(p, "each recorded run (not the sweeps)")
    p.set_defaults(func=cmd_record)
    help_text = ("on a GPU with Nsight Compute: one call of each variant under ncu, its DRAM bytes, L2 hit rate, "
                 "achieved occupancy and tensor pipe, kernel by kernel (live only; a replay shows the recording's)")
    p = sub.add_parser("counters", help=help_text, description=help_text)
    p.add_argument("variants", nargs="+", metavar="VARIANT", help="the variants' keys (`list` names them)")
    add_workload_arguments(p)
    p.add_argument("--device", choices=["cuda"], help="the GPU (counters are read on one only)")
    p.set_defaults(func=cmd_counters)
    p = sub.add_parser("counters-one", help=argparse.SUPPRESS,
                       description="the one call ncu reads: run by `counters` and `record --part counters` under ncu")
    p.add_argument("--workload-json", required=True, help="the workload, as a run's JSON holds it")
    p.add_argument("--variant", required=True, help="the variant's key")
    p.set_defaults(func=cmd_counters_one)
    return parser


def main(argv=None) -> int:
    keep_compiles()  # before anything imports flash_attn (its cache setting is read once, at its import)
    args = build_parser().parse_args(argv)
    with startup.paused():  # torch and the variants, which every command imports, kept for the process's life
        from attention_variants import VARIANTS  # noqa: F401
    scratch.clean_stale_folders()
    try:
        return args.func(args)
    except Refusal as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # the disk filled, a folder vanished: said in one line
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:  # the traces its measurements left in the temp folder: kept only in a --trace-dir the user named
        scratch.remove_own_folders()


if __name__ == "__main__":
    code = main()
    if "torch._inductor.async_compile" in sys.modules or optional.imported():
        # torch.compile (flex) started inductor's compile-worker pool, whose teardown at interpreter exit can wait up
        # to 300 s (pytorch/pytorch#162199): seen on the H200, a `record` of 128 s of work held its process to 541 s.
        # An optional library's teardown held one too: on an H100 a `record --part fp8` (FlashInfer, cuDNN's frontend
        # and FA3 imported, nothing compiled by torch) wrote its part in 73 s and was still running at its 525 s limit.
        # Everything this command writes is written and closed by now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
