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


GRAPH_WARMUP_EPOCHS = 3  # eager epochs before a whole step is captured: plans built and bound, caches made


def fit(model, x, y, graph, masks, *, epochs: int = 50, lr: float = 0.01, weight_decay: float = 5e-4,
        seed: int = 0, autocast_dtype=None, cuda_graph: bool | None = None) -> dict:
    """Full-batch training with Adam; per epoch the training loss and the wall time of forward + backward + step
    (CUDA synchronised). Returns losses, epoch_ms, and train/val/test accuracy at the epoch of best validation.

    The training rows are gathered by an index tensor made once (``out[train_idx]``): a boolean mask index is a
    ``nonzero``, which waits for the GPU (a host sync) on every epoch; the rows and their order are the same, so
    the loss is bitwise the one of ``out[mask]``.

    Each epoch's loss is kept detached: a loss holding its autograd graph keeps the parameters' AccumulateGrad
    nodes of that epoch alive, and a backward on another stream (the capture's) then warns that their streams do
    not match (torch 2.11, H100: "The AccumulateGrad node's stream does not match ...", an error under the tests'
    warning filter, so the GCN step was not captured).

    ``cuda_graph`` (default None: True for CUDA tensors, False on the CPU; True on the CPU is refused): after
    `GRAPH_WARMUP_EPOCHS` eager epochs (on a side stream, as PyTorch's whole-network capture asks), one training
    step (forward, loss, backward, Adam's step with ``capturable=True``) is captured into a CUDA graph and every
    later epoch replays it: the same arithmetic on the same addresses, the host's per-op cost paid once. Works for
    any model whose ops are capturable (ours: bound products, no host sync; dropout draws from the graph-safe
    generator). The result adds ``graph_from_epoch`` (the first replayed epoch,
    1-based; the capture's epoch includes the capture) or ``graph_error`` when the capture failed and the epochs
    went on eagerly. The default captures because that is where small graphs' epochs go (H100, 10 graphs of
    0.09-2.4M nnz: GCN 0.39-3.49 ms replayed against 1.63-3.68 eager, GAT 1.12-9.23 against 4.70-9.51; losses
    within 2.4e-4 of the eager run's)."""
    train, val, test = (m.to(x.device) for m in masks)
    y = y.to(x.device)
    train_idx = torch.nonzero(train).flatten()  # once, before the loop: the epochs then gather without a sync
    y_train = y[train_idx]
    torch.manual_seed(seed)
    cuda = x.device.type == "cuda"
    if cuda_graph and not cuda:
        raise ValueError("fit: cuda_graph=True needs CUDA tensors (x is on the CPU)")
    cuda_graph = cuda if cuda_graph is None else bool(cuda_graph)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay, capturable=cuda_graph)

    def step():
        with torch.autocast(x.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            out = model(x, graph)
        loss = F.cross_entropy(out[train_idx].float(), y_train)
        loss.backward()
        opt.step()
        return loss

    side = torch.cuda.Stream() if cuda_graph else None
    losses, epoch_ms, best = [], [], (-1.0, None)
    captured, result = None, {}
    for epoch in range(epochs):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.train()
        if captured is not None:
            captured[0].replay()
            loss = captured[1]
        elif cuda_graph and epoch >= GRAPH_WARMUP_EPOCHS and "graph_error" not in result:
            captured = _capture_step(step, opt, result)
            if captured is None:  # failed: this epoch and the rest run eagerly
                opt.zero_grad()
                loss = step().detach()
            else:
                captured[0].replay()
                loss = captured[1]
                result["graph_from_epoch"] = epoch + 1
        elif side is not None:  # warm-up on a side stream (PyTorch's recipe before a capture)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                opt.zero_grad()
                loss = step().detach()  # no autograd graph of an earlier epoch alive at the capture (below)
            torch.cuda.current_stream().wait_stream(side)
        else:
            opt.zero_grad()
            loss = step().detach()
        if cuda:
            torch.cuda.synchronize()
        epoch_ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(float(loss.detach()))
        acc = accuracy(model, x, y, graph, (train, val, test), autocast_dtype)
        if acc[1] > best[0]:
            best = (acc[1], acc)
    return {"losses": losses, "epoch_ms": epoch_ms, "train_acc": best[1][0], "val_acc": best[1][1],
            "test_acc": best[1][2], **result}


def _capture_step(step, opt, result: dict):
    """(graph, its loss tensor) with the training step captured, not yet run; None with ``result["graph_error"]``
    when capturing failed (nothing of the step ran)."""
    opt.zero_grad(set_to_none=True)  # the captured backward then assigns the gradients: replays need no zeroing
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            static_loss = step()
    except Exception as err:  # an op that syncs, allocates outside torch, or is not capturable
        result["graph_error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
        torch.cuda.synchronize()
        _release_generator()
        return None
    # detached (the same storage, refreshed by each replay): the captured step's autograd nodes are not kept alive
    return graph, static_loss.detach()


def _release_generator() -> None:
    """After a failed capture: the current device's default CUDA generator, registered with the aborted graph,
    still counts as capturing, and its next eager draw (dropout) raises "Offset increment outside graph capture
    encountered unexpectedly" (seen on H100 in benchmarks/gnn.py after a GAT capture failed). A clone of its
    state (same seed and offset, not capturing) put in its place lets the eager epochs go on with the same stream
    of random numbers."""
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    gen.graphsafe_set_state(gen.clone_state())


@torch.no_grad()
def accuracy(model, x, y, graph, masks, autocast_dtype=None) -> tuple[float, ...]:
    model.eval()
    with torch.autocast(x.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        pred = model(x, graph).argmax(-1)
    return tuple(float((pred[m] == y[m]).float().mean()) if int(m.sum()) else float("nan") for m in masks)
