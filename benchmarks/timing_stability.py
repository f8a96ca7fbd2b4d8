"""How stable are 02's and 04's time ratios? The hand-written timers vs torch.utils.benchmark.

02 measures one training step of an 8-layer MLP stack (64 x 8 x 64) with every layer
checkpointed against the plain step, as a ratio. Issue 15 saw 1.38x in one section and 1.02x
in another of the same run. This measures the same ratio ``--trials`` times with each of:

* ``hand-written``: the previous memlab.timing (perf_counter around single calls, medians of
  9 interleaved repeats, 1 warm-up call);
* ``benchmark.Timer``: memlab.timing now (torch.utils.benchmark.Timer.blocked_autorange,
  5 alternating rounds of at least 0.05 s each).

``--case accumulation`` measures 04's ratio instead: one effective batch of 256 items in 8
micro-batches of 32 against one batch of 256 (04 section 4's classifier), with

* ``hand-written``: 04's previous ``acc.time_per_call`` (best of 3 perf_counter calls after 1
  warm-up, each k timed on its own, then divided);
* ``benchmark.Timer``: ``acc.time_ratio`` as 04 uses it now (5 alternating rounds).

``--case oom`` measures 05's ratio: one optimizer step of the notebook's job with the batch
lowered to 8 against the plain job (16 sequences), one thread, with

* ``hand-written``: 05's previous ``ml.oom.time_per_step`` (each configuration on its own:
  4 steps timed with perf_counter, the first left out, the median);
* ``benchmark.Timer``: ``ml.oom.time_per_step`` as 05 uses it now (5 alternating rounds).

and prints every ratio, their range over the trials, and the seconds each method took.
Not a test: the numbers depend on the machine and its load.

    .venv/bin/python benchmarks/timing_stability.py --trials 5
    .venv/bin/python benchmarks/timing_stability.py --trials 5 --case accumulation
    .venv/bin/python benchmarks/timing_stability.py --trials 3 --case oom
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.checkpoint import checkpoint

import memlab as ml
from memlab.measure import timing


def hand_written_ratio(fn, baseline, repeats=9):
    fn()
    baseline()
    t, b = [], []
    for i in range(repeats):
        pair = [(fn, t), (baseline, b)] if i % 2 == 0 else [(baseline, b), (fn, t)]
        for f, out in pair:
            t0 = time.perf_counter()
            f()
            out.append(time.perf_counter() - t0)
    return statistics.median(t) / statistics.median(b)


def best_of_ratio(fn, baseline, repeats=3):
    """04's previous timing: min of ``repeats`` single calls after one warm-up, each on its own."""
    def best(f):
        f()
        return min(timing.timed_call(f) for _ in range(repeats))
    return best(fn) / best(baseline)


def accumulation_case():
    import torch.nn.functional as F
    from memlab import accumulation as acc
    model = acc.classifier(32, 64, 4, 10)
    x, y = acc.toy_classification(256, 32, 10)

    def batch(micro):
        def fn():
            for xb, yb in zip(x.split(micro), y.split(micro)):
                (F.cross_entropy(model(xb), yb) * (xb.shape[0] / 256)).backward()
        return fn
    return "04: 8 micro-batches of 32 / one batch of 256", batch(32), batch(256), best_of_ratio


def oom_case() -> None:
    """05: batch 8 (lowered) against the plain job of 16, old and new timing."""
    from memlab import oom
    torch.set_num_threads(1)   # as 05 does on the CPU
    spec = oom.JobSpec()
    plain = oom.JobConfig(micro_batch=spec.effective_batch)
    lowered = oom.JobConfig(micro_batch=spec.effective_batch // 2)

    def old_seconds(config, steps=4):
        step = oom.step_function(spec, config)
        times = [timing.timed_call(step) for _ in range(steps)][1:]
        return sorted(times)[len(times) // 2]

    return ("05: batch 8 (lowered) / plain job of 16 (half the work per step)",
            lambda: old_seconds(lowered) / old_seconds(plain),
            lambda: oom.time_per_step(spec, lowered, plain).ratio)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--case", choices=("checkpointing", "accumulation", "oom"),
                        default="checkpointing")
    args = parser.parse_args()
    if args.case == "oom":
        title, old, new = oom_case()
        compare(title, (("hand-written", old), ("benchmark.Timer", new)), args.trials)
        return
    if args.case == "accumulation":
        title, full, plain, old = accumulation_case()
        report(title, full, plain, old, args.trials)
        return
    torch.manual_seed(0)
    layers = ml.checkpointing.residual_layers(ml.models.MLPStack(64, 8))
    x = torch.randn(64, 8, 64)
    params = list(layers.parameters())

    def step(run):
        def fn():
            for p in params:
                p.grad = None
            ml.checkpointing.default_loss(run(x)).backward()
        return fn

    def ckpt(h):
        for layer in layers:
            h = checkpoint(layer, h, use_reentrant=False)
        return h

    report("02: full checkpointing / plain step", step(ckpt), step(layers), hand_written_ratio, args.trials)


def report(title, full, plain, old, trials) -> None:
    compare(title, (("hand-written", lambda: old(full, plain)),
                    ("benchmark.Timer", lambda: timing.time_ratio(full, plain, repeats=5).ratio)),
            trials)


def compare(title, methods, trials) -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {title}")
    for name, measure in methods:
        t0 = time.perf_counter()
        ratios = [measure() for _ in range(trials)]
        secs = (time.perf_counter() - t0) / trials
        print(f"{name:>16}: " + " ".join(f"{r:.2f}" for r in ratios)
              + f"  range {min(ratios):.2f}-{max(ratios):.2f} (width {max(ratios) - min(ratios):.2f}),"
              f" {secs:.1f} s per measurement")


if __name__ == "__main__":
    main()
