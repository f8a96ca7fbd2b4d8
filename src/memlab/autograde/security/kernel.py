"""Kernel launcher of ``python -m memlab.autograde grade-class``: limits, then ipykernel.

    python -m memlab.autograde.security.kernel [--memory-mb N] [--cpu-s N] -f CONNECTION_FILE ...

Before the IPython kernel starts, in its own process:

* ``RLIMIT_AS`` (address space) caps the kernel's memory: a memory hog gets ``MemoryError`` /
  a failed allocation inside its cell instead of taking the machine down (not where an NVIDIA
  GPU is visible: CUDA needs far more address space than memory; use a cgroup there);
* ``RLIMIT_CPU`` (optional) caps its CPU seconds; ``RLIMIT_CORE`` = 0 (no core dumps);
* ``PR_SET_PDEATHSIG`` (Linux): the kernel is killed when the grading worker that started it
  dies (jupyter_client starts kernels in their own session, so killing the worker's process
  group would not reach it);
* :mod:`memlab.grading` is imported, so :func:`memlab.grading.guard` compares against the
  functions as they were before any learner code ran;
* imports come from the course, never from the submission: the interpreter starts with ``-P``
  (no working directory on ``sys.path``), :func:`course_only_path` drops the working directory
  again (a warm fork inherits ``sys.path``), IPython is told not to add it
  (``IPKernelApp.ignore_cwd``), and ``PYTHONSAFEPATH=1`` reaches every process the learner
  starts: a ``spellchecker.py`` or ``memlab/`` shipped beside the notebook is never imported
  in place of the real one;
* in the Landlock sandbox, once its own sockets are bound, no Unix socket can be created and
  no file's mode, owner or times changed (Landlock governs neither; the bubblewrap sandbox
  shows no path outside at all).

The kernelspec that runs this is written by :func:`write_kernelspec` into a temporary
Jupyter data folder of the grading run (never into the user's Jupyter folders).
"""
from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path

KERNEL_NAME = "memlab-grader"
# How a grader's kernel starts: -P, so the submission's folder (the kernel's working directory)
# is not on sys.path before the first import.
LAUNCHER = (sys.executable, "-P", "-m", "memlab.autograde.security.kernel")


def _set_pdeathsig() -> None:
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _nvidia_gpu_visible() -> bool:
    """CUDA reserves tens of GiB of virtual address space (and maps device memory into it), so
    an address-space limit breaks CUDA: it is not applied where an NVIDIA GPU is visible
    (limit the whole run with a cgroup there, see autograder/README.md)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidia0")


def course_only_path() -> list[str]:
    """Drop the working directory (``''``, ``'.'``, its path) from ``sys.path``, and ask every
    Python the learner's code starts to do the same (``PYTHONSAFEPATH=1``). Returns what was
    dropped."""
    cwd = os.path.realpath(os.getcwd())
    dropped = [p for p in sys.path if p in ("", ".") or os.path.realpath(p) == cwd]
    sys.path[:] = [p for p in sys.path if p not in dropped]
    os.environ["PYTHONSAFEPATH"] = "1"
    return dropped


def _limit(which: int, value: int) -> None:
    try:
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, hard))
    except (ValueError, OSError):
        pass


def main(argv: list[str] | None = None, *, seal: bool = False) -> None:
    """Start the limited kernel. ``seal`` (the Landlock sandbox): once the kernel has bound its
    own sockets, and before any cell runs, no Unix socket can be created and no file's mode,
    owner or times changed (:func:`memlab.autograde.security.landlock.seal`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    course_only_path()
    memory_mb = cpu_s = 0
    while argv and argv[0] in ("--memory-mb", "--cpu-s"):
        flag, value = argv.pop(0), int(argv.pop(0))
        if flag == "--memory-mb":
            memory_mb = value
        else:
            cpu_s = value
    _set_pdeathsig()
    _limit(resource.RLIMIT_CORE, 0)
    if memory_mb > 0 and not _nvidia_gpu_visible():
        _limit(resource.RLIMIT_AS, memory_mb * 1024 * 1024)
    if cpu_s > 0:
        _limit(resource.RLIMIT_CPU, cpu_s)
    import memlab.grading  # noqa: F401  captures the originals before learner code runs

    # no automagic: a one-line cell `reset -f` or `cd ..` is a magic only with its `%`, which the
    # audit sees (memlab.autograde.security.audit); with automagic on it would run unseen
    sys.argv = ["ipykernel_launcher", "--IPKernelApp.ignore_cwd=True",
                "--InteractiveShell.automagic=False", *argv]
    if not seal:
        import runpy

        runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)
        return
    # what ipykernel_launcher does (IPKernelApp.launch_instance), with the seal in between
    from ipykernel.kernelapp import IPKernelApp

    from memlab.autograde.security import landlock

    app = IPKernelApp.instance()
    app.initialize(sys.argv[1:])
    landlock.seal()
    app.start()


def write_kernelspec(data_dir: str | Path, memory_mb: int = 0, cpu_s: int = 0) -> Path:
    """Write kernels/memlab-grader/kernel.json under ``data_dir`` (put ``data_dir`` first on
    JUPYTER_PATH). Returns the kernelspec folder."""
    folder = Path(data_dir) / "kernels" / KERNEL_NAME
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [*LAUNCHER, "--memory-mb", str(memory_mb), "--cpu-s", str(cpu_s),
                 "-f", "{connection_file}"],
        "display_name": "GPU Memory Lab grader (limited)",
        "language": "python",
        "metadata": {"debugger": False},
    }
    (folder / "kernel.json").write_text(json.dumps(spec, indent=1))
    return folder


if __name__ == "__main__":
    main()
