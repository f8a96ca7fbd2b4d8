"""The grading processes of class grading: a warm zygote, the grading child, warm kernels.

Part of :mod:`memlab.grading.grade_class` (which re-exports the public names).
:func:`memlab.grading.jobs.grade_job` starts one *grading child* per job (:func:`_start_child`):
forked from this process's warm *zygote* (:func:`_zygote_main`: nbgrader, torch, memlab and
ipykernel imported once, :func:`_preload`), or a fresh interpreter when ``settings["warm"]`` is
false. The child (:func:`_child_main`) runs in its own session so that one kill reaches it and
its kernels, forks the job's kernels first (:class:`_WarmKernels`: before any thread exists
and before the job is loaded), then grades the job (:func:`memlab.grading.runner._grade_in_child`)
and writes its result atomically. :class:`WarmKernelManager` is nbclient's kernel manager that
hands a pre-forked kernel to a kernel whose argv is the course's launcher.

The zygote and the non-warm child are started with ``python -c "from memlab.grading.warm import
..."``: the functions named there live in this module.
"""
from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .runner import _failed_result, _first_line, _grade_in_child, sandbox_state


class _Child:
    """A grading child: its own session (process group) so that a kill reaches all of it."""

    def __init__(self, pid: int, popen: subprocess.Popen | None = None):
        self.pid, self.popen = pid, popen

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        try:
            os.kill(self.pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.popen is not None:
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


_ZYGOTE: subprocess.Popen | None = None
_ZYGOTE_LOCK = threading.Lock()


def _child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    bin_dir = str(Path(sys.executable).parent)  # nbgrader runs `alembic` from PATH
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    return env


def _start_child(jobdir: Path, job: dict) -> _Child:
    global _ZYGOTE
    s = job["settings"]
    threads = max(1, int(s.get("threads") or 1))
    if not s.get("warm", True):
        popen = subprocess.Popen(
            [sys.executable, "-c",
             f"from {__name__} import _child_main; _child_main({str(jobdir)!r}, 0, {threads})"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=_child_env(), start_new_session=True)
        return _Child(popen.pid, popen)
    with _ZYGOTE_LOCK:
        for attempt in range(2):
            if _zygote_locked() is None:
                continue
            try:
                kernels = len(job["course"]["notebooks"]) if isinstance(job["course"], dict) else 1
                if sandbox_state(job["settings"])[0]:
                    kernels = 0  # bubblewrap kernels start from their own argv: nothing to pre-fork
                _ZYGOTE.stdin.write(f"{jobdir}\t{kernels}\t{threads}\n".encode())
                _ZYGOTE.stdin.flush()
                line = _ZYGOTE.stdout.readline().strip()
                return _Child(int(line))
            except (BrokenPipeError, OSError, ValueError):
                _ZYGOTE.kill()
                _ZYGOTE.wait()
                _ZYGOTE = None
        raise RuntimeError("the warm grading process could not start (run with warm=False to see why)")


def _zygote_locked() -> subprocess.Popen | None:
    """This process's zygote, started now if it is not running (None: it did not start).
    Call with ``_ZYGOTE_LOCK`` held."""
    global _ZYGOTE
    if _ZYGOTE is None or _ZYGOTE.poll() is not None:
        _ZYGOTE = subprocess.Popen(
            [sys.executable, "-c", f"from {__name__} import _zygote_main; _zygote_main()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_child_env(), start_new_session=True)
        if _ZYGOTE.stdout.readline().strip() != b"ready":
            _ZYGOTE.kill()
            _ZYGOTE.wait()
            _ZYGOTE = None
    return _ZYGOTE


def warm_up() -> None:
    """Start this process's zygote now (a pool initializer: the first job then pays nothing)."""
    with _ZYGOTE_LOCK:
        _zygote_locked()


def _set_pdeathsig() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _preload() -> None:
    """What the zygote imports once: the grader's stack and the kernel's (torch, memlab)."""
    import warnings

    warnings.filterwarnings("ignore", message=".*not in session.*")
    import nbformat  # noqa: F401
    import nbgrader.apps  # noqa: F401
    import nbgrader.api  # noqa: F401
    import nbgrader.converters  # noqa: F401
    import nbgrader.preprocessors  # noqa: F401
    import nbconvert  # noqa: F401
    import nbclient  # noqa: F401
    import jupyter_client  # noqa: F401
    import traitlets.config.loader  # noqa: F401

    from . import course  # noqa: F401
    try:  # the kernel's side: forked kernels skip these imports
        import ipykernel.kernelapp  # noqa: F401
        import ipykernel.ipkernel  # noqa: F401
        import IPython  # noqa: F401
        import torch  # noqa: F401
        # The first ml.measure_peak (a TorchDispatchMode) makes torch import ~800 modules
        # (torch._dynamo, sympy, ...): 4-25 s in every notebook's first measuring cell, and a
        # per-cell timeout there could leave torch half-imported. Imported here once instead.
        import torch._dynamo  # noqa: F401
        import torch.utils.checkpoint  # noqa: F401
        import memlab  # noqa: F401
        import memlab.grading  # noqa: F401  captures the originals before any learner code
        from . import kernel  # noqa: F401
        import matplotlib  # noqa: F401  (not pyplot: the kernel picks its backend itself)
        import matplotlib_inline.backend_inline  # noqa: F401
    except Exception:
        pass
    import importlib

    for name in getattr(sys.modules.get("memlab"), "MODULES", {}).values():
        if name.startswith(("measure.", "lessons.")):  # what the notebooks import
            try:
                importlib.import_module(f"memlab.{name}")
            except Exception:
                pass


def _lines_while_parent_lives(fd: int, poll_s: float = 1.0, parent: int | None = None):
    """Lines read from ``fd`` until EOF, or until this process's parent ``parent`` (default: the
    parent now) is gone (reparented): EOF alone is not enough, because a forked sibling may
    still hold the pipe's write end. Pass the parent read at start-up: read later, a parent
    that died in between would already be the reaper, and its death never noticed."""
    import select

    parent = os.getppid() if parent is None else parent
    buf = b""
    while True:
        while b"\n" not in buf:
            ready, _, _ = select.select([fd], [], [], poll_s)
            if not ready:
                if os.getppid() != parent:
                    return
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            buf += chunk
        line, buf = buf.split(b"\n", 1)
        yield line.decode("utf-8", "replace")


def _zygote_main() -> None:
    """Warm image: imports once, then forks one grading child per job directory read on stdin
    (replies with the child's pid). Exits when its parent closes stdin or dies; its children
    (PR_SET_PDEATHSIG) and their kernels die with it."""
    parent = os.getppid()  # before anything slow: the grader may die while we import
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped automatically
    proto.write("ready\n")
    for line in _lines_while_parent_lives(0, parent=parent):
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 3:
            continue
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.setsid()
                _set_pdeathsig()  # the zygote dies -> this child dies -> its kernel dies
                os.dup2(devnull, 0)
                os.close(proto.fileno())
                _child_main(parts[0], int(parts[1]), int(parts[2]))
                code = 0
            finally:
                os._exit(code)
        proto.write(f"{pid}\n")


def _child_main(jobdir: str, kernels: int = 0, threads: int = 1) -> None:
    """Grade the job in ``jobdir/job.pkl``; write ``jobdir/result.pkl`` (atomically).
    ``kernels`` warm kernels are forked first: before any thread exists in this process and
    before the job is loaded (a kernel's memory holds nothing of the job)."""
    jobdir_p = Path(jobdir)
    log = os.open(str(jobdir_p / "log.txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(max(1, threads))
    _WarmKernels.prefork(kernels, max(1, threads))
    with open(jobdir_p / "job.pkl", "rb") as fh:
        job = pickle.load(fh)
    (jobdir_p / "job.pkl").unlink()  # the gradebook copy in it: not left for learner code
    try:
        result = _grade_in_child(job, jobdir_p, kernel_manager=f"{__name__}.WarmKernelManager",
                                 launched=_WarmKernels.launched)
    except Exception as exc:
        import traceback

        traceback.print_exc()
        result = _failed_result(job, f"grader error ({type(exc).__name__}: {_first_line(exc, 120)}): scores 0", 0.0)
    finally:
        _WarmKernels.discard()
    import resource

    # CPU seconds of this job: this process (reset at fork) and its reaped kernels. Unlike the
    # wall time it does not grow with the machine's load (benchmarks/grading_speed.py).
    ru = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    if isinstance(result.get("timings"), dict):
        result["timings"]["cpu"] = round(sum(r.ru_utime + r.ru_stime for r in ru), 2)
    tmp = jobdir_p / "result.tmp"
    with open(tmp, "wb") as fh:
        pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, jobdir_p / "result.pkl")


# ------------------------------------------------------------------ warm kernels
class _Forked:
    """Popen-like handle of a kernel forked by this process (for jupyter_client)."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -9
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired([str(self.pid)], timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class _WarmKernels:
    """Kernels-to-be forked from the warm child before it starts any thread; each waits on a
    pipe for (argv, env, cwd) and then becomes the kernel (:func:`memlab.grading.kernel.main`)."""

    slots: list[tuple[int, int]] = []   # (pid, write end of its pipe)
    launched = {"warm": 0, "exec": 0}   # kernels started each way (reported in the timings)

    @staticmethod
    def prefix() -> list[str]:
        from . import kernel

        return [sys.executable, "-m", kernel.__name__]

    @classmethod
    def prefork(cls, n: int, threads: int) -> None:
        for _ in range(max(0, n)):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(w)
                code = 0
                try:
                    for _pid, other in cls.slots:
                        os.close(other)
                    data = b""
                    while chunk := os.read(r, 1 << 16):
                        data += chunk
                    if not data:
                        os._exit(0)
                    argv, env, cwd = pickle.loads(data)
                    os.setpgid(0, 0)          # its own group, as a kernel started with exec
                    _set_pdeathsig()          # the grading child dies -> the kernel dies
                    null = os.open(os.devnull, os.O_RDONLY)
                    os.dup2(null, 0)
                    os.environ.clear()
                    os.environ.update(env)
                    if cwd:
                        os.chdir(cwd)
                    try:
                        import torch

                        torch.set_num_threads(threads)
                    except Exception:
                        pass
                    from . import kernel

                    sys.argv = list(argv)
                    kernel.main(list(argv[len(cls.prefix()):]))
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
                except BaseException:
                    import traceback

                    traceback.print_exc()
                    code = 1
                finally:
                    os._exit(code)
            os.close(r)
            cls.slots.append((pid, w))

    @classmethod
    def take(cls, argv: list[str], env: dict | None, cwd: str | None) -> _Forked | None:
        if not cls.slots or list(argv[:3]) != cls.prefix():
            return None
        pid, w = cls.slots.pop(0)
        payload = pickle.dumps((list(argv), dict(env or os.environ), cwd))
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(w, view):]
        finally:
            os.close(w)
        return _Forked(pid)

    @classmethod
    def discard(cls) -> None:
        while cls.slots:
            pid, w = cls.slots.pop()
            os.close(w)  # EOF: the waiting process exits
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


try:
    from jupyter_client import AsyncKernelManager as _AKM
except Exception:  # pragma: no cover (jupyter_client is a dependency of nbgrader)
    _AKM = object


class WarmKernelManager(_AKM):
    """nbclient's kernel manager for grading: a kernel whose argv is the course's launcher
    becomes one of the pre-forked warm processes (torch and memlab already imported) instead of
    a fresh interpreter; anything else (another kernelspec hook) starts as usual."""

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        proc = _WarmKernels.take(kernel_cmd, kw.get("env"), kw.get("cwd"))
        if proc is None:
            _WarmKernels.launched["exec"] += 1
            return await super()._async_launch_kernel(kernel_cmd, **kw)
        _WarmKernels.launched["warm"] += 1
        prov = self.provisioner
        prov.process = proc
        prov.pid = proc.pid
        prov.pgid = proc.pid
        prov.cwd = kw.get("cwd")
        self._reconcile_connection_info(prov.connection_info)
