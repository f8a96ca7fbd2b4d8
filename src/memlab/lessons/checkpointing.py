"""Measuring both sides of gradient checkpointing: the memory it saves and the work it adds.

Used by: solutions/02_checkpointing/02_checkpointing.ipynb (every section and its graded tests),
tests/lessons/test_checkpointing.py.

Checkpointing (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost",
arXiv 1604.06174) keeps only the inputs of a checkpointed region in the forward pass and runs
the region's forward again during the backward pass to rebuild what it needs. In PyTorch that is
``torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)``
(https://pytorch.org/docs/stable/checkpoint.html). The helpers here measure it:

- :class:`Residual`, :func:`residual_layers`: an ``MLPStack`` as an ``nn.Sequential`` of layers
  ``x -> x + block(x)`` (sharing the stack's parameters), so it can be cut into segments;
- :func:`segment_bounds`: n layers cut into k contiguous segments of (nearly) equal size;
- :func:`step_activation_peak`: the peak of one forward + backward above parameters, gradients
  and the batch (gradients are allocated first, so the peak is activations and temporaries);
- :func:`step_fits`: does one forward + backward stay within a memory budget;
- :func:`retained_bytes`: what the autograd graph of a forward holds once it has returned;
- :func:`count_recomputation`: forward calls of chosen modules and aten ops, split into those run
  in the forward pass and those run again inside ``backward()`` (the recomputation);
- :func:`loss_and_grads`, :func:`max_abs_diff`: compare a checkpointed model with the original
  on the same seed (dropout included);
- :func:`median_time`, :func:`time_ratio`: wall-clock time per call as a median of repeats
  (CUDA synchronized), and the ratio of two such medians measured interleaved, with the
  interquartile range of its rounds as the spread and a ``warning`` when that is too wide;
- :func:`tanh_chain`: a chain of ``Linear -> Tanh`` layers, where a kept layer input costs about
  as much as a layer's activations (the setting of Chen et al.'s ``n/k + k``);
- :func:`gpt2_block_forward`: a :class:`memlab.models.GPT2Block` with no, selective or full
  recomputation in the sense of Korthikanti et al. 2022 (arXiv 2205.05198, sec. 4).

Every helper takes its model, input and device as arguments and reads no notebook global.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ..measure.timing import TimingResult, median_time, time_ratio
from ..measure.tracker import MemoryTracker, PeakResult, storage_bytes

__all__ = [
    "Residual", "residual_layers", "segment_bounds", "default_loss", "step_activation_peak",
    "step_fits", "retained_bytes", "RecomputeReport", "count_recomputation", "loss_and_grads",
    "max_abs_diff", "why_no_gradient", "TimingResult", "median_time", "time_ratio", "tanh_chain",
    "gpt2_block_forward",
]


# ----------------------------------------------------------------------------- layers
class Residual(nn.Module):
    """``x -> x + block(x)``: one layer of :class:`memlab.models.MLPStack`, as a module."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)


def residual_layers(stack: nn.Module) -> nn.Sequential:
    """The layers of an ``MLPStack`` as ``nn.Sequential(Residual(block), ...)``.

    The blocks are the stack's own modules (no copy): parameters and gradients are shared, and
    ``residual_layers(stack)(x)`` computes exactly ``stack(x)``.
    """
    return nn.Sequential(*(Residual(block) for block in stack.blocks))


def segment_bounds(n_layers: int, segments: int) -> list[tuple[int, int]]:
    """Cut ``n_layers`` layers into ``segments`` contiguous segments, as ``(start, stop)`` pairs.

    Sizes differ by at most one, the longer segments first:
    ``segment_bounds(10, 4) -> [(0, 3), (3, 6), (6, 8), (8, 10)]``.
    (``torch.utils.checkpoint.checkpoint_sequential`` instead makes ``segments - 1`` segments of
    ``n // segments`` layers, puts the rest in the last one and does not checkpoint that one.)
    """
    if segments is None:
        raise TypeError("segment_bounds(n_layers, segments=None): segments must be an int. None means one "
                        "segment per layer: turn it into len(layers) before cutting (e.g. in __init__)")
    if type(n_layers) is not int or type(segments) is not int:
        raise TypeError(f"n_layers and segments must be ints, got {type(n_layers).__name__} and "
                        f"{type(segments).__name__}")
    if not 1 <= segments <= n_layers:
        raise ValueError(f"need 1 <= segments <= n_layers, got segments={segments}, n_layers={n_layers}")
    base, extra = divmod(n_layers, segments)
    bounds, start = [], 0
    for i in range(segments):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


# --------------------------------------------------------------------------- memory
def default_loss(out: torch.Tensor) -> torch.Tensor:
    """The loss the helpers use when none is given: mean of squares, in fp32."""
    return out.float().square().mean()


def _params(model: Any, params: Iterable[torch.Tensor] | None) -> list[torch.Tensor]:
    """The trainable parameters: ``params`` when given, else ``model.parameters()``."""
    if params is None:
        if not isinstance(model, nn.Module):
            raise TypeError("model is not an nn.Module: pass its parameters with params=...")
        params = model.parameters()
    return [p for p in params if p.requires_grad]


def _zero_grads(params: Sequence[torch.Tensor]) -> None:
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        else:
            p.grad.zero_()


def step_activation_peak(model: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, *,
                         params: Iterable[torch.Tensor] | None = None, loss_fn: Callable | None = None,
                         device: str | torch.device | None = None, track: Iterable[Any] = (),
                         backend: str = "auto") -> PeakResult:
    """Peak memory of one forward + backward of ``loss_fn(model(x))``, above what exists before.

    Gradients are allocated (zero-filled) BEFORE the measured step, as in steady training, so
    ``.peak_increase`` is what the step adds on top of parameters, gradients and the batch:
    activations saved for backward, their recomputation, and backward's temporaries. This is the
    number checkpointing changes; parameters and gradients it cannot touch. The step's gradients
    are left in ``p.grad``. ``model`` is a module, or any callable with its ``params`` given.
    On CUDA the allocator measures, on the CPU the exact tensor count (``backend="cpu-tracker"``
    forces the exact count on CUDA too).
    """
    loss_fn = loss_fn or default_loss
    params = _params(model, params)
    _zero_grads(params)

    def step() -> None:
        loss_fn(model(x)).backward()

    return _measure(step, device, [params, x, *track], backend)


def _measure(fn: Callable[[], Any], device, track, backend: str = "auto") -> PeakResult:
    tracker = MemoryTracker(device, backend=backend, timeline=False)
    tracker.track(*track)
    with tracker:
        result = fn()
        end = tracker.current_bytes
    return PeakResult(start_bytes=tracker.start_bytes, peak_bytes=tracker.peak_bytes,
                      end_bytes=end, reserved_bytes=tracker.reserved_bytes,
                      backend=tracker.backend, device=tracker.device, result=result)


def step_fits(model: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, budget_bytes: int, *,
              params: Iterable[torch.Tensor] | None = None, loss_fn: Callable | None = None,
              device: str | torch.device | None = None, backend: str = "auto") -> bool:
    """Does one forward + backward stay within ``budget_bytes``?

    The step runs inside :func:`memlab.memory_budget` with the parameters, their (zero-filled)
    gradients and ``x`` counted from the start; ``False`` when it raises
    ``torch.OutOfMemoryError``. ``backend="cpu-tracker"`` gives the same verdict on CUDA and CPU
    (the exact tensor count, no allocator rounding or caching).
    """
    from ..measure.budget import memory_budget

    loss_fn = loss_fn or default_loss
    params = _params(model, params)
    _zero_grads(params)
    try:
        with memory_budget(budget_bytes, params, x, device=device, backend=backend):
            loss_fn(model(x)).backward()
    except torch.OutOfMemoryError:
        return False
    return True


def retained_bytes(fn: Callable[..., Any], *args: Any, track: Iterable[Any] = (),
                   device: str | torch.device | None = None, backend: str = "cpu-tracker") -> int:
    """Bytes the autograd graph keeps alive after ``out = fn(*args)`` returns, the output itself
    not counted.

    Unlike :class:`memlab.SavedActivations` (which sees tensors through ``saved_tensors_hooks``)
    this counts every storage the forward leaves behind, including what selective
    checkpointing keeps in its own cache. ``fn`` (when it is a module) and the tensors and
    modules in ``args`` and ``track`` existed before and are not counted: pass the model in
    ``track`` when ``fn`` is a closure, or its parameters (seen through views such as
    ``weight.t()``) would count as new.

    The count is exact on every device by default (``backend="cpu-tracker"`` counts CUDA tensors
    too): what the graph holds is a question about tensors, not about the allocator's rounding
    or its lazily created workspaces.
    """
    tracker = MemoryTracker(device, backend=backend, timeline=False)
    known = [a for a in (fn, *args) if isinstance(a, (torch.Tensor, nn.Module))]
    tracker.track(*known, *tuple(track))
    with tracker:
        out = fn(*args)
        held = tracker.current_bytes - tracker.start_bytes
    outs = out if isinstance(out, (tuple, list)) else (out,)
    held -= storage_bytes(t for t in outs if isinstance(t, torch.Tensor))
    del out, outs
    return int(held)


# ---------------------------------------------------------------------- recomputation
class _OpCounter(TorchDispatchMode):
    """Counts aten ops by name (``aten.gelu.default`` -> ``"gelu"``) in the current phase."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "forward"
        self.counts: dict[str, Counter] = {"forward": Counter(), "backward": Counter()}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = getattr(getattr(func, "overloadpacket", None), "__name__", str(func))
        self.counts[self.phase][name] += 1
        return func(*args, **(kwargs or {}))


@dataclass
class RecomputeReport:
    """What ran in the forward pass and what ran again inside ``backward()``.

    ``forward_calls[i]`` / ``backward_calls[i]``: calls of the i-th watched module in each phase
    (a call during backward is a recomputation). ``forward_ops`` / ``backward_ops``: aten ops by
    name. A forward op such as ``gelu`` or ``addmm`` has no business in an ordinary backward
    (the backward of GELU is ``gelu_backward``; a Linear's backward uses ``mm``), so
    ``backward_ops["gelu"]`` counts recomputed GELUs.
    """

    forward_calls: list[int]
    backward_calls: list[int]
    forward_ops: Counter = field(default_factory=Counter)
    backward_ops: Counter = field(default_factory=Counter)
    loss: float | None = None

    @property
    def recomputed_modules(self) -> int:
        """How many watched modules ran at least once during backward."""
        return sum(1 for c in self.backward_calls if c > 0)

    def recomputed(self, op: str) -> int:
        """How many times aten op ``op`` (e.g. ``"gelu"``) ran during backward."""
        return self.backward_ops.get(op, 0)

    def summary(self) -> str:
        return (f"watched modules: forward calls {sum(self.forward_calls)}, recomputed in "
                f"backward {sum(self.backward_calls)} ({self.recomputed_modules} of "
                f"{len(self.backward_calls)} modules); aten ops: forward {sum(self.forward_ops.values())}, "
                f"backward {sum(self.backward_ops.values())}")


def count_recomputation(model: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                        modules: Sequence[nn.Module] = (), *,
                        loss_fn: Callable | None = None) -> RecomputeReport:
    """Run ``loss_fn(model(x)).backward()`` once and count what runs in each phase.

    Module calls are seen by forward pre-hooks on ``modules`` (e.g. the blocks); aten ops by a
    ``TorchDispatchMode``, which sees them even when a block is called as ``block.forward(x)``
    (no hooks). Hooks are removed afterwards; gradients are left in ``p.grad``.
    """
    loss_fn = loss_fn or default_loss
    modules = list(modules)
    phase = {"now": "forward"}
    calls = {"forward": [0] * len(modules), "backward": [0] * len(modules)}

    def make_hook(i: int):
        def hook(module, args):
            calls[phase["now"]][i] += 1
        return hook

    handles = [m.register_forward_pre_hook(make_hook(i)) for i, m in enumerate(modules)]
    counter = _OpCounter()
    try:
        with counter:
            loss = loss_fn(model(x))
            phase["now"] = counter.phase = "backward"
            loss.backward()
    finally:
        for h in handles:
            h.remove()
    return RecomputeReport(forward_calls=calls["forward"], backward_calls=calls["backward"],
                           forward_ops=counter.counts["forward"], backward_ops=counter.counts["backward"],
                           loss=float(loss.detach()))


# ------------------------------------------------------------------------ gradients
def loss_and_grads(model: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                   params: Sequence[torch.Tensor] | None = None, *, seed: int = 0,
                   loss_fn: Callable | None = None) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """The loss and the gradients of ``params`` (default: the model's) for one backward.

    The RNG is seeded with ``seed`` inside ``torch.random.fork_rng`` (the caller's RNG state is
    left as it was), so two models with dropout draw the same masks. Gradients are cleared
    first (``p.grad = None``) and returned as detached copies; a parameter that received no
    gradient gives ``None``.
    """
    loss_fn = loss_fn or default_loss
    params = list(model.parameters()) if params is None else list(params)  # type: ignore[union-attr]
    for p in params:
        p.grad = None
    devices = [x.device] if x.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices, device_type="cuda"):
        torch.manual_seed(seed)
        loss = loss_fn(model(x))
        loss.backward()
    grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
    return loss.detach(), grads


def why_no_gradient(model: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                    params: Sequence[torch.Tensor] | None = None) -> str:
    """Why a checkpointed ``model`` leaves parameters without a gradient, as advice for the learner.

    The common causes are told apart before the generic one (issue 14): the forward ran under
    ``torch.no_grad()`` (the output does not require grad even for an input that does); the graph
    is cut between segments by a ``.detach()`` (the output requires grad, earlier layers get no
    gradient); the reentrant variant (everything works for an input that requires grad, nothing for
    one that does not, the usual case). Gradients are cleared afterwards."""
    params = list(model.parameters()) if params is None else list(params)  # type: ignore[union-attr]
    generic = ("pass use_reentrant=False to every checkpoint(...) call: the reentrant variant gives no "
               "gradient when no input of a segment requires grad (section 8)")

    def run(inp: torch.Tensor) -> tuple[bool, int]:
        for p in params:
            p.grad = None
        with torch.enable_grad():
            out = model(inp)
            if not (isinstance(out, torch.Tensor) and out.requires_grad):
                return False, len(params)
            default_loss(out).backward()
        return True, sum(p.grad is None for p in params)

    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # diagnosing only: the graded call reports warnings itself
            attached, missing = run(x.detach().clone().requires_grad_(True))
            if not attached:
                return ("the output does not require grad even when the input does: the forward ran under "
                        "torch.no_grad() (or returned a detached tensor). checkpoint already drops the "
                        "activations; do not wrap it in torch.no_grad()")
            if missing:
                return (f"{missing} of {len(params)} parameters got no gradient although the output requires "
                        "grad: the graph is cut, by a .detach() (or a no_grad block) between or after the "
                        "segments. Remove it: pass each checkpoint's output straight to the next")
            attached, missing = run(x.detach())
            if not attached or missing:
                return generic
    except Exception as exc:  # noqa: BLE001 the diagnosis itself failed: say what failed
        return f"the model failed while checking why ({type(exc).__name__}: {exc}); " + generic
    finally:
        for p in params:
            p.grad = None
    return generic


def max_abs_diff(a: Sequence[torch.Tensor | None] | torch.Tensor,
                 b: Sequence[torch.Tensor | None] | torch.Tensor) -> float:
    """Largest absolute difference between two tensors or two lists of tensors, as a float.

    ``inf`` when the lists differ in length or one side is ``None`` where the other is not
    (a missing gradient is the worst mismatch there is).
    """
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        a, b = [a], [b]
    a, b = list(a), list(b)
    if len(a) != len(b):
        return float("inf")
    worst = 0.0
    for ta, tb in zip(a, b):
        if ta is None and tb is None:
            continue
        if ta is None or tb is None or ta.shape != tb.shape:
            return float("inf")
        if ta.numel():
            worst = max(worst, float((ta.detach().double() - tb.detach().double()).abs().max()))
    return worst


# --------------------------------------------------------------------------- timing
# ------------------------------------------------------------------------- models
def tanh_chain(width: int, depth: int) -> nn.Sequential:
    """``depth`` layers ``Linear(width, width) -> Tanh``, no residual.

    In a chain each layer keeps about one tensor of the layer-input size (Linear saves its
    input, Tanh its output, which is the next layer's input), so a kept segment input costs as
    much as one layer's activations: the unit of Chen et al.'s ``n/k + k``. Compare the MLP
    block, which saves 9 times its input.
    """
    return nn.Sequential(*(nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)))


def _attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout: nn.Module) -> torch.Tensor:
    """QK^T, causal mask, softmax, dropout, @V on (b*a, s, d) tensors: the part of attention
    whose activations grow with s^2 (Korthikanti et al.'s 5*a*s^2*b bytes)."""
    s, d = q.shape[1], q.shape[2]
    scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(d)                  # (b*a, s, s)
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    probs = dropout(torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1))
    return torch.bmm(probs, v)                                                # (b*a, s, d)


def gpt2_block_forward(block: nn.Module, x: torch.Tensor, recompute: str = "none") -> torch.Tensor:
    """Run a :class:`memlab.models.GPT2Block` on ``x`` (s, b, h) with Korthikanti et al.'s
    recomputation choices (arXiv 2205.05198, sec. 4):

    ``"none"``: ``block(x)``, everything is stored: s*b*h*(34 + 5*a*s/h) bytes in 16 bits.
    ``"selective"``: only the attention core (QK^T, softmax, dropout, @V) is checkpointed; its
    inputs Q, K, V are kept and the s x s tensors are recomputed: 34*s*b*h bytes.
    ``"full"``: the whole block is checkpointed; only its input is kept: 2*s*b*h bytes.

    The three give the same output and gradients for the same RNG state (dropout included): the
    selective path repeats ``GPT2Block.forward`` step by step, in the same order.
    """
    from torch.utils.checkpoint import checkpoint

    if recompute == "none":
        return block(x)
    if recompute == "full":
        return checkpoint(block, x, use_reentrant=False)
    if recompute != "selective":
        raise ValueError(f"recompute must be 'none', 'selective' or 'full', not {recompute!r}")
    s, b, h = x.shape
    a, d = block.a, h // block.a
    q, k, v = block.qkv(block.ln1(x)).split(h, dim=-1)                       # (s, b, h) each
    q, k, v = (t.reshape(s, b * a, d).transpose(0, 1) for t in (q, k, v))   # (b*a, s, d)
    ctx = checkpoint(_attention_core, q, k, v, block.attn_drop, use_reentrant=False)
    ctx = ctx.transpose(0, 1).reshape(s, b, h)
    x = x + block.resid_drop1(block.proj(ctx))
    return x + block.resid_drop2(block.fc2(nn.functional.gelu(block.fc1(block.ln2(x)))))
