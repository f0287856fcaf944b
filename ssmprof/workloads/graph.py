"""Graph workload: `graph-mamba`, a GraphGPS-style network whose global branch is a bidirectional Mamba over
degree-ordered node sequences, trained for multi-label graph classification.

One layer (the GPS layer of Rampášek et al. 2022, "Recipe for a General, Powerful, Scalable Graph
Transformer", with Mamba in place of attention):

    h_local  = Norm(h + GINE(h, edges))      local message passing: torch_geometric's GINEConv, MLP inside
    h_global = Norm(h + BiMamba(h))          global branch over each graph's node sequence
    h        = Norm(h_local + h_global + MLP(h_local + h_global))      MLP 2x, ReLU

Node sequences. Each graph's nodes are sorted by degree, ascending, so the best-connected nodes come last
and see the most context; ties are broken by uniform noise in [0, 0.5) added to the degree, drawn afresh
in every layer of every forward pass (the training-time node prioritization of Graph-Mamba, Wang et al.
2024, "Towards Long-Range Graph Sequence Modeling with Selective State Spaces"). The sequences are packed
into a dense (graphs, max nodes, hidden) batch with `to_dense_batch`, padding at the end of each row.
The encoder is bidirectional as in Graph Mamba Networks (Behrouz & Hashemi, KDD 2024): two Mamba-1
blocks with separate parameters, one reading each sequence forward, one reading it reversed; the
reversal flips each graph's own nodes only, so padding stays at the row's end, where a causal scan never
carries it into a real node. The two outputs are summed and gathered back to the original node order.

Readout: mean over each graph's nodes, one linear layer, binary cross-entropy over the tasks.

Data: synthetic batches shaped like LRGB Peptides-func (Dwivedi et al. 2022), the long-range benchmark
Graph-Mamba reports on: 15,535 molecular graphs with on average 150.94 nodes and 307.30 edges, counted
as edge_index columns (each bond in both directions: about 153.7 bonds, mean degree 2.04); 9
categorical atom features, 3 categorical bond features, 10 binary tasks (multi-label). A graph has
`seq_len * (1 +- size_spread)` nodes (uniform, mean `seq_len`): a random tree shaped like a molecule's
backbone with short branches (node i bonds to one of nodes i-1..i-3) plus random extra bonds (ring
closures) up to a mean degree of `avg_degree`; every bond appears as two directed edges with the same
features. `seq_len` is therefore the mean number of nodes per graph, `batch_size` the graphs per batch,
`layers` the GPS layers. Throughput counts graphs.

Presets. `paper` follows Graph-Mamba's Peptides-func configuration: hidden 96, batch 128, batch norm, no
dropout, mean pooling, one linear head; Mamba-1 defaults (d_state 16, d_conv 4, expand 2); 4 layers (that
configuration does not set the depth, so it is our choice, within GraphGPS's usual 3 to 6). Left out: the
Laplacian positional encodings, and GatedGCN (GINE takes its place as the local MPNN).

At Peptides-func size the GPU is busy for only part of a step: the step is bound by host-side launch
overhead. The bundled `paper` runs (H100, H200) measure it: step time, launches and where the kernel time
goes are in the README's Results.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ssmprof.kernels import KernelPlan
from ssmprof.workloads.base import CommonConfig, Workload, check
from ssmprof.workloads.layers import Mamba1Mixer

# torch_geometric is imported where it is used: importing it costs seconds, and the registry imports
# this module for every CLI command.


@dataclasses.dataclass(frozen=True)
class GraphConfig(CommonConfig):
    """`seq_len`: mean nodes per graph; `batch_size`: graphs per batch; `layers`: GPS layers."""

    hidden: int = 96
    d_state: int = 16
    expand: int = 2
    avg_degree: float = 2.04  # mean degree = directed edges per node (Peptides-func: 307.30 / 150.94)
    size_spread: float = 0.5  # graph sizes uniform in seq_len * (1 +- size_spread)
    node_features: int = 9  # categorical columns per node (OGB atom features)
    edge_features: int = 3  # categorical columns per edge (OGB bond features)
    categories: int = 16  # values per categorical column
    num_tasks: int = 10
    norm: str = "batch"  # "batch" (GraphGPS on Peptides-func) or "layer"
    dropout: float = 0.0


NORMS = ("batch", "layer")


# ---- data ----------------------------------------------------------------------------------------------
def graph_sizes(cfg: GraphConfig, generator: torch.Generator) -> torch.Tensor:
    """Nodes per graph: uniform integers with mean `seq_len`, at least 2."""
    low = max(2, round(cfg.seq_len * (1 - cfg.size_spread)))
    high = max(low, 2 * cfg.seq_len - low)
    return torch.randint(low, high + 1, (cfg.batch_size,), generator=generator)


def random_bonds(n: int, avg_degree: float, generator: torch.Generator) -> torch.Tensor:
    """Undirected edges (2, m) of one connected graph of `n` nodes, each once with src < dst, no duplicates:
    a spanning tree (node i bonds to one of nodes i-1..i-3) plus random extra edges up to `avg_degree`."""
    child = torch.arange(1, n)
    parent = (child - 1 - torch.randint(0, 3, (n - 1,), generator=generator)).clamp(min=0)
    extra = max(0, round(n * avg_degree / 2) - (n - 1))
    u = torch.randint(0, n, (extra,), generator=generator)
    v = (u + torch.randint(1, n, (extra,), generator=generator)) % n
    src, dst = torch.cat([parent, torch.minimum(u, v)]), torch.cat([child, torch.maximum(u, v)])
    return torch.stack(_unique_pairs(src, dst, n))


def _unique_pairs(src: torch.Tensor, dst: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    key = torch.unique(src * n + dst)  # sorted: rows in order, as in a coalesced edge_index
    return key // n, key % n


def graph_batch(cfg: GraphConfig, generator: torch.Generator) -> dict:
    """A batch of random Peptides-func-like graphs (CPU tensors, see the module docstring)."""
    sizes = graph_sizes(cfg, generator)
    parts, offset = [], 0
    for n in sizes.tolist():
        parts.append(random_bonds(n, cfg.avg_degree, generator) + offset)
        offset += n
    bonds = torch.cat(parts, dim=1)
    bond_attr = torch.randint(0, cfg.categories, (bonds.size(1), cfg.edge_features), generator=generator)
    # Both directions of every bond, same features, sorted by (source, target).
    src, dst = torch.cat([bonds[0], bonds[1]]), torch.cat([bonds[1], bonds[0]])
    order = torch.argsort(src * offset + dst)
    return {
        "x": torch.randint(0, cfg.categories, (offset, cfg.node_features), generator=generator),
        "edge_index": torch.stack([src, dst])[:, order],
        "edge_attr": bond_attr.repeat(2, 1)[order],
        "batch": torch.repeat_interleave(torch.arange(cfg.batch_size), sizes),
        "y": torch.randint(0, 2, (cfg.batch_size, cfg.num_tasks), generator=generator).float(),
        # Python ints, so that packing and pooling never wait on the GPU for a size.
        "num_graphs": cfg.batch_size,
        "max_nodes": int(sizes.max()),
    }


# ---- node sequences ------------------------------------------------------------------------------------
def node_degree(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Degree of every node (edges arriving; the graphs are undirected, so also edges leaving)."""
    ones = torch.ones(edge_index.size(1), dtype=torch.long, device=edge_index.device)
    return torch.zeros(num_nodes, dtype=torch.long, device=edge_index.device).index_add_(0, edge_index[1], ones)


def degree_order(degree: torch.Tensor, batch: torch.Tensor, generator: torch.Generator | None = None
                 ) -> torch.Tensor:
    """Node indices in sequence order: graph by graph (batch must be sorted, as in a PyG batch), each graph's
    nodes by degree ascending, ties broken by noise in [0, 0.5) from `generator` (or the global RNG)."""
    if generator is None:
        noise = torch.rand(degree.shape, device=degree.device)
    else:
        noise = torch.rand(degree.shape, generator=generator, device=generator.device).to(degree.device)
    by_degree = torch.argsort(degree + 0.5 * noise)
    return by_degree[torch.argsort(batch[by_degree], stable=True)]


@dataclass
class NodeSequences:
    """Where each node sits in the dense (graphs, max nodes) layout, forward and reversed."""

    order: torch.Tensor  # (N,) node indices in sequence order
    batch: torch.Tensor  # (N,) graph of each position of `order` (sorted)
    slot: torch.Tensor  # (N,) flat index graph * max_nodes + position of every node (original order)
    reverse_index: torch.Tensor  # (graphs * max_nodes,) flat gather index reversing each graph's nodes
    num_graphs: int
    max_nodes: int

    @classmethod
    def build(cls, order: torch.Tensor, batch: torch.Tensor, num_graphs: int, max_nodes: int) -> NodeSequences:
        seq_batch = batch[order]
        counts = torch.zeros(num_graphs, dtype=torch.long, device=batch.device).index_add_(
            0, batch, torch.ones_like(batch))
        starts = torch.cumsum(counts, 0) - counts
        position = torch.arange(order.numel(), device=batch.device) - starts[seq_batch]
        slot = torch.empty_like(order).scatter_(0, order, seq_batch * max_nodes + position)
        column = torch.arange(max_nodes, device=batch.device)
        length = counts.unsqueeze(1)
        reversed_column = torch.where(column < length, length - 1 - column, column)  # padding stays put
        rows = torch.arange(num_graphs, device=batch.device).unsqueeze(1) * max_nodes
        return cls(order, seq_batch, slot, (rows + reversed_column).flatten(), num_graphs, max_nodes)

    def pack(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, d) node features -> (graphs, max_nodes, d) sequences, zero padded, and the padding mask."""
        from torch_geometric.utils import to_dense_batch

        return to_dense_batch(h[self.order], self.batch, batch_size=self.num_graphs, max_num_nodes=self.max_nodes)

    def reverse(self, dense: torch.Tensor) -> torch.Tensor:
        """Each graph's sequence reversed in place; padding stays at the end. Its own inverse."""
        return dense.flatten(0, 1)[self.reverse_index].view_as(dense)

    def unpack(self, dense: torch.Tensor) -> torch.Tensor:
        """(graphs, max_nodes, d) -> (N, d) in the original node order; padding is ignored."""
        return dense.flatten(0, 1)[self.slot]


# ---- model ---------------------------------------------------------------------------------------------
class BiMamba(nn.Module):
    """Two Mamba-1 blocks with their own parameters, over each graph's node sequence and over it reversed."""

    def __init__(self, d_model: int, d_state: int, expand: int, plan: KernelPlan, layer_idx: int):
        super().__init__()
        self.forward_scan = Mamba1Mixer(d_model, d_state, expand, plan, 2 * layer_idx)
        self.backward_scan = Mamba1Mixer(d_model, d_state, expand, plan, 2 * layer_idx + 1)

    def forward(self, h: torch.Tensor, seqs: NodeSequences) -> torch.Tensor:
        dense, _ = seqs.pack(h)
        out = self.forward_scan(dense) + seqs.reverse(self.backward_scan(seqs.reverse(dense)))
        return seqs.unpack(out)


def make_norm(kind: str, dim: int) -> nn.Module:
    return nn.BatchNorm1d(dim) if kind == "batch" else nn.LayerNorm(dim)


class GPSMambaLayer(nn.Module):
    def __init__(self, cfg: GraphConfig, plan: KernelPlan, layer_idx: int):
        super().__init__()
        from torch_geometric.nn import GINEConv

        d = cfg.hidden
        self.local = GINEConv(nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d)))
        self.mamba = BiMamba(d, cfg.d_state, cfg.expand, plan, layer_idx)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Dropout(cfg.dropout), nn.Linear(2 * d, d))
        self.norm_local, self.norm_global, self.norm_out = (make_norm(cfg.norm, d) for _ in range(3))
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, h: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor, degree: torch.Tensor,
                batch: torch.Tensor, num_graphs: int, max_nodes: int) -> torch.Tensor:
        seqs = NodeSequences.build(degree_order(degree, batch), batch, num_graphs, max_nodes)
        h_local = self.norm_local(h + self.dropout(self.local(h, edge_index, edge_attr)))
        h_global = self.norm_global(h + self.dropout(self.mamba(h, seqs)))
        h = h_local + h_global
        return self.norm_out(h + self.dropout(self.mlp(h)))


class CategoricalEncoder(nn.Module):
    """Sum of one embedding per categorical column (OGB's AtomEncoder / BondEncoder), one table."""

    offsets: torch.Tensor  # a buffer (register_buffer)

    def __init__(self, columns: int, categories: int, dim: int):
        super().__init__()
        self.categories = categories
        self.embedding = nn.Embedding(columns * categories, dim)
        self.register_buffer("offsets", torch.arange(columns) * categories, persistent=False)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.embedding(features + self.offsets).sum(dim=1)


class GraphMambaNet(nn.Module):
    def __init__(self, cfg: GraphConfig, plan: KernelPlan):
        super().__init__()
        from torch_geometric.nn import global_mean_pool

        self._pool = global_mean_pool
        self.node_encoder = CategoricalEncoder(cfg.node_features, cfg.categories, cfg.hidden)
        self.edge_encoder = CategoricalEncoder(cfg.edge_features, cfg.categories, cfg.hidden)
        self.layers = nn.ModuleList(GPSMambaLayer(cfg, plan, i) for i in range(cfg.layers))
        self.head = nn.Linear(cfg.hidden, cfg.num_tasks)

    def forward(self, batch: dict) -> torch.Tensor:
        h = self.node_encoder(batch["x"])
        edge_attr = self.edge_encoder(batch["edge_attr"])
        degree = node_degree(batch["edge_index"], h.size(0))
        for layer in self.layers:
            h = layer(h, batch["edge_index"], edge_attr, degree, batch["batch"], batch["num_graphs"],
                      batch["max_nodes"])
        return self.head(self._pool(h, batch["batch"], size=batch["num_graphs"]))


class GraphMamba(Workload[GraphConfig]):
    name = "graph-mamba"
    description = "Graph-Mamba: GPS layers of GINE message passing + bidirectional Mamba-1 over degree-sorted nodes"
    capture_blocker = ("every training batch is another set of molecular graphs, so its node and edge counts (the "
                       "shapes of every message-passing and packing op) change from step to step, and a CUDA graph "
                       "replays the shapes it captured; one fixed synthetic batch would time a step real training "
                       "never runs")
    unit = "graphs"
    ops = ("selective_scan", "conv1d")
    presets = {
        "tiny": GraphConfig(batch_size=4, seq_len=12, layers=2, dtype="fp32", hidden=16),
        "small": GraphConfig(batch_size=64, seq_len=151, layers=4, dtype="bf16", hidden=96),
        "paper": GraphConfig(batch_size=128, seq_len=151, layers=4, dtype="bf16", hidden=96),
    }
    preset_notes = {
        "tiny": "CPU smoke test, seconds: 4 graphs of ~12 nodes",
        "small": "one GPU, under a minute: 64 Peptides-func-sized graphs (~151 nodes), hidden 96",
        "paper": "Graph-Mamba's Peptides-func set-up: batch 128, hidden 96, 4 layers (a few MB of parameters)",
    }

    def validate(self, cfg: GraphConfig) -> None:
        super().validate(cfg)
        check(cfg.seq_len >= 2, f"seq_len (mean nodes per graph) must be >= 2, got {cfg.seq_len}")
        check(cfg.hidden >= 2, f"hidden must be >= 2, got {cfg.hidden}")
        check(cfg.d_state >= 1 and cfg.expand >= 1, "d_state and expand must be >= 1")
        check(0 <= cfg.size_spread < 1, f"size_spread must be in [0, 1), got {cfg.size_spread}")
        check(0 <= cfg.avg_degree <= cfg.seq_len - 1,
              f"avg_degree must be in [0, seq_len - 1] = [0, {cfg.seq_len - 1}], got {cfg.avg_degree}")
        check(min(cfg.node_features, cfg.edge_features, cfg.categories, cfg.num_tasks) >= 1,
              "node_features, edge_features, categories and num_tasks must be >= 1")
        check(cfg.norm in NORMS, f"norm must be one of {', '.join(NORMS)}, got '{cfg.norm}'")
        check(0 <= cfg.dropout < 1, f"dropout must be in [0, 1), got {cfg.dropout}")

    def build(self, cfg: GraphConfig, plan: KernelPlan) -> nn.Module:
        return GraphMambaNet(cfg, plan)

    def batch(self, cfg: GraphConfig, device: torch.device, generator: torch.Generator) -> dict:
        return {key: value.to(device) if isinstance(value, torch.Tensor) else value
                for key, value in graph_batch(cfg, generator).items()}

    def loss(self, model: nn.Module, batch: dict) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(model(batch).float(), batch["y"])

    def items_per_step(self, cfg: GraphConfig) -> int:
        return cfg.batch_size
