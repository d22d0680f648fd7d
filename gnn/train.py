"""Full-batch training of the 2-layer GCN and GAT on a stored matrix: what `examples/train_gcn.py` and the catalog
flow's ``train_gnn`` option run. Needs torch (the ``gnn`` extra) and the matrix's node arrays (``feat``, ``label``:
IGB archives carry them; `examples/train_gcn.py` stores seeded ones for a generated SBM)."""
from __future__ import annotations

import numpy as np

import gnn


def train(matrix_id: str, data_root, *, device: str = "cpu", epochs: int = 50, hidden: int = 64, heads: int = 4,
          models=("gcn", "gat"), seed: int = 0) -> list[dict]:
    """One row per model: median epoch ms after the first, the first epoch's ms, final loss, accuracies, losses."""
    import torch

    from gnn.models import GAT, GCN, fit, split_masks

    g = gnn.load(matrix_id, data_root)
    x = torch.from_numpy(g.x).to(device)
    y = torch.from_numpy(g.y)
    n_classes = int(g.y.max()) + 1
    masks = split_masks(g.num_nodes, seed)
    rows = []
    for name in models:
        torch.manual_seed(seed)
        model = (GCN(x.shape[1], hidden, n_classes) if name == "gcn"
                 else GAT(x.shape[1], hidden, n_classes, heads=heads)).to(device)
        res = fit(model, x, y, g, masks, epochs=epochs, seed=seed)
        steady = res["epoch_ms"][1:] or res["epoch_ms"]
        rows.append({"model": name, "matrix": matrix_id, "nodes": g.num_nodes, "edges": g.num_edges,
                     "perm": g.perm_key or "none", "device": device, "epochs": epochs,
                     "first_epoch_ms": res["epoch_ms"][0], "epoch_ms": float(np.median(steady)),
                     "final_loss": res["losses"][-1], "train_acc": res["train_acc"], "val_acc": res["val_acc"],
                     "test_acc": res["test_acc"], "losses": res["losses"]})
    return rows


def table(rows: list[dict]) -> str:
    head = f"{'model':5} {'matrix':28} {'nodes':>8} {'edges':>9} {'perm':18} {'1st ms':>8} {'epoch ms':>9} " \
           f"{'loss':>7} {'train':>6} {'val':>6} {'test':>6}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['model']:5} {r['matrix'][:28]:28} {r['nodes']:>8} {r['edges']:>9} {r['perm'][:18]:18} "
                     f"{r['first_epoch_ms']:>8.1f} {r['epoch_ms']:>9.2f} {r['final_loss']:>7.3f} "
                     f"{r['train_acc']:>6.3f} {r['val_acc']:>6.3f} {r['test_acc']:>6.3f}")
    return "\n".join(lines)
