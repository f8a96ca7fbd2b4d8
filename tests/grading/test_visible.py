"""ml.visible_test and ml.waiting_for in a real kernel (nbclient), as JupyterLab and nbgrader run them.

One small notebook, run top to bottom once (one kernel start), covers: an unwritten function
(one line, ename NotImplementedError), an unwritten dependency ("waiting for"), an unassigned
answer variable, a failed assert (one line), a correct answer that warns (FAIL, naming the
warning: nbgrader scores such a cell 0), a write to sys.stderr and to file descriptor 2, a
real error (full traceback kept), a PASS, a demo cell that waits, and Run All continuing past
the failing cells because they carry the ``raises-exception`` tag.
"""
from __future__ import annotations

import re

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

SETUP = """\
import os, sys, warnings
import memlab as ml

def stub(x):
    # YOUR CODE HERE
    raise NotImplementedError()

def correct_but_warns(x):
    warnings.warn("autocast on cpu only supports bfloat16", UserWarning)
    return 2 * x

def uses_stub(x):
    return stub(x) + 1

def good(x):
    return 2 * x

def typo(x):
    total = 2 * x
    return totl

def no_import(shape):
    return math.prod(shape)
"""

CASES = {  # name: (source, expected ename or None, text the rendered output must contain)
    "unwritten": ("with ml.visible_test('stub'):\n    assert stub(1) == 2, 'double it'",
                  "NotImplementedError", "not written yet: write stub in the answer cell above"),
    "dependency": ("with ml.visible_test('later'):\n    assert uses_stub(1) == 3",
                   "NotImplementedError", "waiting for stub: write it first"),
    "unassigned": ("with ml.visible_test('ANSWER'):\n    assert ANSWER == 3",
                   "NotImplementedError", "not written yet: write ANSWER in the answer cell above"),
    "assert": ("with ml.visible_test('good'):\n    assert good(1) == 3, 'good(1) must be 3: add one'",
               "AssertionError", "FAIL good: good(1) must be 3: add one"),
    "warns": ("with ml.visible_test('correct_but_warns'):\n    assert correct_but_warns(1) == 2",
              "AssertionError", "UserWarning: autocast on cpu only supports bfloat16"),
    "stderr": ("with ml.visible_test('good'):\n    print('oops', file=sys.stderr)\n    assert good(1) == 2",
               "AssertionError", "stderr: oops"),
    "fd2": ("with ml.visible_test('good'):\n    os.write(2, b'from C code\\n')\n    assert good(1) == 2",
            "AssertionError", "stderr: from C code"),
    "real_error": ("with ml.visible_test('good'):\n    good(None)",
                   "TypeError", "FAIL good: your code raised TypeError"),
    "pass": ("with ml.visible_test('good') as t:\n    assert good(2) == 4\n    t.details = 'four'",
             None, "PASS good: visible tests pass (four)"),
    "waits": ("with ml.waiting_for('stub'):\n    print(stub(3))\nprint('after')",
              None, "waiting for stub: write it in its exercise above"),
    "modulelist": ("import torch\nwith ml.visible_test('good'):\n"
                   "    torch.nn.ModuleList([torch.nn.Linear(2, 2)] * 3)[0:2](torch.ones(2))",
                   "NotImplementedError", "FAIL good: your code called a ModuleList as if it were a layer"),
    # the learner's own undefined name is a bug in their code, not an exercise to wait for
    "own_typo": ("with ml.visible_test('typo'):\n    assert typo(1) == 2",
                 "NameError", "FAIL typo: your code in typo() uses the name 'totl', which nothing "
                 "defines: a typo or a missing import"),
    "own_import": ("with ml.visible_test('no_import'):\n    assert no_import((2, 3)) == 6",
                   "NameError", "add `import math` at the top of that answer cell"),
    # nbgrader's stub in an answer cell, and a demo line calling an unwritten function: one line
    "answer_stub": ("# YOUR CODE HERE\nraise NotImplementedError()", "NotImplementedError",
                    "not written yet: write your answer here in place of raise "
                    "NotImplementedError()"),
    "called_stub": ("stub(1)", "NotImplementedError",
                    "not written yet: write stub in its answer cell above"),
    # a NotImplementedError torch raises is a real error: its traceback stays
    "torch_nie": ("import torch\ntorch.nn.Module()(torch.ones(1))", "NotImplementedError",
                  'missing the required "forward" function'),
    "guard_accepts_it": ("import memlab.grading\nml.grading.guard()\nprint('guard: clean')", None,
                         "guard: clean"),
    "last": ("print('the last cell ran')", None, "the last cell ran"),
}
FULL_TRACEBACK = {"real_error", "own_typo", "own_import", "torch_nie"}


def _text(outputs) -> str:
    parts = []
    for o in outputs:
        if o.output_type == "stream":
            parts.append(o.text)
        elif o.output_type == "error":
            parts.append("\n".join(o.traceback))
    return "\n".join(parts)


@pytest.fixture(scope="module")
def executed():
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(SETUP))
    for name, (source, ename, _) in CASES.items():
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["case"] = name
        if ename:
            cell.metadata["tags"] = ["raises-exception"]
        nb.cells.append(cell)
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()  # stops at an untagged error
    return {c.metadata["case"]: c for c in nb.cells[1:]}


@pytest.mark.parametrize("case", list(CASES))
def test_each_case_reads_as_designed(executed, case):
    _, ename, text = CASES[case]
    cell = executed[case]
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert [e.ename for e in errors] == ([ename] if ename else []), _text(cell.outputs)
    assert text in _text(cell.outputs), _text(cell.outputs)
    stderr = [o for o in cell.outputs if o.output_type == "stream" and o.name == "stderr"]
    assert not stderr, f"{case}: the check must keep stderr out of the cell: {stderr}"
    if ename and case not in FULL_TRACEBACK:  # one line, also for torch's ModuleList error
        assert len(errors[0].traceback) == 1, f"{case}: expected one line, got {errors[0].traceback}"
    if case in FULL_TRACEBACK:
        assert len(errors[0].traceback) > 1, f"{case}: its traceback was replaced by one line"
    if case.startswith("own_"):
        assert "waiting for" not in _text(cell.outputs), _text(cell.outputs)
    if case != "pass":
        assert "PASS" not in _text(cell.outputs)


def test_real_error_keeps_its_traceback(executed):
    tb = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(executed["real_error"].outputs[-1].traceback))
    assert "good(None)" in tb and "unsupported operand" in tb


def test_untagged_failure_still_stops_nbclient():
    """Without the tag, a failing visible test stops Run All (why the cells carry the tag)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP),
                nbformat.v4.new_code_cell(CASES["unwritten"][0])]
    with pytest.raises(CellExecutionError, match="not written yet"):
        NotebookClient(nb, timeout=120, kernel_name="python3").execute()
