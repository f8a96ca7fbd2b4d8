"""The grading processes of class grading: a warm zygote, the grading child, warm kernels.

Part of :mod:`memlab.autograde.batch.grade_class` (which re-exports the public names).
:func:`memlab.autograde.batch.jobs.grade_job` starts one *grading child* per job (:func:`_start_child`):
forked from this process's warm *zygote* (:func:`_zygote_main`: nbgrader, torch, memlab and
ipykernel imported once, :func:`_preload`), or a fresh interpreter when ``settings["warm"]`` is
false. The child (:func:`_child_main`) runs in its own session so that one kill reaches it and
its kernels, forks the job's kernels first (:class:`_WarmKernels`: before any thread exists
and before the job is loaded), then grades the job (:func:`memlab.autograde.batch.runner._grade_in_child`)
and writes its result atomically. :class:`WarmKernelManager` is nbclient's kernel manager that
hands a pre-forked kernel to a kernel whose argv is the course's launcher.

The zygote and the non-warm child are started with ``python -c "from memlab.autograde.batch.processes import
..."``: the functions named there live in this module.
"""
from __future__ import annotations

import os
import pickle
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from memlab.autograde.batch.runner import _failed_result, _first_line, _grade_in_child, sandbox_mode
from memlab.autograde.security.cgroup import kill_until_gone


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


# What the grading processes keep of the instructor's environment: a warm kernel is forked from
# them, and a process's /proc/self/environ shows the environment it was started with, whatever
# it later sets; so a token or a password in the instructor's shell never reaches one.
_ENV_ALLOWED = re.compile(r"^(?:PATH|HOME|TMPDIR|TEMP|TMP|LANG|LANGUAGE|TZ|LC_\w+|PYTHON\w*|"
                          r"VIRTUAL_ENV|JUPYTER_\w+|IPYTHONDIR|MPL\w+|XDG_\w+|CUDA_\w+|NVIDIA_\w+|"
                          r"LD_LIBRARY_PATH|OMP_\w+|MKL_\w+|OPENBLAS_\w+|KMP_\w+|TORCH\w*|"
                          r"PYTORCH_\w+|MEMLAB_\w+|COVERAGE_\w+|SSL_CERT_\w+)$")


def _child_env() -> dict:
    env = {k: v for k, v in os.environ.items() if _ENV_ALLOWED.match(k)}
    env["PYTHONUNBUFFERED"] = "1"
    bin_dir = str(Path(sys.executable).parent)  # nbgrader runs `alembic` from PATH
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    return env


def _start_child(jobdir: Path, job: dict) -> _Child:
    global _ZYGOTE
    s = job["settings"]
    threads = max(1, int(s.get("threads") or 1))
    pids = max(0, int(s.get("job_pids_max") or 0))
    if not s.get("warm", True):
        popen = subprocess.Popen(
            [sys.executable, "-P", "-c",
             f"from {__name__} import _child_main; "
             f"_child_main({str(jobdir)!r}, 0, {threads}, {pids})"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=_child_env(), start_new_session=True)
        return _Child(popen.pid, popen)
    with _ZYGOTE_LOCK:
        for attempt in range(2):
            if _zygote_locked() is None:
                continue
            try:
                kernels = len(job["course"]["notebooks"]) if isinstance(job["course"], dict) else 1
                mode = sandbox_mode(job["settings"])[0]
                if mode == "bwrap":
                    kernels = 0  # bubblewrap kernels start from their own argv: nothing to pre-fork
                elif mode == "landlock" and job["settings"].get("verdict", True):
                    kernels *= 2  # and one confined verdict re-run per notebook
                _ZYGOTE.stdin.write(f"{jobdir}\t{kernels}\t{threads}\t{pids}\n".encode())
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
            [sys.executable, "-P", "-c", f"from {__name__} import _zygote_main; _zygote_main()"],
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


def _set_subreaper() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass


def _process_table() -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, state letter)} of every process in /proc."""
    table: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode(errors="replace")
            state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
            table[int(entry)] = (int(ppid), state)
        except (OSError, ValueError, IndexError):
            continue
    return table


def _descendants(root: int, table: dict[int, tuple[int, str]]) -> list[int]:
    """Every living process below ``root`` in ``table``, however deep (zombies left out)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _state) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if table[pid][1] != "Z":
            found.append(pid)
        todo += children.get(pid, [])
    return found


def _reap() -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _sweep_descendants(limit_s: float = 30.0) -> int:
    """Kill every process still below this one (kernels and re-runs are done; what is left was
    detached by learner code and reparented here, the subreaper): the whole tree at once,
    however deep, again until none is left (a process that forked between two looks is caught
    on the next), for at most ``limit_s`` seconds. Returns how many were killed."""
    me = os.getpid()
    killed = kill_until_gone(lambda: _descendants(me, _process_table()), limit_s,
                             pause_s=0.01, between=_reap)
    _reap()
    return killed


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

    from memlab.autograde import course  # noqa: F401
    from memlab.autograde.security import landlock as confine

    _render_once()

    confine.available()  # probed once here (a fork), not in every job
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
        from memlab.autograde.security import kernel  # noqa: F401
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


def _render_once() -> None:
    """One small notebook rendered to HTML: the first ``generate_feedback`` of every job
    imported mistune, pygments with IPython's lexer and parts of jinja2 (24 modules, 0.45 s of
    a 0.9 s feedback on 01); imported here once, in the zygote, instead."""
    try:
        import nbformat
        from nbconvert import HTMLExporter

        nb = nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_markdown_cell("# A *title*\n\n- `code` and $x^2$"),
            nbformat.v4.new_code_cell("print(1)", outputs=[nbformat.v4.new_output("stream", text="1\n")]),
        ])
        nb.metadata["language_info"] = {"name": "python", "pygments_lexer": "ipython3"}
        HTMLExporter().from_notebook_node(nb)
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
    import gc

    # Everything imported so far is moved out of the collector's reach: a child's full
    # collections no longer walk (and so copy, page by page) the image's objects.
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped automatically
    proto.write("ready\n")
    for line in _lines_while_parent_lives(0, parent=parent):
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 4:
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
                _child_main(parts[0], int(parts[1]), int(parts[2]), int(parts[3]))
                code = 0
            finally:
                os._exit(code)
        proto.write(f"{pid}\n")


def _temp_in(jobdir: Path) -> Path:
    """Make ``jobdir/tmp`` the temporary folder of this process and of everything it starts: a
    kernel or a re-run killed at a limit leaves its temporary files (06's rank folders, say) in
    the job's folder, which the batch removes, never in the instructor's temp folder."""
    import tempfile

    tmp = jobdir / "tmp"
    tmp.mkdir(mode=0o700, exist_ok=True)
    for var in ("TMPDIR", "TEMP", "TMP"):
        os.environ[var] = str(tmp)
    tempfile.tempdir = None
    return tmp


def _child_main(jobdir: str, kernels: int = 0, threads: int = 1, pids_max: int = 0) -> None:
    """Grade the job in ``jobdir/job.pkl``; write ``jobdir/result.pkl`` (atomically).
    ``kernels`` warm kernels are forked first: before any thread exists in this process and
    before the job is loaded (a kernel's memory holds nothing of the job). With ``pids_max``,
    this process first enters a cgroup of its own named after the job's folder, where this
    machine allows one (:mod:`memlab.autograde.security.cgroup`): every process of the job is in
    it, at most ``pids_max`` tasks at once, and the job's starter empties it at the end."""
    jobdir_p = Path(jobdir)
    if pids_max > 0:
        from memlab.autograde.security import cgroup

        # the kernel and the verdict's re-run side by side, each with `threads` threads
        cgroup.enter(jobdir_p.name, pids_max, cpus=2.0 * max(1, threads))
    log = os.open(str(jobdir_p / "log.txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(max(1, threads))
    _temp_in(jobdir_p)
    _set_subreaper()  # what a kernel detaches is reparented here, and swept below
    _WarmKernels.prefork(kernels, max(1, threads))
    with open(jobdir_p / "job.pkl", "rb") as fh:
        job = pickle.load(fh)
    (jobdir_p / "job.pkl").unlink()  # the gradebook copy in it: not left for learner code
    _limit_own_memory(int(job.get("settings", {}).get("grader_memory_mb") or 0))
    try:
        result = _grade_in_child(job, jobdir_p, kernel_manager=f"{__name__}.WarmKernelManager",
                                 launched=_WarmKernels.launched,
                                 confined_manager=f"{__name__}.ConfinedKernelManager",
                                 launch=_WarmKernels.take)
    except Exception as exc:
        import traceback

        traceback.print_exc()
        result = _failed_result(job, f"grader error ({type(exc).__name__}: {_first_line(exc, 120)}): scores 0", 0.0)
    finally:
        _WarmKernels.discard()
        _sweep_descendants()
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


def _limit_own_memory(mb: int) -> None:
    """Bound this grading child's own heap (``RLIMIT_DATA``: private writable memory, not the
    shared libraries torch maps): it is not sandboxed, and it reads what a learner's kernel
    sends. A kernel that prints a gigabyte then costs this child a ``MemoryError`` (the job
    scores 0 with "grader error"), never the machine. Set after the kernels are forked: they
    carry their own limit (``--memory-mb``)."""
    if mb <= 0:
        return
    import resource

    want = mb * 1024 * 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (want, hard))


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


def _as_fresh_interpreter() -> None:
    """What a new interpreter would have and the warm image may not: standard streams on the
    descriptors 0-2 and the default warning filters (a warning in a test cell must reach stderr,
    as it does in nbgrader's kernel, whatever the grader's process had set up)."""
    import io
    import warnings

    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True,
                                  errors="backslashreplace")
    import importlib

    importlib.reload(warnings)  # its display functions as loaded (catch_warnings may have replaced them)
    warnings.resetwarnings()
    for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning):
        warnings.simplefilter("ignore", category)   # CPython's defaults (-W none, not -X dev)
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")


class _WarmKernels:
    """Processes forked from the warm child before it starts any thread, each waiting on a pipe
    for its orders: become a learner kernel (:func:`memlab.autograde.security.kernel.main`) or a verdict
    re-run (:func:`memlab.autograde.security.verdict.main`), confined first (:func:`memlab.autograde.security.landlock.confine`)
    to the one folder named in the orders when the job's sandbox is Landlock. A slot that cannot
    confine itself exits (status 70) without running anything of the learner's."""

    slots: list[tuple[int, int, int]] = []   # (pid, write end of its orders pipe, read end of its report pipe)
    launched = {"warm": 0, "exec": 0}        # kernels started each way (reported in the timings)
    CONFINE_FAILED = 70

    @staticmethod
    def prefix() -> list[str]:
        from memlab.autograde.security import kernel

        return list(kernel.LAUNCHER)

    @classmethod
    def prefork(cls, n: int, threads: int) -> None:
        for _ in range(max(0, n)):
            r, w = os.pipe()
            rr, rw = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(w)
                os.close(rr)
                code = 0
                try:
                    for _pid, other, report in cls.slots:
                        os.close(other)
                        os.close(report)
                    data = b""
                    while chunk := os.read(r, 1 << 16):
                        data += chunk
                    if not data:
                        os._exit(0)
                    os.close(r)
                    code = cls._become(pickle.loads(data), rw, threads)
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
                except BaseException:
                    import traceback

                    traceback.print_exc()
                    code = 1
                finally:
                    os._exit(code)
            os.close(r)
            os.close(rw)
            cls.slots.append((pid, w, rr))

    @classmethod
    def _become(cls, orders: dict, report_fd: int, threads: int) -> int:
        """In the slot: carry out ``orders`` (kind, argv, env, cwd, confine, log)."""
        os.setpgid(0, 0)          # its own group, as a process started with exec
        _set_pdeathsig()          # the grading child dies -> this process dies
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        if orders.get("log"):
            log = os.open(orders["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
        os.environ.clear()
        os.environ.update(orders["env"])
        import tempfile

        tempfile.tempdir = None  # chosen again from the new TMPDIR (the warm image cached /tmp)
        _as_fresh_interpreter()
        if orders.get("cwd"):
            os.chdir(orders["cwd"])
        argv = list(orders["argv"])
        verdict_run = orders["kind"] == "verdict"
        if verdict_run:  # the harness reports on this slot's own pipe
            argv[argv.index("--report-fd") + 1] = str(report_fd)
        else:
            os.close(report_fd)
        if orders.get("confine"):
            from memlab.autograde.security import landlock as confine

            try:
                confine.confine(orders["confine"], keep_fds=(report_fd,) if verdict_run else ())
                if verdict_run:  # a kernel seals itself once its own sockets are bound
                    confine.seal()
            except Exception as exc:  # never run learner code unconfined
                os.write(2, f"grader: the sandbox could not be set up ({type(exc).__name__}: {exc})\n".encode())
                return cls.CONFINE_FAILED
        try:  # after confining: Landlock binds the calling thread, and torch starts a pool here
            import torch

            torch.set_num_threads(threads)
        except Exception:
            pass
        sys.argv = argv
        if verdict_run:
            from memlab.autograde.security import verdict

            verdict.main(argv[len(verdict.HARNESS):])
        else:
            from memlab.autograde.security import kernel

            kernel.main(argv[len(cls.prefix()):], seal=bool(orders.get("confine")))
        return 0

    @classmethod
    def take(cls, argv: list[str], env: dict | None, cwd: str | None, *, kind: str = "kernel",
             confine: str | None = None, log: str | None = None) -> tuple[_Forked, int] | None:
        """Hand orders to the next slot: (its Popen-like handle, read end of its report pipe),
        or None when no slot is left (or a kernel's argv is not the course's launcher)."""
        if not cls.slots or (kind == "kernel" and list(argv[:len(cls.prefix())]) != cls.prefix()):
            return None
        pid, w, rr = cls.slots.pop(0)
        payload = pickle.dumps({"kind": kind, "argv": list(argv), "env": dict(os.environ if env is None else env),
                                "cwd": cwd, "confine": confine, "log": log})
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(w, view):]
        finally:
            os.close(w)
        if kind == "kernel":
            os.close(rr)
            rr = -1
        return _Forked(pid), rr

    @classmethod
    def discard(cls) -> None:
        while cls.slots:
            pid, w, rr = cls.slots.pop()
            os.close(w)  # EOF: the waiting process exits
            os.close(rr)
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
        taken = _WarmKernels.take(kernel_cmd, kw.get("env"), kw.get("cwd"))
        if taken is None:
            _WarmKernels.launched["exec"] += 1
            return await super()._async_launch_kernel(kernel_cmd, **kw)
        _WarmKernels.launched["warm"] += 1
        self._adopt(taken[0], kw.get("cwd"))

    def _adopt(self, proc: "_Forked", cwd: str | None) -> None:
        prov = self.provisioner
        prov.process = proc
        prov.pid = proc.pid
        prov.pgid = proc.pid
        prov.cwd = cwd
        self._reconcile_connection_info(prov.connection_info)


try:
    from memlab.autograde.security.bwrap import SandboxKernelManager as _SKM
except Exception:  # pragma: no cover
    _SKM = object


class ConfinedKernelManager(_SKM):
    """The Landlock sandbox (:mod:`memlab.autograde.security.landlock`): a pre-forked warm kernel that
    confines itself to the notebook's folder before it starts; kernel and client talk over
    Unix sockets in that folder (the transport of the bubblewrap manager). There is no
    unconfined fallback: without a slot left the kernel does not start."""

    async def _async_pre_start_kernel(self, **kw):
        self.sandbox = False  # not bubblewrap; the state below says what it is
        return await super()._async_pre_start_kernel(**kw)

    def format_kernel_cmd(self, extra_arguments=None):
        from memlab.autograde.security import landlock as confine

        cmd = _AKM.format_kernel_cmd(self, extra_arguments)
        self.sandbox_state = f"landlock ({confine.available()[1]})"
        return cmd

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        from memlab.autograde.security.landlock import confined_env

        cwd = self._sandbox_cwd
        env = confined_env(cwd, kw.get("env"))
        taken = _WarmKernels.take(kernel_cmd, env, cwd, confine=cwd)
        if taken is None:
            raise RuntimeError("no confined warm kernel was left for this notebook (the "
                               "grader pre-forks one per notebook): not started unconfined")
        _WarmKernels.launched["warm"] += 1
        WarmKernelManager._adopt(self, taken[0], cwd)
