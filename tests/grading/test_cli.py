"""The instructor's command under its three names: ``python -m memlab.autograde`` (the README's),
``python -m memlab.grading.instructor`` (the name before the two-systems split) and the short
name ``python -m memlab.instructor``; each lists the same commands."""
from __future__ import annotations

import subprocess
import sys

import pytest

COMMANDS = ("release", "autograde", "feedback", "export", "reviews", "grade-class")


@pytest.mark.parametrize("module", ["memlab.autograde", "memlab.grading.instructor",
                                    "memlab.instructor"])
def test_every_name_runs_the_same_cli(module):
    proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert all(c in proc.stdout for c in COMMANDS), proc.stdout


def test_an_unknown_command_fails_with_usage():
    proc = subprocess.run([sys.executable, "-m", "memlab.autograde", "grade-everything"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


def test_plain_autograde_says_it_runs_learner_code_unprotected(tmp_path):
    """`autograde` is nbgrader's own (issue #30): it says so at every run, before anything runs,
    and in its help; the protections are grade-class's."""
    proc = subprocess.run([sys.executable, "-m", "memlab.autograde", "--config",
                           str(tmp_path / "missing.py"), "autograde", "00_setup"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "nbgrader config not found" in proc.stderr, proc.stderr
    assert proc.stderr.index("WARNING: `autograde` is nbgrader's plain autograde") < (
        proc.stderr.index("nbgrader config not found")), proc.stderr
    assert "grade-class" in proc.stderr
    helped = subprocess.run([sys.executable, "-m", "memlab.autograde", "--help"],
                            capture_output=True, text=True, timeout=120).stdout
    assert "UNSANDBOXED" in helped, helped
