"""Wall-clock timing of training steps: medians of repeats, ratios, CUDA synchronized.

Used by: 02 (checkpointing cost as a time ratio, via ``memlab.checkpointing``), 04 (time per
effective batch, via ``memlab.accumulation.time_per_call``), the benchmarks.

On CUDA, kernels run asynchronously: without ``torch.cuda.synchronize`` around a call you time
the launch, not the work. Medians, not means: one interruption by another process does not
move a median. Timings depend on the machine: graded checks use them only as ratios.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

__all__ = ["TimingResult", "timed_call", "median_time", "time_ratio"]


@dataclass
class TimingResult:
    """Medians of interleaved repeats, in seconds, and their ratio ``median / baseline_median``."""

    median: float
    baseline_median: float
    times: list[float] = field(repr=False)
    baseline_times: list[float] = field(repr=False)

    @property
    def ratio(self) -> float:
        return self.median / self.baseline_median


def _sync(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_call(fn: Callable[[], Any], device: torch.device | None = None) -> float:
    """Seconds of one call of ``fn()``, the device synchronized before and after on CUDA."""
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def median_time(fn: Callable[[], Any], *, repeats: int = 5, warmup: int = 1,
                device: str | torch.device | None = None) -> float:
    """Median wall-clock seconds of ``fn()`` over ``repeats`` calls after ``warmup`` calls.

    On CUDA the device is synchronized before and after each call (kernels run asynchronously:
    without it you time the launch, not the work).
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    dev = torch.device(device) if device is not None else None
    for _ in range(warmup):
        fn()
    return statistics.median(timed_call(fn, dev) for _ in range(repeats))


def time_ratio(fn: Callable[[], Any], baseline: Callable[[], Any], *, repeats: int = 5,
               warmup: int = 1, device: str | torch.device | None = None) -> TimingResult:
    """Time ``fn`` against ``baseline``, alternating the two (which one goes first alternates
    too), so that a machine getting slower or faster affects both alike. Medians, not means:
    one interruption by another process does not move a median."""
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    dev = torch.device(device) if device is not None else None
    for _ in range(warmup):
        fn()
        baseline()
    times, base = [], []
    for i in range(repeats):
        if i % 2:
            base.append(timed_call(baseline, dev))
            times.append(timed_call(fn, dev))
        else:
            times.append(timed_call(fn, dev))
            base.append(timed_call(baseline, dev))
    return TimingResult(statistics.median(times), statistics.median(base), times, base)
