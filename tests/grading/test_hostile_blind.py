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
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path

import nbformat
import pytest

from memlab.autograde.batch.grade_class import GradeSettings, grade_class

from course_support import make_course, with_solution_answers  # tests/

HOSTILE = Path(__file__).resolve().parent / "hostile"
ROUNDS = sorted(p.name for p in HOSTILE.glob("blind_r*") if (p / "manifest.json").is_file())
SETTINGS = GradeSettings(workers=2, cell_timeout=60, submission_timeout=300, memory_mb=4096)
# planted in the grader's environment: no learner process may read it (its feedback, the report)
SECRET = "BLIND_ROUND_SECRET"
SECRET_VALUE = "s3cr3t-of-the-instructor-7f1c"
pytestmark = [pytest.mark.slow]


def manifest(round_: str) -> list[dict]:
    return json.loads((HOSTILE / round_ / "manifest.json").read_text())


def _key(cell) -> str:
    gid = (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id")
    if gid:
        return gid
    src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    return "#" + hashlib.sha1((cell["cell_type"] + "\0" + src).encode()).hexdigest()[:12]


def _patch(round_: str, attack: str) -> dict:
    """The attack's patch: ``aNN.json``, or, for one too large to keep in the repository (r5's
    a13 and a24: 13 and 9 MB), ``aNN.py`` whose ``patch()`` writes the same dict."""
    path = HOSTILE / round_ / f"{attack}.json"
    if path.is_file():
        return json.loads(path.read_text())
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{round_}_{attack}", path.with_suffix(".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.patch()


def attack_notebook(round_: str, attack: str, release):
    """The attack's notebook: its patch applied to the release as it is now (a release cell it
    left unchanged is taken from the release; one the release no longer has is left out).
    ``top``: the notebook's other top-level fields as the attacker wrote them (``nbformat``)."""
    patch = _patch(round_, attack)
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
    nb.update(patch.get("top", {}))
    return nb


def write_notebook(nb, path: Path) -> None:
    """As the learner's file holds it: ASCII JSON, written as is (nbformat.write would refuse
    a notebook whose version fields an attack changed)."""
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=True) + "\n")


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


@pytest.fixture(scope="module", params=[
    pytest.param(r, marks=pytest.mark.xdist_group(f"hostile_{r}")) for r in ROUNDS])
def graded(request, tmp_path_factory):
    round_ = request.param
    root = tmp_path_factory.mktemp(round_)
    return grade_round(round_, root)


def grade_round(round_: str, root: Path) -> dict:
    """Every attack of the round beside its classmates, graded in one batch under ``root``."""
    attacks = manifest(round_)
    assignments = sorted({m["assignment"] for m in attacks})
    canary = Path(f"/tmp/{round_}_canary")
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
            write_notebook(attack_notebook(round_, m["id"], release),
                           cls / m["id"] / a / rel_path.name)
    victims = {p.name: _digest(p) for p in cls.iterdir() if p.name.startswith("victim_")}
    shutil.rmtree(canary, ignore_errors=True)
    canary.mkdir()
    canary.chmod(0o777)
    config = Path(api.coursedir.root) / "autograder" / "nbgrader_config.py"
    temp = root / "tmp"     # this batch's own (another round may grade beside it)
    temp.mkdir()
    saved = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ.update({SECRET: SECRET_VALUE, "TMPDIR": str(temp)})
    tempfile.tempdir = None
    try:
        report = grade_class(cls, config_path=config, out=root / "report", settings=SETTINGS,
                             progress=False)
    finally:
        os.environ.pop(SECRET, None)
        if saved[0] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved[0]
        tempfile.tempdir = saved[1]
    canaries = sorted(p.name for p in canary.iterdir())
    shutil.rmtree(canary, ignore_errors=True)
    # a process an attack started names its attack (blind_rN_aNN), not this test's command line
    survivors = subprocess.run(["pgrep", "-af", f"{round_}_a"], capture_output=True,
                               text=True).stdout
    return {"round": round_, "attacks": attacks, "assignments": assignments, "root": root,
            "report": report, "victims": victims, "canaries": canaries, "class": cls,
            "temp_left": sorted(p.name for p in temp.glob("memlab-*")),
            "survivors": [line for line in survivors.splitlines() if "pgrep" not in line]}


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


def _pages(graded) -> dict[str, str]:
    feedback = graded["root"] / "course" / "autograder" / "work" / "feedback"
    return {f"{p.parent.parent.name}/{p.name}": p.read_text(errors="replace")
            for p in sorted(feedback.rglob("*.html"))}


def test_nothing_of_a_job_outlives_the_batch(graded):
    """No process of a submission is alive after the batch, its temporary folder is gone (a
    tree too deep for shutil.rmtree included), and the report was written (a field no codec
    can encode did not stop it)."""
    assert graded["survivors"] == [], graded["survivors"]
    assert graded["temp_left"] == [], graded["temp_left"]
    out = graded["root"] / "report"
    for name in ("summary.md", "submissions.csv", "review.csv"):
        assert (out / name).is_file(), name


def test_no_feedback_page_holds_a_hidden_test_or_a_secret(graded):
    """A learner's code run by a hidden test tried to read that test's source and print it (as
    is, or reversed), and its own process's environment: the feedback holds neither."""
    hidden, public = set(), set()
    for a in graded["assignments"]:
        for nb in (graded["root"] / "course" / "solutions" / a).glob("*.ipynb"):
            for cell in nbformat.read(nb, as_version=4).cells:
                blocks = re.findall(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS",
                                    cell.source, re.S)
                for block in blocks:
                    hidden |= {ln.strip() for ln in block.splitlines() if len(ln.strip()) >= 24}
                rest = re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", "", cell.source,
                              flags=re.S)
                public.add(rest)
    public_text = "\n".join(public)
    hidden = {h for h in hidden if h not in public_text}  # what the course shows is no secret
    found = []
    for name, html in _pages(graded).items():
        text = html_unescape(html)
        # as printed, or printed backwards (r5 reversed what it read, past the line scrubber)
        text = text + "\n" + text[::-1]
        if SECRET_VALUE in text:
            found.append(f"{name}: the grader's environment")
        leaked = sorted(h for h in hidden if h in text)
        if leaked:
            found.append(f"{name}: {len(leaked)} line(s) of hidden tests, e.g. {leaked[0][:80]}")
    assert not found, "\n".join(found)


def test_no_page_an_instructor_opens_reaches_outside_or_draws_over_itself(graded):
    """What a submission wrote shows as text: no URL of its own in the feedback (a tracking
    image, a look-alike link), no TeX drawing over the page (MathJax rules, raised boxes), and
    summary.md renders none of its markdown or HTML."""
    pages = _pages(graded)
    course_urls = set()
    for name, html in pages.items():
        if name.startswith(("victim_", "blank_")):
            course_urls |= set(_URL.findall(html))
    found = []
    for name, html in pages.items():
        body = re.sub(r"<pre[^>]*>.*?</pre>", "", html, flags=re.S)
        foreign = sorted(set(_URL.findall(body)) - course_urls)
        if foreign:
            found.append(f"{name}: a URL of the submission's: {foreign[0][:100]}")
        if _TEX_DRAW.search(body) and not name.startswith(("victim_", "blank_")):
            found.append(f"{name}: TeX that draws over the page: {_TEX_DRAW.search(body).group(0)}")
    # what summary.md escapes (\\x) shows as text: only what is left could render
    summary = re.sub(r"\\.", "", (graded["root"] / "report" / "summary.md").read_text())
    if re.search(r"<img|<a\s|\]\((?:https?|javascript|data):", summary):
        found.append("summary.md renders a submission's image or link")
    assert not found, "\n".join(found)


_URL = re.compile(r"(?:src|href)\s*=\s*[\"']?(https?://[^\"'\s>]+)", re.I)
_TEX_DRAW = re.compile(r"\\(?:rule|Rule|raise|lower|smash|color|colorbox|llap|rlap|phantom)\b")


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)
