"""How much slower is a training step under the memory tracker?

Prints the median time of a plain step, of the same step under ml.MemoryTracker (with and
without the op-by-op timeline), and under ml.training_step_breakdown, as ratios to the plain
step. Not a test: the numbers depend on the machine. Run: `make bench` or
`.venv/bin/python benchmarks/tracker_overhead.py [--device cuda]`.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import memlab as ml


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default=None)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    device = ml.get_device(args.device)
    torch.manual_seed(0)
    model = nn.Sequential(*[ml.models.GPT2Block(args.hidden, 4, 0.1) for _ in range(args.layers)]).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(args.seq, args.batch, args.hidden, device=device)
    y = torch.randn_like(x)
    loss_fn = nn.functional.mse_loss

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()

    def timed(fn):
        times = []
        for _ in range(args.repeats):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    def tracked(timeline):
        def run():
            t = ml.MemoryTracker(device, timeline=timeline)
            t.track(model, optimizer, x, y)
            with t:
                step()
        return run

    step()  # warm-up: optimizer state, allocator caches
    plain = timed(step)
    rows = [
        ("plain step", plain),
        ("MemoryTracker, no timeline", timed(tracked(False))),
        ("MemoryTracker, timeline", timed(tracked(True))),
        ("training_step_breakdown", timed(lambda: ml.training_step_breakdown(model, (x, y), loss_fn, optimizer))),
    ]
    print(f"device {device} ({ml.device_name(device)}), torch {torch.__version__}, "
          f"{args.layers} GPT-2 blocks h={args.hidden} s={args.seq} b={args.batch}, "
          f"median of {args.repeats}")
    for name, t in rows:
        print(f"{name:>28}: {t * 1e3:8.2f} ms   {t / plain:5.2f}x")


if __name__ == "__main__":
    main()
