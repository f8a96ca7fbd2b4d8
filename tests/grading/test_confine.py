"""memlab.autograde.security.landlock: the Landlock sandbox a warm-forked kernel or re-run puts on itself.

Each test forks a process (as the grader's warm slots are forked), confines it to a fresh
folder and reports, over a pipe, what it could and could not do. The same confinement runs
every graded kernel and verdict re-run of grade-class where Landlock is usable (the hostile
corpus of test_hostile.py is graded through it on such machines).
"""
from __future__ import annotations

import json
import platform
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from memlab.autograde.security import landlock as confine

def _kernel_supports() -> tuple[bool, str]:
    """Whether this machine offers what confine needs, judged without confine itself (so a
    broken confine fails here instead of skipping): Landlock's ABI, and user namespaces (which
    bubblewrap uses too)."""
    try:
        import landlockpy
    except ImportError:
        return False, "landlockpy is not installed"
    from memlab.autograde.security import bwrap as sandbox

    abi = landlockpy.abi_version()
    if abi < confine.MIN_ABI:
        return False, f"Landlock ABI {abi} < {confine.MIN_ABI}"
    ok, why = sandbox.available()
    return (True, "") if ok else (False, f"no unprivileged user namespaces ({why})")


SUPPORTED, WHY = _kernel_supports()
pytestmark = pytest.mark.skipif(not SUPPORTED, reason=f"Landlock sandbox not possible here: {WHY}")
ROOT = Path(__file__).resolve().parents[2]


def test_available_where_the_kernel_supports_it():
    ok, why = confine.available()
    assert ok, why
    assert why.startswith("Landlock ABI ")


def _in_confined_fork(folder: Path, probe, *, keep_open=None) -> dict:
    """Fork; the child confines itself to ``folder`` then runs ``probe()`` (a dict of findings),
    sent back as JSON. ``keep_open``: a descriptor opened before confining (it must be closed)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.chdir(folder)
            confine.confine(folder, keep_fds=(w,))
            out = probe()
        except BaseException as exc:  # noqa: BLE001
            out = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def _try(fn) -> str:
    try:
        fn()
        return "allowed"
    except PermissionError:
        return "denied"
    except OSError as exc:
        return f"{type(exc).__name__}"


def test_files_outside_the_folder_are_out_of_reach(tmp_path):
    mine, classmate = tmp_path / "mine", tmp_path / "classmate"
    mine.mkdir()
    classmate.mkdir()
    (classmate / "answer.ipynb").write_text("secret")
    gradebook = tmp_path / "gradebook.db"
    gradebook.write_text("grades")

    def probe():
        (mine / "out.txt").write_text("mine")
        os.makedirs(mine / ".kernel" / "tmp")
        return {
            "read classmate": _try(lambda: (classmate / "answer.ipynb").read_text()),
            "list parent": _try(lambda: os.listdir(tmp_path)),
            "write gradebook": _try(lambda: gradebook.write_text("0")),
            "read solutions": _try(lambda: os.listdir(ROOT / "solutions")),
            "read checkout README": _try(lambda: (ROOT / "README.md").read_text()),
            "list /": _try(lambda: os.listdir("/")),
            "list /tmp": _try(lambda: os.listdir("/tmp")),
            "read /etc/shadow": _try(lambda: open("/etc/shadow").read()),
            "own file": (mine / "out.txt").read_text(),
            "rename out": _try(lambda: os.rename(mine / "out.txt", tmp_path / "stolen.txt")),
        }

    found = _in_confined_fork(mine, probe)
    assert found.get("own file") == "mine", found
    for what in ("read classmate", "list parent", "write gradebook", "read solutions",
                 "read checkout README", "list /", "list /tmp", "read /etc/shadow", "rename out"):
        assert found[what] != "allowed", (what, found)
    assert gradebook.read_text() == "grades" and not (tmp_path / "stolen.txt").exists()


def test_no_network_no_signals_no_proc_of_others_and_inherited_files_closed(tmp_path):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    secret = open(tmp_path / "secret.txt", "w+")
    secret.write("opened by the grader before the fork")
    secret.flush()
    fd = secret.fileno()
    parent = os.getpid()
    others = [int(p) for p in os.listdir("/proc") if p.isdigit()]

    def probe():
        def connect():
            with socket.create_connection(("127.0.0.1", port), timeout=3):
                pass

        def own_loopback():
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                s.listen(1)
                with socket.create_connection(s.getsockname(), timeout=3):
                    pass

        return {"connect grader's port": _try(connect),
                "own loopback": _try(own_loopback),
                "signal grader": _try(lambda: os.kill(parent, 0)),
                # signal 0: the permission check only (kill(-1, ...) says nothing: Linux
                # reports success there even when every process refused)
                "signalable": [p for p in others if _try(lambda: os.kill(p, 0)) == "allowed"],
                "grader's environ": _try(lambda: open(f"/proc/{parent}/environ").read()),
                "inherited fd": _try(lambda: os.fstat(fd)),
                "uid": os.getuid()}

    try:
        found = _in_confined_fork(tmp_path, probe)
    finally:
        server.close()
        secret.close()
    assert "error" not in found, found
    assert found["connect grader's port"] != "allowed", found   # its own network namespace
    assert found["own loopback"] == "allowed", found             # 06's ranks rendezvous there
    assert found["signal grader"] == "denied", found             # Landlock signal scope
    assert found["signalable"] == [], found                       # no process on the machine
    assert found["grader's environ"] != "allowed", found
    assert found["inherited fd"] == "OSError", found             # EBADF: closed before confining


def test_torch_memlab_and_a_new_interpreter_work_inside(tmp_path):
    def probe():
        import subprocess
        import sys

        import torch

        x = torch.randn(8, 8, requires_grad=True)
        (x @ x).sum().backward()
        env = confine.confined_env(tmp_path)
        out = subprocess.run([sys.executable, "-c", "import memlab.lessons.distributed, torch; print('ok')"],
                             capture_output=True, text=True, env=env, timeout=120)
        return {"grad": float(x.grad.abs().sum()) > 0, "child": out.stdout.strip(), "stderr": out.stderr[-300:]}

    found = _in_confined_fork(tmp_path, probe)
    assert found.get("grad") is True, found
    assert found["child"] == "ok", found


def test_refuses_a_process_with_threads(tmp_path):
    """Landlock binds the calling thread only: confining a threaded process would leave the
    other threads free, so confine() refuses (the warm slots confine before torch starts its pool)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()
        try:
            confine.confine(tmp_path, keep_fds=(w,))
            msg = "confined"
        except OSError as exc:
            msg = str(exc)
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        msg = fh.read().decode()
    os.waitpid(pid, 0)
    assert "single-threaded" in msg, msg


def test_grading_child_sweeps_what_a_kernel_detached(tmp_path):
    """A process the learner detaches (double fork) is reparented to the grading child (the
    subreaper) and killed when the job ends."""
    from memlab.autograde.batch.processes import _set_subreaper, _sweep_descendants

    pidfile = tmp_path / "orphan.pid"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the grading child
        _set_subreaper()
        kernel = os.fork()
        if kernel == 0:
            if os.fork() == 0:  # the detached grandchild
                os.setsid()
                pidfile.write_text(str(os.getpid()))
                time.sleep(300)
                os._exit(0)
            os._exit(0)
        os.waitpid(kernel, 0)
        for _ in range(200):
            if pidfile.exists() and pidfile.read_text():
                break
            time.sleep(0.02)
        orphan = int(pidfile.read_text())
        swept = _sweep_descendants()
        try:
            os.kill(orphan, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        os.write(w, json.dumps({"swept": swept, "alive": alive}).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        found = json.loads(fh.read())
    os.waitpid(pid, 0)
    assert found == {"swept": 1, "alive": False}, found


def test_sweep_kills_a_deep_chain_and_a_forking_loop(tmp_path):
    """A 40-deep chain of processes, each in its own session and alive (the old 20-round sweep
    of direct children left half of it running), beside one that forks a new child every
    millisecond: none is alive after the sweep."""
    from memlab.autograde.batch.processes import _set_subreaper, _sweep_descendants

    depth, pids = 40, tmp_path / "pids"
    pids.mkdir()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the grading child
        _set_subreaper()
        if os.fork() == 0:  # the chain
            for _ in range(depth):
                if os.fork() != 0:
                    break      # this link stays alive, its child goes one level deeper
                os.setsid()
            (pids / f"chain-{os.getpid()}").write_text("")  # every link, once alive
            time.sleep(300)
            os._exit(0)
        if os.fork() == 0:  # the forking loop
            (pids / f"loop-{os.getpid()}").write_text("")
            while True:
                if os.fork() == 0:
                    time.sleep(300)
                    os._exit(0)
                time.sleep(0.001)
        for _ in range(500):
            if len(list(pids.iterdir())) >= depth + 2:
                break
            time.sleep(0.02)
        from memlab.autograde.batch.processes import _descendants, _process_table

        before = len(_descendants(os.getpid(), _process_table()))
        swept = _sweep_descendants()
        left = len(_descendants(os.getpid(), _process_table()))
        os.write(w, json.dumps({"before": before, "swept": swept, "left": left}).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        found = json.loads(fh.read())
    os.waitpid(pid, 0)
    assert found["before"] > depth and found["swept"] >= found["before"], found
    assert found["left"] == 0, found


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="no seccomp table here")
def test_seal_refuses_unix_sockets_and_makes_chmod_a_no_op(tmp_path):
    """What Landlock does not govern: after :func:`confine.seal`, no Unix socket (in any
    thread, nor in a child), a file's mode and times stay as they were (chmod and utime report
    success: shutil.copy still works), no extended attribute is set; TCP sockets and socket
    pairs still work."""
    import shutil
    import socket
    import subprocess
    import sys
    import threading

    victim = tmp_path / "victim"
    victim.write_text("x")
    os.chmod(victim, 0o600)
    before = victim.stat()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        out = {}
        try:
            confine.seal()
            for name, fam in (("unix", socket.AF_UNIX), ("inet", socket.AF_INET)):
                try:
                    socket.socket(fam).close()
                    out[name] = "created"
                except OSError as exc:
                    out[name] = exc.errno
            seen = []
            th = threading.Thread(target=lambda: seen.append(_try_unix()))
            th.start()
            th.join()
            out["thread"] = seen[0]
            probe = ("import socket\ntry:\n socket.socket(socket.AF_UNIX)\n print('created')\n"
                     "except OSError as e:\n print(e.errno)")
            out["child"] = subprocess.run([sys.executable, "-c", probe], capture_output=True,
                                          text=True).stdout.strip()
            socket.socketpair()
            os.chmod(victim, 0o777)
            os.utime(victim, (0, 0))
            shutil.copy(victim, tmp_path / "copy")
            try:
                os.setxattr(victim, "user.memlab", b"1")
                out["xattr"] = "set"
            except OSError as exc:
                out["xattr"] = exc.errno
        except BaseException as exc:  # noqa: BLE001  reported to the test
            out["error"] = repr(exc)
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        out = json.loads(fh.read())
    os.waitpid(pid, 0)
    assert out == {"unix": 13, "inet": "created", "thread": 13, "child": "13", "xattr": 13}, out
    after = victim.stat()
    assert (after.st_mode, after.st_mtime) == (before.st_mode, before.st_mtime)
    assert (tmp_path / "copy").read_text() == "x"


def _try_unix():
    import socket

    try:
        socket.socket(socket.AF_UNIX).close()
        return "created"
    except OSError as exc:
        return exc.errno
