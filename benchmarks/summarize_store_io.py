"""The store I/O section of docs/benchmarks.md (benchmarks/store_io.py's files), for benchmarks/summarize.py.

The newest run, beside the newest ``-before`` run of the same shape (the code before a change, run on the same
machine) when there is one. No targets: the one-shot's target (4 GPUs at most 0.35x one GPU, end to end) is judged
in the multi-GPU section; this one shows where the dense reads and writes spend their time.
"""
from __future__ import annotations

STEP_KEYS = ("open (footer)", "decode", "encode + file write", "fsync", "rename", "sha256 + footer CRC", "other")


def _before(run, older, h):
    """The newest ``-before`` file among the older ones with the run's shape, or None."""
    for name in sorted((n for n in older if n.endswith("-before.json")), reverse=True):
        cand = h.load(run.path.parent / name)
        if cand.meta.get("shape") == run.meta.get("shape"):
            return cand
    return None


def store_io_section(runs, v0, older, *, h) -> list[str]:
    title = "Store I/O: dense B and C through the Parquet store (the driver-free one-shot)"
    if not runs:
        return h.absent("store_io", title)
    run = runs[0]
    m = run.meta
    before = _before(run, older, h)
    b = before.meta if before else {}
    rows, cols = m["shape"]
    out = h.opening(
        title, run,
        f"B [{rows}, {cols}] float32 (standard normal) through `tasks/distribute/direct.py` in one process: "
        "`store_b`, `read_rows` of all of B and of a random sorted half of its rows (every row group touched: a "
        "shard's halo), `write_block` of all rows and of a quarter (one worker's block at 4 workers), `read_c` "
        f"of a C committed in a permuted row order; wall seconds, median of {m['repeats']}, each result checked "
        "bitwise. Files read from the page cache. "
        + (f"Before: `{before.path.name}` ({b.get('note') or b.get('git') or 'the code before'}), same machine."
           if before else "No before file."))
    old = {r["op"]: r for r in b.get("api", [])}
    out += h.table(("op", "MB", "before s", "after s", "speedup"),
                   [(r["op"], h.f(r["bytes"] / 1e6, 0), h.f(old.get(r["op"], {}).get("median_s"), 3),
                     h.f(r["median_s"], 3),
                     h.f(old[r["op"]]["median_s"] / r["median_s"], 2, "x") if r["op"] in old else "–")
                    for r in m["api"]])
    old_w = {(r["workers"], r["op"]): r for r in b.get("workers", [])}
    out += ["W worker processes at once, each reading its own random half of B's rows and writing its K / W rows "
            "of C (the slowest worker and the median worker per repeat, median over repeats):", ""]
    out += h.table(("W", "op", "before slowest s", "after slowest s", "before median s", "after median s"),
                   [(r["workers"], r["op"], h.f(old_w.get((r["workers"], r["op"]), {}).get("slowest_s"), 3),
                     h.f(r["slowest_s"], 3), h.f(old_w.get((r["workers"], r["op"]), {}).get("median_worker_s"), 3),
                     h.f(r["median_worker_s"], 3)) for r in m["workers"]])
    out += ["Seconds inside each library call of one more run (summed over the threads a call uses, so parts may "
            "add up to more than the wall; other = wall minus the parts: Arrow to NumPy, row gathers and copies, "
            "page faults of new arrays):", ""]
    steps = [("before", s) for s in b.get("steps", [])] + [("after", s) for s in m["steps"]]
    out += h.table(("op", "code", "wall", *STEP_KEYS),
                   [(s["op"], who, h.f(s["wall_s"], 3), *(h.f(s.get(k, 0.0), 3) for k in STEP_KEYS))
                    for who, s in sorted(steps, key=lambda x: x[1]["op"])])
    out += [f"Writer and reader settings on one {m['options_block_bytes'] / 2**20:.0f} MiB block with pyarrow alone "
            "(best of 3; the same experiment in every run):", ""]
    out += h.table(("config", "write s", "read s", "read GB/s", "file MB"),
                   [(r["config"], h.f(r.get("write_s"), 3), h.f(r["read_s"], 3), h.f(r["read_gb_per_s"], 2),
                     h.f(r["file_bytes"] / 1e6, 1) if "file_bytes" in r else "–") for r in m["options"]])
    used = {before.path.name} if before else set()
    return out + h.older_note([n for n in older if n not in used]) + [
        "No targets are defined for this benchmark.", "", h.reproduce("store_io", run), ""]
