"""An OS sandbox for each graded kernel: bubblewrap (``bwrap``), no network, own PID namespace.

Used by: :mod:`memlab.autograde.batch.grade_class` (``grade-class`` starts every learner kernel through
:class:`SandboxKernelManager`), tests/grading/test_sandbox.py, benchmarks/sandbox_overhead.py.

What a sandboxed kernel gets (see :func:`bwrap_argv`):

* every namespace unshared (``--unshare-all``): no network (only a downed loopback), its own
  PID namespace (it cannot see or signal the grader; ``--die-with-parent`` and the namespace's
  init take everything it started down with it), its own IPC/UTS namespaces, a new terminal
  session (no TIOCSTI into the grader's terminal);
* a read-only view of the system (``/usr`` and the merged-usr links, a short list of
  ``/etc`` files, ``/sys/devices/system/cpu`` for torch's cpuinfo), of the Python installation
  and of the venv, and **exactly one writable folder**: the folder the kernel runs in (a private
  copy of nbgrader's autograded folder of this one submission, :func:`private_run_folder`:
  nbgrader's own folder, which it writes and copies from unsandboxed, stays out of reach),
  shown at :data:`INSIDE` (``/submission``), so its
  real path, which names the grader's folders, is not visible either. ``/tmp`` is a view of a
  subfolder of it;
  ``$HOME``, the IPython profile and matplotlib's cache live in it too;
* memlab: the venv installs memlab *editable* (a ``.pth`` line pointing at the checkout's
  ``src/``). Binding the checkout would show solutions/, the gradebook and every submission, so
  only ``src/memlab`` is bound, read-only, at its own path: the ``.pth`` line still resolves,
  nothing beside it exists. (A non-editable install into a second venv would work too, but it
  would have to be rebuilt after every edit of memlab and could silently grade with stale
  code.) Instructor-only modules inside memlab (:data:`INSTRUCTOR_ONLY`) are covered by an
  empty read-only folder;
* not mounted at all: solutions/, notebooks/, autograder/ (gradebook, other students'
  submissions, the worker's own course), the rest of the checkout, ``/home``, ``/root``
  (apart from the Python installation when it lives there), ``/var``, ``/run``, ``/mnt``;
* kernel and client talk over Unix sockets (jupyter_client ``transport="ipc"``) in
  ``<folder>/.kernel/``, so the network namespace stays empty; interrupts are sent as messages
  (kernelspec ``interrupt_mode: "message"``) because a signal to ``bwrap`` does not reach the
  kernel;
* a wall-clock limit from outside: the command is wrapped in coreutils ``timeout -s KILL``, a
  process of its own that kills the sandbox at the limit whether or not the grader is running
  (a stopped or busy grader cannot extend a job).

Where bubblewrap is missing or unusable (macOS, no unprivileged user namespaces),
:func:`available` says why; the kernel then runs unsandboxed, :func:`warn_unsandboxed`
prints a loud warning and grade-class records ``unsandboxed`` in its report.

``python -m memlab.autograde.security.bwrap`` prints what :func:`available` finds.
"""
from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from typing import Iterable, Sequence

from jupyter_client.manager import AsyncKernelManager
from traitlets import Bool, CaselessStrEnum, Float, Unicode

__all__ = ["available", "bwrap_argv", "SandboxKernelManager", "warn_unsandboxed",
           "INSTRUCTOR_ONLY", "KERNEL_DIR", "UNSANDBOXED_WARNING"]

# Relative to the memlab package folder: hidden from every sandboxed kernel (an empty read-only
# folder is bound over each one that exists).
INSTRUCTOR_ONLY: tuple[str, ...] = ("grading/oracles",)
KERNEL_DIR = ".kernel"       # connection file, IPC sockets, HOME and /tmp of one kernel
INSIDE = "/submission"       # where the writable folder appears inside the sandbox (its real
                             # path, which names the grader's folders, is not shown)
UNSANDBOXED_WARNING = (
    "WARNING: bubblewrap (bwrap) is not usable here ({why}): learner code runs UNSANDBOXED, with "
    "your user's rights, network and files. Install it (Debian/Ubuntu: apt-get install "
    "bubblewrap) or grade inside a container; see autograder/README.md, Security.")

# /etc entries a Python + torch kernel needs (name lookups for getpwuid, the dynamic linker's
# cache, time zone, fonts for matplotlib). Nothing with secrets: no shadow, ssh, ssl keys.
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf",
        "localtime", "timezone", "fonts", "mime.types", "alternatives", "os-release",
        "matplotlibrc", "host.conf", "hosts")
_ENV_KEEP = ("LANG", "LC_ALL", "LC_CTYPE", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "OPENBLAS_NUM_THREADS", "PYTHONHASHSEED", "PYDEVD_DISABLE_FILE_VALIDATION",
             "CUDA_VISIBLE_DEVICES", "MPLBACKEND", "TZ")


@functools.lru_cache(maxsize=None)
def available() -> tuple[bool, str]:
    """(True, version) when bwrap runs a command in fresh namespaces here; (False, why) if not."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False, "bwrap not found on PATH"
    probe = [exe, "--unshare-all", "--die-with-parent", "--new-session", "--proc", "/proc",
             "--dev", "/dev", *_system_binds(), "true"]
    try:
        out = subprocess.run(probe, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap failed to start ({type(exc).__name__}: {exc})"
    if out.returncode != 0:
        return False, f"bwrap cannot create namespaces here: {(out.stderr or '').strip()[:200]}"
    ver = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    return True, ver or "bubblewrap"


def warn_unsandboxed(why: str | None = None) -> str:
    """Print (stderr) and return the loud warning for a run without the sandbox."""
    msg = UNSANDBOXED_WARNING.format(why=why or available()[1])
    bar = "!" * 78
    sys.stderr.write(f"\n{bar}\n{msg}\n{bar}\n")
    sys.stderr.flush()
    return msg


# The OS folders a Python + torch process reads (bubblewrap binds them, Landlock allows them).
SYSTEM_TOPS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def _system_binds() -> list[str]:
    """--ro-bind / --symlink arguments for the OS: /usr, the merged-usr links, some of /etc."""
    args: list[str] = []
    for top in SYSTEM_TOPS:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for name in _ETC:
        p = os.path.join("/etc", name)
        if os.path.exists(p):
            args += ["--ro-bind", p, p]
    if os.path.isdir("/sys/devices/system/cpu"):  # torch's cpuinfo reads the CPU topology
        args += ["--ro-bind", "/sys/devices/system/cpu", "/sys/devices/system/cpu"]
    return args


def python_dirs() -> list[str]:
    """The interpreter's installation and the venv (outside /usr), outermost folders only; a
    venv reached through a link is named by its own path too (its bin/python links into the
    base installation)."""
    paths: list[str] = []
    for p in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))):
        p = os.path.realpath(p)
        if p.startswith("/usr/") or p == "/usr":
            continue  # part of the system folders
        if not any(p == q or p.startswith(q + os.sep) for q in paths):
            paths = [q for q in paths if not q.startswith(p + os.sep)] + [p]
    if os.path.realpath(sys.prefix) != sys.prefix and os.path.isdir(sys.prefix):
        paths.append(sys.prefix)
    return paths


def _python_binds() -> list[str]:
    """The interpreter's installation and the venv, read-only, at their own paths."""
    args: list[str] = []
    for p in python_dirs():
        args += ["--ro-bind", p, p]
    return args


def memlab_package() -> tuple[str | None, bool]:
    """(memlab's package folder, whether it lies inside the venv or the Python installation);
    (None, False) when memlab cannot be found."""
    import importlib.util

    spec = importlib.util.find_spec("memlab")
    if spec is None or not spec.submodule_search_locations:
        return None, False
    pkg = os.path.realpath(list(spec.submodule_search_locations)[0])
    inside = any(pkg.startswith(os.path.realpath(p) + os.sep) for p in (sys.prefix, sys.base_prefix))
    return pkg, inside


def _memlab_parent() -> str | None:
    """The folder holding the memlab package when it is not installed inside the venv."""
    pkg, inside = memlab_package()
    return None if pkg is None or inside else os.path.dirname(pkg)


def _memlab_binds() -> list[str]:
    """memlab's package folder read-only at its own path; instructor-only parts covered."""
    pkg, inside = memlab_package()
    if pkg is None:
        return []
    # a regular (non-editable) install lies inside the venv, already bound
    args = [] if inside else ["--ro-bind", pkg, pkg]
    for rel in INSTRUCTOR_ONLY:
        hidden = os.path.join(pkg, rel)
        if os.path.isdir(hidden):
            args += ["--tmpfs", hidden, "--remount-ro", hidden]
        elif os.path.exists(hidden + ".py"):
            args += ["--ro-bind", "/dev/null", hidden + ".py"]
    return args


def bwrap_argv(command: Sequence[str], writable: str | os.PathLike, *,
               env: dict[str, str] | None = None, wall_seconds: float = 0,
               extra_ro: Iterable[str] = (), links: dict[str, str] | None = None) -> list[str]:
    """The full command line that runs ``command`` sandboxed with ``writable`` as its only
    writable folder (shown inside at INSIDE, also seen as /tmp through ``writable/.kernel/tmp``)
    and cwd. ``env``: the variables to pass (everything else is cleared; HOME, TMPDIR and
    MPLCONFIGDIR point into the folder). ``wall_seconds`` > 0: killed after that many seconds
    (coreutils ``timeout -s KILL``, outside the sandbox)."""
    exe = shutil.which("bwrap")
    if exe is None:
        raise FileNotFoundError("bwrap not found on PATH")
    folder = os.path.realpath(writable)
    tmp = os.path.join(prepare_kernel_dir(folder), "tmp")
    args = [exe, "--unshare-all", "--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534",
            "--die-with-parent", "--new-session",
            "--proc", "/proc", "--dev", "/dev",
            # /tmp first: a checkout or venv that lives under /tmp is then bound on top of it
            "--bind", tmp, "/tmp", *_system_binds(), *_python_binds(),
            *_memlab_binds()]
    for p in extra_ro:
        args += ["--ro-bind", p, p]
    args += ["--bind", folder, INSIDE]
    for link, target in (links or {}).items():  # symbolic links (not writable places)
        args += ["--symlink", INSIDE if os.path.realpath(target) == folder else target, link]
    args += ["--chdir", INSIDE, "--clearenv"]
    # inside, /tmp is the view of the folder's .kernel/tmp
    base_env = kernel_env(os.path.join(INSIDE, KERNEL_DIR), env, tmp="/tmp")
    pkg_parent = _memlab_parent()
    if pkg_parent:  # the memlab the grader imports, whether found by .pth or PYTHONPATH
        base_env["PYTHONPATH"] = pkg_parent
    for key, value in sorted(base_env.items()):
        args += ["--setenv", key, value]
    args += ["--", *command]
    if wall_seconds and wall_seconds > 0:
        timeout = shutil.which("timeout")
        if timeout:
            args = [timeout, "-s", "KILL", f"{float(wall_seconds):g}", *args]
    return args


def prepare_kernel_dir(folder: str) -> str:
    """Create ``folder/.kernel/{home,tmp,mpl}`` (matplotlib's font cache seeded); its path."""
    kdir = os.path.join(folder, KERNEL_DIR)
    for d in ("home", "tmp", "mpl"):
        os.makedirs(os.path.join(kdir, d), exist_ok=True)
    _seed_matplotlib_cache(os.path.join(kdir, "mpl"))
    return kdir


def kernel_env(kdir: str, src_env: dict | None = None, *, tmp: str | None = None) -> dict[str, str]:
    """The whole environment of a sandboxed process whose ``.kernel`` folder is seen at
    ``kdir``: PATH, HOME, TMPDIR (``tmp``, default ``kdir/tmp``), matplotlib's and IPython's
    folders, no user site, no bytecode, and the :data:`_ENV_KEEP` variables of ``src_env``
    (default: this process's); nothing else of the grader's."""
    home = os.path.join(kdir, "home")
    env = {"PATH": os.pathsep.join([os.path.join(sys.prefix, "bin"), "/usr/local/bin", "/usr/bin", "/bin"]),
           "HOME": home, "TMPDIR": tmp or os.path.join(kdir, "tmp"),
           "MPLCONFIGDIR": os.path.join(kdir, "mpl"), "PYTHONNOUSERSITE": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "IPYTHONDIR": os.path.join(home, ".ipython")}
    src = dict(os.environ if src_env is None else src_env)
    for key in _ENV_KEEP:
        if key in src:
            env[key] = src[key]
    return env


def _seed_matplotlib_cache(mpl_dir: str) -> None:
    """Copy the grader's matplotlib font cache (so the kernel neither rebuilds it, ~2 s, nor warns
    on stderr about an unwritable cache)."""
    try:
        import glob

        src = os.environ.get("MPLCONFIGDIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                             "matplotlib")
        for f in glob.glob(os.path.join(src, "fontlist-*.json")):
            shutil.copy(f, mpl_dir)
    except OSError:
        pass


def private_run_folder(src: str, root: str | None = None) -> str:
    """A new folder (under ``root``, else the temporary folder) holding a copy of the regular
    files and folders of ``src`` (links, sockets, FIFOs and devices skipped; nothing followed):
    the only folder a learner kernel can write. Its path."""
    dest = tempfile.mkdtemp(prefix="run-", dir=root)
    for top, dirs, files in os.walk(src, followlinks=False):
        rel = os.path.relpath(top, src)
        dirs[:] = [d for d in dirs if d not in (KERNEL_DIR, ".ipynb_checkpoints")
                   and not os.path.islink(os.path.join(top, d))]
        for d in dirs:
            os.makedirs(os.path.join(dest, rel, d), exist_ok=True)
        for name in files:
            path = os.path.join(top, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
            except OSError:  # a link (O_NOFOLLOW), or gone
                continue
            with os.fdopen(fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                with open(os.path.join(dest, rel, name), "xb") as out:
                    shutil.copyfileobj(fh, out)
    return dest


class SandboxKernelManager(AsyncKernelManager):
    """A jupyter_client kernel manager that starts its kernel inside bubblewrap.

    Set as ``Execute.kernel_manager_class`` (nbgrader's autograde). The kernel runs in its own
    run folder, a copy of the notebook's folder made by :func:`private_run_folder` (under
    ``run_root``), never in nbgrader's autograded folder itself: nbgrader writes the executed
    notebook there and generate_feedback copies from it, both unsandboxed. The run folder is
    the only one the kernel can write; its connection file and IPC sockets live in
    ``<run folder>/.kernel/``. Without bwrap it starts the
    kernel unsandboxed (after :func:`warn_unsandboxed`), over the same IPC transport."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)
    sandbox = Bool(True, help="Run the kernel under bubblewrap when it is available.").tag(config=True)
    wall_seconds = Float(0.0, help="Kill the kernel (from outside the sandbox) after this many "
                                   "seconds; 0: no limit.").tag(config=True)
    sandbox_state = Unicode("")  # "bwrap" or "unsandboxed (why)" once started

    run_root = Unicode("", help="Folder under which each kernel gets its own run folder (see "
                       "private_run_folder); empty: a new temporary folder.").tag(config=True)

    async def _async_pre_start_kernel(self, **kw):
        # The kernel runs in a COPY of the notebook's folder, never in it: nbgrader writes the
        # autograded notebook into that folder and generate_feedback copies from it, both
        # unsandboxed, so learner code must not be able to plant a link or swap a file there.
        src = os.path.realpath(kw.get("cwd") or os.getcwd())
        cwd = private_run_folder(src, self.run_root or None)
        self._run_folder = cwd
        kw["cwd"] = cwd
        kdir = os.path.join(cwd, KERNEL_DIR)
        os.makedirs(kdir, exist_ok=True)
        self.transport = "ipc"
        name = f"kernel-{uuid.uuid4().hex[:8]}"
        self.connection_file = os.path.join(kdir, name + ".json")
        # A Unix socket path has at most 107 bytes and the folder's path can be longer: the
        # sockets are addressed through a short link /tmp/mlk-<random> -> the folder (the
        # same link exists inside the sandbox).
        base = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()  # short, not $TMPDIR
        self._short_link = os.path.join(base, f"mlk-{uuid.uuid4().hex[:12]}")
        os.symlink(cwd, self._short_link)
        self.ip = os.path.join(self._short_link, KERNEL_DIR, name)
        self._sandbox_cwd = cwd
        if self.sandbox and available()[0]:
            # SIGINT to bwrap would kill the sandbox, not interrupt the cell: ask the kernel.
            self.kernel_spec.interrupt_mode = "message"
        return await super()._async_pre_start_kernel(**kw)

    def format_kernel_cmd(self, extra_arguments=None):
        cmd = super().format_kernel_cmd(extra_arguments)
        ok, why = available() if self.sandbox else (False, "disabled by configuration")
        if not ok:
            if self.sandbox:
                warn_unsandboxed(why)
            self.sandbox_state = f"unsandboxed ({why})"
            return cmd
        self.sandbox_state = "bwrap"
        # Inside, the folder is INSIDE and the short link points there: the kernel reads its
        # connection file through the link (the same file, a path valid on both sides).
        short_cf = os.path.join(self._short_link, KERNEL_DIR, os.path.basename(self.connection_file))
        cmd = [short_cf if a == self.connection_file else a for a in cmd]
        return bwrap_argv(cmd, self._sandbox_cwd, wall_seconds=self.wall_seconds,
                          links={self._short_link: self._sandbox_cwd})

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        link = getattr(self, "_short_link", None)
        if link and not restart and os.path.islink(link):
            os.unlink(link)
        if not restart and getattr(self, "_run_folder", None):
            # the kernel's copy, its sockets, HOME and /tmp: nothing in it is read by the grader
            try:
                shutil.rmtree(self._run_folder, ignore_errors=True)
            except RecursionError:  # a tree too deep for it: the job's end removes it
                pass


if __name__ == "__main__":
    ok, why = available()
    print(("sandbox: bubblewrap usable: " if ok else "sandbox: NOT usable: ") + why)
    sys.exit(0 if ok else 1)
