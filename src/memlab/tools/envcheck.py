"""Environment check: ``python -m memlab.tools.envcheck`` (or ``make env-check``).

Used by: README.md (troubleshooting), `make env-check`, tests/tools/test_envcheck.py.

Prints one ``[OK]`` or ``[FAIL]`` line per check and exits 1 if any check fails:

    [OK] python 3.11.7
    [OK] torch 2.13.0
    [OK] device: cpu (x86_64; no CUDA: memory is counted by the CPU tracker)
    [OK] jupyterlab 4.6.6
    ...
    [OK] kernel python3: /path/to/.venv/bin/python (this interpreter)

The expected versions are the pins of requirements.txt (tests/test_environment.py keeps the two
equal). A CUDA build of torch reports e.g. ``2.13.0+cu126``: the local part after ``+`` is
ignored. Idea from rasbt/LLMs-from-scratch (setup/02_installing-python-libraries/python_environment_check.py).
"""
from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Callable, Mapping

__all__ = ["EXPECTED", "Check", "check_versions", "check_device", "check_kernel", "run_checks", "main"]

# requirements.txt pins the learner's environment must match (pytest is for `make test` only).
EXPECTED: dict[str, str] = {
    "torch": "2.13.0",
    "jupyterlab": "4.6.6",
    "nbgrader": "0.9.6",
    "ipywidgets": "8.1.9",
    "matplotlib": "3.11.2",
    "pyspellchecker": "0.9.1",
}
PYTHON = (3, 11)
KERNEL_NAME = "python3"
FIX = "run `make lab` (or `.venv/bin/python -m pip install -r requirements.txt`)"


@dataclass(frozen=True)
class Check:
    ok: bool
    text: str

    def line(self) -> str:
        return f"[{'OK' if self.ok else 'FAIL'}] {self.text}"


def installed_versions(names=tuple(EXPECTED)) -> dict[str, str | None]:
    """Installed distribution versions (None when a package is missing)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def check_python(version_info=None) -> Check:
    v = tuple(version_info or sys.version_info)[:3]
    text = "python " + ".".join(str(x) for x in v)
    if v[:2] != PYTHON:
        return Check(False, f"{text}: the course needs Python {PYTHON[0]}.{PYTHON[1]}")
    return Check(True, text)


def check_versions(versions: Mapping[str, str | None], expected: Mapping[str, str] = EXPECTED) -> list[Check]:
    """One check per pinned package; ``versions`` maps name -> installed version or None."""
    checks = []
    for name, want in expected.items():
        have = versions.get(name)
        if have is None:
            checks.append(Check(False, f"{name} not installed (need {want}): {FIX}"))
        elif have.split("+")[0] != want:
            checks.append(Check(False, f"{name} {have} (need {want}): {FIX}"))
        else:
            checks.append(Check(True, f"{name} {have}"))
    return checks


def check_device() -> Check:
    """The device memlab measures on: a CUDA GPU if present, else the CPU (both are fine)."""
    try:
        import torch

        if torch.cuda.is_available():
            name = torch.cuda.get_device_name(0)
            return Check(True, f"device: cuda ({name}, CUDA {torch.version.cuda})")
        cpu = platform.processor() or platform.machine() or "CPU"
        return Check(True, f"device: cpu ({cpu}; no CUDA: memory is counted by the CPU tracker)")
    except Exception as exc:  # a broken torch install must be reported, not crash the check
        return Check(False, f"device: torch failed to load ({type(exc).__name__}: {exc})")


def _same_file(a: str, b: str) -> bool:
    # Compare the paths as written: a venv's python is a symlink to the base interpreter, and
    # resolving it would make every interpreter of that Python version look the same.
    return os.path.normpath(os.path.abspath(a)) == os.path.normpath(os.path.abspath(b))


def check_kernel(get_spec: Callable[[str], object] | None = None, executable: str | None = None) -> Check:
    """The ``python3`` kernel Jupyter will start must run this interpreter (the one with memlab)."""
    executable = executable or sys.executable
    try:
        if get_spec is None:
            from jupyter_client.kernelspec import KernelSpecManager

            get_spec = KernelSpecManager().get_kernel_spec
        spec = get_spec(KERNEL_NAME)
    except Exception as exc:
        return Check(False, f"kernel {KERNEL_NAME} not found ({type(exc).__name__}): run `make lab` "
                            "to register it")
    argv = list(getattr(spec, "argv", []) or [])
    interpreter = argv[0] if argv else ""
    where = getattr(spec, "resource_dir", "?")
    if not interpreter or not os.path.isabs(interpreter):
        return Check(False, f"kernel {KERNEL_NAME} runs {interpreter!r} (from {where}), not an absolute "
                            f"path: re-register it with `{executable} -m ipykernel install --sys-prefix "
                            f"--name {KERNEL_NAME}`")
    if not _same_file(interpreter, executable):
        return Check(False, f"kernel {KERNEL_NAME} runs {interpreter} (from {where}), not this "
                            f"interpreter {executable}: notebooks would not find memlab; run `make lab`")
    return Check(True, f"kernel {KERNEL_NAME}: {interpreter} (this interpreter)")


def run_checks(versions: Mapping[str, str | None] | None = None,
               get_spec: Callable[[str], object] | None = None,
               executable: str | None = None, version_info=None) -> list[Check]:
    """All checks in display order. Arguments inject fakes for the tests."""
    if versions is None:
        versions = installed_versions()
    checks = [check_python(version_info)]
    by_name = {name: c for name, c in zip(EXPECTED, check_versions(versions))}
    checks.append(by_name.pop("torch"))
    checks.append(check_device() if versions.get("torch") else
                  Check(False, "device: unknown (torch is not installed)"))
    checks.extend(by_name.values())
    checks.append(check_kernel(get_spec, executable))
    return checks


def main(argv=None, **inject) -> int:
    checks = run_checks(**inject)
    for c in checks:
        print(c.line())
    failed = sum(not c.ok for c in checks)
    print(f"{len(checks) - failed}/{len(checks)} checks passed" + ("" if not failed else ": see the [FAIL] lines"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
