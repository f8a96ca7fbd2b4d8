"""The four consumers of training memory, each counted on its own.

Used by: 00_setup, 01 (every section), 02-05 (baselines), the autograder, the tests.

- parameters: distinct storages of ``model.parameters()`` (tied weights count once);
- gradients: distinct storages of ``p.grad``;
- optimizer state: every tensor in ``optimizer.state`` (Adam: ``exp_avg``, ``exp_avg_sq`` and
  the small ``step`` tensor per parameter);
- activations saved for backward: what autograd actually keeps, seen through
  ``torch.autograd.graph.saved_tensors_hooks`` (not module outputs: an output that nothing
  saves is freed at once, and an op can save its input, its output, a mask, or nothing).
  Storages are de-duplicated and parameters excluded (a Linear saves its weight for the
  backward, but that memory is the parameter's, not an activation).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils.weak import WeakIdKeyDictionary

from .tracker import (MemoryTracker, TimelinePoint, _storages, grad_bytes,  # noqa: F401
                      optimizer_state_bytes, param_bytes, storage_bytes, tensors_of)
from .units import fmt_bytes

__all__ = [
    "param_bytes", "grad_bytes", "optimizer_state_bytes", "SavedActivations",
    "saved_activation_bytes", "StepReport", "training_step_breakdown",
]


class SavedActivations:
    """Count the bytes autograd saves for the backward pass while the block is active.

    >>> with SavedActivations(exclude=model) as saved:
    ...     loss = model(x).sum()
    >>> saved.bytes

    ``exclude``: modules or tensors whose storages are not activations (parameters by default:
    every ``nn.Parameter`` is excluded even when ``exclude`` is empty). Inputs of a non-reentrant
    ``torch.utils.checkpoint`` region are seen (checkpoint saves them through the same hooks);
    what the region would have saved is not, which is the point of checkpointing.
    """

    def __init__(self, exclude: Any = ()):
        self._excluded = WeakIdKeyDictionary()
        objs = exclude if isinstance(exclude, (list, tuple)) else (exclude,)
        for t in tensors_of(*objs):
            for st in _storages(t):
                self._excluded[st] = True
        self._seen = WeakIdKeyDictionary()
        self.bytes = 0
        self.count = 0
        self.by_dtype: dict[torch.dtype, int] = {}
        self._ctx = None

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, torch.nn.Parameter) or isinstance(t._base, torch.nn.Parameter):
            return t  # a parameter, or a view of one (Linear saves weight.t())
        for st in _storages(t):
            if st in self._excluded or st in self._seen:
                continue
            self._seen[st] = True
            n = st.nbytes()
            self.bytes += n
            self.count += 1
            self.by_dtype[t.dtype] = self.by_dtype.get(t.dtype, 0) + n
        return t

    def __enter__(self) -> "SavedActivations":
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._ctx.__exit__(*exc)
        self._ctx = None


def saved_activation_bytes(fn: Callable[..., Any], *args: Any, exclude: Any = (), **kwargs: Any) -> int:
    """Bytes autograd saves for backward while running ``fn(*args, **kwargs)``."""
    with SavedActivations(exclude=exclude) as saved:
        fn(*args, **kwargs)
    return saved.bytes


def _scalar(loss: torch.Tensor) -> float | None:
    """The loss as a float, or None when it has no data (FakeTensorMode, meta device)."""
    from torch._subclasses.fake_tensor import is_fake

    if is_fake(loss) or loss.device.type == "meta":
        return None
    return float(loss.detach())


@dataclass
class StepReport:
    """One training step, measured: the four consumers, the peak and where it happened."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    peak_bytes: int
    peak_phase: str
    phase_peaks: dict[str, int]
    start_bytes: int
    backend: str
    device: torch.device
    loss: float | None
    timeline: list[TimelinePoint] = field(repr=False, default_factory=list)
    reserved_bytes: int | None = None

    def as_dict(self) -> dict[str, int]:
        return {"parameters": self.parameters, "gradients": self.gradients,
                "optimizer state": self.optimizer_state, "activations": self.activations}

    def table(self) -> str:
        rows = [f"{k:>16}: {fmt_bytes(v):>12}" for k, v in self.as_dict().items()]
        rows.append(f"{'peak':>16}: {fmt_bytes(self.peak_bytes):>12}  (during {self.peak_phase})")
        if self.reserved_bytes is not None:
            rows.append(f"{'reserved':>16}: {fmt_bytes(self.reserved_bytes):>12}")
        rows.append(f"{'measured by':>16}: {self.backend} on {self.device}")
        return "\n".join(rows)

    def __str__(self) -> str:  # pragma: no cover - formatting only
        return self.table()


def training_step_breakdown(model: torch.nn.Module, batch: Any, loss_fn: Callable[..., torch.Tensor],
                            optimizer: torch.optim.Optimizer, *, device: str | torch.device | None = None,
                            set_to_none: bool = True, timeline: bool = True,
                            backend: str = "auto") -> StepReport:
    """Run ONE training step and measure it.

    ``batch`` is ``(inputs, targets)``; the step is ``loss_fn(model(inputs), targets)``,
    ``backward()``, ``optimizer.step()``; gradients are kept afterwards (so they can be counted)
    and zeroed at the START of the step with ``zero_grad(set_to_none=set_to_none)``, the usual
    placement. Phases in the timeline: ``forward`` (includes the loss), ``backward``,
    ``optimizer``. Model, optimizer and batch must already be on ``device``.
    """
    inputs, targets = batch
    tracker = MemoryTracker(device, backend=backend, timeline=timeline)
    tracker.track(model, optimizer, inputs, targets)
    with tracker:
        with tracker.phase("zero_grad"):
            optimizer.zero_grad(set_to_none=set_to_none)
        with tracker.phase("forward"):
            with SavedActivations(exclude=model) as saved:
                loss = loss_fn(model(inputs), targets)
        with tracker.phase("backward"):
            loss.backward()
        grads = grad_bytes(model)
        with tracker.phase("optimizer"):
            optimizer.step()
    return StepReport(
        parameters=param_bytes(model), gradients=grads,
        optimizer_state=optimizer_state_bytes(optimizer), activations=saved.bytes,
        peak_bytes=tracker.peak_bytes, peak_phase=tracker.peak_phase,
        phase_peaks=dict(tracker.phase_peaks), start_bytes=tracker.start_bytes,
        backend=tracker.backend, device=tracker.device, loss=_scalar(loss),
        timeline=tracker.timeline, reserved_bytes=tracker.reserved_bytes,
    )
