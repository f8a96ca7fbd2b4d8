"""nbgrader 0.9.6 driven through its Python API with the course configuration.

The operations behind the instructor's CLI (:mod:`memlab.autograde.cli`), class grading
(:mod:`memlab.autograde.batch.grade_class`) and the interview review
(:mod:`memlab.autograde.review`): load the config, make an ``NbGraderAPI``, release,
autograde, feedback, export.
One process for all students: the nbgrader CLI would pay ~5 s of start-up and ~3 s of
``import torch`` per call.

Reference: https://nbgrader.readthedocs.io/en/stable/user_guide/creating_and_grading_assignments.html
"""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Iterable, Sequence

__all__ = [
    "default_config_path", "default_report_dir", "load_config", "make_api", "source_assignments", "normalize_notebook",
    "release", "autograde", "feedback", "export", "KERNELSPEC", "NbgraderError",
]

# The single kernelspec of every committed notebook (`make lab` registers it under this name).
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (GPU Memory Lab)", "language": "python"}


class NbgraderError(RuntimeError):
    """An nbgrader step reported failure; the message holds its log and traceback."""


def default_config_path() -> Path:
    """autograder/nbgrader_config.py of the checkout this package is installed from
    (``pip install -e .``), else of the current directory."""
    here = Path(__file__).resolve().parents[3] / "autograder" / "nbgrader_config.py"
    return here if here.is_file() else Path.cwd() / "autograder" / "nbgrader_config.py"


def default_report_dir(cd) -> Path:
    """autograder/work/class_report of the course: where grade-class writes without --out, and
    where ``reviews`` reads the queue."""
    return Path(cd.root) / "autograder" / "work" / "class_report"


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


