"""The instructor's review list of written answers (07 "Interview prep" and 01-06).

What an instructor should read by hand: every ``NEEDS MANUAL REVIEW:`` line the graded test
cells printed (:data:`memlab.grading.interview.bank.REVIEW_MARKER`, or a ``[needs review]``
report head of ``ml.rubric``), the answers grade-class's static audit withheld, and a clean
re-grade of every written answer *outside* the learner's kernel: the answer cells' literal
values are evaluated without running them (:func:`answer_values`: literals, arithmetic,
f-strings and a few pure functions, nothing else) and the *source* notebook's test cells
(from solutions/) are run on them (:func:`_regrade`); any score that differs from the
notebook's, and any answer cell that can not be evaluated without running learner code,
becomes a :class:`ReviewItem`.

Used by: :mod:`memlab.autograde.batch.grade_class` (:func:`review_notebook` on each graded notebook,
for the class report), :mod:`memlab.autograde.cli` (``python -m
memlab.autograde.cli reviews 07_interview_prep``: :func:`course_reviews` and
:func:`format_reviews`) and ``python -m memlab.grading.interview review 07_interview_prep``
(:func:`main`, run by the facade :mod:`memlab.grading.interview`, which re-exports every
public name here). It imports the question bank (:mod:`memlab.grading.interview.bank`) for
the review marker; the bank never imports it. The re-graded test cells call
``ml.interview.grade``, which reaches the facade through ``memlab``'s short names, not an
import of this module.
"""
from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import importlib
import io
import json
import math
import re
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from memlab.grading.answers.result import REVIEW_HEAD
from memlab.grading.interview.bank import REVIEW_MARKER

__all__ = ["ReviewItem", "answer_values", "review_notebook", "find_reviews", "format_reviews",
           "course_reviews", "review_queue", "main"]


# ------------------------------------------------------------ instructor: review list
@dataclass(frozen=True)
class ReviewItem:
    """One answer an instructor should read.

    ``source``: "flagged" (the grader printed a review line in the learner's kernel),
    "regrade" (a clean regrade outside the kernel flagged it) or "audit" (the clean regrade
    disagrees with the notebook, or the answer cell can not be evaluated without running it).
    """

    student: str
    assignment: str
    notebook: str
    question: str
    source: str
    reason: str

    def line(self) -> str:
        who = "/".join(x for x in (self.student, self.assignment, self.notebook) if x)
        return f"{who}  {self.question}  [{self.source}]  {self.reason}"


_INTERVIEW_CALL = re.compile(r"ml\.interview\.grade\(\s*[\"'](q\d+)[\"']")
# a written answer of 01-06: ``ml.rubric.grade_text(OOM_ANSWER, "oom_before_batch")`` (or the
# hidden rubric a test cell builds): the answer is the first argument, a name
_RUBRIC_CALL = re.compile(r"\bgrade_text\(\s*([A-Za-z_]\w*)\s*,")


def _regradable(text: str, grade_id: str) -> tuple[str, str] | None:
    """(question, answer variable) of a test cell that grades a written answer from its value
    alone (07's ``ml.interview.grade("q9", ...)``, 01-06's ``grade_text(ANSWER, ...)``), else
    None: such a cell can be re-run outside the kernel on the answer cells' literal values."""
    call = _INTERVIEW_CALL.search(text)
    if call:
        return call.group(1), f"answer_{call.group(1)}"
    call = _RUBRIC_CALL.search(text)
    if call:
        return grade_id, call.group(1)
    return None


def _meta(cell) -> dict:
    return (cell.get("metadata") or {}).get("nbgrader") or {}


def _join(text: Any) -> str:
    """Notebook JSON stores multi-line strings as a str or as a list of lines."""
    return "".join(text) if isinstance(text, list) else (text or "")


def _stdout(cell) -> str:
    return "".join(_join(o.get("text", "")) for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")


def _marked_lines(text: str, grade_id: str) -> list[tuple[str, str]]:
    """(question, reason) for each review line in a test cell's printed output."""
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(REVIEW_MARKER):
            rest = line[len(REVIEW_MARKER):].strip()
            qid, _, reason = rest.partition(" ")
            found.append((qid, reason.strip()))
        elif line.startswith(REVIEW_HEAD):          # ml.rubric's Result.report() head
            found.append((grade_id, line[len(REVIEW_HEAD):].strip()))
    return found


def _cell_points(cell, max_points: float) -> float:
    """The points nbgrader gives a test cell from its outputs (nbgrader.utils.determine_grade):
    0 on an error or any stderr, the numeric last expression as partial credit, else full."""
    outputs = cell.get("outputs", [])
    for o in outputs:
        if o.get("output_type") == "error" or (o.get("output_type") == "stream"
                                               and o.get("name") == "stderr"):
            return 0.0
    for o in outputs:
        if o.get("output_type") == "execute_result":
            text = _join((o.get("data") or {}).get("text/plain", ""))
            try:
                return min(float(max_points), float(text))
            except (TypeError, ValueError):
                pass
    return float(max_points)


class _Unsafe(Exception):
    """An answer cell that can not be evaluated without running learner code."""


_SAFE_CALLS: dict[str, Callable[..., Any]] = {
    "round": round, "int": int, "float": float, "str": str, "abs": abs, "min": min, "max": max,
    "sum": sum, "math.sqrt": math.sqrt, "math.ceil": math.ceil, "math.floor": math.floor,
    "math.log2": math.log2, "math.log10": math.log10, "math.prod": math.prod,
}
_SAFE_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
                ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
                ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
                ast.Pow: lambda a, b: a ** b}


MAX_BITS = 100_000  # an answer is a number of bytes, seconds or a ratio: far below this


def _bits(x: Any) -> int:
    return abs(x).bit_length() if type(x) is int else 0


def _bounded(op: ast.operator, a: Any, b: Any) -> None:
    """Refuse, before computing it, integer arithmetic whose result would exceed ``MAX_BITS``:
    this runs in the instructor's own grading process, where ``((k**512)**512)**512`` would
    take many minutes and gigabytes (each power alone is allowed)."""
    if isinstance(op, ast.Pow) and type(a) is int and type(b) is int and b > 0 \
            and _bits(a) * b > MAX_BITS:
        raise _Unsafe("a very large number")
    if isinstance(op, ast.Mult) and _bits(a) + _bits(b) > MAX_BITS:
        raise _Unsafe("a very large number")
    if max(_bits(a), _bits(b)) > MAX_BITS:
        raise _Unsafe("a very large number")


# a %-format whose width or precision is 4+ digits or taken from the arguments ("%*d")
_WIDE_PERCENT = re.compile(r"%(?:\([^)]*\))?[-+ #0]*(?:\d{4,}|\*)|%[^a-zA-Z%]*\.(?:\d{4,}|\*)")


MAX_TEXT = 20_000       # characters of one evaluated string
MAX_ITEMS = 10_000      # items of one evaluated value, nested containers counted whole


def _sized(v: Any) -> Any:
    """``v`` if it is small enough to keep in the grader's own process, else :class:`_Unsafe`:
    every value the evaluator makes is measured, so no chain of small steps (a list added to
    itself forty times, f-strings nested in f-strings) can grow past the limits."""
    budget = [MAX_ITEMS]

    def walk(x: Any) -> None:
        budget[0] -= 1
        if budget[0] < 0:
            raise _Unsafe("a value with too many items")
        if isinstance(x, str) and len(x) > MAX_TEXT:
            raise _Unsafe("a very long string")
        if isinstance(x, int) and not isinstance(x, bool) and _bits(x) > MAX_BITS:
            raise _Unsafe("a very large number")
        if isinstance(x, (list, tuple, set)):
            if len(x) > budget[0]:
                raise _Unsafe("a value with too many items")
            for item in x:
                walk(item)

    walk(v)
    return v


def _safe_eval(node: ast.AST, env: Mapping[str, Any]) -> Any:
    """Evaluate literals, arithmetic, f-strings and a few pure functions; nothing else. Every
    value made on the way is size-checked (:func:`_sized`)."""
    def ev(n: ast.AST) -> Any:
        return _sized(ev_node(n))

    def ev_node(n: ast.AST) -> Any:
        if isinstance(n, ast.Constant) and type(n.value) in (str, int, float, bool, type(None)):
            return n.value
        if isinstance(n, ast.Name) and n.id in env:
            return env[n.id]
        if isinstance(n, (ast.List, ast.Tuple, ast.Set)):
            items = [ev(e) for e in n.elts]
            return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(n)](items)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = ev(n.operand)
            if type(v) not in (int, float):
                raise _Unsafe("a sign on a non-number")
            return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.BinOp) and type(n.op) in _SAFE_BINOPS:
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, ast.Pow) and (type(b) not in (int, float) or abs(b) > 512):
                raise _Unsafe("a large power")
            if isinstance(n.op, ast.Mult) and (isinstance(a, (str, list, tuple, set))
                                              or isinstance(b, (str, list, tuple, set))):
                raise _Unsafe("sequence repetition")
            if isinstance(n.op, ast.Mod) and isinstance(a, str) and _WIDE_PERCENT.search(a):
                raise _Unsafe("a very wide format")   # "%100000000000d" % 1: a width bomb
            _bounded(n.op, a, b)
            try:
                v = _SAFE_BINOPS[type(n.op)](a, b)
            except Exception as exc:  # noqa: BLE001 - the kernel would have raised too
                raise _Unsafe(f"{type(exc).__name__} in arithmetic") from None
            if isinstance(v, str) and len(v) > 20_000:
                raise _Unsafe("a very long string")
            return v
        if isinstance(n, ast.JoinedStr):
            parts = []
            for v in n.values:
                if isinstance(v, ast.Constant):
                    parts.append(str(v.value))
                elif isinstance(v, ast.FormattedValue):
                    val = ev(v.value)
                    val = {115: str, 114: repr, 97: ascii}.get(v.conversion, lambda x: x)(val)
                    spec = ev(v.format_spec) if v.format_spec is not None else ""
                    if re.search(r"\d{4,}", str(spec)):   # f"{x:999999999}": a width bomb
                        raise _Unsafe("a very wide format")
                    parts.append(format(val, spec))
                else:
                    raise _Unsafe("an unusual f-string")
            return "".join(parts)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "math" \
                and n.attr in ("pi", "e"):
            return getattr(math, n.attr)
        if isinstance(n, ast.Call) and not n.keywords:
            f = n.func
            name = (f.id if isinstance(f, ast.Name) else
                    f"{f.value.id}.{f.attr}" if isinstance(f, ast.Attribute)
                    and isinstance(f.value, ast.Name) else "")
            if name in _SAFE_CALLS:
                args = [ev(a) for a in n.args]
                if any(type(a) not in (int, float, str, list, tuple) for a in args):
                    raise _Unsafe(f"{name}() on an unusual value")
                flat = [x for a in args for x in (a if isinstance(a, (list, tuple)) else [a])]
                if sum(_bits(x) for x in flat) > MAX_BITS:
                    raise _Unsafe("a very large number")
                try:
                    return _SAFE_CALLS[name](*args)
                except Exception as exc:  # noqa: BLE001
                    raise _Unsafe(f"{type(exc).__name__} in {name}()") from None
        raise _Unsafe(ast.unparse(n)[:60])
    return ev(node)


def _is_not_implemented(stmt: ast.stmt) -> bool:
    exc = getattr(stmt, "exc", None)
    target = exc.func if isinstance(exc, ast.Call) else exc
    return isinstance(stmt, ast.Raise) and isinstance(target, ast.Name) \
        and target.id == "NotImplementedError"


def answer_values(nb) -> tuple[dict[str, Any], dict[str, str]]:
    """Evaluate a notebook's answer cells without running them.

    Returns (values of the names they assign, {variable: why it could not be evaluated}).
    A cell that still raises NotImplementedError before assigning leaves its answer unset.
    Only literals, arithmetic, f-strings and a few pure functions (round, math.sqrt, ...)
    are evaluated; anything else (imports, calls, attribute assignment) makes the cell's
    answer "not evaluable", which :func:`review_notebook` reports.
    """
    env: dict[str, Any] = {}
    unsafe: dict[str, str] = {}
    for cell in nb.get("cells", []):
        m = _meta(cell)
        if cell.get("cell_type") != "code" or not m.get("solution"):
            continue
        gid = m.get("grade_id", "")
        source = _join(cell.get("source", ""))
        assigned = {gid} if gid.startswith("answer_") else set()
        try:
            tree = ast.parse(source)
            for node in ast.walk(tree):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    assigned.add(node.id)
            local = dict(env)
            for stmt in tree.body:
                if isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(
                        stmt.value, ast.Constant) and isinstance(stmt.value.value, str)):
                    continue
                if _is_not_implemented(stmt):
                    break
                if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
                    value = _safe_eval(stmt.value, local)
                    for t in stmt.targets:
                        local[t.id] = value       # type: ignore[union-attr]
                elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                        and stmt.value is not None:
                    local[stmt.target.id] = _safe_eval(stmt.value, local)
                else:
                    raise _Unsafe(f"line {stmt.lineno}: {ast.unparse(stmt).splitlines()[0][:60]}")
            env = local
        except SyntaxError as exc:
            for name in assigned:
                unsafe[name] = f"the answer cell does not parse ({exc.msg})"
        except _Unsafe as exc:
            for name in assigned:
                unsafe[name] = f"the answer cell runs code the audit does not run ({exc})"
    return {k: v for k, v in env.items() if k not in unsafe}, unsafe


class _NoReload(types.ModuleType):
    """``importlib`` as a re-graded test cell sees it: 04's cell reloads ``memlab.rubric`` to
    get "a fresh copy of the grader" in the learner's kernel; here no learner code ever ran,
    and a reload would replace the classes every other module of this process holds."""

    def __init__(self) -> None:
        super().__init__("importlib")
        self.import_module = importlib.import_module

    @staticmethod
    def reload(module):
        return module


def _audit_import(name, globals=None, locals=None, fromlist=(), level=0):
    if name == "importlib" and not fromlist:
        return _NoReload()
    return builtins.__import__(name, globals, locals, fromlist, level)


_AUDIT_BUILTINS = {**builtins.__dict__, "__import__": _audit_import}


def _regrade(source: str, answers: Mapping[str, Any], max_points: float) -> tuple[float, str]:
    """Run an instructor-written test cell in a clean namespace holding only the answers;
    returns (points by nbgrader's rule, printed text)."""
    import memlab  # the cell's ``ml``: ``ml.interview`` loads the facade on first use

    ns: dict[str, Any] = {"__name__": "__memlab_audit__", "ml": memlab,
                          "__builtins__": _AUDIT_BUILTINS,
                          **answers}
    tree = ast.parse(source)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            exec(compile(tree, "<audit>", "exec"), ns)  # noqa: S102 - instructor's own test code
            value = eval(compile(ast.Expression(last.value), "<audit>", "eval"), ns) if last else None
    except Exception:  # noqa: BLE001 - a failing test cell scores 0, as in nbgrader
        return 0.0, out.getvalue()
    if err.getvalue():
        return 0.0, out.getvalue()
    if type(value) in (int, float):
        return min(float(max_points), float(value)), out.getvalue()
    return float(max_points), out.getvalue()


def _read_nb(nb_or_path):
    if isinstance(nb_or_path, (str, Path)):
        return json.loads(Path(nb_or_path).read_text())
    return nb_or_path


def review_notebook(nb, source=None, *, student: str = "", assignment: str = "",
                    notebook: str = "") -> list[ReviewItem]:
    """Review items of one autograded notebook (a path or a loaded notebook dict).

    Lists every review line the test cells printed. With ``source`` (the source notebook
    from solutions/, a path or a dict), also re-grades each written-answer test cell (07's
    ``ml.interview.grade``, 01-06's ``grade_text``; :func:`_regradable`) outside the kernel,
    from the answer cells' literal values and the *source's* test code (learner code never
    runs), and reports disagreements and unevaluable answers.
    """
    nb = _read_nb(nb)
    items: list[ReviewItem] = []
    seen: set[tuple[str, str]] = set()

    def add(question: str, origin: str, reason: str) -> None:
        if (question, reason) not in seen:
            seen.add((question, reason))
            items.append(ReviewItem(student, assignment, notebook, question, origin, reason))

    cells = {_meta(c).get("grade_id"): c for c in nb.get("cells", []) if _meta(c).get("grade_id")}
    for gid, cell in cells.items():
        m = _meta(cell)
        if m.get("grade") and not m.get("solution"):
            for question, reason in _marked_lines(_stdout(cell), gid):
                add(question, "flagged", reason)
        elif m.get("solution"):  # grade-class's static audit withheld this answer (grading.audit)
            for line in _stdout(cell).splitlines():
                if line.strip().startswith(REVIEW_MARKER + " audit:"):
                    add(gid, "static audit", line.strip()[len(REVIEW_MARKER):].strip())
    if source is None:
        return items
    src = _read_nb(source)
    regradable = []   # (test cell's grade id, its points, its source, question, answer variable)
    for cell in src.get("cells", []):
        m, text = _meta(cell), _join(cell.get("source", ""))
        q = _regradable(text, m.get("grade_id", ""))
        if m.get("grade") and not m.get("solution") and q:
            regradable.append((m["grade_id"], float(m.get("points", 0)), text, *q))
    if not regradable:
        return items                     # no written answer to re-grade
    answers, unsafe = answer_values(nb)
    for gid, max_points, text, qid, variable in regradable:
        if variable in unsafe:
            add(qid, "audit", f"{variable}: {unsafe[variable]}; read the cell, the notebook's "
                              f"{_cell_points(cells[gid], max_points) if gid in cells else 0:g} "
                              "points were not checked")
            continue
        points, printed = _regrade(text, answers, max_points)
        shown = _cell_points(cells[gid], max_points) if gid in cells else 0.0
        if abs(points - shown) > 0.011:
            add(qid, "audit", f"the notebook shows {shown:g} points but a clean regrade outside "
                              f"the kernel gives {points:g}: learner code may have changed the "
                              "grading; read the submission and override the grade")
        for question, reason in _marked_lines(printed, gid):
            if (question, reason) not in seen:
                add(question, "regrade", reason)
    return items


def find_reviews(path, source_dir=None, *, assignment: str | None = None) -> list[ReviewItem]:
    """Review items of every autograded notebook under ``path`` (a notebook or a folder laid
    out as ``<student>/<assignment>/<notebook>.ipynb``, nbgrader's autograded folder).

    With ``source_dir`` (solutions/), interview notebooks are also re-graded outside the
    kernel (see :func:`review_notebook`). Used by ``python -m memlab.grading.interview review``.
    """
    path = Path(path)
    paths = [path] if path.is_file() else sorted(
        p for p in path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    items: list[ReviewItem] = []
    for p in paths:
        student = p.parent.parent.name if path.is_dir() and p.parent != path else ""
        assignment_id = p.parent.name if path.is_dir() and p.parent != path else ""
        if assignment and assignment_id != assignment:
            continue
        source = None
        if source_dir is not None:
            candidate = Path(source_dir) / assignment_id / p.name
            source = candidate if candidate.is_file() else None
        items += review_notebook(p, source, student=student, assignment=assignment_id,
                                 notebook=p.name)
    return items


def format_reviews(items: Sequence[ReviewItem]) -> str:
    """The review list as text, one line per item, for the instructor's terminal."""
    if not items:
        return "nothing flagged for manual review"
    lines = [f"{len(items)} answer(s) to review (flagged: the grader was unsure; audit: a clean "
             "regrade outside the kernel disagrees or could not run):"]
    return "\n".join(lines + [f"  {item.line()}" for item in items])


def course_reviews(assignment: str | None = None, config_path=None) -> list[ReviewItem]:
    """Review items of the course's autograded folder (paths from autograder/nbgrader_config.py)."""
    from memlab.autograde import course

    config = course.load_config(config_path)
    cd = config.CourseDirectory
    root = Path(cd.root)
    return find_reviews(root / cd.autograded_directory, root / cd.source_directory,
                        assignment=assignment)


def review_queue(assignment: str | None = None, config_path=None, report=None) -> list[ReviewItem]:
    """The open review queue: the class report's review.csv (``report``, default
    autograder/work/class_report) where grade-class wrote one, the very rows its summary
    counts; else the scan of the autograded folder (:func:`course_reviews`, after plain
    ``instructor autograde``) less the cells the instructor decided."""
    import csv

    from memlab.autograde import course, decisions

    api = course.make_api(config_path)
    folder = Path(report) if report else course.default_report_dir(api.coursedir)
    table = folder / "review.csv"
    decisions.adopt(api)  # a score set in formgrader since the report was written
    decided = {(d.student, d.assignment, d.grade_id)
               for d in decisions.load(api.coursedir).values()}
    if table.is_file() and (folder / "ledger.jsonl").is_file():
        with open(table, newline="") as fh:
            return [ReviewItem(r["student"], r["assignment"], "", r.get("cell") or "-", "queue",
                               r["why"])
                    for r in csv.DictReader(fh) if assignment in (None, r["assignment"])
                    and (r["student"], r["assignment"], r.get("cell")) not in decided]
    return [i for i in course_reviews(assignment, config_path)
            if not {(i.student, i.assignment, i.question),
                    (i.student, i.assignment, f"test_{i.question}")} & decided]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memlab.autograde.review",
                                     description="List autograded answers that need manual review.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("review", help="list review items of autograded notebooks")
    p.add_argument("assignment", nargs="?", default=None)
    p.add_argument("--path", default=None, help="an autograded notebook or folder (default: the "
                                                 "course's autograded folder)")
    p.add_argument("--source", default=None, help="source folder (default: solutions/)")
    p.add_argument("--config", default=None, help="nbgrader config of the course")
    args = parser.parse_args(argv)
    if args.path:
        items = find_reviews(args.path, args.source, assignment=args.assignment)
    else:
        items = course_reviews(args.assignment, args.config)
    print(format_reviews(items))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())


def answers_audit(api, result: dict) -> list[str]:
    """The report hook of every assignment with written answers (memlab.grading.assignments):
    review reasons of :func:`review_notebook` (a clean regrade of the answers outside the
    kernel, from the source notebook's tests) for each notebook of one graded submission.
    Items the grading already listed (the review lines the kernel printed, which the scan of
    :mod:`memlab.autograde.batch.runner` reads, and the static audit) are not repeated."""
    cd = api.coursedir
    student, assignment = result["student"], result["assignment"]
    folder = Path(cd.format_path(cd.autograded_directory, student, assignment))
    reasons: list[str] = []
    for nb_path in sorted(folder.glob("*.ipynb")):
        source = Path(cd.format_path(cd.source_directory, ".", assignment)) / nb_path.name
        try:
            items = review_notebook(nb_path, source if source.is_file() else None,
                                    student=student, assignment=assignment,
                                    notebook=nb_path.name)
        except Exception as exc:
            reasons.append(f"answers audit failed ({type(exc).__name__})")
            continue
        reasons += [f"{item.question} [{item.source}] {item.reason}" for item in items
                    if item.source not in ("flagged", "static audit")]
    return reasons
