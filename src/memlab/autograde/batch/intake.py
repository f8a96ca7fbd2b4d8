"""Submission intake for class grading: what arrives, and the checks before anything runs.

Part of :mod:`memlab.autograde.batch.grade_class` (which re-exports the public names): unpacking a zip
(:func:`_safe_extract`), finding the ``<student>/<assignment>/`` folders (:func:`find_layout`,
:func:`_collect_jobs`), a submission's files as bytes and back (:func:`_read_tree`,
:func:`_write_tree`), its ``timestamp.txt`` (:func:`_timestamp`), and the default checks a job
runs on the submitted notebooks before grading (:func:`structure_check`: repaired against the
release; :func:`audit_check`: the static audit of answer cells).

The bottom of class grading: imports nothing of the other parts (tests/test_layers.py).
"""
from __future__ import annotations

import copy
import os
import shutil
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any, Sequence

# the same reading of a cell's nbgrader metadata everywhere
from memlab.autograde.security.audit import _meta

MAX_ZIP_BYTES = 2 * 1024 ** 3       # refuse zips that unpack to more than this
MAX_NOTEBOOK_BYTES = 100 * 1024 ** 2  # a submitted notebook larger than this is not graded
MAX_SUBMISSION_BYTES = 100 * 1024 ** 2  # one submission's files together (stat sizes: sparse count)
# Cell tags that change whether nbclient runs a cell: "skip-execution" would leave a test cell
# unrun (and nbgrader scores an unrun test cell as passed); removed from every cell. (The
# releases' own "raises-exception" tags stay: nbgrader runs with allow_errors, they change
# nothing in grading and keep Run All going for the learner.)
EXECUTION_TAGS = ("skip-execution",)


def _safe_extract(zip_path: Path, dest: Path) -> None:
    with zipfile.ZipFile(zip_path) as zf:
        total = 0
        for info in zf.infolist():
            name = info.filename.replace("\\", "/")
            parts = [p for p in name.split("/") if p not in ("", ".")]
            if not parts or ".." in parts or name.startswith("/") or parts[0].startswith("__MACOSX"):
                continue
            total += info.file_size
            if total > MAX_ZIP_BYTES:
                raise ValueError(f"{zip_path} unpacks to more than {MAX_ZIP_BYTES} bytes")
            target = dest.joinpath(*parts)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)


def find_layout(folder: Path, assignments: Sequence[str]) -> Path:
    """The folder whose children are students and grandchildren assignments: ``folder`` itself
    or a chain of single subfolders below it (a zip's top folder, ``submitted/``)."""
    folder = Path(folder)
    for _ in range(4):
        subdirs = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")]
        if any((s / a).is_dir() for s in subdirs for a in assignments):
            return folder
        if len(subdirs) == 1:
            folder = subdirs[0]
            continue
        break
    raise ValueError(f"no <student>/<assignment>/ folders for assignments {list(assignments)} "
                     f"found in {folder}")


# LMS downloads that put every student's file side by side, one flat folder:
# Canvas: "<sortablename>_<userid>_<submissionid>_<filename>", "late" after the name when late.
FLAT_PRESETS = {
    "canvas": r"^(?P<student>[A-Za-z0-9-]+)_(?:late_|LATE_)?\d+_\d+_(?P<file>.+)$",
}


def remove_tree(path: Path) -> None:
    """``shutil.rmtree`` that a learner's folder cannot stop: Python 3.11's recursion fails on a
    tree a few thousand folders deep (RecursionError, which ignore_errors does not cover), so
    such a tree goes with ``rm -rf`` (iterative), never followed out of its file system."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        pass
    if os.path.lexists(path):
        import subprocess

        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def arrange_flat(folder: Path, dest: Path, pattern: str, assignments: Sequence[str]) -> Path:
    """A flat LMS download (every student's file in one folder, the student in the file name)
    laid out as ``dest/<student>/<assignment>/<assignment>.ipynb``. ``pattern``: a preset of
    :data:`FLAT_PRESETS` ("canvas") or a regular expression with the named groups ``student``
    and ``file`` (and optionally ``assignment``); without an ``assignment`` group the
    assignment is the one whose name the file name holds (an LMS may add "-1" to a file
    handed in twice: the newest wins by name). Raises ValueError when no file matches."""
    import re

    rx = re.compile(FLAT_PRESETS.get(pattern, pattern))
    if "student" not in rx.groupindex or "file" not in rx.groupindex:
        raise ValueError(f"--flat {pattern!r}: the pattern needs the groups (?P<student>...) and "
                         "(?P<file>...)")
    files = [p for p in sorted(Path(folder).rglob("*"))
             if p.is_file() and not p.is_symlink() and "__MACOSX" not in p.parts]
    placed = 0
    for p in files:
        m = rx.match(p.name)
        if not m or not p.name.endswith(".ipynb"):
            continue
        named = m.groupdict().get("assignment")
        hits = [a for a in assignments if a == named or (named is None and a in m.group("file"))]
        student = m.group("student")
        if len(hits) != 1 or _safe_rel(student) is None or len(_safe_rel(student).parts) != 1:
            continue
        target = dest / student / hits[0] / f"{hits[0]}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(p.read_bytes())
        placed += 1
    if not placed:
        raise ValueError(f"no file name matches the --flat pattern {pattern!r} and names one of "
                         f"the assignments {list(assignments)}")
    return dest


def _norm(src: str) -> str:
    return "\n".join(line.rstrip() for line in src.strip().splitlines())


def _plain_types(nb) -> list[str]:
    """Give every field the rest of the precheck reads the JSON type nbformat writes, in place;
    the reasons. A notebook is data the learner could have typed anything into: a list where
    nbgrader writes a mapping, a number for a grade_id, a string for the kernelspec or the tags.
    What has the wrong type is dropped (a cell whose nbgrader metadata goes is graded as a plain
    cell, and a deleted grade cell is restored from the release below), never trusted."""
    import nbformat

    reasons: list[str] = []
    if not isinstance(nb.get("metadata"), dict):
        nb["metadata"] = nbformat.NotebookNode()
    if "kernelspec" in nb.metadata and not isinstance(nb.metadata["kernelspec"], dict):
        del nb.metadata["kernelspec"]
        reasons.append("notebook kernelspec is not a mapping: ignored, graded with python3")
    kept = []
    for i, cell in enumerate(nb.cells):
        where = f"cell {i + 1}"
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            reasons.append(f"{where} is not a notebook cell: dropped")
            continue
        if not isinstance(cell.get("metadata"), dict):
            cell["metadata"] = nbformat.NotebookNode()
            reasons.append(f"{where}: metadata is not a mapping: dropped")
        meta = cell["metadata"]
        if "nbgrader" in meta and (not isinstance(meta["nbgrader"], dict) or not isinstance(
                meta["nbgrader"].get("grade_id", ""), str)):
            del meta["nbgrader"]
            reasons.append(f"{where}: nbgrader metadata is not a mapping with a text grade_id: "
                           "dropped (graded as a plain cell)")
        if "tags" in meta and not (isinstance(meta["tags"], list)
                                   and all(isinstance(t, str) for t in meta["tags"])):
            del meta["tags"]
            reasons.append(f"{where}: tags are not a list of text: dropped")
        src = cell.get("source", "")
        if isinstance(src, list) and all(isinstance(x, str) for x in src):
            cell["source"] = "".join(src)
        elif not isinstance(src, str):
            cell["source"] = ""
            reasons.append(f"{where}: source is not text: emptied")
        kept.append(cell)
    nb["cells"] = kept
    return reasons


MAX_CELLS = 2_000        # a notebook of the course has under 200; a submission may add many
MAX_REASONS = 40         # per notebook: the first ones said, the rest counted


def at_most(lines: list[str], more: str, n: int = MAX_REASONS) -> list[str]:
    """The first ``n`` of a notebook's lines of one kind, then ``more`` with how many were left
    out (``{n}``): a submission cannot fill the class's reports with its own lines (its
    repairs here, its kernel's review marks in the runner's scan)."""
    return lines if len(lines) <= n else lines[:n] + [more.format(n=len(lines) - n)]


def plain_text(text: object) -> str:
    """``text`` as one line of plain characters: no control, format (bidirectional overrides,
    zero-width joiners), private-use or surrogate characters, no line or paragraph separators:
    what a learner's process wrote cannot reorder or hide the words of a report around it."""
    import unicodedata

    return "".join(" " if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch
                   for ch in str(text) if unicodedata.category(ch) not in ("Cf", "Co", "Cs"))


def _precheck(dest: Path, release_dir: Path, expected: list[str]) -> list[str]:
    """Repair what can be repaired in the submitted folder ``dest``; return the reasons."""
    import nbformat

    reasons = _match_notebooks(dest, expected)
    for name in expected:
        path = dest / f"{name}.ipynb"
        nb, why = _read_submitted(path, name)
        if why:
            reasons.append(why)
        if nb is None:
            continue
        released = nbformat.read(str(release_dir / f"{name}.ipynb"), as_version=4)
        reasons += at_most(_plain_types(nb) + _restore_grade_cells(nb, released)
                           + _drop_execution_tags(nb),
                           f"{name}.ipynb: {{n}} more repairs of the same kind, not listed")
        for i, cell in enumerate(nb.cells):  # unique ids (nbgrader fails on duplicates)
            cell["id"] = f"c{i:04d}-{cell.get('id', '')}"[:64]
        nbformat.write(nb, str(path))
    return reasons


def _match_notebooks(dest: Path, expected: list[str]) -> list[str]:
    """The submitted notebooks against the expected names: one wrongly named notebook in
    place of the one missing is renamed; every other missing one is said."""
    reasons: list[str] = []
    present = sorted(p.name for p in dest.glob("*.ipynb"))
    missing = [n for n in expected if f"{n}.ipynb" not in present]
    extra = [p for p in present if p[:-6] not in expected]
    if len(missing) == 1 and len(extra) == 1:
        (dest / extra[0]).rename(dest / f"{missing[0]}.ipynb")
        reasons.append(f"renamed notebook {extra[0]} graded as {missing[0]}.ipynb")
        missing = []
    for name in missing:
        reasons.append(f"notebook {name}.ipynb missing: its cells score 0")
    return reasons


def _read_submitted(path: Path, name: str) -> tuple[Any, str]:
    """(the notebook at ``path``, "") or (None, why it is not graded: "" when absent); one
    too large or unreadable is deleted, so nothing grades it."""
    import nbformat

    if not path.is_file():
        return None, ""
    if path.stat().st_size > MAX_NOTEBOOK_BYTES:
        path.unlink()
        return None, (f"{name}.ipynb is larger than {MAX_NOTEBOOK_BYTES // 2**20} MiB: "
                      "not graded, scores 0")
    try:
        nb = nbformat.read(str(path), as_version=4)
        if not isinstance(nb.get("cells"), list):
            raise ValueError("no cell list")
        if len(nb["cells"]) > MAX_CELLS:
            path.unlink()
            return None, (f"{name}.ipynb has {len(nb['cells'])} cells, more than {MAX_CELLS}: "
                          "not graded, scores 0")
    except Exception as exc:  # malformed JSON, wrong schema
        path.unlink()
        first = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        return None, (f"{name}.ipynb is not a readable notebook ({type(exc).__name__}: {first}): "
                      "scores 0")
    return nb, ""


def _restore_grade_cells(nb, released) -> list[str]:
    """Every grade cell of ``nb`` as the release has it (by grade_id): unknown ones made
    plain, copies dropped, deleted ones said; return the reasons."""
    reasons: list[str] = []
    rel_cells = {_meta(c).get("grade_id"): c for c in released.cells if _meta(c).get("grade_id")}
    kernel = (nb.metadata.get("kernelspec") or {}).get("name")
    if kernel not in (None, "python3"):
        reasons.append(f"kernelspec {kernel!r} ignored: graded with python3")
    seen: set[str] = set()
    cells = []
    for cell in nb.cells:
        gid = _meta(cell).get("grade_id")
        if gid is None:
            cells.append(cell)
            continue
        if gid not in rel_cells:
            cell.metadata.pop("nbgrader", None)
            reasons.append(f"unknown grade cell {gid!r}: treated as a plain cell")
            cells.append(cell)
            continue
        if gid in seen:
            reasons.append(f"grade cell {gid!r} duplicated: the copy was dropped")
            continue
        seen.add(gid)
        cells.append(_restore_cell(cell, rel_cells[gid], gid, reasons))
    for gid, ref in rel_cells.items():
        if gid not in seen and _meta(ref).get("grade"):
            reasons.append(f"grade cell {gid!r} deleted: restored from the release")
    nb.cells = cells
    return reasons


def _restore_cell(cell, ref, gid: str, reasons: list[str]):
    """``cell`` with the type, nbgrader metadata and (locked) source of its released
    ``ref``; what was changed is added to ``reasons``."""
    import nbformat

    if cell.cell_type != ref.cell_type:
        reasons.append(f"grade cell {gid!r} retyped {ref.cell_type}->{cell.cell_type}: restored")
        new = (nbformat.v4.new_code_cell if ref.cell_type == "code"
               else nbformat.v4.new_markdown_cell)(cell.source,
                                                   metadata=copy.deepcopy(cell.metadata))
        new["id"] = cell.get("id", new["id"])
        cell = new
    edited = sorted(k for k in ("grade", "solution", "locked", "points", "checksum",
                                "schema_version", "cell_type")
                    if _meta(cell).get(k) != _meta(ref).get(k))
    if edited:  # repaired by grade_id, not trusted and not zeroed whole
        reasons.append(f"nbgrader metadata of {gid!r} edited ({', '.join(edited)}): "
                       f"restored from the release")
    cell.metadata["nbgrader"] = copy.deepcopy(_meta(ref))
    if _meta(ref).get("locked") and _norm(cell.source) != _norm(ref.source):
        what = "test cell" if _meta(ref).get("grade") else "locked cell"
        reasons.append(f"{what} {gid!r} edited: restored from the release before grading")
        cell.source = ref.source
    if cell.cell_type == "code" and _meta(ref).get("grade") and not _meta(ref).get("solution") \
            and cell.get("outputs"):
        reasons.append(f"stored outputs of {gid!r} discarded (tests are re-run)")
    return cell


def _drop_execution_tags(nb) -> list[str]:
    """Remove :data:`EXECUTION_TAGS` from every cell (each cell runs); return the reasons."""
    reasons: list[str] = []
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags")
        bad = [t for t in tags if t in EXECUTION_TAGS] if isinstance(tags, list) else []
        if bad:
            cell.metadata["tags"] = [t for t in tags if t not in EXECUTION_TAGS]
            where = _meta(cell).get("grade_id") or "a cell"
            reasons.append(f"cell tag {', '.join(map(repr, bad))} removed from {where}: "
                           "every cell runs")
    return reasons


def structure_check(job: dict, submitted: Path, release_dir: Path) -> dict:
    """Default check before anything runs: repair the submitted notebooks (see :func:`_precheck`).

    A check is ``f(job, submitted_dir, release_dir) -> {"reasons": [...], "zero": [[notebook,
    grade_id], ...]}``; it may edit or delete files in ``submitted_dir``. Cells listed in
    ``zero`` score 0 whatever the tests say (their reason should say why)."""
    return {"reasons": _precheck(submitted, release_dir, list(job["course"]["notebooks"])), "zero": []}


def audit_check(job: dict, submitted: Path, release_dir: Path) -> dict:
    """The static audit (:mod:`memlab.autograde.security.audit`) as a check: every answer cell that breaks
    the assignment's policy is replaced by its released stub before anything runs (its tests
    score 0, pending review); the reason names cell, line and rule ("audit: ...")."""
    import nbformat

    from memlab.autograde.security.audit import apply_audit

    reasons: list[str] = []
    for name in job["course"]["notebooks"]:
        path, rel = submitted / f"{name}.ipynb", release_dir / f"{name}.ipynb"
        if not path.is_file() or not rel.is_file():
            continue
        try:
            nb = nbformat.read(str(path), as_version=4)
        except Exception:  # unreadable: structure_check already said so
            continue
        found = apply_audit(nb, nbformat.read(str(rel), as_version=4), job["assignment"])
        if found:
            nbformat.write(nb, str(path))
            reasons += found
    return {"reasons": reasons, "zero": []}


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
        return True
    except UnicodeEncodeError:   # a name the file system gave as undecodable bytes
        return False


def _read_tree(folder: Path, max_bytes: int = MAX_ZIP_BYTES) -> dict[str, bytes]:
    """Regular files under ``folder`` (no symlinks, no checkpoints) as {posix path: bytes}.

    Raises ValueError, before reading a byte of it, for a file whose name is not UTF-8 or when
    the files' sizes (as ``stat`` gives them: a sparse file counts whole) pass ``max_bytes``:
    the caller grades that one submission 0 with the reason and goes on."""
    for level in (folder, folder.parent):
        if level.is_symlink():  # a link to a classmate's folder, or to solutions/
            raise ValueError(f"its folder {level.name!r} is a link, not a folder of its own")
    paths, total = [], 0
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if p.is_symlink() or not p.is_file() or any(
                part in (".ipynb_checkpoints", "__MACOSX") for part in rel.parts):
            continue
        if not _utf8(rel.as_posix()):
            raise ValueError(f"the file name {ascii(rel.as_posix())} is not UTF-8")
        total += p.stat().st_size
        if total > max_bytes:
            raise ValueError(f"its files hold more than {max_bytes} bytes")
        paths.append((rel.as_posix(), p))
    return {name: p.read_bytes() for name, p in paths}


def _safe_rel(name: str) -> PurePosixPath | None:
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or not p.parts or any(x in ("..", "") for x in p.parts):
        return None
    return p


def _write_tree(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        rel = _safe_rel(name)
        if rel is None:
            continue
        target = folder.joinpath(*rel.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _timestamp(files: dict[str, bytes]):
    """The submission time in timestamp.txt (written by nbgrader's collect / zip_collect)."""
    raw = files.get("timestamp.txt")
    if raw is None:
        return None, None
    try:
        from nbgrader.utils import parse_utc

        return parse_utc(raw.decode("utf-8", "replace").strip()), None
    except Exception:
        return None, "timestamp.txt unreadable: no late penalty applied"


def _collect_jobs(src: Path, known: list[str]) -> tuple[list[tuple[str, str, Path]], list[str]]:
    layout = find_layout(src, known)
    found, ignored = [], []
    for sdir in sorted(p for p in layout.iterdir() if not p.name.startswith(".")):
        if not sdir.is_dir():
            if sdir.is_symlink():
                ignored.append(f"{ascii(sdir.name)} (a link to nothing)")
            continue
        if not _utf8(sdir.name):   # no gradebook row can name this student
            ignored.append(f"{ascii(sdir.name)} (a folder name that is not UTF-8)")
            continue
        for adir in sorted(sdir.iterdir()):
            if not adir.is_dir():
                if adir.is_symlink():
                    ignored.append(f"{sdir.name}/{ascii(adir.name)} (a link to nothing)")
                continue
            if adir.name in known:  # a linked folder is refused with its reason (_read_tree)
                found.append((sdir.name, adir.name, adir))
            elif not adir.name.startswith("."):
                ignored.append(f"{sdir.name}/{adir.name}")
    return found, ignored
