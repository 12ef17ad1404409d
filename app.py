"""Attention Profiler: two attention implementations side by side — guess, run, compare, explain.

The screen, top to bottom: header and environment line; the source, A, B and Run; the workload's fields (one
control each) and the presets; then two tabs. "A vs B": the verdict and the chart, one call of each on a timeline,
the link, the guesses, then A | B, each with its numbers, kernel table, notes and downloads. "A vs B over S": a
sweep of the sequence length, its verdict, charts and table. Two views of the same page: `?view=present` (the
answer in large type beside the headline's figure) and `?view=embed` (no header, the answer first, for a blog).

UI only: every request goes through `handlers` and `profiling.session` (the command line's door too); words come
from the explainer and profiling/reports.py, charts from profiling/figures.py.

    python app.py        # serves on $PORT, $GRADIO_SERVER_PORT or 7860
"""
from __future__ import annotations

import handlers  # noqa: F401  (first: it imports ZeroGPU's `spaces` before anything touches CUDA)

import asyncio
import base64
import functools
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr
from gradio.components.plot import PlotData
from starlette.middleware import Middleware

from attention_variants import VARIANTS, guess_for
from handlers import (DEFAULT_SOURCE, ENV, MAX_REQUEST_BYTES, RECORDINGS, REPLAYS_AT_ONCE, SESSIONS_KEPT, Kept,
                      endpoint, kept, serve, served_trace, stop_sweep)
from links import MODES, LinkPreview, opening, prefill, share_link, view_links
from profiling import reports, scratch, session, startup, text
from profiling.budget import compile_clock
from profiling.explain import Explanation
from profiling.measurement import other_work
from profiling.recording import DECODE, FP8_PREFILL, LONG_DECODE, SPECULATIVE
from profiling.replay import find_recorded, nearest_recorded, recorded_sweeps, unrecorded_message
from profiling.request import KEYS, LIVE, LIVE_BUDGET_S, MAX_LENGTHS, SWEEP_AXES, Request, field_help, field_values
from profiling.results import Comparison
from profiling.timeline import run_timeline
from profiling.workload import FIELDS, NAMED, Refusal, Workload
from serving import RequestGuard, cap_waiting, draw_off_screen, limit_malloc_arenas, log, quiet_queue, refuse_short_requests

scratch.clean_stale_folders()  # what a crashed or restarted process left in the temp dir
limit_malloc_arenas()  # before gradio starts its worker threads
draw_off_screen()  # before matplotlib's import (after the server answers)
os.environ.setdefault("GRADIO_ANALYTICS_MAX_EVENTS", "1000")  # gradio keeps this many events' timings (10,000)

RUN_LABEL = "Run A vs B"
LIVE_LABEL = "live on this machine" if ENV.device == "cuda" else "live on this CPU"


def recording_label(env) -> str:
    """A recording's option under Source, short enough for three to share a narrow column: its GPU ("H200 runs"), and
    its torch where another recording of the same GPU needs telling apart (the full names: the measured line)."""
    twins = sum(text.machine(other) == text.machine(env) for other in RECORDINGS.values())
    torch = f", torch {'.'.join(env.torch_version.split('.')[:2])}" if twins > 1 else ""
    return f"{text.machine(env)} runs{torch}"


SOURCES = [(LIVE_LABEL, LIVE)] + [(recording_label(env), name) for name, env in RECORDINGS.items()]
VARIANT_CHOICES = [(f"{v.label}  ({v.key})", v.key) for v in VARIANTS.values()]

@dataclass(frozen=True)
class Preset:
    """A lesson in one click: A and B, and changes to the source's base workload (`recorded`: the changes on a
    recording, where it holds the lesson at another size; `cpu`: the A and B a CPU runs live, where a compile of
    ~15 s or a GPU-only kernel would teach nothing)."""
    a: str
    b: str
    changes: dict = field(default_factory=dict)
    recorded: dict | None = None
    cpu: tuple[str, str] | None = None


def recorded_changes(w: Workload) -> dict:
    """A recorded workload as changes to the source's base (a live CPU keeps its own batch and dtype where the
    workload has the blog's): `Workload.changes`."""
    return w.changes()


DECODE_LIVE = {"kv_heads": 2, "seq_len": 8192, "q_len": 1}  # on the source's base workload: 8 heads on a CPU

PRESETS = {
    "hidden copy": Preset("naive", "naive_inplace"),
    "math vs flash": Preset("sdpa_math", "sdpa_flash"),
    "flash vs cuDNN": Preset("sdpa_flash", "sdpa_cudnn"),
    "rank-3 trap": Preset("sdpa_auto", "sdpa_flash", {"rank": 3}),
    "fp32": Preset("sdpa_efficient", "sdpa_flash", {"dtype": "fp32"}),
    "training step": Preset("sdpa_flash", "sdpa_cudnn", {"passes": "fwd+bwd"}, cpu=("naive", "sdpa_flash")),
    "GQA": Preset("sdpa_efficient", "sdpa_cudnn", {"kv_heads": 2}, recorded=recorded_changes(NAMED["llama"]),
                  cpu=("naive", "sdpa_math")),
    "sliding window": Preset("sdpa_auto", "flex", {"mask": "window", "window": 256}, cpu=("naive", "sdpa_auto")),
    "FA4 vs cuDNN": Preset("sdpa_cudnn", "fa4"),
    # decode: one to four new queries per sequence against a KV cache, live at a size a CPU manages, recorded at
    # Llama's (profiling.recording.DECODE_MATRIX); paged, a CPU has no variant that reads a page table but compiled
    # flex (~15 s): it shows the refusals
    "decode step": Preset("sdpa_flash", "flex", DECODE_LIVE, recorded_changes(DECODE), cpu=("naive", "sdpa_flash")),
    "long-context decode": Preset("sdpa_flash", "fa4", DECODE_LIVE | {"seq_len": 65536}, recorded_changes(LONG_DECODE),
                                  cpu=("naive", "sdpa_flash")),
    "speculative decode": Preset("sdpa_auto", "flex", DECODE_LIVE | {"q_len": 4}, recorded_changes(SPECULATIVE),
                                 cpu=("sdpa_math", "sdpa_flash")),
    "paged KV": Preset("flex", "fa4", DECODE_LIVE | {"page_size": 16}, recorded_changes(DECODE.replace(page_size=16)),
                       cpu=("sdpa_flash", "naive")),
    # the serving engines' kernels and fp8 (GPU-only libraries): shown from the recording that holds them (`holds`)
    "FlashInfer decode": Preset("sdpa_flash", "flashinfer", DECODE_LIVE, recorded_changes(DECODE),
                                cpu=("naive", "sdpa_flash")),
    "FA3 vs FA4 decode": Preset("fa3", "fa4", DECODE_LIVE | {"seq_len": 65536}, recorded_changes(LONG_DECODE)),
    "FA3 fp8": Preset("fa3_fp8", "fa3", recorded=recorded_changes(FP8_PREFILL[0])),
    "fp8 KV cache": Preset("flashinfer_fp8", "flashinfer", DECODE_LIVE, recorded_changes(DECODE)),
}
def machine_line() -> str:
    line = f"**This machine:** {ENV.summary()}"
    if ENV.device == "cpu":
        cpu = Request.build(LIVE, "naive", "naive", {}, "cpu").workload.words()
        line += (" — no GPU: the page shows **recorded GPU runs**; **Source → live on this CPU** measures here, "
                 "smaller.") if DEFAULT_SOURCE != LIVE else f" — no GPU: live runs use a CPU-sized workload ({cpu})."
    return line


def route(source: str) -> list:
    """Run: a live source starts the GPU's event, a recording the replays' (a fresh number starts it)."""
    started = time.monotonic_ns()
    return [started, gr.skip()] if source == LIVE else [gr.skip(), started]


# -- what the page shows before and around a run ----------------------------------------------------------
def guesses(*values) -> tuple:
    """The guess for A and B on this workload, whether each can run here at all (live only), and what Run would
    refuse (the session's own plan, asked as the controls change, the check Run itself makes): a bad combination, a
    workload too large, or one the recording chosen lacks, naming the nearest it has. Run is off while it would be
    refused, the reason beside it."""
    said = session.preview(dict(zip(KEYS, values)), ENV.device, budget_s=LIVE_BUDGET_S[ENV.device])
    request = said.request
    source = values[0] if isinstance(values[0], str) and values[0] in (LIVE, *RECORDINGS) else DEFAULT_SOURCE
    shown = request.workload if request else Request.build(source, "naive", "naive", {}, ENV.device).workload
    live = request is not None and request.live
    cards = []
    for side, key in (("A", values[1]), ("B", values[2])):
        variant = VARIANTS.get(key) if isinstance(key, str) else None
        if variant is None:
            cards.append(f"**{side}**: unknown variant {reports.literal(key)}")
            continue
        compile_s = compile_clock.estimate(shown.device, variant, shown.training) \
            if live and (variant.compiled or variant.jit_s) else None
        cards.append(reports.guess_card(side, variant, guess_for(key, shown), said.reasons.get(key),
                                        cpu=shown.device == "cpu", compile_estimate=compile_s, workload=shown))
    reason = reports.refusal_markdown(said.refusal) if said.refusal else ""
    return cards[0], cards[1], reason, gr.Button(interactive=said.refusal is None)


def mask_picture(*values):
    """The controls' mask as a picture (which query sees which key); nothing new while they are refused."""
    from profiling import figures

    try:
        w = Request.from_values(dict(zip(KEYS, values)), ENV.device).workload
    except Refusal:
        return gr.skip()
    return figures.mask_figure(w)


def documents_set(lengths) -> list:
    """B and S as packed documents set them (their count, the longest), put in their controls as the lengths are
    typed: the controls then show what will run, and the request agrees with itself (a batch or seq_len that
    contradicts the lengths is refused in one line). Lengths not yet readable, or none, leave B and S as they are."""
    spec = next(f.metadata["spec"] for f in FIELDS if f.name == "lengths")
    try:
        documents = spec.check("lengths", lengths)
    except Refusal:  # the coverage line says what is wrong with them
        documents = None
    return [len(documents), max(documents)] if documents else [gr.skip(), gr.skip()]


def switch_source(source, a, *fields) -> list:
    """A recording holds a few workloads, a CPU manages only small ones: move to one that fits, and say so."""
    skip = [gr.skip()] * (len(FIELDS) + 1)
    if source == LIVE:
        if ENV.device == "cuda":
            return skip
        w = Request.build(LIVE, a if a in VARIANTS else "naive", "naive", {}, ENV.device).workload
        notice = f"Live on this CPU: a CPU-sized workload ({w.words()})."
    elif not isinstance(source, str) or source not in RECORDINGS:
        return skip
    else:
        try:
            current = Request.build(source, a, "naive", dict(zip((f.name for f in FIELDS), fields)), ENV.device)
        except Refusal:
            current = None
        if current is not None and find_recorded(source, a, current.workload) is not None:
            return skip
        w = Request.build(source, "naive", "naive", {}, ENV.device).workload
        where = "the blog's workload"
        if find_recorded(source, a, w) is None:  # a recording begun part by part lacks A there too: the nearest that
            near = nearest_recorded(source, current.workload if current is not None else w, (a,), n=1)  # holds it
            if near and find_recorded(source, a, near[0]) is not None:
                w, where = near[0], f"the nearest workload recorded with {a}"
        missing = (unrecorded_message(source, current.workload, (a,)) or "") + " " if current is not None else ""
        notice = f"{missing.lstrip()}Moved to {where}, {w.words()}."
    return field_values(w, page=True) + [notice]


def holds(source: str, preset: Preset) -> bool:
    """Whether the recording `source` holds both sides of the preset's lesson."""
    try:
        w = Request.build(source, preset.a, preset.b, preset.recorded or preset.changes, ENV.device).workload
    except Refusal:
        return False
    return all(find_recorded(source, key, w) is not None for key in (preset.a, preset.b))


def apply_preset(name: str, source: str) -> list:
    """The source, A, B and the fields a preset sets. On a recording that lacks its lesson, the first recording that
    holds it is shown instead (the serving engines' kernels are recorded on one GPU only, for now): the Source
    control and the line above the verdict ("Recorded on NVIDIA H100 …") say so, and nothing is added above the
    verdict to push it down."""
    preset = PRESETS[name]
    source = source if source in (LIVE, *RECORDINGS) else DEFAULT_SOURCE
    if source != LIVE and not holds(source, preset):
        source = next((r for r in RECORDINGS if holds(r, preset)), source)
    a, b = preset.cpu if source == LIVE and ENV.device == "cpu" and preset.cpu else (preset.a, preset.b)
    changes = preset.recorded if source != LIVE and preset.recorded else preset.changes
    w = Request.build(source, a, b, changes, ENV.device).workload
    return [source, a, b, *field_values(w, page=True)]


def sweep_plan(source) -> str:
    """What a sweep from this source will do, said before it starts: its budget live, what is recorded."""
    if not isinstance(source, str):
        return ""
    if source == LIVE:
        device = "GPU" if ENV.device == "cuda" else "CPU"
        return (f"Live on this {device}: powers of two from 128 up to the longest it can measure in its memory and "
                f"time, unless you list them. The sweep predicts its length after the first S and stops cleanly "
                f"after {text.seconds(LIVE_BUDGET_S[ENV.device])} (or on Stop) with the points done.")
    if source in RECORDINGS:
        held = "; ".join(f"{s.workload.family(s.axis)}, {text.point(s.axis, s.seq_lens[0])}…{text.count(s.seq_lens[-1])} "
                         f"({len(s.variants)} variants)" for s in recorded_sweeps(source))
        return f"Recorded sweeps {text.on_device(RECORDINGS[source])}: {held}."
    return ""


# -- rendering a kept result ---------------------------------------------------------------------------
def shown(drawn: bytes | None) -> dict:
    """A drawn chart (`png`) for one of the page's plots, shown (hidden when there is none): handed to gradio as the
    data URL its Plot would make of the figure, so no chart is drawn twice. An update, not a gr.Plot (whose
    constructor would draw)."""
    if drawn is None:
        return gr.update(value=None, visible=False)
    return gr.update(value=PlotData(type="matplotlib", plot="data:image/png;base64," + base64.b64encode(drawn).decode()),
                     visible=True)


@dataclass
class Charts:
    """A comparison's charts as the PNGs the page shows and its downloads hold."""
    chart: bytes             # time per call, A vs B
    present: bytes           # the presentation's one chart
    lanes: bytes | None      # one call of each on a timeline; None where a side has no trace
    timelines: tuple | None  # the two timelines the lanes draw
    roofline: bytes | None = None  # A and B against the GPU's roofs; None where there is none (`roofline_outputs` says why)
    present_roofline: bytes | None = None  # the same in the stage's large type (`present_roofline_figure`)


def charts(data: Kept) -> Charts:
    """A kept comparison's charts, each drawn once per answer (`figures.DRAWN`, by the answer's text: a replay's
    is the same every time), for a light page and a dark one alike; every figure says what it is of (the answer's
    `measured` line, as in the JSON: a saved PNG still says it)."""
    from profiling import figures  # matplotlib takes ~1 s to import: never at start (see once_serving)

    comparison, measured = data.answer.result, data.answer.measured
    drawn = functools.partial(figures.DRAWN.png, data.text)
    chart = drawn("chart", lambda: figures.caption(figures.timing_figure(comparison, dark=None), measured, dark=None))
    present = drawn("present", lambda: figures.caption(figures.present_figure(comparison), measured, dark=None,
                                                       size=figures.PRESENT_PT))
    roof = drawn("roofline", lambda: roofline_figure(comparison, measured))
    present_roof = drawn("present roofline", lambda: present_roofline_figure(comparison, measured))
    try:
        ta, tb = run_timeline(comparison.a), run_timeline(comparison.b)
    except ValueError:  # a side that did not run, or a trace pruned since
        return Charts(chart, present, None, None, roof, present_roof)
    lanes = drawn("timeline", lambda: figures.caption(figures.timeline_figure(ta, tb, dark=None), measured, dark=None))
    return Charts(chart, present, lanes, (ta, tb), roof, present_roof)


def roofline_figure(result, measured: str):
    """The roofline of a comparison or a sweep, captioned with what was measured (None where it has none)."""
    from profiling import figures, roofline

    figure = figures.roofline_figure(result, dark=None)
    if figure is None:
        return None
    return figures.caption(figure, f"{measured.rstrip('.')}. {roofline.caption(roofline.runs(result))}", dark=None)


def present_roofline_figure(result, measured: str):
    """The stage's roofline: the same points and roofs in its large type, tall as its other figure, captioned as that
    figure is with what was measured (the key names each roof, measured or the datasheet's); None where it has none."""
    from profiling import figures

    figure = figures.roofline_figure(result, dark=None, present=True)
    return None if figure is None else figures.caption(figure, measured, dark=None, size=figures.PRESENT_PT)


def roofline_outputs(result, drawn: bytes | None, path: Path, present: bytes | None) -> list:
    """The roofline's plot, the line that says why there is none, and its PNG download; then the stage's (`present`)
    and the embed's fold with the page's figure in it (shown only where there is one)."""
    from profiling import roofline

    if drawn is not None:
        path.write_bytes(drawn)
    return [shown(drawn), "" if drawn is not None else (roofline.refusal(roofline.runs(result)) or ""),
            gr.DownloadButton(value=path if drawn is not None else None, visible=drawn is not None),
            shown(present), gr.Accordion(visible=drawn is not None), shown(drawn)]


def show(result_id, http: gr.Request) -> list:
    """Render a kept comparison onto every output of the "A vs B" tab, with the link to it. Rendering shares the
    CPU with any live measurement, which marks its run when it does (`other_work`)."""
    data = kept(result_id, "compare")
    with other_work():
        request, comparison, explanation = data.answer.request, data.answer.result, data.answer.explanation
        measured = data.answer.measured
        drawn = charts(data)
        folder = scratch.view_folder()
        files = reports.export(data.text, comparison, drawn.chart, folder)
        for side, run in (("a", comparison.a), ("b", comparison.b)):
            trace = served_trace(run.trace_path)
            if trace:
                files[f"{side}_trace"] = Path(shutil.copy(trace, folder / f"{side}_{trace.name}"))
        if drawn.timelines:
            caption = reports.timeline_caption(*drawn.timelines, comparison.a.call, comparison.a.phase)
            files["timeline"] = folder / f"timeline_{comparison.a.variant}_vs_{comparison.b.variant}.png"
            files["timeline"].write_bytes(drawn.lanes)
        else:
            caption = "No timeline: a side has no trace (it did not run, or its trace is gone)."
        a, w = comparison.a, comparison.workload
        where = (f"**{'Measured live' if request.live else 'Recorded'}** on {a.environment.summary()} · "
                 f"workload {w.words()}{text.quantised_sides(comparison.quantised_sides())}"
                 + ("" if request.live else f" · recording {request.source}"))
        busy = text.machine_load(comparison.a, comparison.b) if request.live else ""
        where += f"  \n⏱️ While it ran: {busy}" if busy else ""
        link = share_link(http, request)
        return [link, view_links(link), "", where,
                reports.verdict_markdown(explanation, reports.comparison_table(comparison)),
                reports.present_markdown(explanation, measured), shown(drawn.chart), shown(drawn.present),
                caption,
                shown(drawn.lanes),
                gr.DownloadButton(value=files.get("timeline"), visible="timeline" in files),
                *side_a.render(comparison, explanation, files), *side_b.render(comparison, explanation, files),
                gr.DownloadButton(value=files["json"], visible=True), gr.DownloadButton(value=files["png"], visible=True),
                full_page_line(link),
                *roofline_outputs(comparison, drawn.roofline,
                                  folder / f"roofline_{comparison.a.variant}_vs_{comparison.b.variant}.png",
                                  drawn.present_roofline)]


def roofline_block(name: str) -> tuple:
    """Under a tab's chart: the roofline and the line that says why there is none (the full page's; its PNG download
    sits beside the chart's), the stage's roofline (its large type, beside its other figure: `present_roofline_figure`)
    and the embed's fold holding the page's figure (the README's 760×1400 frame holds the answer and the controls; a
    reader who opens it scrolls the frame)."""
    hidden = ["not-in-present", "not-in-embed"]
    page = (gr.Plot(show_label=False, format="png", visible=False, elem_id=name, elem_classes=hidden),
            gr.Markdown(elem_id=f"{name}-line", elem_classes=hidden))
    stage = gr.Plot(show_label=False, format="png", visible=False,
                    elem_id=f"{name.removesuffix('roofline')}present-roofline")
    with gr.Accordion(EMBED_ROOFLINE, open=False, visible=False, elem_id=f"embed-{name}",
                      elem_classes="only-in-embed") as fold:
        folded = gr.Plot(show_label=False, format="png", visible=False, elem_id=f"embed-{name}-plot")
    return (*page, stage, fold, folded)


EMBED_ROOFLINE = "The roofline: each run against the GPU's roofs"


def full_page_line(link: str) -> str:
    """The embed's way to the details it leaves out: the same result on the full page (the server's own link, in
    the page view: it names no view)."""
    return f"[The timeline, the kernel tables and every note: this result on the full page ↗]({link})"


def show_sweep(result_id, http: gr.Request) -> list:
    """Render a kept sweep: its verdict and notes, charts, every point, downloads and link."""
    from profiling import figures

    data = kept(result_id, "sweep")
    with other_work():
        result, explanation, measured = data.answer.result, data.answer.explanation, data.answer.measured
        drawn = functools.partial(figures.DRAWN.png, data.text)  # each chart drawn once per answer
        chart = drawn("sweep", lambda: figures.caption(figures.sweep_figure(result, dark=None), measured, dark=None))
        folder = scratch.view_folder()
        name = f"sweep_{result.a}_vs_{result.b}"
        files = {"json": folder / f"{name}.json", "png": folder / f"{name}.png"}
        files["json"].write_text(data.text)
        files["png"].write_bytes(chart)
        link = share_link(http, data.answer.request, mode="sweep")  # the request as asked: its S stays the tab's
        return [link, view_links(link), reports.sweep_markdown(explanation, result.axis, measured),
                reports.present_markdown(explanation, measured), shown(chart),
                shown(drawn("present sweep", lambda: figures.caption(figures.present_sweep_figure(result), measured,
                                                                     dark=None, size=figures.PRESENT_PT))),
                gr.Dataframe(reports.sweep_table(result), visible=True),
                gr.DownloadButton(value=files["json"], visible=True), gr.DownloadButton(value=files["png"], visible=True),
                *roofline_outputs(result, drawn("roofline", lambda: roofline_figure(result, measured)),
                                  folder / f"roofline_{result.a}_vs_{result.b}.png",
                                  drawn("present roofline", lambda: present_roofline_figure(result, measured)))]


STALE = "⚠️ **Controls changed since this result** — Run to update."


def stale_notice(result_id) -> str:
    """Controls edited by hand while a result is on screen: the result no longer matches them."""
    return STALE if result_id else ""


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
            with gr.Accordion(f"{side}: host (CPU) ops of one call (a forward, or a training step), profiled",
                              open=False):
                self.host = gr.Dataframe(interactive=False, max_height=300, visible=False, elem_id=f"{key}-host")
            self.notes = gr.Markdown(elem_id=f"{key}-notes", elem_classes="notes")
            with gr.Row():
                self.trace = gr.DownloadButton("Chrome trace (Perfetto)", visible=False, size="sm",
                                               elem_id=f"{key}-trace")
                self.csv = gr.DownloadButton("kernel table (CSV)", visible=False, size="sm", elem_id=f"{key}-csv")

    @property
    def outputs(self) -> list:
        return [self.card, self.table, self.full, self.host, self.notes, self.trace, self.csv]

    def render(self, comparison: Comparison, explanation: Explanation, files: dict) -> list:
        key = self.side.lower()
        run = comparison.a if key == "a" else comparison.b
        return [reports.run_card(self.side, run, VARIANTS[run.variant].label),
                gr.Dataframe(reports.kernel_summary(run), visible=bool(run.kernels),
                             label=f"{self.side}: {'kernels' if run.environment.device == 'cuda' else 'aten ops'} per "
                                   f"{run.phase}"),
                gr.Dataframe(reports.kernel_table(run), visible=bool(run.kernels)),
                gr.Dataframe(reports.host_ops_table(run), visible=bool(run.host_ops),
                             label=f"{self.side}: host (CPU) ops of one profiled "
                                   f"{'training step' if run.call == 'step' else run.call}"),
                f"#### Notes on {self.side}\n\n{reports.side_notes_markdown(explanation, key)}",
                gr.DownloadButton(value=files.get(f"{key}_trace"), visible=f"{key}_trace" in files),
                gr.DownloadButton(value=files.get(f"{key}_csv"), visible=f"{key}_csv" in files)]


def control(f):
    """The page's control of one workload field, made from its spec, documented in the API as the spec takes it."""
    spec, default = f.metadata["spec"], f.default
    if spec.boolean:
        component = gr.Checkbox(default, label=spec.label, elem_id=f"field-{f.name}", visible=spec.page)
    elif spec.items:  # a list, written as text ("512, 1536"): the same rule as a link's and the command line's
        component = gr.Textbox(spec.spell(default), label=spec.label, placeholder=spec.empty or None,
                               elem_id=f"field-{f.name}", elem_classes="wide", visible=spec.page)
    elif spec.limits:
        component = gr.Number(default, precision=None if spec.real else 0, label=spec.label,
                              placeholder=spec.empty or None, elem_id=f"field-{f.name}", visible=spec.page)
    else:
        choices = list(zip(spec.labels or spec.choices, spec.choices))
        if spec.optional:  # its empty entry, so that a choice can be taken back ("as dtype")
            choices, default = [(spec.empty or "none", "")] + choices, "" if default is None else default
        wide = max(len(str(x)) for x, _ in choices) > 8  # spans two columns of the grid (page.css)
        component = gr.Dropdown(choices, value=default, label=spec.label,
                                elem_id=f"field-{f.name}", elem_classes="wide" if wide else None, visible=spec.page)
    return documented(component, field_schema(spec))


def field_schema(spec) -> dict:
    """The JSON schema of what a field's spec takes, exactly: its type (a rank is the int 4, never "4"), its limits,
    and None where the field is optional. gradio's own says a Dropdown's choices are strings whatever their type and
    a Number is never empty; and gradio_client writes an enum's values as strings, so non-text choices are consts."""
    if spec.boolean:
        schema = {"type": "boolean"}
    elif spec.items:
        schema = {"type": "string", "description": f"up to {spec.items} whole numbers between {spec.limits[0]} and "
                                                   f"{spec.limits[1]}, such as {spec.example}; empty: {spec.empty}"}
    elif spec.limits and spec.real:
        schema = {"type": "number", "exclusiveMinimum": spec.limits[0], "maximum": spec.limits[1]}
    elif spec.limits:
        schema = {"type": "integer", "minimum": spec.limits[0], "maximum": spec.limits[1]}
    elif all(isinstance(c, str) for c in spec.choices):
        schema = {"type": "string", "enum": list(spec.choices)}
    else:
        schema = {"anyOf": [{"const": c} for c in spec.choices]}
    return {"anyOf": [schema, {"type": "null"}]} if spec.optional else schema


def documented(component, schema: dict):
    """`component`, its API info set to `schema`. On the instance: a subclass of a gradio component would make gradio
    write a .pyi stub of it beside this file at every start."""
    component.api_info = lambda: schema
    return component


def scroll_to(*selectors: str) -> str:
    """JS, after a click: bring the first rendered, visible one of `selectors` into view only if it is not, only as
    far as needed, and only within this document (never scrollIntoView: in an iframe it scrolls the host page). The
    embed view never scrolls itself: it fits its frame, and the reader's place in the host page is theirs."""
    return f"""() => {{
    if (document.documentElement.dataset.view === 'embed') return;
    for (const selector of {list(selectors)!r}) {{
        const top = document.querySelector(selector);
        if (!top || top.offsetParent === null || !top.innerText.trim()) continue;
        const box = top.getBoundingClientRect(), fits = Math.min(box.height, 64);  // its first lines
        if (box.top < 0) window.scrollBy(0, box.top - 8);
        else if (box.top + fits > window.innerHeight) window.scrollBy(0, box.top + fits - window.innerHeight + 8);
        return;
    }}
}}"""


CSS = (Path(__file__).parent / "page.css").read_text()


def page_head() -> str:
    """The page's head, with the stage figures' width to height, for its stylesheet to size them as drawn."""
    from profiling.figures import PRESENT_HEIGHT_IN, PRESENT_WIDTH_IN

    ratio = PRESENT_WIDTH_IN / PRESENT_HEIGHT_IN
    return (Path(__file__).parent / "page_head.html").read_text() + \
        f"<style>html {{ --stage-figure-ratio: {ratio:.4f}; }}</style>"


HEAD = page_head()

# delete_cache: gradio's copies of downloads. analytics_enabled=False: gradio would otherwise fetch its latest version
# from api.gradio.app as the page is built and post usage data at launch; this app reaches nothing beyond its own host.
BLOCKS = dict(title="Attention Profiler", delete_cache=(1800, 3600), analytics_enabled=False)

# gradio builds its web app once, at launch (not also as the page is made and queued: profiling/startup.py)
with startup.app_built_at_launch(), gr.Blocks(**BLOCKS) as demo:
    gr.Markdown("# Attention Profiler\nTwo attention implementations, the same inputs, under PyTorch's profiler: "
                "what the trace shows against the guess.  \n" + machine_line(),
                elem_id="machine", elem_classes="page-only")

    # controls and presets: shared by both tabs
    with gr.Row():
        source = gr.Radio(SOURCES, value=DEFAULT_SOURCE, label="Source", scale=2,
                          elem_classes=["not-in-present", "not-in-embed"])
        a = gr.Dropdown(VARIANT_CHOICES, value="naive", label="Variant A", min_width=240, elem_id="pick-a")
        b = gr.Dropdown(VARIANT_CHOICES, value="sdpa_flash", label="Variant B", min_width=240, elem_id="pick-b")
        run_button = gr.Button(RUN_LABEL, variant="primary", elem_id="run", scale=0, min_width=130)
    coverage = gr.Markdown(elem_id="coverage")  # what Run would refuse, flagged as it is typed (Run is off meanwhile)
    with gr.Row(elem_id="fields", elem_classes=["not-in-present", "not-in-embed"]):
        fields = [control(f) for f in FIELDS]
    controls = [source, a, b, *fields]
    field = dict(zip((f.name for f in FIELDS), fields))
    with gr.Row(elem_id="presets"):
        gr.Markdown("One click, one lesson:", elem_id="presets-label")
        preset_buttons = [gr.Button(name, size="sm", elem_id=f"preset-{i}", min_width=60, scale=0)
                          for i, name in enumerate(PRESETS)]
    notice = gr.Markdown(elem_id="notice")

    with gr.Tabs(elem_id="modes") as modes:
        with gr.Tab(MODES["compare"], id="compare"):
            # the answer first: what was measured, the verdict (headline, then the top notes) and the chart
            stale = gr.Markdown(elem_id="stale")
            measured_on = gr.Markdown(elem_id="measured-on")
            with gr.Column(elem_id="answer"):
                verdict = gr.Markdown("*The verdict appears here after a run.*", elem_id="verdict",
                                      elem_classes="not-in-present")
                present = gr.Markdown(elem_id="present")  # the headline and top notes in large type (?view=present)
                chart = gr.Plot(label="time per call, A vs B", show_label=False, format="png", visible=False,
                                elem_id="chart")
                present_chart = gr.Plot(show_label=False, format="png", visible=False, elem_id="present-chart")
                roofline, roofline_line, present_roofline, embed_box, embed_roofline = roofline_block("roofline")
            full_page = gr.Markdown(elem_id="full-page", elem_classes="only-in-embed")
            with gr.Accordion("One call on a timeline: CPU and GPU lanes", open=True,
                              elem_classes=["not-in-present", "not-in-embed"]):
                timeline_caption = gr.Markdown(elem_id="timeline-caption")
                timeline = gr.Plot(show_label=False, format="png", visible=False, elem_id="timeline")
                timeline_file = gr.DownloadButton("timeline (PNG)", visible=False, size="sm", elem_id="timeline-png")
            with gr.Group(elem_classes="not-in-present"):
                link = gr.Textbox(label="Link to this comparison", buttons=["copy"], interactive=False, elem_id="link",
                                  elem_classes="not-in-embed")
                views_line = gr.Markdown(elem_id="views", elem_classes="not-in-embed")
            with gr.Column(elem_classes=["not-in-present", "not-in-embed"]):
                gr.Markdown("### The guess, before anything runs")
                with gr.Row():
                    with gr.Column(min_width=320):
                        guess_a = gr.Markdown(elem_id="guess-a")
                    with gr.Column(min_width=320):
                        guess_b = gr.Markdown(elem_id="guess-b")
                with gr.Row():
                    side_a, side_b = Side("A"), Side("B")
                with gr.Row():
                    json_file = gr.DownloadButton("comparison (JSON)", visible=False, size="sm", elem_id="json")
                    png_file = gr.DownloadButton("chart (PNG)", visible=False, size="sm", elem_id="png")
                    roofline_file = gr.DownloadButton("roofline (PNG)", visible=False, size="sm", elem_id="roofline-png")
                with gr.Accordion("Raw result (what the API returns)", open=False):
                    result = gr.JSON(label="comparison", elem_id="result")

        with gr.Tab(MODES["sweep"], id="sweep"):
            with gr.Row(elem_classes=["not-in-present", "not-in-embed"]):  # an embed reads the sweep it links to
                seqs = gr.Textbox(label="sequence lengths S (or batches B)", elem_id="seqs", scale=3, min_width=260,
                                  placeholder="empty: powers of two (S from 128, B from 1) up to the largest that fits",
                                  info=f"A and B at each, the other controls fixed; up to {MAX_LENGTHS} lengths")
                documented(seqs, {"anyOf": [{"type": "string"}, {"type": "null"}]})  # None, as empty: the plan's
                axis = documented(gr.Radio([("over S", "seq_len"), ("over the batch B", "batch")], value="seq_len",
                                           label="sweep", elem_id="sweep-axis", scale=1, min_width=160,
                                           info="the values above are of this field"),
                                  {"anyOf": [{"type": "string", "enum": list(SWEEP_AXES)}, {"type": "null"}]})
                with gr.Column(scale=1, min_width=200):
                    sweep_button = gr.Button("Sweep A and B", variant="primary", elem_id="sweep-run")
                    stop_button = gr.Button("Stop the sweep", size="sm", elem_id="sweep-stop")
            plan = gr.Markdown(sweep_plan(DEFAULT_SOURCE), elem_id="sweep-plan",
                               elem_classes=["not-in-present", "not-in-embed"])
            with gr.Column(elem_id="sweep-answer"):
                sweep_verdict = gr.Markdown("*The sweep's verdict appears here after a sweep.*",
                                            elem_id="sweep-verdict")
                sweep_present = gr.Markdown(elem_id="sweep-present")
                sweep_chart = gr.Plot(show_label=False, format="png", visible=False, elem_id="sweep-chart")
                sweep_present_chart = gr.Plot(show_label=False, format="png", visible=False,
                                              elem_id="sweep-present-chart")
                (sweep_roofline, sweep_roofline_line, sweep_present_roofline, sweep_embed_box,
                 sweep_embed_roofline) = roofline_block("sweep-roofline")
            with gr.Group(elem_classes=["not-in-present", "not-in-embed"]):
                sweep_link = gr.Textbox(label="Link to this sweep", buttons=["copy"], interactive=False,
                                        elem_id="sweep-link")
                sweep_views = gr.Markdown(elem_id="sweep-views")
            with gr.Column(elem_classes=["not-in-present", "not-in-embed"]):
                sweep_table = gr.Dataframe(label="every point", visible=False, interactive=False, max_height=400,
                                           buttons=["fullscreen", "copy"], elem_id="sweep-table")
                with gr.Row():
                    sweep_json = gr.DownloadButton("sweep (JSON)", visible=False, size="sm", elem_id="sweep-json")
                    sweep_png = gr.DownloadButton("charts (PNG)", visible=False, size="sm", elem_id="sweep-png")
                    sweep_roofline_file = gr.DownloadButton("roofline (PNG)", visible=False, size="sm",
                                                            elem_id="sweep-roofline-png")
                with gr.Accordion("Raw sweep (what the API returns)", open=False):
                    sweep_result = gr.JSON(label="sweep", elem_id="sweep-result")

    # the field guide, below the answer: the first screen keeps the headline
    with gr.Accordion("What each field means (the command line's --help, word for word)", open=False,
                      elem_id="field-help", elem_classes=["not-in-present", "not-in-embed"]):
        with gr.Row():
            gr.Markdown("\n".join(f"- **{reports.literal('--' + f.metadata['spec'].query.replace('_', '-'))}** "
                                   f"{field_help(f)}" for f in FIELDS))
            mask_picture_plot = gr.Plot(show_label=False, format="png", elem_id="mask-picture", min_width=200)

    # what the page holds between events: the kept results' ids (in the page, so no other visitor's session can
    # evict them), the triggers of the two queues, and the tab a link opens on
    result_id = gr.Textbox(visible=False, elem_id="result-id")
    sweep_id = gr.Textbox(visible=False, elem_id="sweep-id")
    live_started, replay_started, sweep_live_started, sweep_replay_started = (gr.State() for _ in range(4))

    views = [link, views_line, stale, measured_on, verdict, present, chart, present_chart, timeline_caption, timeline,
             timeline_file, *side_a.outputs, *side_b.outputs, json_file, png_file, full_page,
             roofline, roofline_line, roofline_file, present_roofline, embed_box, embed_roofline]
    sweep_outputs = [sweep_link, sweep_views, sweep_verdict, sweep_present, sweep_chart, sweep_present_chart,
                     sweep_table, sweep_json, sweep_png, sweep_roofline, sweep_roofline_line, sweep_roofline_file,
                     sweep_present_roofline, sweep_embed_box, sweep_embed_roofline]

    # Events: every live measurement (a comparison or a sweep) shares one concurrency group of size 1, so runs
    # never overlap; replays have their own group, so they never wait behind a live run. The public endpoints
    # return the answer; the page's own (private) events also keep it and render it. Handlers take the controls
    # as sent (preprocess=False): the core checks them, nothing is rounded.
    gpu = dict(concurrency_id="gpu", concurrency_limit=1, preprocess=False)
    replays = dict(concurrency_id="replay", concurrency_limit=REPLAYS_AT_ONCE, preprocess=False)
    shows = dict(api_visibility="private", concurrency_id="show", concurrency_limit=REPLAYS_AT_ONCE)
    never = gr.State()  # fires no event of the page: the public endpoints hang on it, for API clients alone
    # the replays' endpoints take a recording only: their source, documented so, is a control the page never shows
    recorded = gr.Radio(SOURCES[1:], value=next(iter(RECORDINGS), None), label="Source",  # the one holding most
                        visible=False)
    for kind, extra, output in (("compare", [], result), ("sweep", [seqs, axis], sweep_result)):
        for live, group in ((True, gpu), (False, replays)):
            name = kind if live else "replay" if kind == "compare" else "sweep_replay"
            inputs = [source if live else recorded, *controls[1:], *extra]
            never.change(endpoint(kind, live, page=False), inputs, output, api_name=name, **group)
    live_run = live_started.change(endpoint("compare", True, True), controls, [result, result_id],
                                   api_visibility="private", show_progress_on=[verdict], **gpu)
    replay_run = replay_started.change(endpoint("compare", False, True), controls, [result, result_id],
                                       api_visibility="private", show_progress_on=[verdict], **replays)
    for ran in (live_run, replay_run):
        ran.success(show, result_id, views, **shows).then(None, js=scroll_to("#verdict strong"))
    sweep_run = sweep_live_started.change(endpoint("sweep", True, True), [*controls, seqs, axis],
                                          [sweep_result, sweep_id],
                                          api_visibility="private", show_progress_on=[sweep_verdict], **gpu)
    sweep_replay = sweep_replay_started.change(endpoint("sweep", False, True), [*controls, seqs, axis],
                                               [sweep_result, sweep_id], api_visibility="private",
                                               show_progress_on=[sweep_verdict], **replays)
    for ran in (sweep_run, sweep_replay):
        ran.success(show_sweep, sweep_id, sweep_outputs, **shows).then(None, js=scroll_to("#sweep-verdict strong"))

    run_button.click(route, source, [live_started, replay_started], api_visibility="private", preprocess=False
                     ).then(lambda: gr.Tabs(selected="compare"), None, modes, api_visibility="private", queue=False)
    sweep_button.click(route, source, [sweep_live_started, sweep_replay_started], api_visibility="private",
                       preprocess=False)
    stop_button.click(stop_sweep, None, None, api_visibility="private", queue=False)
    for button, name in zip(preset_buttons, PRESETS):
        button.click(lambda source, name=name: apply_preset(name, source), source, [source, a, b, *fields],
                     api_visibility="private", queue=False, preprocess=False
                     ).success(route, source, [live_started, replay_started], api_visibility="private",
                               preprocess=False
                     ).then(lambda: gr.Tabs(selected="compare"), None, modes, api_visibility="private", queue=False)
    # controls edited by hand or by a preset: the result on screen is marked stale until a new one replaces it (a
    # refused run leaves it so); a click on Run or a preset brings the progress (drawn on the verdict) into view
    gr.on([*(c.input for c in controls), *(button.click for button in preset_buttons)], stale_notice, result_id,
          stale, api_visibility="private", queue=False)
    gr.on([run_button.click, *(button.click for button in preset_buttons)], None, api_visibility="private",
          queue=False, js=scroll_to("#verdict"))
    sweep_button.click(None, js=scroll_to("#sweep-verdict"), api_visibility="private", queue=False)
    gr.on([c.input for c in controls if c is not source], lambda: "", None, notice, api_visibility="private",
          queue=False)  # a notice about the last switch of source no longer describes these controls
    source.input(switch_source, [source, a, *fields], [*fields, notice], api_visibility="private", queue=False,
                 preprocess=False)
    source.change(sweep_plan, source, plan, api_visibility="private", queue=False, preprocess=False)
    # on every change of the lengths, not on `input`: gradio 6's Textbox says `input` from its key handler, once per
    # burst of keys (a paste by mouse says nothing, fast typing leaves the last keys unsaid), and B and S must follow
    # the lengths the field holds, however they got there
    field["lengths"].change(documents_set, field["lengths"], [field["batch"], field["seq_len"]],
                            api_visibility="private", queue=False, preprocess=False)
    gr.on([c.change for c in controls], guesses, controls, [guess_a, guess_b, coverage, run_button],
          api_visibility="private", queue=False, preprocess=False)
    gr.on([demo.load, *(c.change for c in controls)], mask_picture, controls, mask_picture_plot,
          api_visibility="private", queue=False, preprocess=False)

    async def open_link(http: gr.Request) -> list:
        """Page load, once prefill has set the controls (the link's query read the same way, `links.opening`, so
        the answer is of those controls): a recorded comparison or sweep renders at once, in the replays' queue (a
        click meanwhile cancels it); a live one waits for a click on Run."""
        compared, swept = 2 + len(views), 2 + len(sweep_outputs)
        nothing = [gr.skip()] * (compared + swept)
        opened = opening(dict(http.query_params))
        sweep, request = opened.mode == "sweep", opened.asked()
        if request.live and sweep:
            return nothing
        if request.live:  # the stage says what Run will measure, and where (it was blank until Run)
            staged = list(nothing)
            staged[2 + views.index(present)] = reports.present_plan_markdown(
                VARIANTS[request.a].label, VARIANTS[request.b].label, ENV.device_name, text.problem(request.workload),
                RUN_LABEL)
            return staged
        try:  # planned once, by the serve (a refusal comes back as the error the page's controls already flag)
            answer, kept_id = await serve("sweep" if sweep else "compare", request, None)
        except gr.Error:  # a link to what the recording lacks: the page flags it, nothing to replay
            return nothing
        if sweep:
            return [gr.skip()] * compared + [answer, kept_id, *show_sweep(kept_id, http)]
        return [answer, kept_id, *show(kept_id, http)] + [gr.skip()] * swept

    # the answer after the controls: a click once it is on screen must find the link applied (prefill's values
    # landing after a visitor's first change would undo it)
    opened = demo.load(prefill, None, [*controls, notice, seqs, axis, modes], api_visibility="private", queue=False
                       ).then(guesses, controls, [guess_a, guess_b, coverage, run_button], api_visibility="private",
                              queue=False, preprocess=False
                       ).then(open_link, None, [result, result_id, *views, sweep_result, sweep_id, *sweep_outputs],
                              api_visibility="private", **replays)
    for click in (run_button.click, sweep_button.click, *(button.click for button in preset_buttons)):
        click(None, cancels=[opened], api_visibility="private", queue=False)  # the page's opening is overtaken

    demo.validate_inputs = refuse_short_requests
    # api_open=False: the REST routes (/gradio_api/run/compare, /gradio_api/api/compare) refuse queued events, so
    # every measurement goes through the queue and its concurrency limit (/gradio_api/call/compare and clients do)
    demo.queue(api_open=False)
    quiet_queue(demo._queue)  # an idle server polls every 10 ms, not every 1 ms (serving.QUEUE_POLL_S)
    cap_waiting(demo._queue)  # each concurrency group's waiting events bounded apart (serving.WAITING)

# gradio's bundled semibold faces hold ~60 glyphs (space, A, B, Cyrillic): every semibold text would mix two faces.
# The theme declares the regular and the bold faces only (both complete, served by gradio itself), so text asked for
# at 600 is drawn in the bold face, whole.
THEME = gr.themes.Default(primary_hue="orange",
                          font=(gr.themes.LocalFont("Source Sans Pro", weights=(400, 700)), "ui-sans-serif",
                                "system-ui", "sans-serif"),
                          font_mono=(gr.themes.LocalFont("IBM Plex Mono", weights=(400, 700)), "ui-monospace",
                                     "Consolas", "monospace"))
LAUNCH = dict(ssr_mode=False, css=CSS, head=HEAD, theme=THEME,
              state_session_capacity=SESSIONS_KEPT, max_file_size=MAX_REQUEST_BYTES,
              app_kwargs={"middleware": [Middleware(RequestGuard, max_bytes=MAX_REQUEST_BYTES),
                                         Middleware(LinkPreview)]})


def draw_opening() -> None:
    """The charts of the answer a link with no query opens on (the default source's replay of the default pair),
    drawn now: the first visitor's page finds them drawn (its render 0.42 s on this CPU, 0.02 s so). Nothing where a
    plain visit opens on a live source (it waits for Run). It goes the page's way: the same request, served and kept,
    so the answer's text, which keys the charts, is the one a visitor's opening gets."""
    request = opening({}).asked()
    if request.live:
        return
    _, kept_id = asyncio.run(serve("compare", request, None))
    charts(kept(kept_id, "compare"))


def once_serving() -> None:
    """What the server does once it answers, behind its first visitors (the page and the API never wait for it):
    import matplotlib (the charts'), start the warm-up of live runs (on the measurement thread), draw the opening."""
    from profiling import figures  # noqa: F401
    handlers.start_warm_up()  # a first live run finds the process warm
    try:
        draw_opening()
    except Exception as error:  # the first visitor draws it then
        log.warning("the opening's charts were not drawn: %s", str(error).splitlines()[0] if str(error) else error)


if __name__ == "__main__":
    port = os.environ.get("PORT")  # Deta Space and most hosts; gradio reads GRADIO_SERVER_PORT itself
    demo.launch(server_port=int(port) if port else None, prevent_thread_lock=True, **LAUNCH)
    once_serving()
    demo.block_thread()
    handlers.end_process()  # the server has closed (Ctrl-C): see end_process for why not the interpreter's own exit
