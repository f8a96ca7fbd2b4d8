"""Watching a training loop: a spy that records what the loop did, in order, and the checks
that read the record (one forward and one backward per micro-batch, one optimizer step per group,
zero_grad at boundaries, the GradScaler's call order, clipping, the precision autocast ran at).

Used by: memlab.lessons.accumulation (04) and memlab.lessons.amp (03), which re-export these
names (``ml.accumulation.TrainingSpy``, ``ml.amp.TrainingSpy``,
``ml.accumulation.check_accumulation``, ``ml.accumulation.skip_until_written``, ...); the
graded tests of solutions/03_mixed_precision and solutions/04_accumulation;
tests/measure/test_training_spy.py, tests/lessons/test_accumulation.py, tests/lessons/test_amp.py.

It lives in ``measure`` (layer 1) because two notebooks measure loops with it: a lesson module
imports only ``memlab.measure`` (docs/ARCHITECTURE.md, tests/test_layers.py).

Reloading: 04's graded cells ``importlib.reload(memlab.accumulation)`` to get fresh spies, and
that reload reloads this module too (see memlab.lessons.accumulation). Objects imported before a
reload (03's ``memlab.lessons.amp`` holds :func:`check_accumulation`) keep working: the "not
checked" default of ``amp_dtype`` is compared by value, not identity.

References: torch.optim.Optimizer.register_step_pre_hook; torch.nn.Module.register_forward_hook;
torch.amp.GradScaler (https://pytorch.org/docs/stable/amp.html); PyTorch AMP examples,
"Gradient accumulation" (https://pytorch.org/docs/stable/notes/amp_examples.html).
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

__all__ = [
    "micro_batch_sizes", "group_sizes", "Event", "TRACE_LEGEND", "TrainingSpy",
    "check_micro_batches", "check_accumulation", "spy_device", "skip_until_written",
]


# ------------------------------------------------------------------------ arithmetic
def micro_batch_sizes(n_items: int, micro_batch_size: int) -> list[int]:
    """Sizes of the micro-batches that cut ``n_items`` into pieces of ``micro_batch_size``; the
    last one is shorter when the division is not even: ``micro_batch_sizes(10, 4) -> [4, 4, 2]``."""
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    full, rest = divmod(int(n_items), int(micro_batch_size))
    return [int(micro_batch_size)] * full + ([rest] if rest else [])


def group_sizes(n_micro_batches: int, accum_steps: int) -> list[int]:
    """Micro-batches per optimizer step: ``accum_steps`` each, the last group shorter if need be
    (it still ends with a step, as in the Hugging Face Trainer)."""
    return micro_batch_sizes(n_micro_batches, accum_steps)


# -------------------------------------------------------------------------------- spy
@dataclass
class Event:
    """One thing a training loop did, in order. ``kind`` is one of forward, backward,
    zero_grad, step (optimizer.step, seen by a pre-hook), scheduler, scale, unscale_,
    unscale_(auto) (done by scaler.step itself), scaler.step, scaler.step:end, update."""

    kind: str
    index: int | None = None     # forward/backward: which forward (0, 1, ...)
    size: int | None = None      # forward: items along batch_dim
    grads_clean: bool | None = None  # forward: every .grad None or all zero
    grad_norm: float | None = None   # step: total 2-norm of the gradients it is about to apply
    lr: float | None = None          # step: learning rate of param group 0
    inside_scaler_step: bool = False
    out_dtype: torch.dtype | None = None  # forward: dtype of the model's output
    other_scaler: bool = False       # step: run by a GradScaler that is not the one watched


#: How to read :meth:`TrainingSpy.trace` (printed next to traces in 03 and 04).
TRACE_LEGEND = ("Z = optimizer.zero_grad(), F64 = forward of 64 items, B = backward(), "
                "sc = scaler.scale(loss), un = scaler.unscale_(optimizer) (un* = done by "
                "scaler.step itself), [ ... ] = scaler.step(optimizer) with the optimizer.step() "
                "S it makes inside, up = scaler.update(), L = scheduler.step()")

_SHORT = {"forward": "F", "backward": "B", "zero_grad": "Z", "step": "S", "scheduler": "L",
          "scale": "sc", "unscale_": "un", "unscale_(auto)": "un*", "scaler.step": "[",
          "scaler.step:end": "]", "update": "up"}


class TrainingSpy:
    """Watch what a training loop does, in one ordered list of :class:`Event`.

    >>> with TrainingSpy(model, optimizer, scheduler, scaler) as spy:
    ...     train(model, optimizer, scheduler, ...)
    >>> print(spy.trace())          # Z F8 sc B F8 sc B un [ S ] up L ...
    >>> spy.count("step")

    What it hooks (and removes again on exit):

    - model: forward pre-/post-hooks (batch size along ``batch_dim``, whether the gradients
      were clean) and a hook on the output tensor that fires when backward reaches it. Only
      forwards run with grad enabled are recorded;
    - optimizer: ``register_step_pre_hook`` (each real optimizer step, with the gradient norm and
      learning rate it is about to use) and ``zero_grad``;
    - scheduler: ``step``; scaler: ``scale``, ``unscale_``, ``step``, ``update``.
    Any of them may be ``None``.
    """

    def __init__(self, model: torch.nn.Module | None = None,
                 optimizer: torch.optim.Optimizer | None = None, scheduler: Any = None,
                 scaler: Any = None, *, batch_dim: int = 0):
        self.model, self.optimizer, self.scheduler, self.scaler = model, optimizer, scheduler, scaler
        self.batch_dim = batch_dim
        self.events: list[Event] = []
        self._handles: list[Any] = []
        self._patched: list[tuple[Any, str]] = []
        self._n_forward = 0
        self._in_scaler_step = False

    # ------------------------------------------------------------------ reading
    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def count(self, kind: str) -> int:
        return sum(e.kind == kind for e in self.events)

    def forward_sizes(self) -> list[int]:
        return [e.size for e in self.events if e.kind == "forward"]

    def step_events(self) -> list[Event]:
        return [e for e in self.events if e.kind == "step"]

    def trace(self) -> str:
        """The events in short form: F8 = forward of 8 items, B backward, Z zero_grad,
        S optimizer step, L scheduler step, sc scale, un unscale_, [ ] scaler.step, up update."""
        out = []
        for e in self.events:
            s = _SHORT.get(e.kind, e.kind)
            out.append(f"{s}{e.size}" if e.kind == "forward" else s)
        return " ".join(out)

    # ------------------------------------------------------------------ hooks
    def _log(self, event: Event) -> None:
        self.events.append(event)

    def _grads_clean(self) -> bool:
        for p in self.model.parameters():
            if p.grad is not None and bool(p.grad.detach().ne(0).any()):
                return False
        return True

    def _forward_pre(self, module, args):
        if not torch.is_grad_enabled():
            return None
        size = None
        for a in args:
            if isinstance(a, torch.Tensor) and a.dim() > self.batch_dim:
                size = int(a.shape[self.batch_dim])
                break
        index = self._n_forward
        self._n_forward += 1
        self._log(Event("forward", index=index, size=size, grads_clean=self._grads_clean()))
        module._memlab_spy_index = index
        return None

    def _forward_post(self, module, args, output):
        index = getattr(module, "_memlab_spy_index", None)
        if index is None or not torch.is_grad_enabled():
            return None
        module._memlab_spy_index = None
        out = output
        while isinstance(out, (tuple, list)) and out:
            out = out[0]
        if isinstance(out, torch.Tensor):
            for e in reversed(self.events):
                if e.kind == "forward" and e.index == index:
                    e.out_dtype = out.dtype
                    break
        if isinstance(out, torch.Tensor) and out.requires_grad:
            def on_backward(grad, index=index):
                self._log(Event("backward", index=index))
                return None
            out.register_hook(on_backward)
        return None

    def _step_pre(self, optimizer, args, kwargs):
        sq = 0.0
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    sq += float(p.grad.detach().double().pow(2).sum())
        self._log(Event("step", grad_norm=math.sqrt(sq), lr=float(optimizer.param_groups[0]["lr"]),
                        inside_scaler_step=self._in_scaler_step,
                        other_scaler=not self._in_scaler_step and _called_by_a_grad_scaler()))
        return None

    def _patch(self, obj: Any, name: str, make: Callable[[Callable], Callable]) -> None:
        original = getattr(obj, name)
        setattr(obj, name, make(original))
        self._patched.append((obj, name))

    def __enter__(self) -> "TrainingSpy":
        if self.model is not None:
            self._handles.append(self.model.register_forward_pre_hook(self._forward_pre))
            self._handles.append(self.model.register_forward_hook(self._forward_post))
        if self.optimizer is not None:
            self._handles.append(self.optimizer.register_step_pre_hook(self._step_pre))

            def make_zero(orig):
                def zero_grad(*a, **k):
                    self._log(Event("zero_grad"))
                    return orig(*a, **k)
                return zero_grad
            self._patch(self.optimizer, "zero_grad", make_zero)
        if self.scheduler is not None:
            def make_sched(orig):
                def step(*a, **k):
                    self._log(Event("scheduler"))
                    return orig(*a, **k)
                return step
            self._patch(self.scheduler, "step", make_sched)
        if self.scaler is not None:
            def make_simple(kind):
                def make(orig):
                    def wrapper(*a, **k):
                        self._log(Event(kind))
                        return orig(*a, **k)
                    return wrapper
                return make

            def make_unscale(orig):
                def unscale_(*a, **k):
                    self._log(Event("unscale_(auto)" if self._in_scaler_step else "unscale_"))
                    return orig(*a, **k)
                return unscale_

            def make_step(orig):
                def step(*a, **k):
                    self._log(Event("scaler.step"))
                    self._in_scaler_step = True
                    try:
                        return orig(*a, **k)
                    finally:
                        self._in_scaler_step = False
                        self._log(Event("scaler.step:end"))
                return step
            self._patch(self.scaler, "scale", make_simple("scale"))
            self._patch(self.scaler, "unscale_", make_unscale)
            self._patch(self.scaler, "step", make_step)
            self._patch(self.scaler, "update", make_simple("update"))
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        for obj, name in reversed(self._patched):
            try:
                delattr(obj, name)  # back to the class's method
            except AttributeError:
                pass
        self._patched.clear()
        if self.model is not None and hasattr(self.model, "_memlab_spy_index"):
            del self.model._memlab_spy_index


def _called_by_a_grad_scaler() -> bool:
    """Is a ``GradScaler.step`` on the call stack (a scaler the spy does not watch)?"""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            owner = frame.f_locals.get("self")
            if frame.f_code.co_name == "step" and isinstance(owner, torch.amp.GradScaler):
                return True
            frame = frame.f_back
        return False
    finally:
        del frame


def check_micro_batches(spy: TrainingSpy, sizes: Sequence[int]) -> list[str]:
    """What is wrong with how the micro-batches went through the model (empty list: nothing).

    One forward per micro-batch, in order, at its full size (none shrunk, skipped, repeated, and
    not the whole batch at once); backward reached each micro-batch's output exactly once, and
    before the next micro-batch's forward (summing k losses and calling backward once keeps all k
    micro-batches' activations alive at the same time and saves no memory).
    """
    sizes = [int(s) for s in sizes]
    n = len(sizes)
    seen = spy.forward_sizes()
    if seen != sizes:
        if not seen:
            why = ("no forward was seen: call the model as model(x) (not model.forward(x)), with "
                   "gradients enabled.")
        elif len(seen) < n:
            why = ("fewer forwards than micro-batches: is the last, shorter micro-batch dropped, "
                   "or the whole batch run at once?")
        elif len(seen) > n:
            why = "the model ran more forwards than there are micro-batches"
        else:
            why = "a micro-batch was shrunk or reordered"
        return [f"the model saw batch sizes {seen}, expected {sizes}: {why} Run each micro-batch "
                "through the model exactly once, in order, at its full size."]
    ev = spy.events
    pos_f = {e.index: i for i, e in enumerate(ev) if e.kind == "forward"}
    pos_b: dict[int, list[int]] = {}
    for i, e in enumerate(ev):
        if e.kind == "backward":
            pos_b.setdefault(e.index, []).append(i)
    for m in range(n):
        got = len(pos_b.get(m, []))
        if got != 1:
            return [f"micro-batch {m}: backward reached its output {got} times, expected once: "
                    "call backward() once per micro-batch, on a loss computed from its output."]
    for m in range(n - 1):
        if pos_b[m][0] > pos_f[m + 1]:
            return ["backward() of a micro-batch ran after the next micro-batch's forward: call "
                    "backward() on each micro-batch's loss before the next forward (summing the "
                    "losses and calling backward once keeps every micro-batch's activations "
                    "alive and saves no memory)."]
    return []


class _Unchecked(str):
    """The default of ``amp_dtype`` ("not checked"). A string compared by value, not an
    ``object()`` compared by identity: graded notebook cells ``importlib.reload`` memlab.accumulation,
    which reloads this module, and a reload must not turn the default of a function imported before it into "checked"."""


_UNCHECKED: Any = _Unchecked("<amp dtype not checked>")


def _is_unchecked(value: Any) -> bool:
    return isinstance(value, str) and value == "<amp dtype not checked>"


def check_accumulation(spy: TrainingSpy, sizes: Sequence[int], accum_steps: int, *,
                       scaler: bool = False, max_norm: float | None = None,
                       amp_dtype: Any = _UNCHECKED) -> list[str]:
    """What is wrong with the loop ``spy`` watched, as sentences that say what to fix
    (an empty list: nothing found).

    ``sizes``: the micro-batch sizes the loop was given, in order; ``accum_steps``: micro-batches
    per optimizer step (a shorter last group still ends with a step). Checks: one forward per
    micro-batch at its full size (none shrunk, skipped or repeated); backward once per micro-batch
    before the next forward; one optimizer step per group, after its last backward; zero_grad
    only at a group boundary and clean gradients when a group starts; one scheduler step per
    optimizer step, after it; with a scaler: scale on every micro-batch, and per group one
    unscale_ (before clipping), one scaler.step (never optimizer.step directly), one update after
    it; with ``max_norm``: gradient norm at every step <= max_norm. With ``amp_dtype`` given
    (``None`` included: then no autocast): the model's output dtype in every forward is
    ``amp_dtype`` (``float32`` for ``None``), so autocast really ran at the requested precision
    on this device.
    """
    sizes = [int(s) for s in sizes]
    n = len(sizes)
    groups = group_sizes(n, accum_steps)
    problems = check_micro_batches(spy, sizes)
    if problems:
        return problems
    layout = _Layout.of(spy.events, groups)
    if not _is_unchecked(amp_dtype):
        problems += _autocast_problems(spy, amp_dtype)
    problems += _step_problems(layout, n, accum_steps)
    problems += _zero_grad_problems(layout)
    if spy.scheduler is not None:
        problems += _scheduler_problems(layout)
    if scaler:
        problems += _scale_problems(layout, n)
        if _scaler_unused(layout):
            problems.insert(0, "the GradScaler passed in as `scaler` was never used: use that "
                            "object (scaler.scale, scaler.step, scaler.update), do not build your "
                            "own GradScaler inside the function (the caller owns its scale and "
                            "state across epochs).")
            return problems
        problems += _scaler_step_problems(layout, max_norm)
    if max_norm is not None:
        problems += _clipping_problems(layout, max_norm)
    return problems


@dataclass(frozen=True)
class _Layout:
    """Where the micro-batches and their groups sit in the events a spy recorded."""

    ev: list[Event]
    groups: list[int]                # micro-batches per group
    first_of_group: list[int]        # the micro-batch that starts each group
    last_of_group: list[int]         # the micro-batch that ends each group
    pos_f: dict[int | None, int]     # micro-batch -> position of its forward in ``ev``
    pos_b: dict[int | None, int]     # micro-batch -> position of its backward in ``ev``
    steps: list[int]                 # positions of the optimizer steps

    @classmethod
    def of(cls, ev: list[Event], groups: list[int]) -> _Layout:
        first_of_group, last_of_group = [], []
        start = 0
        for g in groups:
            first_of_group.append(start)
            last_of_group.append(start + g - 1)
            start += g
        return cls(ev, groups, first_of_group, last_of_group,
                   {e.index: i for i, e in enumerate(ev) if e.kind == "forward"},
                   {e.index: i for i, e in enumerate(ev) if e.kind == "backward"},
                   [i for i, e in enumerate(ev) if e.kind == "step"])

    def window(self, g: int) -> tuple[int, int]:
        """(group ``g``'s last backward, the next group's first forward or the end of ``ev``)."""
        lo = self.pos_b[self.last_of_group[g]]
        hi = (self.pos_f[self.first_of_group[g + 1]] if g + 1 < len(self.groups)
              else len(self.ev))
        return lo, hi

    def positions(self, kind: str) -> list[int]:
        """The positions of the events of ``kind``."""
        return [i for i, e in enumerate(self.ev) if e.kind == kind]


def _autocast_problems(spy: TrainingSpy, amp_dtype: Any) -> list[str]:
    want = torch.float32 if amp_dtype is None else amp_dtype
    got = [e.out_dtype for e in spy.events if e.kind == "forward"]
    if not any(d != want for d in got):
        return []
    bad = next(d for d in got if d != want)
    if amp_dtype is None:
        return [f"amp_dtype=None, but the model's output was {bad}: None means no "
                "autocast (torch.autocast(..., enabled=amp_dtype is not None); "
                "autocast with dtype=None picks a 16-bit default)."]
    return [f"amp_dtype={amp_dtype}, but the model's output was {bad}: autocast "
            f"did not run in {amp_dtype} on this {spy_device(spy)} device. Use "
            "torch.autocast(next(model.parameters()).device.type, "
            "dtype=amp_dtype): autocast hard-coded to 'cuda' (or "
            "device_type=\"cuda\") disables itself on a machine without CUDA "
            "and leaves a model on the CPU in fp32 on a machine with CUDA, and "
            "a fixed dtype ignores the argument."]


def _step_problems(layout: _Layout, n: int, accum_steps: int) -> list[str]:
    """One optimizer step per group, between its last backward and the next group."""
    if len(layout.steps) != len(layout.groups):
        return [f"optimizer.step() ran {len(layout.steps)} times, expected {len(layout.groups)} "
                f"({n} micro-batches, accum_steps={accum_steps}: one step per "
                f"{accum_steps} micro-batches, and one for a shorter last group)."]
    for g, s in enumerate(layout.steps):
        lo, hi = layout.window(g)
        if not lo < s < hi:
            return [f"optimizer step {g} is not between the last backward of its "
                    "group and the next group's first forward: step once per group, "
                    "after all of its micro-batches."]
    return []


def _zero_grad_problems(layout: _Layout) -> list[str]:
    """Clean gradients when a group starts, and zero_grad only at a boundary."""
    problems = []
    for g, first in enumerate(layout.first_of_group):
        if not layout.ev[layout.pos_f[first]].grads_clean:
            problems.append(f"group {g} started with gradients left from before: call "
                            "optimizer.zero_grad() at every boundary (before a group's first "
                            "micro-batch, or right after optimizer.step()).")
            break
    steps = layout.steps
    for i in layout.positions("zero_grad"):
        ok = i < layout.pos_b[layout.first_of_group[0]] or (bool(steps) and i > steps[-1])
        for g in range(1, len(layout.groups)):
            if g - 1 < len(steps) and steps[g - 1] < i < layout.pos_b[layout.first_of_group[g]]:
                ok = True
        if not ok:
            problems.append("optimizer.zero_grad() ran inside an accumulation window (or between "
                            "the last backward and the step): it erases gradients that the step "
                            "still needs. Zero only at a boundary: before a group's first "
                            "backward, or right after optimizer.step().")
            break
    return problems


def _scheduler_problems(layout: _Layout) -> list[str]:
    """One scheduler step per optimizer step, after it."""
    scheds = layout.positions("scheduler")
    if len(scheds) != len(layout.steps):
        return [f"scheduler.step() ran {len(scheds)} times for {len(layout.steps)} optimizer "
                "steps: step the scheduler once per optimizer step, not per "
                "micro-batch."]
    for s, sched in zip(layout.steps, scheds):
        if sched < s:
            return ["scheduler.step() ran before optimizer.step(): call it right "
                    "after the optimizer step (PyTorch warns otherwise)."]
    return []


def _scale_problems(layout: _Layout, n: int) -> list[str]:
    """scaler.scale on every micro-batch, between its forward and backward; one scaler.step and
    one update per group."""
    problems = []
    scales = layout.positions("scale")
    if len(scales) != n:
        problems.append(f"scaler.scale() ran {len(scales)} times for {n} micro-batches: scale "
                        "every micro-batch's loss before its backward().")
    else:
        for m, i in enumerate(scales):
            if not layout.pos_f[m] < i < layout.pos_b[m]:
                problems.append("scaler.scale(loss) must come between a micro-batch's "
                                "forward and its backward().")
                break
    for kind, what in (("scaler.step", "scaler.step(optimizer)"), ("update", "scaler.update()")):
        c = sum(e.kind == kind for e in layout.ev)
        if c != len(layout.groups):
            problems.append(f"{what} ran {c} times, expected once per optimizer step "
                            f"({len(layout.groups)}).")
    return problems


def _scaler_unused(layout: _Layout) -> bool:
    """The optimizer was stepped by another GradScaler, or by none while nothing was scaled."""
    return any(e.kind == "step" and e.other_scaler for e in layout.ev) or bool(
        layout.steps and not any(e.kind in ("scale", "scaler.step") for e in layout.ev))


def _scaler_step_problems(layout: _Layout, max_norm: float | None) -> list[str]:
    """Per group, with a scaler: the optimizer stepped only through scaler.step, one unscale_
    before clipping, scaler.step then update after the group's last backward, and unscale_
    between that backward and scaler.step."""
    problems = []
    if any(e.kind == "step" and not e.inside_scaler_step for e in layout.ev):
        problems.append("optimizer.step() was called directly: with a GradScaler call "
                        "scaler.step(optimizer), which skips the step when a gradient is "
                        "inf/NaN.")
    unscales = layout.positions("unscale_")
    if max_norm is not None and len(unscales) != len(layout.groups):
        problems.append(f"scaler.unscale_(optimizer) ran {len(unscales)} times, expected once "
                        f"per optimizer step ({len(layout.groups)}), before clipping.")
    sstarts, updates = layout.positions("scaler.step"), layout.positions("update")
    for g in range(min(len(layout.groups), len(sstarts), len(updates))):
        lo, hi = layout.window(g)
        if not (lo < sstarts[g] < updates[g] < hi):
            problems.append("per group: scaler.step(optimizer) then scaler.update(), both "
                            "after the group's last backward and before the next group.")
            break
    windows = []  # (after the group's last backward, before its scaler.step)
    for g in range(len(layout.groups)):
        lo, hi = layout.window(g)
        nxt = [s for s in sstarts if lo < s < hi]
        windows.append((lo, nxt[0] if nxt else hi))
    for u in unscales:
        if not any(lo < u < hi for lo, hi in windows):
            problems.append("scaler.unscale_(optimizer) ran outside its place: once per "
                            "group, after the group's last backward and before "
                            "scaler.step(optimizer) (unscaling mid-window mixes scaled and "
                            "unscaled gradients).")
            break
    return problems


def _clipping_problems(layout: _Layout, max_norm: float) -> list[str]:
    """The gradients each optimizer step applied had norm <= max_norm (within 0.1%)."""
    for e in layout.ev:
        if (e.kind == "step" and e.grad_norm is not None
                and e.grad_norm > max_norm * (1 + 1e-3) + 1e-6):
            return [f"the gradients applied by optimizer.step() had norm "
                    f"{e.grad_norm:.4g} > max_norm={max_norm}: clip with "
                    "torch.nn.utils.clip_grad_norm_ (after scaler.unscale_) before "
                    "stepping."]
    return []


def spy_device(spy: TrainingSpy) -> str:
    """The device type of the watched model's parameters ("cpu" without a model)."""
    if spy.model is None:
        return "cpu"
    p = next(iter(spy.model.parameters()), None)
    return p.device.type if p is not None else "cpu"


# ------------------------------------------------------- a demo on a loop not written yet
class skip_until_written:
    """``with skip_until_written("accumulate_gradients"):`` runs a demo cell that uses a
    learner's function, and turns the ``NotImplementedError`` of a function not written yet into
    one line on stdout (so the untouched notebook still runs top to bottom without errors)."""

    def __init__(self, *names: str):
        self.names = names

    def __enter__(self) -> "skip_until_written":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and issubclass(exc_type, NotImplementedError):
            what = " and ".join(self.names) or "an exercise above"
            print(f"(skipped: {what} is not written yet: finish it above, then run this cell again)")
            return True
        return False
