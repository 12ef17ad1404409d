"""Attention Profiler: two attention implementations side by side — guess, run, compare, explain.

The screen, top to bottom: header and environment line; controls and presets; the guesses;
the verdict and the chart; then A | B, each with its numbers, kernel table, notes and
downloads. UI only: numbers come from the profiling core, sentences from the explainer,
tables, cards and charts from profiling/reports.py.

    python app.py        # serves on $PORT, $GRADIO_SERVER_PORT or 7860
"""
from __future__ import annotations

try:  # ZeroGPU wants `spaces` imported before torch touches CUDA; elsewhere GPU() is a no-op
    import spaces
    on_gpu = spaces.GPU(duration=120)
except ImportError:
    def on_gpu(fn):
        return fn

import html
import inspect
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import gradio as gr
from fastapi import HTTPException
from starlette.middleware import Middleware
from starlette.responses import JSONResponse

from attention_variants import VARIANTS, get_variant, guess_for
from profiling import reports, scratch
from profiling.environment import detect
from profiling.explain import explain
from profiling.measurement import compare, other_work
from profiling.recording import RECORDED_DIR, find_recorded, recorded_runs, recorded_workloads, recordings
from profiling.results import Comparison
from profiling.workload import (LIMITS, LIVE_BUDGET_S, Workload, WorkloadError, canonical_dtype, check_time_budget,
                                choice, whole_number_from_text)

log = logging.getLogger("attention_profiler")
scratch.clean_stale_folders()  # what a crashed or restarted process left in the temp dir

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
# URL query parameter -> control, in the order of the compare endpoint's parameters.
QUERY_KEYS = ("source", "a", "b", "seq", "heads", "dtype", "batch", "head_dim", "causal", "rank")
DEFAULT_A, DEFAULT_B = "naive", "sdpa_flash"

# What one visitor may cost the server. The page's largest request is a few hundred bytes and the app takes
# no files. A session that was shown a result holds ~1.5 MB (gradio keeps each output's last value per
# session: the chart's PNG, tables, the JSON): only the most recent sessions are kept, each result for
# half an hour, so the server's memory levels off within ~50 MB of its start.
MAX_REQUEST_BYTES = 64 * 1024
KEPT_FOR_S = 30 * 60
SESSIONS_KEPT = 32
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


def refused(message: str, title: str) -> gr.Error:
    """A request refused for what it asked: one line in the server's log, no traceback; the message
    HTML-escaped, since gradio renders an error's message as HTML."""
    log.warning("refused: %s", message)
    return gr.Error(html.escape(message, quote=False), title=title, print_exception=False)


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
    runs = [find_recorded(recording, key, workload) for key in (a, b)]
    if None in runs:
        held = "; ".join(w.label() for w in recorded_workloads(recording))
        raise refused(f"The recording '{recording}' has no run of {workload.label()}. It holds: {held}.",
                      "Not in the recording")
    return explain(Comparison(*runs)).to_dict()


def run_comparison(source: str, a: str, b: str, seq_len: int, heads: int, dtype: str, batch: int,
                   head_dim: int, causal: bool, rank: int, progress=gr.Progress()) -> tuple[dict, str]:
    """Compare A and B on one workload. Returns what the client gets (Comparison.to_dict() plus the
    source, naming no server file) and what the session keeps on the server (the same with its files,
    as JSON text: a tenth of the memory of the dicts)."""
    source, a, b, workload = request_of(source, a, b, seq_len, heads, dtype, batch, head_dim, causal, rank)
    if source == LIVE:
        try:  # a live run holds the only measurement slot: refuse up front what would hold it too long
            check_time_budget(workload, (a, b))
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


def route(source: str) -> list:
    """Run: a live source starts the GPU's event, a recording the replays' (a fresh number starts it)."""
    started = time.monotonic_ns()
    return [started, gr.skip()] if source == LIVE else [gr.skip(), started]


def guesses(source, a, b, seq_len, heads, dtype, batch, head_dim, causal, rank) -> tuple[str, str]:
    """The guess for A and B on this workload, and whether each can run here at all (live only)."""
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
        reason = variant.supports(workload, ENV) if workload is not None and source == LIVE else None
        shown = workload or base_workload(source)  # controls that are not a workload yet: the base one's guess
        cards.append(reports.guess_card(side, variant, guess_for(key, shown), reason, cpu=shown.device == "cpu"))
    return cards[0], cards[1]


def share_link(request: gr.Request, *values) -> str:
    """A link that reproduces this comparison: the app's public address plus the controls as a query."""
    query = dict(zip(QUERY_KEYS, values))
    query["causal"] = str(bool(query["causal"])).lower()
    host = request.headers.get("x-forwarded-host")  # behind a proxy (Spaces), the public host
    if host:
        proto = request.headers.get("x-forwarded-proto", "https").split(",")[0]
        base = f"{proto}://{host.split(',')[0]}/"
    else:
        base = str(request.base_url)
    return f"{base}?{urlencode(query)}"


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
              "rank": base.rank}
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
            else:
                problems.append(f"{reports.literal(key)}: not a parameter here (use {', '.join(QUERY_KEYS)})")
        except WorkloadError as error:
            problems.append(f"{reports.literal(f'{key}={text}')}: {error.limit}")
    if len(problems) > MAX_NOTED:
        problems[MAX_NOTED:] = [f"and {len(problems) - MAX_NOTED} more"]
    return values, problems


def prefill(request: gr.Request) -> list:
    """Page load: the controls from the URL's query parameters; bad ones ignored, with a visible note."""
    values, problems = parse_query(dict(request.query_params))
    notice = ("⚠️ Ignored from the link: " + "; ".join(problems)) if problems else ""
    return [values[key] for key in QUERY_KEYS] + [notice]


def switch_source(source, a, seq_len, heads, dtype, batch, head_dim, causal, rank) -> list:
    """A recording holds a few workloads, a CPU manages only small ones: move to one that fits, and say so."""
    if source == LIVE:
        if ENV.device == "cuda":
            return [gr.skip()] * 8
        w = base_workload(LIVE)
        notice = f"Live on this CPU: a CPU-sized workload ({w.label()})."
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
        notice = ("The recording holds " + "; ".join(x.label() for x in recorded_workloads(source))
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


class BodyLimit:
    """ASGI middleware: a request body over `max_bytes` gets 413 at once when its Content-Length says so,
    else as soon as the bytes read pass the limit, before any handler parses it."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    def _too_large(self) -> str:
        return f"request body over {self.max_bytes} bytes: this app takes no files"

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if len(declared) > 12 or not declared.isdigit() or int(declared) > self.max_bytes:
            return await JSONResponse({"detail": self._too_large()}, status_code=413)(scope, receive, send)
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:  # a chunked body that grew past the limit: FastAPI answers 413
                raise HTTPException(413, detail=self._too_large())
            return message

        await self.app(scope, limited_receive, send)


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


SCROLL_TO_VERDICT = """() => {  // the answer first: bring a rendered result's headline into view
    const top = document.querySelector('#measured-on');
    if (top && top.innerText.trim()) top.scrollIntoView({block: 'start'});
}"""

CSS = """
.notes { border-left: 3px solid var(--color-accent); padding-left: 12px; }
#verdict { border: 1px solid var(--border-color-primary); border-radius: 8px; padding: 4px 14px; }
#chart { overflow-x: auto; }  /* on a phone the chart scrolls sideways instead of shrinking to a stamp */
#chart .matplotlib { align-items: flex-start; }
#chart img { min-width: 720px; }
"""

with gr.Blocks(title="Attention Profiler", delete_cache=(1800, 3600)) as demo:  # gradio's copies of downloads
    gr.Markdown("# Attention Profiler\nTwo attention implementations on the same inputs under `torch.profiler`: "
                "the kernels they launch, GPU and CPU time, memory, accuracy — and a note wherever the trace "
                "differs from the guess. After the blog post *Profiling in PyTorch (Part 3): Attention is all you "
                "profile*.")
    gr.Markdown(machine_line(), elem_id="machine")

    # controls and presets
    with gr.Row():
        source = gr.Radio(SOURCES, value=DEFAULT_SOURCE, label="Source", scale=2)
        a = gr.Dropdown(VARIANT_CHOICES, value=DEFAULT_A, label="Variant A")
        b = gr.Dropdown(VARIANT_CHOICES, value=DEFAULT_B, label="Variant B")
    default = base_workload(DEFAULT_SOURCE)
    with gr.Row():
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

    # the answer first: what was measured, the verdict (headline, then the top notes) and the chart
    stale = gr.Markdown(elem_id="stale")
    measured_on = gr.Markdown(elem_id="measured-on")
    verdict = gr.Markdown("*The verdict appears here after a run.*", elem_id="verdict")
    chart = gr.Plot(label="time per forward, A vs B", show_label=False, format="png", visible=False,
                    elem_id="chart")
    link = gr.Textbox(label="Link to this comparison", buttons=["copy"], interactive=False, elem_id="link")

    # what each side was expected to do
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
    kept = gr.State(time_to_live=KEPT_FOR_S)  # the last result with its files: on the server, never the client's

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
        files = view_files(comparison, figure, view_folder())
        where = (f"**{'Recorded' if recorded else 'Measured live'}** on {comparison.a.environment.summary()} · "
                 f"workload {comparison.a.workload.label()}")
        return [share_link(request, *controls_of(data["source"], comparison)), "", where,
                f"### Verdict\n\n{reports.verdict_markdown(comparison, reports.comparison_table(comparison))}",
                gr.Plot(figure, visible=True),
                *side_a.render(comparison, files), *side_b.render(comparison, files),
                gr.DownloadButton(value=files["json"], visible=True),
                gr.DownloadButton(value=files["png"], visible=True)]

    def open_link(request: gr.Request, *values) -> list:
        """Page load: a recorded comparison renders at once; a live one waits for a click on Run."""
        if values[0] == LIVE:
            return [gr.skip()] * (2 + len(views))
        result_dict, kept_json = run_replay(*values)
        return [result_dict, kept_json, *show(kept_json, request)]

    views = [link, stale, measured_on, verdict, chart, *side_a.outputs, *side_b.outputs, json_file, png_file]

    # events: every live measurement shares one concurrency group of size 1, so runs never overlap; replays
    # have their own group, so they never wait behind a live run. Run and the presets start one or the other
    # (`route`); the public compare endpoint takes both, in the GPU's group. Handlers that take the controls
    # get them as sent (preprocess=False): the core checks them, nothing is rounded.
    live_started, replay_started = gr.State(time_to_live=KEPT_FOR_S), gr.State(time_to_live=KEPT_FOR_S)
    live = live_started.change(run_comparison, controls, [result, kept], api_name="compare", concurrency_id="gpu",
                               concurrency_limit=1, show_progress_on=[verdict], preprocess=False)
    replayed = replay_started.change(run_replay, controls, [result, kept], api_visibility="private",
                                     concurrency_id="replay", concurrency_limit=REPLAYS_AT_ONCE,
                                     show_progress_on=[verdict], preprocess=False)
    for measured in (live, replayed):
        measured.success(show, kept, views, api_visibility="private", concurrency_id="show",
                         concurrency_limit=REPLAYS_AT_ONCE).then(None, js=SCROLL_TO_VERDICT)
    run_button.click(route, source, [live_started, replay_started], api_visibility="private", preprocess=False)
    for button, name in zip(preset_buttons, PRESETS):
        button.click(lambda source, name=name: apply_preset(name, source), source, [a, b, *workload_controls],
                     api_visibility="private", queue=False, preprocess=False
                     ).success(route, source, [live_started, replay_started], api_visibility="private",
                               preprocess=False)
    gr.on([c.input for c in controls], stale_notice, kept, stale, api_visibility="private", queue=False)
    gr.on([c.input for c in controls if c is not source], lambda: "", None, notice, api_visibility="private",
          queue=False)  # a notice about the last switch of source no longer describes these controls
    source.input(switch_source, [source, a, *workload_controls], [*workload_controls, notice],
                 api_visibility="private", queue=False, preprocess=False)
    gr.on([c.change for c in controls], guesses, controls, [guess_a, guess_b],
          api_visibility="private", queue=False, preprocess=False)
    demo.load(prefill, None, [*controls, notice], api_visibility="private", queue=False
              ).then(guesses, controls, [guess_a, guess_b], api_visibility="private", queue=False, preprocess=False
              ).then(share_link, controls, link, api_visibility="private", queue=False, preprocess=False
              ).then(open_link, controls, [result, kept, *views], api_visibility="private", preprocess=False,
                     concurrency_id="replay", concurrency_limit=REPLAYS_AT_ONCE).then(None, js=SCROLL_TO_VERDICT)

def refuse_short_requests(block_fn, inputs: list) -> None:
    """gradio's own check that a request sent every input raises a ValueError, logged with its traceback:
    the same check (it replaces Blocks.validate_inputs), refused in one line naming what the event takes."""
    if len(inputs) < len(block_fn.inputs):
        names = [name for name, p in inspect.signature(block_fn.fn).parameters.items()
                 if not isinstance(p.default, (gr.Progress, gr.Request)) and p.annotation != "gr.Request"]
        raise refused(f"{block_fn.api_name or block_fn.name} takes {len(block_fn.inputs)} values "
                      f"({', '.join(names)}); the request sent {len(inputs)}", "Not a request this app can run")


demo.validate_inputs = refuse_short_requests
# api_open=False: the REST routes (/gradio_api/run/compare, /gradio_api/api/compare) refuse queued events, so
# every measurement goes through the queue and its concurrency limit (/gradio_api/call/compare and clients do)
demo.queue(max_size=16, api_open=False)

LAUNCH = dict(ssr_mode=False, css=CSS, theme=gr.themes.Default(primary_hue="orange"),
              state_session_capacity=SESSIONS_KEPT, max_file_size=MAX_REQUEST_BYTES,
              app_kwargs={"middleware": [Middleware(BodyLimit, max_bytes=MAX_REQUEST_BYTES)]})

if __name__ == "__main__":
    port = os.environ.get("PORT")  # Deta Space and most hosts; gradio reads GRADIO_SERVER_PORT itself
    demo.launch(server_port=int(port) if port else None, **LAUNCH)
