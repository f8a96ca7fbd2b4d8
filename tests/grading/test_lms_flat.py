"""An LMS download grades from the README's option (#30): Canvas puts every student's file side
by side ("<name>_<userid>_<submissionid>_<file>", "late" after the name), and grade-class
``--flat canvas`` lays them out as <student>/<assignment>/; without it, the error names the zip
the instructor gave (not a temporary folder) and the option.

Marked ``slow`` (kernels), in `make test`: 2 gradings of 00_setup, ~25 s on 2 cores.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

import nbformat
import pytest

from course_support import course_notebooks, make_course, with_solution_answers
from memlab.autograde import cli as instructor
from memlab.autograde.batch.grade_class import GradeSettings, grade_class
from memlab.autograde.batch.intake import arrange_flat

A = "00_setup"


def test_a_pattern_without_its_groups_is_refused(tmp_path):
    with pytest.raises(ValueError, match="groups"):
        arrange_flat(tmp_path, tmp_path / "out", r"^(?P<who>\w+)\.ipynb$", [A])


@pytest.mark.slow
def test_canvas_flat_zip(tmp_path, capsys):
    api = make_course(tmp_path / "course", [A])
    cfg = Path(api.coursedir.root) / "autograder" / "nbgrader_config.py"
    release, solution = course_notebooks(api, A)
    honest = nbformat.writes(with_solution_answers(release, solution))
    zpath = tmp_path / "submissions.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr(f"smithjane_1234_5678_{A}.ipynb", honest)
        z.writestr(f"doejohn_LATE_4321_8765_{A}-1.ipynb", nbformat.writes(release))
        z.writestr("readme.txt", "not a submission")
    with pytest.raises(ValueError, match=r"submissions\.zip.*--flat canvas"):
        grade_class(zpath, config_path=cfg, out=tmp_path / "report", progress=False)
    rc = instructor.main(["--config", str(cfg), "grade-class", str(zpath), "--flat", "canvas",
                          "--out", str(tmp_path / "report"), "--workers", "2", "--quiet"])
    assert rc == 0, capsys.readouterr()
    report = grade_class(zpath, config_path=cfg, out=tmp_path / "report", progress=False,
                         settings=GradeSettings(flat="canvas"))
    scores = {(r["student"], r["assignment"]): (r["score"], r["max_score"]) for r in report.results}
    assert set(scores) == {("smithjane", A), ("doejohn", A)}, scores
    assert scores[("smithjane", A)][0] == scores[("smithjane", A)][1] > 0
    assert scores[("doejohn", A)][0] == 0      # handed in the release unanswered
