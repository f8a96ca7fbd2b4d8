"""Cheats the tests of 10_debugging_memory must reject (loaded by
tests/notebooks/test_nbgrader_pipeline.py, which grades them without the static audit: the hidden
tests themselves must catch a learner who calls the library's own answer).

Each entry is a student whose submission is the released notebook with one answer cell
replaced; ``expect`` gives the points each test cell must award it.
"""

VARIANTS = {
    # A table of the visible test's answers (its eight messages), keyed by a piece of each
    # message: the visible test passes, the random hidden messages do not.
    "oom_visible_table": dict(notebook="10_debugging_memory", grade_id="read_oom", expect={
        "test_read_oom": 1, "test_read_oom_hidden": 0}, source='''
_KEYS = ("tried_to_allocate", "total_capacity", "free", "process_in_use", "allocated_by_pytorch",
         "reserved_unallocated", "other_processes", "allowed", "diagnosis")
_TABLE = {
    '4.81 GiB is allocated by PyTorch, and 336.73 MiB': (
        236978176, 16857746637, 220599419, 16621523436, 15902116413, 353086996, {}, None,
        'fragmentation'),
    'y 5.45 GiB is allocated by PyTorch, and 1.17 GiB': (
        139807670885417, 25297357373, 17791902024, 7483980513, 5851892941, 1256277934, {}, None,
        'too big for the card'),
    '11.44 GiB is allocated by PyTorch, and 43.59 MiB': (
        21131239096, 25426206392, 12756052869, 12659416105, 12283606467, 45707428, {}, None,
        'too big for the card'),
    '0.63 GiB is allocated by PyTorch, and 120.54 MiB': (
        1342177280, 99879464468, 1267015352, None, 97313221509, 126395351,
        {2752205: 98590974280}, None, 'too big for the card'),
    '7.51 GiB is allocated by PyTorch, and 15.90 MiB': (
        20971520, 8589934592, 0, None, 8063801098, 16672358, {}, None, 'too big for the card'),
    '0.00 GiB is allocated by PyTorch, and 100.00 MiB': (
        2147483648, 85899345920, 1073741824, 44023414784, 42949672960, 104857600,
        {4242: 40802189312}, None, 'another process holds memory'),
    '1024.00 MiB is allocated by PyTorch, and 0 bytes': (
        3221225472, 85899345920, 75161927680, 2147483648, 1073741824, 0, {}, 2147483648,
        'too big for the card'),
    '6.68 GiB is allocated by PyTorch, and 900.00 MiB': (
        20971520, 8589934592, 12582912, 8579197174, 7172595384, 943718400, {}, None,
        'fragmentation'),
}


def read_oom(text):
    for piece, values in _TABLE.items():
        if piece in text:
            return dict(zip(_KEYS, values))
    raise ValueError("not a message of the table")
'''),
    # memlab's own reader wrapped in a dict: right everywhere, but it is the reference itself.
    "oom_library_reader": dict(notebook="10_debugging_memory", grade_id="read_oom", expect={
        "test_read_oom": 1, "test_read_oom_hidden": 0}, source='''
def read_oom(text):
    r = ml.debugging.read_oom_message(text)
    keys = ("tried_to_allocate", "total_capacity", "free", "process_in_use", "allocated_by_pytorch",
            "reserved_unallocated", "other_processes", "allowed", "diagnosis")
    return {k: getattr(r, k) for k in keys}
'''),
    # A leak that starts at the fifth step (outputs kept "for the last epoch's plot"): flat over
    # the visible test's four steps, growing over the hidden tests' six to twelve.
    "late_leak": dict(notebook="10_debugging_memory", grade_id="train_steps", expect={
        "test_train_steps": 1, "test_train_steps_hidden": 0}, source='''
_kept_for_plots = []


def train_steps(model, optimizer, batches):
    losses = []
    for i, (x, y) in enumerate(batches):
        optimizer.zero_grad()
        out = model(x)
        loss = F.mse_loss(out, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if i >= 4:
            _kept_for_plots.append(out)
    return losses
'''),
    # Floats that compare equal to anything, wrapping the loss tensors' values.
    "float_lookalike": dict(notebook="10_debugging_memory", grade_id="train_steps", expect={
        "test_train_steps": 0, "test_train_steps_hidden": 0}, source='''
class _Loss(float):
    def __eq__(self, other):
        return True


def train_steps(model, optimizer, batches):
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(_Loss(loss.item()))
    return losses
'''),
    # memlab's readers: the right answer, computed by the reference.
    "snapshot_library_readers": dict(
        notebook="10_debugging_memory", grade_id="peak_report",
        expect={"test_peak_report": 1, "test_peak_report_hidden": 0}, source='''
def peak_report(snapshot, device_index=0):
    blocks = ml.snapshot.live_at_peak(snapshot, device_index)
    frame = blocks[0].frame if blocks else None
    where = None if frame is None else (frame["filename"], frame["line"])
    return ml.snapshot.peak_live_bytes(snapshot, device_index), where
'''),
    # The logits computed whole, then the loss in chunks: same loss and gradients, no memory saved.
    "logits_materialised": dict(
        notebook="10_debugging_memory", grade_id="chunked_lm_loss",
        expect={"test_chunked_lm_loss": 0, "test_chunked_lm_loss_hidden": 0}, source='''
def chunked_lm_loss(hidden, weight, targets, chunk_size):
    logits = hidden.reshape(-1, hidden.shape[-1]) @ weight.t()
    t = targets.reshape(-1)
    total = sum(F.cross_entropy(logits[s:s + chunk_size], t[s:s + chunk_size], reduction="sum")
                for s in range(0, t.shape[0], chunk_size))
    return total / (t != -100).sum()
'''),
    # memlab's own chunked loss.
    "chunked_library": dict(
        notebook="10_debugging_memory", grade_id="chunked_lm_loss",
        expect={"test_chunked_lm_loss": 1, "test_chunked_lm_loss_hidden": 0}, source='''
def chunked_lm_loss(hidden, weight, targets, chunk_size):
    return ml.debugging.chunked_cross_entropy(hidden, weight, targets, chunk_size)
'''),
}
