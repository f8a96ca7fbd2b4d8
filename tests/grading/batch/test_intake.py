"""memlab.autograde.batch.intake: a submission as it arrives (no kernel, no nbgrader run)."""
from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from memlab.autograde.batch import intake


def test_safe_extract_skips_escapes_and_mac_junk(tmp_path):
    zpath = tmp_path / "class.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("class/ana/01_where_memory_goes/01.ipynb", "{}")
        zf.writestr("../evil.txt", "x")
        zf.writestr("/abs.txt", "x")
        zf.writestr("__MACOSX/ana/._01.ipynb", "x")
        zf.writestr("class\\bob\\01_where_memory_goes\\01.ipynb", "{}")   # a Windows zip
    dest = tmp_path / "out"
    dest.mkdir()
    intake._safe_extract(zpath, dest)
    got = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert got == ["class/ana/01_where_memory_goes/01.ipynb",
                   "class/bob/01_where_memory_goes/01.ipynb"]
    assert not (tmp_path / "evil.txt").exists() and not (dest / "__MACOSX").exists()


def test_safe_extract_refuses_a_zip_bomb(tmp_path, monkeypatch):
    monkeypatch.setattr(intake, "MAX_ZIP_BYTES", 1000)
    zpath = tmp_path / "big.zip"
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a/b/c.ipynb", "0" * 5000)
    with pytest.raises(ValueError, match="unpacks to more than 1000 bytes"):
        intake._safe_extract(zpath, tmp_path)


def test_find_layout_walks_single_top_folders(tmp_path):
    (tmp_path / "submitted" / "ana" / "03_mixed_precision").mkdir(parents=True)
    assert intake.find_layout(tmp_path, ["03_mixed_precision"]) == tmp_path / "submitted"
    with pytest.raises(ValueError, match="no <student>/<assignment>/ folders"):
        intake.find_layout(tmp_path, ["09_serving_memory"])


def test_collect_jobs_names_what_it_ignores(tmp_path):
    for rel in ("ana/03_mixed_precision", "ana/homework", "bob/03_mixed_precision", "bob/.git"):
        (tmp_path / rel).mkdir(parents=True)
    found, ignored = intake._collect_jobs(tmp_path, ["03_mixed_precision"])
    assert [(s, a) for s, a, _ in found] == [("ana", "03_mixed_precision"),
                                             ("bob", "03_mixed_precision")]
    assert ignored == ["ana/homework"]


def test_read_tree_takes_regular_files_only(tmp_path):
    (tmp_path / "nb.ipynb").write_text("{}")
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "nb-checkpoint.ipynb").write_text("{}")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.bin").write_bytes(b"\0\1")
    os.symlink("/etc/passwd", tmp_path / "link")
    assert intake._read_tree(tmp_path) == {"data/x.bin": b"\0\1", "nb.ipynb": b"{}"}
    with pytest.raises(ValueError, match="hold more than 3 bytes"):
        intake._read_tree(tmp_path, max_bytes=3)


@pytest.mark.parametrize("name, ok", [("a/b.ipynb", True), ("a\\b.ipynb", True), ("../x", False),
                                      ("/etc/x", False), ("a//b", True), ("", False)])
def test_safe_rel(name, ok):
    assert (intake._safe_rel(name) is not None) is ok


def test_write_tree_never_leaves_the_folder(tmp_path):
    dest = tmp_path / "job"
    intake._write_tree(dest, {"a/nb.ipynb": b"1", "../escape": b"2", "/abs": b"3"})
    assert (dest / "a" / "nb.ipynb").read_bytes() == b"1"
    assert not (tmp_path / "escape").exists()
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["nb.ipynb"]


def test_timestamp():
    assert intake._timestamp({}) == (None, None)
    when, note = intake._timestamp({"timestamp.txt": b"2026-12-01 10:00:00.000000 UTC"})
    assert note is None and (when.year, when.month, when.day, when.hour) == (2026, 12, 1, 10)
    assert intake._timestamp({"timestamp.txt": b"yesterday-ish"}) == (
        None, "timestamp.txt unreadable: no late penalty applied")


def test_read_tree_refuses_undecodable_names_before_reading(tmp_path):
    (tmp_path / "nb.ipynb").write_text("{}")
    with open(os.fsencode(tmp_path) + b"/data\xff.bin", "wb") as f:
        f.write(b"x")
    with pytest.raises(ValueError, match=r"the file name 'data\\udcff.bin' is not UTF-8"):
        intake._read_tree(tmp_path)


def test_read_tree_counts_a_sparse_file_whole_and_reads_nothing(tmp_path, monkeypatch):
    (tmp_path / "nb.ipynb").write_text("{}")
    with open(tmp_path / "huge.bin", "wb") as f:   # 2 GiB on paper, a few bytes on disk
        f.truncate(2 * 1024 ** 3)
    read = []
    monkeypatch.setattr(type(tmp_path), "read_bytes", lambda self: read.append(self) or b"")
    with pytest.raises(ValueError, match="hold more than 104857600 bytes"):
        intake._read_tree(tmp_path, intake.MAX_SUBMISSION_BYTES)
    assert read == []


def test_collect_jobs_skips_a_student_folder_that_is_not_utf8(tmp_path):
    (tmp_path / "ana" / "03_mixed_precision").mkdir(parents=True)
    os.makedirs(os.fsencode(tmp_path) + b"/b\xffb/03_mixed_precision")
    found, ignored = intake._collect_jobs(tmp_path, ["03_mixed_precision"])
    assert [s for s, _, _ in found] == ["ana"]
    assert ignored == ["'b\\udcffb' (a folder name that is not UTF-8)"]


def test_precheck_removes_execution_tags(tmp_path):
    """A test cell tagged ``skip-execution`` would not run (nbgrader scores an unrun test cell
    as passed): the tag is removed before grading, and the reason says so."""
    import nbformat

    root = Path(__file__).resolve().parents[3]
    release = root / "notebooks" / "00_setup"
    nb = nbformat.read(release / "00_setup.ipynb", as_version=4)
    tagged = [c for c in nb.cells if (c.metadata.get("nbgrader") or {}).get("grade")
              and not (c.metadata.get("nbgrader") or {}).get("solution")][0]
    gid = tagged.metadata["nbgrader"]["grade_id"]
    tagged.metadata["tags"] = ["skip-execution", "raises-exception", "mine"]
    dest = tmp_path / "sub"
    dest.mkdir()
    nbformat.write(nb, dest / "00_setup.ipynb")
    reasons = intake._precheck(dest, release, ["00_setup"])
    assert [r for r in reasons if "cell tag" in r] == [
        f"cell tag 'skip-execution' removed from {gid}: every cell runs"]
    back = nbformat.read(dest / "00_setup.ipynb", as_version=4)
    tags = [t for c in back.cells for t in c.metadata.get("tags", [])]
    assert "skip-execution" not in tags and "raises-exception" in tags and "mine" in tags


def test_precheck_says_nothing_about_the_releases_own_tags(tmp_path):
    """The release tags its answer and test cells ``raises-exception`` (Run All goes on): an
    untouched release gets no tag reason."""
    release = Path(__file__).resolve().parents[3] / "notebooks" / "00_setup"
    dest = tmp_path / "sub"
    dest.mkdir()
    (dest / "00_setup.ipynb").write_bytes((release / "00_setup.ipynb").read_bytes())
    assert not [r for r in intake._precheck(dest, release, ["00_setup"]) if "tag" in r]


def test_a_linked_folder_is_refused_not_graded_as_its_target(tmp_path):
    """A student folder, or an assignment folder, that is a link (to a classmate's folder, to
    solutions/) is never read: grading it would grade the classmate's work under this name."""
    cls = tmp_path / "class"
    real = cls / "alice" / "01_x"
    real.mkdir(parents=True)
    (real / "01_x.ipynb").write_text("{}")
    (cls / "mallory").mkdir()
    (cls / "mallory" / "01_x").symlink_to("../alice/01_x")
    (cls / "trudy").symlink_to("alice")
    (cls / "eve").mkdir()
    (cls / "eve" / "01_x").symlink_to("../../solutions/01_x")   # to nothing here
    found, ignored = intake._collect_jobs(cls, ["01_x"])
    assert sorted((s, a) for s, a, _ in found) == [
        ("alice", "01_x"), ("mallory", "01_x"), ("trudy", "01_x")]
    assert ignored == ["eve/'01_x' (a link to nothing)"]
    folders = {s: f for s, _, f in found}
    assert intake._read_tree(folders["alice"]) == {"01_x.ipynb": b"{}"}
    for who in ("mallory", "trudy"):
        with pytest.raises(ValueError, match="is a link, not a folder of its own"):
            intake._read_tree(folders[who])


@pytest.mark.parametrize("damage", [
    "nbgrader_list", "nbgrader_str", "metadata_list", "grade_id_list", "grade_id_int",
    "kernelspec_str", "source_int", "tags_str", "cell_not_a_dict", "points_str",
])
def test_precheck_repairs_odd_metadata_types_instead_of_crashing(tmp_path, damage):
    """Principle 6: a notebook whose metadata has the wrong JSON types (a list where nbgrader
    writes a mapping, a number for a grade_id, a string for the kernelspec...) is repaired by
    grade_id or its cell made plain, with a reason; _precheck never raises, and what it writes
    is a notebook nbformat reads back."""
    import json

    import nbformat

    root = Path(__file__).resolve().parents[3]
    release = root / "notebooks" / "00_setup"
    nb = json.loads((release / "00_setup.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    answer = next(c for c in code if (c["metadata"].get("nbgrader") or {}).get("solution"))
    if damage == "nbgrader_list":
        answer["metadata"]["nbgrader"] = ["grade_id", "tensor_bytes"]
    elif damage == "nbgrader_str":
        answer["metadata"]["nbgrader"] = "tensor_bytes"
    elif damage == "metadata_list":
        answer["metadata"] = ["nbgrader"]
    elif damage == "grade_id_list":
        answer["metadata"]["nbgrader"]["grade_id"] = ["tensor_bytes"]
    elif damage == "grade_id_int":
        answer["metadata"]["nbgrader"]["grade_id"] = 7
    elif damage == "kernelspec_str":
        nb["metadata"]["kernelspec"] = "python3"
    elif damage == "source_int":
        answer["source"] = 12
    elif damage == "tags_str":
        answer["metadata"]["tags"] = "skip-execution"
    elif damage == "cell_not_a_dict":
        nb["cells"].insert(1, ["not", "a", "cell"])
    elif damage == "points_str":
        answer["metadata"]["nbgrader"]["points"] = "100"
    dest = tmp_path / "sub"
    dest.mkdir()
    (dest / "00_setup.ipynb").write_text(json.dumps(nb))
    reasons = intake._precheck(dest, release, ["00_setup"])
    assert all(isinstance(r, str) and r for r in reasons)
    path = dest / "00_setup.ipynb"
    if path.exists():
        back = nbformat.read(path, as_version=4)
        assert isinstance(back.cells, list)
        ids = [(c.metadata.get("nbgrader") or {}).get("grade_id") for c in back.cells]
        assert all(i is None or isinstance(i, str) for i in ids)
        assert all(isinstance(c.source, str) for c in back.cells)
    else:
        assert any("not a readable notebook" in r for r in reasons), reasons
