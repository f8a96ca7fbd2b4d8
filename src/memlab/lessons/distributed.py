"""Several ranks on one machine: what DDP, ZeRO-1 and FSDP2 keep on each rank, measured.

Used by: 06_sharding (every section), tests/lessons/test_distributed.py.

:func:`launch` starts ``world_size`` processes, one per rank (on Linux with gloo: forked from
the calling process, which has torch imported already; otherwise ``python -m
memlab.lessons.distributed``, a new interpreter each), joined with ``torch.distributed`` (gloo
on the CPU; NCCL when there is one CUDA device per rank), ``MASTER_ADDR=127.0.0.1`` and a
free port. Every rank builds the same small MLP
(:func:`make_mlp`), wraps it with each strategy, runs ONE training step on its own batch
(:func:`rank_batches`) and reports, per rank:

- ``params`` / ``grads`` / ``optimizer_state``: bytes of the storages this rank holds for them
  (:func:`local_bytes`: each distinct storage once, whole; for FSDP2 DTensors, the storage of
  the local shard, padding included); optimizer state includes Adam's 4-byte ``step`` tensor per
  parameter tensor this rank holds state for;
- ``timeline``: live bytes op by op during the step (:class:`memlab.MemoryTracker`, which also
  follows ``UntypedStorage.resize_``, the call FSDP2 uses to free the gathered parameters);
- ``comm``: bytes handed to each collective during the step (``torch.distributed`` functions
  wrapped in the rank, plus a DDP communication hook for the gradient all-reduce);
- ``full_grads``: the full (unsharded) gradients after the step, to compare with one process.

The children's output (warnings, gloo logs) is captured, never printed; a rank that fails or
times out raises :class:`RankError` with the tail of its stderr, and the other ranks are killed.

Strategies (``STRATEGIES``):
    ``ddp``   DistributedDataParallel + Adam: everything replicated.
    ``zero1`` DDP + ``torch.distributed.optim.ZeroRedundancyOptimizer`` (Adam): each rank keeps
              the optimizer state of the WHOLE parameter tensors it owns (greedy: tensors sorted
              by size, largest first, each to the rank with the fewest elements so far).
    ``fsdp``  FSDP2 ``torch.distributed.fsdp.fully_shard`` on every Linear and on the root:
              every parameter split along dim 0 into ``world_size`` chunks (``torch.chunk``
              sizes: ``ceil(d0 / N)`` rows each, the last ranks may get fewer or none). Each
              rank STORES its parameter shard and its gradient shard padded to ``ceil(d0 / N)``
              rows, even a rank with no rows (torch/distributed/fsdp/_fully_shard/_fsdp_param.py,
              ``FSDPParam._init_sharded_param``: ``padded_sharded_size = chunks[0].size()``, the
              parameter a ``narrow`` view of it; _fsdp_collectives.py, ``foreach_reduce``: one
              reduce-scatter output per ``fully_shard`` module, each parameter's part
              ``_get_dim0_padded_size``, each ``p.grad`` an ``as_strided`` view into it). Adam's
              state is not padded (``torch.zeros_like`` of the DTensor in torch/optim/adam.py: the
              rank's own rows only).

:func:`phase_time` puts the op-by-op timelines of different strategies on one axis: each phase
spans the same width whatever number of ops it took.

References: Rajbhandari et al. 2020, "ZeRO" (arXiv 1910.02054); PyTorch docs "FSDP2
fully_shard", "ZeroRedundancyOptimizer", "DDP communication hooks".
"""
from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from memlab.measure.tracker import MemoryTracker, storage_bytes

__all__ = [
    "STRATEGIES", "RankError", "free_port", "launch", "make_mlp", "param_shapes", "rank_batches",
    "loss_fn", "local_bytes", "ring_bytes_per_rank", "tp_activation_bytes", "PHASES", "phase_time",
]

STRATEGIES = ("ddp", "zero1", "fsdp")
PHASES = ("forward", "backward", "optimizer")  # the phases of the step every rank records


class RankError(RuntimeError):
    """A rank exited with an error or did not finish in time."""


# ----------------------------------------------------------------------------- the model
def make_mlp(sizes: Sequence[int], seed: int = 0) -> nn.Sequential:
    """``Linear(sizes[0], sizes[1]) -> ReLU -> ... -> Linear(sizes[-2], sizes[-1])``, fp32,
    the same weights for the same ``seed`` in every process."""
    g = torch.Generator().manual_seed(seed)
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        lin = nn.Linear(sizes[i], sizes[i + 1])
        with torch.no_grad():
            bound = 1.0 / sizes[i] ** 0.5
            lin.weight.uniform_(-bound, bound, generator=g)
            lin.bias.uniform_(-bound, bound, generator=g)
        layers += [lin, nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def param_shapes(sizes: Sequence[int]) -> list[tuple[int, ...]]:
    """The parameter shapes of ``make_mlp(sizes)``, in ``model.parameters()`` order."""
    out: list[tuple[int, ...]] = []
    for i in range(len(sizes) - 1):
        out += [(sizes[i + 1], sizes[i]), (sizes[i + 1],)]
    return out


def rank_batches(sizes: Sequence[int], batch_sizes: Sequence[int], seed: int = 0
                 ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One ``(inputs, targets)`` batch per rank; rank ``r`` gets ``batch_sizes[r]`` samples."""
    g = torch.Generator().manual_seed(seed + 1)
    return [(torch.randn(b, sizes[0], generator=g), torch.randn(b, sizes[-1], generator=g))
            for b in batch_sizes]


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error, averaged over the rank's own batch."""
    return torch.nn.functional.mse_loss(output, target)


# --------------------------------------------------------------------- bookkeeping rules
def _fsdp_rows(d0: int, world_size: int, rank: int) -> int:
    """Rows of a dim-0 size ``d0`` parameter that FSDP2 gives ``rank`` (torch.chunk sizes): the
    rows of its Adam state. Its parameter and gradient storage is padded to ``ceil(d0 / N)``."""
    chunk = -(-d0 // world_size)
    return max(0, min(chunk, d0 - rank * chunk))


def _zero1_owner(shapes: Sequence[Sequence[int]], world_size: int) -> list[int]:
    """The rank owning each parameter under ZeroRedundancyOptimizer's default partition
    (sorted by numel, largest first, stable; each to the rank with the fewest elements)."""
    numels = [int(torch.Size(s).numel()) for s in shapes]
    owner = [0] * len(numels)
    load = [0] * world_size
    for i in sorted(range(len(numels)), key=lambda i: numels[i], reverse=True):
        r = min(range(world_size), key=lambda k: load[k])
        owner[i] = r
        load[r] += numels[i]
    return owner


def ring_bytes_per_rank(kind: str, n_bytes: int, world_size: int) -> float:
    """Bytes one rank sends in a ring implementation of a collective on an ``n_bytes`` buffer
    (the full, unsharded size): all-reduce 2(N-1)/N, all-gather and reduce-scatter (N-1)/N,
    broadcast (N-1)/N (pipelined)."""
    f = (world_size - 1) / world_size
    return n_bytes * (2 * f if kind == "all_reduce" else f)


def tp_activation_bytes(s: int, b: int, h: int, a: int, t: int = 1,
                        sequence_parallel: bool = False) -> float:
    """Activation bytes of ONE transformer layer on one tensor-parallel rank (16-bit, Korthikanti
    et al. 2022, arXiv 2205.05198, Table 2): ``t`` ranks of tensor parallelism divide the
    attention and MLP activations (24sbh + 5as^2b) but not the LayerNorm/dropout ones (10sbh)
    unless sequence parallelism splits those along the sequence too."""
    if sequence_parallel:
        return s * b * h * (34 + 5 * a * s / h) / t
    return s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


def local_bytes(tensors) -> int:
    """Bytes of the storage this rank holds for ``tensors``: every distinct storage once and
    whole (DTensor: its local shard's). FSDP2's shards are views of padded storage (a parameter:
    its first rows of a ``ceil(d0 / N)``-row buffer; the gradients of one ``fully_shard``
    module: views into one padded reduce-scatter output), so the padding counts, as it does in
    the rank's memory. ``None`` and non-tensors are skipped."""
    return storage_bytes(t for t in tensors if isinstance(t, torch.Tensor))


def phase_time(timeline: Sequence[Sequence], phases: Sequence[str] = PHASES
               ) -> tuple[list[float], list[int]]:
    """``(x, live_bytes)`` to plot a ``timeline`` of ``(phase, bytes, op)`` points against
    phase-normalised time: phase ``i`` of ``phases`` spans ``(i, i + 1]`` whatever its number of
    ops (its k-th of n points at ``i + k / n``, k = 1..n, so it ends at ``i + 1``); points before
    the first phase (the tracker's ``"start"``) are at 0. Strategies run different numbers of ops
    per phase (FSDP2's gathers and frees), so against the op index their phases do not line up.
    Raises ValueError for a phase out of order, or an unknown one after the step began."""
    phases = list(phases)
    counts = {p: 0 for p in phases}
    for phase, *_ in timeline:
        if phase in counts:
            counts[phase] += 1
    xs: list[float] = []
    ys: list[int] = []
    seen = {p: 0 for p in phases}
    current = -1
    for phase, n_bytes, *_ in timeline:
        if phase in counts:
            i = phases.index(phase)
            if i < current:
                raise ValueError(f"phase {phase!r} after {phases[current]!r}: expected {phases}")
            current = i
            seen[phase] += 1
            xs.append(i + seen[phase] / counts[phase])
        elif current < 0:
            xs.append(0.0)
        else:
            raise ValueError(f"unknown phase {phase!r} during the step (phases: {phases})")
        ys.append(int(n_bytes))
    return xs, ys


# ------------------------------------------------------------------------ launching
def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _backend(world_size: int, backend: str | None) -> str:
    if backend is not None:
        return backend
    if torch.cuda.is_available() and torch.cuda.device_count() >= world_size:
        return "nccl"  # one GPU per rank (not exercised in CI: no GPU there)
    return "gloo"


def launch(world_size: int, configs: Sequence[dict], *, strategies: Sequence[str] = STRATEGIES,
           timeline: bool = False, timeout: float = 180.0, backend: str | None = None
           ) -> list[list[dict]]:
    """Run every config under every strategy on ``world_size`` ranks, in ONE launch.

    ``configs``: dicts with ``sizes`` (the MLP layer widths), ``batch_sizes`` (one per rank) and
    ``seed``. Returns ``runs[c][r]``: for config ``c`` and rank ``r`` a dict
    ``{strategy: {"params", "grads", "optimizer_state", "peak", "comm", "timeline",
    "full_grads"}}``. ``timeline`` records the op-by-op timeline (slower). Raises
    :class:`RankError` if a rank fails or the ranks take longer than ``timeout`` seconds.
    """
    if world_size < 1:
        raise ValueError("world_size must be >= 1")
    unknown = set(strategies) - set(STRATEGIES)
    if unknown:
        raise ValueError(f"unknown strategies {sorted(unknown)}; known: {STRATEGIES}")
    configs = [dict(c) for c in configs]
    for c in configs:
        if len(c["batch_sizes"]) != world_size:
            raise ValueError(f"config {c}: need one batch size per rank ({world_size})")
    backend = _backend(world_size, backend)
    with tempfile.TemporaryDirectory(prefix="memlab-ranks-") as tmp:
        tmp = Path(tmp)
        (tmp / "job.json").write_text(json.dumps(dict(
            configs=configs, strategies=list(strategies), timeline=timeline, backend=backend)))
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                   WORLD_SIZE=str(world_size), OMP_NUM_THREADS="1",
                   PYTHONWARNINGS="ignore")
        procs, logs = [], []
        try:
            for rank in range(world_size):
                log = open(tmp / f"rank{rank}.log", "w+b")
                logs.append(log)
                procs.append(_start_rank(tmp, rank, dict(env, RANK=str(rank)), log, backend))
            deadline = time.monotonic() + timeout
            while any(p.poll() is None for p in procs):
                failed = [r for r, p in enumerate(procs) if p.returncode not in (None, 0)]
                if failed:
                    raise RankError(_failure(f"rank {failed[0]} exited with code "
                                             f"{procs[failed[0]].returncode}", logs[failed[0]]))
                if time.monotonic() > deadline:
                    late = [r for r, p in enumerate(procs) if p.returncode is None]
                    raise RankError(_failure(f"ranks {late} did not finish within {timeout:.0f} s "
                                             "(a rank waiting for another at a collective?)",
                                             logs[late[0]]))
                time.sleep(0.05)
            failed = [r for r, p in enumerate(procs) if p.returncode != 0]
            if failed:
                raise RankError(_failure(f"rank {failed[0]} exited with code "
                                         f"{procs[failed[0]].returncode}", logs[failed[0]]))
            results = [torch.load(tmp / f"rank{r}.pt", weights_only=False) for r in range(world_size)]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            for log in logs:
                log.close()
    return [[results[r][c] for r in range(world_size)] for c in range(len(configs))]


def _fork_ok(backend: str) -> bool:
    """Ranks can be forked from this process (torch already imported: no interpreter start, no
    ``import torch`` per rank) on Linux, for gloo, while CUDA is not initialised here (a forked
    child cannot use a CUDA context its parent made). Elsewhere each rank is a new interpreter."""
    import multiprocessing

    return (sys.platform.startswith("linux") and backend == "gloo" and not torch.cuda.is_initialized()
            and "fork" in multiprocessing.get_all_start_methods()
            and os.environ.get("MEMLAB_RANKS") != "spawn")


class _ForkedRank:
    """Popen-like handle of a rank forked by :func:`_start_rank`."""

    def __init__(self, proc):
        self._proc = proc

    @property
    def returncode(self) -> int | None:
        return self._proc.exitcode

    def poll(self) -> int | None:
        return self._proc.exitcode

    def kill(self) -> None:
        self._proc.kill()

    def wait(self, timeout: float | None = None) -> int | None:
        self._proc.join(timeout)
        return self._proc.exitcode


def _start_rank(tmp: Path, rank: int, env: dict, log, backend: str):
    """One rank: forked from this process where :func:`_fork_ok`, else ``python -m
    memlab.lessons.distributed TMP RANK``. Either way its output goes to ``log`` only."""
    if _fork_ok(backend):
        import multiprocessing

        proc = multiprocessing.get_context("fork").Process(
            target=_forked_rank, args=(str(tmp), rank, env, log.fileno()), daemon=True)
        proc.start()
        return _ForkedRank(proc)
    return subprocess.Popen([sys.executable, "-m", "memlab.lessons.distributed", str(tmp), str(rank)],
                            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)


def _forked_rank(tmp: str, rank: int, env: dict, log_fd: int) -> None:
    """A forked rank: its output on ``log_fd`` only (never the parent's streams: in a Jupyter
    kernel those are the kernel's channels), the rank's environment, then :func:`_rank_main`."""
    import io

    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
    os.environ.clear()
    os.environ.update(env)
    _rank_main(tmp, rank)


def _failure(what: str, log) -> str:
    log.flush()
    log.seek(0)
    tail = log.read().decode(errors="replace").strip().splitlines()[-15:]
    return f"{what}; the end of its output:\n" + "\n".join(tail)


# ------------------------------------------------------------------------ in a rank
class _RankTracker(MemoryTracker):
    """MemoryTracker that counts a DTensor as its local shard (``_storages`` in tracker.py
    follows ``__tensor_flatten__``, which for DTensor in torch 2.13 also names the DeviceMesh)."""

    def _add(self, t: torch.Tensor) -> None:
        local = getattr(t, "_local_tensor", None)
        super()._add(local if isinstance(local, torch.Tensor) else t)


class _CommCounter:
    """Bytes handed to each kind of collective while active (wraps torch.distributed)."""

    KINDS = {  # function name -> (kind, position and name of the argument holding the FULL buffer)
        "all_reduce": ("all_reduce", 0, "tensor"), "broadcast": ("broadcast", 0, "tensor"),
        "all_gather_single": ("all_gather", 0, "output_tensor"),
        "all_gather_into_tensor": ("all_gather", 0, "output_tensor"),
        "reduce_scatter_single": ("reduce_scatter", 1, "input"),
        "reduce_scatter_tensor": ("reduce_scatter", 1, "input"),
    }

    def __init__(self) -> None:
        self.bytes: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.active = False
        self._saved: dict[str, Any] = {}

    def add(self, kind: str, n: int) -> None:
        if self.active:
            self.bytes[kind] = self.bytes.get(kind, 0) + int(n)
            self.calls[kind] = self.calls.get(kind, 0) + 1

    def install(self) -> None:
        import torch.distributed as dist
        for name, (kind, pos, key) in self.KINDS.items():
            orig = getattr(dist, name, None)
            if orig is None:
                continue
            self._saved[name] = orig

            @functools.wraps(orig)
            def wrapped(*args, _o=orig, _k=kind, _p=pos, _n=key, **kwargs):
                t = args[_p] if len(args) > _p else kwargs.get(_n)
                if isinstance(t, torch.Tensor):
                    self.add(_k, t.numel() * t.element_size())
                return _o(*args, **kwargs)
            setattr(dist, name, wrapped)

    def ddp_hook(self, state, bucket):
        """DDP communication hook: average the bucket with an all-reduce (counted by the
        wrapped ``dist.all_reduce``; DDP's default C++ hook would bypass the wrapper)."""
        import torch.distributed as dist
        buf = bucket.buffer()
        fut = dist.all_reduce(buf.div_(dist.get_world_size()), async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])


def _wrap(strategy: str, model: nn.Module, counter: _CommCounter):
    from torch.nn.parallel import DistributedDataParallel as DDP
    if strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        return model, torch.optim.Adam(model.parameters(), lr=1e-3)
    ddp = DDP(model, gradient_as_bucket_view=True)
    ddp.register_comm_hook(None, counter.ddp_hook)
    if strategy == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ddp, ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    return ddp, torch.optim.Adam(ddp.parameters(), lr=1e-3)


def _one_step(strategy: str, cfg: dict, rank: int, device: torch.device, counter: _CommCounter,
              timeline: bool) -> dict:
    torch.manual_seed(cfg.get("seed", 0))
    model = make_mlp(cfg["sizes"], cfg.get("seed", 0)).to(device)
    module, opt = _wrap(strategy, model, counter)
    inputs, targets = [t.to(device) for t in rank_batches(cfg["sizes"], cfg["batch_sizes"],
                                                          cfg.get("seed", 0))[rank]]
    tracker = _RankTracker(device, timeline=timeline)
    tracker.track(module, opt)
    counter.bytes, counter.calls, counter.active = {}, {}, True
    try:
        with tracker:
            with tracker.phase("forward"):
                loss = loss_fn(module(inputs), targets)
            with tracker.phase("backward"):
                loss.backward()
            with tracker.phase("optimizer"):
                opt.step()
    finally:
        counter.active = False
    local_opt = opt.optim if strategy == "zero1" else opt
    state = [v for s in local_opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    params = list(model.parameters())
    out = dict(
        params=local_bytes(params), grads=local_bytes(p.grad for p in params),
        optimizer_state=local_bytes(state), peak=tracker.peak_bytes, end=tracker.current_bytes,
        comm=dict(counter.bytes), comm_calls=dict(counter.calls), loss=loss.item(),
        timeline=[(pt.phase, pt.bytes, pt.op) for pt in tracker.timeline],
    )
    full = []
    for p in params:  # the full gradient (a collective for FSDP's sharded ones)
        g = p.grad
        full.append((g.full_tensor() if hasattr(g, "full_tensor") else g).detach().cpu().clone())
    out["full_grads"] = full
    return out


def _rank_main(tmp: str, rank: int) -> None:
    import warnings
    warnings.filterwarnings("ignore")
    import torch.distributed as dist
    job = json.loads((Path(tmp) / "job.json").read_text())
    world = int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    if job["backend"] == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(job["backend"], rank=rank, world_size=world)
    counter = _CommCounter()
    counter.install()
    try:
        results = []
        for cfg in job["configs"]:
            results.append({s: _one_step(s, cfg, rank, device, counter, job["timeline"])
                            for s in job["strategies"]})
        torch.save(results, Path(tmp) / f"rank{rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":  # a rank started by launch()
    _rank_main(sys.argv[1], int(sys.argv[2]))
