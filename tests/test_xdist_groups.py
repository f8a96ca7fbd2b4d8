"""tests/conftest.py keeps each xdist group on ONE worker under ``-n 2 --dist loadgroup``.

pytest-xdist 3.8 marks a group by writing ``item._nodeid``, which pytest 9 no longer reads:
without tests/conftest.py's own suffix every group was silently split, and each worker rebuilt
the group's expensive fixture (an assignment's mutation batch graded twice). Both kinds of
group are checked here in a real pytest-xdist run: an explicit ``xdist_group`` mark (as
tests/notebooks/test_mutants.py uses) and the automatic group of ``slow`` tests sharing a
parametrized module fixture (as tests/notebooks/test_nbgrader_pipeline.py uses).
"""
from __future__ import annotations

import json
from pathlib import Path

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py").read_text()

MODULE = '''
import json, os, time
import pytest

LOG = {log!r}


def _record(group):
    with open(LOG, "a") as fh:
        fh.write(json.dumps([group, os.environ.get("PYTEST_XDIST_WORKER")]) + "\\n")
    time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.xdist_group("explicit-a")
@pytest.mark.parametrize("i", range(6))
def test_explicit_a(i):
    _record("explicit-a")


@pytest.mark.slow
@pytest.mark.xdist_group("explicit-b")
@pytest.mark.parametrize("i", range(6))
def test_explicit_b(i):
    _record("explicit-b")


@pytest.fixture(scope="module", params=["x", "y"])
def shared(request):
    return request.param


@pytest.mark.slow
@pytest.mark.parametrize("i", range(4))
def test_auto(shared, i):
    _record("auto-" + shared)
'''


def test_each_group_runs_on_one_worker(pytester):
    log = pytester.path / "workers.jsonl"
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    gpu: gpu\n")
    pytester.makepyfile(test_groups=MODULE.format(log=str(log)))
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-p", "xdist", "-q")
    result.assert_outcomes(passed=20)
    seen: dict[str, set] = {}
    for line in log.read_text().splitlines():
        group, worker = json.loads(line)
        seen.setdefault(group, set()).add(worker)
    assert set(seen) == {"explicit-a", "explicit-b", "auto-x", "auto-y"}
    split = {g: sorted(w) for g, w in seen.items() if len(w) != 1}
    assert not split, f"groups split across workers: {split}"
    assert len(set().union(*seen.values())) == 2, "both workers should get work"
