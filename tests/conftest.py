"""Shared pytest set-up.

- Tests marked ``gpu`` skip with a reason when CUDA is absent.
- Two tiers: ``make test`` runs ``-m "not full"`` (unit tests of every module, one real nbgrader
  pipeline per assignment, the layer and lint checks); ``make test-all`` runs everything. The
  modules of :data:`FULL_TIER` (the corpora, the browser, class-scale grading) and the tests
  marked ``full`` (the cheats of the pipeline) are the full tier.
- Slow tests sharing a course fixture are grouped on one pytest-xdist worker.
- tests/course_support.py: ``make_course`` (a temporary released nbgrader course),
  ``nbgrader_meta``, ``with_answer`` (read and edit graded cells by ``grade_id``).

Layout: tests/<layer>/ mirrors src/memlab/<layer>/ (measure, lessons, grading, tools);
tests/notebooks/ runs the notebooks themselves (nbgrader pipeline, browser); tests/cheats/ holds
per-assignment cheat submissions.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU_SKIP_REASON = "needs a CUDA device: torch.cuda.is_available() is False"


# The full tier (``make test-all``, CI): every test of these modules is marked ``full``.
FULL_TIER = (
    "tests/notebooks/test_mutants.py",            # the mutation corpus, graded as a class
    "tests/grading/test_hostile.py",              # the hostile corpus, every layer on
    "tests/grading/test_hostile_blind.py",        # the blind hostile rounds, a batch each
    "tests/notebooks/test_browser.py",            # JupyterLab in headless Chromium
    "tests/grading/test_grade_class.py",          # 28 broken and hostile submissions, regrades
    "tests/grading/test_grade_scale.py",          # Dask, zips, zygote lifetimes
    "tests/notebooks/test_first_hour.py",         # every visible test against warning answers
    "tests/notebooks/test_classroom_roundtrip.py",  # nbgrader's exchange, student to feedback
)


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


def _set_nodeid(item, nodeid: str) -> None:
    """pytest >= 9 keeps the node id in ``_id`` (pytest-xdist 3.8 still writes ``_nodeid``,
    which pytest 9 no longer reads: its loadgroup would silently not group)."""
    if hasattr(item, "_id"):
        from _pytest.nodeid import coerce_node_id

        item._id = coerce_node_id(nodeid)
    else:
        item._nodeid = nodeid


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    loadgroup = bool(config.getvalue("loadgroup")) if hasattr(config.option, "loadgroup") else False
    for item in items:
        if item.nodeid.split("::")[0] in FULL_TIER:
            item.add_marker(pytest.mark.full)
        group = _xdist_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
        else:  # a test's own xdist_group mark (test_mutants: one group per assignment)
            mark = item.get_closest_marker("xdist_group")
            group = (mark.args[0] if mark.args else mark.kwargs.get("name")) if mark else None
        if group:
            # pytest-xdist reads the group from the node id (``<id>@<group>``), which its own
            # worker hook sets by writing ``item._nodeid``: pytest 9 ignores that attribute, so
            # every group was split across workers (each repeating the group's expensive
            # fixture). Set the suffix here, where pytest 9 reads it.
            if loadgroup and "@" not in item.nodeid.rsplit("::", 1)[-1]:
                _set_nodeid(item, f"{item.nodeid}@{group}")
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch  # only imported when a gpu test was collected

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
    for item in gpu_items:
        item.add_marker(skip)


# ------------------------------------------------- mutation corpus summary (issue 14)
# "mutation corpus: N mutants, M caught" at the end of any session that ran
# tests/notebooks/test_mutants.py::test_mutant_is_caught, also under pytest-xdist (the verdict
# travels in each report's user_properties).
_MUTANT_TEST = "test_mutants.py::test_mutant_is_caught"
_results: dict[str, dict] = {}


def pytest_configure(config):
    # Under pytest-xdist every core already runs a worker: one torch/OpenMP thread per process
    # (the kernels and grading jobs a test starts inherit it). More threads only oversubscribe
    # the cores: the pipeline of 04 + 05 on 2 workers took 85 s with 2 threads, 76 s with 1.
    # (course_support.cores_per_worker says the same; this file stays self-contained: the
    # xdist-group test runs it alone)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if hasattr(config, "workerinput") and workers:
        threads = str(max(1, (os.cpu_count() or 1) // workers))
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ.setdefault(var, threads)
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    # registered by pytest-xdist when it is installed; harmless without it
    config.addinivalue_line("markers", "xdist_group(name): tests that share one worker under --dist loadgroup")
    config.addinivalue_line("markers", "full: the full tier only (make test-all; conftest.FULL_TIER)")


def pytest_runtest_logreport(report):
    if _MUTANT_TEST not in report.nodeid:
        return
    if report.skipped:  # deselected by MEMLAB_MUTANTS: not part of this corpus run
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
    escaped = sorted(k.split("@", 1)[0].split("[", 1)[-1].rstrip("]")
                     for k, r in _results.items() if not r["caught"])
    if escaped:
        terminalreporter.write_line(f"mutants not caught: {', '.join(escaped)}")
