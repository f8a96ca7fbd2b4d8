"""memlab.autograde.security.judge and .channel: hidden tests decided where no learner code runs.

Small notebooks are re-run through :func:`verdict.rerun` with some test cells judged: the
learner's functions run in the re-run (plain, under bubblewrap, or a Landlock-confined warm
fork), the judged cells in the judge, which calls them through the channel. Each clause of the
judge's contract is checked on an answer that breaks it: in-place changes to an argument,
aliasing of results, exceptions, stderr, values that are not plain data, a learner process that
patches the re-run's own scoring, hangs or dies.
"""
from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
import torch

from course_support import pids_with_arg  # tests/
from memlab.autograde.security import bwrap as sandbox
from memlab.autograde.security import channel, judge, verdict
from memlab.autograde.security import landlock as confine

SANDBOX, WHY = sandbox.available()
LANDLOCK, LANDLOCK_WHY = confine.available()
MODES = [pytest.param(False, id="plain"),
         pytest.param(True, id="bwrap",
                      marks=pytest.mark.skipif(not SANDBOX, reason=f"bubblewrap: {WHY}")),
         pytest.param("landlock", id="landlock",
                      marks=pytest.mark.skipif(not LANDLOCK, reason=f"Landlock: {LANDLOCK_WHY}"))]


def _cell(src: str, **meta):
    cell = nbformat.v4.new_code_cell(src)
    if meta:
        cell.metadata["nbgrader"] = meta
    return cell


def _locked(gid, src):
    return _cell(src, grade_id=gid, locked=True, grade=False, solution=False)


def _answer(gid, src):
    return _cell(src, grade_id=gid, locked=False, grade=False, solution=True)


def _test(gid, src, points=1.0):
    return _cell(src, grade_id=gid, locked=True, grade=True, solution=False, points=points)


def _run(tmp_path: Path, cells, judged, *, sandboxed=False, cell_timeout=30.0, wall=120.0):
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    sub = tmp_path / "sub"
    sub.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(sub / "n.ipynb"))
    meta = [(c.metadata.get("nbgrader") or {}) for c in cells]
    trusted = {m["grade_id"]: c.source for m, c in zip(meta, cells) if m.get("locked")}
    points = {m["grade_id"]: float(m["points"]) for m in meta
              if m.get("grade") and not m.get("solution")}
    kw = dict(sandboxed=bool(sandboxed), wall_seconds=wall, cell_timeout=cell_timeout,
              judged=judged)
    if sandboxed == "landlock":
        from memlab.autograde.batch.processes import _WarmKernels

        _WarmKernels.prefork(1, 1)
        try:
            return verdict.rerun(sub / "n.ipynb", sub, tmp_path / "work", trusted, points,
                                 launch=_WarmKernels.take, **kw)
        finally:
            _WarmKernels.discard()
    return verdict.rerun(sub / "n.ipynb", sub, tmp_path / "work", trusted, points, **kw)


def _scores(found):
    return {gid: v.score for gid, v in found.items()}


SETUP = _locked("setup", "import math\nimport torch\nimport memlab as ml\nSCALE = 3")
# a locked cell the judged tests never read: it runs in the worker only
NOISE = _locked("noise", "NOISE = [0] * 10")


@pytest.mark.parametrize("sandboxed", MODES)
def test_judged_cells_call_the_learner_through_the_channel(tmp_path, sandboxed):
    cells = [
        SETUP, NOISE,
        _answer("scaled", "def scaled(x, k=1):\n    return x * k * SCALE\n"
                          "def shape_of(t):\n    return tuple(t.shape), t.dtype\n"
                          "def bump(t):\n    t.add_(1)\n    return float(t.sum())\n"
                          "def careful(t):\n    return float((t + 1).sum())\n"
                          "def picky(n):\n    if n < 0:\n"
                          "        raise ValueError('n < 0')\n    return n\n"
                          "class Sly(int):\n    def __eq__(self, other):\n        return True\n"
                          "    __hash__ = int.__hash__\n"
                          "def sly(n):\n    return Sly(n)\n"
                          "import sys\n"
                          "def noisy(n):\n    print('to stderr', file=sys.stderr)\n    return n\n"
                          "_SHARED = {}\n"
                          "def shared(n):\n    _SHARED['n'] = n\n    return _SHARED\n"),
        _test("t_plain", "assert scaled(2) == 6 and scaled(2.5, k=2) == 15.0\n"
                         "assert type(scaled(2)) is int\n"
                         "assert shape_of(torch.zeros(2, 3, dtype=torch.bfloat16))"
                         " == ((2, 3), torch.bfloat16)\n"
                         "assert math.isnan(scaled(float('nan')))"),
        _test("t_inplace", "x = torch.arange(4.0)\nkeep = x.clone()\nbump(x)\n"
                           "assert torch.equal(x, keep), 'changed its input'"),
        _test("t_careful", "x = torch.arange(4.0)\nkeep = x.clone()\nassert careful(x) == 10.0\n"
                           "assert torch.equal(x, keep)"),
        _test("t_raises", "try:\n    picky(-1)\nexcept ValueError as e:\n"
                          "    assert 'n < 0' in str(e)\n"
                          "else:\n    raise AssertionError('no ValueError')\nassert picky(3) == 3"),
        _test("t_sly", "assert sly(3) == 4, 'an int that equals everything'"),
        _test("t_noisy", "assert noisy(1) == 1"),
        _test("t_alias", "a = shared(1)\nb = shared(2)\n"
                         "assert a is not b, 'one dict for every caller'"),
        _test("t_partial", "sum(1 for n in range(4) if scaled(n) == 3 * n) / 2", 2.0),
    ]
    judged = {g: ("scaled", "shape_of", "bump", "careful", "picky", "sly", "noisy", "shared")
              for g in ("t_plain", "t_inplace", "t_careful", "t_raises", "t_sly", "t_noisy",
                        "t_alias", "t_partial")}
    found, problem = _run(tmp_path, cells, judged, sandboxed=sandboxed)
    assert problem == "", problem
    assert _scores(found) == {"t_plain": 1, "t_inplace": 0, "t_careful": 1, "t_raises": 1,
                              "t_sly": 0, "t_noisy": 0, "t_alias": 0, "t_partial": 2}, found
    assert "changed its input" in found["t_inplace"].why
    assert "one dict for every caller" in found["t_alias"].why
    assert "to stderr" in found["t_noisy"].why
    assert all(v.why.startswith("judged outside") for v in found.values() if v.why)



def _judges_of(workdir: Path) -> list[int]:
    """The pids of judge processes started for ``workdir``."""
    return sorted(set(pids_with_arg("security.judge")) & set(pids_with_arg(str(workdir))))


def test_a_rerun_that_never_starts_leaves_no_judge_behind(tmp_path):
    """No warm process left for the re-run (``launch`` gives None): the judge, already started
    and waiting for a worker that will never call it, is stopped with the job, not left until
    its wall clock runs out."""
    cells = [SETUP, _answer("scaled", "def scaled(x):\n    return x * SCALE\n"),
             _test("t_plain", "assert scaled(2) == 6")]
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    sub = tmp_path / "sub"
    sub.mkdir()
    nbformat.write(nb, str(sub / "n.ipynb"))
    trusted = {c.metadata["nbgrader"]["grade_id"]: c.source for c in cells
               if c.metadata["nbgrader"].get("locked")}
    found, problem = verdict.rerun(sub / "n.ipynb", sub, tmp_path / "work", trusted,
                                   {"t_plain": 1.0}, sandboxed=False, wall_seconds=300,
                                   launch=lambda *a, **k: None, judged={"t_plain": ("scaled",)})
    assert found == {} and "did not start" in problem, (found, problem)
    assert _judges_of(tmp_path / "work") == [], "the judge outlived its re-run"

def test_the_learner_process_cannot_reach_the_judged_verdict(tmp_path):
    """Learner code that patches the re-run's own scoring (what the static audit refuses, run
    here as if the audit had missed it) forges the cells decided beside it, not the judged ones,
    whose source never reached its process."""
    forge = ("import memlab.autograde.security.verdict as v\n"
             "v.score = lambda *a, **k: (1.0, '')\n"
             "import json\n"
             "def answer(n):\n    return -1\n")
    cells = [SETUP, _answer("a", forge), _test("t_beside", "assert answer(1) == 1"),
             _test("t_judged", "assert answer(1) == 1, 'wrong'")]
    found, problem = _run(tmp_path, cells, {"t_judged": ("answer",)})
    assert problem == ""
    assert _scores(found) == {"t_beside": 1, "t_judged": 0}  # the seam this module closes


def test_a_hang_or_a_death_in_the_learner_process_scores_zero(tmp_path):
    cells = [SETUP, _answer("a", "import time, os\n"
                                 "def slow(n):\n    time.sleep(600)\n"
                                 "def gone(n):\n    os._exit(3)\n"),
             _test("t_slow", "assert slow(1) is None"),
             _test("t_gone", "assert gone(1) is None"),
             _test("t_after", "pass")]
    found, problem = _run(tmp_path, cells, {"t_slow": ("slow",), "t_gone": ("gone",)},
                          cell_timeout=2.0, wall=60.0)
    assert found["t_slow"].score == 0 and "_CellTimeout" in found["t_slow"].why, found
    assert found["t_gone"].score == 0 and "the learner's process" in found["t_gone"].why, found
    assert "t_after" not in found and problem  # the worker died: its later cells have no verdict


def test_split_moves_judged_cells_and_what_they_read():
    prog = [{"kind": "locked", "grade_id": "setup", "source": "import torch\nA = 1\nB = 2",
             "points": 0},
            {"kind": "locked", "grade_id": "heavy", "source": "C = A + 1", "points": 0},
            {"kind": "locked", "grade_id": "unused", "source": "D = 4", "points": 0},
            {"kind": "answer", "grade_id": "f", "source": "def f(x):\n    return x", "points": 0},
            {"kind": "test", "grade_id": "t1", "source": "assert f(C) == C", "points": 1.0},
            {"kind": "test", "grade_id": "t2", "source": "assert f(D) == D", "points": 1.0}]
    worker, cells = judge.split(prog, {"t1": ("f",)})
    assert [c["grade_id"] for c in cells] == ["setup", "heavy", "t1"]
    assert [c.get("sync", False) for c in worker] == [True, True, False, False, False, False]
    assert worker[4] == {"kind": "judged", "grade_id": "t1", "source": "", "points": 1.0, "at": 2}
    assert worker[5] == prog[5]  # not judged: runs beside the learner's code as before
    assert judge.split(prog, {}) == (prog, [])


def test_channel_round_trips_plain_data_and_nothing_else():
    enc, dec = channel.Encoder(), channel.Decoder()
    t = torch.randn(3, 2).to(torch.bfloat16)
    value = [None, True, 3, -2.5, float("inf"), "s", (1, 2), {1: "a", (2, 3): [4]}, torch.float16,
             torch.device("cpu"), torch.Size([2, 3]), t]
    back = dec.decode(enc.encode(value))
    assert back[:11] == value[:11] and type(back[6]) is tuple and type(back[10]) is torch.Size
    assert back[11].dtype == torch.bfloat16 and torch.equal(back[11], t)
    assert math.isinf(back[4])

    class Sly(int):
        pass

    import numpy as np

    for odd in (Sly(3), np.float64(0.5), object()):
        got = dec.decode(enc.encode(odd))
        assert isinstance(got, channel.Opaque) and got != odd and got == got
        assert type(got).__name__ == type(odd).__name__
    from memlab.lessons.oom import JobConfig

    cfg = JobConfig(amp=True, micro_batch=4)
    assert dec.decode(enc.encode(cfg)) == cfg
    for bad in ({"tensor": {"dtype": "float32", "shape": [2], "bytes": "AAAA"}},
                {"dtype": "Tensor"}, {"ref": 7, "value": {"list": []}}, {"exec": "x"},
                {"record": "os:system", "fields": {}}, 2 ** 5000):
        with pytest.raises(channel.ChannelError):
            channel.Decoder().decode(bad)


def test_channel_keeps_aliasing_from_the_learner_side():
    enc, dec = channel.Encoder(remember=True), channel.Decoder()
    shared = {"n": 1}
    first = dec.decode(enc.encode(shared))
    shared["n"] = 2
    second = dec.decode(enc.encode(shared))
    assert first is second and first == {"n": 2}
    assert dec.decode(enc.encode({"n": 1})) is not first
    rows = [{"a": 1}, {"b": [2]}]  # nested containers are numbered before their container
    got = dec.decode(enc.encode(rows))
    assert got == rows and dec.decode(enc.encode(rows)) is got
