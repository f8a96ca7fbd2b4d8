"""What a job's learner processes leave for the grader to handle, bounded (issue 31, blind round
r4): the job folder's disk quota, a tree too deep for shutil.rmtree, text that cannot be encoded,
hidden-test lines printed into outputs, the instructor's environment, %-format width bombs in the
clean regrade. Unit tests; the blind rounds (test_hostile_blind.py) grade the attacks for real."""
from __future__ import annotations

import os

import nbformat
import pytest

from memlab.autograde.batch import grade_class as gc
from memlab.autograde.batch import processes
from memlab.autograde.batch.intake import remove_tree
from memlab.autograde.batch.jobs import folder_over
from memlab.autograde.review import answer_values
from memlab.autograde.security.sanitize import HIDDEN_LINE, hide_hidden_lines


def _deep(root, depth: int) -> None:
    start = os.getcwd()
    os.chdir(root)
    try:
        for _ in range(depth):
            os.mkdir("d")
            os.chdir("d")
        with open("x", "w") as fh:
            fh.write("deep")
    finally:
        os.chdir(start)


def test_a_tree_too_deep_for_rmtree_is_removed(tmp_path):
    root = tmp_path / "job"
    root.mkdir()
    _deep(root, 1600)                       # shutil.rmtree: RecursionError on Python 3.11
    remove_tree(root)
    assert not root.exists()


def test_the_folder_quota_counts_files_and_blocks_not_sizes(tmp_path):
    for i in range(30):
        (tmp_path / f"f{i}").write_text("x")
    assert folder_over(tmp_path, 0, 20) == "holds more than 20 files and folders"
    assert folder_over(tmp_path, 0, 100) == ""
    with open(tmp_path / "sparse", "wb") as fh:   # 2 GiB long, nothing on disk
        fh.truncate(2 * 2**30)
    assert folder_over(tmp_path, 64 * 2**20, 0) == ""
    (tmp_path / "full").write_bytes(os.urandom(3 * 2**20))
    assert folder_over(tmp_path, 2 * 2**20, 0) == "holds more than 2 MiB"
    deep = tmp_path / "deep"
    deep.mkdir()
    _deep(deep, 1200)                       # walked without recursion
    try:
        assert folder_over(tmp_path, 0, 10_000) == ""
    finally:
        remove_tree(deep)                   # pytest's own clean-up would recurse into it


def test_text_a_submission_holds_is_recorded_encodable():
    res = gc._encodable({"reasons": ["not a readable notebook: \ud800"], "grades": {"n": [1, 2]}})
    assert res["reasons"] == ["not a readable notebook: \\ud800"]
    assert res["grades"] == {"n": [1, 2]}
    res["reasons"][0].encode("utf-8")


def test_no_output_keeps_a_line_of_a_hidden_test():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(
        "check(f)\n### BEGIN HIDDEN TESTS\n_hidden_rng = random.Random(20261130)\n"
        "assert f(_hidden_rng.random()) == 3, 'f is wrong'\n### END HIDDEN TESTS\n",
        metadata={"nbgrader": {"grade": True, "solution": False, "grade_id": "t", "points": 1}})
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout",
                               text="the caller:\n_hidden_rng = random.Random(20261130)\nok\n"),
        nbformat.v4.new_output("error", ename="AssertionError", evalue="f is wrong",
                               traceback=["assert f(_hidden_rng.random()) == 3, 'f is wrong'"]),
        nbformat.v4.new_output("display_data", data={"text/plain": "short\n"}),
    ]
    nb.cells.append(cell)
    assert hide_hidden_lines(nb) == 2
    assert nb.cells[0].outputs[0].text == f"the caller:\n{HIDDEN_LINE}\nok\n"
    assert nb.cells[0].outputs[1].traceback == [HIDDEN_LINE]
    assert nb.cells[0].outputs[1].evalue == "f is wrong"      # the test's own message stays
    assert nb.cells[0].outputs[2].data["text/plain"] == "short\n"
    # a learner's cell that wraps the lines a failing run prints in hidden-test markers (r5,
    # a15) hides nothing: hidden tests are read from the course's test cells only
    fake = nbformat.v4.new_markdown_cell("### BEGIN HIDDEN TESTS\nNameError: name 'f' is not "
                                         "defined\n### END HIDDEN TESTS\n")
    out = nbformat.v4.new_code_cell("f")
    out.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                          text="NameError: name 'f' is not defined\n")]
    nb2 = nbformat.v4.new_notebook(cells=[fake, out])
    assert hide_hidden_lines(nb2) == 0
    assert nb2.cells[1].outputs[0].text == "NameError: name 'f' is not defined\n"


def test_the_grading_processes_start_without_the_instructors_secrets(monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    env = processes._child_env()
    assert "GITHUB_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["OMP_NUM_THREADS"] == "2" and env["PYTHONUNBUFFERED"] == "1" and "PATH" in env


def test_a_jobs_temporary_files_live_in_its_folder(tmp_path, monkeypatch):
    """06's ranks write a temporary folder: a kernel killed at a limit leaves it in the job's
    folder (removed by the batch), not in the instructor's temp folder (blind r4, CI)."""
    import subprocess
    import sys
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path / "instructor"))
    for var in ("TEMP", "TMP"):
        monkeypatch.delenv(var, raising=False)  # restored after the test, as TMPDIR
    monkeypatch.setattr(tempfile, "tempdir", None)
    job = tmp_path / "memlab-job-x"
    job.mkdir()
    tmp = processes._temp_in(job)
    assert tmp == job / "tmp" and tempfile.gettempdir() == str(tmp)
    child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.mkdtemp())"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert os.path.dirname(child) == str(tmp)


@pytest.mark.parametrize("source, unsafe", [
    ('answer_q1 = "%100000000000d" % 1', True),
    ('answer_q1 = "%.99999f" % 1.0', True),
    ('answer_q1 = "%*d" % (10**9, 1)', True),
    ('answer_q1 = "%(x)9999s" % {"x": 1}', True),
    ('answer_q1 = "%d GB" % 120', False),
    ('answer_q1 = "%5.1f x" % 3.14159', False),
])
def test_a_format_width_bomb_is_not_evaluated_by_the_grader(source, unsafe):
    nb = {"cells": [{"cell_type": "code", "source": source,
                     "metadata": {"nbgrader": {"solution": True, "grade_id": "answer_q1"}}}]}
    values, refused = answer_values(nb)
    assert ("answer_q1" in refused) == unsafe, (values, refused)


_NESTED = "\n".join(f"s{i} = f'{{s{i - 1}}}{{s{i - 1}}}{{s{i - 1}}}{{s{i - 1}}}'"
                    for i in range(1, 30))


@pytest.mark.parametrize("source, unsafe", [
    # growth by small steps, each within the old per-operation checks (blind round r5)
    ("x = [1]\n" + "x = x + x\n" * 40 + "answer_q1 = 1", True),
    ("x = [[1, 2, 3]]\n" + "x = [x, x, x, x]\n" * 20 + "answer_q1 = 1", True),
    ("s0 = 'z' * 1\n", True),
    ("s0 = 'zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz'\n" + _NESTED + "\nanswer_q1 = 1", True),
    # honest answers stay evaluable
    ("answer_q1 = round(7e9 * 16 / 1e9, 1)\nnote = f'{answer_q1} GB'\nx = [1, 2, 3] + [4]", False),
    ("answer_q1 = [2 ** 10 * k for k in (1,)]", True),   # a comprehension is not evaluated
])
def test_every_value_the_grader_evaluates_is_size_checked(source, unsafe):
    nb = {"cells": [{"cell_type": "code", "source": source,
                     "metadata": {"nbgrader": {"solution": True, "grade_id": "answer_q1"}}}]}
    values, refused = answer_values(nb)
    assert ("answer_q1" in refused or "s0" in refused) == unsafe, (values, refused)
    if not unsafe:
        assert values["answer_q1"] == 112.0 and values["note"] == "112.0 GB"
