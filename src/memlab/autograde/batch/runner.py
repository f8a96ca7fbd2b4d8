"""The job runner: one submission graded in its own temporary course (in the grading child).

Part of :mod:`memlab.autograde.batch.grade_class` (which re-exports the public names). What runs inside
the child process that :func:`memlab.autograde.batch.processes._child_main` starts for a job:
:func:`_grade_in_child` builds a private course from the job's data, runs the checks
(``settings["checks"]``, resolved by dotted name), writes the kernelspec
(``settings["kernelspec"]``, default :func:`limited_kernelspec`), starts the re-runs outside the
learner's kernel (:class:`_VerdictRuns`, :mod:`memlab.autograde.security.verdict`) beside nbgrader's
autograde, writes the feedback, and returns the result dict: scores per graded cell lowered to
the re-runs' verdicts, what each autograded notebook shows (:func:`_scan`), and the autograded
notebooks and feedback as bytes. The job's own gradebook is fingerprinted before and after, so
learner code that wrote to it is reported (:func:`_db_tampered`).

Knows nothing of how its process was started (tests/test_layers.py): the warm kernel manager's
name and counts are handed in by :mod:`memlab.autograde.batch.processes`.
"""
from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any, Callable

# "NEEDS MANUAL REVIEW:" (as memlab.grading.interview.bank's)
from memlab.autograde.security.audit import REVIEW_PREFIX as REVIEW_MARKER
from memlab.autograde.security.audit import _meta
from memlab.autograde.batch.intake import (_read_tree, _write_tree, at_most, plain_text,
                                           remove_tree)
from memlab.grading.answers.result import REVIEW_HEAD as RUBRIC_REVIEW_HEAD

GUARD_MARKER = "grading guard:"   # memlab.grading.guard's messages start with it
MAX_RESULT_FILE_BYTES = 200 * 1024 ** 2  # an autograded/feedback file larger than this is dropped


def _first_line(text: str, n: int = 140) -> str:
    text = " ".join(plain_text(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _scan(nb_path: Path) -> dict:
    """What happened in an autograded notebook: per grade cell errors and stderr, kernel events
    in answer cells, review lines and guard messages."""
    import nbformat

    nb = nbformat.read(str(nb_path), as_version=4)
    tests: dict[str, dict] = {}
    events: list[str] = []
    reviews: list[str] = []
    guards: list[str] = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        m = _meta(cell)
        gid = m.get("grade_id") or f"cell {cell.get('id', '?')}"
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        stderr = "".join(o.get("text", "") for o in cell.get("outputs", [])
                         if o.get("output_type") == "stream" and o.get("name") == "stderr")
        stdout = "".join(o.get("text", "") for o in cell.get("outputs", [])
                         if o.get("output_type") == "stream" and o.get("name") == "stdout")
        for line in (stdout + "\n" + stderr).splitlines():
            s = line.strip()
            if s.startswith(REVIEW_MARKER):
                reviews.append(_first_line(s[len(REVIEW_MARKER):], 400))
            elif s.startswith(RUBRIC_REVIEW_HEAD) and m.get("grade") and not m.get("solution"):
                # a rubric's report head (01-06's written answers): name the test cell; long
                # enough to quote the sentence the rubric could not check
                reviews.append(_first_line(f"{gid}: {s[len(RUBRIC_REVIEW_HEAD):].strip()}", 400))
            if s.startswith(GUARD_MARKER):
                guards.append(_first_line(s[len(GUARD_MARKER):], 200))
        for e in errors:
            if e.get("ename") == "TamperError":
                msg = str(e.get("evalue", ""))
                guards.append(_first_line(msg[len(GUARD_MARKER):] if msg.startswith(GUARD_MARKER) else msg, 200))
            if e.get("ename") in ("CellTimeoutError", "TimeoutError") or (
                    e.get("ename") == "KeyboardInterrupt"):
                events.append(f"{gid}: interrupted after the per-cell timeout")
            elif e.get("ename") in ("MemoryError", "OutOfMemoryError") or (
                    "can't allocate memory" in str(e.get("evalue", "")).lower()
                    or "not enough memory" in str(e.get("evalue", "")).lower()):
                events.append(f"{gid}: memory limit hit")
            elif e.get("ename") == "SystemExit":
                events.append(f"{gid}: called sys.exit() (the kernel stays up, later cells run)")
            elif e.get("ename") == "StdinNotImplementedError":
                events.append(f"{gid}: waited for input() (no stdin in grading)")
        if m.get("grade") and not m.get("solution"):
            tests[gid] = {
                "error": (f"{errors[0].get('ename')}: {_first_line(errors[0].get('evalue', ''), 100)}"
                          .rstrip(": ") if errors else ""),
                "stderr": _first_line(stderr, 100) if stderr.strip() else "",
            }
    more = "... and {n} more, not listed"
    return {"tests": tests, "events": at_most(events, more), "reviews": at_most(reviews, more),
            "guards": at_most(sorted(set(guards)), more)}


def _seal(folder: Path) -> list[str]:
    """Remove from ``folder`` (not following links) everything that is neither a regular file
    nor a folder: links, sockets, FIFOs, devices. Returns their paths relative to ``folder``.
    Run on nbgrader's autograded folder before any unsandboxed step reads it (feedback,
    the scan, the copy into the result)."""
    removed: list[str] = []
    if not folder.is_dir() or folder.is_symlink():
        return removed
    for top, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
                continue
            os.unlink(path)
            if name in dirs:
                dirs.remove(name)
            removed.append(os.path.relpath(path, folder))
    return sorted(removed)


def _sanitize_autograded(autograded: Path, release_dir: Path) -> int:
    """Clean every autograded notebook (:mod:`memlab.autograde.security.sanitize`) before the
    feedback and formgrader render it; the release's own markdown stays as written, and no
    output holds a line of a hidden test."""
    import nbformat

    from memlab.autograde.security.sanitize import hide_hidden_lines, sanitize_notebook

    course_text: set[str] = set()
    for rel in release_dir.rglob("*.ipynb"):
        try:
            course_text |= {c.source for c in nbformat.read(str(rel), as_version=4).cells
                            if c.cell_type in ("markdown", "raw")}
        except Exception:  # the course's own file, unreadable: nothing to keep then
            continue
    changed = 0
    for nb_path in sorted(autograded.glob("*.ipynb")):
        nb = nbformat.read(str(nb_path), as_version=4)
        n = sanitize_notebook(nb, course_text) + hide_hidden_lines(nb)
        if n:
            nbformat.write(nb, str(nb_path))
            changed += n
    return changed


def _db_fingerprint(db_path: str) -> tuple:
    """What autograde never changes: source cells, grade cell points and manual scores."""
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            return (con.execute("SELECT id, source, checksum FROM source_cell ORDER BY id").fetchall(),
                    con.execute("SELECT id, max_score FROM grade_cells ORDER BY id").fetchall(),
                    con.execute("SELECT id, manual_score, extra_credit FROM grade ORDER BY id").fetchall())
        finally:
            con.close()
    except sqlite3.Error as exc:
        return ("unreadable", str(exc))


def _db_tampered(before: tuple, after: tuple) -> bool:
    """Rows that existed must be unchanged; rows autograde added carry no manual score."""
    if "unreadable" in (before[0], after[0]):
        return before != after
    for old, new in zip(before, after):
        old_d, new_d = {r[0]: r for r in old}, {r[0]: r for r in new}
        if any(new_d.get(k) != v for k, v in old_d.items()):
            return True
    added = [r for r in after[2] if r[0] not in {x[0] for x in before[2]}]
    return any(r[1] is not None or r[2] is not None for r in added)


def _classify_failure(log: str) -> str:
    if "DeadKernelError" in log or "Kernel died" in log:
        return "the kernel died (sys/os exit, a kill, or the memory limit): scores 0"
    if "No notebooks found" in log:
        return "no gradable notebook: scores 0"
    lines = [ln.strip() for ln in log.splitlines() if ln.strip() and not ln.startswith("[")]
    tail = next((ln for ln in reversed(lines) if "Error" in ln or "Exception" in ln), "unknown error")
    return f"nbgrader could not grade it ({_first_line(tail, 120)}): scores 0"


def sandbox_mode(settings: Any) -> tuple[str, str]:
    """(kind, why) of the sandbox these settings (a job's settings dict or a
    :class:`~memlab.autograde.batch.grade_class.GradeSettings`) give every learner process:
    ``"landlock"`` (warm forks that confine themselves, :mod:`memlab.autograde.security.landlock`; needs the
    warm fork), ``"bwrap"`` (a fresh interpreter under bubblewrap, :mod:`memlab.autograde.security.bwrap`)
    or ``""`` (none: why). ``sandbox_kind``: "auto" (Landlock where usable, else bubblewrap),
    "landlock" or "bwrap" (that one only; "landlock" falls back to bubblewrap when unusable)."""
    from memlab.autograde.security import landlock as confine
    from memlab.autograde.security import bwrap as sandbox

    def get(key: str, default: Any) -> Any:
        return settings.get(key, default) if isinstance(settings, dict) else getattr(settings, key, default)

    if not get("sandbox", True):
        return "", "disabled (--no-sandbox)"
    kind = get("sandbox_kind", "auto") or "auto"
    if kind not in ("auto", "landlock", "bwrap"):
        raise ValueError(f"sandbox_kind must be auto, landlock or bwrap, not {kind!r}")
    landlock_why = ""
    if kind != "bwrap":
        if not get("warm", True):
            landlock_why = "Landlock confines warm forks only (warm=False)"
        else:
            ok, landlock_why = confine.available()
            if ok:
                return "landlock", landlock_why
    ok, why = sandbox.available()
    if ok:
        return "bwrap", why
    return "", why + (f"; Landlock: {landlock_why}" if landlock_why else "")


def sandbox_state(settings: Any) -> tuple[bool, str]:
    """(learner code runs sandboxed, why): :func:`sandbox_mode` as a yes/no."""
    kind, why = sandbox_mode(settings)
    return bool(kind), (f"{kind}: {why}" if kind else why)


def limited_kernelspec(data_dir: Path, settings: dict) -> str:
    """Default kernel launch: :mod:`memlab.autograde.security.kernel` with ``RLIMIT_AS`` and
    ``PR_SET_PDEATHSIG``. A kernelspec hook is ``f(jupyter_data_dir, settings) -> kernel name``:
    it writes ``kernels/<name>/kernel.json`` under ``jupyter_data_dir`` (put first on
    JUPYTER_PATH for the job). Kernels whose argv starts with ``[sys.executable, "-m",
    "memlab.autograde.security.kernel"]`` are forked warm when ``settings["warm"]``; any other argv (a
    sandbox wrapper) is started with exec as usual."""
    from memlab.autograde.security.kernel import KERNEL_NAME, write_kernelspec

    write_kernelspec(data_dir, memory_mb=int(settings.get("memory_mb") or 0))
    return KERNEL_NAME


def _resolve(name: str) -> Callable:
    import importlib

    module, _, attr = name.partition(":")
    return getattr(importlib.import_module(module), attr)


def _failed_result(job: dict, reason: str, seconds: float) -> dict:
    return {"student": job["student"], "assignment": job["assignment"], "status": "failed",
            "reasons": [reason], "grades": {}, "penalties": {}, "scans": {}, "files": {},
            "seconds": round(seconds, 2)}


OUTPUT_CAP_NOTE = ("[output cut by the grader: this notebook printed more than {mb:g} MiB; "
                   "what it printed after that is not kept]\n")


def cap_outputs(limit_bytes: int) -> None:
    """Keep at most ``limit_bytes`` of outputs per notebook while nbgrader runs it (this grading
    child only): nbclient appends every output message the kernel sends to the cell before
    nbgrader's ``LimitOutput`` trims anything, so a kernel that prints a gigabyte would first
    cost this unsandboxed process a gigabyte. Past the cap each further output is replaced by
    one note per cell; an error or a write to stderr is still kept (shortened), so a cell that
    fails still scores 0."""
    import nbclient.client as nc
    import nbformat

    original = getattr(nc.NotebookClient.output, "__wrapped__", nc.NotebookClient.output)
    if limit_bytes <= 0:
        nc.NotebookClient.output = original
        return

    def output(self, outs, msg, display_id, cell_index):
        used = getattr(self, "_memlab_output_bytes", 0)
        size = len(json.dumps(msg.get("content", {}), default=str)) if used <= limit_bytes else 0
        self._memlab_output_bytes = used + size
        if used + size <= limit_bytes:
            return original(self, outs, msg, display_id, cell_index)
        # Past the cap, what decides a score is still kept, small: an error (nbgrader scores a
        # cell with an error 0), a mark that the cell wrote to stderr (also 0); the rest is dropped.
        cut = self.__dict__.setdefault("_memlab_cut_cells", set())
        content = msg.get("content", {})
        if msg.get("msg_type") == "error":
            small = {"ename": str(content.get("ename", ""))[:200],
                     "evalue": str(content.get("evalue", ""))[:1000], "traceback": []}
            return original(self, outs, {**msg, "content": small}, display_id, cell_index)
        if msg.get("msg_type") == "stream" and content.get("name") == "stderr":
            if (cell_index, "stderr") not in cut:
                cut.add((cell_index, "stderr"))
                note = OUTPUT_CAP_NOTE.format(mb=limit_bytes / 2**20)
                outs.append(nbformat.v4.new_output("stream", name="stderr", text=note))
        elif cell_index not in cut:
            cut.add(cell_index)
            note = OUTPUT_CAP_NOTE.format(mb=limit_bytes / 2**20)
            outs.append(nbformat.v4.new_output("stream", name="stdout", text=note))
        return None

    output.__wrapped__ = original
    nc.NotebookClient.output = output


def _grade_in_child(job: dict, jobdir: Path, kernel_manager: str | None = None,
                    launched: dict | None = None, confined_manager: str | None = None,
                    launch: Callable | None = None) -> dict:
    """The grading itself, in the job's private temporary course under ``jobdir``.

    ``kernel_manager``: dotted name of the kernel manager that takes the kernels pre-forked for
    this job (used when ``settings["warm"]`` and the kernel is not sandboxed), ``launched``: its
    counts of kernels started each way ({"warm": n, "exec": n}, reported in the timings);
    ``confined_manager`` and ``launch`` (hands orders to a pre-forked process): the same for the
    Landlock sandbox, kernels and verdict re-runs. All come from
    :func:`memlab.autograde.batch.processes._child_main`, which starts this process."""
    import warnings

    from memlab.autograde import course
    from memlab.autograde.batch import timeouts  # imports nbgrader: in the child only

    warnings.filterwarnings("ignore", message=".*not in session.*")
    t0 = time.monotonic()
    s = job["settings"]
    student, assignment = job["student"], job["assignment"]
    config, release_dir = _write_course(job, jobdir)
    overrides, mode = _kernel_overrides(s, jobdir, kernel_manager, confined_manager, launch)
    timeouts.CURRENT = None
    if s.get("verdict", True):  # one cell timeout for the kernel and its re-run
        timeouts.CURRENT = timeouts.Ledger(jobdir / "verdict")
        overrides.setdefault("Autograde", {})["autograde_preprocessors"] = (
            timeouts.autograde_preprocessors())
    cap_outputs(int(float(s.get("output_cap_mb", 8)) * 1024 * 1024))
    api = course.make_api(config, overrides=overrides)
    cd = api.coursedir
    dest = Path(cd.format_path(cd.submitted_directory, student, assignment))
    dest.mkdir(parents=True)
    _write_tree(dest, job["files"])
    reasons, zero = _run_checks(job, dest, release_dir)
    db_path = cd.db_url.replace("sqlite:///", "", 1)
    before = _db_fingerprint(db_path)
    status = "ok"
    timings = {"setup": round(time.monotonic() - t0, 2)}
    reruns = (_VerdictRuns(job, cd, dest, jobdir, s, time.monotonic() - t0,
                           launch if mode == "landlock" else None)
              if s.get("verdict", True) else None)
    result = api.autograde(assignment, student, force=True, create=True)
    timings["autograde"] = round(time.monotonic() - t0 - timings["setup"], 2)
    timings["kernels_warm"] = (launched or {}).get("warm", 0)
    timings["kernels_exec"] = (launched or {}).get("exec", 0)
    if _db_tampered(before, _db_fingerprint(db_path)):
        reasons.append("learner code wrote to the grading worker's gradebook (discarded: only "
                       "the scores computed from the notebook's outputs reach the course "
                       "gradebook)")
    if not result.get("success"):
        status = "failed"
        reasons.append(_classify_failure((result.get("log") or "") + (result.get("error") or "")))
    autograded = Path(cd.format_path(cd.autograded_directory, student, assignment))
    feedback = Path(cd.format_path(cd.feedback_directory, student, assignment))
    reasons += _clean_autograded(autograded)
    if status == "ok":
        reasons += _write_feedback(api, autograded, release_dir, assignment, student, timings)
    status, sub, grades, penalties = _read_grades(cd, assignment, student, status, zero)
    if reruns is not None:
        lowered = _finish_reruns(reruns, grades, timings)
        if status == "ok" and sub is not None:
            reasons += lowered
    scans, files = _collect_outputs(autograded, feedback) if status == "ok" else ({}, {})
    for name, event in (timeouts.CURRENT.stopped if timeouts.CURRENT else []):
        if name in scans:  # which run reached the cell's limit first, and stopped the other
            scans[name]["events"].append(event)
    return {"student": student, "assignment": assignment, "status": status, "reasons": reasons,
            "grades": grades, "penalties": penalties, "scans": scans, "files": files,
            "timings": timings, "seconds": round(time.monotonic() - t0, 2)}


def _write_course(job: dict, jobdir: Path) -> tuple[Path, Path]:
    """The job's private course under ``jobdir``, from its bundle: (nbgrader config, release
    folder)."""
    bundle, assignment = job["course"], job["assignment"]
    if bundle.get("assignment") != assignment:
        raise RuntimeError(f"the job for {assignment} came with the course files of "
                           f"{bundle.get('assignment')}")
    root = jobdir / "course"
    (root / "autograder" / "work").mkdir(parents=True)
    config = root / "autograder" / "nbgrader_config.py"
    config.write_text(bundle["config"])
    (root / "autograder" / "work" / "gradebook.db").write_bytes(bundle["gradebook"])
    _write_tree(root / "solutions" / assignment, bundle["data"])
    release_dir = jobdir / "release"
    _write_tree(release_dir, bundle["release"])
    return config, release_dir


def _kernel_overrides(s: dict, jobdir: Path, kernel_manager: str | None,
                      confined_manager: str | None, launch: Callable | None) -> tuple[dict, str]:
    """Write the kernelspec (put first on JUPYTER_PATH); return (nbgrader config overrides:
    how each kernel starts, in which sandbox, then the job's own overrides; sandbox mode)."""
    jupyter = jobdir / "jupyter"
    kernel_name = _resolve(s["kernelspec"])(jupyter, s)
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [str(jupyter), *filter(None, [os.environ.get("JUPYTER_PATH")])])
    # store_widget_state: a widget's state is the learner's data this unsandboxed process would
    # keep for every widget, past the output cap (48 text areas of 96 MiB each); grading needs
    # none of it, and the report drops it from the notebook anyway (sanitize)
    overrides: dict = {"Execute": {"timeout": int(s["cell_timeout"]), "kernel_name": kernel_name,
                                   "store_widget_state": False}}
    mode = sandbox_mode(s)[0]
    if mode == "landlock" and not (confined_manager and launch):
        raise RuntimeError("the Landlock sandbox needs the warm grading process")
    if mode == "landlock":
        # Kernel forked warm, confined by itself to its run folder before it starts
        # (memlab.autograde.security.landlock); never started unconfined.
        overrides["Execute"]["kernel_manager_class"] = confined_manager
    elif mode == "bwrap":
        # Kernel under bubblewrap (memlab.autograde.security.bwrap): started from its own argv,
        # never from the warm fork; killed from outside at the submission's wall limit.
        overrides["Execute"]["kernel_manager_class"] = (
            "memlab.autograde.security.bwrap.SandboxKernelManager")
        overrides["SandboxKernelManager"] = {
            "sandbox": True, "wall_seconds": float(s.get("submission_timeout") or 0)}
    elif s.get("warm", True) and kernel_manager:
        overrides["Execute"]["kernel_manager_class"] = kernel_manager
    if mode:  # each sandboxed kernel runs in its own copy under run/, never in nbgrader's folders
        (jobdir / "run").mkdir()
        overrides.setdefault("SandboxKernelManager", {})["run_root"] = str(jobdir / "run")
    for section, values in (s.get("config_overrides") or {}).items():
        overrides.setdefault(section, {}).update(values)
    return overrides, mode


def _run_checks(job: dict, dest: Path, release_dir: Path) -> tuple[list[str], set[tuple[str, str]]]:
    """The job's checks (``settings["checks"]``) on the submitted folder, in order: (reasons,
    (notebook, grade_id) of the cells that score 0)."""
    reasons: list[str] = []
    zero: set[tuple[str, str]] = set()
    for name in job["settings"]["checks"]:
        found = _resolve(name)(job, dest, release_dir) or {}
        reasons += list(found.get("reasons", []))
        zero |= {(str(nb), str(gid)) for nb, gid in found.get("zero", [])}
    return reasons, zero


def _clean_autograded(autograded: Path) -> list[str]:
    """The kernel's folder removed and the graded folder sealed (:func:`_seal`) before any
    unsandboxed step reads it; the reasons."""
    from memlab.autograde.security.bwrap import KERNEL_DIR

    remove_tree(autograded / KERNEL_DIR)  # sockets, HOME, /tmp of the kernel
    planted = _seal(autograded)
    if planted:
        return [f"{len(planted)} link(s) or special file(s) found in the graded folder "
                f"({_first_line(', '.join(planted), 80)}): removed, never followed"]
    return []


def _write_feedback(api, autograded: Path, release_dir: Path, assignment: str, student: str,
                    timings: dict) -> list[str]:
    """The autograded notebooks sanitized, then nbgrader's feedback (timed); the reasons."""
    _sanitize_autograded(autograded, release_dir)
    t_fb = time.monotonic()
    fb = api.generate_feedback(assignment, student, force=True)
    timings["feedback"] = round(time.monotonic() - t_fb, 2)
    if not fb.get("success"):
        return ["feedback HTML could not be written"]
    return []


def _read_grades(cd, assignment: str, student: str, status: str, zero: set[tuple[str, str]]):
    """(status, submission or None, grades, late penalties) from the job's gradebook: grades
    are notebook -> grade_id -> [auto score, max score, needs manual grade]; a failed job and
    the cells in ``zero`` score 0."""
    from nbgrader.api import Gradebook, MissingEntry

    grades: dict[str, dict[str, list]] = {}
    penalties: dict[str, float] = {}
    with Gradebook(cd.db_url, cd.course_id) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:  # nbgrader stopped before it recorded the submission
            status, sub = "failed", None
        for snb in (sub.notebooks if sub is not None else []):
            penalties[snb.name] = (float(snb.late_submission_penalty or 0.0) if status == "ok"
                                   else 0.0)
            for g in snb.grades:
                auto = g.auto_score if status == "ok" else 0.0
                if (snb.name, g.name) in zero:
                    auto = 0.0
                grades.setdefault(snb.name, {})[g.name] = [
                    None if auto is None else float(auto), float(g.max_score),
                    bool(g.needs_manual_grade) if status == "ok" else False]
    return status, sub, grades, penalties


def _finish_reruns(reruns: _VerdictRuns, grades: dict, timings: dict) -> list[str]:
    """Wait for the re-runs (they ran beside autograde), lower ``grades`` to their verdicts
    (timed); the reasons."""
    t_v = time.monotonic()
    lowered = reruns.finish(grades)
    timings["verdict_wait"] = round(time.monotonic() - t_v, 2)
    timings["verdict"] = round(time.monotonic() - reruns.t0, 2)
    return lowered


def _collect_outputs(autograded: Path, feedback: Path) -> tuple[dict, dict]:
    """(what each autograded notebook shows, :func:`_scan`; the result's files as bytes: the
    autograded folder and each notebook's feedback HTML, none over MAX_RESULT_FILE_BYTES)."""
    scans, files = {}, {}
    for nb_path in sorted(autograded.glob("*.ipynb")):
        scans[nb_path.stem] = _scan(nb_path)
    for step, folder in (("autograded", autograded), ("feedback", feedback)):
        if folder.is_dir():
            for name, data in _read_tree(folder).items():
                # feedback is the HTML of each notebook, nothing else of the job's folder
                if len(data) <= MAX_RESULT_FILE_BYTES and (
                        step == "autograded" or ("/" not in name and name.endswith(".html"))):
                    files[f"{step}/{name}"] = data
    return scans, files


class _VerdictRuns:
    """The re-runs outside the learner's kernel (:mod:`.verdict`) of one job's notebooks, one
    thread each, started before nbgrader's autograde so that both run at the same time (they
    share nothing: each starts from the submitted files, in its own folder)."""

    def __init__(self, job: dict, cd, dest: Path, jobdir: Path, s: dict, spent: float,
                 launch: Callable | None = None):
        import threading

        self.launch = launch
        from nbgrader.api import Gradebook, MissingEntry

        from memlab.grading.assignments import ASSIGNMENTS

        known = ASSIGNMENTS.get(job["assignment"])
        judging = known is not None and job["settings"].get("judge", True)
        self.judged = dict(known.judged) if judging else {}

        self.t0 = time.monotonic()
        self.sources: dict[str, tuple[dict, dict]] = {}
        self.found: dict[str, tuple[dict, str]] = {}
        with Gradebook(cd.db_url, cd.course_id) as gb:
            for name in job["course"]["notebooks"]:
                try:
                    nbm = gb.find_notebook(name, job["assignment"])
                except MissingEntry:
                    continue
                answers = {c.name for c in nbm.solution_cells}
                trusted = {c.name: c.source for c in nbm.source_cells
                           if c.locked and c.cell_type == "code"}
                points = {c.name: float(c.max_score) for c in nbm.grade_cells
                          if c.cell_type == "code" and c.name not in answers}
                if points and (dest / f"{name}.ipynb").is_file():
                    self.sources[name] = (trusted, points)
        wall = max(60.0, float(s.get("submission_timeout") or 900) - spent)
        self.threads = [threading.Thread(target=self._run, daemon=True, name=f"verdict-{name}",
                                         args=(name, dest, jobdir, s, wall))
                        for name in self.sources]
        for th in self.threads:
            th.start()

    def _run(self, name: str, dest: Path, jobdir: Path, s: dict, wall: float) -> None:
        from memlab.autograde.security import verdict

        trusted, points = self.sources[name]
        try:
            self.found[name] = verdict.rerun(
                dest / f"{name}.ipynb", dest, jobdir / "verdict" / name, trusted, points,
                sandboxed=sandbox_state(s)[0], wall_seconds=wall, launch=self.launch,
                cell_timeout=float(s.get("cell_timeout") or 300),
                memory_mb=int(s.get("memory_mb") or 0), judged=self.judged,
                on_timeout=self._timed_out(name))
        except Exception as exc:  # the grader's own failure: no verdict, said so
            self.found[name] = ({}, f"the re-run could not run ({type(exc).__name__}: {exc})")

    @staticmethod
    def _timed_out(name: str) -> Callable[[str], None] | None:
        from memlab.autograde.batch import timeouts

        ledger = timeouts.CURRENT
        return None if ledger is None else (lambda gid: ledger.rerun_timed_out(name, gid))

    def finish(self, grades: dict) -> list[str]:
        """Wait for the re-runs; lower ``grades`` to their verdicts; return the reasons."""
        from memlab.autograde.security import verdict

        for th in self.threads:
            th.join()
        reasons: list[str] = []
        for name, (trusted, points) in self.sources.items():
            if name in grades:
                found, problem = self.found.get(name, ({}, "the re-run gave no verdict"))
                reasons += verdict.combine(grades[name], found, problem, points)
        return reasons
