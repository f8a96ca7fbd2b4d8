"""Instructor commands: nbgrader 0.9.6 with the course configuration.

Used by: `make release`, autograder/README.md, tests/test_nbgrader_pipeline.py.

    python -m memlab.instructor release [ASSIGNMENT ...]      solutions/ -> notebooks/
    python -m memlab.instructor autograde ASSIGNMENT [--student ID ...]
    python -m memlab.instructor feedback ASSIGNMENT [--student ID ...]
    python -m memlab.instructor export [--to FILE]             grades as CSV
    python -m memlab.instructor grade-class SUBMISSIONS [--workers N] [--out DIR] ...
                                 a whole class (folder or zip) in parallel: autograde,
                                 feedback, CSV, summary (memlab.grade_class)
    python -m memlab.instructor reviews [ASSIGNMENT]           answers flagged for manual review

Every command loads autograder/nbgrader_config.py (or ``--config FILE``) and drives nbgrader
through its Python API (``nbgrader.apps.NbGraderAPI``), one process for all students: the
CLI would pay ~5 s of start-up and ~3 s of ``import torch`` per call.
Submissions go in autograder/work/submitted/<student>/<assignment>/<notebook>.ipynb
(``nbgrader collect`` or ``zip_collect`` put them there; hand-placed ones have no timestamp).

Reference: https://nbgrader.readthedocs.io/en/stable/user_guide/creating_and_grading_assignments.html
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Iterable, Sequence

__all__ = [
    "default_config_path", "load_config", "make_api", "source_assignments", "normalize_notebook",
    "release", "autograde", "feedback", "export", "main", "KERNELSPEC",
]

# The single kernelspec of every committed notebook (`make lab` registers it under this name).
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (GPU Memory Lab)", "language": "python"}


class NbgraderError(RuntimeError):
    """An nbgrader step reported failure; the message holds its log and traceback."""


def default_config_path() -> Path:
    """autograder/nbgrader_config.py of the checkout this package is installed from
    (``pip install -e .``), else of the current directory."""
    here = Path(__file__).resolve().parents[2] / "autograder" / "nbgrader_config.py"
    return here if here.is_file() else Path.cwd() / "autograder" / "nbgrader_config.py"


def load_config(config_path: str | Path | None = None):
    """The traitlets Config of the course (its CourseDirectory.root comes from the file's path)."""
    from traitlets.config.loader import PyFileConfigLoader

    path = Path(config_path) if config_path is not None else default_config_path()
    if not path.is_file():
        raise FileNotFoundError(f"nbgrader config not found: {path}")
    return PyFileConfigLoader(path.name, path=str(path.parent)).load_config()


def _venv_bin_on_path() -> None:
    """nbgrader's Gradebook runs the ``alembic`` executable found on PATH (nbgrader/api.py,
    get_alembic_version). ``.venv/bin/python -m ...`` without an activated venv does not have
    .venv/bin on PATH, so put this interpreter's bin folder first."""
    bin_dir = str(Path(sys.executable).parent)
    parts = os.environ.get("PATH", "").split(os.pathsep)
    if bin_dir not in parts:
        os.environ["PATH"] = os.pathsep.join([bin_dir, *parts])


def make_api(config_path: str | Path | None = None, overrides: dict | None = None):
    """An ``NbGraderAPI`` bound to the course config (which creates autograder/work/).

    ``overrides``: ``{"Execute": {"timeout": 10}}``-style settings applied over the file."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    _venv_bin_on_path()
    config = load_config(config_path)
    for section, values in (overrides or {}).items():
        for key, value in values.items():
            setattr(config[section], key, value)
    coursedir = CourseDirectory(config=config)
    api = NbGraderAPI(coursedir=coursedir, config=config)
    api.log.setLevel(logging.WARNING)
    return api


def _check(result: dict, what: str) -> None:
    if not result.get("success", False):
        raise NbgraderError(f"nbgrader {what} failed:\n{result.get('log', '')}\n{result.get('error', '')}")


def source_assignments(api) -> list[str]:
    """Assignment folders in the source directory (solutions/), sorted."""
    src = Path(api.coursedir.root) / api.coursedir.source_directory
    return sorted(p.name for p in src.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def normalize_notebook(path: str | Path) -> None:
    """Strip outputs and execution counts, and set the course's single kernelspec."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, str(path))


def release(assignments: Iterable[str] | None = None, config_path: str | Path | None = None,
            api=None) -> list[Path]:
    """Regenerate the student notebooks (notebooks/) from solutions/ with nbgrader.

    ``generate_assignment --force`` replaces notebooks/<assignment>/ and records the assignment's
    graded cells in the gradebook (autograde restores locked cells from there). nbgrader refuses
    to add, remove or rename graded cells once submissions exist; editing a test is fine.
    """
    api = api or make_api(config_path)
    names = list(assignments) if assignments else source_assignments(api)
    written: list[Path] = []
    for name in names:
        _check(api.generate_assignment(name, force=True, create=True), f"generate_assignment {name}")
        out = Path(api.coursedir.format_path(api.coursedir.release_directory, ".", name))
        for nb_path in sorted(out.glob("*.ipynb")):
            normalize_notebook(nb_path)
            written.append(nb_path)
    return written


def _submitted_students(api, assignment: str) -> list[str]:
    return sorted(api.get_submitted_students(assignment))


def autograde(assignment: str, students: Sequence[str] | None = None,
              config_path: str | Path | None = None, api=None) -> list[str]:
    """Autograde the submissions of ``students`` (default: every submitted student)."""
    api = api or make_api(config_path)
    students = list(students) if students else _submitted_students(api, assignment)
    for student in students:
        _check(api.autograde(assignment, student, force=True, create=True),
               f"autograde {assignment} {student}")
    return students


def feedback(assignment: str, students: Sequence[str] | None = None,
             config_path: str | Path | None = None, api=None) -> None:
    """Write feedback HTML (hidden tests removed) to autograder/work/feedback/."""
    api = api or make_api(config_path)
    if students:
        for student in students:
            _check(api.generate_feedback(assignment, student, force=True),
                   f"generate_feedback {assignment} {student}")
    else:
        _check(api.generate_feedback(assignment, force=True), f"generate_feedback {assignment}")


def export(to: str | Path | None = None, config_path: str | Path | None = None, api=None) -> Path:
    """Export every grade in the gradebook as CSV (nbgrader's CsvExportPlugin)."""
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin

    api = api or make_api(config_path)
    target = Path(to) if to else Path(api.coursedir.root) / "autograder" / "work" / "grades.csv"
    target.parent.mkdir(parents=True, exist_ok=True)
    plugin = CsvExportPlugin(parent=api)
    plugin.to = str(target)
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        plugin.export(gb)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memlab.instructor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None, help="nbgrader config (default: autograder/nbgrader_config.py)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("release", help="regenerate notebooks/ from solutions/")
    p.add_argument("assignments", nargs="*")
    for name in ("autograde", "feedback"):
        p = sub.add_parser(name, help=f"{name} submissions in autograder/work/")
        p.add_argument("assignment")
        p.add_argument("--student", action="append", default=None)
    p = sub.add_parser("export", help="export grades as CSV")
    p.add_argument("--to", default=None)
    p = sub.add_parser("reviews", help="list autograded answers flagged for manual review "
                                       "(and, for 07, a clean regrade outside the kernel)")
    p.add_argument("assignment", nargs="?", default=None)
    p = sub.add_parser("grade-class", help="grade a whole class (folder or zip of <student>/<assignment>/)",
                       description="Autograde every assignment of every student in parallel, write "
                                   "feedback, grades.csv and a summary. See autograder/README.md.")
    p.add_argument("submissions", help="folder or .zip laid out as <student>/<assignment>/<notebook>.ipynb")
    p.add_argument("--out", default=None, help="report folder (default: autograder/work/class_report)")
    p.add_argument("--workers", type=int, default=0, help="grading processes (default: one per core)")
    p.add_argument("--cell-timeout", type=int, default=None,
                   help="seconds per cell (default: Execute.timeout of the config)")
    p.add_argument("--submission-timeout", type=int, default=900,
                   help="wall-clock seconds per student and assignment (default 900)")
    p.add_argument("--memory-mb", type=int, default=4096,
                   help="address-space limit per kernel in MiB (0: none; default 4096)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    args = parser.parse_args(argv)

    try:
        if args.command == "release":
            for path in release(args.assignments, args.config):
                print(f"released {path}")
        elif args.command == "autograde":
            for student in autograde(args.assignment, args.student, args.config):
                print(f"autograded {args.assignment} for {student}")
        elif args.command == "feedback":
            feedback(args.assignment, args.student, args.config)
            print(f"feedback written for {args.assignment}")
        elif args.command == "export":
            print(f"grades exported to {export(args.to, args.config)}")
        elif args.command == "reviews":
            from . import interview

            print(interview.format_reviews(interview.course_reviews(args.assignment, args.config)))
        elif args.command == "grade-class":
            from .grade_class import GradeSettings, grade_class

            cell_timeout = args.cell_timeout or int(load_config(args.config).Execute.timeout or 300)
            settings = GradeSettings(workers=args.workers, cell_timeout=cell_timeout,
                                     submission_timeout=args.submission_timeout,
                                     memory_mb=args.memory_mb)
            report = grade_class(args.submissions, config_path=args.config, out=args.out,
                                 settings=settings, progress=not args.quiet)
            n = len(report.results)
            print(f"graded {n} submissions with {report.workers} workers in {report.seconds:.0f} s "
                  f"({report.seconds / max(n, 1):.1f} s per submission)")
            print(f"report: {report.out}/summary.md (grades.csv, submissions.csv, questions.csv, "
                  f"review.csv, score_distribution.png)")
    except (NbgraderError, RuntimeError, FileNotFoundError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
