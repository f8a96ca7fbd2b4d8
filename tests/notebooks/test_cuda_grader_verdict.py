"""04: autocast hard-coded to "cuda" loses the same points on a CUDA grader as on a CPU grader.

On a machine without CUDA, ``torch.autocast("cuda", ...)`` warns and turns itself off: 04's
graded cells fail on the warning (tests/mutants/04_accumulation.py, ``train_autocast_cuda*``,
graded through the real pipeline on this CPU machine). On a machine WITH CUDA it raises no
warning, and a model on the GPU really runs fp16: only a model on the CPU (left in fp32, because
the autocast region is CUDA's) shows the mistake. Both graded cells of ``train_with_accumulation``
therefore run a CPU case on every machine (as 03's ``forward_loss`` tests do).

This test proves the CUDA grader's side on a machine without a GPU: torch.autocast decides to
disable itself by asking ``torch.cuda.amp.common.amp_definitely_not_available()``; answering
False, as a CUDA machine does, gives exactly the CUDA grader's behaviour for the CPU case (no
warning, CUDA autocast on, CPU ops in fp32). The visible and the hidden test cell, run on the
mutated answer in that state, must both fail with a message naming the mistake; the solution
must pass both in the same state (so the failure is the mutant's). The same on real CUDA:
tests/lessons/test_accumulation.py::test_autocast_hard_coded_to_cuda_is_caught_only_by_the_cpu_case_on_cuda
(marked ``gpu``).

The cells run in this process (exec, like a kernel would, markers stripped): about 10 s.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import mutants  # noqa: E402  (tests/mutants/)
from course_support import memlab_namespaces_restored  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _memlab_modules_restored():
    """04's cells run here in-process and ``importlib.reload`` memlab modules (memlab.accumulation
    and, through it, memlab.measure.training_spy): afterwards every memlab module gets its old
    namespace back."""
    with memlab_namespaces_restored():
        yield

ASSIGNMENT = "04_accumulation"
CELLS = ("setup", "train_with_accumulation", "test_train_with_accumulation",
         "test_train_with_accumulation_hidden")
TESTS = CELLS[2:]
MARKERS = re.compile(r"^\s*### (BEGIN|END) (SOLUTION|HIDDEN TESTS)\s*$", re.M)


def _source(nb, grade_id: str) -> str:
    cells = [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id]
    assert len(cells) == 1, f"{ASSIGNMENT}: no cell {grade_id!r}"
    return MARKERS.sub("", cells[0].source)


def _run(nb) -> dict[str, BaseException | None]:
    """Exec the set-up, the answer and the two test cells in one namespace; each test cell's error."""
    ns: dict = {"__name__": "__main__"}
    for gid in CELLS[:2]:
        exec(compile(_source(nb, gid), gid, "exec"), ns)
    assert ns["device"].type == "cpu", "this test simulates a CUDA grader on a machine without one"
    outcome: dict[str, BaseException | None] = {}
    for gid in TESTS:
        try:
            exec(compile(_source(nb, gid), gid, "exec"), ns)
            outcome[gid] = None
        except Exception as exc:  # noqa: BLE001 - the cell's verdict
            outcome[gid] = exc
    return outcome


@pytest.fixture
def cuda_grader(monkeypatch):
    """torch.autocast("cuda", ...) behaves as on a machine with CUDA: enabled, no warning."""
    import torch.cuda.amp.common as amp_common
    monkeypatch.setattr(amp_common, "amp_definitely_not_available", lambda: False)
    monkeypatch.setenv("MPLBACKEND", "Agg")


@pytest.fixture(scope="module")
def solution():
    return nbformat.read(ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)


HARD_CODED = [m for m in mutants.load(ASSIGNMENT) if m.id.startswith("train_autocast_cuda")]


@pytest.mark.slow
def test_solution_passes_both_cells_on_a_simulated_cuda_grader(cuda_grader, solution, capsys):
    outcome = _run(solution)
    assert outcome == {gid: None for gid in TESTS}, outcome
    assert "PASS train_with_accumulation" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("mutant", HARD_CODED, ids=lambda m: m.id)
def test_hard_coded_cuda_fails_both_cells_on_a_simulated_cuda_grader(cuda_grader, solution, mutant):
    assert len(HARD_CODED) >= 2, "the corpus lost its hard-coded 'cuda' mutants"
    outcome = _run(mutants.apply(solution, mutant))
    for gid in TESTS:
        exc = outcome[gid]
        assert isinstance(exc, AssertionError), (
            f"{mutant.id}: {gid} gave {exc!r} on a CUDA grader: it must fail, as it does on a CPU grader")
        text = str(exc)
        assert mutant.says in text and "torch.float32" in text, (
            f"{mutant.id}: {gid} fails without naming the mistake: {text[:600]}")
        # no warning on a CUDA grader: caught by the precision the CPU model ran at
        assert "raised a warning" not in text, text[:600]
