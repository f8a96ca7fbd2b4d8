"""Answer grading for GPU Memory Lab: numbers with units, choices, orderings and short text.

Used by: the graded test cells of every assignment (``ml.rubric.grade_*(...)`` then
``result.points(max_points)`` as the cell's last expression, which nbgrader reads as
partial credit), the self-study checks (``result.report()``, ``Rubric.model_answer``) and
:mod:`memlab.grading.interview.bank` (07). A graded test cell::

    '''Q3: why checkpointing costs time (2 points, partial credit).'''
    result = ml.rubric.grade_text(answer_q3, "checkpointing_cost")
    print(result.report())
    result.points(2)

Every grader returns a :class:`Result`: a ``score`` in [0, 1], feedback lines, and
``needs_review`` with a reason when the grade is uncertain. Learner input never raises:
a wrong type, a bad string or an absurd length scores 0 with a message. Instructor
mistakes (an unknown unit, a rubric pattern that does not compile) do raise.

This module is the public face; the work is done by its parts, which import each other
in one direction only (no import cycle):

- :mod:`memlab.grading.answers.result`: :class:`Result` and the reading of untrusted learner values;
- :mod:`memlab.grading.answers.quantities`: ``grade_numeric`` / ``parse_quantity`` (numbers and units);
- :mod:`memlab.grading.answers.choices`: ``grade_choice`` / ``grade_ordering``;
- :mod:`memlab.grading.answers.spelling`: typo tolerance for written answers;
- :mod:`memlab.grading.answers.concepts`: the concept-rubric engine (:class:`Rubric`, :class:`Concept`,
  :class:`Misconception`, ``normalize``, ``gap``; asserted / denied / named ideas);
- :mod:`memlab.grading.answers.bank`: the course's rubrics, built with :mod:`memlab.grading.answers.concepts`;
- this module: ``grade_text(answer, rubric_id)``, which looks the id up in the bank.
"""
from __future__ import annotations

import dataclasses as _dataclasses
import importlib as _importlib
from typing import Sequence

from . import result as _answers, choices as _choices, concepts as _concepts
from . import quantities as _quantities, bank as _rubric_bank, spelling as _spelling

# ``importlib.reload(memlab.rubric)`` (04's and 05's test cells: "a fresh copy of the grader")
# re-executes every part too, in dependency order, so nothing a notebook patched survives.
if globals().get("_LOADED"):
    for _part in (_answers, _spelling, _quantities, _choices, _concepts, _rubric_bank):
        _importlib.reload(_part)

from .result import Result  # noqa: E402
from .choices import grade_choice, grade_ordering  # noqa: E402
from .concepts import Concept, Misconception, Rubric, gap, grade_rubric, normalize  # noqa: E402
from .quantities import grade_numeric, parse_quantity  # noqa: E402
from .bank import RUBRICS  # noqa: E402

_LOADED = True

__all__ = [
    "Result", "Concept", "Misconception", "Rubric",
    "grade_text", "grade_numeric", "grade_choice", "grade_ordering",
    "parse_quantity", "normalize", "gap", "get_rubric", "rubric_ids",
]


def rubric_ids() -> list[str]:
    """Ids of the rubrics in :mod:`memlab.grading.answers.bank`."""
    return sorted(RUBRICS)


def get_rubric(rubric: str | Rubric) -> Rubric:
    """A :class:`Rubric` given itself or its id in the rubric bank."""
    if isinstance(rubric, Rubric):
        return rubric
    if type(rubric) is str and rubric in RUBRICS:
        return RUBRICS[rubric]
    raise ValueError(f"unknown rubric {rubric!r}; known: {sorted(RUBRICS)}")


def grade_text(answer: object, rubric: str | Rubric, require: Sequence[str] = ()) -> Result:
    """Grade a short free-text answer with a concept rubric (an id from the bank or a
    :class:`Rubric`). ``require``: names of the rubric's concepts this question asks for (a
    notebook that asks "and what does it cost?"): one left out caps the score below full
    marks. See :mod:`memlab.grading.answers.concepts` for the method and its limits."""
    rb = get_rubric(rubric)
    if require:
        key = (id(rb), tuple(require))
        hit = _REQUIRED.get(key)
        if hit is None or hit[0] is not rb:   # one variant per rubric and parts, built once
            hit = _REQUIRED[key] = (rb, _dataclasses.replace(rb, required=tuple(require)))
        rb = hit[1]
    return grade_rubric(answer, rb)


_REQUIRED: dict[tuple[int, tuple[str, ...]], tuple[Rubric, Rubric]] = {}
