"""Assignment 07 "Interview prep", part 1 of 3: the question bank and the grading of answers.

The questions (:class:`Question`, :data:`QUESTIONS`, :data:`TOPICS`), how an answer is read
(:func:`answer_of`) and graded (:func:`grade`), and the self-study *practice variants*
(:class:`Practice`, :data:`PRACTICE`, :func:`practice`, the ``_p_*`` generators), all
graded by the private copy of the grading engine this module loads when it is imported.

Used by: :mod:`memlab.grading.interview` (the facade notebooks call as ``ml.interview``;
every test cell of notebooks/07_interview_prep calls :func:`answer_of` and :func:`grade`
through it), :mod:`memlab.grading.interview.panel` (the self-study widgets grade practice
attempts here) and :mod:`memlab.autograde.review` (the review reads the
:data:`REVIEW_MARKER` lines :func:`grade` prints). This module imports neither of them:
the bank is the bottom of the three (tests/test_layers.py checks it).

A graded question is a variable the learner sets (``answer_q1 = "12 GB"``) and a test cell::

    '''Q1 (2 points): ...'''
    _answer = ml.interview.answer_of("q1", globals())   # NotImplementedError if unset,
    ### BEGIN HIDDEN TESTS                              # AssertionError if unreadable
    _result = ml.interview.grade("q1", _answer, 12.5)   # the key lives only here
    _result.points(2)                                   # partial credit for nbgrader
    ### END HIDDEN TESTS

Text questions need no key (their rubric is public), so their whole test cell is visible.
:func:`grade` prints the feedback to stdout (never stderr) and, when the grader is unsure
(``Result.needs_review``), a line ``NEEDS MANUAL REVIEW: q8 ...`` that nbgrader keeps in
the autograded notebook; :func:`memlab.autograde.review.find_reviews` lists those
lines for the instructor.

What a learner can see, and the trade-offs
------------------------------------------
* Keys of numeric, choice and ordering questions exist only in hidden test blocks of
  solutions/07_interview_prep (nbgrader removes them from the release and
  ``ClearHiddenTests`` from the feedback). No interview module holds them, and the feedback
  :func:`grade` prints for them never states the key: a numeric answer hears its band and
  direction ("within 20%, too high"), a choice answer how many picks were right.
  solutions/ must stay out of learners' hands for this to mean anything.
* Self-study therefore never checks a graded numeric/choice/ordering answer. It offers a
  *practice variant* of the same skill (other sizes, another angle), whose key and worked
  solution are in this file (:data:`PRACTICE`); a learner who reads the source sees only
  practice keys. tests/grading/test_interview.py checks that no practice key grades a graded
  solution as correct.
* Text questions are graded by public rubrics (:mod:`memlab.grading.answers.bank`): their model
  answers and explanations are readable in the package by anyone, and the self-study panel
  shows them after an attempt. That is deliberate (the point is to learn the argument);
  the price is that a learner can paste the model answer, so :func:`grade` flags answers
  that share much of a model answer's wording for manual review (the instructor decides).
* Test cells run in the learner's kernel, so learner code could replace what they call.
  :func:`grade` uses private copies of :mod:`memlab.grading.answers.grade`, the modules it is made
  of and :mod:`memlab.grading.answers.bank` (``_PRIVATE``, :func:`_load_engine`), executed
  from the package files when this module is imported (before any learner code in 07: the
  set-up cell imports ``ml.interview``, which imports this module first), so patching
  ``ml.rubric`` does not change a grade; answers are read through the base types
  (subclasses with a rigged ``__eq__`` score 0), and the instructor's review
  (:mod:`memlab.autograde.review`) re-grades every interview answer *outside* the
  kernel.
"""
from __future__ import annotations

import dataclasses

import importlib
import math
import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from memlab.measure import formulas

__all__ = [
    "Question", "QUESTIONS", "TOPICS", "Practice", "PRACTICE", "REVIEW_MARKER",
    "COPY_SHARE", "FULL_TOL", "PARTIAL_TOL", "answer_of", "grade", "copied_share", "practice",
]

REVIEW_MARKER = "NEEDS MANUAL REVIEW:"
COPY_SHARE = 0.4        # share of a model answer's 4-word phrases that triggers a review
FULL_TOL, PARTIAL_TOL = 0.05, 0.20

TOPICS = {
    "consumers": "Consumers and bytes per parameter",
    "activations": "Activations vs batch and depth",
    "checkpointing": "Checkpointing: cost and placement",
    "precision": "fp16 vs bf16, loss scaling and master weights",
    "accumulation": "Gradient accumulation: equivalence and pitfalls",
    "oom": "OOM triage",
    "debugging": "Debugging: the out-of-memory message and leaks",
    "allocator": "Allocated vs reserved",
    "sharding": "Sharding and model parallelism: memory, traffic, when and why",
    "levers": "More levers: fused attention, LoRA and the step inside backward",
    "serving": "Serving: the KV cache, grouped-query attention and decoding speed",
}


# ------------------------------------------------------------------------- questions
@dataclass(frozen=True)
class Question:
    """A graded question of notebook 07, without its key.

    ``kind``: "numeric" (``unit`` names the unit the key is in), "choice" (one label),
    "multi" (several labels), "ordering" (all labels in order) or "text" (``rubric`` id).
    ``options`` are the labels (the texts are in the notebook).
    """

    id: str
    topic: str
    kind: str
    title: str
    points: float
    unit: str = ""
    options: tuple[str, ...] = ()
    rubric: str = ""
    # the rubric's concepts this question asks for by name: one left out caps the score
    # (memlab.grading.answers.grade.grade_text's ``require``)
    require: tuple[str, ...] = ()

    @property
    def variable(self) -> str:
        return f"answer_{self.id}"


def _q(id, topic, kind, title, unit="", options="", rubric="", require=()):
    points = {"numeric": 2, "choice": 1, "multi": 2, "ordering": 2, "text": 3}[kind]
    return Question(id, topic, kind, title, points, unit, tuple(options), rubric, tuple(require))


QUESTIONS: dict[str, Question] = {q.id: q for q in (
    _q("q1", "consumers", "numeric", "model states of fp32 Adam training", unit="GB"),
    _q("q2", "consumers", "numeric", "model states of mixed-precision Adam", unit="GiB"),
    _q("q3", "consumers", "choice", "does mixed precision halve the model states?", options="abcd"),
    _q("q4", "consumers", "multi", "what grows with the batch size?", options="abcdef"),
    _q("q5", "activations", "numeric", "activations of one transformer layer", unit="MiB"),
    _q("q6", "activations", "numeric", "double the batch and the depth", unit="x"),
    _q("q7", "activations", "choice", "double the sequence length", options="abcd"),
    _q("q8", "activations", "text", "why activations decide the batch", rubric="activations_scaling",
       require=("activation memory grows linearly with batch size",
                "activation memory grows linearly with depth (number of layers)",
                "parameters, gradients and optimizer state do not depend on the batch")),
    _q("q9", "checkpointing", "text", "why checkpointing costs time", rubric="checkpointing_cost",
       require=("the dropped activations are recomputed", "it costs extra compute / time")),
    _q("q10", "checkpointing", "numeric", "peak with sqrt(n) segments", unit="GiB"),
    _q("q11", "checkpointing", "numeric", "step time with full recomputation", unit="ms"),
    _q("q12", "checkpointing", "choice", "one checkpoint around the whole model", options="abcd"),
    _q("q13", "precision", "text", "why fp16 needs loss scaling", rubric="fp16_loss_scaling",
       require=("small gradients underflow to zero",
                "bf16 has fp32's exponent range (8 exponent bits)")),
    _q("q14", "precision", "choice", "the bits of bf16", options="abcd"),
    _q("q15", "precision", "numeric", "the loss scale that rescues a tiny gradient", unit=""),
    _q("q16", "precision", "multi", "true statements about AMP", options="abcde"),
    _q("q17", "accumulation", "text", "when accumulation equals the full batch",
       rubric="accumulation_equivalence",
       require=("the gradient is linear: the gradient of a sum/mean is the sum/mean of gradients",)),
    _q("q18", "accumulation", "numeric", "accumulation steps for an effective batch", unit=""),
    _q("q19", "accumulation", "choice", "zero_grad inside the micro-batch loop", options="abcd"),
    _q("q20", "accumulation", "numeric", "token weights in a mean of means", unit="x"),
    _q("q21", "oom", "text", "what to try before a smaller batch", rubric="oom_before_batch",
       require=("mixed precision (fp16/bf16)", "gradient checkpointing", "gradient accumulation")),
    _q("q22", "oom", "ordering", "the OOM triage order", options="abcde"),
    _q("q23", "allocator", "choice", "allocated, reserved and nvidia-smi", options="abcd"),
    _q("q24", "allocator", "numeric", "the bytes of a tiny CUDA tensor", unit="B"),
    _q("q25", "allocator", "text", "why nvidia-smi shows more", rubric="allocated_vs_reserved",
       require=("the caching allocator keeps freed blocks for reuse",
                "not a leak: cached memory is reused; a leak shows as allocated growing")),
    _q("q26", "sharding", "numeric", "ZeRO-2 memory per GPU", unit="GB"),
    _q("q27", "sharding", "choice", "data parallelism and memory per GPU", options="abcd"),
    _q("q28", "sharding", "text", "when and why to shard", rubric="sharding_when_why",
       require=("when the model states do not fit on one GPU",
                "ZeRO/FSDP partition optimizer state, gradients and parameters (about 1/N each)",
                "tensor/pipeline parallelism when a single layer or its activations do not fit")),
    _q("q29", "levers", "choice", "eager attention vs scaled_dot_product_attention", options="abcd"),
    _q("q30", "levers", "multi", "the optimizer step inside backward", options="abcdef"),
    _q("q31", "serving", "numeric", "the KV cache of a multi-head model", unit="GiB"),
    _q("q32", "serving", "numeric", "the KV cache with grouped-query attention", unit="GiB"),
    _q("q33", "serving", "text", "what a KV cache buys and costs", rubric="kv_cache_tradeoff",
       require=("each step computes only the new token instead of recomputing the prefix",
                "its memory grows linearly with every token and every sequence",
                "GQA: query heads share fewer key/value heads, the cache shrinks by heads/kv_heads")),
    # issue #35: what 10, 08, 06, 03 and 09 teach beyond the questions above
    _q("q34", "debugging", "choice", "read a CUDA out-of-memory message", options="abcd"),
    _q("q35", "debugging", "choice", "the line of a training loop that leaks", options="abcd"),
    _q("q36", "levers", "numeric", "base weights and adapter states of a QLoRA fine-tune",
       unit="GB"),
    _q("q37", "sharding", "numeric", "per-GPU memory of a sharded job: model states + activations",
       unit="GB"),
    _q("q38", "precision", "choice", "why mixed precision keeps fp32 master weights",
       options="abcd"),
    _q("q39", "sharding", "multi", "traffic of ZeRO-3 and tensor parallelism against DDP",
       options="abcdef"),
    _q("q40", "serving", "choice", "what bounds a decode step", options="abcd"),
)}

_EXAMPLE = {"numeric": '"12 GB"', "choice": '"b"', "multi": '["a", "c"]',
            "ordering": '"b > a > c"', "text": '"""Your explanation in a few sentences."""'}
_UNIT_EXAMPLE = {"GB": '"12.5 GB"', "GiB": '"11.6 GiB"', "MiB": '"640 MiB"', "ms": '"250 ms"',
                 "B": '"1024 B"', "x": '"1.5x"', "": "1024"}


def _example(q: "Question") -> str:
    """A format example for ``q``, in the unit it asks for (never "12 GB" for a GiB question)."""
    if q.kind == "numeric":
        return _UNIT_EXAMPLE.get(q.unit, _EXAMPLE["numeric"])
    return _EXAMPLE[q.kind]


def _question(qid: object) -> Question:
    if type(qid) is not str or qid not in QUESTIONS:
        raise ValueError(f"unknown question {qid!r}; known: {', '.join(QUESTIONS)}")
    return QUESTIONS[qid]


_PRIVATE = "memlab._interview_engine"


def _load_engine() -> tuple[Any, Any]:
    """Private copies of the grading engine (memlab/grading/answers/grade.py and the modules it is
    made of: result, quantities, choices, spelling, concepts, bank), executed from
    the package files as submodules of a private package, so ``ml.rubric.grade_text = ...``
    or a patched ``memlab.grading.answers.concepts`` in a learner's kernel does not reach them
    (and the public modules, and their classes, are left alone)."""
    import types

    here = Path(__file__).resolve().parents[1] / "answers"
    package = types.ModuleType(_PRIVATE)
    package.__path__ = [str(here)]          # its submodules are read from answers/'s files
    package.__package__ = _PRIVATE
    sys.modules[_PRIVATE] = package         # dataclasses look their module up while it runs
    rubric = importlib.import_module(f"{_PRIVATE}.grade")
    return rubric, sys.modules[f"{_PRIVATE}.bank"]


# Loaded when this module is imported: in 07, by the set-up cell, before any learner code.
_ENGINE = _load_engine()


def _engine():
    """The private grading engine (:mod:`memlab.grading.answers.grade` as loaded from its file)."""
    return _ENGINE[0]


def _rubric(rubric_id: str):
    """A rubric of the private bank, by id."""
    bank = _ENGINE[1].RUBRICS
    if rubric_id not in bank:
        raise ValueError(f"unknown rubric {rubric_id!r}; known: {sorted(bank)}")
    return bank[rubric_id]


# ----------------------------------------------------------------- reading an answer
def _text(x: object) -> str | None:
    return str.__str__(x) if isinstance(x, str) else None


def _label(x: object) -> str | None:
    t = _text(x)
    return None if t is None else t.strip().strip("()[].").strip().lower()


def _label_list(answer: object, ordered: bool) -> list[str] | None:
    """Labels from a list/tuple (or set, unordered) of str, or a string "a, c" / "a > b"."""
    bases = (list, tuple) if ordered else (list, tuple, set, frozenset)
    for base in bases:
        if isinstance(answer, base):
            items = list(base.__iter__(answer))  # type: ignore[attr-defined]
            labels = [_label(i) for i in items]
            return None if any(lab is None for lab in labels) else [lab for lab in labels if lab]
    text = _text(answer)
    if text is None:
        return None
    sep = r"\s*(?:->|→|=>|>|,|;|\band\b|\bthen\b)\s*" if ordered else r"\s*(?:,|;|/|\+|&|\band\b)\s*"
    parts = [p for p in re.split(sep, text.strip()) if p.strip()]
    if len(parts) == 1:
        parts = parts[0].split()
    return [lab for lab in (_label(p) for p in parts) if lab]


def _format_problem(q: Question, answer: object) -> tuple[str, str]:
    """(problem, summary): what makes ``answer`` unreadable (or ""), and how it reads."""
    if q.kind == "numeric":
        value, message = _engine().parse_quantity(answer, q.unit)
        if value is None:
            return (f"{message}; write a number with its unit, e.g. "
                    f"{q.variable} = {_example(q)}"), ""
        shown = f"{value:.4g} {q.unit}".strip()
        note = "" if _text(answer) is not None else f" (a plain number is read in {q.unit or 'units'})"
        return "", f"reads as {shown}{note}"
    if q.kind == "text":
        text = _text(answer)
        if text is None:
            return f"expected a string, got {type(answer).__name__}", ""
        if not text.strip():
            return "the answer is empty", ""
        return "", f"has {len(text.split())} words"
    labels = _label_list(answer, ordered=q.kind == "ordering")
    if labels is None:
        want = {"choice": "one option label", "multi": "a list of option labels",
                "ordering": "a list of all labels in order"}[q.kind]
        return f"expected {want} as str, e.g. {q.variable} = {_example(q)}", ""
    unknown = [lab for lab in labels if lab not in q.options]
    if unknown:
        return f"not an option: {', '.join(unknown)} (options: {', '.join(q.options)})", ""
    if not labels:
        return "no option given", ""
    if q.kind == "choice":
        if len(set(labels)) != 1:
            return f"choose exactly one option, got {', '.join(labels)}", ""
        return "", f"is option {labels[0]}"
    if q.kind == "multi":
        return "", f"picks {', '.join(dict.fromkeys(labels))}"
    if sorted(labels) != sorted(q.options):
        return (f"list every option exactly once ({', '.join(q.options)}), "
                f"got {', '.join(labels)}"), ""
    return "", f"orders {' > '.join(labels)}"


def answer_of(qid: str, namespace: Mapping[str, Any]) -> Any:
    """The learner's ``answer_<qid>`` from ``namespace`` (pass ``globals()``), checked for form.

    Raises NotImplementedError when it is not set (the blank release) and AssertionError
    with what to fix when it can not be read (which would score 0 anyway). Prints how the
    answer reads. Used by every test cell of 07.
    """
    q = _question(qid)
    if q.variable not in namespace:
        raise NotImplementedError(
            f"{q.variable} is not set: in the answer cell of {qid.upper()}, replace "
            f"`raise NotImplementedError()` with {q.variable} = {_example(q)}")
    answer = namespace[q.variable]
    problem, summary = _format_problem(q, answer)
    if problem:
        raise AssertionError(f"{q.variable}: {problem}")
    where = ("the autograder compares it with the key" if q.kind != "text"
             else f"graded by the rubric \"{q.rubric}\"")
    print(f"{q.variable} {summary}; {where}.")
    return answer


# --------------------------------------------------------------------------- grading
def _phrases(text: str, n: int = 4) -> set[tuple[str, ...]]:
    words = [w for w in re.findall(r"[a-z0-9]+", text.lower())]
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def copied_share(answer: str, model_answer: str) -> float:
    """Share of the model answer's 4-word phrases that also occur in ``answer``."""
    model = _phrases(model_answer)
    return len(model & _phrases(answer)) / len(model) if model else 0.0


def _numeric_lines(result, unit: str) -> list[str]:
    """The numeric feedback without the key: band and direction only."""
    d = result.details
    if "value" not in d:
        return [line for line in result.feedback if not line.startswith("expected")]
    value, expected = d["value"], d["expected"]
    direction = "too high" if value > expected else "too low" if value < expected else ""
    shown = f"{value:.4g} {unit}".strip()
    read = re.search(r" \(read from ([^)]*)\)", result.feedback[0]) if result.feedback else None
    if read and read.group(1).replace(" ", "").lower() != shown.replace(" ", "").lower():
        shown += read.group(0)
    if result.score >= 1.0:
        band = f"within {FULL_TOL:.0%} of the key: full credit"
    elif result.score > 0:
        band = f"within {PARTIAL_TOL:.0%} but not {FULL_TOL:.0%} of the key ({direction}): half credit"
    else:
        band = f"more than {PARTIAL_TOL:.0%} off the key ({direction}): no credit"
    return [f"you gave {shown}: {band}"] + result.feedback[1:]


MISTAKE_TOL = 0.02   # a numeric answer within 2% of a known mistake's value is that mistake


def grade(qid: str, answer: object, key: object = None,
          mistakes: Mapping[Any, str] | None = None):
    """Grade ``answer`` to question ``qid`` and print the feedback; returns a
    :class:`memlab.grading.answers.grade.Result` (end the test cell with ``result.points(N)``).

    ``key``: the number (in the question's unit), the label, the labels or the order;
    ``None`` for text questions. ``mistakes``: the known wrong answers of a numeric or
    single-choice question and what each one got wrong ({15.6: "Adam's state counted as one
    value per parameter"}, {"a": "..."}); an answer that is one of them (a number within
    ``MISTAKE_TOL``) is told which mistake it is. Like the key, they belong in the hidden test
    cell: a list of wrong answers and their causes points at the right one. Nothing is written
    to stderr. When the grade is uncertain, prints ``NEEDS MANUAL REVIEW: <qid> ...`` (see
    :func:`find_reviews`).
    """
    q = _question(qid)
    rb = _engine()
    if q.kind == "text":
        if key is not None:
            raise ValueError(f"{qid} is graded by its rubric: pass no key")
        result = rb.grade_text(answer, _rubric(q.rubric), require=q.require)
        lines = list(result.feedback)
        text = _text(answer)
        model = _rubric(q.rubric).model_answer
        share = copied_share(text, model) if text else 0.0
        if share >= COPY_SHARE and result.score > 0:
            result.needs_review = True
            reason = f"{share:.0%} of the published model answer's phrases are copied"
            result.review_reason = "; ".join(r for r in (result.review_reason, reason) if r)
            lines.append("much of this answer repeats the published model answer: an "
                         "instructor will read it (write it in your own words)")
    else:
        if key is None:
            raise ValueError(f"{qid} needs its key")
        if q.kind in ("multi", "ordering") and isinstance(key, str):
            key = _label_list(key, ordered=q.kind == "ordering")
        if q.kind == "numeric":
            result = rb.grade_numeric(answer, key, q.unit)
            lines = _numeric_lines(result, q.unit)
        elif q.kind == "ordering":
            result = rb.grade_ordering(answer, list(key), reveal=False)  # type: ignore[arg-type]
            lines = list(result.feedback)
        else:
            correct = key if q.kind == "choice" else list(key)  # type: ignore[arg-type]
            result = rb.grade_choice(answer, correct, options=q.options, reveal=False,
                                     multiple=q.kind == "multi")
            lines = list(result.feedback)
    if mistakes and result.score < 1.0:
        lines += _mistake_lines(q, result, answer, mistakes)
    points = result.points(q.points)
    print(f"{qid.upper()} ({q.kind}): {points:g} of {q.points:g} points")
    for line in lines:
        print(f"- {line}")
    if result.needs_review:
        print(f"{REVIEW_MARKER} {qid} ({points:g} of {q.points:g} points): {result.review_reason}")
    return result


def _mistake_lines(q: Question, result, answer: object, mistakes: Mapping[Any, str]) -> list[str]:
    """The line naming the known mistake ``answer`` is, if it is one."""
    if q.kind == "numeric":
        value = result.details.get("value")
        if value is None:
            return []
        for wrong, why in mistakes.items():
            if abs(value - wrong) <= MISTAKE_TOL * abs(wrong):
                return [f"a known mistake: {why}"]
        return []
    if q.kind == "choice":
        label = _label(answer)
        why = mistakes.get(label) if label is not None else None
        return [f"a known mistake: {why}"] if why else []
    return []


# -------------------------------------------------------------------------- practice
@dataclass(frozen=True)
class Practice:
    """A self-study variant: its own prompt, key and worked solution (not secret)."""

    qid: str
    kind: str
    prompt: str
    key: Any
    worked: str
    unit: str = ""
    options: Mapping[str, str] = field(default_factory=dict)

    def check(self, answer: object, *, reveal: bool = True):
        """Grade an attempt. ``reveal=False`` keeps the key out of the feedback of a wrong
        attempt (the self-study panel offers a hint first and the key on request); a numeric
        answer then reads as "N% too high/low"."""
        rb = _engine()
        if self.kind == "numeric":
            result = rb.grade_numeric(answer, self.key, self.unit)
            if reveal or result.score >= 1.0:
                return result
            value, _ = rb.parse_quantity(answer, self.unit)
            lines = [line for line in result.feedback if not line.startswith("expected")]
            if value is not None and self.key:
                off = value / self.key - 1.0
                lines.insert(0, f"{abs(off):.0%} too {'high' if off > 0 else 'low'} (full credit "
                                "within 5%, partial within 20%)")
            return dataclasses.replace(result, feedback=lines)
        if self.kind == "ordering":
            return rb.grade_ordering(answer, list(self.key), reveal=reveal)
        if self.kind == "text":
            return rb.grade_text(answer, _rubric(self.key))
        correct = self.key if self.kind == "choice" else list(self.key)
        return rb.grade_choice(answer, correct, options=list(self.options),
                               multiple=self.kind == "multi", reveal=reveal)

    @property
    def hint(self) -> str:
        """The first step of the worked solution, without its result: the method, not the key."""
        if self.kind == "text":
            return ("the ideas listed as missing above are the hints: add them in your own words "
                    "and check again")
        worked = self.worked.strip()
        if self.kind == "numeric" and "=" in worked:
            return "work it out as: " + worked[:worked.rindex("=")].strip().rstrip(";,") + " = ?"
        return "think about: " + re.split(r"(?<=[.:;])\s", worked, maxsplit=1)[0]


def _pick(rng: random.Random, items: Sequence[Any]) -> Any:
    return items[rng.randrange(len(items))]


def _p_model_states(rng):
    n = _pick(rng, [0.35, 0.77, 4.0, 6.7])
    name, b = _pick(rng, [("Adam", 16), ("SGD with momentum", 12), ("plain SGD", 8)])
    extra = {16: "Adam's two moments 8", 12: "momentum 4", 8: "no optimizer state"}[b]
    return Practice("q1", "numeric",
                    f"A {n}-billion-parameter model trains in plain fp32 with {name}. Estimate "
                    f"parameters + gradients + optimizer state in GB (10^9 bytes).",
                    round(n * b, 3), f"{b} bytes/param (weights 4 + gradients 4 + {extra}) x "
                    f"{n}e9 = {n * b:.4g} GB.", unit="GB")


def _p_zero_states(rng):
    n = _pick(rng, [1.5, 3.0, 13.0, 70.0])
    gib = n * 1e9 * formulas.bytes_per_param("zero") / 2**30
    return Practice("q2", "numeric",
                    f"A {n:g}B-parameter model trains with mixed-precision Adam (ZeRO convention: "
                    f"fp16 weights and gradients, fp32 master weights, momentum and variance). "
                    f"Model states in GiB (2^30 bytes)?", round(gib, 2),
                    f"2 + 2 + 4 + 4 + 4 = 16 bytes/param; {n:g}e9 x 16 = {n * 16:g} GB = "
                    f"{gib:.4g} GiB (divide by 1.074).", unit="GiB")


def _p_layer_acts(rng):
    s, b, (h, a) = (_pick(rng, [512, 1024]), _pick(rng, [2, 8, 16]),
                    _pick(rng, [(768, 12), (1280, 20), (4096, 32)]))
    sbh = s * b * h
    total = formulas.korthikanti_layer_bytes(s, b, h, a) / 2**20
    return Practice("q5", "numeric",
                    f"One transformer layer, 16-bit activations, eager attention: s = {s}, "
                    f"b = {b}, h = {h}, a = {a}. Activation bytes per layer (Korthikanti et al. "
                    f"2022: sbh(34 + 5as/h)), in MiB?", round(total, 1),
                    f"sbh = {sbh / 2**20:g} MiB; 5as/h = {5 * a * s / h:g}; "
                    f"{sbh / 2**20:g} x {34 + 5 * a * s / h:g} = {total:.4g} MiB.", unit="MiB")


def _p_scale_factor(rng):
    x, y = _pick(rng, [(3, 1), (4, 2), (2, 3), (1.5, 2)])
    return Practice("q6", "numeric",
                    f"You multiply the micro-batch by {x:g} and the number of layers by {y:g} "
                    f"(same layer size and sequence length). By what factor does activation "
                    f"memory grow? (e.g. \"3x\")", x * y,
                    f"Linear in both: {x:g} x {y:g} = {x * y:g}x.", unit="x")


def _p_sqrt_segments(rng):
    n, m = _pick(rng, [16, 36, 100, 144]), _pick(rng, [32, 48, 200])
    k = math.isqrt(n)
    return Practice("q10", "numeric",
                    f"{n} identical layers, each saving {m} MiB of activations. With k segments "
                    f"the peak is about (n/k + k) layers' worth (Chen et al. 2016). With the best "
                    f"k, the peak in MiB?", float(2 * k * m),
                    f"k = sqrt({n}) = {k}; ({n}/{k} + {k}) x {m} MiB = {2 * k * m} MiB, instead "
                    f"of {n * m} MiB.", unit="MiB")


def _p_recompute_time(rng):
    f, r = _pick(rng, [40, 60, 150]), _pick(rng, [2, 3])
    return Practice("q11", "numeric",
                    f"A step takes {f + r * f} ms: forward {f} ms, backward {r * f} ms. With full "
                    f"recomputation (every block checkpointed), estimate the step time in ms.",
                    float(2 * f + r * f),
                    f"One extra forward: {f} + {r * f} + {f} = {2 * f + r * f} ms "
                    f"(+{f / (f + r * f):.0%}).", unit="ms")


def _p_loss_scale(rng):
    g = _pick(rng, [1e-7, 3e-8, 1e-6, 2e-10])
    s = 2 ** math.ceil(math.log2(2**-14 / g))
    return Practice("q15", "numeric",
                    f"A gradient of {g:g}. What is the smallest power-of-two loss scale that "
                    f"lifts it into fp16's normal range (>= 2^-14 = 6.10e-5)?", float(s),
                    f"6.10e-5 / {g:g} = {2**-14 / g:.4g}; the next power of two is 2^"
                    f"{int(math.log2(s))} = {s}.", unit="")


def _p_accum_steps(rng):
    e, gpus, m = _pick(rng, [(256, 4, 8), (1024, 16, 8), (2048, 8, 32), (768, 4, 16)])
    return Practice("q18", "numeric",
                    f"Effective batch {e} sequences; {gpus} GPUs, each fits a micro-batch of {m}. "
                    f"How many accumulation steps per optimizer step?", float(e // (gpus * m)),
                    f"{e} / ({gpus} x {m}) = {e // (gpus * m)}.", unit="")


def _p_token_weight(rng):
    a, b = _pick(rng, [(50, 200), (100, 500), (400, 100), (150, 300)])
    return Practice("q20", "numeric",
                    f"Two micro-batches, each loss a per-token mean: A has {a} real tokens, B has "
                    f"{b}. Loss = (mean_A + mean_B) / 2. How many times the weight of one token "
                    f"of B does one token of A get?", b / a,
                    f"Token of A: 1/2 x 1/{a}; token of B: 1/2 x 1/{b}; ratio {b}/{a} = "
                    f"{b / a:g}x. Weight by token count instead.", unit="x")


def _p_cuda_rounding(rng):
    n, dtype, size = _pick(rng, [(1000, "float32", 4), (300, "float64", 8), (2000, "float16", 2),
                                 (700, "int32", 4)])
    asked = n * size
    got = -(-asked // 512) * 512
    return Practice("q24", "numeric",
                    f"On a GPU, torch.empty({n}, dtype=torch.{dtype}, device=\"cuda\"). By how "
                    f"many bytes does torch.cuda.memory_allocated() grow?", float(got),
                    f"{n} x {size} = {asked} bytes, rounded up to a multiple of 512: {got} B.",
                    unit="B")


def _p_zero_stage(rng):
    p, stage, nd = _pick(rng, [(7.5, 1, 64), (7.5, 3, 64), (30, 2, 16), (70, 3, 8)])
    k = 12
    per = {1: 4 * p + k * p / nd, 2: 2 * p + (2 + k) * p / nd, 3: (4 + k) * p / nd}[stage]
    formula = {1: "4P + 12P/N", 2: "2P + 14P/N", 3: "16P/N"}[stage]
    return Practice("q26", "numeric",
                    f"{p:g}B parameters, mixed-precision Adam (K = 12), ZeRO stage {stage} over "
                    f"{nd} GPUs. Model-state memory per GPU, in GB?", round(per, 3),
                    f"Stage {stage}: {formula} = {per:.4g} GB (Rajbhandari et al. 2020).",
                    unit="GB")


def _p_kv_cache(rng):
    # (name, layers, kv heads, head_dim): multi-head shapes (kv heads = heads)
    name, L, g, d = _pick(rng, [("GPT-2 small", 12, 12, 64), ("GPT-2 XL", 48, 25, 64),
                                ("a 13B-like model", 40, 40, 128), ("a 1B-like model", 16, 32, 64)])
    seq, b, nbytes = _pick(rng, [1024, 2048, 8192]), _pick(rng, [1, 4, 32]), _pick(rng, [2, 4])
    gib = 2 * L * g * d * seq * b * nbytes / 2**30
    return Practice("q31", "numeric",
                    f"{name}: {L} layers, {g} attention heads of head_dim {d}, multi-head attention "
                    f"(as many key/value heads as heads). A batch of {b} sequences of {seq} tokens, "
                    f"cache in {nbytes * 8}-bit floats. KV cache in GiB (2^30 bytes)?",
                    round(gib, 4),
                    f"2 (K and V) x {L} layers x {g} kv heads x {d} x {seq} tokens x {b} x "
                    f"{nbytes} bytes = {2 * L * g * d * seq * b * nbytes:,} B = {gib:.4g} GiB "
                    f"(Pope et al. 2022, sec. 2).", unit="GiB")


def _p_gqa_cache(rng):
    # (name, layers, heads, kv heads, head_dim): grouped-query shapes
    name, L, a, g, d = _pick(rng, [("a Llama-3-8B-like model", 32, 32, 8, 128),
                                   ("a Mistral-7B-like model", 32, 32, 8, 128),
                                   ("a 34B-like model", 48, 64, 8, 128),
                                   ("a small GQA model", 24, 16, 4, 64)])
    seq, b = _pick(rng, [2048, 8192, 32768]), _pick(rng, [1, 2, 8])
    gib = 2 * L * g * d * seq * b * 2 / 2**30
    return Practice("q32", "numeric",
                    f"{name}: {L} layers, {a} query heads sharing {g} key/value heads (grouped-query "
                    f"attention), head_dim {d}, bf16 cache. {b} sequence(s) of {seq} tokens: KV "
                    f"cache in GiB?", round(gib, 4),
                    f"Only the {g} kv heads are cached: 2 x {L} x {g} x {d} x {seq} x {b} x 2 B = "
                    f"{gib:.4g} GiB, {a // g}x less than with {a} kv heads (Ainslie et al. 2023).",
                    unit="GiB")


def _p_qlora(rng):
    # (name, parameters in billions, layers, hidden size, rank, adapted projections)
    name, n, L, h, r, (which, k) = _pick(rng, [
        ("a Llama-2-13B-like model", 13.0, 40, 5120, 16, ("q, k, v and o", 4)),
        ("a Llama-2-13B-like model", 13.0, 40, 5120, 64, ("q and v", 2)),
        ("a Llama-2-7B-like model", 6.74, 32, 4096, 8, ("q and v", 2)),
        ("a Llama-2-7B-like model", 6.74, 32, 4096, 256, ("q, k, v and o", 4)),
        ("a 1.3B-parameter model", 1.3, 24, 2048, 64, ("q, k, v and o", 4)),
        ("a 1.3B-parameter model", 1.3, 24, 2048, 8, ("q and v", 2))])
    trainable = L * k * r * 2 * h
    base, adapters = n * 1e9 * 0.5, trainable * 16
    gb = (base + adapters) / 1e9
    return Practice("q36", "numeric",
                    f"QLoRA on {name} ({n:g} billion parameters, {L} layers, hidden size {h}): every "
                    f"base weight frozen in 4 bits, LoRA adapters of rank {r} on the {which} "
                    f"projections ({h} x {h} each) of every layer, trained in fp32 with AdamW (16 "
                    f"bytes per trainable parameter). Base weights + the adapters' model states, "
                    f"in GB (10^9 bytes)? Ignore the quantization constants and activations.",
                    round(gb, 4),
                    f"Base: {n:g}e9 x 0.5 B = {base / 1e9:.4g} GB (Dettmers et al. 2023). Trainable: "
                    f"{L} layers x {k} x r (d_in + d_out) = {L} x {k} x {r} x {2 * h} = {trainable:,} "
                    f"(Hu et al. 2021), x 16 B = {adapters / 1e9:.4g} GB. Total: {base / 1e9:.4g} + "
                    f"{adapters / 1e9:.4g} = {gb:.4g} GB.", unit="GB")


def _p_sharded_job(rng):
    # (name, parameters in billions, layers, hidden size, GPUs, s, b, recomputation)
    name, n, L, h, nd, s, b, mode = _pick(rng, [
        ("a 7B-like model", 6.74, 32, 4096, 8, 2048, 1, "selective"),
        ("a 7B-like model", 6.74, 32, 4096, 64, 4096, 2, "full"),
        ("a 13B-like model", 13.0, 40, 5120, 8, 4096, 1, "full"),
        ("a 13B-like model", 13.0, 40, 5120, 64, 2048, 2, "selective"),
        ("a 30B-like model", 32.5, 60, 6656, 64, 2048, 1, "selective"),
        ("a 30B-like model", 32.5, 60, 6656, 128, 4096, 1, "full")])
    per_layer = {"selective": 34, "full": 2}[mode]
    states = 16 * n * 1e9 / nd
    acts = per_layer * s * b * h * L
    gb = (states + acts) / 1e9
    return Practice("q37", "numeric",
                    f"{name} ({n:g} billion parameters, {L} layers, hidden size {h}) trains with "
                    f"mixed-precision Adam (16 bytes per parameter) under FSDP full sharding "
                    f"(ZeRO-3) on {nd} GPUs; each GPU runs a micro-batch of {b} sequence(s) of {s} "
                    f"tokens with {mode} activation recomputation ({per_layer} sbh bytes per "
                    f"layer). Model states + stored activations per GPU, in GB?", round(gb, 4),
                    f"Model states: 16 x {n:g}e9 / {nd} = {states / 1e9:.4g} GB (Rajbhandari et al. "
                    f"2020). Activations are not sharded: each GPU keeps its own micro-batch's, "
                    f"{per_layer} x {s} x {b} x {h} x {L} layers = {acts / 1e9:.4g} GB (Korthikanti "
                    f"et al. 2022). Total: {states / 1e9:.4g} + {acts / 1e9:.4g} = {gb:.4g} GB.",
                    unit="GB")


def _fixed(p: Practice) -> Callable[[random.Random], Practice]:
    return lambda rng: p


PRACTICE: dict[str, Callable[[random.Random], Practice]] = {
    "q1": _p_model_states, "q2": _p_zero_states, "q5": _p_layer_acts, "q6": _p_scale_factor,
    "q10": _p_sqrt_segments, "q11": _p_recompute_time, "q15": _p_loss_scale,
    "q18": _p_accum_steps, "q20": _p_token_weight, "q24": _p_cuda_rounding,
    "q26": _p_zero_stage, "q31": _p_kv_cache, "q32": _p_gqa_cache,
    "q36": _p_qlora, "q37": _p_sharded_job,
    "q3": _fixed(Practice(
        "q3", "choice", "fp32 Adam keeps 16 bytes per parameter (weights 4, gradients 4, two "
        "moments 8). Mixed-precision Adam in the ZeRO paper's convention keeps:", "c",
        "2 (16-bit weights) + 2 (16-bit gradients) + 4 (fp32 master weights) + 8 (two fp32 "
        "moments) = 16: mixed precision saves activation memory and time, not model states.",
        options={"a": "8 bytes per parameter: half", "b": "12 bytes per parameter",
                 "c": "16 bytes per parameter: the same", "d": "4 bytes per parameter"})),
    "q4": _fixed(Practice(
        "q4", "multi", "Which of these does gradient checkpointing reduce?", ("a", "c"),
        "Checkpointing drops saved activations (recomputing them in backward), which lowers the "
        "step's peak; parameters, gradients and optimizer state are untouched.",
        options={"a": "saved activations", "b": "parameters", "c": "the peak memory of the step",
                 "d": "gradients", "e": "optimizer state"})),
    "q7": _fixed(Practice(
        "q7", "choice", "You double the hidden size h (a, s, b fixed). Per-layer activations "
        "sbh(34 + 5as/h):", "b",
        "sbh doubles but 5as/h halves: 2sbh x 34 + 5as^2b, which is less than twice the "
        "original. The attention term does not depend on h.",
        options={"a": "double exactly", "b": "grow by less than 2x", "c": "grow by more than 2x",
                 "d": "stay the same"})),
    "q12": _fixed(Practice(
        "q12", "choice", "n = 16 equal layers; the peak with k segments is about (n/k + k) "
        "layers' worth. Which placement has the lowest peak?", "a",
        "k = 1: 17; k = 4: 4 + 4 = 8; k = 16: 1 + 16 = 17; no checkpointing: 16. "
        "sqrt(n) segments is the sweet spot.",
        options={"a": "4 segments of 4 layers", "b": "one checkpoint around all 16 layers",
                 "c": "16 segments of 1 layer", "d": "no checkpointing"})),
    "q14": _fixed(Practice(
        "q14", "choice", "How does fp32 split its 32 bits?", "a",
        "1 sign, 8 exponent (range about 1e-38 to 3e38) and 23 mantissa bits. fp64 is 1/11/52; "
        "the 16-bit formats shorten the mantissa and, for fp16, also the exponent.",
        options={"a": "1 sign, 8 exponent, 23 mantissa", "b": "1 sign, 11 exponent, 20 mantissa",
                 "c": "1 sign, 5 exponent, 26 mantissa", "d": "1 sign, 6 exponent, 25 mantissa"})),
    "q16": _fixed(Practice(
        "q16", "multi", "Which are true of torch.amp.GradScaler?", ("b", "d", "e"),
        "scale() multiplies the loss; step() unscales first unless unscale_() was called; "
        "the scale grows after a run of good steps and halves on inf/NaN. On CUDA autocast "
        "keeps softmax and layer_norm in fp32.",
        options={"a": "the scale only ever decreases",
                 "b": "scaler.scale(loss) multiplies the loss by the current scale",
                 "c": "autocast runs softmax and layer_norm in fp16 on CUDA",
                 "d": "scaler.step(optimizer) unscales the gradients first, unless unscale_ "
                      "was already called",
                 "e": "after a run of steps without inf/NaN the scale grows"})),
    "q19": _fixed(Practice(
        "q19", "choice", "In an accumulation loop over k micro-batches you call "
        "loss.backward() without dividing the loss by k, and step every k micro-batches. Each "
        "step uses:", "c",
        "backward adds into .grad: k undivided mean losses give the sum, k times the "
        "full-batch mean gradient (like a k times larger learning rate for SGD).",
        options={"a": "the full-batch mean gradient", "b": "only the last micro-batch's gradient",
                 "c": "k times the mean gradient", "d": "an error"})),
    "q22": _fixed(Practice(
        "q22", "ordering", "Order one accumulation cycle over k micro-batches.",
        ("c", "d", "b", "a"),
        "zero_grad once, then for each micro-batch forward and (loss / k).backward(), "
        "then one optimizer step.",
        options={"a": "optimizer.step()", "b": "(loss / k).backward() for the micro-batch",
                 "c": "optimizer.zero_grad()", "d": "forward pass of the micro-batch"})),
    "q23": _fixed(Practice(
        "q23", "choice", "You `del` a large CUDA tensor (nothing else refers to it). Right "
        "after:", "a",
        "Its block goes back to the caching allocator: memory_allocated drops, "
        "memory_reserved (and nvidia-smi) stay until empty_cache().",
        options={"a": "memory_allocated drops, memory_reserved stays",
                 "b": "both drop", "c": "neither changes",
                 "d": "memory_reserved drops, memory_allocated stays"})),
    "q27": _fixed(Practice(
        "q27", "choice", "ZeRO stage 3 over N GPUs with mixed-precision Adam (16 bytes per "
        "parameter, P parameters). Model states per GPU:", "d",
        "Stage 3 partitions weights, gradients and optimizer state: (4 + 12)P / N.",
        options={"a": "16P", "b": "4P + 12P / N", "c": "2P + 14P / N", "d": "16P / N"})),
    "q29": _fixed(Practice(
        "q29", "choice", "With F.scaled_dot_product_attention on a fused (flash) backend, you "
        "make the sequence 4x longer (batch, heads, head_dim fixed). The bytes attention saves "
        "for backward grow by about:", "c",
        "The fused kernel saves q, k, v, the output and one log-sum-exp per row: all linear in s, "
        "so 4x. Eager attention would also keep the s x s probabilities, which grow 16x "
        "(Dao et al. 2022).",
        options={"a": "16x", "b": "2x", "c": "4x", "d": "1x: nothing depends on s"})),
    "q30": _fixed(Practice(
        "q30", "multi", "You wrap every Linear of a model in LoRA (frozen base weights, trainable "
        "A and B of rank 8) and train with AdamW. Which consumers shrink a lot?", ("b", "c"),
        "Frozen weights get no gradient and no optimizer state, so gradients and AdamW's moments "
        "exist only for A and B (r x (in + out) per layer). The frozen weights stay, and the "
        "activations stay (a little more: A x is saved) (Hu et al. 2021).",
        options={"a": "parameters", "b": "gradients", "c": "optimizer state",
                 "d": "activations saved for backward"})),
    "q34": _fixed(Practice(
        "q34", "choice", "Read this message with notebook 10's rule: \"CUDA out of memory. Tried "
        "to allocate 1.20 GiB. GPU 0 has a total capacity of 79.15 GiB of which 900.00 MiB is "
        "free. Including non-PyTorch memory, this process has 78.05 GiB memory in use. Of the "
        "allocated memory 70.30 GiB is allocated by PyTorch, and 6.90 GiB is reserved by PyTorch "
        "but unallocated.\" Which cause does it show?", "c",
        "Held outside this process: 79.15 - 0.88 - 78.05 = 0.22 GiB, less than the 1.20 GiB "
        "request. Reserved but unallocated: 6.90 GiB, more than the request: the bytes are in "
        "this process's free blocks, none large enough. Fragmentation: try "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (notebook 10, section 1; "
        "c10/cuda/CUDACachingAllocator.cpp).",
        options={"a": "too big for the card", "b": "another process holds memory",
                 "c": "fragmentation", "d": "nothing: call torch.cuda.empty_cache() and retry"})),
    "q35": _fixed(Practice(
        "q35", "choice", "An evaluation loop without torch.no_grad(): total = 0, then for every "
        "batch loss = F.mse_loss(model(x), y); total += loss. Live bytes grow with every batch. "
        "Why?", "c",
        "total is a tensor whose graph links every batch's loss, and through it every activation "
        "the forwards saved for a backward that never runs. Fix: torch.no_grad() and "
        "total += loss.item() (notebook 10, section 3; PyTorch FAQ: \"Don't accumulate history "
        "across your training loop\").",
        options={"a": "the caching allocator keeps freed blocks: call torch.cuda.empty_cache()",
                 "b": "the model's weights are copied for every batch",
                 "c": "total keeps every batch's graph and the activations it saved",
                 "d": "Python floats pile up in total"})),
    "q38": _fixed(Practice(
        "q38", "choice", "Under torch.autocast with fp32 parameters, where is the fp32 master "
        "copy of the weights?", "a",
        "The parameters themselves stay fp32 and autocast casts them to 16 bits op by op, so "
        "small updates accumulate in fp32 (notebook 03; Micikevicius et al. 2018, sec. 3.1).",
        options={"a": "the model's own parameters: autocast casts them per op",
                 "b": "inside torch.amp.GradScaler, which copies the weights every step",
                 "c": "in the optimizer state, beside Adam's moments",
                 "d": "nowhere: autocast stores the weights in 16 bits"})),
    "q39": _fixed(Practice(
        "q39", "multi", "Which collectives does FSDP (ZeRO-3) run in one training step?",
        ("a", "b", "d"),
        "It all-gathers each layer's parameters for the forward and again for the backward, and "
        "reduce-scatters the gradients: 3 x the parameter bytes, 1.5x DDP (notebook 06, section 2; "
        "Rajbhandari et al. 2020, sec. 7). Activations stay on their rank; the optimizer state "
        "is sharded and never sent.",
        options={"a": "an all-gather of each layer's parameters before its forward",
                 "b": "an all-gather of them again before its backward",
                 "c": "an all-reduce of every layer's activations",
                 "d": "a reduce-scatter of the gradients",
                 "e": "a broadcast of the optimizer state"})),
    "q40": _fixed(Practice(
        "q40", "choice", "A decode step of a 7B bf16 model at batch 1 takes about 4 ms, bound by "
        "reading the weights. You decode 16 short sequences at once instead. The time per step:",
        "d",
        "Each step still reads every weight once, now for 16 tokens: the arithmetic grows 16x "
        "but was ~300x below the memory time, so the step barely slows while throughput rises "
        "almost 16x, until the KV cache reads or compute catch up (Pope et al. 2022).",
        options={"a": "grows about 16x", "b": "shrinks about 16x", "c": "stays exactly the same",
                 "d": "grows far less than 16x"})),
}


def practice(qid: str, seed: int | None = None) -> Practice:
    """A practice variant for ``qid`` (text questions: the graded rubric question itself)."""
    q = _question(qid)
    if q.kind == "text":
        rubric = _rubric(q.rubric)
        return Practice(qid, "text", rubric.question, q.rubric,
                        f"Model answer: {rubric.model_answer}\n\nWhy: {rubric.explanation}")
    return PRACTICE[qid](random.Random(seed))
