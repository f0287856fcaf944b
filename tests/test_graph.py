"""graph-mamba: a real training step at `tiny`, the degree ordering of the node sequences, the synthetic
Peptides-func-like batches, configuration errors."""

import math

import pytest
import torch
from torch import nn

from ssmprof.errors import InvalidConfig
from ssmprof.kernels import plan_kernels
from ssmprof.profiler.harness import Trainer
from ssmprof.profiler.markers import PHASES, RecordingMarker
from ssmprof.workloads.graph import (
    BiMamba,
    GraphMamba,
    NodeSequences,
    degree_order,
    graph_batch,
    node_degree,
)

WORKLOAD = GraphMamba()
# LRGB Peptides-func (Dwivedi et al. 2022): mean nodes per graph, edge_index columns per graph.
PEPTIDES_NODES, PEPTIDES_EDGES = 150.94, 307.30


def tiny_batch(seed: int = 0, **overrides) -> tuple[dict, torch.Tensor]:
    batch = graph_batch(WORKLOAD.config("tiny", overrides), torch.Generator().manual_seed(seed))
    return batch, node_degree(batch["edge_index"], batch["x"].size(0))


@pytest.mark.parametrize("overrides", [{}, {"dtype": "bf16"}, {"dtype": "bf16", "norm": "layer"}])
def test_one_step_trains_every_parameter(overrides):
    cfg = WORKLOAD.config("tiny", overrides)
    marker = RecordingMarker()
    trainer = Trainer(WORKLOAD, cfg, plan_kernels(WORKLOAD.ops, "cpu", dtype=cfg.dtype), marker)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    loss = trainer.step()
    assert math.isfinite(loss.item())
    assert abs(loss.item() - math.log(2)) < 0.3  # untrained, random labels: BCE near ln 2
    for name, param in trainer.model.named_parameters():
        assert param.grad is not None, f"{name} got no gradient"
        assert param.grad.abs().sum() > 0, f"{name} got an all-zero gradient"
        assert not torch.equal(param.detach(), before[name]), f"{name} was not updated by AdamW"
    assert marker.phases() == list(PHASES)
    assert WORKLOAD.items_per_step(cfg) == cfg.batch_size and WORKLOAD.unit == "graphs"


def test_degree_order_sorts_each_graph_and_breaks_ties_by_seed():
    batch, degree = tiny_batch()
    orders = [degree_order(degree, batch["batch"], torch.Generator().manual_seed(seed)) for seed in range(4)]
    for order in orders:
        assert torch.equal(order.sort().values, torch.arange(degree.numel()))  # a permutation
        graph, deg = batch["batch"][order], degree[order]
        assert (graph.diff() >= 0).all(), "graphs must stay contiguous, in order"
        same_graph = graph[1:] == graph[:-1]
        assert (deg.diff()[same_graph] >= 0).all(), "degrees must not decrease within a graph"
        assert torch.equal(deg, degree[orders[0]])  # only ties move
    assert len({tuple(order.tolist()) for order in orders}) == len(orders), "seeds should break ties differently"
    same = degree_order(degree, batch["batch"], torch.Generator().manual_seed(2))
    assert torch.equal(same, orders[2])


def test_pack_reverse_unpack_round_trip():
    batch, degree = tiny_batch(seed=1)
    order = degree_order(degree, batch["batch"], torch.Generator().manual_seed(0))
    seqs = NodeSequences.build(order, batch["batch"], batch["num_graphs"], batch["max_nodes"])
    sizes = torch.bincount(batch["batch"], minlength=batch["num_graphs"])

    h = torch.randn(degree.numel(), 5)
    dense, mask = seqs.pack(h)
    assert dense.shape == (batch["num_graphs"], batch["max_nodes"], 5)
    assert torch.equal(mask.sum(1), sizes) and mask[:, 0].all()  # real nodes first, padding last
    assert (dense[~mask] == 0).all()
    assert torch.equal(seqs.unpack(dense), h)  # exact permutation round trip

    packed_degree, _ = seqs.pack(degree.float().unsqueeze(1))
    rev = seqs.reverse(dense)
    for g, n in enumerate(sizes.tolist()):
        assert (packed_degree[g, :n, 0].diff() >= 0).all()
        assert torch.equal(rev[g, :n], dense[g, :n].flip(0))
        assert torch.equal(rev[g, n:], dense[g, n:])
    assert torch.equal(seqs.reverse(rev), dense)


class Spy(nn.Module):
    """Stands in for a Mamba block: records its input, returns it unchanged."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, u):
        self.seen.append(u.detach().clone())
        return u


def test_bimamba_feeds_degree_sorted_sequences_both_ways():
    batch, degree = tiny_batch(seed=2)
    bimamba = BiMamba(4, 4, 1, plan_kernels(GraphMamba.ops, "cpu"), layer_idx=0)
    bimamba.forward_scan, bimamba.backward_scan = Spy(), Spy()
    torch.manual_seed(0)
    order = degree_order(degree, batch["batch"])
    seqs = NodeSequences.build(order, batch["batch"], batch["num_graphs"], batch["max_nodes"])
    h = torch.stack([degree.float(), torch.arange(degree.numel(), dtype=torch.float)], dim=1)

    out = bimamba(h, seqs)
    assert torch.equal(out, 2 * h)  # both directions come back to the original node order
    (forward_in,), (backward_in,) = bimamba.forward_scan.seen, bimamba.backward_scan.seen
    sizes = torch.bincount(batch["batch"], minlength=batch["num_graphs"]).tolist()
    for g, n in enumerate(sizes):
        assert (forward_in[g, :n, 0].diff() >= 0).all(), "forward scan must see degrees ascending"
        assert (backward_in[g, :n, 0].diff() <= 0).all(), "backward scan must see degrees descending"
        assert torch.equal(forward_in[g, :n, 1], order[batch["batch"][order] == g].float())
        assert (backward_in[g, n:] == 0).all(), "padding stays at the end of the reversed row"


def test_synthetic_batches_look_like_peptides_func():
    cfg = WORKLOAD.config("small")
    batch = graph_batch(cfg, torch.Generator().manual_seed(0))
    x, edge_index, graph = batch["x"], batch["edge_index"], batch["batch"]
    n_nodes, n_edges = x.size(0), edge_index.size(1)
    assert n_nodes / cfg.batch_size == pytest.approx(PEPTIDES_NODES, rel=0.1)
    assert n_edges / cfg.batch_size == pytest.approx(PEPTIDES_EDGES, rel=0.1)
    assert n_edges / n_nodes == pytest.approx(PEPTIDES_EDGES / PEPTIDES_NODES, abs=0.05)
    assert batch["max_nodes"] == int(torch.bincount(graph).max())

    # valid: indices in range, no self loops, edges inside one graph, no duplicates
    assert edge_index.min() >= 0 and edge_index.max() < n_nodes
    src, dst = edge_index
    assert (src != dst).all() and torch.equal(graph[src], graph[dst])
    keys = src * n_nodes + dst
    assert keys.unique().numel() == n_edges
    # undirected: every edge has its reverse, with the same features
    reverse_keys = dst * n_nodes + src
    assert torch.equal(keys.sort().values, reverse_keys.sort().values)
    attr = batch["edge_attr"]
    assert torch.equal(attr[keys.argsort()], attr[reverse_keys.argsort()])
    assert (node_degree(edge_index, n_nodes) >= 1).all()  # a spanning tree per graph: no isolated node

    assert x.shape == (n_nodes, cfg.node_features) and attr.shape == (n_edges, cfg.edge_features)
    assert x.min() >= 0 and x.max() < cfg.categories and attr.min() >= 0 and attr.max() < cfg.categories
    assert batch["y"].shape == (cfg.batch_size, cfg.num_tasks) and set(batch["y"].unique().tolist()) <= {0.0, 1.0}
    again = graph_batch(cfg, torch.Generator().manual_seed(0))
    assert all(torch.equal(batch[k], again[k]) for k in ("x", "edge_index", "edge_attr", "y"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"seq_len": "1"}, "seq_len .* must be >= 2"),
        ({"seq_len": "0"}, "sequence length must be >= 1"),
        ({"hidden": "1"}, "hidden must be >= 2"),
        ({"norm": "group"}, "norm must be one of"),
        ({"size_spread": "1.0"}, "size_spread must be in"),
        ({"avg_degree": "-1"}, "avg_degree must be in"),
        ({"avg_degree": "12"}, "avg_degree must be in"),  # tiny graphs average 12 nodes
        ({"num_tasks": "0"}, "must be >= 1"),
        ({"dropout": "1"}, "dropout must be in"),
        ({"dtype": "fp8"}, "dtype must be one of"),
    ],
)
def test_bad_configuration(overrides, message):
    with pytest.raises(InvalidConfig, match=message):
        WORKLOAD.config("tiny", overrides)


def test_presets_are_peptides_sized():
    for preset in ("small", "paper"):
        cfg = WORKLOAD.config(preset)
        assert cfg.seq_len == round(PEPTIDES_NODES) and cfg.dtype == "bf16" and cfg.num_tasks == 10
    assert WORKLOAD.config("paper").batch_size >= 128
    assert set(WORKLOAD.preset_notes) == set(WORKLOAD.presets)
