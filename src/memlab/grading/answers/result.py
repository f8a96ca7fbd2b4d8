"""Grading results and the reading of untrusted learner input, shared by every grader.

Used by: :mod:`memlab.grading.answers.grade` (the public graders) and its parts
(:mod:`.quantities`, :mod:`.choices`, :mod:`.concepts`). A :class:`Result` is what every
grader returns; the ``_as_*`` readers copy a learner's value through the base type's own
slots, so no method a learner overrode ever runs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Result", "REVIEW_HEAD"]

# the first words of a report the grader is unsure of (the review list and the class scan read it)
REVIEW_HEAD = "[needs review]"


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
            head = f"{REVIEW_HEAD} {head}: {self.review_reason}"
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
