"""memlab.calculator: the estimate against real CPU measurements, the published conventions,
and the ipywidgets calculator (built and driven without a browser).

Tolerance: each consumer within 1% of ``ml.training_step_breakdown`` on small TinyGPT configs
(the estimate leaves out the loss scalar and Adam's 4-byte ``step`` counters, a few hundred bytes).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import memlab as ml
from memlab.lessons import calculator as calc
from memlab.measure.models import GPT2Block, TinyGPT

TOLERANCE = 0.01

OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-3),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-3),
}


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class FusedBlock(GPT2Block):
    """GPT2Block with scaled_dot_product_attention (flash kernel on CPU): no s x s matrix kept."""

    def attention(self, x):
        s, b, h = x.shape
        a, d = self.a, h // self.a
        q, k, v = self.qkv(x).split(h, dim=-1)
        q, k, v = (t.reshape(s, b, a, d).permute(1, 2, 0, 3) for t in (q, k, v))  # (b, a, s, d)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(out.permute(2, 0, 1, 3).reshape(s, b, h))


class VariantGPT(TinyGPT):
    """TinyGPT with fused attention and/or every block checkpointed (use_reentrant=False)."""

    def __init__(self, *, fused=False, checkpointed=False, **kw):
        super().__init__(**kw)
        if fused:
            h, a = kw["hidden"], kw["heads"]
            self.blocks = torch.nn.ModuleList(FusedBlock(h, a, kw.get("dropout", 0.0))
                                              for _ in range(kw["layers"]))
        self.checkpointed = checkpointed

    def forward(self, idx):
        s = idx.shape[0]
        x = self.tok(idx) + self.pos(torch.arange(s, device=idx.device))[:, None, :]
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return self.head(self.ln_f(x))


def measure(*, vocab, hidden, heads, layers, seq, batch, dtype, optimizer, dropout=0.0,
            fused=False, checkpointed=False, max_seq=None):
    torch.manual_seed(0)
    model = VariantGPT(vocab=vocab, hidden=hidden, heads=heads, layers=layers,
                       max_seq=max_seq or seq, dropout=dropout, fused=fused,
                       checkpointed=checkpointed).to(dtype)
    opt = OPTIMIZERS[optimizer](model.parameters())
    batch_ = (torch.randint(0, vocab, (seq, batch)), torch.randint(0, vocab, (seq, batch)))
    ml.training_step_breakdown(model, batch_, loss_fn, opt, device="cpu", timeline=False)  # state exists
    report = ml.training_step_breakdown(model, batch_, loss_fn, opt, device="cpu", timeline=False)
    measured = report.as_dict()
    if checkpointed:  # the calculator adds one layer rebuilt during backward: measure it
        block = model.blocks[0]
        x = torch.randn(seq, batch, hidden, dtype=dtype, requires_grad=True)
        measured["activations"] += ml.saved_activation_bytes(block, x, exclude=block)
    return measured


CASES = [
    # vocab hidden heads layers seq batch dtype optimizer dropout fused ckpt
    (256, 64, 4, 2, 32, 4, torch.float32, "adamw", 0.0, False, False),
    (512, 32, 2, 3, 16, 2, torch.bfloat16, "sgd_momentum", 0.0, False, False),
    (300, 48, 4, 1, 24, 3, torch.float32, "sgd", 0.1, False, False),
    (256, 64, 4, 2, 32, 4, torch.bfloat16, "adam", 0.1, False, False),
    (256, 64, 4, 2, 32, 4, torch.float32, "adamw", 0.0, False, True),
    (384, 64, 2, 2, 40, 2, torch.float32, "adamw", 0.0, True, False),
    (384, 32, 4, 3, 24, 3, torch.bfloat16, "sgd", 0.0, True, True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[6]}-{c[7]}-drop{c[8]}-fused{c[9]}-ckpt{c[10]}")
def test_estimate_matches_measurement_within_1_percent(case):
    vocab, hidden, heads, layers, seq, batch, dtype, optimizer, dropout, fused, ckpt = case
    measured = measure(vocab=vocab, hidden=hidden, heads=heads, layers=layers, seq=seq, batch=batch,
                       dtype=dtype, optimizer=optimizer, dropout=dropout, fused=fused, checkpointed=ckpt)
    est = calc.estimate(layers=layers, hidden=hidden, heads=heads, vocab=vocab, seq_len=seq,
                        batch=batch, precision="fp32" if dtype == torch.float32 else "bf16",
                        optimizer=optimizer, attention="fused" if fused else "eager",
                        dropout=dropout > 0, dropout_mask_bytes=dtype.itemsize,  # CPU dropout
                        checkpointing=ckpt)
    for key in calc.CONSUMERS:
        assert type(est[key]) is int
        if measured[key] == 0:
            assert est[key] == 0, key
        else:
            assert abs(est[key] / measured[key] - 1) <= TOLERANCE, (key, est[key], measured[key])
    assert est["total"] == sum(est[k] for k in calc.CONSUMERS)


def test_max_seq_and_untied_head_change_the_parameter_count():
    for tied in (True, False):
        model = TinyGPT(vocab=100, hidden=32, heads=4, layers=2, max_seq=50)
        if not tied:
            model.head.weight = torch.nn.Parameter(model.tok.weight.detach().clone())
        expected = sum(p.numel() for p in model.parameters())
        got = calc.params_from_shape(vocab=100, hidden=32, heads=4, layers=2, seq_len=20,
                                     max_seq=50, tied_head=tied)
        assert got == expected


def test_eager_layer_reduces_to_korthikanti():
    """16-bit activations, 1-byte dropout masks, small terms dropped: the paper's formula."""
    for s, b, h, a in [(1024, 8, 768, 12), (2048, 1, 4096, 32), (128, 4, 256, 4)]:
        ours = calc.layer_activation_bytes(s, b, h, a, elem_bytes=2, dropout=True, mask_bytes=1,
                                           small_terms=False)
        assert ours == ml.formulas.korthikanti_layer_bytes(s, b, h, a)
    # the REFERENCE worked example: GPT-2 small layer, s=1024, b=8 -> 684 MiB
    assert calc.layer_activation_bytes(1024, 8, 768, 12, dropout=True, small_terms=False) == 684 * ml.MiB


def test_fused_attention_drops_the_quadratic_term():
    eager = [calc.layer_activation_bytes(s, 1, 256, 4) for s in (512, 1024, 2048)]
    fused = [calc.layer_activation_bytes(s, 1, 256, 4, attention="fused") for s in (512, 1024, 2048)]
    assert fused[2] / fused[1] == pytest.approx(2, rel=0.01), "fused: linear in s"
    assert eager[2] / eager[1] > 3, "eager: the a*s^2*b term dominates at long s"


@pytest.mark.parametrize("precision,optimizer,per_param", [
    ("mixed-zero", "adam", 16), ("mixed-hf", "adamw", 18), ("fp32", "adam", 16),
    ("bf16", "adamw", 8), ("mixed-hf", "adam_8bit", 12), ("fp32", "sgd_momentum", 12),
    ("fp32", "sgd", 8), ("mixed-zero", "sgd", 8),
])
def test_bytes_per_param_conventions(precision, optimizer, per_param):
    n = 10**9
    est = calc.estimate(n_params=n, precision=precision, optimizer=optimizer)
    states = est["parameters"] + est["gradients"] + est["optimizer state"]
    assert states == per_param * n
    if (precision, optimizer) == ("mixed-zero", "adam"):
        assert per_param == ml.formulas.bytes_per_param("zero")
        assert (est["parameters"], est["gradients"], est["optimizer state"]) == (2 * n, 2 * n, 12 * n)
    if (precision, optimizer) == ("mixed-hf", "adamw"):
        assert per_param == ml.formulas.bytes_per_param("hf")
        assert (est["parameters"], est["gradients"], est["optimizer state"]) == (6 * n, 4 * n, 8 * n)


def test_7b_worked_estimate():
    """7e9 params: 112 GB (ZeRO, 16 B/param) and 126 GB (HF, 18 B/param) of model states."""
    zero = calc.estimate(n_params=7 * 10**9, precision="mixed-zero", optimizer="adam")
    hf = calc.estimate(n_params=7 * 10**9, precision="mixed-hf", optimizer="adamw")
    assert zero["total"] - zero["activations"] == 112 * 10**9
    assert hf["total"] - hf["activations"] == 126 * 10**9


def test_activations_are_linear_in_batch_and_layers_and_checkpointing_helps():
    base = dict(layers=12, hidden=768, heads=12, vocab=50257, seq_len=1024, attention="eager")
    acts = [calc.estimate(base, batch=b)["activations"] for b in (1, 2, 3, 4)]
    diffs = {acts[i + 1] - acts[i] for i in range(3)}
    assert len(diffs) == 1, "linear in the batch"
    acts = [calc.estimate(base, layers=n)["activations"] for n in (2, 4, 6)]
    assert acts[2] - acts[1] == acts[1] - acts[0] > 0, "linear in the number of layers"
    full = calc.estimate(base, batch=8)["activations"]
    ckpt = calc.estimate(base, batch=8, checkpointing=True)["activations"]
    assert ckpt < full / 4


def test_bad_config_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown config key"):
        calc.estimate(batch_size=4)
    with pytest.raises(ValueError, match="precision"):
        calc.estimate(precision="fp8")
    with pytest.raises(ValueError, match="optimizer"):
        calc.estimate(optimizer="lion")
    with pytest.raises(ValueError, match="batch"):
        calc.estimate(batch=0)
    with pytest.raises(ValueError, match="layers"):
        calc.estimate(layers=2.5)


def test_plot_estimate_draws_four_consumers_and_gpu_lines():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    ax = Figure().add_subplot(1, 1, 1)
    calc.plot_estimate(calc.estimate(), ax=ax)
    assert len(ax.patches) == 4
    assert len(ax.lines) == len(calc.GPU_SIZES)


def test_widget_builds_and_updates_the_total_when_a_slider_moves():
    pytest.importorskip("ipywidgets")
    pytest.importorskip("matplotlib")
    w = calc.calculator_widget(layers=4, hidden=256, heads=4, vocab=1000, seq_len=128, batch=2,
                               precision="fp32", optimizer="adamw", attention="eager")
    expected = calc.estimate(layers=4, hidden=256, heads=4, vocab=1000, seq_len=128, batch=2,
                             precision="fp32", optimizer="adamw", attention="eager")
    assert w.result == expected
    assert ml.fmt_bytes(expected["total"]) in w.summary.value
    assert bytes(w.image.value[:8]) == b"\x89PNG\r\n\x1a\n"
    png_before, total_before = bytes(w.image.value), w.result["total"]

    w.controls["batch"].value = 8  # as if the learner moved the slider
    after = calc.estimate(layers=4, hidden=256, heads=4, vocab=1000, seq_len=128, batch=8,
                          precision="fp32", optimizer="adamw", attention="eager")
    assert w.result == after and after["total"] > total_before
    assert ml.fmt_bytes(after["total"]) in w.summary.value
    assert bytes(w.image.value) != png_before

    w.controls["checkpointing"].value = True
    assert w.result["activations"] < after["activations"]
    w.controls["precision"].value = "mixed-hf"
    assert w.result["parameters"] == 6 * calc.params_from_shape(w.config)

    # an explicit parameter count instead of the shape's
    assert w.controls["n_params_billion"].disabled
    w.controls["params_from_shape"].value = False
    assert not w.controls["n_params_billion"].disabled
    w.controls["n_params_billion"].value = 7.0
    assert w.config["n_params"] == 7 * 10**9
    assert w.result["parameters"] == 6 * 7 * 10**9
    assert "7.000 B" in w.summary.value


def test_impossible_shape_is_refused_with_a_message():
    """heads must divide hidden (issue 15): estimate raises, the widget says why and recovers."""
    with pytest.raises(ValueError, match=r"heads=10 does not divide hidden=768.*12, 16"):
        calc.estimate(hidden=768, heads=10)
    w = calc.calculator_widget()
    before = w.result
    w.controls["heads"].value = 7
    assert "No such model" in w.summary.value and "heads=7" in w.summary.value
    assert w.result is before, "the last valid estimate stays"
    w.controls["heads"].value = 16
    assert "No such model" not in w.summary.value and w.config["heads"] == 16


# ------------------------------------------------------------------ serving: the KV cache row
from memlab.lessons import serving as sv  # noqa: E402  (tests may import across lessons)
from memlab.measure.tracker import storage_bytes  # noqa: E402

SERVING_CASES = [
    # hidden heads kv_heads layers context batch dtype
    (64, 4, None, 2, 24, 3, torch.float32),
    (64, 4, 2, 2, 17, 2, torch.float32),
    (96, 6, 1, 3, 33, 1, torch.bfloat16),
    (128, 8, 4, 1, 40, 4, torch.bfloat16),
]


@pytest.mark.parametrize("case", SERVING_CASES, ids=lambda c: f"h{c[0]}-a{c[1]}-g{c[2]}-{c[6]}")
def test_serving_estimate_matches_a_measured_tiny_decoder(case):
    """The KV cache row and the weights against ml.serving.TinyDecoder (GQA, a real cache):
    the cache after a prefill of ``context`` tokens, and the cache of one measured decode step
    (ml.serving.decode_peak grows it to ``context``), to the byte."""
    hidden, heads, kv_heads, layers, context, batch, dtype = case
    torch.manual_seed(0)
    model = sv.TinyDecoder(vocab=200, hidden=hidden, heads=heads, kv_heads=kv_heads or heads,
                           layers=layers, max_seq=64).to(dtype).eval()
    est = calc.estimate(serving=True, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                        vocab=200, max_seq=64, seq_len=context, batch=batch,
                        precision="fp32" if dtype == torch.float32 else "bf16")
    with torch.no_grad():
        _, caches = model(torch.randint(0, 200, (context, batch)))
    assert sv.cache_bytes(caches) == est["kv cache"]
    assert storage_bytes(model.parameters()) == est["parameters"]
    assert est["gradients"] == est["optimizer state"] == est["activations"] == 0
    assert est["total"] == est["parameters"] + est["kv cache"]
    peak = sv.decode_peak(model, batch, context)
    assert peak.cache == est["kv cache"] and peak.weights == est["parameters"]
    # the formula of 09 (and of the issue), written out
    d = hidden // heads
    assert est["kv cache"] == 2 * layers * (kv_heads or heads) * d * context * batch * dtype.itemsize


def test_serving_worked_examples_and_the_gqa_lever():
    """REFERENCE.md: Llama-2-7B (32 layers, 32 kv heads of 128), 2048 tokens, fp16: 1 GiB.
    Llama-2-70B's layout (80 layers, 64 heads, 8 kv heads): 8x less than with 64 kv heads."""
    llama7 = dict(layers=32, hidden=4096, heads=32, vocab=32000, seq_len=2048, batch=1,
                  precision="bf16", serving=True)
    assert calc.estimate(llama7)["kv cache"] == 2**30
    assert calc.estimate(llama7, seq_len=4096, batch=8)["kv cache"] == 16 * 2**30
    llama70 = dict(layers=80, hidden=8192, heads=64, seq_len=4096, batch=16, precision="mixed-hf",
                   serving=True)
    gqa, mha = calc.estimate(llama70, kv_heads=8), calc.estimate(llama70)
    assert gqa["kv cache"] == 20 * 2**30 and mha["kv cache"] == 8 * gqa["kv cache"]
    assert gqa["parameters"] < mha["parameters"]      # smaller K and V projections
    assert calc.estimate(llama70, kv_heads=64) == mha  # kv_heads == heads is multi-head
    # serving counts no training consumer; training counts no cache
    train = calc.estimate(layers=32, hidden=4096, heads=32)
    assert train["kv cache"] == 0 and train["total"] == sum(train[k] for k in calc.CONSUMERS)


def test_kv_heads_changes_only_the_k_and_v_projections():
    torch.manual_seed(0)
    for heads, kv_heads in ((4, 4), (4, 2), (8, 1)):
        model = sv.TinyDecoder(vocab=100, hidden=64, heads=heads, kv_heads=kv_heads, layers=2,
                               max_seq=50)
        got = calc.params_from_shape(vocab=100, hidden=64, heads=heads, kv_heads=kv_heads,
                                     layers=2, seq_len=20, max_seq=50)
        assert got == sum(p.numel() for p in model.parameters())


def test_impossible_kv_heads_are_refused_with_a_message():
    with pytest.raises(ValueError, match=r"kv_heads=3 does not divide heads=32.*1, 2, 4, 8, 16, 32"):
        calc.estimate(kv_heads=3, serving=True)
    with pytest.raises(ValueError, match="kv_heads must be a positive int or None"):
        calc.estimate(kv_heads=0)
    with pytest.raises(ValueError, match="kv_heads must be a positive int or None"):
        calc.estimate(kv_heads=2.0)
    with pytest.raises(ValueError, match="serving must be True or False"):
        calc.estimate(serving="yes")
    with pytest.raises(ValueError, match="heads=10 does not divide hidden=768"):
        calc.estimate(hidden=768, heads=10, serving=True)


def test_widget_serving_mode_and_kv_heads():
    pytest.importorskip("ipywidgets")
    pytest.importorskip("matplotlib")
    w = calc.calculator_widget(layers=4, hidden=256, heads=8, vocab=1000, seq_len=128, batch=2,
                               precision="bf16")
    assert w.result["kv cache"] == 0
    w.controls["serving"].value = True
    want = calc.estimate(layers=4, hidden=256, heads=8, vocab=1000, seq_len=128, batch=2,
                         precision="bf16", serving=True)
    assert w.result == want and want["kv cache"] == 2 * 4 * 8 * 32 * 128 * 2 * 2
    assert "kv cache" in w.summary.value and ml.fmt_bytes(want["kv cache"]) in w.summary.value
    w.controls["kv_heads"].value = 2
    assert w.result["kv cache"] == want["kv cache"] // 4
    before = w.result
    w.controls["heads"].value = 1          # kv_heads=2 does not divide heads=1
    assert "No such model" in w.summary.value and "kv_heads=2" in w.summary.value
    assert w.result is before, "the last valid estimate stays"
    w.controls["heads"].value = 4          # head_dim 64: twice the bytes per kv head
    assert "No such model" not in w.summary.value
    assert w.result["kv cache"] == want["kv cache"] // 2


# ------------------------------------------- the widget as a browser shows it (the tester's issue)
# tests/notebooks/test_calculator_browser.py checks the same in JupyterLab and Chromium; these
# check the Python side of each fix.
def _widget(**kw):
    pytest.importorskip("ipywidgets")
    pytest.importorskip("matplotlib")
    return calc.calculator_widget(**kw)


def test_widget_columns_do_not_shrink_and_messages_wrap():
    """An impossible heads value: the message wraps inside its fixed-width column (it widened
    the chart's column over the controls)."""
    w = _widget()
    row = w.children[0]
    left, right = row.children
    assert row.layout.flex_flow == "row wrap"
    assert (left.layout.width, left.layout.flex) == ("420px", "0 0 auto")
    assert (right.layout.width, right.layout.flex) == ("510px", "0 0 auto")
    assert w.controls["layers"].style.description_width == "130px"
    assert {c.layout.width for c in w.controls.values()} == {"400px"}  # fits the 420 px column
    w.controls["heads"].value = 7
    assert w.summary.value.startswith("<div style='white-space: normal; line-height: 1.4'>")
    assert "heads=7 does not divide hidden=4096" in w.summary.value
    w.controls["heads"].value = 32
    assert "white-space: normal" in w.summary.value and "No such model" not in w.summary.value


def test_widget_kv_heads_dropdown_is_not_blank_on_first_render():
    """ipywidgets reads a Dropdown value of None as "no selection" (index None: blank)."""
    w = _widget()
    kv = w.controls["kv_heads"]
    assert (kv.value, kv.index, kv.label) == (calc.KV_SAME, 0, "= heads (multi-head)")
    assert w.config["kv_heads"] is None and w.result == calc.estimate()
    kv.value = 8
    assert w.config["kv_heads"] == 8
    kv.value = calc.KV_SAME
    assert w.config["kv_heads"] is None and w.result == calc.estimate()
    # a kv_heads outside the usual list is offered and selected, not replaced by "= heads"
    w = _widget(heads=64, hidden=8192, kv_heads=64)
    assert (w.controls["kv_heads"].value, w.controls["kv_heads"].label) == (64, "64")
    assert w.config["kv_heads"] == 64


def test_widget_batch_takes_any_positive_value_and_refuses_zero():
    """A batch of 100000 is used as typed (an IntSlider to 256 cut it silently); 0 is refused
    with a message, and the last estimate stays."""
    w = _widget()
    batch = w.controls["batch"]
    assert type(batch).__name__ == "IntText" and not hasattr(batch, "max")
    batch.value = 100000
    assert w.config["batch"] == 100000 and w.result == calc.estimate(batch=100000)
    assert ml.fmt_bytes(calc.estimate(batch=100000)["total"]) in w.summary.value
    before = w.result
    for bad in (0, -3):
        batch.value = bad
        assert batch.value == bad, "the typed value stays in the box"
        assert "No such batch" in w.summary.value and f"batch size {bad}" in w.summary.value
        assert w.result is before, "the last valid estimate stays"
    batch.value = 1
    assert "No such batch" not in w.summary.value and w.result == calc.estimate()


def test_widget_says_when_a_slider_sits_at_an_end():
    """The browser cuts a value typed past a slider's end to the end: the widget says so."""
    w = _widget()
    note = w.range_note
    assert note.layout.display == "none" and note.value == ""
    w.controls["seq_len"].value = 100000           # Python clamps like the browser does
    assert w.controls["seq_len"].value == 32768 and w.config["seq_len"] == 32768
    assert note.layout.display == "flex"
    assert ("<b>sequence length</b> = 32768 is the end of its slider (16 to 32768): a value typed "
            "past it is set to 32768. Other values: <code>ml.calculator.estimate(seq_len=...)"
            "</code>.") in note.value
    w.controls["layers"].value = 1                 # the low end too
    assert "<b>layers</b> = 1 is the end of its slider (1 to 128)" in note.value
    assert "sequence length" in note.value
    w.controls["seq_len"].value, w.controls["layers"].value = 2048, 32
    assert note.layout.display == "none" and note.value == ""
    # the parameter slider: only while it is enabled (from the shape it follows the shape)
    w.controls["params_from_shape"].value = False
    w.controls["n_params_billion"].value = 1000.0
    assert "<b>parameters (B)</b> = 1000 is the end of its slider (0.001 to 1000)" in note.value
    assert "estimate(n_params=...)" in note.value
    w.controls["params_from_shape"].value = True
    assert note.layout.display == "none"


def test_widget_serving_disables_the_training_only_controls_with_a_reason():
    w = _widget()
    assert calc.TRAINING_ONLY == ("optimizer", "attention", "checkpointing")
    assert not any(w.controls[k].disabled for k in calc.TRAINING_ONLY)
    assert w.serving_note.layout.display == "none"
    w.controls["serving"].value = True
    disabled = [k for k in w.controls if w.controls[k].disabled]
    assert disabled == ["n_params_billion", *calc.TRAINING_ONLY]  # n_params: from the shape
    assert {w.controls[k].tooltip for k in calc.TRAINING_ONLY} == {"training only"}
    assert w.serving_note.layout.display == "flex"
    assert ("optimizer, attention and checkpointing apply to training only (no gradients, no "
            "optimizer state, nothing saved for a backward pass)") in w.serving_note.value
    # what serving does use stays enabled, and changes the estimate
    w.controls["kv_heads"].value = 8
    assert w.result["kv cache"] == calc.estimate(serving=True, kv_heads=8)["kv cache"] == 2**28
    w.controls["serving"].value = False
    assert not any(w.controls[k].disabled for k in calc.TRAINING_ONLY)
    assert {w.controls[k].tooltip for k in calc.TRAINING_ONLY} == {None}
    assert w.serving_note.layout.display == "none"


def test_plot_estimate_in_serving_leaves_out_the_zero_training_rows():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    ax = Figure().add_subplot(1, 1, 1)
    calc.plot_estimate(calc.estimate(serving=True), ax=ax)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["parameters: 12.26 GiB", "kv cache: 1.00 GiB"]
    ax = Figure().add_subplot(1, 1, 1)
    calc.plot_estimate(calc.estimate(optimizer="sgd"), ax=ax)  # training: a 0 row is shown
    assert len(ax.patches) == 4
