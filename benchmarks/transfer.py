"""Host <-> device copy rates of a dense operand: CuPy's copy from and into pageable memory against
``kernels.transfer``'s pinned staging (what the one-shot workers use for B and C), bitwise checked in the same run.

    python benchmarks/transfer.py [--rows 524288] [--cols 256] [--repeats 20] [--out PATH]

Per direction the median of ``--repeats`` copies (after two warm-up copies) of a float32 [rows, cols] array
(default 537 MB: the one-shot benchmark's B), synchronized: ``h2d pageable`` = ``cupy.asarray(x)``, ``h2d staged``
= ``transfer.to_device(x)``, ``d2h pageable`` = ``x.get()`` into fresh memory (what a result costs), ``d2h reused``
= ``x.get(out=y)`` into memory written before (the page-fault-free bound), ``d2h staged`` = ``transfer.to_host(x)``
(fresh memory). ``staging setup``: the first staged copy in the process (pinned buffers and threads made). Run one
process per GPU at once to see a shared host's rates (CUDA_VISIBLE_DEVICES per process). JSON (device, versions,
command, date, rates) to ``--out`` (default benchmarks/results/transfer-<device>-<date>.json); the table is printed
last.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from storage.atomic import atomic_path  # noqa: E402


def median_s(fn, sync, repeats: int, warmup: int = 2):
    """(median seconds of ``repeats`` synchronized calls after ``warmup``, the last call's result)."""
    out, times = None, []
    for i in range(warmup + repeats):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=524288)
    ap.add_argument("--cols", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if args.rows < 1 or args.cols < 1 or args.repeats < 1:
        print(f"transfer.py: --rows, --cols and --repeats must be positive, got {args.rows}, {args.cols}, "
              f"{args.repeats}", file=sys.stderr)
        return 2
    import cupy

    from machine import gpu_meta  # benchmarks/ is the script folder
    from kernels import transfer

    sync = cupy.cuda.Device().synchronize
    x = np.random.default_rng(0).standard_normal((args.rows, args.cols), dtype=np.float32)
    gb = x.nbytes / 1e9
    setup, _ = median_s(lambda: transfer.to_device(x[: max(1, transfer.MIN_BYTES // x[0].nbytes)]), sync, 1, 0)
    t = {}
    t["h2d pageable"], d1 = median_s(lambda: cupy.asarray(x), sync, args.repeats)
    t["h2d staged"], d2 = median_s(lambda: transfer.to_device(x), sync, args.repeats)
    same_dev = bool((d1.view(cupy.uint32) == d2.view(cupy.uint32)).all())
    t["d2h pageable"], h1 = median_s(lambda: d1.get(), sync, args.repeats)
    y = np.empty_like(x)
    t["d2h reused"], _ = median_s(lambda: d1.get(out=y), sync, args.repeats)
    t["d2h staged"], h2 = median_s(lambda: transfer.to_host(d1), sync, args.repeats)
    same_host = np.array_equal(h2.view(np.uint32), x.view(np.uint32)) and np.array_equal(h1, h2)
    meta = gpu_meta()
    rows = [{"copy": k, "ms": v * 1e3, "gb_s": gb / v} for k, v in t.items()]
    doc = {**meta, "command": " ".join(sys.argv), "date": dt.datetime.now(dt.timezone.utc).isoformat(),
           "bytes": int(x.nbytes), "staging_setup_ms": setup * 1e3, "bitwise_equal": same_dev and same_host,
           "chunk": transfer.CHUNK, "buffers": transfer.BUFFERS, "threads": transfer.THREADS, "rows": rows}
    out = args.out or REPO / "benchmarks" / "results" / f"transfer-{meta['slug']}-{dt.date.today().isoformat()}.json"
    with atomic_path(out) as tmp:
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}; {x.nbytes / 1e6:.0f} MB, staging setup {setup * 1e3:.0f} ms, bitwise equal: "
          f"{doc['bitwise_equal']}")
    print(f"{'copy':14s} {'ms':>8s} {'GB/s':>7s}")
    for r in rows:
        print(f"{r['copy']:14s} {r['ms']:8.1f} {r['gb_s']:7.2f}")
    return 0 if doc["bitwise_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
