"""The grader's side of a job's result: validated, then merged into the course gradebook.

Part of :mod:`memlab.autograde.batch.grade_class` (which re-exports the public names). A job's result is
untrusted data: :func:`validate_result` checks identity, graded cells, points, score ranges and
file names against the job's course bundle; :func:`_merge` writes a fit result into the course
gradebook and copies its autograded notebooks and feedback into the course (the grading process
is the gradebook's only writer); :func:`_merge_retrying` retries while the gradebook is locked;
:func:`gradebook_integrity` is SQLite's integrity check after the batch; the submission's files go
to the course's submitted/ folder, where formgrader counts them. A regrade keeps the
instructor's decisions on unchanged answers (:func:`memlab.autograde.decisions.reapply`).
"""
from __future__ import annotations

import math
import re
import shutil
import time
from pathlib import Path
from typing import Any

from memlab.autograde import decisions
from memlab.autograde.batch.intake import _read_tree, _safe_rel, _write_tree


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate_result(result: Any, job: dict) -> list[str]:
    """Problems that make a job's result unfit to merge (empty: fit). Checks identity, the
    graded cells and their points against the course bundle, score ranges and file names."""
    problems: list[str] = []
    if not isinstance(result, dict):
        return [f"result is a {type(result).__name__}, not a dict"]
    if (result.get("student"), result.get("assignment")) != (job["student"], job["assignment"]):
        problems.append("result is for another submission")
    if result.get("status") not in ("ok", "failed"):
        problems.append(f"unknown status {result.get('status')!r}")
    maxima = job["course"]["max_scores"] if isinstance(job["course"], dict) else None
    grades = result.get("grades")
    if not isinstance(grades, dict):
        return problems + ["grades missing"]
    for nb, cells in grades.items():
        if maxima is not None and nb not in maxima:
            problems.append(f"unknown notebook {nb!r}")
            continue
        if not isinstance(cells, dict):
            problems.append(f"grades of {nb!r} malformed")
            continue
        for gid, row in cells.items():
            if maxima is not None and gid not in maxima[nb]:
                problems.append(f"unknown grade cell {nb}/{gid}")
                continue
            try:
                auto, mx, manual = row
            except (TypeError, ValueError):
                problems.append(f"grade of {nb}/{gid} malformed")
                continue
            if isinstance(row, (str, bytes)) or not _is_number(mx):
                problems.append(f"grade of {nb}/{gid} malformed")
                continue
            if maxima is not None and float(mx) != maxima[nb][gid]:
                problems.append(f"{nb}/{gid}: max score {mx} is not the gradebook's {maxima[nb][gid]}")
            if auto is not None and not (isinstance(auto, (int, float)) and math.isfinite(auto)
                                         and 0 <= auto <= float(mx)):
                problems.append(f"{nb}/{gid}: score {auto!r} outside 0..{mx}")
    for name in (result.get("files") or {}):
        rel = _safe_rel(str(name))
        if rel is None or rel.parts[0] not in ("autograded", "feedback") or len(rel.parts) < 2:
            problems.append(f"file name {name!r} refused")
    for nb, pen in (result.get("penalties") or {}).items():
        if not (isinstance(pen, (int, float)) and math.isfinite(pen) and pen >= 0):
            problems.append(f"late penalty of {nb!r} refused")
    return problems


def _merge_retrying(gb, cd, job: dict, result: dict, timestamp, tries: int = 8) -> None:
    """:func:`_merge`, retried with back-off while the gradebook is locked (another program, a
    stray lock): a locked gradebook delays the batch, it never aborts it."""
    from sqlalchemy.exc import OperationalError

    for attempt in range(tries):
        try:
            return _merge(gb, cd, job, result, timestamp)
        except OperationalError as exc:
            gb.db.rollback()
            if "locked" not in str(exc).lower() or attempt == tries - 1:
                raise
            time.sleep(min(0.25 * 2 ** attempt, 8.0))


def gradebook_integrity(db_path: str | Path) -> str:
    """SQLite's ``PRAGMA integrity_check`` of the gradebook: "ok" or what it found."""
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)
        try:
            rows = con.execute("PRAGMA integrity_check").fetchall()
        finally:
            con.close()
    except sqlite3.Error as exc:
        return f"unreadable ({exc})"
    return "; ".join(r[0] for r in rows)[:500]


def _merge(gb, cd, job: dict, result: dict, timestamp) -> None:
    """Write one validated result into the course gradebook and copy its notebooks and
    feedback into the course's autograded/ and feedback/ folders (the only writer)."""
    student, assignment = result["student"], result["assignment"]
    gb.update_or_create_student(student)
    if timestamp is not None:  # from the submission's timestamp.txt, read by the grader itself
        gb.update_or_create_submission(assignment, student, timestamp=timestamp)
    else:
        gb.update_or_create_submission(assignment, student)
    sub = gb.find_submission(assignment, student)
    for snb in sub.notebooks:
        pen = result.get("penalties", {}).get(snb.name) if result["status"] == "ok" else None
        snb.late_submission_penalty = min(float(pen), float(snb.max_score)) if pen else None
        for g in snb.grades:
            got = result["grades"].get(snb.name, {}).get(g.name)
            if result["status"] != "ok" or got is None or got[0] is None:
                g.auto_score = 0.0
                g.needs_manual_grade = bool(got and got[2]) if result["status"] == "ok" else False
            else:
                g.auto_score = float(got[0])
                g.needs_manual_grade = bool(got[2])
    # the instructor's decisions stand while the answers they were made on do (decisions.py)
    again, aside = decisions.reapply(gb, cd, result, job.get("files") or {})
    gb.db.commit()
    decisions.record(cd, aside)
    result["reasons"] = list(result.get("reasons", [])) + [r for r in again
                                                           if r not in result.get("reasons", [])]
    _record_submission(cd, student, assignment, job.get("files") or {})
    for step in ("autograded", "feedback"):
        dst = Path(cd.format_path(getattr(cd, f"{step}_directory"), student, assignment))
        shutil.rmtree(dst, ignore_errors=True)
        files = {k.split("/", 1)[1]: v for k, v in result.get("files", {}).items()
                 if k.startswith(step + "/")}
        if files and result["status"] == "ok":
            if step == "feedback":
                files.update(_release_marks(job.get("files") or {}))
            dst.mkdir(parents=True, exist_ok=True)
            _write_tree(dst, files)


# What nbgrader's release_feedback reads beside each feedback page (nbgrader's own
# generate_feedback copies them from the submission): when it was submitted, and the secret
# the student's fetch_feedback finds its page by. Written by nbgrader's submit; taken from the
# submission as read, only as short plain text.
_RELEASE_MARKS = ("timestamp.txt", "submission_secret.txt")
_MARK = re.compile(rb"[ -~]{1,256}\n?")


def _release_marks(submitted: dict[str, bytes]) -> dict[str, bytes]:
    return {name: submitted[name] for name in _RELEASE_MARKS
            if name in submitted and _MARK.fullmatch(submitted[name])}


def _record_submission(cd, student: str, assignment: str, files: dict[str, bytes]) -> None:
    """The submission's files, as the grader read them, into the course's submitted/ folder,
    where nbgrader's collect puts them: formgrader counts a course's submissions there (it
    showed "0 submissions" for a class graded from a folder or zip elsewhere). Replaced whole,
    the new copy renamed into place only once written; nothing done when it is already there
    (grade-class run on the course's own submitted/ folder)."""
    if not files:
        return
    dst = Path(cd.format_path(cd.submitted_directory, student, assignment))
    try:
        if dst.is_dir() and _read_tree(dst) == files:
            return
    except (OSError, ValueError):
        pass
    new, old = dst.with_name(dst.name + ".memlab-new"), dst.with_name(dst.name + ".memlab-old")
    for p in (new, old):
        shutil.rmtree(p, ignore_errors=True)
    new.mkdir(parents=True)
    _write_tree(new, files)
    if dst.exists() or dst.is_symlink():
        dst.rename(old)
    new.rename(dst)
    shutil.rmtree(old, ignore_errors=True)
