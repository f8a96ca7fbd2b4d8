"""Prints the written-answer corpus table (tests/grading/test_answer_corpus.py) after a run
that graded the corpus, so its in-band rates per rubric and per class show in the output."""
from __future__ import annotations


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    text = getattr(config, "_memlab_corpus_table", None)
    if text:
        terminalreporter.write_sep("-", "written-answer corpus")
        terminalreporter.write_line(text)
