"""Gradient accumulation: reference gradients, data, spies that watch a training loop, and the
memory and time of one effective batch.

Used by: solutions/04_accumulation/04_accumulation.ipynb (its demos and its graded tests),
tests/lessons/test_accumulation.py.

Why accumulation is exact: the gradient is linear in the loss. If the full batch's loss is the
mean over N items, L = (1/N) * sum_j l_j, and the batch is cut into micro-batches B_i of n_i
items, then L = sum_i (n_i/N) * mean_{j in B_i} l_j, so backward() on each micro-batch's mean
loss times n_i/N adds up, in ``p.grad``, to exactly the full-batch gradient. With equal
micro-batches n_i/N = 1/k. With unequal ones (a short last micro-batch, or a language model whose
micro-batches hold different numbers of real tokens) "divide by k" is wrong: that was
huggingface/transformers#24725, fixed by PR #34191 (normalize by the number of items in the whole
batch). What accumulation does not reproduce: anything that looks at the batch as a whole in the
forward pass, BatchNorm first (pytorch/pytorch#46516).

What lives here, and what does not: nothing in this module is the answer to a graded exercise
(learners can read it). It holds the *reference* (full-batch gradients, computed with
``torch.autograd.grad`` so ``.grad`` is not touched), the *spies* the graded tests use to see how
a learner's loop works (:class:`TrainingSpy`, :func:`check_accumulation`), and measurement
helpers (:func:`peak_increase`; :func:`time_ratio` and :func:`median_time` from
``memlab.measure.timing``, torch.utils.benchmark.Timer), with the small models and data the
notebook measures (:func:`classifier`, :func:`normed_classifier`, :func:`toy_classification`,
:func:`padded_lm_batch`). The spy and its checks live in ``memlab.measure.training_spy``
(03 uses them too, and a lesson module imports only ``memlab.measure``); they are re-exported
here under their old names (``acc.TrainingSpy``, ``acc.check_accumulation``,
``acc.micro_batch_sizes``, ``acc.skip_until_written``, ...).

Reloading: graded cells ``importlib.reload`` this module to get fresh spies; a reload reloads
``memlab.measure.training_spy`` first, so the spies it re-exports are fresh too.

References: PyTorch AMP examples, "Gradient accumulation"
(https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-accumulation);
torch.optim.Optimizer.register_step_pre_hook; torch.amp.GradScaler.
"""
from __future__ import annotations

import importlib
import warnings
from typing import Any, Callable

import torch
from torch import nn

from ..measure import training_spy as _training_spy
from ..measure.timing import TimingResult, median_time, time_ratio
from ..measure.tracker import measure_peak

# importlib.reload(this module) re-runs this file in the module's old namespace, where the flag
# below is already set: reload the spy module too, so a graded cell's reload gives fresh spies
# (as it did when they were defined here). The first import leaves the spy module alone.
if globals().get("_LOADED_ONCE"):
    _training_spy = importlib.reload(_training_spy)
_LOADED_ONCE = True

from ..measure.training_spy import (  # noqa: E402, F401  (after the reload above)  re-exported
    _UNCHECKED, TRACE_LEGEND, Event, TrainingSpy, _is_unchecked, check_accumulation,
    check_micro_batches, group_sizes, micro_batch_sizes, skip_until_written, spy_device,
)

__all__ = [
    "micro_batch_sizes", "group_sizes", "full_batch_gradients", "current_gradients",
    "max_abs_diff", "classifier", "NORMS", "normed_classifier", "toy_classification",
    "padded_lm_batch", "lm_loss", "Event", "TRACE_LEGEND", "TrainingSpy", "check_micro_batches",
    "check_accumulation", "spy_device", "graded_call", "skip_until_written", "peak_increase",
    "TimingResult", "median_time", "time_ratio",
]


# ------------------------------------------------------------------------ references
def full_batch_gradients(model: torch.nn.Module, loss_fn: Callable[..., torch.Tensor],
                         inputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """Gradient of ``loss_fn(model(inputs), targets)`` for every trainable parameter, computed
    in one pass with ``torch.autograd.grad``: ``p.grad`` is neither read nor changed.

    Runs the model in its current mode (call ``model.eval()`` first when dropout is on).
    """
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    loss = loss_fn(model(inputs), targets)
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    return {n: (torch.zeros_like(p) if g is None else g.detach().clone())
            for (n, p), g in zip(named, grads)}


def current_gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of every trainable parameter's ``.grad`` (zeros where it is ``None``)."""
    return {n: (torch.zeros_like(p) if p.grad is None else p.grad.detach().clone())
            for n, p in model.named_parameters() if p.requires_grad}


def max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Largest absolute difference between two gradient dicts with the same keys, as a float."""
    if set(a) != set(b):
        raise ValueError(f"different parameters: {sorted(set(a) ^ set(b))}")
    worst = 0.0
    for name in a:
        d = (a[name].detach().double() - b[name].detach().double()).abs()
        if d.numel():
            worst = max(worst, float(d.max()))
    return worst


# ---------------------------------------------------------------------------- models
def classifier(features: int, hidden: int, depth: int, classes: int, *, seed: int = 0,
               device: str | torch.device = "cpu") -> nn.Sequential:
    """``Linear(features -> hidden)``, ``depth`` residual MLP blocks (h -> 4h -> h, GELU), then
    ``Linear(hidden -> classes)``; weights drawn after ``torch.manual_seed(seed)``."""
    from ..measure.models import MLPStack

    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), MLPStack(hidden, depth),
                         nn.Linear(hidden, classes)).to(device)


NORMS = ("BatchNorm1d", "LayerNorm", "GroupNorm")


def normed_classifier(norm: str, features: int, hidden: int, classes: int, *, seed: int = 0,
                      device: str | torch.device = "cpu") -> nn.Sequential:
    """``Linear(features -> hidden) -> norm -> ReLU -> Linear(hidden -> classes)`` with ``norm``
    one of :data:`NORMS` (GroupNorm: 8 groups, or 1 when ``hidden`` is not a multiple of 8).
    The norm layer is ``model[1]``."""
    layers = {"BatchNorm1d": lambda: nn.BatchNorm1d(hidden), "LayerNorm": lambda: nn.LayerNorm(hidden),
              "GroupNorm": lambda: nn.GroupNorm(8 if hidden % 8 == 0 else 1, hidden)}
    if norm not in layers:
        raise ValueError(f"norm must be one of {NORMS}, not {norm!r}")
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), layers[norm](), nn.ReLU(),
                         nn.Linear(hidden, classes)).to(device)


# ------------------------------------------------------------------------------ data
def toy_classification(n_items: int, features: int, classes: int, *, seed: int = 0,
                       device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs (n, features) float32, targets (n,) int64)``: random inputs, labels from a
    fixed random linear map (so there is something to learn)."""
    g = torch.Generator().manual_seed(seed)
    inputs = torch.randn(n_items, features, generator=g)
    w = torch.randn(features, classes, generator=g)
    targets = (inputs @ w).argmax(dim=1)
    return inputs.to(device), targets.to(device)


def padded_lm_batch(vocab: int, seq_len: int, batch: int, *, min_len: int = 1, seed: int = 0,
                    ignore_index: int = -100, device: str | torch.device = "cpu"
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """A language-model batch in the (s, b) layout of :class:`memlab.models.TinyGPT`.

    Sequence j has a random length in [min_len, seq_len]; the rest is padding, whose targets are
    ``ignore_index`` (``torch.nn.functional.cross_entropy`` skips them). Returns
    ``(tokens (s, b) int64, targets (s, b) int64)``; targets are the next token.
    """
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (seq_len + 1, batch), generator=g)
    lengths = torch.randint(min_len, seq_len + 1, (batch,), generator=g)
    targets = tokens[1:].clone()
    pad = torch.arange(seq_len)[:, None] >= lengths[None, :]          # (s, b)
    targets[pad] = ignore_index
    inputs = tokens[:-1].clone()
    inputs[pad] = 0                                                   # a pad token
    return inputs.to(device), targets.to(device)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100,
            reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of (s, b, vocab) logits against (s, b) targets, padding ignored.
    ``reduction="mean"`` averages over the real (non-ignored) tokens only."""
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(),
                                             ignore_index=ignore_index, reduction=reduction)


# ------------------------------------------------------- a graded call, explained
# A raw library error or warning, and what it means in a learner's accumulation code.
_ERROR_HINTS = (
    ("No inf checks were recorded prior to update",
     "scaler.update() ran with no scaler.step(optimizer) before it: call scaler.update() once "
     "per optimizer step, right after scaler.step(optimizer), never after every micro-batch"),
    ("unscale_() has already been called on this optimizer",
     "scaler.unscale_(optimizer) ran twice in one step: call it once per optimizer step, after "
     "the group's last backward and before clipping"),
    ("Attempting to unscale FP16 gradients",
     "the parameters themselves are fp16: keep fp32 parameters and let autocast cast"),
    ("object has no attribute 'step'",
     "an argument the contract says may be None (the scheduler) was called anyway: guard it "
     "with `if scheduler is not None:`"),
    ("'NoneType' object has no attribute",
     "an argument the contract says may be None (scheduler, scaler) was used anyway: guard "
     "every use with `if ... is not None:`"),
    ("out of bounds",
     "a padding target reached the loss as a class index: pass ignore_index on to the loss "
     "(acc.lm_loss(logits, y, ignore_index, reduction=\"sum\") or "
     "F.cross_entropy(..., ignore_index=ignore_index))"),
    ("does not require grad and does not have a grad_fn",
     "the loss has no graph: the forward ran under torch.no_grad() or its output was detached; "
     "run the forward with gradients enabled"),
    ("backward through the graph a second time",
     "backward() ran twice through one micro-batch's graph: call it once per micro-batch loss"),
)
_WARNING_HINTS = (
    ("Disabling autocast",
     "autocast hard-coded to 'cuda' (torch.autocast(\"cuda\", ...) or device_type=\"cuda\"), or "
     "another device type this machine does not have, turns itself off and runs in fp32 (on a "
     "machine with CUDA it would leave a model on the CPU in fp32, without a warning): use the "
     "model's device type, next(model.parameters()).device.type"),
    ("requires_grad=True to a scalar",
     "float(loss) on a tensor that requires grad: use loss.item() or float(loss.detach())"),
    ("torch.cuda.amp",
     "torch.cuda.amp.* is deprecated and CUDA-only: use torch.autocast(device_type, ...) and "
     "torch.amp.GradScaler(device_type)"),
)
# Warnings that are not the learner's fault: a step skipped by GradScaler (inf/NaN in the first
# iterations) makes the scheduler warn about its order (pytorch/pytorch#44511).
_HARMLESS_WARNINGS = ("lr_scheduler.step()",)


def graded_call(fn: Callable[..., Any], *args: Any, what: str = "", **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` for a graded test: a known library error is re-raised as an
    ``AssertionError`` that names its usual cause in learner code, and any warning raised during
    the call (torch's warn-once warnings included) fails the test with what it means; nothing
    is swallowed. Harmless warnings (the scheduler-order false alarm after a skipped fp16 step)
    are ignored. ``what`` describes the inputs, for the message."""
    prefix = f"{what}: " if what else ""
    warn_always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - re-raised, with a hint when one is known
                text = f"{type(exc).__name__}: {exc}"
                for pattern, hint in _ERROR_HINTS:
                    if pattern in str(exc):
                        raise AssertionError(f"{prefix}your code raised {text} -> {hint}") from None
                raise
    finally:
        torch.set_warn_always(warn_always)
    bad = [w for w in caught if not any(h in str(w.message) for h in _HARMLESS_WARNINGS)]
    if bad:
        lines = []
        for w in bad[:3]:
            msg = str(w.message).strip().splitlines()[0]
            hint = next((h for p, h in _WARNING_HINTS if p in str(w.message)),
                        "a warning means the code did not do what it claims: fix its cause")
            lines.append(f"{w.category.__name__}: {msg} -> {hint}")
        raise AssertionError(f"{prefix}your code raised a warning, which the grader counts as a "
                             "failure: " + " | ".join(lines))
    return result


# ------------------------------------------------------------------------ measuring
def peak_increase(fn: Callable[[], Any], model: torch.nn.Module, *,
                  device: str | torch.device | None = None) -> int:
    """Peak live memory above the start while ``fn()`` runs, with the model's gradients already
    allocated (``p.grad`` set to zeros where it is ``None``) so that the number is the
    activations and temporaries of the step, not the first allocation of the gradients.

    Parameters and gradients are counted (``track=(model,)``), so they cancel in the increase.
    """
    for p in model.parameters():
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)
    return int(measure_peak(fn, device=device, track=(model,)).peak_increase)
