"""The mutation corpus: plausible-wrong solutions every graded exercise must catch (issue 14).

One file per assignment, ``tests/mutants/<assignment>.py``, defines ``MUTANTS: list[Mutant]``.
A mutant is one small edit of one answer cell of the solution notebook, the kind of mistake a
learner really makes. tests/notebooks/test_mutants.py submits every mutant of an assignment as
its own student, grades them all in one batch through the real pipeline
(``memlab.grade_class``, the instructor's ``grade-class`` command) and asserts, per mutant:

* every graded cell in ``lose`` scores below its maximum;
* ``says`` (case-insensitive) appears in the output of at least one losing cell: the feedback
  names the mistake, not just "wrong";
* and, once per assignment, that the unmutated solution (the control student) gets full marks.

Fields:
    id       short name, [a-z0-9_] (it becomes part of a student id)
    cell     grade_id of the ANSWER cell edited
    find     exact substring of that cell's source in solutions/ (must occur exactly once)
    replace  what it becomes
    lose     grade_ids of the graded test cells that must score below their max
    says     phrase the losing cell's output must contain (case-insensitive)
    klass    issue 14's class: 1 undocumented contract, 2 inputs where wrong == right,
             3 device-specific code, 4 (05 only) budgets one answer fits, 5 wrong-cause feedback;
             use 0 for a plain mistake outside the five classes
    why      one line: what learners get wrong (source when there is one)
"""
from __future__ import annotations

import copy
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from course_support import defined_and_read, strip_solution_markers, trim_to_graded  # tests/

__all__ = ["Mutant", "MutantError", "assignments", "load", "apply", "submission", "answers_needed",
           "strip_solution_markers"]

HERE = Path(__file__).resolve().parent
_ID = re.compile(r"^[a-z0-9_]{1,40}$")


class MutantError(ValueError):
    """A mutant that cannot be applied (unknown cell, ``find`` not found exactly once)."""


@dataclass(frozen=True)
class Mutant:
    id: str
    cell: str
    find: str
    replace: str
    lose: tuple[str, ...]
    says: str
    klass: int
    why: str

    def __post_init__(self) -> None:
        if not _ID.match(self.id):
            raise MutantError(f"mutant id {self.id!r}: use 1-40 characters of [a-z0-9_]")
        if not isinstance(self.lose, tuple) or not self.lose or not all(isinstance(g, str) for g in self.lose):
            raise MutantError(f"mutant {self.id}: lose must be a non-empty tuple of grade_ids")
        if not self.says.strip():
            raise MutantError(f"mutant {self.id}: says must name the mistake")
        if self.klass not in range(0, 6):
            raise MutantError(f"mutant {self.id}: klass must be 0-5 (issue 14's classes; 0: none)")
        if self.find == self.replace:
            raise MutantError(f"mutant {self.id}: find == replace, nothing is mutated")


def assignments() -> list[str]:
    """Assignments with a mutants file, sorted."""
    return sorted(p.stem for p in HERE.glob("*.py") if p.stem != "__init__" and not p.stem.startswith("_"))


def load(assignment: str) -> list[Mutant]:
    """``MUTANTS`` of tests/mutants/<assignment>.py (ids checked unique)."""
    path = HERE / f"{assignment}.py"
    spec = importlib.util.spec_from_file_location(f"_mutants_{assignment}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = list(module.MUTANTS)
    ids = [m.id for m in found]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise MutantError(f"{path.name}: duplicate mutant ids {dupes}")
    for m in found:
        if not isinstance(m, Mutant):
            raise MutantError(f"{path.name}: MUTANTS holds a {type(m).__name__}, not a Mutant")
    return found


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def apply(nb, mutant: Mutant):
    """A copy of the solution notebook ``nb`` with ``mutant`` applied (markers kept).

    Raises MutantError, naming the mutant, when ``mutant.cell`` is not exactly one answer cell
    or ``mutant.find`` does not occur exactly once in it."""
    nb = copy.deepcopy(nb)
    cells = [c for c in nb.cells if _meta(c).get("grade_id") == mutant.cell]
    if len(cells) != 1:
        raise MutantError(f"mutant {mutant.id}: {len(cells)} cells have grade_id {mutant.cell!r}, expected 1")
    cell = cells[0]
    if not _meta(cell).get("solution"):
        raise MutantError(f"mutant {mutant.id}: {mutant.cell!r} is not an answer cell (solution: true)")
    n = cell.source.count(mutant.find)
    if n != 1:
        raise MutantError(
            f"mutant {mutant.id}: `find` occurs {n} times in answer cell {mutant.cell!r}, expected exactly "
            f"once (the solution changed? update tests/mutants/):\n{mutant.find}")
    cell.source = cell.source.replace(mutant.find, mutant.replace)
    return nb


def answers_needed(solution_nb, mutant: Mutant | None) -> set[str] | None:
    """grade_ids of the answer cells a mutant's submission fills in (None: all of them).

    The mutated cell; the answer cell each test cell in ``lose`` checks (the nearest answer cell
    above it); and, transitively, every answer cell whose names those cells read (amp_step calls
    forward_loss). The other answers stay as released (``raise NotImplementedError()``), so their
    tests fail at once instead of re-running work no mutant changes."""
    if mutant is None:
        return None
    answers: dict[str, tuple[set[str], set[str]]] = {}
    tested_by: dict[str, str] = {}
    last_answer = None
    for cell in solution_nb.cells:
        m = _meta(cell)
        if m.get("solution") and cell.cell_type == "code":
            last_answer = m["grade_id"]
            answers[last_answer] = defined_and_read(cell.source)
        elif m.get("grade") and not m.get("solution") and last_answer:
            tested_by[m["grade_id"]] = last_answer
    need = {mutant.cell} | {tested_by[g] for g in mutant.lose if g in tested_by}
    todo = list(need)
    while todo:
        used = answers.get(todo.pop(), (set(), set()))[1]
        for gid, (defined, _) in answers.items():
            if gid not in need and defined & used:
                need.add(gid)
                todo.append(gid)
    return need


def submission(solution_nb, released_nb, mutant: Mutant | None = None):
    """What the grader receives for ``mutant`` (None: the control, the solution typed in).

    The released notebook (same cell ids, checksums, locked cells) with the answer cells of
    :func:`answers_needed` holding the solution's code (markers removed; the mutant applied),
    trimmed to what grading needs: markdown, the first code cell (imports, ``device``), answer
    cells and graded test cells. The demo cells in between are left out, as a learner may
    delete them (nbgrader restores deleted *graded* cells, grade_class reports it): they do not
    change a grade, and running them for every mutant would cost minutes. The control student
    is trimmed the same way and must still get full marks, which proves no test needs them."""
    source_nb = apply(solution_nb, mutant) if mutant is not None else solution_nb
    answers = {_meta(c)["grade_id"]: c.source for c in source_nb.cells
               if _meta(c).get("solution") and _meta(c).get("grade_id")}
    need = answers_needed(solution_nb, mutant)
    nb = copy.deepcopy(released_nb)
    seen = set()
    for cell in nb.cells:
        m = _meta(cell)
        gid = m.get("grade_id")
        if m.get("solution") and gid in answers:
            seen.add(gid)
            if need is None or gid in need:
                cell.source = strip_solution_markers(answers[gid])
    missing = sorted(set(answers) - seen)
    if missing:
        raise MutantError(f"answer cells {missing} are in solutions/ but not in the release: run `make release`")
    return trim_to_graded(nb, source_nb)
