"""Serving memory: inference without gradients, the KV cache, grouped-query attention, capacity.

Used by: solutions/09_serving_memory/09_serving_memory.ipynb (every section and its graded
tests), tests/lessons/test_serving.py, memlab.tools.gpucheck (per-technique benchmark).

- :func:`forward_memory`: peak and retained bytes of one forward with autograd on, under
  ``torch.no_grad()`` and under ``torch.inference_mode()``;
- :func:`generate`: greedy generation with :class:`memlab.models.TinyGPT`, either recomputing
  the whole sequence for every new token, or prefilling a KV cache once and then feeding one
  token per step through a learner's ``attention(block, x, cache) -> (out, cache)``;
- :func:`step_times`: seconds per generated token, with and without a cache (medians over
  repeated generations and neighbouring tokens, so the trend shows on a busy machine);
- :class:`TinyDecoder`: a small decoder LM with grouped-query attention (Ainslie et al. 2023,
  "GQA", arXiv 2305.13245; ``kv_heads`` < ``heads``) and a KV cache built in, for the GQA lever
  and capacity planning;
- :func:`cache_bytes`: bytes of the distinct storages of a list of caches;
- :func:`decode_peak`: the measured peak of one decode step of a :class:`TinyDecoder` at a
  batch and context: weights + KV cache + the step's activations.

The KV cache (Pope et al. 2022, "Efficiently Scaling Transformer Inference", arXiv 2211.05102,
sec. 2) keeps every layer's keys and values of the tokens seen so far:
2 x layers x kv_heads x head_dim x seq x batch x bytes per element.

Every helper takes its model, inputs and device as arguments and reads no notebook global.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..measure.timing import timed_call
from ..measure.tracker import MemoryTracker, storage_bytes, tensors_of

__all__ = [
    "forward_memory", "ForwardMemory", "generate", "step_times", "TinyDecoder", "GQAttention",
    "cache_bytes", "decode_peak", "DecodePeak",
]

Cache = Any  # what an attention function keeps between steps: here (k, v) per layer


# ------------------------------------------------------------------ inference without grads
@dataclass
class ForwardMemory:
    """One forward: its peak above the start, and what is still live once it returned
    (the output plus, with autograd on, everything saved for a backward that never comes)."""

    mode: str
    peak_increase: int
    retained: int


def forward_memory(model: nn.Module, idx: torch.Tensor, mode: str) -> ForwardMemory:
    """Measure ``model(idx)`` with ``mode`` in ``"grad"``, ``"no_grad"``, ``"inference_mode"``."""
    contexts = {"grad": torch.enable_grad, "no_grad": torch.no_grad,
                "inference_mode": torch.inference_mode}
    if mode not in contexts:
        raise ValueError(f"mode must be one of {sorted(contexts)}, not {mode!r}")
    tracker = MemoryTracker(idx.device, timeline=False)
    tracker.track(model, idx)
    with tracker:
        with contexts[mode]():
            out = model(idx)
        retained = tracker.current_bytes - tracker.start_bytes
    del out
    return ForwardMemory(mode, tracker.peak_increase, retained)


# ------------------------------------------------------------------- generation (TinyGPT)
def _block_mlp(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return block.fc2(F.gelu(block.fc1(block.ln2(x))))


def _cached_logits(model: nn.Module, idx: torch.Tensor, start: int, caches: list,
                   attention: Callable[..., tuple[torch.Tensor, Cache]]) -> torch.Tensor:
    """Run positions start .. start+len(idx)-1 of TinyGPT through ``attention`` with caches;
    returns the logits of the last position, (b, vocab). ``caches`` is updated in place."""
    s = idx.shape[0]
    pos = torch.arange(start, start + s, device=idx.device)
    x = model.tok(idx) + model.pos(pos)[:, None, :]
    for i, block in enumerate(model.blocks):
        out, caches[i] = attention(block, block.ln1(x), caches[i])
        x = x + out
        x = x + _block_mlp(block, x)
    return model.head(model.ln_f(x[-1]))


def generate(model: nn.Module, prompt: torch.Tensor, n_new: int,
             attention: Callable[..., tuple[torch.Tensor, Cache]] | None = None,
             ) -> tuple[torch.Tensor, list]:
    """Greedy generation of ``n_new`` tokens after ``prompt`` (s, b) with a
    :class:`memlab.models.TinyGPT` (dropout off: ``model.eval()``).

    ``attention=None``: no cache; every step runs the whole sequence so far (the model's own
    forward). Otherwise the prompt is run once through ``attention(block, x, None)`` (prefill)
    and every new token alone through ``attention(block, x, cache)`` (decode), where ``x`` is the
    block's LayerNorm output for the new positions, (s_new, b, hidden), and ``attention`` returns
    the attention output (after the block's ``proj``) and the cache to pass next time.

    Returns the tokens (s + n_new, b) and the list of per-layer caches (empty without a cache).
    """
    model.eval()
    if prompt.shape[0] + n_new > model.pos.num_embeddings:
        raise ValueError(f"prompt ({prompt.shape[0]}) + n_new ({n_new}) exceeds the model's "
                         f"max_seq ({model.pos.num_embeddings})")
    tokens = prompt
    caches: list = [None] * len(model.blocks)
    with torch.no_grad():
        for step in range(n_new):
            if attention is None:
                logits = model(tokens)[-1]
            elif step == 0:
                logits = _cached_logits(model, tokens, 0, caches, attention)
            else:
                logits = _cached_logits(model, tokens[-1:], tokens.shape[0] - 1, caches, attention)
            tokens = torch.cat([tokens, logits.argmax(-1)[None, :]], dim=0)
    return tokens, (caches if attention is not None else [])


def step_times(model: nn.Module, prompt: torch.Tensor, n_new: int,
               attention: Callable[..., tuple[torch.Tensor, Cache]] | None = None, *,
               repeats: int = 3, window: int = 5) -> list[float]:
    """Seconds spent on each generated token (the first one includes the prefill).

    The generation runs ``repeats`` times, one after the other, and each token's time is the
    median of the times of the tokens within ``window // 2`` of it (fewer near either end, so
    that a straight trend stays straight) in every run: ``repeats * window`` single times per
    point, so a token slowed by another program does not show as a spike, and the trend of time
    with sequence length does. The prefill (token 0) is the median of its own ``repeats`` times.
    ``repeats=1, window=1``: the single times of one generation.
    """
    if repeats < 1 or window < 1:
        raise ValueError(f"repeats ({repeats}) and window ({window}) must be >= 1")
    runs = [_one_generation_times(model, prompt, n_new, attention) for _ in range(repeats)]
    half = window // 2
    smoothed = []
    for i in range(n_new):
        k = 0 if i == 0 else min(half, i - 1, n_new - 1 - i)
        smoothed.append(statistics.median(run[j] for run in runs for j in range(i - k, i + k + 1)))
    return smoothed


def _one_generation_times(model: nn.Module, prompt: torch.Tensor, n_new: int,
                          attention: Callable[..., tuple[torch.Tensor, Cache]] | None
                          ) -> list[float]:
    """Seconds of each generated token of one generation, one call each."""
    model.eval()
    times: list[float] = []
    tokens = prompt
    caches: list = [None] * len(model.blocks)
    with torch.no_grad():
        for step in range(n_new):
            box: list = []

            def one() -> None:
                if attention is None:
                    box.append(model(tokens)[-1])
                elif step == 0:
                    box.append(_cached_logits(model, tokens, 0, caches, attention))
                else:
                    box.append(_cached_logits(model, tokens[-1:], tokens.shape[0] - 1, caches, attention))
            times.append(timed_call(one, tokens.device))
            tokens = torch.cat([tokens, box[0].argmax(-1)[None, :]], dim=0)
    return times


def cache_bytes(caches: Sequence[Any]) -> int:
    """Bytes of the distinct tensor storages held by ``caches`` (lists/tuples/dicts of tensors)."""
    return storage_bytes(tensors_of(*[c for c in caches if c is not None]))


# ----------------------------------------------------------------- grouped-query attention
class GQAttention(nn.Module):
    """Causal self-attention with ``heads`` query heads sharing ``kv_heads`` key/value heads
    (multi-head: kv_heads == heads; multi-query, Shazeer 2019: kv_heads == 1). (s, b, h) layout.
    ``forward(x, cache)`` returns (output, (k, v)) with k, v of shape (b, kv_heads, t, head_dim)."""

    def __init__(self, hidden: int, heads: int, kv_heads: int):
        super().__init__()
        if hidden % heads or heads % kv_heads:
            raise ValueError(f"hidden ({hidden}) must divide by heads ({heads}), heads by kv_heads ({kv_heads})")
        self.h, self.a, self.g, self.d = hidden, heads, kv_heads, hidden // heads
        self.q = nn.Linear(hidden, hidden)
        self.kv = nn.Linear(hidden, 2 * kv_heads * self.d)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None):
        s, b, _ = x.shape
        q = self.q(x).reshape(s, b, self.a, self.d).permute(1, 2, 0, 3)          # (b, a, s, d)
        k, v = self.kv(x).reshape(s, b, 2, self.g, self.d).permute(2, 1, 3, 0, 4)  # 2 x (b, g, s, d)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        else:
            k, v = k.contiguous(), v.contiguous()  # own storages: the cache holds K and V only
        t = k.shape[2]
        allowed = torch.ones(s, t, dtype=torch.bool, device=x.device).tril(t - s)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=self.g != self.a)
        return self.proj(out.permute(2, 0, 1, 3).reshape(s, b, self.h)), (k, v)


class TinyDecoder(nn.Module):
    """A decoder-only LM like :class:`memlab.models.TinyGPT` (pre-LN blocks, tied head), with
    :class:`GQAttention` and a KV cache: ``forward(idx, caches=None, start=0)`` returns the
    logits (s, b, vocab) and the new per-layer caches."""

    def __init__(self, vocab: int = 256, hidden: int = 64, heads: int = 4, kv_heads: int = 4,
                 layers: int = 2, max_seq: int = 256):
        super().__init__()
        self.layers, self.heads, self.kv_heads, self.head_dim = layers, heads, kv_heads, hidden // heads
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(max_seq, hidden)
        self.blocks = nn.ModuleList(nn.ModuleDict(dict(
            ln1=nn.LayerNorm(hidden), attn=GQAttention(hidden, heads, kv_heads), ln2=nn.LayerNorm(hidden),
            fc1=nn.Linear(hidden, 4 * hidden), fc2=nn.Linear(4 * hidden, hidden))) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor, caches: list | None = None, start: int = 0):
        s = idx.shape[0]
        caches = list(caches) if caches is not None else [None] * self.layers
        x = self.tok(idx) + self.pos(torch.arange(start, start + s, device=idx.device))[:, None, :]
        for i, blk in enumerate(self.blocks):
            out, caches[i] = blk["attn"](blk["ln1"](x), caches[i])
            x = x + out
            x = x + blk["fc2"](F.gelu(blk["fc1"](blk["ln2"](x))))
        return self.head(self.ln_f(x)), caches

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, n_new: int) -> tuple[torch.Tensor, list]:
        """Greedy generation with the cache; returns tokens (s + n_new, b) and the caches."""
        self.eval()
        logits, caches = self(prompt)
        tokens = prompt
        for _ in range(n_new):
            nxt = logits[-1].argmax(-1)[None, :]
            tokens = torch.cat([tokens, nxt], dim=0)
            logits, caches = self(nxt, caches, start=tokens.shape[0] - 1)
        return tokens, caches


@dataclass
class DecodePeak:
    """One decode step of a :class:`TinyDecoder`, measured."""

    batch: int
    context: int
    weights: int
    cache: int
    peak: int  # weights + cache + the step's largest increase: what must fit on the device

    @property
    def activations(self) -> int:
        return self.peak - self.weights - self.cache


def decode_peak(model: TinyDecoder, batch: int, context: int, *, seed: int = 0,
                backend: str = "auto") -> DecodePeak:
    """Prefill ``context - 1`` random tokens for ``batch`` sequences, then measure the peak of
    live memory while decoding token number ``context`` (the cache grows to ``context``).
    On CUDA the allocator's counters, on the CPU the exact tensor count."""
    dev = next(model.parameters()).device
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    vocab = model.tok.num_embeddings
    idx = torch.randint(0, vocab, (context - 1, batch), generator=gen).to(dev)
    nxt = torch.randint(0, vocab, (1, batch), generator=gen).to(dev)
    with torch.no_grad():
        _, caches = model(idx)
        weights = storage_bytes(model.parameters())
        tracker = MemoryTracker(dev, backend=backend, timeline=False)
        tracker.track(model, caches, nxt)
        with tracker:
            logits, caches = model(nxt, caches, start=context - 1)
        cache = cache_bytes(caches)
    del logits
    # peak_increase: above what was live at the start (weights, cache, the new token), on CUDA
    # from the allocator's own counters, so other tensors in the process do not count.
    return DecodePeak(batch, context, weights, cache, weights + cache + tracker.peak_increase)

