"""`grade-class` at scale: jobs as data, any working directory, resumable batches, Dask.

One small class of 00_setup (student ``a`` correct, ``b`` blank) graded through the CLI from a
working directory that is neither the course nor the class folder:

1. a RELATIVE FOLDER with ``--student a`` (regrade of one student, no full batch): a graded;
2. a RELATIVE ZIP into the same report: the ledger says a is done, only b is graded (resume);
3. an ABSOLUTE FOLDER: nothing left to grade, the report still covers both;
4. an ABSOLUTE ZIP with ``--student b``: b is graded again, a comes from the ledger.

Then a real Dask cluster (``dask scheduler`` + two ``dask worker`` processes on localhost)
grades the same class and must give grades identical to the local process pool's.
Marked ``slow`` (kernels): ~2-3 minutes on 2 cores.
"""
from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from course_support import make_course
from memlab.autograde.batch.grade_class import (GradeSettings, grade_class, grade_job, make_job,
                                        validate_result, _read_tree)

ROOT = Path(__file__).resolve().parents[2]
A = "00_setup"
CORRECT = '''
def tensor_bytes(shape, dtype):
    n = 1
    for d in shape:
        n *= int(d)
    return n * dtype.itemsize
'''


def _gid(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    base = tmp_path_factory.mktemp("scale")
    root = base / "course"
    make_course(root, [A])
    released = nbformat.read(root / "notebooks" / A / f"{A}.ipynb", as_version=4)
    for student, answer in (("a", CORRECT), ("b", None)):
        nb = released
        if answer:
            nb = nbformat.reads(nbformat.writes(released), as_version=4)
            [cell] = [c for c in nb.cells if _gid(c) == "tensor_bytes"]
            cell.source = answer.strip()
        folder = base / "class" / student / A
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{A}.ipynb")
    with zipfile.ZipFile(base / "class.zip", "w") as zf:
        for p in sorted((base / "class").rglob("*")):
            zf.write(p, Path("export") / p.relative_to(base / "class"))
    (base / "elsewhere").mkdir()
    return base


def _rows(path: Path, key=("student", "assignment")) -> dict:
    with open(path, newline="") as fh:
        return {tuple(r[k] for k in key): r for r in csv.DictReader(fh)}


def _cli(base: Path, *args: str) -> tuple[int, str]:
    """instructor's CLI in a fresh interpreter, from base/elsewhere, with relative paths."""
    proc = subprocess.run(
        [sys.executable, "-m", "memlab.autograde", "--config", "../course/autograder/nbgrader_config.py",
         "grade-class", *args, "--out", "../report", "--workers", "1", "--cell-timeout", "60",
         "--submission-timeout", "240", "--memory-mb", "3072"],
        cwd=base / "elsewhere", capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def local(course):
    base = course
    steps = {}
    steps["rel_folder"] = _cli(base, "../class", "--student", "a")
    steps["rel_zip"] = _cli(base, "../class.zip")
    steps["abs_folder"] = _cli(base, str(base / "class"))
    # unsandboxed on purpose: the one step that proves kernels are forked warm (a kernel under
    # bubblewrap starts from its own argv and is never forked)
    steps["abs_zip"] = _cli(base, str(base / "class.zip"), "--student", "b", "--no-sandbox")
    return base, steps


@pytest.mark.slow
def test_relative_folder_from_another_directory_grades_for_real(local):
    base, steps = local
    rc, out = steps["rel_folder"]
    assert rc == 0, out
    assert "graded 1 submissions" in out, out
    assert "grader error" not in out and "FileNotFoundError" not in out, out


@pytest.mark.slow
def test_relative_zip_resumes_only_what_is_missing(local):
    base, steps = local
    rc, out = steps["rel_zip"]
    assert rc == 0, out
    assert "graded 1 submissions" in out and "1 already graded" in out, out


@pytest.mark.slow
def test_absolute_folder_has_nothing_left_and_the_report_covers_all(local):
    base, steps = local
    rc, out = steps["abs_folder"]
    assert rc == 0, out
    assert "graded 0 submissions" in out and "2 already graded" in out, out


@pytest.mark.slow
def test_absolute_zip_regrades_one_student(local):
    base, steps = local
    rc, out = steps["abs_zip"]
    assert rc == 0, out
    assert "graded 1 submissions" in out and "report covers 2" in out, out
    rows = _rows(base / "report" / "submissions.csv")
    assert rows[("a", A)]["score"] == "3", rows[("a", A)]
    assert rows[("b", A)]["score"] == "0", rows[("b", A)]
    assert "NotImplementedError" in rows[("b", A)]["reason"]
    lines = (base / "report" / "ledger.jsonl").read_text().splitlines()
    assert len(lines) == 3, "a once, b twice: nothing graded that was not asked for"
    import json

    from memlab.autograde.batch.runner import sandbox_mode

    timings = [json.loads(x)["result"]["timings"] for x in lines]
    *earlier, last = timings
    assert last["kernels_warm"] == 1 and last["kernels_exec"] == 0, (
        f"an unsandboxed job's kernel should be forked warm (no interpreter start): {last}")
    if sandbox_mode({})[0] == "bwrap":  # bubblewrap kernels start from their own argv, never forked
        assert all(t["kernels_warm"] == 0 for t in earlier), earlier
    else:
        assert all(t["kernels_warm"] == 1 and t["kernels_exec"] == 0 for t in earlier), earlier
    assert all(t["verdict"] > 0 for t in timings), "every job re-ran its tests outside the kernel"
    fb = base / "course" / "autograder" / "work" / "feedback" / "a" / A / f"{A}.html"
    assert fb.is_file(), "the grader copies the job's feedback HTML into the course"


def _dask_bin() -> Path:
    return Path(sys.executable).parent / "dask"


@pytest.mark.slow
def test_dask_cluster_grades_identically(local, tmp_path):
    """A real scheduler and two workers (subprocesses on localhost) grade the same class."""
    base, _ = local
    pytest.importorskip("distributed")
    sched_file = tmp_path / "scheduler.json"
    env = dict(os.environ)
    procs = [subprocess.Popen([str(_dask_bin()), "scheduler", "--scheduler-file", str(sched_file),
                               "--port", "0", "--dashboard-address", ":0", "--host", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=open(tmp_path / "scheduler.log", "w"),
                              env=env, cwd=tmp_path)]
    try:
        for _ in range(600):
            if sched_file.is_file() and sched_file.stat().st_size:
                break
            time.sleep(0.1)
        import json

        address = json.loads(sched_file.read_text())["address"]
        for i in range(2):
            procs.append(subprocess.Popen(
                [str(_dask_bin()), "worker", address, "--nthreads", "1", "--nworkers", "1",
                 "--memory-limit", "0", "--dashboard-address", ":0", "--name", f"w{i}",
                 "--host", "127.0.0.1"],
                stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"worker{i}.log", "w"), env=env,
                cwd=tmp_path))
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        settings = GradeSettings(scheduler=address, cell_timeout=60, submission_timeout=240,
                                 memory_mb=3072, resume=False)
        report = grade_class(base / "class.zip", config_path=base / "course" / "autograder" / "nbgrader_config.py",
                             out=tmp_path / "dask_report", settings=settings, progress=False)
        assert report.workers == 2
        # "isolation" says how the last local batch ran (the warm-kernel step runs unsandboxed)
        local_rows = {k: {c: v for c, v in r.items() if c != "isolation"}
                      for k, r in _rows(base / "report" / "submissions.csv").items()}
        dask_rows = {k: {c: v for c, v in r.items() if c != "isolation"}
                     for k, r in _rows(tmp_path / "dask_report" / "submissions.csv").items()}
        assert dask_rows == local_rows, "the Dask cluster graded differently from local processes"
        g_local = _rows(base / "report" / "grades.csv", ("student_id", "assignment"))
        g_dask = _rows(tmp_path / "dask_report" / "grades.csv", ("student_id", "assignment"))
        for key in (("a", A), ("b", A)):
            assert g_dask[key]["score"] == g_local[key]["score"], key
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def test_validate_result_refuses_forged_results():
    course = {"notebooks": [A], "max_scores": {A: {"t1": 2.0}}}
    job = {"student": "s", "assignment": A, "course": course}
    good = {"student": "s", "assignment": A, "status": "ok", "grades": {A: {"t1": [2.0, 2.0, False]}},
            "files": {"autograded/00_setup.ipynb": b"{}"}, "penalties": {}}
    assert validate_result(good, job) == []
    bad = [
        dict(good, student="other"),
        dict(good, grades={A: {"t1": [5.0, 2.0, False]}}),
        dict(good, grades={A: {"t1": [2.0, 9.0, False]}}),
        dict(good, grades={A: {"t2": [1.0, 1.0, False]}}),
        dict(good, grades={"x": {}}),
        dict(good, grades={A: {"t1": [float("nan"), 2.0, False]}}),
        dict(good, files={"../../gradebook.db": b""}),
        dict(good, files={"/etc/passwd": b""}),
        dict(good, status="great"),
        "not a dict",
    ]
    for res in bad:
        assert validate_result(res, job), f"accepted a forged result: {res!r}"


def test_grade_job_times_out_and_reports(tmp_path, monkeypatch):
    """A job whose grading outlives its limit is killed and scores 0 with the reason (a check
    hook that blocks on purpose: a kernel-free test of the limit machinery)."""
    (tmp_path / "slowcheck.py").write_text("import time\n\ndef check(job, dest, release):\n"
                                           "    time.sleep(120)\n    return {}\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    # a bundle of this assignment's (the job refuses another's at once, which, before the child
    # imported nbgrader lazily, happened to take longer than the limit)
    course = {"assignment": A, "notebooks": [A], "max_scores": {A: {}}, "gradebook": b"",
              "config": (ROOT / "autograder" / "nbgrader_config.py").read_text(),
              "release": {}, "data": {}, "fingerprint": "x"}
    settings = {"cell_timeout": 5, "submission_timeout": 2, "memory_mb": 0, "threads": 1, "warm": False,
                "kernelspec": "memlab.autograde.batch.runner:limited_kernelspec",
                "checks": ["slowcheck:check"]}
    job = make_job("s", A, {"x.txt": b"1"}, course, settings)
    t0 = time.monotonic()
    res = grade_job(job)
    assert time.monotonic() - t0 < 30
    assert res["status"] == "failed" and "over the 2 s limit" in res["reasons"][0], res


def test_read_tree_skips_links_and_checkpoints(tmp_path):
    (tmp_path / "s" / ".ipynb_checkpoints").mkdir(parents=True)
    (tmp_path / "s" / "a.ipynb").write_text("{}")
    (tmp_path / "s" / ".ipynb_checkpoints" / "a-checkpoint.ipynb").write_text("{}")
    (tmp_path / "s" / "link").symlink_to("/etc/passwd")
    assert _read_tree(tmp_path / "s") == {"a.ipynb": b"{}"}


@pytest.mark.slow
def test_dask_executor_sends_each_assignment_its_own_course_files(monkeypatch):
    """The course bundle goes to the cluster once per assignment; two assignments must not
    share one (a dict given to scatter() would become the cluster's data keys)."""
    distributed = pytest.importorskip("distributed")
    from memlab.autograde.batch import grade_class as gc

    monkeypatch.setattr(gc, "grade_job", lambda job: (job["assignment"], job["course"]["assignment"]))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster:
        ex = gc._Executor(GradeSettings(scheduler=cluster.scheduler_address), 2)
        try:
            futures = [ex.submit({"student": "s", "assignment": a, "digest": "d" * 8,
                                  "course": {"assignment": a, "config": "", "release": {a: b"x"}}})
                       for a in ("00_x", "01_y", "00_x")]
            assert [f.result(timeout=60) for f in futures] == [("00_x", "00_x"), ("01_y", "01_y"),
                                                              ("00_x", "00_x")]
        finally:
            ex.close()


@pytest.mark.slow
def test_zygote_dies_with_its_parent_even_when_a_sibling_holds_its_pipe():
    """A killed grader leaves no warm zygote behind grading on its own, even when a process it
    forked (a pool worker, here a sleeper) still holds the write end of the zygote's stdin."""
    import signal
    import subprocess
    import time

    code = ("import os, sys, time\n"
            "from memlab.autograde.batch import processes as g\n"
            "g.warm_up()\n"
            "pid = os.fork()\n"
            "if pid == 0:\n    time.sleep(120)\n    os._exit(0)\n"
            "print(g._ZYGOTE.pid, pid, flush=True)\n"
            "time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    zygote, sibling = map(int, parent.stdout.readline().split())
    try:
        parent.kill()
        parent.wait()

        def alive(pid):
            try:
                with open(f"/proc/{pid}/status") as fh:
                    return "\nState:\tZ" not in fh.read()
            except FileNotFoundError:
                return False

        assert alive(sibling)  # the sibling still holds the pipe: EOF never comes
        deadline = time.monotonic() + 20
        while alive(zygote) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(zygote), "the zygote outlived its parent"
    finally:
        for pid in (zygote, sibling):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_zygote_loop_watches_the_parent_it_started_with():
    """The zygote reads its parent's pid before its slow imports: a grader killed while the
    zygote was importing left it reparented before it first looked, and it graded on alone
    (the slow test above failed that way on a loaded machine). The loop ends when the parent
    it was given is no longer its parent, even though the pipe never reaches EOF."""
    import os
    import time

    from memlab.autograde.batch import processes as warm

    r, w = os.pipe()
    try:
        os.write(w, b"job-1\n")
        t0 = time.monotonic()
        gone = os.getppid() + 1  # not our parent: as if it had died and we were reparented
        assert list(warm._lines_while_parent_lives(r, poll_s=0.05, parent=gone)) == ["job-1"]
        assert time.monotonic() - t0 < 5
        os.write(w, b"job-2\n")
        os.close(w)
        w = -1
        assert list(warm._lines_while_parent_lives(r, poll_s=0.05)) == ["job-2"]  # EOF ends it
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_kernel_threads_count_the_verdict_rerun_beside_the_kernel():
    """Threads per learner process share the cores among everything that runs at once: each
    job runs its kernel and, with the verdict, its re-run side by side (1 worker on 2 cores
    ran 2 + 2 threads on 2 cores before)."""
    from memlab.autograde.batch.grade_class import kernel_threads

    assert kernel_threads(GradeSettings(), n_local=1, cores=2) == 1
    assert kernel_threads(GradeSettings(verdict=False), n_local=1, cores=2) == 2
    assert kernel_threads(GradeSettings(), n_local=2, cores=16) == 4
    assert kernel_threads(GradeSettings(), n_local=4, cores=2) == 1
    assert kernel_threads(GradeSettings(scheduler="tcp://h:8786"), n_local=1, cores=16) == 1
    assert kernel_threads(GradeSettings(threads_per_kernel=3), n_local=1, cores=2) == 3
