"""JupyterLab for learners and for instructors, and the learner's own working copy.

Used by the Makefile: ``make lab`` (learner), ``make instructor-lab``, ``make reset NB=03``,
``make releases``. Run as ``python -m memlab.tools.lab <command>``.

Learner mode
    * opens a **working copy**, ``my-notebooks/`` (git-ignored), made from the released
      ``notebooks/`` on first run. A notebook already there is never overwritten, so a
      ``git pull`` of the course never collides with the learner's answers; a notebook that is
      new in ``notebooks/`` (a new assignment) is copied in on the next ``make lab``.
    * without nbgrader's instructor tools: its JupyterLab extension (Create Assignment,
      Formgrader menu, ...) is disabled in the page config and its server extensions are off;
    * without JupyterLab's news toast and update check (``LabApp.news_url = None``,
      ``NeverCheckForUpdate``, and the notification plugin's settings).
    The configuration lives in ``.lab/learner/`` (git-ignored), passed as JUPYTER_CONFIG_DIR
    and JUPYTERLAB_SETTINGS_DIR, so the learner's other Jupyter installations are untouched.

``reset NN``
    copies the release of assignment NN over the working copy, after saving the learner's
    version as ``<name>.ipynb.bak-<time>`` next to it.

``releases``
    lists, per assignment, whether the working copy was made from the current release or an
    older one (it compares a hash of the release recorded when the copy was made), and which
    releases have not been copied yet.

Instructor mode (``make instructor-lab``) opens the whole course (solutions/, notebooks/) with
nbgrader's extensions and Formgrader, reading autograder/nbgrader_config.py.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RELEASE = "notebooks"
WORK = "my-notebooks"
STATE = ".memlab-releases.json"
LAB_DIR = ".lab"
NBGRADER_SERVER_EXTENSIONS = (
    "nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.validate_assignment",
    "nbgrader.server_extensions.assignment_list", "nbgrader.server_extensions.course_list")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _releases(root: Path) -> dict[str, Path]:
    """{"03_mixed_precision/03_mixed_precision.ipynb": path} for every released notebook."""
    base = root / RELEASE
    return {str(p.relative_to(base)): p for p in sorted(base.glob("*/*.ipynb"))
            if ".ipynb_checkpoints" not in p.parts}


def _state(work: Path) -> dict[str, str]:
    try:
        return json.loads((work / STATE).read_text())
    except (OSError, ValueError):
        return {}


def sync_working_copy(root: Path = ROOT) -> list[str]:
    """Copy every released notebook that is not in the working copy yet; never overwrite one.

    Returns the notebooks copied now.
    """
    work = root / WORK
    work.mkdir(exist_ok=True)
    state = _state(work)
    copied = []
    for rel, src in _releases(root).items():
        dst = work / rel
        if dst.exists():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
        state[rel] = _digest(src)
        copied.append(rel)
    (work / STATE).write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    return copied


def _match(root: Path, which: str) -> str:
    hits = [rel for rel in _releases(root) if rel.split("/")[0].startswith(which)
            or rel.split("/")[0] == which]
    if len(hits) != 1:
        names = ", ".join(r.split("/")[0] for r in _releases(root))
        raise SystemExit(f"NB={which!r} matches {len(hits)} assignments; use one of: {names} "
                         "(the number is enough: make reset NB=03)")
    return hits[0]


def reset(which: str, root: Path = ROOT) -> Path:
    """Replace the working copy of one assignment with its release; keep a backup."""
    rel = _match(root, which)
    work = root / WORK
    src, dst = _releases(root)[rel], work / rel
    backup = None
    if dst.exists():
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        backup = dst.with_name(f"{dst.name}.bak-{stamp}")
        shutil.copy2(dst, backup)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)
    state = _state(work)
    state[rel] = _digest(src)
    (work / STATE).write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    print(f"{WORK}/{rel} is now the current release"
          + (f"; your previous version is {backup.relative_to(root)}" if backup else ""))
    return dst


def releases(root: Path = ROOT) -> list[tuple[str, str]]:
    """(notebook, status) per release: "current", "NEWER RELEASE", or "not copied yet"."""
    state = _state(root / WORK)
    out = []
    for rel, src in _releases(root).items():
        if not (root / WORK / rel).exists():
            status = "not copied yet (make lab copies it)"
        elif state.get(rel) == _digest(src):
            status = "current"
        else:
            status = (f"NEWER RELEASE in {RELEASE}/{rel}: compare, or `make reset NB="
                      f"{rel[:2]}` (keeps a backup of yours)")
        out.append((rel, status))
    return out


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def learner_config(root: Path = ROOT) -> dict[str, str]:
    """Write the learner's Jupyter configuration; return the environment variables to use it."""
    base = root / LAB_DIR / "learner"
    config, settings = base / "config", base / "lab-settings"
    _write_json(config / "labconfig" / "page_config.json",
                {"disabledExtensions": {"@jupyter/nbgrader": True}})
    _write_json(config / "jupyter_server_config.json", {
        "ServerApp": {"jpserver_extensions": {name: False for name in NBGRADER_SERVER_EXTENSIONS}},
        "LabApp": {"news_url": None,
                   "check_for_updates_class": "jupyterlab.handlers.announcements.NeverCheckForUpdate"},
    })
    notification = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    if not notification.exists():  # the learner may change it later from the Settings editor
        _write_json(notification, {"fetchNews": "false", "checkForUpdates": False})
    return {"JUPYTER_CONFIG_DIR": str(config), "JUPYTERLAB_SETTINGS_DIR": str(settings)}


def _allow_root() -> list[str]:
    return ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []


def learner_command(root: Path = ROOT, extra: list[str] | None = None) -> tuple[list[str], dict]:
    env = dict(os.environ)
    env.update(learner_config(root))
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root / WORK}",
           *_allow_root(), *(extra or [])]
    return cmd, env


def instructor_command(root: Path = ROOT, extra: list[str] | None = None) -> tuple[list[str], dict, Path]:
    """nbgrader's server extension reads nbgrader_config.py from the working directory: run in
    autograder/, whose config computes the course root from its own path."""
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root}", *_allow_root(),
           *(extra or [])]
    return cmd, dict(os.environ), root / "autograder"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memlab.tools.lab", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("learner", help="JupyterLab on my-notebooks/ without instructor tools")
    p.add_argument("extra", nargs="*", help="arguments passed on to jupyter lab")
    p = sub.add_parser("instructor", help="JupyterLab on the whole course with nbgrader's tools")
    p.add_argument("extra", nargs="*")
    sub.add_parser("sync", help="copy new releases into my-notebooks/ (never overwrites)")
    p = sub.add_parser("reset", help="replace my-notebooks/<NN>... with its release (keeps a backup)")
    p.add_argument("which", help="assignment number or name, e.g. 03")
    sub.add_parser("releases", help="which releases are newer than your working copy")
    # JupyterLab's own options (--port=8899, --no-browser, ...) pass through to jupyter lab
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command not in ("learner", "instructor"):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    extra = list(getattr(args, "extra", [])) + unknown
    if args.command == "sync":
        for rel in sync_working_copy():
            print(f"copied {RELEASE}/{rel} -> {WORK}/{rel}")
        return 0
    if args.command == "reset":
        reset(args.which)
        return 0
    if args.command == "releases":
        for rel, status in releases():
            print(f"{rel:55} {status}")
        return 0
    if args.command == "learner":
        for rel in sync_working_copy():
            print(f"copied {RELEASE}/{rel} -> {WORK}/{rel} (your working copy; never overwritten)")
        newer = [rel for rel, status in releases() if status.startswith("NEWER")]
        if newer:
            print(f"newer releases exist for {', '.join(newer)}: `make releases` says more")
        cmd, env = learner_command(extra=extra)
        os.execve(cmd[0], cmd, env)
    cmd, env, cwd = instructor_command(extra=extra)
    os.chdir(cwd)
    os.execve(cmd[0], cmd, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
