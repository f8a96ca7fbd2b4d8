"""Typo tolerance for written answers: a misspelt course word is read as the course word.

Used by: :mod:`memlab.grading.answers.concepts` (the concept-rubric engine behind ``ml.rubric.grade_text``),
before any rubric pattern is matched.

A word is corrected only when all of these hold: it is not an English word (pyspellchecker's
English frequency list says so), it is not a word of the course (the rubric texts, their
patterns' literal words and the function words), it has at least 4 letters, and exactly one
course word is closest to it within 1 edit (2 edits for words of 8 letters or more;
an edit is an insertion, a deletion, a substitution or a swap of two neighbours). So
"lineer" -> "linear", "gradiants" -> "gradients", "recomptues" -> "recomputes", while
"shared" (an English word) never becomes "shard", and an unknown word with two equally
close course words is left alone. Every correction is listed in the result's details.

Why pyspellchecker (pinned in requirements.txt and environment.yml): it is small, pure
Python, maintained, and ships its English word list inside the wheel, so nothing is
downloaded at run time (graders run offline). Only its word list is used, as the "is this
a real English word" oracle; the candidates come from the course's own vocabulary, because
a general corrector would "fix" course terms (fsdp, bf16, nvidia) into English words. NLTK
and spaCy were not used: both need their data (WordNet, models) downloaded separately.
No lemmatizer either: rubric patterns already match word stems (``recomput\\w*``).
"""
from __future__ import annotations

import functools
import re
from typing import Iterable

__all__ = ["Corrector", "english_word"]


@functools.lru_cache(maxsize=1)
def _english() -> frozenset[str]:
    try:
        from spellchecker import SpellChecker
    except ImportError:  # the grader still works, without typo tolerance
        return frozenset()
    return frozenset(SpellChecker(language="en", distance=1).word_frequency.dictionary)


def english_word(word: str) -> bool:
    """True when ``word`` (lower case) is in the English word list."""
    return word in _english()


def _distance(a: str, b: str, limit: int) -> int:
    """Optimal-string-alignment edit distance, or ``limit + 1`` once it exceeds ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[-1]


_WORD = re.compile(r"^[a-z]+$")


def pattern_words(pattern: str) -> set[str]:
    """Literal words of a rubric regex: ``optimi[sz]er`` -> optimiser, ``recomput\\w*`` -> recomput."""
    p = re.sub(r"\\[wWsSdDb][*+?]?|\{\d*,?\d*\}|\(\?[:!=<]+|[()|?*+^$]", " ", pattern)
    p = re.sub(r"\[([^\]])[^\]]*\]", r"\1", p).replace("\\", "")
    return {w for w in re.findall(r"[a-z]{4,}", p)}


class Corrector:
    """Corrects misspelt words towards a fixed vocabulary (see the module docstring)."""

    def __init__(self, vocabulary: Iterable[str]):
        self.vocabulary = frozenset(w for w in vocabulary if _WORD.match(w))
        self._by_len: dict[int, list[str]] = {}
        for w in self.vocabulary:
            self._by_len.setdefault(len(w), []).append(w)

    def known(self, word: str) -> bool:
        return word in self.vocabulary or english_word(word)

    @functools.lru_cache(maxsize=4096)
    def correct_word(self, word: str) -> str:
        """The course word ``word`` is a typo of, or ``word`` itself."""
        if len(word) < 4 or not _WORD.match(word) or self.known(word) or not _english():
            return word
        limit = 2 if len(word) >= 8 else 1
        best, best_d = [], limit + 1
        for n in range(len(word) - limit, len(word) + limit + 1):
            for cand in self._by_len.get(n, ()):
                d = _distance(word, cand, limit)
                if d < best_d:
                    best, best_d = [cand], d
                elif d == best_d and d <= limit:
                    best.append(cand)
        if len(best) > 1:  # a tie: prefer the candidates that keep the first letter
            best = [c for c in best if c[0] == word[0]]
        return best[0] if len(best) == 1 else word

    def correct(self, token: str) -> str:
        """A token, corrected part by part (``memory_alocated`` -> ``memory_allocated``)."""
        if "_" in token:
            return "_".join(self.correct_word(part) for part in token.split("_"))
        return self.correct_word(token)
