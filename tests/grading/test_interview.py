"""Tests for memlab.grading.interview (assignment 07 "Interview prep"): the facade and its parts
interview_bank, interview_panel and interview_review.

What they pin: the question registry matches the source notebook (ids, kinds, points), the
solution scores full marks through the same test code nbgrader runs, keys never reach the
release, the package or the printed feedback, the format checks, the review lines, the
self-study widgets (reveal locked until an attempt) and the instructor's review list, including
the clean regrade outside the kernel that catches a patched grader.
"""
from __future__ import annotations

import ast
import contextlib
import copy
import io
import json
import re
import shutil
import warnings
from pathlib import Path

import pytest

import memlab
from memlab.autograde import review as rv
from memlab.grading import interview as iv
from memlab.grading.answers.grade import grade_numeric
from memlab.grading.answers.bank import RUBRICS

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "solutions" / "07_interview_prep" / "07_interview_prep.ipynb"
RELEASE = ROOT / "notebooks" / "07_interview_prep" / "07_interview_prep.ipynb"
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)
# the key, then the end of the call or its list of known mistakes
KEY_CALL = re.compile(r'ml\.interview\.grade\("(q\d+)", _answer, ([^\n]+?)(?:\)|, mistakes=\{[^\n]*)\n')


def _load(path):
    return json.loads(Path(path).read_text())


def _src(cell) -> str:
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


def _cells(nb) -> dict:
    return {c["metadata"]["nbgrader"]["grade_id"]: c for c in nb["cells"]
            if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")}


@pytest.fixture(scope="module")
def source():
    return _load(SOURCE)


@pytest.fixture(scope="module")
def keys(source):
    """{qid: key} read from the hidden tests of the source notebook."""
    found = {}
    for gid, cell in _cells(source).items():
        m = KEY_CALL.search(_src(cell))
        if m:
            found[m.group(1)] = ast.literal_eval(m.group(2))
    return found


@pytest.fixture(scope="module")
def solution_answers(source):
    values, unsafe = rv.answer_values(source)
    assert not unsafe, unsafe
    return values


# -------------------------------------------------------------------------- facade
# Every name memlab.grading.interview had before it was split into interview_bank (questions,
# grading, practice), interview_panel (widgets) and interview_review (instructor's review).
FACADE = {
    "interview.bank": ["Question", "QUESTIONS", "TOPICS", "Practice", "PRACTICE", "REVIEW_MARKER",
                       "COPY_SHARE", "FULL_TOL", "PARTIAL_TOL", "answer_of", "grade",
                       "copied_share", "practice", "_PRIVATE", "_load_engine", "_ENGINE",
                       "_engine", "_label_list", "_question", "_rubric"],
    "interview.panel": ["SelfCheck", "StudyPanel", "self_check", "study_panel"],
}


def test_facade_re_exports_the_parts():
    import importlib

    for part, names in FACADE.items():
        module = importlib.import_module(f"memlab.grading.{part}")
        for name in names:
            assert getattr(iv, name) is getattr(module, name), f"ml.interview.{name} is not {part}'s"
    assert set(iv.__all__) <= {n for names in FACADE.values() for n in names}
    assert memlab.interview is iv                        # the short name notebooks use
    # the instructor's review is not part of 07's face (a learner's kernel never loads it)
    assert not hasattr(iv, "review_notebook") and not hasattr(iv, "main")
    # the private engine: loaded once, from answers/'s files, apart from the public modules
    assert iv._ENGINE[0].__name__ == f"{iv._PRIVATE}.grade"
    assert iv._ENGINE[1].__name__ == f"{iv._PRIVATE}.bank"
    assert iv._ENGINE[0] is not memlab.grading.answers.grade
    assert Path(iv._ENGINE[0].__file__).parent == Path(memlab.grading.answers.grade.__file__).parent


def test_review_cli_runs_as_a_module(tmp_path):
    """``python -m memlab.autograde.review review`` (the instructor's side, not 07's facade)."""
    import subprocess
    import sys

    for module in ("memlab.autograde.review",):
        proc = subprocess.run([sys.executable, "-m", module, "review", "--path", str(tmp_path)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and "nothing flagged" in proc.stdout, (module, proc.stderr)


# ------------------------------------------------------------------------ registry
def test_registry_covers_the_issue():
    qs = iv.QUESTIONS
    assert len(qs) >= 24
    assert {q.topic for q in qs.values()} == set(iv.TOPICS)
    assert {q.kind for q in qs.values()} == {"numeric", "choice", "multi", "ordering", "text"}
    rubrics = {q.rubric for q in qs.values() if q.kind == "text"}
    assert {"oom_before_batch", "checkpointing_cost"} <= rubrics     # the brief's two questions
    assert rubrics <= set(RUBRICS)
    assert any(q.unit == "GB" for q in qs.values()) and any(q.unit == "GiB" for q in qs.values())
    for q in qs.values():
        assert (q.kind == "numeric") == (q.unit != "" or q.id in ("q15", "q18"))
        assert (q.kind in ("choice", "multi", "ordering")) == bool(q.options)


def test_source_notebook_matches_the_registry(source, keys):
    cells = _cells(source)
    for qid, q in iv.QUESTIONS.items():
        answer, test = cells[f"answer_{qid}"], cells[f"test_{qid}"]
        assert answer["metadata"]["nbgrader"]["solution"] and "### BEGIN SOLUTION" in _src(answer)
        meta, text = test["metadata"]["nbgrader"], _src(test)
        assert meta["grade"] and meta["locked"] and meta["points"] == q.points, qid
        assert f'ml.interview.answer_of("{qid}", globals())' in text
        assert text.rstrip().splitlines()[-1 if q.kind == "text" else -2] == f"_result.points({q.points:g})"
        if q.kind == "text":
            assert "HIDDEN" not in text and qid not in keys
        else:
            assert qid in keys, f"{qid}: no key in a hidden test"
            assert all("ml.interview.grade" not in line for line in HIDDEN.sub("", text).splitlines()), (
                f"{qid}: the grading call (and its key) must be inside the hidden block")


def test_release_and_package_hold_no_keys(keys):
    release = _load(RELEASE)
    for gid, cell in _cells(release).items():
        text = _src(cell)
        assert "HIDDEN" not in text and not KEY_CALL.search(text), gid
    # the facade, the modules it is made of (the bank holds the practice keys) and the review
    files = sorted(Path(iv.__file__).parent.glob("*.py")) + [Path(rv.__file__)]
    assert {f.stem for f in files} >= {"__init__", "bank", "panel", "review"}
    for path in files:
        package = path.read_text()
        for qid, key in keys.items():
            digits = repr(key).replace(".", "").strip("0")
            if isinstance(key, float) and not key.is_integer() and len(digits) >= 3:  # distinctive
                assert repr(key) not in package, f"the key of {qid} appears in {path.name}"


def test_solution_scores_full_marks_through_the_test_code(source, solution_answers, capsys):
    """The same test source nbgrader runs, executed in a clean namespace."""
    for gid, cell in _cells(source).items():
        meta = cell["metadata"]["nbgrader"]
        if meta.get("grade") and not meta.get("solution"):
            points, printed = rv._regrade(_src(cell), solution_answers, meta["points"])
            assert points == meta["points"], f"{gid}: {points} of {meta['points']}\n{printed}"
            assert iv.REVIEW_MARKER not in printed, f"{gid} is flagged:\n{printed}"
    assert capsys.readouterr().err == ""


def test_practice_keys_never_grade_a_graded_answer_as_right(solution_answers):
    for qid, make in iv.PRACTICE.items():
        q = iv.QUESTIONS[qid]
        for seed in range(12):
            p = make(__import__("random").Random(seed))
            assert p.qid == qid and p.kind == q.kind and p.worked
            if q.kind == "numeric":
                r = grade_numeric(solution_answers[q.variable], p.key, p.unit)
                assert r.score < 1.0, f"practice {qid} (seed {seed}) has the graded key {p.key} {p.unit}"
                assert p.check(f"{p.key} {p.unit}").score == 1.0
            else:
                labels = list(p.key) if isinstance(p.key, (tuple, list)) else [p.key]
                assert set(p.options) >= set(labels)
                assert p.check(p.key if q.kind == "choice" else labels).score == 1.0
                graded = solution_answers[q.variable]
                graded = [graded] if isinstance(graded, str) and q.kind == "choice" else graded
                if isinstance(graded, str):
                    graded = iv._label_list(graded, ordered=q.kind == "ordering")
                assert sorted(labels) != sorted(graded), (
                    f"practice {qid} has the same labels as the graded key: a learner could "
                    "copy them")


# ------------------------------------------------------------------- answer_of/grade
def test_answer_of_blank_raises_not_implemented():
    with pytest.raises(NotImplementedError, match="answer_q1 is not set"):
        iv.answer_of("q1", {})


@pytest.mark.parametrize("qid,answer,message", [
    ("q1", "lots", "no number found"),
    ("q1", "20 ms", "in seconds"),
    ("q3", "z", "not an option: z"),
    ("q3", ["a", "b"], "exactly one"),
    ("q3", 3, "expected one option label"),
    ("q4", ["d", "x"], "not an option: x"),
    ("q22", "c > e > d", "every option exactly once"),
    ("q9", "   ", "empty"),
    ("q9", 42, "expected a string"),
])
def test_answer_of_rejects_unreadable_answers(qid, answer, message):
    with pytest.raises(AssertionError, match=message):
        iv.answer_of(qid, {f"answer_{qid}": answer})


def test_answer_of_prints_how_it_reads(capsys):
    assert iv.answer_of("q2", {"answer_q2": "112 GB"}) == "112 GB"
    assert iv.answer_of("q22", {"answer_q22": ["c", "e", "d", "a", "b"]})
    out = capsys.readouterr()
    assert "answer_q2 reads as 104.3 GiB" in out.out and "orders c > e > d > a > b" in out.out
    assert out.err == ""


def test_numeric_feedback_never_states_the_key(capsys):
    for answer, points in (("20.8 GB", 2.0), ("19.5 GiB", 2.0), ("23 GB", 1.0), ("30 GB", 0.0),
                           ("nonsense", 0.0)):
        r = iv.grade("q1", answer, 20.8)
        assert r.points(2) == points
        out = capsys.readouterr().out
        assert "20.8" not in out.replace("you gave 20.8 GB", ""), out
        assert "expected" not in out
    iv.grade("q1", "30 GB", 20.8)
    assert "too high" in capsys.readouterr().out


def test_choice_and_ordering_feedback_never_state_the_key(capsys):
    assert iv.grade("q3", "a", "b").score == 0.0
    assert iv.grade("q4", ["d"], ["d", "e"]).score == 0.5
    assert iv.grade("q22", "e > c > d > a > b", ["c", "e", "d", "a", "b"]).score == pytest.approx(0.8)
    assert iv.grade("q22", "c > e > d > a > b", "c > e > d > a > b").score == 1.0
    out = capsys.readouterr().out
    assert "the answer is" not in out and "right order is" not in out and "right options are" not in out


def test_review_line_for_uncertain_grades(capsys):
    iv.grade("q1", "24G", 24)                   # ambiguous unit: grade depends on GB vs GiB
    iv.grade("q9", "Because it has to recompute the activations, which takes more time.")
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith(iv.REVIEW_MARKER)]
    assert len(lines) == 2 and lines[0].startswith(f"{iv.REVIEW_MARKER} q1 (")
    assert "review band" in lines[1]


def test_copying_the_model_answer_is_flagged(capsys):
    model = RUBRICS["checkpointing_cost"].model_answer
    r = iv.grade("q9", model)
    assert r.score == 1.0 and r.needs_review and "model answer" in r.review_reason
    assert f"{iv.REVIEW_MARKER} q9" in capsys.readouterr().out
    own = "Checkpointing drops activations and recomputes them during backward: extra time."
    assert iv.copied_share(own, model) < iv.COPY_SHARE


def test_grade_undoes_a_patched_engine(capsys):
    original = memlab.grading.answers.grade.grade_numeric
    memlab.grading.answers.grade.grade_numeric = lambda *a, **k: memlab.grading.answers.grade.Result(1.0)
    try:
        assert iv.grade("q1", "1 GB", 20.8).score == 0.0
    finally:
        memlab.grading.answers.grade.grade_numeric = original


def test_grade_is_silent_on_stderr_and_warns_nothing(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for qid, q in iv.QUESTIONS.items():
            key = {"text": None, "numeric": 1.0, "choice": q.options[0] if q.options else None,
                   "multi": list(q.options[:2]), "ordering": list(q.options)}[q.kind]
            for answer in ("", "x" * 5000, None, ["a"], "a", 3.5, "fp16 bf16 " * 80):
                iv.grade(qid, answer, key)
    assert capsys.readouterr().err == ""


def test_instructor_errors_raise():
    with pytest.raises(ValueError, match="unknown question"):
        iv.grade("q99", "a", "a")
    with pytest.raises(ValueError, match="needs its key"):
        iv.grade("q1", "1 GB")
    with pytest.raises(ValueError, match="no key"):
        iv.grade("q9", "text", "a")


# ------------------------------------------------------------------------- widgets
@pytest.mark.parametrize("qid", list(iv.QUESTIONS))
def test_self_check_widget_reveals_only_after_an_attempt(qid):
    box = iv.self_check(qid, seed=3)
    assert box.reveal_button.disabled and not box.attempted
    box.reveal_button.click()                          # a click the front end would block
    assert "first" in box.solution.value and "Answer:" not in box.solution.value
    box.check_button.click()                           # empty: not an attempt
    assert box.reveal_button.disabled
    box.answer.value = "b" if box.question.kind != "text" else "It recomputes activations."
    box.check_button.click()
    assert not box.reveal_button.disabled and box.feedback.value.startswith("<pre")
    box.reveal_button.click()
    if box.question.kind == "text":
        assert html_unescape(RUBRICS[box.question.rubric].model_answer[:40]) in html_unescape(box.solution.value)
    else:
        assert "Answer:" in box.solution.value and box.item.worked[:20] in html_unescape(box.solution.value)
    assert box._repr_mimebundle_()  # displays as its widget


def html_unescape(s: str) -> str:
    import html
    return html.unescape(s)


def test_new_variant_locks_the_reveal_again():
    box = iv.self_check("q1", seed=0)
    first = box.prompt.value
    box.answer.value = "1 GB"
    box.check()
    assert not box.reveal_button.disabled
    box.new_button.click()
    assert box.reveal_button.disabled and box.answer.value == "" and box.prompt.value != first
    assert iv.self_check("q9").new_button.disabled and iv.self_check("q3").new_button.disabled


def test_study_panel_switches_questions():
    panel = iv.study_panel()
    assert panel.current.question.id == "q1" and len(panel.dropdown.options) == len(iv.QUESTIONS)
    panel.dropdown.value = "q22"
    assert panel.current.question.id == "q22" and panel.widget.children[1] is panel.current.widget
    panel.select("q9")
    assert panel.dropdown.value == "q9" and panel.current.question.kind == "text"


# ------------------------------------------------------------------- review list
def _fake_autograded(source, answers: dict, shown_points: dict, printed: dict | None = None):
    """The source notebook as nbgrader would leave it after autograde: learner answer cells,
    test cells with their outputs (an execute_result with the points, printed lines)."""
    nb = copy.deepcopy(source)
    printed = printed or {}
    for cell in nb["cells"]:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        if gid.startswith("answer_"):
            cell["source"] = answers.get(gid, "# YOUR CODE HERE\nraise NotImplementedError()")
        if gid.startswith("test_"):
            qid = gid[len("test_"):]
            if qid in shown_points:
                cell["outputs"] = [
                    {"output_type": "stream", "name": "stdout", "text": printed.get(qid, "ok\n")},
                    {"output_type": "execute_result", "execution_count": 1, "metadata": {},
                     "data": {"text/plain": repr(float(shown_points[qid]))}}]
            else:
                cell["outputs"] = [{"output_type": "error", "ename": "NotImplementedError",
                                    "evalue": "", "traceback": []}]
    return nb


def test_review_lines_are_found_in_test_cell_outputs(source, tmp_path):
    nb = _fake_autograded(source, {"answer_q9": 'answer_q9 = "It recomputes, slower."'}, {"q9": 1.1},
                          {"q9": "Q9 (text): 1.1 of 3 points\nNEEDS MANUAL REVIEW: q9 (1.1 of 3 "
                                 "points): score 0.37 is in the review band 0.3-0.7\n"})
    # a line a learner prints in an answer cell is not a test cell's output: ignored
    for cell in nb["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "answer_q1":
            cell["outputs"] = [{"output_type": "stream", "name": "stdout",
                                "text": "NEEDS MANUAL REVIEW: q1 fake\n"}]
    folder = tmp_path / "alice" / "07_interview_prep"
    folder.mkdir(parents=True)
    (folder / "07_interview_prep.ipynb").write_text(json.dumps(nb))
    items = rv.find_reviews(tmp_path)
    assert [(i.student, i.assignment, i.question, i.source) for i in items] == [
        ("alice", "07_interview_prep", "q9", "flagged")]
    assert "review band" in items[0].reason
    text = rv.format_reviews(items)
    assert "alice/07_interview_prep/07_interview_prep.ipynb  q9  [flagged]" in text
    assert rv.format_reviews([]) == "nothing flagged for manual review"


def test_report_heads_of_other_assignments_are_found():
    nb = {"cells": [{"cell_type": "code", "source": "", "metadata": {"nbgrader": {
        "grade": True, "solution": False, "grade_id": "test_written_answer", "points": 2}},
        "outputs": [{"output_type": "stream", "name": "stdout",
                     "text": "[needs review] score 0.55 (text): score 0.55 is in the review band\n"}]}]}
    items = rv.review_notebook(nb)
    assert [(i.question, i.source) for i in items] == [("test_written_answer", "flagged")]


def test_audit_catches_a_patched_grader_and_unevaluable_answers(source):
    cheat = ('ml.interview.grade = lambda *a, **k: ml.rubric.Result(1.0)\n'
             'answer_q1 = "1 GB"')
    nb = _fake_autograded(source, {
        "answer_q1": cheat,                                    # can not be evaluated safely
        "answer_q2": 'answer_q2 = "1 GiB"',                    # wrong, but the notebook shows 2
        "answer_q3": 'answer_q3 = "b"',                        # right, shown right
        "answer_q18": "n = 512 // (8 * 16)\nanswer_q18 = f'{n}'",  # arithmetic is evaluated
    }, {"q1": 2.0, "q2": 2.0, "q3": 1.0, "q18": 2.0})
    items = rv.review_notebook(nb, source)
    by_q = {i.question: i for i in items}
    assert by_q["q1"].source == "audit" and "runs code" in by_q["q1"].reason
    assert by_q["q2"].source == "audit" and "clean regrade" in by_q["q2"].reason
    assert "q3" not in by_q and "q18" not in by_q
    assert all(i.question in ("q1", "q2") for i in items), items


def test_audit_of_an_honest_submission_is_quiet(source, solution_answers):
    answers = {f"answer_{q}": f"answer_{q} = {solution_answers['answer_' + q]!r}"
               for q in iv.QUESTIONS}
    points = {q: iv.QUESTIONS[q].points for q in iv.QUESTIONS}
    assert rv.review_notebook(_fake_autograded(source, answers, points), source) == []


@pytest.mark.parametrize("cell,expected", [
    ('answer_q1 = "20.8 GB"', {"answer_q1": "20.8 GB"}),
    ("answer_q1 = 16 * 1.3", {"answer_q1": pytest.approx(20.8)}),
    ('b = 1.3e9\nanswer_q1 = f"{16 * b / 1e9:.1f} GB"', {"answer_q1": "20.8 GB", "b": 1.3e9}),
    ("answer_q1 = round(math.sqrt(64) * 96 / 1024, 2)", {"answer_q1": 0.75}),
    ('answer_q1 = ["a", "b"]', {"answer_q1": ["a", "b"]}),
    ("# YOUR CODE HERE\nraise NotImplementedError()", {}),
    ('raise NotImplementedError()\nanswer_q1 = "1 GB"', {}),
])
def test_answer_values_evaluates_plain_answers(cell, expected):
    nb = {"cells": [{"cell_type": "code", "source": cell, "metadata": {"nbgrader": {
        "grade": False, "solution": True, "grade_id": "answer_q1"}}}]}
    values, unsafe = rv.answer_values(nb)
    assert not unsafe and values == expected


@pytest.mark.parametrize("cell", [
    "import os\nanswer_q1 = '1 GB'",
    "ml.rubric.grade_numeric = None\nanswer_q1 = '1 GB'",
    "answer_q1 = open('/etc/passwd').read()",
    "answer_q1 = 'x' * 10**9",
    "answer_q1 = 10 ** 10 ** 10",
    "def f():\n    return 1\nanswer_q1 = f()",
    "answer_q1 = (",
])
def test_answer_values_never_runs_code(cell):
    nb = {"cells": [{"cell_type": "code", "source": cell, "metadata": {"nbgrader": {
        "grade": False, "solution": True, "grade_id": "answer_q1"}}}]}
    values, unsafe = rv.answer_values(nb)
    assert "answer_q1" in unsafe and "answer_q1" not in values


def test_review_command_reads_the_course_layout(source, tmp_path, capsys):
    (tmp_path / "autograder").mkdir()
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", tmp_path / "autograder")
    (tmp_path / "solutions" / "07_interview_prep").mkdir(parents=True)
    shutil.copy(SOURCE, tmp_path / "solutions" / "07_interview_prep")
    folder = tmp_path / "autograder" / "work" / "autograded" / "bob" / "07_interview_prep"
    folder.mkdir(parents=True)
    nb = _fake_autograded(source, {"answer_q2": 'answer_q2 = "1 GiB"'}, {"q2": 2.0})
    (folder / "07_interview_prep.ipynb").write_text(json.dumps(nb))
    config = tmp_path / "autograder" / "nbgrader_config.py"
    assert rv.main(["review", "07_interview_prep", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "bob/07_interview_prep/07_interview_prep.ipynb  q2  [audit]" in out
    from memlab import instructor
    assert instructor.main(["--config", str(config), "reviews", "07_interview_prep"]) == 0
    assert "q2  [audit]" in capsys.readouterr().out


def test_grade_class_report_gets_the_answers_audit(source, tmp_path):
    """grade-class's class report lists the clean regrade's disagreements: 07's report hook in
    the registry of assignments runs on 07's submissions only (another assignment's result
    costs nothing and adds nothing)."""
    from types import SimpleNamespace

    from memlab.autograde.batch import grade_class

    folder = tmp_path / "autograded" / "bob" / "07_interview_prep"
    folder.mkdir(parents=True)
    nb = _fake_autograded(source, {"answer_q2": 'answer_q2 = "1 GiB"'}, {"q2": 2.0})
    (folder / "07_interview_prep.ipynb").write_text(json.dumps(nb))
    (tmp_path / "source" / "07_interview_prep").mkdir(parents=True)
    shutil.copy(SOURCE, tmp_path / "source" / "07_interview_prep")
    cd = SimpleNamespace(autograded_directory="autograded", source_directory="source",
                         format_path=lambda base, student, a: str(tmp_path / base / student / a))
    results = [{"status": "ok", "student": "bob", "assignment": "07_interview_prep"},
               {"status": "error", "student": "eve", "assignment": "07_interview_prep"},
               {"status": "ok", "student": "bob", "assignment": "03_mixed_precision"}]
    audits = grade_class._assignment_hooks(SimpleNamespace(coursedir=cd), results)
    assert list(audits) == [("bob", "07_interview_prep")]
    assert [line.split(" ", 2)[:2] for line in audits["bob", "07_interview_prep"]] == [["q2", "[audit]"]]


@pytest.mark.slow
def test_executed_notebook_end_to_end(source, tmp_path):
    """A real kernel: the solution with a patched grader on q1 and a half-right q9. The
    notebook awards the cheat full points; the review list names both answers."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(SOURCE, as_version=4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid == "answer_q1":
            cell.source = ('_real = ml.interview.grade\n'
                           'ml.interview.grade = lambda q, a, k=None: _real(q, "20.8 GB" if q == "q1" '
                           'else a, k)\nanswer_q1 = "1 GB"')
        elif gid == "answer_q9":
            cell.source = 'answer_q9 = "Because it has to recompute the activations, which takes more time."'
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    items = {i.question: i for i in rv.review_notebook(json.loads(nbformat.writes(nb)), source)}
    assert items["q1"].source == "audit", items
    assert items["q9"].source == "flagged" and "review band" in items["q9"].reason


# ------------------------------------------------------------------ guessing the keys
def test_single_choice_keys_are_spread(keys):
    """No letter is the key of more than a third of the single-choice questions (issue: "b"
    answered 7 of 8)."""
    choice = {q: keys[q] for q, question in iv.QUESTIONS.items() if question.kind == "choice"}
    assert len(choice) >= 6
    for letter in "abcd":
        share = sum(k == letter for k in choice.values())
        assert share <= len(choice) / 3, f"{letter!r} is the key of {share} of {len(choice)}"


def test_a_constant_answer_scores_at_most_chance(keys):
    """The same letter typed into every choice question earns at most what guessing would
    (1 / options of the points), graded by the real grader."""
    choice = [q for q, question in iv.QUESTIONS.items() if question.kind == "choice"]
    points = sum(iv.QUESTIONS[q].points for q in choice)
    chance = sum(iv.QUESTIONS[q].points / len(iv.QUESTIONS[q].options) for q in choice)
    for letter in "abcd":
        earned = sum(iv.grade(q, letter, keys[q]).points(iv.QUESTIONS[q].points) for q in choice)
        assert earned <= chance + 1e-9, f"answering {letter!r} everywhere earns {earned}/{points}"


def test_answer_cell_examples_are_never_the_key(source, keys):
    """The example in an answer cell's comment (``format: answer_q3 = "d"``, ``e.g. ...``)
    never is that question's key: copying the examples earns nothing."""
    example = re.compile(r"#.*answer_(q\d+) = (\"[^\"]*\"|\[[^\]]*\])")
    seen = 0
    for gid, cell in _cells(source).items():
        m = example.search(_src(cell).splitlines()[0]) if _src(cell) else None
        if not m or m.group(1) not in keys:
            continue
        seen += 1
        q, value = m.group(1), ast.literal_eval(m.group(2))
        result = iv.grade(q, value, keys[q])
        assert result.score == 0, f"{gid}: the example {value!r} scores {result.score}"
    assert seen >= 20


# ------------------------------------- 01-06: written answers re-graded outside the kernel
def _written(name: str):
    """(source notebook, the test cell that grades its written answer, that answer's cell)."""
    src = json.loads((ROOT / "solutions" / name / f"{name}.ipynb").read_text())
    tests = [c for c in src["cells"] if c["metadata"].get("nbgrader", {}).get("grade")
             and rv._RUBRIC_CALL.search("".join(c["source"]))]
    return src, tests


def _autograded_written(src, answer_source: dict, shown: dict):
    """src as nbgrader leaves it: the given answer cells' sources, each written-answer test
    cell showing ``shown[grade_id]`` points."""
    nb = copy.deepcopy(src)
    for cell in nb["cells"]:
        m = cell["metadata"].get("nbgrader", {})
        if m.get("grade_id") in answer_source:
            cell["source"] = answer_source[m["grade_id"]]
        if m.get("grade_id") in shown:
            cell["outputs"] = [{"output_type": "execute_result", "execution_count": 1,
                                "metadata": {}, "data": {"text/plain": repr(shown[m["grade_id"]])}}]
    return nb


@pytest.mark.parametrize("name", ["01_where_memory_goes", "02_checkpointing", "03_mixed_precision",
                                  "04_accumulation", "05_oom_clinic", "06_sharding"])
def test_every_written_answer_is_regraded_and_the_solution_is_quiet(name):
    """Each of 01-06 has a written answer the clean regrade re-runs (its report hook is in the
    registry); the solution's own answers, shown at full marks, raise nothing."""
    from memlab.grading.assignments import ASSIGNMENTS

    assert "memlab.autograde.review:answers_audit" in ASSIGNMENTS[name].report_hooks
    src, tests = _written(name)
    assert tests, f"{name}: no written-answer test cell found"
    nb = _autograded_written(src, {}, {c["metadata"]["nbgrader"]["grade_id"]:
                                       float(c["metadata"]["nbgrader"]["points"]) for c in tests})
    items = rv.review_notebook(nb, src)
    # the solution is the rubric's model answer, so "pasted from the model answer" is its due
    assert [i for i in items if i.source != "regrade"] == []
    for item in items:
        assert "pasted from the course's model answer" in item.reason, item
        assert "could not check" not in item.reason, item


def test_a_written_answer_the_kernel_overgraded_is_listed_with_the_clean_score():
    """05: the notebook shows 2 of 2 for a one-line answer (learner code changed the grading in
    the kernel); the regrade outside it gives what the answer earns and lists the difference."""
    src, (test,) = _written("05_oom_clinic")
    gid = test["metadata"]["nbgrader"]["grade_id"]
    nb = _autograded_written(src, {"oom_answer": 'OOM_ANSWER = "Use a smaller batch."'}, {gid: 2.0})
    items = {i.question: i for i in rv.review_notebook(nb, src)}
    assert items[gid].source == "audit" and "the notebook shows 2 points" in items[gid].reason
    assert "clean regrade outside the kernel gives 0" in items[gid].reason


def test_a_written_answer_cell_that_runs_code_is_not_trusted():
    src, (test,) = _written("03_mixed_precision")
    gid = test["metadata"]["nbgrader"]["grade_id"]
    answer_gid = next(c["metadata"]["nbgrader"]["grade_id"] for c in src["cells"]
                      if c["metadata"].get("nbgrader", {}).get("solution")
                      and "LOSS_SCALING_ANSWER" in "".join(c["source"]))
    cheat = ("ml.rubric.grade_text = lambda *a: ml.rubric.Result(1.0)\n"
             "LOSS_SCALING_ANSWER = 'x'")
    nb = _autograded_written(src, {answer_gid: cheat}, {gid: 2.0})
    (item,) = [i for i in rv.review_notebook(nb, src) if i.question == gid]
    assert item.source == "audit" and "runs code the audit does not run" in item.reason


def test_a_format_width_bomb_is_not_evaluated():
    nb = {"cells": [{"cell_type": "code", "source": 'answer_q1 = f"{1:999999999}"',
                     "metadata": {"nbgrader": {"grade": False, "solution": True,
                                               "grade_id": "answer_q1"}}}]}
    values, unsafe = rv.answer_values(nb)
    assert "wide format" in unsafe["answer_q1"] and not values


@pytest.mark.parametrize(
    "expr",
    [
        "((7 ** 512) ** 512) ** 512",
        "(2 ** 500) * (3 ** 500) * (5 ** 500) ** 300",
        "math.prod([10 ** 500] * 1)",
        "[0] * 10 ** 9",
        "math.prod([7 ** 512, 7 ** 512]) ** 64",
    ],
)
def test_a_number_bomb_is_not_evaluated_in_the_graders_process(expr):
    """The clean regrade evaluates answer cells' arithmetic in the instructor's own process: an
    answer whose value would take minutes and gigabytes to compute (a blind hostile round's
    ``((k**512)**512)**512``, which stalled a whole batch) is refused before it is computed."""
    import time

    nb = {
        "cells": [
            {
                "cell_type": "code",
                "source": f"import math\nanswer_q1 = {expr}",
                "metadata": {
                    "nbgrader": {"grade": False, "solution": True, "grade_id": "answer_q1"}
                },
            }
        ]
    }
    nb["cells"][0]["source"] = f"answer_q1 = {expr}"
    t0 = time.monotonic()
    values, unsafe = rv.answer_values(nb)
    assert time.monotonic() - t0 < 1.0
    assert "answer_q1" in unsafe and not values, (values, unsafe)
    ok = {"cells": [{**nb["cells"][0], "source": "answer_q1 = 2 ** 40 * 3 / 1024 ** 3"}]}
    assert rv.answer_values(ok)[0] == {"answer_q1": 2**40 * 3 / 1024**3}


def test_a_regrade_never_reloads_the_graders_modules():
    """04's test cell reloads memlab.rubric in the learner's kernel; the clean regrade runs in
    the grader's process, where a reload would replace the classes every other module holds."""
    from memlab.grading.answers import grade as g

    before = g.Rubric
    src, (test,) = _written("04_accumulation")
    gid = test["metadata"]["nbgrader"]["grade_id"]
    nb = _autograded_written(src, {}, {gid: 2.0})
    assert [i for i in rv.review_notebook(nb, src) if i.source == "audit"] == []
    assert g.Rubric is before


@pytest.mark.parametrize("qid", [q for q in iv.QUESTIONS if iv.QUESTIONS[q].kind != "text"])
def test_a_wrong_attempt_gets_a_hint_first_and_the_key_only_on_request(qid):
    box = iv.self_check(qid, seed=1)
    assert box.hint_button.disabled
    key = box.item.key
    kind = box.item.kind
    if kind == "numeric":
        wrong = f"{key * 3 if key else 7} {box.item.unit}".strip()
    elif kind == "choice":
        wrong = next(o for o in box.item.options if o != key)
    elif kind == "multi":
        wrong = next(o for o in box.item.options if o not in key)
    else:
        wrong = " > ".join(reversed(list(key)))
    box.answer.value = wrong
    box.check_button.click()
    shown = html_unescape(box.feedback.value)
    assert box.item.check(box.answer.value).score < 1.0, shown
    assert not box.hint_button.disabled and not box.reveal_button.disabled
    assert (
        "expected" not in shown and "the answer is" not in shown and "right order is" not in shown
    ), f"{qid}: the check of a wrong attempt shows the key: {shown}"
    if box.item.kind == "numeric":
        assert "too high" in shown, shown
    box.hint_button.click()
    hint = html_unescape(box.solution.value)
    assert "Hint:" in hint and "Answer:" not in hint, hint
    box.reveal_button.click()
    assert "Answer:" in html_unescape(box.solution.value)


@pytest.mark.parametrize("qid", [q for q in iv.QUESTIONS if iv.QUESTIONS[q].kind == "numeric"])
def test_the_placeholder_is_in_the_unit_the_question_asks_for(qid):
    q = iv.QUESTIONS[qid]
    placeholder = iv.self_check(qid).answer.placeholder
    if q.unit in ("GB", "GiB", "MiB", "ms", "B", "x"):
        assert placeholder.endswith(q.unit), (qid, q.unit, placeholder)


def test_every_text_question_names_parts_of_its_rubric():
    """A text question's ``require`` names concepts of its rubric (a misspelt one could never be
    found, and would cap every answer)."""
    for q in iv.QUESTIONS.values():
        if q.kind == "text":
            names = {c.name for c in RUBRICS[q.rubric].concepts}
            assert q.require and set(q.require) <= names, (q.id, set(q.require) - names)


def test_a_part_the_question_asks_for_left_out_costs_points(capsys):
    """Q25 asks why nvidia-smi shows more AND why that is usually not a leak: an answer of the
    first part alone is capped, and the feedback names the part."""
    first_part = ("memory_allocated counts only live tensors. PyTorch's caching allocator keeps "
                  "freed blocks in its pool for reuse, so memory_reserved is larger, and "
                  "nvidia-smi also counts the CUDA context and other processes.")
    r = iv.grade("q25", first_part)
    out = capsys.readouterr().out
    assert r.score < 0.85 and "missing a part the question asks for: not a leak" in out, out


# --------------------------- Q34-Q40 (issue #35): every claim a key rests on, recomputed
NEW_QUESTIONS = ("q34", "q35", "q36", "q37", "q38", "q39", "q40")


def _prompt(source, qid: str) -> str:
    return _src(_cells(source)[f"{qid}-prompt"])


def _options(text: str) -> dict[str, str]:
    """{label: text} of a prompt's ``* a) ...`` options (continuation lines joined)."""
    found, label = {}, None
    for line in text.splitlines():
        m = re.match(r"\* ([a-f])\) (.*)", line)
        if m:
            label = m.group(1)
            found[label] = m.group(2)
        elif label and line.startswith("  "):
            found[label] += " " + line.strip()
        else:
            label = None
    return found


def _block(text: str) -> str:
    """The first fenced code block of a prompt."""
    return re.search(r"```[a-z]*\n(.*?)```", text, re.S).group(1)


def test_the_new_questions_are_registered_with_their_kinds(keys):
    kinds = {q: iv.QUESTIONS[q].kind for q in NEW_QUESTIONS}
    assert kinds == {"q34": "choice", "q35": "choice", "q36": "numeric", "q37": "numeric",
                     "q38": "choice", "q39": "multi", "q40": "choice"}
    assert len(iv.QUESTIONS) == 40 and list(iv.QUESTIONS)[-7:] == list(NEW_QUESTIONS)
    assert set(NEW_QUESTIONS) <= set(keys) and set(NEW_QUESTIONS) <= set(iv.PRACTICE)


def test_q34_the_message_says_what_the_key_says(source, keys):
    """Q34's message, read by notebook 10's reader, gives the diagnosis of the key's option; the
    practice variant's message gives its own key's."""
    from memlab.lessons import debugging

    text = _prompt(source, "q34")
    report = debugging.read_oom_message(_block(text))
    assert report.diagnosis == debugging.OTHER_PROCESS, report
    assert report.reserved_unallocated < report.tried_to_allocate <= report.others_bytes
    options = _options(text)
    assert options[keys["q34"]].startswith(report.diagnosis), options
    assert sum(o.startswith(d) for o in options.values() for d in debugging.DIAGNOSES) == 3
    p = iv.practice("q34")
    practice_report = debugging.read_oom_message(re.search(r'"(CUDA out of memory.*?)"', p.prompt).group(1))
    assert practice_report.diagnosis == p.options[p.key] == debugging.FRAGMENTATION


def _run_q35_loop(code: str, steps: int = 6) -> list[int]:
    """Q35's loop on a small MLP: live bytes after every optimizer.step(), above the start."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    batches = [(torch.randn(256, 64), torch.randn(256, 32)) for _ in range(steps)]
    tracker = memlab.MemoryTracker("cpu", timeline=False).track(model, optimizer, batches)
    after = []
    hook = optimizer.register_step_post_hook(lambda o, a, k: after.append(tracker.current_bytes))
    try:
        with tracker:
            exec(code, {"model": model, "optimizer": optimizer, "batches": batches, "F": F})
    finally:
        hook.remove()
    return [b - tracker.start_bytes for b in after]


def test_q35_only_the_keyed_line_leaks(source, keys):
    """Q35's loop, run as printed: it leaks; without the key's line (alone) the live bytes are
    flat, without any other marked line they still grow."""
    text = _prompt(source, "q35")
    code = _block(text)
    grows = lambda live: live[-1] > live[1]  # noqa: E731
    assert grows(_run_q35_loop(code)), "Q35's loop as printed does not leak"
    flat = []
    for line in code.splitlines():
        m = re.search(r"# line ([A-D])$", line)
        if m:
            indent = line[:len(line) - len(line.lstrip())]
            live = _run_q35_loop(code.replace(line, indent + "pass"))
            if not grows(live):
                flat.append(m.group(1))
    assert flat == ["A"], f"removing line(s) {flat} makes the loop flat"
    assert _options(text)[keys["q35"]] == "line A"


def test_q36_and_q37_keys_follow_from_their_numbers(source, keys):
    from memlab.measure import formulas

    q36 = " ".join(_prompt(source, "q36").split())
    for fact in ("6.74 billion", "32 layers", "**4 bits**", "**r = 64**", "q, k, v and o",
                 "4096 × 4096", "16 bytes per trainable parameter"):
        assert fact in q36, fact
    trainable = 32 * 4 * 64 * (4096 + 4096)            # LoRA: r (d_in + d_out) per weight
    assert trainable == 67_108_864
    assert keys["q36"] == pytest.approx((6.74e9 * 0.5 + 16 * trainable) / 1e9, rel=2e-3)
    # QLoRA's 0.127 bits/param of constants stays inside full credit
    assert 6.74e9 * 0.127 / 8 / 1e9 / keys["q36"] < iv.FULL_TOL
    q37 = " ".join(_prompt(source, "q37").split())
    for fact in ("13-billion", "40 layers", "h = 5120", "40 heads", "16 bytes per parameter",
                 "ZeRO-3", "**16 GPUs**", "b = 1", "s = 4096", "34·s·b·h"):
        assert fact in q37, fact
    states = formulas.zero_bytes_per_device(13e9, 16, stage=3)
    acts = 40 * formulas.korthikanti_layer_bytes(4096, 1, 5120, 40, recompute="selective")
    assert keys["q37"] == pytest.approx((states + acts) / 1e9, rel=1e-3)
    # the answers a hurried candidate gives score nothing: activations divided by N, or left out
    for wrong in ((states + acts / 16) / 1e9, states / 1e9, (16 * 13e9 + acts) / 1e9):
        assert iv.grade("q37", f"{wrong} GB", keys["q37"]).score == 0


def test_q38_bf16_really_loses_the_updates(source, keys):
    import torch

    w, master = torch.tensor(1.0, dtype=torch.bfloat16), torch.tensor(1.0, dtype=torch.float32)
    for _ in range(100):
        w, master = w - 1e-3, master - 1e-3
    assert w.dtype == torch.bfloat16 and w.item() == 1.0
    assert master.item() == pytest.approx(0.9, abs=1e-5)
    assert torch.tensor(1 - 2**-8, dtype=torch.bfloat16).item() == 1 - 2**-8   # the neighbour below
    assert "exactly 1.0" in _options(_prompt(source, "q38"))[keys["q38"]]


def test_q39_and_q40_numbers(source, keys):
    # ZeRO-3 against DDP (Rajbhandari et al. 2020, sec. 7): 3 psi against 2 psi; a ring
    # all-reduce sends 2(N-1)/N of the buffer per GPU, below 2 for every N
    assert 3 / 2 == 1.5 and all(2 * (n - 1) / n < 2 for n in (2, 8, 64, 1024))
    assert sorted(keys["q39"]) == ["b", "d", "e"]
    options = _options(_prompt(source, "q39"))
    assert "1.5 times" in options["b"] and "same bytes" in options["d"] and "NVLink" in options["e"]
    weights, cache = 6.74e9 * 2, 2 * 32 * 32 * 128 * 1024 * 2          # bf16; 09's formula
    assert cache / 1e9 == pytest.approx(0.54, abs=0.005)
    memory_s, compute_s = (weights + cache) / 3.35e12, 2 * 6.74e9 / 989e12
    assert 3.5e-3 < memory_s < 4.5e-3 and compute_s == pytest.approx(1.4e-5, rel=0.05)
    assert memory_s / compute_s > 100
    assert _options(_prompt(source, "q40"))[keys["q40"]].startswith("memory bandwidth")


# ------------------------------------------------------------------ known mistakes, named
MISTAKES_CALL = re.compile(
    r'ml\.interview\.grade\("(q\d+)", _answer, [^\n]+?, mistakes=(\{.*?\})\)', re.S)


def test_a_known_mistake_is_named_and_scores_as_it_would():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        hit = iv.grade("q1", "15.7 GB", 20.8, mistakes={15.6: "Adam keeps two moments"})
        right = iv.grade("q1", "20.8 GB", 20.8, mistakes={15.6: "Adam keeps two moments"})
        other = iv.grade("q1", "30 GB", 20.8, mistakes={15.6: "Adam keeps two moments"})
        label = iv.grade("q3", "a", "b", mistakes={"a": "both count a 16-bit copy"})
    text = out.getvalue()
    assert hit.score == 0.0 and text.count("a known mistake:") == 2
    assert "- a known mistake: Adam keeps two moments" in text
    assert "- a known mistake: both count a 16-bit copy" in text
    assert right.score == 1.0 and other.score == 0.0 and label.score == 0.0


def test_the_hidden_known_mistakes_are_wrong_answers_and_never_released(source, keys):
    """Each known mistake of 07's hidden tests scores below full marks (more than 5% from its
    key, or another label), and the release shows none of them (they point at the key)."""
    found = {}
    for cell in _cells(source).values():
        for qid, listed in MISTAKES_CALL.findall(_src(cell)):
            found[qid] = ast.literal_eval(listed)
    assert len(found) >= 15, sorted(found)
    for qid, listed in found.items():
        for wrong in listed:
            if isinstance(wrong, str):
                assert wrong != keys[qid], qid
            else:
                assert abs(wrong - keys[qid]) > 0.05 * abs(keys[qid]), (qid, wrong)
    released = json.dumps(_load(RELEASE))
    assert "mistakes=" not in released and "a known mistake" not in released
