"""A memory budget: code that goes above it fails with ``torch.OutOfMemoryError``.

Used by: 05 (OOM clinic), the autograder, the tests.

On CUDA the limit is real: ``torch.cuda.set_per_process_memory_fraction`` makes the caching
allocator refuse allocations past the budget, so the learner meets PyTorch's own
out-of-memory error. On the CPU the :class:`memlab.MemoryTracker` enforces the same budget on
its exact count of live tensor bytes. Either way the error message ends with the breakdown of
live memory at the moment of failure (parameters, gradients, optimizer state, the rest), so
the first thing a learner does with an OOM is read which consumer dominates.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from .device import get_device
from .tracker import MemoryTracker
from .units import fmt_bytes

__all__ = ["memory_budget"]


@contextlib.contextmanager
def memory_budget(budget_bytes: int, *track: Any, device: str | torch.device | None = None,
                  backend: str = "auto") -> Iterator[MemoryTracker]:
    """``with ml.memory_budget(n_bytes, model, optimizer, device=device) as tracker: ...``

    Objects passed in ``track`` (model, optimizer, batch) count against the budget from the
    start (on CUDA they are on the device anyway) and are named in the breakdown on failure.
    """
    if type(budget_bytes) is not int or budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be a positive int, got {budget_bytes!r}")
    dev = get_device(device)
    use_cuda = dev.type == "cuda" and backend in ("auto", "cuda-allocator")
    tracker = MemoryTracker(dev, backend="cuda-allocator" if use_cuda else "cpu-tracker",
                            budget_bytes=None if use_cuda else budget_bytes, timeline=False)
    tracker.track(*track)
    if not use_cuda:
        with tracker:
            yield tracker
        return
    idx = dev.index if dev.index is not None else torch.cuda.current_device()
    total = torch.cuda.get_device_properties(idx).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, budget_bytes / total), idx)
    try:
        with tracker:
            try:
                yield tracker
            except torch.OutOfMemoryError as exc:
                raise torch.OutOfMemoryError(
                    f"{exc}\n\nmemlab budget {fmt_bytes(budget_bytes)} exceeded during "
                    f"{tracker.current_phase}. Breakdown at the moment of failure:\n"
                    f"{tracker.describe()}") from exc
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, idx)
        torch.cuda.empty_cache()
