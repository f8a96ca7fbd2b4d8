"""memlab.distributed (06_sharding): ranks launched on this machine, measured per rank.

Two launches of 2 gloo ranks on the CPU (~25 s on 2 cores) and one of 3 ranks, marked slow.
"""
from __future__ import annotations

import math

import sys

import pytest
import torch

from memlab.lessons import distributed as D


def _expected(shapes, strategy, n):
    """The bookkeeping rules the notebook teaches (fp32 Adam: 8 B/element + 4 B step per tensor;
    FSDP2: parameter storage padded to ceil(d0 / N) rows on every rank, Adam state unpadded)."""
    numels = [math.prod(s) for s in shapes]
    out = [dict(params=0, optimizer_state=0) for _ in range(n)]
    if strategy == "fsdp":
        for shape, numel in zip(shapes, numels):
            for r in range(n):
                rows = D._fsdp_rows(shape[0], n, r)
                out[r]["params"] += 4 * -(-shape[0] // n) * (numel // shape[0])
                out[r]["optimizer_state"] += 8 * rows * (numel // shape[0]) + 4
        return out
    owner = D._zero1_owner(shapes, n)
    for r in range(n):
        out[r]["params"] = 4 * sum(numels)
        out[r]["optimizer_state"] = sum(8 * k + 4 for i, k in enumerate(numels)
                                        if strategy == "ddp" or owner[i] == r)
    return out


def _reference(cfg):
    model = D.make_mlp(cfg["sizes"], cfg["seed"])
    batches = D.rank_batches(cfg["sizes"], cfg["batch_sizes"], cfg["seed"])
    for x, y in batches:
        (D.loss_fn(model(x), y) / len(batches)).backward()
    return [p.grad for p in model.parameters()]


@pytest.fixture(scope="module")
def two_ranks():
    cfgs = [dict(sizes=[9, 17, 5], batch_sizes=[2, 5], seed=3), dict(sizes=[32, 64, 8], batch_sizes=[3, 3], seed=0)]
    return cfgs, D.launch(2, cfgs, timeline=True, timeout=240)


def test_per_rank_bytes_follow_the_rules(two_ranks):
    cfgs, runs = two_ranks
    for cfg, per_rank in zip(cfgs, runs):
        shapes = D.param_shapes(cfg["sizes"])
        for s in D.STRATEGIES:
            want = _expected(shapes, s, 2)
            for r in range(2):
                got = {k: per_rank[r][s][k] for k in ("params", "optimizer_state")}
                assert got == want[r], f"{cfg['sizes']} {s} rank {r}: {got} != {want[r]}"
                # grads: full for DDP and ZeRO-1 (stage 1 does not shard them), sharded for
                # FSDP and padded like the parameters (one reduce-scatter output per module)
                assert per_rank[r][s]["grads"] == (per_rank[r][s]["params"])


def test_fsdp_pads_parameters_not_adam_state(two_ranks):
    """[9, 17, 5] on 2 ranks: Linear(9, 17) and Linear(17, 5) have odd dim 0, so rank 1 owns
    fewer rows (8 of 17, 2 of 5) than it stores (9, 3): the padding is in params and grads only."""
    cfgs, runs = two_ranks
    shapes = D.param_shapes(cfgs[0]["sizes"])
    owned = [sum(D._fsdp_rows(s[0], 2, r) * math.prod(s[1:]) for s in shapes) for r in range(2)]
    padded = sum(-(-s[0] // 2) * math.prod(s[1:]) for s in shapes)
    assert owned == [9 * 9 + 9 + 3 * 17 + 3, 8 * 9 + 8 + 2 * 17 + 2]
    for r in range(2):
        got = runs[0][r]["fsdp"]
        assert got["params"] == got["grads"] == 4 * padded, (r, got["params"], got["grads"])
        assert got["optimizer_state"] == 8 * owned[r] + 4 * len(shapes), r


def test_local_bytes_counts_whole_storages_once():
    base = torch.zeros(6, 4)
    assert D.local_bytes([base[:2], base[2:5], None, "not a tensor"]) == 96
    assert D.local_bytes([torch.zeros(3), torch.zeros(0)]) == 12


def test_phase_time_lines_up_every_strategy(two_ranks):
    """The 06 timeline plot: every strategy's curve spans the same phases at the same x, though
    their op counts differ (FSDP2 runs more ops; ZeRO-1's optimizer phase is shorter)."""
    _, runs = two_ranks
    n_ops = {}
    for s in D.STRATEGIES:
        timeline = runs[1][0][s]["timeline"]
        x, live = D.phase_time(timeline)
        assert len(x) == len(live) == len(timeline) and live == [b for _, b, _ in timeline]
        assert x[0] == 0.0 and x[-1] == len(D.PHASES) and x == sorted(x), s
        for i, phase in enumerate(D.PHASES):
            inside = [xi for (p, _, _), xi in zip(timeline, x) if p == phase]
            assert inside and inside[-1] == i + 1, (s, phase)
            assert all(i < xi <= i + 1 for xi in inside), (s, phase)
            n_ops[s, phase] = len(inside)
    assert n_ops["zero1", "optimizer"] != n_ops["fsdp", "optimizer"], "op counts differ: the axis"


def test_phase_time_rules():
    x, live = D.phase_time([("start", 5, "track"), ("forward", 6, "a"), ("forward", 7, "b"),
                            ("backward", 8, "c"), ("optimizer", 9, "d")])
    assert x == [0.0, 0.5, 1.0, 2.0, 3.0] and live == [5, 6, 7, 8, 9]
    with pytest.raises(ValueError, match="after"):
        D.phase_time([("backward", 1, "a"), ("forward", 2, "b")])
    with pytest.raises(ValueError, match="unknown phase"):
        D.phase_time([("forward", 1, "a"), ("eval", 2, "b")])


def test_sharded_gradients_equal_one_process(two_ranks):
    cfgs, runs = two_ranks
    for cfg, per_rank in zip(cfgs, runs):
        ref = _reference(cfg)
        for s in D.STRATEGIES:
            for r in range(2):
                for a, b in zip(ref, per_rank[r][s]["full_grads"]):
                    assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), f"{cfg} {s} rank {r}"


def test_communication_volume(two_ranks):
    cfgs, runs = two_ranks
    for cfg, per_rank in zip(cfgs, runs):
        psi = 4 * sum(math.prod(s) for s in D.param_shapes(cfg["sizes"]))
        comm = {s: per_rank[0][s]["comm"] for s in D.STRATEGIES}
        assert comm["ddp"] == {"all_reduce": psi}
        assert comm["zero1"] == {"all_reduce": psi, "broadcast": psi}
        assert comm["fsdp"]["reduce_scatter"] >= psi and comm["fsdp"]["all_gather"] >= psi


def test_fsdp_timeline_gathers_then_frees(two_ranks):
    """FSDP2 gathers a layer's full parameters for its forward and frees them with resize_(0)."""
    cfgs, runs = two_ranks
    r = runs[1][0]["fsdp"]
    forward = [(b, op) for phase, b, op in r["timeline"] if phase == "forward"]
    full_layer0 = 4 * math.prod(D.param_shapes(cfgs[1]["sizes"])[0])
    assert max(b for b, _ in forward) >= forward[0][0] + full_layer0 // 2, "no gathered parameters seen"
    assert any(op == "UntypedStorage.resize_" for _, op in forward), "FSDP2 no longer frees with resize_"


def test_fsdp_backward_prefetches_the_next_layer(two_ranks):
    """FSDP2's default backward prefetch (FSDPParamGroup._backward_prefetch): the last layer's
    pre-backward also all-gathers the layer before it, so two layers are gathered before the
    first reduce-scatter (the 06 text: about two layers unsharded at the peak, not one)."""
    _, runs = two_ranks
    ops = [op for phase, _, op in runs[1][0]["fsdp"]["timeline"] if phase == "backward"]
    gathers = [i for i, op in enumerate(ops) if op.startswith("_allgather_base_")]
    scatters = [i for i, op in enumerate(ops) if op.startswith("_reduce_scatter_base_")]
    assert len(gathers) >= 2 and scatters, (gathers, scatters)
    assert gathers[1] < scatters[0], "no prefetch: 2nd gather after the 1st reduce-scatter"


@pytest.mark.slow
def test_three_ranks_uneven_shards():
    """3 ranks, a dim-0 of 2 (rank 2 holds no rows of it) and odd sizes."""
    cfg = dict(sizes=[7, 2, 5], batch_sizes=[1, 2, 3], seed=1)
    runs = D.launch(3, [cfg], strategies=("zero1", "fsdp"), timeout=240)[0]
    shapes = D.param_shapes(cfg["sizes"])
    for s in ("zero1", "fsdp"):
        want = _expected(shapes, s, 3)
        for r in range(3):
            assert {k: runs[r][s][k] for k in ("params", "optimizer_state")} == want[r], (s, r)
    for a, b in zip(_reference(cfg), runs[2]["fsdp"]["full_grads"]):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("how", ["fork", "spawn"])
def test_a_failing_rank_raises_cleanly(how, monkeypatch, capfd):
    """Forked ranks (Linux, gloo, no CUDA context: the default here) and new interpreters
    (``MEMLAB_RANKS=spawn``, and everywhere else) fail the same way: RankError with the rank's
    own traceback, nothing on the caller's streams (in a notebook those are the kernel's)."""
    if how == "spawn":
        monkeypatch.setenv("MEMLAB_RANKS", "spawn")
    assert D._fork_ok("gloo") == (how == "fork" and sys.platform.startswith("linux"))
    with pytest.raises(D.RankError, match="rank") as err:
        D.launch(2, [dict(sizes=[4, -1], batch_sizes=[1, 1], seed=0)], timeout=120)
    assert "Traceback" in str(err.value) or "Error" in str(err.value), err.value
    out, errout = capfd.readouterr()
    assert out == "" and "Traceback" not in errout, (out, errout)


def test_forked_and_spawned_ranks_measure_the_same(monkeypatch):
    cfg = dict(sizes=[6, 10, 4], batch_sizes=[2, 3], seed=3)
    forked = D.launch(2, [cfg], strategies=("ddp", "fsdp"), timeout=240)[0]
    monkeypatch.setenv("MEMLAB_RANKS", "spawn")
    spawned = D.launch(2, [cfg], strategies=("ddp", "fsdp"), timeout=240)[0]
    for r in range(2):
        for s in ("ddp", "fsdp"):
            for k in ("params", "grads", "optimizer_state", "comm"):
                assert forked[r][s][k] == spawned[r][s][k], (r, s, k)
            for a, b in zip(forked[r][s]["full_grads"], spawned[r][s]["full_grads"]):
                assert torch.equal(a, b), (r, s)


def test_bad_arguments():
    with pytest.raises(ValueError):
        D.launch(2, [dict(sizes=[4, 4], batch_sizes=[1], seed=0)])
    with pytest.raises(ValueError):
        D.launch(2, [dict(sizes=[4, 4], batch_sizes=[1, 1], seed=0)], strategies=("zero9",))


def test_tp_activation_formula():
    from memlab import formulas
    s, b, h, a = 1024, 8, 768, 12
    assert D.tp_activation_bytes(s, b, h, a) == pytest.approx(formulas.korthikanti_layer_bytes(s, b, h, a))
    assert D.tp_activation_bytes(s, b, h, a, t=4, sequence_parallel=True) == pytest.approx(
        formulas.korthikanti_layer_bytes(s, b, h, a) / 4)
