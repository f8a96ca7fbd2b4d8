"""The memory calculator: the four consumers of one training step, or what serving keeps
(weights and the KV cache), from a config.

Used by: solutions/01_where_memory_goes (section 6: the worked check against a measurement and
the interactive calculator), tests/lessons/test_calculator.py.

:func:`estimate` is a pure function, arithmetic only (nothing is allocated):

- parameters, gradients, optimizer state: :func:`memlab.formulas.model_state_bytes` with the
  bytes per parameter of the chosen precision (table ``PRECISIONS``). ``"mixed-zero"`` is the
  ZeRO convention, 2 + 2 + 12 = 16 bytes/param (Rajbhandari et al. 2020, sec. 3.1);
  ``"mixed-hf"`` the Hugging Face one, 6 + 4 + 8 = 18 bytes/param (transformers docs, "Model
  training anatomy"). Pure ``"bf16"`` training keeps torch.optim's state in the parameter
  dtype, so Adam's two moments cost 2 x 2 bytes/param there.
- activations: what autograd saves for the backward pass in a GPT-2-style model
  (:class:`memlab.models.TinyGPT`), per layer (s = sequence, b = batch, h = hidden, a = heads,
  e = bytes per activation element, m = bytes per dropout-mask element)::

      eager attention:  e*(16*sbh + a*s^2*b + 4*sb) + s^2
          + with dropout: m*(a*s^2*b + 2*sbh) + e*a*s^2*b
      fused attention:  e*(16*sbh + 4*sb) + 4*a*s*b   (+ m*2*sbh with dropout)
      checkpointed:     e*sbh per layer, plus ONE layer's activations, rebuilt during backward

  With e = 2, m = 1 and the small terms dropped, the eager line is Korthikanti et al. 2022
  (arXiv 2205.05198) s*b*h*(34 + 5*a*s/h) exactly (:func:`memlab.formulas.korthikanti_layer_bytes`,
  checked in the tests). The small terms are this implementation's: LayerNorm's saved mean and
  rstd (4*sb elements), the (s, s) bool causal mask (eager only), and the fp32 log-sum-exp of
  FlashAttention-style kernels (4*a*s*b bytes). A fused kernel (scaled_dot_product_attention)
  keeps q, k, v and its output (which is also the projection's input) but no s x s matrix: the
  a*s^2*b terms disappear, the 16*sbh stay. Outside the layers: token ids
  saved by the embedding and the loss (int64, 2 x 8*sb) and positions (8*s), the final
  LayerNorm (e*(sbh + 2*sb)), the head's input (e*sbh) and the log-softmax of the logits
  (e*s*b*V), which is large when the vocabulary is.

Serving (``serving=True``, inference with a KV cache, notebook 09): no gradients, no optimizer
state and nothing saved for a backward; the weights in the precision's 16-bit (or fp32) form, and
the KV cache of ``seq_len`` tokens for each of the ``batch`` sequences (Pope et al. 2022,
arXiv 2211.05102, sec. 2)::

    kv cache = 2 x layers x kv_heads x head_dim x seq_len x batch x e,   head_dim = hidden / heads

``kv_heads`` (grouped-query attention, Ainslie et al. 2023, arXiv 2305.13245) defaults to
``heads``; fewer kv heads also shrink the K and V projections in :func:`params_from_shape`
(exact for :class:`memlab.serving.TinyDecoder`). The temporaries of one forward come on top of a
serving estimate (09 measures them with ``ml.serving.decode_peak``). In training, the activations
are those of multi-head attention whatever ``kv_heads`` is (an upper bound with fewer kv heads).

CPU dropout keeps its mask in the activation dtype (m = e), CUDA's fused dropout a bool mask
(m = 1, the paper's assumption); pass ``dropout_mask_bytes`` accordingly. Under autocast some
activations stay fp32 (REFERENCE: 1.46x pure bf16 for one block), so ``"mixed-*"`` with e = 2
is a lower bound there.

:func:`calculator_widget` puts the same function behind ipywidgets sliders, with a stacked bar of
the four consumers against common GPU sizes (16, 24, 40, 80 GiB; GPUs sold as "80 GB" have
80 GiB: nvidia-smi reports 81920 MiB on an A100 80GB). ipywidgets and matplotlib are imported
only when the widget or a plot is built.

What the widget does with what a learner types, and how it lays out (in JupyterLab 4;
tests/notebooks/test_calculator_browser.py checks it in Chromium):

- batch size is a text box, not a slider: batches span 1 to 10^5 and more (a serving batch, a
  global batch), no slider range fits them, and a slider's readout cuts a typed value to its end
  in the browser without telling Python. Any whole number >= 1 is used as typed; 0 or less is
  refused with a message (as an impossible heads value is), the last chart stays.
- the shape sliders cover published models (layers <= 128, hidden <= 16384, ...); a value typed
  past a slider's end is set to the end by the browser, so while a slider sits at an end the
  widget says so and names the :func:`estimate` call for values outside (``_range_notes``).
- the "= heads" kv-heads option has the value 0 (``KV_SAME``), not None: ipywidgets reads a
  Dropdown value of None as "nothing selected" and draws it blank.
- serving disables the controls that do not apply to it (``TRAINING_ONLY``: optimizer,
  attention, checkpointing), with a note saying why; training enables them again.
- the two columns (controls; chart and summary) have fixed widths and do not shrink, and wrap
  under each other when the notebook is narrow: a long message (an impossible heads value)
  wraps inside its column instead of widening it over the controls.
"""
from __future__ import annotations

import html

import io
from typing import Any, Mapping

from ..measure import formulas
from ..measure.units import GiB, fmt_bytes

__all__ = [
    "DEFAULTS", "PRECISIONS", "OPTIMIZERS", "ATTENTIONS", "GPU_SIZES", "CONSUMERS",
    "SERVING_KEYS", "params_from_shape", "layer_activation_bytes", "estimate",
    "TRAINING_ONLY", "plot_estimate",
    "calculator_widget",
]

# A GPT-2-style model with the shape of a 7B model (32 layers, hidden 4096), one sequence of
# 2048 tokens, mixed-precision AdamW, fused attention: the case the calculator opens with.
DEFAULTS: dict[str, Any] = {
    "n_params": None,        # None: computed from the shape below (params_from_shape)
    "layers": 32,
    "hidden": 4096,
    "heads": 32,
    "kv_heads": None,        # key/value heads (grouped-query attention); None: heads
    "vocab": 32000,
    "seq_len": 2048,
    "max_seq": None,         # learned position embeddings; None: seq_len
    "tied_head": True,       # the LM head reuses the token embedding (TinyGPT does)
    "batch": 1,
    "precision": "mixed-hf",
    "optimizer": "adamw",
    "checkpointing": False,
    "attention": "fused",
    "dropout": False,
    "dropout_mask_bytes": 1,
    "serving": False,        # True: inference with a KV cache (weights + cache, see the docstring)
}

# precision -> (parameter bytes, gradient bytes, activation element bytes), per parameter/element.
PRECISIONS: dict[str, tuple[int, int, int]] = {
    "fp32": (4, 4, 4),
    "bf16": (2, 2, 2),        # pure bf16: weights, grads, optimizer state all bf16
    "mixed-zero": (2, 2, 2),  # + fp32 master copy (4) counted in the optimizer state: 16 B/param
    "mixed-hf": (6, 4, 2),    # fp32 weights 4 + half copy 2, fp32 grads: 18 B/param with AdamW
}
OPTIMIZERS = tuple(formulas.OPTIMIZER_STATE_BYTES_PER_PARAM)  # sgd, sgd_momentum, adam, adamw, adam_8bit
ATTENTIONS = ("eager", "fused")
CONSUMERS = ("parameters", "gradients", "optimizer state", "activations")
# what :func:`estimate` returns beside CONSUMERS: the KV cache (0 unless serving) and the total
SERVING_KEYS = ("kv cache",)
# Common GPU memory sizes, binary (what nvidia-smi shows, minus a little ECC/reserve).
GPU_SIZES = {"16 GiB (V100, T4)": 16 * GiB, "24 GiB (RTX 4090, A10)": 24 * GiB,
             "40 GiB (A100 40GB)": 40 * GiB, "80 GiB (A100/H100 80GB)": 80 * GiB}

# Widget controls that only a training step uses: disabled in serving mode (calculator_widget).
TRAINING_ONLY = ("optimizer", "attention", "checkpointing")
# The kv-heads dropdown's value for "as many as heads" (config None; see the module docstring).
KV_SAME = 0

_INT_KEYS = ("layers", "hidden", "heads", "vocab", "seq_len", "batch", "dropout_mask_bytes")


def _config(config: Mapping[str, Any] | None, overrides: Mapping[str, Any]) -> dict[str, Any]:
    cfg = dict(DEFAULTS)
    for source in (config or {}), overrides:
        unknown = sorted(set(source) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"unknown config key(s) {unknown}; valid keys: {sorted(DEFAULTS)}")
        cfg.update(source)
    for key in _INT_KEYS:
        if type(cfg[key]) is not int or cfg[key] < 1:
            raise ValueError(f"{key} must be a positive int, got {cfg[key]!r}")
    if cfg["hidden"] % cfg["heads"]:
        divisors = [d for d in range(1, min(cfg["hidden"], 128) + 1) if cfg["hidden"] % d == 0]
        raise ValueError(
            f"heads={cfg['heads']} does not divide hidden={cfg['hidden']}: attention splits the "
            f"hidden size into equal heads (head size hidden/heads), so no such model exists. "
            f"Heads that divide {cfg['hidden']}: {', '.join(map(str, divisors[-8:]))}")
    if cfg["kv_heads"] is not None:
        g = cfg["kv_heads"]
        if type(g) is not int or g < 1:
            raise ValueError(f"kv_heads must be a positive int or None (= heads), got {g!r}")
        if cfg["heads"] % g:
            divisors = [d for d in range(1, cfg["heads"] + 1) if cfg["heads"] % d == 0]
            raise ValueError(
                f"kv_heads={g} does not divide heads={cfg['heads']}: grouped-query attention shares "
                f"each key/value head among an equal group of query heads, so no such model "
                f"exists. kv_heads that divide {cfg['heads']}: {', '.join(map(str, divisors))}")
    if type(cfg["serving"]) is not bool:
        raise ValueError(f"serving must be True or False, got {cfg['serving']!r}")
    if cfg["max_seq"] is None:
        cfg["max_seq"] = cfg["seq_len"]
    if cfg["precision"] not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, not {cfg['precision']!r}")
    if cfg["optimizer"] not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)}, not {cfg['optimizer']!r}")
    if cfg["attention"] not in ATTENTIONS:
        raise ValueError(f"attention must be one of {ATTENTIONS}, not {cfg['attention']!r}")
    if cfg["n_params"] is not None and cfg["n_params"] < 0:
        raise ValueError(f"n_params must be >= 0 or None, got {cfg['n_params']!r}")
    return cfg


def params_from_shape(config: Mapping[str, Any] | None = None, **overrides: Any) -> int:
    """Parameters of a GPT-2-style model of this shape (exact for :class:`memlab.models.TinyGPT`).

    Per layer 12h^2 + 13h (qkv 3h^2+3h, proj h^2+h, fc1 4h^2+4h, fc2 4h^2+h, two LayerNorms 4h);
    token embedding V*h, learned positions max_seq*h, final LayerNorm 2h, and V*h more when the
    head is not tied to the embedding. With ``kv_heads`` g < heads the K and V projections map h to
    g*head_dim each (2*(h+1)*g*head_dim instead of 2h^2+2h; exact for
    :class:`memlab.serving.TinyDecoder`).
    """
    cfg = _config(config, overrides)
    h, V = cfg["hidden"], cfg["vocab"]
    kv = (cfg["kv_heads"] or cfg["heads"]) * (h // cfg["heads"])   # width of K (and of V)
    per_layer = 12 * h * h + 13 * h - 2 * (h * h + h) + 2 * (h * kv + kv)
    n = cfg["layers"] * per_layer + V * h + cfg["max_seq"] * h + 2 * h
    return n if cfg["tied_head"] else n + V * h


def layer_activation_bytes(s: int, b: int, h: int, a: int, *, elem_bytes: int = 2,
                           attention: str = "eager", dropout: bool = False,
                           mask_bytes: int = 1, small_terms: bool = True) -> int:
    """Bytes one GPT-2 layer saves for backward (see the module docstring for each term).

    ``small_terms=False`` drops the LayerNorm statistics, the causal mask and the log-sum-exp;
    with ``elem_bytes=2, mask_bytes=1, dropout=True`` the eager result is then Korthikanti et
    al.'s s*b*h*(34 + 5*a*s/h).
    """
    e, m = elem_bytes, mask_bytes
    sbh, s2ab = s * b * h, a * s * s * b
    if attention == "eager":
        n = e * (16 * sbh + s2ab)
        if dropout:
            n += m * (s2ab + 2 * sbh) + e * s2ab
        if small_terms:
            n += e * 4 * s * b + s * s
    elif attention == "fused":
        n = e * 16 * sbh + (m * 2 * sbh if dropout else 0)
        if small_terms:
            n += e * 4 * s * b + 4 * a * s * b
    else:
        raise ValueError(f"attention must be one of {ATTENTIONS}, not {attention!r}")
    return int(n)


def _kv_cache_bytes(config: Mapping[str, Any] | None = None, **overrides: Any) -> int:
    """The KV cache of a config: 2 x layers x kv_heads x head_dim x seq_len x batch x e (e: the
    precision's activation bytes), whether or not ``serving`` is set."""
    cfg = _config(config, overrides)
    e = PRECISIONS[cfg["precision"]][2]
    g, d = cfg["kv_heads"] or cfg["heads"], cfg["hidden"] // cfg["heads"]
    return 2 * cfg["layers"] * g * d * cfg["seq_len"] * cfg["batch"] * e


def estimate(config: Mapping[str, Any] | None = None, **overrides: Any) -> dict[str, int]:
    """Bytes of the four consumers of one training step (or, with ``serving=True``, of the
    weights and the KV cache), and their total.

    ``config`` (a dict; missing keys take :data:`DEFAULTS`, keyword overrides win) ->
    ``{"parameters", "gradients", "optimizer state", "activations", "kv cache", "total"}``,
    all ints; "kv cache" is 0 in training, and with ``serving=True`` the gradients, optimizer
    state and activations are 0 and the parameters are counted at the activation precision
    (fp32 4 bytes, otherwise 2: the 16-bit weights a mixed-precision run serves).
    The optimizer state is the steady state (after the first ``step()``); Adam's 4-byte ``step``
    counters (one per parameter tensor) are left out. Activations are those saved for backward
    at the end of the forward pass; with checkpointing, the stored layer inputs plus one layer
    rebuilt during backward.
    """
    cfg = _config(config, overrides)
    n = params_from_shape(cfg) if cfg["n_params"] is None else int(cfg["n_params"])
    p_bytes, g_bytes, e = PRECISIONS[cfg["precision"]]
    if cfg["serving"]:
        result = {"parameters": n * e, "gradients": 0, "optimizer state": 0, "activations": 0,
                  "kv cache": _kv_cache_bytes(cfg)}
        result = {k: int(v) for k, v in result.items()}
        result["total"] = sum(result[k] for k in CONSUMERS + SERVING_KEYS)
        return result
    opt = cfg["optimizer"]
    if cfg["precision"] == "mixed-hf":    # fp32 weights (4) + a half-precision copy (2)
        states = formulas.model_state_bytes(n, param_bytes=4, master_copy_bytes=2,
                                            grad_bytes=g_bytes, optimizer=opt)
    else:
        states = formulas.model_state_bytes(n, param_bytes=p_bytes, grad_bytes=g_bytes, optimizer=opt)
    if cfg["precision"] == "bf16" and opt != "adam_8bit":
        states["optimizer state"] //= 2    # torch.optim keeps its state in the parameter dtype
    if cfg["precision"] == "mixed-zero":
        states["optimizer state"] += 4 * n  # the fp32 master copy is optimizer state in ZeRO

    s, b, h, a, L, V = (cfg[k] for k in ("seq_len", "batch", "hidden", "heads", "layers", "vocab"))
    m = cfg["dropout_mask_bytes"]
    layer = layer_activation_bytes(s, b, h, a, elem_bytes=e, attention=cfg["attention"],
                                   dropout=cfg["dropout"], mask_bytes=m)
    if cfg["checkpointing"]:
        layers = L * e * s * b * h + layer   # stored inputs + one layer rebuilt at a time
    else:
        layers = L * layer
    outside = (2 * 8 * s * b + 8 * s            # token ids (embedding, loss), positions: int64
               + e * (s * b * h + 2 * s * b)    # final LayerNorm: input, mean, rstd
               + e * s * b * h                  # the head's input
               + e * s * b * V)                 # log-softmax of the logits, for the loss
    result = {"parameters": states["parameters"], "gradients": states["gradients"],
              "optimizer state": states["optimizer state"], "activations": int(layers + outside)}
    result["kv cache"] = 0
    result = {k: int(v) for k, v in result.items()}
    result["total"] = sum(result[k] for k in CONSUMERS + SERVING_KEYS)
    return result


def plot_estimate(result: Mapping[str, int], ax: Any = None, title: str | None = None) -> Any:
    """Stacked bar of the four consumers (GiB), and of the KV cache when there is one, with the
    GPU sizes as lines. Returns the axes."""
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(5.5, 4.5), layout="constrained")
    colors = {"parameters": "tab:blue", "gradients": "tab:orange",
              "optimizer state": "tab:green", "activations": "tab:red", "kv cache": "tab:purple"}
    serving = any(result.get(k) for k in SERVING_KEYS)  # then the training rows are 0: left out
    keys = tuple(k for k in CONSUMERS if result[k] or not serving or k == "parameters") + tuple(
        k for k in SERVING_KEYS if result.get(k))
    bottom = 0.0
    for key in keys:
        height = result[key] / GiB
        ax.bar([0], [height], bottom=bottom, width=0.5, color=colors[key],
               label=f"{key}: {fmt_bytes(result[key])}")
        bottom += height
    total = sum(result[k] for k in keys)
    top = max(total / GiB, max(GPU_SIZES.values()) / GiB) * 1.12
    for name, size in GPU_SIZES.items():
        ax.axhline(size / GiB, color="gray", linestyle="--", linewidth=0.8)
        ax.text(0.33, size / GiB, name, va="bottom", fontsize=7, color="dimgray")
    ax.set_xlim(-0.4, 1.3)
    ax.set_ylim(0, top)
    ax.set_xticks([])
    ax.set_ylabel("GiB")
    ax.set_title(title or f"total {fmt_bytes(total)}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=2, fontsize=7, frameon=False)
    return ax


def _figure_png(result: Mapping[str, int], title: str) -> bytes:
    from matplotlib.figure import Figure  # no pyplot: no global figure state, no GUI backend

    fig = Figure(figsize=(5.5, 4.5), dpi=90, layout="constrained")
    plot_estimate(result, ax=fig.add_subplot(1, 1, 1), title=title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


# The widgets' HTML texts wrap inside their column (ipywidgets' own line height is one control's).
_TEXT_CSS = "white-space: normal; line-height: 1.4"
_SERVING_NOTE = (f"<div style='{_TEXT_CSS}; color: #555'><i>Serving:</i> "
                 + ", ".join(TRAINING_ONLY[:-1]) + f" and {TRAINING_ONLY[-1]} apply to training "
                 "only (no gradients, no optimizer state, nothing saved for a backward pass), so "
                 "they are off.</div>")


def _error_html(title: str, text: str) -> str:
    return (f"<div style='{_TEXT_CSS}'><b style='color:#b00'>{title}</b> "
            f"{html.escape(text)}</div>")


def _slider_bounds(w: Any) -> tuple[float, float]:
    """(lowest, highest) value of an ipywidgets slider; a log slider's min/max are exponents."""
    if hasattr(w, "base"):
        return w.base ** w.min, w.base ** w.max
    return w.min, w.max


def _range_notes(controls: Mapping[str, Any]) -> list[str]:
    """One sentence per enabled slider that sits at an end of its range: there the browser sets
    a value typed past the end to the end, so the learner is told (the module docstring)."""
    notes = []
    for key, w in controls.items():
        if not hasattr(w, "readout_format") or w.disabled:   # sliders only (not batch)
            continue
        lo, hi = _slider_bounds(w)
        fmt = (lambda v: f"{v:g}") if isinstance(w.value, float) else (lambda v: f"{int(v)}")
        at = hi if w.value >= hi * (1 - 1e-9) else lo if w.value <= lo * (1 + 1e-9) else None
        if at is None:
            continue
        name = "n_params" if key == "n_params_billion" else key
        notes.append(f"<b>{html.escape(w.description)}</b> = {fmt(at)} is the end of its slider "
                     f"({fmt(lo)} to {fmt(hi)}): a value typed past it is set to {fmt(at)}. "
                     f"Other values: <code>ml.calculator.estimate({name}=...)</code>.")
    return notes


def _summary_html(result: Mapping[str, int], n_params: int, serving: bool = False) -> str:
    keys = ("parameters", "kv cache") if serving else CONSUMERS
    rows = "".join(f"<tr><td>{k}</td><td style='text-align:right'>{fmt_bytes(result[k])}</td></tr>"
                   for k in keys)
    fits = [name.split(" (")[0] for name, size in GPU_SIZES.items() if result["total"] <= size]
    verdict = f"fits on {fits[0]} and larger" if fits else "does not fit on one 80 GiB GPU"
    return (f"<div style='{_TEXT_CSS}'><b>parameters: {n_params / 1e9:.3f} B</b><table>{rows}"
            f"<tr><td><b>total</b></td><td style='text-align:right'><b>{fmt_bytes(result['total'])}"
            f"</b></td></tr></table>{verdict} (before "
            f"{'the temporaries of one forward' if serving else 'temporaries'} and allocator "
            "overhead)</div>")


def calculator_widget(config: Mapping[str, Any] | None = None, **overrides: Any):
    """The interactive calculator: ipywidgets controls -> :func:`estimate` -> stacked bar.

    Returns an ``ipywidgets.VBox`` (display it as a cell's last expression). For scripting and
    tests it has ``.controls`` (name -> widget; set ``.value`` to change an input), ``.summary``
    (HTML with the numbers), ``.image`` (the PNG bar chart), ``.result`` (the latest
    :func:`estimate` dict), ``.config`` (the latest config) and ``.update()``; ``.serving_note``
    (shown in serving mode: why :data:`TRAINING_ONLY` are disabled) and ``.range_note`` (shown
    while a slider sits at an end of its range). The module docstring says what the widget does
    with values typed into it.
    """
    import ipywidgets as W

    cfg = _config(config, overrides)
    controls = _controls(W, cfg)
    summary = W.HTML(layout=W.Layout(width="100%")).add_class("memlab-calculator-summary")
    image = W.Image(format="png", layout=W.Layout(width="495px", max_width="100%"))
    text_lay = dict(width="400px", margin="2px 2px 2px 8px")
    serving_note = W.HTML(_SERVING_NOTE, layout=W.Layout(display="none", **text_lay))
    range_note = W.HTML(layout=W.Layout(display="none", **text_lay))
    for note in (serving_note, range_note):
        note.add_class("memlab-calculator-note")

    class CalculatorWidget(W.VBox):
        def _show_range_notes(self) -> None:
            _show_range_notes(self)

        def update(self, *_: Any) -> None:
            _update(self, cfg)

    # Fixed-width columns that never shrink for each other; a narrow notebook wraps the chart
    # under the controls (and scales it down to the notebook's width).
    fixed = dict(flex="0 0 auto")
    left = W.VBox([*controls.values(), serving_note, range_note],
                  layout=W.Layout(width="420px", **fixed))
    right = W.VBox([image, summary],   # 100% less its 2 px margins
                   layout=W.Layout(width="510px", max_width="calc(100% - 4px)", **fixed))
    box = CalculatorWidget([W.HBox([left, right], layout=W.Layout(
        flex_flow="row wrap", align_items="flex-start"))])
    box.controls, box.summary, box.image = controls, summary, image
    box.serving_note, box.range_note = serving_note, range_note
    box._syncing = False

    def on_change(change: Any) -> None:
        if not box._syncing:
            box.update()

    for w in controls.values():
        w.observe(on_change, names="value")
    box.update()
    return box


def _controls(W: Any, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The calculator's input widgets (``W``: ipywidgets), name -> widget, set from ``cfg``."""
    style = {"description_width": "130px"}   # the longest label, "sequence length", with room
    lay = W.Layout(width="400px")

    def slider(cls, value, description, **kw):
        return cls(value=value, description=description, continuous_update=False,
                   style=style, layout=lay, **kw)

    from_shape = cfg["n_params"] is None
    kv_options = [("= heads (multi-head)", KV_SAME), ("1 (multi-query)", 1)] + [
        (str(g), g) for g in sorted({2, 4, 8, 16, 32, cfg["kv_heads"] or 2} - {1})]
    return {
        "params_from_shape": W.Checkbox(value=from_shape, description="parameters from shape",
                                        style=style, layout=lay),
        "n_params_billion": slider(W.FloatLogSlider,
                                   (cfg["n_params"] or params_from_shape(cfg)) / 1e9,
                                   "parameters (B)", base=10, min=-3, max=3, step=0.01,
                                   readout_format=".3g"),
        "layers": slider(W.IntSlider, cfg["layers"], "layers", min=1, max=128),
        "hidden": slider(W.IntSlider, cfg["hidden"], "hidden size", min=64, max=16384, step=64),
        "heads": slider(W.IntSlider, cfg["heads"], "heads", min=1, max=128),
        "kv_heads": W.Dropdown(options=kv_options, value=cfg["kv_heads"] or KV_SAME,
                               description="kv heads", style=style, layout=lay),
        "vocab": slider(W.IntSlider, cfg["vocab"], "vocabulary", min=256, max=262144, step=256),
        "seq_len": slider(W.IntSlider, cfg["seq_len"], "sequence length", min=16, max=32768,
                          step=16),
        # a text box: any batch is typed as it is (the module docstring)
        "batch": W.IntText(value=cfg["batch"], description="batch size", continuous_update=False,
                           style=style, layout=lay),
        "precision": W.Dropdown(options=list(PRECISIONS), value=cfg["precision"],
                                description="precision", style=style, layout=lay),
        "optimizer": W.Dropdown(options=list(OPTIMIZERS), value=cfg["optimizer"],
                                description="optimizer", style=style, layout=lay),
        "attention": W.Dropdown(options=list(ATTENTIONS), value=cfg["attention"],
                                description="attention", style=style, layout=lay),
        "checkpointing": W.Checkbox(value=cfg["checkpointing"], description="checkpointing",
                                    style=style, layout=lay),
        "serving": W.Checkbox(value=cfg["serving"], description="serving (weights + KV cache)",
                              style=style, layout=lay),
    }


def _show_range_notes(box: Any) -> None:
    """Show (or hide) the calculator's note on the sliders that sit at an end of their range."""
    notes = _range_notes(box.controls)
    box.range_note.value = (f"<div style='{_TEXT_CSS}; color: #8a5a00'>"
                            + "<br>".join(notes) + "</div>") if notes else ""
    box.range_note.layout.display = "flex" if notes else "none"


def _update(box: Any, cfg: Mapping[str, Any]) -> None:
    """The calculator's ``update()``: ``cfg`` with the controls' values -> :func:`estimate` ->
    the summary and the chart; an impossible input says why and keeps the last chart."""
    controls = box.controls
    c = dict(cfg)
    for key in ("layers", "hidden", "heads", "kv_heads", "vocab", "seq_len", "batch",
                "precision", "optimizer", "attention", "checkpointing", "serving"):
        c[key] = controls[key].value
    c["kv_heads"] = c["kv_heads"] or None      # KV_SAME (or no selection): = heads
    for key in TRAINING_ONLY:                  # serving: these do not apply
        controls[key].disabled = c["serving"]
        controls[key].tooltip = "training only" if c["serving"] else None
    box.serving_note.layout.display = "flex" if c["serving"] else "none"
    box._show_range_notes()
    if type(c["batch"]) is not int or c["batch"] < 1:
        box.summary.value = _error_html(
            "No such batch:", f"batch size {c['batch']}: a batch holds at least one "
            "sequence; type 1 or more.")
        return
    try:
        shape_params = params_from_shape(c, n_params=None)
    except ValueError as err:
        box.summary.value = _error_html("No such model:", str(err))
        return
    _sync_n_params(box, c, shape_params)
    try:
        result = estimate(c)
    except ValueError as err:  # an impossible shape: say why, keep the last chart
        box.summary.value = _error_html("No such model:", str(err))
        return
    n = shape_params if c["n_params"] is None else c["n_params"]
    box.config, box.result = c, result
    box.summary.value = _summary_html(result, n, c["serving"])
    box.image.value = _figure_png(result, f"total {fmt_bytes(result['total'])}")
    box._show_range_notes()                # the n_params slider may have moved


def _sync_n_params(box: Any, c: dict[str, Any], shape_params: int) -> None:
    """Parameters from the shape: the n_params slider shows (disabled) the count the shape
    gives, without an update of its own; else the config takes the slider's count."""
    slider = box.controls["n_params_billion"]
    if box.controls["params_from_shape"].value:
        c["n_params"] = None
        slider.disabled = True
        box._syncing = True
        try:
            slider.value = shape_params / 1e9
        finally:
            box._syncing = False
    else:
        slider.disabled = False
        c["n_params"] = int(round(slider.value * 1e9))
