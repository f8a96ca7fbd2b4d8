"""memlab.snapshot: torch's memory snapshot, recorded on the CPU, read by torch's own viewers.

The CPU recorder must produce what ``torch.cuda.memory._snapshot()`` produces (torch's
``_memory_viz`` readers and MemoryViz.js's unpickler accept it), count exactly what
MemoryTracker counts, and name the learner's line for each block. CUDA tests are gpu-marked.
"""
from __future__ import annotations

import pickle
import pickletools
import weakref

import pytest
import torch
import torch.cuda._memory_viz as memory_viz
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import memlab as ml
from memlab import snapshot as snap_mod

HERE = __file__
_LINES = open(HERE).read().splitlines()
_MARK = "# <- the " + "largest block"  # split, so this line is not the one found
LARGEST_LINE = next(i for i, line in enumerate(_LINES, 1) if line.endswith(_MARK))

# torch/cuda/memory.py, _snapshot docstring (TraceEntry.action), and torch/csrc/cuda
# memory_snapshot.cpp (segment_map / segment_unmap).
TORCH_ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
                 "segment_map", "segment_unmap", "oom", "snapshot"}
# The opcodes the unpickler of torch/utils/viz/MemoryViz.js handles (pytorch.org/memory_viz).
MEMORY_VIZ_OPCODES = {
    "APPENDS", "BINGET", "BININT", "BININT1", "BININT2", "EMPTY_DICT", "EMPTY_LIST", "FRAME",
    "LONG1", "LONG_BINGET", "MARK", "MEMOIZE", "PROTO", "SETITEMS", "SHORT_BINUNICODE", "STOP",
    "TUPLE2", "APPEND", "NEWFALSE", "BINPUT", "BINUNICODE", "EMPTY_TUPLE", "NEWTRUE", "NONE",
    "BINFLOAT", "TUPLE", "TUPLE1", "TUPLE3", "LONG_BINPUT", "LIST", "DICT", "SETITEM",
}


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _mlp(seed: int = 0):
    """An MLP whose hidden activation (64 x 1024 fp32 = 256 KiB) is the largest block."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 1024), nn.ReLU(), nn.Linear(1024, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 16), torch.randn(64, 4)
    return model, optimizer, x, y


def _step(model, optimizer, x, y):
    optimizer.zero_grad(set_to_none=True)
    out = model(x)  # <- the largest block
    loss = nn.functional.mse_loss(out, y)
    loss.backward()
    optimizer.step()


def _cpu_snapshot(fn=_step, seed: int = 0):
    model, optimizer, x, y = _mlp(seed)
    return snap_mod.record_snapshot(fn, model, optimizer, x, y, device="cpu",
                                    track=(model, optimizer, x, y))


class _CountNewStorages(TorchDispatchMode):
    """An independent count: bytes of every distinct storage an op returns (kept alive, so
    identity is never reused), minus those that existed before."""

    def __init__(self, existing):
        super().__init__()
        self.seen = {id(t.untyped_storage()) for t in existing}
        self.keep = []
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                if id(st) not in self.seen:
                    self.seen.add(id(st))
                    self.keep.append(st)
                    self.bytes += st.nbytes()
        return out


# ----------------------------------------------------------------- torch's own readers
def test_cpu_snapshot_opens_in_torchs_trace_plot_and_segment_plot():
    snap = _cpu_snapshot()
    html = memory_viz.trace_plot(snap)
    assert isinstance(html, str) and "Active Memory Timeline" in html
    assert "snapshot.pickle" in html and "MemoryViz.js" in html
    assert "Allocator State History" in memory_viz.segment_plot(snap)
    assert "Active Cached Memory Timeline" in memory_viz.trace_plot(snap, plot_segments=True)


def test_torchs_text_readers_accept_the_cpu_snapshot():
    snap = _cpu_snapshot()
    summary = memory_viz.segsum(snap)   # checks its own accounting, raises on a mismatch
    assert f"segments: {len(snap['segments'])}" in summary
    text = memory_viz.trace(snap)
    assert text.startswith("Device 0") and "cudaMalloc" in text and "del " in text
    flame = memory_viz.memory(snap, format_flamegraph=lambda lines: lines)
    assert "active_allocated" in flame
    assert "seg_" in memory_viz.segments(snap, format_flamegraph=lambda lines: lines)
    # filter_freed drops matched alloc/free pairs: what is left is still alive
    kept = memory_viz.filter_alloc_free_pairs(pickle.loads(pickle.dumps(snap)))
    assert all(e["action"] in ("alloc", "segment_alloc", "segment_free", "free_completed")
               for e in kept["device_traces"][0])


def test_the_snapshot_has_torchs_format():
    snap = _cpu_snapshot()
    assert set(snap) >= {"segments", "device_traces"}
    (trace,) = snap["device_traces"]
    assert trace and {e["action"] for e in trace} <= TORCH_ACTIONS
    times = []
    for e in trace:
        assert set(e) >= {"action", "addr", "size", "stream", "time_us", "frames"}
        assert type(e["addr"]) is int and type(e["size"]) is int and e["size"] > 0
        assert type(e["time_us"]) is int and e["stream"] == 0
        for f in e["frames"]:
            assert set(f) == {"filename", "line", "name"} and type(f["line"]) is int
        times.append(e["time_us"])
    assert times == sorted(times)
    for seg in snap["segments"]:
        assert set(seg) >= {"device", "address", "total_size", "stream", "segment_type",
                            "allocated_size", "active_size", "blocks"}
        assert seg["device"] == 0 and seg["segment_type"] in ("small", "large")
        assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
        for b in seg["blocks"]:
            assert set(b) >= {"size", "requested_size", "address", "state", "frames"}
            assert b["state"] == "active_allocated"
            assert seg["address"] <= b["address"] < seg["address"] + seg["total_size"]


def test_dump_snapshot_writes_a_pickle_memory_viz_can_read(tmp_path):
    snap = _cpu_snapshot()
    path = snap_mod.dump_snapshot(snap, tmp_path / "step.pickle")
    data = open(path, "rb").read()
    ops = [op for op, arg, _ in pickletools.genops(data)]
    assert ops[0].name == "PROTO" and 2 <= next(pickletools.genops(data))[1] <= 4
    assert {op.name for op in ops} <= MEMORY_VIZ_OPCODES
    assert snap_mod.load_snapshot(path) == snap


# -------------------------------------------------------- the same count as MemoryTracker
def test_allocations_equal_memory_tracker_exactly():
    snap = _cpu_snapshot()
    (trace,) = snap["device_traces"]

    model, optimizer, x, y = _mlp()
    tracker = ml.MemoryTracker("cpu", timeline=False)
    tracker.track(model, optimizer, x, y)
    with tracker:
        _step(model, optimizer, x, y)
        end = tracker.current_bytes
    timeline = snap_mod.live_bytes_timeline(snap)
    assert timeline[0] == tracker.start_bytes
    assert snap_mod.peak_live_bytes(snap) == tracker.peak_bytes
    assert timeline[-1] == end

    model, optimizer, x, y = _mlp()
    existing = list(ml.tracker.tensors_of(model, optimizer, x, y))
    with _CountNewStorages(existing) as count:
        _step(model, optimizer, x, y)
    allocated = sum(e["size"] for e in trace if e["action"] == "alloc")
    freed = sum(e["size"] for e in trace if e["action"] == "free_completed")
    assert allocated == count.bytes
    assert allocated - freed == end - tracker.start_bytes


def test_largest_block_is_allocated_by_this_tests_line():
    snap = _cpu_snapshot()
    largest = snap_mod.largest_allocation(snap)
    assert largest.size == 64 * 1024 * 4
    assert largest.frame["filename"] == HERE
    assert largest.frame["line"] == LARGEST_LINE and largest.frame["name"] == "_step"
    assert snap_mod.format_frame(largest.frame) == f"test_snapshot.py:{LARGEST_LINE}:_step"
    # torch's own frames are there too (innermost first, as on CUDA): Linear.forward first
    (alloc,) = [a for a in snap_mod.allocations(snap) if a.alloc_at is not None][:1]
    assert alloc.frames[0]["name"] == "forward"
    assert alloc.frames[0]["filename"].endswith("linear.py")


def test_live_at_peak_lists_what_makes_the_peak():
    snap = _cpu_snapshot()
    blocks = snap_mod.live_at_peak(snap)
    assert sum(b.size for b in blocks) == snap_mod.peak_live_bytes(snap)
    assert [b.size for b in blocks] == sorted((b.size for b in blocks), reverse=True)
    size, frame = blocks[0]
    assert size == 64 * 1024 * 4 and frame["filename"] == HERE
    # the parameters were tracked: alive before recording began, so no line allocated them
    assert any(b.frame is None and b.size == 16 * 1024 * 4 for b in blocks)


def test_frees_balance_allocs_when_the_step_releases_everything():
    model, optimizer, x, y = _mlp()

    def forward_backward_release():
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        model.zero_grad(set_to_none=True)

    snap = snap_mod.record_snapshot(forward_backward_release, device="cpu", track=(model, x, y))
    (trace,) = snap["device_traces"]
    count = {a: sum(e["action"] == a for e in trace) for a in TORCH_ACTIONS}
    assert count["alloc"] > 0
    assert count["alloc"] == count["free_requested"] == count["free_completed"]
    assert count["segment_alloc"] == count["segment_free"] == count["alloc"]
    size = {a: sum(e["size"] for e in trace if e["action"] == a) for a in TORCH_ACTIONS}
    assert size["alloc"] == size["free_completed"] == size["free_requested"]
    allocs = snap_mod.allocations(snap)
    assert all(a.free_at is not None for a in allocs if a.alloc_at is not None)
    timeline = snap_mod.live_bytes_timeline(snap)
    assert timeline[0] == timeline[-1] == ml.storage_bytes(ml.tracker.tensors_of(model, x, y))
    # what is left in the segments is what existed before: no frames (as on CUDA)
    assert all(b["frames"] == [] for s in snap["segments"] for b in s["blocks"])
    # every free names the line that dropped the last reference (context="all" on CUDA)
    frees = [e for e in trace if e["action"] == "free_completed"]
    assert all(snap_mod.user_frame(e["frames"])["filename"] == HERE for e in frees)


def test_a_resize_is_a_free_and_a_new_block():
    def grow():
        st = torch.empty(10).untyped_storage()
        st.resize_(400)
        return st

    snap = snap_mod.record_snapshot(grow, device="cpu")
    events = [(e["action"], e["size"]) for e in snap["device_traces"][0]
              if e["action"] in ("alloc", "free_completed")]
    assert events == [("alloc", 40), ("free_completed", 40), ("alloc", 400)]
    assert [b.size for b in snap_mod.live_at_peak(snap)] == [400]
    assert ml.measure_peak(grow, device="cpu").peak_increase == 400


def test_the_snapshot_of_a_failing_call_travels_with_the_error():
    def fails():
        kept = torch.zeros(1000)
        raise torch.OutOfMemoryError(f"pretend: {kept.numel()}")

    with pytest.raises(torch.OutOfMemoryError) as info:
        snap_mod.record_snapshot(fails, device="cpu")
    snap = info.value.memlab_snapshot
    assert snap_mod.largest_allocation(snap).size == 4000
    assert snap_mod.largest_allocation(snap).frame["name"] == "fails"


def test_recording_stops_at_the_end_of_the_block():
    with snap_mod.recording("cpu") as rec:
        a = torch.ones(256)
        inside = rec.snapshot()
    frozen = rec.snapshot()
    del a
    assert rec.snapshot() is frozen and len(frozen["device_traces"][0]) == 2
    assert len(inside["device_traces"][0]) == 2 and len(frozen["segments"]) == 1
    assert snap_mod.live_at_peak(frozen)[0].size == 1024


def test_a_finished_recorder_is_not_kept_alive_by_tracked_tensors():
    keep = torch.ones(100)
    with snap_mod.recording("cpu", track=(keep,)) as rec:
        torch.ones(3)
    ref = weakref.ref(rec)
    del rec
    assert ref() is None
    del keep  # its finalizer finds no recorder and does nothing


def test_readers_on_an_empty_snapshot():
    empty = {"segments": [], "device_traces": [[]]}
    assert snap_mod.largest_allocation(empty) is None
    assert snap_mod.live_at_peak(empty) == [] and snap_mod.peak_live_bytes(empty) == 0
    assert snap_mod.user_frame([]) is None
    assert snap_mod.format_frame(None).startswith("<allocated before")


def test_user_frame_skips_torch_memlab_and_the_standard_library():
    torch_file = torch.nn.modules.linear.__file__
    frames = [{"filename": torch_file, "line": 1, "name": "forward"},
              {"filename": ml.tracker.__file__, "line": 2, "name": "helper"},
              {"filename": pickle.__file__, "line": 3, "name": "load"},
              {"filename": "<string>", "line": 1, "name": "__init__"},
              {"filename": "/tmp/ipykernel_1/123.py", "line": 4, "name": "<module>"}]
    assert snap_mod.user_frame(frames)["line"] == 4
    assert snap_mod.user_frame(frames[:2])["line"] == 1  # none outside: the innermost
    assert snap_mod.user_frame([{"filename": "<ipython-input-3-ab>", "line": 7,
                                 "name": "<module>"}])["line"] == 7


def test_short_name_and_facade():
    import memlab.snapshot as short

    assert short is snap_mod is ml.snapshot
    assert short.__name__ == "memlab.measure.snapshot"


# ------------------------------------------------------------------------------- CUDA
@pytest.mark.gpu
def test_cuda_snapshot_comes_from_the_allocator():
    model, _, x, y = _mlp()
    model, x, y = model.cuda(), x.cuda(), y.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    snap = snap_mod.record_snapshot(_step, model, optimizer, x, y, device="cuda")
    assert "memlab" not in snap
    trace = snap["device_traces"][torch.cuda.current_device()]
    assert any(e["action"] == "alloc" for e in trace)
    largest = snap_mod.largest_allocation(snap, device=torch.cuda.current_device())
    assert largest.size == 64 * 1024 * 4
    assert largest.frame["filename"] == HERE and largest.frame["line"] == LARGEST_LINE
    assert "Active Memory Timeline" in memory_viz.trace_plot(snap)
