"""Wall time of `grade-class` with every layer (static audit, sandbox, the verdict re-run outside
the learner's kernel, the judge) against plain nbgrader on the same submissions.

In a temporary copy of the course (the chosen assignments of solutions/, released there), a
class of ``--students`` submissions per assignment (each the solution notebook) is graded:

1. plain nbgrader, as an instructor without this course's grader would: ``autograde`` then
   ``generate_feedback`` for each submission, one after the other (nbgrader grades one
   submission at a time), through the course's own nbgrader config;
2. ``grade_class`` with 1 worker, every layer on (the defaults);
3. ``grade_class`` with 2 workers, every layer on.

Each mode gets a fresh copy of the course. Prints the seconds of each and their ratio to plain
nbgrader (below 1: faster than plain nbgrader), and checks every submission got full marks in
each mode. Not a test: the numbers depend on the machine and its load.

    .venv/bin/python benchmarks/vs_nbgrader.py                      # 00, 05, 09; 2 students
    .venv/bin/python benchmarks/vs_nbgrader.py --assignments all --students 1
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from memlab.autograde import course as instructor
from memlab.autograde.batch.grade_class import GradeSettings, grade_class

from _course import released_course  # benchmarks/

ROOT = Path(__file__).resolve().parents[1]


def _plain(tmp: Path, names: list[str], students: int) -> tuple[float, list[str]]:
    from nbgrader.api import Gradebook

    config = released_course(tmp, names)
    api = instructor.make_api(config)
    who = [f"student{i:02d}" for i in range(students)]
    for s in who:
        for name in names:
            dest = Path(api.coursedir.format_path(api.coursedir.submitted_directory, s, name))
            shutil.copytree(tmp / "solutions" / name, dest)
    t0 = time.monotonic()
    for name in names:
        instructor.autograde(name, who, api=api)
        instructor.feedback(name, who, api=api)
    seconds = time.monotonic() - t0
    short = []
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        for name in names:
            for s in who:
                sub = gb.find_submission(name, s)
                if sub.score != sub.max_score:
                    short.append(f"{s}/{name}: {sub.score}/{sub.max_score}")
    return seconds, short


def _layers(tmp: Path, names: list[str], students: int, workers: int) -> tuple[float, list[str]]:
    config = released_course(tmp, names)
    subs = tmp / "class"
    for i in range(students):
        for name in names:
            shutil.copytree(tmp / "solutions" / name, subs / f"student{i:02d}" / name)
    t0 = time.monotonic()
    report = grade_class(subs, config_path=config, out=tmp / "report",
                         settings=GradeSettings(workers=workers, resume=False), progress=False)
    seconds = time.monotonic() - t0
    short = [f"{r['student']}/{r['assignment']}: {r['score']}/{r['max_score']} ({r['reason'][:80]})"
             for r in report.results if r["score"] != r["max_score"]]
    return seconds, short


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assignments", default="00_setup,05_oom_clinic,09_serving_memory",
                        help="comma-separated, or 'all'")
    parser.add_argument("--students", type=int, default=2)
    args = parser.parse_args()
    every = sorted(p.name for p in (ROOT / "solutions").iterdir()
                   if p.is_dir() and p.name[:2].isdigit())
    names = every if args.assignments == "all" else args.assignments.split(",")
    n = args.students * len(names)
    print(f"{args.students} students x {len(names)} assignments = {n} submissions, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    rows = []
    for label, run in (("plain nbgrader (autograde + generate_feedback)",
                        lambda t: _plain(t, names, args.students)),
                       ("grade-class, every layer, 1 worker",
                        lambda t: _layers(t, names, args.students, 1)),
                       ("grade-class, every layer, 2 workers",
                        lambda t: _layers(t, names, args.students, 2))):
        tmp = Path(tempfile.mkdtemp(prefix="memlab-vs-nbgrader-"))
        try:
            seconds, short = run(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        rows.append((label, seconds))
        ratio = seconds / rows[0][1]
        print(f"  {seconds:7.1f} s  {ratio:5.2f}x plain  {label}"
              + (f"  NOT FULL MARKS: {short}" if short else ""))


if __name__ == "__main__":
    main()
