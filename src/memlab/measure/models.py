"""Small models the course measures. Readable top to bottom; nothing here is fast.

Used by: 01 (MLP stack, GPT-2 block), 02 (checkpointing a stack of blocks), 03-05, the tests.

``GPT2Block`` follows GPT-2 (Radford et al. 2019): pre-LayerNorm, causal self-attention,
4h MLP with GELU, dropout after the attention softmax and on both residual branches. Attention
is written out ("eager": QK^T, softmax, dropout, @V) so the s x s attention matrix is really
stored, as in Korthikanti et al. 2022 (arXiv 2205.05198), whose per-layer activation formula
s*b*h*(34 + 5*a*s/h) bytes (16-bit activations, 1-byte dropout masks) it is tested against.
Layout is (s, b, h) = (sequence, batch, hidden), the paper's.
"""
from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["MLPBlock", "MLPStack", "GPT2Block", "TinyGPT"]


class MLPBlock(nn.Module):
    """Linear(h -> 4h) -> GELU -> Linear(4h -> h). On fp32 input it saves 36*s*b*h bytes."""

    def __init__(self, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., h) -> (..., h)
        return self.fc2(self.act(self.fc1(x)))


class MLPStack(nn.Module):
    """``depth`` residual MLP blocks: x + block(x). The stack the checkpointing notebook cuts."""

    def __init__(self, hidden: int, depth: int):
        super().__init__()
        self.blocks = nn.ModuleList(MLPBlock(hidden) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return x


class GPT2Block(nn.Module):
    """One GPT-2 transformer layer on (s, b, h) input, eager attention."""

    def __init__(self, hidden: int, heads: int, dropout: float = 0.1):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
        self.h, self.a = hidden, heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)
        self.attn_drop = nn.Dropout(dropout)
        self.resid_drop1 = nn.Dropout(dropout)
        self.resid_drop2 = nn.Dropout(dropout)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        s, b, h = x.shape
        a, d = self.a, h // self.a
        q, k, v = self.qkv(x).split(h, dim=-1)                       # (s, b, h) each
        q, k, v = (t.reshape(s, b * a, d).transpose(0, 1) for t in (q, k, v))  # (b*a, s, d)
        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(d)      # (b*a, s, s)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        probs = self.attn_drop(torch.softmax(scores, dim=-1))        # (b*a, s, s)
        ctx = torch.bmm(probs, v)                                    # (b*a, s, d)
        ctx = ctx.transpose(0, 1).reshape(s, b, h)
        return self.proj(ctx)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.resid_drop1(self.attention(self.ln1(x)))
        x = x + self.resid_drop2(self.fc2(nn.functional.gelu(self.fc1(self.ln2(x)))))
        return x


class TinyGPT(nn.Module):
    """Token embedding + ``layers`` GPT2Blocks + LayerNorm + tied LM head.

    Input: token ids (s, b); output: logits (s, b, vocab). The head's weight IS the embedding's
    (tied), so the parameters count it once.
    """

    def __init__(self, vocab: int = 256, hidden: int = 64, heads: int = 4, layers: int = 2,
                 max_seq: int = 128, dropout: float = 0.0):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(max_seq, hidden)
        self.blocks = nn.ModuleList(GPT2Block(hidden, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:  # (s, b) -> (s, b, vocab)
        s = idx.shape[0]
        pos = torch.arange(s, device=idx.device)
        x = self.tok(idx) + self.pos(pos)[:, None, :]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))
