"""The CUDA-core CSR kernel section of docs/benchmarks.md (benchmarks/csr_rows.py's files), for
benchmarks/summarize.py.

Targets (issue 32, the path power-law graphs take): in float16 the kernel is at least as fast as cuSPARSE half CSR
and as its own float32 run in every case (16-bit B moves half the bytes); the default row walk (long rows first) is
never more than 3% slower than A's own order; every C within tolerance with both walks bitwise equal.
"""
from __future__ import annotations

from csr_rows import gather_tbs, l2_bound_x  # benchmarks/ is the script folder (summarize.py puts it on the path)

WALK_SLOWER = 1.03


def csr_section(runs, v0, older, *, h) -> list[str]:
    title = "CUDA-core CSR kernel (csr-rows) per precision and row walk, against cuSPARSE CSR in the same precision"
    goals = [("float16 vs cuSPARSE half CSR (graph replay), every case", ">= 1.0x"),
             ("float16 vs its own float32 run (graph replay), every case", ">= 1.0x"),
             ("default walk vs A's order (graph replay), every case", f"<= {WALK_SLOWER}x")]
    if not runs:
        return h.absent("csr_rows", title, goals)
    run = runs[0]
    rows = run.rows
    out = h.opening(
        title, run,
        "`CsrRows.bind` per precision on the same B: `walk` = the default row walk (float32: rows of >= 2x the "
        "mean length launched first, longest first; 16-bit B, in files from `csr_rows-*-s28.json` on: every "
        "row by length, longest first), `A order` = the rows as stored; cuSPARSE = its best CSR "
        "algorithm in the same precision (half CSR computes on CUDA cores); device us per call by graph "
        "replay, `issued` = per call as issued through the bound calls; `x` = cuSPARSE / ours. Orders: the "
        "matrix as given (shuffled labels) and after `tasks.reorder.auto_reorder`. `gather TB/s`: the rows of "
        "B the product gathers (one row of N values per nonzero) per second of graph replay, ours (walk) / "
        "cuSPARSE's" + (f", against this GPU's L2 read rate in the same run, **{run.meta['l2_read_tbs']:.2f} "
                        "TB/s** (16-byte loads through L2 only over a 16 MiB resident buffer): a kernel "
                        "that fetches every gathered row from L2 runs no faster than that rate allows; `L2 "
                        "bound x`: that limit as a speedup over cuSPARSE" if run.meta.get("l2_read_tbs") else "")
        + ". `mapping`: the 16-bit row kernel `CsrRows.tune` kept (`wide`: a warp per row piece, its halves on "
        "alternate nonzeros; `pair`: a half-warp per piece), as a plan keeps it.")
    l2 = run.meta.get("l2_read_tbs")
    out += h.table(("matrix", "order", "nnz", "N", "precision", "walk us", "A order us", "cuSPARSE us (alg)",
                    "x cuSPARSE", "L2 bound x", "mapping", "walk issued", "cuSPARSE issued", "x issued",
                    "gather TB/s", "rel err (tol)", "walks equal"),
                   [(f"`{r['matrix']}`", r["order"], h.mnnz(r["nnz"]), r["N"], r["precision"],
                     h.f(r["walk_graph_us"], 1), h.f(r["given_graph_us"], 1),
                     f"{h.f(r['cus_graph_us'], 1)} ({r['cus_alg']})",
                     h.f(r["cus_graph_us"] / r["walk_graph_us"], 2, "x"),
                     h.f(l2_bound_x(r, l2), 2, "x") if l2 else "–", r.get("mapping", "–"),
                     h.f(r["walk_issued_us"], 1), h.f(r["cus_issued_us"], 1),
                     h.f(r["cus_issued_us"] / r["walk_issued_us"], 2, "x"),
                     f"{h.f(gather_tbs(r, r['walk_graph_us']), 2)} / {h.f(gather_tbs(r, r['cus_graph_us']), 2)}",
                     f"{r['rel_err']:.1e} ({r['tolerance']:g})", "yes" if r["walks_bitwise_equal"] else "**no**")
                    for r in rows])
    by = {(r["matrix"], r["order"], r["N"], r["precision"]): r for r in rows}
    half = [r for r in rows if r["precision"] == "float16"]
    vs_cus = [(r["cus_graph_us"] / r["walk_graph_us"], r) for r in half]
    vs_f32 = [(by[k[:3] + ("float32",)]["walk_graph_us"] / r["walk_graph_us"], r)
              for k, r in by.items() if k[3] == "float16" and k[:3] + ("float32",) in by]
    walk = [(r["walk_graph_us"] / r["given_graph_us"], r) for r in rows]

    def worst(pairs, pick):
        if not pairs:
            return "–", None
        x, r = pick(pairs, key=lambda p: p[0])
        return (f"{h.f(x, 2)}x ({r['matrix']} {r['order']} N={r['N']} {r['precision']}); geomean "
                f"{h.f(h.geo([p[0] for p in pairs]), 2)}x over {len(pairs)}"), x

    (t1, m1), (t2, m2), (t3, m3) = worst(vs_cus, min), worst(vs_f32, min), worst(walk, max)
    bad = [r for r in rows if not r["correct"]]
    out += h.targets([(goals[0][0], goals[0][1], t1, h.status(None if m1 is None else m1 >= 1.0)),
                      (goals[1][0], goals[1][1], t2, h.status(None if m2 is None else m2 >= 1.0)),
                      (goals[2][0], goals[2][1], t3, h.status(None if m3 is None else m3 <= WALK_SLOWER)),
                      ("every C within tolerance, both walks bitwise equal", "all", f"{len(rows) - len(bad)} of "
                       f"{len(rows)}", h.status(not bad if rows else None))])
    skipped = run.meta.get("skipped") or []
    if skipped:
        out += ["Skipped: " + "; ".join(skipped), ""]
    return out + h.older_note(older) + [h.reproduce("csr_rows", run), ""]
