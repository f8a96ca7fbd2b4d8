"""memlab.autograde.batch.report: reasons, durations and the assignments' report hooks."""
from __future__ import annotations

from types import SimpleNamespace

from memlab.autograde.batch import report


def test_duration():
    assert report._duration(42) == "42 s"
    assert report._duration(600) == "10 min"
    assert report._duration(3 * 3600) == "3.0 h"


def test_resolve_hook_finds_the_defining_module():
    fn = report.resolve_hook("memlab.autograde.batch.runner:limited_kernelspec")
    assert fn.__module__ == "memlab.autograde.batch.runner"


def test_hooks_run_only_for_their_assignment(monkeypatch):
    calls = []
    monkeypatch.setattr(report, "resolve_hook",
                        lambda name: lambda api, r: calls.append((name, r["student"])) or ["why"])
    results = [{"status": "ok", "student": "ana", "assignment": "07_interview_prep"},
               {"status": "ok", "student": "ana", "assignment": "03_mixed_precision"},
               {"status": "failed", "student": "bob", "assignment": "07_interview_prep"},
               {"status": "ok", "student": "eve", "assignment": "not_a_course_assignment"}]
    audits = report._assignment_hooks(SimpleNamespace(), results)
    # 07 and 03 have written answers (the clean regrade); a failed result and an unknown
    # assignment cost nothing
    assert calls == [("memlab.autograde.review:answers_audit", "ana")] * 2
    assert audits == {("ana", "07_interview_prep"): ["why"], ("ana", "03_mixed_precision"): ["why"]}


def test_a_failing_hook_becomes_a_review_reason(monkeypatch):
    def broken(api, r):
        raise OSError("disk")

    monkeypatch.setattr(report, "resolve_hook", lambda name: broken)
    audits = report._assignment_hooks(
        SimpleNamespace(), [{"status": "ok", "student": "ana", "assignment": "07_interview_prep"}])
    assert audits == {("ana", "07_interview_prep"):
                      ["memlab.autograde.review:answers_audit failed (OSError)"]}
