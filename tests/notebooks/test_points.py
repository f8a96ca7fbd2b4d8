"""Points stated in a notebook's text equal what nbgrader's gradebook will count (issue 14).

nbgrader's maximum for a notebook is the sum of ``points`` over its graded cells (autograded
tests and manually graded answers); that is what learners see in their feedback. The text states
points in two ways, and both are checked for every notebook in solutions/ (and so in the release):

* a total, "Graded work, N points" (or "N points in all / in total"): must equal the maximum;
* a section, a heading or bold line ending in "(N points)" / "· N points": must equal the sum of
  the graded cells after it, up to the next line that states points.

Fast (no kernel): reads cell metadata only.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "solutions").glob("*/*.ipynb"))

TOTAL = re.compile(r"graded work\W+(\d+)\s+points?\b|\b(\d+)\s+points?\s+in\s+(?:all|total)\b", re.I)
SECTION = re.compile(r"^\s*(?:#+|\*\*).*?(?:\(|·|,)\s*(\d+)\s+points?\b", re.I | re.M)


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _stated(nb):
    """[(cell index, kind, points, line)] for every statement of points in markdown cells."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for m in TOTAL.finditer(cell.source):
            found.append((i, "total", int(m.group(1) or m.group(2)), m.group(0)))
        for m in SECTION.finditer(cell.source):
            if not TOTAL.search(m.group(0)):
                found.append((i, "section", int(m.group(1)), m.group(0).strip()))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_points_in_the_text_equal_the_gradebook_maximum(path):
    nb = nbformat.read(path, as_version=4)
    points = [(i, float(_meta(c).get("points", 0))) for i, c in enumerate(nb.cells) if _meta(c).get("grade")]
    maximum = sum(p for _, p in points)
    assert maximum > 0, f"{path.name} has no graded cell"
    stated = _stated(nb)
    problems = []
    for i, kind, n, line in stated:
        if kind == "total" and n != maximum:
            problems.append(f"cell {i} says {line!r}, the gradebook's maximum is {maximum:g}")
    sections = [(i, n, line) for i, kind, n, line in stated if kind == "section"]
    for k, (i, n, line) in enumerate(sections):
        end = sections[k + 1][0] if k + 1 < len(sections) else len(nb.cells)
        got = sum(p for j, p in points if i < j < end)
        if got != n:
            problems.append(f"cell {i} says {line!r}, its graded cells (up to cell {end}) count {got:g}")
    assert not problems, f"{path.relative_to(ROOT)}: " + "; ".join(problems)


def test_the_statement_patterns_find_what_they_should():
    """The patterns are not vacuous: they find the statements of 01, 06 and 07."""
    for name, kinds in (("01_where_memory_goes", {"total", "section"}), ("06_sharding", {"section"}),
                        ("07_interview_prep", {"section"})):
        nb = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
        assert {kind for _, kind, _, _ in _stated(nb)} >= kinds, f"no {kinds} statement found in {name}"
    fake = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("**Graded work, 25 points:** ...")])
    assert _stated(fake)[0][1:3] == ("total", 25)
