"""nbgrader's classroom round trip through the exchange, for real, two students on one machine.

    instructor  release_assignment                        (memlab.instructor / NbGraderAPI)
    alice, bob  fetch_assignment -> edit -> submit        (the `nbgrader` CLI, each with own
                                                           HOME and USER, one temporary exchange)
                alice on time; the due date passes; bob late
    instructor  collect -> grade-class -> release_feedback (the feedback grade-class wrote)
    alice, bob  fetch_feedback

Checks: the late submission is recorded in the gradebook (and named in the report), the
on-time one is not; each student fetches feedback for their own submission with their score,
and no line of a hidden test. autograder/README.md ("The classroom round trip") walks
through the same commands. Marked ``slow``: ~1-2 minutes on 2 cores.
"""
from __future__ import annotations

import csv
import html
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import pytest

from course_support import make_course
from memlab.autograde import course as instructor
from memlab.autograde.batch.grade_class import GradeSettings, grade_class

ROOT = Path(__file__).resolve().parents[2]
A = "00_setup"
COURSE = "gpu-memory-lab"
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)
# nbgrader 0.9.6's API passes a misspelt keyword ("authentictor") to its exchange apps.
pytestmark = pytest.mark.filterwarnings("ignore:Passing unrecognized arguments:DeprecationWarning")
CORRECT = '''
def tensor_bytes(shape, dtype):
    n = 1
    for d in shape:
        n *= int(d)
    return n * dtype.itemsize
'''


def _nbgrader(student: str, home: Path, exchange: Path, *args: str) -> str:
    """A student's `nbgrader` command: own HOME and USER, the course's exchange, run from the
    student's home. nbgrader takes the student id from the OS account (pwd), so on one
    machine with one account the id is given with --student (on a JupyterHub each student
    has an account and leaves it out)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env.update(HOME=str(home), USER=student, LOGNAME=student,
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
    if args[0] in ("submit", "fetch_feedback"):
        args = (*args, f"--student={student}")
    proc = subprocess.run([str(Path(sys.executable).parent / "nbgrader"), *args, "--course", COURSE,
                           f"--Exchange.root={exchange}"], cwd=home, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} as {student} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def _text_of_html(path: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


@pytest.fixture(scope="module")
def roundtrip(tmp_path_factory):
    from nbgrader.api import Gradebook

    base = tmp_path_factory.mktemp("roundtrip")
    root, exchange = base / "course", base / "exchange"
    exchange.mkdir()
    make_course(root, [A])
    config = root / "autograder" / "nbgrader_config.py"
    api = instructor.make_api(config, overrides={"Exchange": {"root": str(exchange)}})
    assert api.release_assignment(A)["success"]

    homes = {s: base / "home" / s for s in ("alice", "bob")}
    for student, home in homes.items():
        home.mkdir(parents=True)
        _nbgrader(student, home, exchange, "fetch_assignment", A)
        assert (home / A / f"{A}.ipynb").is_file(), f"{student} fetched nothing"
    # alice answers and submits on time
    nb_path = homes["alice"] / A / f"{A}.ipynb"
    nb = nbformat.read(nb_path, as_version=4)
    [cell] = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "tensor_bytes"]
    cell.source = CORRECT.strip()
    nbformat.write(nb, nb_path)
    _nbgrader("alice", homes["alice"], exchange, "submit", A)
    # the due date passes, then bob submits his untouched copy
    time.sleep(1.0)
    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        gb.update_or_create_assignment(A, duedate=datetime.now(timezone.utc).replace(tzinfo=None))
    time.sleep(1.0)
    _nbgrader("bob", homes["bob"], exchange, "submit", A)

    assert api.collect(A)["success"]
    submitted = root / "autograder" / "work" / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == ["alice", "bob"]
    report = grade_class(submitted, config_path=config, out=base / "report",
                         settings=GradeSettings(workers=2, cell_timeout=60, submission_timeout=300,
                                                memory_mb=3072), progress=False)
    # no generate_feedback: release_feedback hands out the pages grade-class wrote (once)
    assert api.release_feedback(A)["success"], "release_feedback failed"
    for student, home in homes.items():
        _nbgrader(student, home, exchange, "fetch_feedback", A)
    return api, report, homes


@pytest.mark.slow
def test_late_submission_recorded(roundtrip):
    api, report, _ = roundtrip
    from nbgrader.api import Gradebook

    with Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
        alice = gb.find_submission(A, "alice")
        bob = gb.find_submission(A, "bob")
        assert alice.timestamp is not None and bob.timestamp is not None, "collect writes timestamps"
        assert alice.total_seconds_late == 0, alice.total_seconds_late
        assert bob.total_seconds_late > 0, "bob submitted after the due date"
        assert alice.score == 3 and bob.score == 0, (alice.score, bob.score)
    rows = {r["student"]: r for r in csv.DictReader(open(report.out / "submissions.csv"))}
    assert "late" in rows["bob"]["reason"] and "late" not in rows["alice"]["reason"], rows


@pytest.mark.slow
def test_fetched_feedback_is_each_students_own_without_hidden_tests(roundtrip):
    _, _, homes = roundtrip
    source = nbformat.read(ROOT / "solutions" / A / f"{A}.ipynb", as_version=4)
    released_text = "\n".join(c.source for c in nbformat.read(ROOT / "notebooks" / A / f"{A}.ipynb",
                                                                 as_version=4).cells)
    visible = released_text + "\n".join(HIDDEN.sub("", c.source) for c in source.cells)
    secret = [ln.strip() for c in source.cells for block in HIDDEN.findall(c.source)
              for ln in block.splitlines() if len(ln.strip()) >= 16 and ln.strip() not in visible]
    assert secret, "could not extract hidden-test lines to look for"
    for student, home in homes.items():
        pages = sorted((home / A / "feedback").rglob("*.html"))
        assert len(pages) == 1, f"{student} fetched {len(pages)} feedback pages"
        text = _text_of_html(pages[0])
        leaked = [ln for ln in secret if ln in text]
        assert not leaked, f"hidden test source in {student}'s fetched feedback: {leaked[:3]}"
        score = "3.0 / 3.0" if student == "alice" else "0.0 / 3.0"
        assert score in " ".join(text.split()), f"{student}'s feedback does not show {score}"


def readme_round_trip() -> list[tuple[str, list[str]]]:
    """autograder/README.md's round-trip block as (the comment that opens a step, its command
    lines), in order: the commands exactly as the README prints them."""
    text = (ROOT / "autograder" / "README.md").read_text()
    section = text.split("## The classroom round trip (nbgrader's exchange)", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("#"):
            steps.append((line, []))
        elif line.strip():
            steps[-1][1].append(line)
    return steps


@pytest.mark.slow
def test_the_readme_commands_complete_the_round_trip(tmp_path):
    """Issue 30: the README's classroom commands, run verbatim, take one student from the
    release to fetched feedback: each instructor line in a copy of the course (its .venv the
    checkout's), each student line in the student's own home, every line in bash as printed;
    the only thing done between them is the student's answer (the step the README leaves to
    JupyterLab). The student is the OS account, as nbgrader takes it."""
    import getpass

    steps = readme_round_trip()
    assert [s[0].split(",")[0].split(" (")[0] for s in steps] == [
        "# once", "# instructor", "# each student", "#", "# instructor", "# each student"], steps
    course, home, exchange = tmp_path / "course", tmp_path / "home", tmp_path / "exchange"
    home.mkdir()
    make_course(course, [A])
    (course / ".venv").symlink_to(ROOT / ".venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env.update(NBGRADER_EXCHANGE=str(exchange),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
    ran = 0
    for comment, lines in steps:
        student = "student" in comment
        if comment.startswith("# (the student opens"):  # then the student's next lines
            nb_path = home / A / f"{A}.ipynb"
            nb = nbformat.read(nb_path, as_version=4)
            [cell] = [c for c in nb.cells
                      if c.metadata.get("nbgrader", {}).get("grade_id") == "tensor_bytes"]
            cell.source = CORRECT.strip()
            nbformat.write(nb, nb_path)
        for line in lines:
            proc = subprocess.run(["bash", "-ec", line], cwd=home if student else course,
                                  env={**env, "HOME": str(home)} if student else env,
                                  capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, f"{line}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
            ran += 1
    assert ran == 11
    me = getpass.getuser()
    report = course / "autograder" / "work" / "class_report" / "submissions.csv"
    rows = {r["student"]: r for r in csv.DictReader(open(report))}
    assert float(rows[me]["score"]) == 3 and "late" not in rows[me]["reason"], rows
    pages = sorted((home / A / "feedback").rglob("*.html"))
    assert len(pages) == 1, pages
    assert "3.0 / 3.0" in " ".join(_text_of_html(pages[0]).split())
    assert "BEGIN HIDDEN TESTS" not in pages[0].read_text()
