"""Shared pytest set-up: tests marked ``gpu`` skip with a reason when CUDA is absent."""
from __future__ import annotations

import pytest

GPU_SKIP_REASON = "needs a CUDA device: torch.cuda.is_available() is False"


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch  # only imported when a gpu test was collected

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
    for item in gpu_items:
        item.add_marker(skip)
