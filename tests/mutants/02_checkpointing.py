"""Mutants of 02_checkpointing (see tests/mutants/__init__.py)."""
from mutants import Mutant

MUTANTS = []
MUTANTS.append(Mutant(
    id="last_segment_plain",
    cell="checkpointed_sequential",
    find="""        for start, stop in ml.checkpointing.segment_bounds(len(self.layers), self.segments):
            x = checkpoint(self.layers[start:stop], x, use_reentrant=False, **self.checkpoint_kwargs)""",
    replace="""        bounds = ml.checkpointing.segment_bounds(len(self.layers), self.segments)
        for start, stop in bounds[:-1]:
            x = checkpoint(self.layers[start:stop], x, use_reentrant=False, **self.checkpoint_kwargs)
        start, stop = bounds[-1]
        x = self.layers[start:stop](x)""",
    lose=("test_checkpointed_sequential", "test_checkpointed_sequential_hidden"),
    says="the last one too",
    klass=0,
    why="copies checkpoint_sequential, which leaves its last segment un-checkpointed",
))
