"""Visible tests that give nbgrader's verdict, and Run All that reaches the last cell.

Used by: every visible test cell and every demo cell that calls a learner's function, in
solutions/00_setup .. 07_interview_prep (and any notebook written after them; see
docs/AUTHORING.md, "Visible tests and Run All").

Two context managers:

``with ml.visible_test("tensor_bytes"):``
    wraps the body of a visible test cell. It applies nbgrader's own rule to the code inside:

    * the cell FAILS when the code inside raises, **or when anything reaches stderr**: a
      warning (any ``warnings.warn``, including torch's ``UserWarning``), a write to
      ``sys.stderr``, or bytes that C code writes to file descriptor 2. nbgrader scores a test
      cell with any stderr output 0, so a visible test must never say PASS for it. The failure
      names the warning and where it came from.
    * a function still holding nbgrader's stub (``raise NotImplementedError()`` in a notebook
      cell), or an answer variable that was never assigned (``NameError``), shows ONE line:
      ``not written yet: write tensor_bytes in the cell above`` (or ``waiting for X`` when the
      stub belongs to an earlier exercise this test needs), and raises NotImplementedError.
    * a failed ``assert`` shows ONE line, ``FAIL tensor_bytes: <the assert's message>``.
    * any other error keeps its full traceback (it points into the learner's code), with a
      note naming the test.
    * on success it prints ``PASS tensor_bytes: visible tests pass`` (plus ``details``).

    Failures are real exceptions, so nbgrader scores the cell 0 exactly as before; the cells
    carry JupyterLab's ``raises-exception`` tag, which tells JupyterLab (and nbclient) to go on
    with Run All after them. See docs/AUTHORING.md for why this and not "fail only under the
    grader".

``with ml.waiting_for("predict_ratio"):``
    wraps an ungraded demo cell that uses a learner's function or answer: while it is not
    written, the cell prints one line (``waiting for predict_ratio: ...``) and ends without
    an error; once it is written the cell runs normally.

One-line display: IPython renders an exception through its ``_render_traceback_()`` method
when it has one (IPython/core/interactiveshell.py, ``showtraceback``); this module sets that
method on the exception instance, so the exception type (what nbgrader records as ``ename``)
is unchanged.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import traceback
import warnings
from types import TracebackType
from typing import Any

__all__ = ["visible_test", "waiting_for", "PASS", "FAIL", "NOT_WRITTEN", "WAITING"]

PASS = "PASS"
FAIL = "FAIL"
NOT_WRITTEN = "not written yet"
WAITING = "waiting for"


def _one_line(exc: BaseException, line: str) -> BaseException:
    """Make IPython show ``line`` instead of a traceback for ``exc`` (its type is unchanged)."""
    text = " ".join(str(line).split())  # one line, whatever the message held
    exc._render_traceback_ = lambda: [text]  # type: ignore[attr-defined]
    return exc


def _frames(tb: TracebackType | None) -> list[Any]:
    out = []
    while tb is not None:
        out.append(tb.tb_frame)
        tb = tb.tb_next
    return out


def _in_notebook(frame: Any) -> bool:
    """A frame of code written in a notebook cell (the kernel runs cells in ``__main__``)."""
    return frame.f_globals.get("__name__") == "__main__"


def _stub_owner(exc: BaseException, tb: TracebackType | None) -> tuple[bool, str | None]:
    """(is it a "not written yet" error, the function whose stub raised it or None).

    A NotImplementedError counts as "not written" when it was raised by notebook code (the
    stub ``raise NotImplementedError()``) or by memlab (e.g. ``ml.interview.answer_of`` for an
    answer that is not set); one raised inside torch (an operator without a kernel for some
    backend) is a real error and keeps its traceback.
    """
    if not isinstance(exc, NotImplementedError):
        return False, None
    frames = _frames(tb)
    if not frames:
        return True, None
    last = frames[-1]
    module = str(last.f_globals.get("__name__", ""))
    if _in_notebook(last):
        code = last.f_code
        name = getattr(code, "co_qualname", code.co_name)
        return True, (None if code.co_name == "<module>" else name)
    if module.split(".")[0] == "memlab":
        return True, None
    return False, None


def _undefined_name(exc: BaseException) -> str | None:
    if type(exc) is NameError:
        return getattr(exc, "name", None)
    return None


class _StderrCapture:
    """Everything written to stderr while active: ``sys.stderr`` and file descriptor 2."""

    def __init__(self) -> None:
        self.text = ""
        self._buffer = io.StringIO()
        self._redirect = contextlib.redirect_stderr(self._buffer)
        self._saved_fd: int | None = None
        self._file: Any = None

    def __enter__(self) -> "_StderrCapture":
        self._redirect.__enter__()
        try:
            for stream in (sys.__stderr__,):
                if stream is not None:
                    stream.flush()
            self._file = tempfile.TemporaryFile()
            self._saved_fd = os.dup(2)
            os.dup2(self._file.fileno(), 2)
        except (OSError, ValueError, AttributeError):  # no fd 2 (some embedded interpreters)
            self._saved_fd = None
        return self

    def __exit__(self, *exc: Any) -> None:
        fd_text = ""
        if self._saved_fd is not None:
            try:
                if sys.__stderr__ is not None:
                    sys.__stderr__.flush()
            except (OSError, ValueError):
                pass
            os.dup2(self._saved_fd, 2)
            os.close(self._saved_fd)
            self._file.seek(0)
            fd_text = self._file.read().decode(errors="replace")
        if self._file is not None:
            self._file.close()
        self._redirect.__exit__(*exc)
        self.text = self._buffer.getvalue() + fd_text


def _describe(w: warnings.WarningMessage) -> str:
    where = f"{os.path.basename(str(w.filename))}:{w.lineno}" if w.filename else "?"
    return f"{w.category.__name__}: {str(w.message).strip()} (at {where})"


class visible_test:
    """``with ml.visible_test("name"):`` around the body of a visible test cell (see module doc).

    ``names``: the exercise(s) under test: the functions or answer variables of the answer
    cell(s) above. ``details``: set it inside the block (``t.details = "peak 1.2 MiB"``) to add
    measured figures to the PASS line.
    """

    def __init__(self, *names: str):
        if not names:
            raise TypeError("visible_test needs the name of the exercise it tests")
        self.names = names
        self.details = ""
        self._warnings: Any = None
        self._caught: list[warnings.WarningMessage] = []
        self._stderr = _StderrCapture()

    @property
    def label(self) -> str:
        return " and ".join(self.names)

    def __enter__(self) -> "visible_test":
        self._warnings = warnings.catch_warnings(record=True)
        self._caught = self._warnings.__enter__()
        warnings.simplefilter("always")  # a warning seen before must still fail this test
        self._stderr.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            self._stderr.__exit__(exc_type, exc, tb)
        finally:
            self._warnings.__exit__(None, None, None)
        noise = [_describe(w) for w in self._caught]
        if self._stderr.text.strip():
            noise.append("stderr: " + " ".join(self._stderr.text.split())[:300])
        if exc is not None:
            return self._failed(exc, tb, noise)
        if noise:
            message = (f"{FAIL} {self.label}: your code wrote to stderr, and nbgrader scores a "
                       f"test cell 0 when anything reaches stderr: {'; '.join(noise)[:600]}. Fix "
                       "what causes it (the message says what)")
            raise _one_line(AssertionError(message), message) from None
        extra = f" ({self.details})" if self.details else ""
        print(f"{PASS} {self.label}: visible tests pass{extra}. Hidden tests run when the "
              "notebook is graded.")
        return False

    def _failed(self, exc: BaseException, tb: TracebackType | None, noise: list[str]) -> bool:
        also = f" (it also wrote to stderr: {'; '.join(noise)[:300]})" if noise else ""
        stub, owner = _stub_owner(exc, tb)
        missing = _undefined_name(exc)
        if stub:
            short = owner.split(".")[0] if owner else None
            if owner and owner not in self.names and short not in self.names:
                line = (f"{WAITING} {owner}: write it first (its exercise is above); this test "
                        f"of {self.label} runs once it is written")
            elif owner or not str(exc).strip():
                line = f"{NOT_WRITTEN}: write {owner or self.label} in the cell above"
            else:
                line = f"{NOT_WRITTEN}: {str(exc).strip()}"
            _one_line(exc, line)
            return False  # the original NotImplementedError propagates: nbgrader scores 0
        if missing is not None:
            if missing in self.names:
                line = f"{NOT_WRITTEN}: write {missing} in the cell above (run that cell first)"
            else:
                line = (f"{WAITING} {missing}: it is not defined; run the cells above (or write "
                        f"the exercise that defines it) first")
            raise _one_line(NotImplementedError(line), line) from None
        if isinstance(exc, AssertionError):
            message = str(exc).strip() or "an assert failed"
            _one_line(exc, f"{FAIL} {self.label}: {message}{also}")
            return False
        try:
            exc.add_note(f"{FAIL} {self.label}: your code raised {type(exc).__name__} "
                         f"(traceback above){also}")
        except AttributeError:  # Python < 3.11
            pass
        return False


class waiting_for:
    """``with ml.waiting_for("predict_ratio"):`` around an ungraded cell that uses a learner's
    exercise: one printed line instead of an error while it is not written (see module doc)."""

    def __init__(self, *names: str):
        if not names:
            raise TypeError("waiting_for needs the name of the exercise the cell uses")
        self.names = names

    def __enter__(self) -> "waiting_for":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            return False
        stub, owner = _stub_owner(exc, tb)
        missing = _undefined_name(exc)
        if stub or (missing is not None and missing in self.names):
            what = owner or missing or " and ".join(self.names)
            print(f"{WAITING} {what}: write it in its exercise above, then run this cell again")
            return True
        return False


def format_exception_line(exc: BaseException) -> str:
    """What IPython shows for ``exc`` (the one line when set, else the last traceback line)."""
    render = getattr(exc, "_render_traceback_", None)
    if render is not None:
        return "\n".join(render())
    return traceback.format_exception_only(type(exc), exc)[-1].strip()
