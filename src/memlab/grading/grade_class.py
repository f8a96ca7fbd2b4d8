"""Grade a whole class in one command: ``python -m memlab.grading.instructor grade-class SUBMISSIONS``.

Used by: ``make grade-class SUBMISSIONS=...``, autograder/README.md ("Grading a class"),
tests/grading/test_grade_class.py, benchmarks/grading_speed.py.

SUBMISSIONS is a folder or a ``.zip`` laid out like nbgrader's submitted folder::

    <student_id>/<assignment>/<notebook>.ipynb      (+ data files, optional timestamp.txt)

at the top of the zip or under one top-level folder (zip ``submitted/`` or ``class/``; an LMS
export converted with ``nbgrader zip_collect`` already has this layout).

What happens (see autograder/README.md for the security model):

1. Every (student, assignment) folder becomes a job. Unknown assignment folders are reported.
2. ``--workers`` grading processes (default: one per core) each own a temporary course: a
   copy of the gradebook and of the config, solutions/ *without notebooks* (hidden tests stay
   in the gradebook; a learner's code that searches the folders above it finds no solution).
   Each worker, per job: checks the notebook files (malformed JSON, a renamed notebook,
   duplicated / retyped / unknown grade cells, edited locked cells, stored outputs, another
   kernelspec), repairs what it can and states a reason, then runs nbgrader's autograde and
   generate_feedback in its own process through :class:`nbgrader.apps.NbGraderAPI`.
   Before anything runs, answer cells are audited (:mod:`memlab.grading.audit`); each kernel
   runs under bubblewrap (:mod:`memlab.grading.sandbox`; "unsandboxed" in the report where it
   is not usable).
3. Limits applied by the command itself: ``Execute.timeout`` per cell (``--cell-timeout``),
   a wall-clock limit per submission (``--submission-timeout``: the worker, and through
   ``PR_SET_PDEATHSIG`` its kernel, is killed and restarted; the submission scores 0), and
   ``RLIMIT_AS`` per kernel (``--memory-mb``) through a kernel launcher
   (:mod:`memlab.grading.kernel`) that also imports :mod:`memlab.grading` first.
4. One writer: the main process validates each job's result (:func:`_validate`), then merges
   it (retrying while the gradebook is locked) into the course gradebook
   (nbgrader's SQLite file is not safe for concurrent writers) and copies the autograded
   notebooks and feedback HTML into autograder/work/. Submissions nbgrader could not grade
   (kernel died, wall timeout, no readable notebook) get 0 on every cell and a reason.
5. Report (``--out``, default autograder/work/class_report/): grades.csv (nbgrader's CSV
   export), submissions.csv (score and reason per submission), questions.csv (pass rate per
   graded cell), review.csv (what needs a human, and why), summary.md, summary.json and
   score_distribution.png.

Scores are deterministic: the same submissions give the same grades.csv and submissions.csv.
"""
from __future__ import annotations

import copy
import csv
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

__all__ = ["grade_class", "GradeSettings", "ClassReport", "find_layout", "REVIEW_MARKER"]

REVIEW_MARKER = "NEEDS MANUAL REVIEW:"
GUARD_MARKER = "grading guard:"
MAX_ZIP_BYTES = 2 * 1024 ** 3       # refuse zips that unpack to more than this
MAX_NOTEBOOK_BYTES = 100 * 1024 ** 2  # a submitted notebook larger than this is not graded


@dataclass
class GradeSettings:
    workers: int = 0                   # 0: one per core
    cell_timeout: int = 300            # Execute.timeout, seconds per cell
    submission_timeout: int = 900      # wall clock per (student, assignment)
    memory_mb: int = 4096              # RLIMIT_AS per kernel (0: no limit)
    threads_per_kernel: int = 0        # OMP/MKL threads per kernel (0: cores // workers)
    sandbox: bool = True               # bubblewrap per kernel where usable (memlab.grading.sandbox)
    audit: bool = True                 # static audit of answer cells (memlab.grading.audit)


@dataclass
class ClassReport:
    out: Path
    results: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    workers: int = 1
    isolation: str = ""   # "bwrap ..." or "unsandboxed (why)"
    integrity: str = ""   # PRAGMA integrity_check of the gradebook after the batch ("ok")

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


def _precheck(dest: Path, release_dir: Path, expected: list[str], audit: bool = True) -> list[str]:
    """Repair what can be repaired in the submitted folder ``dest``; return the reasons.
    With ``audit``, answer cells that break the assignment's policy (memlab.grading.audit) are
    replaced by their released stub before anything runs (their tests score 0, pending review)."""
    import nbformat

    from .audit import apply_audit

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
        if audit:
            reasons += apply_audit(nb, released, release_dir.name)
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


def _grade_job(api, job: dict) -> dict:
    from nbgrader.api import Gradebook

    t0 = time.monotonic()
    student, assignment = job["student"], job["assignment"]
    cd = api.coursedir
    dest = Path(cd.format_path(cd.submitted_directory, student, assignment))
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(job["src"], dest, symlinks=False, ignore_dangling_symlinks=True,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__MACOSX"))
    for p in list(dest.rglob("*")):  # links could point at the course: drop them
        if p.is_symlink():
            p.unlink()
    with Gradebook(cd.db_url, cd.course_id) as gb:
        expected = sorted(nb.name for nb in gb.find_assignment(assignment).notebooks)
    reasons = _precheck(dest, Path(job["release_dir"]), expected, audit=job.get("audit", True))
    for step in ("autograded", "feedback"):
        shutil.rmtree(cd.format_path(getattr(cd, f"{step}_directory"), student, assignment),
                      ignore_errors=True)
    db_path = cd.db_url.replace("sqlite:///", "", 1)
    before = _db_fingerprint(db_path)
    status = "ok"
    result = api.autograde(assignment, student, force=True, create=True)
    if _db_tampered(before, _db_fingerprint(db_path)):
        reasons.append("learner code wrote to the grading worker's gradebook (discarded: only "
                       "the scores computed from the notebook's outputs reach the course gradebook)")
    if not result.get("success"):
        sys.stderr.write(f"--- nbgrader log of {student}/{assignment}\n{result.get('log') or ''}\n"
                         f"{result.get('error') or ''}\n")
        status = "failed"
        reasons.append(_classify_failure((result.get("log") or "") + (result.get("error") or "")))
    autograded = Path(cd.format_path(cd.autograded_directory, student, assignment))
    from .sandbox import KERNEL_DIR

    shutil.rmtree(autograded / KERNEL_DIR, ignore_errors=True)  # sockets, HOME, /tmp of the kernel
    if status == "ok":
        fb = api.generate_feedback(assignment, student, force=True)
        if not fb.get("success"):
            reasons.append("feedback HTML could not be written")
    grades: dict[str, dict[str, list]] = {}
    from nbgrader.api import MissingEntry

    with Gradebook(cd.db_url, cd.course_id) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:  # nbgrader stopped before it recorded the submission
            status = "failed"
            sub = None
        timestamp = sub.timestamp.isoformat() if sub is not None and sub.timestamp else None
        for snb in (sub.notebooks if sub is not None else []):
            for g in snb.grades:
                auto = g.auto_score if status == "ok" else 0.0
                grades.setdefault(snb.name, {})[g.name] = [
                    None if auto is None else float(auto), float(g.max_score),
                    bool(g.needs_manual_grade) if status == "ok" else False]
    scans, ran = {}, {}
    if status == "ok":
        import nbformat

        for nb_path in sorted(autograded.glob("*.ipynb")):
            scans[nb_path.stem] = _scan(nb_path)
            ran[nb_path.stem] = {_meta(c)["grade_id"]: c.source
                                 for c in nbformat.read(str(nb_path), as_version=4).cells
                                 if _meta(c).get("grade") and not _meta(c).get("solution")
                                 and _meta(c).get("grade_id")}
    return {"student": student, "assignment": assignment, "status": status, "reasons": reasons,
            "grades": grades, "scans": scans, "timestamp": timestamp, "tests_ran": ran,
            "seconds": round(time.monotonic() - t0, 2)}


def _worker_main() -> None:
    """A grading worker: settings on the first stdin line, then one job per line; one JSON
    result per job on the protocol pipe (the original stdout; prints go to stderr)."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    settings = json.loads(sys.stdin.readline())
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [settings["jupyter_path"], *filter(None, [os.environ.get("JUPYTER_PATH")])])
    from . import course

    api = course.make_api(settings["config"], overrides=settings["overrides"])
    proto.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        job = json.loads(line)
        try:
            res = _grade_job(api, job)
        except Exception as exc:  # never let one submission stop the worker
            import traceback

            traceback.print_exc()
            res = {"student": job["student"], "assignment": job["assignment"], "status": "failed",
                   "reasons": [f"grader error ({type(exc).__name__}: {_first_line(exc, 120)}): scores 0"],
                   "grades": {}, "scans": {}, "timestamp": None, "seconds": 0.0}
        proto.write(json.dumps(res) + "\n")


# --------------------------------------------------------------------------- main side
class _Worker:
    def __init__(self, index: int, base: Path, main_root: Path, main_db: Path, config_src: Path,
                 assignments: Sequence[str], settings: GradeSettings, threads: int):
        self.index = index
        self.dir = base / f"w{index}"
        self.root = self.dir / "course"
        self.threads = threads
        self.settings = settings
        self.job: dict | None = None
        self.started = 0.0
        if not self.root.exists():
            (self.root / "autograder" / "work").mkdir(parents=True)
            shutil.copy(config_src, self.root / "autograder" / "nbgrader_config.py")
            for a in assignments:  # data files only: no notebook (no solution) in the worker
                src = main_root / "solutions" / a
                shutil.copytree(src, self.root / "solutions" / a,
                                ignore=shutil.ignore_patterns("*.ipynb", ".ipynb_checkpoints"))
        self.main_db = main_db
        self.failed_starts = 0
        self.ready = False
        self.proc: subprocess.Popen | None = None
        self._buf = b""

    def start(self) -> None:
        from .kernel import KERNEL_NAME

        env = dict(os.environ)
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(self.threads)
        env["PYTHONUNBUFFERED"] = "1"
        bin_dir = str(Path(sys.executable).parent)
        env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
        log = open(self.dir / "worker.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from memlab.grading.grade_class import _worker_main; _worker_main()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env,
            cwd=str(self.dir), start_new_session=True)
        log.close()
        settings = {
            "config": str(self.root / "autograder" / "nbgrader_config.py"),
            "jupyter_path": str(self.dir.parent / "jupyter"),
            "overrides": {"Execute": {"timeout": self.settings.cell_timeout,
                                      "kernel_name": KERNEL_NAME,
                                      "kernel_manager_class": "memlab.grading.sandbox.SandboxKernelManager"},
                          # The kernel is killed from outside at the submission's wall limit
                          # (coreutils timeout), even if this worker or the grader is stopped.
                          "SandboxKernelManager": {"sandbox": self.settings.sandbox,
                                                   "wall_seconds": float(self.settings.submission_timeout)}},
        }
        self.proc.stdin.write((json.dumps(settings) + "\n").encode())
        self.proc.stdin.flush()
        self._buf = b""
        self.ready = False

    def send(self, job: dict) -> None:
        job = dict(job, audit=self.settings.audit)
        # A fresh copy of the course gradebook for every job: learner code that edits the
        # worker's gradebook (hidden tests, scores) cannot reach the next submission. The main
        # process is idle here (it merges between jobs), so the file is consistent.
        db = self.root / "autograder" / "work" / "gradebook.db"
        shutil.copy(self.main_db, db.with_suffix(".tmp"))
        os.replace(db.with_suffix(".tmp"), db)
        self.job = job
        self.started = time.monotonic()
        try:
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the worker died: its EOF is handled by the main loop

    def read_lines(self) -> list[dict] | None:
        """Complete protocol lines now available; None on EOF (the worker died)."""
        chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
        if not chunk:
            return None
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
            self.proc.wait()
        if self.proc:
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass


def _failed_result(job: dict, reason: str, seconds: float) -> dict:
    return {"student": job["student"], "assignment": job["assignment"], "status": "failed",
            "reasons": [reason], "grades": {}, "scans": {}, "timestamp": None,
            "seconds": round(seconds, 2)}


def _progress(done: int, total: int, t0: float, last: str, enabled: bool) -> None:
    if not enabled:
        return
    width = 24
    filled = int(width * done / max(total, 1))
    elapsed = time.monotonic() - t0
    sys.stderr.write(f"\rgrading [{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
                     f"{elapsed:6.0f} s  {last[:40]:<40}")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _run_jobs(api, jobs: list[dict], base: Path, main_root: Path, config_src: Path,
              assignments: Sequence[str], settings: GradeSettings, on_result, progress: bool) -> int:
    from .kernel import write_kernelspec

    write_kernelspec(base / "jupyter", memory_mb=settings.memory_mb)
    n = min(settings.workers or os.cpu_count() or 1, len(jobs)) or 1
    threads = settings.threads_per_kernel or max(1, (os.cpu_count() or 1) // n)
    main_db = Path(api.coursedir.db_url.replace("sqlite:///", "", 1))
    workers = [_Worker(i, base, main_root, main_db, config_src, assignments, settings, threads)
               for i in range(n)]
    queue = list(jobs)
    done = 0
    t0 = time.monotonic()
    _progress(0, len(jobs), t0, "", progress)
    for w in workers:
        w.start()
    try:
        while done < len(jobs):
            for w in workers:
                if w.ready and w.job is None and queue:
                    w.send(queue.pop(0))
            busy = [w for w in workers if w.proc and w.proc.poll() is None or w.job is not None]
            fds = {w.proc.stdout.fileno(): w for w in busy if w.proc.stdout and not w.proc.stdout.closed}
            ready, _, _ = select.select(list(fds), [], [], 1.0)
            for fd in ready:
                w = fds[fd]
                lines = w.read_lines()
                if lines is None:  # the worker died
                    job = w.job
                    w.kill()
                    if job is None and not w.ready:
                        w.failed_starts += 1
                        if w.failed_starts >= 3:
                            raise RuntimeError("a grading worker failed to start 3 times: "
                                               + (w.dir / 'worker.log').read_text()[-2000:])
                    if job is not None:
                        w.job = None
                        on_result(_failed_result(job, "the grading worker crashed: scores 0",
                                                 time.monotonic() - w.started))
                        done += 1
                        _progress(done, len(jobs), t0, f"{job['student']}/{job['assignment']}", progress)
                    if queue or done < len(jobs):
                        w.start()
                    continue
                for msg in lines:
                    if msg.get("ready"):
                        w.ready = True
                        continue
                    w.job = None
                    on_result(msg)
                    done += 1
                    _progress(done, len(jobs), t0, f"{msg['student']}/{msg['assignment']}", progress)
            now = time.monotonic()
            for w in workers:
                if w.job is not None and now - w.started > settings.submission_timeout:
                    job = w.job
                    w.kill()
                    w.job = None
                    on_result(_failed_result(
                        job, f"over the {settings.submission_timeout} s limit per submission: scores 0",
                        now - w.started))
                    done += 1
                    _progress(done, len(jobs), t0, f"{job['student']}/{job['assignment']}", progress)
                    w.start()
    finally:
        for w in workers:
            try:
                if w.proc and w.proc.poll() is None:
                    w.proc.stdin.close()
                    w.proc.wait(timeout=10)
            except Exception:
                pass
            w.kill()
    return n


def _reason_text(result: dict) -> tuple[str, list[str]]:
    """(one-line reason, review reasons) of a merged result."""
    parts = list(result["reasons"])
    review = [r for r in result["reasons"] if "edited" in r or "scores 0" in r or "renamed" in r
              or "duplicated" in r or "deleted" in r or "unknown grade cell" in r or "limit" in r
              or "gradebook" in r or r.startswith("audit:")]
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


def _validate(gb, result: dict) -> list[str]:
    """What is wrong with a job's result, checked against the course gradebook before it is
    merged: unknown notebooks or grade cells, changed points, scores out of range, and test
    cells whose source is not the source's (the job ran other tests than the instructor's)."""
    if result.get("status") != "ok":
        return []
    problems = []
    try:
        asg = gb.find_assignment(result["assignment"])
    except Exception:
        return [f"unknown assignment {result['assignment']!r}"]
    cells = {nb.name: {g.name: float(g.max_score) for g in nb.grade_cells} for nb in asg.notebooks}
    for nb, grades in result.get("grades", {}).items():
        for gid, (auto, mx, _manual) in grades.items():
            if gid not in cells.get(nb, {}):
                problems.append(f"unknown grade cell {nb}/{gid}")
            elif float(mx) != cells[nb][gid]:
                problems.append(f"{nb}/{gid} worth {mx:g} points instead of {cells[nb][gid]:g}")
            elif auto is not None and not 0 <= float(auto) <= float(mx):
                problems.append(f"{nb}/{gid} scored {auto:g} of {mx:g}")
    for nb, tests in result.get("tests_ran", {}).items():
        for gid, source in tests.items():
            try:
                ref = gb.find_source_cell(gid, nb, result["assignment"]).source
            except Exception:
                problems.append(f"test cell {nb}/{gid} is not in the gradebook")
                continue
            if _norm(source) != _norm(ref):
                problems.append(f"test cell {nb}/{gid} ran with a source other than the instructor's")
    return problems


def _merge_retrying(gb, api, base_workers: Path, result: dict, tries: int = 8) -> None:
    """:func:`_merge`, retried with back-off while the gradebook is locked (another program, a
    stray lock): a locked gradebook delays the batch, it never aborts it."""
    from sqlalchemy.exc import OperationalError

    for attempt in range(tries):
        try:
            return _merge(gb, api, base_workers, result)
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


def _merge(gb, api, base_workers: Path, result: dict) -> None:
    """Write one job's grades into the main gradebook and copy its notebooks (one writer)."""
    student, assignment = result["student"], result["assignment"]
    problems = _validate(gb, result)
    if problems:  # never merge what the grader cannot vouch for
        result["status"] = "failed"
        result["reasons"] = list(result["reasons"]) + [
            f"grader rejected the job's result ({'; '.join(problems[:3])}): scores 0"]
    gb.update_or_create_student(student)
    if result.get("timestamp"):  # from the submission's timestamp.txt (late penalties)
        from datetime import datetime

        gb.update_or_create_submission(assignment, student,
                                       timestamp=datetime.fromisoformat(result["timestamp"]))
    else:
        gb.update_or_create_submission(assignment, student)
    sub = gb.find_submission(assignment, student)
    for snb in sub.notebooks:
        for g in snb.grades:
            got = result["grades"].get(snb.name, {}).get(g.name)
            if result["status"] != "ok" or got is None or got[0] is None:
                g.auto_score = 0.0
                g.needs_manual_grade = bool(got and got[2]) if result["status"] == "ok" else False
            else:
                g.auto_score = got[0]
                g.needs_manual_grade = got[2]
    gb.db.commit()
    result["score"] = float(sub.score)
    result["max_score"] = float(sub.max_score)


def grade_class(submissions: str | Path, *, config_path: str | Path | None = None,
                out: str | Path | None = None, settings: GradeSettings | None = None,
                progress: bool = True) -> ClassReport:
    """Grade every assignment of every student in ``submissions`` (folder or zip); see module doc."""
    from nbgrader.api import Gradebook

    from . import course

    import warnings

    # nbgrader 0.9.6 + SQLAlchemy 2 warn "not in session" on every new submission: noise.
    warnings.filterwarnings("ignore", message=".*not in session.*")
    settings = settings or GradeSettings()
    t_start = time.monotonic()
    from . import sandbox

    usable, why = sandbox.available() if settings.sandbox else (False, "disabled (--no-sandbox)")
    if usable:
        isolation = f"sandboxed ({why}: no network, own PID namespace, one writable folder)"
    else:
        sandbox.warn_unsandboxed(why)
        isolation = f"unsandboxed ({why})"
    api = course.make_api(config_path)
    cd = api.coursedir
    main_root = Path(cd.root)
    config_src = Path(config_path) if config_path else course.default_config_path()
    with Gradebook(cd.db_url, cd.course_id) as gb:
        known = sorted(a.name for a in gb.assignments)
    if not known:
        raise course.NbgraderError("the gradebook has no assignments: run `make release` first")
    out = Path(out) if out else main_root / "autograder" / "work" / "class_report"
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="memlab-grade-"))
    try:
        src = Path(submissions)
        if src.is_file() and zipfile.is_zipfile(src):
            _safe_extract(src, tmp / "input")
            src = tmp / "input"
        elif not src.is_dir():
            raise FileNotFoundError(f"{submissions}: not a folder or a zip file")
        layout = find_layout(src, known)
        jobs, ignored = [], []
        for sdir in sorted(p for p in layout.iterdir() if p.is_dir() and not p.name.startswith(".")):
            for adir in sorted(p for p in sdir.iterdir() if p.is_dir()):
                if adir.name in known:
                    release_dir = Path(cd.format_path(cd.release_directory, ".", adir.name))
                    jobs.append({"student": sdir.name, "assignment": adir.name, "src": str(adir),
                                 "release_dir": str(release_dir)})
                elif not adir.name.startswith("."):
                    ignored.append(f"{sdir.name}/{adir.name}")
        if not jobs:
            raise ValueError(f"no submissions of {known} found in {submissions}")
        results: list[dict] = []
        base = tmp / "workers"
        base.mkdir()
        assignments = sorted({j["assignment"] for j in jobs})
        with Gradebook(cd.db_url, cd.course_id) as gb:
            def on_result(res: dict) -> None:
                _merge_retrying(gb, api, base, res)
                for step in ("autograded", "feedback"):
                    dst = Path(cd.format_path(getattr(cd, f"{step}_directory"), res["student"], res["assignment"]))
                    shutil.rmtree(dst, ignore_errors=True)
                    for w in sorted(base.glob("w*")):
                        srcdir = Path(str(dst).replace(str(main_root), str(w / "course"), 1))
                        if srcdir.is_dir() and res["status"] == "ok" and _owned_by_last(w, res):
                            shutil.copytree(srcdir, dst)
                results.append(res)

            n = _run_jobs(api, jobs, base, main_root, config_src, assignments, settings, on_result, progress)
        integrity = gradebook_integrity(cd.db_url.replace("sqlite:///", "", 1))
        if integrity != "ok":
            sys.stderr.write(f"\nERROR: the gradebook failed SQLite's integrity check after the batch: "
                             f"{integrity}\n")
        report = ClassReport(out=out, results=sorted(results, key=lambda r: (r["student"], r["assignment"])),
                             seconds=time.monotonic() - t_start, workers=n, isolation=isolation,
                             integrity=integrity)
        _write_report(api, report, ignored)
        return report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _owned_by_last(worker_dir: Path, res: dict) -> bool:
    """True when ``worker_dir`` graded ``res`` (its submitted copy exists there)."""
    return (worker_dir / "course" / "autograder" / "work" / "submitted" / res["student"]
            / res["assignment"]).is_dir()


# ------------------------------------------------------------------------------ report
def _write_report(api, report: ClassReport, ignored: list[str]) -> None:
    from . import course

    out = report.out
    course.export(out / "grades.csv", api=api)
    rows, review_rows = [], []
    per_question: dict[tuple[str, str, str], list[float]] = {}
    audits = _interview_audits(api, report.results)
    for r in report.results:
        reason, review = _reason_text(r)
        review += [x for x in audits.get((r["student"], r["assignment"]), []) if x not in review]
        r["reason"], r["review"] = reason, review
        rows.append({"student": r["student"], "assignment": r["assignment"],
                     "score": f"{r['score']:g}", "max_score": f"{r['max_score']:g}",
                     "status": r["status"], "reason": reason, "isolation": report.isolation.split(" (")[0]})
        for why in review:
            review_rows.append({"student": r["student"], "assignment": r["assignment"], "why": why})
    with api.gradebook as gb:
        for r in report.results:
            sub = gb.find_submission(r["assignment"], r["student"])
            for snb in sub.notebooks:
                for g in snb.grades:
                    if g.max_score:
                        per_question.setdefault((r["assignment"], snb.name, g.name), []).append(
                            1.0 if (g.score or 0) >= g.max_score else 0.0)
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
        "seconds": round(report.seconds, 1),
        "seconds_per_submission": round(report.seconds / max(len(report.results), 1), 2),
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


def _interview_audits(api, results: list[dict]) -> dict[tuple[str, str], list[str]]:
    """Review items of :func:`memlab.grading.interview.review_notebook` (a clean regrade of interview
    answers outside the kernel, from the source notebook's tests) for each graded notebook."""
    audits: dict[tuple[str, str], list[str]] = {}
    try:
        from . import interview
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
                items = interview.review_notebook(nb_path, source if source.is_file() else None,
                                                  student=r["student"], assignment=r["assignment"],
                                                  notebook=nb_path.name)
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
