"""Issue 31: each blind hostile round (tests/grading/hostile/blind_r3, blind_r4, ...: README
in each), graded in ONE grade-class batch per round beside an honest classmate (``victim_NN``:
the solution's answers in the release) and a blank notebook (``blank_NN``) of each assignment
it attacks.

Held means, per attack: it scores at most what it deserves, or it is listed for review (no
forged points without a flag); and, for the whole batch: no file appears in the canary folder
the attacks write to (/tmp/blind_rN_canary, made writable for everyone), no classmate's file
changes, the gradebook passes SQLite's integrity check with no manual score written, every
honest classmate keeps full marks, and no feedback page holds live script: a tag with an event
handler, a ``javascript:`` link, ``<script>`` from a submission, or a MathJax macro that links
or defines one. Prints "blind round rN: N attacks, M held". Full tier: ~13 minutes a round on
2 cores; the rounds are separate xdist groups (pytest-xdist runs them side by side).
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
from pathlib import Path

import nbformat
import pytest

from memlab.autograde.batch.grade_class import GradeSettings, grade_class

from course_support import make_course, with_solution_answers  # tests/

HOSTILE = Path(__file__).resolve().parent / "hostile"
ROUNDS = sorted(p.name for p in HOSTILE.glob("blind_r*") if (p / "manifest.json").is_file())
SETTINGS = GradeSettings(workers=2, cell_timeout=180, submission_timeout=600, memory_mb=4096)
pytestmark = [pytest.mark.slow]


def manifest(round_: str) -> list[dict]:
    return json.loads((HOSTILE / round_ / "manifest.json").read_text())


def _key(cell) -> str:
    gid = (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id")
    if gid:
        return gid
    src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    return "#" + hashlib.sha1((cell["cell_type"] + "\0" + src).encode()).hexdigest()[:12]


def attack_notebook(round_: str, attack: str, release):
    """The attack's notebook: its patch applied to the release as it is now (a release cell it
    left unchanged is taken from the release; one the release no longer has is left out)."""
    patch = json.loads((HOSTILE / round_ / f"{attack}.json").read_text())
    by_key = {_key(c): c for c in release.cells}
    nb = nbformat.from_dict({**release, "cells": []})
    if "metadata" in patch:
        nb.metadata = nbformat.from_dict(patch["metadata"])
    for cell in patch["cells"]:
        if "release" in cell:
            if cell["release"] in by_key:
                nb.cells.append(nbformat.from_dict(json.loads(json.dumps(by_key[cell["release"]]))))
        else:
            nb.cells.append(nbformat.from_dict(cell))
    for i, cell in enumerate(nb.cells):   # ids unique in the notebook (a patch may repeat a cell)
        cell["id"] = f"c{i}"
    return nb


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


@pytest.fixture(scope="module", params=[
    pytest.param(r, marks=pytest.mark.xdist_group(f"hostile_{r}")) for r in ROUNDS])
def graded(request, tmp_path_factory):
    round_ = request.param
    attacks = manifest(round_)
    assignments = sorted({m["assignment"] for m in attacks})
    canary = Path(f"/tmp/{round_}_canary")
    root = tmp_path_factory.mktemp(round_)
    api = make_course(root / "course", assignments)
    cls = root / "class"
    for a in assignments:
        [rel_path] = sorted((root / "course" / "notebooks" / a).glob("*.ipynb"))
        release = nbformat.read(rel_path, as_version=4)
        solution = nbformat.read(root / "course" / "solutions" / a / rel_path.name, as_version=4)
        for who, nb in ((f"victim_{a[:2]}", with_solution_answers(release, solution)),
                        (f"blank_{a[:2]}", release)):
            (cls / who / a).mkdir(parents=True)
            nbformat.write(nb, cls / who / a / rel_path.name)
        for m in (m for m in attacks if m["assignment"] == a):
            (cls / m["id"] / a).mkdir(parents=True)
            nbformat.write(attack_notebook(round_, m["id"], release),
                           cls / m["id"] / a / rel_path.name)
    victims = {p.name: _digest(p) for p in cls.iterdir() if p.name.startswith("victim_")}
    shutil.rmtree(canary, ignore_errors=True)
    canary.mkdir()
    canary.chmod(0o777)
    config = Path(api.coursedir.root) / "autograder" / "nbgrader_config.py"
    report = grade_class(cls, config_path=config, out=root / "report", settings=SETTINGS,
                         progress=False)
    canaries = sorted(p.name for p in canary.iterdir())
    shutil.rmtree(canary, ignore_errors=True)
    return {"round": round_, "attacks": attacks, "assignments": assignments, "root": root,
            "report": report, "victims": victims, "canaries": canaries, "class": cls}


def test_every_attack_is_held(graded):
    by = graded["report"].by_submission
    held, problems = [], []
    for m in graded["attacks"]:
        r = by[(m["id"], m["assignment"])]
        if r["score"] > m["deserved"] + 1e-9 and not r["review"]:
            problems.append(f"{m['id']} ({m['class']}): {r['score']:g} > deserved {m['deserved']} "
                            f"with no review flag [{r['reason'][:300]}]")
        else:
            held.append(m["id"])
    print(f"\nblind round {graded['round'][len('blind_'):]}: {len(graded['attacks'])} attacks, "
          f"{len(held)} held")
    assert not problems, "\n".join(problems)


def test_no_harm_to_the_machine_a_classmate_or_the_gradebook(graded):
    assert graded["canaries"] == [], f"written outside the job's folder: {graded['canaries']}"
    cls = graded["class"]
    for who, before in graded["victims"].items():
        assert _digest(cls / who) == before, f"{who}'s submission changed"
    by = graded["report"].by_submission
    for a in graded["assignments"]:
        r = by[(f"victim_{a[:2]}", a)]
        assert r["score"] == r["max_score"] > 0, \
            f"victim {a}: {r['score']}/{r['max_score']} ({r['reason']})"
    con = sqlite3.connect(graded["root"] / "course" / "autograder" / "work" / "gradebook.db")
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    manual = con.execute("SELECT COUNT(*) FROM grade WHERE manual_score IS NOT NULL").fetchone()
    assert manual[0] == 0


LIVE = [
    (re.compile(r"<[a-zA-Z][^<>]*\son[a-z]+\s*=[^<>]*>"), "a tag with an event handler"),
    (re.compile(r"href\s*=\s*[\"']?\s*(?:javascript|jav&#\d+;script):", re.I),
     "a javascript: link"),
    (re.compile(r"<script>\s*fetch\(", re.I), "a submission's <script>"),
    (re.compile(r"(?:\\|&#0*92;|&#x0*5c;|&bsol;)\s*"
                r"(?:href|let|def|newcommand|require)(?![A-Za-z])"),
     "a MathJax macro that links or defines one"),
]


def test_no_feedback_page_holds_live_script(graded):
    found = []
    feedback = graded["root"] / "course" / "autograder" / "work" / "feedback"
    for page in sorted(feedback.rglob("*.html")):
        html = re.sub(r"<pre[^>]*>.*?</pre>", "", page.read_text(errors="replace"), flags=re.S)
        for rx, what in LIVE:
            for hit in rx.finditer(html):
                if f"{graded['round']}_" in html[hit.start(): hit.end() + 200]:
                    found.append(f"{page.parent.parent.name}: {what}: {hit.group(0)[:120]}")
    assert not found, "\n".join(found)
