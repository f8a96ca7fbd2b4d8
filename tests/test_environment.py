"""The pins agree everywhere: requirements.txt, environment.yml, pyproject.toml, envcheck.

requirements.txt is the source of truth. torch must stay pinned exactly (an unpinned `torch`
pulls a multi-GB CUDA build).
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from memlab.tools import envcheck

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.+\-]+)$")


def parse_pins(lines) -> dict[str, str]:
    pins = {}
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = PIN.match(line)
        assert m, f"{line!r} is not an exact pin `name==version`: pin every dependency exactly"
        name = m.group(1).lower().replace("_", "-")
        assert name not in pins, f"{name} is pinned twice"
        pins[name] = m.group(2)
    return pins


def requirements() -> dict[str, str]:
    return parse_pins((ROOT / "requirements.txt").read_text().splitlines())


def test_requirements_pin_everything_and_torch_exactly():
    pins = requirements()
    assert pins.get("torch") == "2.13.0", (
        f"torch must be pinned as torch==2.13.0 in requirements.txt, found {pins.get('torch')!r}")
    for needed in ("jupyterlab", "nbgrader", "ipywidgets", "matplotlib", "pytest"):
        assert needed in pins, f"{needed} is missing from requirements.txt"


def test_environment_yml_lists_the_same_pins():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["name"] == "gpu-memory-lab"
    assert env["channels"] == ["conda-forge"]
    deps = env["dependencies"]
    assert "python=3.11" in deps, "environment.yml must ask for python=3.11"
    assert "pip" in deps
    pip_sections = [d["pip"] for d in deps if isinstance(d, dict) and "pip" in d]
    assert len(pip_sections) == 1, "environment.yml needs exactly one `pip:` section"
    pip_lines = pip_sections[0]
    assert not any(str(x).startswith("-r") for x in pip_lines), (
        "list the pins explicitly under pip:, not `-r requirements.txt`")
    assert parse_pins(pip_lines) == requirements(), (
        "environment.yml's pip pins differ from requirements.txt: copy them over")


def test_pyproject_matches_python_and_declares_markers():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert py["project"]["name"] == "memlab"
    # the pinned reference is 3.11 (environment.yml, Makefile); hosted runtimes bring 3.12/3.13
    assert py["project"]["requires-python"] == ">=3.11,<3.14"
    # the pins live in requirements.txt only: a second list in pyproject would drift
    assert py["project"].get("dependencies", []) == [], (
        "keep pyproject's dependencies empty: pins belong in requirements.txt")
    ini = py["tool"]["pytest"]["ini_options"]
    assert ini["testpaths"] == ["tests"]
    assert "gpu: needs a CUDA device" in ini["markers"]


def test_envcheck_expects_the_pinned_versions():
    pins = requirements()
    for name, version in envcheck.EXPECTED.items():
        assert pins.get(name) == version, (
            f"memlab/envcheck.py expects {name} {version} but requirements.txt pins {pins.get(name)}")


def test_installed_torch_is_the_pinned_one():
    import torch

    assert torch.__version__.split("+")[0] == requirements()["torch"], (
        f"installed torch {torch.__version__} differs from the pin: run `make test` from a clean .venv")


def test_hosted_extra_excludes_torch_and_is_satisfied_by_the_pins():
    """`pip install memlab[hosted]` (README "Hosted notebook") keeps the runtime's torch, and the
    pinned set is one of the environments it allows (lower bounds at or below each pin)."""
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())
    hosted = py["project"]["optional-dependencies"]["hosted"]
    pins = requirements()
    assert hosted, "the hosted extra lists what the notebooks import besides torch"
    for dep in hosted:
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)>=([0-9.]+)", dep.replace(" ", ""))
        assert m, f"{dep!r}: the hosted extra takes lower bounds only (a runtime's copy satisfies them)"
        name, low = m.group(1).lower(), m.group(2)
        assert name != "torch", "the hosted extra must not name torch: it would replace the runtime's"
        assert name in pins, f"{name} of the hosted extra is not pinned in requirements.txt"
        as_tuple = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
        assert as_tuple(pins[name]) >= as_tuple(low), f"{name}=={pins[name]} does not satisfy {dep}"
