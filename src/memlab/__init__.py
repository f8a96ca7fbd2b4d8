"""memlab: the helper package of GPU Memory Lab.

One import idiom everywhere: ``import memlab as ml``.

The same public API measures on CUDA (the caching allocator's own counters) and on the CPU
(an exact count of live tensor bytes, kept by a TorchDispatchMode), so a graded check gives
the same verdict on a learner's GPU, an instructor's CPU server and CI.

- device:     :func:`get_device`, :func:`versions_banner`
- measuring:  :class:`MemoryTracker`, :func:`measure_peak`, :class:`SavedActivations`,
              :func:`training_step_breakdown`, :func:`param_bytes`, :func:`grad_bytes`,
              :func:`optimizer_state_bytes`
- limits:     :func:`memory_budget` (raises ``torch.OutOfMemoryError`` with a breakdown)
- estimating: :func:`estimate_training_step` (FakeTensorMode: nothing is allocated)
- plotting:   :func:`plot_timeline`
- formulas:   ``ml.formulas`` (ZeRO, Hugging Face, Korthikanti, Chen)
- models:     ``ml.models`` (MLPBlock, MLPStack, GPT2Block, TinyGPT)
- grading:    ``ml.rubric`` (written, numeric, choice and ordering answers)
"""
from __future__ import annotations

from . import formulas, models, rubric
from .breakdown import (SavedActivations, StepReport, grad_bytes, optimizer_state_bytes,
                        param_bytes, saved_activation_bytes, training_step_breakdown)
from .budget import memory_budget
from .device import DeviceUnavailableError, device_name, get_device, versions_banner
from .estimate import estimate_training_step
from .plots import plot_timeline
from .tracker import (CUDA_ROUNDING, MemoryTracker, PeakResult, TimelinePoint, measure_peak,
                      storage_bytes)
from .units import GB, GiB, KiB, MiB, fmt_bytes

__version__ = "0.1.0"

__all__ = [
    "DeviceUnavailableError", "device_name", "get_device", "versions_banner",
    "GB", "GiB", "KiB", "MiB", "fmt_bytes",
    "MemoryTracker", "PeakResult", "TimelinePoint", "measure_peak", "storage_bytes",
    "CUDA_ROUNDING", "SavedActivations", "StepReport", "grad_bytes", "optimizer_state_bytes",
    "param_bytes", "saved_activation_bytes", "training_step_breakdown", "memory_budget",
    "estimate_training_step", "plot_timeline", "formulas", "models", "rubric",
]

# Topic modules of single notebooks load on first use (``ml.amp``, ``ml.checkpointing``, ...),
# so ``import memlab`` stays fast for the autograder.
_LAZY = {"accumulation", "amp", "calculator", "checkpointing", "instructor", "interview", "oom",
         "distributed", "gpucheck", "grading", "timing",
         "envcheck", "plots"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module 'memlab' has no attribute {name!r}")
