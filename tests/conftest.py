"""Shared test setup: GPU tests deselected without a GPU; the app served in-process; a free port; joining
the app's queue as the page does."""
from __future__ import annotations

import json
import socket

import httpx
import pytest
import torch


def pytest_collection_modifyitems(config, items):
    """GPU tests run where there is a GPU; elsewhere they are deselected (and counted), not skipped."""
    if torch.cuda.is_available():
        return
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if gpu:
        config.hook.pytest_deselected(items=gpu)
        items[:] = [item for item in items if not item.get_closest_marker("gpu")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def queued(base: str, index: int, data: list, session: str, timeout: float = 120) -> dict:
    """Join the queue as the page does, and read the event's stream until it completes."""
    with httpx.Client(base_url=base, timeout=timeout) as http:
        joined = http.post("/gradio_api/queue/join", json={"data": data, "fn_index": index, "session_hash": session})
        assert joined.status_code == 200, joined.text
        with http.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    message = json.loads(line[5:])
                    if message.get("msg") == "process_completed":
                        return message
    raise AssertionError("the event never completed")


@pytest.fixture(scope="session")
def app_url():
    """`app.demo` launched in this process (no browser, no share link); closed after the session."""
    import app

    port = free_port()
    app.demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **app.LAUNCH)
    yield f"http://127.0.0.1:{port}/"
    app.demo.close()


@pytest.fixture(scope="session")
def client(app_url):
    from gradio_client import Client

    return Client(app_url, verbose=False)
