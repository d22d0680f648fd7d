"""The GNN section of docs/benchmarks.md (benchmarks/gnn.py's files), for benchmarks/summarize.py.

Targets (issue "GNN consumers"): epoch time (forward + backward, 2 layers) against PyG's fastest path on the same
GPU, >= 1.5x for GCN and >= 1.3x for GAT on graphs of 1M+ nnz, with the same loss curve within TF32 tolerance.
Rows of the newest day's files are pooled; where two files measured the same (graph, model, hidden, precision),
the newer one's row is kept (a later kernel or layer version).
"""
from __future__ import annotations

LOSS_GAP_TOL = 0.02  # relative gap of the loss curves that TF32 products (about 1e-3 per product) stay within

# The per-epoch budget of issue #33, established by reading the code and counted on the CPU path
# (tests/gnn/test_products.py): not a measurement, so it is text here, not read from a results file.
BUDGET = [
    "### GNN per-epoch fixed cost: what an epoch issues (issue #33)",
    "",
    "Read from the code and counted on the CPU (tests/gnn/test_products.py runs `gnn.gpu.GpuEngine`'s per-call "
    "logic on `SpmmPlan`'s CPU path and counts plans, bindings, slow-path calls, DLPack conversions, syncs and "
    "buffers per epoch; tests/gnn/test_gpu_layers.py counts the same on CUDA, and there with torch.profiler that "
    "steady epochs launch the same kernels and copy nothing to the host). 2-layer GCN, float32, a row permutation, "
    "A symmetric; the epoch is forward, loss, backward and the Adam step. Per SpMM product (4 per epoch: 2 forward, "
    "2 backward):",
    "",
    "| per product | before | after |",
    "|---|---|---|",
    "| plan call path | `plan.run(B)` without `out`: the slow path each call (B converted and checked, C allocated, "
    "the launch packed anew through CuPy's RawKernel call) | `PlanProduct`: the call bound once per (plan, N) by "
    "`SpmmPlan.bind`; re-pointed by `Call.set_io` (packed arguments rewritten) only when torch's allocator moved X "
    "or the output; bound launch or replayed CUDA graph (kernels.calls) |",
    "| kernel launches | the kernel(s) + 1 `index_copy_` (permutation) | the kernel(s) (or 1 graph launch) + 1 "
    "`index_select` (permutation) |",
    "| allocations | 1 CuPy pool (C) + 1 torch (output) | 1 torch (output); C is the product's, reused |",
    "| torch <-> CuPy | 2 DLPack conversions, a CuPy stream object made | 0 (non-owning CuPy views, kept per "
    "pointer; the stream object kept per torch stream) |",
    "| host syncs | 0 (1 on the first call per N, before autotune) | 0 (same) |",
    "",
    "| per epoch | before | after |",
    "|---|---|---|",
    "| SpmmPlan constructions | 0 (first epoch: 1 per layer, each layer its own `SparseOp`: 2 for A symmetric, 4 "
    "otherwise) | 0 (first epoch: 1 for the graph, 2 with A.T, the layers share one `SparseOp`) |",
    "| normalisation, A.T | 0 (built once per layer) | 0 (built once per graph) |",
    "| loss row selection (`gnn.models.fit`, both libraries) | `out[train]`, `y[train]` by boolean mask: 2 "
    "`nonzero` = 2 host syncs | `out[train_idx]` by an index made once: 0 syncs, the same rows and loss bitwise |",
    "| GAT logits factors | `ones_like` + 2 `cat`: 3 launches per layer | 2 `pad`: 2 launches per layer |",
    "| GAT cuSPARSE SpMM (8 per epoch) | values copied by a CuPy assignment, C from CuPy's pool, 3 DLPack each | "
    "values copied by torch's `copy_`, C torch's, 0 DLPack |",
    "| GAT SDDMM (4 per epoch) | `cupy.zeros` output (a fill launch), 3 DLPack each | torch zeros output (a fill), 0 "
    "DLPack |",
    "",
    "Left per product: the permutation gather (removing it needs each format's kernel to store row r at perm[r]).",
    "",
]


def fixed_cost_lines(runs, h) -> list[str]:
    """The budget, then the newest run's measured fixed cost (benchmarks/epoch_profile.py) when one has it."""
    run = next((r for r in runs if r.meta.get("fixed_cost")), None)
    if run is None:
        return BUDGET + ["Measured breakdown (benchmarks/gnn.py's fixed-cost table): not run yet.", ""]
    rows = run.meta["fixed_cost"]
    return BUDGET + [f"Measured on the smallest graph (`{run.path.name}`): synchronised epoch ms, host issue ms "
                     "(all phases), GPU ms per phase, counts from one profiled epoch.", ""] + h.table(
        ("graph", "model", "library", "epoch ms", "host ms", "GPU ms fwd / bwd / opt", "launches", "syncs",
         "allocations"),
        [(f"`{r['graph']}`", r["model"], r["library"], h.f(r["epoch_ms"], 3), h.f(r["host_total_ms"], 3),
          " / ".join(h.f((r.get("gpu_ms") or {}).get(p), 3) for p in ("forward", "backward", "optimizer")),
          r.get("launches", "–"), r.get("syncs", "–"), r.get("allocations", "–")) for r in rows]) + [""]


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
    graphed = any("ours_graph_ms" in r or "ours_graph_error" in r for r in rows)

    def captured(r, who):  # the median replayed epoch of a captured step, or why there is none
        return h.f(r.get(f"{who}_graph_ms"), 2) if r.get(f"{who}_graph_ms") else \
            ("not capturable" if r.get(f"{who}_graph_error") else "–")
    out += h.table(("graph", "nnz", "model", "hidden", "precision", "ours ms", "PyG ms", "speedup", "loss gap",
                    "test acc (ours / PyG)")
                   + (("ours ms, captured step", "PyG ms, captured step", "speedup, both captured") if graphed
                      else ()),
                   [(f"`{r['graph']}`", h.mnnz(r["nnz"]), r["model"], r["hidden"], r["precision"],
                     h.f(r.get("ours_ms"), 2), h.f(r.get("pyg_ms"), 2) if r.get("pyg_ms") else "failed",
                     h.f(r.get("speedup"), 2, "x") if r.get("speedup") else "–", h.f(r.get("loss_max_rel_gap"), 4),
                     f"{h.f(r.get('ours_test_acc'), 3)} / {h.f(r.get('pyg_test_acc'), 3)}")
                    + ((captured(r, "ours"), captured(r, "pyg"),
                        h.f(r.get("speedup_graph"), 2, "x") if r.get("speedup_graph") else "–") if graphed else ())
                    for r in rows])
    if graphed:
        out += ["Captured step (`benchmarks/gnn.py --cuda-graph`, `gnn.models.fit(cuda_graph=True)`): both libraries "
                "from the same starting weights, three eager epochs, then one training step captured into a CUDA "
                "graph and replayed per epoch; the median replayed epoch.", ""]
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
    return out + h.targets(targets) + h.older_note(older) + [h.reproduce("gnn", run), ""] + \
        fixed_cost_lines(runs, h)
