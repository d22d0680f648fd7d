"""Two-layer GCN and GAT node classifiers and a seeded full-batch training loop, shared by examples/train_gcn.py
and benchmarks/gnn.py. ``conv`` picks the layer class (ours by default; PyG's for the comparison), and the second
argument of ``forward`` is handed to every layer as is (a ``gnn.Graph`` for ours, ``adj_t``/``edge_index`` for PyG).
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from gnn.layers import GATConv, GCNConv


class GCN(torch.nn.Module):
    def __init__(self, in_channels: int, hidden: int, out_channels: int, *, dropout: float = 0.5, conv=GCNConv):
        super().__init__()
        self.dropout = dropout
        self.conv1, self.conv2 = conv(in_channels, hidden), conv(hidden, out_channels)

    def forward(self, x, graph):
        x = F.dropout(x, self.dropout, self.training)
        x = F.relu(self.conv1(x, graph))
        return self.conv2(F.dropout(x, self.dropout, self.training), graph)


class GAT(torch.nn.Module):
    """``heads`` heads of ``hidden // heads`` channels, concatenated, then one head to the classes (PyG's GAT
    example); attention dropout is 0 so that runs with different edge orders draw the same masks."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int, *, heads: int = 4, dropout: float = 0.5,
                 conv=GATConv):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"gnn.models.GAT: hidden={hidden} is not a multiple of heads={heads}")
        self.dropout = dropout
        self.conv1 = conv(in_channels, hidden // heads, heads=heads)
        self.conv2 = conv(hidden, out_channels, heads=1)

    def forward(self, x, graph):
        x = F.dropout(x, self.dropout, self.training)
        x = F.elu(self.conv1(x, graph))
        return self.conv2(F.dropout(x, self.dropout, self.training), graph)


def split_masks(n: int, seed: int = 0, train: float = 0.6, val: float = 0.2) -> tuple[torch.Tensor, ...]:
    """Seeded random train/val/test node masks."""
    order = np.random.default_rng(seed).permutation(n)
    cut1, cut2 = int(train * n), int((train + val) * n)
    masks = []
    for part in (order[:cut1], order[cut1:cut2], order[cut2:]):
        m = torch.zeros(n, dtype=torch.bool)
        m[torch.from_numpy(part)] = True
        masks.append(m)
    return tuple(masks)


def fit(model, x, y, graph, masks, *, epochs: int = 50, lr: float = 0.01, weight_decay: float = 5e-4,
        seed: int = 0, autocast_dtype=None) -> dict:
    """Full-batch training with Adam; per epoch the training loss and the wall time of forward + backward + step
    (CUDA synchronised). Returns losses, epoch_ms, and train/val/test accuracy at the epoch of best validation.

    The training rows are gathered by an index tensor made once (``out[train_idx]``): a boolean mask index is a
    ``nonzero``, which waits for the GPU (a host sync) on every epoch; the rows and their order are the same, so
    the loss is bitwise the one of ``out[mask]``."""
    train, val, test = (m.to(x.device) for m in masks)
    y = y.to(x.device)
    train_idx = torch.nonzero(train).flatten()  # once, before the loop: the epochs then gather without a sync
    y_train = y[train_idx]
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    cuda = x.device.type == "cuda"
    losses, epoch_ms, best = [], [], (-1.0, None)
    for _ in range(epochs):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad()
        with torch.autocast(x.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            out = model(x, graph)
        loss = F.cross_entropy(out[train_idx].float(), y_train)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        epoch_ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(float(loss.detach()))
        acc = accuracy(model, x, y, graph, (train, val, test), autocast_dtype)
        if acc[1] > best[0]:
            best = (acc[1], acc)
    return {"losses": losses, "epoch_ms": epoch_ms, "train_acc": best[1][0], "val_acc": best[1][1],
            "test_acc": best[1][2]}


@torch.no_grad()
def accuracy(model, x, y, graph, masks, autocast_dtype=None) -> tuple[float, ...]:
    model.eval()
    with torch.autocast(x.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        pred = model(x, graph).argmax(-1)
    return tuple(float((pred[m] == y[m]).float().mean()) if int(m.sum()) else float("nan") for m in masks)
