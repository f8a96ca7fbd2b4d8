"""memlab.lessons.levers: the helpers behind notebook 08 and its graded tests.

Every number asserted here is measured (exact CPU tensor counts); tiny configs, fixed seeds.
The ``gpu`` tests check the same verdicts with the CUDA allocator.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

import memlab as ml
from memlab.lessons import levers as lv


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _fuse(model, make_opt):
    """Reference optimizer-in-backward (the notebook's solution)."""
    opts = {}

    def hook(p):
        opts[p].step()
        opts[p].zero_grad(set_to_none=True)

    for p in model.parameters():
        if p.requires_grad:
            opts[p] = make_opt([p])
            p.register_post_accumulate_grad_hook(hook)
    return opts


# ------------------------------------------------------------------------------ attention
def test_eager_and_sdpa_agree_in_output_and_gradients():
    gen = torch.Generator().manual_seed(0)
    qkv = [torch.randn(2, 3, 37, 8, generator=gen, requires_grad=True) for _ in range(3)]
    ref = [t.detach().clone().requires_grad_(True) for t in qkv]
    a, b = lv.eager_attention(*qkv), lv.sdpa_attention(*ref)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    a.sum().backward()
    b.sum().backward()
    for x, y in zip(qkv, ref):
        torch.testing.assert_close(x.grad, y.grad, atol=1e-4, rtol=1e-3)
    # causal: the first position only sees itself, so its output is v[..., 0, :]
    torch.testing.assert_close(a[..., 0, :], qkv[2][..., 0, :].detach())


def test_sdpa_on_cpu_runs_the_fused_flash_kernel_and_math_is_recognised():
    q = torch.randn(1, 2, 64, 16)
    assert lv.sdpa_backend(q, q, q) == "flash attention (fused CPU kernel)"
    with sdpa_kernel(SDPBackend.MATH):
        assert lv.sdpa_backend(q, q, q) == "math (unfused fallback)"
    assert lv.sdpa_backend(q, q, q, attn=lv.eager_attention) == "math (unfused fallback)"


@pytest.mark.parametrize("s,b,a,d", [(64, 1, 4, 16), (128, 2, 2, 8), (512, 1, 4, 16)])
def test_saved_bytes_match_the_formulas_to_the_byte(s, b, a, d):
    eager = lv.attention_saved_bytes(lv.eager_attention, s, batch=b, heads=a, head_dim=d)
    fused = lv.attention_saved_bytes(lv.sdpa_attention, s, batch=b, heads=a, head_dim=d)
    # flash (CPU): q, k, v, output (4 b a s d floats) and one log-sum-exp per row
    assert fused == 4 * (4 * b * a * s * d) + 4 * b * a * s
    # eager: q, k, v, the probabilities (b a s s floats) and the s x s boolean mask
    assert eager == 4 * (3 * b * a * s * d) + lv.attention_probs_bytes(s, b, a) + s * s
    assert lv.attention_probs_bytes(s, b, a, torch.bfloat16) == 2 * b * a * s * s


def test_saved_bytes_quadratic_for_eager_linear_for_sdpa():
    e1, e2 = (lv.attention_saved_bytes(lv.eager_attention, s) for s in (256, 512))
    f1, f2 = (lv.attention_saved_bytes(lv.sdpa_attention, s) for s in (256, 512))
    assert f2 == 2 * f1
    assert e2 / e1 > 3.3
    assert e2 / f2 > 9  # the ratio the notebook cites at s=512 (9.1)


# ----------------------------------------------------------------------- frozen weights
def test_trainable_and_frozen_numel():
    m = nn.Sequential(nn.Linear(4, 5), nn.Linear(5, 3, bias=False))
    m[0].weight.requires_grad_(False)
    assert lv.trainable_numel(m) == 5 + 15
    assert lv.frozen_numel(m) == 20


# ---------------------------------------------------------------------------- optimizers
def _mlp(dtype=torch.float32):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(10, 20), nn.Linear(20, 3, bias=False)).to(dtype)
    m[0].weight.requires_grad_(False)
    return m


@pytest.mark.parametrize("name,dtype,want", [
    ("sgd", torch.float32, 0),
    ("sgd_momentum", torch.float32, (20 + 60) * 4),
    ("adam", torch.float32, (20 + 60) * 8 + 2 * 4),
    ("adamw", torch.bfloat16, (20 + 60) * 4 + 2 * 4),
    # bias: full variance (20); weight (3, 20): a row of 3 and a column of 20
    ("adafactor", torch.float32, (20 + 3 + 20) * 4 + 2 * 4),
    ("adafactor", torch.bfloat16, (20 + 3 + 20) * 2 + 2 * 4),
])
def test_state_bytes_after_step(name, dtype, want):
    assert lv.state_bytes_after_step(_mlp(dtype), name) == want


def test_make_optimizer_refuses_unknown_names():
    with pytest.raises(ValueError, match="unknown optimizer"):
        lv.make_optimizer("lion", [torch.zeros(1, requires_grad=True)])


# -------------------------------------------------------------- optimizer in backward
def _pair(hidden=96, depth=3, seed=0):
    torch.manual_seed(seed)
    m = ml.models.MLPStack(hidden, depth)
    return m, copy.deepcopy(m)


def test_fused_step_equals_the_plain_loop_and_frees_gradients():
    plain, fused = _pair()
    batches = [(torch.randn(4, 96), torch.randn(4, 96)) for _ in range(3)]
    make = lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1)  # noqa: E731
    lv.train_plain(plain, make, batches)
    _fuse(fused, make)
    lv.train_steps(fused, batches)
    assert lv.max_abs_param_diff(plain, fused) < 1e-6
    assert lv.max_abs_param_diff(plain, _pair()[0]) > 1e-3  # the loops really trained
    assert all(p.grad is None for p in fused.parameters())


def test_fused_step_peak_drops_by_most_of_the_gradients():
    plain, fused = _pair(hidden=128)
    make = lambda ps: torch.optim.Adam(ps, lr=1e-3)  # noqa: E731
    x, y = torch.randn(8, 128), torch.randn(8, 128)
    opt = lv.train_plain(plain, make, [(x, y)])
    opts = _fuse(fused, make)
    lv.train_steps(fused, [(x, y)])

    def plain_step():
        opt.zero_grad(set_to_none=True)
        F.mse_loss(plain(x), y).backward()
        opt.step()

    p = lv.step_peak(plain, (x, y), plain_step, optimizers=opt)
    f = lv.step_peak(fused, (x, y), lambda: F.mse_loss(fused(x), y).backward(), optimizers=opts)
    grads = ml.param_bytes(plain)
    # at least params + Adam state are live in both
    assert f >= 3 * grads
    assert 0.6 * grads <= p - f <= grads


def test_a_hook_that_keeps_gradients_does_not_lower_the_peak():
    """The mistake the graded test must catch: step in the hook, forget to free the gradient."""
    plain, fused = _pair(hidden=128)
    make = lambda ps: torch.optim.Adam(ps, lr=1e-3)  # noqa: E731
    x, y = torch.randn(8, 128), torch.randn(8, 128)
    opt = lv.train_plain(plain, make, [(x, y)])
    opts = {p: make([p]) for p in fused.parameters()}
    for p in fused.parameters():
        p.register_post_accumulate_grad_hook(lambda q: opts[q].step())
    lv.train_steps(fused, [(x, y)])

    def plain_step():
        opt.zero_grad(set_to_none=True)
        F.mse_loss(plain(x), y).backward()
        opt.step()

    def leaky_step():
        for o in opts.values():
            o.zero_grad(set_to_none=True)
        F.mse_loss(fused(x), y).backward()

    p = lv.step_peak(plain, (x, y), plain_step, optimizers=opt)
    f = lv.step_peak(fused, (x, y), leaky_step, optimizers=opts)
    assert p - f < 0.5 * ml.param_bytes(plain)


# --------------------------------------------------------------------------- offloading
def test_offload_report_is_none_on_cpu():
    m = ml.models.MLPStack(8, 1)
    assert lv.offload_report(m, torch.randn(4, 8)) is None


@pytest.mark.gpu
def test_offload_lowers_the_cuda_peak_and_sdpa_saves_linear_memory():
    dev = torch.device("cuda")
    torch.manual_seed(0)
    m = ml.models.MLPStack(512, 4).to(dev)
    r = lv.offload_report(m, torch.randn(4096, 512, device=dev))
    assert r.device_peak_offload < 0.6 * r.device_peak_plain
    assert r.host_saved_bytes > 0
    f1, f2 = (lv.attention_saved_bytes(lv.sdpa_attention, s, device=dev) for s in (256, 512))
    assert f2 <= 2.3 * f1

