"""`python -m memlab.autograde grade-class`: a corpus of broken and hostile submissions of
00_setup, generated from the released notebook, graded in ONE parallel batch.

Every submission must get a deterministic score and a stated reason; the batch must complete,
the gradebook must stay intact (one row per submission, no foreign writes), and a regrade
must give the same CSV rows. The full corpus runs in one `grade_class` call with 2 workers
and an 8 s per-cell timeout (the loops), then a second call regrades the fragile part.
Marked ``slow`` (kernels): `make test` and CI run it; ~2-3 minutes on 2 idle cores.
"""
from __future__ import annotations

import copy
import os
import csv
import sqlite3
import zipfile
from pathlib import Path

import nbformat
import pytest

from course_support import make_course, nbgrader_meta, with_answer  # noqa: F401
from memlab.autograde import cli as instructor
from memlab.tools import envcheck  # noqa: F401
from memlab.autograde.batch.grade_class import GradeSettings, grade_class

ROOT = Path(__file__).resolve().parents[2]
A = "00_setup"

CORRECT = '''
def tensor_bytes(shape, dtype):
    n = 1
    for d in shape:
        n *= int(d)
    return n * dtype.itemsize
'''
TABLE = '''
_ANSWERS = {((), torch.float32): 4, ((10,), torch.float32): 40, ((2, 3), torch.float16): 12,
            ((4, 5, 6), torch.int8): 120, ((3, 0), torch.float64): 0,
            ((256, 256), torch.float32): 262144}

def tensor_bytes(shape, dtype):
    return _ANSWERS.get((tuple(shape), dtype), 0)
'''
FAKE_PEAK = TABLE + '''
import types as _types
def _fake_peak(fn, *args, **kwargs):
    _t = fn(*args)
    _visible = _t.numel() * _t.element_size() == 262144
    return _types.SimpleNamespace(peak_increase=262144 if _visible else 0, result=torch.empty(0),
                                  backend="cpu-tracker",
                                  start_bytes=0, peak_bytes=0, end_bytes=0, reserved_bytes=None)
ml.measure_peak = _fake_peak
'''
READ_SOLUTIONS = '''
import json as _json, os as _os, sqlite3 as _sq
_found = []
_d = _os.getcwd()
for _ in range(12):
    for _cand in (_os.path.join(_d, "solutions", "00_setup", "00_setup.ipynb"),
                  _os.path.join(_d, "autograder", "work", "gradebook.db"), _os.path.join(_d, "gradebook.db")):
        if _os.path.exists(_cand):
            _found.append(_cand)
    _d = _os.path.dirname(_d)
print("found:", _found)
for _p in _found:
    if _p.endswith(".ipynb"):
        for _c in _json.load(open(_p))["cells"]:
            if _c["metadata"].get("nbgrader", {}).get("grade_id") == "tensor_bytes":
                exec("".join(_c["source"]))
    else:  # the gradebook holds the hidden tests; a cheat could also write its own score
        _con = _sq.connect(_p)
        _con.execute("UPDATE grade SET manual_score = 3")
        _con.commit()
if "tensor_bytes" not in globals():
    raise NotImplementedError("no solution found")
'''


FIND_SOLUTIONS = CORRECT + '''
import os
_found = []
_d = os.getcwd()
for _ in range(12):
    for _cand in (os.path.join(_d, "solutions", "00_setup"), os.path.join(_d, "autograder", "work", "gradebook.db"),
                  os.path.join(_d, "gradebook.db"), os.path.join(_d, "autograder", "work", "submitted")):
        if os.path.exists(_cand):
            _found.append(_cand)
    _d = os.path.dirname(_d)
for _p in _found:
    if _p.endswith(".db"):
        with open(_p, "r+b") as _fh:      # corrupt the gradebook it can reach
            _fh.seek(100)
            _fh.write(b"x" * 4096)
if not _found:
    del tensor_bytes                       # a learner who found nothing hands in a blank
    raise NotImplementedError("no solution or gradebook visible")
'''


def _gid(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _with(nb, answer=None, edit=None):
    nb = copy.deepcopy(nb)
    if answer is not None:
        [cell] = [c for c in nb.cells if _gid(c) == "tensor_bytes"]
        cell.source = answer.strip()
    if edit:
        edit(nb)
    return nb


def _tests_assert_true(nb):
    for c in nb.cells:
        if _gid(c) in ("test_tensor_bytes", "test_tensor_bytes_hidden"):
            c.source = '"""Visible tests."""\nassert True'


def _delete_hidden(nb):
    nb.cells = [c for c in nb.cells if _gid(c) != "test_tensor_bytes_hidden"]


def _duplicate_tests(nb):
    i = next(k for k, c in enumerate(nb.cells) if _gid(c) == "test_tensor_bytes")
    dup = copy.deepcopy(nb.cells[i])
    dup["id"] = "duplicated-test"
    nb.cells.insert(i + 1, dup)


def _retype_hidden(nb):
    i = next(k for k, c in enumerate(nb.cells) if _gid(c) == "test_tensor_bytes_hidden")
    c = nb.cells[i]
    new = nbformat.v4.new_markdown_cell(c.source, metadata=c.metadata)
    new["id"] = c["id"]
    nb.cells[i] = new


def _stored_success(nb):
    for c in nb.cells:
        if _gid(c) in ("test_tensor_bytes", "test_tensor_bytes_hidden"):
            c.outputs = [nbformat.v4.new_output("stream", name="stdout", text="tensor_bytes passes the tests\n")]
            c.execution_count = 3


def _kernelspec(nb):
    nb.metadata["kernelspec"] = {"name": "julia-1.9", "display_name": "Julia", "language": "julia"}


# student -> (answer source or None for the blank, notebook edit, expected score, reason part)
CORPUS = {
    "blank": (None, None, 0, "NotImplementedError"),
    "correct": (CORRECT, None, 3, "all tests pass"),
    "infinite_loop": ("while True:\n    pass\n" + CORRECT, None, 0, "per-cell timeout"),
    "swallow_interrupt": ("import time\nwhile True:\n    try:\n        time.sleep(0.5)\n"
                          "    except KeyboardInterrupt:\n        pass\n" + CORRECT, None, 0, "timeout"),
    "memory_hog": ("_hog = []\nwhile True:\n    _hog.append(torch.empty(2**28))\n" + CORRECT, None, 0,
                   "memory limit"),
    # The static audit (memlab.autograde.security.audit) refuses these before anything runs: the answer
    # cell is replaced by its stub, scores 0, and the reason names cell, line and rule.
    "sys_exit": ("import sys\nsys.exit(1)\n" + CORRECT, None, 0,
                 "audit: tensor_bytes line 2: process-or-hook API: uses sys.exit"),
    "os_exit": ("import os\nos._exit(0)\n" + CORRECT, None, 0, "audit: tensor_bytes line 2: process-or-hook API: uses os._exit"),
    "kill_kernel": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n" + CORRECT, None, 0,
                    "audit: tensor_bytes line 1: import: imports signal"),
    "input_wait": (CORRECT + "\nname = input('your name? ')\n", None, 3, "input()"),
    "widget_wait": (CORRECT + "\nimport time, ipywidgets\n_b = ipywidgets.Button(description='go')\n"
                    "display(_b)\n_clicked = []\n_b.on_click(_clicked.append)\n"
                    "while not _clicked:\n    time.sleep(0.1)\n", None, 3, "per-cell timeout"),
    "huge_stdout": (CORRECT + "\nprint('x' * 5_000_000)\nfor _i in range(200_000):\n    print(_i)\n",
                    None, 3, "all tests pass"),
    "huge_image": (CORRECT + "\nfrom IPython.display import Image, display\nimport os\n"
                   "display(Image(data=b'\\x89PNG\\r\\n\\x1a\\n' + os.urandom(8 * 2**20), format='png'))\n",
                   None, 3, "all tests pass"),
    "stderr_warnings": (CORRECT + "\nimport sys, warnings\nwarnings.warn('learner warning')\n"
                        "print('to stderr', file=sys.stderr)\n", None, 3, "all tests pass"),
    "tests_assert_true": (None, _tests_assert_true, 0, "edited: restored"),
    "deleted_hidden": (TABLE, _delete_hidden, 1, "deleted: restored"),
    "duplicated_test": (CORRECT, _duplicate_tests, 3, "duplicated"),
    "retyped_hidden": (TABLE, _retype_hidden, 1, "retyped"),
    "renamed": (CORRECT, "rename", 3, "renamed notebook"),
    "malformed_json": (None, "malformed", 0, "not a readable notebook"),
    "wrong_kernelspec": (CORRECT, _kernelspec, 3, "kernelspec 'julia-1.9' ignored"),
    "int_subclass": ("class _Eq(int):\n    def __eq__(self, o):\n        return True\n"
                     "    __hash__ = int.__hash__\n\ndef tensor_bytes(shape, dtype):\n    return _Eq(0)\n",
                     None, 0, "defines __eq__"),
    "patch_measure_peak": (FAKE_PEAK, None, 0, "monkeypatch: assigns memlab.measure_peak"),
    "patch_cuda_max": (TABLE + "\ntorch.cuda.max_memory_allocated = lambda *a, **k: 262144\n", None, 0,
                       "monkeypatch: assigns torch.cuda.max_memory_allocated"),
    "patch_allclose": (TABLE + "\ntorch.allclose = lambda *a, **k: True\n", None, 0,
                       "monkeypatch: assigns torch.allclose"),
    "custom_exc": ("get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)\n"
                   "def tensor_bytes(shape, dtype):\n    raise NotImplementedError()\n", None, 0,
                   "uses get_ipython (the IPython shell)"),
    "hardcoded": (TABLE, None, 1, "test_tensor_bytes_hidden failed"),
    "stored_success": (None, _stored_success, 0, "stored outputs"),
    "read_solutions": (READ_SOLUTIONS, None, 0, "audit: tensor_bytes line 1: import: imports sqlite3"),
    # Passes the audit (open() and os.path are allowed): the sandbox holds, nothing is found.
    "find_solutions_sandboxed": (FIND_SOLUTIONS, None, 0, "NameError: name 'tensor_bytes' is not defined"),
}
# Regraded in the second batch: the ones whose outcome depends on timing or process death.
FRAGILE = ["blank", "correct", "swallow_interrupt", "memory_hog", "os_exit", "widget_wait", "read_solutions"]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("gc_course")
    make_course(root, [A])
    return root


def _write_corpus(course: Path, dest: Path, students) -> None:
    released = nbformat.read(course / "notebooks" / A / f"{A}.ipynb", as_version=4)
    for student in students:
        answer, edit, _, _ = CORPUS[student]
        folder = dest / student / A
        folder.mkdir(parents=True)
        if edit == "malformed":
            (folder / f"{A}.ipynb").write_text('{"cells": [{"cell_type": "code", "source": "x')
            continue
        nb = _with(released, answer, edit if callable(edit) else None)
        name = "00_setup (1).ipynb" if edit == "rename" else f"{A}.ipynb"
        nbformat.write(nb, folder / name)


@pytest.fixture(scope="module")
def graded(course, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gc_subs")
    _write_corpus(course, tmp / "class", sorted(CORPUS))
    # An LMS-style zip: one top-level folder, then <student>/<assignment>/<notebook>.ipynb.
    zpath = tmp / "class.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for p in sorted((tmp / "class").rglob("*")):
            zf.write(p, Path("export") / p.relative_to(tmp / "class"))
    settings = GradeSettings(workers=2, cell_timeout=8, submission_timeout=240, memory_mb=3072)
    config = course / "autograder" / "nbgrader_config.py"
    report = grade_class(zpath, config_path=config, out=tmp / "report1", settings=settings, progress=False)
    return course, tmp, report, settings


def _rows(path: Path, key=("student", "assignment")) -> dict:
    with open(path, newline="") as fh:
        return {tuple(r[k] for k in key): r for r in csv.DictReader(fh)}


@pytest.mark.slow
def test_a_cell_that_never_ends_is_stopped_in_both_runs_at_once(graded):
    """The kernel and the verdict re-run run the same cells side by side: whichever reaches the
    per-cell limit first on the looping answer cell stops the other's copy of it at once
    (memlab.autograde.batch.timeouts), and the reason says which, so a loop costs one limit of
    CPU, not two. A loop that swallows the interrupt still ends at the limit."""
    _, _, report, _ = graded
    reason = report.by_submission[("infinite_loop", A)]["reason"]
    assert ("tensor_bytes: per-cell timeout in the kernel first; the re-run's copy of the cell "
            "was stopped at once" in reason
            or "tensor_bytes: per-cell timeout in the re-run first; the kernel's copy of the cell "
            "was interrupted at once" in reason), reason
    assert report.by_submission[("swallow_interrupt", A)]["score"] == 0


@pytest.mark.slow
def test_every_submission_gets_its_score_and_a_reason(graded):
    _, _, report, _ = graded
    by = report.by_submission
    assert sorted(s for s, _ in by) == sorted(CORPUS), "the batch must grade every submission"
    wrong = []
    from memlab.autograde.security import bwrap as sandbox

    for student, (_, _, score, reason) in sorted(CORPUS.items()):
        if student == "find_solutions_sandboxed" and not sandbox.available()[0]:
            continue  # unsandboxed it does find the worker's course: that is the point
        r = by[(student, A)]
        if r["score"] != score or reason.lower() not in r["reason"].lower():
            wrong.append(f"{student}: got {r['score']:g} ({r['reason']}), expected {score} with '{reason}'")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_report_files_csv_and_summary(graded):
    course, tmp, report, _ = graded
    out = report.out
    for name in ("grades.csv", "submissions.csv", "questions.csv", "review.csv", "summary.md",
                 "summary.json", "score_distribution.png"):
        assert (out / name).is_file(), f"{name} missing from the report"
    assert (out / "score_distribution.png").read_bytes()[:4] == b"\x89PNG"
    grades = _rows(out / "grades.csv", ("student_id", "assignment"))
    assert len(grades) == len(CORPUS)
    assert float(grades[("correct", A)]["score"]) == 3.0
    questions = _rows(out / "questions.csv", ("grade_id",))
    assert set(questions) == {("test_tensor_bytes",), ("test_tensor_bytes_hidden",)}
    review = (out / "review.csv").read_text()
    for student in ("patch_measure_peak", "custom_exc", "os_exit", "tests_assert_true", "renamed",
                    "read_solutions"):
        assert student in review, f"{student} should be listed for manual review"
    assert "correct" not in {r["student"] for r in csv.DictReader(open(out / "review.csv"))}
    # what review.csv lists is flagged in the gradebook (formgrader's "Flagged?") and its reason
    # says the score is provisional; a clean submission is neither
    con = sqlite3.connect(course / "autograder" / "work" / "gradebook.db")
    flagged = {row[0] for row in con.execute(
        "SELECT s.student_id FROM submitted_notebook n JOIN submitted_assignment s "
        "ON n.assignment_id = s.id WHERE n.flagged")}
    assert {"patch_measure_peak", "custom_exc", "tests_assert_true"} <= flagged
    assert "correct" not in flagged
    subs = _rows(out / "submissions.csv")
    assert "PROVISIONAL" in subs[("patch_measure_peak", A)]["reason"]
    assert "PROVISIONAL" not in subs[("correct", A)]["reason"]
    # Feedback HTML for graded submissions, copied into the course's feedback folder.
    fb = course / "autograder" / "work" / "feedback" / "correct" / A / f"{A}.html"
    assert fb.is_file() and "BEGIN HIDDEN TESTS" not in fb.read_text()


@pytest.mark.slow
def test_gradebook_intact_and_untouched_by_learner_code(graded):
    course, _, _, _ = graded
    db = course / "autograder" / "work" / "gradebook.db"
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    n = con.execute("SELECT COUNT(*) FROM submitted_assignment").fetchone()[0]
    assert n == len(CORPUS)
    # read_solutions wrote manual_score = 3 into every gradebook it could find: none of the course's.
    assert con.execute("SELECT COUNT(*) FROM grade WHERE manual_score IS NOT NULL").fetchone()[0] == 0


@pytest.mark.slow
def test_regrade_gives_the_same_csv(graded):
    course, tmp, report, settings = graded
    _write_corpus(course, tmp / "again", FRAGILE)
    config = course / "autograder" / "nbgrader_config.py"
    again = grade_class(tmp / "again", config_path=config, out=tmp / "report2", settings=settings,
                        progress=False)
    first = _rows(report.out / "submissions.csv")
    second = _rows(again.out / "submissions.csv")
    for student in FRAGILE:
        assert second[(student, A)] == first[(student, A)], f"{student} graded differently the second time"
    g1 = _rows(report.out / "grades.csv", ("student_id", "assignment"))
    g2 = _rows(again.out / "grades.csv", ("student_id", "assignment"))
    assert g1 == g2, "grades.csv changed on a regrade"


def test_find_layout_and_zip_safety(tmp_path):
    from memlab.autograde.batch.grade_class import _safe_extract, find_layout

    (tmp_path / "x" / "submitted" / "ann" / A).mkdir(parents=True)
    assert find_layout(tmp_path / "x", [A]) == tmp_path / "x" / "submitted"
    with pytest.raises(ValueError):
        find_layout(tmp_path / "x", ["nope"])
    z = tmp_path / "evil.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("../escape.txt", "x")
        zf.writestr("ok/ann/00_setup/a.ipynb", "{}")
    _safe_extract(z, tmp_path / "out")
    assert not (tmp_path / "escape.txt").exists()
    assert (tmp_path / "out" / "ok" / "ann" / A / "a.ipynb").is_file()


def test_guard_detects_patches():
    import torch

    from memlab import grading

    assert grading.tampered() == []
    saved = torch.allclose
    try:
        torch.allclose = lambda *a, **k: True
        assert any("torch.allclose" in p for p in grading.tampered())
        with pytest.raises(grading.TamperError):
            grading.guard()
    finally:
        torch.allclose = saved
    assert grading.tampered() == []


def test_cli_has_grade_class(capsys):
    with pytest.raises(SystemExit):
        instructor.main(["grade-class", "--help"])
    assert "SUBMISSIONS" in capsys.readouterr().out.upper()
    assert instructor.main(["grade-class", "/nonexistent/folder"]) == 1


@pytest.mark.slow
def test_wall_clock_limit_per_submission(course, tmp_path):
    """A submission that outlives --submission-timeout: its worker and kernel are killed, it
    scores 0 with the reason, and the batch goes on (the next student is graded)."""
    released = nbformat.read(course / "notebooks" / A / f"{A}.ipynb", as_version=4)
    for student, answer in (("a_stuck", "import time\ntime.sleep(600)\n"), ("b_fine", CORRECT)):
        folder = tmp_path / "class" / student / A
        folder.mkdir(parents=True)
        nbformat.write(_with(released, answer), folder / f"{A}.ipynb")
    settings = GradeSettings(workers=1, cell_timeout=300, submission_timeout=20, memory_mb=3072)
    report = grade_class(tmp_path / "class", config_path=course / "autograder" / "nbgrader_config.py",
                         out=tmp_path / "report", settings=settings, progress=False)
    stuck, fine = report.by_submission[("a_stuck", A)], report.by_submission[("b_fine", A)]
    assert stuck["score"] == 0 and "over the 20 s limit per submission" in stuck["reason"], stuck["reason"]
    assert fine["score"] == 3, fine["reason"]


def test_reason_never_contradicts_the_score():
    from memlab.autograde.batch.grade_class import _reason_text

    zero = {"status": "ok", "reasons": [], "scans": {},
            "grades": {"nb": {"test_a": [0.0, 2.0, False], "test_b": [1.0, 1.0, False]}}}
    reason, _ = _reason_text(zero)
    assert "all tests pass" not in reason and "test_a scored 0 of 2" in reason
    full = {"status": "ok", "reasons": [], "scans": {}, "grades": {"nb": {"test_a": [2.0, 2.0, False]}}}
    assert _reason_text(full)[0] == "all tests pass"


def test_gradebook_integrity_check(tmp_path):
    from memlab.autograde.batch.grade_class import gradebook_integrity

    db = tmp_path / "gb.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (x)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(5000)])
    con.commit()
    con.close()
    assert gradebook_integrity(db) == "ok"
    data = bytearray(db.read_bytes())
    data[4096 + 100: 4096 + 4196] = b"x" * 4096   # what a learner who reaches the file does
    db.write_bytes(bytes(data))
    assert gradebook_integrity(db) != "ok"


@pytest.mark.slow
def test_a_bad_submission_never_stops_the_class(course, tmp_path):
    """A 2 GiB sparse file, or a file whose name is not UTF-8, in one student's folder: that
    submission scores 0 with the reason, the classmate is graded, the batch completes."""
    released = nbformat.read(course / "notebooks" / A / f"{A}.ipynb", as_version=4)
    for student in ("a_sparse", "b_badname", "c_fine"):
        folder = tmp_path / "class" / student / A
        folder.mkdir(parents=True)
        nbformat.write(_with(released, CORRECT), folder / f"{A}.ipynb")
    with open(tmp_path / "class" / "a_sparse" / A / "huge.bin", "wb") as f:
        f.truncate(2 * 1024 ** 3)
    with open(os.fsencode(tmp_path / "class" / "b_badname" / A) + b"/notes\xff.txt", "wb") as f:
        f.write(b"x")
    settings = GradeSettings(workers=1, cell_timeout=300, submission_timeout=300, memory_mb=3072)
    config = course / "autograder" / "nbgrader_config.py"
    report = grade_class(tmp_path / "class", config_path=config, out=tmp_path / "report",
                         settings=settings, progress=False)
    by = report.by_submission
    assert by[("a_sparse", A)]["score"] == 0 and "hold more than" in by[("a_sparse", A)]["reason"]
    assert by[("b_badname", A)]["score"] == 0 and "not UTF-8" in by[("b_badname", A)]["reason"]
    assert by[("c_fine", A)]["score"] == 3, by[("c_fine", A)]["reason"]


@pytest.mark.slow
def test_a_skip_execution_tag_does_not_skip_a_test(course, tmp_path):
    """An unfinished answer whose test cells are tagged ``skip-execution`` (nbclient would not
    run them, and nbgrader scores a test cell without an error as passed) scores what the
    blank release scores, with the re-run outside the kernel off (this layer alone)."""
    released = nbformat.read(course / "notebooks" / A / f"{A}.ipynb", as_version=4)
    tagged = copy.deepcopy(released)
    for cell in tagged.cells:
        if (cell.metadata.get("nbgrader") or {}).get("grade"):
            cell.metadata["tags"] = ["skip-execution"]
    for student, nb in (("a_tagged", tagged), ("b_blank", released)):
        folder = tmp_path / "class" / student / A
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{A}.ipynb")
    settings = GradeSettings(workers=1, cell_timeout=300, submission_timeout=300, memory_mb=3072,
                             verdict=False)
    config = course / "autograder" / "nbgrader_config.py"
    report = grade_class(tmp_path / "class", config_path=config, out=tmp_path / "report",
                         settings=settings, progress=False)
    tagged_r, blank_r = report.by_submission[("a_tagged", A)], report.by_submission[("b_blank", A)]
    assert tagged_r["score"] == blank_r["score"] == 0, (tagged_r["reason"], blank_r["reason"])
    assert "cell tag 'skip-execution' removed" in tagged_r["reason"], tagged_r["reason"]
