"""Grade a whole class in one command: ``python -m memlab.autograde grade-class SUBMISSIONS``.

Used by: ``make grade-class SUBMISSIONS=...``, autograder/README.md ("Grading a class"),
tests/grading/test_grade_class.py, tests/grading/test_grade_scale.py,
tests/notebooks/test_classroom_roundtrip.py, benchmarks/grading_speed.py.

SUBMISSIONS is a folder or a ``.zip`` (relative or absolute path, from any working directory)
laid out like nbgrader's submitted folder::

    <student_id>/<assignment>/<notebook>.ipynb      (+ data files, optional timestamp.txt)

at the top of the zip or under one top-level folder (zip ``submitted/`` or ``class/``; an LMS
export converted with ``nbgrader zip_collect`` already has this layout).

Where things live
-----------------
This module is the orchestration (settings, executor, progress, ledger, :func:`grade_class`)
and the facade: it re-exports the names of its parts, so ``from memlab.autograde.batch.grade_class
import X`` keeps working; the default hook names name the module that defines each hook
(``memlab.autograde.batch.runner:limited_kernelspec``, ``memlab.autograde.batch.intake:audit_check``,
tests/grading/test_assignments.py resolves them). No part imports it (pyproject.toml's contracts).

- :mod:`.intake`:  zip, layout, a submission's files, timestamp.txt, the checks before running
  (:func:`structure_check`: notebooks repaired against the release; :func:`audit_check`)
- :mod:`.jobs`:    :func:`course_bundle`, :func:`make_job`, :func:`grade_job` (run one job
  in a grading child with a wall limit)
- :mod:`.warm`:    the grading processes: warm zygote, grading child, pre-forked kernels,
  :class:`WarmKernelManager`
- :mod:`.runner`:  inside the child: the job's private course, checks, kernelspec
  (:func:`limited_kernelspec`), nbgrader autograde + feedback, the verdict re-runs, the scan
- :mod:`.merge`:   :func:`validate_result`, the merge into the course gradebook,
  :func:`gradebook_integrity`
- :mod:`.report`:  :class:`ClassReport`, grades.csv, submissions.csv, review.csv,
  questions.csv, summary.md/json, the score plot

To monkeypatch a function, patch the module that defines it (a patch of the name here does not
reach a part that calls it); this module's own calls (``_Executor`` submitting
:func:`grade_job`) go through the names here.

Design: one **job** per (student, assignment), pure data in and out
--------------------------------------------------------------------
:func:`grade_job` is the single seam between the class grader and whatever runs a
submission. A job (a plain dict, see :func:`make_job`) carries the submission's files as bytes,
a *course bundle* (the nbgrader config text, a copy of the gradebook with no student in it,
the released notebooks and the data files of the assignment: never a solution notebook) and
the settings. :func:`grade_job` builds a private temporary course from it, runs the checks
(``settings["checks"]``: ``"module:function"`` names, see :func:`structure_check`), writes the
kernelspec (``settings["kernelspec"]``: how the kernel is launched, see
:func:`limited_kernelspec`), runs nbgrader's autograde and generate_feedback there, and returns
a result dict: status, reasons, scores per graded cell, late penalty, what the autograded
notebooks show (errors, stderr, guard and review lines), and the autograded notebooks and
feedback HTML as bytes. It never touches the course: the class grader alone validates each
result (:func:`validate_result`) and merges it into the course gradebook.

Jobs run on a standard executor: ``concurrent.futures.ProcessPoolExecutor`` (default, one
process per core) or a Dask distributed cluster (``--scheduler ADDRESS``). The limits hold per
job on every executor, because :func:`grade_job` enforces them itself: the grading runs in a
child process forked from a warm *zygote* (nbgrader, torch, memlab and ipykernel already
imported), killed with its kernel when it outlives ``submission_timeout`` (scores 0, with the
reason; the batch goes on). Kernels are forked too, from the same warm image, before the child
starts any thread (no ``import torch`` per notebook): :class:`WarmKernelManager`.

Security (issue 19; autograder/README.md, Security): the default checks include
:func:`audit_check` (the static audit, :mod:`memlab.autograde.security.audit`: a violating answer cell is
replaced by its released stub before anything runs; ``audit=False`` / ``--no-audit`` drops it);
with ``sandbox=True`` (default) every kernel and re-run is sandboxed: where Landlock is usable
(``sandbox_kind="auto"``), each is a warm fork that confines itself before any learner code
(:mod:`memlab.autograde.security.landlock`, :class:`memlab.autograde.batch.processes.ConfinedKernelManager`); else it
runs under bubblewrap (:class:`memlab.autograde.security.bwrap.SandboxKernelManager`, a fresh
interpreter each); with neither the report says ``unsandboxed`` with a loud warning. With
``verdict=True`` (default; ``--no-verdict``)
every notebook is re-run in a fresh sandboxed process that is not a Jupyter kernel
(:mod:`memlab.autograde.security.verdict`) and each test cell keeps the lower of nbgrader's score and the
re-run's, so a kernel that forges its own report gains nothing. The grader retries a merge while the gradebook is
locked and runs SQLite's integrity check after the batch (summary.md, summary.json).

Resumable: every merged result is appended to ``<out>/ledger.jsonl``; a rerun with the same
submissions grades only what is missing (or changed). ``students`` / ``assignments`` regrade
a subset without a full batch; the report always covers everything graded so far.
Scores are deterministic: the same submissions give the same grades.csv and submissions.csv.
"""
from __future__ import annotations

import copy
import json
import math
import os
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memlab.autograde import decisions
# The parts, and the names this facade re-exports (public names, hooks named by dotted path in
# GradeSettings, and the private helpers tests import from here).
from memlab.autograde.course import default_report_dir  # noqa: F401  (re-exported)
from memlab.autograde.batch.intake import (  # noqa: F401
    MAX_NOTEBOOK_BYTES, MAX_SUBMISSION_BYTES, MAX_ZIP_BYTES, _collect_jobs, _read_tree,
    _safe_extract, _timestamp, _write_tree, arrange_flat, audit_check, find_layout,
    structure_check)
from memlab.autograde.batch.jobs import (  # noqa: F401
    _slim_gradebook, course_bundle, grade_job, make_job, remove_job_folders, remove_tree)
from memlab.autograde.batch.merge import (  # noqa: F401
    _merge, _merge_retrying, gradebook_integrity, validate_result)
from memlab.autograde.batch.report import (  # noqa: F401
    ClassReport, _assignment_hooks, _duration, _reason_text, _write_report)
from memlab.autograde.batch.runner import (  # noqa: F401
    GUARD_MARKER, MAX_RESULT_FILE_BYTES, REVIEW_MARKER, _failed_result, _first_line, _scan,
    limited_kernelspec, sandbox_mode, sandbox_state)
from memlab.autograde.batch.processes import WarmKernelManager, warm_up  # noqa: F401

__all__ = ["grade_class", "refresh_report", "default_report_dir", "grade_job",
           "make_job", "course_bundle", "validate_result",
           "GradeSettings", "ClassReport", "find_layout", "structure_check", "audit_check", "limited_kernelspec",
           "WarmKernelManager", "REVIEW_MARKER", "kernel_threads"]


@dataclass
class GradeSettings:
    workers: int = 0                   # local processes (0: one per core); ignored with scheduler
    cell_timeout: int = 300            # Execute.timeout, seconds per cell
    submission_timeout: int = 900      # wall clock per (student, assignment), enforced per job
    memory_mb: int = 4096              # RLIMIT_AS per kernel (0: no limit)
    grader_memory_mb: int = 3072       # RLIMIT_DATA of each grading child, the unsandboxed
    #                                    nbgrader process that reads the kernel's outputs (0: none)
    job_pids_max: int = 512            # tasks (processes and threads) per job at once, in a cgroup
    #                                    of its own where the machine allows (0: no cgroup)
    output_cap_mb: int = 8             # outputs kept per notebook while it runs; the rest of what
    #                                    a cell prints is dropped with a note (0: no cap)
    job_disk_mb: int = 2048            # what a job's folder may hold (bytes on disk, files);
    job_files_max: int = 20_000        # past either the job is stopped and scores 0 (0: no limit)
    threads_per_kernel: int = 0        # OMP/MKL threads per kernel (0: kernel_threads())
    scheduler: str | None = None       # Dask scheduler address (tcp://host:8786); None: local
    warm: bool = True                  # fork jobs and kernels from a warm process
    # hooks, each named by the module that defines it (a grading child imports only that one)
    kernelspec: str = "memlab.autograde.batch.runner:limited_kernelspec"  # how the kernel starts
    checks: tuple[str, ...] = ("memlab.autograde.batch.intake:structure_check",  # before running
                               "memlab.autograde.batch.intake:audit_check")
    sandbox: bool = True               # sandbox every learner process (kernels, verdict re-runs)
    sandbox_kind: str = "auto"         # "auto": Landlock on warm forks where usable
    #                                    (memlab.autograde.security.landlock), else bubblewrap
    #                                    (memlab.autograde.security.bwrap); or "landlock" / "bwrap"
    audit: bool = True                 # static audit of answer cells (drops audit_check when False)
    verdict: bool = True               # re-run the tests outside the learner's kernel, lower score
    #                                    counts (memlab.autograde.security.verdict)
    judge: bool = True                 # decide Assignment.judged cells in the judge, a process
    #                                    that runs no learner code (security.judge); False only
    #                                    to measure what it costs (benchmarks/grading_speed.py)
    config_overrides: dict = field(default_factory=dict)  # hook: nbgrader config per job,
    #                                  {"Section": {"trait": value}}, applied after the course's
    resume: bool = True                # skip submissions already in <out>/ledger.jsonl
    flat: str = ""                     # a flat LMS download: "canvas" or a regex (intake.arrange_flat)
    students: tuple[str, ...] = ()     # grade only these students ...
    assignments: tuple[str, ...] = ()  # ... and/or only these assignments (resume still
    #                                    applies: resume=False grades them again)


AUDIT_CHECK = "memlab.autograde.batch.intake:audit_check"


def _feedback_with_decisions(api, gb, result: dict) -> None:
    """The job wrote the feedback from its own gradebook, which holds no decision: where the
    instructor's decisions stand (a manual score the merge kept, ``gb``), write it again from
    the course gradebook (no code runs)."""
    if result.get("status") != "ok":
        return
    sub = gb.find_submission(result["assignment"], result["student"])
    if all(g.manual_score is None for snb in sub.notebooks for g in snb.grades):
        return
    from memlab.autograde import course

    try:
        course.feedback(result["assignment"], [result["student"]], api=api)
    except Exception as exc:  # noqa: BLE001 - one submission never stops the batch
        result["reasons"].append(f"feedback with the instructor's decision not written "
                                 f"({type(exc).__name__})")


def _previous_summary(out: Path) -> dict:
    """summary.json of the batch that last wrote the report in ``out`` ({} when none)."""
    try:
        before = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return before if isinstance(before, dict) else {}


def refresh_report(config_path: str | Path | None = None, out: str | Path | None = None,
                   api=None) -> ClassReport | None:
    """Write a class report again from its ledger and the gradebook, grading nothing (after
    an instructor's decision: ``reviews --set``). None when ``out`` holds no class report.
    The timing, workers and isolation of the batch that graded it are kept."""
    from memlab.autograde import course

    api = api or course.make_api(config_path)
    out = Path(out).expanduser().resolve() if out else default_report_dir(api.coursedir)
    ledger = _load_ledger(out / "ledger.jsonl")
    if not ledger:
        return None
    decisions.adopt(api)  # a score set in formgrader since: a decision like reviews --set
    before = _previous_summary(out)
    report = ClassReport(out=out, results=[e["result"] for _, e in sorted(ledger.items())],
                         seconds=float(before.get("seconds", 0.0)),
                         workers=int(before.get("workers", 0)),
                         graded=int(before.get("graded_now", 0)),
                         skipped=int(before.get("from_ledger", 0)),
                         isolation=str(before.get("isolation", "")),
                         integrity=gradebook_integrity(
                             api.coursedir.db_url.replace("sqlite:///", "", 1)))
    _write_report(api, report, list(before.get("ignored_folders", [])))
    return report


def _encodable(value):
    """``value`` with every string UTF-8 encodable: a reason may quote what a submission holds
    (a lone surrogate in a notebook's field), and the gradebook, the ledger and the report's
    files must still take it (the character is written as its escape, \\ud800)."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_encodable(v) for v in value)
    return value


def merge_or_zero(gb, cd, job: dict, result: dict, timestamp) -> dict:
    """:func:`_merge_retrying`, and when recording the result itself fails (a file name the
    course folder cannot hold, a value the gradebook refuses), the submission is recorded as
    0 with the reason instead: one submission never stops the batch. Returns what was
    recorded."""
    result = _encodable(result)
    try:
        _merge_retrying(gb, cd, job, result, timestamp)
        return result
    except Exception as exc:  # noqa: BLE001  anything from one result, never the batch
        gb.db.rollback()
        failed = _failed_result(job, f"its result could not be recorded ({type(exc).__name__}: "
                                     f"{_first_line(exc, 120)}): scores 0",
                                result.get("seconds", 0.0) if isinstance(result, dict) else 0.0)
        _merge_retrying(gb, cd, job, failed, None)
        return failed



def kernel_threads(settings: GradeSettings, n_local: int, cores: int | None = None) -> int:
    """OMP/MKL threads per learner process: ``settings.threads_per_kernel``, else the cores
    shared by what runs at once: ``n_local`` jobs, each running its kernel and (with the
    verdict) its re-run side by side; 1 on a Dask cluster (one job per worker thread)."""
    if settings.threads_per_kernel:
        return int(settings.threads_per_kernel)
    if settings.scheduler:
        return 1
    per_job = 2 if settings.verdict else 1
    return max(1, (cores or os.cpu_count() or 1) // (max(1, n_local) * per_job))


def _job_settings(settings: GradeSettings, threads: int) -> dict:
    return {"cell_timeout": int(settings.cell_timeout), "submission_timeout": int(settings.submission_timeout),
            "memory_mb": int(settings.memory_mb), "threads": int(threads), "warm": bool(settings.warm),
            "grader_memory_mb": int(settings.grader_memory_mb),
            "job_pids_max": int(settings.job_pids_max),
            "output_cap_mb": float(settings.output_cap_mb),
            "job_disk_mb": int(settings.job_disk_mb), "job_files_max": int(settings.job_files_max),
            "kernelspec": settings.kernelspec, "sandbox": bool(settings.sandbox),
            "sandbox_kind": str(settings.sandbox_kind or "auto"),
            "verdict": bool(settings.verdict), "judge": bool(settings.judge),
            "checks": [c for c in settings.checks if settings.audit or c != AUDIT_CHECK],
            "config_overrides": copy.deepcopy(settings.config_overrides)}


class _Progress:
    """One line on stderr: done/total, rate, time left (rewritten in place on a terminal)."""

    def __init__(self, total: int, enabled: bool, skipped: int = 0):
        self.total, self.enabled, self.skipped = total, enabled, skipped
        self.done = 0
        self.t0 = time.monotonic()
        self.tty = sys.stderr.isatty()
        self._last = 0.0

    def line(self, last: str = "") -> str:
        elapsed = time.monotonic() - self.t0
        rate = self.done / elapsed * 60 if elapsed > 0 and self.done else 0.0
        left = (self.total - self.done) / (rate / 60) if rate else float("nan")
        eta = "?" if math.isnan(left) else (f"{left / 60:.0f} min" if left >= 90 else f"{left:.0f} s")
        skip = f" ({self.skipped} already graded)" if self.skipped else ""
        return (f"graded {self.done}/{self.total}{skip}  {rate:5.1f}/min  {elapsed:5.0f} s elapsed  "
                f"~{eta} left  {last[:40]}")

    def update(self, last: str = "") -> None:
        self.done += 1 if last else 0
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            sys.stderr.write("\r" + self.line(last).ljust(110))
            if self.done == self.total:
                sys.stderr.write("\n")
        elif now - self._last > 10 or self.done == self.total or not last:
            sys.stderr.write(self.line(last) + "\n")
        self._last = now
        sys.stderr.flush()


class _Executor:
    """submit(job) -> future; ProcessPoolExecutor, or a Dask cluster (``scheduler``)."""

    def __init__(self, settings: GradeSettings, n_jobs: int):
        self.client = None
        if settings.scheduler:
            try:
                from distributed import Client
            except ImportError as exc:  # pragma: no cover
                raise RuntimeError("--scheduler needs dask[distributed] (requirements.txt)") from exc
            self.client = Client(settings.scheduler, timeout=30, set_as_default=False)
            info = self.client.scheduler_info()
            self.workers = sum(w.get("nthreads", 1) for w in info["workers"].values()) or 1
            self._bundles: dict[str, Any] = {}
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self.workers = max(1, min(settings.workers or os.cpu_count() or 1, n_jobs))
            self._init = warm_up if settings.warm else None
            self.pool = ProcessPoolExecutor(max_workers=self.workers,
                                            mp_context=multiprocessing.get_context("spawn"),
                                            initializer=self._init)

    def submit(self, job: dict):
        if self.client is None:
            return self.pool.submit(grade_job, job)
        a = job["assignment"]
        if a not in self._bundles:  # sent to the cluster once per assignment, not per job
            # In a list: scatter() would take a dict's keys as the cluster's data keys.
            self._bundles[a] = self.client.scatter([job["course"]], broadcast=True, hash=False)[0]
        job = dict(job, course=self._bundles[a])
        return self.client.submit(grade_job, job, pure=False,
                                  key=f"grade-{job['student']}-{a}-{job['digest'][:8]}-{time.monotonic_ns()}")

    def restart_if_broken(self) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        if getattr(self.pool, "_broken", False):
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = ProcessPoolExecutor(max_workers=self.workers,
                                            mp_context=multiprocessing.get_context("spawn"),
                                            initializer=self._init)

    def wait_first(self, futures):
        if self.client is None:
            from concurrent.futures import FIRST_COMPLETED, wait

            return wait(futures, return_when=FIRST_COMPLETED)[0]
        while True:  # (distributed.wait needs a default client; this one is private)
            done = [f for f in futures if f.done()]
            if done:
                return done
            time.sleep(0.1)

    def close(self, cancel: bool = False) -> None:
        if self.client is None:
            if cancel:
                for p in list(getattr(self.pool, "_processes", {}).values()):
                    try:
                        p.kill()
                    except Exception:
                        pass
            self.pool.shutdown(wait=not cancel, cancel_futures=cancel)
        else:
            self.client.close()


def _load_ledger(path: Path) -> dict[tuple[str, str], dict]:
    entries: dict[tuple[str, str], dict] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                e = json.loads(line)
                entries[(e["student"], e["assignment"])] = e
            except (ValueError, KeyError):
                continue  # a line cut by a crash
    return entries


def grade_class(submissions: str | Path, *, config_path: str | Path | None = None,
                out: str | Path | None = None, settings: GradeSettings | None = None,
                progress: bool = True) -> ClassReport:
    """Grade every assignment of every student in ``submissions`` (folder or zip); see module doc."""
    import warnings

    # nbgrader 0.9.6 + SQLAlchemy 2 warn "not in session" on every new submission: noise.
    warnings.filterwarnings("ignore", message=".*not in session.*")
    settings = settings or GradeSettings()
    t_start = time.monotonic()
    isolation = _isolation(settings)
    # Every path is made absolute here, in the caller's working directory: nothing below
    # (or in a job, which gets only data) depends on where the command was started.
    src = Path(submissions).expanduser().resolve()
    api, config_file, known = _open_course(config_path)
    cd = api.coursedir
    decisions.adopt(api)  # formgrader's manual scores, on the answers they were given on
    out = Path(out).expanduser().resolve() if out else default_report_dir(cd)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="memlab-grade-"))
    jobs_root: Path | None = None
    try:
        found, ignored = _find_submissions(submissions, src, tmp, settings, known)
        bundles = _bundles(api, tmp, config_file, found)
        n_local = max(1, min(settings.workers or os.cpu_count() or 1, len(found)))
        jset = _job_settings(settings, kernel_threads(settings, n_local))
        # removed below, whatever happens to the workers; not inside `tmp`, whose gradebook copy
        # a job could then look up (Landlock lets a path outside the job's folder be stat'ed)
        jobs_root = Path(tempfile.mkdtemp(prefix="memlab-jobs-"))
        jset["job_root"] = str(jobs_root)
        ledger_path = out / "ledger.jsonl"
        ledger = _ledger_for(ledger_path, settings.resume, found)
        pending, results, refused = _plan(cd, found, bundles, jset, ledger)
        if refused:  # graded 0 with their reason, merged like any failed job (never ledgered)
            _record_refused(cd, refused, results)
        skipped = len(results)
        workers = 0
        if pending:
            bar = _Progress(len(pending), progress, skipped)
            workers = _run_jobs(api, settings, pending, bundles, results, ledger_path, bar)
        # The report covers everything graded into this report folder so far.
        for key, e in _load_ledger(ledger_path).items():
            results.setdefault(key, e["result"])
        seconds = time.monotonic() - t_start
        if not pending:  # nothing graded now: the report keeps the timing of the batch that did
            before = _previous_summary(out)
            seconds = float(before.get("seconds", seconds))
            workers = int(before.get("workers", workers))
        report = ClassReport(out=out, results=sorted(results.values(),
                                                     key=lambda r: (r["student"], r["assignment"])),
                             seconds=seconds, workers=workers,
                             graded=len(pending), skipped=skipped, isolation=isolation,
                             integrity=gradebook_integrity(cd.db_url.replace("sqlite:///", "", 1)))
        if report.integrity != "ok":
            sys.stderr.write(f"\nERROR: the gradebook failed SQLite's integrity check after the "
                             f"batch: {report.integrity}\n")
        _write_report(api, report, ignored)
        return report
    finally:
        if jobs_root is not None:
            remove_job_folders(jobs_root, settings.job_pids_max)
        remove_tree(tmp)


def _isolation(settings: GradeSettings) -> str:
    """What the report says of the sandbox (warning loudly when one was asked for and none
    is usable)."""
    from memlab.autograde.security import bwrap as sandbox

    mode, why = sandbox_mode(settings)
    if mode == "landlock":
        return (f"sandboxed (Landlock on warm forks, {why}: no network, one readable and "
                "writable folder, no signal or ptrace outside it)")
    if mode == "bwrap":
        return f"sandboxed ({why}: no network, own PID namespace, one writable folder)"
    if settings.sandbox:
        sandbox.warn_unsandboxed(why)
    return f"unsandboxed ({why})"


def _open_course(config_path: str | Path | None) -> tuple[Any, Path, list[str]]:
    """(nbgrader API, absolute config file, the gradebook's assignments); refused when the
    gradebook has none."""
    from nbgrader.api import Gradebook

    from memlab.autograde import course

    config_file = (Path(config_path).expanduser().resolve() if config_path
                   else course.default_config_path().resolve())
    api = course.make_api(config_file)
    cd = api.coursedir
    with Gradebook(cd.db_url, cd.course_id) as gb:
        known = sorted(a.name for a in gb.assignments)
    if not known:
        raise course.NbgraderError("the gradebook has no assignments: run `make release` first")
    return api, config_file, known


def _find_submissions(submissions: str | Path, src: Path, tmp: Path, settings: GradeSettings,
                      known: list[str]) -> tuple[list[tuple[str, str, Path]], list[str]]:
    """(student, assignment, folder) of each submission this call grades (a zip unpacked and
    a flat LMS download arranged under ``tmp``), and the folders ignored; errors name
    ``submissions`` as the instructor gave it."""
    if src.is_file() and zipfile.is_zipfile(src):
        _safe_extract(src, tmp / "input")
        src = tmp / "input"
    elif not src.is_dir():
        raise FileNotFoundError(f"{submissions}: not a folder or a zip file")
    if settings.flat:   # an LMS download, every student's file side by side
        src = arrange_flat(src, tmp / "arranged", settings.flat, known)
    try:
        found, ignored = _collect_jobs(src, known)
    except ValueError as exc:  # name what the instructor gave, not a temporary folder
        raise ValueError(f"{submissions}: no <student>/<assignment>/ folders of the "
                         f"assignments {known}; an LMS download with every file side by "
                         "side takes --flat canvas (or --flat REGEX with the groups student "
                         "and file): see autograder/README.md") from exc
    if not found:
        raise ValueError(f"no submissions of {known} found in {submissions}")
    if settings.students:
        found = [f for f in found if f[0] in settings.students]
    if settings.assignments:
        found = [f for f in found if f[1] in settings.assignments]
    if not found:
        raise ValueError(f"no submission of students {list(settings.students) or 'any'} and "
                         f"assignments {list(settings.assignments) or 'any'} in {submissions}")
    return found, ignored


def _bundles(api, tmp: Path, config_file: Path, found: list[tuple[str, str, Path]]) -> dict:
    """assignment -> its course bundle, for each assignment in ``found`` (the gradebook copy
    in it holds no student)."""
    cd = api.coursedir
    slim = tmp / "gradebook.db"
    _slim_gradebook(Path(cd.db_url.replace("sqlite:///", "", 1)), slim)
    gradebook_bytes = slim.read_bytes()
    config_text = config_file.read_text()
    return {a: course_bundle(api, a, gradebook_bytes, config_text)
            for a in sorted({f[1] for f in found})}


def _ledger_for(ledger_path: Path, resume: bool, found: list[tuple[str, str, Path]]) -> dict:
    """The ledger's entries this call may reuse: none without ``resume``, and then the
    ledger file keeps only the entries of what this call does not cover."""
    ledger = _load_ledger(ledger_path)
    if not resume and ledger:
        # grade again what this call covers; the rest of the report's ledger stays
        mine = {(f[0], f[1]) for f in found}
        ledger_path.write_text("".join(json.dumps(e) + "\n" for k, e in ledger.items()
                                       if k not in mine))
        ledger = {}
    return ledger


def _plan(cd, found: list[tuple[str, str, Path]], bundles: dict, jset: dict,
          ledger: dict) -> tuple[list[dict], dict, list[tuple[dict, dict]]]:
    """(jobs to run, results kept from the ledger, (job, failed result) of each submission
    refused on reading). A ledger entry is kept while the submission, the course and the
    gradebook's record of it are unchanged."""
    from nbgrader.api import Gradebook, MissingEntry

    pending, results, refused = [], {}, []
    with Gradebook(cd.db_url, cd.course_id) as gb:
        for student, assignment, folder in found:
            try:
                files = _read_tree(folder, MAX_SUBMISSION_BYTES)
            except (ValueError, OSError) as exc:  # one bad submission never stops the class
                job = make_job(student, assignment, {}, bundles[assignment], jset)
                refused.append((job, _failed_result(
                    job, f"submission refused: {_first_line(str(exc), 160)}: scores 0", 0.0)))
                continue
            job = make_job(student, assignment, files, bundles[assignment], jset)
            e = ledger.get((student, assignment))
            if (e and e.get("digest") == job["digest"]
                    and e.get("course") == bundles[assignment]["fingerprint"]):
                try:
                    gb.find_submission(assignment, student)
                    results[(student, assignment)] = e["result"]
                    continue
                except MissingEntry:
                    pass
            pending.append(job)
    return pending, results, refused


def _record_refused(cd, refused: list[tuple[dict, dict]], results: dict) -> None:
    """Merge each refused submission's failed result into the gradebook and ``results``."""
    from nbgrader.api import Gradebook

    with Gradebook(cd.db_url, cd.course_id) as gb:
        for job, res in refused:
            res = merge_or_zero(gb, cd, job, res, None)
            results[(res["student"], res["assignment"])] = res


def _run_jobs(api, settings: GradeSettings, pending: list[dict], bundles: dict, results: dict,
              ledger_path: Path, bar: _Progress) -> int:
    """Run ``pending`` on the executor, each result merged and ledgered as it arrives; the
    number of workers. Interrupted: the executor's processes are killed, what was merged
    stays in the ledger."""
    from nbgrader.api import Gradebook

    cd = api.coursedir
    bar.update()
    ex = _Executor(settings, len(pending))
    ledger_fh = open(ledger_path, "a")
    try:
        with Gradebook(cd.db_url, cd.course_id) as gb:
            queue = list(pending)
            running: dict[Any, dict] = {}
            lost: dict[int, int] = {}  # id(job) -> times its worker process was lost
            while queue or running:
                while queue and len(running) < 2 * ex.workers:
                    job = queue.pop(0)
                    running[ex.submit(job)] = job
                for fut in ex.wait_first(running):
                    job = running.pop(fut)
                    try:
                        res = fut.result()
                    except Exception as exc:  # a worker process lost (killed, out of memory)
                        if _goes_again(ex, exc, job, queue, lost):
                            continue
                        res = _failed_result(job, f"the grading worker process was lost "
                                                  f"({type(exc).__name__}): scores 0", 0.0)
                    _record(api, gb, job, res, bundles, results, ledger_fh)
                    bar.update(f"{job['student']}/{job['assignment']}")
    except BaseException:
        ex.close(cancel=True)
        if bar.enabled:
            sys.stderr.write(f"\ninterrupted after {bar.done} of {len(pending)}: run the same "
                             f"command again to grade only what is missing\n")
        raise
    else:
        ex.close()
    finally:
        ledger_fh.close()
    return ex.workers


def _goes_again(ex: _Executor, exc: Exception, job: dict, queue: list[dict],
                lost: dict[int, int]) -> bool:
    """Whether ``job``, whose future raised ``exc``, goes again: the local pool broke (a new
    one is started, every job it held goes again); a job whose worker is lost twice does not."""
    from concurrent.futures import BrokenExecutor

    if isinstance(exc, BrokenExecutor) and ex.client is None:
        lost[id(job)] = lost.get(id(job), 0) + 1
        if lost[id(job)] < 2:
            queue.insert(0, job)
            ex.restart_if_broken()
            return True
    return False


def _record(api, gb, job: dict, res: dict, bundles: dict, results: dict, ledger_fh) -> None:
    """A job's result validated, merged into the course gradebook and into ``results``, and
    appended to the ledger (on disk before the next)."""
    cd = api.coursedir
    problems = validate_result(res, job)
    if problems:
        res = _failed_result(job, "grading result rejected ("
                             + _first_line("; ".join(problems), 160) + "): scores 0",
                             res.get("seconds", 0.0) if isinstance(res, dict) else 0.0)
    ts, ts_problem = _timestamp(job["files"])
    if ts_problem:
        res["reasons"].append(ts_problem)
    res = merge_or_zero(gb, cd, job, res, ts)
    _feedback_with_decisions(api, gb, res)
    res.pop("files", None)
    res.pop("log", None)
    results[(job["student"], job["assignment"])] = res
    ledger_fh.write(json.dumps({
        "student": job["student"], "assignment": job["assignment"],
        "digest": job["digest"], "course": bundles[job["assignment"]]["fingerprint"],
        "result": res}) + "\n")
    ledger_fh.flush()
    os.fsync(ledger_fh.fileno())
