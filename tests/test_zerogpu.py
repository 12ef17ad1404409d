"""The GPU function as ZeroGPU runs it: in another process, its arguments, its progress and its result
(or its error) pickled across; and flex refused where ZeroGPU has no torch.compile."""
from __future__ import annotations

import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor

import pytest
import torch

import app
from attention_variants import VARIANTS
from profiling.environment import detect
from profiling.results import Comparison
from profiling.workload import Workload

SMALL = Workload.cpu_default(seq_len=128, heads=2, head_dim=32)


class ProgressAcross:
    """What reaches the worker in place of gr.Progress: a picklable callable whose reports come back
    through a queue, as ZeroGPU relays the worker's progress to the app's queue."""

    def __init__(self, queue):
        self.queue = queue

    def __call__(self, fraction, desc=None):
        self.queue.put((fraction, desc))


def in_worker(payload: bytes) -> bytes:
    """The worker's side: nothing shared with the parent but these bytes (a spawned process)."""
    import app as worker_app

    a, b, workload, progress = pickle.loads(payload)
    try:
        return pickle.dumps(("ok", worker_app.measure_live(a, b, workload, progress)))
    except Exception as error:  # what ZeroGPU pickles back instead of a result
        return pickle.dumps(("error", error))


@pytest.fixture(scope="module")
def worker():
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(1, mp_context=context) as pool:
        yield pool, manager


def across(worker, a: str, b: str, workload: Workload):
    pool, manager = worker
    queue = manager.Queue()
    payload = pickle.dumps((a, b, workload, ProgressAcross(queue)))
    kind, value = pickle.loads(pool.submit(in_worker, payload).result(timeout=600))
    reports = []
    while not queue.empty():
        reports.append(queue.get())
    return kind, value, reports


@pytest.mark.skipif(torch.cuda.is_available(), reason="runs the CPU workload; the GPU one is test_gpu_live's")
def test_the_gpu_function_runs_across_a_process_boundary(worker):
    kind, result, reports = across(worker, "naive", "sdpa_flash", SMALL)
    assert kind == "ok", result
    comparison = Comparison.from_dict(result)  # plain data came back
    assert comparison.a.ok and comparison.b.ok and comparison.a.workload == SMALL
    assert comparison.verdict
    stages = [desc for _, desc in reports]
    assert "A · naive: warm-up" in stages and "B · sdpa_flash: profiling" in stages
    assert [f for f, _ in reports] == sorted(f for f, _ in reports) and reports[-1][0] == 1.0


def test_a_refusal_in_the_worker_comes_back_as_the_error_the_app_shows(worker):
    too_long = Workload(batch=1, heads=16, seq_len=4096, head_dim=64, dtype="fp32", device=SMALL.device)
    kind, error, _ = across(worker, "naive", "sdpa_math", too_long)
    assert kind == "error" and isinstance(error, app.gr.Error)
    assert error.title == "Too large for this machine" and "seq_len=4096 is not allowed" in error.message
    assert error.print_exception is False


def test_flex_is_refused_with_its_reason_where_zero_gpu_has_no_compile(monkeypatch):
    w = Workload.blog()
    env = detect("cpu")
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    reason = VARIANTS["flex"].supports(w, env)
    assert reason and "ZeroGPU" in reason and "torch.compile" in reason
    assert all(VARIANTS[k].supports(Workload.cpu_default(), env) is None for k in ("naive", "sdpa_math"))
    monkeypatch.setenv("SPACES_ZERO_GPU", "false")
    assert "ZeroGPU" not in (VARIANTS["flex"].supports(w, env) or "")
