"""The real nbgrader pipeline, for every assignment in solutions/ (new ones are covered as added).

In a temporary copy of the course (solutions/ and autograder/nbgrader_config.py, whose root
is computed from its own path) this runs what an instructor runs:

    generate_assignment -> submissions -> autograde -> generate_feedback -> export CSV

Every assignment but one is autograded the way an instructor grades a class: ONE
``grade-class`` batch per assignment (``memlab.autograde.batch.grade_class``: nbgrader's autograde and
generate_feedback in kernels forked from a warm process, torch imported once; the results
merged into the course gradebook, autograded notebooks and feedback copied into the course).
This module proves the hidden tests and the notebooks, so the layers that only ever lower a
score or hide files are off here: no static audit (a cheat must be caught by the hidden tests
themselves, not refused before it runs), no verdict re-run, no sandbox; tests/grading/
test_hostile.py grades every solution and blank release with all of them on. ``00_setup``
(PLAIN below) goes through the instructor's single-student commands instead
(``memlab.autograde.cli`` autograde + feedback: nbgrader's Python API in this process,
one fresh kernel per notebook), so that path keeps a real solution, blank and cheats too.

Students per assignment:
    sol      the solution notebook itself: full marks, no error, nothing on stderr
    blank    the released notebook untouched: 0 points; every autograder test cell fails with
             NotImplementedError and no other cell errors
    cheats   per-assignment cheats the hidden tests must reject (tests/cheats/<assignment>.py),
             each the release with one answer written, trimmed of the demo cells grading does
             not need (``course_support.trim_to_graded``)

Also: notebooks/ equals a fresh release (never edited by hand), committed notebooks carry no
outputs and one kernelspec, and source notebooks follow docs/AUTHORING.md.
Takes ~10-40 s per assignment on 2 busy CPU cores (every notebook runs whole, every cheat its
graded cells). These tests are marked ``slow``: `make test PYTEST_ARGS='-m "not slow"'`
skips them for a quick loop; `make test` and CI run everything.
"""
from __future__ import annotations

import ast
import csv
import html
import importlib.util
import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from course_support import (cores_per_worker, frame_problems, learner_dependent_cells,  # noqa: F401
                            make_course, nbgrader_meta, trim_to_graded, with_answer)
from memlab.autograde import cli as instructor
from memlab.autograde.batch.grade_class import GradeSettings, grade_class
from memlab.tools import envcheck  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions"
RELEASE = ROOT / "notebooks"
CHEATS = ROOT / "tests" / "cheats"
ASSIGNMENTS = sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))
LEARNER_NOTE = ("(learners: your own saved work in notebooks/ shows up here too; the check is for "
                "authors, who must never edit notebooks/ by hand)")
PLAIN = "00_setup"  # graded with the instructor's single-student commands (module docstring)
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)
IMPORT_IDIOM = re.compile(r"^import memlab(?: as ml|\.[a-z_]+)\s*(?:#.*)?$")


def is_autograder_test(cell) -> bool:
    m = nbgrader_meta(cell)
    return bool(m.get("grade")) and not m.get("solution")


def load_variants(assignment: str) -> dict:
    """tests/cheats/<assignment>.py: ``VARIANTS = {student: dict(notebook, grade_id, source, expect)}``,
    submissions the hidden tests must reject (one file per assignment, written by its author)."""
    path = CHEATS / f"{assignment}.py"
    if not path.is_file():
        return {}
    spec = importlib.util.spec_from_file_location(f"cheats_{assignment}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.VARIANTS


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def course(tmp_path_factory):
    """A temporary course: solutions/ + the nbgrader config, released with `course.release`."""
    api = make_course(tmp_path_factory.mktemp("course"))
    assert instructor.source_assignments(api) == ASSIGNMENTS
    return api


def _work(api, step: str, student: str, assignment: str) -> Path:
    return Path(api.coursedir.format_path(getattr(api.coursedir, f"{step}_directory"), student, assignment))


@pytest.fixture(scope="module", params=ASSIGNMENTS)
def graded(request, course, tmp_path_factory):
    """Place the students' submissions for one assignment, autograde and write feedback."""
    api, assignment = course, request.param
    released = _work(api, "release", ".", assignment)
    source = _work(api, "source", ".", assignment)  # the copy the release was made from
    students = {"sol": {}, "blank": {}}
    for src in sorted(source.glob("*.ipynb")):
        students["sol"][src.name] = nbformat.read(src, as_version=4)
        students["blank"][src.name] = nbformat.read(released / src.name, as_version=4)
    for student, v in (load_variants(assignment) if _cheats_selected(request) else {}).items():
        name = f"{v['notebook']}.ipynb"
        # trimmed to what grading runs (no demo cells), as the mutation corpus is: a cheat is
        # judged by the test cells, and the demo cells would cost every variant a full run
        students[student] = {name: trim_to_graded(
            with_answer(students["blank"][name], v["grade_id"], v["source"].strip()), students["sol"][name])}
    batch = tmp_path_factory.mktemp(f"class-{assignment}")
    for student, notebooks in students.items():
        # PLAIN: nbgrader's own submitted/ layout; the others: student/assignment/ for grade-class
        dest = (_work(api, "submitted", student, assignment) if assignment == PLAIN
                else batch / "class" / student / assignment)
        shutil.copytree(released, dest, ignore=shutil.ignore_patterns("*.ipynb"))  # data files
        for name, nb in notebooks.items():
            nbformat.write(nb, dest / name)
    if assignment == PLAIN:  # the instructor's single-student commands
        instructor.autograde(assignment, sorted(students), api=api)
        instructor.feedback(assignment, api=api)
        return api, assignment, sorted(students)
    # the cores shared among pytest-xdist's workers (each may grade another assignment), one
    # torch thread per kernel
    settings = GradeSettings(workers=cores_per_worker(), audit=False, verdict=False, sandbox=False,
                             threads_per_kernel=1)
    report = grade_class(batch / "class", config_path=Path(api.coursedir.root) / "autograder" / "nbgrader_config.py",
                         out=batch / "report", settings=settings, progress=False)
    failed = {r["student"]: r["reason"] for r in report.results if r["status"] != "ok"}
    assert not failed, f"{assignment}: grading failed for {failed}"
    return api, assignment, sorted(students)


def _cheats_selected(request) -> bool:
    """The cheats ride in the pipeline's batch only when their test runs (the full tier:
    ``make test-all``); ``make test`` grades the solution and the blank release."""
    return any(item.name.startswith("test_hidden_tests_reject_cheats")
               for item in request.session.items)


def _autograded(api, student, assignment):
    folder = _work(api, "autograded", student, assignment)
    return {p.name: nbformat.read(p, as_version=4) for p in sorted(folder.glob("*.ipynb"))}


# ------------------------------------------------------------------------ the pipeline
@pytest.mark.slow
def test_solution_gets_full_marks_and_runs_clean(graded):
    api, assignment, _ = graded
    with api.gradebook as gb:
        sub = gb.find_submission(assignment, "sol")
        assert sub.max_score > 0, f"{assignment} has no graded test cells"
        assert sub.score == sub.max_score, f"the solution of {assignment} scores {sub.score}/{sub.max_score}"
    for name, nb in _autograded(api, "sol", assignment).items():
        for cell in nb.cells:
            for out in cell.get("outputs", []):
                assert out.output_type != "error", f"{name} cell {cell.get('id')}: {out.ename}: {out.evalue}"
                assert not (out.output_type == "stream" and out.name == "stderr"), (
                    f"{name} cell {cell.get('id')} wrote to stderr (a test cell doing so scores 0):\n{out.text}")


@pytest.mark.slow
def test_solution_visible_tests_say_pass(graded):
    """Every visible test of a function (``ml.visible_test`` without ``quiet``) prints PASS for
    the solution, under nbgrader's execution (docs/AUTHORING.md, "Visible tests and Run All")."""
    api, assignment, _ = graded
    for name, nb in _autograded(api, "sol", assignment).items():
        for cell in nb.cells:
            if "ml.visible_test(" not in cell.source or "quiet=True" in cell.source:
                continue
            text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
            assert re.search(r"^PASS\b", text, re.M), (
                f"{name} {nbgrader_meta(cell).get('grade_id')}: the solution's visible test does not "
                f"print PASS:\n{text[:800]}")


@pytest.mark.slow
def test_blank_release_scores_zero_and_fails_only_in_graded_cells(graded):
    api, assignment, _ = graded
    with api.gradebook as gb:
        sub = gb.find_submission(assignment, "blank")
        assert sub.score == 0, f"the untouched release of {assignment} scores {sub.score}: a test passes without work"
    for name, nb in _autograded(api, "blank", assignment).items():
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            errors = [o for o in cell.outputs if o.output_type == "error"]
            meta = nbgrader_meta(cell)
            if is_autograder_test(cell):
                assert [e.ename for e in errors] == ["NotImplementedError"], (
                    f"{name} test cell {meta['grade_id']} should fail with NotImplementedError on the "
                    f"blank release, got {[(e.ename, e.evalue) for e in errors]}")
            elif not meta.get("solution"):
                assert not errors, (f"{name} cell {cell.get('id')} errors in the blank release: "
                                    f"{[(e.ename, e.evalue) for e in errors]}")
                assert not any(o.output_type == "stream" and o.name == "stderr" for o in cell.outputs), (
                    f"{name} cell {cell.get('id')} writes to stderr in the blank release")


@pytest.mark.slow
@pytest.mark.full
def test_hidden_tests_reject_cheats(graded):
    api, assignment, _ = graded
    variants = load_variants(assignment)
    if not variants:
        pytest.skip(f"no cheats written for {assignment}: add tests/cheats/{assignment}.py")
    with api.gradebook as gb:
        for student, v in variants.items():
            for grade_id, points in v["expect"].items():
                grade = gb.find_grade(grade_id, v["notebook"], assignment, student)
                assert grade.score == points, (
                    f"variant {student!r}: {grade_id} scored {grade.score}, expected {points}")


def _text_of_html(path: Path) -> str:
    # Drop tags (pygments splits code into spans) and unescape, so source lines read whole again.
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


@pytest.mark.slow
def test_feedback_never_shows_hidden_tests(graded):
    api, assignment, students = graded
    released_text = "\n".join(c.source for p in _work(api, "release", ".", assignment).glob("*.ipynb")
                              for c in nbformat.read(p, as_version=4).cells)
    sources = [c.source for src in (SOLUTIONS / assignment).glob("*.ipynb")
               for c in nbformat.read(src, as_version=4).cells]
    # Lines only hidden tests contain: not in the release, not in visible or solution code
    # (the "sol" student's feedback legitimately shows the solution).
    visible_text = released_text + "\n".join(HIDDEN.sub("", s) for s in sources)
    secret = [ln.strip() for s in sources for block in HIDDEN.findall(s) for ln in block.splitlines()
              if len(ln.strip()) >= 16 and ln.strip() not in visible_text]
    has_hidden = any("### BEGIN HIDDEN TESTS" in s for s in sources)
    assert secret or not has_hidden, "could not extract hidden-test lines to look for"
    for student in students:
        pages = sorted(_work(api, "feedback", student, assignment).glob("*.html"))
        assert pages, f"no feedback written for {student}"
        for page in pages:
            text = _text_of_html(page)
            leaked = [ln for ln in secret if ln in text]
            assert not leaked, f"hidden test source leaks into {student}'s feedback {page.name}: {leaked[:3]}"


@pytest.mark.slow
def test_export_csv_has_a_row_per_student(graded):
    api, assignment, students = graded
    target = instructor.export(Path(api.coursedir.root) / "grades.csv", api=api)
    with open(target, newline="") as fh:
        rows = {(r["assignment"], r["student_id"]): r for r in csv.DictReader(fh)}
    for student in students:
        assert (assignment, student) in rows, f"no CSV row for {student}/{assignment}"
    sol, blank = rows[(assignment, "sol")], rows[(assignment, "blank")]
    assert float(sol["max_score"]) > 0
    assert float(sol["score"]) == float(sol["max_score"])
    assert float(blank["score"]) == 0.0


# ------------------------------------------------------------------ release is current
@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_committed_release_is_not_stale(course, assignment):
    fresh = _work(course, "release", ".", assignment)
    committed = RELEASE / assignment
    assert committed.is_dir(), f"notebooks/{assignment} is missing: run `make release`"
    names = lambda d: sorted(str(p.relative_to(d)) for p in d.rglob("*")  # noqa: E731
                             if p.is_file() and ".ipynb_checkpoints" not in p.parts)
    assert names(committed) == names(fresh), f"notebooks/{assignment} has other files than a release: run `make release`"
    for rel in names(fresh):
        if rel.endswith(".ipynb"):
            a = json.loads((committed / rel).read_text())
            b = json.loads((fresh / rel).read_text())
            for i, (ca, cb) in enumerate(zip(a["cells"], b["cells"])):
                assert ca["source"] == cb["source"], (
                    f"notebooks/{assignment}/{rel} cell {i} differs from solutions/: run `make release` "
                    + LEARNER_NOTE)
            assert a == b, (f"notebooks/{assignment}/{rel} differs from a fresh release: run `make release` "
                            + LEARNER_NOTE)
        else:
            assert (committed / rel).read_bytes() == (fresh / rel).read_bytes(), f"{rel}: run `make release`"


ALL_NOTEBOOKS = sorted(p for d in (SOLUTIONS, RELEASE) for p in d.rglob("*.ipynb")
                       if ".ipynb_checkpoints" not in p.parts)


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_notebooks_have_no_outputs_and_one_kernelspec(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", f"{path.name}: kernelspec must be python3"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, (
                f"{path.name} cell {cell.get('id')} has outputs: clear them before committing "
                + LEARNER_NOTE)


@pytest.mark.parametrize("path", sorted(SOLUTIONS.rglob("*.ipynb")), ids=lambda p: p.parent.name)
def test_source_notebooks_follow_the_authoring_rules(path):
    """docs/AUTHORING.md: the conventions the pipeline relies on."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "ml.versions_banner(" in code[0].source, "the first code cell must print ml.versions_banner()"
    ids = [nbgrader_meta(c)["grade_id"] for c in nb.cells if nbgrader_meta(c)]
    assert len(ids) == len(set(ids)), f"duplicate grade_id in {path.name}"
    for cell in nb.cells:
        m = nbgrader_meta(cell)
        if not m:
            continue
        assert m.get("schema_version") == 3
        if is_autograder_test(cell):
            assert m.get("locked") and m.get("points", 0) > 0, f"test cell {m['grade_id']}: locked, points > 0"
            # a cell of hidden tests only opens with comments instead: its release keeps nothing
            # else, and a lone docstring there is echoed as the cell's output
            released = ast.parse(HIDDEN.sub("", cell.source)).body
            assert not (released and all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
                                         for n in released)), (
                f"test cell {m['grade_id']}: its release is a lone docstring, which a learner's "
                "Run All shows as output; write it as '# Hidden tests: ...' comment lines")
            head = '"""' if released else "# Hidden tests"
            assert cell.source.lstrip().startswith(head), (
                f"test cell {m['grade_id']} must open with {head!r}")
            for node in ast.walk(ast.parse(cell.source)):
                assert not (isinstance(node, ast.Assert) and node.msg is None), (
                    f"test cell {m['grade_id']} line {node.lineno}: every assert needs a message "
                    "that says what to fix (learners see no line numbers)")
        if m.get("solution") and cell.cell_type == "code":
            assert "### BEGIN SOLUTION" in cell.source, f"answer cell {m['grade_id']} has no ### BEGIN SOLUTION"
    # one import idiom (docs/AUTHORING.md): `import memlab as ml`, and `import memlab.<module>` to
    # load a module used as ml.<module>; no `from memlab ...`, no other alias
    imports = [line.strip() for c in code for line in c.source.splitlines()
               if re.match(r"\s*(from|import)\s+memlab\b", line)]
    other = [line for line in imports if not IMPORT_IDIOM.match(line)]
    assert not other, f"{path.name}: memlab imported another way than `import memlab as ml`: {other}"
    frame = frame_problems(nb.cells)
    assert not frame, f"{path.name}: the learner's frame is incomplete: {'; '.join(frame)}"
    # Run All never stops on a learner's half-written answer: a demo cell that runs the learner's
    # code goes on past an error like the answer and test cells do (docs/AUTHORING.md)
    for i in learner_dependent_cells(nb.cells):
        cell = nb.cells[i]
        assert "raises-exception" in cell.metadata.get("tags", []), (
            f"cell {nbgrader_meta(cell).get('grade_id', cell.get('id'))} runs a learner's code "
            "(it reads a name an answer cell defines) but has no raises-exception tag")
    headings = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "markdown" and c.source]
    assert any(h.strip() == "## Exercises" for h in headings), "the notebook must end with an '## Exercises' section"


@pytest.mark.slow
def test_instructor_cli_exports_and_reports_errors(graded, tmp_path, capsys):
    api, assignment, _ = graded
    config = Path(api.coursedir.root) / "autograder" / "nbgrader_config.py"
    target = tmp_path / "grades.csv"
    assert instructor.main(["--config", str(config), "export", "--to", str(target)]) == 0
    with open(target, newline="") as fh:
        assert any(row["assignment"] == assignment for row in csv.DictReader(fh))
    assert instructor.main(["--config", str(config), "autograde", "no_such_assignment",
                            "--student", "nobody"]) == 1
    assert "nbgrader autograde no_such_assignment nobody failed" in capsys.readouterr().err
