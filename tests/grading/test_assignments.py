"""The registry of assignments (memlab.grading.assignments) is complete and every name in it
is real; the audit refuses the instructor's side under every alias; every dotted hook string
names the module that defines its function."""
from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

import memlab
from memlab.autograde.batch.report import resolve_hook
from memlab.autograde.security import audit
from memlab.grading.answers.bank import RUBRICS
from memlab.grading.assignments import ASSIGNMENTS, guard_helpers

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir()
                   and list(p.glob("*.ipynb")))
SRC = ROOT / "src" / "memlab"
# the module (memlab.grading re-exports its function guard() under the same name)
guard = importlib.import_module("memlab.grading.guard")


def _resolve_object(dotted: str):
    """A dotted name as a notebook writes it (short names allowed) -> the object."""
    real = audit.canonical(dotted)
    parts = real.split(".")
    for n in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:n]))
        except ImportError:
            continue
        for attr in parts[n:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _sources(name: str) -> str:
    nb = json.loads(next((ROOT / "solutions" / name).glob("*.ipynb")).read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"])


def test_every_assignment_has_one_entry():
    assert SOLUTIONS, "no assignment found in solutions/"
    assert sorted(ASSIGNMENTS) == SOLUTIONS, (
        "memlab.grading.assignments.ASSIGNMENTS must have one entry per folder of solutions/: "
        f"missing {sorted(set(SOLUTIONS) - set(ASSIGNMENTS))}, "
        f"stale {sorted(set(ASSIGNMENTS) - set(SOLUTIONS))}")
    assert sorted(audit.POLICIES) == SOLUTIONS   # the audit's policies come from the registry


@pytest.mark.parametrize("name", SOLUTIONS)
def test_entry_names_real_things(name):
    entry = ASSIGNMENTS[name]
    if entry.lesson is not None:
        assert entry.lesson in memlab.MODULES, f"{name}: lesson {entry.lesson!r} is no short name"
        importlib.import_module(f"memlab.{memlab.MODULES[entry.lesson]}")
    assert set(entry.rubrics) <= set(RUBRICS), f"{name}: unknown rubrics"
    used = set(re.findall(r'grade_text\([^,()]+,\s*"([a-z0-9_]+)"', _sources(name)))
    assert used <= set(entry.rubrics), f"{name} grades with {sorted(used - set(entry.rubrics))}"
    for dotted in [*entry.forbidden_everywhere, *(h for hs in entry.forbidden.values() for h in hs),
                   *entry.guard_helpers]:
        _resolve_object(dotted)          # raises when the helper does not exist
    for hook in entry.report_hooks:
        assert callable(resolve_hook(hook)), hook
    cells = json.loads(next((ROOT / "solutions" / name).glob("*.ipynb")).read_text())["cells"]
    gids = {(c.get("metadata", {}).get("nbgrader") or {}).get("grade_id") for c in cells}
    assert set(entry.forbidden) <= gids, f"{name}: forbidden helpers for unknown cells"


@pytest.mark.parametrize("name", [n for n in SOLUTIONS if ASSIGNMENTS[n].judged])
def test_judged_cells_are_tests_of_functions_the_answers_define(name):
    """Each judged cell is a graded test cell; each name it calls is one an answer cell binds;
    no cell the worker still runs reads a name a judged cell binds (the worker never runs
    those cells, so such a name would be missing there)."""
    from memlab.autograde.security import judge

    cells = json.loads(next((ROOT / "solutions" / name).glob("*.ipynb")).read_text())["cells"]
    meta = [(c.get("metadata", {}).get("nbgrader") or {}) for c in cells]
    src = ["".join(c["source"]) for c in cells]
    tests = {m.get("grade_id") for m in meta if m.get("grade") and not m.get("solution")}
    answers = set().union(*(judge.binds(s) for s, m in zip(src, meta) if m.get("solution")))
    judged = ASSIGNMENTS[name].judged
    assert set(judged) <= tests, f"{name}: judged cells that are no test cell: " \
        f"{set(judged) - tests}"
    for gid, names in judged.items():
        assert set(names) <= answers, \
            f"{name}/{gid}: {set(names) - answers} is bound by no answer cell"
    bound: set[str] = set()
    for s, m in zip(src, meta):
        if m.get("grade_id") in judged:
            bound |= judge.binds(s)
        elif bound & (judge.reads(s) - judge.binds(s)):  # a cell's own loop names are its own
            pytest.fail(f"{name}/{m.get('grade_id')} reads {sorted(bound & judge.reads(s))}, "
                        "bound only in a judged cell")


def test_07_lists_the_rubrics_of_its_questions():
    from memlab.grading.interview import QUESTIONS

    used = {q.rubric for q in QUESTIONS.values() if q.kind == "text"}
    assert set(ASSIGNMENTS["07_interview_prep"].rubrics) == used


def test_the_guard_watches_the_registry_helpers():
    assert guard.LESSON_HELPERS == guard_helpers()
    assert set(guard_helpers()) <= set(guard.WATCHED)
    assert "memlab.lessons.levers.step_peak" in guard.LESSON_HELPERS


def _instructor_modules() -> list[str]:
    out = []
    for path in sorted((SRC / "autograde").rglob("*.py")) + sorted((SRC / "tools").rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        out.append(".".join(p for p in rel.parts if p not in ("__init__", "__main__")))
    return sorted(set(out))


def _aliases(module: str) -> list[str]:
    """Every name a cell can reach ``module`` by: its own, and each short name pointing at it."""
    names = [module]
    names += [f"memlab.{short}" for short, real in memlab.MODULES.items()
              if f"memlab.{real}" == module]
    return names


def _forms(name: str) -> list[str]:
    head, _, leaf = name.rpartition(".")
    return [f"import {name}", f"import {name} as m", f"from {head} import {leaf}",
            f"from {name} import main", f"import memlab as ml\nx = ml.{name[len('memlab.'):]}.main"]


def _rules(source: str, assignment: str = "03_mixed_precision") -> list[str]:
    return [v.rule for v in audit.audit_source(source, "amp_step", audit.policy_for(assignment),
                                               preset_aliases={"ml": "memlab"})]


INSTRUCTOR_NAMES = sorted({alias for m in _instructor_modules() for alias in _aliases(m)})


def test_the_instructor_side_has_short_names_too():
    """The alias test below covers the short names that led the audit astray."""
    assert {"memlab.instructor", "memlab.grade_class", "memlab.hostedcheck",
            "memlab.lab", "memlab.grading_kernel"} <= set(INSTRUCTOR_NAMES)


@pytest.mark.parametrize("name", INSTRUCTOR_NAMES)
def test_every_instructor_module_is_refused_under_every_name(name):
    for source in _forms(name):
        assert _rules(source), f"the audit lets an answer cell reach {name}: {source!r}"


@pytest.mark.parametrize("source", [
    "import memlab as ml\nr = ml.rubric.grade_numeric('1 GB', 1e9)",
    "from memlab import rubric\nr = rubric.grade_text('x', 'checkpointing_cost')",
    "import memlab.tracker\nmemlab.tracker.measure_peak",
    "import memlab as ml\nml.measure_peak",
])
def test_the_learner_side_stays_usable(source):
    assert _rules(source) == []


def test_a_forbidden_helper_is_caught_under_its_real_name():
    src = "import memlab.lessons.levers as lv\ny = lv.sdpa_attention(q, k, v)"
    rules = [v.rule for v in audit.audit_source(src, "causal_attention",
                                                audit.policy_for("08_more_levers"))]
    assert "forbidden helper" in rules


HOOK = re.compile(r"""["'](memlab(?:\.[a-z_]+)+):([A-Za-z_][A-Za-z0-9_]*)["']""")


def test_every_dotted_hook_string_names_its_defining_module():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for module, name in HOOK.findall(path.read_text()):
            fn = resolve_hook(f"{module}:{name}")
            assert getattr(fn, "__module__", module) == module, (
                f"{path.relative_to(ROOT)}: the hook {module}:{name} is a re-export of "
                f"{fn.__module__}: name the module that defines it")
            found.append(f"{module}:{name}")
    assert "memlab.autograde.batch.runner:limited_kernelspec" in found
    assert "memlab.autograde.review:answers_audit" in found
