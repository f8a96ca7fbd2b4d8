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

``--case notebooks`` runs what 02, 04 and 09 print, called as the notebooks call them, ``--trials``
times each, idle and with a busy-loop process pinned to one core (``--load``):

* 02 section 4: the checkpointed step / the plain step (one thread, 5 rounds); it supports the
  notebook when the printed bracket lies above 1.00x (checkpointing costs time);
* 04 section 4: one effective batch at k = 2, 4, 8 / k = 1 (5 rounds each); it supports the
  notebook when k = 8's bracket lies above 1.00x (time grows once micro-batches get small);
* 09 section 2: ``ml.serving.step_times`` without and with a KV cache, 100 tokens after an
  8-token prompt (one thread). ``growth`` is the median time per token of the last 20 tokens
  over that of the first 20: it supports the notebook when the uncached decode grows (>= 2x)
  and the cached one does not (<= 1.5x); ``spikes`` counts the points of either curve more than
  twice the median of their 9 neighbours (what makes the plot read as noise).

Per measurement it prints the ratio of every trial, their median and range, the printed
bracket (``spread``) of every trial, how many trials printed the too-noisy warning, how many
support the notebook, how many read wrong WITHOUT a warning (what must stay 0), and the seconds
one measurement took. ``--old`` measures as
memlab did before the spread became an interquartile range: exactly 5 rounds, the bracket their
full range, one single-shot generation per 09 curve. ``--threads-04 1``: 04 on one thread (as
02, 05 and 09 run on the CPU); by default 04 runs on torch's default thread count, as it does.
``--busy 2``: two busy loops, one per core of a 2-core machine (the measurement then shares a
core with one of them).

    .venv/bin/python benchmarks/timing_stability.py --case notebooks --trials 5 --load both
    .venv/bin/python benchmarks/timing_stability.py --case notebooks --trials 5 --old

    .venv/bin/python benchmarks/timing_stability.py --trials 5
    .venv/bin/python benchmarks/timing_stability.py --trials 5 --case accumulation
    .venv/bin/python benchmarks/timing_stability.py --trials 3 --case oom
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import subprocess
import sys
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
    parser.add_argument("--case", choices=("checkpointing", "accumulation", "oom", "notebooks"),
                        default="checkpointing")
    parser.add_argument("--load", choices=("idle", "loaded", "both"), default="both",
                        help="--case notebooks: without or with a busy loop on one core")
    parser.add_argument("--only", default="02,04,09", help="--case notebooks: which of them")
    parser.add_argument("--old", action="store_true",
                        help="--case notebooks: 5 rounds exactly, full-range bracket, one-shot 09")
    parser.add_argument("--threads-04", type=int, default=None,
                        help="--case notebooks: 04's thread count (default: torch's)")
    parser.add_argument("--busy", type=int, default=1,
                        help="--case notebooks: busy loops when loaded (each on its own core)")
    args = parser.parse_args()
    if args.case == "notebooks":
        OLD["on"], OLD["threads_04"], OLD["busy"] = args.old, args.threads_04, args.busy
        loads = ("idle", "loaded") if args.load == "both" else (args.load,)
        for load in loads:
            notebooks_case(args.trials, load, args.only.split(","))
        return
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


# ------------------------------------------------------------- --case notebooks: 02, 04, 09
BUSY_LOOP = "import os\nos.sched_setaffinity(0, {%d})\nwhile True:\n    pass\n"
OLD = {"on": False, "threads_04": None, "busy": 1}   # --old, --threads-04, --busy


def _ratio(fn, baseline):
    """``time_ratio(fn, baseline, repeats=5)`` as the notebooks call it (``--old``: 5 rounds)."""
    return timing.time_ratio(fn, baseline, repeats=5, **({"max_rounds": 5} if OLD["on"] else {}))


def _step_times(*args):
    return ml.serving.step_times(*args, **({"repeats": 1, "window": 1} if OLD["on"] else {}))


@contextlib.contextmanager
def busy_core(loaded: bool, n: int = 1):
    """``n`` ``while True: pass`` processes, each pinned to one core from the last one down,
    while the block runs."""
    if not loaded:
        yield
        return
    cores = sorted(os.sched_getaffinity(0), reverse=True)
    procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP % cores[i % len(cores)]])
             for i in range(n)]
    try:
        time.sleep(0.5)
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def threads(n: int | None):
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def nb02_measure():
    """02 section 4 as the notebook runs it: ``step_time_ratio(CheckpointedSequential(mlp))``."""
    torch.manual_seed(0)
    mlp = ml.checkpointing.residual_layers(ml.models.MLPStack(64, 8))
    x = torch.randn(64, 8, 64)
    params = list(mlp.parameters())

    def ckpt(h):   # CheckpointedSequential(mlp): one segment per layer
        for start, stop in ml.checkpointing.segment_bounds(len(mlp), len(mlp)):
            h = checkpoint(mlp[start:stop], h, use_reentrant=False)
        return h

    def make_step(run):
        def step():
            for p in params:
                p.grad = None
            ml.checkpointing.default_loss(run(x)).backward()
        return step

    def measure():
        with threads(1):
            r = _ratio(make_step(ckpt), make_step(mlp))
        return {"full / none": r}
    return measure


def nb04_measure():
    """04 section 4: one effective batch of 256 at k = 2, 4, 8 micro-batches against k = 1."""
    import torch.nn.functional as F
    from memlab import accumulation as acc
    n = 256
    inputs, targets = acc.toy_classification(n, 32, 10)
    model = acc.classifier(32, 64, 4, 10)

    def accumulate_gradients(micro):   # the notebook's solution
        total = 0.0
        for xb, yb in zip(inputs.split(micro), targets.split(micro)):
            loss = F.cross_entropy(model(xb), yb) * (xb.shape[0] / n)
            loss.backward()
            total += loss.item()
        return total

    def one_effective_batch(micro):
        return lambda: accumulate_gradients(micro)

    def measure():
        with threads(OLD["threads_04"]):
            return {f"k={k} / k=1": _ratio(one_effective_batch(n // k), one_effective_batch(n))
                    for k in (2, 4, 8)}
    return measure


def _attention_with_cache(block, x, cache):   # 09's solution
    s, b, h = x.shape
    a, d = block.a, h // block.a
    q, k, v = block.qkv(x).split(h, dim=-1)
    q, k, v = (t.reshape(s, b, a, d).permute(1, 2, 0, 3) for t in (q, k, v))
    if cache is None:
        k, v = k.contiguous(), v.contiguous()
    else:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    future = torch.ones(s, t, dtype=torch.bool).triu(t - s + 1)
    probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    return block.proj((probs @ v).permute(2, 0, 1, 3).reshape(s, b, h)), (k, v)


def _spikes(times, width=4):
    """Points more than twice the median of the window of ``2 * width + 1`` around them."""
    n = 0
    for i, t in enumerate(times):
        window = times[max(0, i - width):i + width + 1]
        n += t > 2 * statistics.median(window)
    return n


def nb09_measure():
    """09 section 2: ``ml.serving.step_times`` without and with the cache (plot and print)."""
    torch.manual_seed(0)
    gpt = ml.models.TinyGPT(vocab=256, hidden=128, heads=4, layers=4, max_seq=128).eval()
    prompt = torch.randint(0, 256, (8, 1))

    def measure():
        with threads(1):
            plain = _step_times(gpt, prompt, 100)[1:]   # the plot leaves out the prefill
            cached = _step_times(gpt, prompt, 100, _attention_with_cache)[1:]
        growth = [statistics.median(t[-20:]) / statistics.median(t[:20]) for t in (plain, cached)]
        printed = (sum(plain[-20:]) / 20) / (sum(cached[-20:]) / 20)   # the notebook's print
        return {"growth no cache": growth[0], "growth cached": growth[1],
                "last 20 no cache / cached": printed,
                "spikes": _spikes(plain) + _spikes(cached)}
    return measure


def _bracket(r) -> tuple[float, float]:
    return tuple(r.full_range if OLD["on"] else r.spread)


def _supports(name, key, value) -> bool:
    """Does this one figure support the notebook's reading (see the module docstring)?"""
    if name == "02":
        return _bracket(value)[0] > 1.0
    if name == "04":
        return key != "k=8 / k=1" or _bracket(value)[0] > 1.0
    return {"growth no cache": value >= 2.0, "growth cached": value <= 1.5,
            "last 20 no cache / cached": value > 1.0, "spikes": True}[key]


def notebooks_case(trials: int, load: str, only) -> None:
    cases = {"02": nb02_measure, "04": nb04_measure, "09": nb09_measure}
    state = f"{OLD['busy']} busy loop(s)" if load == "loaded" else "idle"
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, {state}; {trials} trials; "
          f"{'old' if OLD['on'] else 'new'} timing; 04 on {OLD['threads_04'] or 'default'} "
          f"thread(s); load average {os.getloadavg()[0]:.1f}")
    with busy_core(load == "loaded", OLD["busy"]):
        for name in only:
            measure = cases[name]()
            measure()   # warm-up: first-call costs out of the figures
            t0 = time.perf_counter()
            runs = [measure() for _ in range(trials)]
            secs = (time.perf_counter() - t0) / trials
            print(f"{name} ({secs:.1f} s per measurement)")
            for key in runs[0]:
                values = [run[key] for run in runs]
                ok = [_supports(name, key, v) for v in values]
                if isinstance(values[0], timing.TimingResult):
                    ratios = [v.ratio for v in values]
                    brackets = " ".join(f"({lo:.2f}-{hi:.2f})" for lo, hi in map(_bracket, values))
                    warned = [not OLD["on"] and v.noisy for v in values]
                    rounds = "/".join(str(len(v.round_ratios)) for v in values)
                    extra = (f"; brackets {brackets}; rounds {rounds}; "
                             f"warned {sum(warned)}/{trials}; wrong without a warning "
                             f"{sum(not o and not w for o, w in zip(ok, warned))}/{trials}")
                else:
                    ratios, extra = values, ""
                print(f"  {key:>26}: " + " ".join(f"{r:.2f}" for r in ratios)
                      + f"  median {statistics.median(ratios):.2f}, range "
                      f"{min(ratios):.2f}-{max(ratios):.2f}{extra}; "
                      f"supports the notebook {sum(ok)}/{trials}")


if __name__ == "__main__":
    main()
