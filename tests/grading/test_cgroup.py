"""memlab.autograde.security.cgroup: a pids cgroup per grading job (where the machine allows one).

A child process enters a job cgroup with a small ``pids.max`` and tries to start many detached
processes (each in its own session, as learner code that wants to outlive its job would): the
bound holds (fork fails with EAGAIN), and ``empty`` kills every one of them, wherever they
moved, and removes the cgroup.
"""
from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from memlab.autograde.security import cgroup

CHILD = r"""
import os, subprocess, sys, time
from memlab.autograde.security import cgroup
if cgroup.enter(sys.argv[1], int(sys.argv[2])) is None:
    print("unavailable", flush=True)
    sys.exit(0)
started = 0
for _ in range(120):
    try:
        subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(300)", sys.argv[1]],
                         start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        started += 1
    except (BlockingIOError, OSError):
        pass
print(started, flush=True)
time.sleep(300)
"""


def _alive(marker: str) -> int:
    out = subprocess.run(
        ["pgrep", "-f", f"time.sleep\\(300\\) {marker}"], capture_output=True, text=True
    )
    return len(out.stdout.split())


def test_a_job_cgroup_bounds_and_ends_every_process():
    name = f"{cgroup.PREFIX}test-{uuid.uuid4().hex[:8]}"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, name, "40"], stdout=subprocess.PIPE, text=True
    )
    try:
        first = child.stdout.readline().strip()
        if first == "unavailable":
            pytest.skip("no writable pids cgroup on this machine (the sweep alone applies)")
        started = int(first)
        assert 0 < started < 40, f"{started} processes started under pids.max=40"
        assert _alive(name) == started
        members = cgroup.members(name)
        assert len(members) == started + 1  # and the child itself
        killed = cgroup.empty(name)
        assert killed == started + 1
        assert _alive(name) == 0 and cgroup.members(name) == set()
        assert not any(p.exists() for p in cgroup._paths(name)), "the cgroup was not removed"
    finally:
        child.kill()
        child.wait()
        cgroup.empty(name)


def test_enter_changes_nothing_where_it_cannot(monkeypatch, tmp_path):
    monkeypatch.setattr(cgroup, "V1", tmp_path)  # no cgroup hierarchy there
    assert cgroup.enter(f"{cgroup.PREFIX}none", 10) is None
    assert list(tmp_path.iterdir()) == []
    assert cgroup.empty(f"{cgroup.PREFIX}none") == 0
