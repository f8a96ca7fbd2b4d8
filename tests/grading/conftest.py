"""Prints the written-answer corpus table (tests/grading/test_answer_corpus.py) at the end of a
run that graded the corpus, so its in-band rates per rubric and per class show in the output.

The table is handed over through pytest's cache, because under pytest-xdist the corpus is
graded in a worker while the summary is written by the controller."""
from __future__ import annotations

KEY = "memlab/answer_corpus_table"


def pytest_sessionstart(session):
    cache = getattr(session.config, "cache", None)
    if cache is not None and not hasattr(session.config, "workerinput"):
        cache.set(KEY, None)          # the controller (or a plain run) forgets the last table


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    cache = getattr(config, "cache", None)
    text = cache.get(KEY, None) if cache is not None else None
    if text:
        terminalreporter.write_sep("-", "written-answer corpus")
        terminalreporter.write_line(text)
