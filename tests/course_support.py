"""Helpers shared by the tests that run the real nbgrader pipeline (import as
``from course_support import make_course``; tests/ is on sys.path through tests/conftest.py).

A module of its own, not conftest.py: a test folder may have its own conftest.py, and
``from conftest import ...`` would then find the wrong one.
"""
from __future__ import annotations

import contextlib
import copy
import shutil
import sys
from pathlib import Path
from typing import Iterable, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def memlab_namespaces_restored() -> Iterator[None]:
    """Code inside may ``importlib.reload`` memlab modules (as graded cells do); on exit every
    memlab module imported before gets its old namespace back, so later tests in this worker see
    the same function objects as before (identity checks, sentinels, the guard's originals)."""
    saved = {name: dict(mod.__dict__) for name, mod in list(sys.modules.items())
             if mod is not None and (name == "memlab" or name.startswith("memlab."))}
    try:
        yield
    finally:
        for name, namespace in saved.items():
            mod = sys.modules.get(name)
            if mod is not None:
                mod.__dict__.clear()
                mod.__dict__.update(namespace)


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def with_answer(nb, grade_id: str, source: str):
    """A copy of ``nb`` whose answer cell ``grade_id`` holds ``source``."""
    nb = copy.deepcopy(nb)
    cells = [c for c in nb.cells if nbgrader_meta(c).get("grade_id") == grade_id]
    assert len(cells) == 1, f"no answer cell {grade_id!r}"
    cells[0].source = source
    return nb


def make_course(root: Path, assignments: Iterable[str] | None = None):
    """A temporary course under ``root``: solutions/ (all, or ``assignments``) and the nbgrader
    config, released with the course's own ``release``. Returns the ``NbGraderAPI``.

    Fails (not skips) when the registered ``python3`` kernel is not this venv's Python:
    autograde would start the wrong interpreter."""
    from memlab.grading import course
    from memlab.tools import envcheck

    kernel = envcheck.check_kernel()
    if not kernel.ok:
        pytest.fail(f"{kernel.line()}\nautograde would start the wrong Python: run `make test`")
    import matplotlib.pyplot  # noqa: F401  font cache built here, not on a notebook's stderr

    ignore = shutil.ignore_patterns(".ipynb_checkpoints")
    names = list(assignments) if assignments is not None else None
    if names is None:
        shutil.copytree(ROOT / "solutions", root / "solutions", ignore=ignore)
    else:
        for name in names:
            shutil.copytree(ROOT / "solutions" / name, root / "solutions" / name, ignore=ignore)
    (root / "autograder").mkdir()
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", root / "autograder")
    api = course.make_api(root / "autograder" / "nbgrader_config.py")
    assert Path(api.coursedir.root) == root, "the config must compute the course root from its own path"
    course.release(names, api=api)
    return api
