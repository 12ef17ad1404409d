"""Shared test setup: GPU tests deselected without a GPU; the app served in-process; a free port."""
from __future__ import annotations

import socket

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
