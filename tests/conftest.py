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
