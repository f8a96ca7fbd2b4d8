"""Mutants of 05_oom_clinic (see tests/mutants/__init__.py).

The hidden test draws budgets at random between the measured peaks of the configurations (a
fixed seed), for another job of effective batch 12, so that no fixed configuration and no
shortcut that happens to work for the notebook's batch of 16 (divisors 8, 4, 2, 1: halving finds
them all) passes."""
from mutants import Mutant

_HIDDEN = "test_configure_hidden"
_DIVISORS = "for m in range(E - 1, 0, -1) if E % m == 0]"
_LOOP = "    for config in whole + split:"
_RAISE = "    raise RuntimeError("

MUTANTS = [
    Mutant(
        id="oom_shrink_batch",
        cell="configure_job",
        find=_LOOP,
        replace="    for config in whole + [ml.oom.JobConfig(amp=True, micro_batch=m) for m in (E // 2, E // 4, 1)]:",
        lose=("test_configure_tight", _HIDDEN),
        says="lowers the batch",
        klass=0,
        why="the reflex the notebook is about: lower the batch until it fits, no accumulation",
    ),
    Mutant(
        id="oom_everything_always",
        cell="configure_job",
        find=_LOOP,
        replace="    for config in split:",
        lose=("test_configure_loose", _HIDDEN),
        says="plain job fits",
        klass=4,
        why="checkpointing and accumulation whatever the budget: 'checkpointing everything when memory is not binding'",
    ),
    Mutant(
        id="oom_half_twice",
        cell="configure_job",
        find=_DIVISORS,
        replace="for m in (E // 2,)]",
        lose=(_HIDDEN,),
        says="largest first",
        klass=4,
        why="one fixed answer for the tight case (half the batch, twice), right for the notebook's budgets",
    ),
    Mutant(
        id="oom_smallest_first",
        cell="configure_job",
        find=_DIVISORS,
        replace="for m in range(1, E) if E % m == 0]",
        lose=(_HIDDEN,),
        says="largest micro-batch",
        klass=4,
        why="tries micro-batch 1 first: always fits, slowest kernels",
    ),
    Mutant(
        id="oom_halving_divisors",
        cell="configure_job",
        find=_DIVISORS,
        replace="for m in (E // 2, E // 4, E // 8, E // 16) if m and E % m == 0]",
        lose=(_HIDDEN,),
        says="largest micro-batch",
        klass=2,
        why="halves the micro-batch: finds every divisor of 16, skips 4 of 12",
    ),
    Mutant(
        id="oom_no_raise",
        cell="configure_job",
        find=_RAISE,
        replace="    return config\n" + _RAISE,
        lose=(_HIDDEN,),
        says="raise RuntimeError",
        klass=4,
        why="returns the last configuration tried when nothing fits: runs out of memory later",
    ),
    Mutant(
        id="oom_return_none",
        cell="configure_job",
        find=_RAISE,
        replace="    return None\n" + _RAISE,
        lose=(_HIDDEN,),
        says="raise RuntimeError",
        klass=4,
        why="returns None when nothing fits instead of raising",
    ),
    Mutant(
        id="oom_assert_instead",
        cell="configure_job",
        find=_RAISE,
        replace="    assert False, (",
        lose=(_HIDDEN,),
        says="raise RuntimeError",
        klass=1,
        why="the docstring says RuntimeError; an assert (disabled under python -O) is not a clear error",
    ),
    Mutant(
        id="oom_ckpt_before_amp",
        cell="configure_job",
        find="ml.oom.JobConfig(amp=True, checkpoint=False, micro_batch=E),",
        replace="ml.oom.JobConfig(amp=False, checkpoint=True, micro_batch=E),",
        lose=(_HIDDEN,),
        says="mixed precision comes first",
        klass=4,
        why="checkpointing before mixed precision: the expensive remedy first",
    ),
    Mutant(
        id="oom_accum_before_ckpt",
        cell="configure_job",
        find=_LOOP,
        replace=("    split = [ml.oom.JobConfig(amp=True, micro_batch=m, accumulation_steps=E // m)\n"
                 "             for m in range(E - 1, 0, -1) if E % m == 0] + split\n"
                 "    for config in whole[:2] + split + whole[2:]:"),
        lose=(_HIDDEN,),
        says="checkpointing comes before accumulation",
        klass=4,
        why="accumulation before checkpointing: the notebook's order is amp, checkpointing, accumulation",
    ),
    Mutant(
        id="oom_no_amp",
        cell="configure_job",
        find=_LOOP,
        replace=("    for config in [whole[0]] + [ml.oom.JobConfig(checkpoint=True, micro_batch=m, "
                 "accumulation_steps=E // m) for m in range(E, 0, -1) if E % m == 0]:"),
        lose=("test_configure_loose", _HIDDEN),
        says="mixed precision comes first",
        klass=4,
        why="skips mixed precision (fp32 + checkpointing + accumulation)",
    ),
    Mutant(
        id="oom_float_steps",
        cell="configure_job",
        find="accumulation_steps=E // m)",
        replace="accumulation_steps=E / m)",
        lose=("test_configure_tight", _HIDDEN),
        says="positive int",
        klass=0,
        why="E / m is a float (2.0): 'use plain bool and int values'",
    ),
    # blind round r3 (issue 33, 2026-12-03): written from the release notebook and the answer
    # cells alone, never the hidden tests; graded once before any fix
    Mutant(id='accum_only_half_batch', cell='configure_job',
           find='for m in range(E - 1, 0, -1) if E % m == 0]',
           replace='for m in [E // 2]]',
           lose=('test_configure_hidden',),
           says='try every configuration', klass=4,
           why=('blind r3, unseen case: only tries two micro-batches, the case the notebook '
                'shows')),
    Mutant(id='accum_forgets_steps', cell='configure_job',
           find=('ml.oom.JobConfig(amp=True, checkpoint=True, micro_batch=m, '
                 'accumulation_steps=E // m)'),
           replace='ml.oom.JobConfig(amp=True, checkpoint=True, micro_batch=m)',
           lose=('test_configure_tight', 'test_configure_hidden'),
           says='lowers the batch', klass=0,
           why=('blind r3, proxy: shrinks the micro-batch but forgets accumulation_steps: '
                'the config fits, but it silently lowers the batch')),
    Mutant(id='none_fits_returns_smallest', cell='configure_job',
           find='    raise RuntimeError(f"no configuration fits',
           replace='    return split[-1]\n    raise RuntimeError(f"no configuration fits',
           lose=('test_configure_hidden',),
           says='nothing fits this budget', klass=4,
           why=("blind r3, unseen case: returns the smallest-memory configuration 'to be "
                "safe' instead of raising when nothing fits")),
    Mutant(id='skips_amp_ckpt_whole_batch', cell='configure_job',
           find=('             ml.oom.JobConfig(amp=True, checkpoint=False, micro_batch=E),'
                 '\n             ml.oom.JobConfig(amp=True, checkpoint=True, micro_batch=E)]'),
           replace=('             ml.oom.JobConfig(amp=True, checkpoint=False, '
                    'micro_batch=E)]'),
           lose=('test_configure_hidden',),
           says='accumulation is not needed here', klass=4,
           why=('blind r3, unseen case: goes from amp straight to checkpointing + '
                'accumulation, skipping amp + checkpointing on the full batch')),
    Mutant(id='written_amp_halves_model_states', cell='oom_answer',
           find=('or fp16 autocast): activations take 2 bytes instead of 4, roughly halving '
                 'them.'),
           replace=('or fp16 autocast): parameters, gradients and optimizer state take 2 '
                    'bytes instead of 4, halving the model.'),
           lose=('test_oom_answer',),
           says='the weights stay fp32', klass=5,
           why=('blind r3, written: states the wrong cause: autocast keeps fp32 parameters, '
                'gradients and Adam state; its saving is in the activations')),
    # blind round r3's written miss, caught since the question's parts are required
    Mutant(
        id='b3_written_no_batch_reason',
        cell='oom_answer',
        find=('effective batch size. A smaller optimizer state (8-bit Adam) helps '
              'too. Reducing the batch is\n'
              'the last resort: it changes the training dynamics, needs a retuned '
              'learning rate and leaves\n'
              'the GPU underutilized.\n'),
        replace=('effective batch size. A smaller optimizer state (8-bit Adam) helps '
                 'too. Reducing the batch is\n'
                 'the last resort.\n'),
        lose=('test_oom_answer',),
        says='a part the question asks for',
        klass=0,
        why=('blind round r3: says the batch comes last but not why (training '
             'dynamics, learning rate, utilization)'),
    ),
    # ---------------------------------------------------------------- blind round r5 (issue 33)
    Mutant(
        id='b5_job_accum_without_ckpt',
        cell='configure_job',
        find=(
            '    split = [ml.oom.JobConfig(amp=True, checkpoint=True, micro_batch=m, '
            'accumulation_steps=E // m)'
        ),
        replace=(
            '    split = [ml.oom.JobConfig(amp=True, checkpoint=False, micro_batch=m, '
            'accumulation_steps=E // m)'
        ),
        lose=('test_configure_hidden',),
        says='checkpointing comes before accumulation',
        klass=4,
        why=(
            'blind r5: Learners treat the remedies as alternatives rather than cumulative; '
            'tight budget then picks a much smaller micro-batch without checkpointing.'
        ),
    ),
    Mutant(
        id='b5_job_smallest_micro_first',
        cell='configure_job',
        find='             for m in range(E - 1, 0, -1) if E % m == 0]',
        replace='             for m in range(1, E) if E % m == 0]',
        lose=('test_configure_hidden',),
        says='take the largest micro-batch that fits',
        klass=4,
        why=(
            'blind r5: Ascending ranges are the default habit; micro-batch 1 always fits, so '
            'it wins and wastes throughput.'
        ),
    ),
    Mutant(
        id='b5_job_non_divisor_micro',
        cell='configure_job',
        find='             for m in range(E - 1, 0, -1) if E % m == 0]',
        replace='             for m in range(E - 1, 0, -1)]',
        lose=('test_configure_hidden', 'test_configure_tight'),
        says='lowers the batch',
        klass=0,
        why=(
            'blind r5: E // m hides the remainder; learners do not check micro_batch * '
            'accumulation_steps == effective_batch.'
        ),
    ),
    Mutant(
        id='b5_job_lowers_batch_silently',
        cell='configure_job',
        find=(
            '    raise RuntimeError(f"no configuration fits {ml.fmt_bytes(budget_bytes)} '
            'without lowering the "\n                       "batch: only now consider a '
            'smaller batch (and retune the learning rate)")\n'
        ),
        replace=(
            '    return ml.oom.JobConfig(amp=True, checkpoint=True, micro_batch=1, '
            'accumulation_steps=1)\n'
        ),
        lose=('test_configure_hidden',),
        says='nothing fits this budget',
        klass=0,
        why=(
            'blind r5: Reflex of shrinking the batch on OOM; the contract says to raise, and '
            'the visible budgets always fit.'
        ),
    ),
    Mutant(
        id='b5_job_ckpt_before_amp',
        cell='configure_job',
        find='             ml.oom.JobConfig(amp=True, checkpoint=False, micro_batch=E),',
        replace='             ml.oom.JobConfig(amp=False, checkpoint=True, micro_batch=E),',
        lose=('test_configure_hidden', 'test_configure_loose'),
        says='mixed precision comes first',
        klass=4,
        why=(
            'blind r5: Checkpointing is the best-known memory trick; learners reach for it '
            'before the cheaper mixed precision.'
        ),
    ),
    Mutant(
        id='b5_job_hardcoded_batch16',
        cell='configure_job',
        find='    E = spec.effective_batch',
        replace="    E = 16  # the job's effective batch",
        lose=('test_configure_hidden',),
        says='larger than the effective batch',
        klass=0,
        why=(
            "blind r5: The notebook's job always has 16 sequences per step; learners bake in "
            'the number they see.'
        ),
    ),
    Mutant(
        id='b5_job_skips_micro_batch_1',
        cell='configure_job',
        find='             for m in range(E - 1, 0, -1) if E % m == 0]',
        replace='             for m in range(E - 1, 1, -1) if E % m == 0]',
        lose=('test_configure_hidden',),
        says='down to micro-batch 1',
        klass=4,
        why="blind r5: Off-by-one on range's exclusive stop when counting down.",
    ),
    Mutant(
        id='b5_oom_answer_batch_anytime',
        cell='oom_answer',
        find=(
            'Reducing the batch is\nthe last resort: it changes the training dynamics, needs a '
            'retuned learning rate and leaves\nthe GPU underutilized.'
        ),
        replace=(
            'Reducing the batch is\nalso a quick and harmless fix that can be tried at any '
            'point.'
        ),
        lose=('test_oom_answer',),
        says='put the smaller batch last',
        klass=0,
        why=(
            'blind r5: Halving the batch is the reflex fix for OOM on forums; learners do not '
            'see it changes the training.'
        ),
    ),
    Mutant(
        id='b5_oom_answer_ckpt_free',
        cell='oom_answer',
        find=(
            "use gradient checkpointing: keep each block's input and recompute the rest in "
            'the\nbackward pass, trading extra compute (about 30% more time) for memory; when '
            'memory is not\nbinding it only slows training.'
        ),
        replace=(
            'use gradient checkpointing: it frees the activations of each block at no extra '
            'cost.'
        ),
        lose=('test_oom_answer',),
        says='say what checkpointing costs',
        klass=0,
        why=(
            "blind r5: Checkpointing is often sold as 'free memory'; the recomputation cost is "
            'forgotten.'
        ),
    ),
    # blind round r7 (#33): 36 mutants over 01-06 and 08-10 written by a helper from the
    # release notebooks and the answer cells alone, never the hidden tests; graded once
    # before any fix (31/36 caught), then the five missed classes fixed; the 5 that were the
    # same edit as an earlier mutant are kept once, under the earlier id
    Mutant(
        id='r7_cfg_smallest_micro_first',
        cell='configure_job',
        find='range(E - 1, 0, -1)',
        replace='range(1, E)',
        lose=('test_configure_hidden',),
        says='take the largest micro-batch that fits',
        klass=0,
        why=('blind round r7, plain: scans micro-batch sizes from 1 upward, so it always returns '
             'micro-batch 1 (which always fits) instead of the largest that fits: the budget and '
             'effective batch are met but the job runs needlessly many tiny steps.'),
    ),
    Mutant(
        id='r7_cfg_skips_amp_ckpt',
        cell='configure_job',
        find=',\n             ml.oom.JobConfig(amp=True, checkpoint=True, micro_batch=E)]',
        replace=']',
        lose=('test_configure_hidden',),
        says='accumulation is not needed here',
        klass=0,
        why=("blind round r7, plain: leaves out the 'amp + checkpointing at the full batch' step, "
             'jumping from amp straight to accumulation, so a budget that amp + checkpointing '
             'alone would meet gets an accumulation config; the visible tight budget needs all '
             'three anyway.'),
    ),
    Mutant(
        id='r7_cfg_halving_only',
        cell='configure_job',
        find='for m in range(E - 1, 0, -1) if E % m == 0',
        replace='for m in [E >> i for i in range(1, E.bit_length())] if E % m == 0',
        lose=('test_configure_hidden',),
        says='try every divisor',
        klass=2,
        why=('blind round r7, inputs: only tries halving the micro-batch (E/2, E/4, ...), which '
             'lists every divisor for the visible E = 16 but skips divisors like 8 or 4 for E = '
             '24 or 12, returning a smaller micro-batch than the largest that fits.'),
    ),
    Mutant(
        id='r7_cfg_silent_batch_one',
        cell='configure_job',
        find=('raise RuntimeError(f"no configuration fits {ml.fmt_bytes(budget_bytes)} without '
              'lowering the "\n                       "batch: only now consider a smaller batch '
              '(and retune the learning rate)")'),
        replace='return ml.oom.JobConfig(amp=True, checkpoint=True, micro_batch=1)  # last resort',
        lose=('test_configure_hidden',),
        says='but nothing fits',
        klass=2,
        why=('blind round r7, inputs: when nothing fits it silently returns a batch-1 job instead '
             "of raising, lowering the effective batch behind the user's back; only a budget "
             'below every configuration (not in the visible tests) exposes it.'),
    ),
]
