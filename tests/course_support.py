"""Helpers shared by the tests that run the real nbgrader pipeline (import as
``from course_support import make_course``; tests/ is on sys.path through tests/conftest.py).

A module of its own, not conftest.py: a test folder may have its own conftest.py, and
``from conftest import ...`` would then find the wrong one.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import copy
import os
import re
import shutil
import symtable
import sys
from pathlib import Path
from typing import Iterable, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cores_per_worker() -> int:
    """This process's share of the cores: all of them, or the cores divided among pytest-xdist's
    workers (each may be grading something else at the same time)."""
    return max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))


@contextlib.contextmanager
def memlab_namespaces_restored() -> Iterator[None]:
    """Code inside may ``importlib.reload`` memlab modules (as graded cells do); on exit every
    memlab module imported before gets its old namespace back, so later tests in this worker see
    the same function objects as before (identity checks, sentinels, the guard's originals)."""
    saved = {name: dict(mod.__dict__) for name, mod in list(sys.modules.items())
             if mod is not None and (name == "memlab" or name.startswith("memlab."))}
    try:
        yield
    finally:
        for name, namespace in saved.items():
            mod = sys.modules.get(name)
            if mod is not None:
                mod.__dict__.clear()
                mod.__dict__.update(namespace)



def pids_with_arg(text: str) -> list[int]:
    """Processes whose command line mentions ``text``, this one left out (Linux /proc; empty
    elsewhere): what a test must find dead once the job that started them is over."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if text in entry.joinpath("cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(entry.name))
        except OSError:
            continue
    return [p for p in pids if p != os.getpid()]

def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.M)


def strip_solution_markers(source: str) -> str:
    """The solution's answer as a learner would type it: the marker lines removed."""
    return _MARKER.sub("", source)


def defined_and_read(source: str) -> tuple[set[str], set[str]]:
    """(names a cell defines at top level, names it reads anywhere); empty for a syntax error."""
    try:
        tree = ast.parse(strip_solution_markers(source))
    except SyntaxError:
        return set(), set()
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return defined, used


def free_names(source: str) -> set[str]:
    """Names a cell reads from the notebook's globals (not bound in the cell or its functions)."""
    try:
        top = symtable.symtable(strip_solution_markers(source), "<cell>", "exec")
    except SyntaxError:
        return set()
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    free: set[str] = set()

    def walk(table) -> None:
        for sym in table.get_symbols():
            if sym.is_referenced() and (table is top or sym.is_global()) and sym.get_name() not in bound:
                free.add(sym.get_name())
        for child in table.get_children():
            walk(child)

    walk(top)
    return free


def frame_problems(cells) -> list[str]:
    """What a notebook lacks of the learner's frame (docs/AUTHORING.md, "Notebook shape"): the
    learning outcomes and the Run All note in the title cell, a "What you can now do" cell with
    a cheat sheet, and a link to the next notebook (or, in the last one, back to the start)."""
    md = ["".join(c.get("source", "")) for c in cells if c.get("cell_type") == "markdown"]
    problems = []
    if not md or "By the end you can" not in md[0]:
        problems.append("the title cell lists no learning outcomes ('By the end you can:')")
    if not md or "Run All" not in md[0]:
        problems.append("the title cell does not say how Run All behaves")
    summary = [t for t in md if t.startswith("## What you can now do")]
    if not summary:
        problems.append("no '## What you can now do' cell")
    elif "You can now" not in summary[0] or "Cheat sheet" not in summary[0]:
        problems.append("the summary has no 'You can now' bullets or no cheat sheet")
    elif not re.search(r"\*\*Next:\*\* \[[^]]+\]\(\.\./\d\d_\w+/\d\d_\w+\.ipynb\)|"
                       r"That was the last notebook", summary[0]):
        problems.append("the summary links to no next notebook")
    return problems


def learner_dependent_cells(cells) -> list[int]:
    """Indices of the ungraded code cells that run what a learner wrote: they read a name an
    answer cell defines, or one such a cell defines from it. A half-written answer can make any
    of them raise, so each must carry the ``raises-exception`` tag (Run All goes on)."""
    tainted: set[str] = set()
    out = []
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell.get("source", ""))
        defined, _ = defined_and_read(source)
        m = nbgrader_meta(cell)
        if m.get("solution"):
            tainted |= defined
        elif not m.get("grade") and free_names(source) & tainted:
            out.append(i)
            tainted |= defined
    return out


def _graded(cell) -> bool:
    m = nbgrader_meta(cell)
    return bool(m.get("solution") or m.get("grade"))


def setup_cells_needed(solution_nb, extra_sources: Iterable[str] = ()) -> set[str]:
    """grade_ids of the read-only code cells that define names the graded cells (answers and
    tests of ``solution_nb``, hidden parts included) or ``extra_sources`` (what a submission put
    in its own cells) read from the notebook, transitively: 05's ``SPEC``, ``BUDGETS`` and
    ``ref``, 06's ``runs``. The other demo cells may be left out of a submission."""
    code = [c for c in solution_nb.cells if c.cell_type == "code"]
    graded = [c for c in code[1:] if _graded(c)]
    other = [c for c in code[1:] if not _graded(c)]
    provided = set(dir(builtins)) | (defined_and_read(code[0].source)[0] if code else set())
    for c in graded:
        provided |= defined_and_read(c.source)[0]
    wanted = set()
    for src in [c.source for c in graded] + list(extra_sources):
        wanted |= free_names(src) - provided
    keep: set[str] = set()
    grew = True
    while grew:
        grew = False
        for c in other:
            gid = nbgrader_meta(c).get("grade_id")
            if gid and gid not in keep and defined_and_read(c.source)[0] & wanted:
                keep.add(gid)
                wanted |= free_names(c.source) - provided
                grew = True
    return keep


def trim_to_graded(nb, solution_nb, keep: Iterable[str] = ()):
    """A copy of the submission ``nb`` without the demo cells grading does not need.

    Kept: markdown, the first code cell (imports, ``device``), answer and graded test cells,
    cells the learner added (no grade_id), the cells named in ``keep``, and the read-only cells
    that define names any kept cell reads (:func:`setup_cells_needed`, from the solution's
    graded cells and the submission's own cells). A learner may delete demo cells too (nbgrader
    restores only graded ones): they do not change a grade, and running them for every variant
    of a corpus costs minutes. Controls trimmed the same way must keep full marks (the
    mutation corpus's control student proves it per assignment)."""
    keep = set(keep)
    own = [c.source for c in nb.cells if c.cell_type == "code"
           and (nbgrader_meta(c).get("solution") or not nbgrader_meta(c).get("grade_id")
                or nbgrader_meta(c).get("grade_id") in keep)]
    keep |= setup_cells_needed(solution_nb, own)
    nb = copy.deepcopy(nb)
    cells, first_code = [], True
    for cell in nb.cells:
        gid = nbgrader_meta(cell).get("grade_id")
        if (cell.cell_type != "code" or first_code or _graded(cell) or not gid or gid in keep):
            cells.append(cell)
        if cell.cell_type == "code":
            first_code = False
    nb.cells = cells
    return nb


def with_solution_answers(release, solution):
    """The release with every answer cell holding the solution's answer (markers removed): an
    honest submission, whole (the controls and classmates of the hostile corpora)."""
    nb = copy.deepcopy(release)
    answers = {nbgrader_meta(c).get("grade_id"): c.source for c in solution.cells
               if nbgrader_meta(c).get("solution")}
    for c in nb.cells:
        gid = nbgrader_meta(c).get("grade_id")
        if gid in answers:
            c.source = strip_solution_markers(answers[gid])
    return nb


def with_answer(nb, grade_id: str, source: str):
    """A copy of ``nb`` whose answer cell ``grade_id`` holds ``source``."""
    nb = copy.deepcopy(nb)
    cells = [c for c in nb.cells if nbgrader_meta(c).get("grade_id") == grade_id]
    assert len(cells) == 1, f"no answer cell {grade_id!r}"
    cells[0].source = source
    return nb


def make_course(root: Path, assignments: Iterable[str] | None = None):
    """A temporary course under ``root``: solutions/ (all, or ``assignments``) and the nbgrader
    config, released with the course's own ``release``. Returns the ``NbGraderAPI``.

    Fails (not skips) when the registered ``python3`` kernel is not this venv's Python:
    autograde would start the wrong interpreter."""
    from memlab.autograde import course
    from memlab.tools import envcheck

    kernel = envcheck.check_kernel()
    if not kernel.ok:
        pytest.fail(f"{kernel.line()}\nautograde would start the wrong Python: run `make test`")
    import matplotlib.pyplot  # noqa: F401  font cache built here, not on a notebook's stderr

    ignore = shutil.ignore_patterns(".ipynb_checkpoints")
    names = list(assignments) if assignments is not None else None
    if names is None:
        shutil.copytree(ROOT / "solutions", root / "solutions", ignore=ignore)
    else:
        for name in names:
            shutil.copytree(ROOT / "solutions" / name, root / "solutions" / name, ignore=ignore)
    (root / "autograder").mkdir()
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", root / "autograder")
    api = course.make_api(root / "autograder" / "nbgrader_config.py")
    assert Path(api.coursedir.root) == root, "the config must compute the course root from its own path"
    course.release(names, api=api)
    return api


def course_notebooks(api, assignment: str):
    """(released, solution) notebooks of ``assignment`` in the course ``api`` (make_course)."""
    import nbformat

    root = Path(api.coursedir.root)
    return tuple(nbformat.read(root / folder / assignment / f"{assignment}.ipynb", as_version=4)
                 for folder in ("notebooks", "solutions"))
