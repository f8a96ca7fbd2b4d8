"""memlab: the helper package of GPU Memory Lab.

One import idiom everywhere: ``import memlab as ml``.

The same public API measures on CUDA (the caching allocator's own counters) and on the CPU
(an exact count of live tensor bytes, kept by a TorchDispatchMode), so a graded check gives
the same verdict on a learner's GPU, an instructor's CPU server and CI.

The package has five layers (docs/ARCHITECTURE.md; import-linter holds them, pyproject.toml):

- ``memlab.measure``: the core (device, units, tracker, breakdown, budget, estimate, plots,
  formulas, models, timing, training_spy, snapshot, allocator); imports nothing else of memlab
- ``memlab.lessons``: one module per notebook (checkpointing, amp, accumulation, oom,
  distributed, calculator, levers, serving, debugging); imports the core only
- ``memlab.grading``: what runs INSIDE a learner's kernel: guard, visible tests, the answer
  engine (``answers``), 07's bank and panel (``interview``)
- ``memlab.autograde``: what runs only on the instructor's machine: the CLI, nbgrader's API,
  the review, the class batch and the security stack; no notebook imports it
- ``memlab.tools``: envcheck, gpucheck, hostedcheck, lab

This module is the facade learners use:

- device:     :func:`get_device`, :func:`versions_banner`
- measuring:  :class:`MemoryTracker`, :func:`measure_peak`, :class:`SavedActivations`,
              :func:`training_step_breakdown`, :func:`param_bytes`, :func:`grad_bytes`,
              :func:`optimizer_state_bytes`
- limits:     :func:`memory_budget` (raises ``torch.OutOfMemoryError`` with a breakdown)
- estimating: :func:`estimate_training_step` (FakeTensorMode: nothing is allocated)
- plotting:   :func:`plot_timeline`
- modules:    ``ml.formulas``, ``ml.models``, ``ml.checkpointing``, ``ml.amp``, ``ml.rubric``,
              ... (loaded on first use, so ``import memlab`` stays fast for the autograder)
- notebooks:  :class:`visible_test` (a visible test cell with nbgrader's verdict: stderr or a
              warning fails it), :class:`waiting_for` (a demo cell waits for an exercise);
              both from ``memlab.grading.visible``, loaded on first use
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

from .measure import compat as _compat

# Before anything else can fail on an unsupported torch (a notebook's own imports, memlab's):
# say once, on stderr, what is missing and what to do. The first cell's versions_banner() then
# stops with the same message (memlab.measure.compat).
if _compat.parse_version(__import__("torch").__version__) < _compat.parse_version(_compat.TORCH_RANGE[0]):
    import warnings as _warnings

    _warnings.warn(_compat.check().message(), _compat.UnsupportedTorchWarning, stacklevel=2)

# A CUDA build of torch on a machine with a CUDA toolkit but no GPU (a hosted CPU runtime, a CI
# machine) logs "No CUDA runtime is found, using CUDA_HOME=..." on stderr the first time
# torch.utils.cpp_extension is imported, which torch does lazily inside some graded call:
# nbgrader would score that cell 0 for a notice about the machine. Keep that one logger quiet.
if getattr(__import__("torch").version, "cuda", None):
    import logging as _logging

    _logging.getLogger("torch.utils.cpp_extension").setLevel(_logging.ERROR)

from .measure import formulas, models
from .measure.breakdown import (SavedActivations, StepReport, grad_bytes, optimizer_state_bytes,
                                param_bytes, saved_activation_bytes, training_step_breakdown)
from .measure.budget import memory_budget
from .measure.device import DeviceUnavailableError, device_name, get_device, versions_banner
from .measure.estimate import estimate_training_step
from .measure.plots import plot_timeline
from .measure.tracker import (CUDA_ROUNDING, MemoryTracker, PeakResult, TimelinePoint,
                              measure_peak, storage_bytes)
from .measure.units import GB, GiB, KiB, MiB, fmt_bytes

__version__ = "0.1.0"

__all__ = [
    "DeviceUnavailableError", "device_name", "get_device", "versions_banner",
    "GB", "GiB", "KiB", "MiB", "fmt_bytes",
    "MemoryTracker", "PeakResult", "TimelinePoint", "measure_peak", "storage_bytes",
    "CUDA_ROUNDING", "SavedActivations", "StepReport", "grad_bytes", "optimizer_state_bytes",
    "param_bytes", "saved_activation_bytes", "training_step_breakdown", "memory_budget",
    "estimate_training_step", "plot_timeline", "formulas", "models",
    "visible_test", "waiting_for",
]

# The short names notebooks use (``ml.amp``, ``import memlab.tracker``, ...) -> where each
# module lives. ``ml.<name>`` loads on first use; ``import memlab.<name>`` gives the very
# same module object (so ``importlib.reload`` and the grading guard see one module).
MODULES = {
    "device": "measure.device", "compat": "measure.compat", "units": "measure.units",
    "tracker": "measure.tracker",
    "breakdown": "measure.breakdown", "budget": "measure.budget",
    "estimate": "measure.estimate", "plots": "measure.plots", "timing": "measure.timing",
    "models": "measure.models", "formulas": "measure.formulas",
    "training_spy": "measure.training_spy", "snapshot": "measure.snapshot",
    "allocator": "measure.allocator",
    "checkpointing": "lessons.checkpointing", "amp": "lessons.amp",
    "accumulation": "lessons.accumulation", "oom": "lessons.oom",
    "distributed": "lessons.distributed", "calculator": "lessons.calculator",
    "levers": "lessons.levers", "serving": "lessons.serving", "debugging": "lessons.debugging",
    "rubric": "grading.answers.grade", "rubric_bank": "grading.answers.bank",
    "interview": "grading.interview",
    # The instructor's side (memlab.autograde), never loaded by a notebook: short names kept for
    # the instructor's commands (python -m memlab.instructor ...).
    "grade_class": "autograde.batch.grade_class", "instructor": "autograde.cli",
    "grading_kernel": "autograde.security.kernel",
    "envcheck": "tools.envcheck", "gpucheck": "tools.gpucheck", "hostedcheck": "tools.hostedcheck",
    "visible": "grading.visible", "lab": "tools.lab",
}
# Names of the facade that live in a module loaded on first use.
_LAZY_NAMES = {"visible_test": "grading.visible", "waiting_for": "grading.visible"}
_SUBPACKAGES = {"measure", "lessons", "grading", "autograde", "tools"}


class _ShortNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import memlab.tracker`` -> the module ``memlab.measure.tracker`` itself."""

    def find_spec(self, fullname, path=None, target=None):
        head, _, short = fullname.partition(".")
        if head == __name__ and short in MODULES:
            real = importlib.util.find_spec(f"{__name__}.{MODULES[short]}")
            spec = importlib.util.spec_from_loader(fullname, self, origin=real.origin)
            spec.has_location = True  # ``python -m memlab.<short>`` gets the real __file__
            return spec
        return None

    def create_module(self, spec):
        module = importlib.import_module(f"{__name__}.{MODULES[spec.name.partition('.')[2]]}")
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        # The import system stamped the short name's spec on the real module: put the real
        # one back, so importlib.reload(module) re-executes the real file.
        real = module.__spec__.loader_state
        if real is not None:
            module.__spec__ = real

    def _real_spec(self, fullname):
        return importlib.util.find_spec(f"{__name__}.{MODULES[fullname.partition('.')[2]]}")

    def get_code(self, fullname):  # ``python -m memlab.instructor`` runs the real module
        real = self._real_spec(fullname)
        return real.loader.get_code(real.name)

    def is_package(self, fullname):
        return False


if not any(isinstance(f, _ShortNames) for f in sys.meta_path):
    sys.meta_path.append(_ShortNames())


def __getattr__(name: str):
    if name in _LAZY_NAMES:
        value = getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
        globals()[name] = value
        return value
    if name in MODULES or name in _SUBPACKAGES:
        module = importlib.import_module(f".{MODULES.get(name, name)}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module 'memlab' has no attribute {name!r}")


def _calm_unfinished_cells() -> None:
    """In a notebook kernel, nbgrader's stub left in a cell shows one line, not a traceback
    (memlab.grading.visible.install_calm_stubs); elsewhere nothing happens."""
    ipython, zmqshell = sys.modules.get("IPython"), sys.modules.get("ipykernel.zmqshell")
    shell = ipython.get_ipython() if ipython is not None else None
    # a kernel's shell (hosted runtimes subclass it: Colab's Shell), not a terminal IPython
    if zmqshell is not None and isinstance(shell, zmqshell.ZMQInteractiveShell):
        from .grading.visible import install_calm_stubs

        install_calm_stubs(shell)


_calm_unfinished_cells()
