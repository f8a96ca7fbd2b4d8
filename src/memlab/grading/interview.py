"""Assignment 07 "Interview prep": the face notebooks and instructors use (``ml.interview``).

Used by: notebooks/07_interview_prep (each test cell calls :func:`answer_of` and
:func:`grade`; the self-study section calls :func:`study_panel` / :func:`self_check`), and
instructors (``python -m memlab.grading.interview review 07_interview_prep`` or
``python -m memlab.grading.instructor reviews 07_interview_prep``).

This module only re-exports; the work is done in three modules of the grading layer, one
per job, split along who uses them:

- :mod:`memlab.grading.interview_bank`: the question registry (:class:`Question`,
  :data:`QUESTIONS`, :data:`TOPICS`), reading and grading answers (:func:`answer_of`,
  :func:`grade`, :func:`copied_share`), the practice variants (:class:`Practice`,
  :data:`PRACTICE`, :func:`practice`) and the private grading engine (``_PRIVATE``,
  :func:`_load_engine`). Its docstring says what a learner can see, and why.
- :mod:`memlab.grading.interview_panel`: the self-study widgets (:class:`SelfCheck`,
  :class:`StudyPanel`; ipywidgets, imported only when a widget is made).
- :mod:`memlab.grading.interview_review`: the instructor's review list (:class:`ReviewItem`,
  :func:`review_notebook`, :func:`find_reviews`, :func:`format_reviews`,
  :func:`course_reviews`, the clean re-grade outside the kernel, the CLI :func:`main`).

The widgets and the review import the bank, never the reverse, and neither imports this
facade (tests/test_layers.py fails on a cycle). Flat modules rather than a subpackage, like
``rubric`` and the modules it is made of: the private engine is loaded from grading/'s own
files (``_load_engine`` points a private package at this folder), and
``python -m memlab.grading.interview`` and the short name ``memlab.interview``
(``memlab.MODULES``) keep naming this one file.

Importing this module imports the bank first, which loads the private engine: in 07 the
set-up cell does it, before any learner code.
"""
from __future__ import annotations

import sys

# Absolute imports: ``python -m memlab.interview`` (the short name) runs this file as __main__
# with ``memlab`` as its package, where ``.interview_bank`` would not be found.
from memlab.grading.interview_bank import (  # noqa: F401  (re-exported; private ones for tests)
    COPY_SHARE, FULL_TOL, PARTIAL_TOL, PRACTICE, QUESTIONS, REVIEW_MARKER, TOPICS, Practice,
    Question, _engine, _ENGINE, _label_list, _load_engine, _PRIVATE, _question, _rubric,
    answer_of, copied_share, grade, practice,
)
from memlab.grading.interview_panel import SelfCheck, StudyPanel, self_check, study_panel
from memlab.grading.interview_review import (  # noqa: F401
    ReviewItem, _regrade, answer_values, course_reviews, find_reviews, format_reviews, main,
    review_notebook,
)

__all__ = [
    "Question", "QUESTIONS", "TOPICS", "Practice", "PRACTICE", "REVIEW_MARKER",
    "answer_of", "grade", "practice", "self_check", "study_panel", "SelfCheck", "StudyPanel",
    "ReviewItem", "find_reviews", "review_notebook", "format_reviews", "main",
]

if __name__ == "__main__":
    sys.exit(main())
