"""The package's layers point one way, and no modules import each other in a circle.

src/memlab/ has four layers (docs/ARCHITECTURE.md), lowest first:

    measure  <  lessons  <  grading  <  tools

A module may import its own layer and the layers below it, never one above. ``lessons`` is
stricter: one module per notebook, importing only ``measure`` (and the exceptions listed in
``SAME_LAYER_OK``, each with its reason). ``memlab/__init__.py`` is the facade and may import
anything. Every import is read from the source (AST): module level and inside functions,
``from . import x``, ``from ..measure.tracker import y``, ``import memlab.grading.guard`` and
``importlib.import_module("memlab....")`` with a literal name.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "memlab"
LAYERS = ["measure", "lessons", "grading", "tools"]
# (importer, imported) pairs inside lessons/, with the reason each is allowed. Keep this empty:
# what two notebooks share belongs in measure/ (03's and 04's TrainingSpy: measure.training_spy).
SAME_LAYER_OK: dict[tuple[str, str], str] = {}
# Cycles being removed by open work, each with the issue that removes it. Keep this empty.
KNOWN_CYCLES: dict[str, str] = {}
# Directions fixed inside a layer: (importer, imported) pairs that must not be linked, directly
# or through other modules, with the reason. The facade of a split module re-exports its parts,
# and no part imports the facade.
FORBIDDEN: dict[tuple[str, str], str] = {
    ("grading.interview_bank", "grading.interview_panel"):
        "the question bank is the bottom of 07's modules: the widgets import it, not the reverse",
    ("grading.interview_bank", "grading.interview_review"):
        "the question bank is the bottom of 07's modules: the review imports it, not the reverse",
    ("grading.interview_bank", "grading.interview"): "a part never imports its facade",
    ("grading.interview_panel", "grading.interview"): "a part never imports its facade",
    ("grading.interview_review", "grading.interview"): "a part never imports its facade",
    ("grading.interview_panel", "grading.interview_review"):
        "the widgets (a learner's kernel) need nothing of the instructor's review",
    ("grading.interview_review", "grading.interview_panel"):
        "the review runs without ipywidgets: it needs nothing of the widgets",
    # Class grading: grade_class (orchestration and facade) over intake < runner < warm < jobs,
    # and merge, report (the grader's side of a result).
    **{(f"grading.{part}", "grading.grade_class"): "a part never imports its facade"
       for part in ("intake", "runner", "warm", "jobs", "merge", "report")},
    ("grading.intake", "grading.runner"):
        "intake is the bottom of class grading: reading a submission needs nothing of grading it",
    ("grading.runner", "grading.warm"):
        "the grading in the child knows nothing of how its process was started (warm hands in "
        "the kernel manager's name and counts)",
    ("grading.runner", "grading.jobs"):
        "the child grades the job it is given: making jobs and waiting for them is above it",
    ("grading.warm", "grading.jobs"):
        "the processes run a job; making jobs and waiting for them is above them",
    ("grading.merge", "grading.runner"):
        "merging trusts nothing of the runner: a result is checked as data (validate_result)",
    ("grading.merge", "grading.warm"): "the grader's side never starts a grading process",
    **{("grading.confine", f"grading.{user}"): "the sandbox knows nothing of who forks the "
       "processes it confines" for user in ("warm", "runner", "jobs", "verdict", "grade_class")},
    ("grading.report", "grading.warm"): "the report reads results and the gradebook; it runs nothing",
    ("grading.report", "grading.jobs"): "the report reads results and the gradebook; it runs nothing",
}


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
    assert not loose, (f"modules outside the four layers: {loose}; put each in measure/, lessons/, "
                       "grading/ or tools/ (docs/ARCHITECTURE.md)")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m) is not None))
def test_no_import_from_a_higher_layer(module):
    mine = _layer(module)
    bad = []
    for target in sorted(imports_of(module)):
        theirs = _layer(target)
        if theirs is None:
            continue
        if theirs > mine:
            bad.append(f"{module} imports {target} ({LAYERS[theirs]} is above {LAYERS[mine]})")
        elif (LAYERS[mine] == "lessons" and theirs == mine and target != "lessons"
              and module != "lessons" and (module, target) not in SAME_LAYER_OK):
            bad.append(f"{module} imports {target}: a lesson module imports only memlab.measure")
    assert not bad, "\n".join(bad)


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


@pytest.mark.parametrize("pair", sorted(FORBIDDEN), ids="->".join)
def test_forbidden_directions_inside_a_layer(pair):
    importer, imported = pair
    assert importer in MODULES and imported in MODULES, f"FORBIDDEN names a missing module: {pair}"
    assert imported not in _reachable(importer), (
        f"{importer} imports {imported} (directly or through other modules): {FORBIDDEN[pair]}")


def test_the_checker_sees_imports():
    """The AST reader finds relative, absolute and importlib imports (a checker that found
    nothing would pass every test above)."""
    assert "measure.tracker" in imports_of("measure.breakdown")
    assert "measure.tracker" in imports_of("lessons.checkpointing")
    assert "grading.course" in imports_of("grading.instructor")
    assert "grading.guard" in imports_of("grading")
    assert "grading.interview_bank" in _reachable("grading.interview_panel")
    assert "grading.warm" in _reachable("grading.grade_class")
    assert "grading.runner" in _reachable("grading.jobs")
