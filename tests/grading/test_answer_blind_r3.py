"""The written-answer grader against a BLIND round (issue 32): 110 answers, 11 classes x the 10
rubrics, written by a helper that read the questions, the notebooks and REFERENCE.md but never
the grader, its patterns or the corpus (tests/grading/data/answers_blind_r3.jsonl; band: the
fraction of the points a strict but fair interviewer gives, the writer's label).

Measured ONCE before any tuning on it (2026-12-03, the grader of commit dd22ea9):
    decided (not provisional) inside their band   40/59  67.8%
    provisional                                   51/110 46.4%
    a wrong class (confidently wrong, negated, keyword list, off-topic) decided above 0.2: 2
    a one-false-claim answer decided above its band: 4
    a strong answer (unusual wording, terse, typos) decided below 0.7: 0
The round then became development data (the length rule, list forms, the topic rule, the
facts with a direction and wrong claims in the question's words were tuned on it); the next
blind round is written fresh. The tests below hold what the issue's Done-means require and
this round now meets, and keep the other figures from falling back; the table is printed.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from answer_rounds import figures, grade_round, show  # tests/
from memlab.grading.answers.grade import RUBRICS

CORPUS = Path(__file__).resolve().parent / "data" / "answers_blind_r3.jsonl"
WRONG = ("confidently-wrong-keywords", "negated", "keyword-salad", "off-topic")
STRONG = ("strong-unusual-wording", "strong-terse", "typos")
# where the round stands after tuning (development data): a floor, not the target (97% decided
# in band, at most 25% provisional: not met, see the note)
DECIDED_IN_BAND_FLOOR = 0.92
PROVISIONAL_CEILING = 0.50
pytestmark = pytest.mark.xdist_group("answer_corpus")


@pytest.fixture(scope="module")
def graded() -> list[dict]:
    return grade_round(CORPUS)


def _table(graded: list[dict]) -> str:
    rows = defaultdict(lambda: [0, 0, 0])       # answers, provisional, decided in band
    for g in graded:
        for key in (g["rubric"], g["class"]):
            rows[key][0] += 1
            rows[key][1] += g["provisional"]
            rows[key][2] += (not g["provisional"]) and g["in_band"]
    return "\n".join(f"  {k:28s} {n:3d} answers, {p:3d} provisional, {ok:3d}/{n - p:3d} decided "
                     "in band" for k, (n, p, ok) in sorted(rows.items()))


def test_the_round_covers_every_rubric_and_class(graded):
    assert len(graded) == 110
    assert {g["rubric"] for g in graded} == set(RUBRICS)
    per = defaultdict(set)
    for g in graded:
        per[g["rubric"]].add(g["class"])
    assert all(len(c) == 11 for c in per.values()), dict(per)


def test_no_wrong_class_is_decided_above_a_fifth(graded):
    high = [g for g in graded if g["class"] in WRONG and not g["provisional"] and g["score"] > 0.2]
    assert not high, "\n\n".join(f"{g['rubric']} {g['class']} {g['score']:.2f}\n{g['report']}"
                                 for g in high)


def test_no_strong_answer_is_decided_below_0_7(graded):
    low = [g for g in graded if g["class"] in STRONG and not g["provisional"] and g["score"] < 0.7]
    assert not low, "\n\n".join(f"{g['rubric']} {g['class']} {g['score']:.2f}\n{g['report']}"
                                for g in low)


def test_a_long_answer_is_graded_on_its_content_never_zero_for_its_length(graded):
    for g in graded:
        if g["class"] == "long-rambling":
            assert "for the length" in g["report"], g["report"]
            assert "no credit" not in g["report"].splitlines()[1], g["report"]


def test_decided_answers_and_the_provisional_share_hold_their_ground(graded):
    decided, rate, share = figures(graded)
    print(f"\nblind round r3 (development data now): decided in band "
          f"{sum(g['in_band'] for g in decided)}/{len(decided)} {rate:.1%}, provisional "
          f"{share:.1%}\n{_table(graded)}")
    misses = show([g for g in decided if not g["in_band"]])
    assert rate >= DECIDED_IN_BAND_FLOOR, f"decided in band {rate:.1%}\n\n{misses}"
    assert share <= PROVISIONAL_CEILING, f"provisional {share:.1%}"
