"""What runs one cell or one call in a fresh grading process, by nbgrader's rules, shared by
the verdict re-run (:mod:`memlab.autograde.security.verdict`) and the judge
(:mod:`memlab.autograde.security.judge`): :func:`score` (nbgrader's rule for one test cell),
:func:`run_cell` (a cell's source, its last expression as its value, stdout and stderr, its
time limit), :func:`call_captured` (one call of a learner's function the same way), the signed
:class:`Report` on a pipe only the grader reads, and :func:`fresh_namespace`.
"""
from __future__ import annotations

import ast
import hashlib
import hmac
import json
import os
import sys
from typing import Any

__all__ = ["limit_process", "score", "Report", "fresh_namespace", "run_cell", "call_captured"]


def limit_process(memory_mb: int) -> None:
    """The limits of a fresh grading process, before it imports the course: it dies with its
    parent, writes no core file, and holds at most ``memory_mb`` of address space (0: no limit;
    none either where an NVIDIA GPU is visible, whose driver maps far more than it uses)."""
    import resource

    from memlab.autograde.security.kernel import _limit, _nvidia_gpu_visible, _set_pdeathsig

    _set_pdeathsig()
    _limit(resource.RLIMIT_CORE, 0)
    if memory_mb > 0 and not _nvidia_gpu_visible():
        _limit(resource.RLIMIT_AS, memory_mb * 1024 * 1024)


def score(max_points: float, error: str, stderr: str, value: Any) -> tuple[float, str]:
    """nbgrader's rule (``nbgrader.utils.determine_grade``) for one test cell: an error or any
    stderr output scores 0; a last-expression value that reads as a number in [0, max] is
    partial credit; anything else scores full marks."""
    if error:
        return 0.0, f"failed: {error}"
    if stderr:
        return 0.0, f"wrote to stderr: {stderr.strip().splitlines()[-1][:160] if stderr.strip() else '(blank)'}"
    if value is not None:
        try:
            grade = float(repr(value))
        except (TypeError, ValueError):
            return float(max_points), ""
        if 0.0 <= grade <= max_points:
            return grade, "" if grade == max_points else f"partial credit {grade:g}"
        return (0.0, f"partial credit {grade:g} above the cell's points") if grade > max_points \
            else (float(max_points), "")
    return float(max_points), ""


class _Capture:
    """A text stream for sys.stdout / sys.stderr during one cell (keeps the first 64 KiB)."""

    LIMIT = 64 * 1024

    def __init__(self):
        self.parts: list[str] = []
        self.size = 0

    def write(self, s) -> int:
        s = str(s)
        if self.size < self.LIMIT:
            self.parts.append(s[: self.LIMIT - self.size])
        self.size += len(s)
        return len(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:
        return "utf-8"

    def text(self) -> str:
        return "".join(self.parts)


class _CellTimeout(BaseException):  # not an Exception: `except Exception` cannot keep it
    pass


def _alarm(signum, frame):
    raise _CellTimeout("cell ran past its time limit")


class Report:
    """The harness's report: one JSON line per item, signed with the run's key, on a pipe
    descriptor the grader passed (and that no process the learner's code starts inherits)."""

    def __init__(self, fd: int):
        try:
            self.stream = os.fdopen(os.dup(fd), "w", buffering=1, encoding="utf-8")
            os.close(fd)
        except OSError:
            sys.stderr.write("verdict harness: no report pipe\n")
            sys.exit(2)
        os.set_inheritable(self.stream.fileno(), False)
        self.key = b""
        self._dumps = json.dumps

    def send(self, obj: dict) -> None:
        text = self._dumps(obj, sort_keys=True)
        sig = hmac.new(self.key, text.encode(), hashlib.sha256).hexdigest() if self.key else ""
        self.stream.write(f"{text}\t{sig}\n")

    def close(self) -> None:
        self.stream.flush()


def fresh_namespace() -> dict:
    """A fresh ``__main__`` module's namespace, installed as ``sys.modules['__main__']``."""
    import types

    main_mod = types.ModuleType("__main__")
    main_mod.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main_mod
    return main_mod.__dict__


class _Captured:
    """sys.stdout / sys.stderr and descriptor 2 captured for one cell or one call."""

    def __enter__(self):
        import tempfile

        self.out, self.err = _Capture(), _Capture()
        self.saved = os.dup(2)
        self.fd_err = tempfile.TemporaryFile()
        os.dup2(self.fd_err.fileno(), 2)
        self.real = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = self.out, self.err
        return self

    def __exit__(self, *exc) -> None:
        sys.stdout, sys.stderr = self.real
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.fd_err.seek(0)
        self.c_err = self.fd_err.read(_Capture.LIMIT).decode("utf-8", "replace")
        self.fd_err.close()

    def stderr(self) -> str:
        return self.err.text() + self.c_err


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:200] if text else ''}"


def _clock(cell_timeout: float, stop_file: str | None):
    """The cell's clock: a SIGALRM handler, ticking every second, that ends the cell past
    ``cell_timeout`` seconds or once ``stop_file`` exists (the kernel's copy of the cell ran
    past the limit first: :mod:`memlab.autograde.batch.timeouts`); re-raised every second after,
    should the cell swallow the first one."""
    import time

    deadline = time.monotonic() + cell_timeout

    def tick(signum, frame):
        if time.monotonic() >= deadline:
            _alarm(signum, frame)
        if stop_file and os.path.exists(stop_file):
            raise _CellTimeout(STOPPED_BY_KERNEL)

    return tick


STOP_PREFIX = ".memlab-stop-"  # + grade_id: the stop file in the re-run's folder
STOPPED_BY_KERNEL = "cell stopped: the learner's kernel ran it past the time limit first"


def run_cell(source: str, ns: dict, label: str, cell_timeout: float,
             stop_file: str | None = None) -> tuple[str, Any, str, str]:
    """Run one cell's source in ``ns`` as a notebook would (its last expression is its value):
    (error text or "", value, stdout, stderr). The cell ends past ``cell_timeout`` seconds, or
    as soon as ``stop_file`` exists (:func:`_clock`)."""
    import signal

    signal.signal(signal.SIGALRM, _clock(cell_timeout, stop_file) if stop_file else _alarm)
    error, value = "", None
    with _Captured() as cap:
        try:
            # without a stop file: one alarm at the limit, re-raised every second after
            signal.setitimer(signal.ITIMER_REAL, min(1.0, cell_timeout) if stop_file
                             else cell_timeout, 1.0)
            tree = ast.parse(source, filename=label)
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, label, "exec"), ns)  # noqa: S102  the cells it re-runs
            if last is not None:
                value = eval(compile(last, label, "eval"), ns)
        except BaseException as exc:  # noqa: BLE001  a cell's failure is data, never the end
            error = _error_text(exc)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return error, value, cap.out.text(), cap.stderr()


def call_captured(cell_timeout: float):
    """How the worker runs one call the judge asked for: (ok, value or exception, out, err)."""
    import signal

    def call(fn, args, kwargs):
        signal.signal(signal.SIGALRM, _alarm)
        with _Captured() as cap:
            try:
                signal.setitimer(signal.ITIMER_REAL, cell_timeout, 1.0)
                ok, value = True, fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001  the learner's failure is data
                ok, value = False, exc
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        return ok, value, cap.out.text(), cap.stderr()

    return call
