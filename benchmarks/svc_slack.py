"""The slack of Sparse Vector Compression's V rule (kernels/formats/cvse/svc.py, WORK_SLACK) on the current CVSE
SpMM kernel: how much more mma work V = 16 may do than V = 8 and still be as fast.

    PYTHONPATH=. python3 benchmarks/svc_slack.py [--ns 256 1024] [--repeats 20] [--out-dir DIR]

Matrices: gen:dlmc 4096 x 4096 weights pruned at V = 8 (sparsity 0.5-0.9: V = 16 pads them) and unstructured
(V = 1, sparsity 0.5-0.8: V = 8 and 16 pad alike), so the work ratio w = work(16) / work(8) (work = vectors x
ceil(V / 8) n8 columns of mma, cvse_svc.mma_work) spans 1.0-2.0. Per (matrix, N): CVSE FP16 SpMM at V = 8 and
V = 16 (csr_to_cvse(vector=...)), device ms by CUDA-graph replay (kernels.launch.graph_ms), time ratio
t = ms(16) / ms(8), and t / w (V = 16's time per unit of work relative to V = 8's). The break-even slack is
1 / geomean(t / w): V = 16 is as fast as V = 8 when its work is at most that many times V = 8's. Every C is checked
against float64 on sampled rows in the same run (exit 1 over FP16's tolerance). JSON under --out-dir, table last.
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
sys.path.insert(0, str(REPO))

from kernels import launch
from kernels.formats.cvse import launch as launch_cvse  # noqa: E402
from kernels.formats.cvse.container import csr_to_cvse  # noqa: E402
from kernels.formats.cvse.svc import WORK_SLACK, mma_work, vector_counts  # noqa: E402
from kernels.precision import precision  # noqa: E402
from tasks.fetch.generators import generate  # noqa: E402

MATRICES = [(f"dlmc-V8-s{round(100 * s)}", f"rows=4096&cols=4096&sparsity={s}&vector=8&seed=1")
            for s in (0.5, 0.7, 0.8, 0.9)]
MATRICES += [(f"dlmc-V1-s{round(100 * s)}", f"rows=4096&cols=4096&sparsity={s}&vector=1&seed=1")
             for s in (0.5, 0.7, 0.8)]
SAMPLE_ROWS = 512


def measure(A, N: int, repeats: int, rng) -> dict:
    import cupy

    p = precision("float16")
    B32 = rng.standard_normal((A.shape[1], N)).astype(np.float32)
    B = cupy.asarray(p.to_storage(B32))
    rows = np.sort(rng.choice(A.shape[0], SAMPLE_ROWS, replace=False))
    Ar = sp.csr_array((p.rounded(A.data), A.indices, A.indptr), shape=A.shape)
    ref = Ar[rows].astype(np.float64) @ p.rounded(B32).astype(np.float64)
    out = cupy.empty((A.shape[0], N), dtype=cupy.float16)
    ms, err = {}, {}
    for V in (8, 16):
        dm = launch_cvse.upload(csr_to_cvse(A, vector=V, to_storage=p.to_storage), "float16")
        ms[V] = launch.graph_ms(lambda: launch_cvse.spmm(dm, B, out), repeats=repeats)
        out.fill(np.nan)
        launch_cvse.spmm(dm, B, out)
        C = cupy.asnumpy(out[cupy.asarray(rows)]).astype(np.float64)
        err[V] = float(np.linalg.norm(C - ref) / max(np.linalg.norm(ref), 1e-30)) if np.isfinite(C).all() \
            else float("nan")
        del dm
    return {"ms": ms, "rel_err": err}


def main(argv=None) -> int:
    from machine import gpu_meta

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    meta = {**gpu_meta(), "command": " ".join(sys.argv),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "cvse_config": launch_cvse.CVSE_CONFIG.__dict__, "work_slack_in_code": WORK_SLACK,
            "matrices": "gen:dlmc (DLMC-style, generated: the DLMC collection is not reachable here)"}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / f"svc-slack-{meta['slug']}-{dt.date.today().isoformat()}.json"
    rows, tol, t0 = [], precision("float16").tolerance, time.time()
    for label, params in MATRICES:
        A = sp.csr_array(generate("dlmc", params), dtype=np.float32)
        work = mma_work(vector_counts(A, (8, 16)))
        w = work[16] / work[8]
        for N in args.ns:
            r = measure(A, N, args.repeats, np.random.default_rng(N))
            t = r["ms"][16] / r["ms"][8]
            rows.append({"matrix": label, "nnz": int(A.nnz), "N": N, "work": work, "work_ratio": w,
                         "ms": {str(k): v for k, v in r["ms"].items()}, "time_ratio": t, "time_per_work": t / w,
                         "rel_err": {str(k): v for k, v in r["rel_err"].items()}})
            print(f"[{time.time() - t0:6.1f}s] {label} N={N}: w {w:.2f} t {t:.2f} t/w {t / w:.3f}", file=sys.stderr,
                  flush=True)
    g = float(np.exp(np.mean(np.log([r["time_per_work"] for r in rows]))))
    bad = [r for r in rows if not all(np.isfinite(e) and e <= tol for e in r["rel_err"].values())]
    path.write_text(json.dumps({"meta": {**meta, "wall_s": time.time() - t0}, "rows": rows,
                                "geomean_time_per_work": g, "break_even_slack": 1 / g}, indent=1))
    print(f"{'matrix':<14}{'N':>6}{'work 8':>10}{'work 16':>10}{'w':>6}{'ms V=8':>9}{'ms V=16':>9}{'t':>6}{'t/w':>7}"
          f"{'max err':>9}")
    for r in rows:
        print(f"{r['matrix']:<14}{r['N']:>6}{r['work'][8]:>10}"
              f"{r['work'][16]:>10}{r['work_ratio']:>6.2f}{r['ms']['8']:>9.4f}{r['ms']['16']:>9.4f}"
              f"{r['time_ratio']:>6.2f}{r['time_per_work']:>7.3f}{max(r['rel_err'].values()):>9.1e}")
    print(f"geomean t/w {g:.3f} -> break-even slack {1 / g:.2f} (WORK_SLACK in code: {WORK_SLACK}); "
          f"{len(rows) - len(bad)}/{len(rows)} results within FP16's tolerance {tol}")
    print(f"results: {path}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
