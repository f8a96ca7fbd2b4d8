"""The review round trip: what the grader cannot vouch for goes to a person, and the person's
decision is final (issues #30 and #32; memlab.autograde.decisions).

One class of 04_accumulation, graded by grade-class, then driven through the instructor's desk:

    flag       a written answer with a claim the rubric cannot check is PROVISIONAL: review.csv
               names the cell, ``reviews`` lists the same rows, formgrader's API shows the
               submission flagged and the cell as needing a manual grade
    decide     ``reviews --set`` (the CLI) and a manual score written as formgrader writes it
    reports    the gradebook score, submissions.csv, review.csv and the feedback say the decision
    regrade    grading the same answers again keeps both decisions, even a grading that fails
    resubmit   changed answers set the decision aside: the cell is back in review, with why

Marked ``slow`` (kernels), in `make test`: 5 gradings of a trimmed 04, ~1 minute on 2 cores.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import nbformat
import pytest

from course_support import (course_notebooks, make_course, trim_to_graded, with_answer,
                            with_solution_answers)
from memlab.autograde import cli as instructor
from memlab.autograde import decisions
from memlab.autograde.batch.grade_class import GradeSettings, grade_class

A = "04_accumulation"
CELL = "test_written_answer"       # 2 points, graded by the accumulation_equivalence rubric
MODEL = """
The gradient is linear in the loss, and backward() adds each micro-batch's gradient into p.grad
instead of overwriting it. The full batch's mean loss is the sum of the micro-batch mean losses
weighted by n_i / N, so the accumulated gradients sum to exactly the full-batch gradient, up to
float rounding. It is not the same when the micro-batches are weighted wrongly: dividing every
loss by k when the micro-batches hold different numbers of items or tokens, as with padding.
"""
UNCHECKED = MODEL + "Accumulation also makes every step use 30% less optimizer memory on a GPU.\n"


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _submit(folder: Path, student: str, nb) -> None:
    (folder / student / A).mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / student / A / f"{A}.ipynb")


def _grade(folder: Path, cfg: Path, out: Path, **kw):
    kw = {"workers": 2, "cell_timeout": 120, "submission_timeout": 600, **kw}
    return grade_class(folder, config_path=cfg, out=out, progress=False,
                       settings=GradeSettings(**kw))


def _score(api, student: str) -> tuple[float | None, float, bool]:
    with api.gradebook as gb:
        g = gb.find_grade(CELL, A, A, student)
        return g.manual_score, float(g.score), bool(g.needs_manual_grade)


@pytest.mark.slow
def test_flag_decide_regrade_resubmit(tmp_path, capsys):
    api = make_course(tmp_path / "course", [A])
    cfg = Path(api.coursedir.root) / "autograder" / "nbgrader_config.py"
    release, solution = course_notebooks(api, A)
    honest = trim_to_graded(with_solution_answers(release, solution), solution)
    unsure = with_answer(honest, "written_answer", f'answer = """{UNCHECKED}"""\n')
    cls, out = tmp_path / "class", tmp_path / "report"
    for student in ("ana", "cara"):
        _submit(cls, student, unsure)
    _submit(cls, "ben", honest)
    _grade(cls, cfg, out)

    # flag: the cell is named in review.csv, `reviews` lists exactly those rows, formgrader shows it
    review = _rows(out / "review.csv")
    assert {(r["student"], r["cell"]) for r in review} == {("ana", CELL), ("cara", CELL)}, review
    assert all("could not check" in r["why"] for r in review), review
    assert instructor.main(["--config", str(cfg), "reviews", "--report", str(out)]) == 0
    listed = capsys.readouterr().out
    assert listed.startswith(f"{len(review)} answer(s) to review"), listed
    assert "30% less optimizer memory" in listed
    assert api.get_assignment(A)["num_submissions"] == 3, "formgrader counts the class"
    shown = {s["student"]: s for s in api.get_notebook_submissions(A, A)}
    assert shown["ana"]["flagged"] and shown["ana"]["needs_manual_grade"]
    assert not shown["ben"]["flagged"] and not shown["ben"]["needs_manual_grade"]
    subs = {r["student"]: r for r in _rows(out / "submissions.csv")}
    assert "PROVISIONAL" in subs["ana"]["reason"] and "PROVISIONAL" not in subs["ben"]["reason"]
    assert _score(api, "ana")[1] > 1.5, "the rubric scores the true part: a person can lower it"
    q = {r["grade_id"]: r for r in _rows(out / "questions.csv")}[CELL]
    assert (q["submissions"], q["flagged"]) == ("3", "0.67"), q   # ana and cara of three
    assert (q["pass_rate"], q["mean"], q["partial"]) == ("1.00", "1.00", "0.00"), q

    # decide: ana through the CLI, cara as formgrader's GradeHandler.put writes a manual score
    assert instructor.main(["--config", str(cfg), "reviews", "--set", "ana", A, CELL, "1",
                            "--note", "false claim about optimizer memory", "--report",
                            str(out)]) == 0
    said = capsys.readouterr().out
    assert "test_written_answer: 1 of 2 set by the instructor" in said, said
    with api.gradebook as gb:
        g = gb.find_grade(CELL, A, A, "cara")
        g.manual_score, g.needs_manual_grade = 1.5, False
        gb.db.commit()
    assert instructor.main(["--config", str(cfg), "reviews", "--report", str(out)]) == 0
    assert capsys.readouterr().out.strip() == "nothing flagged for manual review"

    def decided_everywhere() -> None:
        assert _score(api, "ana") == (1.0, 1.0, False)
        assert _score(api, "cara") == (1.5, 1.5, False)
        subs = {r["student"]: r for r in _rows(out / "submissions.csv")}
        assert subs["ana"]["score"] == str(float(subs["ben"]["score"]) - 1).rstrip("0").rstrip(".")
        assert "decided by the instructor: test_written_answer: 1 of 2" in subs["ana"]["reason"]
        assert "false claim about optimizer memory" in subs["ana"]["reason"]
        assert "set by the formgrader" in subs["cara"]["reason"]
        for r in subs.values():
            assert "PROVISIONAL" not in r["reason"], r
        assert _rows(out / "review.csv") == []
        html = (tmp_path / "course" / "autograder" / "work" / "feedback" / "ana" / A
                / f"{A}.html").read_text()
        assert "1 / 2" in html.replace("1.0 / 2.0", "1 / 2"), "the feedback shows the decision"

    capsys.readouterr()
    from memlab.autograde.batch.grade_class import refresh_report
    refresh_report(cfg, out)  # cara's formgrader score reaches the reports
    decided_everywhere()

    # regrade the same answers: both decisions stand
    _grade(cls, cfg, out, resume=False)
    decided_everywhere()

    # ana hands in other answers: her decision is set aside, the cell is back in review
    _submit(cls, "ana", with_answer(honest, "written_answer", f'answer = """{MODEL}ok"""\n'))
    _grade(cls, cfg, out, students=("ana",))
    manual, _, needs = _score(api, "ana")
    assert manual is None and needs
    review = _rows(out / "review.csv")
    assert [(r["student"], r["cell"]) for r in review] == [("ana", CELL)], review
    assert "made on other answers" in review[0]["why"]
    assert _score(api, "cara") == (1.5, 1.5, False)
    ledger = [json.loads(x) for x in decisions.ledger_path(api.coursedir).read_text().splitlines()]
    assert [(d["student"], d["points"], d["source"]) for d in ledger] == [
        ("ana", 1.0, "instructor"), ("cara", 1.5, "formgrader"), ("ana", None, "instructor")]
    # a grading that fails on the same answers (over the wall-clock limit) keeps the decision
    failed = _grade(cls, cfg, out, resume=False, students=("cara",), submission_timeout=1)
    assert failed.by_submission[("cara", A)]["status"] == "failed"
    assert _score(api, "cara")[0] == 1.5, "a failed grading is no reason to drop a person's grade"


def test_a_decision_out_of_range_or_on_no_cell_is_refused(tmp_path):
    api = make_course(tmp_path / "course", ["00_setup"])
    with pytest.raises(decisions.DecisionError, match="no graded submission"):
        decisions.decide(api, "nobody", "00_setup", "test_tensor_bytes", 1)


def test_answers_fingerprint_counts_answer_cells_only():
    def nb(answer: str, output: str) -> dict:
        return {"cells": [
            {"cell_type": "code", "source": answer, "outputs": [],
             "metadata": {"nbgrader": {"solution": True, "grade_id": "a"}}},
            {"cell_type": "code", "source": "assert f()", "outputs": [{"text": output}],
             "metadata": {"nbgrader": {"grade": True, "grade_id": "t", "points": 1}}}]}

    same = decisions.answers_fingerprint(nb("x = 1", "ok"))
    assert same == decisions.answers_fingerprint(json.dumps(nb("x = 1", "other output")).encode())
    assert same != decisions.answers_fingerprint(nb("x = 2", "ok"))
    assert decisions.answers_fingerprint(b"not json") == ""


@pytest.mark.slow
def test_accept_keeps_every_score_as_the_decision(tmp_path, capsys):
    """``reviews --accept STUDENT ASSIGNMENT``: every grade cell's current score becomes the
    instructor's decision (no grading runs; the feedback is written again)."""
    api = make_course(tmp_path / "course", [A])
    cfg = Path(api.coursedir.root) / "autograder" / "nbgrader_config.py"
    release, solution = course_notebooks(api, A)
    cls, out = tmp_path / "class", tmp_path / "report"
    _submit(cls, "dan", trim_to_graded(with_solution_answers(release, solution), solution))
    _grade(cls, cfg, out)
    with api.gradebook as gb:
        before = {g.name: g.score
                  for snb in gb.find_submission(A, "dan").notebooks for g in snb.grades}
    assert instructor.main(["--config", str(cfg), "reviews", "--accept", "dan", A, "--report",
                            str(out)]) == 0
    said = capsys.readouterr().out
    assert said.count("set by the instructor") == len(before), said
    with api.gradebook as gb:
        after = {g.name: (g.manual_score, g.score)
                 for snb in gb.find_submission(A, "dan").notebooks for g in snb.grades}
    assert after == {k: (v, v) for k, v in before.items()}
    assert instructor.main(["--config", str(cfg), "reviews", "--accept", "dan", A, "nope"]) == 1
    assert "no grade cell 'nope'" in capsys.readouterr().err


def _require_of(solution, grade_id: str) -> tuple[str, ...]:
    """The ``require=`` parts the notebook's test cell ``grade_id`` grades its answer with."""
    import ast

    [cell] = [c for c in solution.cells
              if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    for node in ast.walk(ast.parse(cell.source)):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "require":
                    return tuple(ast.literal_eval(kw.value))
    raise AssertionError(f"{grade_id} passes no require=")


@pytest.mark.slow
@pytest.mark.full  # 24 gradings: the full tier's
def test_every_answer_the_rubric_flags_is_in_review_csv_and_reviews(tmp_path, capsys):
    """Issue 30's count: a class whose written answers are the blind rounds' (r7 and r8, the 24
    answers to 04's question, every class from strong to keyword salad), graded in one batch:
    review.csv lists the written-answer cell of exactly the students whose answer the rubric
    flags (grade_text with the notebook's own require=), and `reviews` lists as many rows as
    review.csv holds."""
    from memlab.grading.answers.grade import grade_text

    data = Path(__file__).resolve().parent / "data"
    answers = [json.loads(line)["answer"]
               for name in ("answers_blind_r7.jsonl", "answers_blind_r8.jsonl")
               for line in (data / name).read_text().splitlines()
               if json.loads(line)["rubric"] == "accumulation_equivalence"]
    assert len(answers) == 24
    api = make_course(tmp_path / "course", [A])
    cfg = Path(api.coursedir.root) / "autograder" / "nbgrader_config.py"
    release, solution = course_notebooks(api, A)
    honest = trim_to_graded(with_solution_answers(release, solution), solution)
    cls, out = tmp_path / "class", tmp_path / "report"
    for i, text in enumerate(answers):
        _submit(cls, f"s{i:02d}", with_answer(honest, "written_answer", f"answer = {text!r}\n"))
    _grade(cls, cfg, out)
    require = _require_of(solution, CELL)
    flagged = {f"s{i:02d}" for i, text in enumerate(answers)
               if grade_text(text, "accumulation_equivalence", require=require).needs_review}
    assert 0 < len(flagged) < len(answers), flagged
    review = _rows(out / "review.csv")
    assert {r["student"] for r in review if r["cell"] == CELL} == flagged, review
    assert instructor.main(["--config", str(cfg), "reviews", "--report", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"{len(review)} answer(s) to review")
