"""Jobs of class grading: one per (student, assignment), pure data in and out.

Part of :mod:`memlab.autograde.batch.grade_class` (which re-exports the public names).
:func:`course_bundle` is what a job needs of the course for one assignment (the nbgrader config
text, a copy of the gradebook with no student in it (:func:`_slim_gradebook`), the released
notebooks and the data files: never a solution notebook); :func:`make_job` is a job (a
picklable dict with a digest that the ledger compares); :func:`grade_job` is the single seam
between the class grader and whatever runs a submission: it runs the job in a grading child
(:mod:`memlab.autograde.batch.processes`, which grades it with :mod:`memlab.autograde.batch.runner`) and kills it,
with its kernels, at ``settings["submission_timeout"]``. Executors (process pool, Dask) call
:func:`grade_job` by its module path, ``memlab.autograde.batch.jobs.grade_job``.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from memlab.autograde.batch.intake import _read_tree, remove_tree
from memlab.autograde.batch.runner import _failed_result, _first_line
from memlab.autograde.batch.processes import _start_child
from memlab.autograde.security import cgroup


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


def remove_job_folders(root: Path, pids_max: int = 0, limit_s: float = 5.0) -> None:
    """Remove the batch's job folders and ``root``: after an interrupt, the workers that would
    have removed their own were killed. Every process still in a job's cgroup is killed first;
    a folder a dying process still writes into is tried again for up to ``limit_s`` seconds."""
    root = Path(root)
    if pids_max and root.is_dir():
        for jobdir in root.iterdir():
            cgroup.empty(jobdir.name)
    deadline = time.monotonic() + limit_s
    while root.exists():
        remove_tree(root)
        if not root.exists() or time.monotonic() > deadline:
            return
        time.sleep(0.1)


def folder_over(folder: Path, max_bytes: int, max_files: int) -> str:
    """Why ``folder`` holds more than ``max_bytes`` on disk or ``max_files`` entries ("" when
    it does not; 0: no limit). Walked without recursion or links, stopping at the limit: a
    learner's process writes there, so a million files or a tree thousands deep must not make
    the look itself costly. Blocks on disk, not sizes: a sparse file costs what it holds."""
    used = count = 0
    stack = [str(folder)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    count += 1
                    if max_files and count > max_files:
                        return f"holds more than {max_files} files and folders"
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    used += getattr(st, "st_blocks", 0) * 512
                    if max_bytes and used > max_bytes:
                        return f"holds more than {max_bytes / 2**20:.0f} MiB"
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return ""


def grade_job(job: dict) -> dict:
    """Grade one submission; pure data in (see :func:`make_job`), pure data out.

    Runs the grading in a child process (forked from this process's warm zygote when
    ``settings["warm"]``, else a fresh interpreter) and kills it, with its kernel, when it
    outlives ``settings["submission_timeout"]``: the submission then scores 0 with the reason.
    Never raises for a bad submission. Safe to call from any executor (process pool, Dask)."""
    t0 = time.monotonic()
    s = job["settings"]
    # Under the batch's own folder where it exists here (the batch removes it, and whatever a
    # killed worker left in it, when it ends or is interrupted), else the system's temp folder.
    root = s.get("job_root")
    jobdir = Path(tempfile.mkdtemp(prefix="memlab-job-",
                                   dir=root if root and os.path.isdir(root) else None))
    handle = None
    try:
        with open(jobdir / "job.pkl", "wb") as fh:
            pickle.dump(job, fh, protocol=pickle.HIGHEST_PROTOCOL)
        handle = _start_child(jobdir, job)
        deadline = time.monotonic() + float(s["submission_timeout"])
        result_file = jobdir / "result.pkl"
        disk = int(s.get("job_disk_mb") or 0) * 2**20
        files = int(s.get("job_files_max") or 0)
        next_look = time.monotonic()
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
            if (disk or files) and time.monotonic() >= next_look:  # the job's disk quota
                over = folder_over(jobdir, disk, files)
                if over:
                    handle.kill()
                    result = _failed_result(job, f"its folder {over}: scores 0",
                                            time.monotonic() - t0)
                    break
                next_look = time.monotonic() + 0.5
            time.sleep(0.05)
    except Exception as exc:  # the job machinery itself failed: never stop the batch
        result = _failed_result(job, f"grader error ({type(exc).__name__}: {_first_line(exc, 120)}): scores 0",
                                time.monotonic() - t0)
    finally:
        if handle is not None:
            handle.kill()
        if s.get("job_pids_max"):  # every process of the job, wherever it moved (security.cgroup)
            cgroup.empty(jobdir.name)
        remove_tree(jobdir)
    result["seconds"] = round(time.monotonic() - t0, 2)
    return result
