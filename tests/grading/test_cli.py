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
