"""GNN training benchmark on one GPU: tcspmm's GCNConv/GATConv (gnn/) against PyG's best path on the same graphs and
weights (issue #33's table). This script picks the graphs, runs them and writes and prints the results; one graph's
epochs, ours and PyG's per path, are timed by benchmarks/gnn_epochs.py.

    PYTHONPATH=. python3 benchmarks/gnn.py [--suite graphs|smoke|quick|full] [--graphs LABEL ...] [--epochs E]
                                           [--hidden 128,256] [--half bfloat16] [--cuda-graph] [--budget-s 420]

Suites. ``graphs`` (the default; issue #33's table, 30 epochs, hidden 128): the graphs of 0.1-3M nnz that
benchmarks/graph_suite.py builds for the benchmarks (R-MAT power-law digraphs of scale 13, 16 and 17, a 2D 5-point
mesh in grid order, an SBM of 100 communities with shuffled labels, the SNAP/email-Enron SuiteSparse fixture, the
IGB tiny fixture archive), with R-MAT scale 15, a 3D 27-point mesh with shuffled numbering and an SBM of 40
communities in community order added here, and IGB small (full batch, about 12M nnz) last when its edge list is
found (graph_suite.igb_small_path: TCSPMM_IGB_SMALL, the fixtures folders, $TCSPMM_DATA; otherwise skipped with the
places looked at); a fixture not found is skipped with a note. ``smoke`` / ``quick`` / ``full``: generated SBMs
(community order) and R-MAT graphs of 0.2M to 12M nnz, 50 epochs, hidden 128 and 256. Every graph is its pattern
with unit values and without self loops (each layer adds its own: GCN's A + I, GAT's loops), features seeded: an
SBM in community order gets a class mean plus noise with its community labels (examples/train_gcn.py's recipe),
every other graph N(0, 1) features and 16 random labels (only time and the curves' agreement mean anything there).
Rows are reordered by TCA when that lowers the TC block count (tasks.reorder.reorder_checked), the order our layers
apply inside. Models: gnn.models' 2-layer GCN and GAT (4 heads, attention dropout 0), Adam, full batch.

PyG's best path. Each model is timed on each PyG input (benchmarks/summarize_gnn.py's PYG_PATHS): GCNConv(cached=True)
on ``edge_index``, on ``adj_t`` as a torch.sparse CSR tensor, on torch_sparse's ``SparseTensor`` where torch_sparse
imports, and on ``torch_geometric.EdgeIndex`` sorted by destination (``sort_order="col"``, CSR/CSC cache filled, self
loops added before sorting and ``add_self_loops=False`` so that the sort survives normalisation: the same operator);
GATConv on ``edge_index`` and on that ``EdgeIndex``. The fastest is the baseline (``pyg_ms``, ``pyg_path``; every
path's ms in ``pyg_ms_by_path``). Every library and path starts from the same weights (PyG's, loaded into ours) and
seed, so dropout masks match and the loss curves are comparable.

Isolation: every measurement (our model, each PyG path, a graph's preparation, the fixed-cost breakdown) is guarded:
one that raises (torch.OutOfMemoryError included, a RuntimeError subclass) is recorded with its one-line error
(``ours_error``, ``pyg_errors[path]``, ``failures``) and the run goes on, after Python's, torch's and CuPy's cached
memory is released. The JSON is rewritten after each row and each graph, so a run cut by a time limit keeps what it
measured; no new graph is started after --budget-s seconds.

Timing: wall time of forward + backward + optimiser step per epoch, CUDA synchronised before and after; median of
epochs 2..E (epoch 1 builds plans and PyG's caches; reported apart); with ``--rounds R`` each of ours, the floor and
PyG's paths is trained R times from the same weights in alternating order (so that the host's drift hits them alike)
and reports its fastest round (``*_rounds``: each round's; ``*_repeat_gap``: a later round's loss curve against the
first's). Correctness in the same run: the eval-mode forward of ours and of every PyG path on identical weights
(relative Frobenius error, TF32 tolerance 1e-2; beyond it the run exits 1) and the largest relative gap between our
loss curve and each path's. JSON under benchmarks/results/ (device, versions, command, date, graphs, skips,
failures, targets, the best path's loss curves); with matplotlib, a PNG of the curves beside it. Printed last: the
rows, issue #33's per-graph table (ours, PyG's best and its path, the speedup per model), and the targets (>= 1.5x
geomean over the graphs of 0.1-3M nnz per model, none below 1.0x; benchmarks/summarize_gnn.py) as the last table.

Captured steps (``--cuda-graph``): both libraries are also trained with ``gnn.models.fit(cuda_graph=True)`` from the
same starting weights (PyG on its best eager path): three eager epochs, then one training step (forward, loss,
backward, Adam with ``capturable=True``) captured into a CUDA graph and replayed per epoch; "gr" columns: the median
replayed epoch, "x graph": PyG's over ours, both captured; where a library's step cannot be captured the row says
why (``*_graph_error``) and the eager columns still hold. The loss curve of our captured run is compared with our
eager run's (``graph_loss_max_rel_gap``).

Fixed cost (issue #33; off with ``--no-fixed-cost``): on the smallest graph run, each model at the first hidden size
in float32, ours and PyG's (its best path there) from the same weights are run in four phases (forward, loss,
backward, optimizer) by benchmarks/epoch_profile.py: host issue ms and GPU ms per phase (host timers, CUDA events),
synchronised epoch ms, and from one torch.profiler epoch the launch calls, host syncs, allocations and GPU kernels by
category; and the same model with each layer's sparse step dropped ("dense": its linear maps and biases, dropout,
activations, loss and Adam only), whose epoch is the floor of any library's eager epoch: PyG's epoch over it bounds
the speedup an eager epoch of ours could reach there. Printed as a table before the main one, and written under
"fixed_cost" in the JSON.

Floor per graph (every row): the same model with its sparse steps dropped, trained eagerly from the same seed as
ours (``floor_ms``, median epoch), and ``ceiling`` = PyG's best ms / floor_ms, the most any library's eager epoch of
that model could beat PyG's best by on that graph: where it is below a target, no sparse kernel can meet it eagerly.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import importlib.util
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # benchmarks/ after the repository: this file's name would shadow the gnn package
    sys.path.append(HERE)

import graph_suite  # noqa: E402  (benchmarks/graph_suite.py: the graphs of 0.1-3M nnz, shared with sddmm.py)
from graph_suite import Skipped, log, run_cases  # noqa: E402  (the case loop sddmm.py runs too)
from machine import slug  # noqa: E402  (benchmarks/machine.py: the results files' device slug)
from summarize_gnn import PYG_PATHS, ceiling_lines, summary_table, target_lines, target_rows  # noqa: E402
from gnn_epochs import PATHS, TOL_FORWARD, PygInputs, attempt, bench_model, fixed_cost, free_memory  # noqa: E402


# (label, source): a graph_suite source; ("gen", kind, params without seed/shuffle, shuffle); seed 1 throughout
SUITES = {
    "smoke": [("sbm-20k", ("gen", "sbm", "n=20000&blocks=10&deg_in=8&deg_out=2", 0))],
    "quick": [("sbm-200k", ("gen", "sbm", "n=200000&blocks=40&deg_in=10&deg_out=2", 0)),
              ("rmat-s18", ("gen", "rmat", "scale=18&edge_factor=8", 1))],
    "full": [("sbm-1M", ("gen", "sbm", "n=1000000&blocks=100&deg_in=12&deg_out=2", 0)),
             ("rmat-s20", ("gen", "rmat", "scale=20&edge_factor=8", 1)),
             ("sbm-200k", ("gen", "sbm", "n=200000&blocks=40&deg_in=10&deg_out=2", 0))],
}
# the graphs suite: graph_suite's graphs, these added, in this order (small first: a budget stop keeps the most)
GRAPH_EXTRA = (("rmat-s15", "rmat", "scale=15&edge_factor=16", 1),
               ("mesh3d-40", "mesh", "nx=40&ny=40&nz=40&stencil=27", 1),
               ("sbm-200k", "sbm", "n=200000&blocks=40&deg_in=10&deg_out=2", 0))
GRAPH_ORDER = ("rmat-s13", "igb-tiny", "fixture:SNAP/email-Enron", "rmat-s15", "mesh2d-400", "rmat-s16", "mesh3d-40",
               "sbm-100k", "rmat-s17", "sbm-200k", "igb-small")
SUITE_DEFAULTS = {"graphs": {"epochs": 30, "hidden": "128"}}
DEFAULTS = {"epochs": 50, "hidden": "128,256"}
TIMING = "wall ms of forward + backward + Adam step per epoch, CUDA synchronised, median of epochs 2..E"




# ------------------------------------------------------------------------------------------------ graphs

def suite_cases(suite: str) -> list[dict]:
    """``{"label", "source"}`` per graph of a suite, in run order."""
    if suite != "graphs":
        return [{"label": lab, "source": src} for lab, src in SUITES[suite]]
    cases = {c["label"]: c for c in graph_suite.graph_cases(GRAPH_EXTRA)}
    cases["igb-small"] = {"label": "igb-small", "source": ("igb-small",)}
    return [{"label": lab, "source": cases[lab]["source"]} for lab in GRAPH_ORDER]


def unit_loopless(A) -> sp.csr_array:
    """``A``'s pattern with unit float32 values, self loops removed (every layer adds its own), canonical CSR."""
    return graph_suite.unit_pattern(A, drop_loops=True)


def prepare(A, sbm_spec: str | None, n_features: int, reorder: str):
    """(A, perm or None, features, labels, info): seeded node data (community labels for an SBM in community
    order, ``sbm_spec`` its ``gen:sbm?...`` spec) and the TCA row order when it lowers the TC block count."""
    from tasks.reorder import reorder_checked

    n = A.shape[0]
    rng = np.random.default_rng(7)
    if sbm_spec:
        if str(REPO / "examples") not in sys.path:
            sys.path.append(str(REPO / "examples"))
        from train_gcn import sbm_node_data

        feats, labels = sbm_node_data(sbm_spec, n, n_features)
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


def make_case(kind: str, params: str, n_features: int, reorder: str):
    """A generated graph from its parameters (their seed included; an SBM in community order)."""
    from tasks.fetch.generators import generate

    A = unit_loopless(generate(kind, params + ("&shuffle=0" if kind == "sbm" else "")))
    return prepare(A, f"gen:sbm?{params}" if kind == "sbm" else None, n_features, reorder)


def load_case(source, n_features: int, reorder: str):
    """``prepare`` of a graph_suite source, or None when its data is absent."""
    A = graph_suite.build(source, drop_loops=True)  # self loops removed: every layer adds its own
    if A is None:
        return None
    sbm = source[0] == "gen" and source[1] == "sbm" and not int(source[3])
    return prepare(A, graph_suite.generator_spec(source) if sbm else None, n_features, reorder)


def absent_reason(source) -> str:
    if source[0] == "igb-small":
        return f"no IGB small edge list (looked in {graph_suite.igb_small_path()[1]})"
    return "fixture absent (looked in TCSPMM_FIXTURES, .fixtures, ../shared/fixtures)"




# ------------------------------------------------------------------------------------------------ the run

def run_graph(case: dict, args, device, precisions, on_row=lambda row: None) -> dict:
    """Every (model, hidden, precision) row of one graph (each handed to ``on_row`` as it is made); returns the
    graph's info and its tensors (for the fixed-cost breakdown). Raises Skipped when its data is absent."""
    import torch

    from gnn.models import split_masks

    label = case["label"]
    log(f"{label}: building, node data, reordering")
    t0 = time.perf_counter()
    got = load_case(case["source"], args.features, args.reorder)
    if got is None:
        raise Skipped(f"{label}: {absent_reason(case['source'])}")
    A, perm, feats, labels, info = got
    source = case["source"]
    gen = graph_suite.generator_spec(source) if source[0] == "gen" else ":".join(map(str, source))
    graph = {"nodes": int(A.shape[0]), "nnz": int(A.nnz), "source": gen, "prepare_s": time.perf_counter() - t0,
             **info}
    log(f"{label}: {A.shape[0]:,} nodes, {A.nnz:,} nnz (no self loops), reorder {info['reorder']}")
    x, y = torch.from_numpy(feats).to(device), torch.from_numpy(labels)
    masks = split_masks(A.shape[0], 0)
    pyg = None
    if not args.no_pyg:
        if importlib.util.find_spec("torch_geometric") is None:
            log("PyG does not import: timing ours only")
        else:
            pyg = PygInputs(A, device)
    for model in args.models.split(","):
        for hidden in (int(h) for h in args.hidden.split(",")):
            for prec in precisions:
                log(f"{label}: {model} hidden={hidden} {prec or 'float32'}")
                row, err = attempt(lambda: bench_model(model, hidden, A, perm, x, y, masks, args.epochs, pyg, prec,
                                                       cuda_graph=args.cuda_graph, only_paths=args.pyg_paths,
                                                       rounds=args.rounds))
                if err:  # outside the guarded measurements (a layer or model that cannot be built): this row only
                    row = {"model": model, "hidden": hidden, "precision": str(prec or "float32").replace("torch.", ""),
                           "error": err}
                free_memory()
                row = {"graph": label, "generator": gen, "nodes": int(A.shape[0]), "nnz": int(A.nnz), **info, **row}
                ours = f"{row['ours_ms']:.2f} ms" if row.get("ours_ms") else f"raised {row.get('ours_error')}"
                log(f"{label}: {model} h{hidden}: ours {ours}; PyG ms "
                    + ", ".join(f"{k} {v:.2f}" for k, v in row.get("pyg_ms_by_path", {}).items())
                    + "".join(f"; {k} raised {v}" for k, v in row.get("pyg_errors", {}).items()))
                on_row(row)
    if pyg is not None:
        pyg.clear()
    return {"info": graph, "data": (label, A, perm, x, y, masks)}


def versions() -> dict:
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__}
    for mod in ("torch_geometric", "cupy", "scipy", "torch_sparse"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            out[mod] = None
    try:
        # the checkout's HEAD: uncommitted edits are not in it (and a copied tree's .git may be older than its files)
        out["tcspmm_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                              text=True).stdout.strip() or None
    except OSError:
        out["tcspmm_commit"] = None
    out["tcspmm_source_sha256"] = source_digest()
    return out


def source_digest(root: Path = REPO) -> str:
    """SHA-256 over the code that runs (gnn/ and kernels/: every .py, .cu and .cuh, by path and content), so a
    result names the exact code measured whatever the checkout's git state (a clean checkout of the commit
    that holds that code gives the same digest)."""
    h = hashlib.sha256()
    for path in sorted(p for d in ("gnn", "kernels") for p in (root / d).rglob("*")
                       if p.suffix in (".py", ".cu", ".cuh") and "__pycache__" not in p.parts):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def table(rows) -> str:
    graphs = any("ours_graph_ms" in r or "ours_graph_error" in r for r in rows)
    head = (f"{'graph':10} {'nnz':>10} {'model':5} {'hid':>4} {'prec':8} {'ours ms':>8} {'pyg ms':>8} {'speedup':>7} "
            f"{'floor ms':>8} {'ceiling':>7} "
            f"{'fwd err':>8} {'loss gap':>8} {'acc ours':>8} {'acc pyg':>8} {'pyg path':12} {'pyg ms per path'}")
    if graphs:
        head += f" {'ours gr':>8} {'pyg gr':>8} {'x graph':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        f = (lambda k, fmt: format(r[k], fmt) if r.get(k) is not None else "-")
        speedup = f"{r['speedup']:.2f}x" if r.get("speedup") else "-"
        per_path = ",".join([f"{k}={v:.2f}" for k, v in (r.get("pyg_ms_by_path") or {}).items()]
                            + [f"{k}=raised" for k in r.get("pyg_errors") or {}]) or "-"
        ceiling = f"{r['ceiling']:.2f}x" if r.get("ceiling") else "-"
        line = (f"{r['graph']:10} {r['nnz']:>10} {r['model']:5} {r['hidden']:>4} {r['precision']:8} "
                f"{f('ours_ms', '8.2f'):>8} {f('pyg_ms', '8.2f'):>8} {speedup:>7} "
                f"{f('floor_ms', '8.2f'):>8} {ceiling:>7} "
                f"{f('forward_rel_err', '8.1e'):>8} {f('loss_max_rel_gap', '8.1e'):>8} "
                f"{f('ours_test_acc', '8.3f'):>8} {f('pyg_test_acc', '8.3f'):>8} {r.get('pyg_path') or '-':12} "
                f"{per_path}")
        if graphs:
            x_graph = f"{r['speedup_graph']:.2f}x" if r.get("speedup_graph") else "-"
            line += f" {f('ours_graph_ms', '8.2f'):>8} {f('pyg_graph_ms', '8.2f'):>8} {x_graph:>7}"
        lines.append(line)
    return "\n".join(lines)


def plot(rows, path: Path) -> bool:
    rows = [r for r in rows if r.get("ours_losses") or r.get("pyg_losses")]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    if not rows:
        return False
    cols = min(4, len(rows))
    n_rows = -(-len(rows) // cols)
    fig, axes = plt.subplots(n_rows, cols, figsize=(3.2 * cols, 2.6 * n_rows), squeeze=False)
    for ax in axes.flat[len(rows):]:
        ax.axis("off")
    for ax, r in zip(axes.flat, rows):
        if r.get("ours_losses"):
            ax.plot(r["ours_losses"], label="tcspmm")
        if r.get("pyg_losses"):
            ax.plot(r["pyg_losses"], "--", label=f"PyG ({r.get('pyg_path')})")
        ax.set_title(f"{r['graph']} {r['model']} h{r['hidden']} {r['precision']}", fontsize=8)
        ax.set_xlabel("epoch", fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", choices=["graphs", *SUITES], default="graphs",
                    help="graphs (default): issue #33's graphs of 0.1-3M nnz (+ IGB small when found)")
    ap.add_argument("--graphs", nargs="+", help="only the suite's graphs whose label starts with one of these")
    ap.add_argument("--epochs", type=int, help="default: 30 for --suite graphs, else 50")
    ap.add_argument("--hidden", help="comma-separated; default: 128 for --suite graphs, else 128,256")
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--models", default="gcn,gat")
    ap.add_argument("--reorder", default="tca")
    ap.add_argument("--half", default="", help="also time under autocast: float16 and/or bfloat16, comma-separated")
    ap.add_argument("--no-pyg", action="store_true", help="time ours only")
    ap.add_argument("--pyg-paths", help="only these PyG paths, comma-separated (default: all: "
                                        + ", ".join(sorted({p for ps in PATHS.values() for p in ps})) + ")")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="also train ours and PyG's (its best path) with one captured step replayed per epoch "
                         "(gnn.models.fit cuda_graph=True, from the same starting weights): columns ours gr / pyg gr "
                         "/ x graph")
    ap.add_argument("--rounds", type=int, default=1,
                    help="train ours, the floor and each PyG path this many times, in alternating order, and report "
                         "each one's fastest round (default 1)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="start no new graph after this many seconds")
    ap.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--no-fixed-cost", action="store_true",
                    help="skip the per-epoch fixed-cost breakdown on the smallest graph (benchmarks/epoch_profile.py)")
    ap.add_argument("--fixed-cost-epochs", type=int, default=20, help="timed epochs of the fixed-cost breakdown")
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # "cpu": a dry run of the whole flow (tests)
    args = ap.parse_args(argv)
    for key, value in {**DEFAULTS, **SUITE_DEFAULTS.get(args.suite, {})}.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    known = {p for ps in PATHS.values() for p in ps}
    if args.pyg_paths is not None:
        args.pyg_paths = [p for p in args.pyg_paths.split(",") if p]
        bad = sorted(set(args.pyg_paths) - known)
        if bad or not args.pyg_paths:
            ap.error(f"--pyg-paths: {bad or 'none given'}; choose from {', '.join(sorted(known))}")
    if args.epochs < 2 or args.budget_s <= 0 or args.rounds < 1:
        ap.error(f"--epochs must be >= 2, --budget-s > 0 and --rounds >= 1, got {args.epochs}, {args.budget_s} and "
                 f"{args.rounds}")
    labels = [c["label"] for c in suite_cases(args.suite)]
    unknown = [g for g in args.graphs or [] if not any(lab.startswith(g) for lab in labels)]
    if unknown:
        ap.error(f"--graphs: {unknown} match no graph of --suite {args.suite}; choose from {' '.join(labels)}")
    bad_models = sorted(set(args.models.split(",")) - set(PATHS))
    if bad_models:
        ap.error(f"--models: {bad_models}; choose from gcn, gat")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        import torch
    except ImportError as err:
        print(f"error: benchmarks/gnn.py: needs torch ({err})", file=sys.stderr)
        return 1
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: benchmarks/gnn.py: needs a CUDA GPU visible to torch", file=sys.stderr)
        return 1
    device = torch.device(args.device)
    precisions = [None] + [getattr(torch, h) for h in args.half.split(",") if h]
    cases = [c for c in suite_cases(args.suite) if not args.graphs or c["label"].startswith(tuple(args.graphs))]
    t_start = time.time()
    stamp = dt.datetime.now(dt.timezone.utc)
    dev_name = torch.cuda.get_device_name(0) if device.type == "cuda" else f"{device.type} dry run"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"gnn-{slug(dev_name)}-{stamp:%Y-%m-%d-%H%M%S}.json"
    try:
        from machine import cpu_model, gpu_clocks

        host = {"cpu": cpu_model(), "gpu_clocks": gpu_clocks()}
    except ImportError:
        host = {}
    rows, graphs, skipped, failures, fixed = [], {}, [], [], []
    doc = {"benchmark": "gnn", "suite": args.suite, "date": stamp.isoformat(), "device": dev_name, "host": host,
           "versions": versions(), "command": " ".join([sys.executable, *sys.argv]), "epochs": args.epochs,
           "rounds": args.rounds,
           "hidden": args.hidden, "timing": TIMING, "tolerance_forward": TOL_FORWARD, "pyg_path_kinds": PYG_PATHS,
           "fixed_cost_method": "benchmarks/epoch_profile.py: host issue ms and CUDA-event GPU ms per phase, median "
                                "of --fixed-cost-epochs epochs; counts from one torch.profiler epoch (its exported "
                                "trace: every thread's launches and kernels)"}

    def write():
        doc.update(wall_s=time.time() - t_start, graphs=graphs, skipped=skipped, failures=failures,
                   targets=[list(t) for t in target_rows(rows)], rows=rows, fixed_cost=fixed)
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1, default=float))
        tmp.replace(out)  # a run killed mid-write keeps the previous file whole

    def on_row(row):
        rows.append(row)
        for key, who in (("error", "the row"), ("ours_error", "ours")):
            if row.get(key):
                failures.append(f"{row['graph']} {row['model']} h{row['hidden']} {row['precision']}: {who} raised "
                                f"{row[key]}")
        write()

    smallest = {}

    def run_one(case):
        got = run_graph(case, args, device, precisions, on_row=on_row)
        graphs[case["label"]] = got["info"]
        if not args.no_fixed_cost and (not smallest or got["info"]["nnz"] < smallest["data"][1].nnz):
            smallest.update(got)

    run_cases(cases, run_one, budget_s=args.budget_s, skipped=skipped, failures=failures, write=write, free=free_memory)
    if smallest:
        label = smallest["data"][0]

        def pyg_for(model):  # PyG's best path for this model on the smallest graph, float32, first hidden size
            best = next((r.get("pyg_path") for r in rows if r["graph"] == label and r["model"] == model
                         and r["precision"] == "float32" and r.get("pyg_path")), None)
            if best is None:
                return None
            return PygInputs.conv(model, best), PygInputs(smallest["data"][1], device).arg(best)

        log(f"{label}: per-epoch fixed cost, ours and PyG's")
        got, err = attempt(lambda: fixed_cost(*smallest["data"], args.models.split(","),
                                              int(args.hidden.split(",")[0]), pyg_for, args.fixed_cost_epochs))
        fixed.extend(got or [])
        if err:
            failures.append(f"{label}: fixed-cost breakdown raised {err}")
        smallest.clear()
        free_memory()
    write()
    png = out.with_suffix(".png")
    log(f"wrote {out}" + (f" and {png}" if plot(rows, png) else ""))
    bad = [r for r in rows if r.get("forward_ok") is False]
    print(f"\nresults: {out}")
    for line in skipped:
        print(f"skipped: {line}")
    for r in rows:
        for path, err in (r.get("pyg_errors") or {}).items():
            print(f"PyG {path} raised on {r['graph']} {r['model']} h{r['hidden']} {r['precision']}: {err}")
    for line in failures:
        print(f"FAILED: {line}")
    if bad:
        print(f"error: benchmarks/gnn.py: {len(bad)} rows disagree with PyG beyond tolerance", file=sys.stderr)
    if fixed:
        import epoch_profile

        print("\nper-epoch fixed cost (host issue / GPU ms per phase; counts from one profiled epoch)")
        print(epoch_profile.table(fixed))
    print()
    print(table(rows))
    print()
    print("\n".join(summary_table(rows)))
    print()
    print("\n".join(ceiling_lines(rows)))  # where the floor was timed: what no sparse step could make up eagerly
    print("\n".join(target_lines(rows)))  # the targets last
    return 1 if bad or failures else 0


if __name__ == "__main__":
    sys.exit(main())
