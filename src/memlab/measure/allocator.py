"""A MODEL of PyTorch's CUDA caching allocator: replay an allocation trace, predict reserved memory.

Used by: the notebook "Debugging memory" (solutions/10_debugging_memory), memlab.tools.gpucheck,
tests/measure/test_allocator.py. Facade: ``ml.allocator``.

This is not the allocator. It is a small re-statement of the rules documented in
c10/cuda/CUDACachingAllocator.cpp (pytorch/pytorch, read at commit
001074d25084fdb87a799823e395a50f5ec044d3) and the PyTorch docs ("CUDA semantics", "Memory
management"; "Understanding CUDA Memory Usage"), run on a trace of requests in Python. It
answers "how much would the allocator have *reserved* for this sequence of allocations?" on a
machine without a GPU, e.g. for :class:`memlab.measure.snapshot.CpuSnapshotRecorder`'s trace.

The rules modelled (names are the C++ ones):

- ``round_size``: every request is rounded up to a multiple of 512 bytes (``kMinBlockSize``);
  ``roundup_power2_divisions`` is not modelled (its default, 0, is this rule).
- ``get_pool``: rounded sizes <= 1 MiB (``kSmallSize``) use the small pool, larger ones the large
  pool; a block never moves between pools.
- ``get_allocation_size``: a new segment (one ``cudaMalloc``) is 2 MiB (``kSmallBuffer``) for the
  small pool, 20 MiB (``kLargeBuffer``) for large requests under 10 MiB (``kMinLargeAlloc``), and
  the request rounded up to 2 MiB (``kRoundLarge``) above that.
- ``get_free_block``: best fit, the smallest cached free block of the pool that fits, ties broken
  by address. With ``max_split_size_mb``, a request below it never takes a block at or above it,
  and a request at or above it only takes a block smaller than request + 20 MiB.
- ``should_split``: the found block is split when the remainder is >= 512 bytes (small pool) or
  > 1 MiB (large pool, and only for requests below ``max_split_size``). An unsplit block is
  handed out whole, and counted whole in ``allocated`` (torch's ``allocated_bytes`` counts block
  sizes, not requests).
- ``free_block``: a freed block merges with its free neighbours of the same segment.
- ``release_cached_blocks`` (``torch.cuda.empty_cache()``): every segment that is entirely free
  goes back to the device; nothing else ever does, except below.
- ``malloc``'s retry: with a ``capacity`` (the device's memory, optional), a segment that would
  not fit first makes the model release every entirely free segment and try again, then raises
  ``torch.OutOfMemoryError``. Simplification: the intermediate step
  ``release_available_cached_blocks`` (free just enough oversize blocks, only with
  ``max_split_size``) is folded into the full release. Without a capacity, memory is unlimited.

``expandable_segments`` (Note [Expandable Segments] in the same file), modelled simply: each pool
has ONE segment that grows at its end in pages of 2 MiB (small pool) or 20 MiB (large pool: the
source maps ``kLargeBuffer``-sized pages there, not 2 MiB); a request takes the best-fitting free
block *inside* the mapped part first, and the free block at the end (extended by new pages) only
when none fits; blocks split whenever 512 bytes or more remain. Reserved memory is the pages
mapped. Simplification: ``empty_cache`` unmaps only the free pages at the END of each segment
(torch also unmaps entirely free pages in the middle, leaving holes it refills later).

Not modelled: streams (one stream), CUDA graphs' private pools, ``garbage_collection_threshold``,
``set_per_process_memory_fraction``, memory used outside the allocator (the CUDA context,
cuBLAS/cuDNN workspaces unless the trace records them), and IPC.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable

import torch

from .snapshot import Allocation, _events, allocations

__all__ = [
    "AllocatorModel", "Replay", "SegmentView", "BlockView", "replay", "round_size",
    "allocation_size", "MIN_BLOCK_SIZE", "SMALL_SIZE", "SMALL_BUFFER", "MIN_LARGE_ALLOC",
    "LARGE_BUFFER", "ROUND_LARGE",
]

MiB = 1 << 20
# c10/cuda/CUDACachingAllocator.cpp, the size constants (kMinBlockSize ... kRoundLarge).
MIN_BLOCK_SIZE = 512          # all sizes are rounded to at least 512 bytes
SMALL_SIZE = 1 * MiB          # largest "small" allocation
SMALL_BUFFER = 2 * MiB        # "small" allocations are packed in 2 MiB segments
MIN_LARGE_ALLOC = 10 * MiB    # allocations between 1 and 10 MiB may use a 20 MiB segment
LARGE_BUFFER = 20 * MiB       # "large" allocations may be packed in 20 MiB segments
ROUND_LARGE = 2 * MiB         # larger segments are rounded up to 2 MiB
_ADDRESS_BASE = 0x7F0000000000  # made-up device addresses, as memlab's CPU recorder uses


def round_size(size: int) -> int:
    """Bytes the allocator hands out for a request of ``size`` (``round_size``: 512 multiples)."""
    return max(MIN_BLOCK_SIZE, -(-int(size) // MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE)


def allocation_size(rounded: int) -> int:
    """Size of the new segment for a rounded request (``get_allocation_size``)."""
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-rounded // ROUND_LARGE) * ROUND_LARGE


@dataclass(frozen=True)
class BlockView:
    """One block of a segment: ``requested_size`` is 0 for a free block."""

    address: int
    size: int
    allocated: bool
    requested_size: int


@dataclass(frozen=True)
class SegmentView:
    """One segment (one ``cudaMalloc``, or an expandable segment's mapped pages)."""

    address: int
    pool: str  # "small" or "large"
    size: int
    expandable: bool
    blocks: tuple[BlockView, ...]

    @property
    def allocated_size(self) -> int:
        return sum(b.size for b in self.blocks if b.allocated)


@dataclass(eq=False)
class _Block:
    segment: "_Segment"
    offset: int
    size: int
    allocated: bool = False
    requested: int = 0

    @property
    def address(self) -> int:
        return self.segment.address + self.offset


@dataclass(eq=False)
class _Segment:
    address: int
    pool: str
    expandable: bool
    blocks: list[_Block] = field(default_factory=list)  # address order, covering the segment

    @property
    def size(self) -> int:
        return sum(b.size for b in self.blocks)


class AllocatorModel:
    """A model of one device's caching allocator (one stream), in bytes.

    ``malloc(size)`` returns an int handle (0 for ``size == 0``: no block, as torch returns a
    null pointer), ``free(handle)`` caches the block, ``empty_cache()`` releases entirely free
    segments. ``allocated`` / ``reserved`` and their peaks mean what torch.cuda's
    ``memory_allocated`` / ``memory_reserved`` / ``max_memory_*`` mean. The rules and the
    simplifications are in this module's docstring.
    """

    def __init__(self, max_split_size_mb: float | None = None, expandable_segments: bool = False,
                 capacity: int | None = None) -> None:
        if max_split_size_mb is not None and max_split_size_mb < LARGE_BUFFER // MiB:
            # CUDAAllocatorConfig's parseMaxSplitSize refuses values below kLargeBuffer / 1 MiB
            raise ValueError(f"max_split_size_mb must be >= {LARGE_BUFFER // MiB}, "
                             f"not {max_split_size_mb}")
        self.max_split_size = (None if max_split_size_mb is None
                               else int(max_split_size_mb * MiB))
        self.expandable_segments = bool(expandable_segments)
        self.capacity = capacity
        self._segments: list[_Segment] = []
        self._handles: dict[int, _Block] = {}
        self._ids = itertools.count(1)
        self._next_address = _ADDRESS_BASE
        self._allocated = self._reserved = self._peak_allocated = self._peak_reserved = 0

    # ------------------------------------------------------------------ counters
    @property
    def allocated(self) -> int:
        """Bytes in allocated blocks (block sizes: rounded, an unsplit block counted whole)."""
        return self._allocated

    @property
    def reserved(self) -> int:
        """Bytes of the segments the model holds (``memory_reserved``)."""
        return self._reserved

    @property
    def peak_allocated(self) -> int:
        return self._peak_allocated

    @property
    def peak_reserved(self) -> int:
        return self._peak_reserved

    def reset_peak_stats(self) -> None:
        """``torch.cuda.reset_peak_memory_stats``: peaks restart from the current values."""
        self._peak_allocated, self._peak_reserved = self._allocated, self._reserved

    def segments(self) -> list[SegmentView]:
        """The segments now, in address order (what ``torch.cuda.memory_snapshot`` lists)."""
        return [SegmentView(s.address, s.pool, s.size, s.expandable, tuple(
                    BlockView(b.address, b.size, b.allocated, b.requested) for b in s.blocks))
                for s in sorted(self._segments, key=lambda s: s.address)]

    # ------------------------------------------------------------------ malloc / free
    def malloc(self, size: int) -> int:
        """Allocate ``size`` bytes (``DeviceCachingAllocator::malloc``); returns a handle."""
        if size < 0:
            raise ValueError(f"size must be >= 0, not {size}")
        if size == 0:
            return 0
        rounded = round_size(size)
        pool = "small" if rounded <= SMALL_SIZE else "large"
        block = self._free_block(pool, rounded) or self._new_block(pool, rounded)
        if self._should_split(block, rounded):
            self._split(block, rounded)
        block.allocated, block.requested = True, int(size)
        self._allocated += block.size
        self._peak_allocated = max(self._peak_allocated, self._allocated)
        handle = next(self._ids)
        self._handles[handle] = block
        return handle

    def free(self, handle: int) -> None:
        """Return a block to the cache (``free_block``): it merges with free neighbours."""
        if handle == 0:
            return
        block = self._handles.pop(handle)
        block.allocated, block.requested = False, 0
        self._allocated -= block.size
        blocks = block.segment.blocks
        i = blocks.index(block)
        if i + 1 < len(blocks) and not blocks[i + 1].allocated:  # [block next] -> block
            block.size += blocks.pop(i + 1).size
        if i > 0 and not blocks[i - 1].allocated:  # [prev block] -> prev
            blocks[i - 1].size += blocks.pop(i).size

    def empty_cache(self) -> None:
        """``release_cached_blocks``: every entirely free segment goes back to the device
        (expandable segments: their free pages at the end, see the module docstring)."""
        for seg in list(self._segments):
            if seg.expandable:
                self._unmap_free_tail(seg)
            elif len(seg.blocks) == 1 and not seg.blocks[0].allocated:
                self._segments.remove(seg)
                self._reserved -= seg.size

    # ------------------------------------------------------------------ the rules
    def _free_block(self, pool: str, size: int) -> _Block | None:
        """``get_free_block``: best fit (size, then address) among the pool's free blocks; an
        expandable segment's growable end block only when nothing else fits; then the
        ``max_split_size`` limits on the block found."""
        fits = [b for s in self._segments if s.pool == pool for b in s.blocks
                if not b.allocated and b.size >= size]
        if not fits:
            return None
        best = min(fits, key=lambda b: (self._is_growable_end(b), b.size, b.address))
        limit = self.max_split_size
        if limit is not None and size < limit <= best.size:
            return None  # do not return an oversized block for a smaller request
        if limit is not None and size >= limit and best.size >= size + LARGE_BUFFER:
            return None  # an oversize block may be rounded up, but only within 20 MiB
        return best

    def _is_growable_end(self, block: _Block) -> bool:
        return block.segment.expandable and block is block.segment.blocks[-1]

    def _should_split(self, block: _Block, size: int) -> bool:
        """``should_split``: small pool or expandable: >= 512 bytes left; large pool: > 1 MiB
        left, and only for requests below ``max_split_size``."""
        remaining = block.size - size
        if block.segment.pool == "small" or self.expandable_segments:
            return remaining >= MIN_BLOCK_SIZE
        below_limit = self.max_split_size is None or size < self.max_split_size
        return below_limit and remaining > SMALL_SIZE

    def _split(self, block: _Block, size: int) -> None:
        """``alloc_found_block``: the block keeps the first ``size`` bytes, the rest stays free."""
        blocks = block.segment.blocks
        rest = _Block(block.segment, block.offset + size, block.size - size)
        block.size = size
        blocks.insert(blocks.index(block) + 1, rest)

    def _new_block(self, pool: str, size: int) -> _Block:
        """``alloc_block``: a new segment (expandable: new pages at the end of the pool's one
        segment). With a ``capacity`` that the growth would pass: ``malloc``'s retry, release
        every entirely free segment (``release_cached_blocks``) and try once more."""
        grow = self._growth(pool, size)
        if self._over_capacity(grow):
            self.empty_cache()
            grow = self._growth(pool, size)
            if self._over_capacity(grow):
                raise torch.OutOfMemoryError(
                    f"AllocatorModel: out of memory. Tried to allocate {grow} bytes with "
                    f"{self._reserved} of {self.capacity} reserved (a model, not the allocator)")
        self._reserved += grow
        self._peak_reserved = max(self._peak_reserved, self._reserved)
        if not self.expandable_segments:
            seg = self._add_segment(pool, grow, expandable=False)
            seg.blocks.append(_Block(seg, 0, grow))
            return seg.blocks[-1]
        seg = self._expandable(pool) or self._add_segment(pool, 1 << 40, expandable=True)
        if seg.blocks and not seg.blocks[-1].allocated:
            seg.blocks[-1].size += grow
        else:
            seg.blocks.append(_Block(seg, seg.size, grow))
        return seg.blocks[-1]

    def _over_capacity(self, grow: int) -> bool:
        return self.capacity is not None and self._reserved + grow > self.capacity

    def _add_segment(self, pool: str, span: int, *, expandable: bool) -> _Segment:
        seg = _Segment(self._next_address, pool, expandable)
        self._next_address += span  # address space: an expandable segment may grow into it
        self._segments.append(seg)
        return seg

    # ------------------------------------------------------------------ expandable segments
    def _page(self, pool: str) -> int:
        return SMALL_BUFFER if pool == "small" else LARGE_BUFFER

    def _expandable(self, pool: str) -> _Segment | None:
        return next((s for s in self._segments if s.expandable and s.pool == pool), None)

    def _growth(self, pool: str, size: int) -> int:
        """Bytes a new block of ``size`` adds to reserved: ``get_allocation_size``, or with
        expandable segments the pages that let the pool's free end block hold ``size``
        (``try_allocate_expandable_block``)."""
        if not self.expandable_segments:
            return allocation_size(size)
        seg = self._expandable(pool)
        tail = seg.blocks[-1].size if seg and seg.blocks and not seg.blocks[-1].allocated else 0
        page = self._page(pool)
        return max(0, -(-(size - tail) // page) * page)

    def _unmap_free_tail(self, seg: _Segment) -> None:
        """``unmap_block`` on the segment's free end block: its whole pages are released."""
        if not seg.blocks or seg.blocks[-1].allocated:
            return
        tail, page = seg.blocks[-1], self._page(seg.pool)
        keep = -(-tail.offset // page) * page - tail.offset  # bytes up to the next page boundary
        self._reserved -= tail.size - keep
        tail.size = keep
        if keep == 0:
            seg.blocks.pop()
        if not seg.blocks:
            self._segments.remove(seg)


# ---------------------------------------------------------------------------- replay
@dataclass(frozen=True)
class Replay:
    """What the model predicts for a trace. The timelines have one value at the start and one
    after each trace event (``len(trace) + 1``, aligned with
    :func:`memlab.measure.snapshot.live_bytes_timeline`)."""

    peak_allocated: int
    peak_reserved: int
    final_reserved: int
    final_allocated: int
    reserved_over_time: tuple[int, ...] = field(repr=False)
    allocated_over_time: tuple[int, ...] = field(repr=False)


def _operations(allocs: Iterable[Allocation]) -> dict[int, tuple[str, Allocation]]:
    ops: dict[int, tuple[str, Allocation]] = {}
    for a in allocs:
        if a.alloc_at is not None:
            ops[a.alloc_at] = ("alloc", a)
        if a.free_at is not None:
            ops[a.free_at] = ("free", a)
    return ops


def replay(snapshot: dict[str, Any], device: int = 0, **options: Any) -> Replay:
    """Replay a snapshot's trace (memlab's CPU recording or torch's CUDA one) through an
    :class:`AllocatorModel` (``options``: its keyword arguments) and report what it predicts.

    The blocks come from :func:`memlab.measure.snapshot.allocations`: blocks alive before the
    trace began are allocated first (in that reader's order: their real layout is unknown), then
    every ``alloc`` / ``free_completed`` in trace order, with the requested sizes.
    """
    allocs = allocations(snapshot, device)
    model = AllocatorModel(**options)
    handles = {id(a): model.malloc(a.size) for a in allocs if a.alloc_at is None}
    ops = _operations(allocs)
    reserved, allocated = [model.reserved], [model.allocated]
    for i in range(len(_events(snapshot, device))):
        op = ops.get(i)
        if op is not None and op[0] == "alloc":
            handles[id(op[1])] = model.malloc(op[1].size)
        elif op is not None:
            model.free(handles.pop(id(op[1])))
        reserved.append(model.reserved)
        allocated.append(model.allocated)
    return Replay(model.peak_allocated, model.peak_reserved, model.reserved, model.allocated,
                  tuple(reserved), tuple(allocated))
