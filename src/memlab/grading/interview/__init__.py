"""Assignment 07 "Interview prep" in the learner's kernel: the face notebooks use (``ml.interview``).

Used by: notebooks/07_interview_prep (each test cell calls :func:`answer_of` and
:func:`grade`; the self-study section calls :func:`study_panel` / :func:`self_check`).
The instructor's review of 07's flagged answers is not here: it runs on the instructor's
machine (:mod:`memlab.autograde.review`, ``python -m memlab.autograde reviews``), and nothing
of ``memlab.autograde`` is loaded into a learner's kernel.

This package only re-exports; the work is done in its two modules:

- :mod:`memlab.grading.interview.bank`: the question registry (:class:`Question`,
  :data:`QUESTIONS`, :data:`TOPICS`), reading and grading answers (:func:`answer_of`,
  :func:`grade`, :func:`copied_share`), the practice variants (:class:`Practice`,
  :data:`PRACTICE`, :func:`practice`) and the private grading engine (``_PRIVATE``,
  :func:`_load_engine`: a copy of memlab/grading/answers/ loaded from its files). Its
  docstring says what a learner can see, and why.
- :mod:`memlab.grading.interview.panel`: the self-study widgets (:class:`SelfCheck`,
  :class:`StudyPanel`; ipywidgets, imported only when a widget is made).

The widgets import the bank, never the reverse, and neither imports this facade
(tests/test_layers.py). Importing this package imports the bank first, which loads the
private engine: in 07 the set-up cell does it, before any learner code.
"""
from __future__ import annotations

from memlab.grading.interview.bank import (  # noqa: F401  (re-exported; private ones for tests)
    COPY_SHARE, FULL_TOL, PARTIAL_TOL, PRACTICE, QUESTIONS, REVIEW_MARKER, TOPICS, Practice,
    Question, _engine, _ENGINE, _label_list, _load_engine, _PRIVATE, _question, _rubric,
    answer_of, copied_share, grade, practice,
)
from memlab.grading.interview.panel import SelfCheck, StudyPanel, self_check, study_panel

__all__ = [
    "Question", "QUESTIONS", "TOPICS", "Practice", "PRACTICE", "REVIEW_MARKER",
    "answer_of", "grade", "practice", "self_check", "study_panel", "SelfCheck", "StudyPanel",
]
