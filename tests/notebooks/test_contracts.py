"""Every hidden test states the contract it proves (issue #33): the clauses the instructions
promise, one comment line each, and each clause's check marked where it starts.

A hidden-test cell of a code exercise opens with

    ### BEGIN HIDDEN TESTS
    # CONTRACT of <function> (...):
    # [C1] inputs: ...
    # [C2] side effects: ...
    # [C3] unchecked: <clause> -- <why no check is possible on a CPU grader>

and every clause that is not ``unchecked`` has a marker line ``# [Cn]`` (or ``# [C1][C2] note``)
right before the code that checks it. The markers live in the hidden block, so releases do not
change. 07's cells grade one answer against its key: they have no contract to state.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p for p in (ROOT / "solutions").glob("*/*.ipynb")
                   if not p.name.startswith("07_"))
HEAD = re.compile(r"^# CONTRACT of \w+")
CLAUSE = re.compile(r"^# \[(C\d+)\] (\S[^:]{0,40}): \S")
MARKER = re.compile(r"^\s*# ((?:\[C\d+\])+)(?: .*)?$")
# at most this many clauses, over the whole course, say no check is possible (only get fewer)
UNCHECKED = 6


def _hidden_cells(path: Path):
    for cell in nbformat.read(path, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and "### BEGIN HIDDEN TESTS" in cell.source:
            yield meta["grade_id"], cell.source


def _contract(source: str) -> tuple[dict[str, str], list[str]]:
    """(clause id -> its line, the hidden block's lines after the contract)."""
    lines = source.split("### BEGIN HIDDEN TESTS", 1)[1].split("### END HIDDEN TESTS")[0]
    lines = lines.strip("\n").splitlines()
    assert lines and HEAD.match(lines[0]), (
        f"the hidden block must open with '# CONTRACT of <function> ...', not {lines[:1]}")
    clauses, i = {}, 1
    while i < len(lines) and CLAUSE.match(lines[i]):
        cid = CLAUSE.match(lines[i]).group(1)
        assert cid not in clauses, f"clause {cid} stated twice"
        clauses[cid] = lines[i]
        i += 1
    return clauses, lines[i:]


def _marked(body: list[str]) -> dict[str, int]:
    """Clause id -> how many markers stand right before code (not before another comment block
    that ends the cell)."""
    seen: dict[str, int] = {}
    for k, line in enumerate(body):
        m = MARKER.match(line)
        if not m:
            continue
        after = [x for x in body[k + 1:] if x.strip() and not x.strip().startswith("#")]
        if after:
            for cid in re.findall(r"C\d+", m.group(1)):
                seen[cid] = seen.get(cid, 0) + 1
    return seen


CELLS = [(p.parent.name, gid, src) for p in NOTEBOOKS for gid, src in _hidden_cells(p)]


@pytest.mark.parametrize("assignment, grade_id, source", CELLS,
                         ids=[f"{a}:{g}" for a, g, _ in CELLS])
def test_every_clause_of_the_contract_has_its_check(assignment, grade_id, source):
    clauses, body = _contract(source)
    assert len(clauses) >= 2, f"{assignment} {grade_id}: a contract of {len(clauses)} clause(s)"
    marked = _marked(body)
    stray = sorted(set(marked) - set(clauses))
    assert not stray, f"{assignment} {grade_id}: markers of clauses the contract lacks: {stray}"
    missing = [line for cid, line in clauses.items()
               if cid not in marked and not CLAUSE.match(line).group(2).startswith("unchecked")]
    assert not missing, (f"{assignment} {grade_id}: clauses with no check marked:\n  "
                         + "\n  ".join(missing))


def test_few_clauses_go_unchecked():
    unchecked = [f"{a}:{g}: {line}" for a, g, src in CELLS
                 for line in _contract(src)[0].values() if "] unchecked:" in line]
    assert len(unchecked) <= UNCHECKED, "\n".join(unchecked)


def test_every_code_exercise_has_hidden_tests_to_hold_a_contract():
    assert {a for a, _, _ in CELLS} == {p.parent.name for p in NOTEBOOKS}


def test_the_reader_sees_an_unmarked_clause():
    src = ("### BEGIN HIDDEN TESTS\n# CONTRACT of f (x):\n# [C1] inputs: any n\n"
           "# [C2] result: an int\n# [C1]\nassert f(3) == 3\n### END HIDDEN TESTS")
    clauses, body = _contract(src)
    assert set(clauses) == {"C1", "C2"} and _marked(body) == {"C1": 1}
