"""Reordering benchmark: time, peak memory and TC-block quality of every method on generated and fixture matrices.

    python benchmarks/reorder.py --sizes 1M,10M [--methods tca,rowshuffle,...,auto] [--workers N] [--tag NAME]

Matrices (all from `tasks.fetch.generators`, seeded, shuffled ids; the natural order is the same seed with
shuffle=0): ``sbm`` (communities of 256 rows, 14 neighbours inside + 2 outside: short rows), ``rmat`` (R-MAT,
edge_factor 16), ``mesh`` (3D 7-point stencil), ``longrow`` (300-600 nonzeros per row, 80% inside one of >= 8 column
communities: long rows), each at about the requested nnz; plus the SuiteSparse fixtures (tarballs in the folders of
configs.fixture_roots) with ``--fixtures``. Each (matrix, method) runs in a fresh subprocess that memory-maps the
matrix from a temporary .npz, so ``peak_rss_mb`` is that process's VmHWM (the matrix itself included; with
``--workers`` the Dask worker processes are not counted). ``--workers N`` runs TCA's block functions on a
``distributed.LocalCluster(N workers, 1 thread each)``; otherwise they run on threads in the process. A method is
skipped (with the reason in the table) when nnz * api.COST_NS_PER_NNZ (/ cores for tca) exceeds ``--max-seconds``.
Method ``auto`` is ``tasks.reorder.auto_reorder`` as the CLI's ``--reorder auto`` calls it (every default candidate
run and scored, the fewest TC blocks kept): its row gives the whole call's seconds, the method it chose ("note"),
and each candidate's seconds (``auto_methods``); the chosen order's blocks are checked against its report.
For square matrices each row also has the halo a resident multi-GPU iteration would move after the reordering:
rows of B received by the P row-window shards, % of the rows, for P = 2 and 4 (``halo_pct_p2``/``_p4``, with the
input's and the natural order's beside them). The table prints last; JSON goes to
benchmarks/results/reorder-<tag>-<date>.json.
"""
from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import platform
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from configs import fixture_roots  # noqa: E402
from kernels.formats.metrics import tc_stats  # noqa: E402
from machine import cpu_model  # noqa: E402  (benchmarks/ is the script folder)
from tasks.reorder import METHODS  # noqa: E402
from tasks.reorder.api import AUTO_METHODS, COST_NS_PER_NNZ  # noqa: E402


def _size(text: str) -> int:
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}
    return int(float(text[:-1]) * mult[text[-1].upper()]) if text[-1].upper() in mult else int(text)


def generator_params(kind: str, nnz: int) -> dict:
    """Generator parameters giving about ``nnz`` nonzeros."""
    if kind == "sbm":
        n = max(256, nnz // 16)
        return {"n": n, "blocks": max(1, n // 256), "deg_in": 14, "deg_out": 2, "values": "ones"}
    if kind == "rmat":
        return {"scale": max(4, int(round(np.log2(nnz / 16 / 0.92)))), "edge_factor": 16, "values": "ones"}
    if kind == "mesh":
        nx = max(4, int(round((nnz / 7) ** (1 / 3))))
        return {"nx": nx, "ny": nx, "nz": nx, "stencil": 7, "values": "ones"}
    if kind == "longrow":
        rows = max(64, nnz // 450)
        # cols >= 8 communities of 4 * max_row_nnz = 2400 columns, so rows have a community to be found
        return {"rows": rows, "cols": max(rows, 8 * 2400), "values": "ones"}
    raise ValueError(kind)


def generated(kind: str, nnz: int, seed: int = 1):
    from tasks.fetch.generators import generate
    p = generator_params(kind, nnz)
    nat = generate(kind, {**p, "seed": seed, "shuffle": 0})
    natural = {**tc_stats(nat), **{f"halo_pct_p{P}": halo_pct(nat, np.arange(nat.shape[0]), P) for P in HALO_PARTS}}
    del nat
    return generate(kind, {**p, "seed": seed, "shuffle": 1}), natural, p


def fixtures():
    import scipy.io
    seen = set()
    for d in (root / "suitesparse" / "MM" for root in fixture_roots(ROOT)):
        for tgz in sorted(d.glob("*/*.tar.gz")) if d.is_dir() else []:
            if tgz.name in seen or tgz.name.startswith("young1c"):  # young1c is complex
                continue
            seen.add(tgz.name)
            with tarfile.open(tgz) as tf:
                member = next(m for m in tf.getmembers() if m.name.endswith(".mtx"))
                A = scipy.io.mmread(io.BytesIO(tf.extractfile(member).read()))
            yield f"{tgz.parent.name}/{tgz.name[:-7]}", sp.csr_matrix(A)


def _vm_kb(field: str) -> float:
    """VmHWM / VmRSS of this process in kB (Linux). ru_maxrss would be wrong here: Linux keeps it across execve,
    so a child would report the (large) benchmark parent's RSS at fork time."""
    try:
        with open("/proc/self/status") as f:
            return next(float(ln.split()[1]) for ln in f if ln.startswith(field + ":"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


HALO_PARTS = (2, 4)  # row partitions for which the halo (rows of B a resident iteration moves) is reported


def halo_pct(A, perm, P: int) -> float | None:
    """Rows of B that a resident iteration over P row-window shards of A[perm] moves between shards (each shard
    receives the rows it references but does not own), as % of A's rows; None for a rectangular A (no resident
    mode)."""
    if A.shape[0] != A.shape[1] or A.shape[0] == 0:
        return None
    from kernels.formats.metcf.container import csr_to_metcf
    from tasks.distribute import make_plan
    plan = make_plan(csr_to_metcf(sp.csr_matrix(A[perm])), P, perm=perm)
    return 100.0 * sum(int(plan.remote_mask(k).sum()) for k in range(P)) / A.shape[0]


def child(path: str, method: str, seed: int, workers: int) -> None:
    """One measurement in this (fresh) process; prints a JSON line."""
    from tasks.reorder import auto_reorder, reorder
    z = np.load(path, mmap_mode="r")
    A = sp.csr_matrix((np.ones(z["indices"].shape[0], np.float32), z["indices"], z["indptr"]),
                      shape=tuple(z["shape"]))
    client = cluster = None
    if workers:
        import distributed
        cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None)
        client = distributed.Client(cluster)
    rss0 = _vm_kb("VmRSS") / 1024
    t0 = time.perf_counter()
    extra = {"stats": {}} if method == "tca" else {}  # TCA's counts and per-phase seconds
    if method == "auto":
        chosen, perm, report = auto_reorder(A, seed=seed, client=client)
    else:
        perm = reorder(A, method, seed=seed, client=client, **extra)
    seconds = time.perf_counter() - t0
    peak = _vm_kb("VmHWM") / 1024
    if client is not None:
        client.close()
        cluster.close()
    assert np.array_equal(np.sort(perm), np.arange(A.shape[0]))
    s = tc_stats(A[perm])
    auto = {}
    if method == "auto":
        assert s["n_tc_blocks"] == report["methods"][chosen]["n_tc_blocks"], (chosen, s, report)
        auto = {"note": f"chose {chosen}", "auto_methods": {m: r.get("seconds", r.get("skipped"))
                                                            for m, r in report["methods"].items()}}
    halo = {f"halo_pct_p{P}": halo_pct(A, perm, P) for P in HALO_PARTS}
    print(json.dumps({"seconds": seconds, "peak_rss_mb": peak, "rss_before_mb": rss0, "stats": s,
                      "tca": extra.get("stats"), **auto, **halo}))


def run_case(name: str, A, natural: dict | None, methods, args, rows: list) -> None:
    A = sp.csr_matrix(A)
    A.sort_indices()
    base = tc_stats(A)
    base_halo = {f"none_halo_pct_p{P}": halo_pct(A, np.arange(A.shape[0]), P) for P in HALO_PARTS}
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "A.npz")
        np.savez(path, indptr=A.indptr, indices=A.indices, shape=np.array(A.shape))
        for m in methods:
            row = {"matrix": name, "method": m, "shape": list(A.shape), "nnz": int(A.nnz),
                   "none_blocks": base["n_tc_blocks"], "none_mean_nnz_tc": base["mean_nnz_tc"],
                   "none_bcsr_blocks": base["bcsr_blocks"],
                   "natural_blocks": natural["n_tc_blocks"] if natural else None,
                   "natural_mean_nnz_tc": natural["mean_nnz_tc"] if natural else None, **base_halo,
                   **{f"natural_halo_pct_p{P}": natural.get(f"halo_pct_p{P}") if natural else None
                      for P in HALO_PARTS}}
            est = sum(A.nnz * COST_NS_PER_NNZ[k] * 1e-9 / (cores if k == "tca" else 1)
                      for k in (AUTO_METHODS if m == "auto" else (m,)))
            if est > args.max_seconds:
                row["skipped"] = f"estimated {est:.0f} s > --max-seconds {args.max_seconds:.0f}"
            else:
                cmd = [sys.executable, __file__, "--child", path, m, str(args.seed), str(args.workers)]
                try:
                    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=True)
                    res = json.loads(out.stdout.strip().splitlines()[-1])
                    s = res.pop("stats")
                    row.update(res, blocks=s["n_tc_blocks"], mean_nnz_tc=s["mean_nnz_tc"],
                               bcsr_blocks=s["bcsr_blocks"],
                               bpw_min=s["blocks_per_window_min"], bpw_max=s["blocks_per_window_max"],
                               bpw_cv=s["blocks_per_window_cv"], l2_cols=s["l2_distinct_cols_per_group"],
                               gain_vs_none=base["n_tc_blocks"] / max(s["n_tc_blocks"], 1))
                except subprocess.TimeoutExpired:
                    row["skipped"] = f"timed out after {args.timeout} s"
                except subprocess.CalledProcessError as e:
                    row["skipped"] = "failed: " + (e.stderr.strip().splitlines() or ["?"])[-1][:200]
            rows.append(row)
            print(json.dumps(row), flush=True)


def table(rows: list) -> str:
    head = (f"{'matrix':<28}{'method':<11}{'nnz':>11}{'sec':>8}{'rssMB':>8}{'blocks':>11}{'MeanNnzTC':>10}"
            f"{'xnone':>7}{'natMNTC':>8}{'cv':>6}{'halo2%':>8}{'halo4%':>8}  note")
    out = [head, "-" * len(head)]
    for r in rows:
        if "skipped" in r:
            out.append(f"{r['matrix']:<28}{r['method']:<11}{r['nnz']:>11}  {'-':>6}{'':>8}{'':>11}{'':>10}{'':>7}"
                       f"{'':>8}{'':>6}  skipped: {r['skipped']}")
            continue
        nat = f"{r['natural_mean_nnz_tc']:.2f}" if r["natural_mean_nnz_tc"] else "-"
        halo = "".join(f"{r[k]:>8.1f}" if r.get(k) is not None else f"{'-':>8}" for k in ("halo_pct_p2", "halo_pct_p4"))
        out.append(f"{r['matrix']:<28}{r['method']:<11}{r['nnz']:>11}{r['seconds']:>8.2f}{r['peak_rss_mb']:>8.0f}"
                   f"{r['blocks']:>11}{r['mean_nnz_tc']:>10.2f}{r['gain_vs_none']:>7.2f}{nat:>8}{r['bpw_cv']:>6.2f}"
                   f"{halo}  {r.get('note', '')}")
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1M", help="comma-separated nnz targets, e.g. 1M,10M,100M")
    ap.add_argument("--kinds", default=None,
                    help="generators; default sbm,rmat,mesh,longrow below 50M nnz and sbm,longrow (the community "
                         "targets) from 50M, which keeps --sizes 100M --workers 16 under 10 minutes on 16 cores")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--fixtures", action="store_true", help="also run the SuiteSparse fixture matrices")
    ap.add_argument("--workers", type=int, default=0, help="Dask LocalCluster workers for tca (0: threads)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=60.0,
                    help="skip a method whose estimate nnz * COST_NS_PER_NNZ (/ cores for tca) exceeds this")
    ap.add_argument("--timeout", type=int, default=1200)
    ap.add_argument("--tag", default=None)
    args = ap.parse_args(argv)
    methods = args.methods.split(",")
    rows: list = []
    t0 = time.time()
    if args.fixtures:
        for name, A in fixtures():
            run_case(name, A, None, methods, args, rows)
    for size in args.sizes.split(",") if args.sizes else []:
        kinds = args.kinds or ("sbm,rmat,mesh,longrow" if _size(size) < 50_000_000 else "sbm,longrow")
        for kind in kinds.split(","):
            A, natural, p = generated(kind, _size(size))
            run_case(f"{kind}-{size}", A, natural, methods, args, rows)
            del A
    import numba
    import scipy
    meta = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "command": " ".join(sys.argv),
            "cpu_count": os.cpu_count(), "cpu_model": cpu_model(), "python": platform.python_version(),
            "numpy": np.__version__, "scipy": scipy.__version__, "numba": numba.__version__,
            "wall_seconds": time.time() - t0}
    tag = args.tag or f"{args.sizes.replace(',', '_')}-w{args.workers}"
    out = ROOT / "benchmarks" / "results" / f"reorder-{tag}-{dt.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"\nwrote {out}\n")
    print(table(rows))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
