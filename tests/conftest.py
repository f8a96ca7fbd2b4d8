"""Shared pytest set-up.

- Tests marked ``gpu`` skip with a reason when CUDA is absent.
- :func:`make_course`: a temporary nbgrader course (solutions/ + the course config, released),
  used by every test that runs the real nbgrader pipeline (tests/notebooks, tests/grading).
- :func:`nbgrader_meta`, :func:`with_answer`: read and edit graded cells by ``grade_id``.

Layout: tests/<layer>/ mirrors src/memlab/<layer>/ (measure, lessons, grading, tools);
tests/notebooks/ runs the notebooks themselves (nbgrader pipeline, browser); tests/cheats/ holds
per-assignment cheat submissions.
"""
from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Iterable

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU_SKIP_REASON = "needs a CUDA device: torch.cuda.is_available() is False"


def _xdist_group(item) -> str | None:
    """Slow tests that share an expensive module- or session-scoped fixture (a released course,
    one assignment's autograded batch) run on one xdist worker: group = module + the values of
    those fixtures' params (e.g. the pipeline module's ``graded`` per assignment)."""
    if item.get_closest_marker("slow") is None or item.get_closest_marker("xdist_group"):
        return None
    key = [item.nodeid.split("::")[0]]
    callspec = getattr(item, "callspec", None)
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for name, value in (callspec.params.items() if callspec else ()):
        fixturedefs = defs.get(name)
        if fixturedefs and fixturedefs[-1].scope in ("module", "package", "session", "class"):
            key.append(f"{name}={value}")
    return "::".join(key)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        group = _xdist_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch  # only imported when a gpu test was collected

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
    for item in gpu_items:
        item.add_marker(skip)


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


# ------------------------------------------------- mutation corpus summary (issue 14)
# "mutation corpus: N mutants, M caught" at the end of any session that ran
# tests/notebooks/test_mutants.py::test_mutant_is_caught, also under pytest-xdist (the verdict
# travels in each report's user_properties).
_MUTANT_TEST = "test_mutants.py::test_mutant_is_caught"
_results: dict[str, dict] = {}


def pytest_configure(config):
    # registered by pytest-xdist when it is installed; harmless without it
    config.addinivalue_line("markers", "xdist_group(name): tests that share one worker under --dist loadgroup")


def pytest_runtest_logreport(report):
    if _MUTANT_TEST not in report.nodeid:
        return
    if report.when == "call":
        props = dict(report.user_properties).get("mutant")
        _results[report.nodeid] = dict(props or {}, caught=bool(props and props["caught"] and report.passed))
    elif report.when == "setup" and report.failed:
        _results[report.nodeid] = {"caught": False}


def pytest_terminal_summary(terminalreporter):
    if not _results:
        return
    n, m = len(_results), sum(r["caught"] for r in _results.values())
    per = {}
    for r in _results.values():
        a = r.get("assignment", "?")
        per.setdefault(a, [0, 0])
        per[a][0] += 1
        per[a][1] += r["caught"]
    detail = ", ".join(f"{a}: {c}/{t}" for a, (t, c) in sorted(per.items()))
    terminalreporter.write_line(f"mutation corpus: {n} mutants, {m} caught ({detail})")
    escaped = sorted(k.split("[", 1)[-1].rstrip("]") for k, r in _results.items() if not r["caught"])
    if escaped:
        terminalreporter.write_line(f"mutants not caught: {', '.join(escaped)}")
