"""Imports come from the course, never from the submission (a ``spellchecker.py``, an
``ipywidgets.py`` or a ``memlab/`` folder shipped beside the notebook): the grader's kernel and
the verdict re-run start with ``-P`` and drop their working directory from ``sys.path``, and
every Python they start inherits ``PYTHONSAFEPATH=1``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memlab.autograde.batch import processes
from memlab.autograde.security import kernel, verdict

SHADOWS = {
    "spellchecker.py": "raise ImportError('the SHADOW spellchecker was imported')\n",
    "ipywidgets.py": "raise ImportError('the SHADOW ipywidgets was imported')\n",
    "memlab/__init__.py": "raise ImportError('the SHADOW memlab was imported')\n",
}
PROBE = ("import sys, os, spellchecker, ipywidgets, memlab\n"
         "print(repr(sorted({spellchecker.__file__, ipywidgets.__file__, memlab.__file__})))\n"
         "print('cwd on path:', any(p in ('', '.') or os.path.realpath(p) == os.path.realpath("
         "os.getcwd()) for p in sys.path), os.environ.get('PYTHONSAFEPATH'))\n")


@pytest.fixture
def submission(tmp_path):
    folder = tmp_path / "ana" / "05_oom_clinic"
    for name, text in SHADOWS.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def _check(out: str, folder: Path) -> None:
    assert "SHADOW" not in out, out
    files = eval(out.splitlines()[0])          # the repr of a list of paths printed above
    assert files and not any(str(folder) in f for f in files), files
    assert out.splitlines()[1] == "cwd on path: False 1", out


def test_the_launchers_start_python_with_safe_path():
    assert kernel.LAUNCHER[1] == "-P" and verdict.HARNESS[1] == "-P"
    assert processes._WarmKernels.prefix() == list(kernel.LAUNCHER)
    spec = json.loads((kernel.write_kernelspec(Path(os.environ.get("TMPDIR", "/tmp")) / "ks-probe")
                       / "kernel.json").read_text())
    assert spec["argv"][:4] == list(kernel.LAUNCHER)


def test_course_only_path_drops_the_working_directory(submission):
    """As in a warm fork: memlab already imported, then the folder on sys.path (inherited)."""
    code = ("import sys, os\nfrom memlab.autograde.security.kernel import course_only_path\n"
            "for m in [m for m in sys.modules if m == 'memlab' or m.startswith('memlab.')]:\n"
            "    del sys.modules[m]\n"
            "sys.path.insert(0, '')\nsys.path.insert(1, os.getcwd())\n"
            "print(len(course_only_path()))\n" + PROBE)
    proc = subprocess.run([sys.executable, "-P", "-c", code], cwd=submission,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    n, *rest = proc.stdout.splitlines()
    assert int(n) >= 2, proc.stdout               # '' and the folder's own path
    _check("\n".join(rest), submission)


def test_the_graders_kernel_imports_the_real_modules(submission, tmp_path, monkeypatch):
    """The grader's kernel, started from its kernelspec in the submission's folder (as
    nbgrader starts it), imports the course's spellchecker, ipywidgets and memlab."""
    from jupyter_client.manager import start_new_kernel

    data = tmp_path / "jupyter-data"
    kernel.write_kernelspec(data)
    monkeypatch.setenv("JUPYTER_PATH", str(data))
    km, kc = start_new_kernel(kernel_name=kernel.KERNEL_NAME, cwd=str(submission),
                              startup_timeout=120)
    try:
        out = []
        reply = kc.execute_interactive(
            PROBE, timeout=120,
            output_hook=lambda m: out.append(m["content"].get("text", "")
                                             + m["content"].get("evalue", "")))
        assert reply["content"]["status"] == "ok", "".join(out)
        _check("".join(out), submission)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_a_python_the_learner_starts_skips_the_folder_too(submission):
    """``!python -c ...`` or a subprocess from a learner's cell inherits PYTHONSAFEPATH=1."""
    env = dict(os.environ, PYTHONSAFEPATH="1")
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=submission, capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    _check(proc.stdout, submission)
