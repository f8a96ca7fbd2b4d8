"""Grading: everything that decides or records a grade.

Layer 3 of memlab (see docs/ARCHITECTURE.md): may import ``memlab.measure`` and
``memlab.lessons``, never ``memlab.tools``.

- guard:       the in-kernel guard graded test cells call (``ml.grading.guard()``)
- kernel:      the grader's kernel launcher (resource limits, guard imported first)
- rubric:      the graders' public face (``ml.rubric``: grade_text / grade_numeric /
               grade_choice / grade_ordering), made of: answers (Result, untrusted input),
               quantities (numbers and units), choices, spelling (typo tolerance),
               concepts (the concept-rubric engine) and rubric_bank (the course's rubrics)
- interview:   07's face (``ml.interview``), re-exporting: interview_bank (questions,
               grading of answers, practice variants), interview_panel (self-study
               widgets) and interview_review (the instructor's review list)
- grade_class: grading a whole class (orchestration, re-exporting its parts): intake (zip,
               layout, the checks before running), jobs (course bundle, make_job, grade_job),
               warm (warm zygote, grading child, pre-forked kernels), runner (the grading
               in one job's private course), merge (validation, gradebook merge), report
- audit:       static audit of answer cells before anything runs (issue 19)
- sandbox:     bubblewrap around every graded kernel (issue 19)
- instructor:  the instructor's CLI (``python -m memlab.grading.instructor``)

``ml.grading.guard()`` and the guard's other names are re-exported here, so test cells
written as ``import memlab.grading; ml.grading.guard()`` keep working.
"""
from .guard import WATCHED, TamperError, guard, original, tampered

__all__ = ["TamperError", "guard", "tampered", "original", "WATCHED"]
