"""Wall time of `grade-class` with every layer (static audit, sandbox, the verdict re-run outside
the learner's kernel, the judge) against plain nbgrader on the same submissions.

In a temporary copy of the course (the chosen assignments of solutions/, released there), a
class of ``--students`` submissions per assignment (each the solution notebook) is graded:

1. plain nbgrader, as an instructor without this course's grader would: ``autograde`` then
   ``generate_feedback`` for each submission, one after the other (nbgrader grades one
   submission at a time), through the course's own nbgrader config;
2. ``grade_class`` with 1 worker, every layer on (the defaults);
3. ``grade_class`` with 2 workers, every layer on.

``--mixed``: the class an instructor meets (issue 30): besides the honest submissions, each
assignment gets a blank notebook (the release), a broken one (an answer cell that does not
parse) and one whose answer cell never ends (it costs the per-cell limit, ``--cell-timeout``,
the same in every mode). Scores that differ from plain nbgrader's are printed (the layers may
only lower a score, never raise it); what it does not measure is printed last.

Each mode gets a fresh copy of the course. Prints the seconds of each and their ratio to plain
nbgrader (below 1: faster than plain nbgrader), and checks every submission got full marks in
each mode. Not a test: the numbers depend on the machine and its load.

    .venv/bin/python benchmarks/vs_nbgrader.py                      # 00, 05, 09; 2 students
    .venv/bin/python benchmarks/vs_nbgrader.py --assignments all --students 1
    .venv/bin/python benchmarks/vs_nbgrader.py --mixed --students 3 --cell-timeout 30
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

from _course import a_class, released_course  # benchmarks/

ROOT = Path(__file__).resolve().parents[1]


def _plain(tmp: Path, names: list[str], students: int, mixed: bool, timeout: int
           ) -> tuple[float, dict]:
    from nbgrader.api import Gradebook

    config = released_course(tmp, names)
    api = instructor.make_api(config, overrides={"Execute": {"timeout": timeout}})
    cd = api.coursedir
    staged = tmp / "staged"
    kinds = a_class(tmp, names, students, staged, mixed)
    for (s, name) in kinds:
        shutil.copytree(staged / s / name, Path(cd.format_path(cd.submitted_directory, s, name)))
    t0 = time.monotonic()
    for name in names:
        who = sorted(s for s, n in kinds if n == name)
        instructor.autograde(name, who, api=api)
        instructor.feedback(name, who, api=api)
    seconds = time.monotonic() - t0
    with Gradebook(cd.db_url, cd.course_id) as gb:
        scores = {(s, n): (gb.find_submission(n, s).score, gb.find_submission(n, s).max_score)
                  for s, n in kinds}
    return seconds, scores


def _layers(tmp: Path, names: list[str], students: int, workers: int, mixed: bool, timeout: int
            ) -> tuple[float, dict]:
    config = released_course(tmp, names)
    subs = tmp / "class"
    a_class(tmp, names, students, subs, mixed)
    t0 = time.monotonic()
    report = grade_class(subs, config_path=config, out=tmp / "report",
                         settings=GradeSettings(workers=workers, resume=False, cell_timeout=timeout),
                         progress=False)
    seconds = time.monotonic() - t0
    return seconds, {(r["student"], r["assignment"]): (r["score"], r["max_score"])
                     for r in report.results}


NOT_MEASURED = ("not measured here: hostile submissions (tests/grading/test_hostile*.py grade "
                "them), a GPU, a Dask cluster (grading_speed.py), submissions that outlive "
                "--submission-timeout, the bubblewrap sandbox (sandbox_overhead.py), an LMS zip")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assignments", default="00_setup,05_oom_clinic,09_serving_memory",
                        help="comma-separated, or 'all'")
    parser.add_argument("--students", type=int, default=2, help="honest students per assignment")
    parser.add_argument("--mixed", action="store_true",
                        help="add a blank, a broken and a looping submission per assignment")
    parser.add_argument("--cell-timeout", type=int, default=30,
                        help="per-cell limit in seconds, the same for every mode (default 30)")
    args = parser.parse_args()
    every = sorted(p.name for p in (ROOT / "solutions").iterdir()
                   if p.is_dir() and p.name[:2].isdigit())
    names = every if args.assignments == "all" else args.assignments.split(",")
    n = (args.students + (3 if args.mixed else 0)) * len(names)
    print(f"{n} submissions ({args.students} honest" + (", 1 blank, 1 broken, 1 looping" if args.mixed
          else "") + f" per assignment) x {len(names)} assignments, cell limit "
          f"{args.cell_timeout} s, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    rows = []
    for label, run in (("plain nbgrader (autograde + generate_feedback)",
                        lambda t: _plain(t, names, args.students, args.mixed, args.cell_timeout)),
                       ("grade-class, every layer, 1 worker",
                        lambda t: _layers(t, names, args.students, 1, args.mixed, args.cell_timeout)),
                       ("grade-class, every layer, 2 workers",
                        lambda t: _layers(t, names, args.students, 2, args.mixed, args.cell_timeout))):
        tmp = Path(tempfile.mkdtemp(prefix="memlab-vs-nbgrader-"))
        try:
            seconds, scores = run(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        rows.append((label, seconds, scores))
        ratio = seconds / rows[0][1]
        differ = sorted(f"{s}/{a}: {scores[(s, a)][0]:g} (plain {rows[0][2][(s, a)][0]:g})"
                        for s, a in scores if scores[(s, a)][0] != rows[0][2].get((s, a), (None,))[0])
        short = sorted(f"{s}/{a}" for (s, a), (sc, mx) in scores.items()
                       if s.startswith("student") and sc != mx)
        print(f"  {seconds:7.1f} s  {ratio:5.2f}x plain  {label}"
              + (f"  honest below full marks: {short}" if short else "")
              + (f"  scores other than plain nbgrader's: {differ}" if differ else ""))
    print(NOT_MEASURED)


if __name__ == "__main__":
    main()
