"""Shared pytest set-up.

- Tests marked ``gpu`` skip with a reason when CUDA is absent.
- Slow tests sharing a course fixture are grouped on one pytest-xdist worker; the costliest
  groups are handed out first (`_longest_first`).
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
    if loadgroup:
        _longest_first(items)
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch  # only imported when a gpu test was collected

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
    for item in gpu_items:
        item.add_marker(skip)


# ------------------------------------------------- scheduling: the longest groups first
# pytest-xdist's loadgroup hands the groups out in the order of the collection (its own
# reordering, by number of tests per group, is switched off in pytest_configure: it sent the
# browser's single long test and every other one-test group LAST, so one worker ran them while
# the other had nothing left). Here the slow groups go first, the most expensive first, and
# the quick tests last, where they fill the gaps. The figures are seconds per group on 2 busy
# cores (`make test PYTEST_ARGS=--durations=0`, 2026-12-01); only the ORDER depends on them,
# never a verdict. A slow module not listed counts 30 s; 05's grading runs cost about 5 times
# an average assignment's (its clinic measures a ladder of mixed-precision jobs).
_GROUP_COST_S = {
    "tests/grading/test_hostile.py": 450, "tests/notebooks/test_browser.py": 440,
    "tests/grading/test_grade_class.py": 205, "tests/grading/test_grade_scale.py": 110,
    "tests/notebooks/test_classroom_roundtrip.py": 64, "tests/notebooks/test_mutants.py": 60,
    "tests/notebooks/test_nbgrader_pipeline.py": 40, "tests/notebooks/test_first_hour.py": 12,
}
_ASSIGNMENT_FACTOR = {"05_oom_clinic": 5.0, "02_checkpointing": 1.3}


def _cost(item) -> float:
    if item.get_closest_marker("slow") is None:
        return 0.0
    cost = _GROUP_COST_S.get(item.nodeid.split("::")[0], 30)
    return cost * max([f for a, f in _ASSIGNMENT_FACTOR.items() if a in item.nodeid] or [1.0])


def _longest_first(items) -> None:
    """Stable sort: groups (``<id>@<group>``) by their most expensive test, descending."""
    group_of = lambda item: item.nodeid.rsplit("@", 1)[-1] if "@" in item.nodeid else item.nodeid  # noqa: E731
    cost: dict[str, float] = {}
    for item in items:
        cost[group_of(item)] = max(cost.get(group_of(item), 0.0), _cost(item))
    items.sort(key=lambda item: -cost[group_of(item)])


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
    # the controller hands out groups in collection order, longest first (_longest_first)
    if getattr(config.option, "loadscopereorder", None) is not None:
        config.option.loadscopereorder = False
    # registered by pytest-xdist when it is installed; harmless without it
    config.addinivalue_line("markers", "xdist_group(name): tests that share one worker under --dist loadgroup")


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
