"""Memory snapshots: torch's allocation trace, from the CUDA allocator or recorded on the CPU.

Used by: the notebook "Debugging memory" (solutions/10_debugging_memory), :mod:`memlab.lessons.debugging`,
tests/measure/test_snapshot.py. Facade: ``ml.snapshot``.

On CUDA, :func:`record_snapshot` asks the caching allocator itself:
``torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")``,
the call, ``torch.cuda.memory._snapshot()``, then ``_record_memory_history(enabled=None)``
(PyTorch docs, "Understanding CUDA Memory Usage"). On the CPU there is no allocator history
to ask, so :class:`CpuSnapshotRecorder` records the same trace: a ``TorchDispatchMode`` that
sees every storage an aten op creates (the same storages, counted the same way, as
:class:`memlab.MemoryTracker`, whose helpers it uses), gives each one a made-up address and
records an ``alloc`` with the Python stack of the allocating line. A weak-reference finalizer
records the ``free_requested`` / ``free_completed`` pair when the storage dies. The CPU
allocator caches nothing, so every block is its own segment: a ``segment_alloc`` comes before
each ``alloc`` and a ``segment_free`` after each free. No model of CUDA's caching is
attempted; on CUDA the real allocator answers.

The result is the dict ``torch.cuda.memory._snapshot()`` returns, so torch's own readers
work on both: ``torch.cuda._memory_viz.trace_plot`` / ``segment_plot`` (HTML), ``segsum``,
``trace``, ``memory`` and ``segments`` (text, flamegraph lines), and
https://pytorch.org/memory_viz opens the file :func:`dump_snapshot` writes. The format, as
read from torch 2.13's sources:

- torch/cuda/memory.py, ``_snapshot`` docstring: ``Snapshot = {segments: List[Segment],
  device_traces: List[List[TraceEntry]]}``; a Segment has ``address``, ``total_size``,
  ``stream``, ``segment_type`` ("small"/"large"), ``allocated_size``, ``active_size``,
  ``blocks``; a Block has ``size``, ``requested_size``, ``address``, ``state``
  ("active_allocated", ...) and ``frames``; a Frame has ``filename``, ``line``, ``name``; a
  TraceEntry has ``action`` ("alloc", "free_requested", "free_completed", "segment_alloc",
  "segment_free", "oom", "snapshot"), ``addr``, ``frames``, ``size``, ``stream``.
- torch/csrc/cuda/memory_snapshot.cpp (pytorch/pytorch): each trace entry also carries
  ``time_us``; segments carry ``device``, ``requested_size``, ``segment_pool_id`` and
  ``is_expandable``. Trace sizes are the bytes *requested* (c10/cuda/CUDACachingAllocator.cpp
  records ``orig_size`` for an alloc and ``block->requested_size`` for a free), which is
  exactly ``UntypedStorage.nbytes()``: the CPU trace's sizes mean what CUDA's mean.
- torch/utils/viz/MemoryViz.js (what memory_viz runs): frames are innermost first; a block
  must lie inside a segment of its ``device``; the pickle must be protocol 2-4 and use only
  the opcodes its small unpickler knows (:func:`dump_snapshot` writes protocol 4).

The readers below (:func:`live_at_peak`, :func:`largest_allocation`, :func:`peak_live_bytes`,
:func:`live_bytes_timeline`) replay the trace the way MemoryViz.js's "Active Memory Timeline"
does (``process_alloc_data``): blocks freed without an ``alloc`` in the trace, and blocks of
the final segments that the trace never allocated, were alive from the start.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import sys
import sysconfig
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from .device import get_device
from .tracker import _storages, tensors_of

__all__ = [
    "CpuSnapshotRecorder", "Allocation", "Block", "recording", "record_snapshot",
    "dump_snapshot", "load_snapshot", "allocations", "live_bytes_timeline", "peak_live_bytes",
    "live_at_peak", "largest_allocation", "user_frame", "format_frame", "ADDRESS_BASE",
]

# Made-up addresses start here and step in the allocator's 512-byte granularity
# (c10/cuda/CUDACachingAllocator.cpp, kMinBlockSize), so they look like device pointers.
ADDRESS_BASE = 0x7F0000000000
_ALIGN = 512
# c10/cuda/CUDACachingAllocator.cpp, kSmallSize: blocks up to 1 MiB are "small".
_SMALL_SIZE = 1 << 20
# Innermost frames kept per stack (torch keeps them all; notebooks' stacks are deep).
MAX_FRAMES = 64

_HERE = os.path.abspath(__file__)
# The frames between an allocating line and the recorder: the mode's own call path.
_PLUMBING = {
    _HERE,
    os.path.abspath(sys.modules[TorchDispatchMode.__module__].__file__),
    os.path.abspath(weakref.__file__),
}
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_MEMLAB_DIR = os.path.dirname(os.path.dirname(_HERE)) + os.sep
_STDLIB_DIR = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep


# ------------------------------------------------------------------------------ recording
@dataclass
class _Rec:
    addr: int
    size: int
    frames: list
    live: bool = True


class CpuSnapshotRecorder(TorchDispatchMode):
    """Record torch's allocation trace on the CPU: ``with CpuSnapshotRecorder() as rec: ...``,
    then ``rec.snapshot()``.

    Counts what :class:`memlab.MemoryTracker` counts: each storage an op creates, once (views
    share a storage), freed when the storage dies; ``UntypedStorage.resize_`` is followed while
    active (a resize is a free and a new allocation, as on CUDA). Tensors that exist already
    are given with :meth:`track`: they appear as blocks allocated before recording began
    (empty ``frames``, as on CUDA), and their frees are recorded.
    """

    def __init__(self, *, max_frames: int = MAX_FRAMES):
        super().__init__()
        self.max_frames = int(max_frames)
        self.trace: list[dict[str, Any]] = []
        self._blocks = WeakIdKeyDictionary()  # storage -> _Rec
        self._live: dict[int, _Rec] = {}       # addr -> _Rec, blocks alive now
        self._next_addr = ADDRESS_BASE
        self._frame_cache: dict[tuple, dict] = {}
        self._depth = 0
        self._recording = False
        self._final: dict[str, Any] | None = None
        self._orig_resize = None

    # ---------------------------------------------------------------- public
    def track(self, *objs: Any) -> "CpuSnapshotRecorder":
        """Blocks that exist already (modules, optimizers, tensors, containers of them)."""
        for t in tensors_of(*objs):
            for st in _storages(t):
                if st not in self._blocks and st.nbytes() > 0:
                    self._new(st, st.nbytes(), frames=[], event=False)
        return self

    def snapshot(self) -> dict[str, Any]:
        """The snapshot now (after the ``with`` block: as it was when the block ended)."""
        if self._final is not None:
            return self._final
        segments = [_segment(r) for r in sorted(self._live.values(), key=lambda r: r.addr)]
        return {
            "segments": segments,
            "device_traces": [list(self.trace)],
            "allocator_settings": {},
            "external_annotations": [],
            "memlab": {"recorder": "memlab.measure.snapshot.CpuSnapshotRecorder",
                       "device": "cpu", "torch": str(torch.__version__)},
        }

    # ---------------------------------------------------------- mode plumbing
    def __enter__(self) -> "CpuSnapshotRecorder":
        if self._depth == 0:
            self._final = None
            self._recording = True
            self._patch_resize()
        self._depth += 1
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._restore_resize()
            self._final = self.snapshot()
            self._recording = False
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat, _ = tree_flatten(out)
        for t in flat:
            if isinstance(t, torch.Tensor):
                for st in _storages(t):
                    self._see(st)
        return out

    # -------------------------------------------------------------- internals
    def _see(self, st: torch.UntypedStorage) -> None:
        size = st.nbytes()
        rec = self._blocks.get(st)
        if rec is None:
            if size > 0:
                self._new(st, size, frames=self._stack())
            return
        if size != rec.size:
            self._resized(rec, size)

    def _new(self, st: torch.UntypedStorage, size: int, *, frames: list,
             event: bool = True) -> None:
        rec = _Rec(self._take_addr(size), size, frames)
        self._blocks[st] = rec
        self._live[rec.addr] = rec
        if event:
            self._emit_alloc(rec)
        weakref.finalize(st, _freed, weakref.ref(self), rec)

    def _take_addr(self, size: int) -> int:
        addr = self._next_addr
        self._next_addr += max(_ALIGN, -(-size // _ALIGN) * _ALIGN)
        return addr

    def _emit(self, action: str, rec: _Rec, frames: list) -> None:
        self.trace.append({"action": action, "addr": rec.addr, "size": rec.size, "stream": 0,
                           "time_us": time.time_ns() // 1000, "frames": frames})

    def _emit_alloc(self, rec: _Rec) -> None:
        self._emit("segment_alloc", rec, rec.frames)
        self._emit("alloc", rec, rec.frames)

    def _emit_free(self, rec: _Rec, frames: list) -> None:
        for action in ("free_requested", "free_completed", "segment_free"):
            self._emit(action, rec, frames)

    def _freed(self, rec: _Rec) -> None:
        if not rec.live:
            return
        rec.live = False
        self._live.pop(rec.addr, None)
        if self._recording:
            # torch records the stack of the free when context="all", else the allocation's
            self._emit_free(rec, self._stack() or rec.frames)

    def _resized(self, rec: _Rec, size: int) -> None:
        if rec.live and rec.size > 0:
            self._live.pop(rec.addr, None)
            if self._recording:
                self._emit_free(rec, self._stack())
        rec.size = size
        rec.live = size > 0
        if rec.live:
            rec.addr = self._take_addr(size)
            rec.frames = self._stack()
            self._live[rec.addr] = rec
            if self._recording:
                self._emit_alloc(rec)

    def _stack(self) -> list[dict[str, Any]]:
        """The Python stack, innermost first, without the recorder's own leading frames."""
        f = sys._getframe(1)
        while f is not None and (f.f_code.co_filename in _PLUMBING
                                 or _is_mode_wrapper(f.f_code.co_filename)):
            f = f.f_back
        out: list[dict[str, Any]] = []
        while f is not None and len(out) < self.max_frames:
            code = f.f_code
            key = (code.co_filename, f.f_lineno or 0, code.co_name)
            frame = self._frame_cache.get(key)
            if frame is None:
                frame = {"filename": key[0], "line": key[1], "name": key[2]}
                self._frame_cache[key] = frame
            out.append(frame)
            f = f.f_back
        return out

    def _patch_resize(self) -> None:
        if self._orig_resize is not None:
            return
        orig = torch.UntypedStorage.resize_
        recorder = self

        def resize_(st, size):
            r = orig(st, size)
            rec = recorder._blocks.get(st)
            if rec is not None and st.nbytes() != rec.size:
                recorder._resized(rec, st.nbytes())
            elif rec is None and st.nbytes() > 0 and recorder._recording:
                recorder._new(st, st.nbytes(), frames=recorder._stack())
            return r

        resize_.__wrapped__ = orig  # type: ignore[attr-defined]
        self._orig_resize = orig
        torch.UntypedStorage.resize_ = resize_

    def _restore_resize(self) -> None:
        if self._orig_resize is not None:
            torch.UntypedStorage.resize_ = self._orig_resize
            self._orig_resize = None


def _freed(recorder_ref: "weakref.ref[CpuSnapshotRecorder]", rec: _Rec) -> None:
    # A module-level callback holding the recorder weakly: a tracked parameter that lives on
    # does not keep a finished recorder (and its trace) alive.
    recorder = recorder_ref()
    if recorder is not None:
        recorder._freed(rec)
    else:
        rec.live = False


def _is_mode_wrapper(filename: str) -> bool:
    # torch 2.x calls __torch_dispatch__ through dynamo's disable wrapper
    # (torch/_dynamo/eval_frame.py, torch/_compile.py): plumbing, not the allocating line.
    return filename.startswith(_TORCH_DIR) and filename.endswith(
        (os.path.join("_dynamo", "eval_frame.py"), "_compile.py"))


def _segment(rec: _Rec) -> dict[str, Any]:
    block = {"address": rec.addr, "size": rec.size, "requested_size": rec.size,
             "state": "active_allocated", "frames": rec.frames}
    return {"device": 0, "address": rec.addr, "total_size": rec.size,
            "allocated_size": rec.size, "active_size": rec.size, "requested_size": rec.size,
            "stream": 0, "segment_type": "small" if rec.size <= _SMALL_SIZE else "large",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": rec.frames,
            "blocks": [block]}


class _CudaSession:
    """torch's own recorder, for :func:`recording` on CUDA."""

    def __init__(self, device: torch.device):
        self.device = device
        self._final: dict[str, Any] | None = None

    def snapshot(self) -> dict[str, Any]:
        if self._final is not None:
            return self._final
        torch.cuda.synchronize(self.device)
        return torch.cuda.memory._snapshot()


@contextlib.contextmanager
def recording(device: str | torch.device | None = None, track: Iterable[Any] = (),
              *, max_frames: int = MAX_FRAMES) -> Iterator[Any]:
    """``with ml.snapshot.recording(device) as rec: ...`` then ``rec.snapshot()``.

    CUDA: torch's recorder (``_record_memory_history(enabled="all", context="all",
    stacks="python")``, which replaces a history already being recorded, and is switched off
    at the end); ``track`` is not needed there (what exists is in the segments). CPU: a
    :class:`CpuSnapshotRecorder` with ``track`` counted as allocated before the start.
    The snapshot taken after the block is the one of the moment the block ended.
    """
    dev = get_device(device)
    if dev.type != "cuda":
        rec = CpuSnapshotRecorder(max_frames=max_frames).track(*tuple(track))
        with rec:
            yield rec
        return
    torch.cuda.synchronize(dev)
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python",
                                             clear_history=True)
    session = _CudaSession(dev)
    try:
        yield session
    finally:
        session._final = session.snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)


def record_snapshot(fn: Callable[..., Any], *args: Any, device: str | torch.device | None = None,
                    track: Iterable[Any] = (), **kwargs: Any) -> dict[str, Any]:
    """Run ``fn(*args, **kwargs)`` and return the memory snapshot of the call (torch's format).

    Blocks ``fn`` returns are still alive in the snapshot's segments. If ``fn`` raises (an
    out-of-memory error, say), the snapshot of the moment it failed is attached to the
    exception as ``exc.memlab_snapshot`` before it propagates.
    """
    with recording(device, track) as rec:
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                exc.memlab_snapshot = rec.snapshot()
            raise
        snap = rec.snapshot()
        del result
    return snap


def dump_snapshot(snapshot: dict[str, Any], path: str | os.PathLike) -> str:
    """Pickle ``snapshot`` to ``path``, as ``torch.cuda.memory._dump_snapshot`` does; open it at
    https://pytorch.org/memory_viz. Protocol 4: MemoryViz.js reads protocols 2 to 4 only."""
    path = os.fspath(path)
    with open(path, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)
    return path


def load_snapshot(path: str | os.PathLike) -> dict[str, Any]:
    """Read a snapshot written by :func:`dump_snapshot` or ``torch.cuda.memory._dump_snapshot``.
    It is a pickle: open only files you made or trust."""
    with open(os.fspath(path), "rb") as f:
        return pickle.load(f)


# ---------------------------------------------------------------------------- readers
@dataclass
class Allocation:
    """One block over the trace: allocated at event ``alloc_at`` (None: before the trace began)
    and freed at event ``free_at`` (None: still alive at the snapshot)."""

    addr: int
    size: int
    frames: list = field(repr=False)
    alloc_at: int | None
    free_at: int | None

    @property
    def frame(self) -> dict[str, Any] | None:
        return user_frame(self.frames)

    def alive_after(self, index: int) -> bool:
        """Alive right after trace event ``index`` (-1: at the start)."""
        born = self.alloc_at is None or self.alloc_at <= index
        return born and (self.free_at is None or self.free_at > index)


class Block(NamedTuple):
    """``(size, frame)``: bytes requested, and the user's line that allocated it."""

    size: int
    frame: dict[str, Any] | None


def _events(snapshot: dict[str, Any], device: int) -> list[dict[str, Any]]:
    traces = snapshot.get("device_traces", [])
    return traces[device] if 0 <= device < len(traces) else []


def allocations(snapshot: dict[str, Any], device: int = 0) -> list[Allocation]:
    """Every block the snapshot knows of on ``device``, in the order MemoryViz.js meets them."""
    out: list[Allocation] = []
    open_by_addr: dict[int, Allocation] = {}
    for i, e in enumerate(_events(snapshot, device)):
        action = e.get("action")
        if action == "alloc":
            a = Allocation(e["addr"], e["size"], e.get("frames", []), i, None)
            out.append(a)
            open_by_addr[e["addr"]] = a
        elif action == "free_completed":
            a = open_by_addr.pop(e["addr"], None)
            if a is None:  # allocated before the trace began
                out.append(Allocation(e["addr"], e["size"], e.get("frames", []), None, i))
            else:
                a.free_at = i
    for seg in snapshot.get("segments", []):
        if seg.get("device", 0) != device:
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and addr not in open_by_addr:
                size = b.get("requested_size", b["size"])
                out.append(Allocation(addr, size, b.get("frames", []), None, None))
            addr += b["size"]
    return out


def live_bytes_timeline(snapshot: dict[str, Any], device: int = 0) -> list[int]:
    """Live bytes at the start, then after each trace event (``len(trace) + 1`` numbers)."""
    allocs = allocations(snapshot, device)
    live = sum(a.size for a in allocs if a.alloc_at is None)
    timeline = [live]
    for e in _events(snapshot, device):
        if e.get("action") == "alloc":
            live += e["size"]
        elif e.get("action") == "free_completed":
            live -= e["size"]
        timeline.append(live)
    return timeline


def peak_live_bytes(snapshot: dict[str, Any], device: int = 0) -> int:
    """The highest live bytes over the trace (blocks alive before it began included)."""
    return max(live_bytes_timeline(snapshot, device))


def live_at_peak(snapshot: dict[str, Any], device: int = 0) -> list[Block]:
    """The blocks alive at the (first) peak of the trace, largest first: ``[(size, frame)]``.

    ``frame`` is :func:`user_frame` of the block's stack: the line outside torch and memlab
    that allocated it (None for blocks allocated before recording began).
    """
    timeline = live_bytes_timeline(snapshot, device)
    peak_index = timeline.index(max(timeline)) - 1
    alive = [a for a in allocations(snapshot, device) if a.alive_after(peak_index)]
    alive.sort(key=lambda a: -a.size)
    return [Block(a.size, a.frame) for a in alive]


def largest_allocation(snapshot: dict[str, Any], device: int = 0) -> Block | None:
    """The largest block allocated during the trace (the first, if several tie); blocks of the
    segments are used when the trace allocated nothing. None for an empty snapshot."""
    allocs = allocations(snapshot, device)
    during = [a for a in allocs if a.alloc_at is not None] or allocs
    if not during:
        return None
    best = max(during, key=lambda a: a.size)  # max keeps the first of equal sizes
    return Block(best.size, best.frame)


def user_frame(frames: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The innermost frame outside torch, memlab and the standard library: the learner's line
    (a notebook cell's file, or ``<ipython-input-...>`` in older IPython). Falls back to the
    innermost frame; None for no frames."""
    for f in frames:
        name = f["filename"]
        if name.startswith("<"):
            if name.startswith("<ipython-input"):
                return f
            continue  # "<frozen ...>", "<string>" (generated code)
        if not os.path.abspath(name).startswith((_TORCH_DIR, _MEMLAB_DIR, _STDLIB_DIR)):
            return f
    return frames[0] if frames else None


def format_frame(frame: dict[str, Any] | None) -> str:
    """``file.py:line:function``, as torch.cuda._memory_viz prints a frame."""
    if frame is None:
        return "<allocated before recording began>"
    return f"{os.path.basename(frame['filename'])}:{frame['line']}:{frame['name']}"
