"""The OOM clinic: one small training job, rebuilt from a configuration and measured.

Used by: solutions/05_oom_clinic/05_oom_clinic.ipynb (its demos and its graded tests),
tests/lessons/test_oom.py.

The job is :class:`memlab.models.TinyGPT` trained with AdamW on a synthetic language task,
``steps`` optimizer steps of ``effective_batch`` sequences each (:class:`JobSpec`). How it is run
is a :class:`JobConfig`: mixed precision (``amp``: bf16 autocast where the device has bf16, fp16
with ``torch.amp.GradScaler`` otherwise), activation checkpointing of every block
(``checkpoint``: ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``) and gradient
accumulation (``micro_batch`` sequences per forward, ``accumulation_steps`` forwards per
optimizer step). :func:`run_job` builds the job from scratch (same seed, same data) and runs it,
optionally inside :func:`memlab.memory_budget`, and reports the peak, the loss on a held-out
batch and a *sample counter*: the ids of the sequences each optimizer step trained on, seen by a
forward pre-hook on the model. A configuration that keeps ``micro_batch * accumulation_steps``
below the effective batch trains on fewer samples per step, and the counter shows it.
:func:`time_per_step` times one effective batch against the plain job with
``torch.utils.benchmark.Timer`` (:mod:`memlab.measure.timing`): a ratio and its spread.

What lives here, and what does not: nothing in this module is the answer to a graded exercise
(learners can read it). It holds the job, the measurements, the budgets of the notebook (computed
from measured peaks, so the verdict is the same on the CPU tracker and on CUDA) and
:func:`check_job`, the checks the graded tests run on a learner's configuration.

References: PyTorch AMP (https://pytorch.org/docs/stable/amp.html); torch.utils.checkpoint
(https://pytorch.org/docs/stable/checkpoint.html); Chen et al. 2016 (arXiv 1604.06174);
Micikevicius et al. 2018 (arXiv 1710.03740); Hugging Face transformers docs, "Methods and tools
for efficient training on a single GPU" (the order: mixed precision, checkpointing,
accumulation, optimizer choice; the batch size last).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint as _checkpoint

from ..measure.budget import memory_budget
from ..measure.device import get_device
from ..measure.models import TinyGPT
from ..measure.timing import TimingResult, time_ratio
from ..measure.tracker import MemoryTracker
from ..measure.units import fmt_bytes

__all__ = [
    "JobSpec", "JobConfig", "JobResult", "amp_dtype", "sample_tokens", "build_job", "job_forward",
    "run_job", "fits", "step_function", "time_per_step", "TimingResult", "reference",
    "clinic_budgets", "check_config_types",
    "check_job", "plot_results", "results_table",
]


# ------------------------------------------------------------------------------ what
@dataclass(frozen=True)
class JobSpec:
    """The training job: model sizes, sequence length, effective batch, steps, optimizer.

    Sequences are ``seq`` tokens; the effective batch is ``effective_batch`` sequences per
    optimizer step. The defaults are the notebook's job.
    """

    vocab: int = 128
    hidden: int = 64
    heads: int = 4
    layers: int = 4
    seq: int = 64
    effective_batch: int = 16
    steps: int = 6
    lr: float = 1e-2
    seed: int = 0


@dataclass(frozen=True)
class JobConfig:
    """How the job runs. The plain job is ``JobConfig(micro_batch=spec.effective_batch)``."""

    amp: bool = False
    checkpoint: bool = False
    micro_batch: int = 16
    accumulation_steps: int = 1

    def label(self) -> str:
        parts = ["amp" if self.amp else "fp32"]
        if self.checkpoint:
            parts.append("ckpt")
        parts.append(f"{self.micro_batch}x{self.accumulation_steps}")
        return " + ".join(parts)


@dataclass
class JobResult:
    """What :func:`run_job` measured.

    ``peak_bytes``: highest live memory (parameters, gradients, optimizer state, activations and
    temporaries, batch), or ``None`` when timing only. ``fits``: False when the budget raised
    ``torch.OutOfMemoryError`` (then ``oom_message`` holds its text, with the breakdown).
    ``samples_per_step``: sequences the model was run on (with grad) in each optimizer step,
    counted by a forward pre-hook; ``sample_ids``: their ids, in order. ``eval_loss``: fp32
    cross-entropy on a fixed held-out batch after training; ``initial_eval_loss`` before.
    """

    config: JobConfig
    fits: bool
    peak_bytes: int | None
    oom_message: str = ""
    losses: list[float] = field(default_factory=list)
    eval_loss: float = math.nan
    initial_eval_loss: float = math.nan
    samples_per_step: list[int] = field(default_factory=list)
    sample_ids: list[int] = field(default_factory=list)
    optimizer_steps: int = 0
    backend: str = ""

    def summary(self) -> str:
        peak = fmt_bytes(self.peak_bytes) if self.peak_bytes is not None else "-"
        if not self.fits:
            return f"{self.config.label():>20}: OUT OF MEMORY (budget exceeded)"
        return (f"{self.config.label():>20}: peak {peak:>10}, held-out loss {self.eval_loss:.3f}, "
                f"{self.optimizer_steps} steps of {self.samples_per_step[:1] or ['-']} samples")


def amp_dtype(device: torch.device) -> torch.dtype:
    """bf16 on the CPU and on CUDA GPUs that have it natively (Ampere and later: compute
    capability 8.0), else fp16. Not ``torch.cuda.is_bf16_supported()``: its default
    (``including_emulation=True``) also says True on a T4 or V100, which only emulate bf16
    (torch/cuda/__init__.py)."""
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 0):
        return torch.float16
    return torch.bfloat16


# ------------------------------------------------------------------------------ data
def sample_tokens(spec: JobSpec, ids: Sequence[int] | torch.Tensor,
                  device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences number ``ids`` of the synthetic task, as ``(inputs (s, b), targets (s, b))``.

    Sequence ``i`` starts at a token drawn from ``i`` and follows ``t -> (5*t + 3) % vocab``
    with, at every position, a 1-in-2 chance of a random token instead (small tokens more likely):
    learnable (the token frequencies within a few steps, the rule later), never trivial. The same id always gives the same sequence, on every device.
    """
    ids = torch.as_tensor(list(ids) if not isinstance(ids, torch.Tensor) else ids, dtype=torch.int64)
    b, s, v = ids.numel(), spec.seq, spec.vocab
    seqs = torch.empty(s + 1, b, dtype=torch.int64)
    for j, i in enumerate(ids.tolist()):
        g = torch.Generator().manual_seed(1_000_003 * spec.seed + int(i))
        start = int(torch.randint(0, v, (1,), generator=g))
        # skewed "noise": the smaller of two uniform draws (token k has probability ~ 2(v-k)/v^2)
        noise = torch.minimum(torch.randint(0, v, (s + 1,), generator=g),
                              torch.randint(0, v, (s + 1,), generator=g)).tolist()
        use_noise = (torch.rand(s + 1, generator=g) < 0.5).tolist()
        col = [start]
        for t in range(1, s + 1):
            col.append(noise[t] if use_noise[t] else (5 * col[-1] + 3) % v)
        seqs[:, j] = torch.tensor(col, dtype=torch.int64)
    return seqs[:-1].to(device), seqs[1:].to(device)


_EVAL_OFFSET = 10_000_000  # held-out ids: never in a training step


# ----------------------------------------------------------------------------- model
def build_job(spec: JobSpec, device: str | torch.device | None = None
              ) -> tuple[TinyGPT, torch.optim.Optimizer]:
    """The model and its AdamW optimizer, weights drawn after ``torch.manual_seed(spec.seed)``
    (inside ``torch.random.fork_rng``: the caller's random state is left alone)."""
    dev = get_device(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = TinyGPT(vocab=spec.vocab, hidden=spec.hidden, heads=spec.heads, layers=spec.layers,
                        max_seq=spec.seq, dropout=0.0)
        # GPT-2's initialisation of the embeddings (std 0.02): with nn.Embedding's default
        # (std 1) the tied head starts with huge logits and a loss far above log(vocab).
        nn.init.normal_(model.tok.weight, std=0.02)
        nn.init.normal_(model.pos.weight, std=0.02)
    model = model.to(dev)
    # foreach=False: one small kernel per parameter, the same on every device, and no large
    # temporary lists of the whole model's state during the update.
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.lr, foreach=False)
    return model, optimizer


def job_forward(model: TinyGPT, idx: torch.Tensor, checkpoint: bool = False) -> torch.Tensor:
    """``model(idx)``, with each block under ``torch.utils.checkpoint`` when ``checkpoint``.

    Same computation as :meth:`TinyGPT.forward` (tested): embeddings, blocks, final LayerNorm,
    tied head. A checkpointed block keeps only its input; its activations are recomputed in the
    backward pass.
    """
    s = idx.shape[0]
    pos = torch.arange(s, device=idx.device)
    x = model.tok(idx) + model.pos(pos)[:, None, :]                   # (s, b, h)
    for block in model.blocks:
        x = _checkpoint(block, x, use_reentrant=False) if checkpoint else block(x)
    return model.head(model.ln_f(x))                                  # (s, b, vocab)


def _validate(spec: JobSpec, config: JobConfig) -> None:
    for name in ("micro_batch", "accumulation_steps"):
        v = getattr(config, name)
        if type(v) is not int or v < 1:
            raise ValueError(f"JobConfig.{name} must be a positive int, got {v!r}")
    if config.micro_batch > spec.effective_batch:
        raise ValueError(f"micro_batch {config.micro_batch} is larger than the effective batch "
                         f"{spec.effective_batch}")


def _eval_loss(model: TinyGPT, spec: JobSpec, device: torch.device) -> float:
    x, y = sample_tokens(spec, range(_EVAL_OFFSET, _EVAL_OFFSET + 16), device)
    with torch.no_grad():
        logits = model(x)
        return float(nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten()))


def _scaler(device: torch.device, config: JobConfig) -> torch.amp.GradScaler | None:
    """A GradScaler where the job needs one: mixed precision in fp16 (a GPU without bf16)."""
    if config.amp and amp_dtype(device) == torch.float16:
        return torch.amp.GradScaler(device.type)
    return None


def _train_step(model: TinyGPT, optimizer: torch.optim.Optimizer, config: JobConfig,
                device: torch.device, micro_batches: list, scaler: torch.amp.GradScaler | None,
                phase: Any = None) -> float:
    """One optimizer step over one effective batch: ``micro_batches`` = [(ids, inputs, targets)]
    of its micro-batches. Returns the step's loss (the mean over the effective batch)."""
    dtype = amp_dtype(device)
    per_step = config.micro_batch * config.accumulation_steps
    phase = phase if phase is not None else (lambda name: contextlib.nullcontext())
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for _ids, x, y in micro_batches:
        with phase("forward"):
            with torch.autocast(device.type, dtype=dtype, enabled=config.amp):
                logits = job_forward(model, x, config.checkpoint)
            # The mean over this micro-batch, weighted by its share of the step's samples:
            # the gradients add up to those of the mean over the whole step.
            loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
            loss = loss * (x.shape[1] / per_step)
            del logits
        with phase("backward"):
            (scaler.scale(loss) if scaler is not None else loss).backward()
        total += float(loss.detach())
    with phase("optimizer"):
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
    return total


def _train(model: TinyGPT, optimizer: torch.optim.Optimizer, spec: JobSpec, config: JobConfig,
           device: torch.device, steps: int, batches: list, tracker: MemoryTracker | None = None
           ) -> list[float]:
    """The training loop. ``batches[step][k]`` = (ids, inputs, targets) of micro-batch k."""
    scaler = _scaler(device, config)
    phase = tracker.phase if tracker is not None else None
    return [_train_step(model, optimizer, config, device, batches[step], scaler, phase)
            for step in range(steps)]


def _make_batches(spec: JobSpec, config: JobConfig, steps: int, device: torch.device) -> list:
    per_step = config.micro_batch * config.accumulation_steps
    out, next_id = [], 0
    for _ in range(steps):
        micro = []
        for _k in range(config.accumulation_steps):
            ids = list(range(next_id, next_id + config.micro_batch))
            next_id += config.micro_batch
            x, y = sample_tokens(spec, ids, device)
            micro.append((ids, x, y))
        out.append(micro)
    assert next_id == steps * per_step
    return out


def run_job(spec: JobSpec, config: JobConfig, *, budget_bytes: int | None = None,
            device: str | torch.device | None = None, steps: int | None = None,
            backend: str = "auto", measure: bool = True) -> JobResult:
    """Build the job from scratch and train it for ``steps`` (default ``spec.steps``) steps.

    ``budget_bytes``: run inside :func:`memlab.memory_budget` (a real ``torch.OutOfMemoryError``
    on CUDA with ``backend="auto"``; the tracker's budget on the CPU, and on CUDA with
    ``backend="cpu-tracker"``, which counts exactly the same tensors on both devices). Model,
    optimizer and all the step's batches count from the start. ``measure=False``: no tracker at
    all (the losses and the sample counter only). Time is measured by :func:`time_per_step`.
    """
    _validate(spec, config)
    dev = get_device(device)
    steps = spec.steps if steps is None else steps
    model, optimizer = build_job(spec, dev)
    batches = _make_batches(spec, config, steps, dev)
    initial = _eval_loss(model, spec, dev)
    seen: list[int] = []
    counts: list[int] = []

    def count(module, args):
        if torch.is_grad_enabled():
            seen.append(int(args[0].shape[1]))

    # job_forward calls the model's modules, not model(): count at its first one, the token
    # embedding, which sees every sequence once per forward (checkpointing recomputes blocks only).
    handle = model.tok.register_forward_pre_hook(count)
    ids_trained: list[int] = []
    losses: list[float] = []
    result = JobResult(config=config, fits=True, peak_bytes=None, initial_eval_loss=initial,
                       backend="none")
    n_steps = {"n": 0}
    step_hook = optimizer.register_step_post_hook(lambda *a: n_steps.__setitem__("n", n_steps["n"] + 1))
    try:
        if budget_bytes is not None:
            try:
                with memory_budget(int(budget_bytes), model, optimizer, batches, device=dev,
                                   backend=backend) as tracker:
                    losses = _train(model, optimizer, spec, config, dev, steps, batches, tracker)
                result.peak_bytes = tracker.peak_bytes
                result.backend = tracker.backend
            except torch.OutOfMemoryError as exc:
                result.fits = False
                result.oom_message = str(exc)
                result.backend = tracker.backend if "tracker" in locals() else backend
        elif measure:
            tracker = MemoryTracker(dev, backend=backend, timeline=False)
            tracker.track(model, optimizer, batches)
            with tracker:
                losses = _train(model, optimizer, spec, config, dev, steps, batches, tracker)
            result.peak_bytes = tracker.peak_bytes
            result.backend = tracker.backend
        else:
            losses = _train(model, optimizer, spec, config, dev, steps, batches, None)
    finally:
        handle.remove()
        step_hook.remove()
    # The sample counter: forwards (with grad) grouped into optimizer steps.
    k = config.accumulation_steps
    counts = [sum(seen[i:i + k]) for i in range(0, len(seen), k)]
    for step in batches[:n_steps["n"]]:
        for ids, _x, _y in step:
            ids_trained.extend(ids)
    result.losses = losses
    result.samples_per_step = counts
    result.sample_ids = ids_trained
    result.optimizer_steps = n_steps["n"]
    if result.fits:
        result.eval_loss = _eval_loss(model, spec, dev)
    return result


def fits(spec: JobSpec, config: JobConfig, budget_bytes: int, *,
         device: str | torch.device | None = None, backend: str = "cpu-tracker") -> bool:
    """Does the job stay within ``budget_bytes``? Two optimizer steps are enough: the second one
    already has gradients, optimizer state and activations at their steady-state sizes.

    ``backend="cpu-tracker"`` (the default) counts live tensors exactly on any device, so the
    verdict is the same on a laptop and on a GPU; ``backend="auto"`` asks the CUDA allocator.
    """
    return run_job(spec, config, budget_bytes=budget_bytes, device=device, steps=2,
                   backend=backend).fits


def step_function(spec: JobSpec, config: JobConfig, device: str | torch.device | None = None
                  ) -> Callable[[], float]:
    """A callable that runs one optimizer step of the job (one effective batch, the first
    step's samples, in ``config``'s micro-batches) on a model and optimizer built for it, the
    same step as :func:`run_job` runs, without a tracker. Each call trains the model one more
    step on the same samples; it returns the step's loss."""
    _validate(spec, config)
    dev = get_device(device)
    model, optimizer = build_job(spec, dev)
    micro_batches = _make_batches(spec, config, 1, dev)[0]
    scaler = _scaler(dev, config)
    return lambda: _train_step(model, optimizer, config, dev, micro_batches, scaler)


def time_per_step(spec: JobSpec, config: JobConfig, baseline: JobConfig | None = None, *,
                  device: str | torch.device | None = None, repeats: int = 5,
                  min_run_time: float = 0.05) -> TimingResult:
    """Seconds per optimizer step (one effective batch) of ``config`` against ``baseline``
    (default: the plain job), measured together with ``torch.utils.benchmark.Timer``
    (:func:`memlab.measure.timing.time_ratio`): one warm-up step each (it allocates the optimizer
    state), the current number of threads for both, CUDA synchronised, ``blocked_autorange`` in
    ``repeats`` rounds that alternate the two, so a machine that slows down slows both.

    Returns a :class:`memlab.measure.timing.TimingResult`: ``median`` and ``baseline_median``
    (seconds per effective batch), ``ratio`` (config / baseline) and ``spread`` (the middle half
    of the per-round ratios: show it next to the ratio), ``warning`` when it is too wide. Compare ratios measured this way only
    with each other, each against its own baseline run.
    """
    if baseline is None:
        baseline = JobConfig(micro_batch=spec.effective_batch)
    dev = get_device(device)
    fn = step_function(spec, config, dev)
    base = step_function(spec, baseline, dev)
    return time_ratio(fn, base, repeats=repeats, warmup=1, device=dev, min_run_time=min_run_time)


# ---------------------------------------------------------------------------- budgets
def reference(spec: JobSpec, device: str | torch.device | None = None) -> JobResult:
    """The plain job (fp32, whole effective batch at once, no checkpointing), measured: the
    baseline peak and the reference held-out loss after ``spec.steps`` steps."""
    return run_job(spec, JobConfig(micro_batch=spec.effective_batch), device=device,
                   backend="cpu-tracker")


def _peak(spec: JobSpec, config: JobConfig, device) -> int:
    return run_job(spec, config, device=device, steps=2, backend="cpu-tracker").peak_bytes


def clinic_budgets(spec: JobSpec, device: str | torch.device | None = None,
                   baseline_peak: int | None = None) -> dict[str, int]:
    """Three budgets for ``spec``, placed between measured peaks (exact tensor counts, so the
    same on every device):

    - ``"roomy"``: 10% above the plain job's peak: nothing is needed;
    - ``"loose"``: halfway between the peak with mixed precision alone and the plain job's
      peak: mixed precision is needed, and enough;
    - ``"tight"``: halfway between the peak of AMP + checkpointing + accumulation over two
      micro-batches and the lowest peak of the configurations that drop one of the three
      (AMP + checkpointing on the whole batch, AMP + two micro-batches, checkpointing + two
      micro-batches in fp32).

    Raises ``ValueError`` when the sizes do not separate these peaks.
    """
    E = spec.effective_batch
    if E % 2:
        raise ValueError("the effective batch must be even")
    base = baseline_peak if baseline_peak is not None else _peak(spec, JobConfig(micro_batch=E), device)
    amp = _peak(spec, JobConfig(amp=True, micro_batch=E), device)
    all3 = _peak(spec, JobConfig(amp=True, checkpoint=True, micro_batch=E // 2, accumulation_steps=2), device)
    drop_one = min(
        _peak(spec, JobConfig(amp=True, checkpoint=True, micro_batch=E), device),
        _peak(spec, JobConfig(amp=True, micro_batch=E // 2, accumulation_steps=2), device),
        _peak(spec, JobConfig(checkpoint=True, micro_batch=E // 2, accumulation_steps=2), device),
    )
    if not (amp < base and all3 < drop_one):
        raise ValueError(f"these sizes do not separate the peaks (plain {base}, amp {amp}, "
                         f"all three {all3}, one left out {drop_one})")
    return {"roomy": int(base * 1.1), "loose": (amp + base) // 2, "tight": (all3 + drop_one) // 2}


# ----------------------------------------------------------------------------- checks
def check_config_types(config: Any) -> list[str]:
    """Problems with the *type* of a configuration (exact types: ``True`` is not ``1``)."""
    if type(config).__name__ != "JobConfig" or not all(hasattr(config, f.name) for f in fields(JobConfig)):
        return [f"expected a ml.oom.JobConfig, got {type(config).__name__}: return "
                "ml.oom.JobConfig(amp=..., checkpoint=..., micro_batch=..., accumulation_steps=...)"]
    out = []
    for name, want in (("amp", bool), ("checkpoint", bool), ("micro_batch", int),
                       ("accumulation_steps", int)):
        v = getattr(config, name)
        if type(v) is not want:
            out.append(f"JobConfig.{name} is a {type(v).__name__} ({v!r}): use a plain {want.__name__}")
    return out


def check_job(spec: JobSpec, config: Any, budget_bytes: int, reference_loss: float, *,
              device: str | torch.device | None = None, loss_tolerance: float = 0.01,
              unneeded: Sequence[str] = ()) -> list[str]:
    """Rebuild the job from ``config``, re-run it inside the budget and list what is wrong.

    Checked, in order (an empty list means all is well):

    1. ``config`` is a :class:`JobConfig` with exact types;
    2. the effective batch is kept: ``micro_batch * accumulation_steps == spec.effective_batch``
       (a smaller product is a silently lowered batch);
    3. the whole run (``spec.steps`` steps) stays within ``budget_bytes``
       (``backend="cpu-tracker"``: exact tensor bytes, the same verdict on CPU and CUDA);
    4. the sample counter: every optimizer step trained on exactly ``effective_batch`` samples
       and every sample of the run was used once;
    5. the model trained: the held-out loss fell below the initial one, and lies within
       ``loss_tolerance`` (relative) of ``reference_loss`` (the plain job's, same samples);
    6. nothing in ``unneeded`` is used (``"checkpoint"``, ``"accumulation"``, ``"amp"``).
    """
    problems = check_config_types(config)
    if problems:
        return problems
    config = JobConfig(amp=config.amp, checkpoint=config.checkpoint, micro_batch=config.micro_batch,
                       accumulation_steps=config.accumulation_steps)
    E = spec.effective_batch
    if config.micro_batch < 1 or config.accumulation_steps < 1:
        return [f"micro_batch and accumulation_steps must be >= 1, got {config}"]
    per_step = config.micro_batch * config.accumulation_steps
    if per_step != E:
        return [f"micro_batch * accumulation_steps = {config.micro_batch} * {config.accumulation_steps}"
                f" = {per_step}, but the effective batch is {E}: "
                + ("this lowers the batch size (fewer samples per optimizer step changes the "
                   "training), which this job must not do: keep the product equal to it with "
                   "accumulation_steps" if per_step < E else
                   "this trains on more samples per step than the job asks for")]
    result = run_job(spec, config, budget_bytes=budget_bytes, device=device, backend="cpu-tracker")
    if not result.fits:
        first = result.oom_message.splitlines()[0] if result.oom_message else ""
        return [f"{config.label()} runs out of memory under the budget {fmt_bytes(budget_bytes)} "
                f"({first}): add the next technique in the order (mixed precision, "
                "checkpointing, accumulation)"]
    if result.optimizer_steps != spec.steps or result.samples_per_step != [E] * spec.steps:
        problems.append(f"the sample counter saw {result.samples_per_step} samples in "
                        f"{result.optimizer_steps} optimizer steps, expected {[E] * spec.steps}: "
                        "every step must train on the whole effective batch")
    if sorted(result.sample_ids) != list(range(E * spec.steps)):
        problems.append("some samples were skipped or used twice: each optimizer step must "
                        "train on every sample of its effective batch, once")
    if not result.eval_loss < result.initial_eval_loss:
        problems.append(f"the model did not train: held-out loss {result.eval_loss:.3f} is not "
                        f"below the initial {result.initial_eval_loss:.3f}")
    elif abs(result.eval_loss - reference_loss) > loss_tolerance * reference_loss:
        problems.append(f"held-out loss {result.eval_loss:.3f} after {spec.steps} steps is more "
                        f"than {loss_tolerance:.0%} away from the reference {reference_loss:.3f}")
    names = {"checkpoint": config.checkpoint, "accumulation": config.accumulation_steps > 1,
             "amp": config.amp}
    for tech in unneeded:
        if names[tech]:
            problems.append(f"{config.label()} uses {tech}, which this budget does not need "
                            f"(it fits without it): {tech} costs time"
                            + (" (recomputation)" if tech == "checkpoint" else
                               " (smaller, slower micro-batches)" if tech == "accumulation" else ""))
    return problems


# --------------------------------------------------------------------------- reporting
def _time_cell(r: dict[str, Any]) -> str:
    ratio = r.get("time_ratio", math.nan)
    spread = r.get("time_spread")
    if spread is None:
        return f"{ratio:.2f}x"
    return f"{ratio:.2f}x ({spread[0]:.2f}-{spread[1]:.2f})"


def results_table(rows: Sequence[dict[str, Any]]) -> str:
    """Aligned text of the notebook's results: one row per variant with keys ``variant``,
    ``peak`` (bytes or None), ``fits``, ``seconds`` (per effective batch), ``time_ratio``
    (against the plain job), ``time_spread`` (the middle half of the per-round ratios, or None
    for the plain job itself), ``loss`` (held-out) and ``reference_loss``."""
    head = (f"{'variant':>24} {'peak':>11} {'fits':>5} {'ms/eff. batch':>13} "
            f"{'time vs plain (mid-half)':>24} {'loss':>7} {'vs ref':>7}")
    lines = [head, "-" * len(head)]
    for r in rows:
        peak = fmt_bytes(r["peak"]) if r.get("peak") is not None else "-"
        loss = r.get("loss", math.nan)
        ref = r.get("reference_loss", math.nan)
        lines.append(f"{r['variant']:>24} {peak:>11} {('yes' if r['fits'] else 'NO'):>5} "
                     f"{1e3 * r.get('seconds', math.nan):>13.1f} {_time_cell(r):>24} "
                     f"{loss:>7.3f} {loss - ref:>+7.3f}")
    return "\n".join(lines)


def plot_results(rows: Sequence[dict[str, Any]], budgets: dict[str, int] | None = None, ax: Any = None):
    """Two bar charts side by side: peak memory (with the budgets as lines) and time per
    effective batch relative to the plain job, one bar per variant, with the spread of the
    per-round ratios (``time_spread``) as an error bar."""
    import matplotlib.pyplot as plt

    from ..measure.units import MiB

    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(11, 3.6))
    names = [r["variant"] for r in rows]
    peaks = [(r["peak"] or 0) / MiB for r in rows]
    colors = ["tab:green" if r["fits"] else "tab:red" for r in rows]
    ax[0].barh(names, peaks, color=colors)
    for name, b in (budgets or {}).items():
        ax[0].axvline(b / MiB, ls="--", color="k", lw=1)
        ax[0].text(b / MiB, len(rows) - 0.5, f" {name}", va="bottom", fontsize=8)
    ax[0].set_xlabel("peak memory (MiB)")
    ax[0].invert_yaxis()
    ratios = [r.get("time_ratio", math.nan) for r in rows]
    spreads = [r.get("time_spread") or (q, q) for r, q in zip(rows, ratios)]
    err = [[max(0.0, q - lo) for q, (lo, _) in zip(ratios, spreads)],
           [max(0.0, hi - q) for q, (_, hi) in zip(ratios, spreads)]]
    ax[1].barh(names, ratios, color="tab:blue", xerr=err, capsize=3)
    ax[1].axvline(1.0, ls="--", color="k", lw=1)
    ax[1].set_xlabel("time per effective batch (x plain job; bars: middle half of the rounds)")
    ax[1].invert_yaxis()
    ax[1].set_yticklabels([])
    ax[0].figure.tight_layout()
    return ax
