"""Parse throughput: MB/s of MatrixMarket text read into canonical CSR on one core.

Writes a generated matrix (default ``gen:rmat?scale=20&edge_factor=6&seed=1``, random float32 values, about
200 MB of text) to a temp dir, then times ``fast_matrix_market.read_coo`` alone and the full
``tasks.parse.mtx.read_mtx`` (text + validation + canonical CSR), both with ``parallelism=1``, best of
``--repeats``. Checks shape and nnz, writes JSON to ``benchmarks/results/parse-<date>.json`` and prints a table last.

    python benchmarks/parse.py [--spec SPEC] [--repeats 3]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import fast_matrix_market as fmm  # noqa: E402
import numpy as np  # noqa: E402
from machine import cpu_model  # noqa: E402  (benchmarks/ is the script folder)
import scipy  # noqa: E402

from tasks.fetch import fetch  # noqa: E402
from tasks.parse import load_matrix  # noqa: E402
from tasks.parse.mtx import read_mtx  # noqa: E402


def _best(fn, repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="gen:rmat?scale=20&edge_factor=6&seed=1")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        A = load_matrix(fetch(args.spec, tmp)).csr
        gen_s = time.perf_counter() - t0
        path = Path(tmp) / "bench.mtx"
        fmm.mmwrite(str(path), A.tocoo(), parallelism=1)
        size_mb = path.stat().st_size / 1e6
        fmm_s, ((_data, (rows, _cols)), _shape) = _best(lambda: fmm.read_coo(str(path), parallelism=1),
                                                         args.repeats)
        full_s, parsed = _best(lambda: read_mtx(path, "bench.mtx", parallelism=1), args.repeats)
        assert parsed.csr.shape == A.shape and parsed.csr.nnz == A.nnz and rows.size == A.nnz
        assert abs(parsed.csr - A).max() < 1e-6

    result = {
        "benchmark": "parse", "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join([sys.executable, *sys.argv]), "matrix": args.spec,
        "shape": list(A.shape), "nnz": int(A.nnz), "text_mb": round(size_mb, 1), "generate_s": round(gen_s, 2),
        "fmm_read_coo_s": round(fmm_s, 3), "fmm_mb_per_s": round(size_mb / fmm_s, 1),
        "read_mtx_s": round(full_s, 3), "read_mtx_mb_per_s": round(size_mb / full_s, 1),
        "threads": 1, "repeats": args.repeats,
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "device": "CPU only (no GPU used)",
                    "python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
                    "fast_matrix_market": fmm.__version__},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"parse-{datetime.date.today().isoformat()}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    print(f"{'step':<34}{'seconds':>10}{'MB/s':>10}")
    print(f"{'fast_matrix_market.read_coo':<34}{fmm_s:>10.2f}{size_mb / fmm_s:>10.1f}")
    print(f"{'read_mtx (validate + CSR)':<34}{full_s:>10.2f}{size_mb / full_s:>10.1f}")
    print(f"text {size_mb:.0f} MB, {A.shape[0]:,} x {A.shape[1]:,}, nnz {A.nnz:,}, 1 thread, best of {args.repeats}")
    return result


if __name__ == "__main__":
    main()
