"""The written-answer grader against blind round 4 (issue 32): 120 answers, 12 classes x the 10
rubrics, written by a helper that read the questions, the notebooks, REFERENCE.md and the
course brief, but never the grader, its patterns, the corpus or round r3
(tests/grading/data/answers_blind_r4.jsonl; band: the writer's, fixed before any scoring).

Measured ONCE before any tuning on it (2026-12-03, the grader of commit bb6e300):
    decided (not provisional) inside their band        37/57  64.9%
    provisional                                        63/120 52.5%
    a wrong class (confidently wrong, negated, keyword list, off-topic) decided above 0.2: 2
    a one-false-claim answer decided above its band:   7 of 10 (all at 1.00, unflagged)
    a strong answer decided below 0.7:                 1
Then tuned on it, so now development data (the next blind round is written fresh):
hard-wrapped prose is not a list, one false phrase loses points once, the course's numbers
per question (bank.FACTS) and true claims beside the concepts (bank.TRUE_CLAIMS) are known,
a pattern vouches only for the decisive words it names (not those its gaps let through),
"already", "quadratic", "enough" are decisive, LayerNorm breaking accumulation and GradScaler
growing the scale on an overflow are misconceptions. After: decided in band 45/61 73.8%,
provisional 49.2%, one-false-claim decided above band 3 (round r3 moved too: 49/53 -> 53/57
decided in band, 51.8% -> 48.2% provisional). The tests keep these from falling back.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from answer_rounds import figures, grade_round, show as _show  # tests/
from memlab.grading.answers.grade import RUBRICS, grade_text

CORPUS = Path(__file__).resolve().parent / "data" / "answers_blind_r4.jsonl"
WRONG = ("confidently-wrong", "negated", "keyword-salad", "off-topic")
STRONG = ("strong-unusual-wording", "strong-terse", "typos", "strong-long")
DECIDED_IN_BAND_FLOOR = 0.72
PROVISIONAL_CEILING = 0.51
ONE_FALSE_CLAIM_DECIDED_ABOVE_BAND = 3   # of 10 (first look: 7)
pytestmark = pytest.mark.xdist_group("answer_corpus")


@pytest.fixture(scope="module")
def graded() -> list[dict]:
    return grade_round(CORPUS)


def test_the_round_covers_every_rubric_and_class(graded):
    assert len(graded) == 120
    per = defaultdict(set)
    for g in graded:
        per[g["rubric"]].add(g["class"])
    assert set(per) == set(RUBRICS) and all(len(c) == 12 for c in per.values()), dict(per)


def test_one_false_claim_is_mostly_sent_to_review_or_marked_down(graded):
    high = [g for g in graded if g["class"] == "one-false-claim" and not g["provisional"]
            and g["score"] > g["band"][1] + 1e-9]
    assert len(high) <= ONE_FALSE_CLAIM_DECIDED_ABOVE_BAND, _show(high)


def test_wrong_classes_decided_above_a_fifth_stay_few(graded):
    high = [g for g in graded
            if g["class"] in WRONG and not g["provisional"] and g["score"] > 0.2]
    assert len(high) <= 2, _show(high)


def test_strong_answers_decided_below_0_7_stay_few(graded):
    low = [g for g in graded if g["class"] in STRONG and not g["provisional"] and g["score"] < 0.7]
    assert len(low) <= 1, _show(low)


def test_decided_answers_and_the_provisional_share_hold_their_ground(graded):
    decided, rate, share = figures(graded)
    print(f"\nblind round r4 (development data now): decided in band "
          f"{sum(g['in_band'] for g in decided)}/{len(decided)} {rate:.1%}, "
          f"provisional {share:.1%}")
    assert rate >= DECIDED_IN_BAND_FLOOR, f"decided in band {rate:.1%}\n\n" + _show(
        [g for g in decided if not g["in_band"]])
    assert share <= PROVISIONAL_CEILING, f"provisional {share:.1%}"


def test_hard_wrapped_prose_is_graded_as_sentences():
    """A notebook answer wrapped at a width is prose, not a list: a claim runs on across lines
    (blind mutant b4_peak_grads_scale_with_batch: its false claim spanned a line break)."""
    wrapped = ("With a batch of 16 the activations dominate: right after the forward pass every\n"
               "saved activation is still alive, on top of the parameters and the optimizer\n"
               "state. Activations and gradients scale\n"
               "with the batch size, while parameters and optimizer state do not. With a batch\n"
               "of 1 the optimizer step is the highest: parameters, all the gradients, both\n"
               "Adam moments and the temporaries of the update are live at once.\n")
    r = grade_text(wrapped, "peak_moves")
    assert "gradients or optimizer state grow with the batch" in r.report(), r.report()
    assert r.score <= 0.6, r.report()
