"""The deterministic CUDA-core CSR kernel (``csr-rows``, the path every plan takes on power-law graphs) per precision
and row walk, against cuSPARSE CSR in the same precision (issue 32).

    PYTHONPATH=. python3 benchmarks/csr_rows.py [--ns 128 256] [--matrices rmat-s17 ...] [--budget-s 240]
                                                [--out-dir DIR] [--table-from FILE]

Matrices: R-MAT scale 16 and 17 and an SBM of 100k nodes from the project generators with shuffled labels, the
SNAP/email-Enron fixture (skipped with a note when no fixtures folder holds it), and R-MAT scale 20 (16M nnz) last;
each as given and after ``tasks.reorder.auto_reorder`` (what a user runs). Per (matrix, order, N, precision:
float32, float16, bfloat16): the kernel through ``CsrRows.bind`` (kernels/formats/csr/launch.py) with its default
walk (``CsrConfig.walk_heavy``: rows by length, longest first; float32 without B's 16-bit copy, ``half_b`` off, only
rows of >= 2x the mean length first) and with A's own order (heavy 0); device
time by graph replay (kernels.launch.graph_ms: median of 20 replays) and per call as issued
(kernels.launch.issued_ms: median of 20 loops of back-to-back calls), both after warm-up; cuSPARSE's best
CSR algorithm in the same precision (``CusparseSpmm(A, dtype=...).tune``, graph replay; its bound call as issued;
float16/bfloat16 CSR compute on CUDA cores). Correctness in the same run: C on sampled rows against float64 SciPy
of the stored (rounded) values within the precision's tolerance (kernels.precision), and the two walks' C bitwise
equal; a failure makes the run exit 1 after the table. JSON: benchmarks/results/csr_rows-<device>-<date>.json
(written after each matrix); the table last. No new matrix is started after --budget-s seconds.

The bound both kernels work against: each nonzero gathers one row of B (N x the itemsize), so the rows' bytes over
the time ("gather TB/s", ours and cuSPARSE's) are set against the GPU's L2 read rate, measured once per run
(`l2_read_tbs`: 16-byte loads through L2 only, ``ld.global.cg``, over a 16 MiB L2-resident buffer, graph replay):
a kernel that fetches every gathered row from L2 cannot run faster than that rate allows; more needs rows reused
from L1 or fewer bytes per row. "L2 x" is that bound as a speedup over cuSPARSE (`l2_bound_x`). 16-bit rows run the
mapping ``CsrRows.tune`` keeps (timed on the default walk, as a plan does; both walks then on that one, so their C
can be compared bit for bit), float32 too: "rows" on float32 B, or a 16-bit mapping over B's per-call 16-bit copy
(its pass timed with the kernel); "mapping_ms" in the JSON holds each timed mapping's time.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
PRECISIONS = ("float32", "float16", "bfloat16")
GENERATED = [("rmat-s16", "rmat", "scale=16&edge_factor=12"), ("rmat-s17", "rmat", "scale=17&edge_factor=16"),
             ("sbm-100k", "sbm", "n=100000&blocks=100&deg_in=16&deg_out=2")]
LAST = [("rmat-s20", "rmat", "scale=20&edge_factor=16")]
FIXTURE = "SNAP/email-Enron"
REPEATS = 20  # timed replays (graph) and timed loops (as issued) per median, after warm-up
L2_READ_SOURCE = r"""
extern "C" __global__ void l2_read(const uint4* __restrict__ a, long long n, int reps, unsigned* __restrict__ out) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (int r = 0; r < reps; ++r) {
    long long i = t;
    for (; i + 3 * stride < n; i += 4 * stride) {  // four 16-byte loads in flight, through L2 only (ld.global.cg)
      const uint4 v0 = __ldcg(a + i), v1 = __ldcg(a + i + stride), v2 = __ldcg(a + i + 2 * stride),
                  v3 = __ldcg(a + i + 3 * stride);
      acc ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w;
      acc ^= v2.x ^ v2.y ^ v2.z ^ v2.w ^ v3.x ^ v3.y ^ v3.z ^ v3.w;
    }
    for (; i < n; i += stride) {
      const uint4 v = __ldcg(a + i);
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  }
  if (acc == 0x9e3779b9u) out[0] = acc;  // (almost) never taken: keeps the loads
}
"""


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def l2_read_tbs(n_bytes: int = 16 << 20, reps: int = 16) -> float:
    """TB/s at which the SMs read an L2-resident buffer of ``n_bytes`` through L2 only (module docstring)."""
    import cupy

    from kernels import launch

    fn = cupy.RawKernel(L2_READ_SOURCE, "l2_read")
    a = cupy.arange(n_bytes // 4, dtype=cupy.uint32)
    out = cupy.zeros(1, dtype=cupy.uint32)
    n = n_bytes // 16
    grid = (cupy.cuda.Device().attributes["MultiProcessorCount"] * 8,)
    ms = launch.graph_ms(lambda: fn(grid, (256,), (a, np.int64(n), np.int32(reps), out)), repeats=REPEATS)
    return n_bytes * reps / (ms * 1e-3) / 1e12


def gather_tbs(row: dict, us: float) -> float:
    """TB/s of B rows gathered (one row of N values per nonzero) at ``us`` per call."""
    from kernels.precision import precision

    itemsize = np.dtype(precision(row["precision"]).storage_dtype).itemsize
    return row["nnz"] * row["N"] * itemsize / (us * 1e-6) / 1e12


def l2_bound_x(row: dict, l2_tbs: float) -> float:
    """The speedup over cuSPARSE (graph replay) of a kernel that gathers every B row from L2 at ``l2_tbs``: where
    it is below a target, no row-gathering kernel reaches the target without L1 reuse or fewer bytes per row."""
    return l2_tbs / gather_tbs(row, row["cus_graph_us"])


def measure(label: str, order: str, A, N: int, rng) -> list[dict]:
    """One row per precision: both walks and cuSPARSE in that precision on the same B."""
    import cupy

    from kernels import launch
    from kernels.cusparse import CusparseSpmm
    from kernels.formats.csr.launch import CsrConfig, CsrRows
    from kernels.precision import precision

    sample = np.sort(rng.choice(A.shape[0], min(2048, A.shape[0]), replace=False))
    Bh = rng.standard_normal((A.shape[1], N)).astype(np.float32)
    rows = []
    for name in PRECISIONS:
        p = precision(name)
        B = cupy.asarray(p.to_storage(Bh))
        stored = sp.csr_array((p.to_float32(p.to_storage(A.data)).astype(np.float64), A.indices, A.indptr),
                              shape=A.shape)
        ref = stored[sample] @ p.to_float32(p.to_storage(Bh)).astype(np.float64)
        row = {"matrix": label, "order": order, "nnz": int(A.nnz), "shape": list(A.shape), "N": N, "precision": name,
               "tolerance": p.tolerance}
        outs, mapping = {}, None
        for walk, heavy in (("walk", CsrConfig().heavy), ("given", 0.0)):
            op = CsrRows(A, p, CsrConfig(heavy=heavy))
            if mapping is None:  # as a plan runs it: the 16-bit mappings timed on the default walk, that one kept
                row["mapping_ms"] = op.tune(B)
                mapping = row["mapping"] = op.mapping(N)
            out = cupy.empty((A.shape[0], N), dtype=p.storage_dtype)
            out.view(cupy.uint8).fill(0xFF)  # NaN: every element must be written
            bound = op.bind(B, out, mapping=mapping)  # both walks on one mapping: their C bitwise equal
            # graph_ms captures on a private stream made current: the call must read the current stream there
            row[f"{walk}_graph_us"] = 1e3 * launch.graph_ms(lambda: bound(cupy.cuda.get_current_stream().ptr),
                                                            repeats=REPEATS)
            stream = cupy.cuda.get_current_stream().ptr  # as issued: on the caller's stream, looked up once
            row[f"{walk}_issued_us"] = 1e3 * launch.issued_ms(lambda: bound(stream), repeats=REPEATS)
            outs[walk] = cupy.asnumpy(out)
        C = p.to_float32(outs["walk"][sample]).astype(np.float64)
        row["rel_err"] = float(np.linalg.norm(C - ref) / max(np.linalg.norm(ref), 1e-30)) if np.isfinite(C).all() \
            else float("nan")
        row["walks_bitwise_equal"] = bool(np.array_equal(outs["walk"].view(np.uint8), outs["given"].view(np.uint8)))
        cus = CusparseSpmm(A, dtype=name)
        out = cupy.empty((A.shape[0], N), dtype=p.storage_dtype)
        tuned = cus.tune(B, out)
        bound = cus.bind(B, out)
        stream = cupy.cuda.get_current_stream().ptr
        row.update(cus_alg=tuned["best"], cus_graph_us=1e3 * tuned["ms"][tuned["best"]],
                   cus_issued_us=1e3 * launch.issued_ms(lambda: bound(stream), repeats=REPEATS))
        C = p.to_float32(cupy.asnumpy(out)[sample]).astype(np.float64)
        row["cus_rel_err"] = float(np.linalg.norm(C - ref) / max(np.linalg.norm(ref), 1e-30))
        cus.close()
        timed = all(row[k] > 0 for k in ("walk_graph_us", "given_graph_us", "walk_issued_us", "given_issued_us"))
        row["correct"] = bool(row["rel_err"] <= p.tolerance and row["walks_bitwise_equal"] and timed)
        rows.append(row)
        log(f"  {label} {order} N={N} {name}: walk ({mapping}) {row['walk_graph_us']:.1f} us, A's order "
            f"{row['given_graph_us']:.1f} us, cuSPARSE {row['cus_alg']} {row['cus_graph_us']:.1f} us, "
            f"err {row['rel_err']:.1e}{'' if row['correct'] else '  FAILED'}")
    return rows


MAP_LABEL = {"rows": "rows", "wide": "wide", "pair": "pair", "pair16": "p16", "pair16_deep": "p16d"}  # map column


def print_table(rows, l2_tbs: float | None = None) -> None:
    print(f"{'matrix':<14}{'order':<8}{'nnz':>10}{'N':>5} {'precision':<10}{'walk':>9}{'A order':>9}{'cuSPARSE':>10}"
          f"{'x cus':>7}{'L2 x':>6}{'map':>5}{'walk iss':>9}{'cus iss':>9}{'x iss':>7}{'TB/s':>6}{'cus':>6}"
          f"{'err':>9} ok")
    for r in rows:
        print(f"{r['matrix'][:13]:<14}{r['order'][:7]:<8}{r['nnz']:>10}{r['N']:>5} {r['precision']:<10}"
              f"{r['walk_graph_us']:>9.1f}{r['given_graph_us']:>9.1f}{r['cus_graph_us']:>10.1f}"
              f"{r['cus_graph_us'] / r['walk_graph_us']:>7.2f}"
              f"{l2_bound_x(r, l2_tbs) if l2_tbs else float('nan'):>6.2f}{MAP_LABEL.get(r.get('mapping'), '-'):>5}"
              f"{r['walk_issued_us']:>9.1f}{r['cus_issued_us']:>9.1f}"
              f"{r['cus_issued_us'] / r['walk_issued_us']:>7.2f}{gather_tbs(r, r['walk_graph_us']):>6.2f}"
              f"{gather_tbs(r, r['cus_graph_us']):>6.2f}{r['rel_err']:>9.1e} {'yes' if r['correct'] else 'NO'}")
    print("us per call; walk = csr-rows with its default row walk (rows by length, longest first), A order = "
          "heavy 0; graph replay, and as issued (iss) through the bound call; x = cuSPARSE (same "
          "precision) / ours; L2 x = the x of a kernel gathering every B row from L2 at the L2 read rate; map = the "
          "mapping `tune` kept (p16 / p16d: pair16 / pair16_deep); TB/s = B rows gathered per second (one row of N "
          "values per nonzero; graph replay), ours (walk) and cuSPARSE's"
          + (f"; this GPU's L2 read rate: {l2_tbs:.2f} TB/s" if l2_tbs else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--matrices", nargs="+", help="only these labels (rmat-s16, rmat-s17, sbm-100k, "
                    f"{FIXTURE}, rmat-s20)")
    ap.add_argument("--budget-s", type=float, default=240.0, help="start no new matrix after this many seconds")
    ap.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--table-from", type=Path, help="reprint the table of a results file and exit (no GPU)")
    args = ap.parse_args(argv)
    if min(args.ns) < 1 or args.budget_s < 0:
        raise SystemExit(f"benchmarks/csr_rows.py: --ns must be >= 1 (got {args.ns}) and --budget-s >= 0 (got "
                         f"{args.budget_s})")
    if args.table_from:
        saved = json.loads(args.table_from.read_text())
        print_table(saved["rows"], saved["meta"].get("l2_read_tbs"))
        return 0
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from machine import gpu_meta, write_json
    from spmm import fixture  # the fixtures' finder and SuiteSparse reader the benchmarks share
    from tasks.fetch.generators import generate
    from tasks.reorder import auto_reorder

    matrices = [(label, lambda k=kind, p=params: generate(k, f"{p}&seed=1&shuffle=1")) for label, kind, params
                in GENERATED[:2]] + [(FIXTURE, lambda: fixture(FIXTURE))]
    matrices += [(label, lambda k=kind, p=params: generate(k, f"{p}&seed=1&shuffle=1")) for label, kind, params
                 in GENERATED[2:] + LAST]
    if args.matrices:
        unknown = set(args.matrices) - {m[0] for m in matrices}
        if unknown:
            raise SystemExit(f"benchmarks/csr_rows.py: unknown --matrices {sorted(unknown)}; known: "
                             f"{[m[0] for m in matrices]}")
        matrices = [m for m in matrices if m[0] in args.matrices]
    meta = {**gpu_meta(), "command": " ".join(sys.argv),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "method": __doc__,
            "l2_read_tbs": l2_read_tbs()}
    log(f"L2 read rate {meta['l2_read_tbs']:.2f} TB/s")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / f"csr_rows-{meta['slug']}-{dt.date.today().isoformat()}.json"
    rng, rows, skipped, t0 = np.random.default_rng(0), [], [], time.time()
    for label, make in matrices:
        if time.time() - t0 > args.budget_s:
            skipped.append(f"{label}: --budget-s reached")
            continue
        A = make()
        if A is None:
            skipped.append(f"{label}: fixture not present")
            log(f"{label}: fixture not present, skipped")
            continue
        A = sp.csr_array(A, dtype=np.float32)
        A.sort_indices()
        method, perm, _ = auto_reorder(A, seed=0)
        for order, M in (("given", A), (method, sp.csr_array(A[perm]))):
            M.sort_indices()
            for N in args.ns:
                rows.extend(measure(label, order, M, N, rng))
        write_json(path, {"meta": {**meta, "partial": True, "skipped": skipped}, "rows": rows})
    meta.update(wall_s=time.time() - t0, skipped=skipped)
    write_json(path, {"meta": meta, "rows": rows})
    print_table(rows, meta["l2_read_tbs"])
    bad = [r for r in rows if not r["correct"]]
    print(f"correctness: {len(rows) - len(bad)}/{len(rows)} within tolerance with both walks bitwise equal")
    print(f"results: {path}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
