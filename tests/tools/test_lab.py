"""make lab / reset / releases (memlab.tools.lab): the learner's working copy and learner mode.

In a temporary course (a copy of notebooks/): the working copy is made on first run and never
overwritten, a new release is copied in, reset keeps a backup, releases names the newer ones.
One real JupyterLab start in learner mode checks that nbgrader's lab extension is disabled in
the page config, its Formgrader route is absent, and news/update checks are off.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from memlab.tools import lab

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def course(tmp_path):
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    return tmp_path


def test_working_copy_is_made_once_and_never_overwritten(course):
    copied = lab.sync_working_copy(course)
    assert copied and all((course / lab.WORK / rel).exists() for rel in copied)
    mine = course / lab.WORK / copied[0]
    mine.write_text(mine.read_text().replace('"cells"', '"cells"', 1) + "\n")  # the learner saved
    learner_bytes = mine.read_bytes()
    assert lab.sync_working_copy(course) == []
    assert mine.read_bytes() == learner_bytes
    assert {status for _, status in lab.releases(course)} == {"current"}

    # a new release of that notebook: reported, not copied
    release = course / "notebooks" / copied[0]
    release.write_text(release.read_text() + "\n")
    assert lab.sync_working_copy(course) == [] and mine.read_bytes() == learner_bytes
    status = dict(lab.releases(course))[copied[0]]
    assert status.startswith("NEWER RELEASE") and f"make reset NB={copied[0][:2]}" in status

    # a new assignment appears: copied on the next sync
    shutil.copytree(course / "notebooks" / copied[0].split("/")[0], course / "notebooks" / "99_new")
    (course / "notebooks" / "99_new" / Path(copied[0]).name).rename(
        course / "notebooks" / "99_new" / "99_new.ipynb")
    assert dict(lab.releases(course))["99_new/99_new.ipynb"].startswith("not copied yet")
    assert lab.sync_working_copy(course) == ["99_new/99_new.ipynb"]


def test_reset_restores_the_release_and_keeps_a_backup(course, capsys):
    copied = lab.sync_working_copy(course)
    mine = course / lab.WORK / copied[0]
    mine.write_text("my answers")
    lab.reset(copied[0][:2], course)
    assert mine.read_bytes() == (course / "notebooks" / copied[0]).read_bytes()
    backups = list(mine.parent.glob(mine.name + ".bak-*"))
    assert len(backups) == 1 and backups[0].read_text() == "my answers"
    assert "previous version" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="matches 0 assignments"):
        lab.reset("42", course)


def test_learner_lab_has_no_instructor_tools_and_no_news(course):
    env_vars = lab.learner_config(course)
    page_config = json.loads((Path(env_vars["JUPYTER_CONFIG_DIR"]) / "labconfig" / "page_config.json").read_text())
    assert page_config["disabledExtensions"] == {"@jupyter/nbgrader": True}
    lab.sync_working_copy(course)
    port = __import__("socket").socket()
    port.bind(("127.0.0.1", 0))
    lab_port = port.getsockname()[1]
    port.close()
    cmd, env = lab.learner_command(course, ["--no-browser", f"--port={lab_port}", "--ServerApp.port_retries=0",
                                            "--IdentityProvider.token=t0k", "--ip=127.0.0.1"])
    env.update({"JUPYTER_RUNTIME_DIR": str(course / "runtime"), "JUPYTER_DATA_DIR": str(course / "data")})
    log = open(course / "lab.log", "wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{lab_port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/lab?token=t0k", timeout=5) as r:
                    page = r.read().decode()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("learner JupyterLab did not start:\n" + (course / "lab.log").read_text()[-3000:])
                time.sleep(1)
        config = json.loads(re.search(r'id="jupyter-config-data"[^>]*>(.*?)</script>', page, re.S).group(1))
        assert "@jupyter/nbgrader" in config["disabledExtensions"]
        assert config["news"] == {"disabled": True}
        assert Path(config["serverRoot"]).resolve() == (course / lab.WORK).resolve()
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/formgrader?token=t0k", timeout=10)
        assert err.value.code == 404, "Formgrader must not be served to learners"
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.mark.parametrize("command", ["learner", "instructor"])
def test_jupyterlabs_own_options_pass_through(monkeypatch, command):
    seen = {}

    def fake_command(*args, extra=(), **kwargs):
        seen["extra"] = list(extra)
        return (["/bin/true"], {}) if command == "learner" else (["/bin/true"], {}, ".")

    monkeypatch.setattr(lab, "sync_working_copy", lambda *a, **k: [])
    monkeypatch.setattr(lab, "releases", lambda *a, **k: [])
    monkeypatch.setattr(lab, f"{command}_command", fake_command)
    monkeypatch.setattr(lab.os, "chdir", lambda path: None)
    monkeypatch.setattr(lab.os, "execve", lambda *a: seen.setdefault("exec", a))
    lab.main([command, "--port=8899", "--no-browser"])
    assert seen["extra"] == ["--port=8899", "--no-browser"]
    with pytest.raises(SystemExit):
        lab.main(["releases", "--port=8899"])      # a command that starts no JupyterLab refuses it
