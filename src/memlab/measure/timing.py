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
the interquartile range of the per-round ratios (the middle half of the rounds: one round hit
by another program does not move it; with fewer than 5 rounds, too few for quartiles, the full
range), which every notebook prints next to the ratio. When the first rounds disagree (their
full range wider than :data:`NOISY_SPREAD`), :func:`time_ratio` runs more rounds, up to three
times as many, for at most as long again as the first ones took (and at most
:data:`EXTRA_SECONDS`): a quiet machine pays nothing more. A spread still wider than
:data:`NOISY_SPREAD` is too wide to conclude anything from: the result's ``warning`` says so,
in one line, and ``str(result)`` ends with it.

On a busy laptop, time tiny ops on one thread (``torch.set_num_threads(1)``, or
``num_threads=1``): a thread pool as large as the cores waits, at every op, for whichever of
its threads is descheduled (04's k = 8 ratio on 2 cores next to other programs: rounds from
0.04x to 93x on 2 threads, from 2.4x to 4.0x on one, its middle half 2.7x-2.8x;
``benchmarks/timing_stability.py``).

Two ratios are comparable only when measured with the same function and the same settings:
the notebooks measure each comparison in one call, never across sections.
Timings depend on the machine: graded checks use them only as ratios, with wide margins.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.utils.benchmark as benchmark

__all__ = ["TimingResult", "timed_call", "median_time", "time_ratio", "timer_blocks",
           "NOISY_SPREAD", "QUARTILE_ROUNDS", "EXTRA_SECONDS"]

#: A spread whose high end is more than this many times its low end is too wide to conclude:
#: the rounds of one measurement disagree by more than 50%.
NOISY_SPREAD = 1.5
#: From this many rounds on, the spread is the interquartile range of the per-round ratios.
QUARTILE_ROUNDS = 5
#: At most this many seconds of extra rounds (besides: at most as long as the first rounds).
EXTRA_SECONDS = 2.0


def _quartiles(values: list[float]) -> tuple[float, float]:
    """(first, third) quartile, interpolated between the sorted values (numpy's default)."""
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (q1, q3)


@dataclass
class TimingResult:
    """``fn`` against ``baseline``: medians of per-call block times (seconds), their ratio, and
    the per-round ratios whose interquartile range is the spread."""

    median: float
    baseline_median: float
    times: list[float] = field(repr=False)
    baseline_times: list[float] = field(repr=False)
    round_ratios: list[float] = field(default_factory=list, repr=False)
    hint: str = field(default="", repr=False)   # added to the warning, e.g. about threads

    @property
    def ratio(self) -> float:
        return self.median / self.baseline_median

    @property
    def spread(self) -> tuple[float, float]:
        """(low, high): the first and third quartile of the per-round ratios, the range of the
        middle half of the rounds, which one outlying round does not move. With fewer than
        :data:`QUARTILE_ROUNDS` rounds, too few for quartiles, the lowest and highest."""
        if not self.round_ratios:
            return (self.ratio, self.ratio)
        if len(self.round_ratios) < QUARTILE_ROUNDS:
            return self.full_range
        return _quartiles(self.round_ratios)

    @property
    def full_range(self) -> tuple[float, float]:
        """(lowest, highest) per-round ratio, outliers included."""
        if not self.round_ratios:
            return (self.ratio, self.ratio)
        return (min(self.round_ratios), max(self.round_ratios))

    @property
    def noisy(self) -> bool:
        """True when the spread is too wide to conclude from: high > NOISY_SPREAD x low."""
        lo, hi = self.spread
        return hi > NOISY_SPREAD * lo

    @property
    def warning(self) -> str:
        """One line for the learner when the timing is too noisy to conclude; else ``""``."""
        if not self.noisy:
            return ""
        lo, hi = self.spread
        return (f"warning: timings too noisy to conclude on this machine right now (the "
                f"{self._spread_name()} spans {lo:.2f}-{hi:.2f}x): close other programs and "
                f"run the cell again{self.hint}")

    def _spread_name(self) -> str:
        n = len(self.round_ratios)
        return f"middle half of {n} rounds" if n >= QUARTILE_ROUNDS else f"{n} rounds"

    def __str__(self) -> str:
        lo, hi = self.spread
        text = f"{self.ratio:.2f}x ({self._spread_name()} {lo:.2f}-{hi:.2f}x)"
        return text + (f"\n{self.warning}" if self.noisy else "")


_clock = time.perf_counter   # what time_ratio's budget for extra rounds is measured with


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
                 device: str | torch.device | None = None,
                 num_threads: int | None = None) -> list[float]:
    """Per-call seconds of each block ``Timer.blocked_autorange`` ran (warm-up included in it).

    On CUDA the device is synchronized at the end of each block, so the time includes the
    kernels; ``num_threads`` (default: the current ``torch.get_num_threads()``) is the size of
    the thread pool while ``fn`` runs.
    """
    dev = torch.device(device) if device is not None else None
    threads = torch.get_num_threads() if num_threads is None else num_threads
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    measurement = timer.blocked_autorange(min_run_time=min_run_time)
    _sync(dev)
    return [float(t) for t in measurement.times]


def median_time(fn: Callable[[], Any], *, repeats: int = 5, warmup: int = 1,
                device: str | torch.device | None = None, min_run_time: float = 0.05,
                num_threads: int | None = None) -> float:
    """Median per-call seconds of ``fn()`` over ``repeats`` rounds of ``blocked_autorange``
    (each at least ``min_run_time`` seconds), after ``warmup`` plain calls."""
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    for _ in range(warmup):
        fn()
    times: list[float] = []
    for _ in range(repeats):
        times += timer_blocks(fn, min_run_time=min_run_time, device=device,
                              num_threads=num_threads)
    return statistics.median(times)


def time_ratio(fn: Callable[[], Any], baseline: Callable[[], Any], *, repeats: int = 5,
               warmup: int = 1, device: str | torch.device | None = None,
               min_run_time: float = 0.05, max_rounds: int | None = None,
               num_threads: int | None = None) -> TimingResult:
    """Time ``fn`` against ``baseline`` in ``repeats`` rounds (see the module docstring).

    When the ``repeats`` rounds disagree (their full range wider than :data:`NOISY_SPREAD`),
    more rounds follow, until ``max_rounds`` rounds (default: ``3 * repeats``, or exactly
    ``repeats`` when fewer than :data:`QUARTILE_ROUNDS` are asked for) or until the extra rounds
    took as long as the first ones, or :data:`EXTRA_SECONDS`. ``num_threads``: the thread pool
    of both (default: the current ``torch.get_num_threads()``).

    ``times`` / ``baseline_times`` hold one median per round; the result's ``median`` and
    ``baseline_median`` are medians over every block of every round.
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    if max_rounds is None:
        max_rounds = 3 * repeats if repeats >= QUARTILE_ROUNDS else repeats
    threads = torch.get_num_threads() if num_threads is None else num_threads
    for _ in range(warmup):
        fn()
        baseline()
    all_fn: list[float] = []
    all_base: list[float] = []
    times, base, ratios = [], [], []

    def one_round(i: int) -> None:
        order = ((baseline, all_base, base), (fn, all_fn, times))
        if i % 2 == 0:
            order = order[::-1]
        round_medians = {}
        for f, pool, per_round in order:
            blocks = timer_blocks(f, min_run_time=min_run_time, device=device,
                                  num_threads=threads)
            pool += blocks
            per_round.append(statistics.median(blocks))
            round_medians[id(pool)] = per_round[-1]
        ratios.append(round_medians[id(all_fn)] / round_medians[id(all_base)])

    start = _clock()
    for i in range(repeats):
        one_round(i)
    first = _clock() - start
    if max(ratios) > NOISY_SPREAD * min(ratios):     # the rounds disagree: more of them
        more = _clock()
        while len(ratios) < max_rounds and _clock() - more < min(first, EXTRA_SECONDS):
            one_round(len(ratios))
    on_cpu = device is None or torch.device(device).type == "cpu"
    hint = ("; or time on one thread: torch.set_num_threads(1) first"
            if on_cpu and threads > 1 else "")
    return TimingResult(statistics.median(all_fn), statistics.median(all_base), times, base,
                        ratios, hint)
