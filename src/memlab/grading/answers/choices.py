"""Choice and ordering answers.

Used by: :func:`memlab.grading.answers.grade.grade_choice` and :func:`memlab.grading.answers.grade.grade_ordering` (the
quizzes of the notebooks and of :mod:`memlab.grading.interview.bank`).
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping, Sequence

from .result import Result, _as_items, _as_text, _type_name

__all__ = ["grade_choice", "grade_ordering"]


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
    right picks / number of right options - wrong picks / number of wrong options (without
    ``options``: / number of right options), clipped at 0, so ticking every box earns nothing
    however many options are right; with five options or more, ticking all of them but one
    scores 0 too (unless the key itself is all but one). ``answer`` may be a label, a
    list/set of labels, or a string such as
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
    wrong = [c for c in chosen if c not in right]   # a label that is no option is wrong too
    # each wrong pick costs a share of the wrong options, as each right pick earns a share of
    # the right ones: ticking every box (and more) scores 0 whatever the two counts
    n_wrong = max(len(known - right), len(wrong), 1) if options is not None else len(right)
    score = max(0.0, len(hits) / len(right) - len(wrong) / n_wrong)
    lines.insert(0, f"{len(hits)} of {len(right)} right options chosen, {len(wrong)} wrong "
                    f"(score = right / {len(right)} - wrong / {n_wrong})")
    if len(known) >= 5 and len(set(chosen) & known) >= len(known) - 1 > len(right):
        # every option, or all but one: a hedge, not an answer (the option left out says
        # nothing about the others)
        score = 0.0
        lines.insert(1, "nearly every option ticked: that is no answer, it scores 0")
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
