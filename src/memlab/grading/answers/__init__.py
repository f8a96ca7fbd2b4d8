"""The answer-grading engine (``ml.rubric`` is :mod:`memlab.grading.answers.grade`).

Its modules import each other relatively and nothing else of memlab but ``measure.units``:
07's bank loads a private copy of them from this folder (memlab.grading.interview.bank).

- :mod:`~memlab.grading.answers.grade`: the public face (grade_text / grade_numeric /
  grade_choice / grade_ordering)
- :mod:`~memlab.grading.answers.result`: Result, the reading of untrusted learner values
- :mod:`~memlab.grading.answers.quantities`, :mod:`~memlab.grading.answers.choices`,
  :mod:`~memlab.grading.answers.spelling`, :mod:`~memlab.grading.answers.concepts`
- :mod:`~memlab.grading.answers.bank`: the course's rubrics (data)
"""
