"""Seconds per submission of `python -m memlab.grading.instructor grade-class`, serial vs parallel.

In a temporary copy of the course (the chosen assignments of solutions/, released there), a
class of ``--students`` identical submissions (each the solution notebook) is graded twice:
with 1 worker, then with ``--workers`` (default: one per core). Prints wall seconds per
submission (one student's one assignment) and per student (all the chosen assignments).
Not a test: the numbers depend on the machine and its load.

    .venv/bin/python benchmarks/grading_speed.py                      # 00_setup, 4 students
    .venv/bin/python benchmarks/grading_speed.py --assignments all --students 4
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from memlab import instructor
from memlab.grading.grade_class import GradeSettings, grade_class

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assignments", default="00_setup", help="comma-separated, or 'all'")
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    names = (sorted(p.name for p in (ROOT / "solutions").iterdir() if any(p.glob("*.ipynb")))
             if args.assignments == "all" else args.assignments.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="memlab-bench-"))
    try:
        (tmp / "course" / "autograder").mkdir(parents=True)
        shutil.copy(ROOT / "autograder" / "nbgrader_config.py", tmp / "course" / "autograder")
        for name in names:
            shutil.copytree(ROOT / "solutions" / name, tmp / "course" / "solutions" / name,
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        config = tmp / "course" / "autograder" / "nbgrader_config.py"
        instructor.release(names, api=instructor.make_api(config))
        subs = tmp / "class"
        for i in range(args.students):
            for name in names:
                shutil.copytree(tmp / "course" / "solutions" / name, subs / f"student{i:02d}" / name)
        n = args.students * len(names)
        print(f"{args.students} students x {len(names)} assignments ({', '.join(names)}) = {n} submissions, "
              f"{os.cpu_count()} cores")
        for workers in (1, args.workers):
            report = grade_class(subs, config_path=config, out=tmp / f"report{workers}",
                                 settings=GradeSettings(workers=workers), progress=False)
            per = report.seconds / n
            print(f"{workers} worker(s): {report.seconds:6.1f} s total, {per:5.1f} s per submission, "
                  f"{report.seconds / args.students:5.1f} s per student (all {len(names)} assignments)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
