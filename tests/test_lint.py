"""Lint in the fast tier: ruff is clean, long lines only get fewer, every path the docs name
exists."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINTED = ("src", "tests", "benchmarks")
# Lines over 100 characters in LINTED (.py): ruff's E501 is not enforced yet (pyproject.toml).
# Lower this number when you shorten some; never raise it.
LONG_LINES = 858
# A path a doc names: a top folder of the repository, then a path; templates (NN_name, <x>, *)
# and what grading writes (autograder/work/...) are not files of the repository.
PATH = re.compile(r"(?<![\w/.-])((?:src|tests|docs|solutions|notebooks|autograder|benchmarks|\.ci)"
                  r"/[A-Za-z0-9_./<>*-]*[A-Za-z0-9_])")
NOT_FILES = re.compile(r"[<>*]|NN_|autograder/work|notebooks/\d\d_$")


def _ruff() -> list[str]:
    exe = Path(sys.executable).with_name("ruff")
    return [str(exe) if exe.exists() else "ruff"]


def _tracked(*suffixes: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / f for f in out if f.endswith(suffixes) and (ROOT / f).is_file()]


def test_ruff_is_clean():
    proc = subprocess.run(_ruff() + ["check", "--no-cache", *LINTED], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-1000:]


def test_ruff_sees_a_mistake(tmp_path):
    """The check is not vacuous: an unused import in a linted file is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n")
    proc = subprocess.run(_ruff() + ["check", "--no-cache", "--config",
                                     str(ROOT / "pyproject.toml"), str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "F401" in proc.stdout, proc.stdout


def test_long_lines_only_get_fewer():
    long = [f"{p.relative_to(ROOT)}:{i}" for p in _tracked(".py")
            if p.relative_to(ROOT).parts[0] in LINTED
            for i, line in enumerate(p.read_text().splitlines(), 1) if len(line) > 100]
    assert len(long) <= LONG_LINES, (
        f"{len(long)} lines over 100 characters (at most {LONG_LINES}): shorten the ones you "
        "added (ruff format --range helps with code lines)")


def test_every_path_the_docs_name_exists():
    stale = {}
    for p in _tracked(".py", ".md", ".toml", ".txt", ".yml", "Makefile", ".ci/run"):
        for m in PATH.finditer(p.read_text()):
            path = m.group(1).rstrip(".")
            if not NOT_FILES.search(path) and not (ROOT / path).exists():
                stale.setdefault(path, set()).add(str(p.relative_to(ROOT)))
    assert not stale, "paths named in docs and docstrings that do not exist:\n" + "\n".join(
        f"  {k} (in {', '.join(sorted(v))})" for k, v in sorted(stale.items()))


# A function reads as the list of its steps: none in src/ runs over this many lines (the def
# line to the last line of its body; decorators not counted).
MAX_FUNCTION_LINES = 80


def _long_functions(root: Path) -> list[str]:
    import ast
    out = []
    for p in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    out.append(f"{p.relative_to(root.parent)}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_function_in_src_runs_over_80_lines():
    long = _long_functions(ROOT / "src")
    assert not long, (f"functions over {MAX_FUNCTION_LINES} lines (split them along their "
                      "steps):\n  " + "\n  ".join(long))


def test_the_length_check_sees_a_long_function(tmp_path):
    (tmp_path / "src").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "src" / "m.py").write_text("def short():\n    pass\n\n\ndef long():\n" + body)
    assert [s.split()[1] for s in _long_functions(tmp_path / "src")] == ["long"]
