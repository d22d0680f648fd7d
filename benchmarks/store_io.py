"""Dense store I/O of the driver-free one-shot (``tasks/distribute/direct.py``), on the CPU: a synthetic B [K, N]
float32 (standard normal, seed 0; default 524288 x 256 = 537 MB, the R-MAT case of the 4 x H100 runs) through the
project's own calls.

- ``api``: ``store_b`` (each repeat a new artifact), ``read_rows`` of all of B and of a random half of its rows
  (sorted, spread over every row group: a shard's halo), ``write_block`` of all K rows and of K / 4 rows (one
  worker's block at 4 workers), ``read_c`` of a C written by ``write_block`` and committed with a random row
  permutation (``C[perm] = C_reordered``). Wall seconds, median and best of ``--repeats``; every result is checked
  bitwise against NumPy.
- ``workers``: W processes at once (``--workers``), each reading its own random half of B's rows and writing
  its K / W rows of C, as W Dask workers of one host do; per repeat the slowest worker and the median worker.
- ``steps``: one more run of each call with the library calls it makes wrapped by timers: Parquet open (footer),
  decode (``ParquetFile.read`` / ``read_row_groups``, page CRCs verified), encode + file write
  (``pq.write_table``), ``os.fsync``, ``os.replace``, sha256 and footer CRC of the written file (``file_record``);
  ``other`` = wall minus those (Arrow -> NumPy, row gathers and copies, page faults of new arrays). Summed over
  threads where the call uses several, so the parts may exceed the wall.
- ``options``: writer and reader settings measured on one 64 MiB block (65536 x 256) with pyarrow alone: the
  layout (``fixed_size_list`` with nullable items as stored before 2026-11-28, with non-null items, one flat
  column), compression, statistics, row-group and page size, page CRCs, ``memory_map``, ``pre_buffer``,
  ``use_threads``, and decoding the block's row groups from T threads.

Reads are from the page cache (files just written), as on a worker reading a B the flow stored. JSON to
``benchmarks/results/store_io-<cpus>cpu-<date>[-<tag>].json``; tables last.

    python benchmarks/store_io.py [--rows 524288] [--cols 256] [--repeats 3] [--workers 1 4] [--tag before]
"""
from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from machine import cpu_model  # noqa: E402  (benchmarks/ is the script folder)

from storage import BlockStore  # noqa: E402
from tasks.distribute import direct  # noqa: E402

ART = "inputs/bench-b"


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t0, out


def records_of(written) -> list:
    """``write_block``'s manifest record(s) as a list (one record, or a list of them)."""
    return list(written) if isinstance(written, list) else [written]


def commit(mstore, run_id: str, records: list, perm: np.ndarray, n_cols: int) -> None:
    """The manifest entry ``commit_product`` writes after a run, for a plan stub of ``perm``'s rows."""
    plan = SimpleNamespace(fingerprint=lambda: "bench", n_parts=1, perm=perm, shape=(int(perm.shape[0]), n_cols))
    direct.commit_product(mstore, run_id, records, plan, b=ART, perm_key="bench")


def half_rows(n: int, seed: int) -> np.ndarray:
    return np.sort(np.random.default_rng(seed).choice(n, n // 2, replace=False)).astype(np.int64)


def summary(name: str, times: list[float], nbytes: int) -> dict:
    med = statistics.median(times)
    return {"op": name, "bytes": int(nbytes), "median_s": med, "best_s": min(times), "runs_s": times,
            "gb_per_s": nbytes / med / 1e9}


def api(root: Path, B: np.ndarray, repeats: int) -> list[dict]:
    mstore = BlockStore(root).matrix("bench")
    K, N = B.shape
    rows = half_rows(K, 1)
    perm = np.random.default_rng(2).permutation(K).astype(np.int64)
    t = {k: [] for k in ("store_b", "read_rows all", "read_rows half", "write_block all", "write_block 1/4",
                         "read_c (perm)")}
    for rep in range(repeats):
        dt, _ = timed(direct.store_b, mstore, B, f"{ART}-{rep}")
        t["store_b"].append(dt)
        if rep:
            shutil.rmtree(mstore.folder / f"{ART}-{rep}")
        if rep == 0:
            direct.store_b(mstore, B, ART)
        dt, (got, _) = timed(direct.read_rows, mstore, ART, None)
        t["read_rows all"].append(dt)
        assert np.array_equal(got, B), "read_rows(None) differs from B"
        del got
        dt, (got, _) = timed(direct.read_rows, mstore, ART, rows)
        t["read_rows half"].append(dt)
        assert np.array_equal(got, B[rows]), "read_rows(half) differs from B[rows]"
        del got
        dt, written = timed(direct.write_block, mstore, f"all-{rep}", 0, B)
        t["write_block all"].append(dt)
        commit(mstore, f"all-{rep}", records_of(written), perm, N)
        dt, C = timed(direct.read_c, mstore, f"all-{rep}", perm)
        t["read_c (perm)"].append(dt)
        assert np.array_equal(C[perm], B), "read_c differs from C[perm] = B"
        del C
        shutil.rmtree(mstore.folder / "results" / f"all-{rep}")
        dt, _ = timed(direct.write_block, mstore, f"q-{rep}", 0, B[:K // 4])
        t["write_block 1/4"].append(dt)
        shutil.rmtree(mstore.folder / "results" / f"q-{rep}")
    sizes = {"read_rows half": rows.shape[0] * N * 4, "write_block 1/4": (K // 4) * N * 4}
    return [summary(name, ts, sizes.get(name, B.nbytes)) for name, ts in t.items()]


def worker_main(root: str, w: int, n_workers: int, repeats: int, barrier, queue) -> None:
    """One of W processes: per repeat (all start together) read a random half of B's rows, write K / W rows of C."""
    mstore = BlockStore(root).matrix("bench")
    K = int(mstore.manifest.require(ART)["meta"]["shape"][0])
    rows = half_rows(K, 100 + w)
    r0, r1 = w * K // n_workers, (w + 1) * K // n_workers
    out = []
    for rep in range(repeats):
        barrier.wait()
        t_read, (got, _) = timed(direct.read_rows, mstore, ART, rows)
        C = got[np.arange(r1 - r0) % got.shape[0]]  # this worker's K / W rows of C (B's rows stand in for them)
        barrier.wait()
        t_write, _ = timed(direct.write_block, mstore, f"workers-{n_workers}-{rep}", r0, C)
        out.append({"read_s": t_read, "write_s": t_write})
        del got, C
    queue.put((w, out))


def workers(root: Path, B: np.ndarray, counts: list[int], repeats: int) -> list[dict]:
    ctx = mp.get_context("spawn")
    rows_out = []
    for W in counts:
        barrier, queue = ctx.Barrier(W), ctx.Queue()
        procs = [ctx.Process(target=worker_main, args=(str(root), w, W, repeats, barrier, queue)) for w in range(W)]
        for p in procs:
            p.start()
        got = dict(queue.get() for _ in procs)
        for p in procs:
            p.join()
        for rep in range(repeats):
            shutil.rmtree(root / "matrices" / "bench" / "results" / f"workers-{W}-{rep}", ignore_errors=True)
        for key in ("read_s", "write_s"):
            per_rep = [[got[w][rep][key] for w in range(W)] for rep in range(repeats)]
            rows_out.append({"workers": W, "op": "read_rows half" if key == "read_s" else f"write_block 1/{W}",
                             "slowest_s": statistics.median(max(r) for r in per_rep),
                             "median_worker_s": statistics.median(x for r in per_rep for x in r),
                             "runs_s": per_rep})
    return rows_out


# ---- steps: the library calls each API call makes, timed by wrapping them -----------------------------------------
def _wrap(owner, name: str, label: str, acc: dict):
    orig = getattr(owner, name)

    def wrapped(*a, **k):
        t0 = time.perf_counter()
        try:
            return orig(*a, **k)
        finally:
            acc[label] = acc.get(label, 0.0) + time.perf_counter() - t0
    setattr(owner, name, wrapped)
    return owner, name, orig


def steps(root: Path, B: np.ndarray) -> list[dict]:
    import storage.manifest as man

    mstore = BlockStore(root).matrix("bench")
    K, N = B.shape
    rows, perm = half_rows(K, 1), np.random.default_rng(2).permutation(K).astype(np.int64)
    acc: dict = {}
    patches = [_wrap(pq.ParquetFile, "__init__", "open (footer)", acc),
               _wrap(pq.ParquetFile, "read", "decode", acc), _wrap(pq.ParquetFile, "read_row_groups", "decode", acc),
               _wrap(pq, "write_table", "encode + file write", acc), _wrap(os, "fsync", "fsync", acc),
               _wrap(os, "replace", "rename", acc)]
    for mod in list(sys.modules.values()):  # file_record is imported by name where it is used
        if getattr(mod, "file_record", None) is man.file_record and mod is not man:
            patches.append(_wrap(mod, "file_record", "sha256 + footer CRC", acc))
    patches.append(_wrap(man, "file_record", "sha256 + footer CRC", acc))
    calls = [("store_b", lambda: direct.store_b(mstore, B, f"{ART}-steps")),
             ("read_rows all", lambda: direct.read_rows(mstore, ART, None)),
             ("read_rows half", lambda: direct.read_rows(mstore, ART, rows)),
             ("write_block all", lambda: commit(mstore, "steps", records_of(direct.write_block(mstore, "steps", 0, B)),
                                                perm, N)),
             ("read_c (perm)", lambda: direct.read_c(mstore, "steps", perm)),
             ("write_block 1/4", lambda: direct.write_block(mstore, "steps-q", 0, B[:K // 4]))]
    out = []
    try:
        for name, fn in calls:
            acc.clear()
            wall, _ = timed(fn)
            parts = dict(acc)
            out.append({"op": name, "wall_s": wall, **parts, "other": wall - sum(parts.values())})
    finally:
        for owner, name, orig in reversed(patches):
            setattr(owner, name, orig)
    return out


# ---- options: pyarrow alone on one block ------------------------------------------------------------------------
def table_of(block: np.ndarray, layout: str) -> pa.Table:
    flat = pa.array(block.reshape(-1))
    n = block.shape[1]
    if layout == "flat":
        return pa.Table.from_arrays([flat], schema=pa.schema([pa.field("values", flat.type, nullable=False)]))
    item = pa.field("item", flat.type, nullable=layout == "fsl")
    return pa.Table.from_arrays([pa.FixedSizeListArray.from_arrays(flat, type=pa.list_(item, n))],
                                schema=pa.schema([pa.field("values", pa.list_(item, n), nullable=False)]))


BASE = {"layout": "fsl", "compression": "snappy", "group_mib": 4, "crc": True, "stats": True, "page_mib": 1}
WRITES = [("before: fsl, snappy, 4 MiB groups, CRCs, stats", {}), ("compression none", {"compression": "none"}),
          ("no statistics", {"stats": False}), ("64 MiB row groups", {"group_mib": 64}),
          ("8 MiB pages", {"page_mib": 8}),
          ("no page CRCs (cost only)", {"crc": False}), ("fsl, non-null items", {"layout": "fsl-notnull"}),
          ("flat values column", {"layout": "flat"}),
          ("flat, none, no stats", {"layout": "flat", "compression": "none", "stats": False}),
          ("flat, snappy, no stats", {"layout": "flat", "stats": False})]
THREADED = (WRITES[0][0], "flat, none, no stats")
READS = [("default", {}, {}), ("memory_map", {"memory_map": True}, {}), ("pre_buffer off", {"pre_buffer": False}, {}),
         ("use_threads off", {}, {"use_threads": False}), ("page CRCs not verified", {"verify": False}, {})]


def write_opts(o: dict, n_cols: int) -> dict:
    group_rows = (o["group_mib"] << 20) // (4 * n_cols)
    return dict(compression=o["compression"], write_statistics=o["stats"], write_page_checksum=o["crc"],
                use_dictionary=False, data_page_size=o["page_mib"] << 20,
                row_group_size=group_rows * (n_cols if o["layout"] == "flat" else 1))


def best(fn, n: int = 3) -> float:
    return min(timed(fn)[0] for _ in range(n))


def decode_threads(path: str, threads: int) -> None:
    n_groups = pq.ParquetFile(path).metadata.num_row_groups

    def one(groups):
        pq.ParquetFile(path, page_checksum_verification=True).read_row_groups(groups)
    chunks = [list(range(i, n_groups, threads)) for i in range(threads)]
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(one, [c for c in chunks if c]))


def options(tmp: Path, block: np.ndarray, cpus: int) -> list[dict]:
    out = []
    for label, change in WRITES:
        o = {**BASE, **change}
        table, path = table_of(block, o["layout"]), str(tmp / "opt.parquet")
        kw = write_opts(o, block.shape[1])
        w = best(lambda: pq.write_table(table, path, **kw))
        reads = [(label, {}, {})] if change else [(f"{label}, read {r}", ro, rk) for r, ro, rk in READS]
        if o == {**BASE, "layout": "flat", "compression": "none", "stats": False}:
            reads += [(f"{label}, read {r}", ro, rk) for r, ro, rk in READS[1:]]
        for rlabel, ro, rk in reads:
            ro = dict(ro)
            verify = ro.pop("verify", True) and o["crc"]
            r = best(lambda: pq.ParquetFile(path, page_checksum_verification=verify, **ro).read(**rk))
            out.append({"config": rlabel, **o, "write_s": w, "read_s": r, "file_bytes": os.path.getsize(path),
                        "write_gb_per_s": block.nbytes / w / 1e9, "read_gb_per_s": block.nbytes / r / 1e9})
        if label in THREADED:
            for T in sorted({1, 2, min(cpus, 8), cpus}):
                r = best(lambda: decode_threads(path, T))
                out.append({"config": f"{label}, decode from {T} threads", **o, "threads": T, "read_s": r,
                            "read_gb_per_s": block.nbytes / r / 1e9})
    return out


# ---- output -------------------------------------------------------------------------------------------------------
def tables(res: dict) -> str:
    lines = [f"options, one {res['options_block_bytes'] / 2**20:.0f} MiB block (best of 3)",
             f"{'config':72s}{'write s':>9s}{'read s':>9s}{'read GB/s':>10s}{'MB':>7s}"]
    for r in res["options"]:
        w = f"{r['write_s']:9.3f}" if "write_s" in r else f"{'':9s}"
        mb = f"{r['file_bytes'] / 1e6:7.1f}" if "file_bytes" in r else ""
        lines.append(f"{r['config'][:71]:72s}{w}{r['read_s']:9.3f}{r['read_gb_per_s']:10.2f}{mb}")
    keys = ["open (footer)", "decode", "encode + file write", "fsync", "rename", "sha256 + footer CRC", "other"]
    lines += ["", "steps, seconds in each library call (summed over threads)",
              f"{'op':18s}{'wall':>8s}" + "".join(f"{k[:14]:>15s}" for k in keys)]
    for r in res["steps"]:
        lines.append(f"{r['op']:18s}{r['wall_s']:8.3f}" + "".join(f"{r.get(k, 0.0):15.3f}" for k in keys))
    lines += ["", f"workers at once ({res['shape'][0]} x {res['shape'][1]} float32)",
              f"{'W':>3s}  {'op':18s}{'slowest s':>10s}{'median s':>10s}"]
    for r in res["workers"]:
        lines.append(f"{r['workers']:3d}  {r['op']:18s}{r['slowest_s']:10.3f}{r['median_worker_s']:10.3f}")
    lines += ["", f"api, one process ({res['shape'][0]} x {res['shape'][1]} float32, {res['repeats']} repeats)",
              f"{'op':18s}{'MB':>8s}{'median s':>10s}{'best s':>9s}{'GB/s':>7s}"]
    for r in res["api"]:
        lines.append(f"{r['op']:18s}{r['bytes'] / 1e6:8.0f}{r['median_s']:10.3f}{r['best_s']:9.3f}{r['gb_per_s']:7.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=524288)
    ap.add_argument("--cols", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="*", default=[1, 4], help="process counts for the workers table")
    ap.add_argument("--dir", type=Path, default=None, help="scratch folder for the store (default a temp folder)")
    ap.add_argument("--tag", default="", help="suffix of the JSON file name")
    ap.add_argument("--note", default="", help="kept in the JSON (e.g. the commit a `git archive` copy was made of)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    cpus = len(os.sched_getaffinity(0))
    B = np.random.default_rng(0).standard_normal((args.rows, args.cols), dtype=np.float32)
    scratch = Path(tempfile.mkdtemp(prefix="store-io-", dir=args.dir))
    load_at_start = list(os.getloadavg())
    try:
        res = {"benchmark": "store_io", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
               "command": "python benchmarks/store_io.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "git": subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                     text=True).stdout.strip(),
               "machine": {"device": "cpu", "cpu": cpu_model(), "cores": cpus, "cpus_usable": cpus,
                           "cpu_count": os.cpu_count(), "loadavg_at_start": load_at_start, "scratch": str(scratch)},
               "versions": {"python": platform.python_version(), "numpy": np.__version__, "pyarrow": pa.__version__},
               "note": args.note, "shape": [args.rows, args.cols], "repeats": args.repeats,
               "io_threads_env": os.environ.get("TCSPMM_IO_THREADS")}
        res["api"] = api(scratch, B, args.repeats)
        res["workers"] = workers(scratch, B, args.workers, args.repeats)
        res["steps"] = steps(scratch, B)
        block = B[:min(args.rows, (64 << 20) // (4 * args.cols))]
        res["options_block_bytes"] = int(block.nbytes)
        res["options"] = options(scratch, block, cpus)
        res["machine"]["loadavg_at_end"] = list(os.getloadavg())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"store_io-{cpus}cpu-{res['date'][:10]}{'-' + args.tag if args.tag else ''}.json"
    path.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    print(tables(res))
    return res


if __name__ == "__main__":
    main()
