"""How fast is low precision on THIS CPU? (why a CPU grader spends its time in 03, 05 and 08)

On a CPU, the course's mixed precision is bf16 autocast (``ml.amp``; ``ml.oom.amp_dtype``).
CPUs without native bf16 instructions (AVX512-BF16 or AMX; many AMD EPYC and older Intel
servers, most laptops) run bf16 and fp16 matrix products through a slow generic path, so every
autocast job of a lesson (the 05 clinic's ladder, 03's comparisons, 08's levers) costs many
times its fp32 twin. Memory figures are unaffected (a bf16 tensor holds 2 bytes whatever does
the arithmetic); only time is. This prints:

* the CPU capability torch dispatches to (``torch.backends.cpu.get_cpu_capability()``);
* the median time of a linear layer and a batched matmul in fp32, bf16 and fp16, as ratios to
  fp32, at the sizes of the 05 clinic's job (tokens x hidden = 1024 x 64, 4 x hidden out);
* one training step of 05's job (``ml.oom.JobSpec()``), plain and with mixed precision.

Not a test: the numbers depend on the machine. Run:
``.venv/bin/python benchmarks/cpu_low_precision.py [--threads 1]``.
"""
from __future__ import annotations

import argparse

import torch

import memlab as ml


def _median_ms(fn, repeats: int) -> float:
    return 1e3 * ml.timing.median_time(fn, repeats=repeats)  # blocked_autorange rounds, 1 warm-up


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1, help="torch threads (graders run 1 per kernel)")
    ap.add_argument("--repeats", type=int, default=5, help="rounds of blocked_autorange per figure")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{args.threads} thread(s)")

    x, w = torch.randn(1024, 64), torch.randn(256, 64)
    q, k = torch.randn(64, 64, 16), torch.randn(64, 16, 64)
    rows = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        a, b, qq, kk = x.to(dtype), w.to(dtype), q.to(dtype), k.to(dtype)
        lin = _median_ms(lambda: torch.nn.functional.linear(a, b), args.repeats)
        bmm = _median_ms(lambda: torch.bmm(qq, kk), args.repeats)
        rows.append((str(dtype).replace("torch.", ""), lin, bmm))
    base_lin, base_bmm = rows[0][1], rows[0][2]
    print(f"{'dtype':>9} {'linear ms':>10} {'x fp32':>7} {'bmm ms':>8} {'x fp32':>7}")
    for name, lin, bmm in rows:
        print(f"{name:>9} {lin:10.3f} {lin / base_lin:7.1f} {bmm:8.3f} {bmm / base_bmm:7.1f}")

    spec, device = ml.oom.JobSpec(), torch.device("cpu")
    steps = {}
    for label, config in (("plain", ml.oom.JobConfig(micro_batch=spec.effective_batch)),
                          ("mixed precision", ml.oom.JobConfig(amp=True, micro_batch=spec.effective_batch))):
        run = lambda c=config: ml.oom.run_job(spec, c, device=device, steps=1, backend="cpu-tracker")  # noqa: E731
        steps[label] = _median_ms(run, args.repeats)
    print(f"05 clinic job, one step under the tracker: plain {steps['plain']:.0f} ms, mixed precision "
          f"{steps['mixed precision']:.0f} ms ({steps['mixed precision'] / steps['plain']:.1f} x)")


if __name__ == "__main__":
    main()
