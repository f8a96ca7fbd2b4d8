"""`make gpu-check` (memlab.tools.gpucheck): refuses to run without CUDA, and its parts work on fake data.

The real run needs a CUDA GPU (README.md, "Run on a GPU"); here: the exit code and message
without CUDA, the report writer (JSON + Markdown) on a fake report, the notebook summary on a fake
executed notebook, the JUnit parser, one real (tiny) notebook run in the python3 kernel, and the
benchmark on the CPU with a tiny config (the CPU tracker's numbers only). The test marked `gpu`
runs the benchmark on CUDA where there is one.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from memlab.tools import gpucheck

ROOT = Path(__file__).resolve().parents[2]
TINY = {"vocab": 64, "hidden": 32, "heads": 4, "layers": 2, "seq_len": 32, "batch": 8,
        "micro_batches": 4}


# --------------------------------------------------------------------------- no CUDA
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal cannot show")
def test_cli_without_cuda_exits_2_with_a_clear_message_and_writes_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "memlab.tools.gpucheck", "--out-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == gpucheck.EXIT_NO_CUDA == 2, proc.stdout + proc.stderr
    assert "needs a CUDA GPU" in proc.stderr and "torch.cuda.is_available() is False" in proc.stderr
    assert "nothing was run" in proc.stderr
    assert list(tmp_path.iterdir()) == [], "no report may be written without CUDA"


def test_main_refuses_when_cuda_is_unavailable(monkeypatch, tmp_path, capsys):
    """Also on a CUDA machine: the check is torch.cuda.is_available() itself."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpucheck.main(["--out-dir", str(tmp_path)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_makefile_has_the_gpu_check_target():
    text = (ROOT / "Makefile").read_text()
    assert "\ngpu-check: $(STAMP)\n\t$(PY) -m memlab.tools.gpucheck" in text
    assert "gpu-check" in text.split(".PHONY:", 1)[1].splitlines()[0]


# --------------------------------------------------------------------------- report writer
def fake_report(*, test_outcome: str = "passed", notebook_passed: bool = True) -> dict:
    GiB = 1024 ** 3
    return {
        "date": "2026-11-29",
        "environment": {"gpu": "NVIDIA GeForce RTX 4080 (16GB)", "gpu_memory": 16 * GiB,
                        "capability": "8.9", "torch": "2.13.0+cu126", "cuda": "12.6",
                        "python": "3.11.7", "host": "box"},
        "seconds": 312.4,
        "notebooks": [
            {"notebook": "01_where_memory_goes/01_where_memory_goes.ipynb",
             "assignment": "01_where_memory_goes", "crash": None, "seconds": 41.0, "files": [],
             "errors": [] if notebook_passed else [{"cell": 7, "error": "RuntimeError: boom"}],
             "graded_tests": [{"grade_id": "t1", "points": 2, "passed": True, "problem": None},
                              {"grade_id": "t2", "points": 3, "passed": notebook_passed,
                               "problem": None if notebook_passed else "stderr: UserWarning"}],
             "kernel_peak": {"cuda": True, "max_allocated": 3 * GiB, "max_reserved": 4 * GiB},
             "passed": notebook_passed},
            {"notebook": "00_setup/00_setup.ipynb", "assignment": "00_setup", "crash": None,
             "seconds": 9.5, "files": [], "errors": [], "graded_tests": [],
             "kernel_peak": None, "passed": True},
        ],
        "benchmark": {"config": dict(gpucheck.BENCH_CONFIG), "device": "cuda:0", "techniques": [
            {"technique": "baseline", "peak_allocated": 4 * GiB, "peak_reserved": 5 * GiB,
             "seconds": 0.100, "allocated_vs_baseline": 1.0, "time_vs_baseline": 1.0,
             "tracker_vs_allocator": 0.998, "notes": [], "error": None},
            {"technique": "checkpointing", "peak_allocated": GiB, "peak_reserved": 2 * GiB,
             "tracker_peak": GiB,
             "seconds": 0.130, "allocated_vs_baseline": 0.25, "time_vs_baseline": 1.3,
             "tracker_vs_allocator": 0.997, "notes": ["every block"], "error": None},
            {"technique": "amp", "error": "OutOfMemoryError: tried to allocate", "notes": []},
        ]},
        "gpu_tests": {"command": "pytest -m gpu -q", "returncode": 0 if test_outcome == "passed" else 1,
                      "seconds": 20.0, "output_tail": "",
                      "tests": [{"test": "tests.test_amp::test_x", "outcome": test_outcome,
                                 "message": None, "seconds": 1.0},
                                {"test": "tests.test_amp::test_y", "outcome": "skipped",
                                 "message": "needs bf16", "seconds": 0.0}]},
    }


def test_report_paths_carry_date_and_gpu_name(tmp_path):
    json_path, md_path = gpucheck.report_paths(tmp_path, "2026-11-29", "NVIDIA A100-SXM4-80GB")
    assert json_path.name == "gpu-report-2026-11-29-nvidia-a100-sxm4-80gb.json"
    assert md_path.name == "gpu-report-2026-11-29-nvidia-a100-sxm4-80gb.md"


def test_write_report_on_fake_data(tmp_path):
    report = fake_report()
    report["benchmark"]["techniques"][2]["error"] = None  # all good
    report["benchmark"]["techniques"][2].update(peak_allocated=2 * 1024 ** 3, seconds=0.05)
    json_path, md_path = gpucheck.write_report(report, tmp_path / "docs")
    assert json_path.name == "gpu-report-2026-11-29-nvidia-geforce-rtx-4080-16gb.json"
    data = json.loads(json_path.read_text())
    assert data["passed"] is True
    assert data["notebooks"][0]["graded_tests"][1]["grade_id"] == "t2"
    md = md_path.read_text()
    assert md.startswith("# GPU check: NVIDIA GeForce RTX 4080 (16GB) (2026-11-29)")
    assert "**PASS**" in md
    assert "| 01_where_memory_goes/01_where_memory_goes.ipynb | pass | 41 s | 2/2 | 3.00 GiB | 4.00 GiB | baseline: 4.00 GiB |" in md
    assert "| checkpointing | 1.00 GiB | 2.00 GiB | 0.25x | 1.00 GiB | 130.0 ms | 1.30x | 1.00x | every block |" in md
    assert "Total time 312 s (within the 10-minute target)" in md
    assert "1 passed, 1 skipped" in md
    assert "| `tests.test_amp::test_y` | skipped | needs bf16 |" in md


@pytest.mark.parametrize("change", ["notebook", "test", "benchmark"])
def test_any_failure_makes_the_report_fail(tmp_path, change):
    report = fake_report(notebook_passed=change != "notebook",
                         test_outcome="failed" if change == "test" else "passed")
    if change != "benchmark":
        report["benchmark"]["techniques"].pop()  # drop the OOM row
    _, md_path = gpucheck.write_report(report, tmp_path)
    md = md_path.read_text()
    assert "**FAIL**" in md
    if change == "notebook":
        assert "- `01_where_memory_goes/01_where_memory_goes.ipynb`: cell 7: RuntimeError: boom" in md
        assert "- `01_where_memory_goes/01_where_memory_goes.ipynb`: t2: stderr: UserWarning" in md
    if change == "benchmark":
        assert "| amp | error: OutOfMemoryError: tried to allocate |" in md
    report = fake_report()
    report["seconds"] = 700
    report["benchmark"]["techniques"].pop()
    _, md_path = gpucheck.write_report(report, tmp_path / "slow")
    assert "(OVER the 10-minute target)" in md_path.read_text()


# --------------------------------------------------------------------------- notebook summary
def _graded(source, grade_id, outputs, *, solution=False, grade=True):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": grade, "solution": solution, "locked": True,
                                 "grade_id": grade_id, "points": 1, "schema_version": 3}
    cell.outputs = outputs
    return cell


def test_summarize_executed_applies_nbgraders_rule():
    out = nbformat.v4.new_output
    nb = nbformat.v4.new_notebook(cells=[
        _graded("def f(): ...", "answer", [], solution=True, grade=False),
        _graded("assert True", "ok", [out("stream", name="stdout", text="fine\n")]),
        _graded("warn()", "warns", [out("stream", name="stderr", text="UserWarning: x\n")]),
        _graded("assert False", "fails", [out("error", ename="AssertionError", evalue="fix it",
                                              traceback=[])]),
        nbformat.v4.new_code_cell("peak", outputs=[out("stream", name="stdout", text=(
            gpucheck.PEAK_MARKER + json.dumps({"cuda": True, "max_allocated": 10}) + "\n"))]),
    ])
    s = gpucheck.summarize_executed(nb)
    assert [(t["grade_id"], t["passed"]) for t in s["graded_tests"]] == [
        ("ok", True), ("warns", False), ("fails", False)]
    assert s["graded_tests"][1]["problem"].startswith("stderr: UserWarning")
    assert s["graded_tests"][2]["problem"] == "AssertionError: fix it"
    assert s["errors"] == [{"cell": 3, "error": "AssertionError: fix it"}]
    assert s["kernel_peak"] == {"cuda": True, "max_allocated": 10}


def test_run_notebook_executes_a_copy_in_the_python3_kernel(tmp_path):
    path = tmp_path / "99_demo" / "99_demo.ipynb"
    path.parent.mkdir()
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 1\nopen('written.txt', 'w').write('hi')"),
        _graded('"""Test: x is 1."""\nassert x == 1, "x"\nprint("ok")', "t-pass", []),
        _graded('"""Test: x is 2."""\nassert x == 2, "x must be 2"', "t-fail", []),
    ])
    nbformat.write(nb, path)
    before = path.read_text()
    rec = gpucheck.run_notebook(path, cell_timeout=120, keep_dir=tmp_path / "kept")
    assert path.read_text() == before, "run_notebook must not change the notebook"
    assert rec["crash"] is None and rec["passed"] is False
    assert [(t["grade_id"], t["passed"]) for t in rec["graded_tests"]] == [("t-pass", True),
                                                                        ("t-fail", False)]
    assert rec["errors"][0]["error"].startswith("AssertionError: x must be 2")
    assert rec["kernel_peak"]["cuda"] is torch.cuda.is_available()
    assert rec["files"] == ["written.txt"]
    assert (tmp_path / "kept" / "99_demo" / "written.txt").read_text() == "hi"


# --------------------------------------------------------------------------- JUnit, benchmark
def test_parse_junit():
    xml = """<?xml version="1.0"?><testsuites><testsuite name="pytest">
      <testcase classname="tests.test_amp" name="test_a" time="1.5"/>
      <testcase classname="tests.test_amp" name="test_b" time="0.1"><failure message="boom">tb</failure></testcase>
      <testcase classname="tests.test_x" name="test_c" time="0"><skipped message="needs a CUDA device"/></testcase>
      <testcase classname="tests.test_x" name="test_d" time="0"><error message="fixture"/></testcase>
    </testsuite></testsuites>"""
    got = [(t["test"], t["outcome"], t["message"]) for t in gpucheck.parse_junit(xml)]
    assert got == [("tests.test_amp::test_a", "passed", None),
                   ("tests.test_amp::test_b", "failed", "boom"),
                   ("tests.test_x::test_c", "skipped", "needs a CUDA device"),
                   ("tests.test_x::test_d", "error", "fixture")]


def test_benchmark_runs_every_technique_on_the_cpu():
    bench = gpucheck.run_benchmark(torch.device("cpu"), TINY, repeats=1)
    rows = {r["technique"]: r for r in bench["techniques"]}
    assert list(rows) == list(gpucheck.TECHNIQUES)
    for r in rows.values():
        assert r["error"] is None, r
        assert r["peak_allocated"] is None and r["peak_reserved"] is None  # CUDA only
        assert r["tracker_peak"] > r["tracker_start"] > 0
        assert r["seconds"] > 0
    base = rows["baseline"]["tracker_increase"]
    # the CPU tracker is exact: checkpointing and accumulation keep fewer activations alive
    assert rows["checkpointing"]["tracker_increase"] < 0.8 * base
    assert rows["accumulation"]["tracker_increase"] < 0.8 * base
    # 08's levers never cost memory (at this tiny size the peak is not in attention, and
    # activations dwarf the gradients, so they save little); 09's decoding keeps no graph
    assert rows["sdpa"]["tracker_increase"] <= base
    assert rows["fused_optimizer"]["tracker_increase"] <= base
    assert rows["kv_cache"]["tracker_increase"] < 0.5 * base
    assert "KV cache" in " ".join(rows["kv_cache"]["notes"])
    assert rows["baseline"]["tracker_vs_baseline"] == 1.0


@pytest.mark.gpu
def test_benchmark_on_cuda_reads_the_allocator():
    bench = gpucheck.run_benchmark(torch.device("cuda"), TINY, repeats=1)
    for r in bench["techniques"]:
        assert r["error"] is None, r
        assert r["peak_reserved"] >= r["peak_allocated"] > r["start_allocated"] > 0, r
        assert r["tracker_vs_allocator"] is not None and r["tracker_vs_allocator"] > 0, r
