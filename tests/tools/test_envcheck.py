"""`python -m memlab.tools.envcheck`: one [OK]/[FAIL] line per check, exit 1 on any failure."""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from memlab.tools import envcheck


def test_envcheck_subprocess_prints_ok_lines():
    proc = subprocess.run([sys.executable, "-m", "memlab.tools.envcheck"], capture_output=True, text=True,
                          timeout=120)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, f"envcheck failed:\n{proc.stdout}\n{proc.stderr}"
    assert any(line.startswith("[OK] torch 2.13.0") for line in lines), proc.stdout
    assert any(line.startswith("[OK] device: cpu (") or line.startswith("[OK] device: cuda (")
               for line in lines), proc.stdout
    for name, version in envcheck.EXPECTED.items():
        assert f"[OK] {name} {version}" in proc.stdout, proc.stdout
    assert any(line.startswith("[OK] kernel python3:") for line in lines), proc.stdout
    assert not any(line.startswith("[FAIL]") for line in lines), proc.stdout
    assert proc.stderr == "", f"envcheck wrote to stderr:\n{proc.stderr}"


def _spec(*argv):
    return lambda name: SimpleNamespace(argv=list(argv), resource_dir="/fake/kernels/python3")


def test_wrong_missing_versions_and_foreign_kernel_fail(capsys):
    versions = dict(envcheck.EXPECTED, torch="2.12.1+cu121", nbgrader=None)
    code = envcheck.main(versions=versions, get_spec=_spec("/usr/bin/python3", "-m", "ipykernel_launcher"),
                         executable="/venv/bin/python")
    out = capsys.readouterr().out
    assert code == 1
    assert "[FAIL] torch 2.12.1+cu121 (need 2.13.0)" in out
    assert "[FAIL] nbgrader not installed (need 0.9.6)" in out
    assert "[OK] jupyterlab 4.6.6" in out
    assert "[FAIL] kernel python3 runs /usr/bin/python3" in out


def test_cuda_local_version_and_matching_kernel_pass(capsys):
    versions = dict(envcheck.EXPECTED, torch="2.13.0+cu126")
    code = envcheck.main(versions=versions, get_spec=_spec("/venv/bin/python", "-m", "ipykernel_launcher"),
                         executable="/venv/bin/python", version_info=(3, 11, 9))
    out = capsys.readouterr().out
    assert code == 0, out
    assert "[OK] torch 2.13.0+cu126" in out
    assert "[OK] kernel python3: /venv/bin/python" in out


def test_relative_kernel_interpreter_and_wrong_python_fail():
    # ipykernel's wheel ships share/jupyter/kernels/python3 with argv[0] == "python": that runs
    # whatever `python` is first on PATH, not the venv. `make lab` re-registers it.
    check = envcheck.check_kernel(_spec("python", "-m", "ipykernel_launcher"), executable="/venv/bin/python")
    assert not check.ok and "not an absolute path" in check.text
    assert not envcheck.check_python((3, 12, 1)).ok
    missing = envcheck.check_kernel(lambda name: (_ for _ in ()).throw(KeyError(name)))
    assert not missing.ok and missing.line().startswith("[FAIL] kernel python3 not found")
