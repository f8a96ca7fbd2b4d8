"""Cheats the hidden tests of 00_setup must reject (loaded by tests/notebooks/test_nbgrader_pipeline.py).

Each entry is a student whose submission is the released notebook with one answer cell
replaced; ``expect`` gives the points each test cell must award it.
"""

VARIANTS = {
    # A table of the visible answers: passes the visible cell, must fail the hidden one.
    "hardcoded": dict(notebook="00_setup", grade_id="tensor_bytes", expect={
        "test_tensor_bytes": 1, "test_tensor_bytes_hidden": 0}, source='''
_ANSWERS = {((), torch.float32): 4, ((10,), torch.float32): 40, ((2, 3), torch.float16): 12,
            ((4, 5, 6), torch.int8): 120, ((3, 0), torch.float64): 0,
            ((256, 256), torch.float32): 262144}

def tensor_bytes(shape, dtype):
    return _ANSWERS.get((tuple(shape), dtype), 4)
'''),
    # An int whose == is always true: the exact type checks must catch it.
    "int_subclass": dict(notebook="00_setup", grade_id="tensor_bytes", expect={
        "test_tensor_bytes": 0, "test_tensor_bytes_hidden": 0}, source='''
class _AlwaysEqual(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__

def tensor_bytes(shape, dtype):
    return _AlwaysEqual(0)
'''),
    # A table of the visible answers plus a fake ml.measure_peak whose "result" has no
    # elements: before memlab.grading.guard() and the test's own torch.empty, this passed the
    # hidden cell (its exact size came from the measurement's result).
    "patched_measure_peak": dict(notebook="00_setup", grade_id="tensor_bytes", expect={
        "test_tensor_bytes": 0, "test_tensor_bytes_hidden": 0}, source='''
_ANSWERS = {((), torch.float32): 4, ((10,), torch.float32): 40, ((2, 3), torch.float16): 12,
            ((4, 5, 6), torch.int8): 120, ((3, 0), torch.float64): 0,
            ((256, 256), torch.float32): 262144}

def tensor_bytes(shape, dtype):
    return _ANSWERS.get((tuple(shape), dtype), 0)

import types as _types

def _fake_peak(fn, *args, **kwargs):
    _t = fn(*args)
    _visible = _t.numel() * _t.element_size() == 262144
    return _types.SimpleNamespace(peak_increase=262144 if _visible else 0, result=torch.empty(0),
                                  backend="cpu-tracker",
                                  start_bytes=0, peak_bytes=0, end_bytes=0, reserved_bytes=None)

ml.measure_peak = _fake_peak
'''),
}
