"""The GNN section of docs/benchmarks.md (benchmarks/gnn.py's files), for benchmarks/summarize.py, and the target math
and text tables benchmarks/gnn.py prints (shared, as benchmarks/summarize_sddmm.py is with sddmm.py).

Targets (issue #33): epoch time (forward + backward + Adam step, 2 layers, full batch, float32) of our GCN and GAT
against PyG's best path on the same GPU (the fastest of the PyG inputs timed for that graph and model: ``edge_index``,
a cached ``torch.sparse`` CSR ``adj_t``, torch_sparse's ``SparseTensor`` where it imports, and ``EdgeIndex``), over
graphs of 0.1-3M nnz: >= 1.5x geomean for each model, and no graph below 1.0x; and the same loss curve within TF32
tolerance. Each speedup is given twice: our eager epoch, and our epoch as ``gnn.models.fit`` trains by default on
CUDA (one captured step replayed: the ``--cuda-graph`` run's ``ours_graph_ms``), both against PyG's best eager path
(PyG's own captured step, where it captures, is in the table beside them). Rows of the newest day's files are
pooled; where two files measured the same (graph, model, hidden, precision), the newer one's row is kept (a later
kernel or layer version). Files from before the per-path timing
(one PyG path per model: ``pyg_ms`` and ``pyg_path``) render with that path as the only one.
"""
from __future__ import annotations

import json
import math

GRAPH_NNZ = (1e5, 3e6)  # issue #33: "graphs of 0.1-3M nnz"
SPEEDUP_GEOMEAN = 1.5  # each model, geomean over the graphs
SPEEDUP_FLOOR = 1.0  # each model, every graph
MODELS = ("gcn", "gat")
# PyG's inputs benchmarks/gnn.py times, short name -> what it is (the JSON's pyg_ms_by_path keys)
PYG_PATHS = {"edge_index": "edge_index (a [2, E] int64 tensor; GCNConv(cached=True) / GATConv as given)",
             "adj_t": "adj_t as a torch.sparse CSR tensor (GCNConv(cached=True): its normalised copy cached, then "
                      "torch.sparse.mm)",
             "SparseTensor": "adj_t as a torch_sparse SparseTensor (GCNConv(cached=True); only where torch_sparse "
                             "imports)",
             "EdgeIndex": "torch_geometric.EdgeIndex sorted by destination (sort_order='col') with its CSR/CSC cache "
                          "filled, as PyG's docs recommend; self loops added before sorting and the layer's "
                          "add_self_loops=False, so the sort survives the layer's normalisation (same math)"}


def pyg_times(r: dict) -> dict:
    """PyG's epoch ms per path of a row: ``pyg_ms_by_path``, or an older file's single ``pyg_ms`` under its
    ``pyg_path`` description."""
    if "pyg_ms_by_path" in r:
        return {k: v for k, v in r["pyg_ms_by_path"].items() if v is not None}
    return {r.get("pyg_path") or "PyG": r["pyg_ms"]} if r.get("pyg_ms") else {}


def best_path(times: dict) -> tuple[str | None, float | None]:
    """(the fastest path, its ms) among measured ones (positive, finite); (None, None) when none."""
    ok = {k: v for k, v in times.items() if isinstance(v, (int, float)) and math.isfinite(v) and v > 0}
    if not ok:
        return None, None
    name = min(ok, key=lambda k: (ok[k], k))
    return name, ok[name]


def pyg_best(r: dict) -> tuple:
    """(path, ms) of PyG's best path in a row: the recorded ones of the older files (one path per model), else the
    fastest of ``pyg_times``; (None, None) when none was measured."""
    path, ms = best_path(pyg_times(r))
    return r.get("pyg_path") or path, r.get("pyg_ms") or ms


def in_range(r: dict) -> bool:
    return GRAPH_NNZ[0] <= r["nnz"] <= GRAPH_NNZ[1]


def geo(xs):
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


# the two ways our epoch is timed: eager (``fit(cuda_graph=False)``) and as ``fit`` trains by default on CUDA (one
# captured step replayed per epoch: the --cuda-graph run's ``ours_graph_ms``); PyG's side is its best eager path
HOW = {"eager": "", "graph": " as fit() trains by default on CUDA (captured step)"}


def speedup_of(r: dict, how: str):
    """PyG's best path over ours: the recorded eager ``speedup``, or PyG's best eager ms over our captured epoch."""
    if how == "eager":
        return r.get("speedup")
    ms, best = r.get("ours_graph_ms"), pyg_best(r)[1]
    return best / ms if ms and best else None


def target_names(captured: bool = False) -> list[tuple[str, str]]:
    """The targets' (name, threshold); ``captured``: with the captured-step ones (a --cuda-graph run)."""
    out = []
    for how, text in HOW.items():
        if how == "graph" and not captured:
            continue
        for m in MODELS:
            out += [(f"{m.upper()}{text} vs PyG's best path, float32, graphs of 0.1-3M nnz: geomean",
                     f">= {SPEEDUP_GEOMEAN}x"),
                    (f"{m.upper()}{text} vs PyG's best path, float32, graphs of 0.1-3M nnz: min (none below)",
                     f">= {SPEEDUP_FLOOR}x")]
    return out + [("same loss curve as PyG's best path (largest relative gap, float32)", f"<= {LOSS_GAP_TOL}")]


def target_rows(rows: list) -> list[tuple]:
    """(target, threshold, measured, ok: True / False / None = not run) from rows (float32, 0.1-3M nnz counted)."""
    captured = any("ours_graph_ms" in r or "ours_graph_error" in r for r in rows)
    names = iter(target_names(captured))
    out = []
    for how in HOW if captured else ("eager",):
        for m in MODELS:
            mine = [r for r in rows if r["model"] == m and r.get("precision", "float32") == "float32" and in_range(r)]
            have = [(r, speedup_of(r, how)) for r in mine if speedup_of(r, how)]
            missing = sorted({r["graph"] for r in mine} - {r["graph"] for r, _ in have})
            gname, gthr = next(names)
            fname, fthr = next(names)
            if not have:
                out += [(gname, gthr, "–", None), (fname, fthr, "–", None)]
                continue
            g, (low, low_x) = geo([x for _, x in have]), min(have, key=lambda rx: rx[1])
            graphs = {r["graph"] for r, _ in have}
            over = f"{len(have)} graph{'s' * (len(have) > 1)}" if len(graphs) == len(have) else \
                f"{len(have)} (graph, hidden) rows"
            note = f"; no speedup for {', '.join(missing)}" if missing else ""
            out.append((gname, gthr, f"{g:.2f}x over {over}{note}", g >= SPEEDUP_GEOMEAN))
            below = [r for r, x in have if x < SPEEDUP_FLOOR]
            out.append((fname, fthr, f"{low_x:.2f}x ({low['graph']}); {len(below)} of {len(have)} below",
                        not below))
    name, thr = next(names)
    gaps = [(r["loss_max_rel_gap"], r["graph"], r["model"]) for r in rows
            if r.get("precision", "float32") == "float32" and r.get("loss_max_rel_gap") is not None]
    if not gaps:
        return out + [(name, thr, "–", None)]
    worst = max(gaps)
    return out + [(name, thr, f"{worst[0]:.4f} ({worst[1]} {worst[2]})", worst[0] <= LOSS_GAP_TOL)]


def fmt(v, p: int = 2, suffix: str = "") -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{p}f}{suffix}"


def per_graph(rows: list) -> list[dict]:
    """Issue #33's table, one entry per (graph, hidden, precision): nnz and, per model, ours ms, PyG's best ms and
    path, the speedup."""
    out: dict = {}
    for r in rows:
        key = (r["graph"], r["hidden"], r.get("precision", "float32"))
        e = out.setdefault(key, {"graph": r["graph"], "nnz": r["nnz"], "hidden": r["hidden"], "precision": key[2]})
        path, best = pyg_best(r)
        e[r["model"]] = {"ours_ms": r.get("ours_ms"), "pyg_ms": best, "pyg_path": path, "speedup": r.get("speedup"),
                         "floor_ms": r.get("floor_ms"), "ceiling": r.get("ceiling")}
    return list(out.values())


def ceiling_lines(rows: list) -> list[str]:
    """Per model, where the run timed the dense floor (``floor_ms``: the model with its sparse steps dropped), the
    ceiling of an eager speedup per graph (PyG's best / the floor), the graphs whose ceiling is below the geomean
    target and the ceilings' geomean: how much of a missed target no sparse kernel could make up eagerly."""
    out = []
    for m in MODELS:
        have = [r for r in rows if r["model"] == m and r.get("precision", "float32") == "float32" and in_range(r)
                and r.get("ceiling")]
        if not have:
            continue
        low = [r for r in have if r["ceiling"] < SPEEDUP_GEOMEAN]
        out.append(f"- {m.upper()} eager ceiling (PyG's best / the same model without its sparse steps, per graph): "
                   f"geomean {geo([r['ceiling'] for r in have]):.2f}x over {len(have)} graphs; below "
                   f"{SPEEDUP_GEOMEAN}x on {len(low)}"
                   + (": " + ", ".join(f"{r['graph']} {r['ceiling']:.2f}x (ours {r['speedup']:.2f}x)"
                                       if r.get("speedup") else f"{r['graph']} {r['ceiling']:.2f}x" for r in low)
                      if low else ""))
    return out + [""] if out else []


def summary_table(rows: list) -> list[str]:
    """Text of ``per_graph``: graph, nnz, then per model ours / PyG best (path) / speedup; (†): outside 0.1-3M."""
    head = f"{'graph':28} {'nnz':>9} {'hid':>4} {'prec':8}"
    for m in MODELS:
        head += f" {m + ' ours':>9} {m + ' pyg':>9} {'path':12} {'x':>6}"
    lines = [head, "-" * len(head)]
    entries = per_graph(rows)
    for e in entries:
        mark = "" if in_range(e) else " (†)"
        line = f"{(e['graph'] + mark)[:28]:28} {e['nnz']:>9} {e['hidden']:>4} {e['precision']:8}"
        for m in MODELS:
            c = e.get(m, {})
            line += (f" {fmt(c.get('ours_ms')):>9} {fmt(c.get('pyg_ms')):>9} {str(c.get('pyg_path') or '-')[:12]:12} "
                     f"{fmt(c.get('speedup'), 2, 'x'):>6}")
        lines.append(line)
    return lines + ["(†): outside the targets' 0.1-3M nnz: shown, not counted"] * any(
        not in_range(e) for e in entries)


def target_lines(rows: list) -> list[str]:
    """The targets as a text table (benchmarks/gnn.py prints it last)."""
    got = [(n, thr, m, "not run" if ok is None else "met" if ok else "MISSED") for n, thr, m, ok in target_rows(rows)]
    w = [max(len(str(c[i])) for c in got) for i in range(3)]
    head = f"{'target':{w[0]}}  {'threshold':{w[1]}}  {'measured':{w[2]}}  status"
    return ["targets (issue #33)", head, "-" * len(head)] + [f"{n:{w[0]}}  {t:{w[1]}}  {m:{w[2]}}  {ok}"
                                                              for n, t, m, ok in got]


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
    "| kernel launches | the kernel(s) + 1 `index_copy_` (permutation) | the kernel(s) and the permutation's row "
    "gather (kernels/cuda/gather_rows.cu), bound together (kernels.calls.gathered): 1 graph launch; until "
    "2026-11-28 torch's `index_select` after it, 15-50 us of host time per product on the H200 |",
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
    "| GCN layer's autograd nodes | 4 (the Linear's transpose and mm, the product, the bias add) | 1 "
    "(`gnn.linear_spmm`, the same bits; since 2026-11-29; in-process A/B 0.95-1.10x: no gain measured) |",
    "| loss row selection (`gnn.models.fit`, both libraries) | `out[train]`, `y[train]` by boolean mask: 2 "
    "`nonzero` = 2 host syncs | `out[train_idx]` by an index made once: 0 syncs, the same rows and loss bitwise |",
    "| GAT logits and softmax (2 layers) | `ones_like` + 2 `cat`, then edge_sum, leaky_relu and a torch-op softmax: "
    "~8 ops forward and ~15 backward per layer (index_add with atomics) | `gnn.edge_attention`: 1 kernel forward "
    "and 2 backward per layer (kernels/cuda/edge.cu, fixed-order sums; since 2026-11-29) |",
    "| GAT SpMM with the attention values (4 per epoch, 2 transposed) | cuSPARSE: values copied into its CSR by a "
    "CuPy assignment (the transposed ones gathered first), C from CuPy's pool, 3 DLPack each; then torch's `copy_` "
    "and a bound call | 1 kernels.edge launch, the values read in place (through A.T's order for the transpose), "
    "rows of over 128 edges split and summed in a second launch: the same bits each call |",
    "| GAT SDDMM (2 per epoch) | cuSPARSE: `cupy.zeros` output (a fill launch), 3 DLPack each; then a torch zeros "
    "output | 1 kernels.edge launch (a thread per edge, since 2026-11-29 no warp per row), no fill |",
    "| GAT heads | H copies of the graph on the diagonal of `kron(I_H, A + I)`, the features transposed to "
    "head-major order and back (a copy each way, both passes) | A + I itself: [nnz, H] weights on the Linear's "
    "node-major [N, H C] output (since 2026-11-29) |",
    "",
    "Left per product: 12.4 us of host time per `SparseOp.matmul` in a synchronised loop on the H200 (23.1 us "
    "before 2026-11-28's lean path: torch's raw stream pointer and a CuPy scope kept per stream instead of a "
    "`torch.cuda.Stream` object and a generator context, X taken as is when already in the plan's dtype and "
    "contiguous; 41-42 us before the gather was bound in), 3-4x that inside an eager epoch, where caches are cold; "
    "the autograd Function's own cost comes on top (the backward no longer enters an autocast context when the "
    "forward had none). The old and new paths interleaved in one process (rmat-s13, H200): eager GCN epoch 2.46 -> "
    "2.25 ms, the dense floor 1.76 ms. An eager epoch of a 2-layer GCN launches 44 kernels of ours and 56 of PyG's "
    "(igb-tiny, H200, the table below); below ~0.5M nnz the host's issue time is the epoch in both, which "
    "`gnn.models.fit` removes by replaying the whole training step as one CUDA graph. GAT's per-edge steps as "
    "kernels.edge launches (2026-11-29), against the composed torch ops and cuSPARSE in one process (H200, rounds "
    "interleaved): eager GAT epoch 1.26x faster on rmat-s13, 1.24x on email-Enron, 1.25x on rmat-s16, 1.29x on "
    "rmat-s17 (losses within 2.6e-7 of the old path's); 84 launches an epoch on igb-tiny where it was 136.",
    "",
]


def fixed_cost_lines(runs, h) -> list[str]:
    """The budget, then the newest measured fixed cost (benchmarks/epoch_profile.py) of any gnn-*.json in the
    results folder, on whatever GPU it ran (named): the breakdown is per library on one machine, not a comparison
    across machines, so an H200 run's shows beside the reference GPU's tables."""
    found = []
    for path in (runs[0].path.parent.glob("gnn-*.json") if runs else []):
        doc = json.loads(path.read_text())
        if doc.get("fixed_cost"):
            found.append((doc.get("date", ""), path.name, doc))
    if not found:
        return BUDGET + ["Measured breakdown (benchmarks/gnn.py's fixed-cost table): not run yet.", ""]
    _, name, doc = max(found)
    rows = doc["fixed_cost"]
    return BUDGET + [f"Measured on the smallest graph of the run (`{name}`, {doc.get('device', '?')}): synchronised "
                     "epoch ms, host issue ms (all phases), host / GPU ms per phase, launch calls, host syncs and "
                     "device allocations of one profiled epoch (every thread's, from the profiler's trace), its "
                     "kernels by category. `dense` (where measured): the same model with each layer's sparse step "
                     "dropped, the work every library's eager epoch issues.", ""] + h.table(
        ("graph", "model", "library", "epoch ms", "host ms", "host / GPU ms fwd", "host / GPU ms bwd",
         "host / GPU ms opt", "launches", "syncs", "allocations", "kernels"),
        [(f"`{r['graph']}`", r["model"], r["library"], h.f(r["epoch_ms"], 3), h.f(r["host_total_ms"], 3),
          *(f"{h.f((r.get('host_ms') or {}).get(p), 2)} / {h.f((r.get('gpu_ms') or {}).get(p), 2)}"
            for p in ("forward", "backward", "optimizer")),
          r.get("launches", "–"), r.get("syncs", "–"), r.get("allocations", "–"),
          ", ".join(f"{k} {v}" for k, v in sorted((r.get("kernels") or {}).items())) or "–") for r in rows]) + [""] \
        + eager_bound_lines(rows, h)


def eager_bound_lines(rows: list[dict], h) -> list[str]:
    """Per model with a "dense" row (the model without its sparse steps): PyG's eager epoch over that floor, the
    most any library's eager epoch could gain over PyG on that graph, beside ours."""
    by = {(r["model"], r["library"]): r for r in rows}
    lines = []
    for model in dict.fromkeys(r["model"] for r in rows):
        dense, pyg, ours = (by.get((model, lib)) for lib in ("dense", "pyg", "tcspmm"))
        if dense and pyg and dense.get("epoch_ms"):
            lines.append(f"- {model} on `{dense['graph']}`: the dense floor (the same model without its sparse "
                         f"steps) {h.f(dense['epoch_ms'], 3)} ms an epoch, PyG {h.f(pyg['epoch_ms'], 3)} ms: no "
                         f"eager epoch can beat PyG by more than **{h.f(pyg['epoch_ms'] / dense['epoch_ms'], 2)}x** "
                         "there" + (f" (ours {h.f(ours['epoch_ms'], 3)} ms, "
                                    f"{h.f(pyg['epoch_ms'] / ours['epoch_ms'], 2)}x)" if ours else "") + ".")
    return lines + [""] if lines else []


def path_cell(r: dict, h) -> str:
    """Every PyG path's ms of a row (the best one in bold), and the paths that raised, by name."""
    times, errors = pyg_times(r), r.get("pyg_errors") or {}
    best, _ = best_path(times)
    cells = [f"**{k} {h.f(v, 2)}**" if k == best and len(times) + len(errors) > 1 else f"{k} {h.f(v, 2)}"
             for k, v in times.items()]
    return "; ".join(cells + [f"{k} failed" for k in errors]) or ("failed" if r.get("pyg_error") else "–")


def gnn_section(runs, v0, older, *, h) -> list[str]:
    title = "GNN layers: GCN and GAT epoch time against PyG"
    if not runs:
        return h.absent("gnn", title, target_names())
    run = runs[0]
    newest: dict = {}
    for r in run.rows:  # pooled in file order, oldest first: later rows replace earlier ones
        newest[(r["graph"], r["model"], r["hidden"], r["precision"])] = r
    rows = list(newest.values())
    out = h.opening(
        title, run,
        "Median epoch ms (forward + backward + Adam step, 2 layers, full batch, after the first epoch) of our "
        "layers (`gnn.GCNConv` on `SpmmPlan`, `gnn.GATConv` on kernels.edge's attention, SpMM and SDDMM) and of "
        "PyG's on the same GPU, from the same weights and seed. PyG is timed on each of its inputs "
        "(\"PyG ms per path\"; older files timed one per model) and its fastest is the baseline (\"PyG best\", "
        "\"path used\"): "
        + "; ".join(f"`{k}`: {v}" for k, v in PYG_PATHS.items())
        + ". Speedup = PyG best / ours; loss gap = the largest relative difference of our loss curve and PyG's "
        "best path's; test accuracy of ours / PyG's best path.")
    graphed = any("ours_graph_ms" in r or "ours_graph_error" in r for r in rows)

    def captured(r, who):  # the median replayed epoch of a captured step, or why there is none
        return h.f(r.get(f"{who}_graph_ms"), 2) if r.get(f"{who}_graph_ms") else \
            ("not capturable" if r.get(f"{who}_graph_error") else "–")

    def ours(r):
        return h.f(r.get("ours_ms"), 2) if r.get("ours_ms") else ("failed" if r.get("ours_error") else "–")

    def best(r):
        path, ms = pyg_best(r)
        return (h.f(ms, 2) if ms else "failed"), (path or "–")

    out += h.table(("graph", "nnz", "model", "hidden", "precision", "ours ms", "PyG best ms", "path used",
                    "speedup", "PyG ms per path", "loss gap", "test acc (ours / PyG)")
                   + (("ours ms, captured step", "PyG ms, captured step", "speedup, both captured") if graphed
                      else ()),
                   [(f"`{r['graph']}`" + ("" if in_range(r) else " (†)"), h.mnnz(r["nnz"]), r["model"], r["hidden"],
                     r["precision"], ours(r), *best(r), h.f(r.get("speedup"), 2, "x") if r.get("speedup") else "–",
                     path_cell(r, h), h.f(r.get("loss_max_rel_gap"), 4),
                     f"{h.f(r.get('ours_test_acc'), 3)} / {h.f(r.get('pyg_test_acc'), 3)}")
                    + ((captured(r, "ours"), captured(r, "pyg"),
                        h.f(r.get("speedup_graph"), 2, "x") if r.get("speedup_graph") else "–") if graphed else ())
                    for r in rows])
    if any(not in_range(r) for r in rows):
        out += ["(†): a graph outside the targets' 0.1-3M nnz: shown, not counted.", ""]
    errors = [f"- `{r['graph']}` {r['model']} h{r['hidden']} {r['precision']}: {who} {msg}" for r in rows
              for who, msg in ([("the row", r["error"])] if r.get("error") else [])
              + ([("ours", r["ours_error"])] if r.get("ours_error") else [])
              + [(f"PyG `{k}`", v) for k, v in (r.get("pyg_errors") or {}).items()]
              + ([("PyG", r["pyg_error"])] if r.get("pyg_error") else [])]
    if errors:
        out += ["Raised (recorded, the run went on):", "", *errors, ""]
    if graphed:
        out += ["Captured step (`benchmarks/gnn.py --cuda-graph`, `gnn.models.fit(cuda_graph=True)`): both libraries "
                "from the same starting weights (PyG on its best eager path), three eager epochs, then one training "
                "step captured into a CUDA graph and replayed per epoch; the median replayed epoch.", ""]
    summary = [e for e in per_graph(rows) if e["precision"] == "float32"]
    if summary:
        out += ["Per graph (issue #33's table, float32): ours / PyG's best ms (path) and the speedup per model.", ""]
        out += per_graph_table(summary, h)
    out += ["Skipped: " + "; ".join(run.meta["skipped"]), ""] if run.meta.get("skipped") else []
    summarized = {name.removesuffix(".json") for name in run.meta.get("files") or [run.path.name]}
    images = sorted(p for p in run.path.parent.glob("gnn-*.png") if p.stem in summarized)  # this run's curves
    out += [f"![loss curves, ours vs PyG: {p.stem}](../benchmarks/results/{p.name})" for p in images] + [""]
    targets = [(n, thr, got, h.status(ok)) for n, thr, got, ok in target_rows(rows)]
    return out + h.targets(targets) + ceiling_lines(rows) + h.older_note(older) + [h.reproduce("gnn", run), ""] + \
        other_gpu_lines(run, older, h) + fixed_cost_lines(runs, h)


def per_graph_table(entries: list[dict], h, *, hidden: bool = True) -> list[str]:
    """``per_graph`` entries as a markdown table: graph, nnz (and hidden), per model ours / PyG's best ms (path),
    then the speedups, and where the run timed the dense floor, each model's floor ms and ceiling."""
    floors = any(e[m].get("floor_ms") for e in entries for m in MODELS if m in e)
    return h.table(("graph", "nnz", *(("hidden",) if hidden else ()),
                    *(f"{m.upper()} ours / PyG best ms (path)" for m in MODELS),
                    *(f"{m.upper()} speedup" for m in MODELS),
                    *((f"{m.upper()} floor ms (ceiling)" for m in MODELS) if floors else ())),
                   [(f"`{e['graph']}`" + ("" if in_range(e) else " (†)"), h.mnnz(e["nnz"]),
                     *((e["hidden"],) if hidden else ()),
                     *(f"{h.f(e[m]['ours_ms'], 2)} / {h.f(e[m]['pyg_ms'], 2)} ({e[m]['pyg_path'] or '–'})"
                       if m in e else "–" for m in MODELS),
                     *(h.f(e[m]["speedup"], 2, "x") if m in e and e[m]["speedup"] else "–" for m in MODELS),
                     *((f"{h.f(e[m]['floor_ms'], 2)} ({h.f(e[m]['ceiling'], 2, 'x')})"
                        if m in e and e[m].get("floor_ms") else "–" for m in MODELS) if floors else ()))
                    for e in entries])


def other_gpu_lines(run, older, h, keep: int = 2) -> list[str]:
    """The ``keep`` newest float32 suite runs among the files not summarized (``older``: `pick`'s, -vN files left
    out) on a GPU model other than the summarized run's (a lent H200 beside the H100 reference): per graph ours /
    PyG's best and the speedup, and the targets, each run as measured (no pooling across runs: the epochs of small
    graphs move by several percent between runs)."""
    model = h.gpu_model(run)
    found = [other for other in (h.load(run.path.parent / name) for name in older)
             if h.gpu_model(other) != model and any(r.get("precision") == "float32" for r in other.rows)]
    found.sort(key=lambda r: (r.date, r.path.name), reverse=True)
    if not found:
        return []
    out = [f"### The newest runs on another GPU ({h.gpu_model(found[0])})", "",
           "Each run as measured, float32; the tables above stay on the reference GPU's runs.", ""]
    for other in found[:keep]:
        rows = [r for r in other.rows if r.get("precision") == "float32"]
        rounds = int(other.meta.get("rounds") or 1)
        out += [f"`{other.path.name}` ({other.meta.get('date', '?')}, `{other.meta.get('command', '?')}`"
                + (f"; each epoch time the fastest of {rounds} rounds, trained in alternating order" if rounds > 1
                   else "") + "):", ""]
        out += per_graph_table(per_graph(rows), h, hidden=False)
        out += h.targets([(n, thr, got, h.status(ok)) for n, thr, got, ok in target_rows(rows)])
        out += ceiling_lines(rows)
    return out
