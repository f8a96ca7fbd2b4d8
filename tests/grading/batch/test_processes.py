"""memlab.autograde.batch.processes: the parts of the grading processes that run without a
kernel (the child's environment, the line reader that stops with its parent)."""
from __future__ import annotations

import os

from memlab.autograde.batch import processes


def test_child_env_names_no_learner_path():
    env = processes._child_env()
    assert isinstance(env, dict) and all(isinstance(v, str) for v in env.values())
    assert "PYTHONPATH" not in env or "" not in env["PYTHONPATH"].split(os.pathsep)


def test_lines_stop_at_end_of_stream():
    r, w = os.pipe()
    os.write(w, b"one\ntwo\n")
    os.close(w)
    lines = list(processes._lines_while_parent_lives(r, poll_s=0.05, parent=os.getpid()))
    assert [line.strip() for line in lines if line.strip()] == ["one", "two"]
