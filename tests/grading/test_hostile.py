"""Issue 19: a hostile corpus of 01-07 (tests/grading/hostile/corpus.py) graded in ONE grade-class batch
next to honest controls (every assignment's solution, and its blank release: they also prove
that the verdict re-run outside the learner's kernel leaves a correct solution its full marks).
Hostile submissions leave out the demo cells grading does not need (a learner may delete them;
``course_support.trim_to_graded`` keeps the attacked cell and every cell it reads from); the
controls are whole notebooks.

Each hostile submission gets at most what the blank notebook of its assignment gets, and is
held by the layer it names (the audit's reason, the sandbox's empty view, or metadata repaired
from the release); every control keeps full marks; the gradebook passes SQLite's integrity
check and holds no foreign write; a regrade gives identical rows. Prints
"hostile corpus: N submissions, M held". Marked ``slow``: several minutes on 2 cores.
"""
from __future__ import annotations

import copy
import csv
import re
import shutil
import sqlite3
import sys
from pathlib import Path

import nbformat
import pytest

from memlab.autograde import course as instructor
from memlab.autograde.batch.grade_class import GradeSettings, grade_class
from memlab.tools import envcheck
from memlab.autograde.batch.runner import sandbox_state

sys.path.insert(0, str(Path(__file__).parent))
from hostile.corpus import HOSTILE, VERDICT_ONLY  # noqa: E402
from course_support import trim_to_graded  # noqa: E402  (tests/)

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir()
                     if p.is_dir() and p.name[:2].isdigit())  # controls: every assignment
SOLUTION_MARKERS = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")


def _gid(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _honest(release, solution):
    """The release with every answer cell filled from the solution (markers removed)."""
    nb = copy.deepcopy(release)
    answers = {_gid(c): c.source for c in solution.cells
               if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    for c in nb.cells:
        if _gid(c) in answers:
            c.source = "\n".join(line for line in answers[_gid(c)].splitlines() if not SOLUTION_MARKERS.match(line))
    return nb


def _hostile(release, gid, change):
    nb = copy.deepcopy(release)
    [cell] = [c for c in nb.cells if _gid(c) == gid]
    if isinstance(change, dict) and change.get("add_after"):  # a new cell, no nbgrader metadata
        nb.cells.insert(nb.cells.index(cell) + 1, nbformat.v4.new_code_cell(change["source"]))
        return nb
    if isinstance(change, str):
        cell.source = change.strip()
    else:
        change = dict(change)
        if "source" in change:
            cell.source = change.pop("source")
        cell.metadata["nbgrader"].update(change)
    return nb


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    if not envcheck.check_kernel().ok:
        pytest.fail("autograde would start the wrong Python: run `make test`")
    import matplotlib.pyplot  # noqa: F401

    root = tmp_path_factory.mktemp("hostile_course")
    for a in ASSIGNMENTS:
        shutil.copytree(ROOT / "solutions" / a, root / "solutions" / a,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    (root / "autograder").mkdir()
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", root / "autograder")
    instructor.release(ASSIGNMENTS, api=instructor.make_api(root / "autograder" / "nbgrader_config.py"))
    return root


def _write(course: Path, dest: Path, students: list[str]) -> None:
    for student in students:
        if student.startswith(("honest_", "blank_")):
            a = next(x for x in ASSIGNMENTS if x[:2] == student.split("_")[1])
        else:
            a = {**HOSTILE, **VERDICT_ONLY}[student][0]
        [rel_path] = sorted((course / "notebooks" / a).glob("*.ipynb"))
        release = nbformat.read(rel_path, as_version=4)
        if student.startswith("honest_"):
            nb = _honest(release, nbformat.read(course / "solutions" / a / rel_path.name, as_version=4))
        elif student.startswith("blank_"):
            nb = release
        else:  # trimmed of the demo cells (as a learner may delete them): the attack is kept
            _, gid, _, change = {**HOSTILE, **VERDICT_ONLY}[student]
            solution = nbformat.read(course / "solutions" / a / rel_path.name, as_version=4)
            nb = trim_to_graded(_hostile(release, gid, change), solution, keep={gid})
        folder = dest / student / a
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / rel_path.name)


CONTROLS = [f"{kind}_{a[:2]}" for a in ASSIGNMENTS for kind in ("honest", "blank")]
SETTINGS = GradeSettings(workers=2, cell_timeout=180, submission_timeout=600, memory_mb=4096)


@pytest.fixture(scope="module")
def graded(course, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile_subs")
    _write(course, tmp / "class", sorted(HOSTILE) + CONTROLS)
    report = grade_class(tmp / "class", config_path=course / "autograder" / "nbgrader_config.py",
                         out=tmp / "report1", settings=SETTINGS, progress=True)
    return course, tmp, report


def _answer_output(course: Path, student: str, assignment: str, gid: str) -> str:
    [path] = sorted((course / "autograder" / "work" / "autograded" / student / assignment).glob("*.ipynb"))
    nb = nbformat.read(path, as_version=4)
    [cell] = [c for c in nb.cells if _gid(c) == gid]
    return "".join(o.get("text", "") + o.get("evalue", "") for o in cell.outputs)


@pytest.mark.slow
def test_hostile_corpus_holds(graded):
    course, _, report = graded
    by = report.by_submission
    blank = {a: by[(f"blank_{a[:2]}", a)]["score"] for a in ASSIGNMENTS}
    held, problems = [], []
    for student, (a, gid, layer, change) in sorted(HOSTILE.items()):
        r = by[(student, a)]
        why = []
        if r["score"] > blank[a]:
            why.append(f"score {r['score']:g} > blank {blank[a]:g}")
        added = isinstance(change, dict) and change.get("add_after")
        if layer == "audit" and f"audit: {'added cell' if added else gid}" not in r["reason"]:
            why.append("no audit reason")
        if layer == "audit" and not any(x.startswith("audit:") for x in r["review"]):
            why.append("not listed for review")
        if layer == "sandbox":
            out = _answer_output(course, student, a, gid)
            if sandbox_state(SETTINGS)[0] and "found nothing: []" not in out:
                why.append(f"the sandbox showed it something: {out[:200]!r}")
        if layer == "precheck":
            if f"nbgrader metadata of '{gid}' edited" not in r["reason"]:
                why.append("metadata edit not reported")
            if r["max_score"] != by[(f"honest_{a[:2]}", a)]["max_score"]:
                why.append(f"max score changed to {r['max_score']:g}")
        if r["score"] == 0 and "all tests pass" in r["reason"]:
            why.append("reason contradicts score")
        (problems.append(f"{student}: {'; '.join(why)} [{r['reason'][:300]}]") if why else held.append(student))
    print(f"\nhostile corpus: {len(HOSTILE)} submissions, {len(held)} held "
          f"({report.isolation.split(' (')[0]})")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_controls_unchanged(graded):
    _, _, report = graded
    by = report.by_submission
    for a in ASSIGNMENTS:
        r = by[(f"honest_{a[:2]}", a)]
        assert r["score"] == r["max_score"] > 0, f"honest {a}: {r['score']}/{r['max_score']} ({r['reason']})"
        assert "failed" not in r["reason"] and not r["reason"].startswith("audit")


@pytest.mark.slow
def test_gradebook_intact(graded):
    course, _, report = graded
    con = sqlite3.connect(course / "autograder" / "work" / "gradebook.db")
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("SELECT COUNT(*) FROM submitted_assignment").fetchone()[0] == len(HOSTILE) + len(CONTROLS)
    assert con.execute("SELECT COUNT(*) FROM grade WHERE manual_score IS NOT NULL").fetchone()[0] == 0
    # the test cells in the gradebook are the release's (nobody rewrote them)
    n_pass = con.execute("SELECT COUNT(*) FROM source_cell WHERE source = 'pass'").fetchone()[0]
    assert n_pass == 0


@pytest.mark.slow
def test_regrade_identical(graded):
    course, tmp, report = graded
    # controls of two quick assignments (a regrade proves determinism: 09 measures, 07 grades text)
    again = [s for s, h in HOSTILE.items() if h[2] in ("sandbox", "precheck")] + ["honest_09", "blank_07"]
    _write(course, tmp / "again", again)
    second = grade_class(tmp / "again", config_path=course / "autograder" / "nbgrader_config.py",
                         out=tmp / "report2", settings=SETTINGS, progress=False)

    def rows(path):
        with open(path, newline="") as fh:
            return {(r["student"], r["assignment"]): r for r in csv.DictReader(fh)}

    first, redo = rows(report.out / "submissions.csv"), rows(second.out / "submissions.csv")
    for key, row in redo.items():
        assert row == first[key], f"{key} graded differently the second time"


@pytest.mark.slow
def test_verdict_layer_alone(graded, tmp_path):
    """With the static audit switched off, forgeries of the kernel's report fool nbgrader's
    in-kernel verdict; the independent re-run outside the learner's kernel
    (memlab.autograde.security.verdict) holds each at the blank notebook's score and says so.

    The honest and blank controls are the main batch's (``graded``): the audit can only refuse
    or flag a submission, and it did neither to them (asserted below), so their scores are what
    audit=False would give; the verdict re-run, the layer under test, is on in both batches.
    Grading them again would cost two whole 02 notebooks, each run twice, and prove nothing more."""
    course, _, main = graded
    a = "02_checkpointing"
    _write(course, tmp_path / "class", sorted(VERDICT_ONLY))
    settings = GradeSettings(workers=2, cell_timeout=180, submission_timeout=600, memory_mb=4096,
                             audit=False)
    report = grade_class(tmp_path / "class", config_path=course / "autograder" / "nbgrader_config.py",
                         out=tmp_path / "report", settings=settings, progress=False)
    by = report.by_submission
    honest, blank = main.by_submission[("honest_02", a)], main.by_submission[("blank_02", a)]
    assert honest["score"] == honest["max_score"] > 0, honest["reason"]
    assert not any("audit" in x for x in honest["review"] + blank["review"]), (
        "the audit flagged a control, so the main batch's controls do not stand for audit=False")
    problems = []
    for student in sorted(VERDICT_ONLY):
        r = by[(student, a)]
        if r["score"] > blank["score"]:
            problems.append(f"{student}: {r['score']:g} > blank {blank['score']:g} [{r['reason'][:300]}]")
        elif "independent re-run" not in r["reason"]:
            problems.append(f"{student}: the kernel was not fooled, so this entry proves nothing "
                            f"[{r['reason'][:300]}]")
        elif not any("independent re-run" in x for x in r["review"]):
            problems.append(f"{student}: not listed for review")
    print(f"\nverdict layer alone: {len(VERDICT_ONLY)} kernel forgeries, "
          f"{len(VERDICT_ONLY) - len(problems)} held by the re-run")
    assert not problems, "\n".join(problems)
