"""The instructor's side: everything that runs only on the instructor's machine.

No notebook imports this package and no module of ``memlab.grading`` (what a learner's kernel
loads) imports it: the contract lives in pyproject.toml ([tool.importlinter]) and runs in
``make test`` (tests/test_layers.py). See docs/ARCHITECTURE.md.

- :mod:`memlab.autograde.cli`: the commands (``python -m memlab.autograde ...``)
- :mod:`memlab.autograde.course`: nbgrader 0.9.6 through its Python API
- :mod:`memlab.autograde.review`: the review list of flagged answers and 07's clean regrade
- :mod:`memlab.autograde.assignments`: what each assignment needs of the grader (one registry)
- :mod:`memlab.autograde.batch`: grading a whole class (intake, jobs, processes, runner,
  merge, report, orchestrated by ``batch.grade_class``)
- :mod:`memlab.autograde.security`: what keeps learner code in its box (static audit,
  Landlock and bubblewrap sandboxes, the grader's kernel, verdicts outside the kernel);
  imports nothing of ``batch``
"""
