"""Grade a whole class in one command: ``python -m memlab.grading.instructor grade-class SUBMISSIONS``.

Used by: ``make grade-class SUBMISSIONS=...``, autograder/README.md ("Grading a class"),
tests/grading/test_grade_class.py, tests/grading/test_grade_scale.py,
tests/notebooks/test_classroom_roundtrip.py, benchmarks/grading_speed.py.

SUBMISSIONS is a folder or a ``.zip`` (relative or absolute path, from any working directory)
laid out like nbgrader's submitted folder::

    <student_id>/<assignment>/<notebook>.ipynb      (+ data files, optional timestamp.txt)

at the top of the zip or under one top-level folder (zip ``submitted/`` or ``class/``; an LMS
export converted with ``nbgrader zip_collect`` already has this layout).

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
:func:`audit_check` (the static audit, :mod:`memlab.grading.audit`: a violating answer cell is
replaced by its released stub before anything runs; ``audit=False`` / ``--no-audit`` drops it);
with ``sandbox=True`` (default) and bubblewrap usable, every kernel runs under
:class:`memlab.grading.sandbox.SandboxKernelManager` (no warm fork for it); otherwise the report
says ``unsandboxed`` with a loud warning. With ``verdict=True`` (default; ``--no-verdict``)
every notebook is re-run in a fresh sandboxed process that is not a Jupyter kernel
(:mod:`memlab.grading.verdict`) and each test cell keeps the lower of nbgrader's score and the
re-run's, so a kernel that forges its own report gains nothing. The grader retries a merge while the gradebook is
locked and runs SQLite's integrity check after the batch (summary.md, summary.json).

Resumable: every merged result is appended to ``<out>/ledger.jsonl``; a rerun with the same
submissions grades only what is missing (or changed). ``students`` / ``assignments`` regrade
a subset without a full batch; the report always covers everything graded so far.
Scores are deterministic: the same submissions give the same grades.csv and submissions.csv.
"""
from __future__ import annotations

import copy
import csv
import hashlib
import json
import math
import os
import pickle
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Sequence

__all__ = ["grade_class", "grade_job", "make_job", "course_bundle", "validate_result",
           "GradeSettings", "ClassReport", "find_layout", "structure_check", "audit_check", "limited_kernelspec",
           "WarmKernelManager", "REVIEW_MARKER"]

REVIEW_MARKER = "NEEDS MANUAL REVIEW:"
GUARD_MARKER = "grading guard:"
MAX_ZIP_BYTES = 2 * 1024 ** 3       # refuse zips that unpack to more than this
MAX_NOTEBOOK_BYTES = 100 * 1024 ** 2  # a submitted notebook larger than this is not graded
MAX_RESULT_FILE_BYTES = 200 * 1024 ** 2  # an autograded/feedback file larger than this is dropped


@dataclass
class GradeSettings:
    workers: int = 0                   # local processes (0: one per core); ignored with scheduler
    cell_timeout: int = 300            # Execute.timeout, seconds per cell
    submission_timeout: int = 900      # wall clock per (student, assignment), enforced per job
    memory_mb: int = 4096              # RLIMIT_AS per kernel (0: no limit)
    threads_per_kernel: int = 0        # OMP/MKL threads per kernel (0: cores // workers)
    scheduler: str | None = None       # Dask scheduler address (tcp://host:8786); None: local
    warm: bool = True                  # fork jobs and kernels from a warm process
    kernelspec: str = f"{__name__}:limited_kernelspec"   # hook: how the kernel starts
    checks: tuple[str, ...] = (f"{__name__}:structure_check",   # hook: before running
                               f"{__name__}:audit_check")
    sandbox: bool = True               # bubblewrap per kernel where usable (memlab.grading.sandbox)
    audit: bool = True                 # static audit of answer cells (drops audit_check when False)
    verdict: bool = True               # re-run the tests outside the learner's kernel, lower score
    #                                    counts (memlab.grading.verdict)
    config_overrides: dict = field(default_factory=dict)  # hook: nbgrader config per job,
    #                                  {"Section": {"trait": value}}, applied after the course's
    resume: bool = True                # skip submissions already in <out>/ledger.jsonl
    students: tuple[str, ...] = ()     # grade (again) only these students ...
    assignments: tuple[str, ...] = ()  # ... and/or only these assignments


@dataclass
class ClassReport:
    out: Path
    results: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    workers: int = 1
    graded: int = 0                    # jobs run by this call (the rest came from the ledger)
    skipped: int = 0
    isolation: str = ""                # "sandboxed (...)" or "unsandboxed (why)"
    integrity: str = ""                # PRAGMA integrity_check of the gradebook after the batch

    @property
    def by_submission(self) -> dict[tuple[str, str], dict]:
        return {(r["student"], r["assignment"]): r for r in self.results}


# --------------------------------------------------------------------------- input layout
def _safe_extract(zip_path: Path, dest: Path) -> None:
    with zipfile.ZipFile(zip_path) as zf:
        total = 0
        for info in zf.infolist():
            name = info.filename.replace("\\", "/")
            parts = [p for p in name.split("/") if p not in ("", ".")]
            if not parts or ".." in parts or name.startswith("/") or parts[0].startswith("__MACOSX"):
                continue
            total += info.file_size
            if total > MAX_ZIP_BYTES:
                raise ValueError(f"{zip_path} unpacks to more than {MAX_ZIP_BYTES} bytes")
            target = dest.joinpath(*parts)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)


def find_layout(folder: Path, assignments: Sequence[str]) -> Path:
    """The folder whose children are students and grandchildren assignments: ``folder`` itself
    or a chain of single subfolders below it (a zip's top folder, ``submitted/``)."""
    folder = Path(folder)
    for _ in range(4):
        subdirs = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")]
        if any((s / a).is_dir() for s in subdirs for a in assignments):
            return folder
        if len(subdirs) == 1:
            folder = subdirs[0]
            continue
        break
    raise ValueError(f"no <student>/<assignment>/ folders for assignments {list(assignments)} "
                     f"found in {folder}")


# ------------------------------------------------------------------------- worker side
def _meta(cell) -> dict:
    return (cell.get("metadata") or {}).get("nbgrader") or {}


def _norm(src: str) -> str:
    return "\n".join(line.rstrip() for line in src.strip().splitlines())


def _precheck(dest: Path, release_dir: Path, expected: list[str]) -> list[str]:
    """Repair what can be repaired in the submitted folder ``dest``; return the reasons."""
    import nbformat

    reasons: list[str] = []
    present = sorted(p.name for p in dest.glob("*.ipynb"))
    missing = [n for n in expected if f"{n}.ipynb" not in present]
    extra = [p for p in present if p[:-6] not in expected]
    if len(missing) == 1 and len(extra) == 1:
        (dest / extra[0]).rename(dest / f"{missing[0]}.ipynb")
        reasons.append(f"renamed notebook {extra[0]} graded as {missing[0]}.ipynb")
        missing = []
    for name in missing:
        reasons.append(f"notebook {name}.ipynb missing: its cells score 0")
    for name in expected:
        path = dest / f"{name}.ipynb"
        if not path.is_file():
            continue
        if path.stat().st_size > MAX_NOTEBOOK_BYTES:
            path.unlink()
            reasons.append(f"{name}.ipynb is larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB: not graded, scores 0")
            continue
        try:
            nb = nbformat.read(str(path), as_version=4)
            if not isinstance(nb.get("cells"), list):
                raise ValueError("no cell list")
        except Exception as exc:  # malformed JSON, wrong schema
            path.unlink()
            first = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
            reasons.append(f"{name}.ipynb is not a readable notebook ({type(exc).__name__}: {first}): scores 0")
            continue
        released = nbformat.read(str(release_dir / f"{name}.ipynb"), as_version=4)
        rel_cells = {_meta(c).get("grade_id"): c for c in released.cells if _meta(c).get("grade_id")}
        kernel = (nb.metadata.get("kernelspec") or {}).get("name")
        if kernel not in (None, "python3"):
            reasons.append(f"kernelspec {kernel!r} ignored: graded with python3")
        seen: set[str] = set()
        cells = []
        for cell in nb.cells:
            gid = _meta(cell).get("grade_id")
            if gid is None:
                cells.append(cell)
                continue
            if gid not in rel_cells:
                cell.metadata.pop("nbgrader", None)
                reasons.append(f"unknown grade cell {gid!r}: treated as a plain cell")
                cells.append(cell)
                continue
            if gid in seen:
                reasons.append(f"grade cell {gid!r} duplicated: the copy was dropped")
                continue
            seen.add(gid)
            ref = rel_cells[gid]
            if cell.cell_type != ref.cell_type:
                reasons.append(f"grade cell {gid!r} retyped {ref.cell_type}->{cell.cell_type}: restored")
                new = (nbformat.v4.new_code_cell if ref.cell_type == "code"
                       else nbformat.v4.new_markdown_cell)(cell.source, metadata=copy.deepcopy(cell.metadata))
                new["id"] = cell.get("id", new["id"])
                cell = new
            edited = sorted(k for k in ("grade", "solution", "locked", "points", "checksum",
                                        "schema_version", "cell_type")
                            if _meta(cell).get(k) != _meta(ref).get(k))
            if edited:  # repaired by grade_id, not trusted and not zeroed whole
                reasons.append(f"nbgrader metadata of {gid!r} edited ({', '.join(edited)}): "
                               f"restored from the release")
            cell.metadata["nbgrader"] = copy.deepcopy(_meta(ref))
            if _meta(ref).get("locked") and _norm(cell.source) != _norm(ref.source):
                what = "test cell" if _meta(ref).get("grade") else "locked cell"
                reasons.append(f"{what} {gid!r} edited: restored from the release before grading")
                cell.source = ref.source
            if cell.cell_type == "code" and _meta(ref).get("grade") and not _meta(ref).get("solution") \
                    and cell.get("outputs"):
                reasons.append(f"stored outputs of {gid!r} discarded (tests are re-run)")
            cells.append(cell)
        for gid, ref in rel_cells.items():
            if gid not in seen and _meta(ref).get("grade"):
                reasons.append(f"grade cell {gid!r} deleted: restored from the release")
        nb.cells = cells
        for i, cell in enumerate(nb.cells):  # unique ids (nbgrader fails on duplicates)
            cell["id"] = f"c{i:04d}-{cell.get('id', '')}"[:64]
        nbformat.write(nb, str(path))
    return reasons


def _first_line(text: str, n: int = 140) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _scan(nb_path: Path) -> dict:
    """What happened in an autograded notebook: per grade cell errors and stderr, kernel events
    in answer cells, review lines and guard messages."""
    import nbformat

    nb = nbformat.read(str(nb_path), as_version=4)
    tests: dict[str, dict] = {}
    events: list[str] = []
    reviews: list[str] = []
    guards: list[str] = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        m = _meta(cell)
        gid = m.get("grade_id") or f"cell {cell.get('id', '?')}"
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        stderr = "".join(o.get("text", "") for o in cell.get("outputs", [])
                         if o.get("output_type") == "stream" and o.get("name") == "stderr")
        stdout = "".join(o.get("text", "") for o in cell.get("outputs", [])
                         if o.get("output_type") == "stream" and o.get("name") == "stdout")
        for line in (stdout + "\n" + stderr).splitlines():
            s = line.strip()
            if s.startswith(REVIEW_MARKER):
                reviews.append(_first_line(s[len(REVIEW_MARKER):]))
            if s.startswith(GUARD_MARKER):
                guards.append(_first_line(s[len(GUARD_MARKER):], 200))
        for e in errors:
            if e.get("ename") == "TamperError":
                msg = str(e.get("evalue", ""))
                guards.append(_first_line(msg[len(GUARD_MARKER):] if msg.startswith(GUARD_MARKER) else msg, 200))
            if e.get("ename") in ("CellTimeoutError", "TimeoutError") or (
                    e.get("ename") == "KeyboardInterrupt"):
                events.append(f"{gid}: interrupted after the per-cell timeout")
            elif e.get("ename") in ("MemoryError", "OutOfMemoryError") or (
                    "can't allocate memory" in str(e.get("evalue", "")).lower()
                    or "not enough memory" in str(e.get("evalue", "")).lower()):
                events.append(f"{gid}: memory limit hit")
            elif e.get("ename") == "SystemExit":
                events.append(f"{gid}: called sys.exit() (the kernel stays up, later cells run)")
            elif e.get("ename") == "StdinNotImplementedError":
                events.append(f"{gid}: waited for input() (no stdin in grading)")
        if m.get("grade") and not m.get("solution"):
            tests[gid] = {
                "error": (f"{errors[0].get('ename')}: {_first_line(errors[0].get('evalue', ''), 100)}"
                          .rstrip(": ") if errors else ""),
                "stderr": _first_line(stderr, 100) if stderr.strip() else "",
            }
    return {"tests": tests, "events": events, "reviews": reviews, "guards": sorted(set(guards))}


def _db_fingerprint(db_path: str) -> tuple:
    """What autograde never changes: source cells, grade cell points and manual scores."""
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            return (con.execute("SELECT id, source, checksum FROM source_cell ORDER BY id").fetchall(),
                    con.execute("SELECT id, max_score FROM grade_cells ORDER BY id").fetchall(),
                    con.execute("SELECT id, manual_score, extra_credit FROM grade ORDER BY id").fetchall())
        finally:
            con.close()
    except sqlite3.Error as exc:
        return ("unreadable", str(exc))


def _db_tampered(before: tuple, after: tuple) -> bool:
    """Rows that existed must be unchanged; rows autograde added carry no manual score."""
    if "unreadable" in (before[0], after[0]):
        return before != after
    for old, new in zip(before, after):
        old_d, new_d = {r[0]: r for r in old}, {r[0]: r for r in new}
        if any(new_d.get(k) != v for k, v in old_d.items()):
            return True
    added = [r for r in after[2] if r[0] not in {x[0] for x in before[2]}]
    return any(r[1] is not None or r[2] is not None for r in added)


def _classify_failure(log: str) -> str:
    if "DeadKernelError" in log or "Kernel died" in log:
        return "the kernel died (sys/os exit, a kill, or the memory limit): scores 0"
    if "No notebooks found" in log:
        return "no gradable notebook: scores 0"
    lines = [ln.strip() for ln in log.splitlines() if ln.strip() and not ln.startswith("[")]
    tail = next((ln for ln in reversed(lines) if "Error" in ln or "Exception" in ln), "unknown error")
    return f"nbgrader could not grade it ({_first_line(tail, 120)}): scores 0"



# ------------------------------------------------------------------------------ hooks
def structure_check(job: dict, submitted: Path, release_dir: Path) -> dict:
    """Default check before anything runs: repair the submitted notebooks (see :func:`_precheck`).

    A check is ``f(job, submitted_dir, release_dir) -> {"reasons": [...], "zero": [[notebook,
    grade_id], ...]}``; it may edit or delete files in ``submitted_dir``. Cells listed in
    ``zero`` score 0 whatever the tests say (their reason should say why)."""
    return {"reasons": _precheck(submitted, release_dir, list(job["course"]["notebooks"])), "zero": []}


AUDIT_CHECK = f"{__name__}:audit_check"


def audit_check(job: dict, submitted: Path, release_dir: Path) -> dict:
    """The static audit (:mod:`memlab.grading.audit`) as a check: every answer cell that breaks
    the assignment's policy is replaced by its released stub before anything runs (its tests
    score 0, pending review); the reason names cell, line and rule ("audit: ...")."""
    import nbformat

    from .audit import apply_audit

    reasons: list[str] = []
    for name in job["course"]["notebooks"]:
        path, rel = submitted / f"{name}.ipynb", release_dir / f"{name}.ipynb"
        if not path.is_file() or not rel.is_file():
            continue
        try:
            nb = nbformat.read(str(path), as_version=4)
        except Exception:  # unreadable: structure_check already said so
            continue
        found = apply_audit(nb, nbformat.read(str(rel), as_version=4), job["assignment"])
        if found:
            nbformat.write(nb, str(path))
            reasons += found
    return {"reasons": reasons, "zero": []}


def sandbox_state(settings: dict | GradeSettings) -> tuple[bool, str]:
    """(kernels run under bubblewrap, why) for these settings."""
    from . import sandbox

    want = settings.get("sandbox", True) if isinstance(settings, dict) else settings.sandbox
    if not want:
        return False, "disabled (--no-sandbox)"
    return sandbox.available()


def limited_kernelspec(data_dir: Path, settings: dict) -> str:
    """Default kernel launch: :mod:`memlab.grading.kernel` with ``RLIMIT_AS`` and
    ``PR_SET_PDEATHSIG``. A kernelspec hook is ``f(jupyter_data_dir, settings) -> kernel name``:
    it writes ``kernels/<name>/kernel.json`` under ``jupyter_data_dir`` (put first on
    JUPYTER_PATH for the job). Kernels whose argv starts with ``[sys.executable, "-m",
    "memlab.grading.kernel"]`` are forked warm when ``settings["warm"]``; any other argv (a
    sandbox wrapper) is started with exec as usual."""
    from .kernel import KERNEL_NAME, write_kernelspec

    write_kernelspec(data_dir, memory_mb=int(settings.get("memory_mb") or 0))
    return KERNEL_NAME


def _resolve(name: str) -> Callable:
    import importlib

    module, _, attr = name.partition(":")
    return getattr(importlib.import_module(module), attr)


# ------------------------------------------------------------------------- job making
def _read_tree(folder: Path, max_bytes: int = MAX_ZIP_BYTES) -> dict[str, bytes]:
    """Regular files under ``folder`` (no symlinks, no checkpoints) as {posix path: bytes}."""
    files: dict[str, bytes] = {}
    total = 0
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if p.is_symlink() or not p.is_file() or any(
                part in (".ipynb_checkpoints", "__MACOSX") for part in rel.parts):
            continue
        total += p.stat().st_size
        if total > max_bytes:
            raise ValueError(f"{folder} holds more than {max_bytes} bytes")
        files[rel.as_posix()] = p.read_bytes()
    return files


def _safe_rel(name: str) -> PurePosixPath | None:
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or not p.parts or any(x in ("..", "") for x in p.parts):
        return None
    return p


def _write_tree(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        rel = _safe_rel(name)
        if rel is None:
            continue
        target = folder.joinpath(*rel.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _slim_gradebook(db_path: Path, dest: Path) -> None:
    """A copy of the gradebook without students, submissions or grades: assignments, their
    notebooks and source/grade cells only (what autograde needs; nothing of a classmate)."""
    src = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        out = sqlite3.connect(dest)
        src.backup(out)
        for table in ("comment", "grade", "submitted_notebook", "submitted_assignment", "student"):
            out.execute(f"DELETE FROM {table}")
        out.commit()
        out.execute("VACUUM")
        out.close()
    finally:
        src.close()


def course_bundle(api, assignment: str, gradebook: bytes, config_text: str) -> dict:
    """What a job needs of the course for ``assignment``: config text, slim gradebook, the
    released notebooks, the data files of solutions/<assignment>/ (no notebook: no solution)."""
    from nbgrader.api import Gradebook

    cd = api.coursedir
    with Gradebook(cd.db_url, cd.course_id) as gb:
        a = gb.find_assignment(assignment)
        notebooks = sorted(nb.name for nb in a.notebooks)
        maxima = {nb.name: {g.name: float(g.max_score) for g in nb.grade_cells} for nb in a.notebooks}
        checksums = sorted((nb.name, c.name, c.checksum or "") for nb in a.notebooks for c in nb.source_cells)
    release = Path(cd.format_path(cd.release_directory, ".", assignment))
    source = Path(cd.format_path(cd.source_directory, ".", assignment))
    data = {k: v for k, v in _read_tree(source).items() if not k.endswith(".ipynb")}
    fingerprint = hashlib.sha256(json.dumps([checksums, maxima]).encode()).hexdigest()[:16]
    return {"assignment": assignment, "config": config_text, "gradebook": gradebook,
            "release": {k: v for k, v in _read_tree(release).items() if k.endswith(".ipynb")},
            "data": data, "notebooks": notebooks, "max_scores": maxima, "fingerprint": fingerprint}


def make_job(student: str, assignment: str, files: dict[str, bytes], course: Any,
             settings: dict) -> dict:
    """A grading job: plain data (picklable, no path of the grading machine in it)."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    h.update(json.dumps({k: settings.get(k) for k in ("cell_timeout", "memory_mb", "checks", "kernelspec", "sandbox", "verdict",
                                                      "config_overrides")},
                        sort_keys=True, default=str).encode())
    return {"student": student, "assignment": assignment, "files": files, "course": course,
            "settings": settings, "digest": h.hexdigest()[:24]}


def _job_settings(settings: GradeSettings, threads: int) -> dict:
    return {"cell_timeout": int(settings.cell_timeout), "submission_timeout": int(settings.submission_timeout),
            "memory_mb": int(settings.memory_mb), "threads": int(threads), "warm": bool(settings.warm),
            "kernelspec": settings.kernelspec, "sandbox": bool(settings.sandbox),
            "verdict": bool(settings.verdict),
            "checks": [c for c in settings.checks if settings.audit or c != AUDIT_CHECK],
            "config_overrides": copy.deepcopy(settings.config_overrides)}


# ------------------------------------------------------------------ running one job
def _failed_result(job: dict, reason: str, seconds: float) -> dict:
    return {"student": job["student"], "assignment": job["assignment"], "status": "failed",
            "reasons": [reason], "grades": {}, "penalties": {}, "scans": {}, "files": {},
            "seconds": round(seconds, 2)}


def grade_job(job: dict) -> dict:
    """Grade one submission; pure data in (see :func:`make_job`), pure data out.

    Runs the grading in a child process (forked from this process's warm zygote when
    ``settings["warm"]``, else a fresh interpreter) and kills it, with its kernel, when it
    outlives ``settings["submission_timeout"]``: the submission then scores 0 with the reason.
    Never raises for a bad submission. Safe to call from any executor (process pool, Dask)."""
    t0 = time.monotonic()
    s = job["settings"]
    jobdir = Path(tempfile.mkdtemp(prefix="memlab-job-"))
    handle = None
    try:
        with open(jobdir / "job.pkl", "wb") as fh:
            pickle.dump(job, fh, protocol=pickle.HIGHEST_PROTOCOL)
        handle = _start_child(jobdir, job)
        deadline = time.monotonic() + float(s["submission_timeout"])
        result_file = jobdir / "result.pkl"
        while True:
            if result_file.exists():
                with open(result_file, "rb") as fh:
                    result = pickle.load(fh)
                break
            if not handle.alive():
                if result_file.exists():
                    continue
                log = (jobdir / "log.txt").read_text(errors="replace")[-3000:] if (jobdir / "log.txt").exists() else ""
                result = _failed_result(job, "the grading process died: scores 0", time.monotonic() - t0)
                result["log"] = log
                break
            if time.monotonic() > deadline:
                handle.kill()
                result = _failed_result(
                    job, f"over the {s['submission_timeout']} s limit per submission: scores 0",
                    time.monotonic() - t0)
                break
            time.sleep(0.05)
    except Exception as exc:  # the job machinery itself failed: never stop the batch
        result = _failed_result(job, f"grader error ({type(exc).__name__}: {_first_line(exc, 120)}): scores 0",
                                time.monotonic() - t0)
    finally:
        if handle is not None:
            handle.kill()
        shutil.rmtree(jobdir, ignore_errors=True)
    result["seconds"] = round(time.monotonic() - t0, 2)
    return result


class _Child:
    """A grading child: its own session (process group) so that a kill reaches all of it."""

    def __init__(self, pid: int, popen: subprocess.Popen | None = None):
        self.pid, self.popen = pid, popen

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        try:
            os.kill(self.pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.popen is not None:
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


_ZYGOTE: subprocess.Popen | None = None
_ZYGOTE_LOCK = threading.Lock()


def _child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    bin_dir = str(Path(sys.executable).parent)  # nbgrader runs `alembic` from PATH
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    return env


def _start_child(jobdir: Path, job: dict) -> _Child:
    global _ZYGOTE
    s = job["settings"]
    threads = max(1, int(s.get("threads") or 1))
    if not s.get("warm", True):
        popen = subprocess.Popen(
            [sys.executable, "-c",
             f"from {__name__} import _child_main; _child_main({str(jobdir)!r}, 0, {threads})"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=_child_env(), start_new_session=True)
        return _Child(popen.pid, popen)
    with _ZYGOTE_LOCK:
        for attempt in range(2):
            if _ZYGOTE is None or _ZYGOTE.poll() is not None:
                _ZYGOTE = subprocess.Popen(
                    [sys.executable, "-c", f"from {__name__} import _zygote_main; _zygote_main()"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_child_env(),
                    start_new_session=True)
                if _ZYGOTE.stdout.readline().strip() != b"ready":
                    _ZYGOTE.kill()
                    _ZYGOTE.wait()
                    _ZYGOTE = None
                    continue
            try:
                kernels = len(job["course"]["notebooks"]) if isinstance(job["course"], dict) else 1
                if sandbox_state(job["settings"])[0]:
                    kernels = 0  # bubblewrap kernels start from their own argv: nothing to pre-fork
                _ZYGOTE.stdin.write(f"{jobdir}\t{kernels}\t{threads}\n".encode())
                _ZYGOTE.stdin.flush()
                line = _ZYGOTE.stdout.readline().strip()
                return _Child(int(line))
            except (BrokenPipeError, OSError, ValueError):
                _ZYGOTE.kill()
                _ZYGOTE.wait()
                _ZYGOTE = None
        raise RuntimeError("the warm grading process could not start (run with warm=False to see why)")


def warm_up() -> None:
    """Start this process's zygote now (a pool initializer: the first job then pays nothing)."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _ZYGOTE is None or _ZYGOTE.poll() is not None:
            _ZYGOTE = subprocess.Popen(
                [sys.executable, "-c", f"from {__name__} import _zygote_main; _zygote_main()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_child_env(), start_new_session=True)
            if _ZYGOTE.stdout.readline().strip() != b"ready":
                _ZYGOTE.kill()
                _ZYGOTE.wait()
                _ZYGOTE = None


def _set_pdeathsig() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _preload() -> None:
    """What the zygote imports once: the grader's stack and the kernel's (torch, memlab)."""
    import warnings

    warnings.filterwarnings("ignore", message=".*not in session.*")
    import nbformat  # noqa: F401
    import nbgrader.apps  # noqa: F401
    import nbgrader.api  # noqa: F401
    import nbgrader.converters  # noqa: F401
    import nbgrader.preprocessors  # noqa: F401
    import nbconvert  # noqa: F401
    import nbclient  # noqa: F401
    import jupyter_client  # noqa: F401
    import traitlets.config.loader  # noqa: F401

    from . import course  # noqa: F401
    try:  # the kernel's side: forked kernels skip these imports
        import ipykernel.kernelapp  # noqa: F401
        import ipykernel.ipkernel  # noqa: F401
        import IPython  # noqa: F401
        import torch  # noqa: F401
        # The first ml.measure_peak (a TorchDispatchMode) makes torch import ~800 modules
        # (torch._dynamo, sympy, ...): 4-25 s in every notebook's first measuring cell, and a
        # per-cell timeout there could leave torch half-imported. Imported here once instead.
        import torch._dynamo  # noqa: F401
        import torch.utils.checkpoint  # noqa: F401
        import memlab  # noqa: F401
        import memlab.grading  # noqa: F401  captures the originals before any learner code
        from . import kernel  # noqa: F401
        import matplotlib  # noqa: F401  (not pyplot: the kernel picks its backend itself)
        import matplotlib_inline.backend_inline  # noqa: F401
    except Exception:
        pass
    import importlib

    for name in getattr(sys.modules.get("memlab"), "MODULES", {}).values():
        if name.startswith(("measure.", "lessons.")):  # what the notebooks import
            try:
                importlib.import_module(f"memlab.{name}")
            except Exception:
                pass


def _lines_while_parent_lives(fd: int, poll_s: float = 1.0):
    """Lines read from ``fd`` until EOF, or until this process's parent is gone (reparented):
    EOF alone is not enough, because a forked sibling may still hold the pipe's write end."""
    import select

    parent = os.getppid()
    buf = b""
    while True:
        while b"\n" not in buf:
            ready, _, _ = select.select([fd], [], [], poll_s)
            if not ready:
                if os.getppid() != parent:
                    return
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            buf += chunk
        line, buf = buf.split(b"\n", 1)
        yield line.decode("utf-8", "replace")


def _zygote_main() -> None:
    """Warm image: imports once, then forks one grading child per job directory read on stdin
    (replies with the child's pid). Exits when its parent closes stdin or dies; its children
    (PR_SET_PDEATHSIG) and their kernels die with it."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped automatically
    proto.write("ready\n")
    for line in _lines_while_parent_lives(0):
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 3:
            continue
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.setsid()
                _set_pdeathsig()  # the zygote dies -> this child dies -> its kernel dies
                os.dup2(devnull, 0)
                os.close(proto.fileno())
                _child_main(parts[0], int(parts[1]), int(parts[2]))
                code = 0
            finally:
                os._exit(code)
        proto.write(f"{pid}\n")


def _child_main(jobdir: str, kernels: int = 0, threads: int = 1) -> None:
    """Grade the job in ``jobdir/job.pkl``; write ``jobdir/result.pkl`` (atomically).
    ``kernels`` warm kernels are forked first: before any thread exists in this process and
    before the job is loaded (a kernel's memory holds nothing of the job)."""
    jobdir_p = Path(jobdir)
    log = os.open(str(jobdir_p / "log.txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(max(1, threads))
    _WarmKernels.prefork(kernels, max(1, threads))
    with open(jobdir_p / "job.pkl", "rb") as fh:
        job = pickle.load(fh)
    (jobdir_p / "job.pkl").unlink()  # the gradebook copy in it: not left for learner code
    try:
        result = _grade_in_child(job, jobdir_p)
    except Exception as exc:
        import traceback

        traceback.print_exc()
        result = _failed_result(job, f"grader error ({type(exc).__name__}: {_first_line(exc, 120)}): scores 0", 0.0)
    finally:
        _WarmKernels.discard()
    import resource

    # CPU seconds of this job: this process (reset at fork) and its reaped kernels. Unlike the
    # wall time it does not grow with the machine's load (benchmarks/grading_speed.py).
    ru = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    if isinstance(result.get("timings"), dict):
        result["timings"]["cpu"] = round(sum(r.ru_utime + r.ru_stime for r in ru), 2)
    tmp = jobdir_p / "result.tmp"
    with open(tmp, "wb") as fh:
        pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, jobdir_p / "result.pkl")


# ------------------------------------------------------------------ warm kernels
class _Forked:
    """Popen-like handle of a kernel forked by this process (for jupyter_client)."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -9
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired([str(self.pid)], timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class _WarmKernels:
    """Kernels-to-be forked from the warm child before it starts any thread; each waits on a
    pipe for (argv, env, cwd) and then becomes the kernel (:func:`memlab.grading.kernel.main`)."""

    slots: list[tuple[int, int]] = []   # (pid, write end of its pipe)
    launched = {"warm": 0, "exec": 0}   # kernels started each way (reported in the timings)

    @staticmethod
    def prefix() -> list[str]:
        from . import kernel

        return [sys.executable, "-m", kernel.__name__]

    @classmethod
    def prefork(cls, n: int, threads: int) -> None:
        for _ in range(max(0, n)):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(w)
                code = 0
                try:
                    for _pid, other in cls.slots:
                        os.close(other)
                    data = b""
                    while chunk := os.read(r, 1 << 16):
                        data += chunk
                    if not data:
                        os._exit(0)
                    argv, env, cwd = pickle.loads(data)
                    os.setpgid(0, 0)          # its own group, as a kernel started with exec
                    _set_pdeathsig()          # the grading child dies -> the kernel dies
                    null = os.open(os.devnull, os.O_RDONLY)
                    os.dup2(null, 0)
                    os.environ.clear()
                    os.environ.update(env)
                    if cwd:
                        os.chdir(cwd)
                    try:
                        import torch

                        torch.set_num_threads(threads)
                    except Exception:
                        pass
                    from . import kernel

                    sys.argv = list(argv)
                    kernel.main(list(argv[len(cls.prefix()):]))
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
                except BaseException:
                    import traceback

                    traceback.print_exc()
                    code = 1
                finally:
                    os._exit(code)
            os.close(r)
            cls.slots.append((pid, w))

    @classmethod
    def take(cls, argv: list[str], env: dict | None, cwd: str | None) -> _Forked | None:
        if not cls.slots or list(argv[:3]) != cls.prefix():
            return None
        pid, w = cls.slots.pop(0)
        payload = pickle.dumps((list(argv), dict(env or os.environ), cwd))
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(w, view):]
        finally:
            os.close(w)
        return _Forked(pid)

    @classmethod
    def discard(cls) -> None:
        while cls.slots:
            pid, w = cls.slots.pop()
            os.close(w)  # EOF: the waiting process exits
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


try:
    from jupyter_client import AsyncKernelManager as _AKM
except Exception:  # pragma: no cover (jupyter_client is a dependency of nbgrader)
    _AKM = object


class WarmKernelManager(_AKM):
    """nbclient's kernel manager for grading: a kernel whose argv is the course's launcher
    becomes one of the pre-forked warm processes (torch and memlab already imported) instead of
    a fresh interpreter; anything else (another kernelspec hook) starts as usual."""

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        proc = _WarmKernels.take(kernel_cmd, kw.get("env"), kw.get("cwd"))
        if proc is None:
            _WarmKernels.launched["exec"] += 1
            return await super()._async_launch_kernel(kernel_cmd, **kw)
        _WarmKernels.launched["warm"] += 1
        prov = self.provisioner
        prov.process = proc
        prov.pid = proc.pid
        prov.pgid = proc.pid
        prov.cwd = kw.get("cwd")
        self._reconcile_connection_info(prov.connection_info)


# ------------------------------------------------------------ the job's own course
def _grade_in_child(job: dict, jobdir: Path) -> dict:
    """The grading itself, in the job's private temporary course under ``jobdir``."""
    import warnings

    from nbgrader.api import Gradebook, MissingEntry

    from . import course

    warnings.filterwarnings("ignore", message=".*not in session.*")
    t0 = time.monotonic()
    s, bundle = job["settings"], job["course"]
    student, assignment = job["student"], job["assignment"]
    if bundle.get("assignment") != assignment:
        raise RuntimeError(f"the job for {assignment} came with the course files of {bundle.get('assignment')}")
    root = jobdir / "course"
    (root / "autograder" / "work").mkdir(parents=True)
    config = root / "autograder" / "nbgrader_config.py"
    config.write_text(bundle["config"])
    (root / "autograder" / "work" / "gradebook.db").write_bytes(bundle["gradebook"])
    _write_tree(root / "solutions" / assignment, bundle["data"])
    release_dir = jobdir / "release"
    _write_tree(release_dir, bundle["release"])
    jupyter = jobdir / "jupyter"
    kernel_name = _resolve(s["kernelspec"])(jupyter, s)
    os.environ["JUPYTER_PATH"] = os.pathsep.join([str(jupyter), *filter(None, [os.environ.get("JUPYTER_PATH")])])
    overrides: dict = {"Execute": {"timeout": int(s["cell_timeout"]), "kernel_name": kernel_name}}
    if sandbox_state(s)[0]:
        # Kernel under bubblewrap (memlab.grading.sandbox): started from its own argv, never
        # from the warm fork; killed from outside at the submission's wall limit.
        overrides["Execute"]["kernel_manager_class"] = "memlab.grading.sandbox.SandboxKernelManager"
        overrides["SandboxKernelManager"] = {"sandbox": True,
                                             "wall_seconds": float(s.get("submission_timeout") or 0)}
    elif s.get("warm", True):
        overrides["Execute"]["kernel_manager_class"] = f"{__name__}.WarmKernelManager"
    for section, values in (s.get("config_overrides") or {}).items():
        overrides.setdefault(section, {}).update(values)
    api = course.make_api(config, overrides=overrides)
    cd = api.coursedir
    dest = Path(cd.format_path(cd.submitted_directory, student, assignment))
    dest.mkdir(parents=True)
    _write_tree(dest, job["files"])
    reasons: list[str] = []
    zero: set[tuple[str, str]] = set()
    for name in s["checks"]:
        found = _resolve(name)(job, dest, release_dir) or {}
        reasons += list(found.get("reasons", []))
        zero |= {(str(nb), str(gid)) for nb, gid in found.get("zero", [])}
    db_path = cd.db_url.replace("sqlite:///", "", 1)
    before = _db_fingerprint(db_path)
    status = "ok"
    timings = {"setup": round(time.monotonic() - t0, 2)}
    reruns = _VerdictRuns(job, cd, dest, jobdir, s, time.monotonic() - t0) if s.get("verdict", True) else None
    result = api.autograde(assignment, student, force=True, create=True)
    timings["autograde"] = round(time.monotonic() - t0 - timings["setup"], 2)
    timings["kernels_warm"] = _WarmKernels.launched["warm"]
    timings["kernels_exec"] = _WarmKernels.launched["exec"]
    if _db_tampered(before, _db_fingerprint(db_path)):
        reasons.append("learner code wrote to the grading worker's gradebook (discarded: only "
                       "the scores computed from the notebook's outputs reach the course gradebook)")
    if not result.get("success"):
        status = "failed"
        reasons.append(_classify_failure((result.get("log") or "") + (result.get("error") or "")))
    autograded = Path(cd.format_path(cd.autograded_directory, student, assignment))
    feedback = Path(cd.format_path(cd.feedback_directory, student, assignment))
    from .sandbox import KERNEL_DIR

    shutil.rmtree(autograded / KERNEL_DIR, ignore_errors=True)  # sockets, HOME, /tmp of the kernel
    if status == "ok":
        t_fb = time.monotonic()
        fb = api.generate_feedback(assignment, student, force=True)
        timings["feedback"] = round(time.monotonic() - t_fb, 2)
        if not fb.get("success"):
            reasons.append("feedback HTML could not be written")
    grades: dict[str, dict[str, list]] = {}
    penalties: dict[str, float] = {}
    with Gradebook(cd.db_url, cd.course_id) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:  # nbgrader stopped before it recorded the submission
            status, sub = "failed", None
        for snb in (sub.notebooks if sub is not None else []):
            penalties[snb.name] = float(snb.late_submission_penalty or 0.0) if status == "ok" else 0.0
            for g in snb.grades:
                auto = g.auto_score if status == "ok" else 0.0
                if (snb.name, g.name) in zero:
                    auto = 0.0
                grades.setdefault(snb.name, {})[g.name] = [
                    None if auto is None else float(auto), float(g.max_score),
                    bool(g.needs_manual_grade) if status == "ok" else False]
    if reruns is not None:
        t_v = time.monotonic()
        lowered = reruns.finish(grades)  # waits for the re-runs (they ran beside autograde)
        if status == "ok" and sub is not None:
            reasons += lowered
        timings["verdict_wait"] = round(time.monotonic() - t_v, 2)
        timings["verdict"] = round(time.monotonic() - reruns.t0, 2)
    scans, files = {}, {}
    if status == "ok":
        for nb_path in sorted(autograded.glob("*.ipynb")):
            scans[nb_path.stem] = _scan(nb_path)
        for step, folder in (("autograded", autograded), ("feedback", feedback)):
            if folder.is_dir():
                for name, data in _read_tree(folder).items():
                    if len(data) <= MAX_RESULT_FILE_BYTES:
                        files[f"{step}/{name}"] = data
    return {"student": student, "assignment": assignment, "status": status, "reasons": reasons,
            "grades": grades, "penalties": penalties, "scans": scans, "files": files,
            "timings": timings, "seconds": round(time.monotonic() - t0, 2)}


class _VerdictRuns:
    """The re-runs outside the learner's kernel (:mod:`.verdict`) of one job's notebooks, one
    thread each, started before nbgrader's autograde so that both run at the same time (they
    share nothing: each starts from the submitted files, in its own folder)."""

    def __init__(self, job: dict, cd, dest: Path, jobdir: Path, s: dict, spent: float):
        import threading

        from nbgrader.api import Gradebook, MissingEntry

        self.t0 = time.monotonic()
        self.sources: dict[str, tuple[dict, dict]] = {}
        self.found: dict[str, tuple[dict, str]] = {}
        with Gradebook(cd.db_url, cd.course_id) as gb:
            for name in job["course"]["notebooks"]:
                try:
                    nbm = gb.find_notebook(name, job["assignment"])
                except MissingEntry:
                    continue
                answers = {c.name for c in nbm.solution_cells}
                trusted = {c.name: c.source for c in nbm.source_cells
                           if c.locked and c.cell_type == "code"}
                points = {c.name: float(c.max_score) for c in nbm.grade_cells
                          if c.cell_type == "code" and c.name not in answers}
                if points and (dest / f"{name}.ipynb").is_file():
                    self.sources[name] = (trusted, points)
        wall = max(60.0, float(s.get("submission_timeout") or 900) - spent)
        self.threads = [threading.Thread(target=self._run, daemon=True, name=f"verdict-{name}",
                                         args=(name, dest, jobdir, s, wall))
                        for name in self.sources]
        for th in self.threads:
            th.start()

    def _run(self, name: str, dest: Path, jobdir: Path, s: dict, wall: float) -> None:
        from . import verdict

        trusted, points = self.sources[name]
        try:
            self.found[name] = verdict.rerun(
                dest / f"{name}.ipynb", dest, jobdir / "verdict" / name, trusted, points,
                sandboxed=sandbox_state(s)[0], wall_seconds=wall,
                cell_timeout=float(s.get("cell_timeout") or 300), memory_mb=int(s.get("memory_mb") or 0))
        except Exception as exc:  # the grader's own failure: no verdict, said so
            self.found[name] = ({}, f"the re-run could not run ({type(exc).__name__}: {exc})")

    def finish(self, grades: dict) -> list[str]:
        """Wait for the re-runs; lower ``grades`` to their verdicts; return the reasons."""
        from . import verdict

        for th in self.threads:
            th.join()
        reasons: list[str] = []
        for name, (trusted, points) in self.sources.items():
            if name in grades:
                found, problem = self.found.get(name, ({}, "the re-run gave no verdict"))
                reasons += verdict.combine(grades[name], found, problem, points)
        return reasons


# --------------------------------------------------------------- the grader's side
def validate_result(result: Any, job: dict) -> list[str]:
    """Problems that make a job's result unfit to merge (empty: fit). Checks identity, the
    graded cells and their points against the course bundle, score ranges and file names."""
    problems: list[str] = []
    if not isinstance(result, dict):
        return [f"result is a {type(result).__name__}, not a dict"]
    if (result.get("student"), result.get("assignment")) != (job["student"], job["assignment"]):
        problems.append("result is for another submission")
    if result.get("status") not in ("ok", "failed"):
        problems.append(f"unknown status {result.get('status')!r}")
    maxima = job["course"]["max_scores"] if isinstance(job["course"], dict) else None
    grades = result.get("grades")
    if not isinstance(grades, dict):
        return problems + ["grades missing"]
    for nb, cells in grades.items():
        if maxima is not None and nb not in maxima:
            problems.append(f"unknown notebook {nb!r}")
            continue
        if not isinstance(cells, dict):
            problems.append(f"grades of {nb!r} malformed")
            continue
        for gid, row in cells.items():
            if maxima is not None and gid not in maxima[nb]:
                problems.append(f"unknown grade cell {nb}/{gid}")
                continue
            try:
                auto, mx, manual = row
            except (TypeError, ValueError):
                problems.append(f"grade of {nb}/{gid} malformed")
                continue
            if maxima is not None and float(mx) != maxima[nb][gid]:
                problems.append(f"{nb}/{gid}: max score {mx} is not the gradebook's {maxima[nb][gid]}")
            if auto is not None and not (isinstance(auto, (int, float)) and math.isfinite(auto)
                                         and 0 <= auto <= float(mx)):
                problems.append(f"{nb}/{gid}: score {auto!r} outside 0..{mx}")
    for name in (result.get("files") or {}):
        rel = _safe_rel(str(name))
        if rel is None or rel.parts[0] not in ("autograded", "feedback") or len(rel.parts) < 2:
            problems.append(f"file name {name!r} refused")
    for nb, pen in (result.get("penalties") or {}).items():
        if not (isinstance(pen, (int, float)) and math.isfinite(pen) and pen >= 0):
            problems.append(f"late penalty of {nb!r} refused")
    return problems
def _reason_text(result: dict) -> tuple[str, list[str]]:
    """(one-line reason, review reasons) of a merged result."""
    parts = list(result["reasons"])
    review = [r for r in result["reasons"] if "edited" in r or "scores 0" in r or "renamed" in r
              or "duplicated" in r or "deleted" in r or "unknown grade cell" in r or "limit" in r
              or "gradebook" in r or r.startswith("audit:") or "independent re-run" in r]
    for nb, scan in sorted(result.get("scans", {}).items()):
        parts += scan["events"]
        for gid, t in sorted(scan["tests"].items()):
            if t["error"]:
                parts.append(f"{gid} failed ({t['error']})")
            elif t["stderr"]:
                parts.append(f"{gid} wrote to stderr ({t['stderr']})")
        for g in scan["guards"]:
            parts.append(f"patched grading code: {g}")
            review.append(f"patched grading code: {g}")
        for r in scan["reviews"]:
            if not r.startswith("audit:"):  # the audit's own line: already in the reasons
                review.append(f"flagged by the rubric: {r}")
        review += [e for e in scan["events"] if "memory" in e or "timeout" in e]
    lost = []
    for nb, cells in sorted(result.get("grades", {}).items()):
        for gid, (auto, mx, manual) in sorted(cells.items()):
            if manual:
                review.append(f"{nb}/{gid} needs a manual grade")
            elif result.get("status") == "ok" and (auto or 0) < mx and not any(
                    p.startswith(f"{gid} ") for p in parts):
                lost.append(f"{gid} scored {auto or 0:g} of {mx:g}")
    parts += lost  # the reason never contradicts the score
    if not parts:
        parts = ["all tests pass"]
    seen: set[str] = set()
    review = [r for r in review if not (r in seen or seen.add(r))]
    return "; ".join(dict.fromkeys(parts)), review




def _merge_retrying(gb, cd, job: dict, result: dict, timestamp, tries: int = 8) -> None:
    """:func:`_merge`, retried with back-off while the gradebook is locked (another program, a
    stray lock): a locked gradebook delays the batch, it never aborts it."""
    from sqlalchemy.exc import OperationalError

    for attempt in range(tries):
        try:
            return _merge(gb, cd, job, result, timestamp)
        except OperationalError as exc:
            gb.db.rollback()
            if "locked" not in str(exc).lower() or attempt == tries - 1:
                raise
            time.sleep(min(0.25 * 2 ** attempt, 8.0))


def gradebook_integrity(db_path: str | Path) -> str:
    """SQLite's ``PRAGMA integrity_check`` of the gradebook: "ok" or what it found."""
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)
        try:
            rows = con.execute("PRAGMA integrity_check").fetchall()
        finally:
            con.close()
    except sqlite3.Error as exc:
        return f"unreadable ({exc})"
    return "; ".join(r[0] for r in rows)[:500]


def _merge(gb, cd, job: dict, result: dict, timestamp) -> None:
    """Write one validated result into the course gradebook and copy its notebooks and
    feedback into the course's autograded/ and feedback/ folders (the only writer)."""
    student, assignment = result["student"], result["assignment"]
    gb.update_or_create_student(student)
    if timestamp is not None:  # from the submission's timestamp.txt, read by the grader itself
        gb.update_or_create_submission(assignment, student, timestamp=timestamp)
    else:
        gb.update_or_create_submission(assignment, student)
    sub = gb.find_submission(assignment, student)
    for snb in sub.notebooks:
        pen = result.get("penalties", {}).get(snb.name) if result["status"] == "ok" else None
        snb.late_submission_penalty = min(float(pen), float(snb.max_score)) if pen else None
        for g in snb.grades:
            got = result["grades"].get(snb.name, {}).get(g.name)
            if result["status"] != "ok" or got is None or got[0] is None:
                g.auto_score = 0.0
                g.needs_manual_grade = bool(got and got[2]) if result["status"] == "ok" else False
            else:
                g.auto_score = float(got[0])
                g.needs_manual_grade = bool(got[2])
    gb.db.commit()
    for step in ("autograded", "feedback"):
        dst = Path(cd.format_path(getattr(cd, f"{step}_directory"), student, assignment))
        shutil.rmtree(dst, ignore_errors=True)
        files = {k.split("/", 1)[1]: v for k, v in result.get("files", {}).items()
                 if k.startswith(step + "/")}
        if files and result["status"] == "ok":
            dst.mkdir(parents=True, exist_ok=True)
            _write_tree(dst, files)


def _timestamp(files: dict[str, bytes]):
    """The submission time in timestamp.txt (written by nbgrader's collect / zip_collect)."""
    raw = files.get("timestamp.txt")
    if raw is None:
        return None, None
    try:
        from nbgrader.utils import parse_utc

        return parse_utc(raw.decode("utf-8", "replace").strip()), None
    except Exception:
        return None, "timestamp.txt unreadable: no late penalty applied"


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


def _collect_jobs(src: Path, known: list[str]) -> tuple[list[tuple[str, str, Path]], list[str]]:
    layout = find_layout(src, known)
    found, ignored = [], []
    for sdir in sorted(p for p in layout.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for adir in sorted(p for p in sdir.iterdir() if p.is_dir()):
            if adir.name in known:
                found.append((sdir.name, adir.name, adir))
            elif not adir.name.startswith("."):
                ignored.append(f"{sdir.name}/{adir.name}")
    return found, ignored


def grade_class(submissions: str | Path, *, config_path: str | Path | None = None,
                out: str | Path | None = None, settings: GradeSettings | None = None,
                progress: bool = True) -> ClassReport:
    """Grade every assignment of every student in ``submissions`` (folder or zip); see module doc."""
    from nbgrader.api import Gradebook, MissingEntry

    from . import course

    import warnings

    # nbgrader 0.9.6 + SQLAlchemy 2 warn "not in session" on every new submission: noise.
    warnings.filterwarnings("ignore", message=".*not in session.*")
    settings = settings or GradeSettings()
    t_start = time.monotonic()
    from . import sandbox

    usable, why = sandbox_state(settings)
    if usable:
        isolation = f"sandboxed ({why}: no network, own PID namespace, one writable folder)"
    else:
        if settings.sandbox:
            sandbox.warn_unsandboxed(why)
        isolation = f"unsandboxed ({why})"
    # Every path is made absolute here, in the caller's working directory: nothing below
    # (or in a job, which gets only data) depends on where the command was started.
    src = Path(submissions).expanduser().resolve()
    config_file = (Path(config_path).expanduser().resolve() if config_path
                   else course.default_config_path().resolve())
    api = course.make_api(config_file)
    cd = api.coursedir
    main_root = Path(cd.root)
    with Gradebook(cd.db_url, cd.course_id) as gb:
        known = sorted(a.name for a in gb.assignments)
    if not known:
        raise course.NbgraderError("the gradebook has no assignments: run `make release` first")
    out = Path(out).expanduser().resolve() if out else main_root / "autograder" / "work" / "class_report"
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="memlab-grade-"))
    try:
        if src.is_file() and zipfile.is_zipfile(src):
            _safe_extract(src, tmp / "input")
            src = tmp / "input"
        elif not src.is_dir():
            raise FileNotFoundError(f"{submissions}: not a folder or a zip file")
        found, ignored = _collect_jobs(src, known)
        if not found:
            raise ValueError(f"no submissions of {known} found in {submissions}")
        if settings.students:
            found = [f for f in found if f[0] in settings.students]
        if settings.assignments:
            found = [f for f in found if f[1] in settings.assignments]
        if not found:
            raise ValueError(f"no submission of students {list(settings.students) or 'any'} and "
                             f"assignments {list(settings.assignments) or 'any'} in {submissions}")
        slim = tmp / "gradebook.db"
        _slim_gradebook(Path(cd.db_url.replace("sqlite:///", "", 1)), slim)
        gradebook_bytes = slim.read_bytes()
        config_text = config_file.read_text()
        bundles = {a: course_bundle(api, a, gradebook_bytes, config_text)
                   for a in sorted({f[1] for f in found})}
        n_local = max(1, min(settings.workers or os.cpu_count() or 1, len(found)))
        threads = settings.threads_per_kernel or (1 if settings.scheduler
                                                  else max(1, (os.cpu_count() or 1) // n_local))
        jset = _job_settings(settings, threads)
        ledger_path = out / "ledger.jsonl"
        ledger = _load_ledger(ledger_path) if settings.resume else {}
        if not settings.resume and ledger_path.exists():
            ledger_path.unlink()
        forced = bool(settings.students or settings.assignments)
        pending, results = [], {}
        with Gradebook(cd.db_url, cd.course_id) as gb:
            for student, assignment, folder in found:
                files = _read_tree(folder)
                job = make_job(student, assignment, files, bundles[assignment], jset)
                e = ledger.get((student, assignment))
                if (not forced and e and e.get("digest") == job["digest"]
                        and e.get("course") == bundles[assignment]["fingerprint"]):
                    try:
                        gb.find_submission(assignment, student)
                        results[(student, assignment)] = e["result"]
                        continue
                    except MissingEntry:
                        pass
                pending.append(job)
        skipped = len(results)
        bar = _Progress(len(pending), progress, skipped)
        workers = 0
        if pending:
            bar.update()
            ex = _Executor(settings, len(pending))
            workers = ex.workers
            ledger_fh = open(ledger_path, "a")
            try:
                with Gradebook(cd.db_url, cd.course_id) as gb:
                    queue = list(pending)
                    running: dict[Any, dict] = {}
                    lost: dict[int, int] = {}  # id(job) -> times its worker process was lost
                    while queue or running:
                        while queue and len(running) < 2 * workers:
                            job = queue.pop(0)
                            running[ex.submit(job)] = job
                        for fut in ex.wait_first(running):
                            job = running.pop(fut)
                            try:
                                res = fut.result()
                            except Exception as exc:  # a worker process lost (killed, out of memory)
                                from concurrent.futures import BrokenExecutor

                                if isinstance(exc, BrokenExecutor) and ex.client is None:
                                    # The pool is unusable: a new one, and every job it held goes
                                    # again; a job whose worker is lost twice scores 0.
                                    lost[id(job)] = lost.get(id(job), 0) + 1
                                    if lost[id(job)] < 2:
                                        queue.insert(0, job)
                                        ex.restart_if_broken()
                                        continue
                                res = _failed_result(job, f"the grading worker process was lost "
                                                          f"({type(exc).__name__}): scores 0", 0.0)
                            problems = validate_result(res, job)
                            if problems:
                                res = _failed_result(job, "grading result rejected ("
                                                     + _first_line("; ".join(problems), 160) + "): scores 0",
                                                     res.get("seconds", 0.0) if isinstance(res, dict) else 0.0)
                            ts, ts_problem = _timestamp(job["files"])
                            if ts_problem:
                                res["reasons"].append(ts_problem)
                            _merge_retrying(gb, cd, job, res, ts)
                            res.pop("files", None)
                            res.pop("log", None)
                            results[(job["student"], job["assignment"])] = res
                            ledger_fh.write(json.dumps({
                                "student": job["student"], "assignment": job["assignment"],
                                "digest": job["digest"], "course": bundles[job["assignment"]]["fingerprint"],
                                "result": res}) + "\n")
                            ledger_fh.flush()
                            os.fsync(ledger_fh.fileno())
                            bar.update(f"{job['student']}/{job['assignment']}")
            except BaseException:
                ex.close(cancel=True)
                if progress:
                    sys.stderr.write(f"\ninterrupted after {bar.done} of {len(pending)}: run the same "
                                     f"command again to grade only what is missing\n")
                raise
            else:
                ex.close()
            finally:
                ledger_fh.close()
        # The report covers everything graded into this report folder so far.
        for key, e in _load_ledger(ledger_path).items():
            results.setdefault(key, e["result"])
        report = ClassReport(out=out, results=sorted(results.values(), key=lambda r: (r["student"], r["assignment"])),
                             seconds=time.monotonic() - t_start, workers=workers,
                             graded=len(pending), skipped=skipped, isolation=isolation,
                             integrity=gradebook_integrity(cd.db_url.replace("sqlite:///", "", 1)))
        if report.integrity != "ok":
            sys.stderr.write(f"\nERROR: the gradebook failed SQLite's integrity check after the batch: "
                             f"{report.integrity}\n")
        _write_report(api, report, ignored)
        return report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------ report
def _write_report(api, report: ClassReport, ignored: list[str]) -> None:
    from . import course

    out = report.out
    course.export(out / "grades.csv", api=api)
    rows, review_rows = [], []
    per_question: dict[tuple[str, str, str], list[float]] = {}
    with api.gradebook as gb:  # scores as merged (and late penalties), for every result
        for r in report.results:
            sub = gb.find_submission(r["assignment"], r["student"])
            r["score"], r["max_score"] = float(sub.score), float(sub.max_score)
            r["late_seconds"] = float(sub.total_seconds_late or 0)
            for snb in sub.notebooks:
                for g in snb.grades:
                    if g.max_score:
                        per_question.setdefault((r["assignment"], snb.name, g.name), []).append(
                            1.0 if (g.score or 0) >= g.max_score else 0.0)
    audits = _interview_audits(api, report.results)
    for r in report.results:
        reason, review = _reason_text(r)
        if r.get("late_seconds", 0) > 0:  # from timestamp.txt and the assignment's due date
            reason += f"; submitted late by {_duration(r['late_seconds'])}"
        review += [x for x in audits.get((r["student"], r["assignment"]), []) if x not in review]
        r["reason"], r["review"] = reason, review
        rows.append({"student": r["student"], "assignment": r["assignment"],
                     "score": f"{r['score']:g}", "max_score": f"{r['max_score']:g}",
                     "status": r["status"], "reason": reason,
                     "isolation": report.isolation.split(" (")[0]})
        for why in review:
            review_rows.append({"student": r["student"], "assignment": r["assignment"], "why": why})
    _write_csv(out / "submissions.csv", ["student", "assignment", "score", "max_score", "status", "reason",
                                         "isolation"], rows)
    _write_csv(out / "review.csv", ["student", "assignment", "why"], review_rows)
    q_rows = [{"assignment": a, "notebook": nb, "grade_id": gid, "submissions": len(v),
               "pass_rate": f"{sum(v) / len(v):.2f}"} for (a, nb, gid), v in sorted(per_question.items())]
    _write_csv(out / "questions.csv", ["assignment", "notebook", "grade_id", "submissions", "pass_rate"], q_rows)
    totals: dict[str, list[float]] = {}
    for r in report.results:
        t = totals.setdefault(r["student"], [0.0, 0.0])
        t[0] += r["score"]
        t[1] += r["max_score"]
    _plot(out / "score_distribution.png", {s: (v[0] / v[1] * 100 if v[1] else 0.0) for s, v in totals.items()})
    secs = [r["seconds"] for r in report.results]
    summary = {
        "students": len(totals), "submissions": len(report.results), "workers": report.workers,
        "graded_now": report.graded, "from_ledger": report.skipped,
        "seconds": round(report.seconds, 1),
        "seconds_per_submission": round(report.seconds / max(report.graded, 1), 2),
        "ignored_folders": ignored, "isolation": report.isolation,
        "gradebook_integrity": report.integrity,
        "questions": q_rows, "review": review_rows,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    lines = [f"# Class grading summary", "",
             f"{len(totals)} students, {len(report.results)} submissions, {report.workers} workers, "
             f"{report.seconds:.0f} s ({summary['seconds_per_submission']} s per submission; "
             f"slowest {max(secs, default=0):.0f} s).", "",
             f"Gradebook integrity check after the batch: {report.integrity}.", "",
             f"Isolation: {report.isolation}." + ("" if report.isolation.startswith("sandboxed") else
                                                 " LEARNER CODE RAN WITH YOUR RIGHTS: see "
                                                 "autograder/README.md, Security."), "",
             "![score distribution](score_distribution.png)", "",
             "## Pass rate per graded cell (low: the exercise may be too hard)", "",
             "| assignment | notebook | grade cell | submissions | pass rate |", "|---|---|---|---|---|"]
    lines += [f"| {q['assignment']} | {q['notebook']} | {q['grade_id']} | {q['submissions']} | {q['pass_rate']} |"
              for q in q_rows]
    lines += ["", f"## Needs manual review ({len(review_rows)})", ""]
    lines += [f"- {x['student']}/{x['assignment']}: {x['why']}" for x in review_rows] or ["- nothing"]
    lines += ["", "## Submissions", "", "| student | assignment | score | reason |", "|---|---|---|---|"]
    lines += [f"| {x['student']} | {x['assignment']} | {x['score']}/{x['max_score']} | "
              f"{x['reason'].replace('|', '/')} |" for x in rows]
    if ignored:
        lines += ["", "Ignored folders (not an assignment in the gradebook): " + ", ".join(ignored)]
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def _duration(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _interview_audits(api, results: list[dict]) -> dict[tuple[str, str], list[str]]:
    """Review items of :func:`memlab.grading.interview_review.review_notebook` (a clean
    regrade of interview answers outside the kernel, from the source notebook's tests) for
    each graded notebook."""
    audits: dict[tuple[str, str], list[str]] = {}
    try:
        from . import interview_review
    except Exception:  # the interview module is optional for this command
        return audits
    cd = api.coursedir
    for r in results:
        if r["status"] != "ok":
            continue
        folder = Path(cd.format_path(cd.autograded_directory, r["student"], r["assignment"]))
        for nb_path in sorted(folder.glob("*.ipynb")):
            source = Path(cd.format_path(cd.source_directory, ".", r["assignment"])) / nb_path.name
            try:
                items = interview_review.review_notebook(
                    nb_path, source if source.is_file() else None, student=r["student"],
                    assignment=r["assignment"], notebook=nb_path.name)
            except Exception as exc:
                items = []
                audits.setdefault((r["student"], r["assignment"]), []).append(
                    f"interview audit failed ({type(exc).__name__})")
            for item in items:
                if item.source in ("flagged", "static audit"):  # already in the reasons
                    continue  # the same NEEDS MANUAL REVIEW line the scan already lists
                audits.setdefault((r["student"], r["assignment"]), []).append(
                    f"{item.question} [{item.source}] {item.reason}")
    return audits


def _write_csv(path: Path, fields: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def _plot(path: Path, percent: dict[str, float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(list(percent.values()), bins=[i * 10 for i in range(11)], color="#4c72b0", edgecolor="white")
    ax.set_xlabel("total score (% of the points of the graded assignments)")
    ax.set_ylabel("students")
    ax.set_title(f"Score distribution ({len(percent)} students)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
