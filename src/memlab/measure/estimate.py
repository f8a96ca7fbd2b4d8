"""Estimate the memory of a training step for a model too large to build.

Used by: 01 (the 7B worked estimate), 06, the tests.

The step is run under ``torch._subclasses.FakeTensorMode``: every tensor is a FakeTensor with
a shape, a dtype and a (meta) storage, but no data, so a 7B-parameter model "allocates"
nothing. The same :class:`memlab.MemoryTracker` that counts real CPU tensors counts the fake
storages op by op, so the estimate is not a formula: it is the real sequence of ops of forward,
backward and optimizer step, counted without the memory. On small models the tests check that
it equals a real CPU measurement byte for byte.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from .breakdown import StepReport, training_step_breakdown

__all__ = ["estimate_training_step"]


def estimate_training_step(build_model: Callable[[], torch.nn.Module],
                           make_batch: Callable[[], tuple[Any, Any]],
                           loss_fn: Callable[..., torch.Tensor],
                           make_optimizer: Callable[[Any], torch.optim.Optimizer],
                           *, steps: int = 2) -> StepReport:
    """Measure ``steps`` training steps of a model that is never materialized; report the last.

    ``build_model()``, ``make_batch()`` and ``make_optimizer(params)`` are called inside
    ``FakeTensorMode``. Two steps by default, so the optimizer state (created lazily at the first
    ``step()``) is present from the start of the step that is reported, as in steady training.
    """
    if steps < 1:
        raise ValueError("steps must be >= 1")
    with FakeTensorMode(allow_non_fake_inputs=False):
        model = build_model()
        batch = make_batch()
        optimizer = make_optimizer(model.parameters())
        report = None
        for _ in range(steps):
            report = training_step_breakdown(model, batch, loss_fn, optimizer,
                                             device="cpu", backend="cpu-tracker", timeline=False)
    assert report is not None
    return report
