"""A sandbox a *forked* process puts on itself: Landlock plus fresh user/network/IPC namespaces.

Used by: :mod:`memlab.autograde.batch.processes` (every warm-forked learner kernel and verdict re-run of
``grade-class`` confines itself with :func:`confine` before it runs any learner code),
tests/grading/test_confine.py, benchmarks/sandbox_overhead.py.

Why a second sandbox beside :mod:`memlab.autograde.security.bwrap` (bubblewrap): bubblewrap starts a
*new* program, so every sandboxed kernel and re-run paid a fresh interpreter and the torch
import (two per submission, most of a class's grading time). Landlock is the Linux kernel's
unprivileged self-sandboxing module (https://docs.kernel.org/userspace-api/landlock.html): a
process restricts itself and everything it starts, for good, so a warm process forked with
torch already imported can be confined at no cost. The binding is ``landlockpy`` (PyPI, 0BSD).

What a confined process gets (see :func:`confine`):

* **files** (Landlock, every access right it knows): read and execute on the system (``/usr``
  and the merged-usr links, the same short list of ``/etc`` entries as the bubblewrap sandbox,
  the CPU topology under ``/sys``), on the Python installation, the venv and the memlab package
  (without :data:`memlab.autograde.security.bwrap.INSTRUCTOR_ONLY`); in ``/proc`` only its own entry
  and the machine-wide ``cpuinfo``/``meminfo``/``stat``; ``/dev/null`` (read, write) and the
  random devices. **All rights on exactly one folder**: the one it runs in (one submission's
  copy). Not reachable: solutions/, the gradebooks, the other submissions, ``/tmp``, ``$HOME``,
  other processes' ``/proc`` entries. No mount, no ptrace of anything outside its domain;
* **network**: a new network namespace with nothing but its own loopback (brought up, as
  bubblewrap does: 06's ranks rendezvous on 127.0.0.1), so no TCP, UDP or raw socket reaches
  anything outside the sandbox; kernel and client talk over Unix sockets in the folder (as
  with bubblewrap);
* **signals and abstract Unix sockets** (Landlock scopes, ABI 6): it cannot signal the grader,
  another kernel or any process outside its domain, nor reach their abstract sockets;
* its own user, IPC and UTS namespaces; ``no_new_privs``; every inherited file descriptor above
  2 closed (what the warm parent had open stays out of reach).

Not as bubblewrap: the real path of its folder is visible, paths outside it can be looked up
(``stat``: existence, size, times; Landlock governs opening, listing and changing, not lookup)
though nothing beside the folder can be opened, and it shares the grader's PID namespace (it
can see no other process's ``/proc`` entry and signal none; the grading child kills what it
leaves behind).

Needs Linux with Landlock ABI >= 6 (kernel 6.12+, Landlock enabled) and unprivileged user
namespaces; :func:`available` probes both in a forked process. Where either is missing,
grading falls back to bubblewrap (a cold interpreter per kernel), and without that to the
loudly warned unsandboxed run.

``python -m memlab.autograde.security.landlock`` prints what :func:`available` finds.
"""
from __future__ import annotations

import ctypes
import functools
import os
import sys
from typing import Iterable

__all__ = ["available", "confine", "confined_env", "seal", "MIN_ABI", "read_only_paths"]

MIN_ABI = 6  # signal and abstract-socket scoping: without them a confined process could signal the grader

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUTS = 0x04000000


@functools.lru_cache(maxsize=None)
def available() -> tuple[bool, str]:
    """(True, description) when a forked process here can confine itself; (False, why) if not."""
    if not sys.platform.startswith("linux"):
        return False, "Landlock is Linux-only"
    try:
        import landlockpy
    except ImportError:
        return False, "the landlockpy package is not installed"
    abi = landlockpy.abi_version()
    if abi < MIN_ABI:
        return False, (f"Landlock ABI {abi} (needs {MIN_ABI}: kernel 6.12 or newer with Landlock "
                       "enabled)" if abi else "Landlock is not enabled in this kernel")
    # imported here: the forked probe imports nothing
    from memlab.autograde.security import bwrap  # noqa: F401
    import tempfile

    folder = tempfile.mkdtemp(prefix="memlab-confine-probe-")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the probe: the whole confinement, on an empty folder
        try:
            os.close(r)
            confine(folder, keep_fds=(w,))
            with open(os.path.join(folder, "written"), "w") as fh:
                fh.write("ok")
            try:
                os.listdir(os.path.dirname(folder))
                os.write(w, b"0")
            except PermissionError:
                os.write(w, b"1")
        except BaseException as exc:  # noqa: BLE001
            os.write(w, f"E{type(exc).__name__}: {exc}".encode()[:300])
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        out = fh.read()
    os.waitpid(pid, 0)
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    if out == b"1":
        return True, f"Landlock ABI {abi} + user/network namespaces"
    if out.startswith(b"E"):
        return False, f"a forked process cannot confine itself here ({out[1:].decode(errors='replace')})"
    return False, "a confined probe could still list a folder outside its own"


def _unshare(flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)} (unprivileged user namespaces disabled?)")


def _loopback_up() -> None:
    """Bring up ``lo`` of the new network namespace (as bubblewrap does): 127.0.0.1 inside the
    sandbox reaches only the sandbox."""
    import fcntl
    import socket
    import struct

    siocsifflags, iff_up = 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH14x", b"lo", iff_up))


def read_only_paths() -> tuple[list[str], list[str]]:
    """(folders, files) a confined process may read (and execute): what a Python + torch
    kernel needs and nothing with the grader's data (the bubblewrap sandbox's lists, plus
    what a process there finds in its own /proc, /dev and /sys)."""
    from memlab.autograde.security.bwrap import (_ETC, INSTRUCTOR_ONLY, SYSTEM_TOPS, memlab_package,
                                                 python_dirs)

    dirs: list[str] = []
    files: list[str] = []

    def add(p: str) -> None:
        if not os.path.exists(p):
            return
        (dirs if os.path.isdir(p) else files).append(p)

    for top in SYSTEM_TOPS:
        add(os.path.realpath(top))
    for name in _ETC:
        add(os.path.join("/etc", name))
    add("/sys/devices/system/cpu")
    # gloo (06's distributed ranks) lists the PCI devices' classes; an unreadable folder is an
    # error to it (a missing one is not): the listing and the device folders, read-only
    add("/sys/bus/pci/devices")
    import glob

    for dev in glob.glob("/sys/devices/pci*"):
        add(dev)
    add("/proc/sys/net/core/somaxconn")
    for name in ("cpuinfo", "meminfo", "stat"):
        add(os.path.join("/proc", name))
    add(f"/proc/{os.getpid()}")  # its own entry only (/proc/self of this process)
    for dev in ("urandom", "random", "zero"):
        add(os.path.join("/dev", dev))
    for p in python_dirs():
        add(p)
    pkg, _inside = memlab_package()
    if pkg is not None:  # also when inside the venv: the instructor-only parts stay out
        hidden = {os.path.join(pkg, rel) for rel in INSTRUCTOR_ONLY}
        hidden |= {h + ".py" for h in hidden}
        _add_tree_except(pkg, hidden, add)
    return dirs, files


def listable_paths() -> list[str]:
    """Folders a confined process may list but not read from: the folder holding an editable
    memlab (a new interpreter started inside, such as 06's ranks, finds memlab through the
    venv's ``.pth`` line only if it can list that folder)."""
    from memlab.autograde.security.bwrap import _memlab_parent

    parent = _memlab_parent()
    return [parent] if parent else []


def _add_tree_except(folder: str, hidden: set[str], add) -> None:
    """``add`` the folder, or, when a hidden path lies inside it, each of its entries but those."""
    if not any(h.startswith(folder + os.sep) for h in hidden):
        add(folder)
        return
    for entry in sorted(os.listdir(folder)):
        path = os.path.join(folder, entry)
        if path in hidden:
            continue
        if os.path.isdir(path):
            _add_tree_except(path, hidden, add)
        else:
            add(path)


def _close_fds_except(keep: Iterable[int]) -> None:
    import resource

    low = 3
    for fd in sorted({fd for fd in keep if fd > 2}):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, max(low, resource.getrlimit(resource.RLIMIT_NOFILE)[0]))


def confine(folder: str | os.PathLike, *, keep_fds: Iterable[int] = ()) -> None:
    """Confine this (single-threaded, freshly forked) process, for good, to ``folder``: see the
    module's docstring. Raises OSError when it cannot (the caller must then not run learner
    code). ``keep_fds``: descriptors above 2 that stay open (a report pipe)."""
    import landlockpy as ll

    folder = os.path.realpath(folder)
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:  # Landlock binds the calling thread only: another would stay free
        raise OSError(f"confine needs a single-threaded process ({threads} threads are running)")
    dirs, files = read_only_paths()  # before the namespaces: /proc/<pid> is ours now
    listable = listable_paths()
    _close_fds_except(keep_fds)
    _unshare(_CLONE_NEWUSER | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS)
    fs = ll.AccessFS
    read_dir = fs.READ_FILE | fs.READ_DIR | fs.EXECUTE
    read_file = fs.READ_FILE | fs.EXECUTE
    abi = ll.abi_version()
    if abi < MIN_ABI:
        raise OSError(f"Landlock ABI {abi} < {MIN_ABI}")
    _loopback_up()
    # TCP is not handled by Landlock: the new network namespace has nothing but its own
    # loopback (distributed ranks of 06 rendezvous there), so no address outside it exists.
    with ll.Ruleset(handled_fs=ll.fs_for_abi(abi), handled_net=ll.AccessNet.NONE,
                    scoped=ll.scope_for_abi(abi), best_effort=True) as rules:
        for d in dirs:
            rules.allow_path(d, read_dir)
        for f in files:
            rules.allow_path(f, read_file)
        for d in listable:
            rules.allow_path(d, fs.READ_DIR)
        rules.allow_path("/dev/null", fs.READ_FILE | fs.WRITE_FILE)
        rules.allow_path(folder, ll.fs_for_abi(abi))
        rules.restrict()  # sets no_new_privs first


# seccomp (https://docs.kernel.org/userspace-api/seccomp_filter.html): per architecture, its
# AUDIT_ARCH value and system call numbers (Linux's syscall tables)
_SECCOMP = {
    "x86_64": {"arch": 0xC000003E, "seccomp": 317, "socket": 41, "x32": True,
               # chmod, fchmod, chown, fchown, lchown, utime, utimes, futimesat, fchownat,
               # fchmodat, utimensat, fchmodat2
               "noop": (90, 91, 92, 93, 94, 132, 235, 261, 260, 268, 280, 452),
               # io_uring_setup; setxattr, lsetxattr, fsetxattr, removexattr, lremovexattr,
               # fremovexattr, setxattrat, removexattrat
               "deny": (425, 188, 189, 190, 197, 198, 199, 463, 466)},
    "aarch64": {"arch": 0xC00000B7, "seccomp": 277, "socket": 198, "x32": False,
                # fchmod, fchmodat, fchownat, fchown, utimensat, fchmodat2
                "noop": (52, 53, 54, 55, 88, 452),
                "deny": (425, 5, 6, 7, 14, 15, 16, 463, 466)},
}


def _filter_program(t: dict) -> list[tuple[int, int, int, int]]:
    """The classic-BPF program of :func:`seal` for one architecture's table ``t``."""
    ld_w_abs, jeq_k, jge_k, ret_k = 0x20, 0x15, 0x35, 0x06
    allow, kill = 0x7FFF0000, 0x80000000                # SECCOMP_RET_ALLOW, _KILL_PROCESS
    eacces, noop = 0x00050000 | 13, 0x00050000          # SECCOMP_RET_ERRNO | errno (0: success)
    body: list = [(ld_w_abs, 0, 0, 4), (jeq_k, 1, 0, t["arch"]), (ret_k, 0, 0, kill),
                  (ld_w_abs, 0, 0, 0)]
    if t["x32"]:
        body.append((jge_k, "DENY", 0, 0x40000000))     # the x32 ABI's numbers: refused
    body += [(jeq_k, "NOOP", 0, nr) for nr in t["noop"]]
    body += [(jeq_k, "DENY", 0, nr) for nr in t["deny"]]
    body += [(jeq_k, 0, "ALLOW", t["socket"]),
             (ld_w_abs, 0, 0, 16),                       # low 32 bits of args[0]: the family
             (jeq_k, "DENY", 0, 1)]                      # AF_UNIX
    labels = {"ALLOW": len(body), "DENY": len(body) + 1, "NOOP": len(body) + 2}
    body += [(ret_k, 0, 0, allow), (ret_k, 0, 0, eacces), (ret_k, 0, 0, noop)]
    prog = []
    for i, (code, jt, jf, k) in enumerate(body):
        jt = labels[jt] - i - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - i - 1 if isinstance(jf, str) else jf
        prog.append((code, jt, jf, k))
    return prog


def seal() -> None:
    """From now on no thread of this process, nor anything it starts, can:

    * create a Unix socket (``socket(AF_UNIX, ...)`` fails with EACCES) or an io_uring (which
      could create one without that system call): Landlock (ABI 7) governs opening files, not
      connecting to a pathname socket, so a confined process could reach a server listening
      at any path outside its folder (the bubblewrap sandbox shows no such path at all). A
      socket pair (``socketpair``) stays possible: it reaches nothing outside;
    * change a file's mode, owner or times (chmod, chown, utime and their relatives do nothing
      and report success, so ``shutil.copy`` still works), nor its extended attributes
      (EACCES): Landlock does not govern these either, and the grader's files belong to the
      grader's user, so a confined kernel could ``chmod 000`` the gradebook or make the
      solutions readable to everyone.

    A seccomp filter on every thread (``SECCOMP_FILTER_FLAG_TSYNC``), applied after the process
    has bound its own sockets (the kernel's ZeroMQ sockets, at start) and before any learner
    code runs. Raises OSError where it cannot be applied (an architecture not in the table):
    the caller must then not run learner code."""
    import ctypes
    import platform
    import struct

    table = _SECCOMP.get(platform.machine())
    if table is None:
        raise OSError(f"no seccomp filter for the {platform.machine()} architecture")
    prog = _filter_program(table)
    raw = b"".join(struct.pack("=HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class SockFprog(ctypes.Structure):  # struct sock_fprog
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS (Landlock set it already)
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
    # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog)
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(ctypes.c_long(table["seccomp"]), ctypes.c_uint(1), ctypes.c_uint(1),
                    ctypes.byref(fprog)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: {os.strerror(err)}")


def confined_env(folder: str | os.PathLike, src_env: dict | None = None) -> dict[str, str]:
    """The environment of a confined process in ``folder``: the grader's variables are cleared
    (as bubblewrap's ``--clearenv``); HOME, TMPDIR and matplotlib's cache live in
    ``folder/.kernel/``, which this creates."""
    from memlab.autograde.security.bwrap import kernel_env, prepare_kernel_dir

    return kernel_env(prepare_kernel_dir(os.path.realpath(folder)), src_env)


if __name__ == "__main__":
    ok, why = available()
    print(("confine: usable: " if ok else "confine: NOT usable: ") + why)
    sys.exit(0 if ok else 1)
