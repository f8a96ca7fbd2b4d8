"""The instructor's decisions on the review queue: grades a person set, kept by every regrade.

A decision is nbgrader's manual score of one grade cell, the very field formgrader's manual
grading writes, so a score set in formgrader and one set with ``instructor reviews --set`` are
the same thing. Each decision is also a line of the course's decision ledger
(``decisions.jsonl`` beside the gradebook): the points, the note, and the fingerprint of the
answers it was made on (:func:`answers_fingerprint`, every answer cell's source, of the
submission as the grader read it: the course's submitted/ copy). A regrade (:func:`reapply`,
called by the merge of grade-class) keeps a decision while the answers are unchanged, whether
or not that grading succeeded; when they changed, the decision is set aside and the cell goes
back to review with that reason. A manual score found in the gradebook without a ledger line
(formgrader's) is adopted on the answers of the moment (:func:`adopt`).

Runs no learner code: it reads the gradebook, the ledger and submitted notebooks as data.
Used by :mod:`memlab.autograde.batch.merge` (regrades), :mod:`memlab.autograde.batch.report`
(what is decided) and :mod:`memlab.autograde.cli` (``reviews --set`` / ``--accept``).
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

__all__ = ["Decision", "DecisionError", "answers_fingerprint", "ledger_path", "load", "decide",
           "adopt", "reapply", "record", "decided_cells"]

Key = tuple[str, str, str, str]   # (student, assignment, notebook, grade_id)


class DecisionError(ValueError):
    """A decision that cannot be made (unknown submission or cell, points out of range)."""


@dataclass(frozen=True)
class Decision:
    student: str
    assignment: str
    notebook: str
    grade_id: str
    points: float | None          # None: the decision was withdrawn or set aside
    max_points: float
    note: str = ""
    answers: str = ""             # answers_fingerprint of the notebook it was made on
    source: str = "instructor"    # "instructor" (reviews --set/--accept) or "formgrader"
    at: float = 0.0

    @property
    def key(self) -> Key:
        return (self.student, self.assignment, self.notebook, self.grade_id)

    def line(self) -> str:
        note = f" ({self.note})" if self.note else ""
        return (f"{self.grade_id}: {self.points:g} of {self.max_points:g} set by the "
                f"{self.source}{note}")


def answers_fingerprint(nb: Any) -> str:
    """sha256 of a notebook's answer cells (nbgrader ``solution`` cells: grade id and source),
    from a notebook dict, JSON text or bytes. Outputs and other cells do not count: a decision
    is about what the learner wrote."""
    if isinstance(nb, (bytes, str)):
        try:
            nb = json.loads(nb)
        except ValueError:
            return ""
    cells = nb.get("cells", []) if isinstance(nb, dict) else []
    parts = []
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        if isinstance(meta, dict) and meta.get("solution"):
            src = cell.get("source", "")
            text = "".join(src) if isinstance(src, list) else str(src)
            parts.append([str(meta.get("grade_id", "")), text])
    return hashlib.sha256(json.dumps(sorted(parts)).encode()).hexdigest()[:24]


def ledger_path(cd) -> Path:
    """decisions.jsonl in the gradebook's folder (autograder/work/): the instructor's side."""
    return Path(cd.db_url.replace("sqlite:///", "", 1)).parent / "decisions.jsonl"


def load(cd) -> dict[Key, Decision]:
    """Standing decisions by cell: the ledger's last line per cell, withdrawn ones left out."""
    out: dict[Key, Decision] = {}
    path = ledger_path(cd)
    if path.is_file():
        for text in path.read_text().splitlines():
            try:
                d = Decision(**json.loads(text))
            except (ValueError, TypeError):
                continue  # a line cut by a crash
            out[d.key] = d
    return {k: d for k, d in out.items() if d.points is not None}


def record(cd, decisions: Iterable[Decision]) -> None:
    """Append ``decisions`` to the ledger."""
    path = ledger_path(cd)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        for d in decisions:
            fh.write(json.dumps(asdict(d)) + "\n")


def _submitted_fingerprint(cd, student: str, assignment: str, notebook: str) -> str:
    """The answers' fingerprint of the submission in the course's submitted/ folder (where
    grade-class and nbgrader's collect put it), "" when there is none."""
    path = Path(cd.format_path(cd.submitted_directory, student, assignment)) / f"{notebook}.ipynb"
    try:
        return answers_fingerprint(path.read_bytes())
    except OSError:
        return ""


def decide(api, student: str, assignment: str, grade_id: str | None = None,
           points: float | None = None, note: str = "", notebook: str | None = None,
           feedback: bool = True) -> list[Decision]:
    """Set the grade of ``grade_id`` (every grade cell of the submission when None) to
    ``points`` (None: accept the score it has now) as nbgrader's manual score, record it in
    the ledger and (``feedback``) write the submission's feedback again. Returns the decisions."""
    from nbgrader.api import Gradebook, MissingEntry

    cd = api.coursedir
    made: list[Decision] = []
    with Gradebook(cd.db_url, cd.course_id) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            raise DecisionError(f"no graded submission of {student}/{assignment} in the "
                                "gradebook") from None
        cells = [(snb, g) for snb in sub.notebooks for g in snb.grades
                 if grade_id in (None, g.name) and notebook in (None, snb.name)]
        if not cells:
            known = sorted(g.name for snb in sub.notebooks for g in snb.grades)
            raise DecisionError(f"{student}/{assignment} has no grade cell {grade_id!r} "
                                f"(grade cells: {', '.join(known)})")
        if grade_id is not None and len(cells) > 1:
            raise DecisionError(f"{grade_id!r} is in several notebooks of {assignment}: name one")
        for snb, g in cells:
            mx = float(g.max_score)
            got = float(g.score or 0.0) if points is None else float(points)
            if not (math.isfinite(got) and 0.0 <= got <= mx):
                raise DecisionError(f"{g.name}: {got:g} points is outside 0..{mx:g}")
            g.manual_score = got
            g.needs_manual_grade = False
            made.append(Decision(student, assignment, snb.name, g.name, got, mx, note,
                                 _submitted_fingerprint(cd, student, assignment, snb.name),
                                 "instructor", round(time.time(), 1)))
        gb.db.commit()
    record(cd, made)
    if feedback:
        from memlab.autograde import course

        course.feedback(assignment, [student], api=api)
    return made


def adopt(api) -> list[Decision]:
    """Record every manual score of the gradebook that the ledger does not hold (set in
    formgrader) as a decision on the answers the course holds now. Returns those adopted."""
    from nbgrader.api import Gradebook

    cd = api.coursedir
    standing = load(cd)
    new: list[Decision] = []
    with Gradebook(cd.db_url, cd.course_id) as gb:
        for a in gb.assignments:
            for sub in a.submissions:
                for snb in sub.notebooks:
                    for g in snb.grades:
                        key = (sub.student.id, a.name, snb.name, g.name)
                        d = standing.get(key)
                        if g.manual_score is None or (
                                d is not None and d.points == float(g.manual_score)):
                            continue
                        new.append(Decision(*key, float(g.manual_score), float(g.max_score), "",
                                            _submitted_fingerprint(cd, *key[:3]), "formgrader",
                                            round(time.time(), 1)))
    record(cd, new)
    return new


def reapply(gb, cd, result: dict, files: dict[str, bytes]) -> tuple[list[str], list[Decision]]:
    """After a regrade of one submission is merged (the gradebook session ``gb``, not yet
    committed; ``files``: the submission as the grader read it): keep each standing decision
    whose answers are unchanged (its manual score, no manual-grade flag), whether or not this
    grading succeeded, and set aside the others (manual score cleared). Returns the review
    reasons and the set-aside decisions, for :func:`record` once the gradebook is committed."""
    student, assignment = result["student"], result["assignment"]
    mine = [d for d in load(cd).values() if (d.student, d.assignment) == (student, assignment)]
    if not mine:
        return [], []
    now = {d.notebook: answers_fingerprint(files.get(f"{d.notebook}.ipynb", b"")) for d in mine}
    reasons, aside = [], []
    sub = gb.find_submission(assignment, student)
    grades = {(snb.name, g.name): g for snb in sub.notebooks for g in snb.grades}
    for d in mine:
        g = grades.get((d.notebook, d.grade_id))
        if g is None:
            continue
        if d.answers and now[d.notebook] == d.answers:
            g.manual_score = d.points
            g.needs_manual_grade = False
            continue
        g.manual_score = None
        g.needs_manual_grade = True
        aside.append(Decision(d.student, d.assignment, d.notebook, d.grade_id, None, d.max_points,
                              "set aside: the answers changed", now[d.notebook], d.source,
                              round(time.time(), 1)))
        reasons.append(f"{d.notebook}/{d.grade_id} needs review again: the {d.source}'s decision "
                       f"({d.points:g} of {d.max_points:g}) was made on other answers")
    return reasons, aside


def decided_cells(standing: dict[Key, Decision], student: str, assignment: str
                  ) -> dict[tuple[str, str], Decision]:
    """(notebook, grade_id) -> standing decision of one submission, from :func:`load`."""
    return {(d.notebook, d.grade_id): d for d in standing.values()
            if (d.student, d.assignment) == (student, assignment)}
