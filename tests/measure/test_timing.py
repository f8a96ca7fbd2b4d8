"""memlab.measure.timing and 09's step_times: the robust spread, the extra rounds, the warning.

No wall-clock asserts: ``timer_blocks`` is replaced by scripted per-call block times, the
budget clock by a fake one that advances by the scripted block times, and 09's per-token clock
by scripted token times.
"""
from __future__ import annotations

import pytest
import torch

import memlab as ml
from memlab.lessons import serving
from memlab.measure import timing


def _result(ratios):
    return timing.TimingResult(1.0, 1.0, [], [], list(ratios))


# --------------------------------------------------------------------------- the spread
def test_one_outlying_round_does_not_move_the_spread():
    clean = [1.30, 1.32, 1.34, 1.33, 1.31, 1.35, 1.29]
    spiked = clean[:-1] + [73.16]             # one round hit by another program
    assert _result(spiked).spread == pytest.approx(_result(clean[:-1] + [1.36]).spread)
    lo, hi = _result(spiked).spread
    assert 1.29 <= lo <= hi <= 1.36
    assert _result(spiked).full_range == (1.30, 73.16)   # still there for whoever asks
    assert not _result(spiked).noisy and _result(spiked).warning == ""


def test_spread_is_the_interquartile_range_from_five_rounds_on():
    assert _result([5, 1, 4, 2, 3]).spread == (2, 4)          # 2nd and 4th of 5
    assert _result([1, 2, 3, 4, 5, 6, 7, 8, 9]).spread == (3, 7)
    assert _result([1, 2, 3, 4]).spread == (1, 4)             # too few: the full range
    assert _result([2.0]).spread == (2.0, 2.0)
    assert _result([]).spread == (1.0, 1.0)                   # the ratio itself


def test_a_bimodal_measurement_warns_and_a_clean_one_does_not():
    bimodal = [1.0, 2.4, 1.1, 2.5, 0.9, 2.3, 1.0, 2.6, 1.05, 2.45]  # every other round slowed
    r = _result(bimodal)
    assert r.noisy
    assert r.warning.startswith("warning: timings too noisy to conclude on this machine")
    assert "close other programs" in r.warning and "\n" not in r.warning
    lines = str(r).splitlines()
    assert len(lines) == 2 and lines[1] == r.warning and "10 rounds" in lines[0]
    clean = _result([1.61, 1.58, 1.66, 1.63, 1.60])
    assert not clean.noisy and clean.warning == "" and "\n" not in str(clean)
    assert str(clean) == "1.00x (middle half of 5 rounds 1.60-1.63x)"


def test_noisy_is_judged_on_the_spread_against_NOISY_SPREAD():
    just = _result([1.0, 1.0, 1.0, timing.NOISY_SPREAD, timing.NOISY_SPREAD])
    assert just.spread == (1.0, timing.NOISY_SPREAD) and not just.noisy
    wider = _result([1.0, 1.0, 1.0, 1.01 * timing.NOISY_SPREAD, 2.0])
    assert wider.noisy


def test_the_warning_names_the_thread_hint():
    r = timing.TimingResult(1.0, 1.0, [], [], [1, 3, 1, 3, 1, 3], "; try one thread")
    assert r.warning.endswith("run the cell again; try one thread")


# --------------------------------------------------------------------------- time_ratio
class _Script:
    """Stands in for timer_blocks: per-call block times (milliseconds) by function, round after
    round, 3 blocks a round; the fake clock advances by the time of every block handed out."""

    def __init__(self, fn_rounds, base_rounds):
        self.rounds = {"fn": [1e-3 * t for t in fn_rounds], "base": [1e-3 * t for t in base_rounds]}
        self.calls: list[tuple[str, int | None]] = []
        self.now = 0.0

    def clock(self):
        return self.now

    def blocks(self, f, *, min_run_time, device=None, num_threads=None):
        name = f.__name__
        self.calls.append((name, num_threads))
        per_call = self.rounds[name].pop(0)
        self.now += 3 * per_call
        return [per_call] * 3


def fn():
    pass


def base():
    pass


@pytest.fixture
def script(monkeypatch):
    def make(fn_rounds, base_rounds):
        s = _Script(fn_rounds, base_rounds)
        monkeypatch.setattr(timing, "timer_blocks", s.blocks)
        monkeypatch.setattr(timing, "_clock", s.clock)
        return s
    return make


def test_agreeing_rounds_take_exactly_repeats_rounds(script):
    s = script([2.0, 2.1, 2.0, 1.9, 2.0] + [9.0] * 10, [1.0] * 15)
    r = timing.time_ratio(fn, base, repeats=5, warmup=0)
    assert len(r.round_ratios) == len(r.times) == len(r.baseline_times) == 5
    assert r.ratio == pytest.approx(2.0) and not r.noisy
    # alternating order: fn first in even rounds, the baseline first in odd ones
    assert [name for name, _ in s.calls][:4] == ["fn", "base", "base", "fn"]


def test_disagreeing_rounds_buy_more_rounds_and_the_outlier_drops_out(script):
    # round 2 hit by another program (9 / 1): its full range is far wider than NOISY_SPREAD;
    # the extra rounds are quick (0.2 / 0.1 ms), so the budget allows all ten
    s = script([2.0, 2.1, 9.0, 1.9, 2.0] + [0.2] * 10, [1.0] * 5 + [0.1] * 10)
    r = timing.time_ratio(fn, base, repeats=5, warmup=0)
    assert len(r.round_ratios) == 15 == 3 * 5          # max_rounds: 3 x repeats
    assert r.spread == pytest.approx((2.0, 2.0)) and not r.noisy
    assert len(s.calls) == 2 * 15


def test_extra_rounds_stop_when_they_took_as_long_as_the_first(script):
    # after round 5 every round is 5 times slower: the budget (as long again) buys one more
    s = script([2.0, 2.0, 9.0, 2.0, 2.0] + [10.0] * 10, [1.0] * 5 + [5.0] * 10)
    r = timing.time_ratio(fn, base, repeats=5, warmup=0)
    assert 5 < len(r.round_ratios) < 15
    assert s.now > 0


def test_extra_rounds_stop_at_EXTRA_SECONDS(script, monkeypatch):
    monkeypatch.setattr(timing, "EXTRA_SECONDS", 0.005)   # 5 ms: one extra round of 9 ms
    script([2.0, 2.0, 9.0, 2.0, 2.0] + [2.0] * 10, [1.0] * 15)
    assert len(timing.time_ratio(fn, base, repeats=5, warmup=0).round_ratios) == 6


def test_max_rounds_and_few_repeats_keep_the_count_exact(script):
    script([2.0, 9.0, 2.0, 9.0, 2.0], [1.0] * 5)
    assert len(timing.time_ratio(fn, base, repeats=5, warmup=0, max_rounds=5).round_ratios) == 5
    script([2.0, 9.0, 2.0], [1.0] * 3)
    r = timing.time_ratio(fn, base, repeats=3, warmup=0)    # fewer than 5: exactly 3
    assert len(r.round_ratios) == 3 and r.spread == pytest.approx((2.0, 9.0)) and r.noisy


def test_a_noisy_measurement_that_stays_noisy_warns(script):
    script([1.0, 3.0] * 8, [1.0] * 16)
    r = timing.time_ratio(fn, base, repeats=5, warmup=0)
    assert 5 < len(r.round_ratios) < 15 and r.noisy and "too noisy" in str(r)


def test_threads_are_passed_to_every_block_and_hinted_on_the_cpu(script):
    s = script([1.0, 3.0] * 8, [1.0] * 16)
    r = timing.time_ratio(fn, base, repeats=5, warmup=0, num_threads=2, device="cpu")
    assert {t for _, t in s.calls} == {2}
    assert "torch.set_num_threads(1)" in r.warning
    script([1.0, 3.0] * 8, [1.0] * 16)
    r = timing.time_ratio(fn, base, repeats=5, warmup=0, num_threads=1, device="cpu")
    assert r.noisy and "set_num_threads" not in r.warning
    s = script([2.0] * 5, [1.0] * 5)
    timing.time_ratio(fn, base, repeats=5, warmup=0)
    assert {t for _, t in s.calls} == {torch.get_num_threads()}


def test_timer_blocks_passes_num_threads_to_the_timer(monkeypatch):
    made = []
    real = timing.benchmark.Timer

    def recording(*args, **kwargs):
        made.append(kwargs["num_threads"])
        return real(*args, **kwargs)

    monkeypatch.setattr(timing.benchmark, "Timer", recording)
    timing.timer_blocks(lambda: None, min_run_time=0.001, num_threads=1)
    timing.timer_blocks(lambda: None, min_run_time=0.001)
    assert made == [1, torch.get_num_threads()]


# --------------------------------------------------------------------------- 09's step_times
def _scripted_step_times(monkeypatch, runs, **kwargs):
    """step_times with timed_call replaced: token i of generation r takes runs[r][i] seconds."""
    flat = [t for run in runs for t in run]
    monkeypatch.setattr(serving, "timed_call", lambda one, device=None: (one(), flat.pop(0))[1])
    torch.manual_seed(0)
    gpt = ml.models.TinyGPT(vocab=32, hidden=16, heads=2, layers=1, max_seq=64).eval()
    out = serving.step_times(gpt, torch.zeros(4, 1, dtype=torch.long), len(runs[0]), **kwargs)
    assert not flat, "one timed call per token per generation"
    return out


def test_step_times_spikes_do_not_show_and_the_trend_does(monkeypatch):
    n = 30
    trend = [5.0] + [1.0 + 0.1 * i for i in range(1, n)]          # prefill, then O(t)
    runs = [list(trend) for _ in range(3)]
    runs[0][10] = runs[1][20] = runs[2][27] = runs[0][1] = 50.0   # one-off spikes
    out = _scripted_step_times(monkeypatch, runs)
    assert len(out) == n and out[0] == 5.0
    assert out[1:] == pytest.approx(trend[1:])                     # the straight line, exactly
    runs[1][11] = runs[1][12] = runs[2][13] = 40.0                 # and a burst
    out = _scripted_step_times(monkeypatch, runs)
    assert max(abs(a - b) for a, b in zip(out[1:], trend[1:])) <= 0.1 + 1e-9   # one token off


def test_step_times_single_shot_keeps_the_old_behaviour(monkeypatch):
    runs = [[3.0, 1.0, 9.0, 1.0]]
    assert _scripted_step_times(monkeypatch, runs, repeats=1, window=1) == runs[0]
    with pytest.raises(ValueError):
        serving.step_times(None, None, 3, repeats=0)
