"""Which Python and torch the course runs on, and what to do when this kernel has another one.

Used by: ``ml.versions_banner`` (the first cell of every notebook), ``import memlab`` (a warning
before anything else breaks), ``python -m memlab.tools.envcheck``, tests/measure/test_compat.py, the README
("Hosted notebook").

The pinned set (requirements.txt: torch 2.13.0 on Python 3.11) is the reference: ``make test``
and grading use it. A hosted runtime (Colab, Kaggle, a JupyterHub) brings its own Python and its
own CUDA build of torch; the course runs on any torch in :data:`TORCH_RANGE` and Python in
:data:`PYTHON_RANGE`, and ``make test-compat`` proves the newest end (Python 3.12, torch 2.14.1).

The lower end of the range is the oldest torch release that has every API the course uses
(:data:`APIS`, each with the release that introduced it). It is set by FSDP2's public
``torch.distributed.fsdp.fully_shard`` (notebook 06): torch 2.6 moved it there from the private
``torch.distributed._composable.fsdp`` (pytorch/pytorch#141868, "targeting 2.6 release";
https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html). The upper end is the newest
release tested here (``make test-compat``); a newer torch is allowed with a note, since every
API is probed, not assumed.
"""
from __future__ import annotations

import importlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

__all__ = ["Api", "APIS", "TORCH_RANGE", "TORCH_PINNED", "PYTHON_RANGE", "PYTHON_PINNED",
           "CompatReport", "UnsupportedTorchError", "UnsupportedTorchWarning", "parse_version", "api_available", "check",
           "require_supported", "install_line", "probe"]

TORCH_PINNED = "2.13.0"            # requirements.txt: make test and grading use it
TORCH_RANGE = ("2.6", "2.14.1")    # oldest with every API below .. newest tested (make test-compat)
PYTHON_PINNED = (3, 11)
PYTHON_RANGE = ((3, 11), (3, 13))  # pyproject.toml's requires-python


@dataclass(frozen=True)
class Api:
    """One torch API the course needs: where it lives, the release it appeared in, who uses it."""
    path: str       # dotted: module path, then attribute names
    since: str      # first torch release that has it at this path
    used_by: str    # notebooks / memlab modules that need it
    source: str = ""
    # For an API whose module is slow to import (torch.distributed.* takes seconds): the module
    # file that has it, looked up on disk instead of imported (tests import it for real).
    file_probe: str = ""


# Every torch API of the course that is younger than torch 2.0, with the release that introduced
# it at the path used. The newest of them (fully_shard, 2.6) sets the lower end of TORCH_RANGE.
APIS: tuple[Api, ...] = (
    Api("torch.distributed.fsdp.fully_shard", "2.6", "06 (FSDP2 per rank), memlab.distributed",
        "pytorch/pytorch#141868: FSDP2 moved from torch.distributed._composable.fsdp, for 2.6",
        file_probe="torch.distributed.fsdp._fully_shard"),
    Api("torch.optim.Adafactor", "2.5", "08 (optimizer choice)",
        "https://pytorch.org/docs/stable/generated/torch.optim.Adafactor.html (new in 2.5)"),
    Api("torch.utils.checkpoint.create_selective_checkpoint_contexts", "2.4", "02 (selective checkpointing)",
        "pytorch/pytorch#125795: selective activation checkpointing made public, for 2.4"),
    Api("torch.utils.checkpoint.CheckpointPolicy", "2.4", "02 (selective checkpointing)",
        "pytorch/pytorch#125795"),
    Api("torch.amp.GradScaler", "2.3", "03, 05, memlab.amp (GradScaler('cuda') / ('cpu'))",
        "pytorch/pytorch#99301: GradScaler generalised into torch.amp; torch.cuda.amp's deprecated in 2.4"),
    Api("torch.nn.attention.sdpa_kernel", "2.3", "08 (attention backends)",
        "pytorch/pytorch#121180 (docs point to the new context manager, March 2024); "
        "torch.backends.cuda.sdp_kernel deprecated for it"),
    Api("torch.Tensor.register_post_accumulate_grad_hook", "2.1", "08 (optimizer step in backward)",
        "https://pytorch.org/tutorials/intermediate/optimizer_step_in_backward_tutorial.html"),
    Api("torch.cuda.memory._record_memory_history", "2.1", "01 (CUDA memory snapshot)",
        "https://pytorch.org/docs/stable/torch_cuda_memory.html"),
    Api("torch.nn.functional.scaled_dot_product_attention", "2.0", "08, 09 (fused attention)"),
    Api("torch.utils._python_dispatch.TorchDispatchMode", "2.0", "memlab's CPU tracker"),
    Api("torch._subclasses.fake_tensor.FakeTensorMode", "2.0", "ml.estimate_training_step"),
    Api("torch.utils.weak.WeakIdKeyDictionary", "2.0", "ml.SavedActivations"),
    Api("torch.autocast", "1.10", "03, 05"),
    Api("torch.autograd.graph.save_on_cpu", "1.10", "08 (activation offloading)"),
    Api("torch.utils.benchmark.Timer", "1.8", "timings", file_probe="torch.utils.benchmark"),
    Api("torch.distributed.optim.ZeroRedundancyOptimizer", "1.8", "06 (ZeRO-1)",
        file_probe="torch.distributed.optim.zero_redundancy_optimizer"),
)


class UnsupportedTorchError(RuntimeError):
    """This kernel's torch (or Python) is outside the range the course runs on."""


class UnsupportedTorchWarning(UserWarning):
    """``import memlab`` under a torch older than the range (the banner then raises)."""


_VERSION = re.compile(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(.*)$")


def parse_version(text: str) -> tuple[int, int, int]:
    """``"2.14.1+cu128"`` -> (2, 14, 1); ``"2.6.0a0+git1234"`` -> (2, 6, 0); ``"2.6"`` -> (2, 6, 0).

    Pre-releases and nightlies count as their release (a 2.6 nightly has 2.6's APIs, which the
    probe confirms). Raises ValueError for text that is not a version.
    """
    m = _VERSION.match(str(text))
    if not m:
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(g or 0) for g in m.groups()[:3])  # type: ignore[return-value]


def _fmt(v: Sequence[int]) -> str:
    return ".".join(str(x) for x in v)


def _module_file_exists(module: str) -> bool:
    """Whether torch ships ``module`` (a .py file or a package), without importing it."""
    import torch

    here = Path(torch.__file__).parent.joinpath(*module.split(".")[1:])
    return here.with_suffix(".py").is_file() or (here / "__init__.py").is_file()


def probe(api: Api) -> bool:
    """Whether ``api`` exists here: imported, or for a slow module, found on disk."""
    if api.path.startswith("torch.distributed."):
        import torch

        if not torch.distributed.is_available():  # a build without distributed support
            return False
    if api.file_probe:
        return _module_file_exists(api.file_probe)
    return api_available(api.path)


def api_available(path: str) -> bool:
    """True when ``path`` (module path then attributes) resolves in this torch (imports it)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # noqa: BLE001 ImportError, or a module that fails to load on this build
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def install_line(python: Sequence[int] | None = None) -> str:
    """The pip line that puts the course's reference torch into this kernel's environment."""
    py = tuple(python or sys.version_info[:2])
    if tuple(py[:2]) > PYTHON_RANGE[1]:
        # no torch of the range is built for this Python: the fix is another interpreter
        return (f"use a Python {_fmt(PYTHON_RANGE[0])}-{_fmt(PYTHON_RANGE[1])} kernel, then "
                f"pip install torch=={TORCH_PINNED}")
    return f"pip install torch=={TORCH_PINNED}"


@dataclass
class CompatReport:
    torch_version: str
    python_version: tuple[int, int, int]
    status: str                       # "pinned" | "supported" | "newer" | "too_old" | "python"
    missing: list[Api] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def fatal(self) -> bool:
        """The course cannot run here: stop at the first cell with :meth:`message`."""
        return self.status in ("too_old", "python")

    def summary(self) -> str:
        """One line for the banner."""
        lo, hi = TORCH_RANGE
        where = {"pinned": f"the course's reference version (supported {lo} to {hi})",
                 "supported": f"in the supported range {lo} to {hi} (graded with {TORCH_PINNED})",
                 "newer": f"newer than the newest tested ({hi}): supported range {lo} to {hi}",
                 "too_old": f"OLDER than the supported range {lo} to {hi}",
                 "python": "on an unsupported Python"}[self.status]
        return f"torch {self.torch_version} is {where}"

    def message(self) -> str:
        """What is wrong and what to do, for a learner reading the first cell's output."""
        lo, hi = TORCH_RANGE
        py = _fmt(self.python_version)
        lines = []
        if self.status == "python":
            lines.append(f"Python {py} is outside the course's range "
                         f"{_fmt(PYTHON_RANGE[0])} to {_fmt(PYTHON_RANGE[1])}.")
        else:
            lines.append(f"torch {self.torch_version} (Python {py}) is older than the course "
                         f"supports: it needs torch {lo} to {hi} (graded with {TORCH_PINNED}).")
        if self.missing:
            lines.append("Missing here:")
            for api in self.missing:
                lines.append(f"  - {api.path} (torch {api.since}+; used by {api.used_by})")
        lines.append("What to do:")
        lines.append(f"  in a hosted notebook (Colab, Kaggle, JupyterHub): run  "
                     f"%{install_line(self.python_version[:2])}  in a cell, then restart the "
                     "runtime/kernel and run this notebook again from the top;")
        lines.append(f"  on your own machine: `make lab` (it installs torch=={TORCH_PINNED} into .venv), "
                     f"or  {install_line(self.python_version[:2])}  in the environment of this kernel.")
        return "\n".join(lines)


def check(torch_version: str | None = None, python_version: Sequence[int] | None = None,
          available: Callable[[str], bool] | None = None,
          probe_pinned: bool = False) -> CompatReport:
    """Compare this kernel (or the given fakes) with the supported ranges and probe every API.

    ``available(path)`` says whether an API exists (default: :func:`api_available` on the
    imported torch); tests pass fakes for all three arguments. The pinned torch is not probed
    (``probe_pinned=True`` forces it): importing torch.distributed.fsdp and friends costs about
    a second in every graded notebook, and tests/measure/test_compat.py checks the pinned set once.
    """
    if torch_version is None:
        import torch

        torch_version = torch.__version__
    py = tuple(python_version or sys.version_info[:3])
    py = (py + (0, 0, 0))[:3]
    have = parse_version(torch_version)
    lo, hi = parse_version(TORCH_RANGE[0]), parse_version(TORCH_RANGE[1])
    if available is None and have == parse_version(TORCH_PINNED) and probe_pinned is False:
        missing = []  # the reference version: tests/measure/test_compat.py proves every API is there
    else:
        missing = [api for api in APIS if not (available(api.path) if available else probe(api))]
    if have < lo:
        status = "too_old"
    elif tuple(py[:2]) < PYTHON_RANGE[0] or tuple(py[:2]) > PYTHON_RANGE[1]:
        status = "python"
    elif have[:3] == parse_version(TORCH_PINNED):
        status = "pinned"
    elif have > hi:
        status = "newer"
    else:
        status = "supported"
    report = CompatReport(str(torch_version), py, status, missing)  # type: ignore[arg-type]
    if status == "newer" and not missing:
        report.notes.append(f"every API the course uses is present; if a cell fails, "
                            f"`{install_line(py[:2])}` and restart the kernel")
    if missing and not report.fatal:
        # A build of a supported release without a part (e.g. no torch.distributed): the other
        # notebooks run; name what will fail and where.
        for api in missing:
            report.notes.append(f"MISSING {api.path} (needed by {api.used_by}): this torch build "
                                f"lacks it; `{install_line(py[:2])}` has it")
    return report


def require_supported(report: CompatReport | None = None) -> CompatReport:
    """Raise :class:`UnsupportedTorchError` with :meth:`CompatReport.message` outside the range."""
    report = report or check()
    if report.fatal:
        raise UnsupportedTorchError(report.message())
    return report


def banner_lines(report: CompatReport) -> list[str]:
    """The banner's compat lines (after python/torch/device/CUDA)."""
    return [f"compat  {report.summary()}"] + [f"        {n}" for n in report.notes]

