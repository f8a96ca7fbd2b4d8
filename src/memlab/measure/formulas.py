"""Memory formulas from the literature, in one place.

Used by: 01 (bytes per parameter, the calculator), 02 (Chen's n/k + k, Korthikanti), 06 (ZeRO),
the tests (which check each formula against a measurement on a small config).

Sources:
- Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
  Models", sec. 3.1 and fig. 1: mixed-precision Adam keeps 2 + 2 + 12 = 16 bytes/param.
- Hugging Face transformers docs, "Model training anatomy": 18 bytes/param for mixed-precision
  AdamW (fp32 weights 4 + fp16 copy 2, fp32 grads 4, AdamW 8).
- Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
  arXiv 2205.05198, sec. 4: s*b*h*(34 + 5*a*s/h) bytes per layer.
- Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost", arXiv 1604.06174.
"""
from __future__ import annotations



__all__ = [
    "OPTIMIZER_STATE_BYTES_PER_PARAM", "bytes_per_param", "model_state_bytes",
    "korthikanti_layer_bytes", "chen_segment_cost", "zero_bytes_per_device",
]

# Extra bytes of optimizer state per parameter, fp32 states (exact for torch.optim, which
# allocates states in the parameter's dtype: halve them for bf16 parameters).
OPTIMIZER_STATE_BYTES_PER_PARAM = {"sgd": 0, "sgd_momentum": 4, "adam": 8, "adamw": 8,
                                   "adam_8bit": 2}


def bytes_per_param(convention: str = "zero") -> int:
    """Bytes per parameter of mixed-precision Adam training, by convention.

    ``"zero"``: 16 = fp16 params 2 + fp16 grads 2 + fp32 master copy 4 + momentum 4 + variance 4.
    ``"hf"``: 18 = fp32 weights 4 + fp16 copy 2 + fp32 grads 4 + AdamW 8.
    ``"fp32"``: 16 = fp32 params 4 + fp32 grads 4 + Adam 8 (plain fp32 training).
    """
    table = {"zero": 16, "hf": 18, "fp32": 16}
    if convention not in table:
        raise ValueError(f"convention must be one of {sorted(table)}, not {convention!r}")
    return table[convention]


def model_state_bytes(n_params: int, *, param_bytes: int = 4, grad_bytes: int | None = None,
                      optimizer: str = "adam", master_copy_bytes: int = 0) -> dict[str, int]:
    """Parameters, gradients and optimizer state for ``n_params`` parameters, in bytes."""
    if optimizer not in OPTIMIZER_STATE_BYTES_PER_PARAM:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZER_STATE_BYTES_PER_PARAM)}")
    grad_bytes = param_bytes if grad_bytes is None else grad_bytes
    return {
        "parameters": n_params * (param_bytes + master_copy_bytes),
        "gradients": n_params * grad_bytes,
        "optimizer state": n_params * OPTIMIZER_STATE_BYTES_PER_PARAM[optimizer],
    }


def korthikanti_layer_bytes(s: int, b: int, h: int, a: int, recompute: str = "none") -> float:
    """Activation bytes of one transformer layer (16-bit activations, 1-byte dropout masks).

    ``recompute="none"``: s*b*h*(34 + 5*a*s/h); ``"selective"``: 34*s*b*h;
    ``"full"``: 2*s*b*h (only the layer's input is kept).
    """
    sbh = s * b * h
    if recompute == "none":
        return sbh * (34 + 5 * a * s / h)
    if recompute == "selective":
        return 34.0 * sbh
    if recompute == "full":
        return 2.0 * sbh
    raise ValueError("recompute must be 'none', 'selective' or 'full'")


def chen_segment_cost(n: int, k: int) -> float:
    """Peak activation memory, in units of one layer's activations, for ``n`` equal layers cut
    into ``k`` checkpointed segments: the k segment inputs stay, plus one segment
    (about n/k layers) recomputed at a time. Minimum 2*sqrt(n) at k = sqrt(n)."""
    if not (1 <= k <= n):
        raise ValueError("need 1 <= k <= n")
    return n / k + k


def zero_bytes_per_device(n_params: float, n_devices: int, stage: int, k: int = 12) -> float:
    """Model-state bytes per device under ZeRO stage 0-3 (mixed-precision Adam: K = 12)."""
    p, nd = n_params, n_devices
    if stage == 0:
        return (4 + k) * p
    if stage == 1:
        return 4 * p + k * p / nd
    if stage == 2:
        return 2 * p + (2 + k) * p / nd
    if stage == 3:
        return (4 + k) * p / nd
    raise ValueError("stage must be 0, 1, 2 or 3")


def optimal_segments(n: int) -> int:
    """The k that minimises n/k + k among integers (about sqrt(n))."""
    return min(range(1, n + 1), key=lambda k: (chen_segment_cost(n, k), k))


__all__.append("optimal_segments")

