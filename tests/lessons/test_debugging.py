"""memlab.lessons.debugging: the OOM message, the chunked LM-head loss, leaks over steps.

The OOM messages below are written in the format of c10/cuda/CUDACachingAllocator.cpp; the
numbers of the first four are those of messages users posted (quoted in public issues).
CUDA tests are gpu-marked.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import memlab as ml
from memlab.lessons import debugging as dbg

GiB, MiB = 2**30, 2**20
TAIL = (" If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def _oom(body: str) -> str:
    return "CUDA out of memory. " + body + TAIL


# A request larger than the whole card.
HUGE = _oom("Tried to allocate 130206.04 GiB. GPU 0 has a total capacity of 23.56 GiB of which "
            "16.57 GiB is free. Including non-PyTorch memory, this process has 6.97 GiB memory "
            "in use. Of the allocated memory 5.45 GiB is allocated by PyTorch, and 1.17 GiB is "
            "reserved by PyTorch but unallocated.")
# This process's tensors fill the card.
FULL = _oom("Tried to allocate 19.68 GiB. GPU 0 has a total capacity of 23.68 GiB of which "
            "11.88 GiB is free. Including non-PyTorch memory, this process has 11.79 GiB memory "
            "in use. Of the allocated memory 11.44 GiB is allocated by PyTorch, and 43.59 MiB "
            "is reserved by PyTorch but unallocated.")
# In a container: NVML names this very process by its host PID.
CONTAINER = _oom("Tried to allocate 1.25 GiB. GPU 1 has a total capacity of 93.02 GiB of which "
                 "1.18 GiB is free. Process 2752205 has 91.82 GiB memory in use. Of the "
                 "allocated memory 90.63 GiB is allocated by PyTorch, and 120.54 MiB is "
                 "reserved by PyTorch but unallocated.")
NO_NVML = _oom("Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 8.00 GiB of which 0 "
               "bytes is free. Of the allocated memory 14.51 GiB is allocated by PyTorch, and "
               "15.90 MiB is reserved by PyTorch but unallocated.")
LEGACY = ("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; "
          "14.56 GiB already allocated; 3.12 MiB free; 14.77 GiB reserved in total by PyTorch) "
          "If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
          "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ===================================================================== the OOM message
def test_format_size_is_the_allocators():
    assert dbg.format_cuda_size(0) == "0 bytes"
    assert dbg.format_cuda_size(1024) == "1024 bytes"
    assert dbg.format_cuda_size(1025) == "1.00 KiB"
    assert dbg.format_cuda_size(MiB) == "1024.00 KiB"
    assert dbg.format_cuda_size(MiB + 1) == "1.00 MiB"
    assert dbg.format_cuda_size(GiB) == "1024.00 MiB"
    assert dbg.format_cuda_size(int(1.5 * GiB)) == "1.50 GiB"
    assert dbg.parse_cuda_size("20.00 MiB") == 20 * MiB
    assert dbg.parse_cuda_size("0 bytes") == 0
    with pytest.raises(ValueError):
        dbg.parse_cuda_size("20 MB")


def test_tried_to_allocate_is_the_segment_not_the_tensor():
    assert dbg.cuda_allocation_size(4) == 2 * MiB
    assert dbg.cuda_allocation_size(MiB) == 2 * MiB
    assert dbg.cuda_allocation_size(MiB + 1) == 20 * MiB
    assert dbg.cuda_allocation_size(10 * MiB - 512) == 20 * MiB
    assert dbg.cuda_allocation_size(10 * MiB - 1) == 10 * MiB  # rounded to 512 first
    assert dbg.cuda_allocation_size(10 * MiB) == 10 * MiB
    assert dbg.cuda_allocation_size(10 * MiB + 1) == 12 * MiB


@pytest.mark.parametrize("message", [HUGE, FULL, CONTAINER, NO_NVML])
def test_read_then_format_gives_the_same_message(message):
    r = dbg.read_oom_message(message)
    again = dbg.format_oom_message(
        r.tried_to_allocate, r.total_capacity, r.free,
        allocated_by_pytorch=r.allocated_by_pytorch,
        reserved_unallocated=r.reserved_unallocated, process_in_use=r.process_in_use,
        other_processes=r.other_processes, allowed=r.allowed, private_pools=r.private_pools,
        device_index=r.device_index)
    assert again == message


def test_the_numbers_are_read_in_bytes():
    r = dbg.read_oom_message(FULL)
    assert r.tried_to_allocate == round(19.68 * GiB)
    assert r.total_capacity == round(23.68 * GiB) and r.free == round(11.88 * GiB)
    assert r.process_in_use == round(11.79 * GiB)
    assert r.allocated_by_pytorch == round(11.44 * GiB)
    assert r.reserved_unallocated == round(43.59 * MiB)
    assert r.reserved_by_pytorch == r.allocated_by_pytorch + r.reserved_unallocated
    c = dbg.read_oom_message(CONTAINER)
    assert c.device_index == 1 and c.process_in_use is None
    assert c.other_processes == {2752205: round(91.82 * GiB)}
    assert dbg.read_oom_message(NO_NVML).free == 0


@pytest.mark.parametrize("message, diagnosis", [
    (HUGE, dbg.TOO_BIG), (FULL, dbg.TOO_BIG), (CONTAINER, dbg.TOO_BIG), (NO_NVML, dbg.TOO_BIG),
    (LEGACY, dbg.FRAGMENTATION),  # 215 MiB held in split segments, a 20 MiB segment refused
])
def test_diagnosis_of_users_messages(message, diagnosis):
    assert dbg.read_oom_message(message).diagnosis == diagnosis


def test_diagnosis_fragmentation_and_another_process():
    frag = dbg.format_oom_message(2 * GiB, 80 * GiB, 1 * GiB, allocated_by_pytorch=70 * GiB,
                                  reserved_unallocated=8 * GiB, process_in_use=79 * GiB)
    assert dbg.read_oom_message(frag).diagnosis == dbg.FRAGMENTATION
    other = dbg.format_oom_message(2 * GiB, 80 * GiB, 1 * GiB, allocated_by_pytorch=40 * GiB,
                                   reserved_unallocated=100 * MiB, process_in_use=41 * GiB,
                                   other_processes={4242: 38 * GiB})
    r = dbg.read_oom_message(other)
    assert r.diagnosis == dbg.OTHER_PROCESS and r.others_bytes == 38 * GiB
    # no NVML sentence at all: what PyTorch does not hold is someone else's
    silent = dbg.format_oom_message(2 * GiB, 80 * GiB, 1 * GiB, allocated_by_pytorch=20 * GiB,
                                    reserved_unallocated=0)
    assert dbg.read_oom_message(silent).diagnosis == dbg.OTHER_PROCESS
    # a per-process cap (set_per_process_memory_fraction): the cap is the card
    capped = dbg.format_oom_message(3 * GiB, 80 * GiB, 70 * GiB, allocated_by_pytorch=1 * GiB,
                                    reserved_unallocated=0, process_in_use=2 * GiB,
                                    allowed=2 * GiB)
    r = dbg.read_oom_message(capped)
    assert r.allowed == 2 * GiB and r.diagnosis == dbg.TOO_BIG
    assert set(dbg.DIAGNOSES) == {dbg.TOO_BIG, dbg.FRAGMENTATION, dbg.OTHER_PROCESS}


def test_private_pools_and_legacy_format_are_read():
    msg = dbg.format_oom_message(20 * MiB, 16 * GiB, 0, allocated_by_pytorch=10 * GiB,
                                 reserved_unallocated=5 * GiB, process_in_use=int(15.9 * GiB),
                                 private_pools=GiB)
    # exactly 1 GiB is still printed in MiB: format_size's thresholds are "<="
    assert "with 1024.00 MiB allocated in private pools (e.g., CUDA Graphs), and" in msg
    r = dbg.read_oom_message(msg)
    assert r.private_pools == GiB and r.allocated_by_pytorch == 10 * GiB
    old = dbg.read_oom_message(LEGACY)
    assert old.legacy and old.allocated_by_pytorch == round(14.56 * GiB)
    assert old.reserved_unallocated == round(14.77 * GiB) - round(14.56 * GiB)


def test_the_cpu_reproduction_is_labelled_and_readable():
    err = dbg.reproduced_oom_error(20 * MiB, 8 * GiB, 0, allocated_by_pytorch=7 * GiB,
                                   reserved_unallocated=10 * MiB, process_in_use=8 * GiB)
    assert isinstance(err, torch.OutOfMemoryError)
    text = str(err)
    assert text.startswith("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
                           "capacity of 8.00 GiB of which 0 bytes is free.")
    assert "reproduction" in text.splitlines()[-1] and "no GPU" in text
    assert dbg.read_oom_message(err).diagnosis == dbg.TOO_BIG
    with pytest.raises(ValueError, match="not a CUDA out-of-memory message"):
        dbg.read_oom_message("RuntimeError: shapes do not match")


@pytest.mark.gpu
def test_a_real_cuda_oom_reads_back(tmp_path):
    idx = torch.cuda.current_device()
    total = torch.cuda.get_device_properties(idx).total_memory
    torch.cuda.set_per_process_memory_fraction(0.05, idx)
    try:
        with pytest.raises(torch.OutOfMemoryError) as info:
            torch.empty(int(total * 0.1), dtype=torch.uint8, device="cuda")
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, idx)
    r = dbg.read_oom_message(info.value)
    assert r.total_capacity == pytest.approx(total, rel=0.01)
    assert r.tried_to_allocate == pytest.approx(dbg.cuda_allocation_size(int(total * 0.1)),
                                                rel=0.01)
    assert r.allowed is not None and r.diagnosis == dbg.TOO_BIG


# =================================================================== the chunked LM head
def _lm_head(tokens=(4, 75), hidden=16, vocab=2048, seed=0):
    torch.manual_seed(seed)
    h = torch.randn(*tokens, hidden, requires_grad=True)
    w = (torch.randn(vocab, hidden) * 0.2).requires_grad_()
    t = torch.randint(0, vocab, tokens)
    t.view(-1)[::7] = -100
    return h, w, t


@pytest.mark.parametrize("chunk_size", [1, 64, 77, 300, 1000])
def test_chunked_cross_entropy_equals_the_plain_one(chunk_size):
    h, w, t = _lm_head()
    plain = dbg.lm_head_cross_entropy(h, w, t)
    gh, gw = torch.autograd.grad(plain, (h, w))
    chunked = dbg.chunked_cross_entropy(h, w, t, chunk_size)
    ch, cw = torch.autograd.grad(chunked, (h, w))
    assert abs(chunked.item() - plain.item()) < 1e-5
    assert (ch - gh).abs().max().item() < 1e-5 and (cw - gw).abs().max().item() < 1e-5
    ref = nn.functional.cross_entropy((h @ w.t()).reshape(-1, w.shape[0]), t.reshape(-1))
    assert abs(ref.item() - plain.item()) < 1e-6  # ignore_index=-100 is the default


def test_chunked_cross_entropy_handles_one_input_without_grad():
    h, w, t = _lm_head()
    w.requires_grad_(False)
    (gh,) = torch.autograd.grad(dbg.lm_head_cross_entropy(h, w, t), (h,))
    (ch,) = torch.autograd.grad(dbg.chunked_cross_entropy(h, w, t, 50), (h,))
    assert (ch - gh).abs().max().item() < 1e-5


def test_chunked_peak_is_lower_by_at_least_the_logits():
    tokens, hidden, vocab = 512, 16, 2048  # logits 4 MiB, the head's weight 128 KiB
    h, w, t = _lm_head(tokens=(tokens,), hidden=hidden, vocab=vocab)

    def step(loss_fn):
        def run():
            loss_fn().backward()
        return run

    plain = ml.measure_peak(step(lambda: dbg.lm_head_cross_entropy(h, w, t)), device="cpu",
                            track=(h, w, t))
    h.grad = w.grad = None
    chunked = ml.measure_peak(step(lambda: dbg.chunked_cross_entropy(h, w, t, 64)),
                              device="cpu", track=(h, w, t))
    logits = dbg.logits_bytes(tokens, vocab)
    assert logits == tokens * vocab * 4
    assert plain.peak_increase - chunked.peak_increase >= logits
    assert chunked.peak_increase < logits  # the full logits never existed


def test_chunked_cross_entropy_rejects_bad_arguments():
    h, w, t = _lm_head()
    with pytest.raises(ValueError, match="chunk_size"):
        dbg.chunked_cross_entropy(h, w, t, 0)
    with pytest.raises(ValueError, match="disagree"):
        dbg.chunked_cross_entropy(h, w.t(), t, 8)
    with pytest.raises(ValueError, match="targets"):
        dbg.chunked_cross_entropy(h, w, t[:, :10], 8)


# ====================================================================== leaks over steps
LEAK_BYTES = {  # per step, CPU, fp32 (leak_demo's docstring says where each comes from)
    "total_loss += loss": 1024 + 2048 + 512 + 512,
    "outputs kept in a list": 8 * 16 * 4,
    "retain_graph=True": 1024 + 2048 + 512 + 512 + 512,
    "a hook holding a tensor": 8 * 64 * 4,
}


@pytest.mark.parametrize("pattern", sorted(dbg.LEAKS))
def test_each_leak_grows_by_a_measured_amount_per_step(pattern):
    live = dbg.leak_demo(pattern, 5, device="cpu")
    assert len(live) == 5
    assert dbg.growth_per_step(live) == [LEAK_BYTES[pattern]] * 4


@pytest.mark.parametrize("pattern", sorted(dbg.LEAKS))
def test_each_fix_stays_flat(pattern):
    live = dbg.leak_demo(pattern, 5, fixed=True, device="cpu")
    assert dbg.growth_per_step(live) == [0] * 4


def test_the_faqs_loop_leaks_graph_nodes_not_tensor_bytes():
    live, nodes = dbg.total_loss_after_backward(5, device="cpu")
    assert dbg.growth_per_step(live) == [0] * 4
    per_step = dbg.growth_per_step(nodes)
    assert per_step[0] > 0 and per_step == [per_step[0]] * 4
    assert dbg.autograd_nodes(None) == 0 and dbg.autograd_nodes(torch.ones(1)) == 0


def test_live_bytes_over_steps_for_a_graders_step_function():
    torch.manual_seed(0)
    model = nn.Linear(8, 8)
    opt = torch.optim.Adam(model.parameters())
    history = []

    def clean_step():
        opt.zero_grad(set_to_none=True)
        loss = model(torch.randn(4, 8)).square().mean()
        loss.backward()
        opt.step()
        history.append(loss.item())

    # Adam's state appears in the first step: that is not a leak
    first = dbg.live_bytes_over_steps(clean_step, 3, track=(model, opt), device="cpu")
    assert dbg.growth_per_step(first) == [0, 0]
    assert dbg.live_bytes_over_steps(clean_step, 3, track=(model, opt), device="cpu",
                                     warmup=1, collect=True)[0] == first[0]

    def leaking_step():
        clean_step()
        history.append(torch.zeros(25))  # 100 bytes a step

    assert dbg.growth_per_step(dbg.live_bytes_over_steps(leaking_step, 3, device="cpu")) \
        == [100, 100]
    with pytest.raises(ValueError):
        dbg.live_bytes_over_steps(clean_step, 0)
    with pytest.raises(ValueError, match="unknown leak pattern"):
        dbg.leak_demo("x = x", 2)


@pytest.mark.gpu
def test_leaks_on_cuda_grow_by_the_rounded_amount():
    for pattern in dbg.LEAKS:
        steps = dbg.growth_per_step(dbg.leak_demo(pattern, 4, device="cuda"))
        assert steps == [steps[0]] * 3 and steps[0] > 0 and steps[0] % 512 == 0
        assert dbg.growth_per_step(dbg.leak_demo(pattern, 4, fixed=True, device="cuda")) \
            == [0, 0, 0]
