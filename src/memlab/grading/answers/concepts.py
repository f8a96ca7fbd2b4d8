"""The concept-rubric engine behind ``ml.rubric.grade_text``: does an answer state the ideas?

Used by: :mod:`memlab.grading.answers.grade` (``grade_text(answer, rubric_id)``), whose rubrics live in
:mod:`memlab.grading.answers.bank`; the graded written questions of 02-07 and
:mod:`memlab.grading.interview.bank`.

A :class:`Rubric` names the ideas a good answer contains (:class:`Concept`: a weight and a
few vetted regular expressions) and the wrong claims that cost credit
(:class:`Misconception`: a penalty). The grader is transparent, not a language model: for
every concept it finds the sentences that mention it and decides, per mention, whether the
answer

- ASSERTS it (credit),
- DENIES it ("nothing is recomputed", "I wouldn't use mixed precision", "not X but Y"
  denies X): no credit, and a denied concept costs as much as it would have earned,
- or merely NAMES it (the subject of a denial: "mixed precision doesn't halve anything";
  a claim reported as someone else's: "a common mistake is ...", "people think ..."):
  no credit, no penalty.

Misconceptions are read the same way: asserted they cost their penalty, denied or
reported they cost nothing ("checkpointing is not free" is right). The report shows, for
every concept and misconception, the learner's sentence that earned or lost it.

Reading a mention (all within one sentence; clauses end at ``,``/``;`` and at "but",
"however", "although", "because", "so", ...): a negation ("not", "no", "never", "without",
"nothing", "neither/nor", "hardly", "rather than", "instead of", "unlike") up to 5 words
before the mention denies it, also across a comma inside a list ("not X, Y or Z": at most
3 words after the comma, no new subject such as "it", "they", "this", "is"). A negation inside a purpose or
condition ("... so that gradients do not underflow", "if you don't divide by k, ...") does
not deny: it states why the idea matters. A pattern that contains the negation itself
("activations are not stored") is the idea, not its denial.

Before matching, the answer is normalised (:func:`normalize`: lowercase, contractions
expanded, "dont" -> "do not", ``float16`` -> ``fp16``, sentence ends to ``.``), misspelt
course words are corrected (:mod:`memlab.grading.answers.spelling`: "lineer" -> "linear"), runs of 5+
words copied from the question are blanked, and keyword lists are blanked or, when they are
most of the answer, score 0 (see ``_stuffing``). An answer over ``max_words`` is graded on its
content less ``LENGTH_COST``, with its word count; one over three times the limit also goes to
review, and one too long to read (``40 * max_words`` characters) goes to review unscored.

A question asks for parts ("why are they equal, and when are they not?", ``Rubric.parts``): an
answer that leaves a whole part out scores at most ``PART_SHARE`` times the share of the parts
it answers (one of two: 0.45), decided when every technical clause of the answer was read, and
sent to review when a clause no pattern read might be the missing part in other words.

Review flags (``needs_review`` with a reason, ``[needs review]`` in the report): a score
in the rubric's review band (0.2-0.9: the grader's middle scores are the ones it is least
often right about), a misconception next to strong concepts, a denied concept
next to asserted ones, terse or list-like answers, a large share copied from the question,
an answer that pastes the course's own text (model answer, explanation, recap passages
in ``Rubric.course_text``) or the grader's hints, a long answer in plain words (an analogy)
that matched little, and misconception phrases skipped as reported. Technical prose that
matched little is decided: wrong or off the point. One detail (a concept of less weight
than the rubric's main ideas, 1 or its heaviest) without any main idea earns nothing.

Limits: the polarity is read from a few words around a mention, so double negatives,
sarcasm and a denial placed after the claim ("checkpointing is free? no.") are not
understood; a fluent answer can say the right words for the wrong reasons when no
misconception pattern covers its error. Instructors read the flagged answers, override the
grade in the formgrader, and add the missed phrasing to :mod:`memlab.grading.answers.bank` with the
answer as a labelled case in tests/grading/data/answers.jsonl.
"""
from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .result import Result, _as_text, _flagged, _type_name
from .spelling import Corrector, pattern_words

__all__ = ["Concept", "Misconception", "Rubric", "grade_rubric", "normalize", "gap"]


def gap(n: int, avoid: Iterable[str] = (), negations: bool = False) -> str:
    """Regex for up to ``n`` words between two parts of a pattern, within one clause.

    The gap never crosses a negation ("not", "no", "never", "without", "nor", "non") unless
    ``negations=True``, nor a word in ``avoid``: ``rf"bf16 {gap(2)}needs {gap(2)}scaler"``
    matches "bf16 also needs a scaler" but not "bf16 needs no scaler".
    """
    stop = [*(() if negations else ("not", "no", "never", "without", "nor", "non")), *avoid]
    guard = f"(?!(?:{'|'.join(map(re.escape, stop))}) )" if stop else ""
    return rf"(?:{guard}[^ ,.]+ ){{0,{int(n)}}}"


_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None)
_REWRITES: list[tuple[re.Pattern[str], str]] = [(re.compile(a), b) for a, b in [
    (r"[‘’ʼ`´]", "'"), (r"[\"“”«»]", " "),
    (r"\b(?:can't|cannot|cant)\b", "can not"), (r"\b(?:won't|wont)\b", "will not"),
    (r"\b(do|does|did|is|are|was|were|would|should|could|has|have|had|must|need)nt\b",
     r"\1 not"),                                          # "dont", "doesnt": common typos
    (r"\b(that|what|there)s\b(?=\s+(?:a|an|the|not|no|why|how|what|because|all)\b)", r"\1 is"), (r"n't\b", " not"),
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
    (r"(?<![a-z0-9_]):(?=\s)|(?<=[a-z0-9_\])]):(?=\s|$)", " . "),    # "not equal: X, Y"
    (r"\((?=[^()]*[a-z]{3,} [a-z]{3,})", " "),   # "bf16 (halves activations)": a note, not a list item
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
# allowed in a term written as a list item of its own
_LIST_WORDS = _LIGHT_WORDS | {"by", "and", "or"}
_SIMPLE_NEG = frozenset("not no never without neither nor none nothing hardly barely".split())
_NEG_EXCEPT = frozenset("only just merely longer necessarily".split())  # "not only", "no longer"
_PHRASE_NEG = ("rather than", "instead of", "as opposed to", "contrary to", "unlike",
               "regardless of", "irrespective of")
_DISTANCING = re.compile(
    r"^(myths?|mistakes?|mistaken(ly)?|misconceptions?|wrong(ly)?|false(ly)?|tempting|naive(ly)?|"
    r"misleading|incorrect(ly)?|erroneous(ly)?|fallacy|misunderstanding|untrue)$")
_BELIEF = re.compile(r"\b(?:people|some|many|others|beginners|students|one|you) (?:\S+ )?"
                     r"(?:think|thinks|believe|believes|assume|assumes|claim|claims|say|says|do|does|"
                     r"try|tries|might think)\b")
_CLAUSE_WORDS = frozenset("but however although though whereas while because since so yet unless "
                          "whereby thus hence therefore".split())
# a new clause starts here: a negation before it does not reach past a comma
_SUBJECTS = frozenset("it they this that these those which who we i you he she there is are was "
                      "were be does do did has have".split())
# a negation after these states a purpose or a condition, not a denial of the idea
_PURPOSE = frozenset("ensure ensures ensuring otherwise else lest if unless when whenever once "
                     "until".split())
_PURPOSE_PAIRS = {("so", "that"), ("such", "that"), ("in", "order"), ("to", "avoid"),
                  ("to", "prevent"), ("to", "keep"), ("to", "make")}
_SCOPE_BREAK = frozenset("when whenever if where once".split())
_AUX = re.compile(r"^(?:can|could|will|would|is|are|was|were|does|do|did|has|have|may|might|must|"
                  r"should|shall)$")
_NEG_AFTER = re.compile(r"^(?:(?:does|do|did|is|are|was|were|will|would|can|could|should|has|have)"
                        r" (?:not|never)|never|is no|are no) ")


# a sentence that takes back the whole answer (normalized text): "he is wrong about every word",
# "none of this is true", "all of the above is false", "i do not believe any of it"
_DISOWNS = re.compile(
    r"\b(?:wrong|false|mistaken|untrue|nonsense|incorrect) (?:about |on |in )?(?:every|each|all|"
    r"any|everything|anything)\b(?: (?:word|thing|point|claim|part|line|sentence|of it|of this|"
    r"of that|of the above|he says|she says|they say))?"
    r"|\b(?:none|nothing|not one word|no part) of (?:this|that|it|the above|what \w+ (?:said|says|"
    r"wrote|claims?|insists?)) is (?:true|right|correct|accurate)"
    r"|\b(?:all|every word) of (?:this|that|it|the above) is (?:wrong|false|untrue|nonsense)"
    r"|\bi do not (?:believe|agree with) (?:any|a word) of (?:it|this|that)")


def _clause(text: str, start: int) -> tuple[list[str], str]:
    """Words of the clause before ``start`` (back to a ``.``/``,`` or a clause word), and the
    word that opened the clause ('' at a sentence start)."""
    words = text[:start].split()
    for i in range(len(words) - 1, -1, -1):
        if words[i] in (",", ".") or words[i] in _CLAUSE_WORDS:
            return words[i + 1:], words[i]
    return words, ""


def _purpose(words: list[str]) -> bool:
    return (any(w in _PURPOSE for w in words)
            or any((a, b) in _PURPOSE_PAIRS for a, b in zip(words, words[1:])))


def _denied(text: str, start: int) -> bool:
    """A negation reaches the phrase at ``start`` (see the module docstring)."""
    words = text[:start].split()
    if words and words[-1] == "non":        # "non linear", "non-linear": the word's opposite
        return True
    seen = 0
    crossed = subject = False
    for i in range(len(words) - 1, -1, -1):
        w = words[i]
        if w in ("because", "since") and i > 0 and words[i - 1] in ("not", "never"):
            return True                      # "not because of underflow": the reason denied
        if w == "." or (w in _CLAUSE_WORDS and not (w == "so" and words[i + 1:i + 2] == ["that"])):
            break
        if w in _SCOPE_BREAK:                # "not equal when you use BatchNorm"
            break
        if w == ",":
            first = text[start:].split(" ", 1)[0]
            if subject or seen > 3 or first in _SUBJECTS:  # a clause of its own, not a list item
                break
            crossed = True
            continue
        if w in _SUBJECTS:
            if crossed:
                break
            subject = True
        seen += 1
        if seen > (7 if crossed else 5):
            break
        nxt = words[i + 1] if i + 1 < len(words) else text[start:].split(" ", 1)[0]
        if w in _SIMPLE_NEG and nxt not in _NEG_EXCEPT:
            # past a comma only a list continues the negation ("not X, Y or Z"), not a
            # phrase that is the subject of its own verb ("not X, and Y can ...")
            if crossed and text[start:].split(" ")[1:2] and _AUX.match(text[start:].split(" ")[1]):
                return False
            if crossed and i > 0 and words[i - 1] == ",":
                return False                 # "shows A, not B, and C ...": the contrast ends at its comma
            if w not in ("not", "never"):
                return True                  # "nothing underflows", "no extra time": a denial
            if _purpose(words[max(0, i - 6):i]):
                return False
            # "..., so gradients do not underflow": a purpose when the negation is on the
            # idea's own verb; "so scaling is not needed for underflow" stays a denial
            opener = next((words[k] for k in range(i - 1, -1, -1)
                           if words[k] in (",", ".") or words[k] in _CLAUSE_WORDS), "")
            return not (opener == "so" and seen <= 2)
    tail = " " + " ".join(_clause(text, start)[0][-4:]) + " "
    return any(f" {p} " in tail for p in _PHRASE_NEG)


def _reported(text: str, start: int, end: int) -> bool:
    """A claim reported, not made: "a common mistake is ...", "people think ...", "if ...",
    "..., which is a myth / is not true"."""
    before = _clause(text, start)[0]
    after = text[end:].split(" . ")[0].split()[:7]
    return ("if" in before[-4:] or "if" in after[:5] or "unless" in after[:5] or any(_DISTANCING.match(w) for w in before[-7:] + after)
            or bool(_BELIEF.search(" ".join(before[-7:])))
            or " not true" in " " + " ".join(after))


def _named_only(text: str, end: int) -> bool:
    """The phrase is the subject of a denial: "mixed precision doesn't halve anything"."""
    after = text[end:].lstrip()
    return bool(_NEG_AFTER.match(after + " "))


def _compile(p: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(rf"(?<![a-z0-9_])(?:{p})(?![a-z0-9_])")
    except re.error as e:
        raise ValueError(f"{where}: pattern {p!r} does not compile: {e}") from None


@dataclass(frozen=True)
class Concept:
    """An idea a good answer contains: any one of ``patterns`` (regexes on normalised text,
    see :func:`normalize`) shows it. ``hint`` is the feedback when it is missing.
    ``negatable=False`` for an idea that is stated either way round ("allocated grows step
    after step" and "allocated does not grow" both show how to tell a leak)."""

    name: str
    patterns: tuple[str, ...]
    weight: float = 1.0
    hint: str = ""
    negatable: bool = True

    def __post_init__(self) -> None:
        if not self.patterns or self.weight <= 0:
            raise ValueError(f"concept {self.name!r} needs patterns and a positive weight")
        object.__setattr__(self, "_compiled", tuple(_compile(p, self.name) for p in self.patterns))


@dataclass(frozen=True)
class Misconception:
    """A wrong claim: asserted it costs ``penalty`` and shows ``correction``; denied or
    reported it costs nothing. ``fatal=True`` for a wrong mechanism that makes the whole
    answer wrong (the score is then capped at ``FATAL_CAP``)."""

    name: str
    patterns: tuple[str, ...]
    penalty: float = 0.3
    correction: str = ""
    fatal: bool = False

    def __post_init__(self) -> None:
        if not self.patterns or not 0 < self.penalty <= 1:
            raise ValueError(f"misconception {self.name!r} needs patterns and a penalty in (0, 1]")
        object.__setattr__(self, "_compiled", tuple(_compile(p, self.name) for p in self.patterns))


FATAL_CAP = 0.15
LENGTH_COST = 0.1   # an answer over Rubric.max_words: graded on its content, less this
FIRST_IDEA = 0.25   # one key idea (weight >= 1) stated, nothing wrong: at least this score


@dataclass(frozen=True)
class Rubric:
    """A short-answer question with its concept rubric.

    ``full_credit_at``: the share of the total concept weight that earns full credit.
    ``topic``: patterns of on-topic words: an idea's word in an answer that matches none is a
    loose word, and a plain-words answer that matches little goes to review.
    ``model_answer`` and ``explanation`` are the self-study reveal; the model answer must
    itself score 1 with nothing missing (the tests check it).
    ``course_text``: passages of the notebooks on this question (recaps, the model rule):
    an answer that pastes them, or the model answer, explanation or hints, is flagged.
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
    review_band: tuple[float, float] = (0.2, 0.9)
    course_text: tuple[str, ...] = ()
    facts: tuple[str, ...] = ()   # the numbers the course teaches on this question (cited):
    #                               an answer may state them; not text an answer pastes
    true_claims: tuple[str, ...] = ()  # patterns of true claims beside the concepts (what
    #                               GradScaler does, "ZeRO-2 also ..."): no credit, but checked
    parts: tuple[tuple[str, tuple[str, ...]], ...] = ()  # the question's parts: (what it
    #                               asks, the concepts that answer it); see _part_cap
    required: tuple[str, ...] = ()  # concepts this use of the rubric asks for by name (06 asks
    #                               the price of sharding): missing one caps the score below 1

    def __post_init__(self) -> None:
        if not self.concepts:
            raise ValueError(f"rubric {self.id!r} has no concepts")
        if not 0 < self.full_credit_at <= 1:
            raise ValueError("full_credit_at must be in (0, 1]")
        unknown = (set(self.required) | {n for _, names in self.parts for n in names}) \
            - {c.name for c in self.concepts}
        if unknown:
            raise ValueError(f"rubric {self.id!r} has no concept {sorted(unknown)}")
        object.__setattr__(self, "_topic", tuple(_compile(p, f"{self.id} topic") for p in self.topic))
        object.__setattr__(self, "_true", tuple(_compile(p, f"{self.id} true claim")
                                                for p in self.true_claims))

    @property
    def total_weight(self) -> float:
        return sum(c.weight for c in self.concepts)

    def reference_texts(self) -> tuple[str, ...]:
        """The course's and the grader's own text for this question (model answer,
        explanation, course passages, hints and corrections): pasting it is flagged."""
        return (self.model_answer, self.explanation, *self.course_text,
                *(c.hint for c in self.concepts if c.hint),
                *(m.correction for m in self.misconceptions if m.correction))

    def describe(self) -> str:
        """The rubric as readable text, for instructors."""
        lines = [f"{self.id}: {self.question}",
                 f"full credit at {self.full_credit_at:.0%} of weight {self.total_weight:g}; "
                 f"at most {self.max_words} words"]
        for c in self.concepts:
            lines.append(f"  + {c.weight:g}  {c.name}")
            lines += [f"        {p}" for p in c.patterns]
        for m in self.misconceptions:
            lines.append(f"  - {m.penalty:g}  {m.name}" + ("  (fatal)" if m.fatal else ""))
            lines += [f"        {p}" for p in m.patterns]
        return "\n".join(lines)


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
    """True for answer word tokens inside a run of >= n words that also occurs in the question.

    A run that starts with a function word ("with batch size and depth") is the answer
    reusing the question's terms, not copying it, unless it runs to n + 2 words."""
    q = [_stem(t) for t in normalize(question).split() if _is_word(t)]
    idx = [i for i, t in enumerate(tokens) if _is_word(t)]
    stems = [_stem(tokens[i]) for i in idx]
    mask = [False] * len(tokens)
    n = min(n, len(q))
    if n < 3:
        return mask
    for size, any_start in ((n, False), (n + 2, True)):
        grams = {tuple(q[i:i + size]) for i in range(len(q) - size + 1)}
        for i in range(len(stems) - size + 1):
            if tuple(stems[i:i + size]) in grams and (any_start or tokens[idx[i]] not in _FUNCTION_WORDS):
                for k in idx[i:i + size]:
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


_LIST_ITEM = re.compile(r"(?:^|\n)\s*(?:[-*•·]|\d+[.)])\s|(?:^|\s)\d+[.)]\s")


def _written_as_list(raw: str) -> bool:
    """Five or more items: bulleted or numbered (one a line, or in a row: "1. prefill 2.
    decode ..."), or unmarked lines, or items between semicolons, that are short (half of them
    6 words or fewer). Long unmarked lines are prose wrapped at a width, as a notebook's
    triple-quoted answer is: a sentence runs on across them; clauses joined by semicolons are
    as long."""
    if len(_LIST_ITEM.findall(raw)) >= 5:
        return True
    for sep in ("\n", ";"):   # one item a line, or items in a row between semicolons
        words = sorted(len(item.split()) for item in raw.split(sep) if item.strip())
        if len(words) >= 5 and words[len(words) // 2] <= 6:
            return True
    return False


@dataclass
class _Blanked:
    """What :func:`_stuffing` finds, in the order found: the tokens that earn nothing (a mask
    over the tokens), the learner's messages and the review reasons."""
    excluded: list[bool]
    messages: list[str] = field(default_factory=list)
    review: list[str] = field(default_factory=list)

    def exclude(self, indices: Iterable[int]) -> None:
        for i in indices:
            self.excluded[i] = True


def _stuffing(tokens: list[str], listed: bool = False
              ) -> tuple[list[bool], bool, list[str], list[str], dict[str, float]]:
    """Find keyword lists and repetition. ``listed``: the answer is written as a list (one
    item a line, bulleted or numbered: :func:`_written_as_list`).

    Returns (excluded token mask, stuffed verdict, messages, review reasons, metrics).
    """
    words = [t for t in tokens if _is_word(t)]
    n = len(words)
    out = _Blanked([False] * len(tokens))
    fw = [w for w in words if w in _FUNCTION_WORDS]
    frags = _fragments(tokens)
    metrics = {
        "words": n, "function_word_ratio": round(len(fw) / n, 3) if n else 0.0,
        "mean_fragment_words": round(n / len(frags), 2) if frags else 0.0,
    }
    _bare_term_runs(tokens, frags, out)
    if listed:
        _term_lines(tokens, out)
    _structureless_runs(tokens, frags, out)
    stuffed = _repeated(tokens, words, out, metrics)
    if _same_few_words(fw, out):
        stuffed = True
    if n >= 10 and len(fw) / n < 0.05:
        stuffed = True
        out.messages.append(f"only {len(fw)} function words in {n}: a keyword list, not an "
                            "explanation")
    if not stuffed and n >= 10 and len(fw) / n < 0.15:
        out.review.append(f"few function words ({len(fw)}/{n}): terse notes or a keyword list")
    if stuffed and not out.messages:
        out.messages.append("the answer is mostly a keyword list: explain in sentences")
    return out.excluded, stuffed, out.messages, out.review, metrics


def _bare(tokens: list[str], f: list[int]) -> bool:
    """A fragment of up to three words with no function word but one light one ("the")."""
    fws = [tokens[i] for i in f if tokens[i] in _FUNCTION_WORDS]
    return len(f) <= 3 and (not fws or (len(fws) == 1 and fws[0] in _LIGHT_WORDS))


def _bare_term_runs(tokens: list[str], frags: list[list[int]], out: _Blanked) -> None:
    """Runs of 6+ short fragments (up to three words), 3/4 of them bare terms: "fp16, bf16,
    checkpointing, recompute, ...". A term with a function word in it ("all gather", "other
    processes", "not a leak") does not end the list."""
    run: list[list[int]] = []
    for f in frags + [[]]:
        if run and f and "." in tokens[run[-1][-1] + 1:f[0]]:
            _end_run(tokens, run, out)   # a list ends with its sentence
        if f and len(f) <= 3:
            run.append(f)
            continue
        _end_run(tokens, run, out)


def _end_run(tokens: list[str], run: list[list[int]], out: _Blanked) -> None:
    n_bare = sum(_bare(tokens, f) for f in run)
    if len(run) >= 6 and n_bare >= 0.75 * len(run):
        for g in run:
            out.exclude(g)
        out.messages.append(f"a list of {len(run)} bare terms earns no credit: explain in sentences")
    # (four or five bare terms in prose are an enumeration, "params, grads and Adam state":
    # they once sent an answer to review; on blind rounds r3-r8 dropping that decided 16 more
    # answers, 14 of them in their band)
    run.clear()


def _term_lines(tokens: list[str], out: _Blanked) -> None:
    """A list written one term a line, a bullet or a number ("- linearity of the gradient\\n-
    p.grad accumulates\\n- ..."): each item is a sentence of its own, so a run of bare terms,
    which ends with its sentence, never sees it. In such a list, five or more items of which
    70% are short terms (at most five words, no function word but the light ones, "by", "and",
    "or"), averaging at most 3.5 words: the terms earn nothing. A sentence a line, as an honest
    list is written, is longer or keeps a verb's company ("is", "it", "when", ...)."""
    items: list[list[int]] = [[]]
    for i, t in enumerate(tokens):
        if t == ".":
            items.append([])
        elif _is_word(t):
            items[-1].append(i)
    items = [x for x in items if x]

    def term(item: list[int]) -> bool:
        fws = [tokens[i] for i in item if tokens[i] in _FUNCTION_WORDS]
        return len(item) <= 5 and len(fws) <= 2 and all(w in _LIST_WORDS for w in fws)

    terms = [x for x in items if term(x)]
    if len(terms) >= 5 and len(terms) >= 0.7 * len(items) \
            and sum(map(len, terms)) / len(terms) <= 3.5:
        for g in terms:
            out.exclude(g)
        out.messages.append(f"a list of {len(terms)} terms, one an item, earns no credit: "
                            "explain in sentences")


def _structureless_runs(tokens: list[str], frags: list[list[int]], out: _Blanked) -> None:
    """Long stretches without a single function word, also inside a longer fragment ("model
    states do not fit replica data parallel shard optimizer gradients ...")."""
    for f in frags:
        n_fw = sum(tokens[i] in _FUNCTION_WORDS for i in f)
        if (len(f) >= 8 and n_fw == 0) or (len(f) >= 12 and n_fw / len(f) < 0.1):
            out.exclude(f)
            out.messages.append(f"a run of {len(f)} words with no sentence structure earns no "
                                "credit")
            continue
        stretch: list[int] = []
        for i in f + [-1]:
            if i >= 0 and tokens[i] not in _FUNCTION_WORDS:
                stretch.append(i)
                continue
            if len(stretch) >= 8:
                out.exclude(stretch)
                out.messages.append(f"a run of {len(stretch)} words with no sentence structure "
                                    "earns no credit")
            stretch = []


def _repeated(tokens: list[str], words: list[str], out: _Blanked,
              metrics: dict[str, float]) -> bool:
    """Whether the answer is stuffed: the same words again and again, or so little left once
    the lists are blanked. Adds the repetition measures to ``metrics``."""
    stuffed = False
    # "linear linear .grad .grad BatchNorm BatchNorm": the same word twice in a row, again and again
    doubled = sum(1 for a, b in zip(words, words[1:]) if a == b and a not in _FUNCTION_WORDS)
    if doubled >= 3:
        stuffed = True
        out.messages.append("the same terms are repeated: repetition earns no credit")
    kept = sum(1 for i, t in enumerate(tokens) if _is_word(t) and not out.excluded[i])
    if words and kept < 0.4 * len(words):
        stuffed = True
    content = [w for w in words if w not in _FUNCTION_WORDS]
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
            out.messages.append("the same terms are repeated: repetition earns no credit")
        elif len(content) >= 20 and (top >= 0.2 or dup >= 0.5 or tri_rep >= 0.15):
            out.review.append("repetitive wording")
    return stuffed


def _same_few_words(fw: list[str], out: _Blanked) -> bool:
    """Whether terms are strung together with few kinds of function word: "the X and the Y and
    the Z", "It is about X. It is about Y.". The kinds grow with the square root of the count in
    any prose (Heaps' law), so past 20 function words the share of kinds is measured as kinds /
    sqrt(count) (Guiraud's index), with the thresholds the share has at 20: a long answer is not
    a list for being long."""
    kinds = len(set(fw))

    def few_kinds(share: float) -> bool:
        return len(fw) >= 8 and kinds < min(share * len(fw), share * math.sqrt(20 * len(fw)))

    if (len(fw) >= 5 and kinds <= 2) or few_kinds(0.3):
        out.messages.append("terms strung together with the same few words are a keyword list, "
                            "not an explanation")
        return True
    if few_kinds(0.4):
        out.review.append("the same few connecting words repeat")
    return False


# ------------------------------------------------------------------ reading the answer
def _rubric_words(rb: Rubric) -> set[str]:
    texts = [rb.question, *rb.reference_texts(), *(c.name for c in rb.concepts),
             *(m.name for m in rb.misconceptions)]
    words = set(re.findall(r"[a-z]+", " ".join(normalize(t) for t in texts)))
    for item in (*rb.concepts, *rb.misconceptions):
        for p in item.patterns:
            words |= pattern_words(p)
    for p in rb.topic:
        words |= pattern_words(p)
    return words | set(_FUNCTION_WORDS)


_CORRECTORS: dict[int, tuple[Rubric, Corrector]] = {}


def _corrector(rb: Rubric) -> Corrector:
    hit = _CORRECTORS.get(id(rb))
    if hit is None or hit[0] is not rb:
        hit = (rb, Corrector(_rubric_words(rb)))
        _CORRECTORS[id(rb)] = hit
    return hit[1]


@functools.lru_cache(maxsize=64)
def _reference_grams(texts: tuple[str, ...], n: int) -> frozenset[tuple[str, ...]]:
    grams: set[tuple[str, ...]] = set()
    for t in texts:
        stems = [_stem(w) for w in normalize(t).split() if _is_word(w)]
        grams |= {tuple(stems[i:i + n]) for i in range(len(stems) - n + 1)}
    return frozenset(grams)


def _pasted_share(tokens: list[str], rb: Rubric, n: int = 6) -> float:
    """Share of the answer's words inside runs of >= n words found in the course's or the
    grader's own text for this rubric."""
    grams = _reference_grams(rb.reference_texts(), n)
    idx = [i for i, t in enumerate(tokens) if _is_word(t)]
    stems = [_stem(tokens[i]) for i in idx]
    hit = [False] * len(stems)
    for i in range(len(stems) - n + 1):
        if tuple(stems[i:i + n]) in grams:
            for k in range(i, i + n):
                hit[k] = True
    return sum(hit) / len(stems) if stems else 0.0


# sentence ends as normalize() reads them: punctuation, a blank line, a new bullet; a line
# wrapped inside a sentence is not an end
_SENTENCE_END = re.compile(r"(?<=[.!?;…])\s+|\s*\n\s*\n\s*|\s*\n(?=\s*(?:[-*•·]|\d+[.)])\s)")


@dataclass
class _Mention:
    polarity: str     # "assert", "deny", "name" or "report"
    evidence: str     # the words that matched
    sentence: str     # the learner's sentence, as written
    span: tuple[int, int, int] = (0, 0, 0)   # (sentence index, start, end) in the graded text
    pattern: str = ""                         # the pattern that matched (its source)

    def overlaps(self, other: tuple[int, int, int]) -> bool:
        """This mention and ``other`` are mostly the same words (each at least half shared)."""
        k, a, b = self.span
        shared = min(b, other[2]) - max(a, other[1])
        return (k == other[0] and shared > 0 and 2 * shared >= b - a
                and 2 * shared >= other[2] - other[1])


def _mentions(compiled: Iterable[re.Pattern[str]], graded: list[str], raw: list[str],
              negatable: bool, misconception: bool) -> list[_Mention]:
    out = []
    for k, (text, sentence) in enumerate(zip(graded, raw)):
        for rx in compiled:
            for m in rx.finditer(text):
                if negatable and _denied(text, m.start()):
                    pol = "deny"
                elif misconception and _reported(text, m.start(), m.end()):
                    pol = "report"
                elif negatable and _named_only(text, m.end()):
                    pol = "name"
                else:
                    pol = "assert"
                out.append(_Mention(pol, m.group(0), sentence, (k, m.start(), m.end()), rx.pattern))
    return out


def _verdict(mentions: list[_Mention]) -> _Mention | None:
    for pol in ("assert", "deny", "name", "report"):
        for m in mentions:
            if m.polarity == pol:
                return m
    return None


# What makes a sentence a technical claim (issue 32): it names a memory consumer, a technique,
# a dtype or a unit, gives a number, or moves a quantity. Matched on the normalised sentence.
_CLAIM = re.compile(
    r"\b(?:param\w*|weights?|grad\w*|optimi[sz]\w*|adam\w*|moments?|states?|activations?|"
    r"checkpoint\w*|recomput\w*|autocast|precision|fp16|bf16|fp32|float\w*|half|"
    r"accumulat\w*|micro\w*|batch\w*|shard\w*|fsdp|zero|ddp|offload\w*|cache\w*|kv|"
    r"allocat\w*|reserv\w*|fragment\w*|memory|bytes?|gb|gib|mb|mib|"
    r"halv\w*|doubl\w*|grow\w*|shrink\w*|increas\w*|decreas\w*|reduc\w*|cuts?|saves?|"
    r"linear\w*|quadratic\w*|constant|faster|slower|exact\w*|equal|identical|"
    r"\d+(?:\.\d+)?x?)\b")


def _technical_claim(sentence: str, topic: Iterable[re.Pattern[str]] = ()) -> bool:
    """Whether a (normalised, graded) sentence or clause makes a claim about memory or a
    technique: it has at least three words and names at least two of the things
    :data:`_CLAIM` or the rubric's ``topic`` list (one word alone, "memory", is a hedge or a
    transition)."""
    words = [w for w in sentence.split() if _is_word(w)]
    terms = len(_CLAIM.findall(sentence)) + sum(len(rx.findall(sentence)) for rx in topic)
    return len(words) >= 3 and terms >= 2


# where a clause ends: a comma of the normalised text, or a word that starts a new claim
_CLAUSE_START = frozenset("so because since therefore thus hence whereas while but which "
                          "although though".split())
_NUMBER = re.compile(r"(?<![a-z0-9_.])\d+(?:\.\d+)?(?:e ?-? ?\d+)?(?![0-9])")


def _clauses(text: str) -> list[tuple[int, int]]:
    """(start, end) of each clause of a normalised sentence: split at commas and before the
    words of :data:`_CLAUSE_START`."""
    out, start, pos = [], 0, 0
    for tok in text.split(" "):
        if tok == "," or tok in _CLAUSE_START:
            if text[start:pos].strip(" ,"):
                out.append((start, pos))
            start = pos + (len(tok) + 1 if tok == "," else 0)
        pos += len(tok) + 1
    if text[start:].strip(" ,"):
        out.append((start, len(text)))
    return out


def _numbers(text: str) -> set[str]:
    """The numbers a normalised text states ("6.1e-5" -> "6.1e-5", "16" -> "16")."""
    return {m.group().replace(" ", "").rstrip(".") for m in _NUMBER.finditer(text)}


# what makes an unmatched claim decisive, the kind a false one usually is: a quantity that
# changes by a factor or a shape (quadratic), an exactness, an absolute, a sufficiency, and
# "already" (blind round 4's false sentences; "also" and "shrinks" flagged too many true ones)
_DECISIVE = re.compile(
    r"\b(?:halv\w*|halves|doubl\w*|tripl\w*|twice|quadrupl\w*|exact\w*|equal\w*|identical|"
    r"approximat\w*|never|always|entirely|includ\w*|excludes?|already|quadratic\w*|"
    r"enough)\b")


def _as_float(number: str) -> float | None:
    try:
        return float(number)
    except ValueError:
        return None


@dataclass(frozen=True)
class _Known:
    """The numbers a rubric's own text states: as written, as values, and its ranges."""
    written: frozenset[str]
    values: tuple[float, ...]
    ranges: tuple[tuple[float, float], ...]


def _unknown_number(clause: str, known: _Known) -> bool:
    """Whether a clause states a number the rubric does not know, within 15% (an answer's
    "~30%" for the rubric's "33%" is the same number)."""
    for n in _numbers(clause) - known.written:
        v = _as_float(n)
        if v is None or not (any(abs(v - k) <= 0.15 * abs(k) for k in known.values)
                             or any(lo <= v <= hi for lo, hi in known.ranges)):
            return True
    return False


@functools.lru_cache(maxsize=64)
def _known_numbers(texts: tuple[str, ...]) -> _Known:
    """Numbers the rubric's own text states (``texts``: question, model answer, explanation,
    course text, hints, corrections): an answer may repeat them; any other number is a claim
    the grader has not checked. 0, 1 and 2 are words more than numbers ("1 step", "2x"); a
    range of the text ("20-40%", "2 to 4x") admits every number inside it. Once per rubric,
    as :func:`_reference_grams`."""
    written = {"0", "1", "2"}
    ranges: set[tuple[float, float]] = set()
    for text in texts:
        written |= _numbers(normalize(text))
        ranges |= {(float(a), float(b)) for a, b in re.findall(
            r"(\d+(?:\.\d+)?) ?(?:-|–|to) ?(\d+(?:\.\d+)?)(?![\d.])", text)}
    values = tuple(v for v in map(_as_float, written) if v)
    return _Known(frozenset(written), values, tuple(sorted(ranges)))


def _explained(near: list[_Mention], start: int, end: int, word: str) -> bool:
    """Whether the matches ``near`` (those in the word's clause) vouch for the decisive word at
    ``start``-``end``: a match whose pattern names it (its first four letters are in the
    pattern's source) covers it, or it stands outside every match of a clause a pattern
    matched. A word inside a match whose pattern does not name it came through the pattern's
    gap: the learner's claim, not the pattern's ("accumulation ... gradient" never said
    "already")."""
    inside = [m for m in near if m.span[1] <= start and end <= m.span[2]]
    if inside:
        return any(word[:4] in m.pattern for m in inside)
    return bool(near)


def _quote(sentence: str, limit: int = 160) -> str:
    s = " ".join(sentence.split())
    return f"\"{s if len(s) <= limit else s[:limit - 3] + '...'}\""


def grade_rubric(answer: object, rb: Rubric) -> Result:
    """Grade a short free-text answer with a :class:`Rubric` (see the module docstring)."""
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
        size = f"{n_words} words" if n_words > rb.max_words else f"{len(raw)} characters"
        sizes = {"words": n_words, "characters": len(raw), "over_limit": True}
        if len(raw) > 40 * rb.max_words:   # too long to read here: a person reads it
            return _flagged(0.0, [f"the answer has {size}, far over the limit of {rb.max_words} "
                                  "words: not graded automatically; shorten it to the key points"],
                            [f"{size}: too long to grade automatically"], kind="text",
                            details=sizes)
        # graded on its content, less a fixed cost for the length: a long correct answer is
        # not a wrong one, and the cost is the same whatever the answer says
        content = _grade(raw, rb, n_words)
        score = max(0.0, content.score - LENGTH_COST)
        head = [f"the answer has {size}, over the limit of {rb.max_words} words: "
                f"-{LENGTH_COST:g} for the length ({content.score:.2f} on its content); "
                "shorten it to the key points"]
        reasons = [content.review_reason] if content.needs_review else []
        if n_words > 3 * rb.max_words:
            reasons.append(f"{n_words} words, over three times the limit")
        return _flagged(score, head + content.feedback[1:], reasons, kind="text",
                        found=content.found, missing=content.missing,
                        misconceptions=content.misconceptions,
                        details={**content.details, **sizes})
    return _grade(raw, rb, n_words)


def _grade(raw: str, rb: Rubric, n_words: int) -> Result:
    """Grade ``raw`` (``n_words`` words, within the limit) with ``rb``: read its sentences, blank
    what earns nothing, tally the ideas and the wrong claims, score it, and flag what a person
    should read."""
    chunks, sentences, corrections, listed = _read_sentences(raw, rb)
    lines = [f"{n_words} words (limit {rb.max_words})"]
    if not chunks:
        return Result(0.0, lines + ["no answer given"], kind="text")
    tokens, owner = _joined(chunks)
    copied = _copied_mask(tokens, rb.question)
    excluded, stuffed, stuff_msgs, reasons, metrics = _stuffing(tokens, listed)
    copied_share = sum(copied) / sum(map(_is_word, tokens))
    pasted = _pasted_share(tokens, rb)
    metrics.update(copied_share=round(copied_share, 3), pasted_share=round(pasted, 3),
                   words=n_words)
    if corrections:
        metrics["spelling"] = dict(corrections)
    _note_copying(copied_share, pasted, lines, reasons)
    if stuffed:
        return _flagged(0.0, lines + stuff_msgs + ["no credit for this answer"], reasons,
                        kind="text", missing=tuple(c.name for c in rb.concepts), details=metrics)
    lines += stuff_msgs
    graded = _blanked(tokens, owner, len(chunks), [c or e for c, e in zip(copied, excluded)])
    # words copied from the question earn no idea, but a wrong claim made with them is still
    # the learner's claim ("gradients depend on the batch size", the question's own words)
    claimed_text = _blanked(tokens, owner, len(chunks), excluded)
    t = _Tally()
    _tally_concepts(rb, graded, sentences, t)
    concept_score = min(1.0, t.got / (rb.total_weight * rb.full_credit_at))
    _tally_misconceptions(rb, claimed_text, sentences, t, reasons)
    topic = rb._topic  # type: ignore[attr-defined]
    on_topic = sum(any(rx.search(g) for g in graded) for rx in topic)
    score = _score(rb, t, concept_score, on_topic, own_words=copied_share < 0.3 and pasted < 0.3)
    lines += t.concept_lines + _missing_lines(rb, t.absent, score) + t.mis_lines
    if t.part_capped:
        lines.append(f"the question also asks: {'; '.join(t.parts_left_out)}: not answered, so "
                     f"at most {score:.2f} for the parts answered")
    unchecked = _unchecked_claims(rb, graded, sentences, t.accounted)
    lines += _flag_unchecked(unchecked, score > rb.review_band[0], reasons)
    unread = _unread(rb, graded, sentences, t.accounted) if t.part_capped else []
    reasons += _review_reasons(rb, t, score, concept_score, _disowned(graded, sentences),
                               plain_and_long=n_words >= 20 and (on_topic >= 3 or bool(t.found))
                               and _plain(graded), unread=unread)
    if not t.found and not t.wrong and not t.denied:
        lines.insert(1, "none of the expected ideas were found: does this answer the question?")
    metrics.update(concept_score=round(concept_score, 3), penalty=round(t.penalty, 3))
    return _flagged(score, lines, reasons, kind="text", found=tuple(t.found),
                    missing=tuple(t.missing), misconceptions=tuple(t.wrong),
                    details={**metrics, "denied": t.denied, "named_only": t.named})


def _read_sentences(raw: str, rb: Rubric
                    ) -> tuple[list[list[str]], list[str], dict[str, str], bool]:
    """The answer's sentences that hold a word: (their normalised tokens, spelling corrected;
    the sentences as written; the corrections made; whether the answer is written as a list)."""
    fix = _corrector(rb)
    sentences = [s for s in _SENTENCE_END.split(raw) if s.strip()]
    listed = _written_as_list(raw)
    if listed:   # one item a line: each line is a sentence of its own
        sentences = [ln for s in sentences for ln in s.splitlines() if ln.strip()]
    chunks: list[list[str]] = []
    raw_kept: list[str] = []
    corrections: dict[str, str] = {}
    for s in sentences:
        toks = []
        for t in normalize(s).split():
            c = fix.correct(t) if _is_word(t) else t
            if c != t:
                corrections[t] = c
            toks.append(c)
        if any(map(_is_word, toks)):
            chunks.append(toks)
            raw_kept.append(s)
    return chunks, raw_kept, corrections, listed


def _joined(chunks: list[list[str]]) -> tuple[list[str], list[int]]:
    """The sentences' tokens in one list, a "." between two sentences, and the sentence each
    token belongs to (-1 for the "." between)."""
    tokens: list[str] = []
    owner: list[int] = []
    for k, toks in enumerate(chunks):
        if tokens:
            tokens.append(".")
            owner.append(-1)
        tokens += toks
        owner += [k] * len(toks)
    return tokens, owner


def _note_copying(copied_share: float, pasted: float, lines: list[str],
                  reasons: list[str]) -> None:
    """Tell the learner (``lines``) and the instructor (``reasons``) about words copied from the
    question or pasted from the course's text."""
    if copied_share >= 0.5:
        lines.append("most of the answer repeats the question: the repeated words earn no credit")
    elif copied_share > 0:
        lines.append("words copied from the question earn no credit")
    if 0.3 <= copied_share < 0.6:
        reasons.append(f"{copied_share:.0%} of the words repeat the question")
    if pasted >= 0.3:
        reasons.append(f"{pasted:.0%} of the words are pasted from the course's model answer, "
                       "notes or the grader's hints")
        lines.append("much of this answer is the course's or the grader's own text: write it in "
                     "your own words (flagged for your instructor)")


def _blanked(tokens: list[str], owner: list[int], n: int, blank: list[bool]) -> list[str]:
    """Each of the ``n`` sentences as text, its ``blank`` tokens replaced by commas."""
    return [_tidy("," if blank[i] else tokens[i] for i in range(len(tokens)) if owner[i] == k)
            for k in range(n)]


@dataclass
class _Tally:
    """What a rubric's concepts and misconceptions make of an answer, in the order found."""
    found: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    denied: list[str] = field(default_factory=list)       # concepts the answer denies
    named: list[str] = field(default_factory=list)        # concepts named but not stated
    absent: list[tuple[str, str]] = field(default_factory=list)   # (name, hint)
    wrong: list[str] = field(default_factory=list)        # misconceptions asserted
    got: float = 0.0
    penalty: float = 0.0
    fatal: bool = False
    concept_lines: list[str] = field(default_factory=list)
    mis_lines: list[str] = field(default_factory=list)
    accounted: list[_Mention] = field(default_factory=list)   # every match of a pattern
    topicless: bool = False   # ideas matched in an answer that never names the question's topic
    parts_left_out: list[str] = field(default_factory=list)   # the question's parts not answered
    part_capped: bool = False  # the score is the cap for the parts left out (_part_cap)


def _tally_concepts(rb: Rubric, graded: list[str], sentences: list[str], t: _Tally) -> None:
    """Read each concept's mentions in the ``graded`` sentences: found, contradicted, named
    but not stated, or absent."""
    full = rb.total_weight * rb.full_credit_at
    claimed: list[tuple[int, int, int]] = []   # the words that already earned a concept
    for c in rb.concepts:
        mentions = _mentions(c._compiled, graded, sentences,  # type: ignore[attr-defined]
                             c.negatable, False)
        t.accounted += mentions
        # one phrase earns one idea: "an extra forward pass" is the recomputation, not also
        # its cost and its size
        fresh = [m for m in mentions if m.polarity == "assert"
                 and not any(m.overlaps(span) for span in claimed)]
        v = fresh[0] if fresh else _verdict([m for m in mentions if m.polarity != "assert"])
        if v is None and mentions:
            v = mentions[0]
            t.concept_lines.append(f"not counted twice: {c.name} (\"{v.evidence}\" already "
                                   "earned another idea)")
            t.missing.append(c.name)
            continue
        if v is not None and v.polarity == "assert":
            claimed.append(v.span)
            t.found.append(c.name)
            t.got += c.weight
            t.concept_lines.append(f"found: {c.name} (\"{v.evidence}\") in {_quote(v.sentence)}")
            continue
        t.missing.append(c.name)
        if v is not None and v.polarity == "deny":
            cost = round(c.weight / full, 2)
            t.penalty += cost
            t.denied.append(c.name)
            t.concept_lines.append(f"contradicted: {c.name} (-{cost:g}): the answer denies it in "
                                   f"{_quote(v.sentence)}" + (f"; {c.hint}" if c.hint else ""))
        elif v is not None:
            t.named.append(c.name)
            t.concept_lines.append(f"named but not stated: {c.name}, in {_quote(v.sentence)}"
                                   + (f" - {c.hint}" if c.hint else ""))
        else:
            t.absent.append((c.name, c.hint))


def _tally_misconceptions(rb: Rubric, claimed_text: list[str], sentences: list[str], t: _Tally,
                          reasons: list[str]) -> None:
    """Read each misconception's mentions in the sentences as ``claimed`` (the question's
    words kept): asserted it costs its penalty, reported it goes to ``reasons``."""
    penalized: list[tuple[int, int, int]] = []  # one false phrase loses points once
    for mc in rb.misconceptions:
        mentions = _mentions(mc._compiled, claimed_text, sentences,  # type: ignore[attr-defined]
                             True, True)
        t.accounted += mentions
        v = _verdict(mentions)
        if v is None:
            continue
        if v.polarity == "assert" and any(v.overlaps(span) for span in penalized):
            t.wrong.append(mc.name)
            t.fatal = t.fatal or mc.fatal
            t.mis_lines.append(f"misconception: {mc.name} (\"{v.evidence}\", the same phrase: "
                               f"not counted twice) in {_quote(v.sentence)}"
                               + (f": {mc.correction}" if mc.correction else ""))
            continue
        if v.polarity == "assert":
            penalized.append(v.span)
            t.wrong.append(mc.name)
            t.penalty += mc.penalty
            t.fatal = t.fatal or mc.fatal
            t.mis_lines.append(f"misconception: {mc.name} (\"{v.evidence}\", -{mc.penalty:g}) in "
                               f"{_quote(v.sentence)}"
                               + (f": {mc.correction}" if mc.correction else ""))
        elif v.polarity == "report":
            reasons.append(f"misconception phrase '{mc.name}' ignored as reported, not claimed")


def _score(rb: Rubric, t: _Tally, concept_score: float, on_topic: int, own_words: bool) -> float:
    """The score: the concepts' less the penalties, then its floors and caps. ``on_topic``: how
    many of the rubric's topic patterns the answer matches; ``own_words``: little of it copied
    from the question or pasted from the course."""
    score = max(0.0, concept_score - t.penalty)
    if t.found and not on_topic and rb._topic:  # type: ignore[attr-defined]
        # an idea's word in an answer that never touches the question's topic is a loose
        # word ("kernel-launch overhead" is not checkpointing's cost)
        score = 0.0
        t.topicless = len(t.found) >= 2
        t.concept_lines.append("no credit: the answer never speaks of the question's topic "
                               f"({', '.join(rb.topic[:4])}, ...), so the words that matched "
                               "are not its ideas")
    if (not t.penalty and own_words and on_topic
            and any(c.weight >= 1.0 for c in rb.concepts if c.name in t.found)):
        # one correct key idea of five is worth a quarter of the points, as an interviewer gives
        # it; in an answer about the question's topic (one loose word elsewhere is no idea)
        score = max(score, FIRST_IDEA)
    found = [c for c in rb.concepts if c.name in t.found]
    main = min(1.0, max(c.weight for c in rb.concepts))   # the weight of a main idea
    if len(found) == 1 and found[0].weight < main and score < rb.review_band[0]:
        # a detail of the answer with nothing it details ("vLLM", "effective batch"): a loose
        # word, not an answer to the question
        score = 0.0
        t.concept_lines.append(f"no credit: one detail ({found[0].name}) without any of the "
                               "question's main ideas")
    if t.fatal:
        score = min(score, FATAL_CAP)
    # a part the question asks for by name, left out: full credit at full_credit_at does not
    # cover it (the answer loses that part's share of the weight)
    left_out = [c for c in rb.concepts if c.name in rb.required and c.name not in t.found]
    if left_out:
        score = min(score, 1.0 - sum(c.weight for c in left_out) / rb.total_weight)
    cap = _part_cap(rb, t)
    if cap is not None and score > cap:
        score = cap
        t.part_capped = True
    return score


PART_SHARE = 0.9   # each part of a question answered is worth 0.9 / parts at most, while
#                    another part is left out entirely (see _part_cap)


def _part_cap(rb: Rubric, t: _Tally) -> float | None:
    """The most an answer may score that leaves a whole part of the question out: the
    question asks "why ..., and when not?" and the answer says only why. Each part answered is
    worth ``PART_SHARE / len(parts)``, so one of two parts is 0.45, two of three 0.6, as a
    strict but fair marker gives it. ``None`` when every part is answered, or none is (the
    score is low then anyway). The parts left out are noted in ``t.parts_left_out``."""
    if not rb.parts:
        return None
    t.parts_left_out = [label for label, names in rb.parts
                        if not any(n in t.found for n in names)]
    n_left = len(t.parts_left_out)
    if not n_left or n_left == len(rb.parts):
        return None
    return round(PART_SHARE * (len(rb.parts) - n_left) / len(rb.parts), 2)


def _missing_lines(rb: Rubric, absent: list[tuple[str, str]], score: float) -> list[str]:
    """A line for each concept the answer never mentions, with its hint."""
    lines = []
    for name, hint in absent:
        if name in rb.required:
            lines.append(f"missing a part the question asks for: {name}"
                         + (f" - {hint}" if hint else ""))
        elif score >= 1.0:
            lines.append(f"could also say: {name}")
        else:
            lines.append(f"missing: {name}" + (f" - {hint}" if hint else ""))
    return lines


def _sentences_with(rb: Rubric, graded: list[str], sentences: list[str],
                    accounted: list[_Mention], true_polarities: tuple[str, ...],
                    flags: Callable[[str, list[_Mention], int], bool]) -> list[str]:
    """The sentences (as written) with a clause for which ``flags(clause, near, start)`` holds:
    ``near`` are the mentions that overlap the clause (``accounted``, and the rubric's true
    claims read with one of ``true_polarities``), ``start`` its offset in its sentence."""
    true = _mentions(rb._true, graded, sentences, True, False)  # type: ignore[attr-defined]
    accounted = accounted + [m for m in true if m.polarity in true_polarities]
    out: list[str] = []
    for k, text in enumerate(graded):
        for a, b in _clauses(text):
            near = [m for m in accounted if m.span[0] == k and m.span[1] < b and m.span[2] > a]
            if flags(text[a:b], near, a):
                out.append(sentences[k])
                break
    return out


def _unchecked_claims(rb: Rubric, graded: list[str], sentences: list[str],
                      accounted: list[_Mention]) -> list[str]:
    """The sentences with a clause no pattern accounts for: one that makes a technical claim no
    concept or misconception matched, or states a number the rubric does not know, is one the
    grader cannot vouch for, so a score that rests on the others is provisional (a person reads
    it); the learner sees which sentence. A pattern vouches for the decisive words it names, in
    its own match: not for the words its gaps let through (a pattern "accumulation ...
    gradient" never said what its gap holds)."""
    known = _known_numbers((rb.question, *rb.reference_texts(), *rb.facts))

    def unchecked(clause: str, near: list[_Mention], a: int) -> bool:
        loose = [w for w in _DECISIVE.finditer(clause)
                 if not _explained(near, a + w.start(), a + w.end(), w.group())]
        return bool(loose and _technical_claim(clause, rb._topic)  # type: ignore[attr-defined]
                    ) or _unknown_number(clause, known)

    return _sentences_with(rb, graded, sentences, accounted, ("assert",), unchecked)


def _unread(rb: Rubric, graded: list[str], sentences: list[str],
            accounted: list[_Mention]) -> list[str]:
    """The sentences with a technical clause (:func:`_technical_claim`) that no concept,
    misconception or true claim of the rubric touches: what the grader did not read at all. A
    part of the question the answer seems to leave out may be there, in other words."""
    topic = rb._topic  # type: ignore[attr-defined]
    return _sentences_with(rb, graded, sentences, accounted, ("assert", "deny", "name", "report"),
                           lambda clause, near, a: not near and _technical_claim(clause, topic))


PLAIN_DENSITY = 0.08   # blind rounds r3-r9, answers that matched little: the two analogies at
#                        5-6%, confidently wrong prose at 3-24% (3 of 20 under 8%: reviewed)


def _plain(graded: list[str]) -> bool:
    """Whether the answer is written in plain words: fewer than ``PLAIN_DENSITY`` of its words
    name a consumer, a technique, a dtype, a unit, a number or a change (:data:`_CLAIM`)."""
    text = " ".join(graded)
    words = sum(map(_is_word, text.split()))
    return len(_CLAIM.findall(text)) < PLAIN_DENSITY * words


def _flag_unchecked(unchecked: list[str], above_band: bool, reasons: list[str]) -> list[str]:
    """The learner's lines for the claims the grader could not check (the first two), and the
    reason to review; none when the score is at or below the review band anyway."""
    if not unchecked or not above_band:
        return []
    reasons.append(f"{len(unchecked)} sentence(s) with a technical claim the grader could "
                   f"not check, e.g. {_quote(unchecked[0], 100)}")
    return [f"I could not check this claim: {_quote(sentence)} (your instructor will)"
            for sentence in unchecked[:2]]


def _disowned(graded: list[str], sentences: list[str]) -> str | None:
    """The first sentence that disowns what the answer states, as written."""
    return next((sentences[k] for k, text in enumerate(graded) if _DISOWNS.search(text)), None)


def _review_reasons(rb: Rubric, t: _Tally, score: float, concept_score: float,
                    disowned: str | None, plain_and_long: bool, unread: list[str]) -> list[str]:
    """Why a person should read the answer, beyond the claims the grader could not check.
    ``disowned``: a sentence that takes back what the answer states; ``plain_and_long``: 20
    words or more, in plain words (:func:`_plain`), that match an idea or three of the
    rubric's topic patterns; ``unread``: the sentences no pattern read (:func:`_unread`), looked
    for only when a part of the question seems left out."""
    lo, hi = rb.review_band
    reasons = []
    if t.wrong and concept_score >= 0.6:
        reasons.append("a misconception next to strong concepts")
    if t.denied and t.found and score > lo:
        # a denial beside stated ideas: a nuance of a good answer, or the answer taking its
        # ideas back; decided only when the score is low anyway
        reasons.append("the answer denies an idea next to ideas it states")
    if disowned is not None and t.found:
        # "my roommate insists that ... He is wrong about every word": the ideas are stated
        # and taken back; which of them the learner holds, only a person can tell
        reasons.append(f"a sentence disowns what the answer states ({_quote(disowned, 80)}): the "
                       "ideas found may not be the learner's")
    if t.topicless:
        # one loose word is no idea, but two or more of the question's ideas in an answer that
        # avoids the topic's words may be the learner's own wording (a metaphor): the zero is
        # not one the grader can stand behind
        reasons.append(f"{len(t.found)} of the question's ideas matched in an answer that never "
                       "names its topic: own wording, or loose words? (scored 0 until read)")
    if t.part_capped and unread:
        reasons.append(f"the answer seems to leave out {'; '.join(t.parts_left_out)}, but "
                       f"{len(unread)} sentence(s) the grader could not read may answer it, "
                       f"e.g. {_quote(unread[0], 100)}")
    elif lo < score < hi and not (t.part_capped and not t.wrong and not t.denied):
        # a score capped for a part left out, with every claim read, is one the grader can
        # stand behind: the part is not there
        reasons.append(f"score {score:.2f} is in the review band {lo:g}-{hi:g}")
    if score <= lo and not t.wrong and not t.denied and plain_and_long:
        # technical prose the rubric does not match is wrong or off the point, and decided so;
        # plain words (an analogy, a story) may be the ideas in words no pattern knows
        reasons.append("an answer in plain words that matched little of the rubric: its own "
                       "wording of the ideas, or no answer? (scored low until read)")
    return reasons
