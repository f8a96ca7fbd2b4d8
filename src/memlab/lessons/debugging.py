"""Debugging memory: reading an out-of-memory error, the LM head's logits, leaks over steps.

Used by: the graded notebook "Debugging memory" (solutions/10_debugging_memory), tests/lessons/test_debugging.py.
Its snapshots come from :mod:`memlab.measure.snapshot` (``ml.snapshot``).

Three parts, each the same on a laptop CPU and on a GPU:

1. **The anatomy of CUDA's out-of-memory message.** The text is built in
   c10/cuda/CUDACachingAllocator.cpp, ``DeviceCachingAllocator::malloc``, when the allocator
   has found no cached block, asked ``cudaMalloc``, released its cached blocks and asked again
   (pytorch/pytorch at commit 001074d2 read for this module; the installed CPU build holds no
   copy of the text). :func:`format_oom_message` rebuilds it from numbers, so a CPU course can
   raise an error in exactly that format (labelled as a reproduction), and
   :func:`read_oom_message` reads one back into bytes with a :data:`DIAGNOSES` verdict.
2. **The LM head.** ``hidden @ weight.T`` over a large vocabulary is a (tokens x vocab) fp32
   tensor, several of which are alive in the backward pass. :func:`chunked_cross_entropy`
   computes the same loss and gradients chunk by chunk, so the full logits never exist (the
   idea of fused/chunked linear cross-entropy: Liger Kernel, Hsu et al. 2024, arXiv 2410.10989;
   Cut Cross-Entropy, Wijmans et al. 2024, "Cut Your Losses in Large-Vocabulary Language
   Models").
3. **Leaks over steps.** :func:`leak_demo` runs a tiny model for N steps with one of the
   patterns of :data:`LEAKS` (from the PyTorch FAQ, "My model reports 'cuda runtime error(2):
   out of memory'": "Don't accumulate history across your training loop") and returns the
   exact live bytes after every step; :func:`live_bytes_over_steps` is the same measurement for
   any step function, for a grader to prove that live bytes stay flat.

PyTorch docs: "Understanding CUDA Memory Usage"
(https://pytorch.org/docs/stable/torch_cuda_memory.html), "CUDA semantics", section "Memory
management" (https://pytorch.org/docs/stable/notes/cuda.html, the page the message links to).
"""
from __future__ import annotations

import gc
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ..measure.device import get_device
from ..measure.tracker import MemoryTracker

__all__ = [
    "OOM_SOURCE", "CUDA_CONTEXT_ALLOWANCE", "DIAGNOSES", "TOO_BIG", "FRAGMENTATION",
    "OTHER_PROCESS",
    "format_cuda_size", "parse_cuda_size", "cuda_allocation_size", "format_oom_message",
    "reproduced_oom_error", "OomReport", "read_oom_message", "diagnose",
    "chunked_cross_entropy", "lm_head_cross_entropy", "logits_bytes",
    "LEAKS", "leak_demo", "live_bytes_over_steps", "growth_per_step", "autograd_nodes",
    "total_loss_after_backward",
]

# ============================================================== 1. the out-of-memory message
OOM_SOURCE = ("c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::malloc "
              "(pytorch/pytorch, commit 001074d25084fdb87a799823e395a50f5ec044d3)")

# The allocator's size constants (same file): kMinBlockSize, kSmallSize, kSmallBuffer,
# kMinLargeAlloc, kLargeBuffer, kRoundLarge.
_MIN_BLOCK = 512
_SMALL_SIZE = 1 << 20
_SMALL_BUFFER = 2 << 20
_MIN_LARGE_ALLOC = 10 << 20
_LARGE_BUFFER = 20 << 20
_ROUND_LARGE = 2 << 20

_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}

# Without NVML, this much of the memory PyTorch does not hold is taken to be this process's own
# CUDA context and libraries (cuBLAS, cuDNN workspaces): "hundreds of MB" in practice.
CUDA_CONTEXT_ALLOWANCE = 1 << 30

TOO_BIG = "too big for the card"
FRAGMENTATION = "fragmentation"
OTHER_PROCESS = "another process holds memory"
DIAGNOSES = (TOO_BIG, FRAGMENTATION, OTHER_PROCESS)

_REPRODUCTION_NOTE = ("\n[memlab: a reproduction of the CUDA caching allocator's message, built "
                      "from the numbers given; no GPU was involved]")


def format_cuda_size(n_bytes: int) -> str:
    """The allocator's ``format_size``: ``<= 1024`` as ``"N bytes"``, then KiB, MiB, GiB with two
    decimals (``os.precision(2)``, ``std::fixed``; thresholds ``<=`` 1 MiB and ``<=`` 1 GiB)."""
    n = int(n_bytes)
    if n <= 1024:
        return f"{n} bytes"
    if n <= 1 << 20:
        return f"{n / 1024:.2f} KiB"
    if n <= 1 << 30:
        return f"{n / (1 << 20):.2f} MiB"
    return f"{n / (1 << 30):.2f} GiB"


def parse_cuda_size(text: str) -> int:
    """``"20.00 MiB" -> 20971520``: bytes, exact to the two printed decimals."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?) (bytes|KiB|MiB|GiB)\s*", text)
    if m is None:
        raise ValueError(f"not a size the CUDA allocator prints: {text!r}")
    return round(float(m.group(1)) * _UNITS[m.group(2)])


def cuda_allocation_size(request_bytes: int) -> int:
    """The "Tried to allocate" number for a tensor of ``request_bytes``: what the allocator asked
    ``cudaMalloc`` for, not the tensor's size. ``round_size`` (multiples of 512) then
    ``get_allocation_size``: up to 1 MiB -> a 2 MiB segment, up to 10 MiB -> 20 MiB, larger ->
    rounded up to 2 MiB (default settings; ``roundup_power2_divisions`` changes the rounding)."""
    size = max(_MIN_BLOCK, -(-int(request_bytes) // _MIN_BLOCK) * _MIN_BLOCK)
    if size <= _SMALL_SIZE:
        return _SMALL_BUFFER
    if size < _MIN_LARGE_ALLOC:
        return _LARGE_BUFFER
    return -(-size // _ROUND_LARGE) * _ROUND_LARGE


def format_oom_message(tried_to_allocate: int, total_capacity: int, free: int, *,
                       allocated_by_pytorch: int, reserved_unallocated: int,
                       process_in_use: int | None = None,
                       other_processes: Mapping[int, int] | None = None,
                       allowed: int | None = None, private_pools: int = 0,
                       device_index: int = 0, reproduction: bool = False) -> str:
    """The message of ``torch.OutOfMemoryError`` for these numbers (bytes), as the allocator
    writes it (:data:`OOM_SOURCE`)::

        "CUDA out of memory. Tried to allocate ", format_size(alloc_size),
        ". GPU ", device, " has a total capacity of ", format_size(device_total),
        " of which ", format_size(device_free), " is free. ", proc_info, allowed_info,
        "Of the allocated memory ", format_size(allocated_bytes + allocated_in_private_pools),
        " is allocated by PyTorch, ", private_pool_msg, "and ",
        format_size(reserved_bytes - allocated_bytes - allocated_in_private_pools),
        " is reserved by PyTorch but unallocated.",
        " If reserved but unallocated memory is large try setting",
        " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid"
        " fragmentation.  See documentation for Memory Management "
        " (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"

    ``proc_info`` comes from NVML (``reportProcessMemoryInfo``): one sentence per process using
    the GPU, "Including non-PyTorch memory, this process has X memory in use. " for this one
    (``process_in_use``) and "Process PID has X memory in use. " for the others; it is empty
    where NVML is not available (``process_in_use=None`` and no ``other_processes``). This
    process is written first here; NVML's own order may differ. ``allowed`` is the cap set by
    ``torch.cuda.set_per_process_memory_fraction`` ("X allowed; "); ``private_pools`` the
    bytes cached in CUDA-graph pools. ``reproduction=True`` appends a line saying the message
    was rebuilt by memlab, not raised by a GPU.
    """
    proc_info = ""
    if process_in_use is not None:
        proc_info += (f"Including non-PyTorch memory, this process has "
                      f"{format_cuda_size(process_in_use)} memory in use. ")
    for pid, used in (other_processes or {}).items():
        proc_info += f"Process {int(pid)} has {format_cuda_size(used)} memory in use. "
    allowed_info = f"{format_cuda_size(allowed)} allowed; " if allowed is not None else ""
    private_pool_msg = (f"with {format_cuda_size(private_pools)} allocated in private pools "
                        "(e.g., CUDA Graphs), ") if private_pools > 0 else ""
    text = (f"CUDA out of memory. Tried to allocate {format_cuda_size(tried_to_allocate)}. "
            f"GPU {int(device_index)} has a total capacity of {format_cuda_size(total_capacity)}"
            f" of which {format_cuda_size(free)} is free. {proc_info}{allowed_info}"
            f"Of the allocated memory {format_cuda_size(allocated_by_pytorch + private_pools)}"
            f" is allocated by PyTorch, {private_pool_msg}and "
            f"{format_cuda_size(reserved_unallocated)} is reserved by PyTorch but unallocated."
            " If reserved but unallocated memory is large try setting"
            " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid"
            " fragmentation.  See documentation for Memory Management "
            " (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    return text + (_REPRODUCTION_NOTE if reproduction else "")


def reproduced_oom_error(*args: Any, **kwargs: Any) -> torch.OutOfMemoryError:
    """``torch.OutOfMemoryError`` with :func:`format_oom_message`'s text, labelled as a
    reproduction (for the CPU course: ``raise ml.debugging.reproduced_oom_error(...)``)."""
    kwargs["reproduction"] = True
    return torch.OutOfMemoryError(format_oom_message(*args, **kwargs))


@dataclass(frozen=True)
class OomReport:
    """The numbers of one out-of-memory message, in bytes (exact to the printed decimals).

    ``process_in_use`` is None when the message has no NVML sentence for this process;
    ``other_processes`` maps the PIDs NVML named to their bytes; ``others_bytes`` is the memory
    this process does not hold (see :func:`diagnose`); ``legacy`` marks the format of
    torch < 2.1 ("(GPU 0; X total capacity; X already allocated; ...)").
    """

    tried_to_allocate: int
    total_capacity: int
    free: int
    process_in_use: int | None
    allocated_by_pytorch: int
    reserved_unallocated: int
    device_index: int = 0
    other_processes: dict[int, int] = field(default_factory=dict)
    allowed: int | None = None
    private_pools: int = 0
    legacy: bool = False
    diagnosis: str = ""

    @property
    def reserved_by_pytorch(self) -> int:
        return self.allocated_by_pytorch + self.reserved_unallocated

    @property
    def others_bytes(self) -> int:
        return _others_bytes(self)


_SIZE = r"(\d+(?:\.\d+)?\s(?:bytes|KiB|MiB|GiB))"
_HEAD = re.compile(rf"Tried to allocate {_SIZE}\. GPU (\d+) has a total capacity of {_SIZE} "
                   rf"of which {_SIZE} is free\.")
_SELF = re.compile(rf"Including non-PyTorch memory, this process has {_SIZE} memory in use\.")
_OTHER = re.compile(rf"Process (\d+) has {_SIZE} memory in use\.")
_ALLOWED = re.compile(rf"{_SIZE} allowed; ")
_TAIL = re.compile(rf"Of the allocated memory {_SIZE} is allocated by PyTorch, (?:with {_SIZE} "
                   rf"allocated in private pools \(e\.g\., CUDA Graphs\), )?and {_SIZE} is "
                   r"reserved by PyTorch but unallocated\.")
_LEGACY = re.compile(rf"Tried to allocate {_SIZE} \(GPU (\d+); {_SIZE} total capacity; {_SIZE} "
                     rf"already allocated; {_SIZE} free; (?:{_SIZE} allowed; )?{_SIZE} reserved "
                     r"in total by PyTorch\)")


def read_oom_message(message: str | BaseException) -> OomReport:
    """Read a CUDA out-of-memory message (or the error itself) into an :class:`OomReport`.

    Reads the format of torch >= 2.1 (:func:`format_oom_message`) and the older one; raises
    ``ValueError`` for text that is neither.
    """
    text = " ".join(str(message).split())
    legacy = _LEGACY.search(text)
    if legacy is not None:
        tried, dev, total, allocated, free, allowed, reserved = legacy.groups()
        report = OomReport(
            tried_to_allocate=parse_cuda_size(tried), total_capacity=parse_cuda_size(total),
            free=parse_cuda_size(free), process_in_use=None,
            allocated_by_pytorch=parse_cuda_size(allocated),
            reserved_unallocated=parse_cuda_size(reserved) - parse_cuda_size(allocated),
            device_index=int(dev), allowed=parse_cuda_size(allowed) if allowed else None,
            legacy=True)
        return _with_diagnosis(report)
    head, tail = _HEAD.search(text), _TAIL.search(text)
    if head is None or tail is None:
        raise ValueError("not a CUDA out-of-memory message (no 'Tried to allocate ... GPU N has "
                         "a total capacity of ...' and 'Of the allocated memory ...' parts)")
    tried, dev, total, free = head.groups()
    allocated, private, unallocated = tail.groups()
    between = text[head.end():tail.start()]
    self_used = _SELF.search(between)
    allowed = _ALLOWED.search(between)
    private_bytes = parse_cuda_size(private) if private else 0
    report = OomReport(
        tried_to_allocate=parse_cuda_size(tried), total_capacity=parse_cuda_size(total),
        free=parse_cuda_size(free),
        process_in_use=parse_cuda_size(self_used.group(1)) if self_used else None,
        allocated_by_pytorch=parse_cuda_size(allocated) - private_bytes,
        reserved_unallocated=parse_cuda_size(unallocated), device_index=int(dev),
        other_processes={int(pid): parse_cuda_size(s) for pid, s in _OTHER.findall(between)},
        allowed=parse_cuda_size(allowed.group(1)) if allowed else None,
        private_pools=private_bytes)
    return _with_diagnosis(report)


def _with_diagnosis(report: OomReport) -> OomReport:
    return OomReport(**{**report.__dict__, "diagnosis": diagnose(report)})


def _others_bytes(r: OomReport) -> int:
    """Bytes of the card held outside this process (its CUDA context counts as this process's
    where NVML says how much it uses)."""
    others = dict(r.other_processes)
    if r.process_in_use is None and others:
        # Inside a container NVML names this process by its host PID ("Process 2752205 has
        # 91.82 GiB memory in use." with no "this process" sentence): a listed process using at
        # least what PyTorch reserved here is taken to be this one.
        pid, used = max(others.items(), key=lambda kv: kv[1])
        if used >= r.reserved_by_pytorch + r.private_pools:
            others.pop(pid)
            return sum(others.values())
    if others:
        return sum(others.values())
    if r.process_in_use is not None:
        return max(0, r.total_capacity - r.free - r.process_in_use)
    # No NVML sentence: what PyTorch does not hold includes this process's own CUDA context and
    # libraries (hundreds of MiB), which is not another process's memory.
    unaccounted = r.total_capacity - r.free - r.reserved_by_pytorch - r.private_pools
    return max(0, unaccounted - CUDA_CONTEXT_ALLOWANCE)


def diagnose(report: OomReport) -> str:
    """One of :data:`DIAGNOSES`. The rule, in order:

    1. ``tried_to_allocate`` above the card (``total_capacity``, or the ``allowed`` cap):
       **too big for the card**; nothing anyone frees can make one such block fit.
    2. Otherwise compare two amounts with the request: ``reserved_unallocated``, bytes the
       allocator holds but cannot hand out (the message comes after it has returned every
       wholly free cached segment to the driver, so what remains sits in segments that are
       partly in use: **fragmentation**, which ``expandable_segments:True`` addresses), and
       ``others_bytes``, bytes of the card held outside this process (NVML's other processes;
       with NVML's sentence for this process only, capacity - free - its use; without NVML,
       capacity - free - what PyTorch reserved - :data:`CUDA_CONTEXT_ALLOWANCE`): **another
       process holds memory**. If the larger of the two is at least the request, it is the diagnosis
       (fragmentation on a tie): freeing it would have made room.
    3. Otherwise this process's own tensors fill the card: **too big for the card** (the job
       as configured does not fit: fewer activations, smaller batch, sharding).
    """
    cap = report.allowed if report.allowed is not None else report.total_capacity
    if report.tried_to_allocate > cap:
        return TOO_BIG
    frag, others = report.reserved_unallocated, _others_bytes(report)
    if max(frag, others) >= report.tried_to_allocate:
        return FRAGMENTATION if frag >= others else OTHER_PROCESS
    return TOO_BIG


# ======================================================================= 2. the LM head
def logits_bytes(tokens: int, vocab: int, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of one (tokens x vocab) logits tensor: ``tokens * vocab * element size``."""
    return int(tokens) * int(vocab) * torch.empty((), dtype=dtype).element_size()


def lm_head_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                          ignore_index: int = -100) -> torch.Tensor:
    """The plain version: all the fp32 logits at once, then ``F.cross_entropy`` (mean over
    the tokens whose target is not ``ignore_index``)."""
    logits = (hidden.reshape(-1, hidden.shape[-1]) @ weight.t()).float()
    return F.cross_entropy(logits, targets.reshape(-1), ignore_index=ignore_index)


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Forward: per chunk, fp32 logits -> log-sum-exp and the target's logit; only one
    log-sum-exp per token is kept. Backward: per chunk, the logits again, then
    ``softmax - one_hot(target)`` scaled by ``grad / n_valid`` gives the chunk's gradient of
    the logits, from which those of ``hidden`` (``g @ W``) and ``weight`` (``g.T @ h``)."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk_size, ignore_index):
        n = hidden.shape[0]
        valid = targets != ignore_index
        n_valid = valid.sum()
        lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, n, chunk_size):
            stop = min(n, start + chunk_size)
            logits = (hidden[start:stop] @ weight.t()).float()
            chunk_lse = torch.logsumexp(logits, dim=-1)
            lse[start:stop] = chunk_lse
            v = valid[start:stop]
            target_logit = logits.gather(1, targets[start:stop].masked_fill(~v, 0)[:, None])
            total += ((chunk_lse - target_logit.squeeze(1)) * v).sum()
            del logits
        ctx.save_for_backward(hidden, weight, targets, lse, n_valid)
        ctx.chunk_size, ctx.ignore_index = chunk_size, ignore_index
        return total / n_valid

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss):
        hidden, weight, targets, lse, n_valid = ctx.saved_tensors
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        n = hidden.shape[0]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) \
            if need_w else None
        scale = grad_loss.float() / n_valid
        for start in range(0, n, ctx.chunk_size):
            stop = min(n, start + ctx.chunk_size)
            h = hidden[start:stop]
            g = (h @ weight.t()).float()
            g.sub_(lse[start:stop, None]).exp_()                    # softmax, in place
            t = targets[start:stop]
            v = t != ctx.ignore_index
            rows = torch.arange(stop - start, device=g.device)
            g[rows[v], t[v]] -= 1.0                                 # - one_hot(target)
            g.mul_((v.float() * scale)[:, None])
            if need_h:
                grad_h[start:stop] = (g @ weight.float()).to(hidden.dtype)
            if need_w:
                grad_w.addmm_(g.t(), h.float())
            del g
        if need_w:
            grad_w = grad_w.to(weight.dtype)
        return grad_h, grad_w, None, None, None


def chunked_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                          chunk_size: int, ignore_index: int = -100) -> torch.Tensor:
    """``F.cross_entropy(hidden @ weight.T, targets, ignore_index=...)`` (mean over the tokens
    not ignored), computed ``chunk_size`` tokens at a time so the (tokens x vocab) fp32 logits
    never exist at once: at most one chunk's logits (and, in backward, their gradient) are
    alive. Same loss and gradients for ``hidden`` and ``weight`` as
    :func:`lm_head_cross_entropy`; the price is the logits' matmul computed twice (forward and
    backward), as in activation checkpointing.

    ``hidden``: (..., H); ``weight``: (vocab, H), the LM head (or the tied embedding);
    ``targets``: (...) integer class ids. Not twice differentiable.
    """
    if type(chunk_size) is not int or chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"hidden (..., H) and weight (vocab, H) disagree: {tuple(hidden.shape)}"
                         f" and {tuple(weight.shape)}")
    h2 = hidden.reshape(-1, hidden.shape[-1])
    t1 = targets.reshape(-1)
    if t1.shape[0] != h2.shape[0]:
        raise ValueError(f"{t1.shape[0]} targets for {h2.shape[0]} tokens")
    return _ChunkedLinearCrossEntropy.apply(h2, weight, t1, chunk_size, int(ignore_index))


# ================================================================= 3. leaks over steps
LEAKS = {
    "total_loss += loss": (
        "An evaluation loop without torch.no_grad() sums the loss tensors: each step's whole "
        "graph, with every activation it saved, stays reachable from total_loss. Fixed: "
        "total_loss += loss.item() under torch.no_grad()."),
    "outputs kept in a list": (
        "A training loop keeps every step's output tensor for later (predictions, plots): "
        "the outputs' bytes pile up. detach() does not help here (backward already freed the "
        "graph; the output itself is what is kept). Fixed: keep Python numbers (.tolist())."),
    "retain_graph=True": (
        "loss.backward(retain_graph=True) keeps the graph's saved activations after backward, "
        "and the loss kept for the log keeps the graph alive: every step's activations stay. "
        "Fixed: loss.backward() and history.append(loss.item())."),
    "a hook holding a tensor": (
        "A forward hook appends the layer's output to a list its closure holds: one "
        "activation per step is never freed. Fixed: the hook keeps only the latest, detached."),
}

# The tiny model of the demos: Linear(32, 64) -> ReLU -> Linear(64, 16), batches of 8, fp32.
_IN, _HIDDEN, _OUT, _BATCH = 32, 64, 16, 8


def live_bytes_over_steps(step_fn: Callable[[], Any], n: int, *, track: Iterable[Any] = (),
                          device: str | torch.device | None = None, warmup: int = 0,
                          collect: bool = False) -> list[int]:
    """Run ``step_fn()`` ``warmup + n`` times inside a :class:`memlab.MemoryTracker` and return
    the live bytes after each of the last ``n`` calls (exact storage bytes on the CPU,
    ``torch.cuda.memory_allocated`` on CUDA).

    ``track``: what exists before the first step (model, optimizer), counted on the CPU.
    ``warmup``: steps not reported (an optimizer allocates its state in the first step).
    ``collect``: ``gc.collect()`` before each reading, so only memory that is still referenced
    counts (a reference cycle the collector frees later is not a leak); a full collection
    costs a few hundred milliseconds with torch loaded, so it is off unless asked for. Flat live
    bytes (:func:`growth_per_step` all 0) is what a leak-free loop shows.
    """
    if type(n) is not int or n <= 0:
        raise ValueError(f"n must be a positive int, got {n!r}")
    tracker = MemoryTracker(device, timeline=False)
    tracker.track(*tuple(track))
    out: list[int] = []
    with tracker:
        for i in range(int(warmup) + n):
            step_fn()
            if collect:
                gc.collect()
            if i >= warmup:
                out.append(tracker.current_bytes)
    return out


def growth_per_step(live_bytes: list[int]) -> list[int]:
    """Differences between consecutive readings: ``[b1 - b0, b2 - b1, ...]``."""
    return [b - a for a, b in zip(live_bytes, live_bytes[1:])]


def autograd_nodes(tensor: torch.Tensor | None) -> int:
    """Number of autograd nodes reachable from ``tensor.grad_fn`` (0 for none): the graph a
    tensor keeps alive, whatever tensors it still holds."""
    fn = getattr(tensor, "grad_fn", None)
    seen, todo = set(), [fn] if fn is not None else []
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        todo.extend(nxt for nxt, _ in node.next_functions)
    return len(seen)


def _tiny(device: torch.device, seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(_IN, _HIDDEN), nn.ReLU(), nn.Linear(_HIDDEN, _OUT)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator(device=device).manual_seed(seed)

    def batch():
        x = torch.randn(_BATCH, _IN, generator=gen, device=device)
        y = torch.randn(_BATCH, _OUT, generator=gen, device=device)
        return x, y

    return model, optimizer, batch


def leak_demo(pattern: str, n_steps: int = 4, *, fixed: bool = False,
              device: str | torch.device | None = None) -> list[int]:
    """Run ``n_steps`` of the tiny model with leak ``pattern`` (a key of :data:`LEAKS`), or its
    fix, and return the live bytes after each step (:func:`live_bytes_over_steps`).

    On the CPU, in fp32, a leak adds per step: "total_loss += loss" 4096 bytes (what the graph
    saved: the batch 1024, the ReLU output 2048, the output 512 and the target 512);
    "outputs kept in a list" 512 (8 x 16 x 4); "retain_graph=True" 4608 (the same 4096 and the
    kept loss, whose storage is 512 bytes: the CPU's ``mse_loss`` returns its 0-dim result in
    the 8 x 16 buffer it reduced); "a hook holding a tensor" 2048 (8 x 64 x 4). On CUDA each
    storage is rounded up to 512 bytes. The fixed versions stay flat.
    """
    if pattern not in LEAKS:
        raise ValueError(f"unknown leak pattern {pattern!r}; one of {sorted(LEAKS)}")
    dev = get_device(device)
    model, optimizer, batch = _tiny(dev)
    kept: list[Any] = []
    state: dict[str, Any] = {"total": 0.0}

    def train_step(keep: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
                   retain: bool = False) -> None:
        optimizer.zero_grad(set_to_none=True)
        x, y = batch()
        out = model(x)
        loss = F.mse_loss(out, y)
        loss.backward(retain_graph=retain)
        optimizer.step()
        if keep is not None:
            keep(out, loss)

    if pattern == "total_loss += loss":
        def step() -> None:  # evaluation: no backward, no optimizer
            x, y = batch()
            if fixed:
                with torch.no_grad():
                    state["total"] += F.mse_loss(model(x), y).item()
            else:
                loss = F.mse_loss(model(x), y)
                state["total"] += loss
    elif pattern == "outputs kept in a list":
        def step() -> None:
            train_step(lambda out, loss: kept.append(out.detach().tolist() if fixed else out))
    elif pattern == "retain_graph=True":
        def step() -> None:
            train_step(lambda out, loss: kept.append(loss.item() if fixed else loss),
                       retain=not fixed)
    else:  # "a hook holding a tensor"
        latest: dict[str, torch.Tensor] = {}

        def hook(module: nn.Module, inputs: Any, output: torch.Tensor) -> None:
            if fixed:
                latest["act"] = output.detach()
            else:
                kept.append(output)

        model[0].register_forward_hook(hook)

        def step() -> None:
            train_step()

    return live_bytes_over_steps(step, n_steps, track=(model, optimizer), device=dev)


def total_loss_after_backward(n_steps: int = 4, *, device: str | torch.device | None = None
                              ) -> tuple[list[int], list[int]]:
    """The FAQ's own loop: ``loss.backward(); optimizer.step(); total_loss += loss``.

    Returns ``(live bytes after each step, autograd nodes reachable from total_loss)``: the live
    tensor bytes stay flat (backward freed each step's saved tensors and the in-place ``+=``
    reuses total_loss's storage) while the graph grows by a fixed number of nodes per step. The
    leak is in host memory (autograd's nodes), not in tensor storage; ``float(loss)`` or
    ``loss.item()`` fixes both.
    """
    dev = get_device(device)
    model, optimizer, batch = _tiny(dev)
    state: dict[str, Any] = {"total": 0}
    nodes: list[int] = []

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        x, y = batch()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        state["total"] += loss
        nodes.append(autograd_nodes(state["total"]))

    live = live_bytes_over_steps(step, n_steps, track=(model, optimizer), device=dev)
    return live, nodes
