"""A blind round of written answers, graded: one record per answer with its score, whether it
is provisional and whether it lands in the writer's band (tests/grading/test_answer_blind.py).
Each line of a round's JSONL file: rubric, class, band [lo, hi], answer (and a note)."""
from __future__ import annotations

import json
from pathlib import Path

from memlab.grading.answers.grade import grade_text


def grade_round(path: Path) -> list[dict]:
    out = []
    for line in Path(path).read_text().splitlines():
        rec = json.loads(line)
        r = grade_text(rec["answer"], rec["rubric"])
        lo, hi = rec["band"]
        out.append({**rec, "score": r.score, "provisional": r.needs_review,
                    "in_band": lo - 1e-9 <= r.score <= hi + 1e-9, "report": r.report()})
    return out


def figures(graded: list[dict]) -> tuple[list[dict], float, float]:
    """(the decided answers, the share of them inside their band, the provisional share)."""
    decided = [g for g in graded if not g["provisional"]]
    rate = sum(g["in_band"] for g in decided) / len(decided)
    return decided, rate, sum(g["provisional"] for g in graded) / len(graded)


def show(rows: list[dict]) -> str:
    """Graded answers as a failure message: rubric, class, band, score and the report."""
    return "\n\n".join(f"{g['rubric']} {g['class']} band {g['band']} {g['score']:.2f}\n"
                       f"{g['report']}" for g in rows)
