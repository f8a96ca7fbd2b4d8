"""Hostile submissions of 01-07 (issue 19), graded in ONE batch by tests/grading/test_hostile.py.

Each entry is the released notebook, blank, with one answer cell replaced by an attack (or its
nbgrader metadata edited). None deserves more than the blank notebook of its assignment. The
``held_by`` field says which layer is expected to stop it: "audit" (memlab.autograde.security.audit, the
answer cell never runs: the reason names the rule), "sandbox" (the code passes the audit and
runs, but bubblewrap shows it nothing: the reason is its own NotImplementedError) or
"precheck" (nbgrader metadata repaired from the release by grade_id).
"""
from __future__ import annotations

# Walks up from its working folder looking for what a grader leaves around and keeps what it
# can READ: a file that opens, or a folder in which a file it can guess (a solution notebook, a
# classmate's submission: the course layout and the classmates' ids are no secret; the verdict
# re-run's program, hidden tests and signing key, while the re-run has not yet removed it) opens.
# Passes the audit (os.path and open() are allowed). Sandboxed it reaches nothing: under
# bubblewrap those paths do not exist, under Landlock they exist but nothing in them opens.
_WALK = '''
import os
_KNOWN = [os.path.join(_a, _f) for _a in ("02_checkpointing", "07_interview_prep")
          for _f in (_a + ".ipynb", "program.json")] + [
    os.path.join(_w, _a, _a + ".ipynb") for _w, _a in (
        ("honest_07", "07_interview_prep"), ("honest_06", "06_sharding"),
        ("honest_01", "01_where_memory_goes"), ("honest_02", "02_checkpointing"))]


def _opens(path):
    try:
        open(path, "rb").close()
        return True
    except OSError:
        return False


_found = []
_d = os.getcwd()
for _ in range(14):
    for _name in ("solutions", "gradebook.db", "submitted", "autograded", "class", "input",
                  "verdict"):
        for _cand in (os.path.join(_d, _name), os.path.join(_d, "autograder", "work", _name)):
            if _opens(_cand) or any(_opens(os.path.join(_cand, _k)) for _k in _KNOWN):
                _found.append(_cand)
    _d = os.path.dirname(_d)
'''

HOSTILE = {
    # --- the helper package hands out the answers (01, 06): forbidden helpers
    "h01_param_bytes": ("01_where_memory_goes", "count_param_bytes", "audit",
                        "def count_param_bytes(model):\n    return ml.param_bytes(model)"),
    "h01_grad_alias": ("01_where_memory_goes", "count_grad_bytes", "audit",
                       "from memlab import grad_bytes as _g\n\ndef count_grad_bytes(model):\n    return _g(model)"),
    "h01_optstate_module": ("01_where_memory_goes", "count_optimizer_state_bytes", "audit",
                            "import memlab.breakdown as _b\n\ndef count_optimizer_state_bytes(opt):\n"
                            "    return _b.optimizer_state_bytes(opt)"),
    "h01_saved_getattr": ("01_where_memory_goes", "count_saved_activation_bytes", "audit",
                          "def count_saved_activation_bytes(fn, model):\n"
                          "    return getattr(ml, 'saved_activation_bytes')(fn)"),
    "h01_calculator_clone": ("01_where_memory_goes", "predict_training_bytes", "audit",
                             "import types\n_e = ml.calculator.estimate\n"
                             "predict_training_bytes = types.FunctionType(_e.__code__, _e.__globals__, 'p')"),
    "h01_breakdown": ("01_where_memory_goes", "predict_training_bytes", "audit",
                      "def predict_training_bytes(*a, **k):\n    return ml.training_step_breakdown(*a, **k)"),
    "h06_fsdp_rows": ("06_sharding", "predict_rank_bytes", "audit",
                      "def predict_rank_bytes(shapes, strategy, world_size):\n"
                      "    return [ml.distributed._fsdp_rows(s[0], world_size, 0) for s in shapes]"),
    "h06_zero1_owner": ("06_sharding", "predict_rank_bytes", "audit",
                        "from memlab.distributed import _zero1_owner as _z\n\n"
                        "def predict_rank_bytes(shapes, strategy, world_size):\n    return _z(shapes, world_size)"),
    # --- tests trust a kernel the learner controls: hooks and patches
    "h02_input_transformer": ("02_checkpointing", "predict_ratio", "audit",
                              "def _drop_asserts(lines):\n    return [l for l in lines if 'assert' not in l]\n"
                              "_drop_asserts.__name__ = 'ipython_escape_commands'\n"
                              "get_ipython().input_transformers_post.append(_drop_asserts)"),
    "h02_transform_cell": ("02_checkpointing", "predict_ratio", "audit",
                           "from IPython.core.interactiveshell import InteractiveShell\n"
                           "InteractiveShell.transform_cell = lambda self, cell: 'pass'"),
    "h02_settrace": ("02_checkpointing", "choose_segments", "audit",
                     "import sys\ndef _skip(frame, event, arg):\n    return None\nsys.settrace(_skip)"),
    "h02_solutions_by_file": ("02_checkpointing", "predict_ratio", "audit",
                              "import os, json\n_root = os.path.dirname(os.path.dirname(os.path.dirname(ml.__file__)))\n"
                              "for _c in json.load(open(os.path.join(_root, 'solutions', '02_checkpointing', "
                              "'02_checkpointing.ipynb')))['cells']:\n    exec(''.join(_c['source']))"),
    "h02_solutions_walk": ("02_checkpointing", "predict_ratio", "sandbox", _WALK +
                           "raise NotImplementedError('found nothing: ' + str(_found)) if not _found else None\n"
                           "def predict_ratio(*a, **k):\n    return 0.5"),
    "h03_setprofile": ("03_mixed_precision", "forward_loss", "audit",
                       "import sys\ndef _p(frame, event, arg):\n    torch.allclose = lambda *a, **k: True\n"
                       "sys.setprofile(_p)"),
    "h03_session_send": ("03_mixed_precision", "forward_loss", "audit",
                         "from jupyter_client.session import Session\n_orig = Session.send\n"
                         "def _send(self, stream, msg, *a, **k):\n    return _orig(self, stream, msg, *a, **k)\n"
                         "Session.send = _send"),
    "h03_execute_result": ("03_mixed_precision", "amp_step", "audit",
                           "def amp_step(*a, **k):\n"
                           "    get_ipython().display_pub.publish({'text/plain': '3'}, metadata={})"),
    "h03_tensor_int": ("03_mixed_precision", "fp16_underflow_fraction", "audit",
                       "torch.Tensor.__int__ = lambda self: 0\n"
                       "def fp16_underflow_fraction(x):\n    return 0.0"),
    "h04_reload_identity": ("04_accumulation", "accumulate_gradients", "audit",
                            "import importlib\nimportlib.reload = lambda m: m"),
    "h04_meta_path": ("04_accumulation", "accumulate_gradients", "audit",
                      "import sys\nclass _Finder:\n    def find_spec(self, *a, **k):\n        return None\n"
                      "sys.meta_path.insert(0, _Finder())"),
    "h04_base_class": ("04_accumulation", "accumulate_lm_gradients", "audit",
                       "torch.optim.Optimizer.zero_grad = lambda self, set_to_none=True: None"),
    "h04_full_batch": ("04_accumulation", "accumulate_gradients", "audit",
                       "def accumulate_gradients(model, loss_fn, inputs, targets, micro_batch_size):\n"
                       "    return ml.accumulation.full_batch_gradients(model, loss_fn, inputs, targets)"),
    "h05_monkey_run_job": ("05_oom_clinic", "configure_job", "audit",
                           "ml.oom.run_job = lambda *a, **k: None"),
    "h05_setattr_fits": ("05_oom_clinic", "configure_job", "audit",
                         "setattr(ml.oom, 'fits', lambda *a, **k: True)"),
    "h05_test_globals": ("05_oom_clinic", "configure_job", "audit",
                         "def configure_job(*a, **k):\n    return globals().get('expected_config')"),
    "h07_grade_text": ("07_interview_prep", "answer_q1", "audit",
                       "ml.rubric.grade_text = lambda *a, **k: 1.0\nanswer_q1 = 'anything'"),
    "h07_main_module": ("07_interview_prep", "answer_q2", "audit",
                        "import sys\nanswer_q2 = sys.modules['__main__'].__dict__.get('expected')"),
    # --- the environment is shared with the grader
    "h06_sigstop_grader": ("06_sharding", "predict_rank_bytes", "audit",
                           "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)"),
    "h07_gradebook_sql": ("07_interview_prep", "answer_q3", "audit",
                          "import sqlite3, os\n_c = sqlite3.connect(os.path.join(os.getcwd(), 'gradebook.db'))\n"
                          "_c.execute(\"UPDATE source_cell SET source = 'pass'\")\n_c.commit()"),
    "h07_sqlite_lock": ("07_interview_prep", "answer_q4", "audit",
                        "import sqlite3\n_c = sqlite3.connect('../../../gradebook.db')\n"
                        "_c.execute('BEGIN EXCLUSIVE')"),
    "h07_swap_classmates": ("07_interview_prep", "answer_q5", "audit",
                            "import os\nos.rename('../../alice/07_interview_prep', '../../tmp')"),
    "h07_detached": ("07_interview_prep", "answer_q6", "audit",
                     "import subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 20; sqlite3 gradebook.db "
                     "\"UPDATE grade SET manual_score = 99\"'], start_new_session=True)"),
    "h07_gradebook_open": ("07_interview_prep", "answer_q7", "sandbox", _WALK +
                           "for _p in _found:\n    if _p.endswith('.db'):\n"
                           "        with open(_p, 'r+b') as _fh:\n            _fh.seek(100)\n"
                           "            _fh.write(b'x' * 4096)\n"
                           "raise NotImplementedError('found nothing: ' + str(_found)) if not _found else None\n"),
    "h07_classmates_open": ("07_interview_prep", "answer_q8", "sandbox", _WALK +
                            "for _p in _found:\n    for _who in ('honest_07', 'honest_06', 'honest_01'):\n"
                            "        for _a in ('07_interview_prep', '06_sharding', '01_where_memory_goes'):\n"
                            "            _t = os.path.join(_p, _who, _a, _a + '.ipynb')\n"
                            "            if os.path.exists(_t):\n                open(_t, 'w').write('{}')\n"
                            "raise NotImplementedError('found nothing: ' + str(_found)) if not _found else None\n"),
    # --- edited nbgrader metadata: repaired from the release by grade_id
    "h01_points_inflated": ("01_where_memory_goes", "test_count_param_bytes", "precheck",
                            {"points": 100}),
    "h02_test_as_answer": ("02_checkpointing", "test_choose_segments", "precheck",
                           {"grade": False, "solution": True, "locked": False,
                            "source": "assert True"}),
    "h03_checksum_and_flags": ("03_mixed_precision", "test_forward_loss", "precheck",
                               {"checksum": "0" * 32, "locked": False, "points": 0,
                                "source": "print('ok')"}),
}

# Learner code in a cell the learner ADDED (no grade_id): audited like an answer cell.
ADDED_CELLS = {
    "h04_added_cell_hook": ("04_accumulation", "accumulate_gradients", "audit",
                            {"add_after": True, "source": "import sys\nsys.settrace(lambda *a: None)"}),
    "h07_added_cell_grader": ("07_interview_prep", "answer_q1", "audit",
                              {"add_after": True, "source": "ml.rubric.grade_text = lambda *a, **k: 1.0"}),
}
HOSTILE.update(ADDED_CELLS)

# Forgeries of the kernel's report about its own test cells, graded with the static audit OFF
# (tests/grading/test_hostile.py::test_verdict_layer_alone): nbgrader's in-kernel verdict is
# fooled, the independent re-run outside the learner's kernel (memlab.autograde.security.verdict), which
# has no IPython shell, display hook or kernel session to hook, is not.
VERDICT_ONLY = {
    "v02_transform_cell": ("02_checkpointing", "predict_ratio", "verdict",
                           "from IPython.core.interactiveshell import InteractiveShell\n"
                           "InteractiveShell.transform_cell = lambda self, cell: 'pass'"),
    "v02_input_transformer": ("02_checkpointing", "choose_segments", "verdict",
                              "get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'])"),
    "v02_displayhook": ("02_checkpointing", "choose_segments", "verdict",
                        "def choose_segments(*a, **k):\n    get_ipython().displayhook(1)\n"
                        "    raise NotImplementedError('not written yet')"),
}
