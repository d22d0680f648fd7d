"""One graph's epochs as benchmarks/gnn.py times them: ours (`gnn.GCNConv` / `gnn.GATConv`, eager and, with
``cuda_graph``, a captured step) and PyG's on each of its graph inputs (`PygInputs`: ``edge_index``, ``adj_t``,
``SparseTensor``, ``EdgeIndex``), every path guarded (`run_paths`: an error, out of memory included, is recorded
and the others run), and the fixed-cost profile of one epoch on the smallest graph (`fixed_cost`).
"""
from __future__ import annotations

import copy
import functools
import gc
import importlib.util
import sys
import warnings

import numpy as np

from graph_suite import one_line  # benchmarks/ is the script folder (gnn.py puts it on the path)
from summarize_gnn import best_path

PATHS = {"gcn": ("edge_index", "adj_t", "SparseTensor", "EdgeIndex"), "gat": ("edge_index", "EdgeIndex")}
TOL_FORWARD = 1e-2  # TF32 products (10-bit mantissa) two layers deep, relative to the output's norm


def attempt(fn):
    """(fn(), None), or (None, its one-line error) when it raises; the exception (and with it the tensors its frames
    hold) is gone when this returns, so the caller's ``free_memory`` can give that memory back."""
    try:
        return fn(), None
    except Exception as err:  # OutOfMemoryError is a RuntimeError: recorded like any other, never fatal
        return None, one_line(err)


def free_memory() -> None:
    """Python's garbage, torch's cached CUDA blocks and CuPy's pool (when imported) back to the device."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            cupy.get_default_memory_pool().free_all_blocks()
        except Exception:  # a CuPy without a device: nothing to free
            pass


# ------------------------------------------------------------------------------------------------ PyG's paths

def torch_sparse_ok() -> bool:
    return importlib.util.find_spec("torch_sparse") is not None


def paths_for(model: str, only=None) -> list[str]:
    """The PyG paths timed for ``model``: PATHS (SparseTensor only where torch_sparse is installed), filtered by
    ``only`` (a collection of path names) when given."""
    return [p for p in PATHS[model] if (p != "SparseTensor" or torch_sparse_ok()) and (not only or p in only)]


class PygInputs:
    """PyG's graph inputs of one graph on one device, each built on first use (inside its path's guard) and kept
    for the graph's other models and sizes; ``clear`` lets them go."""

    def __init__(self, A, device):
        self.A, self.device, self._made = A, device, {}

    def arg(self, path: str):
        if path not in self._made:
            self._made[path] = self._build(path)
        return self._made[path]

    def _build(self, path: str):
        import torch

        import gnn

        A, device = self.A, self.device
        if path == "edge_index":
            return torch.from_numpy(gnn.Graph("bench", A).edge_index).to(device)
        if path == "adj_t":
            return gnn.to_torch_csr(gnn.Graph("bench", A), device).to(torch.float32)
        if path == "SparseTensor":
            from torch_sparse import SparseTensor

            return SparseTensor(rowptr=torch.from_numpy(A.indptr.astype(np.int64)).to(device),
                                col=torch.from_numpy(A.indices.astype(np.int64)).to(device),
                                value=torch.from_numpy(np.asarray(A.data, np.float32)).to(device),
                                sparse_sizes=A.shape, is_sorted=True, trust_data=True)
        if path == "EdgeIndex":
            from torch_geometric import EdgeIndex

            from gnn.norm import with_self_loops

            ei = gnn.Graph("bench", with_self_loops(A)).edge_index  # sorted by destination = PyG's "col"
            out = EdgeIndex(torch.from_numpy(ei).to(device), sparse_size=A.shape, sort_order="col")
            out.fill_cache_()
            return out
        raise ValueError(f"unknown PyG path {path!r}")

    @staticmethod
    def conv(model: str, path: str):
        """The layer factory ``conv(in, out, **kw)`` of a model on a path (EdgeIndex: its loops are in the graph)."""
        from torch_geometric.nn import GATConv, GCNConv

        loops = path != "EdgeIndex"
        if model == "gcn":
            return lambda i, o: GCNConv(i, o, cached=True, add_self_loops=loops)
        return functools.partial(GATConv, add_self_loops=loops)

    def clear(self) -> None:
        self._made.clear()


def rel(a, b) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def max_gap(a, b) -> float:
    """The largest relative difference of two loss curves."""
    return float(max(abs(p - q) / max(abs(q), 1e-12) for p, q in zip(a, b)))


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
    except Exception as err:  # out of memory included: recorded in the row, the eager columns still hold
        return {"error": one_line(err)}
    return {"ms": graphed_ms(res), "losses": res["losses"], "error": res.get("graph_error")}


def run_paths(paths, measure, free=free_memory) -> tuple[dict, dict]:
    """``measure(path)`` for each path, isolated: ({path: its result}, {path: one-line error}); memory freed after
    each, whether it raised or not."""
    results, errors = {}, {}
    for path in paths:
        got, err = attempt(lambda: measure(path))
        if err is None:
            results[path] = got
        else:
            errors[path] = err
        free()
    return results, errors


def bench_model(name, hidden, A, perm, x, y, masks, epochs, pyg, autocast_dtype, cuda_graph=False,
                only_paths=None, rounds: int = 1) -> dict:
    """One (model, hidden, precision) row: ours and every PyG path of ``pyg`` (a PygInputs, or None), each guarded.

    ``rounds`` > 1: ours, the dense floor and every PyG path trained again, each from the same starting weights, in
    alternating order (ours, floor, paths; then paths, floor, ours; ...), so that drift in the host's speed hits
    them alike; each reports its fastest round's median epoch (``*_rounds``: every round's) and the loss curves of
    round 1, with the largest gap of a later round's curve to it (``*_repeat_gap``: 0 where training repeats bit
    for bit). Why: in one run (H200, 2026-11-29 18:34) ours and the floor on rmat-s16, timed first, were 1.6x their
    times of an earlier run while PyG's paths, timed after them, were not."""
    import torch

    import gnn
    from gnn.models import GAT, GCN, fit

    n_classes = int(y.max()) + 1
    g = gnn.Graph("bench", A, perm=perm)
    build = (lambda conv: GCN(x.shape[1], hidden, n_classes, conv=conv)) if name == "gcn" else \
        (lambda conv: GAT(x.shape[1], hidden, n_classes, heads=4, conv=conv))
    ours_conv = gnn.GCNConv if name == "gcn" else gnn.GATConv
    autocast = functools.partial(torch.autocast, x.device.type, dtype=autocast_dtype,
                                 enabled=autocast_dtype is not None)
    row = {"model": name, "hidden": hidden, "precision": str(autocast_dtype or "float32").replace("torch.", "")}
    paths = paths_for(name, only_paths) if pyg is not None else []
    init = None
    if paths:  # PyG's initial weights (the same for every path: the parameter names and shapes match), then ours
        def pyg_init():
            torch.manual_seed(0)
            return copy.deepcopy(build(pyg.conv(name, paths[0])).state_dict())
        init, err = attempt(pyg_init)
        if err:
            row["pyg_error"] = err
            paths = []
    state = {}

    def ours_model(weights):
        torch.manual_seed(0)
        model = build(ours_conv).to(x.device)
        if weights is not None:
            model.load_state_dict(weights)  # strict: the parameter names match PyG's
        return model

    def ours_run():
        model = ours_model(init)
        state["init"] = copy.deepcopy(model.state_dict())
        model.eval()
        with torch.no_grad(), autocast():
            state["out"] = model(x, g).float()
        res = fit(model, x, y, g, masks, epochs=epochs, autocast_dtype=autocast_dtype, cuda_graph=False)
        return {"ours_first_ms": res["epoch_ms"][0], "ours_ms": float(np.median(res["epoch_ms"][1:])),
                "ours_losses": res["losses"], "ours_test_acc": res["test_acc"]}

    def ours_again():  # a later round: the same training from the same weights
        res = fit(ours_model(state["init"]), x, y, g, masks, epochs=epochs, autocast_dtype=autocast_dtype,
                  cuda_graph=False)
        return {"ms": float(np.median(res["epoch_ms"][1:])), "losses": res["losses"]}

    def floor_run():  # the same model with its sparse steps dropped: no library's eager epoch goes below it
        import epoch_profile as ep

        torch.manual_seed(0)
        model = build(ep.dense_conv()).to(x.device)
        res = fit(model, x, y, None, masks, epochs=epochs, autocast_dtype=autocast_dtype, cuda_graph=False)
        return {"ms": float(np.median(res["epoch_ms"][1:]))}

    def measure(path):
        conv, arg = pyg.conv(name, path), pyg.arg(path)
        torch.manual_seed(0)
        model = build(conv).to(x.device)
        model.load_state_dict(init)
        out = {}
        with warnings.catch_warnings():  # torch's notes on sparse CSR from inside PyG's adj_t path: nothing to act on
            warnings.filterwarnings("ignore", message="Sparse (invariant checks|CSR tensor support)",
                                    category=UserWarning)
            if "out" in state:
                model.eval()
                with torch.no_grad(), autocast():
                    out["forward_rel_err"] = rel(state["out"], model(x, arg).float())
            res = fit(model, x, y, arg, masks, epochs=epochs, autocast_dtype=autocast_dtype,
                      cuda_graph=False)
        return {**out, "first_ms": res["epoch_ms"][0], "ms": float(np.median(res["epoch_ms"][1:])),
                "losses": res["losses"], "test_acc": res["test_acc"]}

    # round 1 in order (ours first: its forward output is what each path's is checked against), later rounds
    # alternating; a measurement that raised is not repeated
    got, err = attempt(ours_run)
    row.update(got or {"ours_error": err})
    free_memory()
    got, err = attempt(floor_run)
    row.update({"floor_ms": got["ms"]} if got else {"floor_error": err})
    free_memory()
    results, errors = run_paths(paths, measure)
    again = {"ours": ours_again, "floor": floor_run, **{p: functools.partial(measure, p) for p in results}}
    later = {who: [] for who in again}  # rounds 2..R: ms (and losses where kept)
    for r in range(1, rounds):
        for who in (list(again)[::-1] if r % 2 else list(again)):
            ran = f"{who}_ms" in row if who in ("ours", "floor") else who in results
            if not ran:
                continue  # raised in an earlier round
            got, err = attempt(again[who])
            if err is None:
                later[who].append(got)
            elif who in ("ours", "floor"):  # a failure in any round is the measurement's: no time kept
                row[f"{who}_error"] = f"round {r + 1}: {err}"
                row.pop(f"{who}_ms")
            else:
                errors[who] = f"round {r + 1}: {err}"
                results.pop(who)
            free_memory()
    if rounds > 1:
        row["rounds"] = rounds
        for who in ("ours", "floor"):
            if f"{who}_ms" in row:
                row[f"{who}_ms_rounds"] = [row[f"{who}_ms"], *(t["ms"] for t in later[who])]
                row[f"{who}_ms"] = min(row[f"{who}_ms_rounds"])
        if "ours_ms" in row:
            row["ours_repeat_gap"] = max((max_gap(row["ours_losses"], t["losses"]) for t in later["ours"]),
                                         default=None)
        for p, res in results.items():
            res["ms_rounds"] = [res["ms"], *(t["ms"] for t in later[p])]
            res["ms"] = min(res["ms_rounds"])
            res["repeat_gap"] = max((max_gap(res["losses"], t["losses"]) for t in later[p]), default=None)
    tol = TOL_FORWARD * (3 if autocast_dtype else 1)
    if paths:
        if rounds > 1:
            row.update(pyg_ms_rounds_by_path={p: r["ms_rounds"] for p, r in results.items()},
                       pyg_repeat_gap_by_path={p: r["repeat_gap"] for p, r in results.items()})
        row.update(pyg_paths=paths, pyg_ms_by_path={p: r["ms"] for p, r in results.items()},
                   pyg_first_ms_by_path={p: r["first_ms"] for p, r in results.items()},
                   pyg_forward_rel_err={p: r["forward_rel_err"] for p, r in results.items() if "forward_rel_err" in r},
                   pyg_errors=errors)
        if row.get("ours_losses"):
            row["pyg_loss_max_rel_gap"] = {p: max_gap(row["ours_losses"], r["losses"]) for p, r in results.items()}
        if row["pyg_forward_rel_err"]:
            row["forward_ok"] = all(e < tol for e in row["pyg_forward_rel_err"].values())
    best, best_ms = best_path(row.get("pyg_ms_by_path", {}))
    if best is not None:
        r = results[best]
        row.update(pyg_path=best, pyg_ms=best_ms, pyg_first_ms=r["first_ms"], pyg_losses=r["losses"],
                   pyg_test_acc=r["test_acc"])
        if "forward_rel_err" in r:
            row["forward_rel_err"] = r["forward_rel_err"]
        if row.get("ours_ms"):
            row["speedup"] = best_ms / row["ours_ms"]
            row["loss_max_rel_gap"] = row["pyg_loss_max_rel_gap"][best]
        if row.get("floor_ms"):  # the most any library's eager epoch of this model could beat PyG's best by here
            row["ceiling"] = best_ms / row["floor_ms"]
    results.clear()
    if cuda_graph and "ours_error" not in row:  # the same training with one captured step replayed per epoch
        got = bench_graphed(lambda: build(ours_conv).to(x.device), state["init"], x, y, g, masks, epochs,
                            autocast_dtype)
        row.update({"ours_graph_ms": got.get("ms"), "ours_graph_error": got.get("error")})
        if got.get("losses") and row.get("ours_losses"):  # against the eager run's (same start, same seed)
            row["graph_loss_max_rel_gap"] = max_gap(got["losses"], row["ours_losses"])
        free_memory()
        if best is not None:
            got = bench_graphed(lambda: build(pyg.conv(name, best)).to(x.device), init, x, y, pyg.arg(best), masks,
                                epochs, autocast_dtype)
            row.update({"pyg_graph_ms": got.get("ms"), "pyg_graph_error": got.get("error")})
            if row.get("ours_graph_ms") and row.get("pyg_graph_ms"):
                row["speedup_graph"] = row["pyg_graph_ms"] / row["ours_graph_ms"]
            free_memory()
    return row


def fixed_cost(label, A, perm, x, y, masks, models, hidden, pyg_for, epochs) -> list[dict]:
    """benchmarks/epoch_profile.py's timings and counts of ours and PyG's (same weights) for each model, and of the
    model with its sparse steps dropped ("dense": `epoch_profile.dense_conv`, the floor of any eager epoch);
    ``pyg_for(model)``: (PyG's conv factory, graph argument) on its best path there, or None."""
    import torch

    import gnn
    from gnn.models import GAT, GCN

    import epoch_profile as ep

    train_idx = torch.nonzero(masks[0].to(x.device)).flatten()
    y_train = y.to(x.device)[train_idx]
    n_classes = int(y.max()) + 1
    rows = []
    for name in models:
        build = (lambda conv: GCN(x.shape[1], hidden, n_classes, conv=conv)) if name == "gcn" else \
            (lambda conv: GAT(x.shape[1], hidden, n_classes, heads=4, conv=conv))
        libs = [("tcspmm", gnn.GCNConv if name == "gcn" else gnn.GATConv, gnn.Graph("bench", A, perm=perm))]
        theirs = pyg_for(name)
        if theirs is not None:
            libs.append(("pyg", *theirs))
        # PyG's first when present (its weights are loaded into ours), then the dense floor (its own weights)
        state = None
        for lib, conv, graph in [*libs[::-1], ("dense", ep.dense_conv(), None)]:
            torch.manual_seed(0)
            model = build(conv).to(x.device)
            if lib != "dense":  # ours from the weights of the first built (PyG's when present)
                state = model.state_dict() if state is None else state
                model.load_state_dict(state)
            times = ep.phase_times(model, x, y_train, train_idx, graph, epochs=epochs)
            counts = ep.phase_counts(model, x, y_train, train_idx, graph)
            rows.append({"graph": label, "nnz": int(A.nnz), "model": name, "hidden": hidden, "library": lib,
                         **ep.summary(times, counts)})
            del model
            free_memory()
    return rows
