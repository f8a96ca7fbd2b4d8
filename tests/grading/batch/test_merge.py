"""memlab.autograde.batch.merge.validate_result: a job's result is checked as data before it
reaches the gradebook (what a hostile grading child could send)."""
from __future__ import annotations

import math

import pytest

from memlab.autograde.batch.merge import validate_result

JOB = {"student": "ana", "assignment": "03_mixed_precision",
       "course": {"max_scores": {"03.ipynb": {"test_a": 2.0, "test_b": 1.0}}}}


def _result(**over):
    r = {"student": "ana", "assignment": "03_mixed_precision", "status": "ok",
         "grades": {"03.ipynb": {"test_a": (2.0, 2.0, None), "test_b": (0.0, 1.0, None)}},
         "files": {"autograded/03.ipynb": b"{}", "feedback/03.html": b""}, "penalties": {}}
    r.update(over)
    return r


def test_an_honest_result_is_fit():
    assert validate_result(_result(), JOB) == []


@pytest.mark.parametrize("over, problem", [
    ({"student": "bob"}, "result is for another submission"),
    ({"status": "great"}, "unknown status 'great'"),
    ({"grades": None}, "grades missing"),
    ({"grades": {"other.ipynb": {}}}, "unknown notebook 'other.ipynb'"),
    ({"grades": {"03.ipynb": {"test_z": (1.0, 1.0, None)}}}, "unknown grade cell 03.ipynb/test_z"),
    ({"grades": {"03.ipynb": {"test_a": (2.0, 9.0, None)}}},
     "max score 9.0 is not the gradebook's 2.0"),
    ({"grades": {"03.ipynb": {"test_a": (3.0, 2.0, None)}}}, "score 3.0 outside 0..2.0"),
    ({"grades": {"03.ipynb": {"test_a": (math.nan, 2.0, None)}}}, "score nan outside"),
    ({"grades": {"03.ipynb": {"test_a": "all"}}}, "grade of 03.ipynb/test_a malformed"),
    ({"files": {"../gradebook.db": b""}}, "file name '../gradebook.db' refused"),
    ({"files": {"answers/03.ipynb": b""}}, "file name 'answers/03.ipynb' refused"),
    ({"penalties": {"03.ipynb": -5}}, "late penalty of '03.ipynb' refused"),
])
def test_each_forgery_is_named(over, problem):
    problems = validate_result(_result(**over), JOB)
    assert any(problem in p for p in problems), problems


def test_a_non_dict_is_refused():
    assert validate_result(["ok"], JOB) == ["result is a list, not a dict"]


@pytest.mark.parametrize("row", ["abc", b"abc", (1.0, "2", None), (1.0, None, None),
                                 (1.0, float("inf"), None), (1.0, True, None)])
def test_a_malformed_grade_row_is_refused_not_raised(row):
    """A row that unpacks into three values but is no score (a 3-letter string, a max score
    that is no number) is refused with a reason; it never raises inside the merge."""
    problems = validate_result(_result(grades={"03.ipynb": {"test_a": row}}), JOB)
    assert problems == ["grade of 03.ipynb/test_a malformed"]


def test_a_result_that_cannot_be_recorded_scores_0_and_the_batch_goes_on(monkeypatch):
    """Recording one result (its files, its gradebook rows) can fail for a reason of its own:
    a file name longer than the course folder's path allows. That submission is recorded as 0
    with the reason; nothing is raised to the batch."""
    from memlab.autograde.batch import grade_class as gc

    recorded = []

    def merge(gb, cd, job, result, ts):
        if result.get("files"):
            raise OSError(36, "File name too long")
        recorded.append(result)

    class _DB:
        rolled = 0

        def rollback(self):
            _DB.rolled += 1

    gb = type("GB", (), {"db": _DB()})()
    monkeypatch.setattr(gc, "_merge_retrying", merge)
    got = gc.merge_or_zero(gb, None, JOB, _result(), None)
    assert recorded == [got] and _DB.rolled == 1
    assert got["status"] != "ok" and "could not be recorded (OSError" in " ".join(got["reasons"])
    assert all(v[0] == 0.0 for nb in got.get("grades", {}).values() for v in nb.values())
