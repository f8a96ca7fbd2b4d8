"""Fixtures and hooks of the notebook tests: the mutation-corpus summary line.

``mutation corpus: N mutants, M caught`` is printed at the end of any session that ran
tests/notebooks/test_mutants.py::test_mutant_is_caught (also under pytest-xdist: the verdict
travels in each report's user_properties).
"""
from __future__ import annotations

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
