"""The class report: what ``grade-class`` writes after a batch, from the merged gradebook.

Part of :mod:`memlab.autograde.batch.grade_class` (which re-exports the public names).
:func:`_write_report` writes into the report folder: ``grades.csv`` (nbgrader's export),
``submissions.csv`` (score, status and the one-line reason of each submission,
:func:`_reason_text`), ``review.csv`` (what needs a human: edited cells, patched grading code,
flagged answers, each assignment's report hooks: :func:`_assignment_hooks`; each row names the
grade cell it is about, :func:`_cell_of`; a cell the instructor decided,
:mod:`memlab.autograde.decisions`, is closed), ``questions.csv`` (pass rate
per graded cell, mean share of its points, share with partial credit, share flagged),
``roster.csv`` (student x assignment, totals) and ``lms.csv`` (a row per student and assignment,
for an LMS's grade import), ``score_distribution.png``, ``summary.json`` and ``summary.md``.

Reads results and the gradebook; runs nothing (tests/test_layers.py).
"""
from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from memlab.autograde import decisions
from memlab.autograde.batch.intake import plain_text


@dataclass
class ClassReport:
    out: Path
    results: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    workers: int = 1
    graded: int = 0                    # jobs run by this call (the rest came from the ledger)
    skipped: int = 0
    isolation: str = ""                # "sandboxed (...)" or "unsandboxed (why)"
    integrity: str = ""                # PRAGMA integrity_check of the gradebook after the batch

    @property
    def by_submission(self) -> dict[tuple[str, str], dict]:
        return {(r["student"], r["assignment"]): r for r in self.results}


def _cell_of(why: str, grade_ids: set[str]) -> str | None:
    """The grade cell a review reason is about (its first word: ``test_x: ...``,
    ``nb/test_x needs ...``, 07's ``q9 ...``), else None: the whole submission."""
    text = why.removeprefix("flagged in the kernel's output: ").lstrip("\u00ab").strip()
    word = text.split(None, 1)[0].rstrip(":,;") if text else ""
    word = word.rsplit("/", 1)[-1]
    for gid in (word, f"test_{word}"):
        if gid in grade_ids:
            return gid
    return None


def _said(text: object, n: int = 160) -> str:
    """What a learner's process wrote (an error message, a line its output held), quoted: one
    line, none of the report's own separators (``;``), at most ``n`` characters. It can say
    anything ("all tests pass; decided by the instructor"), so it never reads as the report's."""
    t = " ".join(plain_text(text).split()).replace(";", ",").replace("\u00ab", "<").replace(
        "\u00bb", ">")
    return "\u00ab" + (t[:n] + "..." if len(t) > n else t) + "\u00bb"


def _reason_text(result: dict, decided: dict | None = None) -> tuple[str, list[str]]:
    """(one-line reason, review reasons) of a merged result; ``decided``: grade id -> the
    instructor's standing decision (memlab.autograde.decisions), never reported as lost."""
    decided = decided or {}
    parts = list(result["reasons"])
    review = [r for r in result["reasons"] if "edited" in r or "scores 0" in r or "renamed" in r
              or "duplicated" in r or "deleted" in r or "unknown grade cell" in r or "limit" in r
              or "gradebook" in r or r.startswith("audit:") or "independent re-run" in r
              or "needs review" in r]
    for nb, scan in sorted(result.get("scans", {}).items()):
        parts += scan["events"]
        for gid, t in sorted(scan["tests"].items()):
            # the kernel's own words (the learner's code raised or printed them), quoted
            if t["error"]:
                parts.append(f"{gid} failed ({_said(t['error'])})")
            elif t["stderr"]:
                parts.append(f"{gid} wrote to stderr ({_said(t['stderr'])})")
        for g in scan["guards"]:
            said = f"patched grading code, as the kernel reported it: {_said(g)}"
            parts.append(said)
            review.append(said)
        for r in scan["reviews"]:
            if not r.startswith("audit:"):  # the audit's own line: already in the reasons
                review.append(f"flagged in the kernel's output: {_said(r, 300)}")
        review += [e for e in scan["events"] if "memory" in e or "timeout" in e]
    lost = []
    for nb, cells in sorted(result.get("grades", {}).items()):
        for gid, (auto, mx, manual) in sorted(cells.items()):
            if gid in decided:
                continue
            if manual:
                review.append(f"{nb}/{gid} needs a manual grade")
            elif result.get("status") == "ok" and (auto or 0) < mx and not any(
                    p.startswith(f"{gid} ") for p in parts):
                lost.append(f"{gid} scored {auto or 0:g} of {mx:g}")
    parts += lost  # the reason never contradicts the score
    if not parts:
        parts = ["all tests pass"]
    seen: set[str] = set()
    review = [r for r in review if not (r in seen or seen.add(r))]
    return "; ".join(dict.fromkeys(parts)), review


def _flag_for_review(api, results: list[dict]) -> None:
    """Set nbgrader's ``flagged`` on every notebook of a submission with review items, and
    "needs manual grade" on each grade cell an item is about, so formgrader's "Flagged?" and
    "Needs manual grade?" show what review.csv lists (a flag a person set is never cleared
    here; a cell the instructor decided is not open)."""
    with api.gradebook as gb:
        for r in results:
            if not r.get("review"):
                continue
            try:
                sub = gb.find_submission(r["assignment"], r["student"])
            except Exception:  # noqa: BLE001 - not merged (refused): nothing to flag
                continue
            cells = set(r.get("review_cells", ()))
            for snb in sub.notebooks:
                snb.flagged = True
                for g in snb.grades:
                    if g.name in cells and g.manual_score is None:
                        g.needs_manual_grade = True
        gb.db.commit()


def _write_report(api, report: ClassReport, ignored: list[str]) -> None:
    """Every file of the class report in ``report.out`` (see the module doc)."""
    from memlab.autograde import course

    out = report.out
    course.export(out / "grades.csv", api=api)
    per_question = _merged_scores(api, report.results)
    rows, review_rows = _reason_rows(api, report)
    _flag_for_review(api, report.results)
    _write_csv(out / "submissions.csv", ["student", "assignment", "score", "max_score", "status",
                                         "reason", "isolation"], rows)
    _write_csv(out / "review.csv", ["student", "assignment", "cell", "why"], review_rows)
    q_rows = _question_rows(report.results, per_question)
    _write_csv(out / "questions.csv", ["assignment", "notebook", "grade_id", "submissions",
                                       "pass_rate", "mean", "partial", "flagged"], q_rows)
    _write_rosters(out, report.results)
    totals: dict[str, list[float]] = {}
    for r in report.results:
        t = totals.setdefault(r["student"], [0.0, 0.0])
        t[0] += r["score"]
        t[1] += r["max_score"]
    _plot(out / "score_distribution.png",
          {s: (v[0] / v[1] * 100 if v[1] else 0.0) for s, v in totals.items()})
    summary = {
        "students": len(totals), "submissions": len(report.results), "workers": report.workers,
        "graded_now": report.graded, "from_ledger": report.skipped,
        "seconds": round(report.seconds, 1),
        "seconds_per_submission": round(report.seconds / max(report.graded, 1), 2),
        "ignored_folders": ignored, "isolation": report.isolation,
        "gradebook_integrity": report.integrity,
        "questions": q_rows, "review": review_rows,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "summary.md").write_text("\n".join(_summary_lines(report, summary, rows)) + "\n",
                                    errors="backslashreplace")


def _merged_scores(api, results: list[dict]) -> dict[tuple[str, str, str], list[tuple[str, float]]]:
    """Set each result's score, max_score and late_seconds as merged (late penalties
    included); return (assignment, notebook, grade id) -> [(student, share of the cell's
    points)]."""
    per_question: dict[tuple[str, str, str], list[tuple[str, float]]] = {}
    with api.gradebook as gb:
        for r in results:
            sub = gb.find_submission(r["assignment"], r["student"])
            r["score"], r["max_score"] = float(sub.score), float(sub.max_score)
            r["late_seconds"] = float(sub.total_seconds_late or 0)
            for snb in sub.notebooks:
                for g in snb.grades:
                    if g.max_score:
                        per_question.setdefault((r["assignment"], snb.name, g.name), []).append(
                            (r["student"], min(1.0, float(g.score or 0) / float(g.max_score))))
    return per_question


def _reason_rows(api, report: ClassReport) -> tuple[list[dict], list[dict]]:
    """Set each result's reason, review items and review cells; return the rows of
    submissions.csv and review.csv."""
    rows, review_rows = [], []
    audits = _assignment_hooks(api, report.results)
    standing = decisions.load(api.coursedir)  # what the instructor decided (adopted by callers)
    for r in report.results:
        decided = {gid: d for (nb, gid), d in
                   decisions.decided_cells(standing, r["student"], r["assignment"]).items()}
        grade_ids = {gid for cells in r.get("grades", {}).values() for gid in cells}
        reason, review = _reason_text(r, decided)
        if r.get("late_seconds", 0) > 0:  # from timestamp.txt and the assignment's due date
            reason += f"; submitted late by {_duration(r['late_seconds'])}"
        review += [x for x in audits.get((r["student"], r["assignment"]), []) if x not in review]
        # an item about a decided cell is closed; one about the whole submission closes when
        # the instructor decided every cell (reviews --accept)
        everything = bool(grade_ids) and grade_ids <= set(decided)
        cells = {why: _cell_of(why, grade_ids) for why in review}
        review = [why for why in review if not everything and cells[why] not in decided]
        if decided:
            reason += "; decided by the instructor: " + ", ".join(
                d.line() for _, d in sorted(decided.items()))
        if review:  # the score is provisional: the reason never reads as a decided grade
            reason += f"; PROVISIONAL: {len(review)} item(s) in review.csv"
        r["reason"], r["review"] = reason, review
        r["review_cells"] = sorted({cells[w] for w in review if cells[w]})
        rows.append({"student": r["student"], "assignment": r["assignment"],
                     "score": f"{r['score']:g}", "max_score": f"{r['max_score']:g}",
                     "status": r["status"], "reason": reason,
                     "isolation": report.isolation.split(" (")[0]})
        for why in review:
            review_rows.append({"student": r["student"], "assignment": r["assignment"],
                                "cell": cells[why] or "", "why": why})
    return rows, review_rows


def _question_rows(results: list[dict],
                   per_question: dict[tuple[str, str, str], list[tuple[str, float]]]) -> list[dict]:
    """The rows of questions.csv: per graded cell, its pass rate, mean share of its points,
    share with partial credit and share flagged for review."""
    flagged = {(r["student"], r["assignment"], gid) for r in results
               for gid in r.get("review_cells", ())}
    return [{"assignment": a, "notebook": nb, "grade_id": gid, "submissions": len(v),
             "pass_rate": f"{sum(x >= 1.0 for _, x in v) / len(v):.2f}",
             "mean": f"{sum(x for _, x in v) / len(v):.2f}",
             "partial": f"{sum(0.0 < x < 1.0 for _, x in v) / len(v):.2f}",
             "flagged": f"{sum((st, a, gid) in flagged for st, _ in v) / len(v):.2f}"}
            for (a, nb, gid), v in sorted(per_question.items())]


def _summary_lines(report: ClassReport, summary: dict, rows: list[dict]) -> list[str]:
    """summary.md, line by line; what a submission wrote is escaped (:func:`_md`)."""
    secs = [r["seconds"] for r in report.results]
    q_rows, review_rows = summary["questions"], summary["review"]
    ignored = summary["ignored_folders"]
    lines = ["# Class grading summary", "",
             f"{summary['students']} students, {len(report.results)} submissions, "
             f"{report.workers} workers, "
             f"{report.seconds:.0f} s ({summary['seconds_per_submission']} s per submission; "
             f"slowest {max(secs, default=0):.0f} s).", "",
             f"Gradebook integrity check after the batch: {report.integrity}.", "",
             f"Isolation: {report.isolation}."
             + ("" if report.isolation.startswith("sandboxed") else
                " LEARNER CODE RAN WITH YOUR RIGHTS: see autograder/README.md, Security."), "",
             "![score distribution](score_distribution.png)", "",
             "## Per graded cell (low pass rate: the exercise may be too hard)", "",
             "| assignment | notebook | grade cell | submissions | pass rate | mean | partial | "
             "flagged |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {q['assignment']} | {q['notebook']} | {q['grade_id']} | {q['submissions']} | "
              f"{q['pass_rate']} | {q['mean']} | {q['partial']} | {q['flagged']} |" for q in q_rows]
    lines += ["", f"## Needs manual review ({len(review_rows)})", ""]
    lines += [f"- {_md(x['student'])}/{_md(x['assignment'])}: {_md(x['why'])}"
              for x in review_rows] or ["- nothing"]
    lines += ["", "## Submissions", "", "| student | assignment | score | reason |",
              "|---|---|---|---|"]
    lines += [f"| {_md(x['student'])} | {_md(x['assignment'])} | {x['score']}/{x['max_score']} | "
              f"{_md(x['reason'])} |" for x in rows]
    if ignored:
        lines += ["", "Ignored folders (not an assignment in the gradebook): " + ", ".join(ignored)]
    return lines


def _write_rosters(out: Path, results: list[dict]) -> None:
    """roster.csv: a row per student, a column per assignment (blank: not handed in, which
    counts 0 of its points in the total), total, max_total, percent; lms.csv: a row per student
    and assignment (points, points_possible, provisional) for an LMS's grade import."""
    assignments = sorted({r["assignment"] for r in results})
    maxima: dict[str, float] = {}
    by_student: dict[str, dict[str, dict]] = {}
    for r in results:
        maxima[r["assignment"]] = max(maxima.get(r["assignment"], 0.0), r["max_score"])
        by_student.setdefault(r["student"], {})[r["assignment"]] = r
    roster, lms = [], []
    for student, done in sorted(by_student.items()):
        total = sum(r["score"] for r in done.values())
        top = sum(maxima.values())
        roster.append({"student": student, **{a: f"{done[a]['score']:g}" if a in done else ""
                                              for a in assignments},
                       "total": f"{total:g}", "max_total": f"{top:g}",
                       "percent": f"{100 * total / top:.1f}" if top else "0.0"})
        lms += [{"student_id": student, "assignment": a, "points": f"{r['score']:g}",
                 "points_possible": f"{r['max_score']:g}",
                 "provisional": "yes" if r.get("review") else "no"}
                for a, r in sorted(done.items())]
    _write_csv(out / "roster.csv", ["student", *assignments, "total", "max_total", "percent"],
               roster)
    _write_csv(out / "lms.csv", ["student_id", "assignment", "points", "points_possible",
                                 "provisional"], lms)


def _duration(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _assignment_hooks(api, results: list[dict]) -> dict[tuple[str, str], list[str]]:
    """Review reasons from each assignment's own report hooks (``report_hooks`` of
    memlab.grading.assignments, e.g. 07's clean regrade of its answers outside the kernel), for
    each graded submission; an assignment without hooks costs nothing. A hook that fails adds
    a review reason naming it, never stops the report."""
    from memlab.grading.assignments import ASSIGNMENTS

    audits: dict[tuple[str, str], list[str]] = {}
    for r in results:
        entry = ASSIGNMENTS.get(r["assignment"])
        if r["status"] != "ok" or entry is None:
            continue
        for hook in entry.report_hooks:
            try:
                reasons = resolve_hook(hook)(api, r)
            except Exception as exc:
                reasons = [f"{hook} failed ({type(exc).__name__})"]
            if reasons:
                audits.setdefault((r["student"], r["assignment"]), []).extend(reasons)
    return audits


def resolve_hook(dotted: str):
    """``"package.module:function"`` -> the function (tests/grading/test_assignments.py resolves
    every hook of the registry)."""
    import importlib

    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


def _cell(value: object) -> object:
    """A CSV value a spreadsheet shows as text: one starting with = + - @ (a formula to Excel,
    LibreOffice and Sheets) is written with a leading apostrophe (OWASP, CSV injection)."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def _write_csv(path: Path, fields: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows({k: _cell(v) for k, v in row.items()} for row in rows)


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|<>~])")


def _md(text: object) -> str:
    """Text shown as itself in summary.md: markdown and HTML written by a submission (an image,
    a link, a heading, a table row) are escaped, never rendered."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def _plot(path: Path, percent: dict[str, float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(list(percent.values()), bins=[i * 10 for i in range(11)], color="#4c72b0", edgecolor="white")
    ax.set_xlabel("total score (% of the points of the graded assignments)")
    ax.set_ylabel("students")
    ax.set_title(f"Score distribution ({len(percent)} students)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
