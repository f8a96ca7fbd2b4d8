"""The mutation corpus (tests/mutants/), graded through the real pipeline: every mutant is caught.

Per assignment with a tests/mutants/<assignment>.py file, one temporary course (solutions/ of
that assignment + autograder/nbgrader_config.py, released with ``memlab.instructor.release``),
then ONE grading batch with the instructor's ``grade-class`` machinery
(``memlab.grade_class.grade_class``: parallel workers, nbgrader autograde + feedback):

    control     the solution typed into the released notebook: full marks
    m-<id>      one mutant applied to its answer cell (other answers as released, except those
                the mutated cell or its ``lose`` cells need): every cell in ``lose`` below its
                max, and ``says`` in the output of one of them (the feedback names the mistake)

Submissions are trimmed to what grading runs (tests/mutants/__init__.py, ``submission``): the
demo cells are left out, and answers no mutant touches stay unwritten, so their tests stop at
``NotImplementedError`` at once. The control is trimmed the same way and must get full marks;
the full solution notebooks are graded by tests/notebooks/test_nbgrader_pipeline.py.

Workers: ``MEMLAB_MUTANT_WORKERS`` (default: the cores divided among pytest-xdist's workers); ``MEMLAB_MUTANTS=id1,id2`` grades only
those mutants (and the control), for debugging. The tests of one assignment share one
``xdist_group`` (run with ``-n 2 --dist loadgroup`` the assignments grade in parallel, each
once). The session prints ``mutation corpus: N mutants, M caught`` (tests/conftest.py).
Marked ``slow``.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

import mutants  # noqa: E402  (tests/mutants/)

SOLUTIONS = ROOT / "solutions"
CONTROL = "control"

CORPUS = {a: mutants.load(a) for a in mutants.assignments()}
# MEMLAB_MUTANTS=id1,id2: grade only these mutants (and the control), to debug a few quickly
ONLY = {i for i in os.environ.get("MEMLAB_MUTANTS", "").split(",") if i}


def student_of(mutant: mutants.Mutant) -> str:
    return f"m-{mutant.id}"


@dataclass
class Graded:
    """One assignment's batch: scores and autograded outputs per student."""
    assignment: str
    seconds: float
    scores: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)  # student -> gid -> (score, max)
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)                 # student -> gid -> text
    status: dict[str, tuple[str, list]] = field(default_factory=dict)                # student -> (status, reasons)
    job_seconds: dict[str, float] = field(default_factory=dict)                       # student -> seconds


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _output_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
            parts.extend(out.get("traceback", []))
        elif "data" in out:
            parts.append(str(out.data.get("text/plain", "")))
    return "\n".join(parts)


def _grade_assignment(assignment: str, base: Path) -> Graded:
    from course_support import cores_per_worker, make_course  # tests/
    from memlab.autograde.batch import grade_class

    api = make_course(base / "course", [assignment])  # this assignment's solutions + config, released
    config = base / "course" / "autograder" / "nbgrader_config.py"
    released = Path(api.coursedir.format_path(api.coursedir.release_directory, ".", assignment))

    # the submissions: a control student and one student per mutant
    sources = {p.name: nbformat.read(p, as_version=4) for p in sorted((SOLUTIONS / assignment).glob("*.ipynb"))}
    release_nbs = {name: nbformat.read(released / name, as_version=4) for name in sources}
    students: dict[str, dict[str, object]] = {CONTROL: {}}
    for name, nb in sources.items():
        students[CONTROL][name] = mutants.submission(nb, release_nbs[name])
    for m in CORPUS[assignment]:
        if ONLY and m.id not in ONLY:
            continue
        hits = [name for name, nb in sources.items()
                if any(_meta(c).get("grade_id") == m.cell for c in nb.cells)]
        assert len(hits) == 1, f"mutant {m.id}: answer cell {m.cell!r} is in {len(hits)} notebooks of {assignment}"
        name = hits[0]
        students[student_of(m)] = {name: mutants.submission(sources[name], release_nbs[name], m)}
    subs = base / "submissions"
    for student, notebooks in students.items():
        dest = subs / student / assignment
        shutil.copytree(released, dest, ignore=shutil.ignore_patterns("*.ipynb"))  # data files
        for name, nb in release_nbs.items():  # untouched notebooks of multi-notebook assignments
            nbformat.write(notebooks.get(name, nb), dest / name)

    # ONE grading batch for the whole assignment (and one more, only for submissions whose
    # kernel or worker died: on a machine short of memory that is the machine, not the mutant)
    # default: the cores shared among pytest-xdist's workers (each may grade another assignment)
    workers = int(os.environ.get("MEMLAB_MUTANT_WORKERS", "0")) or cores_per_worker()
    # verdict=False, sandbox=False: this corpus proves the hidden tests (what they catch and
    # what they say), which neither layer changes: the re-run outside the learner's kernel only
    # ever lowers a score, and is proven on every assignment's solution, like the sandbox, by
    # tests/grading/test_hostile.py. Unsandboxed kernels are forked from the warm process (torch
    # imported once); a sandboxed kernel starts a fresh interpreter: measured on 09's 13 mutants
    # (benchmarks/grading_speed.py has the class-sized figures), autograde 1.7 s per submission
    # warm vs 8.9 s sandboxed on 2 busy cores, and the verdict re-run would double it again.
    # One torch thread per kernel: the other pytest-xdist workers use the other cores.
    settings = grade_class.GradeSettings(workers=workers, verdict=False, sandbox=False,
                                         threads_per_kernel=1)
    t0 = time.monotonic()
    results = {r["student"]: r for r in grade_class.grade_class(
        subs, config_path=config, out=base / "report", settings=settings,
        progress=False).results}
    died = sorted(st for st, r in results.items() if r["status"] != "ok")
    if died:
        again = base / "regrade"
        for st in died:
            shutil.copytree(subs / st, again / st)
        results.update({r["student"]: r for r in grade_class.grade_class(
            again, config_path=config, out=base / "report-regrade",
            settings=settings, progress=False).results})
        print(f"\n{assignment}: regraded {died} once (grading failed: "
              f"{[results[st].get('reasons') for st in died]})")
    graded = Graded(assignment, time.monotonic() - t0)
    for student, res in results.items():
        graded.status[student] = (res["status"], res.get("reasons", []))
        graded.job_seconds[student] = float(res.get("seconds", 0.0))
        graded.scores[student] = {gid: (float(v[0] or 0.0), float(v[1]))
                                  for nb in res["grades"].values() for gid, v in nb.items()}
        folder = Path(api.coursedir.format_path(api.coursedir.autograded_directory, student, assignment))
        graded.outputs[student] = {}
        for path in sorted(folder.glob("*.ipynb")):
            for cell in nbformat.read(path, as_version=4).cells:
                gid = _meta(cell).get("grade_id")
                if gid and cell.cell_type == "code":
                    graded.outputs[student][gid] = _output_text(cell)
    return graded


@pytest.fixture(scope="session")
def corpus_grades(tmp_path_factory):
    """assignment -> Graded, each assignment graded once per process (on first use)."""
    cache: dict[str, Graded] = {}

    def get(assignment: str) -> Graded:
        if assignment not in cache:
            cache[assignment] = _grade_assignment(assignment, tmp_path_factory.mktemp(f"mutants-{assignment}"))
            g = cache[assignment]
            jobs = sorted(g.job_seconds.values())
            print(f"\n{assignment}: graded {len(g.scores) - 1} mutants + control in {g.seconds:.0f} s "
                  f"(per submission: median {jobs[len(jobs) // 2]:.0f} s, max {jobs[-1]:.0f} s)")
        return cache[assignment]

    return get


def _marks(assignment):
    return [pytest.mark.slow, pytest.mark.xdist_group(f"mutants-{assignment}")]


CONTROL_CASES = [pytest.param(a, id=a, marks=_marks(a)) for a in CORPUS]
MUTANT_CASES = [pytest.param(a, m, id=f"{a}-{m.id}", marks=_marks(a)) for a, ms in CORPUS.items() for m in ms]


@pytest.mark.parametrize("assignment", CONTROL_CASES)
def test_control_solution_gets_full_marks(corpus_grades, assignment):
    graded = corpus_grades(assignment)
    status, reasons = graded.status[CONTROL]
    assert status == "ok", f"{assignment}: the control submission was not graded: {reasons}"
    short = {gid: f"{s:g}/{mx:g}" for gid, (s, mx) in graded.scores[CONTROL].items() if s < mx}
    assert graded.scores[CONTROL] and not short, (
        f"{assignment}: the solution typed into the release loses points in {short}; outputs:\n"
        + "\n".join(f"--- {gid}\n{graded.outputs[CONTROL].get(gid, '')[-1500:]}" for gid in short))


@pytest.mark.parametrize(("assignment", "mutant"), MUTANT_CASES)
def test_mutant_is_caught(corpus_grades, assignment, mutant, record_property):
    if ONLY and mutant.id not in ONLY:
        pytest.skip(f"MEMLAB_MUTANTS={','.join(sorted(ONLY))} excludes {mutant.id}")
    graded = corpus_grades(assignment)
    student = student_of(mutant)
    scores, outputs = graded.scores.get(student, {}), graded.outputs.get(student, {})
    status, reasons = graded.status.get(student, ("missing", []))
    unknown = [gid for gid in mutant.lose if gid not in graded.scores.get(CONTROL, {})]
    assert not unknown, f"mutant {mutant.id}: {unknown} are not graded cells of {assignment}"
    losing = [gid for gid, (s, mx) in scores.items() if s < mx]
    kept = [gid for gid in mutant.lose if gid not in losing]
    named = [gid for gid in mutant.lose if gid in losing and mutant.says.lower() in outputs.get(gid, "").lower()]
    caught = status == "ok" and not kept and bool(named)
    record_property("mutant", {"assignment": assignment, "id": mutant.id, "caught": caught,
                               "klass": mutant.klass})
    assert status == "ok", f"mutant {mutant.id}: grading failed ({reasons}): a crash is not a caught mistake"
    total = sum(s for s, _ in scores.values()), sum(mx for _, mx in scores.values())
    assert not kept, (
        f"mutant {mutant.id} ({mutant.why}) keeps full marks in {kept} (total {total[0]:g}/{total[1]:g}; "
        f"losing: {losing or 'none'}): strengthen the hidden tests")
    assert named, (
        f"mutant {mutant.id} ({mutant.why}) loses points in {list(mutant.lose)} but none of their outputs "
        f"says {mutant.says!r}; they say:\n"
        + "\n".join(f"--- {gid}\n{outputs.get(gid, '')[-1200:]}" for gid in mutant.lose))


def test_no_two_mutants_are_the_same_edit():
    """A blind round often finds a mistake the corpus already has: it is kept once, under the
    earlier id (a second copy grades the same submission again and proves nothing new)."""
    seen: dict[tuple, str] = {}
    twice = []
    for assignment, corpus in CORPUS.items():
        for m in corpus:
            key = (assignment, m.cell, m.find, m.replace)
            if key in seen:
                twice.append(f"{assignment}: {m.id} is {seen[key]}")
            seen.setdefault(key, m.id)
    assert not twice, "\n".join(twice)
