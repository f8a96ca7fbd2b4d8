"""How stable is 02's checkpointing time ratio? The hand-written timer vs torch.utils.benchmark.

02 measures one training step of an 8-layer MLP stack (64 x 8 x 64) with every layer
checkpointed against the plain step, as a ratio. Issue 15 saw 1.38x in one section and 1.02x
in another of the same run. This measures the same ratio ``--trials`` times with each of:

* ``hand-written``: the previous memlab.timing (perf_counter around single calls, medians of
  9 interleaved repeats, 1 warm-up call);
* ``benchmark.Timer``: memlab.timing now (torch.utils.benchmark.Timer.blocked_autorange,
  5 alternating rounds of at least 0.05 s each).

and prints every ratio, their range over the trials, and the seconds each method took.
Not a test: the numbers depend on the machine and its load.

    .venv/bin/python benchmarks/timing_stability.py --trials 5
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
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

    plain, full = step(layers), step(ckpt)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; full checkpointing / plain step")
    for name, measure in (("hand-written", lambda: hand_written_ratio(full, plain)),
                          ("benchmark.Timer", lambda: timing.time_ratio(full, plain, repeats=5).ratio)):
        t0 = time.perf_counter()
        ratios = [measure() for _ in range(args.trials)]
        secs = (time.perf_counter() - t0) / args.trials
        print(f"{name:>16}: " + " ".join(f"{r:.2f}" for r in ratios)
              + f"  range {min(ratios):.2f}-{max(ratios):.2f} (width {max(ratios) - min(ratios):.2f}),"
              f" {secs:.1f} s per measurement")


if __name__ == "__main__":
    main()
