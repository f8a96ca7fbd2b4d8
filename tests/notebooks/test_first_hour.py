"""Every released notebook's visible tests say FAIL, never PASS, for answers that emit a warning.

The answers are the SOLUTIONS with one line added at the top of every function and method the
answer cells define: ``warnings.warn(..., UserWarning)``. Correct results plus a warning is the
hard case: nbgrader scores such a test cell 0 (the warning reaches stderr), so a visible test
that only compares results would print PASS for a 0 (issue 15: 03's ``forward_loss`` with
``torch.autocast(..., dtype=torch.float32)`` on the CPU did exactly that).

The variant is the RELEASE (hidden tests removed, as a learner has it) with those answers
pasted in, run top to bottom by nbclient as JupyterLab's Run All does (stops at an error
unless the cell carries the ``raises-exception`` tag). Checked per notebook:
* Run All reaches the last cell;
* every visible test cell (``ml.visible_test``) whose exercise is a function shows FAIL and
  names the warning, and no cell anywhere prints a PASS line.
Visible tests of answer *variables* (written answers, interview questions) are not part of
this: a variable cannot warn inside the test.

One notebook run per assignment (20-60 s each on 2 cores): marked ``slow``.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir()
                     if p.is_dir() and any(p.glob("*.ipynb")))
WARNING_TEXT = "deliberate warning from the answer (tests/notebooks/test_first_hour.py)"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
PASS_LINE = re.compile(r"^PASS\b", re.M)
# Visible tests that discard the warnings of the learner's code on purpose. nbgrader then sees
# no stderr either and gives the points, so PASS there agrees with nbgrader's verdict.
# (none today: 04's train_with_accumulation test used to discard every warning of the training
# loop; it now runs the loop through acc.graded_call, which fails on a warning and ignores only
# the scheduler's false alarm after a skipped AMP step, pytorch/pytorch#44511)
DISCARDS_WARNINGS: dict[str, str] = {}


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def warn_in_every_function(source: str) -> tuple[str, set[str]]:
    """``source`` with a warnings.warn(...) first in every function body; the names defined."""
    clean = re.sub(r"^\s*### (BEGIN|END) SOLUTION\s*$\n?", "", source, flags=re.M)
    tree = ast.parse(clean)
    names: set[str] = set()
    lines = clean.splitlines()
    inserts = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str) and len(node.body) > 1):
                first = node.body[1]  # after the docstring
            inserts.append((first.lineno - 1, first.col_offset))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    for lineno, col in sorted(inserts, reverse=True):
        lines.insert(lineno, " " * col + f"__import__('warnings').warn({WARNING_TEXT!r}, UserWarning)")
    return "\n".join(lines) + "\n", names


def _label(cell) -> list[str]:
    m = re.search(r"ml\.visible_test\(([^)]*)\)", cell.source)
    return re.findall(r"['\"]([\w.]+)['\"]", m.group(1)) if m else []


def _text(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.output_type == "stream":
            out.append(o.text)
        elif o.output_type == "error":
            out.append(ANSI.sub("", "\n".join(o.traceback)))
    return "\n".join(out)


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_visible_tests_fail_answers_that_warn(assignment):
    release = nbformat.read(next((ROOT / "notebooks" / assignment).glob("*.ipynb")), as_version=4)
    solution = nbformat.read(next((ROOT / "solutions" / assignment).glob("*.ipynb")), as_version=4)
    answers = {_meta(c)["grade_id"]: c.source for c in solution.cells if _meta(c).get("solution")}
    functions: set[str] = set()
    for cell in release.cells:
        gid = _meta(cell).get("grade_id")
        if _meta(cell).get("solution") and gid in answers:
            cell.source, names = warn_in_every_function(answers[gid])
            functions |= names
    tested = [c for c in release.cells if c.cell_type == "code" and _label(c)
              and set(_label(c)) & functions
              and _meta(c).get("grade_id") not in DISCARDS_WARNINGS]
    if not tested:
        pytest.skip(f"{assignment}: no visible test of a function (only answer variables)")

    error = None
    try:
        NotebookClient(release, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(ROOT / "notebooks" / assignment)}}).execute()
    except CellExecutionError as exc:  # an untagged cell failed: Run All would stop there
        error = str(exc)[:2000]
    code = [c for c in release.cells if c.cell_type == "code" and c.source.strip()]
    assert error is None and all(c.get("execution_count") for c in code), (
        f"{assignment}: Run All stopped before the last cell: {error}")

    for cell in code:
        if _meta(cell).get("grade_id") in DISCARDS_WARNINGS:
            continue
        assert not PASS_LINE.search(_text(cell)), (
            f"{assignment} cell {_meta(cell).get('grade_id', cell.get('id'))} says PASS for an answer "
            f"that warns (nbgrader scores it 0):\n{_text(cell)[:1500]}")
    for cell in tested:
        text = _text(cell)
        assert re.search(r"^FAIL\b", text, re.M) and "deliberate warning" in text, (
            f"{assignment} {_meta(cell).get('grade_id')}: the visible test must say FAIL and name "
            f"the warning, got:\n{text[:1500]}")
