"""Mutants of 02_checkpointing (see tests/mutants/__init__.py): what learners get wrong with
torch.utils.checkpoint. Sources: the notebook's sections 3, 6 and 8; PyTorch docs of checkpoint
(use_reentrant, preserve_rng_state, context_fn); huggingface/transformers#26221 (no gradients
with reentrant checkpointing); forum threads "checkpoint + torch.no_grad" and "detach between
checkpointed segments"; issue 14's classes."""
from mutants import Mutant

_INIT = """        self.layers = layers
        self.segments = len(layers) if segments is None else segments
        self.checkpoint_kwargs = checkpoint_kwargs"""
_CALL = "            x = checkpoint(self.layers[start:stop], x, use_reentrant=False, **self.checkpoint_kwargs)"
_LOOP = """        for start, stop in ml.checkpointing.segment_bounds(len(self.layers), self.segments):
""" + _CALL
_K = "    k = round(math.sqrt(n_layers * layer_bytes / checkpoint_bytes))"
_CS = ("test_checkpointed_sequential", "test_checkpointed_sequential_hidden")

MUTANTS = [
    Mutant(
        id="kwargs_dropped", cell="checkpointed_sequential", find=_CALL,
        replace="            x = checkpoint(self.layers[start:stop], x, use_reentrant=False)",
        lose=("test_checkpointed_sequential_hidden",), says="checkpoint_kwargs", klass=1,
        why="**checkpoint_kwargs accepted in __init__ but never passed on to checkpoint()"),
    Mutant(
        id="segments_none", cell="checkpointed_sequential", find=_INIT,
        replace="""        self.layers = layers
        self.segments = segments
        self.checkpoint_kwargs = checkpoint_kwargs""",
        lose=_CS, says="None means one segment per layer", klass=1,
        why="passes segments=None straight to segment_bounds (the docstring says None: one per layer)"),
    Mutant(
        id="segments_ignored", cell="checkpointed_sequential", find=_INIT,
        replace="""        self.layers = layers
        self.segments = len(layers)
        self.checkpoint_kwargs = checkpoint_kwargs""",
        lose=("test_checkpointed_sequential_hidden",), says="segment_bounds", klass=1,
        why="accepts segments but always checkpoints every layer (right for the visible segments=None only)"),
    Mutant(
        id="last_segment_plain", cell="checkpointed_sequential", find=_LOOP,
        replace="""        bounds = ml.checkpointing.segment_bounds(len(self.layers), self.segments)
        for start, stop in bounds[:-1]:
""" + _CALL + """
        start, stop = bounds[-1]
        x = self.layers[start:stop](x)""",
        lose=_CS, says="the last one too", klass=0,
        why="copies checkpoint_sequential, which leaves its last segment un-checkpointed"),
    Mutant(
        id="no_grad_forward", cell="checkpointed_sequential", find=_LOOP,
        replace="""        with torch.no_grad():  # "activations are recomputed anyway"
            for start, stop in ml.checkpointing.segment_bounds(len(self.layers), self.segments):
    """ + _CALL,
        lose=_CS, says="torch.no_grad()", klass=5,
        why="runs the forward under torch.no_grad() to save memory: no graph, told 'use_reentrant' before"),
    Mutant(
        id="detach_between", cell="checkpointed_sequential", find=_CALL,
        replace=_CALL + ".detach().requires_grad_()",
        lose=_CS, says=".detach()", klass=5,
        why="detaches between segments (forum: 'free the graph of the previous segment'): earlier layers get no gradient"),
    Mutant(
        id="reentrant_true", cell="checkpointed_sequential", find=_CALL,
        replace="            x = checkpoint(self.layers[start:stop], x, use_reentrant=True, **self.checkpoint_kwargs)",
        lose=_CS, says="use_reentrant=False", klass=0,
        why="the old default use_reentrant=True: no input requires grad, no parameter gets a gradient (transformers#26221)"),
    Mutant(
        id="reentrant_omitted", cell="checkpointed_sequential", find=_CALL,
        replace="            x = checkpoint(self.layers[start:stop], x, **self.checkpoint_kwargs)",
        lose=_CS, says="use_reentrant", klass=3,
        why="leaves use_reentrant out: torch warns and falls back to the reentrant variant"),
    Mutant(
        id="rng_not_preserved", cell="checkpointed_sequential", find=_CALL,
        replace=("            x = checkpoint(self.layers[start:stop], x, use_reentrant=False, preserve_rng_state=False,\n"
                 "                           **self.checkpoint_kwargs)"),
        lose=("test_checkpointed_sequential_hidden",), says="preserve_rng_state", klass=2,
        why="preserve_rng_state=False 'to save time': dropout masks differ in the recomputation (no dropout in the visible test)"),
    Mutant(
        id="choose_sqrt_n", cell="choose_segments", find=_K,
        replace="    k = round(math.sqrt(n_layers))",
        lose=("test_choose_segments", "test_choose_segments_hidden"), says="A/c", klass=2,
        why="Chen's sqrt(n) whatever a layer costs against a kept input (right only when A = c)"),
    Mutant(
        id="choose_inverted", cell="choose_segments", find=_K,
        replace="    k = round(math.sqrt(n_layers * checkpoint_bytes / layer_bytes))",
        lose=("test_choose_segments", "test_choose_segments_hidden"), says="A/c", klass=0,
        why="minimum of k*c + n*A/k taken the wrong way up: sqrt(n*c/A)"),
    Mutant(
        id="choose_float", cell="choose_segments", find="    return int(min(n_layers, max(1, k)))",
        replace="    return min(n_layers, max(1, math.sqrt(n_layers * layer_bytes / checkpoint_bytes)))",
        lose=("test_choose_segments",), says="return an int", klass=0,
        why="returns the real-valued optimum instead of a whole number of segments"),
    Mutant(
        id="choose_unclamped", cell="choose_segments", find="    return int(min(n_layers, max(1, k)))",
        replace="    return int(k)",
        lose=("test_choose_segments",), says="between 1 and n_layers", klass=0,
        why="forgets that k is at most the number of layers (a very expensive layer gives k > n)"),
    Mutant(
        id="policy_overload_compare", cell="save_matmuls_policy",
        find="    if op.overloadpacket in MATMULS:", replace="    if op in MATMULS:",
        lose=("test_save_matmuls_policy",), says="overloadpacket", klass=0,
        why="compares the overload (aten.mm.default) with the packets in MATMULS: never equal"),
    # blind round r3 (issue 33, 2026-12-03): written from the release notebook and the answer
    # cells alone, never the hidden tests; graded once before any fix
    Mutant(id='ckpt_none_means_one_segment', cell='checkpointed_sequential',
           find='self.segments = len(layers) if segments is None else segments',
           replace='self.segments = 1 if segments is None else segments',
           lose=('test_checkpointed_sequential', 'test_checkpointed_sequential_hidden'),
           says='segments=None', klass=0,
           why=("blind r3, proxy: reads segments=None as 'no cutting' and checkpoints the "
                'whole stack as one region: every GELU is still recomputed, but backward '
                'rebuilds all activations at once')),
    Mutant(id='ckpt_floor_div_bounds', cell='checkpointed_sequential',
           find=('        for start, stop in '
                 'ml.checkpointing.segment_bounds(len(self.layers), self.segments):\n       '
                 '     x = checkpoint(self.layers[start:stop], x, use_reentrant=False, '
                 '**self.checkpoint_kwargs)'),
           replace=('        size = len(self.layers) // self.segments\n        for start in '
                    'range(0, len(self.layers), size):\n            x = '
                    'checkpoint(self.layers[start:start + size], x, use_reentrant=False, '
                    '**self.checkpoint_kwargs)'),
           lose=('test_checkpointed_sequential_hidden',),
           says='segment_bounds', klass=2,
           why=('blind r3, unseen case: cuts with its own floor-division chunk size instead '
                'of segment_bounds; identical for segments=None or k dividing n')),
    Mutant(id='ckpt_drops_checkpoint_kwargs', cell='checkpointed_sequential',
           find=('x = checkpoint(self.layers[start:stop], x, use_reentrant=False, '
                 '**self.checkpoint_kwargs)'),
           replace='x = checkpoint(self.layers[start:stop], x, use_reentrant=False)',
           lose=('test_checkpointed_sequential_hidden',),
           says='**checkpoint_kwargs', klass=0,
           why=('blind r3, plain: stores **checkpoint_kwargs in __init__ but forgets to pass'
                ' them on in forward')),
    Mutant(id='ckpt_rng_state_off_by_default', cell='checkpointed_sequential',
           find='self.checkpoint_kwargs = checkpoint_kwargs',
           replace=('self.checkpoint_kwargs = {"preserve_rng_state": False, '
                    '**checkpoint_kwargs}  # faster: skip the RNG stash'),
           lose=('test_checkpointed_sequential_hidden',),
           says='preserve_rng_state=True', klass=2,
           why=("blind r3, unseen case: turns off the RNG stash 'for speed' because the MLP "
                'stacks have no randomness')),
    Mutant(id='ckpt_keeps_segment_outputs', cell='checkpointed_sequential',
           find=('        for start, stop in '
                 'ml.checkpointing.segment_bounds(len(self.layers), self.segments):\n       '
                 '     x = checkpoint(self.layers[start:stop], x, use_reentrant=False, '
                 '**self.checkpoint_kwargs)\n        return x'),
           replace=('        self.segment_outputs = []  # kept to inspect the activations\n '
                    '       for start, stop in '
                    'ml.checkpointing.segment_bounds(len(self.layers), self.segments):\n    '
                    '        x = checkpoint(self.layers[start:stop], x, use_reentrant=False,'
                    ' **self.checkpoint_kwargs)\n            self.segment_outputs.append(x)'
                    '\n        return x'),
           lose=('test_checkpointed_sequential_hidden',),
           says='still alive', klass=1,
           why=('blind r3, side effect: stores every segment output on the module for '
                'debugging, so they outlive the step')),
    Mutant(id='segments_sqrt_n_times_ratio', cell='choose_segments',
           find='k = round(math.sqrt(n_layers * layer_bytes / checkpoint_bytes))',
           replace='k = round(math.sqrt(n_layers) * layer_bytes / checkpoint_bytes)',
           lose=('test_choose_segments_hidden',),
           says='sqrt(n * A/c)', klass=0,
           why=("blind r3, plain: algebra slip: scales Chen's sqrt(n) by A/c instead of "
                'taking sqrt(n * A / c); right when A = c and clamped to n for the MLP (A/c '
                '= 9)')),
    Mutant(id='policy_mm_substring', cell='save_matmuls_policy',
           find='if op.overloadpacket in MATMULS:',
           replace='if "mm" in str(op):',
           lose=('test_save_matmuls_policy',),
           says='not one of the packets in MATMULS', klass=2,
           why=('blind r3, unseen case: matches op names by substring instead of comparing '
                'op.overloadpacket with MATMULS')),
    # blind round r3's written miss, caught since the question's parts are required
    Mutant(
        id='b3_written_no_when_worth_it',
        cell='checkpointing_cost_answer',
        find=('So it trades compute for memory: worth it only when memory is the '
              'binding constraint, not\n'
              'when the model already fits.\n'),
        replace='So it trades compute for memory.\n',
        lose=('test_checkpointing_cost_answer',),
        says='a part the question asks for',
        klass=0,
        why=('blind round r3: explains the mechanism and the cost but leaves out when '
             'the trade is worth making (the question asks for it)'),
    ),
    # ---------------------------------------------------------------- blind round r5 (issue 33)
    Mutant(
        id='b5_ckpt_ignores_segments',
        cell='checkpointed_sequential',
        find='        self.segments = len(layers) if segments is None else segments\n',
        replace='        self.segments = len(layers)\n',
        lose=('test_checkpointed_sequential_hidden',),
        says='segment_bounds',
        klass=0,
        why=(
            "blind r5: The visible test only uses segments=None; learners equate 'checkpoint "
            "every layer' with the whole contract and never exercise k segments."
        ),
    ),
    Mutant(
        id='b5_ckpt_last_segment_plain',
        cell='checkpointed_sequential',
        find=(
            '        for start, stop in ml.checkpointing.segment_bounds(len(self.layers), '
            'self.segments):\n            x = checkpoint(self.layers[start:stop], x, '
            'use_reentrant=False, **self.checkpoint_kwargs)\n        return x\n'
        ),
        replace=(
            '        bounds = ml.checkpointing.segment_bounds(len(self.layers), '
            'self.segments)\n        for start, stop in bounds[:-1]:\n            x = '
            'checkpoint(self.layers[start:stop], x, use_reentrant=False, '
            '**self.checkpoint_kwargs)\n        start, stop = bounds[-1]\n        return '
            'self.layers[start:stop](x)  # last segment is needed first in backward anyway\n'
        ),
        lose=('test_checkpointed_sequential', 'test_checkpointed_sequential_hidden'),
        says='the last one too',
        klass=0,
        why=(
            'blind r5: torch.utils.checkpoint.checkpoint_sequential leaves its last segment '
            'un-checkpointed, and learners copy that idea (notebook sec. 3 mentions it).'
        ),
    ),
    Mutant(
        id='b5_segments_every_layer_if_bigger',
        cell='choose_segments',
        find='    k = round(math.sqrt(n_layers * layer_bytes / checkpoint_bytes))\n',
        replace=(
            '    if layer_bytes > checkpoint_bytes:\n        return n_layers  # a kept input '
            'is cheaper than a layer: checkpoint every layer\n    k = round(math.sqrt(n_layers '
            '* layer_bytes / checkpoint_bytes))\n'
        ),
        lose=('test_choose_segments_hidden',),
        says='k should grow with sqrt(n * A/c)',
        klass=0,
        why=(
            'blind r5: The notebook says libraries checkpoint every layer because inputs are '
            'cheap; learners turn that into a rule that also fires when A is only slightly '
            'above c (tanh chains).'
        ),
    ),
    Mutant(
        id='b5_cost_answer_always_worth',
        cell='checkpointing_cost_answer',
        find=(
            'So it trades compute for memory: worth it only when memory is the binding '
            'constraint, not\nwhen the model already fits.'
        ),
        replace=(
            'So it trades compute for memory, and since GPU memory is always scarce it is '
            'worth\nturning on by default.'
        ),
        lose=('test_checkpointing_cost_answer',),
        says='worth it only when memory is the binding constraint',
        klass=0,
        why=(
            'blind r5: Many tutorials present gradient checkpointing as a default switch (e.g. '
            'gradient_checkpointing=True); notebook sec. 5 calls it the common mistake.'
        ),
    ),
    Mutant(
        id='b5_policy_name_substring',
        cell='save_matmuls_policy',
        find='    if op.overloadpacket in MATMULS:',
        replace='    if "mm" in str(op):',
        lose=('test_save_matmuls_policy',),
        says='is not one of the packets',
        klass=0,
        why=(
            'blind r5: String matching on op names is a common shortcut in policy examples '
            'found online.'
        ),
    ),
    # blind round r7 (#33): 36 mutants over 01-06 and 08-10 written by a helper from the
    # release notebooks and the answer cells alone, never the hidden tests; graded once
    # before any fix (31/36 caught), then the five missed classes fixed; the 5 that were the
    # same edit as an earlier mutant are kept once, under the earlier id
    Mutant(
        id='r7_ckpt_uneven_segments',
        cell='checkpointed_sequential',
        find='ml.checkpointing.segment_bounds(len(self.layers), self.segments)',
        replace=('[(i, i + len(self.layers) // self.segments) for i in range(0, len(self.layers), '
                 'len(self.layers) // self.segments)]'),
        lose=('test_checkpointed_sequential_hidden',),
        says='segment_bounds',
        klass=2,
        why=('blind round r7, inputs: cuts segments of n // k layers by hand, which gives more '
             'than k segments (more kept inputs) when k does not divide n; identical to '
             'segment_bounds when every layer is its own segment, as in the visible test.'),
    ),
    Mutant(
        id='r7_ckpt_no_rng_state',
        cell='checkpointed_sequential',
        find=('x = checkpoint(self.layers[start:stop], x, use_reentrant=False, '
              '**self.checkpoint_kwargs)'),
        replace=('x = checkpoint(self.layers[start:stop], x, use_reentrant=False, '
                 'preserve_rng_state=False, **self.checkpoint_kwargs)'),
        lose=('test_checkpointed_sequential_hidden',),
        says='preserve_rng_state=true',
        klass=2,
        why=("blind round r7, inputs: turns off RNG-state preservation 'to save time', so a block "
             'with dropout draws a different mask when it is recomputed in backward and the '
             'gradients no longer match; the visible MLP stack has no dropout.'),
    ),
    Mutant(
        id='r7_ckpt_requires_grad_input',
        cell='checkpointed_sequential',
        find='for start, stop in ml.checkpointing',
        replace=('x.requires_grad_(True)  # checkpoint needs an input that requires grad\n        for '
                 'start, stop in ml.checkpointing'),
        lose=('test_checkpointed_sequential_hidden',),
        says='switched requires_grad on',
        klass=1,
        why=("blind round r7, side_effect: flips requires_grad on the caller's input tensor "
             "(reentrant-checkpoint folklore), so the caller's batch now gets a .grad that "
             'accumulates across steps and changes later measurements.'),
    ),
    Mutant(
        id='r7_ckpt_sequential_last_segment',
        cell='checkpointed_sequential',
        find=('        for start, stop in ml.checkpointing.segment_bounds(len(self.layers), '
              'self.segments):\n'),
        replace=('        if self.segments < len(self.layers):  # whole segments: let the library do '
                 'it\n            return checkpoint_sequential(self.layers, self.segments, x, '
                 'use_reentrant=False, **self.checkpoint_kwargs)\n        for start, stop in '
                 'ml.checkpointing.segment_bounds(len(self.layers), self.segments):\n'),
        lose=('test_checkpointed_sequential_hidden',),
        says='the last one too',
        klass=1,
        why=('blind round r7, proxy: delegates k < n segments to checkpoint_sequential, which '
             'does not checkpoint the last segment and splits n // k differently, so its '
             'activations are kept and the peak is not lowered as asked; the visible test only '
             'uses one layer per segment.'),
    ),
    # the 16-bit and device checks of ac42a82 (#33), each with the mistake it was written
    # for: written with the checks, development data, not a blind figure
    Mutant(
        id="dt_ckpt_returns_fp32",
        cell="checkpointed_sequential",
        find="        return x\n",
        replace="        return x.float()                # the loss is computed in fp32 anyway\n",
        lose=("test_checkpointed_sequential_hidden",),
        says="returned torch.float32",
        klass=3,
        why="upcasts the stack's output: right on an fp32 CPU model, a bf16 model on a GPU "
            "returns (and saves for the loss) an fp32 copy of every output",
    ),
]
