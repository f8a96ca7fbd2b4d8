"""memlab.autograde.security.verdict: test verdicts decided outside the learner's kernel.

Small notebooks built here are re-run through :func:`verdict.rerun` (a fresh process, under
bubblewrap where it is usable and without it) and the verdicts compared with nbgrader's rule.
The kernel-report attacks of issue 19 have nothing to hook in this process (no IPython shell,
no kernel session, no display publisher); forged report lines are refused by their signature.
"""
from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest

from memlab.autograde.security import landlock as confine
from memlab.autograde.security import bwrap as sandbox
from memlab.autograde.security import verdict

SANDBOX, WHY = sandbox.available()
LANDLOCK, LANDLOCK_WHY = confine.available()
MODES = [pytest.param(False, id="plain"),
         pytest.param(True, id="bwrap", marks=pytest.mark.skipif(not SANDBOX, reason=f"bubblewrap: {WHY}")),
         pytest.param("landlock", id="landlock",
                      marks=pytest.mark.skipif(not LANDLOCK, reason=f"Landlock: {LANDLOCK_WHY}"))]


def _code(src: str, **meta) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(src)
    if meta:
        cell.metadata["nbgrader"] = meta
    return cell


def _locked(gid: str, src: str):
    return _code(src, grade_id=gid, locked=True, grade=False, solution=False)


def _answer(gid: str, src: str):
    return _code(src, grade_id=gid, locked=False, grade=False, solution=True)


def _test(gid: str, src: str, points: float = 1):
    return _code(src, grade_id=gid, locked=True, grade=True, solution=False, points=points)


def _run(tmp_path: Path, cells, *, sandboxed=False, trusted=None, wall=120.0, cell_timeout=60.0,
         drop=()):
    nb = nbformat.v4.new_notebook()
    nb.cells = [c for c in cells if (c.metadata.get("nbgrader") or {}).get("grade_id") not in drop]
    sub = tmp_path / "sub"
    sub.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(sub / "n.ipynb"))
    (sub / "data.txt").write_text("42")
    meta = [(c.metadata.get("nbgrader") or {}) for c in cells]
    if trusted is None:
        trusted = {m["grade_id"]: c.source for m, c in zip(meta, cells) if m.get("locked")}
    points = {m["grade_id"]: float(m["points"]) for m in meta if m.get("grade") and not m.get("solution")}
    if sandboxed == "landlock":  # a warm slot forked from this process confines itself
        from memlab.autograde.batch.processes import _WarmKernels

        _WarmKernels.prefork(1, 1)
        try:
            return verdict.rerun(sub / "n.ipynb", sub, tmp_path / "work", trusted, points,
                                 sandboxed=True, wall_seconds=wall, cell_timeout=cell_timeout,
                                 launch=_WarmKernels.take)
        finally:
            _WarmKernels.discard()
    return verdict.rerun(sub / "n.ipynb", sub, tmp_path / "work", trusted, points,
                         sandboxed=sandboxed, wall_seconds=wall, cell_timeout=cell_timeout)


def _scores(found):
    return {gid: v.score for gid, v in found.items()}


@pytest.mark.parametrize("sandboxed", MODES)
def test_nbgraders_rule_in_a_fresh_process(tmp_path, sandboxed):
    cells = [
        _locked("setup", "import torch\nimport memlab as ml\nDATA = open('data.txt').read()"),
        _answer("double", "def double(x):\n    return 2 * x"),
        _test("t_ok", "assert double(2) == 4 and DATA == '42'"),
        _test("t_warn", "import warnings\nwarnings.warn('careful')", 2),
        _test("t_partial", "0.5 + 1", 2),
        _test("t_text", "'fine'", 2),
        _test("t_c_stderr", "import os\nos.write(2, b'from C level')"),
        _code("print('a free cell')\nimport torch; torch.zeros(3).sum()"),
        _test("t_fail", "assert double(3) == 7, 'double(3) should be 7'"),
    ]
    found, problem = _run(tmp_path, cells, sandboxed=sandboxed)
    assert problem == ""
    assert _scores(found) == {"t_ok": 1, "t_warn": 0, "t_partial": 1.5, "t_text": 2,
                              "t_c_stderr": 0, "t_fail": 0}
    assert "UserWarning: careful" in found["t_warn"].why
    assert "from C level" in found["t_c_stderr"].why
    assert found["t_fail"].why == "failed: AssertionError: double(3) should be 7"


@pytest.mark.parametrize("sandboxed", MODES)
def test_kernel_hooks_have_nothing_to_hook(tmp_path, sandboxed):
    """Answers that forge a kernel's report (a published execute_result, a patched shell, a
    replaced Session.send) fail in the re-run: there is no shell, kernel or session here."""
    cells = [
        _locked("setup", "import memlab as ml"),
        _answer("a1", "get_ipython().displayhook(1.0)\ndef f():\n    return 1"),
        _test("t1", "assert f() == 1"),
        _answer("a2", "from IPython.core.interactiveshell import InteractiveShell\n"
                      "InteractiveShell.instance().set_custom_exc((AssertionError,), lambda *a, **k: None)\n"
                      "def g():\n    return 0"),
        _test("t2", "assert g() == 1"),
    ]
    found, problem = _run(tmp_path, cells, sandboxed=sandboxed)
    assert problem == ""
    assert _scores(found) == {"t1": 0, "t2": 0}
    assert "NameError" in found["t1"].why


@pytest.mark.parametrize("sandboxed", MODES)
def test_forged_report_lines_are_refused(tmp_path, sandboxed):
    """Learner code that finds the report pipe through /proc and writes a verdict into it: the
    line has no valid signature, the reading stops there, later tests have no verdict."""
    forge = ("import json, glob\n"
             "for p in glob.glob('/proc/self/fd/*'):\n"
             "    try:\n"
             "        with open(p, 'w') as f:\n"
             "            f.write(json.dumps({'n': 1, 'grade_id': 't2', 'score': 1, 'why': ''}) + '\\t0\\n')\n"
             "    except OSError:\n"
             "        pass\n"
             "def h():\n    return 0")
    cells = [_answer("a0", "def f():\n    return 1"), _test("t1", "assert f() == 1"),
             _answer("a1", forge), _test("t2", "assert h() == 1")]
    found, problem = _run(tmp_path, cells, sandboxed=sandboxed)
    assert _scores(found) == {"t1": 1}
    assert problem.startswith("the re-run's report was forged or garbled")
    grades = {"t1": [1.0, 1.0, False], "t2": [1.0, 1.0, False]}
    reasons = verdict.combine(grades, found, problem, {"t1": 1.0, "t2": 1.0})
    assert grades == {"t1": [1.0, 1.0, False], "t2": [0.0, 1.0, False]}
    assert len(reasons) == 1 and reasons[0].startswith("t2 scores 0: the re-run's report was forged")


def test_trusted_sources_win_and_the_program_is_gone(tmp_path):
    """Locked and test cells run with the gradebook's source, whatever the submission holds; a
    deleted test cell still runs; the program file (hidden tests, key) is gone before learner
    code runs."""
    cells = [_locked("setup", "X = 1"), _answer("a", "def f():\n    return X"),
             _test("t1", "assert f() == 1"), _test("t_gone", "assert f() == 1"),
             _answer("peek", "import os\nSEEN = os.path.exists('program.json')"),
             _test("t_peek", "assert not SEEN")]
    cells[0].source = "X = 5"           # the learner edited a locked cell
    cells[2].source = "pass"            # and a test cell
    trusted = {"setup": "X = 1", "t1": "assert f() == 1", "t_gone": "assert f() == 1",
               "t_peek": "assert not SEEN"}
    found, problem = _run(tmp_path, cells, trusted=trusted, drop=("t_gone",))
    assert problem == ""
    assert _scores(found) == {"t1": 1, "t_gone": 1, "t_peek": 1}


@pytest.mark.skipif(not LANDLOCK, reason=f"Landlock: {LANDLOCK_WHY}")
def test_warm_rerun_is_confined_and_killed_at_the_wall_limit(tmp_path):
    """A warm-forked re-run cannot read beside its folder, and one past the wall limit is killed
    by the grader (no `timeout` process around a forked one)."""
    (tmp_path / "classmate.txt").write_text("secret")
    peek = ("import os\ntry:\n    open(os.path.join('..', '..', 'classmate.txt')).read()\n    SEEN = True\n"
            "except OSError:\n    SEEN = False")
    cells = [_answer("a", peek), _test("t1", "assert not SEEN")]
    found, problem = _run(tmp_path, cells, sandboxed="landlock")
    assert _scores(found) == {"t1": 1} and problem == "", (found, problem)
    cells = [_answer("a", "x = 0\nwhile True:\n    x += 1"), _test("t1", "pass")]
    t0 = time.monotonic()
    found, problem = _run(tmp_path / "wall", cells, cell_timeout=600.0, wall=5.0, sandboxed="landlock")
    assert found == {} and "SIGKILL" in problem, problem
    assert time.monotonic() - t0 < 30


def test_cell_timeout_and_wall_limit(tmp_path):
    """A cell past the cell limit is interrupted (its test after it still runs); a process past
    the wall limit is killed from outside, and the tests it never reached have no verdict."""
    cells = [_answer("a", "import time\nwhile True:\n    time.sleep(0.05)"), _test("t1", "pass"),
             _answer("b", "import time\ntime.sleep(600)"), _test("t2", "pass"),
             _answer("c", "import time\nwhile True:\n    try:\n        time.sleep(0.05)\n"
                          "    except Exception:\n        pass"), _test("t3", "pass")]
    found, problem = _run(tmp_path, cells, cell_timeout=1.0, wall=120.0)
    assert _scores(found) == {"t1": 1, "t2": 1, "t3": 1} and problem == ""  # c cannot swallow it
    cells = [_answer("a", "x = 0\nwhile True:\n    x += 1"), _test("t1", "pass")]
    found, problem = _run(tmp_path / "wall", cells, cell_timeout=600.0, wall=10.0)
    assert found == {} and "SIGKILL" in problem, problem


def test_combine_keeps_the_lower_score_and_says_why():
    grades = {"t1": [2.0, 2.0, False], "t2": [1.0, 2.0, False], "t3": [2.0, 2.0, False],
              "manual": [None, 3.0, True]}
    found = {"t1": verdict.Verdict("t1", 0.0, 2.0, "failed: AssertionError: x"),
             "t2": verdict.Verdict("t2", 2.0, 2.0, ""),
             "t3": verdict.Verdict("t3", 2.0, 2.0, "")}
    reasons = verdict.combine(grades, found, "", {"t1": 2, "t2": 2, "t3": 2})
    assert grades["t1"][0] == 0.0 and grades["t2"][0] == 1.0 and grades["t3"][0] == 2.0
    assert grades["manual"] == [None, 3.0, True]
    assert reasons == ["t1 scored 0 of 2 in the independent re-run outside the learner's kernel "
                       "(failed: AssertionError: x); the kernel reported 2: the lower score counts"]


def test_score_follows_nbgrader():
    assert verdict.score(2, "ValueError: x", "", None) == (0.0, "failed: ValueError: x")
    assert verdict.score(2, "", "warn\n", 1.0)[0] == 0.0
    assert verdict.score(2, "", "", 1.25) == (1.25, "partial credit 1.25")
    assert verdict.score(2, "", "", "not a number") == (2.0, "")
    assert verdict.score(2, "", "", -1) == (2.0, "")      # nbgrader: below 0 counts as full
    assert verdict.score(2, "", "", 3)[0] == 0.0           # nbgrader raises: never more than max
    assert verdict.score(2, "", "", None) == (2.0, "")


@pytest.mark.parametrize("sandboxed", MODES)
def test_the_rerun_imports_the_course_not_the_submission(tmp_path, sandboxed):
    """A ``spellchecker.py`` or ``memlab/`` shipped beside the notebook is never imported by the
    re-run in place of the real one (the harness starts with -P and drops its folder from
    sys.path)."""
    sub = tmp_path / "sub"
    (sub / "memlab").mkdir(parents=True)
    (sub / "memlab" / "__init__.py").write_text("raise ImportError('SHADOW memlab')\n")
    (sub / "spellchecker.py").write_text("raise ImportError('SHADOW spellchecker')\n")
    cells = [
        _locked("setup", "import os, sys\nimport memlab as ml"),
        _test("t_real", "import spellchecker\n"
                        "sc = spellchecker.__file__\n"
                        "assert not sc.startswith(os.getcwd()), sc\n"
                        "assert not ml.__file__.startswith(os.getcwd()), ml.__file__\n"
                        "assert '' not in sys.path and os.environ.get('PYTHONSAFEPATH') == '1'"),
    ]
    found, problem = _run(tmp_path, cells, sandboxed=sandboxed)
    assert problem == ""
    assert _scores(found) == {"t_real": 1}, found["t_real"].why
