"""memlab.autograde.security.bwrap: a kernel under bubblewrap, driven by nbclient as nbgrader drives it.

One sandboxed kernel runs a notebook that probes its own confinement: no network, its own PID
namespace (the grader's PID does not exist there), none of the checkout's other folders
(solutions/, autograder/, notebooks/), memlab read-only, only its folder writable, a cell
interrupted by message, and a wall-clock limit enforced from outside. Skips where bwrap is not
usable (CI installs it: .ci/run).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import nbformat
import pytest

from memlab.autograde.security import bwrap as sandbox

ROOT = Path(__file__).resolve().parents[2]
needs_bwrap = pytest.mark.skipif(not sandbox.available()[0],
                                 reason=f"bubblewrap not usable here: {sandbox.available()[1]}")

PROBE = r'''
import json, os, socket, torch, memlab as ml
r = {"torch": torch.__version__, "memlab": ml.__file__, "pid": os.getpid()}
try:
    socket.create_connection(("1.1.1.1", 80), timeout=2); r["net"] = "open"
except OSError as e:
    r["net"] = type(e).__name__
try:
    os.kill(GRADER_PID, 0); r["grader_visible"] = True
except ProcessLookupError:
    r["grader_visible"] = False
r["seen"] = {p: os.path.exists(p) for p in PATHS}
r["cwd"] = os.getcwd()
r["writes"] = {}
for p in WRITES:
    try:
        open(p, "w").write("x"); r["writes"][p] = True
    except OSError:
        r["writes"][p] = False
print(json.dumps(r))
'''


def _client(nb, folder, **km):
    from nbclient import NotebookClient

    # 45 s per cell (a cold kernel imports torch in the first), 8 s for the endless loop that
    # tests the interrupt: the test waits out that timeout
    return NotebookClient(nb, kernel_name="python3", allow_errors=True,
                          timeout_func=lambda cell: 8 if "while True" in cell.source else 45,
                          interrupt_on_timeout=True, resources={"metadata": {"path": str(folder)}},
                          kernel_manager_class=sandbox.SandboxKernelManager, **km)


@needs_bwrap
@pytest.mark.slow
def test_kernel_is_confined(tmp_path):
    folder = tmp_path / "submission"
    folder.mkdir()
    paths = [str(ROOT / d) for d in ("solutions", "autograder", "notebooks", "tests")] + [
        str(ROOT / "src" / "memlab" / "__init__.py"), str(tmp_path / "elsewhere"), "/root/.ssh",
        "/home"]
    (tmp_path / "elsewhere").mkdir()
    paths.append(str(folder))  # its own real path is not shown either (it is /submission inside)
    writes = ["mine.txt", "/tmp/t.txt", str(ROOT / "src" / "memlab" / "x.py"),
              str(tmp_path / "elsewhere" / "x"), "/usr/x"]
    setup = f"GRADER_PID = {os.getpid()}\nPATHS = {paths!r}\nWRITES = {writes!r}\n"
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(setup + PROBE),
        nbformat.v4.new_code_cell("import time\nwhile True:\n    time.sleep(0.1)"),
        nbformat.v4.new_code_cell("print('after the interrupt')"),
        # the kernel's folder (.kernel/) is removed at kernel cleanup: look from inside
        nbformat.v4.new_code_cell(f"import os\nprint(os.path.isfile("
                                  f"{sandbox.INSIDE + '/' + sandbox.KERNEL_DIR + '/tmp/t.txt'!r}))"),
    ])
    client = _client(nb, folder)
    client.execute()
    assert nb.cells[0].outputs and "text" in nb.cells[0].outputs[0], nb.cells[0].outputs
    out = json.loads(nb.cells[0].outputs[0]["text"])
    assert out["memlab"] == str(ROOT / "src" / "memlab" / "__init__.py")
    assert out["net"] in ("OSError", "ConnectionRefusedError") or "Error" in out["net"], out["net"]
    assert out["net"] != "open"
    assert out["grader_visible"] is False and out["pid"] < 10, out
    assert out["seen"] == {p: p.endswith("__init__.py") for p in paths}, out["seen"]
    assert out["writes"] == {p: p in (writes[0], writes[1]) for p in writes}, out["writes"]
    # written in the kernel's own run folder (a copy), never in the notebook's folder, which
    # nbgrader writes and copies from unsandboxed
    assert not (folder / "mine.txt").exists() and out["cwd"] == sandbox.INSIDE
    assert nb.cells[3].outputs[0]["text"] == "True\n", "/tmp is a view of the folder"
    assert not (folder / sandbox.KERNEL_DIR).exists(), "the kernel's folder is removed at cleanup"
    assert not (ROOT / "src" / "memlab" / "x.py").exists()
    assert nb.cells[1].outputs[-1]["ename"] == "KeyboardInterrupt", "interrupt by message"
    assert nb.cells[2].outputs[0]["text"] == "after the interrupt\n"


@needs_bwrap
@pytest.mark.slow
def test_wall_clock_limit_kills_from_outside(tmp_path):
    from nbclient.exceptions import DeadKernelError

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import time\nfor _ in range(600):\n    time.sleep(0.1)")])
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(tmp_path)}},
                            kernel_manager_class=sandbox.SandboxKernelManager)
    client.km = client.create_kernel_manager()
    client.km.wall_seconds = 8
    t0 = time.monotonic()
    with pytest.raises(DeadKernelError):
        client.execute()
    assert time.monotonic() - t0 < 40


def test_unsandboxed_fallback_warns(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sandbox, "available", lambda: (False, "bwrap not found on PATH"))
    km = sandbox.SandboxKernelManager(kernel_name="python3")
    km._sandbox_cwd = str(tmp_path)
    cmd = km.format_kernel_cmd()
    assert "bwrap" not in " ".join(cmd)
    assert km.sandbox_state == "unsandboxed (bwrap not found on PATH)"
    assert "UNSANDBOXED" in capsys.readouterr().err


@needs_bwrap
def test_argv_binds_only_what_it_should(tmp_path):
    argv = sandbox.bwrap_argv(["python", "-c", "1"], tmp_path, wall_seconds=5)
    assert argv[:4] == [argv[0], "-s", "KILL", "5"] and argv[0].endswith("timeout")
    pairs = {(argv[i], argv[i + 1]) for i in range(len(argv) - 1)}
    writable = [argv[i + 1] for i, a in enumerate(argv) if a == "--bind"]
    assert writable == [str(tmp_path / sandbox.KERNEL_DIR / "tmp"), str(tmp_path)]
    for flag in ("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--clearenv"):
        assert flag in argv
    assert ("--share-net", "--share-net") not in pairs and "--share-net" not in argv
    bound = [argv[i + 1] for i, a in enumerate(argv) if a in ("--ro-bind", "--bind")]
    for hidden in ("solutions", "autograder", "notebooks"):
        assert not any(b == str(ROOT) or b.startswith(str(ROOT / hidden)) for b in bound), hidden
