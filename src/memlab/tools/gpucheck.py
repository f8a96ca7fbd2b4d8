"""``make gpu-check`` (= ``python -m memlab.tools.gpucheck``): the course on a real CUDA GPU, one report.

Used by: Makefile (gpu-check), README.md ("Run on a GPU"), tests/tools/test_gpu_check.py.

Four parts, each recorded even when another fails:

1. **Notebooks**: every ``solutions/*/*.ipynb`` runs top to bottom in the ``python3`` kernel (the
   venv's, so on CUDA when torch sees it) from a temporary copy (the repository is not changed).
   Per notebook: pass/fail, run time, the cells that raised, each graded test cell's verdict by
   nbgrader's rule (an error or anything on stderr scores 0), and the kernel's own CUDA peak
   (``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``, read by a cell appended to the
   copy).
2. **Benchmark**: one fixed TinyGPT training step (AdamW) measured per technique: baseline (fp32),
   gradient checkpointing (every block), mixed precision (autocast bf16; fp16 before Ampere, where bf16
   is emulated), gradient accumulation (4 micro-batches), fused attention (SDPA instead of the
   eager s x s softmax), the optimizer step fused into backward (post-accumulate-grad hooks), and,
   for serving, greedy decoding with a KV cache (an inference step, not a training step). Per technique: peak allocated and
   peak reserved during the step (CUDA allocator), the same step's peak counted by memlab's exact
   CPU tracker (the agreement ratio should be close to 1), and the median step time as a ratio of
   the baseline's.
3. **GPU tests**: ``pytest -m gpu`` with a JUnit XML file; pass/fail/skip of every test.
4. **Allocator model**: one small training step (an MLP ``nn.Sequential``, AdamW) recorded on CUDA
   (``torch.cuda.memory._record_memory_history``, then ``_snapshot()``, after ``empty_cache`` and
   ``reset_peak_memory_stats``) and on the CPU (memlab's recorder); the peak reserved that
   :mod:`memlab.measure.allocator` (a model of the caching allocator's rules) predicts from each
   trace, beside ``torch.cuda.max_memory_reserved()`` and the relative errors. A measurement: the
   row passes when it ran, whatever the error (the model's error is what it is there to show).

The report goes to ``docs/gpu-report-<YYYY-MM-DD>-<gpu>.json`` and ``.md`` (commit both).
Without CUDA it stops at once with exit code 2 and says why. Designed to finish well within
10 minutes on one modern GPU (the notebooks take most of it).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

ROOT = Path(__file__).resolve().parents[3]
EXIT_NO_CUDA = 2
TARGET_S = 600  # the whole check should finish within 10 minutes on one modern GPU
NO_CUDA_MESSAGE = (
    "make gpu-check needs a CUDA GPU, and torch.cuda.is_available() is False here "
    "(torch {version}, built for CUDA {cuda}). Install the CUDA build of torch into .venv "
    "(README.md, 'Run on a GPU') and run it on a machine with an NVIDIA GPU; nothing was run.")

# The fixed benchmark: a GPT-2-style model, big enough that activations dominate on a GPU,
# small enough for a 16 GB card: 2.2 GiB of tensors at the fp32 baseline (CPU tracker, exact).
BENCH_CONFIG: dict[str, int] = {"vocab": 8192, "hidden": 512, "heads": 8, "layers": 8,
                                "seq_len": 512, "batch": 8, "micro_batches": 4}
TECHNIQUES = ("baseline", "checkpointing", "amp", "accumulation", "sdpa", "fused_optimizer",
              "kv_cache")
# Which notebook teaches which technique (its benchmark row is shown beside the notebook).
NOTEBOOK_TECHNIQUE = {"01_where_memory_goes": "baseline", "02_checkpointing": "checkpointing",
                      "03_mixed_precision": "amp", "04_accumulation": "accumulation",
                      "08_more_levers": "fused_optimizer", "09_serving_memory": "kv_cache"}
KV_DECODE_TOKENS = 16  # kv_cache row: prefill seq_len // 2 tokens, then this many decode steps
PEAK_MARKER = "GPUCHECK-PEAK "
PEAK_CELL = (
    "import json as _gc_json, torch as _gc_torch\n"
    "_gc = {'cuda': _gc_torch.cuda.is_available()}\n"
    "if _gc['cuda']:\n"
    "    _gc['max_allocated'] = int(_gc_torch.cuda.max_memory_allocated())\n"
    "    _gc['max_reserved'] = int(_gc_torch.cuda.max_memory_reserved())\n"
    f"print({PEAK_MARKER!r} + _gc_json.dumps(_gc))\n")


# --------------------------------------------------------------------------- notebooks
def graded_test_cells(nb: Mapping[str, Any]) -> list[tuple[int, dict]]:
    """(index, cell) of the autograder test cells (nbgrader grade true, solution false)."""
    out = []
    for i, cell in enumerate(nb["cells"]):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] == "code" and meta.get("grade") and not meta.get("solution"):
            out.append((i, cell))
    return out


def cell_problem(cell: Mapping[str, Any]) -> str | None:
    """Why nbgrader would score this executed cell 0 (an error, or output on stderr), or None."""
    for o in cell.get("outputs", []):
        if o.get("output_type") == "error":
            return f"{o.get('ename', 'Error')}: {str(o.get('evalue', ''))[:300]}"
        if o.get("output_type") == "stream" and o.get("name") == "stderr":
            text = o.get("text", "")
            text = "".join(text) if isinstance(text, list) else text
            return "stderr: " + text.strip()[:300]
    return None


def summarize_executed(nb: Mapping[str, Any]) -> dict[str, Any]:
    """Errors, graded-test verdicts and the appended peak cell of an executed notebook."""
    errors = []
    for i, cell in enumerate(nb["cells"]):
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                errors.append({"cell": i, "error": f"{o.get('ename')}: {str(o.get('evalue'))[:300]}"})
    tests = []
    for i, cell in graded_test_cells(nb):
        meta = cell["metadata"]["nbgrader"]
        problem = cell_problem(cell)
        tests.append({"grade_id": meta.get("grade_id", f"cell-{i}"), "points": meta.get("points", 0),
                      "passed": problem is None, "problem": problem})
    peak = None
    for cell in nb["cells"][-1:]:
        for o in cell.get("outputs", []):
            text = o.get("text", "")
            text = "".join(text) if isinstance(text, list) else text
            if PEAK_MARKER in text:
                peak = json.loads(text.split(PEAK_MARKER, 1)[1].strip().splitlines()[0])
    first = next((c for c in nb["cells"] if c["cell_type"] == "code"), None)
    first_stdout = "".join(
        "".join(o.get("text", "")) for o in (first or {}).get("outputs", [])
        if o.get("output_type") == "stream" and o.get("name") == "stdout")
    return {"errors": errors, "graded_tests": tests, "kernel_peak": peak,
            "first_cell_stdout": first_stdout}


def run_notebook(path: Path, *, cell_timeout: int = 600, kernel_name: str = "python3",
                 keep_dir: Path | None = None) -> dict[str, Any]:
    """Execute a temporary copy of ``path`` (plus the peak cell); never raises for cell errors.

    Files the notebook writes (01 writes a CUDA memory snapshot) are copied to
    ``keep_dir/<assignment>/`` when given (make gpu-check: artifacts/gpu-check/, git-ignored).
    """
    import nbformat
    from nbclient import NotebookClient

    name = path.parent.name
    record: dict[str, Any] = {"notebook": f"{path.parent.name}/{path.name}", "assignment": name}
    with tempfile.TemporaryDirectory(prefix=f"gpucheck-{name}-") as tmp:
        work = Path(tmp) / path.name
        shutil.copy(path, work)
        nb = nbformat.read(work, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(PEAK_CELL))
        client = NotebookClient(nb, timeout=cell_timeout, kernel_name=kernel_name, allow_errors=True,
                                resources={"metadata": {"path": tmp}})
        start = time.perf_counter()
        try:
            client.execute()
            record["crash"] = None
        except Exception as exc:  # a dead kernel or a timeout: record it, go on
            record["crash"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        record["seconds"] = round(time.perf_counter() - start, 1)
        written = [p for p in Path(tmp).iterdir() if p.is_file() and p.name != path.name]
        record["files"] = sorted(p.name for p in written)
        if keep_dir is not None and written:
            (keep_dir / name).mkdir(parents=True, exist_ok=True)
            for p in written:
                shutil.copy(p, keep_dir / name / p.name)
    record.update(summarize_executed(nb))
    record["passed"] = (record["crash"] is None and not record["errors"]
                        and all(t["passed"] for t in record["graded_tests"]))
    return record


def solution_notebooks(root: Path = ROOT) -> list[Path]:
    return sorted(p for p in (root / "solutions").glob("*/*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts)


# --------------------------------------------------------------------------- benchmark
@dataclass
class TechniqueResult:
    technique: str
    peak_allocated: int | None = None      # CUDA allocator: max_memory_allocated during the step
    peak_reserved: int | None = None       # CUDA allocator: max_memory_reserved during the step
    start_allocated: int | None = None     # allocated when the step began (model, optimizer, batch)
    tracker_peak: int | None = None        # memlab's exact CPU tracker, same step, same start
    tracker_start: int | None = None
    seconds: float | None = None           # median step time
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def peak_increase(self) -> int | None:
        if self.peak_allocated is None or self.start_allocated is None:
            return None
        return self.peak_allocated - self.start_allocated

    @property
    def tracker_increase(self) -> int | None:
        if self.tracker_peak is None or self.tracker_start is None:
            return None
        return self.tracker_peak - self.tracker_start

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items()}
        d["peak_increase"] = self.peak_increase
        d["tracker_increase"] = self.tracker_increase
        inc, tr = self.peak_increase, self.tracker_increase
        d["tracker_vs_allocator"] = round(tr / inc, 4) if inc and tr is not None else None
        return d


def _amp_dtype(device: torch.device) -> torch.dtype:
    # before Ampere (T4, V100) bf16 is emulated, slowly: fp16 is what such a card would use
    if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] < 8:
        return torch.float16
    return torch.bfloat16


def make_step(technique: str, device: torch.device, cfg: Mapping[str, int]):
    """A fresh model, optimizer and batch; returns (step, tracked objects, notes)."""
    from memlab.measure.models import TinyGPT

    torch.manual_seed(0)
    model = TinyGPT(vocab=cfg["vocab"], hidden=cfg["hidden"], heads=cfg["heads"],
                    layers=cfg["layers"], max_seq=cfg["seq_len"], dropout=0.0).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    s, b, V = cfg["seq_len"], cfg["batch"], cfg["vocab"]
    idx = torch.randint(0, V, (s, b), device=device)
    targets = torch.randint(0, V, (s, b), device=device)
    run = _Run(model, optimizer, idx, targets, device, cfg)
    build = _STEPS.get(technique)
    if build is None:
        raise ValueError(f"technique must be one of {TECHNIQUES}, not {technique!r}")
    notes: list[str] = []
    step = build(run, notes)
    return step, (run.model, run.optimizer, idx, targets), notes


@dataclass
class _Run:
    """What a technique's step works on: the model, its optimizer and the batch (``idx``, of
    shape (seq_len, batch), and the ``targets`` of its next-token loss)."""

    model: Any
    optimizer: Any
    idx: torch.Tensor
    targets: torch.Tensor
    device: torch.device
    cfg: Mapping[str, int]

    def forward(self, ids: torch.Tensor, ckpt: bool = False) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        model = self.model
        pos = torch.arange(ids.shape[0], device=self.device)
        x = model.tok(ids) + model.pos(pos)[:, None, :]
        for block in model.blocks:
            x = checkpoint(block, x, use_reentrant=False) if ckpt else block(x)
        return model.head(model.ln_f(x))

    def loss_of(self, logits: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        V = self.cfg["vocab"]
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, V), tgt.reshape(-1))

    def optimizer_step(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def _baseline_step(run: _Run, notes: list[str]) -> Callable[[], None]:
    def step() -> None:
        run.loss_of(run.forward(run.idx), run.targets).backward()
        run.optimizer_step()
    return step


def _checkpointing_step(run: _Run, notes: list[str]) -> Callable[[], None]:
    notes.append("every block checkpointed (torch.utils.checkpoint, use_reentrant=False)")

    def step() -> None:
        run.loss_of(run.forward(run.idx, ckpt=True), run.targets).backward()
        run.optimizer_step()
    return step


def _amp_step(run: _Run, notes: list[str]) -> Callable[[], None]:
    device = run.device
    dtype = _amp_dtype(device)
    notes.append(f"torch.autocast({device.type}, {str(dtype).replace('torch.', '')}); "
                 "no GradScaler (memory and time only)")

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype):
            logits = run.forward(run.idx)
        run.loss_of(logits, run.targets).backward()
        run.optimizer_step()
    return step


def _accumulation_step(run: _Run, notes: list[str]) -> Callable[[], None]:
    k, b = run.cfg["micro_batches"], run.cfg["batch"]
    if b % k:
        raise ValueError(f"batch {b} is not divisible into {k} micro-batches")
    notes.append(f"{k} micro-batches of {b // k}, one optimizer step")

    def step() -> None:
        for i in range(k):
            sl = slice(i * b // k, (i + 1) * b // k)
            (run.loss_of(run.forward(run.idx[:, sl]), run.targets[:, sl]) / k).backward()
        run.optimizer_step()
    return step


def _sdpa_attention(block: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    s_, b_, h = x.shape
    a, d = block.a, h // block.a
    q, k, v = (t.reshape(s_, b_ * a, d).transpose(0, 1) for t in block.qkv(x).split(h, dim=-1))
    ctx = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return block.proj(ctx.transpose(0, 1).reshape(s_, b_, h))


def _sdpa_step(run: _Run, notes: list[str]) -> Callable[[], None]:
    import types

    notes.append("attention through F.scaled_dot_product_attention(is_causal=True) in every "
                 "block instead of the eager s x s softmax (08, section 1)")
    for block in run.model.blocks:
        block.attention = types.MethodType(_sdpa_attention, block)
    return _baseline_step(run, notes)


def _fused_optimizer_step(run: _Run, notes: list[str]) -> Callable[[], None]:
    notes.append("AdamW per parameter, stepped in a post-accumulate-grad hook that frees the "
                 "gradient (08, section 4)")
    per_param = {p: torch.optim.AdamW([p], lr=1e-4) for p in run.model.parameters()}

    def hook(p: torch.Tensor) -> None:
        per_param[p].step()
        per_param[p].zero_grad(set_to_none=True)

    for p in run.model.parameters():
        p.register_post_accumulate_grad_hook(hook)
    run.optimizer = list(per_param.values())  # tracked: their state is part of the start

    def step() -> None:
        run.loss_of(run.forward(run.idx), run.targets).backward()
    return step


def _kv_cache_step(run: _Run, notes: list[str]) -> Callable[[], None]:
    from memlab.lessons.serving import TinyDecoder

    cfg = run.cfg
    n_new = KV_DECODE_TOKENS
    prompt_len = max(1, cfg["seq_len"] // 2)
    notes.append(f"inference, not training: TinyDecoder (same sizes, multi-head), prefill "
                 f"{prompt_len} tokens x batch {cfg['batch']}, then {n_new} greedy decode steps "
                 "with a KV cache (09); no optimizer")
    torch.manual_seed(0)
    run.model = model = TinyDecoder(vocab=cfg["vocab"], hidden=cfg["hidden"], heads=cfg["heads"],
                                    kv_heads=cfg["heads"], layers=cfg["layers"],
                                    max_seq=prompt_len + n_new).to(run.device)
    run.optimizer = None
    prompt = run.idx[:prompt_len]

    def step() -> None:
        model.generate(prompt, n_new)
    return step


# technique -> what builds its step on a fresh run (make_step), the notes it appends
_STEPS: dict[str, Callable[[_Run, list[str]], Callable[[], None]]] = {
    "baseline": _baseline_step, "checkpointing": _checkpointing_step, "amp": _amp_step,
    "accumulation": _accumulation_step, "sdpa": _sdpa_step,
    "fused_optimizer": _fused_optimizer_step, "kv_cache": _kv_cache_step}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_technique(technique: str, device: torch.device, cfg: Mapping[str, int] = BENCH_CONFIG,
                      repeats: int = 3) -> TechniqueResult:
    """Peak memory (allocator and CPU tracker) and median time of one steady-state step."""
    from memlab.measure.tracker import measure_peak

    res = TechniqueResult(technique)
    try:
        step, tracked, res.notes = make_step(technique, device, cfg)
        step()  # warm-up: AdamW's state exists from here on, cuBLAS workspaces are allocated
        _sync(device)
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
            res.start_allocated = torch.cuda.memory_allocated(device)
            step()
            _sync(device)
            res.peak_allocated = torch.cuda.max_memory_allocated(device)
            res.peak_reserved = torch.cuda.max_memory_reserved(device)
        tracked_peak = measure_peak(step, device=device, track=tracked, backend="cpu-tracker")
        res.tracker_start, res.tracker_peak = tracked_peak.start_bytes, tracked_peak.peak_bytes
        times = []
        for _ in range(repeats):
            _sync(device)
            t0 = time.perf_counter()
            step()
            _sync(device)
            times.append(time.perf_counter() - t0)
        res.seconds = statistics.median(times)
        del step, tracked
    except Exception as exc:  # e.g. torch.OutOfMemoryError on a small card: record, go on
        res.error = f"{type(exc).__name__}: {str(exc)[:500]}"
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return res


def run_benchmark(device: torch.device, cfg: Mapping[str, int] = BENCH_CONFIG,
                  techniques: Sequence[str] = TECHNIQUES, repeats: int = 3) -> dict[str, Any]:
    rows = [measure_technique(t, device, cfg, repeats).as_dict() for t in techniques]
    base = next((r for r in rows if r["technique"] == "baseline"), None)
    for r in rows:
        for key, out in (("peak_allocated", "allocated_vs_baseline"),
                         ("peak_reserved", "reserved_vs_baseline"),
                         ("tracker_peak", "tracker_vs_baseline"),
                         ("seconds", "time_vs_baseline")):
            b, v = (base or {}).get(key), r.get(key)
            r[out] = round(v / b, 4) if b and v is not None else None
    return {"config": dict(cfg), "device": str(device), "techniques": rows}


# --------------------------------------------------------------------------- allocator model
# The step the allocator model replays: weights of 16 MiB (large pool, own segments), activations
# of 1 to 4 MiB (small pool and 20 MiB segments), biases of a few KiB (small pool).
ALLOCATOR_MODEL_CONFIG: dict[str, int] = {"hidden": 1024, "ffn": 4096, "batch": 256}


def _allocator_model_step(device: torch.device, cfg: Mapping[str, int]):
    """A fresh MLP, its AdamW and a batch on ``device``; returns (one training step, tracked)."""
    torch.manual_seed(0)
    h, f = cfg["hidden"], cfg["ffn"]
    model = torch.nn.Sequential(torch.nn.Linear(h, f), torch.nn.GELU(),
                                torch.nn.Linear(f, h)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(cfg["batch"], h, device=device)
    y = torch.randn(cfg["batch"], h, device=device)

    def step() -> None:
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step, (model, optimizer, x, y)


def _relative_error(predicted: int | None, real: int | None) -> float | None:
    if predicted is None or not real:
        return None
    return round((predicted - real) / real, 4)


def _same_allocations(cpu: list, cuda: list) -> dict[str, Any]:
    """memlab's CPU record of a step against torch's CUDA trace of the same step: how many
    allocations each holds, and the share of the CPU record's (512-rounded) sizes that the CUDA
    trace has too (as a multiset: the same tensors, whatever their order)."""
    from collections import Counter

    from memlab.measure.allocator import round_size

    have = Counter(round_size(a.size) for a in cuda)
    matched = 0
    for a in cpu:
        size = round_size(a.size)
        if have[size] > 0:
            have[size] -= 1
            matched += 1
    return {"allocations_cuda": len(cuda),
            "allocations_matched": round(matched / len(cpu), 4) if cpu else None}


def run_allocator_model_check(device: torch.device,
                              cfg: Mapping[str, int] = ALLOCATOR_MODEL_CONFIG) -> dict[str, Any]:
    """The allocator model's peak reserved for one step, from the CPU recording (any device) and,
    on CUDA, from torch's own trace, beside the real ``max_memory_reserved``; never raises."""
    from memlab.measure.allocator import replay
    from memlab.measure.snapshot import allocations, record_snapshot

    row: dict[str, Any] = {"config": dict(cfg), "device": str(device), "real_peak_reserved": None,
                           "real_peak_allocated": None, "model_cuda_trace": None,
                           "model_cuda_trace_allocated": None, "model_cpu_trace": None,
                           "error_cuda_trace": None, "error_cpu_trace": None, "error": None,
                           "allocations_cpu": None, "allocations_cuda": None,
                           "allocations_matched": None}
    try:
        step, tracked = _allocator_model_step(torch.device("cpu"), cfg)
        cpu_snap = record_snapshot(step, device="cpu", track=tracked)
        row["model_cpu_trace"] = replay(cpu_snap).peak_reserved
        row["allocations_cpu"] = len(allocations(cpu_snap))
        del step, tracked
        if device.type == "cuda":
            step, tracked = _allocator_model_step(device, cfg)
            _sync(device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
            snap = record_snapshot(step, device=device)
            row["real_peak_reserved"] = int(torch.cuda.max_memory_reserved(device))
            row["real_peak_allocated"] = int(torch.cuda.max_memory_allocated(device))
            predicted = replay(snap, device=device.index or 0)
            row["model_cuda_trace"] = predicted.peak_reserved
            row["model_cuda_trace_allocated"] = predicted.peak_allocated
            row.update(_same_allocations(allocations(cpu_snap),
                                         allocations(snap, device.index or 0)))
            del step, tracked, snap
    except Exception as exc:  # record, go on: the report says what failed
        row["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    row["error_cuda_trace"] = _relative_error(row["model_cuda_trace"], row["real_peak_reserved"])
    row["error_cpu_trace"] = _relative_error(row["model_cpu_trace"], row["real_peak_reserved"])
    return row


# --------------------------------------------------------------------------- gpu tests
def parse_junit(xml_text: str) -> list[dict[str, Any]]:
    """[{test, outcome (passed|failed|error|skipped), message, seconds}] from a JUnit XML report."""
    out = []
    for case in ET.fromstring(xml_text).iter("testcase"):
        outcome, message = "passed", None
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                message = (el.get("message") or el.text or "")[:300]
                break
        name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
        out.append({"test": name, "outcome": outcome, "message": message,
                    "seconds": float(case.get("time") or 0)})
    return out


def run_gpu_tests(root: Path = ROOT, timeout: int = 300) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpucheck-pytest-") as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
               f"--junitxml={xml}", "tests"]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout)
            rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-2000:]
        except subprocess.TimeoutExpired:
            rc, tail = None, f"pytest -m gpu ran past {timeout} s"
        tests = parse_junit(xml.read_text()) if xml.exists() else []
    return {"command": "pytest -m gpu -q tests", "returncode": rc, "seconds": round(time.perf_counter() - start, 1),
            "tests": tests, "output_tail": tail}


# --------------------------------------------------------------------------- report
def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def report_paths(out_dir: Path, date: str, gpu_name: str) -> tuple[Path, Path]:
    stem = f"gpu-report-{date}-{slug(gpu_name)}"
    return out_dir / f"{stem}.json", out_dir / f"{stem}.md"


def _b(n: int | None) -> str:
    from memlab.measure.units import fmt_bytes
    return "n/a" if n is None else fmt_bytes(n)


def _x(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.2f}x"


def _pct(r: float | None) -> str:
    return "n/a" if r is None else f"{r * 100:+.1f}%"


def _allocator_model_lines(am: Mapping[str, Any]) -> list[str]:
    lines = ["", "## Allocator model: predicted vs real peak reserved (one MLP training step)", "",
             f"Config: {json.dumps(am['config'])}. memlab.measure.allocator replays the step's trace "
             "through a model of the caching allocator's documented rules; *error* is "
             "(predicted - real) / real against `torch.cuda.max_memory_reserved()`. A measurement, "
             "not a pass threshold.", "",
             "| real peak reserved | model, CUDA trace | error | model, CPU trace | error "
             "| real peak allocated | model peak allocated (CUDA trace) |",
             "|---|---|---|---|---|---|---|"]
    if am.get("error"):
        return lines + [f"| error: {am['error']} |  |  |  |  |  |  |"]
    lines.append(f"| {_b(am.get('real_peak_reserved'))} | {_b(am.get('model_cuda_trace'))} "
                 f"| {_pct(am.get('error_cuda_trace'))} | {_b(am.get('model_cpu_trace'))} "
                 f"| {_pct(am.get('error_cpu_trace'))} | {_b(am.get('real_peak_allocated'))} "
                 f"| {_b(am.get('model_cuda_trace_allocated'))} |")
    matched = am.get("allocations_matched")
    lines += ["", f"Allocations of the step: {am.get('allocations_cpu')} in memlab's CPU record, "
              f"{am.get('allocations_cuda') if am.get('allocations_cuda') is not None else 'n/a'} "
              "in torch's CUDA trace; "
              + (f"{matched:.1%} of the CPU record's sizes (512-byte rounded) are in the CUDA "
                 "trace too." if matched is not None else "no CUDA trace to compare.")]
    return lines


def render_markdown(report: Mapping[str, Any]) -> str:
    env = report["environment"]
    lines = [f"# GPU check: {env['gpu']} ({report['date']})", "",
             f"`make gpu-check` (memlab.tools.gpucheck) on {env['gpu']}, {_b(env.get('gpu_memory'))}; "
             f"torch {env['torch']}, CUDA {env['cuda']}, Python {env['python']}. "
             f"Total time {report['seconds']:.0f} s ({'within' if report['seconds'] <= TARGET_S else 'OVER'} "
             f"the {TARGET_S // 60}-minute target). Overall: **{'PASS' if report['passed'] else 'FAIL'}**.",
             ""]
    bench = report.get("benchmark") or {}
    by_tech = {r["technique"]: r for r in bench.get("techniques", [])}
    lines += ["## Notebooks (solutions, top to bottom)", "",
              "| notebook | result | time | graded tests passed | kernel peak allocated | kernel peak reserved | technique peak (allocated) |",
              "|---|---|---|---|---|---|---|"]
    for nb in report.get("notebooks", []):
        tests = nb.get("graded_tests", [])
        peak = nb.get("kernel_peak") or {}
        tech = NOTEBOOK_TECHNIQUE.get(nb["assignment"])
        tech_cell = (f"{tech}: {_b(by_tech[tech].get('peak_allocated'))}"
                     if tech in by_tech else "")
        lines.append(f"| {nb['notebook']} | {'pass' if nb['passed'] else 'FAIL'} | {nb['seconds']:.0f} s "
                     f"| {sum(t['passed'] for t in tests)}/{len(tests)} | {_b(peak.get('max_allocated'))} "
                     f"| {_b(peak.get('max_reserved'))} | {tech_cell} |")
    failures = [(nb["notebook"], p) for nb in report.get("notebooks", [])
                for p in ([nb["crash"]] if nb.get("crash") else [])
                + [f"cell {e['cell']}: {e['error']}" for e in nb.get("errors", [])]
                + [f"{t['grade_id']}: {t['problem']}" for t in nb.get("graded_tests", []) if not t["passed"]]]
    if failures:
        lines += ["", "Problems:", ""] + [f"- `{n}`: {p}" for n, p in failures]
    if bench:
        cfg = bench["config"]
        lines += ["", "## Benchmark: one TinyGPT training step per technique (AdamW)", "",
                  f"Config: {json.dumps(cfg)}. Peaks are over the whole step (model, optimizer state "
                  "and batch included); ratios are against the fp32 baseline. *tracker/allocator*: "
                  "the exact CPU tracker's peak increase over the CUDA allocator's, same step.", "",
                  "| technique | peak allocated | peak reserved | vs baseline (alloc.) | CPU-tracker peak | time/step | time vs baseline | tracker/allocator | notes |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in bench["techniques"]:
            if r.get("error"):
                lines.append(f"| {r['technique']} | error: {r['error']} |  |  |  |  |  |  |  |")
                continue
            t = "n/a" if r.get("seconds") is None else f"{r['seconds'] * 1000:.1f} ms"
            lines.append(f"| {r['technique']} | {_b(r.get('peak_allocated'))} | {_b(r.get('peak_reserved'))} "
                         f"| {_x(r.get('allocated_vs_baseline'))} | {_b(r.get('tracker_peak'))} | {t} "
                         f"| {_x(r.get('time_vs_baseline'))} "
                         f"| {_x(r.get('tracker_vs_allocator'))} | {'; '.join(r.get('notes', []))} |")
    if report.get("allocator_model"):
        lines += _allocator_model_lines(report["allocator_model"])
    gt = report.get("gpu_tests")
    if gt:
        counts: dict[str, int] = {}
        for t in gt["tests"]:
            counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
        lines += ["", "## Tests marked `gpu`", "",
                  f"`{gt['command']}`: exit {gt['returncode']}, {gt['seconds']:.0f} s, "
                  + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())), "",
                  "| test | outcome | message |", "|---|---|---|"]
        for t in gt["tests"]:
            lines.append(f"| `{t['test']}` | {t['outcome']} | {(t['message'] or '').replace('|', '/')[:120]} |")
    return "\n".join(lines) + "\n"


def overall_passed(report: Mapping[str, Any]) -> bool:
    nbs_ok = all(nb["passed"] for nb in report.get("notebooks", []))
    bench_ok = all(not r.get("error") for r in (report.get("benchmark") or {}).get("techniques", []))
    gt = report.get("gpu_tests")
    tests_ok = gt is None or (gt["returncode"] in (0, 5)
                              and not any(t["outcome"] in ("failed", "error") for t in gt["tests"]))
    model_ok = not (report.get("allocator_model") or {}).get("error")  # it ran: no threshold
    return nbs_ok and bench_ok and tests_ok and model_ok


def write_report(report: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    report["passed"] = overall_passed(report)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = report_paths(out_dir, report["date"], report["environment"]["gpu"])
    json_path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    md_path.write_text(render_markdown(report))
    return json_path, md_path


def environment(device: torch.device) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(device)
    return {"gpu": torch.cuda.get_device_name(device), "gpu_memory": int(props.total_memory),
            "capability": f"{props.major}.{props.minor}", "torch": torch.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version(),
            "host": platform.node()}


# --------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m memlab.tools.gpucheck", description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=str(ROOT / "docs"), help="where the report goes (docs/)")
    ap.add_argument("--notebook", action="append", default=None,
                    help="assignment name(s) to run (default: every solutions/*/)")
    ap.add_argument("--skip-notebooks", action="store_true")
    ap.add_argument("--skip-benchmark", action="store_true")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-allocator-model", action="store_true")
    ap.add_argument("--cell-timeout", type=int, default=600, help="seconds per notebook cell")
    args = ap.parse_args(argv)

    if not torch.cuda.is_available():
        print(NO_CUDA_MESSAGE.format(version=torch.__version__, cuda=torch.version.cuda),
              file=sys.stderr)
        return EXIT_NO_CUDA
    device = torch.device("cuda", torch.cuda.current_device())
    start = time.perf_counter()
    report: dict[str, Any] = {"date": _dt.date.today().isoformat(), "environment": environment(device),
                              "notebooks": [], "benchmark": None, "allocator_model": None,
                              "gpu_tests": None}
    print(f"gpu-check on {report['environment']['gpu']}", flush=True)
    if not args.skip_notebooks:
        for path in solution_notebooks():
            if args.notebook and path.parent.name not in args.notebook:
                continue
            print(f"  notebook {path.parent.name} ...", end=" ", flush=True)
            rec = run_notebook(path, cell_timeout=args.cell_timeout,
                               keep_dir=ROOT / "artifacts" / "gpu-check")
            print(f"{'pass' if rec['passed'] else 'FAIL'} ({rec['seconds']:.0f} s)", flush=True)
            report["notebooks"].append(rec)
    if not args.skip_benchmark:
        print("  benchmark ...", flush=True)
        report["benchmark"] = run_benchmark(device)
    if not args.skip_allocator_model:
        print("  allocator model ...", flush=True)
        report["allocator_model"] = run_allocator_model_check(device)
    if not args.skip_tests:
        print("  pytest -m gpu ...", flush=True)
        report["gpu_tests"] = run_gpu_tests()
    report["seconds"] = round(time.perf_counter() - start, 1)
    json_path, md_path = write_report(report, Path(args.out_dir))
    print(f"{'PASS' if report['passed'] else 'FAIL'}: report in {md_path} and {json_path.name}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
