"""More levers on training memory: fused attention, frozen weights and LoRA, the optimizer's
state, the optimizer step fused into backward, activation offloading.

Used by: solutions/08_more_levers/08_more_levers.ipynb (every section and its graded tests),
tests/lessons/test_levers.py, memlab.tools.gpucheck (per-technique benchmark).

Sources:

- attention: Korthikanti et al. 2022 (arXiv 2205.05198), the ``5as/h`` term of the per-layer
  activations is the s x s softmax output and dropout mask of every head; Dao et al. 2022,
  "FlashAttention" (arXiv 2205.14135) computes attention in tiles and saves only the output and
  one log-sum-exp per row; PyTorch's ``torch.nn.functional.scaled_dot_product_attention``
  (https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html)
  dispatches to such fused kernels (flash / memory-efficient / cuDNN on CUDA, a flash kernel on
  the CPU) or to the unfused "math" fallback.
- LoRA: Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models" (arXiv 2106.09685):
  ``W x + (alpha / r) * B A x`` with ``A`` random, ``B`` zero, ``W`` frozen.
- optimizers: Kingma & Ba 2015 (Adam: two moments per parameter); Shazeer & Stern 2018,
  "Adafactor" (arXiv 1804.04235: a row and a column of second moments per matrix);
  Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization" (arXiv 2110.02861,
  bitsandbytes, CUDA only).
- optimizer in backward: PyTorch tutorial "How to save memory by fusing the optimizer step into
  the backward pass" (https://pytorch.org/tutorials/intermediate/optimizer_step_in_backward_tutorial.html),
  ``Tensor.register_post_accumulate_grad_hook``.
- offloading: ``torch.autograd.graph.save_on_cpu``
  (https://pytorch.org/docs/stable/autograd.html#torch.autograd.graph.save_on_cpu).

Every helper takes its model, inputs and device as arguments and reads no notebook global.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..measure.breakdown import SavedActivations, optimizer_state_bytes
from ..measure.timing import median_time
from ..measure.tracker import MemoryTracker

__all__ = [
    "eager_attention", "sdpa_attention", "sdpa_backend", "attention_saved_bytes",
    "attention_probs_bytes", "trainable_numel", "frozen_numel", "make_optimizer",
    "OPTIMIZERS", "state_bytes_after_step", "train_plain", "train_steps", "step_peak",
    "max_abs_param_diff", "offload_report", "OffloadReport",
]


# ------------------------------------------------------------------------------ attention
def _causal_mask(s_q: int, s_k: int, device: torch.device) -> torch.Tensor:
    """True where query i (the last s_q of s_k positions) must NOT see key j."""
    return torch.ones(s_q, s_k, dtype=torch.bool, device=device).triu(s_k - s_q + 1)


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention written out, as in GPT-2 and ``memlab.models.GPT2Block``.

    ``q, k, v``: (batch, heads, s, head_dim). Autograd keeps the (batch, heads, s, s) softmax
    output for the backward: the quadratic term.
    """
    d = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)                      # (b, a, s, s)
    scores = scores.masked_fill(_causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v                             # (b, a, s, d)


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The same causal attention through ``F.scaled_dot_product_attention`` (fused kernel)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


_BACKENDS = {
    "ScaledDotProductFlashAttentionForCpuBackward": "flash attention (fused CPU kernel)",
    "ScaledDotProductFlashAttentionBackward": "flash attention (CUDA)",
    "ScaledDotProductEfficientAttentionBackward": "memory-efficient attention (CUDA)",
    "ScaledDotProductCudnnAttentionBackward": "cuDNN attention (CUDA)",
    "ScaledDotProductFusedAttentionOverrideableBackward": "a fused kernel of another backend",
}


def sdpa_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 attn: Callable[..., torch.Tensor] | None = None) -> str:
    """Which kernel ``scaled_dot_product_attention`` (or ``attn``) really ran for these inputs,
    read from the autograd node it created; ``"math (unfused fallback)"`` when it fell back to
    ordinary ops (which save the s x s matrix like eager attention)."""
    attn = attn or sdpa_attention
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    out = attn(*leaves)
    name = type(out.grad_fn).__name__.rstrip("0123456789") if out.grad_fn is not None else ""
    return _BACKENDS.get(name, "math (unfused fallback)" if name else "no autograd node")


def attention_saved_bytes(attn: Callable[..., torch.Tensor], s: int, *, batch: int = 1,
                          heads: int = 4, head_dim: int = 16, dtype: torch.dtype = torch.float32,
                          device: str | torch.device = "cpu", seed: int = 0) -> int:
    """Bytes autograd saves for backward in one call ``attn(q, k, v)`` on random
    (batch, heads, s, head_dim) inputs that require grad (q, k, v count when saved: in a model
    they are activations too)."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(batch, heads, s, head_dim, generator=gen).to(device=device, dtype=dtype)
               .requires_grad_(True) for _ in range(3))
    with SavedActivations() as saved:
        out = attn(q, k, v)
    del out
    return saved.bytes


def attention_probs_bytes(s: int, batch: int, heads: int, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of the (batch, heads, s, s) softmax output eager attention keeps for backward."""
    return batch * heads * s * s * torch.empty((), dtype=dtype).element_size()


# ----------------------------------------------------------------------- frozen weights
def trainable_numel(model: nn.Module) -> int:
    """Number of parameter elements with ``requires_grad`` (each storage once)."""
    seen = set()
    n = 0
    for p in model.parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n


def frozen_numel(model: nn.Module) -> int:
    """Number of parameter elements without ``requires_grad``."""
    return sum(p.numel() for p in model.parameters() if not p.requires_grad)


# ---------------------------------------------------------------------------- optimizers
OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw", "adafactor")


def make_optimizer(name: str, params: Iterable[torch.Tensor], lr: float = 1e-2) -> torch.optim.Optimizer:
    """One of :data:`OPTIMIZERS` over ``params`` (torch.optim defaults otherwise)."""
    params = list(params)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "sgd_momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=lr)
    raise ValueError(f"unknown optimizer {name!r}: choose one of {OPTIMIZERS}")


def state_bytes_after_step(model: nn.Module, name: str, *, batch: int = 4, seed: int = 0) -> int:
    """Bytes of the optimizer state after one real step of optimizer ``name`` on ``model``
    (a random input of ``batch`` rows of the first Linear's width, loss = sum of outputs).
    The model is updated in place: pass a copy if you still need it."""
    opt = make_optimizer(name, [p for p in model.parameters() if p.requires_grad])
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    p0 = next(model.parameters())
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, first.in_features, generator=gen).to(device=p0.device, dtype=p0.dtype)
    model(x).float().sum().backward()
    opt.step()
    return optimizer_state_bytes(opt)


# -------------------------------------------------------------- optimizer in backward
def train_plain(model: nn.Module, make_opt: Callable[[list], torch.optim.Optimizer],
                batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                loss_fn: Callable[..., torch.Tensor] = F.mse_loss) -> torch.optim.Optimizer:
    """The usual loop, one optimizer over all parameters: zero_grad, forward, backward, step."""
    opt = make_opt([p for p in model.parameters() if p.requires_grad])
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
    return opt


def train_steps(model: nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                loss_fn: Callable[..., torch.Tensor] = F.mse_loss) -> None:
    """Forward and backward only: for a model whose hooks step the optimizer during backward."""
    for x, y in batches:
        loss_fn(model(x), y).backward()


def step_peak(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], step: Callable[[], Any],
              *, optimizers: Any = (), device: str | torch.device | None = None,
              backend: str = "auto") -> int:
    """Peak live bytes of ``step()`` (one training step), counting the model, its gradients,
    ``optimizers`` (an optimizer, a list or a dict of them) and the batch as live from the start.

    On CUDA the allocator's peak; on the CPU the exact tensor count. Compare two such peaks as a
    ratio or a difference, never with a number from another machine.
    """
    tracker = MemoryTracker(device if device is not None else batch[0].device, backend=backend,
                            timeline=False)
    opts = list(optimizers.values()) if isinstance(optimizers, dict) else optimizers
    tracker.track(model, opts, list(batch))
    with tracker:
        step()
    return tracker.peak_bytes


def max_abs_param_diff(a: nn.Module, b: nn.Module) -> float:
    """Largest absolute difference between the parameters of two models of the same shape."""
    diffs = [(p.detach().float() - q.detach().float()).abs().max().item()
             for p, q in zip(a.parameters(), b.parameters())]
    return max(diffs) if diffs else 0.0


# --------------------------------------------------------------------------- offloading
@dataclass
class OffloadReport:
    """One forward + backward with and without ``save_on_cpu`` on a CUDA device."""

    device_peak_plain: int
    device_peak_offload: int
    host_saved_bytes: int
    seconds_plain: float
    seconds_offload: float


def offload_report(model: nn.Module, x: torch.Tensor, *, pin_memory: bool = True,
                   repeats: int = 3) -> OffloadReport | None:
    """Measure activation offloading on CUDA: device peak of forward + backward with and without
    ``torch.autograd.graph.save_on_cpu``, the bytes moved to the host, the time of each.

    Returns ``None`` on the CPU: there the "device" and the "host" are the same memory, so
    moving saved tensors to the CPU moves nothing anywhere.
    """
    if x.device.type != "cuda":
        return None
    dev = x.device

    def plain():
        model(x).float().sum().backward()

    def offload():
        with torch.autograd.graph.save_on_cpu(pin_memory=pin_memory):
            loss = model(x).float().sum()
        loss.backward()

    peaks = []
    for fn in (plain, offload):
        model.zero_grad(set_to_none=False)
        fn()  # warm-up: gradients allocated, kernels loaded
        torch.cuda.synchronize(dev)
        tracker = MemoryTracker(dev, timeline=False)
        with tracker:
            fn()
        peaks.append(tracker.peak_increase)
    with SavedActivations(exclude=model) as saved:
        out = model(x).float().sum()
    del out
    return OffloadReport(peaks[0], peaks[1], saved.bytes,
                         median_time(plain, repeats=repeats, device=dev),
                         median_time(offload, repeats=repeats, device=dev))

