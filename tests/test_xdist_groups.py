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


def test_longest_groups_are_handed_out_first():
    """The collection order loadgroup follows (xdist's own reorder by test count is off): the
    costliest slow groups first, a group's tests together, quick tests last in their order."""
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("suite_conftest", Path(__file__).with_name("conftest.py"))
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)

    def item(nodeid, slow=True):
        return SimpleNamespace(nodeid=nodeid, get_closest_marker=lambda name: object() if slow and name == "slow" else None)

    items = [item("tests/lessons/test_oom.py::test_a", slow=False),
             item("tests/notebooks/test_mutants.py::test_control[01_x]@mutants-01_x"),
             item("tests/notebooks/test_mutants.py::test_control[05_oom_clinic]@mutants-05_oom_clinic"),
             item("tests/notebooks/test_browser.py::test_lab"),
             item("tests/notebooks/test_mutants.py::test_caught[01_x-m1]@mutants-01_x"),
             item("tests/grading/test_new_module.py::test_b"),
             item("tests/lessons/test_oom.py::test_c", slow=False),
             item("tests/notebooks/test_mutants.py::test_caught[05_oom_clinic-m2]@mutants-05_oom_clinic")]
    conftest._longest_first(items)
    order = [i.nodeid.split("::")[1] for i in items]
    assert order == [
        "test_lab", "test_control[05_oom_clinic]@mutants-05_oom_clinic",
        "test_caught[05_oom_clinic-m2]@mutants-05_oom_clinic", "test_control[01_x]@mutants-01_x", "test_caught[01_x-m1]@mutants-01_x",
        "test_b", "test_a", "test_c"], order
