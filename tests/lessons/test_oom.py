"""Tests of memlab.oom, the helpers of notebook 05 (OOM clinic). Tiny jobs, fixed seeds."""
from __future__ import annotations

import math

import pytest
import torch
import torch.utils.benchmark

import memlab as ml
from memlab import oom

_TIMER = torch.utils.benchmark.Timer

SPEC = oom.JobSpec(hidden=32, heads=4, layers=2, seq=32, effective_batch=8, steps=3)
E = SPEC.effective_batch
PLAIN = oom.JobConfig(micro_batch=E)
AMP = oom.JobConfig(amp=True, micro_batch=E)
ALL3 = oom.JobConfig(amp=True, checkpoint=True, micro_batch=E // 2, accumulation_steps=2)


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def ref():
    return oom.reference(SPEC, "cpu")


@pytest.fixture(scope="module")
def budgets(ref):
    return oom.clinic_budgets(SPEC, "cpu", baseline_peak=ref.peak_bytes)


# ------------------------------------------------------------------------- the job
def test_sample_tokens_deterministic_and_shaped():
    x, y = oom.sample_tokens(SPEC, [0, 1, 2])
    assert x.shape == y.shape == (SPEC.seq, 3) and x.dtype == torch.int64
    x2, y2 = oom.sample_tokens(SPEC, [2, 0])
    assert torch.equal(x2[:, 0], x[:, 2]) and torch.equal(y2[:, 1], y[:, 0])
    assert torch.equal(x[1:], y[:-1]), "targets are the next token"
    assert not torch.equal(x[:, 0], x[:, 1])
    assert int(x.max()) < SPEC.vocab and int(x.min()) >= 0


@pytest.mark.parametrize("ckpt", [False, True])
def test_job_forward_matches_model(ckpt):
    model, _ = oom.build_job(SPEC)
    x, _ = oom.sample_tokens(SPEC, range(4))
    assert torch.allclose(oom.job_forward(model, x, ckpt), model(x), atol=1e-6)


def test_build_job_is_seeded_and_leaves_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a, _ = oom.build_job(SPEC)
    b, opt = oom.build_job(SPEC)
    assert torch.equal(torch.rand(1), before), "build_job must not consume the caller's RNG"
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert isinstance(opt, torch.optim.AdamW)


def test_reference_trains_and_counts_samples(ref):
    assert ref.fits and ref.peak_bytes > 0 and ref.backend == "cpu-tracker"
    assert ref.optimizer_steps == SPEC.steps
    assert ref.samples_per_step == [E] * SPEC.steps
    assert sorted(ref.sample_ids) == list(range(E * SPEC.steps))
    assert ref.eval_loss < ref.initial_eval_loss
    assert math.isclose(ref.initial_eval_loss, math.log(SPEC.vocab), rel_tol=0.05)


@pytest.mark.parametrize("config", [
    oom.JobConfig(checkpoint=True, micro_batch=E),
    oom.JobConfig(micro_batch=E // 2, accumulation_steps=2),
    oom.JobConfig(checkpoint=True, micro_batch=E // 4, accumulation_steps=4),
])
def test_checkpointing_and_accumulation_train_the_same(ref, config):
    r = oom.run_job(SPEC, config, measure=False)
    assert r.samples_per_step == [E] * SPEC.steps
    assert abs(r.eval_loss - ref.eval_loss) < 1e-4


def test_amp_close_to_reference(ref):
    r = oom.run_job(SPEC, AMP, measure=False)
    assert abs(r.eval_loss - ref.eval_loss) < 0.01 * ref.eval_loss


def test_lowered_batch_is_visible_in_the_counter(ref):
    r = oom.run_job(SPEC, oom.JobConfig(micro_batch=E // 2), measure=False)
    assert r.samples_per_step == [E // 2] * SPEC.steps
    assert len(r.sample_ids) == E // 2 * SPEC.steps


def test_peaks_fall_with_each_technique(ref):
    peaks = {c: oom.run_job(SPEC, c, steps=2, backend="cpu-tracker").peak_bytes
             for c in (AMP, oom.JobConfig(amp=True, checkpoint=True, micro_batch=E), ALL3)}
    assert ref.peak_bytes > peaks[AMP] > peaks[oom.JobConfig(amp=True, checkpoint=True, micro_batch=E)] > peaks[ALL3]


def test_run_job_validates():
    with pytest.raises(ValueError, match="larger than the effective batch"):
        oom.run_job(SPEC, oom.JobConfig(micro_batch=2 * E), steps=1)
    with pytest.raises(ValueError, match="positive int"):
        oom.run_job(SPEC, oom.JobConfig(micro_batch=0), steps=1)


def test_step_function_runs_the_same_step_as_run_job():
    """The timed callable is run_job's own step: same first loss, and each call trains on."""
    for config in (PLAIN, ALL3):
        step = oom.step_function(SPEC, config)
        first = step()
        assert first == pytest.approx(oom.run_job(SPEC, config, steps=1, measure=False).losses[0], rel=1e-5)
        assert step() < first, "a second call must train the model one more step"
    with pytest.raises(ValueError, match="larger than the effective batch"):
        oom.step_function(SPEC, oom.JobConfig(micro_batch=2 * E))


class _RecordingTimer:
    """torch.utils.benchmark.Timer, recording the threads it was given and its autoranges."""

    made: list = []

    def __init__(self, *args, **kwargs):
        self._timer = _TIMER(*args, **kwargs)
        _RecordingTimer.made.append({"num_threads": kwargs.get("num_threads"), "autoranges": 0})

    def blocked_autorange(self, *args, **kwargs):
        _RecordingTimer.made[-1]["autoranges"] += 1
        return self._timer.blocked_autorange(*args, **kwargs)


def test_time_per_step_is_torch_utils_benchmark_with_a_spread(monkeypatch):
    """05 times each variant against the plain job with torch.utils.benchmark.Timer
    (memlab.measure.timing.time_ratio): blocked_autorange in alternating rounds, the notebook's
    thread count, positive times, and a spread of per-round ratios around the ratio."""
    import torch.utils.benchmark as benchmark

    from memlab.measure.timing import TimingResult

    _RecordingTimer.made = []
    monkeypatch.setattr(benchmark, "Timer", _RecordingTimer)
    result = oom.time_per_step(SPEC, AMP, device="cpu", repeats=3, min_run_time=0.01)
    assert type(result) is TimingResult
    assert len(_RecordingTimer.made) == 2 * 3, "3 rounds of the config and the plain job"
    assert all(t["autoranges"] == 1 and t["num_threads"] == 1 for t in _RecordingTimer.made)
    assert result.median > 0 and result.baseline_median > 0
    assert len(result.round_ratios) == 3 and all(r > 0 for r in result.round_ratios)
    lo, hi = result.spread
    assert lo <= hi and lo == min(result.round_ratios) and hi == max(result.round_ratios)
    assert result.ratio == result.median / result.baseline_median


def test_a_slower_config_measures_slower():
    """One sequence per micro-batch with checkpointing (8 forwards, each block recomputed)
    against the whole batch at once: far more, smaller ops, measured slower than the plain job
    in every round; the same pair the other way round measures faster."""
    slow = oom.JobConfig(checkpoint=True, micro_batch=1, accumulation_steps=E)
    result = oom.time_per_step(SPEC, slow, device="cpu", repeats=3, min_run_time=0.01)
    assert result.ratio > 1.5 and result.spread[0] > 1.0, str(result)
    back = oom.time_per_step(SPEC, PLAIN, slow, device="cpu", repeats=3, min_run_time=0.01)
    assert back.ratio < 1 / 1.5 and back.spread[1] < 1.0, str(back)


# ------------------------------------------------------------------------- budgets
def test_budgets_order_and_verdicts(budgets, ref):
    assert budgets["roomy"] > ref.peak_bytes > budgets["loose"] > budgets["tight"] > 0
    assert oom.fits(SPEC, PLAIN, budgets["roomy"])
    assert not oom.fits(SPEC, PLAIN, budgets["loose"])
    assert oom.fits(SPEC, AMP, budgets["loose"])
    assert not oom.fits(SPEC, AMP, budgets["tight"])
    assert not oom.fits(SPEC, oom.JobConfig(amp=True, checkpoint=True, micro_batch=E), budgets["tight"])
    assert not oom.fits(SPEC, oom.JobConfig(amp=True, micro_batch=E // 2, accumulation_steps=2), budgets["tight"])
    assert oom.fits(SPEC, ALL3, budgets["tight"])


def test_oom_message_has_the_breakdown(budgets):
    r = oom.run_job(SPEC, PLAIN, budget_bytes=budgets["loose"], steps=2)
    assert not r.fits and r.peak_bytes is None and math.isnan(r.eval_loss)
    for word in ("budget", "parameters", "optimizer state", "activations and temporaries", "during"):
        assert word in r.oom_message


# -------------------------------------------------------------------------- checks
def test_check_job_accepts_the_right_configs(budgets, ref):
    assert oom.check_job(SPEC, AMP, budgets["loose"], ref.eval_loss,
                         unneeded=("checkpoint", "accumulation")) == []
    assert oom.check_job(SPEC, ALL3, budgets["tight"], ref.eval_loss) == []


def test_check_job_rejects(budgets, ref):
    out = oom.check_job(SPEC, PLAIN, budgets["loose"], ref.eval_loss)
    assert len(out) == 1 and "out of memory" in out[0]
    out = oom.check_job(SPEC, oom.JobConfig(amp=True, micro_batch=E // 2), budgets["loose"], ref.eval_loss)
    assert len(out) == 1 and "lowers the batch size" in out[0]
    out = oom.check_job(SPEC, ALL3, budgets["loose"], ref.eval_loss, unneeded=("checkpoint", "accumulation"))
    assert len(out) == 2 and "checkpoint" in out[0] and "accumulation" in out[1]
    out = oom.check_job(SPEC, AMP, budgets["loose"], ref.eval_loss + 1.0)
    assert len(out) == 1 and "away from the reference" in out[0]


def test_check_config_types():
    class Sneaky(int):
        def __eq__(self, other):
            return True
        __hash__ = int.__hash__

    assert oom.check_config_types(AMP) == []
    assert "JobConfig" in oom.check_config_types((True, False, 8, 1))[0]
    assert "micro_batch" in oom.check_config_types(oom.JobConfig(micro_batch=Sneaky(8)))[0]
    assert "amp" in oom.check_config_types(oom.JobConfig(amp=1, micro_batch=8))[0]
    assert oom.check_job(SPEC, oom.JobConfig(micro_batch=Sneaky(8)), 10**9, 1.0)


# ------------------------------------------------------------------------ reporting
def test_results_table_and_plot(ref):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.container import ErrorbarContainer

    rows = [dict(variant="plain", peak=ref.peak_bytes, fits=False, seconds=0.1, time_ratio=1.0,
                 time_spread=None, loss=ref.eval_loss, reference_loss=ref.eval_loss),
            dict(variant="amp", peak=ref.peak_bytes // 2, fits=True, seconds=0.12, time_ratio=1.2,
                 time_spread=(1.05, 1.31), loss=ref.eval_loss, reference_loss=ref.eval_loss)]
    text = oom.results_table(rows)
    assert "plain" in text and "MiB" in text and "1.20x (1.05-1.31)" in text
    assert " 120.0 " in text, "seconds are shown as milliseconds per effective batch"
    ax = oom.plot_results(rows, {"loose": ref.peak_bytes * 3 // 4})
    assert len(ax) == 2
    bars = [c for c in ax[1].containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 1, "the time chart shows the spread as error bars"
    (ranges,) = bars[0].lines[2]        # one horizontal segment per bar: (lo, y) -> (hi, y)
    spans = [(round(float(a[0]), 2), round(float(b[0]), 2)) for a, b in ranges.get_segments()]
    assert spans == [(1.0, 1.0), (1.05, 1.31)], spans
    plt.close("all")


# ----------------------------------------------------------------------------- CUDA
@pytest.mark.gpu
def test_cuda_real_oom_and_same_verdicts():
    dev = torch.device("cuda")
    assert oom.amp_dtype(dev) in (torch.bfloat16, torch.float16)
    ref = oom.reference(SPEC, dev)
    b = oom.clinic_budgets(SPEC, dev, baseline_peak=ref.peak_bytes)
    # the allocator refuses for real
    r = oom.run_job(SPEC, PLAIN, budget_bytes=b["loose"], device=dev, steps=2, backend="auto")
    assert not r.fits and "budget" in r.oom_message
    # exact tensor counts: the same verdicts as on the CPU
    assert oom.fits(SPEC, AMP, b["loose"], device=dev)
    assert oom.fits(SPEC, ALL3, b["tight"], device=dev)
    assert not oom.fits(SPEC, oom.JobConfig(amp=True, checkpoint=True, micro_batch=E), b["tight"], device=dev)
    assert oom.check_job(SPEC, ALL3, b["tight"], ref.eval_loss, device=dev) == []


@pytest.mark.gpu
def test_cuda_job_forward_and_accumulation_match():
    dev = torch.device("cuda")
    model, _ = oom.build_job(SPEC, dev)
    x, _ = oom.sample_tokens(SPEC, range(4), dev)
    assert torch.allclose(oom.job_forward(model, x, True), model(x), atol=1e-5)
    a = oom.run_job(SPEC, PLAIN, device=dev, measure=False)
    b = oom.run_job(SPEC, oom.JobConfig(checkpoint=True, micro_batch=E // 2, accumulation_steps=2),
                    device=dev, measure=False)
    assert b.samples_per_step == [E] * SPEC.steps
    assert abs(a.eval_loss - b.eval_loss) < 1e-3
    assert ml.get_device(dev).type == "cuda"


@pytest.mark.parametrize("capability, dtype", [((7, 5), torch.float16), ((7, 0), torch.float16),
                                               ((8, 0), torch.bfloat16), ((9, 0), torch.bfloat16)])
def test_amp_dtype_asks_for_native_bf16(monkeypatch, capability, dtype):
    """A T4 (7.5) or V100 (7.0) only emulates bf16, although torch.cuda.is_bf16_supported()
    says True there by default (including_emulation=True): fp16 on them, bf16 from Ampere on."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert oom.amp_dtype(torch.device("cuda")) == dtype
