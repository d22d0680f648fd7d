"""CSR -> ME-TCF conversion cost: CPU seconds and peak memory, MeanNnzTC, ME-TCF bytes vs CSR bytes; --gpu adds CuPy.

Matrices: seeded R-MAT graphs from ``tasks.fetch.generators`` (default sizes about 1M and 10M nonzeros, float32
values, shuffled labels, i.e. no reordering). CPU: best of ``--repeats`` of `csr_to_metcf`; peak extra memory of
one conversion measured with tracemalloc (NumPy reports its buffers there), so it excludes the input CSR.
GPU (``--gpu``, needs CuPy): `csr_to_metcf_gpu` with the CSR already on the device, median of 20 after 3 warm-up
runs, timed with CUDA events; its result is checked against the CPU converter once. Writes JSON to
``benchmarks/results/convert-<date>.json`` and prints a table last.

    python benchmarks/convert.py [--sizes 1m,10m] [--repeats 3] [--gpu]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from machine import cpu_model, gpu_meta  # noqa: E402  (benchmarks/ is the script folder)
import scipy  # noqa: E402

from kernels.formats.metcf.container import csr_to_metcf, metcf_stats, metcf_to_csr  # noqa: E402

# R-MAT parameters giving about 1M / 10M distinct nonzeros after duplicate removal.
SIZES = {"1m": {"scale": 16, "edge_factor": 17, "seed": 1}, "10m": {"scale": 19, "edge_factor": 22, "seed": 1},
         "100m": {"scale": 22, "edge_factor": 27, "seed": 1}}
FIELDS = ("row_window_offset", "tc_offset", "tc_local_id", "sparse_a_to_b", "data")


def build(params: dict):
    from tasks.fetch.generators import generate

    return generate("rmat", dict(params))


def time_cpu(A, repeats: int) -> dict:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        M = csr_to_metcf(A)
        best = min(best, time.perf_counter() - start)
    tracemalloc.start()
    csr_to_metcf(A)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    start = time.perf_counter()
    back = metcf_to_csr(M)
    inverse_s = time.perf_counter() - start
    assert back.nnz == A.nnz and np.array_equal(back.indices, A.indices) and np.array_equal(back.data, A.data)
    csr_bytes = A.indptr.nbytes + A.indices.nbytes + A.data.nbytes
    return {"M": M, "cpu_s": best, "cpu_peak_mb": peak / 1e6, "inverse_s": inverse_s,
            "stats": metcf_stats(M, A_csr_nbytes=csr_bytes)}


def time_gpu(A, M, runs: int = 20, warmup: int = 3) -> dict:
    import cupy

    from kernels.formats.metcf.gpu import csr_to_metcf_gpu

    indptr, indices, data = (cupy.asarray(x) for x in (A.indptr, A.indices, A.data))
    for _ in range(warmup):
        D = csr_to_metcf_gpu(indptr, indices, data, A.shape)
    G = D.to_host()
    for field in FIELDS:
        assert getattr(G, field).dtype == getattr(M, field).dtype
        assert np.array_equal(getattr(G, field), getattr(M, field)), f"GPU {field} differs from the CPU converter"
    times = []
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    pool = cupy.get_default_memory_pool()
    for _ in range(runs):
        start.record()
        D = csr_to_metcf_gpu(indptr, indices, data, A.shape)
        stop.record()
        stop.synchronize()  # synchronize!
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    gpu = gpu_meta()
    return {"gpu_ms": float(np.median(times)), "gpu_ms_min": float(np.min(times)),
            "gpu_pool_mb": pool.total_bytes() / 1e6, "gpu_name": gpu["device"], "cupy": gpu["cupy"]}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1m,10m", help=f"comma list of {', '.join(SIZES)}")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gpu", action="store_true", help="also time the CuPy converter (needs CuPy and a GPU)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)

    rows = []
    for size in args.sizes.split(","):
        params = SIZES[size]
        t0 = time.perf_counter()
        A = build(params)
        gen_s = time.perf_counter() - t0
        cpu = time_cpu(A, args.repeats)
        row = {"size": size, "matrix": f"gen:rmat?scale={params['scale']}&edge_factor={params['edge_factor']}"
               f"&seed={params['seed']}", "shape": list(A.shape), "nnz": int(A.nnz), "generate_s": round(gen_s, 2),
               "cpu_s": round(cpu["cpu_s"], 3), "cpu_peak_mb": round(cpu["cpu_peak_mb"], 1),
               "cpu_mnnz_per_s": round(A.nnz / cpu["cpu_s"] / 1e6, 2), "inverse_s": round(cpu["inverse_s"], 3),
               **{k: v for k, v in cpu["stats"].items() if k != "shape"}}
        if args.gpu:
            row.update(time_gpu(A, cpu["M"]))
        rows.append(row)
        print(f"{size}: nnz {A.nnz:,} cpu {cpu['cpu_s']:.3f} s", file=sys.stderr)

    result = {"benchmark": "convert", "date": datetime.datetime.now().isoformat(timespec="seconds"),
              "command": " ".join([sys.executable, *sys.argv]), "repeats": args.repeats, "rows": rows,
              "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
                          "numpy": np.__version__, "scipy": scipy.__version__,
                          "device": rows[0].get("gpu_name", "CPU only (no GPU used)") if rows else None}}
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"convert-{datetime.date.today().isoformat()}{'-gpu' if args.gpu else ''}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    head = f"{'size':<6}{'nnz':>12}{'cpu s':>9}{'peak MB':>9}{'inv s':>8}{'MeanNnzTC':>11}{'blocks':>11}" \
           f"{'bpw max':>9}{'METCF/CSR':>11}"
    print(head + (f"{'gpu ms':>9}" if args.gpu else ""))
    for r in rows:
        line = f"{r['size']:<6}{r['nnz']:>12,}{r['cpu_s']:>9.3f}{r['cpu_peak_mb']:>9.0f}{r['inverse_s']:>8.3f}" \
               f"{r['mean_nnz_tc']:>11.2f}{r['n_blocks']:>11,}{r['blocks_per_window_max']:>9,}" \
               f"{r['metcf_over_csr']:>11.3f}"
        print(line + (f"{r['gpu_ms']:>9.2f}" if args.gpu else ""))
    print(f"CPU: best of {args.repeats}, 1 process ({os.cpu_count()} cores, NumPy sorts are single-threaded); "
          "peak MB = extra NumPy memory of one conversion (tracemalloc)")
    return result


if __name__ == "__main__":
    main()
