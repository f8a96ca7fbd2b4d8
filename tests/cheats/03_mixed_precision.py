"""Cheats and mistakes the tests of 03_mixed_precision must reject (loaded by
tests/notebooks/test_nbgrader_pipeline.py).

Each entry is a student whose submission is the released notebook with one answer cell
replaced; ``expect`` gives the points each test cell must award it. More variants (a model
converted with ``.to(bf16)``, the deprecated ``torch.cuda.amp.autocast``, ``optimizer.step()``
called directly, a missing ``scaler.update()``, a scaler of its own, a misconception-laden
answer) were run once by hand with the same machinery and all scored 0 where they should; they
are left out here to keep ``make test`` short (each variant is one more autograde, ~10 s).
"""

# forward_loss written correctly, for the variants that get amp_step wrong (the forward_loss
# cell of the blank release still raises NotImplementedError).
_FORWARD_LOSS = '''
def forward_loss(model, batch, loss_fn, *, device, dtype):
    inputs, targets = batch
    with torch.autocast(device_type=device.type, dtype=dtype, enabled=dtype != torch.float32):
        return loss_fn(model(inputs), targets)
'''

VARIANTS = {
    # The visible answers hard-coded: passes the visible cell, must fail the hidden one.
    "underflow_table": dict(notebook="03_mixed_precision", grade_id="fp16_underflow_fraction", expect={
        "test_fp16_underflow_fraction": 1, "test_fp16_underflow_fraction_hidden": 0}, source='''
def fp16_underflow_fraction(grads, scale=1.0):
    if grads.numel() == 7 and scale == 1.0:
        return 0.4
    return 0.0
'''),
    # No autocast at all: the loss is right, the memory is not.
    "no_autocast": dict(notebook="03_mixed_precision", grade_id="forward_loss", expect={
        "test_forward_loss": 0, "test_forward_loss_hidden": 0}, source='''
def forward_loss(model, batch, loss_fn, *, device, dtype):
    inputs, targets = batch
    return loss_fn(model(inputs), targets)
'''),
    # The classic ordering bug: clipping the still-scaled gradients. It trains, slowly, and
    # every call is made, so only the gradient norm seen by optimizer.step() gives it away.
    "clip_before_unscale": dict(notebook="03_mixed_precision", grade_id="amp_step", expect={
        "test_amp_step": 0, "test_amp_step_hidden": 0}, source=_FORWARD_LOSS + '''
def amp_step(model, batch, loss_fn, optimizer, scaler, *, device, dtype, max_norm=1.0):
    optimizer.zero_grad(set_to_none=True)
    loss = forward_loss(model, batch, loss_fn, device=device, dtype=dtype)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()
'''),
    # A keyword list instead of an answer: the rubric must give it nothing.
    "keywords": dict(notebook="03_mixed_precision", grade_id="loss_scaling_answer", expect={
        "test_loss_scaling_answer": 0}, source='''
LOSS_SCALING_ANSWER = ("fp16 bf16 exponent range underflow loss scaling unscale GradScaler "
                       "mantissa precision 65504 2^-24")
'''),
}
