"""GNN training benchmark on one GPU: tcspmm's GCNConv/GATConv (gnn/) against PyG's on the same graphs and weights.

    PYTHONPATH=. python3 benchmarks/gnn.py [--suite quick|full] [--epochs 50] [--hidden 128,256] [--half bfloat16]
                                           [--cuda-graph]

Graphs: seeded generators (tasks.fetch.generators: sbm with community labels, rmat with random labels) with seeded
features (a class mean plus noise, examples/train_gcn.py's recipe), rows reordered by TCA when that lowers the TC
block count (tasks.reorder.reorder_checked), the order the layers apply inside. Models: gnn.models' 2-layer GCN
and GAT (4 heads, attention dropout 0), hidden 128 and 256, Adam, full batch. PyG's fastest paths on the same
GPU: ``GCNConv(cached=True)`` on ``adj_t`` as a torch.sparse CSR tensor (torch_sparse's SparseTensor when it
imports), ``GATConv`` on ``edge_index``. Both start from the same weights (PyG's state dict loaded into ours) and
the same seed, so dropout masks match and the loss curves are comparable.

Timing: wall time of forward + backward + optimiser step per epoch, CUDA synchronised before and after; median of
epochs 2..E (epoch 1 builds plans and PyG's caches; reported apart). Correctness in the same run: the eval-mode
forward of both implementations on identical weights (relative Frobenius error, TF32 tolerance 1e-2) and the
largest relative gap between the two loss curves. JSON under benchmarks/results/ (device, versions, command, date,
every loss curve); with matplotlib, a PNG of the curves beside it. The table is printed last.

Captured steps (``--cuda-graph``): both libraries are also trained with ``gnn.models.fit(cuda_graph=True)`` from the
same starting weights: three eager epochs, then one training step (forward, loss, backward, Adam with
``capturable=True``) captured into a CUDA graph and replayed per epoch; "gr" columns: the median replayed epoch,
"x graph": PyG's over ours, both captured; where a library's step cannot be captured the row says why
(``*_graph_error``) and the eager columns still hold. The loss curve of our captured run is compared with our eager
run's (``graph_loss_max_rel_gap``).

Fixed cost (issue #33; off with ``--no-fixed-cost``): on the suite's smallest graph, each model at the first hidden
size in float32, ours and PyG's from the same weights are run in four phases (forward, loss, backward, optimizer)
by benchmarks/epoch_profile.py: host issue ms and GPU ms per phase (host timers, CUDA events), synchronised epoch
ms, and from one torch.profiler epoch the launch calls, host syncs, allocations and GPU kernels by category
(sparse product, transpose / format, normalisation, gather-scatter, cast-copy, other dense). Printed as a second
table before the main one, and written under "fixed_cost" in the JSON.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SUITES = {  # (label, generator kind, params); quick fits one ~5-minute device call with both implementations
    "smoke": [("sbm-20k", "sbm", "n=20000&blocks=10&deg_in=8&deg_out=2&seed=1")],
    "quick": [("sbm-200k", "sbm", "n=200000&blocks=40&deg_in=10&deg_out=2&seed=1"),
              ("rmat-s18", "rmat", "scale=18&edge_factor=8&seed=1")],
    "full": [("sbm-1M", "sbm", "n=1000000&blocks=100&deg_in=12&deg_out=2&seed=1"),
             ("rmat-s20", "rmat", "scale=20&edge_factor=8&seed=1"),
             ("sbm-200k", "sbm", "n=200000&blocks=40&deg_in=10&deg_out=2&seed=1")],
}
TOL_FORWARD = 1e-2  # TF32 products (10-bit mantissa) two layers deep, relative to the output's norm


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def make_case(kind: str, params: str, n_features: int, reorder: str):
    """(A, perm or None, features, labels, info) for one generated graph."""
    from tasks.fetch.generators import generate
    from tasks.reorder import reorder_checked

    spec = params + ("&shuffle=0" if kind == "sbm" else "")
    A = generate(kind, spec)
    n = A.shape[0]
    rng = np.random.default_rng(7)
    if kind == "sbm":
        sys.path.insert(0, str(REPO / "examples"))
        from train_gcn import sbm_node_data

        feats, labels = sbm_node_data(f"gen:sbm?{params}", n, n_features)
    else:  # no communities to learn: random labels, so only time and the curves' agreement mean anything
        labels = rng.integers(0, 16, n)
        feats = rng.standard_normal((n, n_features), dtype=np.float32)
    perm, info = None, {"reorder": "none"}
    if reorder != "none":
        t0 = time.perf_counter()
        p, before, after, ok = reorder_checked(A, reorder, seed=0)
        info = {"reorder": reorder if ok else f"{reorder} (not applied)", "reorder_s": time.perf_counter() - t0,
                "tc_blocks_before": int(before["n_tc_blocks"]), "tc_blocks_after": int(after["n_tc_blocks"])}
        perm = p if ok else None
    return A, perm, feats, labels, info


def pyg_parts(A, device):
    """PyG's layer classes and graph arguments: (gcn conv factory, gcn graph arg, gat conv factory, gat arg)."""
    import torch
    from torch_geometric.nn import GATConv, GCNConv

    import gnn

    g = gnn.Graph("bench", A)
    adj_t, how = gnn.to_torch_csr(g, device).to(torch.float32), "torch.sparse CSR adj_t"
    try:  # PyG's fastest GCN path when torch_sparse is installed
        from torch_sparse import SparseTensor

        adj_t = SparseTensor(rowptr=adj_t.crow_indices().long(), col=adj_t.col_indices().long(),
                             value=adj_t.values(), sparse_sizes=A.shape, is_sorted=True, trust_data=True)
        how = "torch_sparse SparseTensor adj_t"
    except ImportError:
        pass
    edge_index = torch.from_numpy(g.edge_index).to(device)
    return (lambda i, o: GCNConv(i, o, cached=True)), adj_t, GATConv, edge_index, how


def rel(a, b) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def graphed_ms(res: dict) -> float | None:
    """Median ms of the epochs that replayed a captured step (after the capture's epoch); None without a graph."""
    first = res.get("graph_from_epoch")
    replays = res["epoch_ms"][first:] if first else []
    return float(np.median(replays)) if replays else None


def bench_graphed(build_model, init: dict, x, y, graph, masks, epochs, autocast_dtype) -> dict:
    """fit(cuda_graph=True) of a fresh model from ``init`` (the eager run's starting weights): replayed-epoch ms,
    losses, and why not where the step could not be captured."""
    import torch

    from gnn.models import fit

    torch.manual_seed(0)
    model = build_model()
    model.load_state_dict(init)
    try:
        res = fit(model, x, y, graph, masks, epochs=epochs, autocast_dtype=autocast_dtype, cuda_graph=True)
    except RuntimeError as err:
        return {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
    return {"ms": graphed_ms(res), "losses": res["losses"], "error": res.get("graph_error")}


def bench_model(name, hidden, A, perm, x, y, masks, epochs, pyg, autocast_dtype, cuda_graph=False) -> dict:
    import copy

    import torch

    import gnn
    from gnn.models import GAT, GCN, fit

    n_classes = int(y.max()) + 1
    g = gnn.Graph("bench", A, perm=perm)
    build = (lambda conv: GCN(x.shape[1], hidden, n_classes, conv=conv)) if name == "gcn" else \
        (lambda conv: GAT(x.shape[1], hidden, n_classes, heads=4, conv=conv))
    torch.manual_seed(0)
    ours = build(gnn.GCNConv if name == "gcn" else gnn.GATConv).to(x.device)
    row = {"model": name, "hidden": hidden, "precision": str(autocast_dtype or "float32").replace("torch.", "")}
    theirs, arg = None, None
    if pyg is not None:
        gcn_conv, adj_t, gat_conv, edge_index, how = pyg
        theirs = build(gcn_conv if name == "gcn" else gat_conv).to(x.device)
        ours.load_state_dict(theirs.state_dict())  # same weights (strict: the parameter names match PyG's)
        arg = adj_t if name == "gcn" else edge_index
        row["pyg_path"] = how if name == "gcn" else "GATConv on edge_index"
        ours.eval()
        theirs.eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=autocast_dtype, enabled=autocast_dtype is not None):
            row["forward_rel_err"] = rel(ours(x, g).float(), theirs(x, arg).float())
        row["forward_ok"] = row["forward_rel_err"] < TOL_FORWARD * (3 if autocast_dtype else 1)
    init = {"ours": copy.deepcopy(ours.state_dict()),
            "theirs": copy.deepcopy(theirs.state_dict()) if theirs is not None else None}
    if cuda_graph:  # the same training with one captured step replayed per epoch, ours and PyG's
        conv = gnn.GCNConv if name == "gcn" else gnn.GATConv
        got = bench_graphed(lambda: build(conv).to(x.device), init["ours"], x, y, g, masks, epochs, autocast_dtype)
        row.update({"ours_graph_ms": got.get("ms"), "ours_graph_error": got.get("error"),
                    "ours_graph_losses": got.get("losses")})
        if theirs is not None:
            pconv = pyg[0] if name == "gcn" else pyg[2]
            got = bench_graphed(lambda: build(pconv).to(x.device), init["theirs"], x, y, arg, masks, epochs,
                                autocast_dtype)
            row.update({"pyg_graph_ms": got.get("ms"), "pyg_graph_error": got.get("error")})
            if row.get("ours_graph_ms") and row.get("pyg_graph_ms"):
                row["speedup_graph"] = row["pyg_graph_ms"] / row["ours_graph_ms"]
    res = fit(ours, x, y, g, masks, epochs=epochs, autocast_dtype=autocast_dtype)
    row.update({"ours_first_ms": res["epoch_ms"][0], "ours_ms": float(np.median(res["epoch_ms"][1:])),
                "ours_losses": res["losses"], "ours_test_acc": res["test_acc"]})
    if row.get("ours_graph_losses"):  # the captured step's losses against the eager run's (same start, same seed)
        row["graph_loss_max_rel_gap"] = float(max(abs(a - b) / max(abs(b), 1e-12)
                                                  for a, b in zip(row.pop("ours_graph_losses"), res["losses"])))
    if theirs is not None:
        try:
            res_p = fit(theirs, x, y, arg, masks, epochs=epochs, autocast_dtype=autocast_dtype)
        except RuntimeError as err:  # PyG's torch.sparse path has no half SpMM in cuSPARSE's backward (seen on H200)
            row["pyg_error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
            return row
        row.update({"pyg_first_ms": res_p["epoch_ms"][0], "pyg_ms": float(np.median(res_p["epoch_ms"][1:])),
                    "pyg_losses": res_p["losses"], "pyg_test_acc": res_p["test_acc"],
                    "speedup": float(np.median(res_p["epoch_ms"][1:]) / np.median(res["epoch_ms"][1:])),
                    "loss_max_rel_gap": float(max(abs(a - b) / max(abs(b), 1e-12)
                                                  for a, b in zip(res["losses"], res_p["losses"])))})
    return row


def fixed_cost(label, A, perm, x, y, masks, models, hidden, pyg, epochs) -> list[dict]:
    """benchmarks/epoch_profile.py's timings and counts of ours and PyG's (same weights) for each model."""
    import torch

    import gnn
    from gnn.models import GAT, GCN

    sys.path.insert(0, str(REPO / "benchmarks"))
    import epoch_profile as ep

    train_idx = torch.nonzero(masks[0].to(x.device)).flatten()
    y_train = y.to(x.device)[train_idx]
    n_classes = int(y.max()) + 1
    rows = []
    for name in models:
        build = (lambda conv: GCN(x.shape[1], hidden, n_classes, conv=conv)) if name == "gcn" else \
            (lambda conv: GAT(x.shape[1], hidden, n_classes, heads=4, conv=conv))
        libs = [("tcspmm", gnn.GCNConv if name == "gcn" else gnn.GATConv, gnn.Graph("bench", A, perm=perm))]
        if pyg is not None:
            gcn_conv, adj_t, gat_conv, edge_index, _how = pyg
            libs.append(("pyg", gcn_conv if name == "gcn" else gat_conv, adj_t if name == "gcn" else edge_index))
        torch.manual_seed(0)
        state = None
        for lib, conv, graph in libs[::-1]:  # PyG's first when present: its weights are loaded into ours
            torch.manual_seed(0)
            model = build(conv).to(x.device)
            if state is None:
                state = model.state_dict()
            else:
                model.load_state_dict(state)
            times = ep.phase_times(model, x, y_train, train_idx, graph, epochs=epochs)
            counts = ep.phase_counts(model, x, y_train, train_idx, graph)
            rows.append({"graph": label, "nnz": int(A.nnz), "model": name, "hidden": hidden, "library": lib,
                         **ep.summary(times, counts)})
            del model
            torch.cuda.empty_cache()
    return rows


def versions() -> dict:
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__}
    for mod in ("torch_geometric", "cupy", "scipy", "torch_sparse"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            out[mod] = None
    try:
        # the checkout's HEAD: uncommitted edits are not in it
        out["tcspmm_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                              text=True).stdout.strip() or None
    except OSError:
        out["tcspmm_commit"] = None
    return out


def table(rows) -> str:
    graphs = any("ours_graph_ms" in r or "ours_graph_error" in r for r in rows)
    head = (f"{'graph':10} {'nnz':>10} {'model':5} {'hid':>4} {'prec':8} {'ours ms':>8} {'pyg ms':>8} {'speedup':>7} "
            f"{'fwd err':>8} {'loss gap':>8} {'acc ours':>8} {'acc pyg':>8}")
    if graphs:
        head += f" {'ours gr':>8} {'pyg gr':>8} {'x graph':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        f = (lambda k, fmt: format(r[k], fmt) if r.get(k) is not None else "-")
        speedup = f"{r['speedup']:.2f}x" if r.get("speedup") else "-"
        line = (f"{r['graph']:10} {r['nnz']:>10} {r['model']:5} {r['hidden']:>4} {r['precision']:8} "
                f"{f('ours_ms', '8.2f'):>8} {f('pyg_ms', '8.2f'):>8} {speedup:>7} "
                f"{f('forward_rel_err', '8.1e'):>8} {f('loss_max_rel_gap', '8.1e'):>8} "
                f"{f('ours_test_acc', '8.3f'):>8} {f('pyg_test_acc', '8.3f'):>8}")
        if graphs:
            x_graph = f"{r['speedup_graph']:.2f}x" if r.get("speedup_graph") else "-"
            line += f" {f('ours_graph_ms', '8.2f'):>8} {f('pyg_graph_ms', '8.2f'):>8} {x_graph:>7}"
        lines.append(line)
    return "\n".join(lines)


def plot(rows, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    cols = min(4, len(rows))
    n_rows = -(-len(rows) // cols)
    fig, axes = plt.subplots(n_rows, cols, figsize=(3.2 * cols, 2.6 * n_rows), squeeze=False)
    for ax in axes.flat[len(rows):]:
        ax.axis("off")
    for ax, r in zip(axes.flat, rows):
        ax.plot(r["ours_losses"], label="tcspmm")
        if r.get("pyg_losses"):
            ax.plot(r["pyg_losses"], "--", label="PyG")
        ax.set_title(f"{r['graph']} {r['model']} h{r['hidden']} {r['precision']}", fontsize=8)
        ax.set_xlabel("epoch", fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", choices=sorted(SUITES), default="quick")
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--hidden", default="128,256")
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--models", default="gcn,gat")
    ap.add_argument("--reorder", default="tca")
    ap.add_argument("--half", default="", help="also time under autocast: float16 and/or bfloat16, comma-separated")
    ap.add_argument("--no-pyg", action="store_true", help="time ours only")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="also train ours and PyG's with one captured step replayed per epoch (gnn.models.fit "
                         "cuda_graph=True, from the same starting weights): columns ours gr / pyg gr / x graph")
    ap.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--no-fixed-cost", action="store_true",
                    help="skip the per-epoch fixed-cost breakdown on the smallest graph (benchmarks/epoch_profile.py)")
    ap.add_argument("--fixed-cost-epochs", type=int, default=20, help="timed epochs of the fixed-cost breakdown")
    args = ap.parse_args(argv)
    import torch

    from gnn.models import split_masks

    if not torch.cuda.is_available():
        print("error: benchmarks/gnn.py: needs a CUDA GPU visible to torch", file=sys.stderr)
        return 1
    device = torch.device("cuda")
    precisions = [None] + [getattr(torch, h) for h in args.half.split(",") if h]
    rows, smallest = [], None
    for label, kind, params in SUITES[args.suite]:
        log(f"{label}: generating and reordering")
        A, perm, feats, labels, info = make_case(kind, params, args.features, args.reorder)
        A = A.astype(np.float32)
        pyg = None
        if not args.no_pyg:
            try:
                pyg = pyg_parts(A, device)
            except ImportError as err:
                log(f"PyG does not import ({err}): timing ours only")
        x, y = torch.from_numpy(feats).to(device), torch.from_numpy(labels)
        masks = split_masks(A.shape[0], 0)
        for model in args.models.split(","):
            for hidden in (int(h) for h in args.hidden.split(",")):
                for prec in precisions:
                    log(f"{label}: {model} hidden={hidden} {prec or 'float32'}")
                    row = bench_model(model, hidden, A, perm, x, y, masks, args.epochs, pyg, prec,
                                      cuda_graph=args.cuda_graph)
                    rows.append({"graph": label, "generator": f"gen:{kind}?{params}", "nodes": A.shape[0],
                                 "nnz": int(A.nnz), **info, **row})
                    torch.cuda.empty_cache()
        if not args.no_fixed_cost and (smallest is None or A.nnz < smallest[1].nnz):
            smallest = (label, A, perm, x, y, masks, pyg)
    fixed = []
    if smallest is not None:
        log(f"{smallest[0]}: per-epoch fixed cost, ours and PyG's")
        fixed = fixed_cost(*smallest[:6], args.models.split(","), int(args.hidden.split(",")[0]), smallest[6],
                           args.fixed_cost_epochs)
    stamp = dt.datetime.now(dt.timezone.utc)
    dev_name = torch.cuda.get_device_name(0)
    slug = dev_name.lower().replace(" ", "-")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"gnn-{slug}-{stamp:%Y-%m-%d-%H%M%S}.json"
    try:
        sys.path.insert(0, str(REPO / "benchmarks"))
        from machine import cpu_model, gpu_clocks

        host = {"cpu": cpu_model(), "gpu_clocks": gpu_clocks()}
    except ImportError:
        host = {}
    doc = {"benchmark": "gnn", "date": stamp.isoformat(), "device": dev_name, "host": host, "versions": versions(),
           "command": " ".join([sys.executable, *sys.argv]), "epochs": args.epochs,
           "timing": "wall ms of forward + backward + Adam step per epoch, CUDA synchronised, median of epochs 2..E",
           "tolerance_forward": TOL_FORWARD, "rows": rows,
           "fixed_cost_method": "benchmarks/epoch_profile.py: host issue ms and CUDA-event GPU ms per phase, median "
                                "of --fixed-cost-epochs epochs; counts from one torch.profiler epoch",
           "fixed_cost": fixed}
    out.write_text(json.dumps(doc, indent=1))
    png = out.with_suffix(".png")
    log(f"wrote {out}" + (f" and {png}" if plot(rows, png) else ""))
    bad = [r for r in rows if r.get("forward_ok") is False]
    if fixed:
        import epoch_profile

        print("per-epoch fixed cost (host issue / GPU ms per phase; counts from one profiled epoch)")
        print(epoch_profile.table(fixed))
        print()
    print(table(rows))
    if bad:
        print(f"error: benchmarks/gnn.py: {len(bad)} rows disagree with PyG beyond tolerance", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
