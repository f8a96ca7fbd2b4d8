"""A released copy of the course for a benchmark: ``released_course(root, names)`` copies the
nbgrader config and the chosen assignments of solutions/ under ``root`` (root/autograder,
root/solutions), releases them there with the course's own ``release`` and returns the config
path. Shared by the benchmarks that grade (grading_speed, sandbox_overhead, vs_nbgrader)."""
from __future__ import annotations

import shutil
from pathlib import Path

from memlab.autograde import course as instructor

ROOT = Path(__file__).resolve().parents[1]


def released_course(root: Path, names: list[str]) -> Path:
    (root / "autograder").mkdir(parents=True)
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", root / "autograder")
    for name in names:
        shutil.copytree(ROOT / "solutions" / name, root / "solutions" / name,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    config = root / "autograder" / "nbgrader_config.py"
    instructor.release(names, api=instructor.make_api(config))
    return config
