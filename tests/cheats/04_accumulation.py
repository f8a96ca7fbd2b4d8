"""Cheats and classic bugs the tests of 04_accumulation must reject (loaded by
tests/notebooks/test_nbgrader_pipeline.py).

Each entry is a student whose submission is the released notebook with one answer cell
replaced; ``expect`` gives the points each test cell must award it. Each is a mistake real
training code has made: dividing by k (transformers#24725), k forwards with one backward,
weighting tokens by sequences, clipping scaled gradients.
"""

VARIANTS = {
    # Divide every micro-batch's loss by k: exact only for equal micro-batches. Memory is fine.
    "divide_by_k": dict(notebook="04_accumulation", grade_id="accumulate_gradients", expect={
        "test_accumulate_gradients": 0, "test_accumulate_gradients_hidden": 0,
        "test_peak_memory": 1, "test_peak_memory_hidden": 1}, source='''
def accumulate_gradients(model, loss_fn, inputs, targets, micro_batch_size):
    chunks = list(zip(inputs.split(micro_batch_size), targets.split(micro_batch_size)))
    total = 0.0
    for x, y in chunks:
        loss = loss_fn(model(x), y) / len(chunks)
        loss.backward()
        total += loss.item()
    return total
'''),
    # k forwards, one backward: the right gradient, and no memory saved.
    "one_backward": dict(notebook="04_accumulation", grade_id="accumulate_gradients", expect={
        "test_accumulate_gradients": 0, "test_accumulate_gradients_hidden": 0,
        "test_peak_memory": 0, "test_peak_memory_hidden": 0}, source='''
def accumulate_gradients(model, loss_fn, inputs, targets, micro_batch_size):
    n = inputs.shape[0]
    total = sum(loss_fn(model(x), y) * (x.shape[0] / n)
                for x, y in zip(inputs.split(micro_batch_size), targets.split(micro_batch_size)))
    total.backward()
    return total.item()
'''),
    # Weights by sequences instead of real tokens (the transformers#24725 bug in a new form).
    "sequence_weighting": dict(notebook="04_accumulation", grade_id="accumulate_lm_gradients", expect={
        "test_accumulate_lm_gradients": 0, "test_accumulate_lm_gradients_hidden": 0}, source='''
def accumulate_lm_gradients(model, tokens, targets, micro_batch_size, ignore_index=-100):
    b = tokens.shape[1]
    total = 0.0
    for x, y in zip(tokens.split(micro_batch_size, dim=1), targets.split(micro_batch_size, dim=1)):
        loss = acc.lm_loss(model(x), y, ignore_index) * (x.shape[1] / b)
        loss.backward()
        total += loss.item()
    return total
'''),
    # Clips the scaled gradients, then unscales: every call is there and in a plausible order,
    # so the visible checks pass; the hidden comparison with a reference loop must not.
    "clip_before_unscale": dict(notebook="04_accumulation", grade_id="train_with_accumulation", expect={
        "test_train_with_accumulation": 2, "test_train_with_accumulation_hidden": 0}, source='''
def train_with_accumulation(model, optimizer, scheduler, loss_fn, micro_batches, accum_steps,
                            scaler=None, max_norm=None, amp_dtype=None):
    device_type = next(model.parameters()).device.type
    n_steps = 0
    for start in range(0, len(micro_batches), accum_steps):
        group = micro_batches[start:start + accum_steps]
        n_items = sum(x.shape[0] for x, _ in group)
        optimizer.zero_grad()
        for x, y in group:
            with torch.autocast(device_type, dtype=amp_dtype, enabled=amp_dtype is not None):
                loss = loss_fn(model(x), y) * (x.shape[0] / n_items)
            if scaler is None:
                loss.backward()
            else:
                scaler.scale(loss).backward()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if scaler is not None:
            scaler.unscale_(optimizer)
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        if scheduler is not None:
            scheduler.step()
        n_steps += 1
    return n_steps
'''),
    # Steps the scheduler per micro-batch: a schedule that ends k times too early.
    "scheduler_per_micro_batch": dict(notebook="04_accumulation", grade_id="train_with_accumulation", expect={
        "test_train_with_accumulation": 0, "test_train_with_accumulation_hidden": 0}, source='''
import warnings

def train_with_accumulation(model, optimizer, scheduler, loss_fn, micro_batches, accum_steps,
                            scaler=None, max_norm=None, amp_dtype=None):
    n_steps = 0
    for start in range(0, len(micro_batches), accum_steps):
        group = micro_batches[start:start + accum_steps]
        n_items = sum(x.shape[0] for x, _ in group)
        optimizer.zero_grad()
        for x, y in group:
            loss = loss_fn(model(x), y) * (x.shape[0] / n_items)
            loss.backward()
            if scheduler is not None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    scheduler.step()
        optimizer.step()
        n_steps += 1
    return n_steps
'''),
}
