"""Every hidden test states the contract it proves (issue #33): the clauses the instructions
promise, one comment line each, and each clause's check marked where it starts.

A hidden-test cell of a code exercise opens with

    ### BEGIN HIDDEN TESTS
    # CONTRACT of <function> (...):
    # [VERDICT] judged: decided where no learner code runs (...)   or   re-run: <why>
    # [C1] inputs: ...
    # [C2] side effects: ...
    # [C3] unchecked: <clause> -- <why no check is possible on a CPU grader>

and every clause that is not ``unchecked`` has a marker line ``# [Cn]`` (or ``# [C1][C2] note``)
right before the code that checks it. The VERDICT line says where the grader decides the cell:
``judged:`` exactly when its grade_id is in the assignment's ``Assignment.judged`` (the judge, a
process that runs no learner code), else ``re-run:`` and why its checks must run beside the
learner's code (autograder/README.md, 3b). The markers live in the hidden block, so releases do
not change. 07's cells grade one answer against its key: they have no contract to state.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from memlab.grading.assignments import ASSIGNMENTS

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p for p in (ROOT / "solutions").glob("*/*.ipynb")
                   if not p.name.startswith("07_"))
HEAD = re.compile(r"^# CONTRACT of \w+")
CLAUSE = re.compile(r"^# \[(C\d+)\] (\S[^:]{0,40}): \S")
MARKER = re.compile(r"^\s*# ((?:\[C\d+\])+)(?: .*)?$")
VERDICT = re.compile(r"^# \[VERDICT\] (judged|re-run): (\S.*)$")
JUDGED = ("decided where no learner code runs "
          "(the learner's function called through the judge's channel)")
# a re-run line names its reason: at least this many words
REASON_WORDS = 5
# at most this many clauses, over the whole course, say no check is possible (only get fewer)
UNCHECKED = 6


def _hidden_cells(path: Path):
    for cell in nbformat.read(path, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and "### BEGIN HIDDEN TESTS" in cell.source:
            yield meta["grade_id"], cell.source


def _hidden_lines(source: str) -> list[str]:
    lines = source.split("### BEGIN HIDDEN TESTS", 1)[1].split("### END HIDDEN TESTS")[0]
    lines = lines.strip("\n").splitlines()
    assert lines and HEAD.match(lines[0]), (
        f"the hidden block must open with '# CONTRACT of <function> ...', not {lines[:1]}")
    return lines


def _verdict(source: str) -> tuple[str, str]:
    """(kind, reason) of the contract's one VERDICT line, right after its CONTRACT line."""
    lines = _hidden_lines(source)
    count = sum("[VERDICT]" in line for line in lines)
    assert count == 1, f"a contract has exactly one '# [VERDICT]' line, this one {count}"
    m = VERDICT.match(lines[1]) if len(lines) > 1 else None
    assert m, ("the line right after '# CONTRACT of ...' must be '# [VERDICT] judged: ...' or "
               f"'# [VERDICT] re-run: <why>', not {lines[1:2]}")
    return m.group(1), m.group(2)


def _check_verdict(kind: str, reason: str, judged: bool) -> None:
    """The VERDICT line agrees with Assignment.judged, and a re-run names its reason."""
    if judged:
        assert kind == "judged" and reason == JUDGED, (
            f"the cell is in Assignment.judged: its line is '# [VERDICT] judged: {JUDGED}', "
            f"not '{kind}: {reason}'")
    else:
        assert kind == "re-run", (
            "the cell is not in Assignment.judged: it is decided in the re-run, "
            "'# [VERDICT] re-run: <why its checks must run beside the learner's code>'")
        assert len(re.findall(r"[A-Za-z]\S*", reason)) >= REASON_WORDS, (
            f"'re-run: {reason}' names no reason: say why the checks must run beside the "
            "learner's code (a module or optimizer passed in, a tracker or spy inside the call, "
            "the function's own code read)")


def _contract(source: str) -> tuple[dict[str, str], list[str]]:
    """(clause id -> its line, the hidden block's lines after the contract)."""
    lines = _hidden_lines(source)
    clauses, i = {}, 1
    if len(lines) > 1 and lines[1].startswith("# [VERDICT]"):
        i = 2
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


@pytest.mark.parametrize("assignment, grade_id, source", CELLS,
                         ids=[f"{a}:{g}" for a, g, _ in CELLS])
def test_every_contract_says_where_the_cell_is_decided(assignment, grade_id, source):
    kind, reason = _verdict(source)
    try:
        _check_verdict(kind, reason, grade_id in ASSIGNMENTS[assignment].judged)
    except AssertionError as err:
        raise AssertionError(f"{assignment} {grade_id}: {err}") from None


def test_the_verdicts_cover_the_judge_and_the_re_run():
    """Every judged hidden test cell says judged:, and the others re-run: (both kinds occur)."""
    kinds = {(a, g): _verdict(src)[0] for a, g, src in CELLS}
    judged = {k for k, v in kinds.items() if v == "judged"}
    assert judged == {(a, g) for a, g in kinds if g in ASSIGNMENTS[a].judged}
    assert judged and len(judged) < len(kinds)


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


_SRC = ("### BEGIN HIDDEN TESTS\n# CONTRACT of f (x):\n{verdict}# [C1] inputs: any n\n"
        "# [C2] result: an int\n# [C1]\nassert f(3) == 3\n### END HIDDEN TESTS")
_REASON = "# [VERDICT] re-run: it passes an nn.Module the learner's code mutates\n"


def test_the_reader_takes_the_verdict_line_and_the_clauses_after_it():
    src = _SRC.format(verdict=_REASON)
    assert _verdict(src) == ("re-run", "it passes an nn.Module the learner's code mutates")
    _check_verdict(*_verdict(src), judged=False)
    assert set(_contract(src)[0]) == {"C1", "C2"}
    judged = _SRC.format(verdict=f"# [VERDICT] judged: {JUDGED}\n")
    _check_verdict(*_verdict(judged), judged=True)


@pytest.mark.parametrize("verdict, judged", [
    ("", False),                                                     # none
    (_REASON + _REASON, False),                                      # two
    ("# [C0] inputs: x\n" + _REASON, False),                         # not right after CONTRACT
    ("# [VERDICT] rerun: it passes an nn.Module the learner's code mutates\n", False),
    ("# [VERDICT] re-run: tracker\n", False),                        # no reason
    ("# [VERDICT] re-run:\n", False),
    (_REASON, True),                                                 # judged, says re-run
    (f"# [VERDICT] judged: {JUDGED}\n", False),                      # re-run, says judged
    ("# [VERDICT] judged: by the judge\n", True),                    # not the judged line
])
def test_the_reader_refuses_a_wrong_verdict_line(verdict, judged):
    src = _SRC.format(verdict=verdict)
    with pytest.raises(AssertionError):
        _check_verdict(*_verdict(src), judged=judged)
