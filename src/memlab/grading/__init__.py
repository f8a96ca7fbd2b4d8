"""Grading in the learner's kernel: everything a notebook's graded cells load.

Layer 3 of memlab (docs/ARCHITECTURE.md): may import ``memlab.measure`` and ``memlab.lessons``,
never ``memlab.autograde`` (the instructor's side) or ``memlab.tools`` (import-linter contracts
in pyproject.toml).

- guard:       the in-kernel guard graded test cells call (``ml.grading.guard()``)
- visible:     visible tests with nbgrader's verdict (``ml.visible_test``, ``ml.waiting_for``)
- answers:     the answer-grading engine; its face is ``ml.rubric`` (answers.grade: grade_text /
               grade_numeric / grade_choice / grade_ordering), made of result (Result, untrusted
               input), quantities, choices, spelling, concepts and bank (the course's rubrics)
- interview:   07's face (``ml.interview``): bank (questions, grading, practice variants, a
               private copy of the engine) and panel (self-study widgets)
- assignments: what each assignment needs of the grader (data; read by the guard here and by
               the instructor's side)
- instructor:  ``python -m memlab.grading.instructor``, the instructor's command under its old
               name (memlab.autograde.cli; a learner's kernel never imports it)

``ml.grading.guard()`` and the guard's other names are re-exported here, so test cells
written as ``import memlab.grading; ml.grading.guard()`` keep working.
"""
from .guard import WATCHED, TamperError, guard, original, tampered

__all__ = ["TamperError", "guard", "tampered", "original", "WATCHED"]
