"""The written-answer grader against the BLIND rounds of issue 32 (tests/grading/data/
answers_blind_rN.jsonl): per round, 10-12 classes x the 10 rubrics, written by a helper that read
the questions, the notebooks, REFERENCE.md and the course brief, but never the grader, its
patterns, the corpora or the earlier rounds; band: the fraction of the points a strict but fair
instructor gives, the writer's label, fixed before any scoring. Each round is measured ONCE
before any tuning on it, then it is development data (the next round is written fresh); the
tests keep each round's figures from falling back. Graded here without the notebooks'
``require=`` (07's questions have none): the stricter of the two readings of a partial answer.

r3 (110 answers, 11 classes; first look 2026-12-03, the grader of dd22ea9):
    decided in band 40/59 67.8%, provisional 51/110 46.4%, wrong class decided above 0.2: 2,
    one-false-claim decided above its band: 4, strong decided below 0.7: 0.
    Tuned on: the length rule, list forms, the topic rule, facts with a direction, wrong claims
    in the question's words.
r4 (120 answers, 12 classes; first look 2026-12-03, the grader of bb6e300):
    decided in band 37/57 64.9%, provisional 52.5%, wrong class decided above 0.2: 2,
    one-false-claim decided above its band: 7 of 10 (all at 1.00, unflagged), strong below 0.7: 1.
    Tuned on: hard-wrapped prose is not a list, one false phrase loses points once, the course's
    numbers per question (bank.FACTS) and true claims (bank.TRUE_CLAIMS) are known, a pattern
    vouches only for the decisive words it names, "already"/"quadratic"/"enough" are decisive,
    LayerNorm breaking accumulation and GradScaler growing the scale are misconceptions.
r5 (120 answers, 12 classes; first look 2026-12-04, the grader of 7649378):
    decided in band 46/60 76.7% (78.0% with the notebooks' require=), provisional 50.0%, wrong
    class decided above 0.2: 2, one-false-claim decided above its band: 3, strong below 0.7: 0;
    the misses: 7 partial answers decided near full marks, 3 one-false-claim at 0.9-1.0.
    Tuned on (classes, not the sentences): a condition's comma before the claim ("when it finds
    an inf, it doubles the scale"), "non" before a word is its opposite ("non-linear"), a KV
    cache is not the caching allocator, "mixed precision halves every consumer" and "the
    states go to 2 bytes", ZeRO-3's traffic said to be DDP's. After: 47/56 83.9%, provisional
    53.3%, one-false-claim above band 0 (r3 and r4 unchanged). Partial answers are the open
    class: a question's part left out is caught only where a notebook names its parts.
r6 (120 answers, 12 classes; first look 2026-12-04, the grader of 5b08507):
    decided in band 55/70 78.6% (78.3% with the notebooks' require=), provisional 41.7%, wrong
    class decided above 0.2: 0, one-false-claim decided above its band: 7 (all at 1.00), strong
    below 0.7: 0; partial answers 0/5 decided in band.
    Tuned on (classes): what each technique shrinks, as a table (bank._TECHNIQUES: autocast,
    checkpointing and accumulation shrink the activations, ZeRO-1/2/3 the model states they
    shard, empty_cache frees no tensor), checked for the technique nearest before the
    consumer; loss scaling said to act on the forward pass; checkpointing said to make the
    gradients approximate; Adam's state said to be made anew every step. After: 55/63
    87.3%, provisional 47.5%, one-false-claim above band 0 (r3-r5 unchanged). Partial
    answers stay open: requiring the notebooks' parts on every rubric and capping a missing
    part into the review band lifted r6 to 90.6% decided in band but sent 55.8% to review.
r7 (120 answers, 12 classes; first look 2026-12-06, the grader of cf1a49c):
    decided in band 44/57 77.2%, provisional 52.5%, wrong class decided above 0.2: 0,
    one-false-claim decided above its band: 2 (both 1.00), strong below 0.7: 3 (two strong
    answers in metaphors, decided 0 by the topic rule), partial answers 0/6 decided in band.
    Tuned on (classes): "divides" is a shrinking verb of the effects table ("accumulation also
    divides the optimizer state by k"); DDP is in the table and a share of the model states
    per GPU said of DDP is a misconception (of the batch it is true); two or more ideas matched
    in an answer that never names its topic go to review instead of a decided 0. After: 44/53
    83.0%, provisional 55.8%, one-false-claim above band 0, strong below 0.7: 1 (r3-r6
    unchanged). Partial answers stay the open class (0/6).
r8 (120 answers, 12 classes; first look 2026-12-06, the grader of 8422f48):
    decided in band 51/64 79.7%, provisional 46.7%, wrong class decided above 0.2: 0,
    one-false-claim decided above its band: 3 (1.00, 1.00, 0.90), strong below 0.7: 5 (all five
    are the strong answers written as analogies, decided 0-0.25), partial decided in band 0/2.
    Tuned on (classes): a relative clause right after a technique's name states its effect
    ("ZeRO stage 1, which shards the gradients"); a comparison set off by commas says the same of
    both ("LayerNorm, like BatchNorm, normalizes with the micro-batch's statistics"); the
    gradients said to stay allocated from one step to the next (the course zeroes them with
    set_to_none=True). After: 51/61 83.6%, provisional 49.2%, one-false-claim above band 0
    (r3-r7 unchanged). Tried and dropped: sending a long, on-topic, mostly unmatched answer to
    review (+3.6 points on r8, but -0.9 to -1.9 on r4, r6 and r7: it reviewed wrong answers the
    grader had decided right). Open: answers in plain words or analogies (5 of 5 decided below
    their band; a pattern grader cannot read them) and partial answers.

After r8 (the grader of this commit, on r3-r8 together, 710 answers): partial answers were the
largest class decided out of band (16 of 23 decided, at 0.7-1.0: full credit at 80% of the
weight covers a whole part of the question left out), and a decided score between 0.7 and 0.9
was in band 39% of the time (0.0: 98%, 1.0: 90%). Changed (classes): a question's parts
(bank.PARTS: "why ..., and when not?") cap an answer that leaves one out at 0.9 x the share of
parts answered, decided when every technical clause of the answer was read (else review: the
part may be there in other words); the review band is 0.2-0.9 (was 0.3-0.7); four or five bare
terms in prose no longer send an answer to review (six or more still earn nothing). r3-r8
together: decided in band 297/353 84.1% -> 304/327 93.0%, provisional 50.3% -> 53.9%, wrong
class decided above 0.2: 2 -> 0, strong decided below 0.7: 7 -> 3.
r9 (120 answers, 12 classes, written by a helper that read the notebooks, the questions,
REFERENCE.md and the course brief, never src/memlab/grading/, tests/, solutions/ or a corpus;
first look 2026-12-06, the grader of the change above, before any tuning on r9):
    decided in band 46/50 92.0%, provisional 58.3%, wrong class decided above 0.2: 1 (eleven
    terms between semicolons at 1.00), one-false-claim decided above its band: 3 (all 1.00:
    LayerNorm listed beside BatchNorm, a cache shared between processes, tensor parallelism
    said to exchange gradients once a step), strong below 0.7: 0, partial 4/4 decided in band.
    The grader of 99931c2 (before the change) on the same answers: 40/49 81.6%, provisional
    59.2%, wrong above 0.2: 1, one-false-claim above band: 4.
    Tuned on (class): items between semicolons are a list when most are short (as lines are).
    After: 47/50 94.0%, provisional 58.3%, wrong above 0.2: 0.
    Then tuned on r3-r9 together (classes): a denial beside stated ideas goes to review only
    when the score is above the review band (a low score with a denial was in band 12 of 12);
    a run of seven words without a function word no longer sends an answer to review (17 of
    18 were in band); technical prose that matched little of the rubric is decided low, and
    only an answer in plain words (under 8% of its words name a consumer, a technique, a dtype,
    a unit, a number or a change) goes to review for it (86% of the first kind deserved their
    low score; the misses were analogies); one detail (a concept lighter than the rubric's
    main ideas) alone earns nothing; a comparison whose subject is a pronoun for the
    sentence's dtype ("bf16 ..., and it is also more precise than fp16") and a wrong item in
    the list one claim is made of ("BatchNorm and LayerNorm ... compute their statistics over
    the micro-batch") are misconceptions. After: r9 59/61 96.7%, provisional 49.2%; r3-r9
    421/443 95.0%, provisional 46.6%.
r10 (120 answers, 12 classes, written by a second helper under the same rules, some voices
non-native or informal; it saw the notebooks' require=(...) lists, which are in the release;
first look 2026-12-06 on the grader above, before any tuning on r10):
    decided in band 46/52 88.5%, provisional 56.7%, wrong class decided above 0.2: 0,
    one-false-claim decided above its band: 3 (checkpointing said to double the step time, the
    gradients said to grow with the batch by ellipsis, plain DDP said to spread the states in
    a relative clause), strong below 0.7: 0; the other misses: a negated answer at 0.15 for
    [0, 0.1] and two pasted-hints answers at 0 for [0.05, 0.25]. The grader of 99931c2 (this
    session's start) on the same answers: 38/50 76.0%, provisional 58.3%, wrong above 0.2: 1,
    one-false-claim above band 4; the grader of f738594: 38/43 88.4%, provisional 64.2%.
    Tuned on (classes): a factor of time for the recomputation ("doubles the step time": it is
    about a third more), a claim by ellipsis ("and so do the gradients"), a relative clause
    after DDP ("plain DDP on 8 GPUs, which spreads the states"). After: 46/49 93.9%,
    provisional 59.2%; r3-r10 467/492 94.9% decided in band, provisional 48.2%, wrong class
    decided above 0.2: 0, strong decided below 0.7: 2 (r8's analogies).
r11 (120 answers, 12 classes, a third helper under the same rules, asked for practitioners'
words beside the course's; first look 2026-12-06 on the final grader of this stop, never tuned
on): decided in band 52/58 89.7%, provisional 51.7%, wrong class decided above 0.2: 0,
one-false-claim decided above its band: 3 (bf16 "also more precise", LayerNorm in a list,
ZeRO said to divide the activations: two of them the kinds r9 taught, in words the patterns
written for r9 do not reach), strong below 0.7: 0; the other misses: two negated answers
(0.10 and 0.15) and a confidently wrong one (0.15) for [0, 0.1]. The grader of 99931c2 on the same answers:
39/48 81.2%, provisional 60.0%, wrong above 0.2: 1, one-false-claim above band 4.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from answer_rounds import figures, grade_round, show  # tests/
from memlab.grading.answers.grade import RUBRICS, grade_text

DATA = Path(__file__).resolve().parent / "data"
pytestmark = pytest.mark.xdist_group("answer_corpus")


@dataclass(frozen=True)
class Round:
    """A blind round and where it stands now (floors, not the issue's targets: 97% decided in
    band and at most 25% provisional are not met)."""
    name: str
    classes: int
    wrong: tuple[str, ...]           # classes that deserve at most a fifth
    strong: tuple[str, ...]          # classes that deserve at least 0.7
    decided_in_band: float
    provisional: float
    wrong_above_a_fifth: int
    strong_below_0_7: int
    one_false_claim_above_band: int


_WRONG = ("confidently-wrong", "negated", "keyword-salad", "off-topic")
_STRONG = ("strong-unusual-wording", "strong-terse", "typos", "strong-long")
ROUNDS = {r.name: r for r in (
    Round("r3", 11, ("confidently-wrong-keywords", *_WRONG[1:]), _STRONG[:3], 0.98, 0.41, 0, 0, 1),
    Round("r4", 12, _WRONG, _STRONG, 0.85, 0.55, 0, 0, 3),
    Round("r5", 12, _WRONG, _STRONG, 0.97, 0.45, 0, 0, 0),
    Round("r6", 12, _WRONG, _STRONG, 0.95, 0.43, 0, 0, 0),
    Round("r7", 12, _WRONG, _STRONG, 0.98, 0.53, 0, 0, 0),
    Round("r8", 12, _WRONG, _STRONG, 0.92, 0.44, 0, 2, 0),
    Round("r9", 12, _WRONG, _STRONG, 0.96, 0.50, 0, 0, 2),
    Round("r10", 12, _WRONG, _STRONG, 0.93, 0.60, 0, 0, 0),
    Round("r11", 12, _WRONG, _STRONG, 0.89, 0.52, 0, 0, 3),
)}


@pytest.fixture(scope="module", params=sorted(ROUNDS))
def graded(request) -> tuple[Round, list[dict]]:
    return ROUNDS[request.param], grade_round(DATA / f"answers_blind_{request.param}.jsonl")


def _table(graded: list[dict]) -> str:
    rows = defaultdict(lambda: [0, 0, 0])       # answers, provisional, decided in band
    for g in graded:
        for key in (g["rubric"], g["class"]):
            rows[key][0] += 1
            rows[key][1] += g["provisional"]
            rows[key][2] += (not g["provisional"]) and g["in_band"]
    return "\n".join(f"  {k:28s} {n:3d} answers, {p:3d} provisional, {ok:3d}/{n - p:3d} decided "
                     "in band" for k, (n, p, ok) in sorted(rows.items()))


def test_every_round_is_here():
    assert sorted(ROUNDS) == sorted(p.stem.rsplit("_", 1)[1]
                                    for p in DATA.glob("answers_blind_r*.jsonl"))


def test_the_round_covers_every_rubric_and_class(graded):
    rnd, rows = graded
    assert len(rows) == 10 * rnd.classes
    per = defaultdict(set)
    for g in rows:
        per[g["rubric"]].add(g["class"])
    assert set(per) == set(RUBRICS) and all(len(c) == rnd.classes for c in per.values()), dict(per)


def test_wrong_classes_decided_above_a_fifth_stay_few(graded):
    rnd, rows = graded
    high = [g for g in rows if g["class"] in rnd.wrong and not g["provisional"] and g["score"] > 0.2]
    assert len(high) <= rnd.wrong_above_a_fifth, show(high)


def test_strong_answers_decided_below_0_7_stay_few(graded):
    rnd, rows = graded
    low = [g for g in rows if g["class"] in rnd.strong and not g["provisional"] and g["score"] < 0.7]
    assert len(low) <= rnd.strong_below_0_7, show(low)


def test_one_false_claim_is_mostly_sent_to_review_or_marked_down(graded):
    rnd, rows = graded
    high = [g for g in rows if g["class"] == "one-false-claim" and not g["provisional"]
            and g["score"] > g["band"][1] + 1e-9]
    assert len(high) <= rnd.one_false_claim_above_band, show(high)


def test_decided_answers_and_the_provisional_share_hold_their_ground(graded):
    rnd, rows = graded
    decided, rate, share = figures(rows)
    print(f"\nblind round {rnd.name} (development data now): decided in band "
          f"{sum(g['in_band'] for g in decided)}/{len(decided)} {rate:.1%}, provisional "
          f"{share:.1%}\n{_table(rows)}")
    assert rate >= rnd.decided_in_band, f"decided in band {rate:.1%}\n\n" + show(
        [g for g in decided if not g["in_band"]])
    assert share <= rnd.provisional, f"provisional {share:.1%}"


def test_a_long_answer_is_graded_on_its_content_never_zero_for_its_length():
    for g in grade_round(DATA / "answers_blind_r3.jsonl"):
        if g["class"] == "long-rambling":
            assert "for the length" in g["report"], g["report"]
            assert "no credit" not in g["report"].splitlines()[1], g["report"]


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


@pytest.mark.parametrize("rubric, claim, misconception", [
    # a condition's comma before the claim (r5)
    ("fp16_loss_scaling", "When GradScaler finds an inf or NaN, it doubles the scale.",
     "grows the scale"),
    ("fp16_loss_scaling", "On an overflow, the scaler raises the loss scale.", "grows the scale"),
    ("oom_before_batch", "Turn on mixed precision, which halves every consumer of memory.",
     "halves the weights or the optimizer state"),
    ("oom_before_batch", "With autocast the parameters, gradients and optimizer state all go to "
                         "2 bytes.", "halves the weights or the optimizer state"),
    ("sharding_when_why", "ZeRO-3 needs no more traffic than DDP's all-reduce.",
     "ZeRO-3 costs no more communication"),
    ("sharding_when_why", "Communication is highest for ZeRO stage 1.",
     "ZeRO-3 costs no more communication"),
])
def test_a_wrong_claim_in_other_words_is_a_misconception(rubric, claim, misconception):
    report = grade_text(claim, rubric).report()
    assert f"misconception: says {misconception}" in report or misconception in report, report


@pytest.mark.parametrize("rubric, sentence", [
    ("fp16_loss_scaling", "If no overflow happens for 2000 steps, the scaler doubles the scale."),
    ("fp16_loss_scaling", "When it finds an inf or NaN, it skips the step and halves the scale."),
    ("oom_before_batch", "Mixed precision halves the activation memory; the weights stay fp32."),
    ("sharding_when_why", "ZeRO-1 and ZeRO-2 need no more traffic than DDP; ZeRO-3 about 1.5x."),
])
def test_the_true_statement_is_not_one(rubric, sentence):
    assert "misconception" not in grade_text(sentence, rubric).report()


def test_non_before_a_word_is_its_opposite():
    """"the gradient is non-linear" denies linearity: no credit for the idea, a contradiction."""
    said = grade_text("The gradient is non-linear in the batch, so accumulation only approximates "
                      "it.", "accumulation_equivalence")
    assert said.score == 0.0 and "contradicted: the gradient is linear" in said.report(), said.report()
    assert "found: the gradient is linear" in grade_text(
        "The gradient is linear in the loss, so the sum of the micro-batch gradients equals the "
        "full-batch gradient.", "accumulation_equivalence").report()


def test_a_kv_cache_is_not_the_caching_allocator():
    off = grade_text("Grouped-query attention shares key/value heads, shrinking the cache by "
                     "heads / kv_heads.", "allocated_vs_reserved")
    assert "found: the caching allocator" not in off.report(), off.report()
    on = grade_text("PyTorch keeps freed blocks in the cache instead of returning them to the "
                    "driver.", "allocated_vs_reserved")
    assert "found: the caching allocator keeps freed blocks" in on.report(), on.report()


@pytest.mark.parametrize("rubric, claim, misconception", [
    # a technique said to shrink what it does not (r6's class, in other words than r6's)
    ("oom_before_batch", "With bf16 autocast: besides keeping activations in 16 bits it also "
                         "halves the weights and the Adam moments.", "says mixed precision shrinks"),
    ("sharding_when_why", "On top of that FSDP also splits every rank's activations by N.",
     "says ZeRO-3/FSDP shrinks the activations"),
    ("bytes_conventions", "Take ZeRO stage 1 on 8 GPUs: it partitions the parameters, gradients "
                          "and optimizer state eight ways.", "says ZeRO-1 shrinks"),
    ("allocated_vs_reserved", "Calling torch.cuda.empty_cache() frees the tensors nobody uses.",
     "says empty_cache frees tensors"),
    ("checkpointing_cost", "Checkpointing also cuts the optimizer state.",
     "says gradient checkpointing shrinks"),
    ("accumulation_equivalence", "Accumulation also halves the memory of the parameters.",
     "says gradient accumulation shrinks"),
    ("fp16_loss_scaling", "GradScaler keeps the activations of the forward below 65504.",
     "says loss scaling acts on the forward pass"),
    ("checkpointing_cost", "With checkpointing the gradients come out slightly different.",
     "says checkpointing makes the gradients approximate"),
    ("peak_moves", "The Adam moments are freed after every step.",
     "says the optimizer state is created anew"),
    # r7's classes, in other words than r7's
    ("checkpointing_cost", "Checkpointing divides the gradients by the number of segments.",
     "says gradient checkpointing shrinks"),
    ("sharding_when_why", "Data parallelism with plain DDP on 4 GPUs leaves each GPU a quarter "
                          "of the Adam moments.", "says plain data parallelism (DDP) splits"),
])
def test_a_technique_said_to_do_what_it_does_not_is_a_misconception(rubric, claim, misconception):
    report = grade_text(claim, rubric).report()
    assert f"misconception: {misconception}" in report, report


@pytest.mark.parametrize("rubric, sentence", [
    ("sharding_when_why", "ZeRO-1 shards the optimizer state, ZeRO-2 also the gradients, and "
                          "ZeRO-3 the parameters too."),
    ("sharding_when_why", "FSDP shards the parameters, gradients and optimizer state across the "
                          "GPUs."),
    ("oom_before_batch", "Mixed precision halves the activations, while the weights and Adam "
                         "state stay in fp32."),
    ("oom_before_batch", "Mixed precision does not halve the weights or the optimizer state."),
    ("oom_before_batch", "Gradient accumulation cuts the activation memory by k, and the "
                         "gradients are summed in place."),
    ("allocated_vs_reserved", "empty_cache releases the cached blocks to the driver, but "
                              "memory_allocated does not change."),
    ("checkpointing_cost", "Checkpointing reduces activation memory; parameters, gradients and "
                           "optimizer state are unchanged."),
    ("fp16_loss_scaling", "The scaler multiplies the loss, so the gradients are scaled; the "
                          "forward pass is unchanged."),
    ("peak_moves", "The foreach update creates temporaries at every step and frees them "
                   "afterwards."),
    ("peak_moves", "Adam creates its two moments at the first step and keeps them."),
    ("sharding_when_why", "With DDP each GPU processes only an eighth of the batch but holds a "
                          "full copy of the model."),
    ("sharding_when_why", "Unlike DDP, ZeRO-3 stores only an eighth of the parameters per GPU."),
    ("accumulation_equivalence", "Accumulation divides the activation memory by k."),
])

def test_what_a_technique_really_does_is_no_misconception(rubric, sentence):
    assert "misconception" not in grade_text(sentence, rubric).report()


def test_ideas_in_an_answer_that_never_names_the_topic_go_to_a_person():
    """r7's class: a strong answer in metaphors matches the question's ideas without its topic's
    words; the topic rule scores it 0, and a person reads it (one loose word alone stays 0)."""
    metaphor = ("The memo is not free: it stores two vectors per layer for every word seen so "
                "far, and it grows with every word and every conversation until it dwarfs the "
                "weights; each new word is then computed once, instead of recomputing the "
                "whole history at every step.")
    r = grade_text(metaphor, "kv_cache_tradeoff")
    if "never speaks of the question's topic" not in r.report():
        pytest.skip("the answer names the topic now: the rule is not exercised")
    assert r.score == 0.0 and r.needs_review, r.report()
    assert "own wording, or loose words" in r.report(), r.report()
