"""memlab.autograde.batch.runner: the pure parts of grading inside the child (the scan of an
autograded notebook, failure reasons, results), without a kernel."""
from __future__ import annotations

import nbformat

from memlab.autograde.batch import runner


def test_first_line_squeezes_and_cuts():
    assert runner._first_line("a\n  b\tc") == "a b c"
    assert runner._first_line("x" * 200, 10) == "xxxxxxx..."


def test_classify_failure():
    assert "kernel died" in runner._classify_failure("... DeadKernelError: Kernel died ...")
    assert runner._classify_failure("No notebooks found") == "no gradable notebook: scores 0"
    assert runner._classify_failure("[info] x\nValueError: bad cell\n") == (
        "nbgrader could not grade it (ValueError: bad cell): scores 0")


def test_failed_result_shape():
    r = runner._failed_result({"student": "ana", "assignment": "05_oom_clinic"}, "timed out", 1.234)
    assert r == {"student": "ana", "assignment": "05_oom_clinic", "status": "failed",
                 "reasons": ["timed out"], "grades": {}, "penalties": {}, "scans": {},
                 "files": {}, "seconds": 1.23}


def _cell(gid, *, grade=True, solution=False, outputs=()):
    c = nbformat.v4.new_code_cell("pass")
    c.metadata["nbgrader"] = {"grade_id": gid, "grade": grade, "solution": solution}
    c.outputs = [nbformat.from_dict(o) for o in outputs]
    return c


def test_scan_reads_errors_reviews_guards_and_events(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _cell("answer", grade=False, solution=True, outputs=[
            {"output_type": "error", "ename": "MemoryError", "evalue": "", "traceback": []}]),
        _cell("test_a", outputs=[
            {"output_type": "stream", "name": "stdout",
             "text": f"{runner.REVIEW_MARKER} q9 pasted from the model answer\n"},
            {"output_type": "stream", "name": "stderr", "text": "a warning\n"}]),
        _cell("test_b", outputs=[
            {"output_type": "error", "ename": "TamperError",
             "evalue": f"{runner.GUARD_MARKER} torch.allclose was replaced", "traceback": []}]),
        _cell("test_c", outputs=[
            {"output_type": "error", "ename": "CellTimeoutError", "evalue": "", "traceback": []}]),
    ]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    scan = runner._scan(path)
    assert scan["reviews"] == ["q9 pasted from the model answer"]
    assert scan["guards"] == ["torch.allclose was replaced"]
    assert scan["events"] == ["answer: memory limit hit",
                              "test_c: interrupted after the per-cell timeout"]
    assert scan["tests"]["test_a"] == {"error": "", "stderr": "a warning"}
    assert scan["tests"]["test_b"]["error"].startswith("TamperError: grading guard:")
    assert set(scan["tests"]) == {"test_a", "test_b", "test_c"}


def test_db_tampering_is_seen():
    before = ([(1, "src", "sum")], [(1, 2.0)], [(1, None, None)])
    assert not runner._db_tampered(before, before)
    assert runner._db_tampered(before, ([(1, "src!", "sum")], [(1, 2.0)], [(1, None, None)]))
    added_manual = ([(1, "src", "sum")], [(1, 2.0)], [(1, None, None), (2, 5.0, None)])
    assert runner._db_tampered(before, added_manual)
    added_clean = ([(1, "src", "sum")], [(1, 2.0)], [(1, None, None), (2, None, None)])
    assert not runner._db_tampered(before, added_clean)


def test_scan_reads_a_rubric_report_head_with_its_test_cell(tmp_path):
    """01-06's written answers print ``[needs review] ...`` (ml.rubric's report head), not 07's
    marker: the scan lists them too, named by the test cell (issue 30: review.csv said 3 while
    25 flagged answers sat at full marks). The same words in an answer cell's output are the
    learner's own print and list nothing."""
    head = "[needs review] score 0.55 (text): score 0.55 is in the review band 0.3-0.7"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _cell("oom_answer", grade=False, solution=True, outputs=[
            {"output_type": "stream", "name": "stdout", "text": head + "\n"}]),
        _cell("test_oom_answer", outputs=[
            {"output_type": "stream", "name": "stdout", "text": head + "\n- found: x\n"}]),
    ]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    assert runner._scan(path)["reviews"] == [
        "test_oom_answer: score 0.55 (text): score 0.55 is in the review band 0.3-0.7"]
