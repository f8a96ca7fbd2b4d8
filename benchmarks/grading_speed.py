"""Class grading throughput of `grade-class`: 1 and 2 local workers, a 2-worker Dask cluster,
the projected time for a class of 100 x all assignments, and the time to resume a batch.

In a temporary copy of the course (the chosen assignments of solutions/, released there), a
class of ``--students`` submissions per assignment (each the solution notebook: every cell
runs, nothing is skipped) is graded, in one run:

1. with 1 local worker, 2. with 2 local workers (ProcessPoolExecutor), 3. on a Dask cluster
started here (``dask scheduler`` + 2 ``dask worker`` processes on localhost, 1 thread each),
4. (``--cold``) with 2 local workers and no warm fork (a fresh interpreter per job and per
kernel: the cost the warm zygote removes), (``--bwrap``) with 2 local workers and the
bubblewrap sandbox instead of Landlock on warm forks, (``--without-verdict``) with 2 local
workers and no verdict re-run, (``--without-judge``) with 2 local workers and the judged test
cells decided in the re-run itself instead of the judge (memlab.autograde.security.judge), 5. (``--resume``) the CLI with 2 workers is
interrupted (SIGINT, as Ctrl-C) once half the class is graded, then run again: the second run
grades only the rest; its wall time is printed.

Prints submissions per minute for each, and the projected wall time of 100 students x every
assignment in solutions/ (from the mean seconds per submission of each benchmarked
assignment; assignments not benchmarked are projected at the mean of those that were).
``--mixed``: the class an instructor meets instead of solutions only: per assignment a blank
notebook, a broken one and one whose answer cell never ends besides the honest ones (each loop
costs one per-cell limit); the projection then includes them. What this does not measure:
hostile submissions (tests/grading/test_hostile*.py), a GPU, an LMS zip; assignments not
benchmarked are projected at the mean of those that were. The same class against plain
nbgrader: benchmarks/vs_nbgrader.py --mixed.
Not a test: the numbers depend on the machine and its load (run it on an idle machine).

    .venv/bin/python benchmarks/grading_speed.py                                # 00_setup, 4 students
    .venv/bin/python benchmarks/grading_speed.py --assignments all --students 2 --resume --cold
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from memlab.autograde.batch.grade_class import GradeSettings, grade_class

from _course import a_class, released_course  # benchmarks/

ROOT = Path(__file__).resolve().parents[1]


def _all_assignments() -> list[str]:
    return sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def _start_dask(tmp: Path, workers: int) -> tuple[str, list[subprocess.Popen]]:
    dask = str(Path(sys.executable).parent / "dask")
    sched = tmp / "scheduler.json"
    procs = [subprocess.Popen([dask, "scheduler", "--scheduler-file", str(sched), "--port", "0",
                               "--dashboard-address", ":0", "--host", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)]
    for _ in range(600):
        if sched.is_file() and sched.stat().st_size:
            break
        time.sleep(0.1)
    address = json.loads(sched.read_text())["address"]
    for i in range(workers):
        procs.append(subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--nworkers", "1",
                                       "--memory-limit", "0", "--dashboard-address", ":0", "--host", "127.0.0.1"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp))
    from distributed import Client

    with Client(address, timeout=60) as client:
        client.wait_for_workers(workers, timeout=180)
    return address, procs


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in reversed(procs):
        p.terminate()
    for p in reversed(procs):
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


def _resume_run(config: Path, subs: Path, out: Path, n: int) -> tuple[float, int, int]:
    """Interrupt the CLI (2 workers) at half the class, run it again; (seconds, graded, skipped)."""
    cmd = [sys.executable, "-m", "memlab.autograde", "--config", str(config), "grade-class", str(subs),
           "--out", str(out), "--workers", "2", "--quiet"]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    ledger = out / "ledger.jsonl"
    while first.poll() is None:
        if ledger.is_file() and len(ledger.read_text().splitlines()) >= n // 2:
            first.send_signal(signal.SIGINT)
            break
        time.sleep(0.2)
    first.wait()
    t0 = time.monotonic()
    again = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    import re

    m = re.search(r"graded (\d+) submissions .*?(\d+) already graded", again.stdout)
    if not m:
        raise RuntimeError(f"the resumed run did not finish:\n{again.stdout}\n{again.stderr}")
    return seconds, int(m.group(1)), int(m.group(2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assignments", default="00_setup", help="comma-separated, or 'all'")
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--no-dask", action="store_true", help="skip the Dask cluster")
    parser.add_argument("--cold", action="store_true", help="also 2 workers without the warm fork")
    parser.add_argument("--bwrap", action="store_true",
                        help="also 2 workers with the bubblewrap sandbox (a fresh interpreter per "
                             "kernel and re-run) instead of Landlock on warm forks")
    parser.add_argument("--without-verdict", action="store_true",
                        help="also 2 workers without the verdict re-run (what the second run of "
                             "every notebook costs)")
    parser.add_argument("--without-judge", action="store_true",
                        help="also 2 workers with no judge (what deciding the judged cells in a "
                             "process of their own costs)")
    parser.add_argument("--resume", action="store_true", help="also interrupt and resume a batch")
    parser.add_argument("--runs", default="1,2,dask", help="which of 1,2,dask to run (default all)")
    parser.add_argument("--mixed", action="store_true",
                        help="a realistic class: add a blank, a broken and a looping submission "
                             "per assignment (benchmarks/_course.py a_class)")
    args = parser.parse_args()
    every = _all_assignments()
    names = every if args.assignments == "all" else args.assignments.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="memlab-bench-"))
    procs: list[subprocess.Popen] = []
    try:
        config = released_course(tmp / "course", names)
        subs = tmp / "class"
        kinds = a_class(tmp / "course", names, args.students, subs, args.mixed)
        n = len(kinds)
        print(f"{args.students} students x {len(names)} assignments = {n} submissions per run"
              + (" (with a blank, a broken and a looping submission per assignment)"
                 if args.mixed else "")
              + f", {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
        wanted = set(args.runs.split(","))
        runs = [(label, s) for key, label, s in (
            ("1", "1 local worker", GradeSettings(workers=1, resume=False)),
            ("2", "2 local workers", GradeSettings(workers=2, resume=False))) if key in wanted]
        if not args.no_dask and "dask" in wanted:
            address, procs = _start_dask(tmp, 2)
            runs.append(("Dask, 2 workers", GradeSettings(scheduler=address, resume=False)))
        if args.cold:
            runs.append(("2 local, cold", GradeSettings(workers=2, resume=False, warm=False)))
        if args.bwrap:
            runs.append(("2 local, bubblewrap", GradeSettings(workers=2, resume=False, sandbox_kind="bwrap")))
        if args.without_verdict:
            runs.append(("2 local, no verdict re-run", GradeSettings(workers=2, resume=False, verdict=False)))
        if args.without_judge:
            runs.append(("2 local, no judge", GradeSettings(workers=2, resume=False, judge=False)))
        per_assignment: dict[str, float] = {}
        cpu_per_assignment: dict[str, float] = {}
        for label, settings in runs:
            report = grade_class(subs, config_path=config, out=tmp / "report", settings=settings, progress=False)
            bad = [r for r in report.results if r["score"] != r["max_score"]
                   and kinds.get((r["student"], r["assignment"]), "honest") == "honest"]
            rate = n / report.seconds * 60
            parts = {}
            for r in report.results:
                for k, v in (r.get("timings") or {}).items():
                    parts.setdefault(k, []).append(v)
            mean_job = sum(r["seconds"] for r in report.results) / n
            label += f" (job {mean_job:.1f} s: " + ", ".join(
                f"{k} {sum(v) / len(v):.1f}" for k, v in parts.items()) + ")"
            print(f"{rate:6.1f} submissions/min, {report.seconds:7.1f} s for {n}: {label}"
                  + (f"  ({len(bad)} not full marks)" if bad else ""), flush=True)
            for r in bad:
                why = [p for p in r["reason"].split("; ") if "edited: restored" not in p]
                print(f"    {r['assignment']}: {r['score']:g}/{r['max_score']:g} {'; '.join(why)[:150]}")
            if label.startswith("2 local workers"):
                for name in names:
                    secs = [r["seconds"] for r in report.results if r["assignment"] == name]
                    per_assignment[name] = sum(secs) / len(secs) / 2  # wall share with 2 workers
                    cpu = [r.get("timings", {}).get("cpu") for r in report.results if r["assignment"] == name]
                    if all(c is not None for c in cpu):
                        cpu_per_assignment[name] = sum(cpu) / len(cpu)
                two_rate = rate
        _stop(procs)
        procs = []
        if per_assignment:
            mean = sum(per_assignment.values()) / len(per_assignment)
            projected = 100 * sum(per_assignment.get(a, mean) for a in every)
            projected_rate = 100 * len(every) / (two_rate / 60)
            print(f"projected, 100 students x {len(every)} assignments ({100 * len(every)} submissions), "
                  f"2 local workers, at this load: {projected / 60:.0f} min from per-assignment job times "
                  f"({projected_rate / 60:.0f} min at the measured rate; target < 30 min on 2 cores)")
        if cpu_per_assignment:
            cmean = sum(cpu_per_assignment.values()) / len(cpu_per_assignment)
            cpu_total = 100 * sum(cpu_per_assignment.get(a, cmean) for a in every)
            print("CPU seconds per submission (the job's process and every process it reaped: "
                  "kernels, re-runs, 06's ranks; a bubblewrap sandbox hides its own): " + ", ".join(
                f"{a[:2]} {c:.1f}" for a, c in sorted(cpu_per_assignment.items())))
            print(f"projected on an idle 2-core machine (CPU time / 2 cores, independent of load): "
                  f"{cpu_total / 2 / 60:.0f} min for 100 x {len(every)} (target < 30 min)")
        if set(every) - set(names):
            print(f"  (not benchmarked, projected at the mean: {', '.join(sorted(set(every) - set(names)))})")
        if args.resume:
            seconds, graded, skipped = _resume_run(config, subs, tmp / "resume_report", n)
            print(f"resume after Ctrl-C at half the batch (2 local workers): {seconds:.1f} s, graded "
                  f"{graded} missing, skipped {skipped} already graded")
    finally:
        _stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
