"""memlab.compat: the supported Python/torch range, and what the first cell says outside it.

Fake version strings and fake API probes drive the messages; the real torch of the interpreter
running the tests (2.13.0 in .venv, 2.14.1 in make test-compat's .venv-compat) is probed for
every API. Also: the range agrees with pyproject.toml, the Makefile and the README.
"""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

import memlab as ml
from memlab.measure import compat

ROOT = Path(__file__).resolve().parents[2]
ALL = lambda path: True  # noqa: E731  (every API present)


def test_parse_version_reads_local_and_pre_release_tags():
    assert compat.parse_version("2.14.1+cu128") == (2, 14, 1)
    assert compat.parse_version("2.6.0a0+git1a2b3c") == (2, 6, 0)
    assert compat.parse_version("2.15.0.dev20260101+cpu") == (2, 15, 0)
    assert compat.parse_version("2.6") == (2, 6, 0)
    with pytest.raises(ValueError):
        compat.parse_version("unknown")


def test_lower_end_is_the_newest_api_the_course_needs():
    newest = max(compat.APIS, key=lambda a: compat.parse_version(a.since))
    assert compat.parse_version(compat.TORCH_RANGE[0]) == compat.parse_version(newest.since)
    assert newest.path == "torch.distributed.fsdp.fully_shard"
    assert compat.parse_version(compat.TORCH_RANGE[0]) <= compat.parse_version(compat.TORCH_PINNED) \
        <= compat.parse_version(compat.TORCH_RANGE[1])


def test_this_torch_has_every_api_and_is_in_range():
    """The pinned torch (make test) and 2.14.1 (make test-compat) really have every API listed."""
    report = compat.check(probe_pinned=True)
    assert [a.path for a in report.missing] == []
    # the disk look-ups stand for real imports: import each API for real once here
    assert [a.path for a in compat.APIS if not compat.api_available(a.path)] == []
    assert not report.fatal, report.message()
    assert report.status in ("pinned", "supported")


@pytest.mark.parametrize("version, status", [
    ("2.13.0", "pinned"), ("2.13.0+cu126", "pinned"), ("2.6.0", "supported"),
    ("2.14.1+cu128", "supported"), ("2.15.0", "newer"), ("2.5.1+cu124", "too_old"),
    ("1.13.1", "too_old")])
def test_status_of_fake_versions(version, status):
    report = compat.check(version, (3, 12, 4), ALL)
    assert report.status == status
    assert report.fatal == (status == "too_old")
    assert version in report.summary()


def test_in_range_summary_names_the_range_and_the_graded_version():
    line = compat.check("2.14.1+cu128", (3, 12, 4), ALL).summary()
    assert line == "torch 2.14.1+cu128 is in the supported range 2.6 to 2.14.1 (graded with 2.13.0)"
    assert compat.check("2.15.0", (3, 12, 4), ALL).notes  # newer: a note says what to do if a cell fails


def test_too_old_message_names_each_missing_api_and_the_pip_line():
    have = {"torch.distributed.fsdp.fully_shard": False, "torch.optim.Adafactor": False}
    report = compat.check("2.4.1+cu121", (3, 12, 4), lambda p: have.get(p, True))
    msg = report.message()
    assert "torch 2.4.1+cu121 (Python 3.12.4) is older than the course supports: it needs torch " \
           "2.6 to 2.14.1 (graded with 2.13.0)" in msg
    assert "  - torch.distributed.fsdp.fully_shard (torch 2.6+; used by 06" in msg
    assert "  - torch.optim.Adafactor (torch 2.5+; used by 08" in msg
    assert "create_selective_checkpoint_contexts" not in msg  # present in 2.4: not listed
    assert "%pip install torch==2.13.0" in msg and "restart" in msg
    assert "make lab" in msg
    with pytest.raises(compat.UnsupportedTorchError, match=r"fully_shard \(torch 2\.6\+"):
        compat.require_supported(report)


def test_python_outside_the_range_is_named():
    low = compat.check("2.13.0", (3, 10, 14), ALL)
    assert low.fatal and low.message().startswith("Python 3.10.14 is outside the course's range 3.11 to 3.13.")
    high = compat.check("2.14.1", (3, 14, 0), ALL)
    assert high.fatal and "use a Python 3.11-3.13 kernel, then pip install torch==2.13.0" in high.message()


def test_supported_build_missing_an_api_gets_a_note_not_a_stop():
    report = compat.check("2.13.0", (3, 11, 7), lambda p: p != "torch.distributed.fsdp.fully_shard")
    assert not report.fatal
    assert report.notes == ["MISSING torch.distributed.fsdp.fully_shard (needed by 06 (FSDP2 per rank), "
                            "memlab.distributed): this torch build lacks it; `pip install torch==2.13.0` has it"]


def test_banner_has_a_compat_line_in_range():
    banner = ml.versions_banner("cpu")
    lines = banner.splitlines()
    assert lines[0].startswith("python  ") and lines[1] == f"torch   {torch.__version__}"
    assert lines[-1].startswith(f"compat  torch {torch.__version__} is ")


def test_banner_stops_with_the_message_on_an_old_torch(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.5.1+cu124")
    with pytest.raises(compat.UnsupportedTorchError) as err:
        ml.versions_banner("cpu")
    assert "torch 2.5.1+cu124" in str(err.value) and "pip install torch==2.13.0" in str(err.value)


def test_import_warns_before_a_notebook_import_fails():
    """02 imports create_selective_checkpoint_contexts: on an old torch `import memlab` has spoken first."""
    code = "import torch; torch.__version__ = '2.3.1'; import memlab"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "UnsupportedTorchWarning" in out.stderr
    assert "torch 2.3.1" in out.stderr and "pip install torch==2.13.0" in out.stderr


def test_range_agrees_with_pyproject_makefile_and_readme():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (lo_maj, lo_min), (hi_maj, hi_min) = compat.PYTHON_RANGE
    assert py["project"]["requires-python"] == f">={lo_maj}.{lo_min},<{hi_maj}.{hi_min + 1}"
    make = (ROOT / "Makefile").read_text()
    assert re.search(rf"^COMPAT_TORCH := {re.escape(compat.TORCH_RANGE[1])}$", make, re.M), (
        "make test-compat must test the newest torch of the range")
    readme = (ROOT / "README.md").read_text()
    lo, hi = compat.TORCH_RANGE
    assert f"**torch {lo} to {hi}**" in readme
    assert f"**Python {lo_maj}.{lo_min} to {hi_maj}.{hi_min}**" in readme


def test_readme_hosted_install_line_keeps_torch_out():
    """The one documented line installs the `hosted` extra, which must never name torch."""
    readme = (ROOT / "README.md").read_text()
    lines = [line.strip() for line in readme.splitlines() if re.match(r"^ *%pip install .*memlab\[hosted\]", line)]
    assert len(lines) == 1, lines
    assert "torch" not in lines[0].replace("memlab", "")
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["hosted"]
    names = [re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].lower() for d in extra]
    assert "torch" not in names and names, extra
