"""Verdicts decided outside the learner's kernel: the graded tests re-run in a fresh process.

Used by: :mod:`memlab.autograde.batch.grade_class` (every job, unless ``--no-verdict``),
tests/grading/test_verdict.py.

nbgrader decides a test cell's score from what the kernel reports about it (an ``error``
output, anything on ``stderr``, the first ``execute_result`` as partial credit), so a learner's
kernel that is hooked (a replaced ``Session.send``, an input transformer, a published
``execute_result``, a patched ``InteractiveShell``) can report anything. grade-class therefore
runs every submission twice:

1. nbgrader's ``autograde`` in a Jupyter kernel (under :mod:`memlab.autograde.security.bwrap`): the
   outputs the learner sees in the feedback, and nbgrader's score;
2. :func:`rerun`: one fresh Python process per notebook, under the same sandbox, that is **not**
   a Jupyter kernel (no IPython shell, no kernel session, no display publisher, no input
   transformers, no comm). It imports its trusted harness first (this module, torch, memlab and
   :mod:`memlab.grading.guard`, which captures the originals), then runs the notebook's code
   cells in order with ``exec``: every locked or test cell with the source the gradebook holds
   (not the submitted one), the answer cells and the learner's own cells as they came out of
   the static audit (:mod:`memlab.autograde.security.audit`: a cell that touches hooks, the import
   machinery, introspection or the process never runs). After each graded test cell it writes
   the cell's verdict, by nbgrader's own rule (:func:`score`), as one JSON line to a pipe whose
   descriptor only the harness holds; the grader reads the lines as data.

The score recorded for a test cell is the **lower** of the two. A cell the re-run scores lower
gets a reason that says so; a test cell the re-run never reached (the process was killed, ran
out of time or memory) scores 0 with the reason. Nothing the first kernel did reaches the
re-run: it starts from the submitted files (after the pre-checks), in its own folder.

The test cells an assignment names in ``Assignment.judged`` never run here: the judge
(:mod:`memlab.autograde.security.judge`), a process that runs no learner code, decides them,
calling the learner's functions in this process through a channel of plain data.

What this does not do: for the other test cells, the learner's answer code still runs in the
same interpreter as the test that judges it (a test must call it). What keeps it from reaching
the harness (its pipe, its frames) is the static audit, which refuses introspection, ``gc``, ``sys``/``os`` hooks and
the import machinery before anything runs. See autograder/README.md, Security.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

# the same reading of a cell's nbgrader metadata and source
from memlab.autograde.security.audit import _meta, _src
# one cell or one call, by nbgrader's rules, in the fresh process (shared with the judge)
from memlab.autograde.security.cells import (STOP_PREFIX, STOPPED_BY_KERNEL, Report,
                                             call_captured, fresh_namespace, limit_process,
                                             run_cell, score)

__all__ = ["Verdict", "program_of", "rerun", "score", "combine", "main"]

PROGRAM = "program.json"
KINDS = ("test", "answer", "locked", "free")


@dataclass(frozen=True)
class Verdict:
    grade_id: str
    score: float
    max_score: float
    why: str  # "" when the cell earned what it earned without a problem


# ------------------------------------------------------------------ the grader's side

def program_of(nb, trusted: Mapping[str, str], points: Mapping[str, float]) -> list[dict]:
    """The code cells the re-run executes, in order: ``{"kind", "grade_id", "source",
    "points"}``. ``trusted``: grade_id -> source of every locked cell (test cells included), as
    the gradebook holds them; ``points``: test grade_id -> max score, from the gradebook.

    A cell whose grade_id names a locked cell runs the trusted source; a test cell the
    submission lacks is still run, at the end (its place in the release is not known here);
    cells of any other kind run as submitted (after the audit)."""
    cells: list[dict] = []
    seen: set[str] = set()
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        meta = _meta(cell)
        gid = meta.get("grade_id")
        if gid in trusted and gid not in seen:
            seen.add(gid)
            kind = "test" if gid in points else "locked"
            cells.append({"kind": kind, "grade_id": gid, "source": trusted[gid],
                          "points": float(points.get(gid, 0.0))})
        elif gid in trusted:  # a duplicate of a locked cell: never run twice
            continue
        else:
            kind = "answer" if meta.get("solution") else "free"
            cells.append({"kind": kind, "grade_id": gid if kind == "answer" else None,
                          "source": _src(cell), "points": 0.0})
    for gid in points:  # a deleted test cell still counts (and fails without its answer)
        if gid not in seen and gid in trusted:
            cells.append({"kind": "test", "grade_id": gid, "source": trusted[gid],
                          "points": float(points[gid])})
    return cells


# -P: the learner's folder (the harness's working directory) is not on sys.path
HARNESS = (sys.executable, "-P", "-c", "from memlab.autograde.security.verdict import main; main()")


def _harness_argv(memory_mb: int, cell_timeout: float, report_fd: int) -> list[str]:
    return [*HARNESS,
            "--memory-mb", str(int(memory_mb or 0)), "--cell-timeout", f"{float(cell_timeout):g}",
            "--report-fd", str(report_fd), PROGRAM]


def rerun(notebook: Path, submitted: Path, workdir: Path, trusted: Mapping[str, str],
          points: Mapping[str, float], *, sandboxed: bool, wall_seconds: float,
          cell_timeout: float = 300, memory_mb: int = 0, launch: Callable | None = None,
          judged: Mapping[str, tuple[str, ...]] | None = None,
          on_timeout: Callable[[str], None] | None = None) -> tuple[dict[str, Verdict], str]:
    """Re-run ``notebook`` (a submitted notebook after the pre-checks) in a fresh process.

    ``submitted``: the folder whose other files (data the notebook reads) are copied into the
    fresh ``workdir``, the only folder the process can write. ``launch`` (the Landlock sandbox,
    :meth:`memlab.autograde.batch.processes._WarmKernels.take`): the process is a pre-forked warm one that
    confines itself to ``workdir``; otherwise a new interpreter, under bubblewrap when
    ``sandboxed``. Returns ({grade_id: Verdict} for every test cell in ``points``, problem)
    where problem is "" or why the run ended early.

    ``judged``: test grade_id -> the learner's names it calls, for the cells the judge decides
    in a process that runs no learner code (:mod:`.judge`); their source never reaches this
    re-run. ``on_timeout(grade_id)``: called as soon as the re-run reports that a graded cell
    ran past ``cell_timeout`` (:mod:`memlab.autograde.batch.timeouts` stops the kernel's copy)."""
    import nbformat

    from memlab.autograde.security import judge

    nb = nbformat.read(str(notebook), as_version=4)
    program, judge_cells = judge.split(program_of(nb, trusted, points), dict(judged or {}))
    workdir.mkdir(parents=True, exist_ok=True)
    _copy_data(submitted, workdir)
    key = secrets.token_hex(32)
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
    log_path = workdir.parent / f"{workdir.name}.log"
    t0 = time.monotonic()
    judging = None
    if judge_cells:
        judging = _Judge(judge_cells, workdir, env, wall_seconds, cell_timeout, memory_mb)
        if not judging.ready:  # its cells get no verdict (they score 0, said so)
            judging = None
            program = [{k: v for k, v in c.items() if k != "sync"} for c in program
                       if c["kind"] != "judged"]
    (workdir / PROGRAM).write_text(json.dumps({"cells": program, "key": key,
                                               "channel": judging is not None}))
    heard = _timeouts_heard(key, on_timeout)
    if launch is not None:
        taken = _run_warm(launch, workdir, env, log_path, t0 + wall_seconds,
                          memory_mb, cell_timeout, heard)
        if taken is None:
            if judging is not None:  # nothing will ever call it: it must not outlive the job
                judging.stop()
            return {}, "the re-run did not start (no warm process was left for it)"
        proc, raw = taken
    else:
        proc, raw = _run_fresh(workdir, env, log_path, t0 + wall_seconds + 5, sandboxed,
                               wall_seconds, memory_mb, cell_timeout, heard)
    try:
        proc.wait(timeout=max(5.0, wall_seconds - (time.monotonic() - t0) + 5))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    verdicts, problem = parse(raw, program, points, key)
    if judging is not None:
        found, why = judging.finish(points)
        verdicts.update(found)
        problem = problem or why
    elif judge_cells:
        problem = problem or "the judge did not start"
    return verdicts, _explained(problem, proc.returncode, log_path)


def _copy_data(submitted: Path, workdir: Path) -> None:
    """The submission's data files into ``workdir``: regular files only, never a link, a
    notebook or a hidden entry (a kernel folder)."""
    for item in submitted.iterdir():  # data files, never the notebooks or a kernel folder
        if item.name.startswith(".") or item.suffix == ".ipynb":
            continue
        if item.is_file() and not item.is_symlink():
            shutil.copy(item, workdir / item.name)


def _timeouts_heard(key: str, on_timeout: Callable[[str], None] | None):
    """The reader's hook for each complete report line: a signed ``{"timeout": grade_id}``
    calls ``on_timeout`` (None when there is no one to tell)."""
    if on_timeout is None:
        return None

    def heard(line: bytes) -> None:
        item = _signed(line.decode("utf-8", "replace"), key)
        if isinstance(item, dict) and list(item) == ["timeout"] \
                and isinstance(item["timeout"], str):
            on_timeout(item["timeout"])

    return heard


def _run_warm(launch: Callable, workdir: Path, env: dict, log_path: Path, deadline: float,
              memory_mb: int, cell_timeout: float, heard: Callable | None = None):
    """The harness in a pre-forked warm process that confines itself to ``workdir``:
    (process, what it reported by ``deadline``), or None when none was left."""
    from memlab.autograde.security.landlock import confined_env

    taken = launch(_harness_argv(memory_mb, cell_timeout, -1), confined_env(workdir, env),
                   str(workdir), kind="verdict", confine=str(workdir), log=str(log_path))
    if taken is None:
        return None
    proc, r = taken
    return proc, _read_until(r, deadline, proc, heard=heard)


def _run_fresh(workdir: Path, env: dict, log_path: Path, deadline: float, sandboxed: bool,
               wall_seconds: float, memory_mb: int, cell_timeout: float,
               heard: Callable | None = None):
    """The harness in a new interpreter (under bubblewrap when ``sandboxed``, else killed at
    ``wall_seconds`` by timeout(1)): (process, what it reported by ``deadline``)."""
    r, w = os.pipe()
    os.set_inheritable(w, True)
    argv = _harness_argv(memory_mb, cell_timeout, w)
    if sandboxed:
        from memlab.autograde.security.bwrap import bwrap_argv

        cmd = bwrap_argv(argv, workdir, env=env, wall_seconds=wall_seconds)
        cwd = None
    else:
        timeout = shutil.which("timeout")
        cmd = ([timeout, "-s", "KILL", f"{float(wall_seconds):g}"] if timeout and wall_seconds > 0
               else []) + argv
        cwd = str(workdir)
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=log,
                                    pass_fds=(w,), start_new_session=True)
        finally:
            os.close(w)
        return proc, _read_until(r, deadline, proc, heard=heard)


def _explained(problem: str, returncode: int | None, log_path: Path) -> str:
    """``problem`` with how the process ended, and the harness log's tail when it never
    started."""
    if problem and returncode not in (0, None):
        problem = f"{problem} (the process ended with {_exit_text(returncode)})"
    if problem == "the re-run did not start":
        tail = (log_path.read_text(errors="replace").strip().splitlines()[-3:]
                if log_path.exists() else [])
        problem = f"{problem}; harness log: {' | '.join(tail)[:300]}"
    return problem


JUDGE = (sys.executable, "-P", "-c", "from memlab.autograde.security.judge import main; main()")


class _Judge:
    """The judge of one re-run (:mod:`.judge`): started, and ready, before the worker; its
    report read once the worker is done."""

    def __init__(self, cells: list[dict], workdir: Path, env: dict, wall_seconds: float,
                 cell_timeout: float, memory_mb: int):
        from memlab.autograde.security import judge

        self.cells = [{**c, "kind": "test" if c["kind"] == "test" else "locked"} for c in cells]
        self.key = secrets.token_hex(32)
        folder = workdir.parent / f"{workdir.name}.judge"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "judge.json").write_text(json.dumps({"cells": cells, "key": self.key}))
        for name in judge.FIFOS:
            os.mkfifo(workdir / name, 0o600)
        r, w = os.pipe()
        os.set_inheritable(w, True)
        argv = [*JUDGE, "--report-fd", str(w), "--cell-timeout", f"{float(cell_timeout):g}",
                "--memory-mb", str(int(memory_mb or 0)), "--folder", str(workdir), "judge.json"]
        self.deadline = time.monotonic() + wall_seconds + 5
        with open(folder.parent / f"{workdir.name}.judge.log", "wb") as log:
            try:
                self.proc = subprocess.Popen(argv, cwd=str(folder), env=env,
                                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                             stderr=log, pass_fds=(w,), start_new_session=True)
            finally:
                os.close(w)
        self.fd = r
        self.raw = b""
        self.ready = self._first_line(time.monotonic() + min(120.0, wall_seconds))
        if not self.ready:
            self.stop()
            for name in judge.FIFOS:
                (workdir / name).unlink(missing_ok=True)

    def _first_line(self, deadline: float) -> bool:
        import select

        while b"\n" not in self.raw and time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 1.0)
            if ready:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    break
                self.raw += chunk
        return b"\n" in self.raw

    def finish(self, points: Mapping[str, float]) -> tuple[dict[str, Verdict], str]:
        # the worker is done: the judge has at most its report left to write
        self.raw += _read_until(self.fd, min(self.deadline, time.monotonic() + 15), self.proc)
        self.fd = -1
        self.stop()
        found, problem = parse(self.raw, self.cells, points, self.key)
        return found, (f"the judge: {problem}" if problem else "")

    def stop(self) -> None:
        """Kill the judge (if it still runs) and close its report pipe."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _read_until(fd: int, deadline: float, proc, limit: int = 4 * 2**20,
                heard: Callable[[bytes], None] | None = None) -> bytes:
    """What the harness reports on ``fd`` until EOF, ``limit`` bytes or ``deadline`` (then the
    process is killed: a process that holds the pipe open, or a descendant that does, cannot
    keep the grader waiting). ``heard``: called with each complete line as it arrives.
    Closes ``fd``."""
    import select

    raw = b""
    try:
        while len(raw) < limit:
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                break
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                if heard is not None:
                    start = raw.rfind(b"\n") + 1
                    for line in (raw[start:] + chunk).split(b"\n")[:-1]:
                        heard(line)
                raw += chunk
    finally:
        os.close(fd)
    return raw[:limit]


def _exit_text(rc: int) -> str:
    if rc < 0:
        import signal

        try:
            return f"signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    if rc == 137:
        return "SIGKILL (wall-clock limit or memory)"
    return f"exit status {rc}"


def _signed(line: str, key: str) -> dict | None:
    text, _, sig = line.rpartition("\t")
    want = hmac.new(bytes.fromhex(key), text.encode(), hashlib.sha256).hexdigest()
    if not text or not hmac.compare_digest(sig, want):
        return None
    try:
        item = json.loads(text)
    except ValueError:
        return None
    return item if isinstance(item, dict) else None


def parse(raw: bytes, program: list[dict], points: Mapping[str, float], key: str
          ) -> tuple[dict[str, Verdict], str]:
    """Check the harness's lines against the program (a ready line, then exactly one verdict
    per test cell, in program order, then done; each line signed with the run's key, which
    only the harness read) and turn them into verdicts. Anything else ends the reading: the
    cells after it have no verdict."""
    tests = [c for c in program if c["kind"] == "test"]
    lines = raw.decode("utf-8", "replace").splitlines()
    verdicts: dict[str, Verdict] = {}
    if not lines or _signed(lines[0], key) != {"ready": True}:
        return verdicts, "the re-run did not start"
    pos = 0
    for line in lines[1:]:
        item = _signed(line, key)
        if item is None:
            return verdicts, "the re-run's report was forged or garbled"
        if isinstance(item, dict) and list(item) == ["timeout"]:
            continue  # a cell ran past the limit (read as it came: :func:`_read_until`)
        if item == {"done": True}:
            return (verdicts, "") if pos == len(tests) else (verdicts, "the re-run's report ended early")
        if pos >= len(tests) or not isinstance(item, dict) or item.get("grade_id") != tests[pos]["grade_id"] \
                or item.get("n") != pos:
            return verdicts, "the re-run's report was out of order"
        mx = float(points[tests[pos]["grade_id"]])
        try:
            s = min(max(float(item["score"]), 0.0), mx)
        except (KeyError, TypeError, ValueError):
            return verdicts, "the re-run's report was garbled"
        verdicts[tests[pos]["grade_id"]] = Verdict(tests[pos]["grade_id"], s, mx, str(item.get("why", ""))[:300])
        pos += 1
    return verdicts, "the re-run stopped before the end of the notebook"


def combine(grades: dict[str, list], verdicts: Mapping[str, Verdict], problem: str,
            points: Mapping[str, float]) -> list[str]:
    """Lower each test cell's nbgrader score (``grades``: grade_id -> [auto, max, manual],
    edited in place) to the re-run's; return the reasons for every cell it lowered."""
    reasons: list[str] = []
    for gid in points:
        cell = grades.get(gid)
        if cell is None or cell[0] is None:
            continue
        v = verdicts.get(gid)
        if v is None:
            if cell[0] > 0:
                reasons.append(f"{gid} scores 0: {problem or 'the re-run gave no verdict'} "
                               f"(independent re-run outside the learner's kernel; the kernel "
                               f"reported {cell[0]:g} of {cell[1]:g})")
                cell[0] = 0.0
            continue
        if v.score < cell[0] - 1e-9:
            reasons.append(f"{gid} scored {v.score:g} of {cell[1]:g} in the independent re-run "
                           f"outside the learner's kernel ({v.why or 'no reason given'}); the "
                           f"kernel reported {cell[0]:g}: the lower score counts")
            cell[0] = v.score
    return reasons


# --------------------------------------------------------------- inside the fresh process

def main(argv: list[str] | None = None) -> None:
    """The harness: ``python -c 'from memlab.autograde.security.verdict import main; main()' [--memory-mb N]
    [--cell-timeout S] program.json``, with the report pipe on the one inherited descriptor
    above 2. Imports its trusted modules before any learner code, then runs the program."""
    argv = list(sys.argv[1:] if argv is None else argv)
    from memlab.autograde.security.kernel import course_only_path

    course_only_path()
    memory_mb, cell_timeout, out_fd = 0, 300.0, -1
    while argv and argv[0] in ("--memory-mb", "--cell-timeout", "--report-fd"):
        flag, value = argv.pop(0), argv.pop(0)
        if flag == "--memory-mb":
            memory_mb = int(value)
        elif flag == "--report-fd":
            out_fd = int(value)
        else:
            cell_timeout = float(value)
    [program_path] = argv
    limit_process(memory_mb)
    report = Report(out_fd)

    import torch  # noqa: F401  trusted modules first: the guard captures the originals

    import memlab  # noqa: F401
    import memlab.grading  # noqa: F401
    import memlab.grading.guard  # noqa: F401
    from memlab.autograde.security import judge

    with open(program_path, encoding="utf-8") as f:
        loaded = json.load(f)
    os.unlink(program_path)  # neither the hidden tests nor the key are left for learner code
    program = loaded["cells"]
    report.key = bytes.fromhex(loaded["key"])
    link = None
    if loaded.get("channel"):  # the judge's pipes: opened before any learner code, then removed
        tx = os.open(judge.FIFOS[0], os.O_WRONLY)
        rx = os.open(judge.FIFOS[1], os.O_RDONLY)
        for name in judge.FIFOS:
            os.unlink(name)
        link = (tx, rx)
    del loaded

    ns = fresh_namespace()
    call = call_captured(cell_timeout)
    here = os.getcwd()  # the run folder, before any learner code can chdir
    report.send({"ready": True})
    n = 0
    for cell in program:
        kind = cell["kind"]
        if kind != "judged":
            gid = cell.get("grade_id")
            label = f"<cell {gid or kind}>"
            stop = os.path.join(here, STOP_PREFIX + gid) if gid else None
            error, value, _, err = run_cell(cell["source"], ns, label, cell_timeout, stop)
            if gid and error.startswith("_CellTimeout") and STOPPED_BY_KERNEL not in error:
                report.send({"timeout": gid})  # the kernel's copy of the cell stops too
            if kind == "test":
                s, why = score(float(cell["points"]), error, err, value)
                report.send({"n": n, "grade_id": cell["grade_id"], "score": s, "why": why})
                n += 1
        if (kind == "judged" or cell.get("sync")) and link is not None:
            if not judge.serve(*link, ns, cell["at"], cell["grade_id"], call):
                link = None  # the judge went away: its cells get no verdict
    report.send({"done": True})
    report.close()
    os._exit(0)  # no atexit hooks or finalizers of learner objects after the report
