"""Cheats and mistakes the tests of 02_checkpointing must reject (loaded by
tests/notebooks/test_nbgrader_pipeline.py).

Each entry is a student whose submission is the released notebook with one answer cell
replaced; ``expect`` gives the points each test cell must award it. Also run once by hand with
the same machinery, left out to keep ``make test`` short (each variant is one more autograde):
``use_reentrant=True`` (0 and 0: no gradients, the visible test says why), the last segment left
un-checkpointed as ``checkpoint_sequential`` does (0 and 0: 7 of 8 GELUs recomputed), every layer
always checkpointed on its own whatever ``segments`` says (visible 2, hidden 0: the forward keeps
n inputs, not k), ``choose_segments`` returning ``n_layers`` (visible 0, hidden partial), and a
policy that saves everything (0).
"""

VARIANTS = {
    # A wrapper that calls the layers without checkpointing: same loss and gradients, nothing
    # recomputed, no memory saved.
    "no_checkpoint": dict(notebook="02_checkpointing", grade_id="checkpointed_sequential", expect={
        "test_checkpointed_sequential": 0, "test_checkpointed_sequential_hidden": 0}, source='''
class CheckpointedSequential(nn.Module):
    def __init__(self, layers, segments=None, **checkpoint_kwargs):
        super().__init__()
        self.layers = layers

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
'''),
    # Checkpointing right, but the RNG state is not restored for the recomputation: the visible
    # stack has no dropout and passes; the hidden GPT-2 blocks with dropout must fail.
    "no_rng_state": dict(notebook="02_checkpointing", grade_id="checkpointed_sequential", expect={
        "test_checkpointed_sequential": 2, "test_checkpointed_sequential_hidden": 0}, source='''
class CheckpointedSequential(nn.Module):
    def __init__(self, layers, segments=None, **checkpoint_kwargs):
        super().__init__()
        self.layers = layers
        self.segments = len(layers) if segments is None else segments

    def forward(self, x):
        for start, stop in ml.checkpointing.segment_bounds(len(self.layers), self.segments):
            x = checkpoint(self.layers[start:stop], x, use_reentrant=False, preserve_rng_state=False)
        return x
'''),
    # Chen's sqrt(n) whatever the layers: right for the tanh chains (2 of 4 hidden cases), far off
    # for MLP layers, whose input costs 1/9 of their activations.
    "chen_sqrt_n": dict(notebook="02_checkpointing", grade_id="choose_segments", expect={
        "test_choose_segments": 0, "test_choose_segments_hidden": 1.0}, source='''
def choose_segments(n_layers, layer_bytes, checkpoint_bytes):
    return max(1, round(math.sqrt(n_layers)))
'''),
    # A keyword list instead of an answer: the rubric must give it nothing.
    "keywords": dict(notebook="02_checkpointing", grade_id="checkpointing_cost_answer", expect={
        "test_checkpointing_cost_answer": 0}, source='''
CHECKPOINTING_COST_ANSWER = ("recompute, backward, extra forward, 30%, memory bound, activations "
                             "dropped, trade-off, sqrt(n) segments")
'''),
}
