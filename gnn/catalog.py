"""The catalog's GNN training hook: the downstream job that ``flows/catalog.py --train-gnn`` runs on every matrix
of the catalog that stored node features and labels (IGB archives carry them), after the SpMM pipeline. A consumer
of the block store like the rest of ``gnn``, not a pipeline stage."""
from __future__ import annotations


def train_stored(matrix_id: str, data_root: str, *, epochs: int = 50) -> dict:
    """Train the 2-layer GCN and GAT of ``gnn.train`` on a stored matrix with node features and labels; returns
    {"rows": [...]} (epoch ms, accuracies; no loss curves) or {"skipped": why}."""
    from storage import BlockStore
    from storage.features import has_node_array, node_array_names

    mstore = BlockStore(data_root).matrix(matrix_id)
    labels = [n for n in node_array_names(mstore) if n.startswith("label")]
    if not (has_node_array(mstore, "feat") and labels):  # gnn.load picks label_19, else label, else the first
        return {"skipped": f"{matrix_id} has no stored node features and labels (IGB archives carry them)"}
    try:
        import torch
    except ImportError:
        return {"skipped": "torch is not installed (pip install -e '.[gnn]')"}
    from gnn.train import train

    rows = train(matrix_id, data_root, device="cuda" if torch.cuda.is_available() else "cpu", epochs=epochs)
    return {"rows": [{k: v for k, v in r.items() if k != "losses"} for r in rows]}
