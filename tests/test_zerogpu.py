"""The GPU function as ZeroGPU runs it (`handlers.serve_live`): in another process, its arguments, its progress
and its result (or its refusal) pickled across; the app turning a refusal that came back into the error it shows;
and flex refused where ZeroGPU has no torch.compile."""
from __future__ import annotations

import asyncio
import json
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor

import pytest
import torch
from conftest import check_headline

import app
import handlers
from attention_variants import VARIANTS
from profiling import session
from profiling.environment import detect
from profiling.explain import explain
from profiling.request import LIVE, LIVE_BUDGET_S, Request
from profiling.results import Comparison
from profiling.workload import Refusal, Workload

TINY = {"batch": 1, "heads": 2, "seq_len": 128, "head_dim": 32, "dtype": "fp32"}


class ProgressAcross:
    """What reaches the worker in place of gr.Progress: a picklable callable whose reports come back
    through a queue, as ZeroGPU relays the worker's progress to the app's queue."""

    def __init__(self, queue):
        self.queue = queue

    def __call__(self, fraction, desc=None):
        self.queue.put((fraction, desc))


def in_worker(payload: bytes) -> bytes:
    """The worker's side: nothing shared with the parent but these bytes (a spawned process)."""
    import app  # noqa: F401  (the app as a Space starts it: its handlers registered)
    import handlers as worker_handlers

    kind, request, run_id, progress = pickle.loads(payload)
    try:
        return pickle.dumps(("ok", worker_handlers.serve_live(kind, request, run_id, progress)))
    except Exception as error:  # what ZeroGPU pickles back instead of a result
        return pickle.dumps(("error", error))


@pytest.fixture(scope="module")
def worker():
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(1, mp_context=context) as pool:
        yield pool, manager


def across(worker, kind: str, request: Request, run_id: str = "r1"):
    pool, manager = worker
    queue = manager.Queue()
    payload = pickle.dumps((kind, request, run_id, ProgressAcross(queue)))
    outcome, value = pickle.loads(pool.submit(in_worker, payload).result(timeout=600))
    reports = []
    while not queue.empty():
        reports.append(queue.get())
    return outcome, value, reports


@pytest.mark.skipif(torch.cuda.is_available(), reason="runs the CPU workload; the GPU one is test_gpu_live's")
def test_the_gpu_function_runs_across_a_process_boundary(worker):
    request = Request.build(LIVE, "naive", "sdpa_flash", TINY, "cpu")
    outcome, answer, reports = across(worker, "compare", request)
    assert outcome == "ok", answer
    assert isinstance(answer, session.Answer) and answer.request == request  # plain data came back
    comparison = answer.result
    assert comparison.a.ok and comparison.b.ok and comparison.a.workload == request.workload
    assert comparison.a.session == comparison.b.session and comparison.a.timing.kept >= 20
    # the explanation made in the worker is the explainer's on the runs that came back
    assert answer.explanation.headline.title == explain(comparison).headline.title
    client = json.loads(json.dumps(answer.to_dict()))
    check_headline(client)
    assert client["a"]["trace_path"] is None and Comparison.from_dict(client).b.variant == "sdpa_flash"
    stages = [desc for _, desc in reports]
    assert "A · naive: warm-up" in stages and "B · sdpa_flash: profiling" in stages
    assert [f for f, _ in reports] == sorted(f for f, _ in reports) and reports[-1][0] == 1.0


def test_a_refusal_in_the_worker_comes_back_as_the_error_the_app_shows(worker, monkeypatch):
    """Too long for a live CPU run: refused in the worker before anything is allocated; the Refusal crosses with its
    kind and amounts, and the app shows it under its kind's title, without a traceback."""
    request = Request.build(LIVE, "naive", "sdpa_math", TINY | {"heads": 16, "seq_len": 4096, "head_dim": 64}, "cpu")
    with pytest.raises(Refusal) as here:
        session.plan(request, budget_s=LIVE_BUDGET_S["cpu"])
    assert here.value.kind == "time"
    outcome, error, _ = across(worker, "compare", request)
    assert outcome == "error" and isinstance(error, Refusal)
    assert (error.kind, error.field, error.needed, error.available, str(error)) == (
        here.value.kind, here.value.field, here.value.needed, here.value.available, str(here.value))

    def serve_live_in_worker(kind, request_, run_id, progress):
        outcome_, value, _ = across(worker, kind, request_, run_id)
        if outcome_ == "error":
            raise value
        return value
    monkeypatch.setattr(handlers, "serve_live", serve_live_in_worker)
    running = dict(handlers.RUNNING)
    with pytest.raises(app.gr.Error) as shown:
        asyncio.run(handlers.serve("compare", request, progress=lambda *args, **kwargs: None))
    assert shown.value.title == handlers.TITLES["time"] == "Too long for this machine"
    assert shown.value.message == str(here.value) and "would take about" in shown.value.message
    assert shown.value.print_exception is False
    assert handlers.RUNNING == running  # nothing left behind


def test_flex_is_refused_with_its_reason_where_zero_gpu_has_no_compile(monkeypatch):
    w = Workload.blog()
    env = detect("cpu")
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    reason = VARIANTS["flex"].supports(w, env)
    assert reason and "ZeroGPU" in reason and "torch.compile" in reason
    assert all(VARIANTS[k].supports(Workload.cpu_default(), env) is None for k in ("naive", "sdpa_math"))
    monkeypatch.setenv("SPACES_ZERO_GPU", "false")
    assert "ZeroGPU" not in (VARIANTS["flex"].supports(w, env) or "")
