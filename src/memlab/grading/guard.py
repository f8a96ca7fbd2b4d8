"""Guards for graded test cells: refuse to grade a kernel whose measuring code was patched.

Used by: the test cells of solutions/00_setup, 01, 02, 03, 06 and 07 (``ml.grading.guard()``
right after each test cell's docstring; 04 and 05 defend differently: their tests reload the
measuring modules, which replaces these objects, so they do not call the guard), and ``python -m memlab.autograde grade-class`` (its kernel launcher,
:mod:`memlab.autograde.security.kernel`, imports this module before any learner code runs, so the
originals below are captured from an untouched interpreter).

nbgrader runs the tests in the learner's kernel, after the learner's code. That code can
replace what a test calls: ``ml.measure_peak``, ``torch.cuda.max_memory_allocated``,
``torch.allclose``, builtins such as ``type`` or ``isinstance``, or IPython's own machinery
(``set_custom_exc`` swallows the test's ``AssertionError``; an input transformer rewrites the
test cell). :func:`guard` checks each of them three ways:

* identity against the object captured when this module was first imported;
* the code object (``fn.__code__ = other.__code__`` keeps the identity);
* where it exists, ground truth the learner can not rebind from Python
  (``torch.allclose is torch._C._VariableFunctions.allclose``, C slots of ``torch.Tensor``,
  source files inside the installed package).

On tampering it writes the reason to the kernel's stderr (nbgrader scores any test cell with
stderr output 0, even when an exception is swallowed) and raises :class:`TamperError`.

Limits (see autograder/README.md, "Security"): code in the same interpreter can always
defeat an in-process check (for example by patching this module first). The guard closes the
routes a learner finds by accident or by a short search; isolation (a separate user, no
network, resource limits) is what protects the course.
"""
from __future__ import annotations

import builtins
import math
import os
import sys
from typing import Any

from memlab.grading import assignments as _assignments
from memlab.grading import visible as _visible

__all__ = ["TamperError", "guard", "tampered", "original", "WATCHED", "LESSON_HELPERS"]


class TamperError(AssertionError):
    """A function or hook a graded test relies on was replaced by code in the notebook."""


# Helpers of single notebooks that their graded tests call to measure or compare (08, 09): the
# registry of assignments says which (memlab.grading.assignments).
LESSON_HELPERS: tuple[str, ...] = _assignments.guard_helpers()

# (name, getter) pairs: what graded tests call to measure or compare.
WATCHED: tuple[str, ...] = (
    "builtins.type", "builtins.isinstance", "builtins.int", "builtins.print", "builtins.len",
    "builtins.abs", "builtins.round", "builtins.sum", "builtins.min", "builtins.max",
    "math.prod", "math.isclose",
    "torch.allclose", "torch.isclose", "torch.equal", "torch.empty", "torch.zeros",
    "torch.ones", "torch.randn",
    "torch.Tensor.numel", "torch.Tensor.element_size", "torch.Tensor.untyped_storage",
    "torch.cuda.max_memory_allocated", "torch.cuda.memory_allocated",
    "torch.cuda.reset_peak_memory_stats", "torch.cuda.memory_reserved",
    "torch.cuda.max_memory_reserved", "torch.cuda.is_available",
    "memlab.measure_peak", "memlab.MemoryTracker", "memlab.storage_bytes",
    "memlab.measure.tracker.measure_peak", "memlab.measure.tracker.MemoryTracker",
    "memlab.training_step_breakdown", "memlab.param_bytes",
    *LESSON_HELPERS,
)

_MISSING = object()


def _lookup(dotted: str) -> Any:
    head, *rest = dotted.split(".")
    if head == "builtins":
        obj: Any = builtins
    elif head == "math":
        obj = math
    else:
        obj = sys.modules.get(head, _MISSING)
        if obj is _MISSING:
            return _MISSING
    for i, part in enumerate(rest):
        # Walk modules through sys.modules too (torch.cuda, memlab.measure.tracker).
        nxt = getattr(obj, part, _MISSING)
        if nxt is _MISSING:
            nxt = sys.modules.get(".".join([head, *rest[:i + 1]]), _MISSING)
        if nxt is _MISSING:
            return _MISSING
        obj = nxt
    return obj


def _snapshot() -> dict[str, tuple[Any, Any]]:
    snap = {}
    for name in WATCHED:
        obj = _lookup(name)
        if obj is not _MISSING:
            snap[name] = (obj, getattr(obj, "__code__", None))
    return snap


try:  # what graded tests rely on, as it was when this module was first imported
    import torch  # noqa: F401
    import memlab.measure.tracker  # noqa: F401
    import memlab.lessons.levers  # noqa: F401  (LESSON_HELPERS)
    import memlab.lessons.serving  # noqa: F401
    import memlab.lessons.debugging  # noqa: F401
    import memlab.measure.snapshot  # noqa: F401
    import memlab.measure.breakdown  # noqa: F401  (StepReport: its fields hold what is measured)
    import memlab.measure.budget  # noqa: F401
    import memlab.measure.training_spy  # noqa: F401
    import memlab.lessons.accumulation  # noqa: F401
    import memlab.lessons.oom  # noqa: F401
    import memlab.lessons.checkpointing  # noqa: F401
    import memlab.lessons.amp  # noqa: F401
except Exception:  # noqa: BLE001  pragma: no cover - memlab without torch: not supported
    pass
_ORIGINALS = _snapshot()


def _class_state() -> dict[str, tuple[type, dict[str, Any]]]:
    """Every class the course's measuring and lesson modules define, with its attributes as they
    are: a test reads results through them (``StepReport``'s fields), and a property put on a
    field makes every measured value read back what the learner wants."""
    out = {}
    for modname, mod in list(sys.modules.items()):
        if mod is None or not modname.startswith(("memlab.measure.", "memlab.lessons.")):
            continue
        for name, obj in list(vars(mod).items()):
            if isinstance(obj, type) and getattr(obj, "__module__", "") == modname:
                out[f"{modname}.{name}"] = (obj, dict(vars(obj)))
    return out


_CLASSES = _class_state()
_STDERR = sys.stderr
_PACKAGE_DIRS: dict[str, str] = {}
for _mod in ("torch", "memlab"):
    if _mod in sys.modules and getattr(sys.modules[_mod], "__file__", None):
        _PACKAGE_DIRS[_mod] = os.path.dirname(os.path.realpath(sys.modules[_mod].__file__))


def original(name: str) -> Any:
    """The object ``name`` (one of :data:`WATCHED`) was when this module was imported."""
    return _ORIGINALS[name][0]


def _ground_truth_problems() -> list[str]:
    problems = []
    torch = sys.modules.get("torch")
    if torch is not None:
        vf = getattr(getattr(torch, "_C", None), "_VariableFunctions", None)
        for fn in ("allclose", "isclose", "equal", "empty", "zeros", "ones", "randn"):
            if vf is not None and getattr(torch, fn, None) is not getattr(vf, fn, None):
                problems.append(f"torch.{fn} was replaced")
        base = getattr(torch._C, "TensorBase", None)
        for meth in ("numel", "element_size", "untyped_storage"):
            if base is not None and torch.Tensor.__dict__.get(meth, base.__dict__.get(meth)) \
                    is not base.__dict__.get(meth):
                problems.append(f"torch.Tensor.{meth} was replaced")
    for name, pkg in (("torch.cuda.max_memory_allocated", "torch"),
                      ("torch.cuda.memory_allocated", "torch"),
                      ("torch.cuda.reset_peak_memory_stats", "torch"),
                      ("memlab.measure_peak", "memlab"), ("memlab.measure.tracker.measure_peak", "memlab"),
                      *((name, "memlab") for name in LESSON_HELPERS)):
        obj = _lookup(name)
        code = getattr(obj, "__code__", None)
        if obj is _MISSING or code is None or pkg not in _PACKAGE_DIRS:
            if obj is not _MISSING and code is None and not isinstance(obj, type):
                problems.append(f"{name} is not the library's function")
            continue
        if not os.path.realpath(code.co_filename).startswith(_PACKAGE_DIRS[pkg] + os.sep):
            problems.append(f"{name} was replaced by code from {os.path.basename(code.co_filename)}")
    tracker = sys.modules.get("memlab.measure.tracker")
    memlab = sys.modules.get("memlab")
    if tracker is not None and memlab is not None:
        if getattr(memlab, "measure_peak", None) is not getattr(tracker, "measure_peak", None):
            problems.append("memlab.measure_peak was replaced")
    return problems


_IPYTHON_MODULES = ("IPython", "ipykernel", "matplotlib", "matplotlib_inline", "ipywidgets",
                    "comm", "traitlets", "memlab")


def _from_trusted_module(obj: Any) -> bool:
    mod = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", "") or ""
    return mod.split(".")[0] in _IPYTHON_MODULES


# The one custom handler a kernel may have: memlab's own, which shows nbgrader's stub as one line
# and still reports the error (memlab.grading.visible.install_calm_stubs). Captured here, before
# any learner code runs, so a notebook that rebinds the module's function is still refused.
_CALM_TB = _visible._calm_custom_tb


def _calm_handler(ip: Any) -> bool:
    return (getattr(ip, "custom_exceptions", None) == (NotImplementedError,)
            and getattr(getattr(ip, "CustomTB", None), "__func__", None) is _CALM_TB)


def _ipython_problems() -> list[str]:
    problems = []
    get_ipython = getattr(builtins, "get_ipython", None)
    if get_ipython is None:
        return problems
    try:
        ip = get_ipython()
    except Exception:  # noqa: BLE001  (anything a notebook put there)
        return ["get_ipython() was replaced"]
    if ip is None:
        return problems
    if getattr(ip, "custom_exceptions", ()) not in ((), None) and not _calm_handler(ip):
        problems.append("IPython.set_custom_exc was used (it hides test failures)")
    if getattr(ip, "ast_transformers", []):
        problems.append("an IPython AST transformer was installed (it rewrites test cells)")
    for attr in ("input_transformers_post", "input_transformers_cleanup"):
        for t in getattr(ip, attr, []) or []:
            if not _from_trusted_module(t):
                problems.append(f"an IPython input transformer was installed ({attr})")
    events = getattr(ip, "events", None)
    for event, callbacks in (getattr(events, "callbacks", {}) or {}).items():
        for cb in callbacks:
            if not _from_trusted_module(getattr(cb, "__func__", cb)):
                problems.append(f"an IPython '{event}' event callback was registered")
    return problems


def tampered() -> list[str]:
    """What was replaced since this module was imported, as readable reasons (empty: clean)."""
    problems = []
    now = _snapshot()
    for name, (obj, code) in _ORIGINALS.items():
        cur = now.get(name)
        if cur is None:
            problems.append(f"{name} was deleted")
        elif cur[0] is not obj:
            problems.append(f"{name} was replaced")
        elif code is not None and cur[1] is not code:
            problems.append(f"{name} had its code replaced")
    for name, (cls, attrs) in _CLASSES.items():
        now = vars(cls)
        changed = sorted({k for k in attrs if now.get(k, _MISSING) is not attrs[k]}
                         | (set(now) - set(attrs)))
        if changed:
            problems.append(f"the course's class {name} was changed ({', '.join(changed[:4])})")
    problems += _ground_truth_problems()
    problems += _ipython_problems()
    return sorted(set(problems))


def guard() -> None:
    """Raise :class:`TamperError` (and write the reason to stderr) when anything a graded test
    relies on was patched. Call it first in every test cell that measures or compares."""
    problems = tampered()
    if not problems:
        return
    message = ("grading guard: " + "; ".join(problems)
               + ". Remove the code that patches them: tests refuse to grade a patched kernel.")
    streams = []
    for stream in (sys.stderr, _STDERR, sys.__stderr__):  # the notebook's stderr first
        if stream is not None and all(stream is not s for s in streams):
            streams.append(stream)
    for stream in streams:
        try:
            stream.write(message + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001  (a closed or replaced stream)
            pass
    raise TamperError(message)
