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
      ``not written yet: write tensor_bytes in the answer cell above`` (or ``waiting for X`` when the
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
import re
import sys
import tempfile
import traceback
import warnings
from types import TracebackType
from typing import Any

__all__ = ["visible_test", "waiting_for", "install_calm_stubs", "PASS", "FAIL", "NOT_WRITTEN",
           "WAITING"]

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


_NO_FORWARD = re.compile(r'Module \[(\w+)\] is missing the required "forward" function')


def _known_mistake(exc: BaseException) -> str | None:
    """A one-line explanation for errors whose torch traceback misleads (None: keep it)."""
    m = _NO_FORWARD.search(str(exc))
    if isinstance(exc, NotImplementedError) and m:
        kind = m.group(1)
        hint = (" A ModuleList (and a slice of one, layers[i:j]) only holds modules: wrap the "
                "slice in nn.Sequential(*layers[i:j]), or call its layers one by one."
                if kind == "ModuleList" else " Call a module that defines forward().")
        return (f"your code called a {kind} as if it were a layer, and a {kind} has no forward() "
                f"(torch raises NotImplementedError for that: it is not the not-written-yet "
                f"stub).{hint}")
    return None


def _undefined_name(exc: BaseException) -> str | None:
    if type(exc) is NameError:
        return getattr(exc, "name", None)
    return None


def _notebook_function(tb: TracebackType | None) -> str | None:
    """The notebook function (not a cell's top level) where the error was raised, if any."""
    frames = _frames(tb)
    if frames and _in_notebook(frames[-1]) and frames[-1].f_code.co_name != "<module>":
        code = frames[-1].f_code
        return getattr(code, "co_qualname", code.co_name)
    return None


def _undefined_hint(name: str) -> str:
    import importlib.util

    try:
        module = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        module = False
    if module:
        return (f"a missing import (add `import {name}` at the top of that answer cell), not "
                "an exercise to wait for")
    return ("a typo or a missing import, or a cell above that defines it has not run yet "
            "(a bug in your code, not an exercise to wait for)")


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


def _stub_line(exc: BaseException, owner: str | None) -> str:
    said = str(exc).strip()
    if said:
        return f"{NOT_WRITTEN}: {said}"
    if owner:
        return (f"{NOT_WRITTEN}: write {owner} in its answer cell above (it still raises "
                "NotImplementedError())")
    return (f"{NOT_WRITTEN}: write your answer here in place of raise NotImplementedError(), "
            "then run this cell again")


def _calm_custom_tb(shell: Any, etype: type, value: BaseException, tb: TracebackType | None,
                    tb_offset: int | None = None) -> None:
    """IPython's handler for NotImplementedError (installed by :func:`install_calm_stubs`).

    nbgrader's stub left in a notebook cell shows one line instead of a traceback; any other
    NotImplementedError (torch's, a line a visible test already set) shows as IPython would.
    Either way it is shown through ``shell.showtraceback``, so the cell still has an error
    output with ``ename`` NotImplementedError: nbgrader scores a test cell 0 exactly as before.
    """
    stub, owner = _stub_owner(value, tb)
    if stub and not hasattr(value, "_render_traceback_"):
        _one_line(value, _stub_line(value, owner))
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)


def install_calm_stubs(shell: Any) -> bool:
    """Show an unfinished exercise as one line: ``not written yet: ...`` (True if installed).

    An untouched release raises nbgrader's stub in every answer cell a Run All reaches; with
    IPython's default display each is a full red traceback (07 had 66). This registers
    :func:`_calm_custom_tb` as the kernel's handler for NotImplementedError, unless the kernel
    already has a custom handler. ``memlab.grading.guard`` accepts exactly this handler and
    refuses any other (a custom handler can hide a test's failure).
    """
    if shell is None or getattr(shell, "custom_exceptions", None) not in ((), None):
        return False
    import types

    shell.CustomTB = types.MethodType(_calm_custom_tb, shell)
    shell.custom_exceptions = (NotImplementedError,)
    return True


class visible_test:
    """``with ml.visible_test("name"):`` around the body of a visible test cell (see module doc).

    ``names``: the exercise(s) under test: the functions or answer variables of the answer
    cell(s) above. ``details``: set it inside the block (``t.details = "peak 1.2 MiB"``) to add
    measured figures to the PASS line. ``quiet=True``: no PASS line on success, for cells whose
    verdict is a score printed by the cell itself (rubric-graded written answers, interview
    questions): there "visible tests pass" would read as full marks.
    """

    def __init__(self, *names: str, quiet: bool = False):
        self.quiet = quiet
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
        if not self.quiet:
            print(f"{PASS} {self.label}: visible tests pass{extra}. Hidden tests run when the "
                  "notebook is graded.")
        return False

    def _failed(self, exc: BaseException, tb: TracebackType | None, noise: list[str]) -> bool:
        also = f" (it also wrote to stderr: {'; '.join(noise)[:300]})" if noise else ""
        known = _known_mistake(exc)
        if known:
            _one_line(exc, f"{FAIL} {self.label}: {known}{also}")
            return False
        stub, owner = _stub_owner(exc, tb)
        missing = _undefined_name(exc)
        if stub:
            short = owner.split(".")[0] if owner else None
            if owner and owner not in self.names and short not in self.names:
                line = (f"{WAITING} {owner}: write it first (its exercise is above); this test "
                        f"of {self.label} runs once it is written")
            elif owner or not str(exc).strip():
                line = f"{NOT_WRITTEN}: write {owner or self.label} in the answer cell above"
            else:
                line = f"{NOT_WRITTEN}: {str(exc).strip()}"
            _one_line(exc, line)
            return False  # the original NotImplementedError propagates: nbgrader scores 0
        if missing is not None:
            where = _notebook_function(tb)
            if missing not in self.names and where is not None:
                # the learner's own code names something that does not exist: a bug to fix,
                # shown with its traceback (the line), not an exercise to wait for
                exc.add_note(f"{FAIL} {self.label}: your code in {where}() uses the name "
                             f"{missing!r}, which nothing defines: {_undefined_hint(missing)}"
                             f"{also}")
                return False
            if missing in self.names:
                line = f"{NOT_WRITTEN}: write {missing} in the answer cell above (and run that cell)"
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
