"""Helpers of single notebooks: one module per notebook.

Layer 2 of memlab (see docs/ARCHITECTURE.md): modules here import only ``memlab.measure``
(``amp`` shares 04's training spy from ``accumulation``). Learners reach them as
``ml.checkpointing``, ``ml.amp``, ``ml.accumulation``, ``ml.oom``, ``ml.distributed``,
``ml.calculator``, ``ml.levers``, ``ml.serving``.
"""
