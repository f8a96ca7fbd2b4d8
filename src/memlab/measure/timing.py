"""Wall-clock timing of training steps with PyTorch's own tool, ``torch.utils.benchmark.Timer``.

Used by: 02 (checkpointing cost as a time ratio, via ``memlab.checkpointing``), 04 (time per
effective batch against k = 1, via ``memlab.accumulation.time_ratio``), 05 (each remedy's
time per effective batch against the plain job, via ``memlab.oom.time_per_step``), the
benchmarks.

Why ``torch.utils.benchmark.Timer`` (https://pytorch.org/docs/stable/benchmark_utils.html,
and the tutorial https://pytorch.org/tutorials/recipes/recipes/benchmark.html) and not a
hand-written ``perf_counter`` loop: it warms up first (PyTorch initializes lazily), fixes the
number of threads so two measurements compare like with like, synchronizes CUDA (kernels run
asynchronously: otherwise you time the launch, not the work), and ``blocked_autorange`` picks
how many calls make one block so that one block lasts long enough for the clock, then
repeats blocks until ``min_run_time`` has passed. We keep the per-call time of every block.

A ratio (:func:`time_ratio`) is measured in ROUNDS: each round times ``fn`` and ``baseline`` one
after the other (which one goes first alternates), so a laptop that slows down or speeds up
affects both alike. The ratio is the ratio of the two medians over all blocks; its SPREAD is
the range of the per-round ratios, which every notebook prints next to the ratio. Two ratios
are comparable only when measured with the same function and the same settings: the
notebooks measure each comparison in one call, never across sections.
Timings depend on the machine: graded checks use them only as ratios, with wide margins.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.utils.benchmark as benchmark

__all__ = ["TimingResult", "timed_call", "median_time", "time_ratio", "timer_blocks"]


@dataclass
class TimingResult:
    """``fn`` against ``baseline``: medians of per-call block times (seconds), their ratio, and
    the per-round ratios whose range is the spread."""

    median: float
    baseline_median: float
    times: list[float] = field(repr=False)
    baseline_times: list[float] = field(repr=False)
    round_ratios: list[float] = field(default_factory=list, repr=False)

    @property
    def ratio(self) -> float:
        return self.median / self.baseline_median

    @property
    def spread(self) -> tuple[float, float]:
        """(lowest, highest) per-round ratio: how much the ratio moved while it was measured."""
        if not self.round_ratios:
            return (self.ratio, self.ratio)
        return (min(self.round_ratios), max(self.round_ratios))

    def __str__(self) -> str:
        lo, hi = self.spread
        return f"{self.ratio:.2f}x (rounds {lo:.2f}-{hi:.2f}x, {len(self.round_ratios)} rounds)"


def _sync(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_call(fn: Callable[[], Any], device: torch.device | None = None) -> float:
    """Seconds of one call of ``fn()``, the device synchronized before and after on CUDA.
    (One call is noisy: prefer :func:`median_time`; this is for steps too long to repeat.)"""
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def timer_blocks(fn: Callable[[], Any], *, min_run_time: float = 0.05,
                 device: str | torch.device | None = None) -> list[float]:
    """Per-call seconds of each block ``Timer.blocked_autorange`` ran (warm-up included in it).

    On CUDA the device is synchronized at the end of each block, so the time includes the
    kernels; ``num_threads`` is the current ``torch.get_num_threads()``.
    """
    dev = torch.device(device) if device is not None else None
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn},
                            num_threads=torch.get_num_threads())
    measurement = timer.blocked_autorange(min_run_time=min_run_time)
    _sync(dev)
    return [float(t) for t in measurement.times]


def median_time(fn: Callable[[], Any], *, repeats: int = 5, warmup: int = 1,
                device: str | torch.device | None = None, min_run_time: float = 0.05) -> float:
    """Median per-call seconds of ``fn()`` over ``repeats`` rounds of ``blocked_autorange``
    (each at least ``min_run_time`` seconds), after ``warmup`` plain calls."""
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    for _ in range(warmup):
        fn()
    times: list[float] = []
    for _ in range(repeats):
        times += timer_blocks(fn, min_run_time=min_run_time, device=device)
    return statistics.median(times)


def time_ratio(fn: Callable[[], Any], baseline: Callable[[], Any], *, repeats: int = 5,
               warmup: int = 1, device: str | torch.device | None = None,
               min_run_time: float = 0.05) -> TimingResult:
    """Time ``fn`` against ``baseline`` in ``repeats`` rounds (see the module docstring).

    ``times`` / ``baseline_times`` hold one median per round; the result's ``median`` and
    ``baseline_median`` are medians over every block of every round.
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    for _ in range(warmup):
        fn()
        baseline()
    all_fn: list[float] = []
    all_base: list[float] = []
    times, base, ratios = [], [], []
    for i in range(repeats):
        order = ((baseline, all_base, base), (fn, all_fn, times))
        if i % 2 == 0:
            order = order[::-1]
        round_medians = {}
        for f, pool, per_round in order:
            blocks = timer_blocks(f, min_run_time=min_run_time, device=device)
            pool += blocks
            per_round.append(statistics.median(blocks))
            round_medians[id(pool)] = per_round[-1]
        ratios.append(round_medians[id(all_fn)] / round_medians[id(all_base)])
    return TimingResult(statistics.median(all_fn), statistics.median(all_base), times, base, ratios)
