"""Attention Profiler: two attention implementations side by side — guess, run, compare, explain.

The screen, top to bottom: header and environment line; controls and presets; then two tabs. "A vs B": the
verdict and the chart, one forward of each on a timeline, the link, the guesses, then A | B, each with its
numbers, kernel table, notes and downloads. "A vs B over S": a sweep of the sequence length, its verdict,
charts and table. Two views of the same page: `?view=present` (the answer in large type beside its chart,
A/B pickers and presets only) and `?view=embed` (no header, the answer first, for a blog column).
UI only: numbers come from the profiling core, sentences from the explainer, tables, cards and charts
from profiling/reports.py and profiling/figures.py.

    python app.py        # serves on $PORT, $GRADIO_SERVER_PORT or 7860
"""
from __future__ import annotations

try:  # ZeroGPU wants `spaces` imported before torch touches CUDA; elsewhere GPU() is a no-op
    import spaces
    on_gpu = spaces.GPU(duration=120)
except ImportError:
    def on_gpu(fn):
        return fn

import json
import logging
import os
import re
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from urllib.parse import quote, urlencode

import gradio as gr
from starlette.middleware import Middleware

from attention_variants import VARIANTS, get_variant, guess_for
from profiling import figures, reports, scratch, text
from profiling.environment import detect
from profiling.explain import explain
from profiling.explain.sweep_notes import explain_sweep
from profiling.measurement import compare, other_work
from profiling.recording import (RECORDED_DIR, find_recorded, find_recorded_sweep, recorded_runs, recorded_sweeps,
                                 recorded_workloads, recordings, unrecorded_message)
from profiling.results import Comparison
from profiling.sweep import MAX_POINTS, Sweep, family_label, parse_seq_lens, sweep
from profiling.timeline import run_timeline
from profiling.workload import (LIMITS, LIVE_BUDGET_S, Workload, WorkloadError, canonical_dtype, check_time_budget,
                                choice, compile_estimate_s, whole_number_from_text)
from serving import RequestGuard, limit_malloc_arenas, refuse_short_requests, refused

log = logging.getLogger("attention_profiler")
scratch.clean_stale_folders()  # what a crashed or restarted process left in the temp dir
limit_malloc_arenas()  # before gradio starts its worker threads
os.environ.setdefault("GRADIO_ANALYTICS_MAX_EVENTS", "1000")  # gradio keeps this many events' timings (10,000)

ENV = detect()
LIVE = "live"
RECORDINGS = {name: recorded_runs(name)[0].environment for name in recordings()}
LIVE_LABEL = (f"live on this machine ({ENV.device_name})" if ENV.device == "cuda" else
              f"live on this CPU ({ENV.device_name}): small workloads, CPU ops, no GPU kernels")
SOURCES = [(LIVE_LABEL, LIVE)] + [
    (f"recorded: {env.device_name}, torch {env.torch_version.split('+')[0]}", name)
    for name, env in RECORDINGS.items()]
VARIANT_CHOICES = [(f"{v.label}  ({v.key})", v.key) for v in VARIANTS.values()]
# With a GPU the page measures live; without one it starts on the first recording's real GPU runs.
DEFAULT_SOURCE = LIVE if ENV.device == "cuda" or not RECORDINGS else next(iter(RECORDINGS))
RANKS = [("4 · [B, H, S, D]", 4), ("3 · [B·H, S, D]", 3)]

# name -> (A, B, changes to the base workload). The base is the blog's workload on a GPU and
# in a recording, Workload.cpu_default() live on a CPU. No flex here: it compiles ~15 s on CPU.
PRESETS = {
    "naive vs in-place (the hidden Memcpy)": ("naive", "naive_inplace", {}),
    "math vs flash": ("sdpa_math", "sdpa_flash", {}),
    "flash vs cuDNN": ("sdpa_flash", "sdpa_cudnn", {}),
    "the rank-3 trap": ("sdpa_auto", "sdpa_flash", {"rank": 3}),
    "fp32: who can run it": ("sdpa_efficient", "sdpa_flash", {"dtype": "fp32"}),
}
# URL query parameter -> control, in the order of the compare endpoint's parameters; then the tab (mode),
# a sweep's lengths and the view, which no endpoint takes.
QUERY_KEYS = ("source", "a", "b", "seq", "heads", "dtype", "batch", "head_dim", "causal", "rank")
MODES = {"compare": "A vs B", "sweep": "A vs B over S"}
VIEWS = {"page": "the whole page", "present": "presentation: large type, one screen",
         "embed": "blog embed: no header, the answer first"}
PAGE_KEYS = ("mode", "seqs", "view")
DEFAULT_A, DEFAULT_B = "naive", "sdpa_flash"

# What one visitor may cost the server. The page's largest request is a few hundred bytes and the app takes
# no files. A session that was shown a result holds ~1.5 MB (gradio keeps each output's last value per
# session: the chart's PNG, tables, the JSON): only the 16 most recent sessions are kept (twice the 8 clients
# the Space serves at once), each result for half an hour, so the server's memory levels off ~25 MB above its
# start (bench/load.py: with 32 it levelled off 38 MB up, +5.1%).
MAX_REQUEST_BYTES = 64 * 1024
KEPT_FOR_S = 30 * 60
SESSIONS_KEPT = 16
REPLAYS_AT_ONCE = 4  # a replay reads JSON and draws a chart (~1 s of CPU): it never waits for a live run


def base_workload(source: str) -> Workload:
    """The blog's workload on a GPU or from a recording; on a CPU, one sized for it."""
    if source != LIVE:
        return Workload.blog()  # recorded on a GPU: device "cuda", whatever this machine has
    return Workload.blog() if ENV.device == "cuda" else Workload.cpu_default()


def machine_line() -> str:
    line = f"**This machine:** {ENV.summary()}"
    if ENV.device == "cpu":
        line += ("  \nNo GPU here, so the page shows **recorded GPU runs**. Choose **Source → live on this CPU** "
                 f"to measure here, on a CPU-sized workload ({Workload.cpu_default().label()}) with CPU ops "
                 "instead of kernels.") if DEFAULT_SOURCE != LIVE else (
                 f"  \nNo GPU here, so live runs use a CPU-sized workload ({Workload.cpu_default().label()}).")
    return line


# -- handlers: each calls the core, then hands the result to a renderer ---------------------------
def workload_of(source, seq_len, heads, dtype, batch, head_dim, causal, rank) -> Workload:
    """The controls as a Workload on the device the source measures on; WorkloadError if they are not one."""
    return Workload(batch=batch, heads=heads, seq_len=seq_len, head_dim=head_dim, dtype=dtype, causal=causal,
                    rank=rank, device=base_workload(source).device)


def request_of(source, a, b, seq_len, heads, dtype, batch, head_dim, causal, rank) -> tuple[str, str, str, Workload]:
    """The controls exactly as the client sent them (no rounding, no coercion), checked by the core:
    (source, a, b, workload), or a gr.Error naming the field, the value and what is allowed."""
    try:
        source = choice("source", source, [LIVE, *RECORDINGS])
        a, b = get_variant(a, "a").key, get_variant(b, "b").key
        return source, a, b, workload_of(source, seq_len, heads, dtype, batch, head_dim, causal, rank)
    except WorkloadError as error:
        raise refused(str(error), "Not a workload this app can run") from None


@on_gpu
def measure_live(a: str, b: str, workload: Workload, progress) -> dict:
    """The only function that touches the GPU: returns plain data, so ZeroGPU can pickle it out."""
    try:
        measured = compare(a, b, workload, budget_s=LIVE_BUDGET_S[workload.device],  # a clean stop past it
                           progress=lambda fraction, message: progress(fraction, desc=message))
        return explain(measured).to_dict()
    except WorkloadError as error:  # over the memory or time budget, refused before allocating; raised
        raise refused(str(error), "Too large for this machine") from None  # as gr.Error, which pickles


def replay(recording: str, a: str, b: str, workload: Workload) -> dict:
    """Recorded runs of A and B on this workload, explained now exactly like live ones."""
    missing = unrecorded_message(recording, workload, (a, b))
    if missing:
        raise refused(missing, "Not in the recording")
    return explain(Comparison(*(find_recorded(recording, key, workload) for key in (a, b)))).to_dict()


def run_comparison(source: str, a: str, b: str, seq_len: int, heads: int, dtype: str, batch: int,
                   head_dim: int, causal: bool, rank: int, progress=gr.Progress()) -> tuple[dict, str]:
    """Compare A and B on one workload. Returns what the client gets (Comparison.to_dict() plus the
    source, naming no server file) and what the session keeps on the server (the same with its files,
    as JSON text: a tenth of the memory of the dicts)."""
    source, a, b, workload = request_of(source, a, b, seq_len, heads, dtype, batch, head_dim, causal, rank)
    if source == LIVE:
        try:  # a live run holds the only measurement slot: refuse up front what would hold it too long
            check_time_budget(workload, (VARIANTS[a], VARIANTS[b]))
        except WorkloadError as error:
            raise refused(str(error), "Too long for this machine") from None
        kept = {"source": source, **measure_live(a, b, workload, progress)}
    else:
        kept = {"source": source, **replay(source, a, b, workload)}
    return {"source": source, **Comparison.from_dict(kept).without_files().to_dict()}, json.dumps(kept)


def run_replay(source: str, a: str, b: str, seq_len: int, heads: int, dtype: str, batch: int, head_dim: int,
               causal: bool, rank: int, progress=gr.Progress()) -> tuple[dict, str]:
    """The page's replays, in their own queue: they touch no GPU, so they never wait for a live run. A live
    source is refused here; it belongs to the GPU's queue."""
    if source == LIVE:
        raise refused("A live run joins the GPU's queue (the compare endpoint), not the replays'.", "Not a replay")
    return run_comparison(source, a, b, seq_len, heads, dtype, batch, head_dim, causal, rank, progress)


# -- sweeps: A and B over a list of sequence lengths -----------------------------------------------
SWEEPING: set[str] = set()   # sessions whose live sweep is running ...
STOPPING: set[str] = set()   # ... and those of them asked to stop (at the next point)


@on_gpu
def sweep_live(a: str, b: str, workload: Workload, lengths: list[int] | None, session: str, progress) -> dict:
    """The only sweep that touches the GPU: returns plain data (ZeroGPU pickles it out). Stop is read
    between points; where the GPU runs in another process (ZeroGPU) the sweep ends at its budget instead."""
    try:
        return sweep(a, b, workload, lengths, budget_s=LIVE_BUDGET_S[workload.device],
                     progress=lambda fraction, message: progress(fraction, desc=message),
                     should_stop=lambda: session in STOPPING).to_dict()
    except WorkloadError as error:
        raise refused(str(error), "Not a sweep this machine can run") from None


def replay_sweep(recording: str, a: str, b: str, workload: Workload, lengths: list[int] | None) -> dict:
    """The recorded sweep of A and B over this workload's family (S left free), narrowed to `lengths`."""
    recorded = find_recorded_sweep(recording, a, b, workload)
    if recorded is None:
        held = "; ".join(f"{family_label(s.workload)} for {', '.join(s.variants)}" for s in recorded_sweeps(recording))
        raise refused(f"The recording '{recording}' has no sweep of {a} and {b} at {family_label(workload)}. "
                      f"It holds: {held or 'no sweeps'}.", "Not in the recording")
    return (recorded.select(recorded.variants, lengths) if lengths else recorded).to_dict()


def run_sweep(source: str, a: str, b: str, seq_len: int, heads: int, dtype: str, batch: int, head_dim: int,
              causal: bool, rank: int, seq_lens: str, request: gr.Request, progress=gr.Progress()) -> tuple[dict, str]:
    """A and B over `seq_lens` ('128, 256, …'; empty: powers of two up to the largest that fits), the other
    controls fixed; seq_len is ignored. Returns what the client gets (the sweep's points, its headline and
    notes) and what the session keeps (the same, with what reproduces it), as for a comparison."""
    source, a, b, workload = request_of(source, a, b, seq_len, heads, dtype, batch, head_dim, causal, rank)
    try:
        if seq_lens is not None and not isinstance(seq_lens, str):
            raise WorkloadError("seq_lens", seq_lens, "a text of lengths such as '128, 256, 512', or empty")
        lengths = parse_seq_lens(seq_lens) if seq_lens and seq_lens.strip() else None
    except WorkloadError as error:
        raise refused(str(error), "Not a sweep this app can run") from None
    if source == LIVE:
        session = request.session_hash or ""
        SWEEPING.add(session)
        try:
            data = sweep_live(a, b, workload, lengths, session, progress)
        finally:
            SWEEPING.discard(session)
            STOPPING.discard(session)
    else:
        data = replay_sweep(source, a, b, workload, lengths)
    explanation = explain_sweep(Sweep.from_dict(data))
    answer = {"source": source, **data, "headline": explanation.headline,
              "notes": [asdict(n) for n in explanation.notes]}
    return answer, json.dumps({"source": source, "seqs": ",".join(map(str, lengths or [])), "sweep": data})


def run_sweep_replay(source: str, a: str, b: str, seq_len: int, heads: int, dtype: str, batch: int,
                     head_dim: int, causal: bool, rank: int, seq_lens: str, request: gr.Request,
                     progress=gr.Progress()) -> tuple[dict, str]:
    """Recorded sweeps, in the replays' queue (a live source belongs to the GPU's)."""
    if source == LIVE:
        raise refused("A live sweep joins the GPU's queue (the sweep endpoint), not the replays'.", "Not a replay")
    return run_sweep(source, a, b, seq_len, heads, dtype, batch, head_dim, causal, rank, seq_lens, request, progress)


def stop_sweep(request: gr.Request) -> None:
    """Stop this session's running sweep at its next point; it returns with the points done."""
    if request.session_hash in SWEEPING:
        STOPPING.add(request.session_hash)


def route(source: str) -> list:
    """Run: a live source starts the GPU's event, a recording the replays' (a fresh number starts it)."""
    started = time.monotonic_ns()
    return [started, gr.skip()] if source == LIVE else [gr.skip(), started]


def guesses(source, a, b, seq_len, heads, dtype, batch, head_dim, causal, rank) -> tuple[str, str, str]:
    """The guess for A and B on this workload, whether each can run here at all (live only), and a flag
    when the recording chosen has no run of it, naming the nearest it has."""
    try:
        workload = workload_of(source, seq_len, heads, dtype, batch, head_dim, causal, rank)
    except WorkloadError:
        workload = None
    cards = []
    for side, key in (("A", a), ("B", b)):
        variant = VARIANTS.get(key) if isinstance(key, str) else None
        if variant is None:
            cards.append(f"**{side}**: unknown variant {reports.literal(key)}")
            continue
        live = workload is not None and source == LIVE
        reason = variant.supports(workload, ENV) if live else None
        shown = workload or base_workload(source)  # controls that are not a workload yet: the base one's guess
        compile_s = compile_estimate_s(shown.device) if live and variant.compiled else None
        cards.append(reports.guess_card(side, variant, guess_for(key, shown), reason, cpu=shown.device == "cpu",
                                        compile_estimate=compile_s))
    coverage = ""
    if workload is not None and source in RECORDINGS and all(isinstance(k, str) and k in VARIANTS for k in (a, b)):
        missing = unrecorded_message(source, workload, (a, b))
        coverage = f"⚠️ {missing}" if missing else ""
    return cards[0], cards[1], coverage


# -- links ------------------------------------------------------------------------------------------
HOST = re.compile(r"[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?")


def page_address(request: gr.Request) -> str:
    """The app's public address: behind a proxy (Spaces) the forwarded host, when it is a host name."""
    host = request.headers.get("x-forwarded-host", "").split(",")[0].strip()
    if HOST.fullmatch(host):
        proto = request.headers.get("x-forwarded-proto", "https").split(",")[0].strip()
        return f"{'http' if proto == 'http' else 'https'}://{host}/"
    return str(request.base_url)


def share_link(request: gr.Request, *values, mode: str = "compare", seqs: str = "", view: str = "page") -> str:
    """A link that reproduces this comparison (or sweep): the app's address plus the controls as a query."""
    query = dict(zip(QUERY_KEYS, values))
    query["causal"] = str(bool(query["causal"])).lower()
    if mode != "compare":
        query["mode"] = mode
    if seqs:
        query["seqs"] = seqs
    if view != "page":
        query["view"] = view
    return f"{page_address(request)}?{urlencode(query)}"


def view_links(link: str) -> str:
    """The same result in the other views, one click away (the link is the server's own, percent-encoded)."""
    safe = quote(link, safe=":/?&=,%+")
    joiner = "&" if "?" in safe else "?"
    return (f"Open this result as a [presentation]({safe}{joiner}view=present) (large type, one screen) · "
            f"a [blog embed]({safe}{joiner}view=embed) (no header, the answer first; in an iframe 760 px wide)")


MAX_NOTED = 8  # problems listed from one link; the rest are counted


def parse_query(params: dict[str, str]) -> tuple[dict, list[str]]:
    """Query parameters -> control values (defaults where absent) and a note for each one ignored.
    The notes quote the link's keys and values as literal text: a link is anyone's to write."""
    source = params.get("source", DEFAULT_SOURCE)
    problems = []
    if source == "recorded" and RECORDINGS:
        source = next(iter(RECORDINGS))
    if source != LIVE and source not in RECORDINGS:
        problems.append(f"{reports.literal(f'source={source}')}: choose {', '.join([LIVE, *RECORDINGS])}")
        source = DEFAULT_SOURCE
    base = base_workload(source)
    values = {"source": source, "a": DEFAULT_A, "b": DEFAULT_B, "seq": base.seq_len, "heads": base.heads,
              "dtype": base.dtype, "batch": base.batch, "head_dim": base.head_dim, "causal": base.causal,
              "rank": base.rank, "mode": "compare", "seqs": "", "view": "page"}
    fields = {"seq": "seq_len", "heads": "heads", "batch": "batch", "head_dim": "head_dim"}
    for key, text in params.items():
        try:
            if key.startswith("__") or key == "source":  # gradio's own (?__theme=dark), or done above
                continue
            elif key in ("a", "b"):
                values[key] = get_variant(text, key).key
            elif key in fields:
                number = whole_number_from_text(fields[key], text, *LIMITS[fields[key]])
                base.replace(**{fields[key]: number})  # the core's own limits decide
                values[key] = number
            elif key == "dtype":
                values[key] = canonical_dtype(text)
            elif key == "causal":
                if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise WorkloadError(key, text, "must be true or false")
                values[key] = text.lower() in ("true", "1", "yes")
            elif key == "rank":
                values[key] = base.replace(rank=whole_number_from_text(key, text, 3, 4)).rank
            elif key in ("mode", "view"):
                values[key] = choice(key, text, list(MODES if key == "mode" else VIEWS))
            elif key == "seqs":
                values[key] = ",".join(str(n) for n in parse_seq_lens(text))
            else:
                problems.append(f"{reports.literal(key)}: not a parameter here "
                                f"(use {', '.join(QUERY_KEYS + PAGE_KEYS)})")
        except WorkloadError as error:
            problems.append(f"{reports.literal(f'{key}={text}')}: {error.limit}")
    if len(problems) > MAX_NOTED:
        problems[MAX_NOTED:] = [f"and {len(problems) - MAX_NOTED} more"]
    return values, problems


def prefill(request: gr.Request) -> list:
    """Page load: the controls, the tab and a sweep's lengths from the URL's query parameters (bad ones
    ignored, with a visible note), and which of the two the link opens on (`open_link` renders it)."""
    values, problems = parse_query(dict(request.query_params))
    notice = ("⚠️ Ignored from the link: " + "; ".join(problems)) if problems else ""
    return [values[key] for key in QUERY_KEYS] + [notice, values["seqs"], gr.Tabs(selected=values["mode"]),
                                                   values["mode"]]


def switch_source(source, a, seq_len, heads, dtype, batch, head_dim, causal, rank) -> list:
    """A recording holds a few workloads, a CPU manages only small ones: move to one that fits, and say so."""
    if source == LIVE:
        if ENV.device == "cuda":
            return [gr.skip()] * 8
        w = base_workload(LIVE)
        notice = f"Live on this CPU: a CPU-sized workload ({w.words()})."
    elif not isinstance(source, str) or source not in RECORDINGS:  # not a choice of the radio: nothing to switch to
        return [gr.skip()] * 8
    else:
        try:
            current = workload_of(source, seq_len, heads, dtype, batch, head_dim, causal, rank)
        except WorkloadError:
            current = None
        if current is not None and find_recorded(source, a, current) is not None:
            return [gr.skip()] * 8
        w = base_workload(source)
        notice = ("The recording holds " + "; ".join(x.words() for x in recorded_workloads(source))
                  + ". Moved to the blog's workload.")
    return [w.seq_len, w.heads, w.dtype, w.batch, w.head_dim, w.causal, w.rank, notice]


def view_folder(keep: int = 32) -> Path:
    """A fresh folder for one view's downloads; the oldest beyond `keep` are removed, so the disk stays bounded."""
    root = scratch.process_folder("views")
    for old in sorted(root.iterdir(), key=lambda p: p.stat().st_mtime)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(dir=root))


def view_files(comparison: Comparison, figure, folder: Path) -> dict[str, Path]:
    """The downloads of one view, all written by the server into `folder`: CSV, JSON (naming no server
    file) and PNG made now, and each run's trace copied from where the server itself wrote it (a
    measurement's scratch folder, or a recording shipped with the app). A trace pruned since is left out."""
    files = reports.export(comparison.without_files(), figure, folder)
    for side, run in (("a", comparison.a), ("b", comparison.b)):
        trace = Path(run.trace_path) if run.trace_path else None
        if trace and (scratch.is_scratch_file(trace) or _is_recorded_trace(trace)):
            files[f"{side}_trace"] = Path(shutil.copy(trace, folder / f"{side}_{trace.name}"))
    return files


def _is_recorded_trace(path: Path) -> bool:
    try:
        return path.resolve(strict=True).is_relative_to(RECORDED_DIR.resolve()) and path.is_file()
    except (OSError, RuntimeError):
        return False


def controls_of(source: str, comparison: Comparison) -> list:
    """The control values (QUERY_KEYS' order) that reproduce a comparison."""
    w = comparison.a.workload
    return [source, comparison.a.variant, comparison.b.variant, w.seq_len, w.heads, w.dtype, w.batch, w.head_dim,
            w.causal, w.rank]


STALE = "⚠️ **Controls changed since this result** — Run to update."


def stale_notice(kept_json: str | None) -> str:
    """Controls edited by hand while a result is on screen: the result no longer matches them."""
    return STALE if kept_json else ""


def apply_preset(name: str, source: str) -> list:
    a, b, changes = PRESETS[name]
    w = base_workload(source).replace(**changes)
    return [a, b, w.seq_len, w.heads, w.dtype, w.batch, w.head_dim, w.causal, w.rank]


def timeline_of(comparison: Comparison):
    """One forward of A and of B on one time axis, from their traces; None when either has no trace."""
    try:
        return figures.timeline_figure(run_timeline(comparison.a), run_timeline(comparison.b), dark=None)
    except ValueError:  # a side that did not run, or a trace pruned since
        return None


def sweep_plan(source) -> str:
    """What a sweep from this source will do, said before it starts: its budget live, what is recorded."""
    if source == LIVE:
        device = ENV.device
        return (f"Live on this {'GPU' if device == 'cuda' else 'CPU'}: powers of two from 128 up to the longest it "
                f"can measure in its memory and time, unless you list them. The sweep predicts its length after the "
                f"first S and stops "
                f"cleanly after {LIVE_BUDGET_S[device]:.0f} s (or on Stop) with the points done.")
    if source in RECORDINGS:
        held = "; ".join(f"{s.workload.words().replace(f'S={s.seq_lens[0]},', f'S={s.seq_lens[0]}…{s.seq_lens[-1]},')}"
                         f" ({len(s.variants)} variants)" for s in recorded_sweeps(source))
        return f"Recorded sweeps {text.on_device(RECORDINGS[source])}: {held}."
    return ""


def sweep_files(result: Sweep, figure, folder: Path) -> dict[str, Path]:
    """A sweep's downloads, written by the server into `folder`: its points (JSON) and its chart (PNG)."""
    name = f"sweep_{result.a}_vs_{result.b}"
    files = {"json": folder / f"{name}.json", "png": folder / f"{name}.png"}
    files["json"].write_text(result.to_json(indent=1))
    figure.savefig(files["png"], format="png")
    return files


# -- the screen ------------------------------------------------------------------------------------
class Side:
    """One column of results: A or B."""

    def __init__(self, side: str):
        self.side = side
        key = side.lower()
        with gr.Column(min_width=320):
            self.card = gr.Markdown(f"### {side}\n\n*Run a comparison to see {side}'s numbers.*", elem_id=f"{key}-card")
            self.table = gr.Dataframe(label=f"{side}: kernels per forward (GPU) or aten ops (CPU)", visible=False,
                                      interactive=False, max_height=360, buttons=["fullscreen", "copy"],
                                      elem_id=f"{key}-table")
            with gr.Accordion(f"{side}: every column (full names, occupancy, launch)", open=False):
                self.full = gr.Dataframe(interactive=False, max_height=360, visible=False, pinned_columns=1,
                                         buttons=["fullscreen", "copy"], elem_id=f"{key}-full")
            with gr.Accordion(f"{side}: host (CPU) ops per forward", open=False):
                self.host = gr.Dataframe(interactive=False, max_height=300, visible=False, elem_id=f"{key}-host")
            self.notes = gr.Markdown(elem_id=f"{key}-notes", elem_classes="notes")
            with gr.Row():
                self.trace = gr.DownloadButton("Chrome trace (Perfetto)", visible=False, size="sm",
                                               elem_id=f"{key}-trace")
                self.csv = gr.DownloadButton("kernel table (CSV)", visible=False, size="sm", elem_id=f"{key}-csv")

    @property
    def outputs(self) -> list:
        return [self.card, self.table, self.full, self.host, self.notes, self.trace, self.csv]

    def render(self, comparison: Comparison, files: dict) -> list:
        key = self.side.lower()
        run = comparison.a if key == "a" else comparison.b
        notes = reports.side_notes_markdown(comparison, key)
        return [reports.run_card(self.side, run, VARIANTS[run.variant].label),
                gr.Dataframe(reports.kernel_summary(run), visible=run.ok),
                gr.Dataframe(reports.kernel_table(run), visible=run.ok),
                gr.Dataframe(reports.host_ops_table(run), visible=run.ok),
                f"#### Notes on {self.side}\n\n{notes}",
                gr.DownloadButton(value=files.get(f"{key}_trace"), visible=f"{key}_trace" in files),
                gr.DownloadButton(value=files.get(f"{key}_csv"), visible=f"{key}_csv" in files)]


def scroll_to(*selectors: str) -> str:
    """JS: the answer first, bring the first rendered, visible one of `selectors` to the top of the view."""
    return f"""() => {{
    for (const selector of {list(selectors)!r}) {{
        const top = document.querySelector(selector);
        if (top && top.offsetParent !== null && top.innerText.trim()) {{ top.scrollIntoView({{block: 'start'}}); return; }}
    }}
}}"""


CSS = """
.notes { border-left: 3px solid var(--color-accent); padding-left: 12px; }
#verdict, #sweep-verdict { border: 1px solid var(--border-color-primary); border-radius: 8px; padding: 4px 14px; }
#verdict td, #verdict th { word-break: normal; overflow-wrap: normal; padding: 6px 10px; }
#chart, #sweep-chart, #timeline { overflow-x: auto; }  /* on a phone a chart scrolls sideways, not to a stamp */
#chart .matplotlib, #sweep-chart .matplotlib, #timeline .matplotlib { align-items: flex-start; }
#chart img, #sweep-chart img, #timeline img { min-width: 700px; }  /* the PNG's own width */
"""

# The views (?view=present, ?view=embed) and the page's width, in the page's head: set before the page draws,
# so it never flashes the whole page first, and kept as written (gradio rewrites css= rules under its container).
HEAD = """<script>
(() => {
  const view = new URLSearchParams(window.location.search).get('view');
  if (view === 'present' || view === 'embed') document.documentElement.dataset.view = view;
})();
</script>
<style>
@media (max-width: 1023px) {  /* a 760 px column or a phone: all of its width (gradio's would leave 576 px) */
  .gradio-container .main.app { max-width: 100% !important; margin: 0 !important; padding: 0 12px !important; }
}
html:not([data-view=present]) #present { display: none; }
html[data-view] .page-only { display: none !important; }
html[data-view=present] .not-in-present { display: none !important; }
html[data-view=present] #answer { flex-direction: row !important; align-items: flex-start; gap: 24px; }
html[data-view=present] #answer > * { flex: 1 1 0 !important; min-width: 0; }
html[data-view=present] #present h2 { font-size: 30px; line-height: 1.25; margin-top: 0; }
html[data-view=present] #present li { font-size: 21px; line-height: 1.35; margin-bottom: 8px; }
html[data-view=present] #chart img { min-width: 0 !important; width: auto !important; max-width: 100% !important;
                                     max-height: 380px !important; }
html[data-view=embed] #modes { order: -1; }
</style>"""

with gr.Blocks(title="Attention Profiler", delete_cache=(1800, 3600)) as demo:  # gradio's copies of downloads
    gr.Markdown("# Attention Profiler\nTwo attention implementations on the same inputs under `torch.profiler`: "
                "the kernels they launch, GPU and CPU time, memory, accuracy — and a note wherever the trace "
                "differs from the guess. After the blog post *Profiling in PyTorch (Part 3): Attention is all you "
                "profile*.", elem_classes="page-only")
    gr.Markdown(machine_line(), elem_id="machine", elem_classes="page-only")

    # controls and presets: shared by both tabs
    with gr.Row():
        source = gr.Radio(SOURCES, value=DEFAULT_SOURCE, label="Source", scale=2, elem_classes="not-in-present")
        a = gr.Dropdown(VARIANT_CHOICES, value=DEFAULT_A, label="Variant A", min_width=240, elem_id="pick-a")
        b = gr.Dropdown(VARIANT_CHOICES, value=DEFAULT_B, label="Variant B", min_width=240, elem_id="pick-b")
    default = base_workload(DEFAULT_SOURCE)
    with gr.Row(elem_classes="not-in-present"):
        seq_len = gr.Number(default.seq_len, precision=0, label="sequence length S",
                            info=f"{LIMITS['seq_len'][0]}–{LIMITS['seq_len'][1]}")
        heads = gr.Number(default.heads, precision=0, label="heads H", info=f"{LIMITS['heads'][0]}–{LIMITS['heads'][1]}")
        dtype = gr.Radio(["fp32", "fp16", "bf16"], value=default.dtype, label="dtype")
        batch = gr.Number(default.batch, precision=0, label="batch B", info=f"{LIMITS['batch'][0]}–{LIMITS['batch'][1]}")
        head_dim = gr.Number(default.head_dim, precision=0, label="head dim D",
                             info=f"{LIMITS['head_dim'][0]}–{LIMITS['head_dim'][1]}")
        causal = gr.Checkbox(default.causal, label="causal")
        rank = gr.Radio(RANKS, value=default.rank, label="input rank")
    controls = [source, a, b, seq_len, heads, dtype, batch, head_dim, causal, rank]
    workload_controls = [seq_len, heads, dtype, batch, head_dim, causal, rank]
    with gr.Row():
        run_button = gr.Button("Run A vs B", variant="primary", elem_id="run", scale=0, min_width=160)
        preset_buttons = [gr.Button(name, size="sm", elem_id=f"preset-{i}") for i, name in enumerate(PRESETS)]
    notice = gr.Markdown(elem_id="notice")
    coverage = gr.Markdown(elem_id="coverage")  # a workload the recording lacks, flagged as it is chosen

    with gr.Tabs(elem_id="modes") as modes:
        with gr.Tab(MODES["compare"], id="compare"):
            # the answer first: what was measured, the verdict (headline, then the top notes) and the chart
            stale = gr.Markdown(elem_id="stale")
            measured_on = gr.Markdown(elem_id="measured-on")
            with gr.Column(elem_id="answer"):
                verdict = gr.Markdown("*The verdict appears here after a run.*", elem_id="verdict",
                                      elem_classes="not-in-present")
                present = gr.Markdown(elem_id="present")  # the headline and top notes in large type (?view=present)
                chart = gr.Plot(label="time per forward, A vs B", show_label=False, format="png", visible=False,
                                elem_id="chart")
            with gr.Accordion("One forward on a timeline: CPU and GPU lanes", open=False,
                              elem_classes="not-in-present"):
                timeline = gr.Plot(show_label=False, format="png", visible=False, elem_id="timeline")
                timeline_file = gr.DownloadButton("timeline (PNG)", visible=False, size="sm", elem_id="timeline-png")
            with gr.Group(elem_classes="not-in-present"):
                link = gr.Textbox(label="Link to this comparison", buttons=["copy"], interactive=False, elem_id="link")
                views_line = gr.Markdown(elem_id="views")

            # what each side was expected to do
            with gr.Column(elem_classes="not-in-present"):
                gr.Markdown("### The guess, before anything runs")
                with gr.Row():
                    with gr.Column(min_width=320):
                        guess_a = gr.Markdown(elem_id="guess-a")
                    with gr.Column(min_width=320):
                        guess_b = gr.Markdown(elem_id="guess-b")

                # each side's numbers, kernels and notes
                with gr.Row():
                    side_a, side_b = Side("A"), Side("B")
                with gr.Row():
                    json_file = gr.DownloadButton("comparison (JSON)", visible=False, size="sm", elem_id="json")
                    png_file = gr.DownloadButton("chart (PNG)", visible=False, size="sm", elem_id="png")
                with gr.Accordion("Raw result (what the API returns)", open=False):
                    result = gr.JSON(label="comparison", elem_id="result")

        with gr.Tab(MODES["sweep"], id="sweep"):
            with gr.Row():
                seqs = gr.Textbox(label="sequence lengths S", elem_id="seqs", scale=3, min_width=260,
                                  placeholder="empty: 128, 256, … up to the largest that fits",
                                  info=f"A and B at each, the other controls fixed; up to {MAX_POINTS} lengths")
                with gr.Column(scale=1, min_width=200):
                    sweep_button = gr.Button("Sweep A and B over S", variant="primary", elem_id="sweep-run")
                    stop_button = gr.Button("Stop the sweep", size="sm", elem_id="sweep-stop")
            plan = gr.Markdown(sweep_plan(DEFAULT_SOURCE), elem_id="sweep-plan")
            sweep_verdict = gr.Markdown("*The sweep's verdict appears here after a sweep.*", elem_id="sweep-verdict")
            sweep_chart = gr.Plot(show_label=False, format="png", visible=False, elem_id="sweep-chart")
            with gr.Group(elem_classes="not-in-present"):
                sweep_link = gr.Textbox(label="Link to this sweep", buttons=["copy"], interactive=False,
                                        elem_id="sweep-link")
                sweep_views = gr.Markdown(elem_id="sweep-views")
            with gr.Column(elem_classes="not-in-present"):
                sweep_table = gr.Dataframe(label="every point", visible=False, interactive=False, max_height=400,
                                           buttons=["fullscreen", "copy"], elem_id="sweep-table")
                with gr.Row():
                    sweep_json = gr.DownloadButton("sweep (JSON)", visible=False, size="sm", elem_id="sweep-json")
                    sweep_png = gr.DownloadButton("charts (PNG)", visible=False, size="sm", elem_id="sweep-png")
                with gr.Accordion("Raw sweep (what the API returns)", open=False):
                    sweep_result = gr.JSON(label="sweep", elem_id="sweep-result")

    kept = gr.State(time_to_live=KEPT_FOR_S)  # the last result with its files: on the server, never the client's
    sweep_kept = gr.State(time_to_live=KEPT_FOR_S)

    def show(kept_json: str | None, request: gr.Request) -> list:
        """Render the comparison this session's last run kept on the server onto every output of the screen,
        with the link to it; the result is the controls' own, so nothing is stale. Rendering shares the CPU
        with any live measurement, which marks its run when it does (`other_work`)."""
        with other_work():
            return _show(kept_json, request)

    def _show(kept_json: str | None, request: gr.Request) -> list:
        if not kept_json:
            raise refused(f"This session's result is no longer kept (results are kept {KEPT_FOR_S // 60} minutes); "
                          "run the comparison again.", "Result expired")
        data = json.loads(kept_json)
        comparison = Comparison.from_dict(data)
        recorded = data.get("source", LIVE) != LIVE
        figure = reports.timing_figure(comparison, dark=None)  # transparent, mid-grey text: light or dark page
        folder = view_folder()
        files = view_files(comparison, figure, folder)
        lanes = timeline_of(comparison)
        if lanes is not None:
            files["timeline"] = folder / f"timeline_{comparison.a.variant}_vs_{comparison.b.variant}.png"
            lanes.savefig(files["timeline"], format="png")
        where = (f"**{'Recorded' if recorded else 'Measured live'}** on {comparison.a.environment.summary()} · "
                 f"workload {comparison.a.workload.words()}")
        shared = share_link(request, *controls_of(data["source"], comparison))
        return [shared, view_links(shared), "", where,
                f"### Verdict\n\n{reports.verdict_markdown(comparison, reports.comparison_table(comparison))}",
                reports.present_markdown(comparison),
                gr.Plot(figure, visible=True),
                gr.Plot(lanes, visible=lanes is not None),
                gr.DownloadButton(value=files.get("timeline"), visible="timeline" in files),
                *side_a.render(comparison, files), *side_b.render(comparison, files),
                gr.DownloadButton(value=files["json"], visible=True),
                gr.DownloadButton(value=files["png"], visible=True)]

    views = [link, views_line, stale, measured_on, verdict, present, chart, timeline, timeline_file,
             *side_a.outputs, *side_b.outputs, json_file, png_file]

    def show_sweep(kept_json: str | None, request: gr.Request) -> list:
        """Render this session's last sweep: its verdict and notes, charts, every point, downloads, link."""
        if not kept_json:
            raise refused(f"This session's sweep is no longer kept (results are kept {KEPT_FOR_S // 60} minutes); "
                          "run the sweep again.", "Result expired")
        with other_work():
            data = json.loads(kept_json)
            result = Sweep.from_dict(data["sweep"])
            figure = figures.sweep_figure(result, dark=None)
            files = sweep_files(result, figure, view_folder())
            w = result.workload
            shared = share_link(request, data["source"], result.a, result.b, w.seq_len, w.heads, w.dtype, w.batch,
                                w.head_dim, w.causal, w.rank, mode="sweep", seqs=data.get("seqs", ""))
            return [shared, view_links(shared), reports.sweep_markdown(explain_sweep(result)),
                    gr.Plot(figure, visible=True), gr.Dataframe(reports.sweep_table(result), visible=True),
                    gr.DownloadButton(value=files["json"], visible=True),
                    gr.DownloadButton(value=files["png"], visible=True)]

    sweep_outputs = [sweep_link, sweep_views, sweep_verdict, sweep_chart, sweep_table, sweep_json, sweep_png]

    def open_link(request: gr.Request, mode: str, seq_lens: str, *values) -> list:
        """Page load: a recorded comparison or sweep renders at once (a click meanwhile cancels this); a live one
        waits for a click on Run."""
        compared, swept = 2 + len(views), 2 + len(sweep_outputs)
        if values[0] == LIVE:
            return [gr.skip()] * (compared + swept)
        if mode == "sweep":
            answer, kept_json = run_sweep_replay(*values, seq_lens, request)
            return [gr.skip()] * compared + [answer, kept_json, *show_sweep(kept_json, request)]
        answer, kept_json = run_replay(*values)
        return [answer, kept_json, *show(kept_json, request)] + [gr.skip()] * swept

    # events: every live measurement (a comparison or a sweep) shares one concurrency group of size 1, so runs
    # never overlap; replays have their own group, so they never wait behind a live run. Run, the presets, a
    # sweep and the page's load start one or the other (`route`, `prefill`); the public compare and sweep
    # endpoints take both, in the GPU's group, and replay / sweep_replay take recordings only. Handlers that
    # take the controls get them as sent (preprocess=False): the core checks them, nothing is rounded.
    def started_pair():
        return gr.State(time_to_live=KEPT_FOR_S), gr.State(time_to_live=KEPT_FOR_S)

    live_started, replay_started = started_pair()
    sweep_live_started, sweep_replay_started = started_pair()
    opening = gr.State(time_to_live=KEPT_FOR_S)  # the tab a link opens on
    gpu, replays = dict(concurrency_id="gpu", concurrency_limit=1), \
        dict(concurrency_id="replay", concurrency_limit=REPLAYS_AT_ONCE)
    live = live_started.change(run_comparison, controls, [result, kept], api_name="compare",
                               show_progress_on=[verdict], preprocess=False, **gpu)
    replayed = replay_started.change(run_replay, controls, [result, kept], api_name="replay",
                                     show_progress_on=[verdict], preprocess=False, **replays)
    for measured in (live, replayed):
        measured.success(show, kept, views, api_visibility="private", concurrency_id="show",
                         concurrency_limit=REPLAYS_AT_ONCE).then(None, js=scroll_to("#measured-on"))
    swept = sweep_live_started.change(run_sweep, [*controls, seqs], [sweep_result, sweep_kept], api_name="sweep",
                                      show_progress_on=[sweep_verdict], preprocess=False, **gpu)
    sweep_replayed = sweep_replay_started.change(run_sweep_replay, [*controls, seqs], [sweep_result, sweep_kept],
                                                 api_name="sweep_replay", show_progress_on=[sweep_verdict],
                                                 preprocess=False, **replays)
    for measured in (swept, sweep_replayed):
        measured.success(show_sweep, sweep_kept, sweep_outputs, api_visibility="private", concurrency_id="show",
                         concurrency_limit=REPLAYS_AT_ONCE).then(None, js=scroll_to("#sweep-verdict strong"))

    run_button.click(route, source, [live_started, replay_started], api_visibility="private", preprocess=False
                     ).then(lambda: gr.Tabs(selected="compare"), None, modes, api_visibility="private", queue=False)
    sweep_button.click(route, source, [sweep_live_started, sweep_replay_started], api_visibility="private",
                       preprocess=False)
    stop_button.click(stop_sweep, None, None, api_visibility="private", queue=False)
    for button, name in zip(preset_buttons, PRESETS):
        button.click(lambda source, name=name: apply_preset(name, source), source, [a, b, *workload_controls],
                     api_visibility="private", queue=False, preprocess=False
                     ).success(route, source, [live_started, replay_started], api_visibility="private",
                               preprocess=False
                               ).then(lambda: gr.Tabs(selected="compare"), None, modes, api_visibility="private",
                                      queue=False)
    gr.on([c.input for c in controls], stale_notice, kept, stale, api_visibility="private", queue=False)
    gr.on([c.input for c in controls if c is not source], lambda: "", None, notice, api_visibility="private",
          queue=False)  # a notice about the last switch of source no longer describes these controls
    source.input(switch_source, [source, a, *workload_controls], [*workload_controls, notice],
                 api_visibility="private", queue=False, preprocess=False)
    source.change(sweep_plan, source, plan, api_visibility="private", queue=False, preprocess=False)
    gr.on([c.change for c in controls], guesses, controls, [guess_a, guess_b, coverage],
          api_visibility="private", queue=False, preprocess=False)
    opened = demo.load(prefill, None, [*controls, notice, seqs, modes, opening], api_visibility="private", queue=False
                       ).then(guesses, controls, [guess_a, guess_b, coverage], api_visibility="private", queue=False,
                              preprocess=False
                       ).then(share_link, controls, link, api_visibility="private", queue=False, preprocess=False
                       ).then(open_link, [opening, seqs, *controls],
                              [result, kept, *views, sweep_result, sweep_kept, *sweep_outputs],
                              api_visibility="private", preprocess=False, **replays)
    opened.then(None, js=scroll_to("#measured-on", "#sweep-verdict strong"))
    for click in (run_button.click, sweep_button.click, *(button.click for button in preset_buttons)):
        click(None, cancels=[opened], api_visibility="private", queue=False)  # the page's opening is overtaken

demo.validate_inputs = refuse_short_requests
# api_open=False: the REST routes (/gradio_api/run/compare, /gradio_api/api/compare) refuse queued events, so
# every measurement goes through the queue and its concurrency limit (/gradio_api/call/compare and clients do)
demo.queue(max_size=16, api_open=False)

LAUNCH = dict(ssr_mode=False, css=CSS, head=HEAD, theme=gr.themes.Default(primary_hue="orange"),
              state_session_capacity=SESSIONS_KEPT, max_file_size=MAX_REQUEST_BYTES,
              app_kwargs={"middleware": [Middleware(RequestGuard, max_bytes=MAX_REQUEST_BYTES)]})

if __name__ == "__main__":
    port = os.environ.get("PORT")  # Deta Space and most hosts; gradio reads GRADIO_SERVER_PORT itself
    demo.launch(server_port=int(port) if port else None, **LAUNCH)
