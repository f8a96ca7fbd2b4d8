"""grade-class's resume keeps its word with filters (#30): a run limited to a student resumes
like any run, ``resume=False`` with a filter grades only those again and the ledger keeps the
rest, and a run that grades nothing keeps the timing of the batch that did.

Also: Ctrl-C leaves no process and no temporary folder, and the rerun resumes.

Marked ``slow`` (kernels), in `make test`: 7 gradings of 00_setup, ~80 s on 2 cores.
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


def _session_processes(sid: int) -> list[str]:
    """Command lines of the live processes of session ``sid`` (zombies excluded)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # fields[3]: the session id
            found.append((stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
    return found


@pytest.mark.slow
def test_ctrl_c_leaves_nothing_behind_and_the_rerun_resumes(tmp_path):
    """Ctrl-C (SIGINT to the command's process group, as a terminal sends it) while a looping
    submission is graded: exit 130 with one line and no traceback, no process of the command
    alive, nothing left in the temp folder, and the rerun grades only what was missing."""
    import os
    import signal
    import subprocess
    import sys
    import time

    api = make_course(tmp_path / "course", [A])
    release, solution = course_notebooks(api, A)
    cls, out, tmp = tmp_path / "class", tmp_path / "report", tmp_path / "tmp"
    tmp.mkdir()
    looping = with_solution_answers(release, solution)
    answer = next(c for c in looping.cells if c.metadata.get("nbgrader", {}).get("solution")
                  and not c.metadata["nbgrader"].get("grade") and c.cell_type == "code")
    answer.source = "while True:\n    pass\n" + answer.source
    for student, nb in (("a", with_solution_answers(release, solution)), ("b", looping)):
        (cls / student / A).mkdir(parents=True)
        nbformat.write(nb, cls / student / A / f"{A}.ipynb")
    cmd = [sys.executable, "-m", "memlab.autograde", "--config",
           str(Path(api.coursedir.root) / "autograder" / "nbgrader_config.py"), "grade-class",
           str(cls), "--out", str(out), "--workers", "1", "--cell-timeout", "40"]
    env = dict(os.environ, TMPDIR=str(tmp))
    p = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not ((out / "ledger.jsonl").exists() and (out / "ledger.jsonl").read_text().strip()
               and list(tmp.glob("memlab-jobs-*/memlab-job-*"))):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.2)
    time.sleep(2)                     # b's kernel is in its loop (40 s: well past a loaded poll)
    os.killpg(p.pid, signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert "interrupted after 1 of 2" in stderr, stderr
    time.sleep(1)
    assert _session_processes(p.pid) == []
    assert sorted(x.name for x in tmp.iterdir() if x.name.startswith("memlab")) == []
    rerun = subprocess.run(cmd + ["--quiet"], env=env, capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert "graded 1 submissions" in rerun.stdout, rerun.stdout
    assert "1 already graded" in rerun.stdout, rerun.stdout
