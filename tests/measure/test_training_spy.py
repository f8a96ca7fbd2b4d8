"""memlab.measure.training_spy: the spy 03 and 04 grade a training loop with, where it lives
(measure, re-exported by both lessons under their old names) and how it behaves on a reload."""
from __future__ import annotations

import importlib
import subprocess
import sys

import torch
import torch.nn.functional as F

import memlab as ml
from course_support import memlab_namespaces_restored
from memlab.measure import training_spy as ts

MOVED = ("micro_batch_sizes", "group_sizes", "Event", "TRACE_LEGEND", "TrainingSpy",
         "check_micro_batches", "check_accumulation", "spy_device", "skip_until_written",
         "_UNCHECKED", "_is_unchecked")


def _loop(step_every: int):
    """Six micro-batches of 4 items through a small model, an SGD step every ``step_every``."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(24, 6), torch.randint(0, 3, (24,))
    batches = list(zip(x.split(4), y.split(4)))

    def run():
        for i, (xb, yb) in enumerate(batches):
            if i % step_every == 0:
                opt.zero_grad()
            (F.cross_entropy(model(xb), yb) / step_every).backward()
            if i % step_every == step_every - 1:
                opt.step()
    return model, opt, run


def test_both_lessons_re_export_the_measure_objects():
    from memlab.lessons import accumulation as acc
    from memlab.lessons import amp

    for name in MOVED:
        assert getattr(acc, name) is getattr(ts, name), f"memlab.lessons.accumulation.{name}"
    for name in ("TrainingSpy", "check_accumulation", "skip_until_written"):
        assert getattr(amp, name) is getattr(ts, name), f"memlab.lessons.amp.{name}"
    # the names notebooks and hidden tests use
    assert ml.accumulation.TrainingSpy is ts.TrainingSpy
    assert ml.accumulation.check_accumulation is ts.check_accumulation
    assert ml.amp.TrainingSpy is ts.TrainingSpy
    import memlab.training_spy  # the short name, as for every measure module
    assert memlab.training_spy is ts


def test_the_spy_finds_a_step_per_micro_batch_and_passes_the_right_loop():
    model, opt, run = _loop(step_every=3)
    with ts.TrainingSpy(model, opt) as spy:
        run()
    assert spy.trace() == "Z F4 B F4 B F4 B S Z F4 B F4 B F4 B S"
    assert ts.check_accumulation(spy, [4] * 6, 3) == []

    model, opt, run = _loop(step_every=1)       # steps after every micro-batch
    with ts.TrainingSpy(model, opt) as spy:
        run()
    problems = ts.check_accumulation(spy, [4] * 6, 3)
    assert problems and "optimizer.step() ran 6 times, expected 2" in problems[0], problems


def test_reloading_memlab_accumulation_gives_fresh_spies(monkeypatch):
    """04's hidden cells ``importlib.reload(memlab.accumulation)`` so that a kernel whose spies
    were patched gets fresh ones; with the spies in measure/, that reload must reload them too.
    03's objects, imported before the reload, keep working with the new spies."""
    from memlab.lessons import accumulation as acc
    from memlab.lessons import amp

    old_spy, old_check = ts.TrainingSpy, ts.check_accumulation
    with memlab_namespaces_restored():
        # what a learner's cell could have done before the graded cell ran
        monkeypatch.setattr(ts.TrainingSpy, "forward_sizes", lambda self: [4] * 6)
        ts.check_accumulation = lambda *a, **k: []
        fresh = importlib.reload(importlib.import_module("memlab.accumulation"))
        assert fresh is acc
        assert acc.TrainingSpy is not old_spy and acc.check_accumulation is not old_check
        assert acc.TrainingSpy is ts.TrainingSpy, "the reload did not reload measure.training_spy"

        model, opt, run = _loop(step_every=1)
        with acc.TrainingSpy(model, opt) as spy:
            run()
        assert spy.forward_sizes() == [4] * 6
        assert acc.check_accumulation(spy, [4] * 6, 3), "the patched check survived the reload"
        # 03's check (imported before the reload) on a spy made after it; 'not checked' default
        assert amp.check_accumulation is old_check
        assert amp.check_accumulation(spy, [4] * 6, 3) == acc.check_accumulation(spy, [4] * 6, 3)
    assert ts.TrainingSpy is old_spy and acc.TrainingSpy is old_spy


def test_a_first_import_of_the_lesson_does_not_replace_the_spies():
    """Only a reload reloads measure.training_spy: importing memlab.lessons.accumulation the first
    time (after 03's memlab.lessons.amp took the spies) leaves 03's objects the current ones."""
    code = ("import memlab.lessons.amp as amp\n"
            "import memlab.measure.training_spy as ts\n"
            "spy = ts.TrainingSpy\n"
            "import memlab.lessons.accumulation as acc\n"
            "assert acc.TrainingSpy is spy is amp.TrainingSpy is ts.TrainingSpy\n"
            "print('same')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "same", out.stderr[-2000:]
