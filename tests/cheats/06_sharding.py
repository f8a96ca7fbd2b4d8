"""Cheats and mistakes the tests of 06_sharding must reject (loaded by
tests/notebooks/test_nbgrader_pipeline.py).

Each entry is a student whose submission is the released notebook with one answer cell
replaced; ``expect`` gives the points each test cell must award it. Kept to two variants: every
one that reaches a hidden test launches ranks (~10-20 s on 2 cores).
"""

VARIANTS = {
    # The visible measurement copied back: passes the visible cell, must fail the hidden one
    # (random layer widths, measured on freshly launched ranks).
    "copied_measurement": dict(notebook="06_sharding", grade_id="predict_rank_bytes", expect={
        "test_predict_rank_bytes": 2, "test_predict_rank_bytes_hidden": 0}, source='''
def predict_rank_bytes(shapes, strategy, world_size):
    return [{"params": runs[r][strategy]["params"],
             "optimizer_state": runs[r][strategy]["optimizer_state"]} for r in range(world_size)]
'''),
    # The classic mistake: one big batch instead of the average of the ranks' mean losses. Equal
    # only when every rank has the same batch size, which the notebook's ranks do not.
    "one_big_batch": dict(notebook="06_sharding", grade_id="reference_grads", expect={
        "test_reference_grads": 0, "test_reference_grads_hidden": 0}, source='''
def reference_grads(model, batches, loss_fn):
    model.zero_grad(set_to_none=True)
    inputs = torch.cat([x for x, _ in batches])
    targets = torch.cat([y for _, y in batches])
    loss_fn(model(inputs), targets).backward()
    return [p.grad.detach().clone() for p in model.parameters()]
'''),
}
