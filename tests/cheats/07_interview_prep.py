"""Cheats the tests of 07_interview_prep must reject (loaded by tests/notebooks/test_nbgrader_pipeline.py).

Each entry is a student whose submission is the released notebook with one answer cell
replaced; ``expect`` gives the points each test cell must award it.

Not here, on purpose: replacing ``ml.interview.grade`` itself. Code in the learner's kernel can
always fool a test cell that runs there; that case is caught outside the kernel by
``python -m memlab.grading.interview review`` (a clean regrade of the literal answers), which
tests/grading/test_interview.py checks on an executed notebook.
"""

VARIANTS = {
    # A patched grading engine: ml.interview.grade uses its own copy of memlab.grading.answers.grade.
    "patched_engine": dict(notebook="07_interview_prep", grade_id="answer_q1",
                           expect={"test_q1": 0}, source='''
ml.rubric.grade_numeric = lambda *args, **kwargs: ml.rubric.Result(1.0)
answer_q1 = "1 GB"
'''),
    # A float whose == is always true: read through float's own slot, it is just 1.0.
    "float_subclass": dict(notebook="07_interview_prep", grade_id="answer_q6",
                           expect={"test_q6": 0}, source='''
class _AlwaysEqual(float):
    def __eq__(self, other):
        return True
    __hash__ = float.__hash__

answer_q6 = _AlwaysEqual(1.0)
'''),
    # Ticking every box of a multiple-choice question (2 right of 6): wrong picks cancel.
    "every_box": dict(notebook="07_interview_prep", grade_id="answer_q4", expect={"test_q4": 0},
                      source='answer_q4 = ["a", "b", "c", "d", "e", "f"]'),
    # Ticking every box of Q30 (3 right of 6): the three wrong picks cancel the three right ones.
    "every_box_q30": dict(notebook="07_interview_prep", grade_id="answer_q30", expect={"test_q30": 0},
                          source='answer_q30 = "a, b, c, d, e, f"'),
    # Ticking every box of Q39 (3 right of 6): the three wrong picks cancel the three right ones.
    "every_box_q39": dict(notebook="07_interview_prep", grade_id="answer_q39", expect={"test_q39": 0},
                          source='answer_q39 = ["a", "b", "c", "d", "e", "f"]'),
    # Every diagnosis at once for Q34's out-of-memory message: one label is required.
    "every_letter_q34": dict(notebook="07_interview_prep", grade_id="answer_q34", expect={"test_q34": 0},
                             source='answer_q34 = "a, b, c, d"'),
    # A range wide enough to hold any per-GPU estimate of Q37: one value is required.
    "range_q37": dict(notebook="07_interview_prep", grade_id="answer_q37", expect={"test_q37": 0},
                      source='answer_q37 = "between 10 GB and 60 GB"'),
    # A KV-cache answer made of the rubric's keywords.
    "kv_keyword_list": dict(notebook="07_interview_prep", grade_id="answer_q33", expect={"test_q33": 0},
                            source='answer_q33 = ("KV cache, keys, values, past tokens, recompute, new '
                                   'token, linear, sequence, batch, exceeds weights, GQA, shared kv '
                                   'heads, heads/kv_heads, paged attention, 8-bit")'),
    # The question copied as the answer.
    "copied_question": dict(notebook="07_interview_prep", grade_id="answer_q9", expect={"test_q9": 0},
                            source='answer_q9 = ("Why does gradient checkpointing reduce memory at '
                                   'the cost of training time, rather than being a free '
                                   'optimization?")'),
    # A keyword list for a text question.
    "keyword_list": dict(notebook="07_interview_prep", grade_id="answer_q21", expect={"test_q21": 0},
                         source='answer_q21 = ("mixed precision, bf16, gradient checkpointing, '
                                'recompute, gradient accumulation, effective batch size, last '
                                'resort, training dynamics, GPU utilization, ZeRO")'),
}
