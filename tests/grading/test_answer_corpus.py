"""The written-answer grader against a labelled corpus, and the feedback rules of issue 16.

tests/grading/data/answers.jsonl holds the labelled answers to the ten course rubrics (106 each
for the first seven; 47 for ``kv_cache_tradeoff``, issue 17: 27 dev, 20 heldout, all written before
the rubric was tuned on the dev half; its heldout half was measured once, 19/20 in band; 01's
``peak_moves`` and ``bytes_conventions``: see NEW_RUBRIC_FLOOR), one JSON object a line:

    {"rubric": id, "class": answer class, "band": [lo, hi] (fraction of the points a strict
     but fair interviewer gives), "split": "dev" | "heldout", "answer": text,
     "review": true (optional: the grader must flag it for the instructor)}

Classes: strong-unusual-wording, strong-terse, partial, confidently-wrong-keywords, negated,
keyword-salad, off-topic, pasted-course-text, pasted-hints, typos, other-order. Within each
rubric and class the first 406 answers alternate dev / heldout; they were all written before
the grader was tuned. That first heldout half was measured once (93.9% in band) and then
joined the dev half (``"was": "heldout-1"``); the current heldout half (196 answers, 28 per
rubric) was written after that measurement and before any further tuning. The grader's
authors tune against the dev half only. A misgraded answer an instructor finds goes into
the dev half; a heldout half, once looked at, joins dev and a fresh one is written.

The in-band table (per rubric and per class, both halves) is printed at the end of the
pytest run (see conftest.py beside this file) and by ``python tests/grading/test_answer_corpus.py``.
"""
from __future__ import annotations

import json
import re
import unicodedata
from collections import defaultdict
from pathlib import Path

import pytest

from memlab.grading.answers.concepts import LENGTH_COST
from memlab.grading.answers.grade import RUBRICS, grade_numeric, grade_text

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "data" / "answers.jsonl"
CLASSES = {"strong-unusual-wording", "strong-terse", "partial", "confidently-wrong-keywords",
           "negated", "keyword-salad", "off-topic", "pasted-course-text", "pasted-hints",
           "typos", "other-order"}
WRONG_CLASSES = ("confidently-wrong-keywords", "negated")
HELDOUT_TARGET = 0.95
# Rubrics that joined the bank after the corpus above was built, with the in-band rate their
# first fresh held-out half gave when it was measured once (written blind, never tuned on):
# they must not fall below it, and they reach HELDOUT_TARGET only with a fresh round.
# 01's two written answers (moved from 01's hidden tests into the bank, 2026-12-02): dev 95 lines
# (written blind, 57/95 in band on the rubric as it was in the notebook), held-out 48 lines
# measured once after tuning on dev: 40/48.
NEW_RUBRIC_FLOOR = {"peak_moves": 20 / 24, "bytes_conventions": 20 / 24}
pytestmark = pytest.mark.xdist_group("answer_corpus")   # grade the corpus once, on one worker
WRONG_CAP = 0.2


def load() -> list[dict]:
    return [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


def grade_all() -> list[dict]:
    out = []
    for rec in load():
        r = grade_text(rec["answer"], rec["rubric"])
        lo, hi = rec["band"]
        ok = lo - 1e-9 <= r.score <= hi + 1e-9 and (not rec.get("review") or r.needs_review)
        out.append({**rec, "score": r.score, "flagged": r.needs_review, "ok": ok,
                    "report": r.report()})
    return out


def table(graded: list[dict]) -> str:
    """In-band counts per rubric and per class, dev and heldout side by side."""
    def rows(key: str) -> list[str]:
        cells: dict[str, dict[str, list[int]]] = defaultdict(lambda: {"dev": [0, 0], "heldout": [0, 0]})
        for g in graded:
            c = cells[g[key]][g["split"]]
            c[0] += g["ok"]
            c[1] += 1
        lines = []
        for name in sorted(cells):
            parts = [f"{a:3d}/{n:3d} {a / n:6.1%}" if n else "      -       "
                     for a, n in (cells[name]["dev"], cells[name]["heldout"])]
            lines.append(f"  {name:28s} {parts[0]}   {parts[1]}")
        return lines

    tot = {s: [sum(g["ok"] for g in graded if g["split"] == s),
               sum(1 for g in graded if g["split"] == s)] for s in ("dev", "heldout")}
    worst = {s: max((g["score"] for g in graded if g["split"] == s and g["class"] in WRONG_CLASSES),
                    default=0.0) for s in ("dev", "heldout")}
    head = f"  {'':28s} {'dev':>14s}   {'heldout':>14s}"
    return "\n".join(
        ["written-answer corpus: answers inside their band (flagged where a review is required)",
         head, "  per rubric:"] + rows("rubric") + ["  per class:"] + rows("class") +
        [f"  {'all':28s} " + "   ".join(f"{a:3d}/{n:3d} {a / n:6.1%}" for a, n in tot.values()),
         f"  highest score of a confidently-wrong or negated answer: dev {worst['dev']:.2f}, "
         f"heldout {worst['heldout']:.2f} (cap {WRONG_CAP})"])


@pytest.fixture(scope="module")
def graded(request) -> list[dict]:
    result = grade_all()
    cache = getattr(request.config, "cache", None)
    if cache is not None:                      # printed by conftest.py at the end of the run
        cache.set("memlab/answer_corpus_table", table(result))
    return result


# ------------------------------------------------------------------ the corpus itself
def test_corpus_covers_every_rubric_and_class():
    recs = load()
    assert len(recs) >= 400
    per_rubric = defaultdict(int)
    for r in recs:
        assert r["rubric"] in RUBRICS, r
        assert r["class"] in CLASSES, r
        assert r["split"] in ("dev", "heldout"), r
        lo, hi = r["band"]
        assert 0 <= lo <= hi <= 1, r
        assert r["answer"].strip(), r
        per_rubric[r["rubric"]] += 1
    assert set(per_rubric) == set(RUBRICS)
    assert min(per_rubric.values()) >= 40, dict(per_rubric)
    for rid in RUBRICS:
        for split in ("dev", "heldout"):
            classes = {r["class"] for r in recs if r["rubric"] == rid and r["split"] == split}
            assert classes >= CLASSES - {"pasted-hints"}, (rid, split, CLASSES - classes)
    own = [r["answer"] for r in recs if not r["class"].startswith("pasted")]
    assert len(set(own)) == len(own), "duplicate answers (only pasted course text may repeat)"


# ------------------------------------------------------------------ the grader on it
def test_heldout_half_lands_in_band(graded):
    held = [g for g in graded if g["split"] == "heldout" and g["rubric"] not in NEW_RUBRIC_FLOOR]
    rate = sum(g["ok"] for g in held) / len(held)
    misses = "\n\n".join(f"{g['rubric']} {g['class']} band {g['band']}: {g['answer']}\n{g['report']}"
                         for g in held if not g["ok"])
    assert rate >= HELDOUT_TARGET, f"heldout in band {rate:.1%}\n{table(graded)}\n\n{misses}"


@pytest.mark.parametrize("rid", sorted(NEW_RUBRIC_FLOOR))
def test_a_new_rubrics_heldout_half_keeps_its_first_measurement(graded, rid):
    held = [g for g in graded if g["split"] == "heldout" and g["rubric"] == rid]
    assert len(held) >= 20, f"{rid}: {len(held)} held-out answers"
    rate = sum(g["ok"] for g in held) / len(held)
    misses = "\n\n".join(f"{g['class']} band {g['band']}: {g['answer']}\n{g['report']}"
                         for g in held if not g["ok"])
    assert rate >= NEW_RUBRIC_FLOOR[rid] - 1e-9, f"{rid} heldout in band {rate:.1%}\n\n{misses}"


@pytest.mark.parametrize("split", ["dev", "heldout"])
def test_no_confidently_wrong_or_negated_answer_above_the_cap(graded, split):
    # a new rubric's held-out half may exceed the cap only on an answer it sends to review
    high = [g for g in graded if g["split"] == split and g["class"] in WRONG_CLASSES
            and g["score"] > WRONG_CAP
            and not (split == "heldout" and g["rubric"] in NEW_RUBRIC_FLOOR and g["flagged"])]
    assert not high, "\n\n".join(f"{g['split']} {g['rubric']} {g['class']} {g['score']:.2f}: "
                                 f"{g['answer']}\n{g['report']}" for g in high)


def test_dev_half_lands_in_band(graded):
    # the half the grader was tuned on: a regression guard, reported apart from heldout
    dev = [g for g in graded if g["split"] == "dev"]
    rate = sum(g["ok"] for g in dev) / len(dev)
    misses = "\n\n".join(f"{g['rubric']} {g['class']} band {g['band']}: {g['answer']}\n{g['report']}"
                         for g in dev if not g["ok"])
    assert rate >= HELDOUT_TARGET, f"dev in band {rate:.1%}\n\n{misses}"


# ------------------------------------------------------------------ feedback rules
@pytest.mark.parametrize("rid", sorted(RUBRICS))
def test_model_answer_full_marks_nothing_missing(rid):
    r = grade_text(RUBRICS[rid].model_answer, rid)
    assert r.score == 1.0 and not r.missing and not r.misconceptions, r.report()
    assert not any(line.startswith(("missing:", "could also say:")) for line in r.feedback)


@pytest.mark.parametrize("rid", sorted(RUBRICS))
def test_the_courses_own_phrasings_earn_their_concept(rid):
    # the grader's hints, read as an answer, are the course's phrasing of each idea
    rubric = RUBRICS[rid]
    for c in rubric.concepts:
        r = grade_text(c.hint, rid)
        assert c.name in r.found, f"hint of {c.name!r} not credited:\n{r.report()}"


def _plain(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    text = re.sub(r"[*`]", "", text)
    return " ".join(text.split())


def test_course_passages_are_quoted_from_the_notebooks():
    # Rubric.course_text is what pasting is checked against: it must be the notebooks' text
    notebooks = " ".join(
        _plain("".join(cell["source"]))
        for nb in sorted((ROOT / "solutions").glob("*/*.ipynb"))
        for cell in json.loads(nb.read_text())["cells"] if cell["cell_type"] == "markdown")
    for rid, rubric in RUBRICS.items():
        assert rubric.course_text, rid
        for passage in rubric.course_text:
            assert _plain(passage) in notebooks, f"{rid}: not in solutions/: {passage[:80]}"


def test_pasted_hints_and_course_text_are_flagged():
    for rid, rubric in RUBRICS.items():
        hints = " ".join(c.hint.rstrip(".") + "." for c in rubric.concepts)
        words = hints.split()
        r = grade_text(" ".join(words[:rubric.max_words]), rid)
        assert r.needs_review and "pasted" in r.review_reason, r.report()
        for passage in rubric.course_text:
            if len(passage.split()) >= 12:
                p = grade_text(passage, rid)
                assert p.needs_review and "pasted" in p.review_reason, p.report()


def test_found_is_never_listed_as_missing_and_full_score_lists_nothing_missing():
    answer = ("Checkpointing keeps only the segment inputs and recomputes the dropped activations "
              "during backward, roughly one extra forward pass, so each step is about 30% slower.")
    r = grade_text(answer, "checkpointing_cost")
    assert r.score == 1.0, r.report()
    assert not set(r.found) & set(r.missing)
    assert not any(line.startswith("missing:") for line in r.feedback), r.report()
    assert any(line.startswith("could also say: worth it only when memory") for line in r.feedback)


def test_report_quotes_the_sentence_that_earned_or_lost_each_idea():
    answer = ("Backward needs the activations. Checkpointing is not slower at all. "
              "It recomputes the dropped activations during backward.")
    r = grade_text(answer, "checkpointing_cost")
    earned = [line for line in r.feedback if line.startswith("found: the dropped activations")]
    assert earned and '"It recomputes the dropped activations during backward."' in earned[0]
    lost = [line for line in r.feedback if line.startswith("contradicted: it costs extra compute")]
    assert lost and '"Checkpointing is not slower at all."' in lost[0], r.report()


def test_over_limit_answer_shows_word_count_and_content():
    rubric = RUBRICS["checkpointing_cost"]
    answer = (rubric.model_answer + " " + rubric.explanation + " In practice I would measure "
              "the peak first and only then decide which layers to wrap, starting with the largest "
              "blocks, and check the step time before and after.")
    n = len(answer.split())
    assert n > rubric.max_words
    r = grade_text(answer, "checkpointing_cost")
    # graded on its content (every idea is there), less the fixed cost of the length: never 0
    assert r.score == pytest.approx(1.0 - LENGTH_COST), r.report()
    assert f"{n} words, over the limit of {rubric.max_words} words: -0.1 for the length " \
        "(1.00 on its content)" in r.feedback[0]
    assert any(line.startswith("found: the dropped activations are recomputed") for line in r.feedback)
    assert "pasted" in r.review_reason           # what the content's grading flags stays flagged
    assert "three times" not in r.review_reason
    rambling = " ".join([answer] * 3)            # over three times the limit: a person reads it
    long = grade_text(rambling, "checkpointing_cost")
    assert long.needs_review and "over three times the limit" in long.review_reason
    assert long.score == 0.0, long.report()      # the same text three times is repetition
    wrong = grade_text("Checkpointing is free: it stores every activation and recomputes nothing, "
                       + " ".join(["so it costs no time at all."] * 30), "checkpointing_cost")
    assert wrong.score == 0.0, wrong.report()    # the length costs nothing extra below 0


# ------------------------------------------------------------------ the issue's cases
@pytest.mark.parametrize("rid,answer", [
    ("oom_before_batch", "I wouldn't use mixed precision or checkpointing, they're risky; just "
                         "reduce the batch."),
    ("oom_before_batch", "Don't use mixed precision, it hurts accuracy, and don't bother with "
                         "checkpointing."),
    ("fp16_loss_scaling", "fp16 does not need loss scaling, gradients never underflow; bf16 and "
                          "fp16 have the same range."),
    ("checkpointing_cost", "Checkpointing is a free optimization: nothing is recomputed."),
    ("accumulation_equivalence", "They are not equal: gradients are not linear, backward "
                                 "overwrites .grad."),
    ("checkpointing_cost", "Checkpointing saves memory by writing (storing) all activations to disk."),
    ("checkpointing_cost", "It halves the weights and gradients by recomputing the parameters."),
])
def test_negated_and_confidently_wrong_answers_from_the_issue(rid, answer):
    r = grade_text(answer, rid)
    assert r.score <= WRONG_CAP, r.report()


@pytest.mark.parametrize("rid,answer,concept", [
    ("checkpointing_cost", "The activations are computed again later, in the backward pass.",
     "the dropped activations are recomputed"),
    ("fp16_loss_scaling", "bf16 has 8 bits on the exponent, like fp32.",
     "bf16 has fp32's exponent range (8 exponent bits)"),
    ("allocated_vs_reserved", "memory_allocated only counts tensors that still exist.",
     "memory_allocated counts only live tensors"),
    ("activations_scaling", "Their memory grows with the batch size and with the number of layers.",
     "activation memory grows linearly with depth (number of layers)"),
    ("activations_scaling", "Their memory grows with the batch size and with the number of layers.",
     "activation memory grows linearly with batch size"),
    ("checkpointing_cost", "It works by not holding on to what each layer produced.",
     "activations are not stored: only segment inputs are kept"),
    ("checkpointing_cost", "You do about one and a third times the work per step.",
     "how big the trade is: ~one extra forward (+20-40% time), memory ~sqrt(n)"),
    ("checkpointing_cost", "Checkpoint only when the step does not fit.",
     "worth it only when memory is the binding constraint"),
    ("accumulation_equivalence", "It works because the gradiant is lineer.",
     "the gradient is linear: the gradient of a sum/mean is the sum/mean of gradients"),
    ("accumulation_equivalence", "Backward adds the gradiants into .grad, it dont overwrite them.",
     "backward adds into .grad across micro-batches"),
])
def test_plain_language_and_typos_from_the_issue(rid, answer, concept):
    r = grade_text(answer, rid)
    assert concept in r.found, r.report()


def test_denial_contrast_and_purpose():
    # "not X but Y": X denied, Y asserted
    r = grade_text("The activations are not stored but recomputed during backward.",
                   "checkpointing_cost")
    assert "the dropped activations are recomputed" in r.found, r.report()
    # a negation in a purpose clause states why the idea matters
    r = grade_text("The scaler multiplies the loss so that small gradients do not underflow to "
                   "zero in fp16.", "fp16_loss_scaling")
    assert "small gradients underflow to zero" in r.found, r.report()
    # a negated misconception costs nothing
    r = grade_text("Checkpointing is not free: the dropped activations are recomputed in backward.",
                   "checkpointing_cost")
    assert not r.misconceptions, r.report()


# ------------------------------------------------------------------ numbers (issue 16)
@pytest.mark.parametrize("answer,expected,unit,score,flag,says", [
    ("24 GiB", 24, "GB", 0.0, False, "GB vs GiB mix-up"),
    ("111.8 GiB", 120, "GiB", 0.0, False, "GB vs GiB mix-up"),
    ("1552 Mb", 1552, "MiB", 0.0, False, "bits vs bytes"),
    ("1552 MiB", 1552, "MiB", 1.0, False, ""),
    ("0.4", 400, "ms", 0.0, True, "right if read in s"),
    ("0.4 s", 400, "ms", 1.0, False, ""),
    ("1.3B x 16 B = 20.8 GB", 20.8, "GB", 1.0, False, ""),
    ("20.8e9 B", 20.8, "GB", 1.0, False, ""),
])
def test_numeric_rules(answer, expected, unit, score, flag, says):
    r = grade_numeric(answer, expected, unit)
    assert r.score == score and r.needs_review == flag, r.report()
    assert says in r.report()


if __name__ == "__main__":
    print(table(grade_all()))


def test_a_line_wrapped_answer_grades_like_one_line():
    answer = RUBRICS["accumulation_equivalence"].model_answer
    words = answer.split()
    wrapped = "\n".join(" ".join(words[i:i + 9]) for i in range(0, len(words), 9))
    a, b = grade_text(answer, "accumulation_equivalence"), grade_text(wrapped, "accumulation_equivalence")
    assert a.score == b.score == 1.0 and a.found == b.found, b.report()


_TEXT_ANSWERS = {"CHECKPOINTING_COST_ANSWER": "checkpointing_cost",
                 "LOSS_SCALING_ANSWER": "fp16_loss_scaling", "OOM_ANSWER": "oom_before_batch",
                 "SHARDING_ANSWER": "sharding_when_why", "answer": "accumulation_equivalence"}


def test_the_solutions_written_answers_score_full_marks():
    # the fast twin of tests/notebooks/test_nbgrader_pipeline.py for the rubric questions of
    # 02-06 (07's text questions are checked by tests/grading/test_interview.py)
    seen = set()
    for nb in sorted((ROOT / "solutions").glob("0[2-6]*/*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] != "code" or "import" in src or "grade" in src:
                continue
            for var, rid in _TEXT_ANSWERS.items():
                if re.search(rf"^{var}\s*=", src, re.M):
                    ns: dict = {}
                    exec(compile(src, str(nb), "exec"), ns)   # a plain string assignment
                    r = grade_text(ns[var], rid)
                    assert r.score == 1.0 and not r.misconceptions, f"{nb.name}\n{r.report()}"
                    seen.add(rid)
    assert seen == set(_TEXT_ANSWERS.values())


def test_reloading_the_facade_reloads_every_part():
    # 04/05's test cells reload memlab.rubric for "a fresh copy of the grader": with the engine
    # split into parts, a patched part must not survive that reload (run in a fresh process)
    import subprocess
    import sys
    code = (
        "import importlib, memlab as ml\n"
        "import memlab.grading.answers.concepts as c, memlab.grading.answers.quantities as q\n"
        "ml.rubric\n"
        "c.grade_rubric = lambda *a, **k: ml.rubric.Result(1.0)\n"
        "q._parse = lambda *a, **k: (28.0, '', None)\n"
        "r = importlib.reload(importlib.import_module('memlab.rubric'))\n"
        "assert r.grade_text('nothing to see', 'checkpointing_cost').score == 0.0\n"
        "assert r.grade_numeric('1 GB', 28, 'GB').score == 0.0\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
