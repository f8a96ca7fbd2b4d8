"""grade-class's resume keeps its word with filters (#30): a run limited to a student resumes
like any run, ``resume=False`` with a filter grades only those again and the ledger keeps the
rest, and a run that grades nothing keeps the timing of the batch that did.

Marked ``slow`` (kernels), in `make test`: 3 gradings of 00_setup, ~30 s on 2 cores.
"""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from course_support import course_notebooks, make_course, with_solution_answers
from memlab.autograde.batch.grade_class import GradeSettings, grade_class

A = "00_setup"


def _run(cls: Path, cfg: Path, out: Path, **kw):
    return grade_class(cls, config_path=cfg, out=out, progress=False,
                       settings=GradeSettings(workers=1, cell_timeout=60, submission_timeout=300,
                                              **kw))


@pytest.mark.slow
def test_filtered_runs_resume_and_keep_the_rest(tmp_path):
    api = make_course(tmp_path / "course", [A])
    cfg = Path(api.coursedir.root) / "autograder" / "nbgrader_config.py"
    release, solution = course_notebooks(api, A)
    cls, out = tmp_path / "class", tmp_path / "report"
    for student in ("a", "b"):
        (cls / student / A).mkdir(parents=True)
        nbformat.write(with_solution_answers(release, solution), cls / student / A / f"{A}.ipynb")
    first = _run(cls, cfg, out)
    assert (first.graded, first.skipped) == (2, 0)
    timing = json.loads((out / "summary.json").read_text())

    again = _run(cls, cfg, out, students=("a",))     # nothing missing, nothing changed
    assert (again.graded, again.skipped, len(again.results)) == (0, 1, 2)
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["workers"], summary["seconds"]) == (timing["workers"], timing["seconds"]), (
        "a run that graded nothing wrote its own (empty) timing over the batch's")

    forced = _run(cls, cfg, out, students=("a",), resume=False)
    assert (forced.graded, len(forced.results)) == (1, 2)
    ledger = [json.loads(x)["student"] for x in (out / "ledger.jsonl").read_text().splitlines()]
    assert sorted(ledger) == ["a", "b"], f"b's result must stay in the ledger: {ledger}"
    assert all(r["score"] == r["max_score"] for r in forced.results), forced.results
    # the exports an LMS and a gradebook spreadsheet take
    import csv

    roster = list(csv.DictReader(open(out / "roster.csv", newline="")))
    full = f"{forced.results[0]['max_score']:g}"
    assert [(r["student"], r[A], r["total"], r["max_total"], r["percent"]) for r in roster] == [
        ("a", full, full, full, "100.0"), ("b", full, full, full, "100.0")], roster
    lms = list(csv.DictReader(open(out / "lms.csv", newline="")))
    assert [(r["student_id"], r["assignment"], r["points"], r["points_possible"], r["provisional"])
            for r in lms] == [("a", A, full, full, "no"), ("b", A, full, full, "no")], lms


def test_the_roster_counts_a_missing_assignment_as_zero(tmp_path):
    import csv

    from memlab.autograde.batch.report import _write_rosters

    results = [
        {"student": "a", "assignment": "00_setup", "score": 3.0, "max_score": 3.0, "review": []},
        {"student": "a", "assignment": "04_accumulation", "score": 7.5, "max_score": 15.0,
         "review": ["test_written_answer: ..."]},
        {"student": "b", "assignment": "00_setup", "score": 1.0, "max_score": 3.0, "review": []},
    ]
    _write_rosters(tmp_path, results)
    roster = {r["student"]: r for r in csv.DictReader(open(tmp_path / "roster.csv", newline=""))}
    assert (roster["a"]["total"], roster["a"]["max_total"], roster["a"]["percent"]) == (
        "10.5", "18", "58.3")
    assert (roster["b"]["04_accumulation"], roster["b"]["total"], roster["b"]["percent"]) == (
        "", "1", "5.6"), "b never handed in 04: blank, and 0 of its 15 points in the total"
    lms = list(csv.DictReader(open(tmp_path / "lms.csv", newline="")))
    assert [(r["student_id"], r["assignment"], r["provisional"]) for r in lms] == [
        ("a", "00_setup", "no"), ("a", "04_accumulation", "yes"), ("b", "00_setup", "no")]
