"""Shared by the GNN tests: `adam_epochs`, full-batch training epochs without a host sync."""
from __future__ import annotations

import pytest


def epochs_of(model, x, y, graph, epochs: int, lr: float = 0.01) -> list:
    """``epochs`` Adam steps of cross-entropy on ``model(x, graph)``; the losses as detached tensors (reading
    them is the caller's choice: ``float()`` waits for the GPU)."""
    import torch
    from torch.nn import functional as F

    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(epochs):
        opt.zero_grad()
        loss = F.cross_entropy(model(x, graph), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses


@pytest.fixture
def adam_epochs():
    return epochs_of
