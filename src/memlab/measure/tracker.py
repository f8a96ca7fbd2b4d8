"""Live tensor memory, the same way on CUDA and on the CPU.

Used by: every notebook (``ml.measure_peak``, ``ml.MemoryTracker``), the autograder, the tests.

Two backends behind one class, :class:`MemoryTracker`:

``cuda-allocator``
    The caching allocator's own counters: ``torch.cuda.reset_peak_memory_stats``,
    ``memory_allocated`` / ``max_memory_allocated`` and ``memory_reserved`` beside them. These
    are the numbers a CUDA out-of-memory error is about.

``cpu-tracker``
    An exact count of the bytes of live tensor storages. It is a ``TorchDispatchMode``: every
    aten op (forward, the autograd engine's backward ops, optimizer kernels, factory functions)
    passes through ``__torch_dispatch__``, where each output's ``UntypedStorage`` is recorded once
    (views share a storage, so nothing is counted twice) and a weak reference with a callback
    subtracts its bytes when the storage is freed.

Why a dispatch mode of our own, and not ``torch.distributed._tools.mem_tracker.MemTracker``?
MemTracker is built on exactly this mechanism (we follow its design: weak references to
storages, a ``WeakIdKeyDictionary``, ``UntypedStorage.resize_`` patched while active), and the
test-suite uses it as the reference the CPU peak must match within 1%. But it lives in a private
module (``_tools``) whose API changes between releases, and the course needs three things it does
not offer: a timeline of live bytes op by op with the phase of the step (forward, backward,
optimizer), a budget that raises ``torch.OutOfMemoryError`` with a breakdown at the moment of
failure, and a CUDA backend that reads the allocator instead of modelling it. A hand-written
model of the caching allocator is deliberately avoided: on CUDA we ask the allocator.

The CPU tracker counts tensors *created inside* the tracked region. Tensors that already exist
(parameters, an optimizer's state, the batch) are added with :meth:`MemoryTracker.track`.
"""
from __future__ import annotations

import contextlib
import functools
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from .device import get_device
from .units import fmt_bytes

__all__ = [
    "MemoryTracker", "PeakResult", "TimelinePoint", "measure_peak", "storage_bytes",
    "tensors_of", "CUDA_ROUNDING",
]

# The CUDA caching allocator rounds every request up to a multiple of 512 bytes
# (c10/cuda/CUDACachingAllocator.cpp, kMinBlockSize). The CPU tracker can mimic it on request.
CUDA_ROUNDING = 512


@dataclass(frozen=True)
class TimelinePoint:
    """One sample of live memory: after op number ``index`` in ``phase``."""

    index: int
    phase: str
    bytes: int
    op: str


@dataclass
class PeakResult:
    """What :func:`measure_peak` found.

    ``peak_increase`` is the number graded checks compare (as ratios): the highest live memory
    reached during the call, above what was live when it started.
    """

    start_bytes: int
    peak_bytes: int
    end_bytes: int
    reserved_bytes: int | None
    backend: str
    device: torch.device
    result: Any = field(default=None, repr=False)

    @property
    def peak_increase(self) -> int:
        return self.peak_bytes - self.start_bytes

    def __str__(self) -> str:  # pragma: no cover - formatting only
        extra = f", reserved {fmt_bytes(self.reserved_bytes)}" if self.reserved_bytes is not None else ""
        return (f"peak {fmt_bytes(self.peak_bytes)} (+{fmt_bytes(self.peak_increase)} over the start)"
                f"{extra} [{self.backend} on {self.device}]")


def _storages(t: torch.Tensor) -> list[torch.UntypedStorage]:
    if is_traceable_wrapper_subclass(t):
        attrs, _ = t.__tensor_flatten__()
        out: list[torch.UntypedStorage] = []
        for a in attrs:
            inner = getattr(t, a)
            if isinstance(inner, torch.Tensor):  # DTensor also names its DeviceMesh here
                out.extend(_storages(inner))
        return out
    if t.layout is not torch.strided:  # sparse and friends: not used by the course
        return []
    return [t.untyped_storage()]


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views and tied weights count once)."""
    seen = WeakIdKeyDictionary()
    total = 0
    for t in tensors:
        for st in _storages(t):
            if st not in seen:
                seen[st] = True
                total += st.nbytes()
    return total


def tensors_of(*objs: Any) -> Iterator[torch.Tensor]:
    """Every tensor held by modules (parameters, buffers, gradients), optimizers (their state)
    and (nested) lists/tuples/dicts of tensors."""
    for obj in objs:
        if obj is None:
            continue
        if isinstance(obj, torch.Tensor):
            yield obj
            if obj.grad is not None:
                yield obj.grad
        elif isinstance(obj, torch.nn.Module):
            for p in obj.parameters():
                yield p
                if p.grad is not None:
                    yield p.grad
            yield from obj.buffers()
        elif isinstance(obj, torch.optim.Optimizer):
            for state in obj.state.values():
                for v in state.values():
                    if isinstance(v, torch.Tensor):
                        yield v
        elif isinstance(obj, dict):
            yield from tensors_of(*obj.values())
        elif isinstance(obj, (list, tuple, set)):
            yield from tensors_of(*obj)


class MemoryTracker(TorchDispatchMode):
    """Track live memory of the code run inside ``with MemoryTracker(...) as tracker:``.

    Parameters
    ----------
    device:
        ``None`` picks CUDA when present, else the CPU (see :func:`memlab.get_device`).
    backend:
        ``"auto"`` (allocator on CUDA, tensor count elsewhere), or force ``"cpu-tracker"``
        (exact storage count, on any device, also under ``FakeTensorMode``) or
        ``"cuda-allocator"``.
    budget_bytes:
        If set, going above it raises ``torch.OutOfMemoryError`` whose message holds the
        breakdown at that moment (use :func:`memlab.memory_budget` for the CUDA hard limit).
    round_to:
        Round each storage up to this many bytes in the CPU count (``CUDA_ROUNDING`` mimics the
        CUDA allocator's 512-byte granularity). Default 1: exact bytes.
    timeline:
        Record a :class:`TimelinePoint` after every op (for plots).
    """

    def __init__(self, device: str | torch.device | None = None, *, backend: str = "auto",
                 budget_bytes: int | None = None, round_to: int = 1, timeline: bool = True):
        super().__init__()
        self.device = get_device(device) if not (isinstance(device, torch.device) and device.type == "meta") else device
        if backend == "auto":
            backend = "cuda-allocator" if self.device.type == "cuda" else "cpu-tracker"
        if backend not in ("cuda-allocator", "cpu-tracker"):
            raise ValueError(f"backend must be 'auto', 'cuda-allocator' or 'cpu-tracker', not {backend!r}")
        if backend == "cuda-allocator" and self.device.type != "cuda":
            raise ValueError("the cuda-allocator backend needs a CUDA device")
        self.backend = backend
        self.budget_bytes = budget_bytes
        self.round_to = max(1, int(round_to))
        self.record_timeline = timeline
        self.timeline: list[TimelinePoint] = []
        self.phase_peaks: dict[str, int] = {}
        self.current_phase = "start"
        self.start_bytes = 0
        self.peak_bytes = 0
        self.peak_phase = "start"
        self.peak_op = ""
        self.n_ops = 0
        self._live = 0
        self._storages = WeakIdKeyDictionary()  # storage -> [bytes]
        self._external: list[Any] = []
        self._depth = 0
        self._orig_resize = None
        self._in_check = False

    # ------------------------------------------------------------------ public
    def track(self, *objs: Any) -> "MemoryTracker":
        """Count tensors that exist already (modules, optimizers, tensors, containers of them).

        Also remembered (weakly) for the breakdown printed when a budget is exceeded.
        """
        for obj in objs:
            if isinstance(obj, (torch.nn.Module, torch.optim.Optimizer)):
                self._external.append(weakref.ref(obj))
        if self.backend == "cpu-tracker":
            for t in tensors_of(*objs):
                self._add(t)
            self._update_peak("track")
        return self

    @property
    def current_bytes(self) -> int:
        if self.backend == "cuda-allocator":
            return torch.cuda.memory_allocated(self.device)
        return self._live

    @property
    def peak_increase(self) -> int:
        return self.peak_bytes - self.start_bytes

    @property
    def reserved_bytes(self) -> int | None:
        if self.backend == "cuda-allocator":
            return torch.cuda.max_memory_reserved(self.device)
        return None

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Label the ops run inside as phase ``name`` (e.g. forward, backward, optimizer)."""
        previous = self.current_phase
        self._close_cuda_phase()
        self.current_phase = name
        self.phase_peaks.setdefault(name, self.current_bytes)
        try:
            yield
        finally:
            self._close_cuda_phase()
            self.current_phase = previous

    def breakdown(self) -> dict[str, int]:
        """Live bytes now, split into the four consumers where they can be attributed."""
        modules = [r() for r in self._external if isinstance(r(), torch.nn.Module)]
        optims = [r() for r in self._external if isinstance(r(), torch.optim.Optimizer)]
        params = sum(param_bytes(m) for m in modules)
        grads = sum(grad_bytes(m) for m in modules)
        opt = sum(optimizer_state_bytes(o) for o in optims)
        total = self.current_bytes
        return {
            "parameters": params,
            "gradients": grads,
            "optimizer state": opt,
            "activations and temporaries": max(0, total - params - grads - opt),
            "total": total,
        }

    def describe(self) -> str:
        lines = [f"{k:>28}: {fmt_bytes(v)}" for k, v in self.breakdown().items()]
        return "\n".join(lines)

    # ------------------------------------------------------------- mode plumbing
    def __enter__(self) -> "MemoryTracker":
        if self._depth == 0:
            if self.backend == "cuda-allocator":
                torch.cuda.synchronize(self.device)
                torch.cuda.reset_peak_memory_stats(self.device)
            else:
                self._patch_resize()
            self.start_bytes = self.current_bytes
            self.peak_bytes = max(self.peak_bytes, self.start_bytes)
            self.phase_peaks.setdefault(self.current_phase, self.start_bytes)
        self._depth += 1
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._depth -= 1
        if self._depth == 0:
            if self.backend == "cuda-allocator":
                torch.cuda.synchronize(self.device)
                self._close_cuda_phase()
            else:
                self._restore_resize()
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.backend == "cpu-tracker":
            flat, _ = tree_flatten(out)
            for t in flat:
                if isinstance(t, torch.Tensor):
                    self._add(t)
        self.n_ops += 1
        self._update_peak(func.__name__ if hasattr(func, "__name__") else str(func))
        return out

    # ---------------------------------------------------------------- internals
    def _size(self, st: torch.UntypedStorage) -> int:
        n = st.nbytes()
        r = self.round_to
        return -(-n // r) * r if r > 1 else n

    def _add(self, t: torch.Tensor) -> None:
        for st in _storages(t):
            if st in self._storages:
                rec = self._storages[st]
                size = self._size(st)
                if size != rec[0]:  # resized storage
                    self._live += size - rec[0]
                    rec[0] = size
                continue
            rec = [self._size(st)]
            self._storages[st] = rec
            self._live += rec[0]
            weakref.finalize(st, self._release, rec)

    def _release(self, rec: list[int]) -> None:
        self._live -= rec[0]
        rec[0] = 0

    def _update_peak(self, op: str) -> None:
        if self.backend == "cuda-allocator":
            now = torch.cuda.memory_allocated(self.device)
        else:
            now = self._live
        phase = self.current_phase
        if now > self.phase_peaks.get(phase, -1):
            self.phase_peaks[phase] = now
        if now > self.peak_bytes:
            self.peak_bytes, self.peak_phase, self.peak_op = now, phase, op
        if self.record_timeline:
            self.timeline.append(TimelinePoint(len(self.timeline), phase, now, op))
        if self.budget_bytes is not None and now > self.budget_bytes and not self._in_check:
            self._in_check = True
            try:
                msg = (f"memlab budget exceeded: {fmt_bytes(now)} live > budget "
                       f"{fmt_bytes(self.budget_bytes)} during {phase} (op {op}).\n"
                       f"Breakdown at the moment of failure:\n{self.describe()}")
            finally:
                self._in_check = False
            raise torch.OutOfMemoryError(msg)

    def _close_cuda_phase(self) -> None:
        """On CUDA the peak between two samples comes from max_memory_allocated."""
        if self.backend != "cuda-allocator" or self._depth == 0:
            return
        torch.cuda.synchronize(self.device)
        peak = torch.cuda.max_memory_allocated(self.device)
        phase = self.current_phase
        if peak > self.phase_peaks.get(phase, -1):
            self.phase_peaks[phase] = peak
        if peak > self.peak_bytes:
            self.peak_bytes, self.peak_phase = peak, phase
        torch.cuda.reset_peak_memory_stats(self.device)

    def _patch_resize(self) -> None:
        # UntypedStorage.resize_ bypasses the dispatcher (FSDP uses it): follow MemTracker and
        # patch it while the tracker is active.
        if self._orig_resize is not None:
            return
        orig = torch.UntypedStorage.resize_
        tracker = self

        @functools.wraps(orig)
        def resize_(st, size):
            r = orig(st, size)
            if st in tracker._storages:
                rec = tracker._storages[st]
                new = tracker._size(st)
                tracker._live += new - rec[0]
                rec[0] = new
                tracker._update_peak("UntypedStorage.resize_")
            return r

        self._orig_resize = orig
        torch.UntypedStorage.resize_ = resize_

    def _restore_resize(self) -> None:
        if self._orig_resize is not None:
            torch.UntypedStorage.resize_ = self._orig_resize
            self._orig_resize = None


def measure_peak(fn: Callable[..., Any], *args: Any, device: str | torch.device | None = None,
                 track: Iterable[Any] = (), backend: str = "auto", **kwargs: Any) -> PeakResult:
    """Run ``fn(*args, **kwargs)`` and report the peak of live tensor memory during the call.

    On CUDA: the allocator's ``max_memory_allocated`` (``reserved_bytes`` beside it). On the CPU:
    the exact count of live storages created inside ``fn`` plus those in ``track``.
    """
    tracker = MemoryTracker(device, backend=backend, timeline=False)
    tracker.track(*tuple(track))
    with tracker:
        result = fn(*args, **kwargs)
        end = tracker.current_bytes
    return PeakResult(start_bytes=tracker.start_bytes, peak_bytes=tracker.peak_bytes,
                      end_bytes=end, reserved_bytes=tracker.reserved_bytes,
                      backend=tracker.backend, device=tracker.device, result=result)


def param_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters, each distinct storage once (tied weights count once)."""
    return storage_bytes(model.parameters())


def grad_bytes(model: torch.nn.Module) -> int:
    """Bytes of the gradients currently held in ``p.grad`` (0 after ``zero_grad()``)."""
    return storage_bytes(p.grad for p in model.parameters() if p.grad is not None)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor in the optimizer's state (0 before the first ``step()``)."""
    return storage_bytes(tensors_of(optimizer))
