"""The measurement core: every notebook, test and the grader rely on it.

Layer 1 of memlab (see docs/ARCHITECTURE.md): modules here import nothing from
``memlab.lessons``, ``memlab.grading`` or ``memlab.tools``.

- device:    which device, the versions banner
- units:     byte units and formatting
- tracker:   MemoryTracker / measure_peak (CUDA allocator counters, or exact CPU live bytes)
- breakdown: the four consumers of a training step, saved activations
- budget:    a memory budget that raises torch.OutOfMemoryError with a breakdown
- estimate:  FakeTensorMode estimates (nothing allocated)
- formulas:  published formulas (ZeRO, Hugging Face, Korthikanti, Chen)
- models:    the course's small models (MLPBlock, MLPStack, GPT2Block, TinyGPT)
- timing:    repeatable timing of a call
- training_spy: a spy on a training loop and the checks of what it saw (03, 04)
- plots:     memory timelines
- snapshot:  torch's allocation trace, from the CUDA allocator or recorded on the CPU
- allocator: a MODEL of the CUDA caching allocator's rules: replays a trace, predicts reserved
"""
