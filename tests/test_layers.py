"""The package's layers point one way, and no modules import each other in a circle.

src/memlab/ has five layers (docs/ARCHITECTURE.md), lowest first:

    measure  <  lessons  <  grading  <  autograde  <  tools

``grading`` is what a learner's kernel loads; ``autograde`` runs only on the instructor's
machine. The layers, the learner/instructor seam and the directions inside a layer are
import-linter contracts in pyproject.toml ([tool.importlinter]); :func:`test_import_contracts`
runs ``lint-imports``. This module adds what import-linter does not check: every module lies in a
layer, no import cycle, and the AST reader below (used by the cycle check) sees every import
form: module level and inside functions, ``from . import x``, ``from ..measure.tracker import
y``, ``import memlab.grading.guard`` and ``importlib.import_module("memlab....")`` with a
literal name.
"""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "memlab"
LAYERS = ["measure", "lessons", "grading", "autograde", "tools"]
# Cycles being removed by open work, each with the issue that removes it. Keep this empty.
KNOWN_CYCLES: dict[str, str] = {}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        out[".".join(parts)] = path
    return out


MODULES = _modules()
SHORT = None


def _short_names() -> dict[str, str]:
    """memlab.MODULES: the short names notebooks use (``memlab.tracker`` -> measure.tracker)."""
    tree = ast.parse((SRC / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MODULES" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("memlab/__init__.py has no MODULES table")


def _resolve(name: str) -> str | None:
    """'measure.tracker.measure_peak' -> 'measure.tracker' (the longest known module)."""
    short = _short_names()
    head = name.split(".")[0]
    if head in short:
        name = short[head] + name[len(head):]
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        cand = ".".join(parts[:n])
        if cand in MODULES:
            return cand
    return None


def imports_of(module: str) -> set[str]:
    """Modules of memlab that ``module`` imports (names relative to memlab)."""
    path = MODULES[module]
    is_pkg = path.name == "__init__.py"
    package = module.split(".") if is_pkg else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name[len("memlab."):] for a in node.names if a.name.startswith("memlab.")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1] if node.level > 1 else package
                prefix = ".".join(base + ([node.module] if node.module else []))
            elif node.module and (node.module == "memlab" or node.module.startswith("memlab.")):
                prefix = node.module[len("memlab."):] if node.module != "memlab" else ""
            else:
                continue
            names = [f"{prefix}.{a.name}".strip(".") for a in node.names] + ([prefix] if prefix else [])
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)
              and str(node.args[0].value).startswith("memlab.")):
            names = [node.args[0].value[len("memlab."):]]
        for name in names:
            target = _resolve(name)
            if target and target != module:
                found.add(target)
    return found


def _layer(module: str) -> int | None:
    head = module.split(".")[0]
    return LAYERS.index(head) if head in LAYERS else None


def test_every_module_is_in_a_layer():
    loose = [m for m in MODULES if m and _layer(m) is None]
    assert not loose, (f"modules outside the five layers: {loose}; put each in measure/, lessons/, "
                       "grading/, autograde/ or tools/ (docs/ARCHITECTURE.md)")


def test_no_import_cycles():
    graph = {m: imports_of(m) for m in MODULES if m}
    # Package __init__ files re-export their children: an edge child -> package is a cycle only
    # through the __init__, which imports the child first; ignore edges into one's own package.
    for m, deps in graph.items():
        graph[m] = {d for d in deps if not m.startswith(d + ".")}
    cycles, state, stack = [], {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    new = [c for c in cycles if c not in KNOWN_CYCLES]
    assert not new, "import cycles:\n" + "\n".join(new)
    stale = [c for c in KNOWN_CYCLES if c not in cycles]
    assert not stale, f"KNOWN_CYCLES lists cycles that are gone: {stale}; remove them"


def _reachable(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for dep in imports_of(todo.pop()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_the_checker_sees_imports():
    """The AST reader finds relative, absolute and importlib imports (a checker that found
    nothing would pass the cycle test)."""
    assert "measure.tracker" in imports_of("measure.breakdown")
    assert "measure.tracker" in imports_of("lessons.checkpointing")
    assert "autograde.course" in imports_of("autograde.cli")
    assert "grading.guard" in imports_of("grading")
    assert "grading.answers.result" in imports_of("grading.answers.grade")   # `from . import x`
    assert "grading.interview.bank" in _reachable("grading.interview.panel")
    assert "autograde.batch.processes" in _reachable("autograde.batch.grade_class")
    assert "autograde.batch.runner" in _reachable("autograde.batch.jobs")


def _lint_imports() -> list[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    cmd = [str(exe)] if exe.exists() else [shutil.which("lint-imports") or "lint-imports"]
    return cmd + ["--no-cache"]


def test_import_contracts():
    """pyproject.toml's import-linter contracts hold (the layers, the learner/instructor seam,
    the directions inside a layer); the output names the import that breaks one."""
    proc = subprocess.run(_lint_imports(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout and " kept" in proc.stdout, proc.stdout[-2000:]


def test_import_contracts_catch_a_break(tmp_path):
    """The contracts are not vacuous: a copy of the package where the learner's visible tests
    import the instructor's nbgrader driver breaks the learner/instructor contract."""
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy / "memlab", ignore=shutil.ignore_patterns("__pycache__"))
    visible = copy / "memlab" / "grading" / "visible.py"
    visible.write_text(visible.read_text() + "\nimport memlab.autograde.course\n")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    env = {"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(_lint_imports(), cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "memlab.grading.visible -> memlab.autograde.course" in proc.stdout, proc.stdout[-3000:]


def test_every_module_of_the_learner_side_loads_without_the_instructor_side():
    """What 07's set-up cell and every notebook load: no module of memlab.autograde comes with it
    (checked in a fresh interpreter, at run time, not only in the source)."""
    code = ("import sys, memlab as ml\n"
            "ml.interview, ml.rubric, ml.rubric_bank, ml.visible_test\n"
            "import memlab.grading, memlab.grading.guard\n"
            "print(sorted(m for m in sys.modules\n"
            "             if m.startswith(('memlab.autograde', 'memlab.tools', 'nbgrader'))))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", proc.stdout
