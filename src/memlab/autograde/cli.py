"""Instructor commands: nbgrader 0.9.6 with the course configuration.

Used by: `make release`, autograder/README.md, tests/notebooks/test_nbgrader_pipeline.py.

    python -m memlab.autograde release [ASSIGNMENT ...]      solutions/ -> notebooks/
    python -m memlab.autograde autograde ASSIGNMENT [--student ID ...]
    python -m memlab.autograde feedback ASSIGNMENT [--student ID ...]
    python -m memlab.autograde export [--to FILE]             grades as CSV
    python -m memlab.autograde grade-class SUBMISSIONS [--workers N | --scheduler ADDR]
                                 [--student ID] [--assignment A] [--no-resume] [--out DIR] ...
                                 a whole class (folder or zip) in parallel: autograde,
                                 feedback, CSV, summary (memlab.autograde.batch.grade_class); resumable
    python -m memlab.autograde reviews [ASSIGNMENT]           the open review queue
    python -m memlab.autograde reviews --set STUDENT ASSIGNMENT CELL POINTS [--note WHY]
    python -m memlab.autograde reviews --accept STUDENT ASSIGNMENT [CELL]
                                 the instructor's decision: nbgrader's manual score, kept by
                                 regrades while the answers are unchanged
                                 (memlab.autograde.decisions)

Every command loads autograder/nbgrader_config.py (or ``--config FILE``) and drives nbgrader
through its Python API (``nbgrader.apps.NbGraderAPI``), one process for all students: the
CLI would pay ~5 s of start-up and ~3 s of ``import torch`` per call.
Submissions go in autograder/work/submitted/<student>/<assignment>/<notebook>.ipynb
(``nbgrader collect`` or ``zip_collect`` put them there; hand-placed ones have no timestamp).

Reference: https://nbgrader.readthedocs.io/en/stable/user_guide/creating_and_grading_assignments.html
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from memlab.autograde.course import (  # noqa: F401  (re-exported: the commands' operations)
    KERNELSPEC, NbgraderError, autograde, default_config_path, export, feedback, load_config,
    make_api, normalize_notebook, release, source_assignments)

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except (NbgraderError, RuntimeError, FileNotFoundError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: grade-class said what it kept; no traceback
        if args.command != "grade-class":
            print("interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per operation."""
    parser = argparse.ArgumentParser(prog="python -m memlab.autograde",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None,
                        help="nbgrader config (default: autograder/nbgrader_config.py)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("release", help="regenerate notebooks/ from solutions/")
    p.add_argument("assignments", nargs="*")
    for name, why in (("autograde", " with nbgrader's plain autograde: UNSANDBOXED, no audit, "
                                    "no re-run (grade students with grade-class)"),
                      ("feedback", "")):
        p = sub.add_parser(name, help=f"{name} submissions in autograder/work/{why}")
        p.add_argument("assignment")
        p.add_argument("--student", action="append", default=None)
    p = sub.add_parser("export", help="export grades as CSV")
    p.add_argument("--to", default=None)
    _add_reviews(sub)
    _add_grade_class(sub)
    return parser


def _add_reviews(sub) -> None:
    p = sub.add_parser("reviews", help="the review queue (what grade-class could not vouch for), "
                                       "and the instructor's decisions on it",
                       description="Without options: list the open review queue. --set or "
                                   "--accept: decide a grade (nbgrader's manual score, as "
                                   "formgrader sets it); "
                                   "the feedback and the class report are written again, and every "
                                   "regrade keeps the decision while the answers are unchanged.")
    p.add_argument("assignment", nargs="?", default=None)
    p.add_argument("--set", nargs=4, metavar=("STUDENT", "ASSIGNMENT", "CELL", "POINTS"),
                   default=None,
                   help="set the grade of one grade cell (e.g. test_written_answer) to POINTS")
    p.add_argument("--accept", nargs="+", metavar="STUDENT ASSIGNMENT [CELL]", default=None,
                   help="keep the score the grader gave (one cell, or every cell of the "
                        "submission)")
    p.add_argument("--note", default="", help="why (shown in submissions.csv)")
    p.add_argument("--notebook", default=None, help="the notebook, when a cell name is in several")
    p.add_argument("--report", default=None,
                   help="class report folder to write again "
                        "(default: autograder/work/class_report)")


def _add_grade_class(sub) -> None:
    p = sub.add_parser("grade-class",
                       help="grade a whole class (folder or zip of <student>/<assignment>/)",
                       description="Autograde every assignment of every student in parallel, write "
                                   "feedback, grades.csv and a summary. See autograder/README.md.")
    p.add_argument("submissions",
                   help="folder or .zip laid out as <student>/<assignment>/<notebook>.ipynb")
    p.add_argument("--out", default=None,
                   help="report folder (default: autograder/work/class_report)")
    p.add_argument("--workers", type=int, default=0,
                   help="grading processes (default: one per core)")
    p.add_argument("--cell-timeout", type=int, default=None,
                   help="seconds per cell (default: Execute.timeout of the config)")
    p.add_argument("--submission-timeout", type=int, default=900,
                   help="wall-clock seconds per student and assignment (default 900)")
    p.add_argument("--memory-mb", type=int, default=4096,
                   help="address-space limit per kernel in MiB (0: none; default 4096)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="grade on a Dask cluster (tcp://host:8786) instead of local processes; "
                        "its workers need the same venv (see autograder/README.md)")
    p.add_argument("--student", action="append", default=None,
                   help="grade only this student (repeatable; what the ledger holds unchanged is "
                        "not graded again without --no-resume); the report still covers all")
    p.add_argument("--assignment", action="append", default=None,
                   help="grade only this assignment (repeatable; resumes like --student)")
    p.add_argument("--flat", default="", metavar="PRESET_OR_REGEX",
                   help="an LMS download with every student's notebook side by side: 'canvas' "
                        "(name_userid_submissionid_file.ipynb) or a regex with the groups "
                        "student and file (and optionally assignment)")
    p.add_argument("--no-resume", action="store_true",
                   help="grade everything again "
                        "(default: skip what the report's ledger already holds)")
    p.add_argument("--cold", action="store_true",
                   help="start a fresh interpreter per job and per kernel (slower; no warm fork)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run learner code unsandboxed (UNSAFE: it gets your rights)")
    p.add_argument("--sandbox", choices=("auto", "landlock", "bwrap"), default="auto",
                   help="which sandbox: Landlock on warm forks where usable, else bubblewrap "
                        "(auto, default); bwrap: always bubblewrap "
                        "(a fresh interpreter per kernel)")
    p.add_argument("--no-audit", action="store_true",
                   help="skip the static audit of answer cells (memlab.autograde.security.audit)")
    p.add_argument("--no-verdict", action="store_true",
                   help="trust nbgrader's in-kernel verdicts (skip the re-run outside the "
                        "learner's kernel, memlab.autograde.security.verdict)")


# `autograde` is nbgrader's own: said at every run, not only in the README (issue #30)
PLAIN_AUTOGRADE = ("WARNING: `autograde` is nbgrader's plain autograde: learner code runs in an "
                   "ordinary kernel with your rights (no sandbox, no static audit, no re-run of "
                   "the tests outside the learner's kernel). Use it on notebooks you trust; "
                   "grade students with `grade-class` (autograder/README.md, Security).")


def _run(args) -> int:
    """The command ``args`` names; its exit status."""
    if args.command == "release":
        for path in release(args.assignments, args.config):
            print(f"released {path}")
    elif args.command == "autograde":
        print(PLAIN_AUTOGRADE, file=sys.stderr)
        for student in autograde(args.assignment, args.student, args.config):
            print(f"autograded {args.assignment} for {student}")
    elif args.command == "feedback":
        feedback(args.assignment, args.student, args.config)
        print(f"feedback written for {args.assignment}")
    elif args.command == "export":
        print(f"grades exported to {export(args.to, args.config)}")
    elif args.command == "reviews":
        if args.set or args.accept:
            return _decide(args)
        from memlab.autograde import review

        queue = review.review_queue(args.assignment, args.config, args.report)
        print(review.format_reviews(queue))
    elif args.command == "grade-class":
        _grade_class(args)
    return 0


def _grade_class(args) -> None:
    """``grade-class``: the batch, then what it did in three lines."""
    from memlab.autograde.batch.grade_class import GradeSettings, grade_class

    cell_timeout = args.cell_timeout or int(load_config(args.config).Execute.timeout or 300)
    settings = GradeSettings(workers=args.workers, cell_timeout=cell_timeout,
                             submission_timeout=args.submission_timeout,
                             memory_mb=args.memory_mb, scheduler=args.scheduler,
                             students=tuple(args.student or ()), flat=args.flat,
                             assignments=tuple(args.assignment or ()),
                             resume=not args.no_resume, warm=not args.cold,
                             sandbox=not args.no_sandbox, sandbox_kind=args.sandbox,
                             audit=not args.no_audit,
                             verdict=not args.no_verdict)
    report = grade_class(args.submissions, config_path=args.config, out=args.out,
                         settings=settings, progress=not args.quiet)
    n = report.graded
    print(f"isolation: {report.isolation}")
    print(f"graded {n} submissions with {report.workers} workers in {report.seconds:.0f} s "
          f"({report.seconds / max(n, 1):.1f} s per submission); {report.skipped} already "
          f"graded (ledger); report covers {len(report.results)}")
    print(f"report: {report.out}/summary.md (grades.csv, submissions.csv, questions.csv, "
          f"review.csv, score_distribution.png)")


def _decide(args) -> int:
    """``reviews --set`` / ``--accept``: the decision, the feedback again, the report again."""
    from memlab.autograde import decisions
    from memlab.autograde.batch.grade_class import refresh_report

    if args.set:
        student, assignment, cell, points_text = args.set
        try:
            points: float | None = float(points_text)
        except ValueError:
            print(f"POINTS must be a number, not {points_text!r}", file=sys.stderr)
            return 2
    else:
        if len(args.accept) not in (2, 3):
            print("--accept STUDENT ASSIGNMENT [CELL]", file=sys.stderr)
            return 2
        student, assignment, cell, points = *args.accept[:2], (args.accept[2:] or [None])[0], None
    api = make_api(args.config)
    try:
        made = decisions.decide(api, student, assignment, cell, points,
                                note=args.note, notebook=args.notebook)
    except decisions.DecisionError as exc:
        print(exc, file=sys.stderr)
        return 1
    for d in made:
        print(f"{student}/{assignment}/{d.notebook} {d.line()}")
    print(f"feedback written again for {student}/{assignment}")
    report = refresh_report(args.config, args.report, api=api)
    print(f"class report written again: {report.out}/summary.md" if report else
          "no class report to write again (grade-class writes one)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
