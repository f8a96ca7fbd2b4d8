"""One cell timeout for the two runs of a notebook: the learner's kernel and its re-run.

Part of :mod:`memlab.autograde.batch.runner`. The kernel (nbgrader's autograde) and the verdict
re-run (:mod:`memlab.autograde.security.verdict`) execute the same cells side by side, so a cell
that never ends used to spin in both, each until its own per-cell limit: twice the CPU for one
finding. Here whichever run reaches the limit first on a graded cell (one with a grade_id) stops
the other's copy of that cell at once:

- the re-run reports ``{"timeout": grade_id}`` on its signed report; the verdict thread records
  it in the job's :class:`Ledger` (this process), and :class:`LedgerExecute`, nbgrader's
  Execute preprocessor with a watcher, interrupts the kernel within half a second, as nbclient
  does at its own limit (the cell ends with KeyboardInterrupt, an error: it scores 0);
- the kernel's limit (nbclient's ``_async_handle_timeout``) writes a stop file into the re-run's
  own folder (``.memlab-stop-<grade_id>``, created with O_EXCL, never through a link); the
  re-run's cell clock (:func:`memlab.autograde.security.cells.run_cell`) checks it every second.

Nothing here trusts the learner: the ledger is written only from the signed report, and a
forged or early stop can only end the learner's own cell (an error, 0 points, never more).
A cell without a grade_id (a learner's added cell, the setup) is not coordinated: each run
keeps its own limit there.
"""
from __future__ import annotations

import asyncio
import os
import re
import threading
from pathlib import Path
from typing import Any

from nbclient.util import run_sync
from nbgrader.preprocessors import Execute

from memlab.autograde.security.cells import STOP_PREFIX
_SAFE = re.compile(r"[A-Za-z0-9_.-]{1,120}")


class Ledger:
    """The graded cells of one job that ran past the per-cell limit, per run."""

    def __init__(self, stop_root: Path):
        self.stop_root = stop_root  # the re-runs' folders: <stop_root>/<notebook>/
        self._lock = threading.Lock()
        self._rerun: set[tuple[str, str]] = set()
        self.stopped: list[tuple[str, str]] = []  # (notebook, "<grade_id>: who stopped whom")

    def rerun_timed_out(self, notebook: str, grade_id: str) -> None:
        with self._lock:
            self._rerun.add((notebook, grade_id))

    def has_rerun_timed_out(self, notebook: str, grade_id: str) -> bool:
        with self._lock:
            return (notebook, grade_id) in self._rerun

    def kernel_timed_out(self, notebook: str, grade_id: str) -> bool:
        """Tell the re-run of ``notebook`` to stop its copy of ``grade_id``: True if the stop
        file was written (a name that is not a plain grade_id, or a folder that is gone or is
        not a real folder, writes nothing)."""
        if not (_SAFE.fullmatch(notebook) and _SAFE.fullmatch(grade_id)):
            return False
        folder = self.stop_root / notebook
        try:
            dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return False
        try:
            fd = os.open(STOP_PREFIX + grade_id, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                         | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
            os.close(fd)
        except OSError:
            return False
        finally:
            os.close(dir_fd)
        self.note(notebook, f"{grade_id}: per-cell timeout in the kernel first; the re-run's "
                  "copy of the cell was stopped at once")
        return True

    def note(self, notebook: str, text: str) -> None:
        with self._lock:
            self.stopped.append((notebook, text))


CURRENT: Ledger | None = None  # the job of this process (one job per grading child)

# A hidden test runs in the learner's kernel (its outputs are the feedback) with nothing of its
# source left for the learner's code it calls: not stored in IPython's history (In, _ih, _i:
# store_history=False) and its own entry dropped from linecache before its first line (a
# warning's frame or a traceback of the caller reads the line from there). The verdict is the
# re-run's or the judge's, where nothing the learner's process prints reaches a student.
HIDDEN_MARK = "### BEGIN HIDDEN TESTS"
FORGET_SOURCE = ("import linecache as _memlab_lc, sys as _memlab_sys; "
                 "_memlab_f = _memlab_sys._getframe().f_code.co_filename; "
                 "_memlab_lc.cache.pop(_memlab_f, None); "
                 "getattr(_memlab_lc, '_ipython_cache', {}).pop(_memlab_f, None); "
                 "del _memlab_lc, _memlab_sys, _memlab_f\n")


class LedgerExecute(Execute):
    """nbgrader's Execute preprocessor, stopped early on a graded cell whose re-run already ran
    past the per-cell limit, and telling the re-run when the kernel does (module docstring);
    hidden tests run without their source in reach (:data:`FORGET_SOURCE`)."""

    poll_seconds = 0.5

    def preprocess(self, nb, resources=None, km=None):
        self._notebook = str((resources or {}).get("unique_key") or "")
        return super().preprocess(nb, resources, km=km)

    async def async_execute_cell(self, cell, cell_index, execution_count=None,
                                 store_history=True) -> Any:
        gid = _grade_id(cell)
        ledger = CURRENT
        source = cell.get("source")
        hidden = cell.get("cell_type") == "code" and isinstance(source, str) \
            and HIDDEN_MARK in source
        if hidden:  # the learner's code it calls finds neither its source nor its history
            cell["source"], store_history = FORGET_SOURCE + source, False
        watcher = None
        if ledger is not None and gid and cell.get("cell_type") == "code":
            self._cell_gid = gid
            watcher = asyncio.ensure_future(self._watch(ledger, gid))
        try:
            return await super().async_execute_cell(cell, cell_index, execution_count,
                                                    store_history)
        finally:
            if watcher is not None:
                watcher.cancel()
                self._cell_gid = None
            if hidden:
                cell["source"] = source

    # nbclient binds execute_cell = run_sync(async_execute_cell) in its class body, to ITS
    # coroutine: without this line the override above is never called (nbconvert's
    # preprocess_cell calls execute_cell)
    execute_cell = run_sync(async_execute_cell)

    async def _watch(self, ledger: Ledger, gid: str) -> None:
        while not ledger.has_rerun_timed_out(self._notebook, gid):
            await asyncio.sleep(self.poll_seconds)
        ledger.note(self._notebook, f"{gid}: per-cell timeout in the re-run first; the "
                    "kernel's copy of the cell was interrupted at once")
        self.log.error("Interrupting kernel: the re-run of %s ran past the per-cell limit", gid)
        from nbclient.util import ensure_async

        await ensure_async(self.km.interrupt_kernel())

    async def _async_handle_timeout(self, timeout, cell=None):
        gid = _grade_id(cell) if cell is not None else getattr(self, "_cell_gid", None)
        if CURRENT is not None and gid:
            CURRENT.kernel_timed_out(self._notebook, gid)
        return await super()._async_handle_timeout(timeout, cell)


def _grade_id(cell) -> str:
    meta = (cell.get("metadata") or {}).get("nbgrader") or {}
    gid = meta.get("grade_id") if isinstance(meta, dict) else None
    return gid if isinstance(gid, str) else ""


def autograde_preprocessors() -> list:
    """nbgrader's autograde preprocessors with :class:`LedgerExecute` for its Execute."""
    from nbgrader.converters.autograde import Autograde

    return [LedgerExecute if pp is Execute else pp
            for pp in Autograde.autograde_preprocessors.default()]
