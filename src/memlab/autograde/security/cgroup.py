"""A process-count (and memory) cgroup per grading job, where this machine lets the grader make one.

Used by: :mod:`memlab.autograde.batch.processes` (each grading child enters its own cgroup
before it forks a kernel; the process that started it empties and removes the cgroup when the
job ends, however it ended), tests/grading/test_confine.py.

Why: the Landlock sandbox has no PID namespace, and the grader often runs as root, which
``RLIMIT_NPROC`` does not bound. A cgroup gives both what a sweep of the process tree cannot: a
hard bound on how many processes a job may have at once (``pids.max``: a fork loop gets
``EAGAIN``), and the exact set of the job's processes, whichever session or parent they moved
to, so that every one of them dies with the job (killed until the cgroup is empty; cgroup v2's
``cgroup.kill`` does it in one write). A memory cgroup adds a bound on the job's resident memory
(kernels, re-runs and the grading child together), where ``RLIMIT_AS`` bounds each process alone.

Where it works: cgroup v1 with writable ``pids`` (and ``memory``) hierarchies (root in a
container, as in CI), or a cgroup v2 subtree delegated to the grader's user with the ``pids``
controller enabled. Elsewhere :func:`enter` returns ``None`` and nothing changes: the sandbox's
own limits and the subreaper's sweep remain (autograder/README.md, Security).
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Callable, Iterable

__all__ = ["available", "enter", "empty", "members", "kill_until_gone", "PREFIX"]

V1 = Path("/sys/fs/cgroup")
PREFIX = "memlab-job-"


def _v2_base() -> Path | None:
    if not (V1 / "cgroup.controllers").exists():
        return None
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return V1 / line[3:].lstrip("/")
    except OSError:
        return None
    return None


def _own_v1(controller: str) -> Path | None:
    """This process's cgroup in the v1 hierarchy of ``controller`` (a job's cgroup goes below
    it, so that whatever bounds the grader bounds its jobs too)."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _n, ctls, path = line.split(":", 2)
            if controller in ctls.split(","):
                return V1 / controller / path.lstrip("/")
    except (OSError, ValueError):
        return None
    return None


def _paths(name: str) -> list[Path]:
    """Where the job cgroup ``name`` is: below the caller's own cgroup (or beside it, when the
    caller is in that job cgroup itself)."""
    base = _v2_base()
    owns = [base] if base is not None else [_own_v1(ctl) for ctl in ("pids", "memory", "cpu")]
    out = []
    for own in owns:
        if own is not None and own.name == name:
            own = own.parent
        if own is not None and (own / "cgroup.procs").exists():
            out.append(own / name)
    return out


def available() -> bool:
    """Whether :func:`enter` works here: an empty job cgroup with a pids controller can be made
    (and is removed again)."""
    paths = _paths(f"{PREFIX}probe-{os.getpid()}")
    made = []
    try:
        for path in paths:
            path.mkdir()
            made.append(path)
        return any((path / "pids.max").exists() for path in made)
    except OSError:
        return False
    finally:
        for path in made:
            try:
                path.rmdir()
            except OSError:
                pass


def enter(name: str, pids_max: int, memory_bytes: int = 0, cpus: float = 0.0) -> list[Path] | None:
    """Make the cgroup(s) ``name`` (a ``PREFIX`` name), set the limits, and move this process
    in; its children inherit it. Returns the folders, or ``None`` where this machine does not
    let the grader do it (then nothing was changed). ``cpus``: at most that many cores' time
    (where the cpu controller is there); a job of its own cgroup also gets its fair share
    against the others, however many threads a learner starts."""
    made: list[Path] = []
    try:
        for path in _paths(name):
            path.mkdir()
            made.append(path)
            if (path / "pids.max").exists():
                (path / "pids.max").write_text(str(int(pids_max)))
            if memory_bytes > 0:
                for f in ("memory.limit_in_bytes", "memory.max"):
                    if (path / f).exists():
                        (path / f).write_text(str(int(memory_bytes)))
            if cpus > 0:
                period = 100_000
                if (path / "cpu.max").exists():
                    (path / "cpu.max").write_text(f"{int(cpus * period)} {period}")
                elif (path / "cpu.cfs_quota_us").exists():
                    (path / "cpu.cfs_period_us").write_text(str(period))
                    (path / "cpu.cfs_quota_us").write_text(str(int(cpus * period)))
            (path / "cgroup.procs").write_text(str(os.getpid()))
        if not made or not any((p / "pids.max").exists() for p in made):
            raise OSError("no pids controller")
        return made
    except OSError:
        for path in made:
            _leave(path)
            try:
                path.rmdir()
            except OSError:
                pass
        return None


def members(name: str) -> set[int]:
    out: set[int] = set()
    for path in _paths(name):
        try:
            out |= {int(x) for x in (path / "cgroup.procs").read_text().split()}
        except (OSError, ValueError):
            pass
    return out


def _leave(path: Path) -> None:
    """Move this process out of ``path`` (back to the cgroup above), if it is in it."""
    try:
        if str(os.getpid()) in (path / "cgroup.procs").read_text().split():
            (path.parent / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        pass


def kill_until_gone(find: Callable[[], Iterable[int]], limit_s: float, pause_s: float = 0.01,
                    between: Callable[[], object] | None = None) -> int:
    """SIGKILL every pid ``find()`` returns, and again, until it returns none (a process that
    forked between two looks is caught on the next) or ``limit_s`` seconds pass; ``between``
    runs after each round (the subreaper reaps there). Returns how many pids were killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        found = list(find())
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        if between is not None:
            between()
        time.sleep(pause_s)
    return len(killed)


def empty(name: str, limit_s: float = 20.0) -> int:
    """Kill every process of the cgroup ``name`` except the caller, until none is left (for at
    most ``limit_s`` seconds), and remove it. Returns how many processes were killed."""
    paths = [p for p in _paths(name) if p.exists()]
    if not paths:
        return 0
    for path in paths:
        _leave(path)
        if (path / "cgroup.kill").exists():
            try:
                (path / "cgroup.kill").write_text("1")
            except OSError:
                pass
    killed = kill_until_gone(lambda: members(name) - {os.getpid()}, limit_s, pause_s=0.02)
    for path in paths:
        for _ in range(50):
            try:
                path.rmdir()
                break
            except OSError:  # a killed process not yet reaped by its parent
                time.sleep(0.05)
    return killed
