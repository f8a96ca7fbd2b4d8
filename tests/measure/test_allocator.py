"""memlab.measure.allocator: a model of the CUDA caching allocator's documented rules.

Each rule on a hand-computed case (sizes in MiB unless said), then replays: a hand-written trace,
and memlab's CPU recording of a tiny training step. Runs on the CPU: nothing here needs a GPU.
"""
from __future__ import annotations

import pytest
import torch

from memlab.measure import allocator as al
from memlab.measure.allocator import AllocatorModel, replay, round_size
from memlab.measure.snapshot import allocations, live_bytes_timeline, record_snapshot

KiB, MiB = 1 << 10, 1 << 20


def blocks(model: AllocatorModel, i: int = 0) -> list[tuple[int, bool]]:
    """(size, allocated) of the blocks of segment ``i``, in address order."""
    return [(b.size, b.allocated) for b in model.segments()[i].blocks]


# ----------------------------------------------------------------------------- sizes
@pytest.mark.parametrize("request_bytes, rounded", [(1, 512), (512, 512), (513, 1024),
                                                    (1000, 1024), (MiB + 1, MiB + 512)])
def test_requests_are_rounded_up_to_512_bytes(request_bytes, rounded):
    assert round_size(request_bytes) == rounded
    m = AllocatorModel()
    m.malloc(request_bytes)
    assert m.allocated == rounded


@pytest.mark.parametrize("rounded, segment", [(512, 2 * MiB), (MiB, 2 * MiB), (MiB + 512, 20 * MiB),
                                              (10 * MiB - 512, 20 * MiB), (10 * MiB, 10 * MiB),
                                              (10 * MiB + 512, 12 * MiB), (25 * MiB, 26 * MiB)])
def test_segment_sizes(rounded, segment):
    assert al.allocation_size(rounded) == segment


def test_a_1_kib_request_reserves_a_2_mib_small_segment():
    m = AllocatorModel()
    m.malloc(KiB)
    assert (m.allocated, m.reserved) == (KiB, 2 * MiB)
    assert m.segments()[0].pool == "small"
    assert blocks(m) == [(KiB, True), (2 * MiB - KiB, False)]


def test_a_5_mib_request_reserves_20_mib_and_splits_it():
    m = AllocatorModel()
    m.malloc(5 * MiB)
    assert (m.allocated, m.reserved) == (5 * MiB, 20 * MiB)
    assert m.segments()[0].pool == "large"
    assert blocks(m) == [(5 * MiB, True), (15 * MiB, False)]


def test_a_25_mib_request_reserves_26_mib_and_gets_it_whole():
    m = AllocatorModel()
    m.malloc(25 * MiB)
    assert m.reserved == 26 * MiB
    # 1 MiB would remain: a large block is split only when MORE than 1 MiB remains, so the whole
    # 26 MiB block is handed out and counted as allocated (torch's allocated_bytes counts blocks)
    assert m.allocated == 26 * MiB
    assert blocks(m) == [(26 * MiB, True)]


def test_zero_bytes_allocate_nothing():
    m = AllocatorModel()
    assert m.malloc(0) == 0
    m.free(0)
    assert (m.allocated, m.reserved, m.segments()) == (0, 0, [])


# ----------------------------------------------------------------------------- reuse
def test_two_small_requests_share_one_small_segment():
    m = AllocatorModel()
    m.malloc(1000)
    m.malloc(300_000)
    assert m.reserved == 2 * MiB and len(m.segments()) == 1
    assert blocks(m) == [(1024, True), (300_032, True), (2 * MiB - 1024 - 300_032, False)]


@pytest.mark.parametrize("size, reserved", [(KiB, 2 * MiB), (5 * MiB, 20 * MiB), (25 * MiB, 26 * MiB)])
def test_free_then_the_same_size_reuses_the_cached_block(size, reserved):
    m = AllocatorModel()
    h = m.malloc(size)
    m.free(h)
    assert (m.allocated, m.reserved) == (0, reserved)  # freed, but still reserved (cached)
    m.malloc(size)
    assert (m.reserved, m.peak_reserved, len(m.segments())) == (reserved, reserved, 1)


def test_small_and_large_requests_never_share_a_pool():
    m = AllocatorModel()
    h = m.malloc(5 * MiB)  # 20 MiB large segment, 15 MiB of it free
    m.free(h)
    m.malloc(KiB)  # fits the cached 20 MiB block, but that block is in the large pool
    assert m.reserved == 22 * MiB
    assert sorted(s.pool for s in m.segments()) == ["large", "small"]


def test_best_fit_takes_the_smallest_cached_block_then_the_lowest_address():
    m = AllocatorModel()
    a, b, c = m.malloc(16 * MiB), m.malloc(12 * MiB), m.malloc(12 * MiB)
    first12 = m.segments()[1].address
    for h in (a, b, c):
        m.free(h)
    m.malloc(11 * MiB)  # fits 16, 12 and 12: the first 12 MiB block (1 MiB left: not split)
    taken = [s for s in m.segments() if s.allocated_size]
    assert [(s.address, s.allocated_size) for s in taken] == [(first12, 12 * MiB)]
    assert (m.allocated, m.reserved) == (12 * MiB, 40 * MiB)
    m.malloc(13 * MiB)  # only the 16 MiB block fits: 3 MiB left (> 1 MiB) is split off
    assert m.allocated == 25 * MiB and m.reserved == 40 * MiB
    assert blocks(m, 0) == [(13 * MiB, True), (3 * MiB, False)]


# ----------------------------------------------------------------------------- split and merge
def test_small_blocks_split_when_512_bytes_remain():
    m = AllocatorModel()
    m.malloc(MiB)
    m.malloc(MiB - 512)
    assert blocks(m) == [(MiB, True), (MiB - 512, True), (512, False)]
    m.malloc(512)  # the 512-byte remainder was split off, so it serves this request
    assert m.reserved == 2 * MiB and blocks(m)[-1] == (512, True)


def test_large_blocks_split_only_when_more_than_1_mib_remains():
    m = AllocatorModel()
    a = m.malloc(12 * MiB)
    m.free(a)
    m.malloc(11 * MiB)  # 1 MiB would remain: not split, the whole 12 MiB is allocated
    assert (m.allocated, blocks(m)) == (12 * MiB, [(12 * MiB, True)])
    m = AllocatorModel()
    a = m.malloc(12 * MiB)
    m.free(a)
    m.malloc(MiB * 21 // 2)  # 10.5 MiB: 1.5 MiB remains, split
    assert (m.allocated, blocks(m)) == (MiB * 21 // 2, [(MiB * 21 // 2, True), (3 * MiB // 2, False)])


def test_freed_blocks_merge_with_free_neighbours():
    m = AllocatorModel()
    a, b, c = m.malloc(512 * KiB), m.malloc(512 * KiB), m.malloc(512 * KiB)
    assert blocks(m) == [(512 * KiB, True)] * 3 + [(512 * KiB, False)]
    m.free(a)
    assert blocks(m) == [(512 * KiB, False), (512 * KiB, True), (512 * KiB, True), (512 * KiB, False)]
    m.free(c)  # merges with the free block after it
    assert blocks(m) == [(512 * KiB, False), (512 * KiB, True), (MiB, False)]
    m.free(b)  # merges with both: the segment is one free block again
    assert blocks(m) == [(2 * MiB, False)]


def test_merged_small_block_serves_a_request_no_piece_could():
    m = AllocatorModel()
    hs = [m.malloc(256 * KiB) for _ in range(8)]  # fills the 2 MiB segment exactly
    assert m.reserved == 2 * MiB and blocks(m) == [(256 * KiB, True)] * 8
    for h in hs[2:6]:
        m.free(h)
    m.malloc(MiB)  # the four freed neighbours merged into one 1 MiB block
    assert m.reserved == 2 * MiB and len(m.segments()) == 1


# ----------------------------------------------------------------------------- max_split_size_mb
def test_max_split_size_keeps_a_large_cached_block_whole():
    for option, reserved in ((None, 40 * MiB), (20, 60 * MiB)):
        m = AllocatorModel(max_split_size_mb=option)
        m.free(m.malloc(40 * MiB))
        m.malloc(5 * MiB)
        # default: the cached 40 MiB block is split; with the limit a 5 MiB request may not take
        # a block >= 20 MiB, so a new 20 MiB segment is reserved
        assert m.reserved == reserved, option


def test_max_split_size_oversize_requests_take_cached_blocks_within_20_mib():
    m = AllocatorModel(max_split_size_mb=20)
    m.free(m.malloc(40 * MiB))
    m.malloc(30 * MiB)  # 40 < 30 + 20: taken whole (never split above the limit)
    assert (m.allocated, m.reserved) == (40 * MiB, 40 * MiB)
    m = AllocatorModel(max_split_size_mb=20)
    m.free(m.malloc(46 * MiB))
    m.malloc(25 * MiB)  # 46 >= 25 + 20: too wasteful, a new 26 MiB segment
    assert (m.allocated, m.reserved) == (26 * MiB, 72 * MiB)


def test_max_split_size_below_20_mb_is_refused_as_torch_does():
    with pytest.raises(ValueError, match="max_split_size_mb"):
        AllocatorModel(max_split_size_mb=10)


# ----------------------------------------------------------------------------- empty_cache
def test_empty_cache_releases_only_entirely_free_segments():
    m = AllocatorModel()
    a, b = m.malloc(5 * MiB), m.malloc(5 * MiB)  # one 20 MiB segment: [5, 5, 10 free]
    c, d = m.malloc(25 * MiB), m.malloc(KiB)     # a 26 MiB and a 2 MiB segment
    assert m.reserved == 48 * MiB
    m.free(a)
    m.free(c)
    m.empty_cache()
    assert m.reserved == 22 * MiB  # the 26 MiB segment went; the half-used 20 MiB one stays
    assert m.peak_reserved == 48 * MiB
    m.free(b)
    m.free(d)
    assert m.reserved == 22 * MiB  # freeing alone returns nothing to the device
    m.empty_cache()
    assert (m.reserved, m.allocated, m.segments()) == (0, 0, [])


def test_out_of_memory_releases_cached_segments_then_retries():
    m = AllocatorModel(capacity=50 * MiB)
    m.free(m.malloc(30 * MiB))
    m.malloc(32 * MiB)  # 30 cached + 32 > 50: the cached segment is released, then it fits
    assert (m.reserved, m.peak_reserved) == (32 * MiB, 32 * MiB)
    with pytest.raises(torch.OutOfMemoryError, match="model"):
        m.malloc(30 * MiB)  # nothing left to release
    assert m.reserved == 32 * MiB


# ----------------------------------------------------------------------------- expandable
def growing_trace(model: AllocatorModel) -> AllocatorModel:
    """A batch that grows each step: each new tensor is 2 MiB larger than the cached one."""
    for n in range(30, 42, 2):
        model.free(model.malloc(n * MiB))
    return model


def test_expandable_segments_reserve_less_for_a_fragmenting_trace():
    default = growing_trace(AllocatorModel())
    assert default.peak_reserved == (30 + 32 + 34 + 36 + 38 + 40) * MiB  # no cached block fits
    expandable = growing_trace(AllocatorModel(expandable_segments=True))
    assert expandable.peak_reserved == 40 * MiB  # one segment, two 20 MiB pages, reused
    assert len(expandable.segments()) == 1 and expandable.segments()[0].expandable


def test_expandable_segments_grow_in_pages_and_unmap_the_free_end():
    m = AllocatorModel(expandable_segments=True)
    a = m.malloc(KiB)
    assert m.reserved == 2 * MiB  # one 2 MiB page of the small pool's segment
    b = m.malloc(3 * MiB)
    assert m.reserved == 22 * MiB  # one 20 MiB page of the large pool's segment
    c = m.malloc(30 * MiB)  # 17 MiB free at the end: one more page makes room
    assert m.reserved == 42 * MiB and blocks(m, 1)[-1] == (7 * MiB, False)
    m.free(c)
    m.empty_cache()  # free from 3 MiB on: the page [20, 40) goes, [0, 20) holds b
    assert m.reserved == 22 * MiB and m.segments()[1].size == 20 * MiB
    m.free(a)
    m.free(b)
    m.empty_cache()
    assert (m.reserved, m.segments()) == (0, [])


def test_expandable_segments_fill_free_blocks_inside_before_the_growable_end():
    m = AllocatorModel(expandable_segments=True)
    m.malloc(4 * MiB)
    b = m.malloc(10 * MiB)
    m.malloc(4 * MiB)
    assert blocks(m) == [(4 * MiB, True), (10 * MiB, True), (4 * MiB, True), (2 * MiB, False)]
    m.free(b)
    m.malloc(3 * MiB // 2)  # the 2 MiB end block is smaller, but it can grow: the 10 MiB one is used
    assert blocks(m) == [(4 * MiB, True), (3 * MiB // 2, True), (17 * MiB // 2, False),
                         (4 * MiB, True), (2 * MiB, False)]
    assert m.reserved == 20 * MiB
    m.reset_peak_stats()
    assert (m.peak_reserved, m.peak_allocated) == (20 * MiB, 19 * MiB // 2)


# ----------------------------------------------------------------------------- replay
def trace_snapshot(events: list[tuple[str, int, int]]) -> dict:
    return {"segments": [], "device_traces": [[
        {"action": a, "addr": addr, "size": size, "stream": 0, "frames": []}
        for a, addr, size in events]]}


def test_replay_of_a_hand_written_trace():
    snap = trace_snapshot([("alloc", 1, 5 * MiB), ("alloc", 2, KiB),
                           ("free_requested", 1, 5 * MiB), ("free_completed", 1, 5 * MiB),
                           ("alloc", 3, 25 * MiB), ("free_completed", 3, 25 * MiB)])
    r = replay(snap)
    M = MiB
    assert r.reserved_over_time == (0, 20 * M, 22 * M, 22 * M, 22 * M, 48 * M, 48 * M)
    assert r.allocated_over_time == (0, 5 * M, 5 * M + KiB, 5 * M + KiB, KiB, 26 * M + KiB, KiB)
    assert (r.peak_allocated, r.peak_reserved, r.final_reserved, r.final_allocated) == (
        26 * M + KiB, 48 * M, 48 * M, KiB)
    assert len(r.reserved_over_time) == len(live_bytes_timeline(snap))
    assert replay(snap, max_split_size_mb=20).peak_reserved == 48 * M


def test_replay_counts_blocks_alive_before_the_trace():
    snap = trace_snapshot([("free_completed", 7, 25 * MiB), ("alloc", 8, 25 * MiB)])
    r = replay(snap)
    assert r.reserved_over_time == (26 * MiB, 26 * MiB, 26 * MiB)  # the freed block is reused
    assert r.allocated_over_time == (26 * MiB, 0, 26 * MiB)


def tiny_training_step() -> tuple:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randn(32, 8)

    def step() -> None:
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step, (model, optimizer, x, y)


def rounded_live_timeline(snap: dict) -> list[int]:
    """Live bytes of 512-rounded sizes, from the snapshot's own blocks (not the model)."""
    allocs = allocations(snap)
    n = len(snap["device_traces"][0])
    live = sum(round_size(a.size) for a in allocs if a.alloc_at is None)
    delta = [0] * n
    for a in allocs:
        if a.alloc_at is not None:
            delta[a.alloc_at] += round_size(a.size)
        if a.free_at is not None:
            delta[a.free_at] -= round_size(a.size)
    out = [live]
    for d in delta:
        live += d
        out.append(live)
    return out


def test_replay_of_a_real_cpu_recording_of_a_training_step():
    step, tracked = tiny_training_step()
    snap = record_snapshot(step, device="cpu", track=tracked)
    assert len(snap["device_traces"][0]) > 20  # forward, backward, AdamW's new state
    r = replay(snap)
    expected = rounded_live_timeline(snap)
    # every block here is <= 1 MiB: the small pool splits off any remainder, so allocated is
    # exactly the live rounded bytes, at every step and at the peak
    assert list(r.allocated_over_time) == expected
    assert r.peak_allocated == max(expected) > 0
    assert r.peak_reserved >= r.peak_allocated
    assert r.peak_reserved % (2 * MiB) == 0  # small segments only
    assert r.final_reserved == r.reserved_over_time[-1] <= r.peak_reserved
    assert len(r.reserved_over_time) == len(live_bytes_timeline(snap))


def test_the_gpucheck_row_runs_on_the_cpu():
    from memlab.tools import gpucheck

    cfg = {"hidden": 64, "ffn": 256, "batch": 8}
    row = gpucheck.run_allocator_model_check(torch.device("cpu"), cfg)
    assert row["error"] is None, row
    assert row["model_cpu_trace"] >= 2 * MiB and row["model_cpu_trace"] % (2 * MiB) == 0
    assert row["real_peak_reserved"] is None and row["error_cpu_trace"] is None  # CUDA only
    step, tracked = gpucheck._allocator_model_step(torch.device("cpu"), cfg)
    assert row["model_cpu_trace"] == replay(record_snapshot(step, track=tracked, device="cpu")).peak_reserved
    lines = gpucheck._allocator_model_lines(row)
    assert lines[-3] == f"| n/a | n/a | n/a | {gpucheck._b(row['model_cpu_trace'])} | n/a | n/a | n/a |"
    cpu_count = len(allocations(record_snapshot(step, track=tracked, device="cpu")))
    assert row["allocations_cpu"] == cpu_count > 0
    assert lines[-1] == (f"Allocations of the step: {cpu_count} in memlab's CPU record, n/a in "
                         "torch's CUDA trace; no CUDA trace to compare.")


def test_the_gpucheck_row_compares_the_cpu_record_with_the_cuda_trace_as_a_multiset():
    from types import SimpleNamespace as A

    from memlab.tools import gpucheck

    cpu = [A(size=1000), A(size=4096), A(size=4096), A(size=7)]
    cuda = [A(size=4096), A(size=1024), A(size=512), A(size=9999)]  # 1000 -> 1024, 7 -> 512
    assert gpucheck._same_allocations(cpu, cuda) == {"allocations_cuda": 4,
                                                     "allocations_matched": 0.75}
    assert gpucheck._same_allocations([], cuda)["allocations_matched"] is None


def test_the_gpucheck_report_shows_the_row_and_fails_only_if_it_did_not_run(tmp_path):
    from memlab.tools import gpucheck

    row = {"config": {"hidden": 1}, "real_peak_reserved": 100 * MiB, "model_cuda_trace": 90 * MiB,
           "error_cuda_trace": -0.1, "model_cpu_trace": 120 * MiB, "error_cpu_trace": 0.2,
           "real_peak_allocated": 80 * MiB, "model_cuda_trace_allocated": 80 * MiB, "error": None}
    report = {"date": "2026-01-02", "seconds": 1.0, "notebooks": [], "benchmark": None,
              "gpu_tests": None, "allocator_model": row,
              "environment": {"gpu": "X", "gpu_memory": None, "torch": "t", "cuda": "c",
                              "python": "p"}}
    _, md = gpucheck.write_report(report, tmp_path)
    text = md.read_text()
    assert "**PASS**" in text  # a 20% error is a measurement, not a failure
    assert ("| 100.00 MiB | 90.00 MiB | -10.0% | 120.00 MiB | +20.0% | 80.00 MiB | 80.00 MiB |"
            in text)
    report["allocator_model"] = dict(row, error="RuntimeError: boom")
    _, md = gpucheck.write_report(report, tmp_path / "failed")
    assert "**FAIL**" in md.read_text() and "| error: RuntimeError: boom |" in md.read_text()
