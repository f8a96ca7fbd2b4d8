"""Grading a whole class: ``grade_class`` over intake < runner < processes < jobs, and the
grader's side of a result (merge, report). docs/ARCHITECTURE.md, "Grading a class"."""
