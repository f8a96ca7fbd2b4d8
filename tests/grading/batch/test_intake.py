"""memlab.autograde.batch.intake: a submission as it arrives (no kernel, no nbgrader run)."""
from __future__ import annotations

import os
import zipfile

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
    with pytest.raises(ValueError, match="holds more than 3 bytes"):
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
