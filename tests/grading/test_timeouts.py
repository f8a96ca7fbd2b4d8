"""One cell timeout for the kernel and its re-run (memlab.autograde.batch.timeouts): the pieces,
without kernels. The whole path (a looping answer cell graded by grade-class) is
test_grade_class.py::test_a_cell_that_never_ends_is_stopped_in_both_runs_at_once."""
from __future__ import annotations

import os
import threading
import time

from memlab.autograde.batch.timeouts import Ledger, autograde_preprocessors, LedgerExecute
from memlab.autograde.security import verdict
from memlab.autograde.security.cells import (STOP_PREFIX, STOPPED_BY_KERNEL, Report,
                                             fresh_namespace, run_cell)


def test_a_stop_file_ends_the_re_runs_cell_at_once(tmp_path):
    stop = tmp_path / (STOP_PREFIX + "answer")
    threading.Timer(1.0, stop.touch).start()
    t0 = time.monotonic()
    error, _, _, _ = run_cell("while True:\n    pass\n", fresh_namespace(), "<cell answer>", 120,
                              str(stop))
    assert time.monotonic() - t0 < 10
    assert error.startswith("_CellTimeout") and STOPPED_BY_KERNEL in error


def test_without_a_stop_file_the_cell_runs_to_its_own_limit(tmp_path):
    t0 = time.monotonic()
    error, _, _, _ = run_cell("while True:\n    pass\n", fresh_namespace(), "<cell answer>", 2,
                              str(tmp_path / (STOP_PREFIX + "answer")))
    assert 1.5 < time.monotonic() - t0 < 10
    assert error.startswith("_CellTimeout") and STOPPED_BY_KERNEL not in error
    # an honest cell is untouched by the clock's ticks
    error, value, _, _ = run_cell("import time\ntime.sleep(2.5)\n6 * 7", fresh_namespace(),
                                  "<cell t>", 60, str(tmp_path / "never"))
    assert (error, value) == ("", 42)


def test_the_kernel_tells_the_re_run_only_through_a_plain_new_file(tmp_path):
    (tmp_path / "nb").mkdir()
    ledger = Ledger(tmp_path)
    assert ledger.kernel_timed_out("nb", "answer")
    assert (tmp_path / "nb" / (STOP_PREFIX + "answer")).is_file()
    assert ledger.stopped == [("nb", "answer: per-cell timeout in the kernel first; the re-run's "
                                     "copy of the cell was stopped at once")]
    # a link planted by the learner where the file would go: never followed, nothing written
    outside = tmp_path / "outside"
    (tmp_path / "nb" / (STOP_PREFIX + "t2")).symlink_to(outside)
    assert not ledger.kernel_timed_out("nb", "t2") and not outside.exists()
    # the re-run's folder replaced by a link; a grade id that is not a plain name
    (tmp_path / "linked").symlink_to(tmp_path / "nb")
    assert not ledger.kernel_timed_out("linked", "t3")
    assert not ledger.kernel_timed_out("nb", "../x")
    assert sorted(p.name for p in (tmp_path / "nb").iterdir()) == [STOP_PREFIX + "answer",
                                                                   STOP_PREFIX + "t2"]
    ledger.rerun_timed_out("nb", "answer")
    assert ledger.has_rerun_timed_out("nb", "answer") and not ledger.has_rerun_timed_out("nb", "t2")


def _line(item: dict, key: str) -> bytes:
    """``item`` as the harness's own Report writes it (signed with ``key``)."""
    r, w = os.pipe()
    report = Report(w)
    report.key = bytes.fromhex(key)
    report.send(item)
    report.stream.close()
    with os.fdopen(r, "rb") as f:
        return f.read()


def test_the_re_runs_timeout_is_heard_as_it_comes_and_skipped_by_the_verdicts():
    key = os.urandom(32).hex()
    heard: list[str] = []
    hook = verdict._timeouts_heard(key, heard.append)
    r, w = os.pipe()
    data = (_line({"ready": True}, key) + _line({"timeout": "answer"}, key)
            + b"forged\tline\n" + _line({"n": 0, "grade_id": "t", "score": 1.0, "why": ""}, key)
            + _line({"done": True}, key))
    cut = len(data) // 3  # complete lines are heard once, whatever the chunks

    def write():
        os.write(w, data[:cut])
        time.sleep(0.3)
        os.write(w, data[cut:])
        os.close(w)

    threading.Thread(target=write).start()
    raw = verdict._read_until(r, time.monotonic() + 20, None, heard=hook)
    assert raw == data and heard == ["answer"]
    program = [{"kind": "test", "grade_id": "t"}]
    clean = data.replace(b"forged\tline\n", b"")
    verdicts, problem = verdict.parse(clean, program, {"t": 1.0}, key)
    assert problem == "" and verdicts["t"].score == 1.0


def test_autograde_runs_the_ledger_execute_in_place_of_nbgraders():
    from nbgrader.preprocessors import Execute

    pps = autograde_preprocessors()
    assert LedgerExecute in pps and Execute not in pps and len(pps) == 7


def test_a_hidden_test_leaves_no_source_for_the_code_it_calls():
    """Blind hostile round r5 (a01, a02): learner code read the hidden tests from IPython's
    history (In) and, called by a hidden test, its caller's line from linecache (a warning's
    frame), and printed them reversed into the feedback. LedgerExecute runs a hidden test
    with FORGET_SOURCE first and store_history=False: an IPython shell shows what is left."""
    from IPython.core.interactiveshell import InteractiveShell

    from memlab.autograde.batch.timeouts import FORGET_SOURCE

    shell = InteractiveShell()
    shell.run_cell("def spy():\n    import sys, linecache\n    f = sys._getframe(1)\n"
                   "    return linecache.getline(f.f_code.co_filename, f.f_lineno)\n")
    hidden = "### BEGIN HIDDEN TESTS\nseen = spy()  # THE_HIDDEN_LINE\n### END HIDDEN TESTS\n"
    assert shell.run_cell(FORGET_SOURCE + hidden, store_history=False).success
    assert shell.user_ns["seen"] == ""
    assert not any("THE_HIDDEN_LINE" in text for text in shell.user_ns["In"])
    import linecache

    cells = {k: v for k, v in linecache.cache.items() if not os.path.isfile(k)}  # not this file
    assert not any("THE_HIDDEN_LINE" in "".join(v[2]) for v in cells.values()
                   if isinstance(v, tuple) and len(v) > 2)
    # without it, the same call reads the line (what the test guards against)
    shell.run_cell(hidden)
    assert "THE_HIDDEN_LINE" in shell.user_ns["seen"]
