"""memlab.lessons.serving: the helpers behind notebook 09 and its graded tests.

Every number asserted here is measured (exact CPU tensor counts); tiny configs, fixed seeds.
The ``gpu`` test checks the same verdicts with the CUDA allocator.
"""
from __future__ import annotations

import math

import pytest
import torch

import memlab as ml
from memlab.lessons import serving as sv


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _cached_attention(block, x, cache):
    """Reference attention with a KV cache for GPT2Block (the notebook's solution)."""
    s, b, h = x.shape
    a, d = block.a, h // block.a
    q, k, v = block.qkv(x).split(h, dim=-1)
    q, k, v = (t.reshape(s, b, a, d).permute(1, 2, 0, 3) for t in (q, k, v))
    if cache is None:
        k, v = k.contiguous(), v.contiguous()
    else:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    scores = scores.masked_fill(torch.ones(s, t, dtype=torch.bool, device=x.device).triu(t - s + 1), float("-inf"))
    out = (torch.softmax(scores, -1) @ v).permute(2, 0, 1, 3).reshape(s, b, h)
    return block.proj(out), (k, v)


def _gpt(seed=0, **kw):
    torch.manual_seed(seed)
    return ml.models.TinyGPT(**{"vocab": 128, "hidden": 32, "heads": 2, "layers": 2, "max_seq": 64, **kw}).eval()


def _kv(layers, kv_heads, head_dim, seq, batch, nbytes):
    return 2 * layers * kv_heads * head_dim * seq * batch * nbytes


# ------------------------------------------------------------------------ inference modes
def test_forward_memory_grad_keeps_the_graph_no_grad_keeps_only_the_logits():
    m = _gpt()
    idx = torch.randint(0, 128, (32, 2))
    grad, nograd, inf = (sv.forward_memory(m, idx, mode) for mode in ("grad", "no_grad", "inference_mode"))
    logits = 32 * 2 * 128 * 4
    assert nograd.retained == logits and inf.retained == logits
    assert grad.retained == grad.peak_increase > 3 * nograd.peak_increase
    assert nograd.peak_increase == inf.peak_increase
    with pytest.raises(ValueError, match="mode must be one of"):
        sv.forward_memory(m, idx, "train")


# ------------------------------------------------------------------------------ generation
@pytest.mark.parametrize("batch,prompt,n_new", [(1, 1, 5), (3, 7, 12), (2, 20, 30)])
def test_cached_generation_gives_identical_tokens_and_the_formula(batch, prompt, n_new):
    m = _gpt(seed=batch)
    p = torch.randint(0, 128, (prompt, batch))
    plain, none = sv.generate(m, p, n_new)
    cached, caches = sv.generate(m, p, n_new, _cached_attention)
    assert none == [] and plain.shape == (prompt + n_new, batch)
    assert torch.equal(plain, cached)
    assert sv.cache_bytes(caches) == _kv(2, 2, 16, prompt + n_new - 1, batch, 4)


def test_a_cache_of_views_of_the_qkv_output_is_counted_whole():
    """The mistake the graded test catches: k, v left as views of qkv's (s, b, 3h) output."""
    def views(block, x, cache):
        if cache is None:
            s, b, h = x.shape
            a, d = block.a, h // block.a
            _, k, v = block.qkv(x).split(h, dim=-1)
            k, v = (t.reshape(s, b, a, d).permute(1, 2, 0, 3) for t in (k, v))
            out, _ = _cached_attention(block, x, None)
            return out, (k, v)
        return _cached_attention(block, x, cache)

    m = _gpt()
    p = torch.randint(0, 128, (10, 1))
    _, caches = sv.generate(m, p, 1, views)  # the prefill only
    assert sv.cache_bytes(caches) == 2 * 10 * 1 * 96 * 4  # whole qkv output per layer
    assert sv.cache_bytes(caches) > _kv(2, 2, 16, 10, 1, 4)


def test_generate_refuses_sequences_past_max_seq():
    with pytest.raises(ValueError, match="max_seq"):
        sv.generate(_gpt(), torch.zeros(60, 1, dtype=torch.long), 10)


def test_step_times_cache_is_faster_for_long_sequences():
    m = _gpt(hidden=64, heads=4, layers=2, max_seq=128)
    p = torch.randint(0, 128, (8, 1))
    plain = sv.step_times(m, p, 100)
    cached = sv.step_times(m, p, 100, _cached_attention)
    assert len(plain) == len(cached) == 100
    assert sorted(cached[-20:])[10] < sorted(plain[-20:])[10]  # medians of the last 20


# ---------------------------------------------------------------------------------- GQA
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_tiny_decoder_cache_matches_the_formula_and_generation_is_consistent(kv_heads):
    torch.manual_seed(0)
    dec = sv.TinyDecoder(hidden=64, heads=4, kv_heads=kv_heads, layers=3)
    p = torch.randint(0, 256, (9, 2))
    tokens, caches = dec.generate(p, 7)
    assert sv.cache_bytes(caches) == _kv(3, kv_heads, 16, 16, 2, 4)
    with torch.no_grad():  # the cache changes nothing: one full forward predicts the same tokens
        full, _ = dec(tokens[:-1])
    assert torch.equal(full[8:].argmax(-1), tokens[9:])


def test_gqa_attention_equals_mha_with_repeated_kv_heads():
    torch.manual_seed(0)
    attn = sv.GQAttention(32, heads=4, kv_heads=2)
    x = torch.randn(5, 2, 32)
    out, (k, v) = attn(x)
    assert k.shape == (2, 2, 5, 8)
    q = attn.q(x).reshape(5, 2, 4, 8).permute(1, 2, 0, 3)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=True)
    torch.testing.assert_close(out, attn.proj(ref.permute(2, 0, 1, 3).reshape(5, 2, 32)))
    with pytest.raises(ValueError):
        sv.GQAttention(32, heads=4, kv_heads=3)


# ---------------------------------------------------------------------------- capacity
def test_decode_peak_is_weights_plus_cache_plus_activations_linear_in_batch():
    torch.manual_seed(0)
    dec = sv.TinyDecoder(hidden=64, heads=4, kv_heads=2, layers=2)
    one, four = sv.decode_peak(dec, 1, 48), sv.decode_peak(dec, 4, 48)
    assert one.weights == four.weights == ml.param_bytes(dec)
    assert one.cache == _kv(2, 2, 16, 48, 1, 4) and four.cache == 4 * one.cache
    assert 0 < one.activations and four.activations <= 4 * one.activations
    assert four.peak <= one.weights + 4 * (one.cache + one.activations)


@pytest.mark.gpu
def test_decode_peak_and_cache_on_cuda():
    dev = torch.device("cuda")
    torch.manual_seed(0)
    dec = sv.TinyDecoder(hidden=64, heads=4, kv_heads=2, layers=2).to(dev)
    one, eight = sv.decode_peak(dec, 1, 48), sv.decode_peak(dec, 8, 48)
    assert eight.cache == 8 * one.cache == 8 * _kv(2, 2, 16, 48, 1, 4)
    assert eight.peak <= one.weights + 8 * (one.cache + one.activations) + 512 * 32
    m = _gpt().to(dev)
    p = torch.randint(0, 128, (6, 2), device=dev)
    assert torch.equal(sv.generate(m, p, 10)[0], sv.generate(m, p, 10, _cached_attention)[0])
