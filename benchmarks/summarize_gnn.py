"""The GNN section of docs/benchmarks.md (benchmarks/gnn.py's files), for benchmarks/summarize.py.

Targets (issue "GNN consumers"): epoch time (forward + backward, 2 layers) against PyG's fastest path on the same
GPU, >= 1.5x for GCN and >= 1.3x for GAT on graphs of 1M+ nnz, with the same loss curve within TF32 tolerance.
Rows of the newest day's files are pooled; where two files measured the same (graph, model, hidden, precision),
the newer one's row is kept (a later kernel or layer version).
"""
from __future__ import annotations

LOSS_GAP_TOL = 0.02  # relative gap of the loss curves that TF32 products (about 1e-3 per product) stay within


def gnn_section(runs, v0, older, *, h) -> list[str]:
    title = "GNN layers: GCN and GAT epoch time against PyG"
    if not runs:
        return h.absent("gnn", title, [("GCN vs PyG, 1M+ nnz", ">= 1.5x"), ("GAT vs PyG, 1M+ nnz", ">= 1.3x")])
    run = runs[0]
    newest: dict = {}
    for r in run.rows:  # pooled in file order, oldest first: later rows replace earlier ones
        newest[(r["graph"], r["model"], r["hidden"], r["precision"])] = r
    rows = list(newest.values())
    out = [f"## {title}", ""] + h.env(run)
    out += ["Median epoch ms (forward + backward, 2 layers, after the first epoch) of our layers (`gnn.GCNConv` / "
            "`gnn.GATConv` on `SpmmPlan` and cuSPARSE SDDMM) and of PyG's (`GCNConv` on a cached normalised "
            "`torch.sparse` CSR adjacency, `GATConv` on `edge_index`) on the same GPU; loss gap = the largest "
            "relative difference of the two loss curves; test accuracy of ours / PyG's.", ""]
    out += h.table(("graph", "nnz", "model", "hidden", "precision", "ours ms", "PyG ms", "speedup", "loss gap",
                    "test acc (ours / PyG)"),
                   [(f"`{r['graph']}`", h.mnnz(r["nnz"]), r["model"], r["hidden"], r["precision"],
                     h.f(r.get("ours_ms"), 2), h.f(r.get("pyg_ms"), 2) if r.get("pyg_ms") else "failed",
                     h.f(r.get("speedup"), 2, "x") if r.get("speedup") else "–", h.f(r.get("loss_max_rel_gap"), 4),
                     f"{h.f(r.get('ours_test_acc'), 3)} / {h.f(r.get('pyg_test_acc'), 3)}") for r in rows])
    images = sorted(p for p in (runs[0].path.parent.glob("gnn-*.png")))
    out += [f"![loss curves, ours vs PyG: {p.stem}](../benchmarks/results/{p.name})" for p in images[-3:]] + [""]
    big = [r for r in rows if r["nnz"] >= 1_000_000 and r["precision"] == "float32" and r.get("speedup")]
    targets = []
    for model, thr in (("gcn", 1.5), ("gat", 1.3)):
        sp = [r["speedup"] for r in big if r["model"] == model]
        g = h.geo(sp)
        targets.append((f"{model.upper()} vs PyG, float32, 1M+ nnz (geomean; min)", f">= {thr}x",
                        f"{h.f(g, 2, 'x')}; {h.f(min(sp), 2, 'x')}" if sp else "–",
                        h.status(None if g is None else min(sp) >= thr)))
    gaps = [r["loss_max_rel_gap"] for r in rows if r["precision"] == "float32" and r.get("loss_max_rel_gap")]
    targets.append(("same loss curve (largest relative gap, float32)", f"<= {LOSS_GAP_TOL}",
                    h.f(max(gaps), 4) if gaps else "–", h.status(None if not gaps else max(gaps) <= LOSS_GAP_TOL)))
    return out + h.targets(targets) + h.older_note(older) + [h.reproduce("gnn", run), ""]
