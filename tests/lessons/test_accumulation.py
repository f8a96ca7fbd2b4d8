"""memlab.accumulation: references, spies and measurements of 04_accumulation (tiny configs, fixed seeds)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import memlab as ml
from memlab.lessons import accumulation as acc
from memlab.measure.models import MLPStack, TinyGPT


def _classifier(features=8, hidden=16, depth=1, classes=4, seed=0, device="cpu"):
    return acc.classifier(features, hidden, depth, classes, seed=seed, device=device)


def _accumulate(model, loss_fn, inputs, targets, micro):
    """A correct accumulation (the tests' own reference, not shipped in the package)."""
    n = inputs.shape[0]
    for x, y in zip(inputs.split(micro), targets.split(micro)):
        (loss_fn(model(x), y) * (x.shape[0] / n)).backward()


def _train(model, optimizer, scheduler, batches, k, *, scaler=None, max_norm=None, amp_dtype=None,
           bug=None):
    """A correct loop, or one with a named ``bug``."""
    device_type = "cuda" if bug == "autocast_cuda" else next(model.parameters()).device.type
    for start in range(0, len(batches), k):
        group = batches[start:start + k]
        if bug == "no_last_step" and len(group) < k:
            break
        n_items = sum(x.shape[0] for x, _ in group)
        if bug != "zero_inside":
            optimizer.zero_grad()
        for x, y in group:
            if bug == "zero_inside":
                optimizer.zero_grad()
            with torch.autocast(device_type, dtype=amp_dtype, enabled=amp_dtype is not None):
                loss = F.cross_entropy(model(x), y) * (x.shape[0] / n_items)
            if scaler is not None and not (bug == "scale_first_only" and x is not group[0][0]):
                scaler.scale(loss).backward()
            else:
                loss.backward()
            if bug == "sched_per_micro":
                scheduler.step()
            if bug == "step_per_micro":
                optimizer.step()
        if scaler is not None and bug != "no_unscale":
            scaler.unscale_(optimizer)
        if max_norm is not None and bug != "no_clip":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if scaler is not None and bug != "direct_step":
            scaler.step(optimizer)
        elif bug != "step_per_micro":
            optimizer.step()
        if scaler is not None:
            scaler.update()
        if bug not in ("sched_per_micro",):
            scheduler.step()


def _setup(sizes, seed=0, device="cpu", lr=0.5):
    model = _classifier(seed=seed, device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5 ** s)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), 8, generator=g).to(device)
    y = torch.randint(0, 4, (sum(sizes),), generator=g).to(device)
    return model, optimizer, scheduler, list(zip(x.split(sizes), y.split(sizes)))


# ------------------------------------------------------------------------ arithmetic
def test_micro_batch_and_group_sizes():
    assert acc.micro_batch_sizes(10, 4) == [4, 4, 2]
    assert acc.micro_batch_sizes(12, 4) == [4, 4, 4]
    assert acc.micro_batch_sizes(3, 8) == [3]
    assert acc.micro_batch_sizes(0, 8) == []
    assert acc.group_sizes(10, 4) == [4, 4, 2]
    with pytest.raises(ValueError):
        acc.micro_batch_sizes(10, 0)


# ------------------------------------------------------------------------ references
def test_full_batch_gradients_match_backward_and_leave_grad_alone():
    model = _classifier()
    x, y = acc.toy_classification(20, 8, 4, seed=1)
    ref = acc.full_batch_gradients(model, F.cross_entropy, x, y)
    assert all(p.grad is None for p in model.parameters()), "p.grad must not be touched"
    F.cross_entropy(model(x), y).backward()
    got = acc.current_gradients(model)
    assert set(got) == set(ref) == {n for n, _ in model.named_parameters()}
    assert acc.max_abs_diff(got, ref) == 0.0


def test_weighted_accumulation_is_exact_and_divide_by_k_is_not():
    model = _classifier(depth=2)
    x, y = acc.toy_classification(50, 8, 4, seed=2)             # 50 = 16 + 16 + 16 + 2
    ref = acc.full_batch_gradients(model, F.cross_entropy, x, y)
    _accumulate(model, F.cross_entropy, x, y, 16)
    assert acc.max_abs_diff(acc.current_gradients(model), ref) < 1e-6
    model.zero_grad(set_to_none=True)
    chunks = list(zip(x.split(16), y.split(16)))
    for xb, yb in chunks:
        (F.cross_entropy(model(xb), yb) / len(chunks)).backward()
    assert acc.max_abs_diff(acc.current_gradients(model), ref) > 1e-3


def test_max_abs_diff_values_and_key_check():
    a = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.5])}
    b = {"w": torch.tensor([1.0, 2.5]), "b": torch.tensor([0.25])}
    assert acc.max_abs_diff(a, b) == 0.5
    assert acc.max_abs_diff(a, a) == 0.0
    with pytest.raises(ValueError, match="different parameters"):
        acc.max_abs_diff(a, {"w": a["w"]})


def test_current_gradients_zero_for_missing_grad():
    model = _classifier()
    grads = acc.current_gradients(model)
    assert all(float(g.abs().sum()) == 0.0 for g in grads.values())


# ---------------------------------------------------------------------------- models
def test_classifier_is_seeded_and_shaped():
    a, b = acc.classifier(5, 8, 2, 3, seed=4), acc.classifier(5, 8, 2, 3, seed=4)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert a(torch.randn(7, 5)).shape == (7, 3)
    assert len(a[1].blocks) == 2
    # 5*8+8 + 2 * (8*32+32 + 32*8+8) + 8*3+3
    assert sum(p.numel() for p in a.parameters()) == 48 + 2 * 552 + 27


@pytest.mark.parametrize("norm, kind", [("BatchNorm1d", nn.BatchNorm1d), ("LayerNorm", nn.LayerNorm),
                                        ("GroupNorm", nn.GroupNorm)])
def test_normed_classifier_puts_the_norm_second(norm, kind):
    model = acc.normed_classifier(norm, 6, 16, 3, seed=1)
    assert isinstance(model[1], kind)
    assert model(torch.randn(4, 6)).shape == (4, 3)
    with pytest.raises(ValueError, match="norm must be one of"):
        acc.normed_classifier("InstanceNorm", 6, 16, 3)


def test_batchnorm_breaks_exactness_and_layernorm_does_not():
    x, y = acc.toy_classification(64, 6, 3, seed=5)
    diffs = {}
    for norm in acc.NORMS:
        full, accum = (acc.normed_classifier(norm, 6, 16, 3, seed=2) for _ in range(2))
        ref = acc.full_batch_gradients(full, F.cross_entropy, x, y)
        _accumulate(accum, F.cross_entropy, x, y, 8)
        diffs[norm] = acc.max_abs_diff(acc.current_gradients(accum), ref)
    assert diffs["BatchNorm1d"] > 1e-3
    assert diffs["LayerNorm"] < 1e-6 and diffs["GroupNorm"] < 1e-6


# ------------------------------------------------------------------------------ data
def test_toy_classification_is_deterministic_and_shaped():
    x1, y1 = acc.toy_classification(30, 5, 3, seed=7)
    x2, y2 = acc.toy_classification(30, 5, 3, seed=7)
    assert x1.shape == (30, 5) and y1.shape == (30,) and y1.dtype == torch.int64
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert int(y1.min()) >= 0 and int(y1.max()) < 3


def test_padded_lm_batch_pads_after_each_length():
    tok, tgt = acc.padded_lm_batch(vocab=17, seq_len=9, batch=6, min_len=2, seed=3, ignore_index=-1)
    assert tok.shape == tgt.shape == (9, 6)
    real = tgt != -1
    lengths = real.sum(dim=0)
    assert int(lengths.min()) >= 2 and int(lengths.max()) <= 9
    for j in range(6):  # real tokens first, then only padding
        n = int(lengths[j])
        assert bool(real[:n, j].all()) and not bool(real[n:, j].any())
        assert bool((tok[n:, j] == 0).all())
    assert int(tgt[real].max()) < 17 and int(tok.max()) < 17
    tok2, tgt2 = acc.padded_lm_batch(vocab=17, seq_len=9, batch=6, min_len=2, seed=3, ignore_index=-1)
    assert torch.equal(tgt, tgt2) and torch.equal(tok, tok2)


def test_lm_loss_averages_over_real_tokens_only():
    torch.manual_seed(0)
    logits = torch.randn(4, 3, 11)
    tgt = torch.randint(0, 11, (4, 3))
    tgt[2:, 1] = -100
    per_token = F.cross_entropy(logits.reshape(12, 11), tgt.reshape(12), reduction="none", ignore_index=-100)
    n_real = int((tgt != -100).sum())
    assert n_real == 10
    assert torch.allclose(acc.lm_loss(logits, tgt), per_token.sum() / n_real)
    assert torch.allclose(acc.lm_loss(logits, tgt, reduction="sum"), per_token.sum())


def test_token_weighting_is_exact_for_tinygpt():
    torch.manual_seed(0)
    lm = TinyGPT(vocab=19, hidden=16, heads=2, layers=1, max_seq=10)
    tok, tgt = acc.padded_lm_batch(19, 10, 7, seed=4)
    ref = acc.full_batch_gradients(lm, acc.lm_loss, tok, tgt)
    total = int((tgt != -100).sum())
    for x, y in zip(tok.split(3, dim=1), tgt.split(3, dim=1)):
        (acc.lm_loss(lm(x), y, reduction="sum") / total).backward()
    assert acc.max_abs_diff(acc.current_gradients(lm), ref) < 1e-6


# -------------------------------------------------------------------------------- spy
def test_spy_trace_of_a_correct_loop_has_no_problems():
    sizes = [5, 5, 5, 5, 5, 3]
    model, optimizer, scheduler, batches = _setup(sizes)
    with acc.TrainingSpy(model, optimizer, scheduler) as spy:
        _train(model, optimizer, scheduler, batches, 4)
    assert spy.trace() == "Z F5 B F5 B F5 B F5 B S L Z F5 B F3 B S L"
    assert spy.forward_sizes() == sizes
    assert spy.count("step") == 2 and spy.count("scheduler") == 2 and spy.count("backward") == 6
    assert [e.lr for e in spy.step_events()] == [0.5, 0.25]
    assert acc.check_accumulation(spy, sizes, 4) == []


def test_spy_removes_its_hooks_and_patches():
    sizes = [4, 4, 2]
    model, optimizer, scheduler, batches = _setup(sizes)
    scaler = torch.amp.GradScaler("cpu")
    with acc.TrainingSpy(model, optimizer, scheduler, scaler) as spy:
        _train(model, optimizer, scheduler, batches, 2, scaler=scaler, max_norm=1.0,
               amp_dtype=torch.bfloat16)
    n_events = len(spy.events)
    for obj, names in ((optimizer, ["zero_grad"]), (scheduler, ["step"]),
                       (scaler, ["scale", "unscale_", "step", "update"])):
        for name in names:
            assert name not in vars(obj), f"{type(obj).__name__}.{name} still patched"
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert not optimizer._optimizer_step_pre_hooks
    _train(model, optimizer, scheduler, batches, 2)   # runs, and nothing is recorded any more
    assert len(spy.events) == n_events


def test_spy_ignores_forwards_without_grad():
    model = _classifier()
    x, _ = acc.toy_classification(6, 8, 4)
    with acc.TrainingSpy(model) as spy:
        with torch.no_grad():
            model(x)
        model(x[:2]).sum().backward()
    assert spy.trace() == "F2 B"


def test_amp_loop_trace_and_no_problems():
    sizes = [6, 6, 6, 6, 6]
    model, optimizer, scheduler, batches = _setup(sizes)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
    with acc.TrainingSpy(model, optimizer, scheduler, scaler) as spy:
        _train(model, optimizer, scheduler, batches, 3, scaler=scaler, max_norm=0.1,
               amp_dtype=torch.float16)
    assert spy.trace() == ("Z F6 sc B F6 sc B F6 sc B un [ S ] up L "
                           "Z F6 sc B F6 sc B un [ S ] up L")
    assert acc.check_accumulation(spy, sizes, 3, scaler=True, max_norm=0.1) == []
    assert all(e.grad_norm <= 0.1 * (1 + 1e-3) for e in spy.step_events())


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
@pytest.mark.parametrize("bug, kwargs, expected", [
    ("sched_per_micro", {}, "scheduler.step() ran 5 times for 2 optimizer steps"),
    ("zero_inside", {}, "zero_grad() ran inside an accumulation window"),
    ("step_per_micro", {}, "optimizer.step() ran 5 times, expected 2"),
    ("no_last_step", {}, "the model saw batch sizes [5, 5, 5]"),
    ("no_clip", {"max_norm": 1e-3}, "clip with torch.nn.utils.clip_grad_norm_"),
])
def test_check_accumulation_names_each_bug(bug, kwargs, expected):
    sizes = [5, 5, 5, 5, 4]
    model, optimizer, scheduler, batches = _setup(sizes)
    with acc.TrainingSpy(model, optimizer, scheduler) as spy:
        _train(model, optimizer, scheduler, batches, 3, bug=bug, **kwargs)
    problems = acc.check_accumulation(spy, sizes, 3, **kwargs)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("bug, expected", [
    ("no_unscale", "scaler.unscale_(optimizer) ran 0 times"),
    ("direct_step", "optimizer.step() was called directly"),
    ("scale_first_only", "scaler.scale() ran 2 times for 4 micro-batches"),
])
def test_check_accumulation_names_each_scaler_bug(bug, expected):
    sizes = [4, 4, 4, 3]
    model, optimizer, scheduler, batches = _setup(sizes)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4)
    with acc.TrainingSpy(model, optimizer, scheduler, scaler) as spy:
        _train(model, optimizer, scheduler, batches, 2, scaler=scaler, max_norm=100.0,
               amp_dtype=torch.float16, bug=bug)
    problems = acc.check_accumulation(spy, sizes, 2, scaler=True, max_norm=100.0)
    assert any(expected in p for p in problems), problems


def test_unscale_inside_the_window_is_named():
    sizes = [4, 4]
    model, optimizer, scheduler, batches = _setup(sizes)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4)
    with acc.TrainingSpy(model, optimizer, scheduler, scaler) as spy:
        optimizer.zero_grad()
        for x, y in batches:
            scaler.scale(F.cross_entropy(model(x), y) / 2).backward()
            if x is batches[0][0]:
                scaler.unscale_(optimizer)      # too early: the second micro-batch is still scaled
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
    problems = acc.check_accumulation(spy, sizes, 2, scaler=True)
    assert any("unscale_(optimizer) ran outside its place" in p for p in problems), problems


def test_check_micro_batches_full_batch_and_one_backward():
    model = _classifier()
    x, y = acc.toy_classification(12, 8, 4)
    with acc.TrainingSpy(model) as spy:          # the whole batch at once
        F.cross_entropy(model(x), y).backward()
    assert "the model saw batch sizes [12], expected [4, 4, 4]" in acc.check_micro_batches(spy, [4, 4, 4])[0]
    with acc.TrainingSpy(model) as spy:          # k forwards, one backward
        sum(F.cross_entropy(model(xb), yb) for xb, yb in zip(x.split(4), y.split(4))).backward()
    assert spy.trace() == "F4 F4 F4 B B B"
    assert "after the next micro-batch's forward" in acc.check_micro_batches(spy, [4, 4, 4])[0]
    with acc.TrainingSpy(model) as spy:          # correct
        _accumulate(model, F.cross_entropy, x, y, 4)
    assert acc.check_micro_batches(spy, [4, 4, 4]) == []


# ------------------------------------------------------------------------ measuring
def test_peak_increase_counts_exact_bytes_and_preallocates_grads():
    model = _classifier()
    peak = acc.peak_increase(lambda: torch.zeros(1024, 256), model)   # 1 MiB of fp32
    assert peak == 1024 * 256 * 4
    assert all(p.grad is not None for p in model.parameters())


def test_peak_falls_with_k_and_one_backward_saves_nothing():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), MLPStack(32, 2), nn.Linear(32, 4))
    x, y = acc.toy_classification(128, 16, 4, seed=1)
    full = acc.peak_increase(lambda: F.cross_entropy(model(x), y).backward(), model)
    k4 = acc.peak_increase(lambda: _accumulate(model, F.cross_entropy, x, y, 32), model)

    def one_backward():
        sum(F.cross_entropy(model(xb), yb) * 0.25 for xb, yb in zip(x.split(32), y.split(32))).backward()

    concat = acc.peak_increase(one_backward, model)
    assert 0.25 <= k4 / full <= 0.40, k4 / full
    assert concat / full >= 0.85, concat / full


def test_timing_is_torch_utils_benchmark_with_a_spread():
    """04 section 4 times one effective batch at k micro-batches against k = 1 with
    memlab.measure.timing (torch.utils.benchmark.Timer), not a hand-written loop."""
    from memlab.measure import timing
    assert acc.time_ratio is timing.time_ratio and acc.median_time is timing.median_time
    assert not hasattr(acc, "time_per_call")
    model = _classifier()
    x, y = acc.toy_classification(64, 8, 4, seed=1)
    result = acc.time_ratio(lambda: _accumulate(model, F.cross_entropy, x, y, 8),
                            lambda: _accumulate(model, F.cross_entropy, x, y, 64),
                            repeats=3, min_run_time=0.01)
    lo, hi = result.spread
    assert len(result.round_ratios) == 3 and lo <= hi and result.ratio > 0
    assert result.median > 0 and result.baseline_median > 0
    assert "rounds" in str(result)


def test_skip_until_written_swallows_only_not_implemented(capsys):
    with acc.skip_until_written("accumulate_gradients"):
        raise NotImplementedError()
    assert "accumulate_gradients is not written yet" in capsys.readouterr().out
    with pytest.raises(ValueError):
        with acc.skip_until_written("x"):
            raise ValueError("a real error must surface")


# ------------------------------------------------------------------------------ CUDA
@pytest.mark.gpu
def test_cuda_amp_loop_and_peak_ratio():
    device = torch.device("cuda")
    sizes = [6, 6, 6, 6, 5]
    model, optimizer, scheduler, batches = _setup(sizes, device=device)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0 ** 8)
    with acc.TrainingSpy(model, optimizer, scheduler, scaler) as spy:
        _train(model, optimizer, scheduler, batches, 2, scaler=scaler, max_norm=0.5,
               amp_dtype=torch.float16)
    assert acc.check_accumulation(spy, sizes, 2, scaler=True, max_norm=0.5) == []

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), MLPStack(64, 3), nn.Linear(64, 10)).to(device)
    x, y = acc.toy_classification(512, 32, 10, seed=1, device=device)
    F.cross_entropy(model(x), y).backward()          # warm-up: cuBLAS workspace
    full = acc.peak_increase(lambda: F.cross_entropy(model(x), y).backward(), model, device=device)
    k4 = acc.peak_increase(lambda: _accumulate(model, F.cross_entropy, x, y, 128), model, device=device)
    assert full > 0 and k4 / full <= 0.45, (ml.fmt_bytes(full), k4 / full)
    assert acc.median_time(lambda: model(x), repeats=2, device=device) > 0


# ------------------------------------------------------------ issue 14: causes named
def test_check_accumulation_sees_the_precision_autocast_really_ran():
    for amp_dtype in (torch.bfloat16, None):
        model, optimizer, scheduler, batches = _setup([5, 3, 4], seed=3)
        with acc.TrainingSpy(model, optimizer, scheduler) as spy:
            _train(model, optimizer, scheduler, batches, 2, amp_dtype=amp_dtype)
        assert acc.check_accumulation(spy, [5, 3, 4], 2, amp_dtype=amp_dtype) == []
    # asked for fp16, ran bf16 (a fixed dtype); asked for none, ran bf16 (dtype=None autocast)
    model, optimizer, scheduler, batches = _setup([5, 3, 4], seed=3)
    with acc.TrainingSpy(model, optimizer, scheduler) as spy:
        _train(model, optimizer, scheduler, batches, 2, amp_dtype=torch.bfloat16)
    fp16 = acc.check_accumulation(spy, [5, 3, 4], 2, amp_dtype=torch.float16)
    none = acc.check_accumulation(spy, [5, 3, 4], 2, amp_dtype=None)
    assert len(fp16) == 1 and "torch.bfloat16" in fp16[0] and "'cuda'" in fp16[0]
    assert len(none) == 1 and "None means no autocast" in none[0]
    # not asked: not checked (the visible test of 04 does not pass amp_dtype)
    assert acc.check_accumulation(spy, [5, 3, 4], 2) == []


def _hard_coded_cuda_loop(device="cpu"):
    """A loop whose autocast is hard-coded to "cuda", on a model on ``device``, watched and run
    as 04's graded tests run it (graded_call: a warning fails)."""
    sizes = [5, 3, 4]
    model, optimizer, scheduler, batches = _setup(sizes, seed=5, device=device)
    with acc.TrainingSpy(model, optimizer, scheduler) as spy:
        acc.graded_call(_train, model, optimizer, scheduler, batches, 2, amp_dtype=torch.float16,
                        bug="autocast_cuda", what="hard-coded cuda")
    return acc.check_accumulation(spy, sizes, 2, amp_dtype=torch.float16)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only grader's path")
def test_autocast_hard_coded_to_cuda_fails_on_a_cpu_grader_with_a_hint():
    with pytest.raises(AssertionError, match="hard-coded to 'cuda'"):
        _hard_coded_cuda_loop()


def test_autocast_hard_coded_to_cuda_fails_on_a_cuda_grader_through_the_cpu_case(monkeypatch):
    """On a machine with CUDA, torch.autocast("cuda", ...) raises no warning, and a model on the
    CUDA device really runs fp16: only a case whose model is on the CPU shows the mistake, and
    only through the precision the model ran at. Simulated here: torch.autocast asks
    torch.cuda.amp.common.amp_definitely_not_available() whether to disable itself; answering
    False is what a CUDA machine answers (the gpu test below runs it for real)."""
    import torch.cuda.amp.common as amp_common
    monkeypatch.setattr(amp_common, "amp_definitely_not_available", lambda: False)
    problems = _hard_coded_cuda_loop()          # no warning: graded_call lets it through
    assert len(problems) == 1, problems
    assert "hard-coded to 'cuda'" in problems[0] and "torch.float32" in problems[0], problems


@pytest.mark.gpu
def test_autocast_hard_coded_to_cuda_is_caught_only_by_the_cpu_case_on_cuda():
    assert _hard_coded_cuda_loop(device="cuda") == []     # a CUDA model: it does run fp16
    problems = _hard_coded_cuda_loop(device="cpu")
    assert len(problems) == 1 and "hard-coded to 'cuda'" in problems[0], problems


def test_check_accumulation_names_a_scaler_built_inside_the_loop():
    model, optimizer, scheduler, batches = _setup([4, 4, 4, 4], seed=4)
    given = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
    own = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
    with acc.TrainingSpy(model, optimizer, scheduler, given) as spy:
        _train(model, optimizer, scheduler, batches, 2, scaler=own, amp_dtype=torch.float16)
    problems = acc.check_accumulation(spy, [4, 4, 4, 4], 2, scaler=True)
    assert problems and "passed in as `scaler` was never used" in problems[0]
    assert not any("called directly" in p for p in problems)
    assert all(e.other_scaler for e in spy.step_events())


def test_graded_call_names_the_cause_of_raw_errors_and_warnings():
    def update_without_step():
        scaler = torch.amp.GradScaler("cpu")
        model = nn.Linear(3, 2)
        scaler.scale(model(torch.randn(4, 3)).sum()).backward()
        scaler.update()

    with pytest.raises(AssertionError, match="once per optimizer step"):
        acc.graded_call(update_without_step, what="case 1")
    with pytest.raises(AssertionError, match="pass ignore_index on"):
        acc.graded_call(F.cross_entropy, torch.randn(3, 5), torch.tensor([1, -1, 2]))
    with pytest.raises(AssertionError, match="scheduler is not None"):
        acc.graded_call(lambda scheduler=None: scheduler.step())

    def autocast_cuda():
        with torch.autocast("cuda", dtype=torch.float16):
            return nn.Linear(3, 2)(torch.randn(4, 3))

    if not torch.cuda.is_available():
        with pytest.raises(AssertionError, match="device type"):
            acc.graded_call(autocast_cuda)
    # a warn-once warning is seen however often it was shown before
    for _ in range(2):
        with pytest.raises(AssertionError, match=r"loss\.item\(\)"):
            acc.graded_call(lambda: float(torch.randn(3, requires_grad=True).sum()))
    # other errors pass through unchanged; results come back
    with pytest.raises(KeyError):
        acc.graded_call(lambda: {}["x"])
    assert acc.graded_call(lambda a, b=0: a + b, 2, b=3) == 5


def test_check_accumulation_default_survives_a_reload_of_its_module():
    """Graded cells reload memlab.lessons.accumulation; 03's check (memlab.lessons.amp) holds a
    check_accumulation imported before the reload, whose default amp_dtype must still mean
    "not checked" (an object() sentinel compared by identity did not, after a reload)."""
    import importlib

    import memlab.lessons.accumulation as acc
    from memlab.lessons import amp

    from course_support import memlab_namespaces_restored

    kw_default = acc.check_accumulation.__kwdefaults__["amp_dtype"]
    with memlab_namespaces_restored():
        importlib.reload(acc)
        assert acc.check_accumulation is not amp.check_accumulation, "the reload changed nothing"
        assert acc._is_unchecked(kw_default) and acc._is_unchecked(acc._UNCHECKED)
        assert amp.check_accumulation.__kwdefaults__["amp_dtype"] == acc._UNCHECKED
