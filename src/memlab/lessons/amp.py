"""Mixed precision: number formats, what autocast runs in which dtype, and the checks of an AMP
training step (autocast + torch.amp.GradScaler).

Used by: solutions/03_mixed_precision/03_mixed_precision.ipynb (its demos and its graded tests),
tests/lessons/test_amp.py.

What lives here, and what does not: nothing in this module is the answer to a graded exercise
(learners can read it). It holds the number-format facts, a recorder of the dtype every op ran
in, an injector of a non-finite gradient, the checks the graded tests run on a spied AMP step
(the spy itself is :class:`memlab.measure.training_spy.TrainingSpy`, shared with notebook 04), a toy
regression task, and plots.

Facts the notebook builds on (and cites):

- fp16 (IEEE half): 1 sign, 5 exponent, 10 mantissa bits; largest 65504, smallest normal
  2**-14 (6.10e-5), smallest subnormal 2**-24 (5.96e-8), eps 2**-10. Magnitudes below 2**-25
  round to 0; 65520 and above round to inf.
- bf16: 1 sign, 8 exponent, 7 mantissa bits: fp32's range (largest 3.39e38, smallest normal
  1.18e-38) with eps 2**-7, so 1 + 2**-9 rounds back to 1.
- Micikevicius et al. 2018, "Mixed Precision Training" (ICLR, arXiv 1710.03740): fp32 master
  weights, loss scaling, fp32 accumulation. Their sec. 3.2 shows activation gradients of a real
  network (Multibox SSD) falling below fp16's range; scaling the loss shifts them back up.
- PyTorch AMP (https://pytorch.org/docs/stable/amp.html and
  https://pytorch.org/docs/stable/notes/amp_examples.html): ``torch.autocast(device_type, dtype)``
  and ``torch.amp.GradScaler(device)``; the order scale -> backward -> unscale_ -> clip ->
  scaler.step -> update; a step whose gradients hold inf/NaN is skipped and the scale is
  multiplied by ``backoff_factor`` (0.5), and after ``growth_interval`` (2000) good steps in a
  row it is multiplied by ``growth_factor`` (2). ``torch.cuda.amp.*`` is deprecated.
- GradScaler with bf16 gradients on CUDA: "_amp_foreach_non_finite_check_and_unscale_cuda" not
  implemented for 'BFloat16' (pytorch/pytorch#127176). On CPU (torch 2.13) the same call works.
"""
from __future__ import annotations

import contextlib
import inspect
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..measure.training_spy import TrainingSpy, check_accumulation, skip_until_written

__all__ = [
    "FP16_MAX", "FP16_SMALLEST_NORMAL", "FP16_SMALLEST_SUBNORMAL",
    "FloatFormat", "float_formats", "format_table",
    "OpRecord", "OpDtypeRecorder", "op_dtypes", "op_dtype_summary", "low_precision_ops",
    "Autocast", "grad_norm", "InfInjection", "inject_nonfinite_grad",
    "TrainingSpy", "check_amp_steps", "explain_scaler_error", "deprecated_amp_lines", "skip_until_written",
    "teacher_task", "activation_gradients",
    "plot_gradient_histogram", "plot_curves", "plot_scale_history",
]

FP16_MAX = 65504.0                 # largest finite fp16
FP16_SMALLEST_NORMAL = 2.0**-14    # 6.10e-5
FP16_SMALLEST_SUBNORMAL = 2.0**-24  # 5.96e-8: anything below half of it becomes 0


# ----------------------------------------------------------------------- number formats
@dataclass(frozen=True)
class FloatFormat:
    """One floating-point format, from ``torch.finfo`` (bits: sign + exponent + mantissa)."""

    dtype: torch.dtype
    bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    smallest_subnormal: float
    eps: float

    @property
    def name(self) -> str:
        return str(self.dtype).replace("torch.", "")

    @property
    def bytes(self) -> int:
        return self.bits // 8


def float_formats(dtypes: Sequence[torch.dtype] = (torch.float32, torch.float16, torch.bfloat16)
                  ) -> list[FloatFormat]:
    """The facts of each format, read from ``torch.finfo`` (nothing typed in by hand)."""
    out = []
    for dt in dtypes:
        fi = torch.finfo(dt)
        mant = round(-math.log2(fi.eps))           # eps = 2**-mantissa_bits
        expo = fi.bits - 1 - mant
        out.append(FloatFormat(dt, fi.bits, expo, mant, float(fi.max), float(fi.smallest_normal),
                               float(fi.smallest_normal) * float(fi.eps), float(fi.eps)))
    return out


def format_table(dtypes: Sequence[torch.dtype] = (torch.float32, torch.float16, torch.bfloat16)) -> str:
    """The formats side by side, as aligned text."""
    rows = [("format", "bytes", "exponent bits", "mantissa bits", "largest", "smallest normal",
             "smallest subnormal", "eps (1 to next)")]
    for f in float_formats(dtypes):
        rows.append((f.name, str(f.bytes), str(f.exponent_bits), str(f.mantissa_bits),
                     f"{f.max:.5g}", f"{f.smallest_normal:.3g}", f"{f.smallest_subnormal:.3g}",
                     f"{f.eps:.3g}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows)


# ------------------------------------------------------------- which dtype each op ran in
@dataclass(frozen=True)
class OpRecord:
    """One aten op: its name, the dtypes of its floating-point tensor inputs and outputs."""

    op: str
    inputs: tuple[torch.dtype, ...]
    outputs: tuple[torch.dtype, ...]


# Ops that only reshape, alias, copy or create: left out of summaries (``_to_copy`` is the cast
# autocast inserts; it is kept, as "cast").
_BOOKKEEPING = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "split",
                "clone", "detach", "reshape", "alias", "slice", "select", "unsqueeze", "squeeze",
                "ones", "zeros", "empty", "empty_like", "zeros_like", "ones_like", "arange", "triu",
                "lift_fresh", "copy_", "fill_", "new_empty", "new_zeros", "full", "scalar_tensor",
                "_local_scalar_dense", "as_strided", "contiguous", "bernoulli_", "split_with_sizes"}


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", str(func))  # e.g. "addmm.default"
    return name.split(".")[0]


def _float_dtypes(obj: Any) -> tuple[torch.dtype, ...]:
    flat, _ = tree_flatten(obj)
    return tuple(t.dtype for t in flat if isinstance(t, torch.Tensor) and t.is_floating_point())


class OpDtypeRecorder(TorchDispatchMode):
    """Record every aten op run inside the block, with the dtypes it read and wrote.

    Autocast works above this level, so the recorder sees what really ran: the casts autocast
    inserted (``_to_copy``) and each op in the dtype autocast chose.

    >>> with OpDtypeRecorder() as rec, torch.autocast("cpu", dtype=torch.bfloat16):
    ...     model(x)
    >>> op_dtype_summary(rec.records)
    """

    def __init__(self) -> None:
        super().__init__()
        self.records: list[OpRecord] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.records.append(OpRecord(_op_name(func), _float_dtypes((args, kwargs or {})),
                                     _float_dtypes(out)))
        return out


def op_dtypes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, list[OpRecord]]:
    """Run ``fn(*args, **kwargs)`` under an :class:`OpDtypeRecorder`: ``(result, records)``."""
    with OpDtypeRecorder() as rec:
        result = fn(*args, **kwargs)
    return result, rec.records


def _short(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


def op_dtype_summary(records: Iterable[OpRecord], *, keep_bookkeeping: bool = False) -> dict[str, str]:
    """``{op: "in -> out"}`` in first-seen order, e.g. ``{"addmm": "bfloat16 -> bfloat16",
    "native_layer_norm": "float32 -> float32", "cast": "float32 -> bfloat16"}``. An op seen with
    several dtype combinations lists each once, separated by ``" | "``."""
    out: dict[str, list[str]] = {}
    for r in records:
        name = "cast" if r.op == "_to_copy" else r.op
        if not keep_bookkeeping and name in _BOOKKEEPING:
            continue
        if not r.outputs:
            continue
        ins = ",".join(sorted({_short(d) for d in r.inputs})) or "-"
        outs = ",".join(sorted({_short(d) for d in r.outputs}))
        combo = f"{ins} -> {outs}"
        if combo not in out.setdefault(name, []):
            out[name].append(combo)
    return {k: " | ".join(v) for k, v in out.items()}


_MATMULS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_addmm_activation",
            "convolution", "_convolution", "cudnn_convolution", "mkldnn_convolution",
            "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
            "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu"}


def low_precision_ops(records: Iterable[OpRecord], dtype: torch.dtype,
                      ops: Iterable[str] | None = None) -> list[str]:
    """Names of the matmul-like ops (or of ``ops``) whose outputs were in ``dtype``."""
    wanted = set(ops) if ops is not None else _MATMULS
    return [r.op for r in records if r.op in wanted and r.outputs and all(d == dtype for d in r.outputs)]


# ------------------------------------------------------------------------- small tools
class Autocast(nn.Module):
    """Wrap a model so that its forward runs under ``torch.autocast(device_type, dtype)``.

    Lets tools that call ``model(inputs)`` themselves (``ml.training_step_breakdown``) measure an
    autocast step. The wrapper owns no parameters of its own: it counts as the model.
    """

    def __init__(self, model: nn.Module, device_type: str, dtype: torch.dtype):
        super().__init__()
        self.model = model
        self.device_type = device_type
        self.dtype = dtype

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=self.device_type, dtype=self.dtype):
            return self.model(*args, **kwargs)


def _params(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, nn.Module):
        return list(obj.parameters())
    if isinstance(obj, torch.optim.Optimizer):
        return [p for g in obj.param_groups for p in g["params"]]
    if isinstance(obj, torch.Tensor):
        return [obj]
    return list(obj)


def grad_norm(params: Any) -> float:
    """Total 2-norm of the gradients of ``params`` (a module, an optimizer or tensors), in fp64;
    ``inf``/``nan`` when a gradient holds one; 0.0 when there are no gradients."""
    sq = 0.0
    with torch.no_grad():
        for p in _params(params):
            if p.grad is not None:
                sq += float(p.grad.detach().double().pow(2).sum())
    return math.sqrt(sq) if not math.isnan(sq) else math.nan


@dataclass
class InfInjection:
    """What :func:`inject_nonfinite_grad` did: how many gradients it poisoned, on which parameter."""

    param_name: str
    value: float
    count: int = 0


@contextlib.contextmanager
def inject_nonfinite_grad(model: nn.Module, value: float = math.inf, *, param: str | None = None,
                          times: int | None = None) -> Iterator[InfInjection]:
    """Inside the block, every backward writes ``value`` (inf by default, or nan) into the first
    element of one parameter's gradient: what an fp16 overflow does to a real step.

    The hook sits on the parameter (``Tensor.register_hook``), so it works however the code
    under test calls backward. ``param``: the parameter's name (default: the first one that
    requires grad); ``times``: poison only the first ``times`` backward passes.
    """
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise ValueError("the model has no parameter that requires grad")
    if param is not None:
        named = [(n, p) for n, p in named if n == param]
        if not named:
            raise ValueError(f"no trainable parameter named {param!r}")
    name, p = named[0]
    state = InfInjection(name, float(value))

    def hook(grad: torch.Tensor) -> torch.Tensor:
        if times is not None and state.count >= times:
            return grad
        state.count += 1
        grad = grad.clone()
        grad.view(-1)[0] = value
        return grad

    handle = p.register_hook(hook)
    try:
        yield state
    finally:
        handle.remove()


# ------------------------------------------------------------------- checking a learner
_AMP_WORDS = (
    # check_accumulation speaks of groups of micro-batches (04); with one batch per step, 03's
    # learner reads "step" and "batch".
    (re.compile(r"group (\d+) started with gradients left from before:.*"),
     r"step \1 started with the gradients of the previous step still in p.grad: backward() adds "
     r"to them, so every step after the first applies old + new gradients. Call "
     r"optimizer.zero_grad(set_to_none=True) at the start of amp_step, before the forward."),
    (re.compile(r"optimizer\.zero_grad\(\) ran inside an accumulation window.*"),
     "optimizer.zero_grad() ran between backward() and the step: it erases the gradients the "
     "step needs. Call it at the start of amp_step, before the forward."),
    (re.compile(r"micro-batch(es)?"), r"batch\1"),
    (re.compile(r"\baccum_steps=1: "), ""),
    (re.compile(r"\bper group\b"), "per step"),
    (re.compile(r"\bthe group's\b"), "the step's"),
    (re.compile(r"\bnext group\b"), "next step"),
)


def _in_amp_words(problem: str) -> str:
    """A problem found by check_accumulation, reworded for single-batch AMP steps (03)."""
    for pattern, repl in _AMP_WORDS:
        problem = pattern.sub(repl, problem)
    return problem


def check_amp_steps(spy: TrainingSpy, batch_sizes: Sequence[int], *, max_norm: float,
                    clipped: bool = True) -> list[str]:
    """What is wrong with the AMP training steps ``spy`` watched (one batch per step), as
    sentences that say what to fix; an empty list when nothing is.

    Everything :func:`memlab.measure.training_spy.check_accumulation` checks with
    ``accum_steps=1`` and a scaler (one forward and one backward per step, clean gradients when
    a step starts, scale between forward and backward, one unscale_ then scaler.step then update per step,
    never optimizer.step directly, applied gradient norm <= max_norm), and, with ``clipped``
    (the caller made sure the unclipped gradient norm is above ``max_norm``), that the gradients
    applied have norm max_norm: clipping the still-scaled gradients (before unscale_) would leave
    them ``scale`` times too small.
    """
    # the common wrong cause first: a GradScaler made inside the step (the spy watches the one
    # passed in, so its calls are missing and optimizer.step looks "called directly")
    used = sum(spy.count(k) for k in ("scale", "unscale_", "scaler.step", "update"))
    if used == 0 and spy.count("step") > 0:
        return ["the scaler you are given was never used (no scale, unscale_, step or update on it) "
                "although the optimizer stepped: do not create a GradScaler inside the step (a new one "
                "starts at 2**16 every step and never learns the scale); call scale/unscale_/step/update "
                "on the `scaler` argument."]
    problems = [_in_amp_words(p) for p in
                check_accumulation(spy, batch_sizes, 1, scaler=True, max_norm=max_norm)]
    if problems or not clipped:
        return problems
    for e in spy.step_events():
        if e.grad_norm is not None and e.grad_norm < max_norm * (1 - 1e-2):
            problems.append(f"the gradients applied by optimizer.step() had norm {e.grad_norm:.3g}, "
                            f"far below max_norm={max_norm:g} although the true gradient is larger: "
                            "were they clipped while still scaled? Call scaler.unscale_(optimizer) "
                            "first, then clip_grad_norm_.")
            break
    return problems


_SCALER_ERRORS = (
    ("unscale_() has already been called on this optimizer since the last update()",
     "scaler.unscale_(optimizer) ran a second time before scaler.update(): call scaler.update() at the "
     "end of every step, and unscale_ once per step"),
    ("No inf checks were recorded prior to update",
     "scaler.update() ran but scaler.step(optimizer) recorded no inf check: step with "
     "scaler.step(optimizer), not optimizer.step()"),
    ("No inf checks were recorded for this optimizer",
     "scaler.step(optimizer) found no gradient to check: clear the gradients at the start of the step "
     "(optimizer.zero_grad(set_to_none=True) before the forward), never between backward and the step"),
    ("step() has already been called since the last update()",
     "scaler.step(optimizer) ran twice before scaler.update(): one scaler.step and one scaler.update "
     "per step"),
)


def explain_scaler_error(err: BaseException, what: str = "amp_step") -> str:
    """A GradScaler error raised inside the learner's step, with the cause it usually has (the raw
    messages, e.g. "No inf checks were recorded prior to update", name no fix)."""
    text = f"{what} raised {type(err).__name__}: {err}"
    for needle, hint in _SCALER_ERRORS:
        if needle in str(err):
            return f"{text} ({hint})"
    return (f"{text} (GradScaler says this when scaler.update() is missing at the end of a step, or "
            "unscale_ runs twice in one step)")


_DEPRECATED = re.compile(r"\btorch\s*\.\s*cuda\s*\.\s*amp\b|\bcuda\s*\.\s*amp\s*\.|\btorch\s*\.\s*cpu\s*\.\s*amp\b"
                         r"|\bfrom\s+torch\.cuda\s+import\s+amp\b|\bfrom\s+torch\.cuda\.amp\s+import\b")


def deprecated_amp_lines(*objs: Any) -> list[str]:
    """Source lines of ``objs`` (functions, classes, or source strings) that use the deprecated
    ``torch.cuda.amp`` / ``torch.cpu.amp`` API. Comments are ignored."""
    hits = []
    for obj in objs:
        try:
            src = obj if isinstance(obj, str) else inspect.getsource(obj)
        except (OSError, TypeError):
            continue
        for line in src.splitlines():
            code = line.split("#", 1)[0]
            if _DEPRECATED.search(code):
                hits.append(line.strip())
    return hits


# ----------------------------------------------------------------------------- a task
def teacher_task(hidden: int, n_tokens: int, n_batches: int, *, seed: int = 0,
                 device: str | torch.device = "cpu") -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A regression a small MLP can learn: ``y = tanh(x @ W1) @ W2`` for a fixed random teacher.

    Returns ``n_batches`` batches ``(x, y)``, each ``(n_tokens, hidden)`` fp32 on ``device``,
    drawn from a CPU generator seeded with ``seed`` (the same numbers on every device).
    """
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(hidden, 2 * hidden, generator=g) / math.sqrt(hidden)
    w2 = torch.randn(2 * hidden, hidden, generator=g) / math.sqrt(2 * hidden)
    out = []
    for _ in range(n_batches):
        x = torch.randn(n_tokens, hidden, generator=g)
        y = torch.tanh(x @ w1) @ w2
        out.append((x.to(device), y.to(device)))
    return out


def activation_gradients(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor,
                         loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """fp32 gradients of the loss with respect to every leaf module's output (the activation
    gradients backward passes from layer to layer), flattened into one tensor.

    Runs one forward and backward in whatever precision the model is in; parameter gradients
    are left as they were (``torch.autograd.grad`` does not touch ``.grad``).
    """
    outs: list[torch.Tensor] = []

    def keep(module, args, output):
        if isinstance(output, torch.Tensor) and output.requires_grad:
            outs.append(output)

    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(keep) for m in leaves]
    try:
        loss = loss_fn(model(inputs), targets)
    finally:
        for h in handles:
            h.remove()
    grads = torch.autograd.grad(loss, outs, allow_unused=True)
    flat = [g.detach().float().flatten() for g in grads if g is not None]
    return torch.cat(flat) if flat else torch.zeros(0)


# ----------------------------------------------------------------------------- plots
def plot_gradient_histogram(values: torch.Tensor, ax: Any = None, *, scale: float = 1.0,
                            label: str | None = None, title: str | None = None) -> Any:
    """Histogram of log2|value * scale| with fp16's limits marked; exact zeros are left out
    (their count is in the legend). Returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.2))
    v = values.detach().double().abs().flatten() * scale
    zeros = int((v == 0).sum())
    v = v[v > 0]
    logs = torch.log2(v).numpy()
    lo = math.floor(min(logs.min(), -30)) if len(logs) else -30
    hi = math.ceil(max(logs.max(), 17)) if len(logs) else 17
    ax.hist(logs, bins=range(lo, hi + 1), alpha=0.6,
            label=(label or f"gradients x {scale:g}") + (f" ({zeros} exact zeros)" if zeros else ""))
    ax.axvspan(lo, -25, color="tab:red", alpha=0.12)
    ax.axvline(-24, color="tab:red", linestyle="--", linewidth=1)
    ax.axvline(-14, color="tab:orange", linestyle=":", linewidth=1)
    ax.axvline(math.log2(FP16_MAX), color="tab:red", linestyle="--", linewidth=1)
    ymax = ax.get_ylim()[1]
    ax.text(-24.3, ymax * 0.92, "fp16 smallest\nsubnormal 2^-24", ha="right", va="top", fontsize=7)
    ax.text(-13.7, ymax * 0.92, "smallest\nnormal 2^-14", ha="left", va="top", fontsize=7)
    ax.text(math.log2(FP16_MAX) - 0.3, ymax * 0.92, "max\n65504", ha="right", va="top", fontsize=7)
    ax.set_xlabel("log2 |value|   (red band: becomes 0 in fp16)")
    ax.set_ylabel("count")
    ax.legend(loc="upper left", fontsize=8)
    if title:
        ax.set_title(title)
    return ax


def plot_curves(curves: dict[str, Sequence[float]], ax: Any = None, *, ylabel: str = "loss",
                title: str | None = None, logy: bool = True) -> Any:
    """One line per entry of ``curves`` (name -> values per step). Returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    for name, ys in curves.items():
        ax.plot(range(len(ys)), list(ys), label=name, linewidth=1.2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return ax


def plot_scale_history(scales: Sequence[float], skipped: Sequence[bool], ax: Any = None, *,
                       title: str | None = None) -> Any:
    """The loss scale before each step (log2), skipped steps marked in red. Returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3))
    xs = list(range(len(scales)))
    ys = [math.log2(s) for s in scales]
    ax.step(xs, ys, where="post", color="black", linewidth=1)
    sk = [i for i, s in enumerate(skipped) if s]
    ax.scatter(sk, [ys[i] for i in sk], color="tab:red", zorder=3, label="step skipped (inf/NaN found)")
    ax.set_xlabel("step")
    ax.set_ylabel("log2(loss scale)")
    if sk:
        ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return ax
