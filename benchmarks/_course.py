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


# A class as an instructor meets it (issue 30): per assignment, ``students`` honest submissions
# (the solution notebook), one blank (the release as handed out), one broken (its first answer
# cell does not parse) and one whose first answer cell never ends (``while True: pass``).
KINDS = ("honest", "blank", "broken", "timeout")


def a_class(root: Path, names: list[str], students: int, dest: Path,
            mixed: bool = False) -> dict[tuple[str, str], str]:
    """Write a class's submissions under ``dest/<student>/<assignment>/`` (the course released
    under ``root`` by :func:`released_course`): ``students`` honest ones (the solution
    notebook) per assignment, and with ``mixed`` a blank, a broken and a looping one too.
    Returns {(student, assignment): kind}."""
    import nbformat

    kinds: dict[tuple[str, str], str] = {}
    for name in names:
        who = [(f"student{i:02d}", "honest") for i in range(students)]
        if mixed:
            who += [("blank00", "blank"), ("broken00", "broken"), ("loop00", "timeout")]
        for student, kind in who:
            folder = dest / student / name
            src = root / ("solutions" if kind == "honest" else "notebooks") / name
            shutil.copytree(src, folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
            if kind in ("broken", "timeout"):
                path = folder / f"{name}.ipynb"
                nb = nbformat.read(path, as_version=4)
                cell = next(c for c in nb.cells if c.cell_type == "code"
                            and (c.metadata.get("nbgrader") or {}).get("solution"))
                head = "def broken(:\n" if kind == "broken" else "while True:\n    pass\n"
                cell.source = head + cell.source
                nbformat.write(nb, path)
            kinds[(student, name)] = kind
    return kinds
