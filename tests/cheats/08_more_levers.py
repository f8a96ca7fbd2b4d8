"""Cheats and plausible mistakes the tests of 08_more_levers must reject (loaded by
tests/notebooks/test_nbgrader_pipeline.py).

Each entry is a student whose submission is the released notebook with one answer cell
replaced; ``expect`` gives the points each test cell must award it.
"""

VARIANTS = {
    # Attention written out: right output and gradients, but the s x s matrix is kept.
    "eager_attention": dict(notebook="08_more_levers", grade_id="causal_attention", expect={
        "test_causal_attention": 0, "test_causal_attention_hidden": 0}, source='''
import math

def causal_attention(q, k, v):
    s = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
'''),
    # SDPA with an explicit mask: on the CPU it falls back to the math kernel (s x s kept).
    "explicit_mask": dict(notebook="08_more_levers", grade_id="causal_attention", expect={
        "test_causal_attention": 0, "test_causal_attention_hidden": 0}, source='''
def causal_attention(q, k, v):
    s = q.shape[-2]
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
'''),
    # The base layer left trainable: gradients and Adam state for the big weight too.
    "lora_unfrozen": dict(notebook="08_more_levers", grade_id="lora_linear", expect={
        "test_lora_linear": 0, "test_lora_linear_hidden": 0}, source='''
class LoRALinear(nn.Module):
    def __init__(self, base, rank, alpha=1.0):
        super().__init__()
        self.base = base
        self.scale = alpha / rank
        self.A = nn.Parameter(torch.randn(rank, base.in_features) / rank)
        self.B = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x):
        return self.base(x) + self.scale * ((x @ self.A.T) @ self.B.T)
'''),
    # A table of the visible answers.
    "state_table": dict(notebook="08_more_levers", grade_id="predict_state_bytes", expect={
        "test_predict_state_bytes": 1, "test_predict_state_bytes_hidden": 0}, source='''
def predict_state_bytes(model, name):
    return {"sgd": 0, "sgd_momentum": 1132, "adam": 2280, "adafactor": 320}[name]
'''),
    # The hook steps but never frees the gradient: same parameters, no memory saved.
    "fused_keeps_grads": dict(notebook="08_more_levers", grade_id="fuse_optimizer_into_backward", expect={
        "test_fuse_optimizer_into_backward": 0, "test_fuse_optimizer_into_backward_hidden": 0}, source='''
def fuse_optimizer_into_backward(model, make_optimizer):
    optimizers = {}
    for p in model.parameters():
        if p.requires_grad:
            optimizers[p] = make_optimizer([p])
            p.register_post_accumulate_grad_hook(lambda param: optimizers[param].step())
    return optimizers
'''),
    # Hostile: nothing fused, the notebook's measuring helpers replaced to report a success.
    "patched_helpers": dict(notebook="08_more_levers", grade_id="fuse_optimizer_into_backward", expect={
        "test_fuse_optimizer_into_backward": 0, "test_fuse_optimizer_into_backward_hidden": 0}, source='''
def fuse_optimizer_into_backward(model, make_optimizer):
    return {p: make_optimizer([p]) for p in model.parameters() if p.requires_grad}

_calls = [0]

def _fake_peak(model, batch, step, **kwargs):
    _calls[0] += 1
    return 10**9 if _calls[0] % 2 else 0

ml.levers.step_peak = _fake_peak
ml.levers.max_abs_param_diff = lambda a, b: 0.0
'''),
}
