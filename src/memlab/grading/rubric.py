"""Answer grading for GPU Memory Lab: numbers with units, choices, orderings and short text.

Used by: the graded test cells of every assignment (``ml.rubric.grade_*(...)`` then
``result.points(max_points)`` as the cell's last expression, which nbgrader reads as
partial credit), and the self-study checks (``result.report()``, ``Rubric.model_answer``).

Every grader returns a :class:`Result`: a ``score`` in [0, 1], feedback lines, and
``needs_review`` with a reason when the grade is uncertain. Learner input never raises:
a wrong type, a bad string or an absurd length scores 0 with a message. Instructor
mistakes (an unknown unit, a rubric pattern that does not compile) do raise. A graded
test cell::

    '''Q3: why checkpointing costs time (2 points, partial credit).'''
    result = ml.rubric.grade_text(answer_q3, "checkpointing_cost")
    print(result.report())
    result.points(2)

Graders: ``grade_numeric(answer, expected, unit="GB")`` (5% full / 20% half credit;
GB = 10**9 and GiB = 2**30 bytes, converted into each other), ``grade_choice`` (single,
or multiple with (right - wrong) / n_right), ``grade_ordering`` (pairwise, Kendall-tau
style) and ``grade_text`` (a concept rubric from :mod:`memlab.grading.rubric_bank`).

Design of the text grader (``grade_text``)
------------------------------------------
It is a transparent concept rubric, not a language model. A :class:`Rubric` names the
ideas a good answer contains (:class:`Concept`, each a weight and a few vetted regular
expressions) and the wrong claims that cost credit (:class:`Misconception`, each a
penalty). The score is the weight of the concepts found divided by ``full_credit_at`` of
the total weight, capped at 1, minus the penalties of the misconceptions found. The
feedback quotes the words that matched each concept, names the missing ones with a hint,
and explains each misconception; ``Rubric.describe()`` prints a whole rubric.

Before matching, the answer is normalised (lowercase, ``don't`` -> ``do not``, hyphens
to spaces, ``float16`` -> ``fp16``, ``bfloat16`` -> ``bf16``, commas/colons/brackets to
a ``,`` token, sentence ends to a ``.`` token), so a pattern is written against plain
words separated by single spaces. Patterns match whole words (``recomput\\w*``);
``gap(n)`` allows up to n words in between, never across a ``,``/``.`` or a negation.

Guards, in order:
- a non-``str`` answer or an empty one scores 0 (a ``str`` subclass is copied with
  ``str.__str__`` first, so none of its methods run);
- an answer over ``max_words`` (120 by default) scores 0 with a message and is never
  run through the patterns;
- runs of 5 or more words that also occur in the question (after crude stemming) are
  blanked out: copying the prompt earns nothing;
- keyword lists are blanked out: 6 or more short terms in a row, three quarters of them
  bare ("fp16, bf16, checkpointing, all-gather, ..."), or 8 or more words in a row without a
  single function word, also inside a longer phrase. The whole
  answer scores 0 when little else is left, when fewer than 5% of its words are function
  words, when the same terms or phrases repeat, or when terms are glued with the same
  few words ("the X and the Y and the Z", "It is about X. It is about Y.");
- concept patterns ignore negation ("so that gradients do not underflow" shows the idea
  of underflow); misconception patterns do not count when negated in their own clause
  ("is not free", "rather than a free optimisation") or reported rather than claimed
  ("a common mistake is to ...", "people think ...", "if you call zero_grad every
  micro-batch, ...", "..., which is a myth").

Limits, and how instructors handle them
---------------------------------------
Patterns miss unusual but correct phrasing, and a fluent answer can say the right words
for the wrong reasons; negation and reporting are read only a few words around a match,
so double negatives and a denial after the claim ("checkpointing is free? no.") are not
understood. So the grader says when it is unsure: ``needs_review`` is set, with a
reason, for scores inside the rubric's ``review_band`` (0.3-0.7 by default), a
misconception next to strong concepts, answers that are nearly keyword lists (terse
notes, short term lists, repetitive wording), a large copied share, a long on-topic
answer that matched little of the rubric, and misconception phrases ignored as
reported. ``Result.report()`` starts with ``[needs review]`` for these, so the autograder
feedback and the gradebook export show them; an instructor reads them, overrides the
grade in the formgrader when the rubric was wrong, and adds the missed phrasing to
:mod:`memlab.grading.rubric_bank` together with that answer as a labelled case in
tests/grading/test_rubric.py.

Test cells run in the learner's kernel, so learner code could replace these functions;
that risk is the test cell's to manage (see NBGRADER.md), not this module's.
"""
from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from ..measure.units import GB, GiB, KiB, MiB

__all__ = [
    "Result", "Concept", "Misconception", "Rubric",
    "grade_text", "grade_numeric", "grade_choice", "grade_ordering",
    "parse_quantity", "normalize", "gap", "get_rubric", "rubric_ids",
]

TB = 10**12  # bytes, decimal
TiB = 2**40  # bytes, binary


# --------------------------------------------------------------------------- results
@dataclass
class Result:
    """The outcome of grading one answer.

    ``score`` is in [0, 1]; ``feedback`` holds the lines shown to the learner;
    ``needs_review`` / ``review_reason`` tell the instructor the grade is uncertain.
    For text answers ``found`` / ``missing`` / ``misconceptions`` name the rubric's
    concepts and misconceptions, and ``details`` holds the measurements behind the guards.
    """

    score: float
    feedback: list[str] = field(default_factory=list)
    needs_review: bool = False
    review_reason: str = ""
    kind: str = ""
    found: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    misconceptions: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        s = float(self.score)
        self.score = 0.0 if math.isnan(s) else min(1.0, max(0.0, s))

    def points(self, max_points: float) -> float:
        """Score scaled to ``max_points``, rounded to 0.01, never above ``max_points``.

        End a test cell with ``result.points(2)``: nbgrader reads that number as the
        cell's partial credit (a cell that prints anything to stderr scores 0 instead).
        """
        if type(max_points) not in (int, float) or not math.isfinite(max_points) or max_points <= 0:
            raise ValueError(f"max_points must be a positive number, got {max_points!r}")
        return float(min(float(max_points), round(self.score * max_points, 2)))

    def report(self) -> str:
        """The feedback as text: a first line with the score, then one line per remark."""
        head = f"score {self.score:.2f} ({self.kind or 'answer'})"
        if self.needs_review:
            head = f"[needs review] {head}: {self.review_reason}"
        return "\n".join([head] + [f"- {line}" for line in self.feedback])

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly copy, for gradebook exports."""
        return {
            "score": self.score, "kind": self.kind, "needs_review": self.needs_review,
            "review_reason": self.review_reason, "feedback": list(self.feedback),
            "found": list(self.found), "missing": list(self.missing),
            "misconceptions": list(self.misconceptions), "details": dict(self.details),
        }


def _flagged(score: float, feedback: list[str], reasons: list[str], **kw: Any) -> Result:
    return Result(score, feedback, bool(reasons), "; ".join(reasons), **kw)


# ------------------------------------------------------------ untrusted learner input
def _as_text(x: object) -> str | None:
    """An exact ``str`` copy of a learner's string (subclass methods are never called)."""
    return str.__str__(x) if isinstance(x, str) else None


def _as_number(x: object) -> float | None:
    """An exact float from a learner's number; ``None`` when it is not a number.

    int/float subclasses are read through the base type's own slot, so an overridden
    ``__eq__`` or ``__float__`` never runs; bool is not a number here. numpy/torch
    scalars are converted once, with ``float()``, inside a guard.
    """
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        try:
            return float(int.__index__(x))
        except OverflowError:
            return math.inf
    if isinstance(x, float):
        return float.__float__(x)
    module = type(x).__module__.split(".")[0]
    if module in ("numpy", "torch"):
        try:
            v = float(x)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - any failure is the learner's answer being odd
            return None
        return v if type(v) is float else None
    return None


def _as_items(x: object) -> list[object] | None:
    """The elements of a learner's list/tuple/set, read through the base type's iterator."""
    for base in (list, tuple, set, frozenset):
        if isinstance(x, base):
            return list(base.__iter__(x))  # type: ignore[attr-defined]
    return None


def _type_name(x: object) -> str:
    return type(x).__name__


# ------------------------------------------------------------------- numeric answers
# unit -> (family, size in the family's base unit). Lower case; "µ" is read as "u".
_UNITS: dict[str, tuple[str, float]] = {}


def _add_units(family: str, size: float, *names: str) -> None:
    for name in names:
        _UNITS[name] = (family, size)


_add_units("bytes", 1, "b", "byte", "bytes")
_add_units("bytes", 10**3, "kb", "kilobyte", "kilobytes")
_add_units("bytes", 10**6, "mb", "megabyte", "megabytes")
_add_units("bytes", GB, "gb", "gigabyte", "gigabytes")
_add_units("bytes", TB, "tb", "terabyte", "terabytes")
_add_units("bytes", KiB, "kib", "kibibyte", "kibibytes")
_add_units("bytes", MiB, "mib", "mebibyte", "mebibytes")
_add_units("bytes", GiB, "gib", "gibibyte", "gibibytes")
_add_units("bytes", TiB, "tib", "tebibyte", "tebibytes")
_add_units("seconds", 1, "s", "sec", "secs", "second", "seconds")
_add_units("seconds", 1e-3, "ms", "msec", "millisecond", "milliseconds")
_add_units("seconds", 1e-6, "us", "microsecond", "microseconds")
_add_units("seconds", 60, "min", "mins", "minute", "minutes")
_add_units("seconds", 3600, "h", "hr", "hrs", "hour", "hours")
_add_units("percent", 1, "%", "percent", "pct")
_add_units("ratio", 1, "x", "times")
_add_units("count", 1, "params", "parameters", "elements", "values", "tokens")
# Bare prefixes ("28G") are read as decimal and flagged when GiB would grade differently.
_AMBIGUOUS_BYTES = {"k": 10**3, "m": 10**6, "g": GB, "t": TB}
_COUNT_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "bn": 1e9, "t": 1e12}
_BYTE_UNITS_SHOWN = ("B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")
_DISPLAY = {name.lower(): name for name in _BYTE_UNITS_SHOWN}
_SCALE_WORDS = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}

_QTY = re.compile(
    r"(?P<num>[+-]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)"
    r"(?:\s*(?:x|\*|×|·)\s*10\s*(?:\^|\*\*)\s*(?P<exp>[+-]?\d+)"
    r"|\s*(?:\^|\*\*)\s*(?P<pow>[+-]?\d+))?"
    r"(?:\s*(?P<scale>thousand|million|billion|trillion)\b)?"
    r"(?:\s*(?P<unit>[a-z%]+))?"
)
_APPROX = re.compile(r"\b(?:about|around|roughly|approximately|approx|circa|ca|nearly|almost)\b\.?|[~≈=]")


def _unit_key(unit: str) -> str:
    return unit.strip().lower().replace("µ", "u").replace("μ", "u")


def _declared(unit: str) -> tuple[str, float]:
    if not isinstance(unit, str):
        raise TypeError(f"unit must be a str, got {_type_name(unit)}")
    key = _unit_key(unit)
    if key in ("", "count", "number"):
        return ("count", 1.0)
    if key not in _UNITS:
        raise ValueError(f"unknown unit {unit!r}; known: {sorted(_UNITS)}")
    return _UNITS[key]


@dataclass(frozen=True)
class _Quantity:
    value: float      # in the declared unit
    unit: str         # as written by the learner, lower case ("" for a plain number)
    size: float       # the learner's unit in the family's base unit (bytes, seconds, ...)
    ambiguous: bool   # a bare prefix such as "28G", read as decimal


def _read_quantities(text: str, family: str, unit_size: float) -> tuple[list[_Quantity], str]:
    s = _unit_key(text)
    s = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", s)       # 28,000,000 -> 28000000
    s = re.sub(r"(?<=\d),(?=\d)", ".", s)                 # 26,1 -> 26.1 (decimal comma)
    s = _APPROX.sub(" ", s)
    out: list[_Quantity] = []
    for m in _QTY.finditer(s):
        try:
            num = float(m["num"].replace("_", ""))
            if m["exp"]:
                num *= 10.0 ** int(m["exp"])
            elif m["pow"]:
                num = num ** int(m["pow"])
        except (OverflowError, ZeroDivisionError, ValueError):
            num = math.inf
        if m["scale"]:
            num *= _SCALE_WORDS[m["scale"]]
        unit = m["unit"] or ""
        ambiguous = False
        if not unit:
            size = unit_size
        elif family == "bytes" and unit in _AMBIGUOUS_BYTES:
            size, ambiguous = float(_AMBIGUOUS_BYTES[unit]), True
        elif family == "count" and unit in _COUNT_SUFFIX:
            size = _COUNT_SUFFIX[unit]
        elif unit in _UNITS:
            fam, size = _UNITS[unit]
            if fam != family:
                return [], (f"'{m.group(0).strip()}' is in {fam}, but this question asks for "
                            f"{family}")
        else:
            hint = f" (use {', '.join(_BYTE_UNITS_SHOWN)})" if family == "bytes" else ""
            return [], f"unknown unit '{unit}' in '{m.group(0).strip()}'{hint}"
        out.append(_Quantity(num * size / unit_size, unit, float(size), ambiguous))
    return out, ""


def parse_quantity(answer: object, unit: str = "GB") -> tuple[float | None, str]:
    """Read one quantity from a learner's answer, converted to ``unit``.

    Returns ``(value, "")`` or ``(None, message)``. Accepts numbers (read in ``unit``)
    and strings such as ``"28 GB"``, ``"26.1 GiB"``, ``"1.5e9 bytes"``, ``"~24GB"``,
    ``"2.4 x 10^10 B"``, ``"1.5 billion bytes"``, ``"28,000 MB"``. GB is 10**9 bytes and
    GiB is 2**30: an answer in GiB for a GB question is converted, not rejected. Several
    quantities are accepted only when they agree within 1% ("24 GB (22.4 GiB)").
    """
    family, unit_size = _declared(unit)
    return _parse(answer, family, unit_size)[:2]


def _parse(answer: object, family: str, unit_size: float) -> tuple[float | None, str, _Quantity | None]:
    number = _as_number(answer)
    if number is not None:
        if not math.isfinite(number):
            return None, "the answer is not a finite number", None
        return number, "", _Quantity(number, "", unit_size, False)
    text = _as_text(answer)
    if text is None:
        return None, f"expected a number or a string such as '28 GB', got {_type_name(answer)}", None
    if not text.strip():
        return None, "no answer given", None
    if len(text) > 200:
        return None, "the answer is too long: give one value with its unit, e.g. '28 GB'", None
    quantities, error = _read_quantities(text, family, unit_size)
    if error:
        return None, error, None
    if not quantities:
        return None, f"no number found in {text.strip()!r}", None
    first = quantities[0]
    for q in quantities[1:]:
        if not math.isclose(q.value, first.value, rel_tol=0.01):
            return None, (f"found {len(quantities)} different values in {text.strip()!r}: "
                          "give exactly one"), None
    if not math.isfinite(first.value):
        return None, "the answer is not a finite number", None
    return first.value, "", first


def _fmt(value: float, unit: str) -> str:
    shown = f"{value:.0f}" if 1e4 <= abs(value) < 1e7 and value == round(value) else f"{value:.4g}"
    return f"{shown} {unit}".strip()


def grade_numeric(
    answer: object,
    expected: float,
    unit: str = "GB",
    *,
    full_tol: float = 0.05,
    partial_tol: float = 0.20,
    partial_score: float = 0.5,
    abs_tol: float = 0.0,
) -> Result:
    """Grade a numeric estimate: full credit within ``full_tol`` relative error, then
    ``partial_score`` within ``partial_tol``, else 0.

    ``expected`` is in ``unit`` (one of B/KB/MB/GB/TB, KiB/MiB/GiB/TiB, s/ms/us/min/h,
    %, x, params or "" for a plain count). A plain-number answer is read in ``unit``;
    an answer with a unit of the same kind is converted (GiB -> GB). ``abs_tol`` adds an
    absolute tolerance, in ``unit`` (useful when ``expected`` is 0). Used by the
    estimation exercises in 01 and 02.
    """
    family, unit_size = _declared(unit)
    for name, tol in (("full_tol", full_tol), ("partial_tol", partial_tol)):
        if type(tol) not in (int, float) or not 0 <= tol:
            raise ValueError(f"{name} must be a non-negative number, got {tol!r}")
    if type(expected) not in (int, float) or not math.isfinite(expected):
        raise ValueError(f"expected must be a finite int or float, got {expected!r}")
    if partial_tol < full_tol:
        raise ValueError("partial_tol must be >= full_tol")
    if type(partial_score) not in (int, float) or not 0 <= partial_score <= 1:
        raise ValueError(f"partial_score must be in [0, 1], got {partial_score!r}")

    value, error, quantity = _parse(answer, family, unit_size)
    details: dict[str, Any] = {"expected": expected, "unit": unit}
    if value is None or quantity is None:
        return Result(0.0, [error, f"expected about {_fmt(expected, unit)}"], kind="numeric",
                      details=details)

    def band(v: float) -> tuple[float, float]:
        err = abs(v - expected)
        rel = err / abs(expected) if expected != 0 else (0.0 if err == 0 else math.inf)
        if rel <= full_tol or err <= abs_tol:
            return 1.0, rel
        if rel <= partial_tol:
            return float(partial_score), rel
        return 0.0, rel

    score, rel = band(value)
    details.update(value=value, rel_error=rel)
    written = _DISPLAY.get(quantity.unit, quantity.unit)
    shown = written and f" (read from {_fmt(value * unit_size / quantity.size, written)})"
    verdict = {1.0: "full credit", 0.0: "no credit"}.get(score, f"{score:g} credit")
    lines = [
        f"expected {_fmt(expected, unit)}; you gave {_fmt(value, unit)}{shown or ''}: "
        f"{_off(rel)} -> {verdict} (full within {full_tol:.0%}, partial within "
        f"{partial_tol:.0%})"
    ]
    reasons: list[str] = []
    if family == "bytes" and score < 1.0:
        hint, reason = _byte_unit_hint(quantity, value, unit, unit_size, band)
        lines += [hint] if hint else []
        reasons += [reason] if reason else []
    if quantity.ambiguous:
        alt_size = {"k": KiB, "m": MiB, "g": GiB, "t": TiB}[quantity.unit]
        alt_score, _ = band(value * alt_size / quantity.size)
        lines.append(f"'{quantity.unit.upper()}' is ambiguous: write GB (10^9) or GiB (2^30)")
        if alt_score != score:
            reasons.append(f"unit '{quantity.unit.upper()}' read as decimal; as binary it "
                           f"would score {alt_score:g}")
    return _flagged(score, lines, reasons, kind="numeric", details=details)


def _off(rel: float) -> str:
    if math.isinf(rel):
        return "off (the expected value is 0)"
    return f"{rel:.1%} off" if rel < 10 else f"{rel + 1:.3g} times too large"


def _byte_unit_hint(q: _Quantity, value: float, unit: str, unit_size: float, band) -> tuple[str, str]:
    """(hint, review reason) when the number is right in the other byte system, or, for a
    plain number, right if read in another byte unit (a unit left off by mistake)."""
    if q.unit:
        pairs = {GB: GiB, GiB: GB, 10**6: MiB, MiB: 10**6, 10**3: KiB, KiB: 10**3, TB: TiB, TiB: TB}
        other = pairs.get(int(q.size))
        if other and band(value * other / q.size)[0] == 1.0:
            return ("your number would be right in the other unit system: GB = 10^9 bytes, "
                    "GiB = 2^30 bytes (1 GiB = 1.074 GB)"), ""
        return "", ""
    for name in _BYTE_UNITS_SHOWN:
        if band(value * _UNITS[name.lower()][1] / unit_size)[0] == 1.0:
            return (f"a plain number is read in {unit}; your number is right if read in "
                    f"{name}: write the unit"), f"a plain number that is right if read in {name}"
    return "", ""


# -------------------------------------------------------------------- choice answers
def _label(x: object) -> str | None:
    text = _as_text(x)
    if text is None:
        if isinstance(x, int) and not isinstance(x, bool):
            text = str(int.__index__(x))
        else:
            return None
    return text.strip().strip("()[].").strip().lower()


_SPLIT = re.compile(r"\s*(?:,|;|/|\+|&|\band\b)\s*")


def _labels(answer: object, known: set[str]) -> tuple[list[str] | None, str]:
    """The labels a learner picked, in order; a string may list several."""
    items = _as_items(answer)
    if items is None:
        single = _label(answer)
        if single is None:
            return None, f"expected an option label (str), got {_type_name(answer)}"
        if single in known or not single:
            return ([single] if single else []), ""
        # "a, c" / "a and c"; a piece that is no label is split at spaces too ("a c")
        items = [w for piece in _SPLIT.split(single) if piece
                 for w in ([piece] if _label(piece) in known else piece.split())]
    out = []
    for item in items:
        lab = _label(item)
        if lab is None:
            return None, f"expected option labels (str), found a {_type_name(item)}"
        if lab:
            out.append(lab)
    return out, ""


def grade_choice(
    answer: object,
    correct: str | Iterable[str],
    *,
    options: Iterable[str] | Mapping[str, str] | None = None,
    multiple: bool | None = None,
    reveal: bool = True,
) -> Result:
    """Grade single or multiple choice. Labels compare case-insensitively ("B" == "(b)").

    Single choice (``correct`` a str): 1 for the right label, else 0; picking several is 0.
    Multiple choice (``correct`` a list/set, or ``multiple=True``): score =
    (right picks - wrong picks) / number of right options, clipped at 0, so ticking every
    box earns nothing. ``answer`` may be a label, a list/set of labels, or a string such as
    ``"a, c"``. ``options`` (labels, or a label -> text mapping) lets unknown labels be
    named in the feedback. ``reveal=False`` keeps the right answer out of the feedback.
    """
    if isinstance(correct, (str, int)):
        correct_list = [correct]
        multiple = bool(multiple)
    else:
        correct_list = list(correct)
        multiple = True if multiple is None else multiple
    right = {_label(c) for c in correct_list}
    if None in right or "" in right or not right:
        raise ValueError(f"correct must be option labels, got {correct!r}")
    if not multiple and len(right) != 1:
        raise ValueError("single choice needs exactly one correct label")
    known = {_label(o) for o in options} if options is not None else set()
    if options is not None and not right <= known:
        raise ValueError(f"correct labels {sorted(right - known)} are not among the options")
    shown = ", ".join(sorted(right))

    picked, error = _labels(answer, known | right)
    if picked is None:
        return Result(0.0, [error], kind="choice")
    if not picked:
        return Result(0.0, ["no option chosen"], kind="choice")
    lines = []
    unknown = sorted({p for p in picked if options is not None and p not in known})
    if unknown:
        lines.append(f"not an option: {', '.join(unknown)}")
    chosen = list(dict.fromkeys(picked))
    if not multiple:
        if len(chosen) > 1:
            lines.insert(0, "choose exactly one option")
            return Result(0.0, lines + ([f"the answer is {shown}"] if reveal else []), kind="choice")
        ok = chosen[0] in right
        lines.insert(0, "correct" if ok else "not correct" + (f": the answer is {shown}" if reveal else ""))
        return Result(1.0 if ok else 0.0, lines, kind="choice")
    hits = [c for c in chosen if c in right]
    wrong = [c for c in chosen if c not in right]
    score = max(0.0, (len(hits) - len(wrong)) / len(right))
    lines.insert(0, f"{len(hits)} of {len(right)} right options chosen, {len(wrong)} wrong "
                    f"(score = (right - wrong) / {len(right)})")
    if reveal and score < 1.0:
        lines.append(f"the right options are {shown}")
    return Result(score, lines, kind="choice", found=tuple(hits),
                  missing=tuple(sorted(right - set(hits))))


# ------------------------------------------------------------------ ordering answers
_ORDER_SPLIT = re.compile(r"\s*(?:->|→|=>|>|,|;|\n|\bthen\b)\s*")


def grade_ordering(answer: object, correct: Sequence[str], *, reveal: bool = True) -> Result:
    """Grade an ordering (e.g. the OOM triage order) by pairwise agreement.

    score = max(0, (concordant pairs - discordant pairs) / all pairs), a Kendall tau
    clipped at 0, where a pair with a missing item counts as neither; unknown or
    repeated items scale the score down by n / (n + extras). Only the exact order
    scores 1. ``answer`` is a list/tuple of labels or a string "a > b > c", "a, b, c",
    "a -> b -> c" (or space-separated labels).
    """
    order = [_label(c) for c in correct]
    if any(o is None or o == "" for o in order) or len(order) < 2 or len(set(order)) != len(order):
        raise ValueError(f"correct must be two or more distinct labels, got {correct!r}")
    items = _as_items(answer)
    if items is None:
        text = _as_text(answer)
        if text is None:
            return Result(0.0, [f"expected a list of labels or a string such as 'a > b > c', "
                                f"got {_type_name(answer)}"], kind="ordering")
        if len(text) > 2000:
            return Result(0.0, ["the answer is too long"], kind="ordering")
        parts = [p for p in _ORDER_SPLIT.split(text.strip()) if p]
        if len(parts) == 1 and _label(parts[0]) not in order:
            parts = text.split()
        items = parts
    labels = [_label(i) for i in items]
    if any(lab is None for lab in labels):
        return Result(0.0, ["expected labels (str) in the ordering"], kind="ordering")
    labels = [lab for lab in labels if lab]
    if not labels:
        return Result(0.0, ["no ordering given"], kind="ordering")
    pos: dict[str, int] = {}
    extras = 0
    lines: list[str] = []
    for lab in labels:
        if lab not in order:
            extras += 1
            lines.append(f"not an item here: {lab}")
        elif lab in pos:
            extras += 1
            lines.append(f"listed twice: {lab}")
        else:
            pos[lab] = len(pos)
    n = len(order)
    total = n * (n - 1) // 2
    conc = disc = 0
    for i in range(n):
        for j in range(i + 1, n):
            a, b = order[i], order[j]
            if a in pos and b in pos:
                if pos[a] < pos[b]:
                    conc += 1
                else:
                    disc += 1
    exact = labels == order
    score = 1.0 if exact else max(0.0, (conc - disc) / total) * n / (n + extras)
    missing = [o for o in order if o not in pos]
    if missing:
        lines.append(f"missing: {', '.join(missing)}")
    lines.insert(0, "exactly right" if exact else
                 f"{conc} of {total} pairs in the right order, {disc} reversed")
    if reveal and not exact:
        lines.append(f"the right order is {' > '.join(order)}")
    return Result(score, lines, kind="ordering",
                  details={"concordant": conc, "discordant": disc, "pairs": total})


# ------------------------------------------------------------------------ text answers
def gap(n: int, avoid: Iterable[str] = (), negations: bool = False) -> str:
    """Regex for up to ``n`` words between two parts of a pattern, within one clause.

    The gap never crosses a negation ("not", "no", "never", "without", "nor") unless
    ``negations=True``, nor a word in ``avoid``: ``rf"bf16 {gap(2)}needs {gap(2)}scaler"``
    matches "bf16 also needs a scaler" but not "bf16 needs no scaler".
    """
    stop = [*(() if negations else ("not", "no", "never", "without", "nor")), *avoid]
    guard = f"(?!(?:{'|'.join(map(re.escape, stop))}) )" if stop else ""
    return rf"(?:{guard}[^ ,.]+ ){{0,{int(n)}}}"


_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None)
_REWRITES: list[tuple[re.Pattern[str], str]] = [(re.compile(a), b) for a, b in [
    (r"[‘’ʼ`´]", "'"), (r"[\"“”«»]", " "),
    (r"\bcan't\b|\bcannot\b", "can not"), (r"\bwon't\b", "will not"), (r"n't\b", " not"),
    (r"\b(it|that|there|what|here|this|who|he|she)'s\b", r"\1 is"),
    (r"'re\b", " are"), (r"'ll\b", " will"), (r"'ve\b", " have"), (r"'m\b", " am"),
    (r"'d\b", " would"), (r"'s\b", ""), (r"(?<=s)'(?=\s|$)", ""),
    (r"\n\s*\n|\n\s*(?:[-*•·]|\d+[.)])\s+|^\s*(?:[-*•·]|\d+[.)])\s+", " . "),
    (r"\s+", " "),
    (r"\(\)", ""),                                        # zero_grad() -> zero_grad
    (r"->|=>|→|—|–|\s-{1,2}\s|--", " , "),
    (r"(?<=[a-z])-(?=[a-z])|(?<=\d)-(?=[a-z])|(?<![0-9]e)(?<=[a-z])-(?=\d)", " "),
    (r"\b(?:fp|float) ?16\b", "fp16"), (r"\bb(?:f|float) ?16\b", "bf16"),
    (r"\bbrain ?float(?: ?16)?\b", "bf16"), (r"\b(?:fp|float) ?32\b", "fp32"),
    (r"×", " x "), (r"√", " sqrt "), (r"≈", " ~"),
    (r"[.!?;…]+(?=\s|$)", " . "),
    (r"[,:()\[\]{}]", " , "),
    (r"(?<![a-z])'|'(?![a-z])", " "),
    (r"[^a-z0-9_.'^%/+*=<>~ ,-]", " "),
]]


def normalize(text: str) -> str:
    """The form rubric patterns are matched against (see the module docstring)."""
    s = unicodedata.normalize("NFKC", text).translate(_ZERO_WIDTH).lower()
    for pattern, repl in _REWRITES:
        s = pattern.sub(repl, s)
    return _tidy(s.split())


def _tidy(tokens: Iterable[str]) -> str:
    """Join tokens, merging runs of "," / "." tokens ("." wins) and trimming them at the ends."""
    out: list[str] = []
    for tok in tokens:
        if tok in (",", "."):
            if out and out[-1] in (",", "."):
                out[-1] = "." if "." in (tok, out[-1]) else ","
                continue
            if not out:
                continue
        out.append(tok)
    while out and out[-1] in (",", "."):
        out.pop()
    return " ".join(out)


_FUNCTION_WORDS = frozenset("""
a an the of to in on at by for with from into onto over under across during before after
than per as about between through without within via upon off out up down
i you we it they he she this that these those them its their my our your his her us me
which what who whom whose one ones
is are was were be been being am do does did doing have has had having can could will
would should shall may might must
and or but so because since if when while then not no nor also only just even still yet
more less much many very too there here each every all some any both either neither how
why where whether such same other another own
""".split())
_LIGHT_WORDS = frozenset("a an the of at in on per for to with".split())  # allowed in a bare term
_SIMPLE_NEG = frozenset("not no never without neither nor none nothing hardly barely".split())
_NEG_EXCEPT = frozenset("only just merely longer".split())   # "not only", "no longer"
_PHRASE_NEG = ("rather than", "instead of", "as opposed to", "contrary to", "unlike")
_DISTANCING = re.compile(
    r"^(myths?|mistakes?|mistaken(ly)?|misconceptions?|wrong(ly)?|false(ly)?|tempting|naive(ly)?|"
    r"misleading|incorrect(ly)?|erroneous(ly)?|fallacy|misunderstanding|untrue)$")
_BELIEF = re.compile(r"\b(?:people|some|many|others|beginners|students|one|you) (?:\S+ )?"
                     r"(?:think|thinks|believe|believes|assume|assumes|claim|claims|say|says|do|does|"
                     r"try|tries|might think)\b")
_CLAUSE_WORDS = frozenset("but however although though whereas while because since so yet unless".split())


def _clause_before(text: str, start: int) -> list[str]:
    words = text[:start].split()
    for i in range(len(words) - 1, -1, -1):
        if words[i] in (",", ".") or words[i] in _CLAUSE_WORDS:
            return words[i + 1:]
    return words


def _negation(text: str, start: int, end: int) -> str:
    """'negated', 'reported' or '' for the phrase at ``text[start:end]``.

    Negated: "not", "no", "never", "without", ... within 5 words before it, or "rather
    than", "instead of", "unlike" ... within 4, in the same clause. Reported: "a common
    mistake is ...", "people think ...", or "..., which is a myth / is wrong" up to 7
    words after it in the same sentence.
    """
    before = _clause_before(text, start)
    near = before[-5:]
    for i, w in enumerate(near):
        nxt = near[i + 1] if i + 1 < len(near) else text[start:].split(" ", 1)[0]
        if w in _SIMPLE_NEG and nxt not in _NEG_EXCEPT:
            return "negated"
    tail = " " + " ".join(before[-4:]) + " "
    if any(f" {p} " in tail for p in _PHRASE_NEG):
        return "negated"
    after = text[end:].split(" . ")[0].split()[:7]
    if ("if" in before[-4:] or any(_DISTANCING.match(w) for w in before[-7:] + after)
            or _BELIEF.search(" ".join(before[-7:]))
            or " not true" in " " + " ".join(after)):
        return "reported"
    return ""


def _compile(p: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(rf"(?<![a-z0-9_])(?:{p})(?![a-z0-9_])")
    except re.error as e:
        raise ValueError(f"{where}: pattern {p!r} does not compile: {e}") from None


@dataclass(frozen=True)
class Concept:
    """An idea a good answer contains: any one of ``patterns`` (regexes on normalised text,
    see :func:`normalize`) shows it. ``hint`` is the feedback when it is missing."""

    name: str
    patterns: tuple[str, ...]
    weight: float = 1.0
    hint: str = ""

    def __post_init__(self) -> None:
        if not self.patterns or self.weight <= 0:
            raise ValueError(f"concept {self.name!r} needs patterns and a positive weight")
        object.__setattr__(self, "_compiled", tuple(_compile(p, self.name) for p in self.patterns))


@dataclass(frozen=True)
class Misconception:
    """A wrong claim: matched (and not negated) it costs ``penalty`` and shows ``correction``."""

    name: str
    patterns: tuple[str, ...]
    penalty: float = 0.3
    correction: str = ""

    def __post_init__(self) -> None:
        if not self.patterns or not 0 < self.penalty <= 1:
            raise ValueError(f"misconception {self.name!r} needs patterns and a penalty in (0, 1]")
        object.__setattr__(self, "_compiled", tuple(_compile(p, self.name) for p in self.patterns))


@dataclass(frozen=True)
class Rubric:
    """A short-answer question with its concept rubric.

    ``full_credit_at``: the share of the total concept weight that earns full credit.
    ``topic``: patterns of on-topic words, used only to flag long on-topic answers that
    matched little of the rubric. ``model_answer`` and ``explanation`` are the self-study
    reveal; the model answer must itself score 1 (the tests check it).
    """

    id: str
    question: str
    concepts: tuple[Concept, ...]
    model_answer: str
    explanation: str
    misconceptions: tuple[Misconception, ...] = ()
    topic: tuple[str, ...] = ()
    max_words: int = 120
    full_credit_at: float = 0.8
    review_band: tuple[float, float] = (0.3, 0.7)

    def __post_init__(self) -> None:
        if not self.concepts:
            raise ValueError(f"rubric {self.id!r} has no concepts")
        if not 0 < self.full_credit_at <= 1:
            raise ValueError("full_credit_at must be in (0, 1]")
        object.__setattr__(self, "_topic", tuple(_compile(p, f"{self.id} topic") for p in self.topic))

    @property
    def total_weight(self) -> float:
        return sum(c.weight for c in self.concepts)

    def describe(self) -> str:
        """The rubric as readable text, for instructors."""
        lines = [f"{self.id}: {self.question}",
                 f"full credit at {self.full_credit_at:.0%} of weight {self.total_weight:g}; "
                 f"at most {self.max_words} words"]
        for c in self.concepts:
            lines.append(f"  + {c.weight:g}  {c.name}")
            lines += [f"        {p}" for p in c.patterns]
        for m in self.misconceptions:
            lines.append(f"  - {m.penalty:g}  {m.name}")
            lines += [f"        {p}" for p in m.patterns]
        return "\n".join(lines)


def rubric_ids() -> list[str]:
    """Ids of the rubrics in :mod:`memlab.grading.rubric_bank`."""
    from .rubric_bank import RUBRICS
    return sorted(RUBRICS)


def get_rubric(rubric: str | Rubric) -> Rubric:
    """A :class:`Rubric` given itself or its id in the rubric bank."""
    if isinstance(rubric, Rubric):
        return rubric
    from .rubric_bank import RUBRICS
    if type(rubric) is str and rubric in RUBRICS:
        return RUBRICS[rubric]
    raise ValueError(f"unknown rubric {rubric!r}; known: {sorted(RUBRICS)}")


_PLACEHOLDERS = {"your answer here", "your answer here.", "todo", "..."}


def _stem(word: str) -> str:
    w = word.replace("'", "")
    for suffix in ("ing", "ed", "es", "s", "e"):
        if len(w) > len(suffix) + 2 and w.endswith(suffix):
            return w[: -len(suffix)]
    return w


def _is_word(tok: str) -> bool:
    return any(ch.isalnum() for ch in tok)


def _copied_mask(tokens: list[str], question: str, n: int = 5) -> list[bool]:
    """True for answer word tokens inside a run of >= n words that also occurs in the question."""
    q = [_stem(t) for t in normalize(question).split() if _is_word(t)]
    idx = [i for i, t in enumerate(tokens) if _is_word(t)]
    stems = [_stem(tokens[i]) for i in idx]
    n = min(n, len(q))
    mask = [False] * len(tokens)
    if n < 3:
        return mask
    grams = {tuple(q[i:i + n]) for i in range(len(q) - n + 1)}
    for i in range(len(stems) - n + 1):
        if tuple(stems[i:i + n]) in grams:
            for k in idx[i:i + n]:
                mask[k] = True
    return mask


def _fragments(tokens: list[str]) -> list[list[int]]:
    frags: list[list[int]] = [[]]
    for i, t in enumerate(tokens):
        if _is_word(t):
            frags[-1].append(i)
        elif frags[-1]:
            frags.append([])
    return [f for f in frags if f]


def _stuffing(tokens: list[str]) -> tuple[list[bool], bool, list[str], list[str], dict[str, float]]:
    """Find keyword lists and repetition.

    Returns (excluded token mask, stuffed verdict, messages, review reasons, metrics).
    """
    words = [t for t in tokens if _is_word(t)]
    n = len(words)
    excluded = [False] * len(tokens)
    messages: list[str] = []
    review: list[str] = []
    fw = [w for w in words if w in _FUNCTION_WORDS]
    content = [w for w in words if w not in _FUNCTION_WORDS]
    frags = _fragments(tokens)
    metrics = {
        "words": n, "function_word_ratio": round(len(fw) / n, 3) if n else 0.0,
        "mean_fragment_words": round(n / len(frags), 2) if frags else 0.0,
    }

    def bare(f: list[int]) -> bool:
        fws = [tokens[i] for i in f if tokens[i] in _FUNCTION_WORDS]
        return len(f) <= 3 and (not fws or (len(fws) == 1 and fws[0] in _LIGHT_WORDS))

    # runs of 6+ short fragments (up to three words), 3/4 of them bare terms: "fp16, bf16,
    # checkpointing, recompute, ...". A term with a function word in it ("all gather",
    # "other processes", "not a leak") does not end the list.
    run: list[list[int]] = []
    for f in frags + [[]]:
        if f and len(f) <= 3:
            run.append(f)
            continue
        n_bare = sum(map(bare, run))
        if len(run) >= 6 and n_bare >= 0.75 * len(run):
            for g in run:
                for i in g:
                    excluded[i] = True
            messages.append(f"a list of {len(run)} bare terms earns no credit: explain in sentences")
        elif n_bare >= 4:
            review.append(f"a list of {n_bare} bare terms")
        run = []
    # long stretches without a single function word, also inside a longer fragment
    # ("model states do not fit replica data parallel shard optimizer gradients ...")
    for f in frags:
        n_fw = sum(tokens[i] in _FUNCTION_WORDS for i in f)
        if (len(f) >= 8 and n_fw == 0) or (len(f) >= 12 and n_fw / len(f) < 0.1):
            for i in f:
                excluded[i] = True
            messages.append(f"a run of {len(f)} words with no sentence structure earns no credit")
            continue
        stretch: list[int] = []
        for i in f + [-1]:
            if i >= 0 and tokens[i] not in _FUNCTION_WORDS:
                stretch.append(i)
                continue
            if len(stretch) >= 8:
                for k in stretch:
                    excluded[k] = True
                messages.append(f"a run of {len(stretch)} words with no sentence structure "
                                "earns no credit")
            elif len(stretch) >= 7:
                review.append("a long phrase without function words")
            stretch = []

    stuffed = False
    kept = sum(1 for i, t in enumerate(tokens) if _is_word(t) and not excluded[i])
    if n and kept < 0.4 * n:
        stuffed = True
    counts = Counter(content)
    if len(content) >= 10:
        top = counts.most_common(1)[0][1] / len(content)
        dup = 1 - len(counts) / len(content)
        tri = Counter(zip(words, words[1:], words[2:]))
        tri_rep = sum(c for c in tri.values() if c > 1) / max(1, len(words) - 2)
        metrics.update(top_term_share=round(top, 3), repeated_terms=round(dup, 3),
                       repeated_trigrams=round(tri_rep, 3))
        if top >= 0.3 or dup >= 0.6 or tri_rep >= 0.3:
            stuffed = True
            messages.append("the same terms are repeated: repetition earns no credit")
        elif len(content) >= 20 and (top >= 0.2 or dup >= 0.5 or tri_rep >= 0.15):
            review.append("repetitive wording")
    # "the X and the Y and the Z", "It is about X. It is about Y.": few kinds of function word
    kinds = len(set(fw))
    if (len(fw) >= 5 and kinds <= 2) or (len(fw) >= 8 and kinds / len(fw) < 0.3):
        stuffed = True
        messages.append("terms strung together with the same few words are a keyword list, "
                        "not an explanation")
    elif len(fw) >= 8 and kinds / len(fw) < 0.4:
        review.append("the same few connecting words repeat")
    if n >= 10 and len(fw) / n < 0.05:
        stuffed = True
        messages.append(f"only {len(fw)} function words in {n}: a keyword list, not an explanation")
    if not stuffed and n >= 10 and len(fw) / n < 0.15:
        review.append(f"few function words ({len(fw)}/{n}): terse notes or a keyword list")
    if stuffed and not messages:
        messages.append("the answer is mostly a keyword list: explain in sentences")
    return excluded, stuffed, messages, review, metrics


def _match(compiled: Iterable[re.Pattern[str]], text: str, negatable: bool) -> tuple[str, str]:
    """(evidence, '') for the first match that stands; ('', 'negated'/'reported') when every
    match was negated or reported (only checked when ``negatable``)."""
    skipped = ""
    for rx in compiled:
        for m in rx.finditer(text):
            why = _negation(text, m.start(), m.end()) if negatable else ""
            if not why:
                return m.group(0), ""
            skipped = skipped or why
    return "", skipped


def grade_text(answer: object, rubric: str | Rubric) -> Result:
    """Grade a short free-text answer with a concept rubric (an id from the bank or a
    :class:`Rubric`). See the module docstring for the method and its limits."""
    rb = get_rubric(rubric)
    text = _as_text(answer)
    if text is None:
        return Result(0.0, [f"expected the answer as text (a str), got {_type_name(answer)}"],
                      kind="text")
    raw = text.strip()
    if not raw or raw.lower() in _PLACEHOLDERS:
        return Result(0.0, ["no answer given"], kind="text")
    # words as a learner counts them (separated by spaces); the character cap stops a long
    # answer written without spaces from slipping through
    n_words = len(raw.split())
    if n_words > rb.max_words or len(raw) > 10 * rb.max_words:
        size = (f"{n_words} words" if n_words > rb.max_words else f"{len(raw)} characters")
        return Result(0.0, [f"the answer has {size}, over the limit of {rb.max_words} words: "
                            "shorten it to the key points"], kind="text",
                      details={"words": n_words, "characters": len(raw)})

    tokens = normalize(raw).split()
    if not any(map(_is_word, tokens)):
        return Result(0.0, ["no answer given"], kind="text")
    copied = _copied_mask(tokens, rb.question)
    excluded, stuffed, stuff_msgs, reasons, metrics = _stuffing(tokens)
    copied_share = sum(copied) / sum(map(_is_word, tokens))
    metrics["copied_share"] = round(copied_share, 3)
    lines: list[str] = []
    if copied_share >= 0.5:
        lines.append("most of the answer repeats the question: the repeated words earn no credit")
    elif copied_share > 0:
        lines.append("words copied from the question earn no credit")
    if 0.3 <= copied_share < 0.6:
        reasons.append(f"{copied_share:.0%} of the words repeat the question")
    if stuffed:
        return _flagged(0.0, stuff_msgs + lines + ["no credit for this answer"], reasons,
                        kind="text", missing=tuple(c.name for c in rb.concepts), details=metrics)
    lines += stuff_msgs
    graded = _tidy("," if (copied[i] or excluded[i]) else t for i, t in enumerate(tokens))

    found, missing = [], []
    got = 0.0
    for c in rb.concepts:
        evidence, _ = _match(c._compiled, graded, negatable=False)  # type: ignore[attr-defined]
        if evidence:
            found.append(c.name)
            got += c.weight
            lines.append(f"found: {c.name} (\"{evidence}\")")
        else:
            missing.append(c.name)
            lines.append(f"missing: {c.name}" + (f" - {c.hint}" if c.hint else ""))
    concept_score = min(1.0, got / (rb.total_weight * rb.full_credit_at))
    penalty = 0.0
    wrong = []
    for mc in rb.misconceptions:
        evidence, skipped = _match(mc._compiled, graded, negatable=True)  # type: ignore[attr-defined]
        if evidence:
            wrong.append(mc.name)
            penalty += mc.penalty
            lines.append(f"misconception: {mc.name} (\"{evidence}\", -{mc.penalty:g})"
                         + (f": {mc.correction}" if mc.correction else ""))
        elif skipped == "reported":
            reasons.append(f"misconception phrase '{mc.name}' ignored as reported, not claimed")
    score = max(0.0, concept_score - penalty)

    lo, hi = rb.review_band
    if wrong and concept_score >= 0.6:
        reasons.append("a misconception next to strong concepts")
    if lo < score < hi:
        reasons.append(f"score {score:.2f} is in the review band {lo:g}-{hi:g}")
    if not found and not wrong:
        lines.insert(0, "none of the expected ideas were found: does this answer the question?")
    if score <= lo and not wrong and n_words >= 20:
        on_topic = sum(bool(rx.search(graded)) for rx in rb._topic)  # type: ignore[attr-defined]
        if on_topic >= 3:
            reasons.append("a long on-topic answer that matched little of the rubric")
    metrics.update(concept_score=round(concept_score, 3), penalty=penalty)
    return _flagged(score, lines, reasons, kind="text", found=tuple(found),
                    missing=tuple(missing), misconceptions=tuple(wrong), details=metrics)
