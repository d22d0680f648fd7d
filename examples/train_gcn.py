"""Train a 2-layer GCN and a GAT on a matrix the pipeline stored, and report epoch time and accuracy.

    python examples/train_gcn.py --matrix igb:tiny                       # IGB with its features and labels
    python examples/train_gcn.py --matrix 'gen:sbm?n=20000&blocks=20&deg_in=12&deg_out=2&seed=1'
    python examples/train_gcn.py --matrix igb:small --device cuda --epochs 100 --reorder tca --stored-gcn

Steps (each reused when the store has it): ingest (tasks.stages: the CSR, and IGB's node_feat / node_label_19
as node arrays), for a generated SBM seeded features and labels (the community of each node, which the
generator's natural order gives: ``shuffle=0`` is forced) stored the same way, reorder and convert (the Tensor Core
row order, which the layers apply inside), optionally the stored GCN variant ``<id>.gcn``; then
``gnn.load`` and full-batch training of both models on seeded 60/20/20 splits. Prints one table, last.
"""
from __future__ import annotations

import argparse
import sys
import urllib.parse
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gnn.train import table, train  # noqa: E402
from storage import BlockStore  # noqa: E402
from storage.features import has_node_array, write_node_array  # noqa: E402


def sbm_spec(spec: str) -> str:
    """The SBM spec with ``shuffle=0`` (node i's community is known from its id)."""
    head, _, query = spec.partition("?")
    params = dict(urllib.parse.parse_qsl(query))
    params["shuffle"] = "0"
    return head + "?" + urllib.parse.urlencode(params)


def sbm_node_data(spec: str, n: int, n_features: int = 32, signal: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Labels = community (sizes as tasks.fetch.generators' sbm: n // blocks, the first n % blocks one larger);
    features = a seeded class mean (N(0, signal^2) per class) plus N(0, 1) noise."""
    params = dict(urllib.parse.parse_qsl(spec.partition("?")[2]))
    blocks, seed = int(params.get("blocks", 10)), int(params.get("seed", 0))
    sizes = np.full(blocks, n // blocks, dtype=np.int64)
    sizes[: n % blocks] += 1
    labels = np.repeat(np.arange(blocks, dtype=np.int64), sizes)
    rng = np.random.default_rng(seed + 1)
    means = rng.normal(0.0, signal, (blocks, n_features)).astype(np.float32)
    feats = means[labels] + rng.standard_normal((n, n_features), dtype=np.float32)
    return feats, labels


def prepare(spec: str, data_root: Path, *, reorder: str = "rcm", stored_gcn: bool = False) -> str:
    """Run the pipeline's stages for ``spec`` and return the matrix id to train on."""
    from tasks import stages
    from tasks.features import gcn_variant, ingest_node_data

    if spec.startswith("gen:sbm"):
        spec = sbm_spec(spec)
    ingested = stages.ingest(spec, str(data_root))
    mid = ingested["matrix_id"]
    mstore = BlockStore(data_root).matrix(mid)
    if spec.startswith("igb:"):
        from tasks.fetch import fetch

        ingest_node_data(fetch(spec, data_root), data_root, mid)  # reused when ingest stored them already
    elif spec.startswith("gen:sbm") and not has_node_array(mstore, "label"):
        feats, labels = sbm_node_data(spec, ingested["shape"][0])
        write_node_array(mstore, "feat", feats, {"generator": spec, "features": "class mean + N(0, 1), seed + 1"})
        write_node_array(mstore, "label", labels, {"generator": spec})
    if not has_node_array(mstore, "feat"):
        raise SystemExit(f"error: {spec}: no node features to train on (IGB archives and gen:sbm carry them)")
    if stored_gcn:
        mid = gcn_variant(mid, data_root)["matrix_id"]
    if reorder != "none":
        order = stages.reorder(mid, reorder, str(data_root))
        stages.convert(mid, order["perm_key"], str(data_root))
    return mid


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--matrix", default="gen:sbm?n=20000&blocks=20&deg_in=12&deg_out=2&seed=1")
    ap.add_argument("--data-root", type=Path, default=None, help="default: TCSPMM_DATA, else ./data")
    ap.add_argument("--device", default="auto", help="auto (cuda when torch sees a GPU), cpu, cuda, cuda:1")
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--models", default="gcn,gat")
    ap.add_argument("--reorder", default="rcm", help="a tasks.reorder method, auto, or none")
    ap.add_argument("--stored-gcn", action="store_true", help="train GCN on the stored <id>.gcn variant")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import torch

    from configs import data_root as resolve
    from configs.errors import InputError

    root = resolve(args.data_root)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    try:
        mid = prepare(args.matrix, root, reorder=args.reorder, stored_gcn=args.stored_gcn)
        rows = train(mid, root, device=device, epochs=args.epochs, hidden=args.hidden, heads=args.heads,
                     models=tuple(args.models.split(",")), seed=args.seed)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
