"""The weak-scaling section of docs/benchmarks.md (``benchmarks/multi_gpu.py --weak NNZ_PER_GPU`` files, named
``multi_gpu_weak-*.json``), for benchmarks/summarize.py: the resident iteration on 1, 2 and 4 GPUs with the matrix
grown in proportion (issue 29), per kind and order, with the parts that explain a loss: the slowest GPU's kernel,
the exchange, how much of it the kernels waited for, and the halo each GPU receives per iteration.
"""
from __future__ import annotations


def weak_rows(rows: list) -> list[tuple]:
    """(kind, order, P, nnz, loop ms, weak efficiency T_1 / T_P, overlapped loop ms, its weak efficiency,
    row-overlapped loop ms, its weak efficiency, its boundary kernel ms, its exposed ms, kernel ms, exchange ms,
    exposed ms, halo MB per GPU, imbalance, rel err, the row overlap's halo copy, the row's file) per row with a
    batched loop, ordered by kind, order, P; efficiencies against the P = 1 row of the same kind and order (None
    without one; the overlaps against the plain 1-GPU loop, which has no exchange to hide)."""
    ok = [r for r in rows if r.get("resident_batched_loop_ms") and "error" not in r]
    base = {(r["kind"], r["order"]): r for r in ok if r["P"] == 1}

    def eff(r, key, base_key=None):
        t1, tp = (base.get((r["kind"], r["order"])) or {}).get(base_key or key), r.get(key)
        return t1 / tp if t1 and tp else None
    out = []
    for r in sorted(ok, key=lambda r: (r["kind"], r["order"], r["P"])):
        halo = max(r.get("halo_recv_bytes") or [0]) / 2**20
        errs = [v for k, v in r.items() if k.endswith("rel_err") and isinstance(v, float)]
        ovl, row = "resident_batched_overlap_loop_ms", "resident_batched_rowoverlap"
        out.append((r["kind"], r["order"], r["P"], r["nnz"], r["resident_batched_loop_ms"],
                    eff(r, "resident_batched_loop_ms"), r.get(ovl), eff(r, ovl),
                    r.get(f"{row}_loop_ms"), eff(r, f"{row}_loop_ms", "resident_batched_loop_ms"),
                    r.get(f"{row}_boundary_ms"), r.get(f"{row}_exposed_ms"), r.get("resident_batched_kernel_ms"),
                    r.get("resident_batched_exchange_ms"), r.get("resident_batched_exposed_ms"), halo,
                    r.get("resident_batched_imbalance"), max(errs) if errs else None,
                    r.get("rowoverlap_halo_copy"), r.get("_file")))
    return out


TITLE = "Multi-GPU weak scaling (resident iterations, the matrix grown with the GPUs)"


def weak_section(runs, v0, older, *, h) -> list[str]:
    if not runs:
        return h.absent("multi_gpu_weak", TITLE)
    run, args = runs[0], runs[0].meta.get("args", {})
    out = h.opening(
        TITLE, run,
        f"{h.mnnz(args['weak']) if args.get('weak') else '?'} nonzeros per GPU, N = {args.get('n_cols')}, "
        "one batch of iterations per actor call (no host sync between iterations); \"loop ms\": the slowest "
        "GPU's time per iteration inside that call; weak efficiency T_1 / T_P against the 1-GPU row of the same "
        "kind and order (ideal 1.0: each GPU's share stays the same size). Breakdown (medians, CUDA events): the "
        "slowest GPU's kernel, the halo exchange (pack + NCCL, waiting for a late peer included), the part of "
        "it the kernels waited for (exposed), the halo rows each GPU receives per iteration, the kernel "
        "imbalance (slowest / mean). \"none\": the generator's random labels; \"natural\": the generator's "
        "own blocks, the ideal partition (not a method); \"community\": label propagation. \"overlap\": the same "
        "loop with the exchange beside the kernel over each GPU's own columns (two kernels per iteration). "
        "\"row-overlap\": the boundary rows (those peers receive) computed first, their exchange for the next "
        "iteration beside the interior rows' kernel (each row once), its efficiency against the plain 1-GPU "
        "loop, with its boundary kernel ms and the exchange it left exposed; kernel / exchange / exposed ms are "
        "the plain loop's.")
    rows = [(k, o, P, h.mnnz(nnz), h.f(ms), h.f(eff, 3), h.f(oms), h.f(oeff, 3), h.f(rms), h.f(reff, 3), h.f(rb),
             h.f(rx), h.f(ker), h.f(x), h.f(e), h.f(halo, 0), h.f(imb), f"{err:.1e}" if err is not None else "–",
             (copy or "nccl") if rms is not None else "–", f"`{name}`" if name else "–")
            for k, o, P, nnz, ms, eff, oms, oeff, rms, reff, rb, rx, ker, x, e, halo, imb, err, copy, name
            in weak_rows(run.rows)]
    out += ["Each (kind, order, GPUs) row comes from the newest file that has it (column \"file\"; the halo copy "
            "of the row overlap: \"ce\" = the copy engines, the default since 2026-11-28, \"nccl\" = NCCL's "
            "kernels).", ""]
    out += h.table(("kind", "order", "GPUs", "nnz", "loop ms", "weak eff", "overlap loop ms", "overlap weak eff",
                    "row-overlap loop ms", "row-overlap weak eff", "row-overlap boundary ms",
                    "row-overlap exposed ms", "kernel ms", "exchange ms", "exposed ms", "halo MB/GPU", "imbalance",
                    "max rel err", "row-overlap halo copy", "file"), rows)
    out += ["Skipped: " + "; ".join(run.meta["skipped"]), ""] if run.meta.get("skipped") else []
    return out + variant_lines(v0, h) + h.older_note(older) + [h.reproduce("multi_gpu_weak", run), ""]


def variant_lines(v0, h) -> list[str]:
    """The ``-vN`` files (settings tried and not kept: NCCL variables, the Dask halo transport over TCP or UCX) as
    one table, each row with its communication environment, so a setting's effect is read from the files."""
    rows = []
    envs = [run.meta.get("env") or {} for run in v0]
    common = set.intersection(*(set(e.items()) for e in envs)) if envs else set()  # shown once, below the table
    for run in sorted(v0, key=lambda r: r.path.name):
        env = run.meta.get("env") or {}
        kept = {k: v for k, v in env.items() if (k, v) not in common and k not in ("NCCL_DEBUG", "NCCL_VERSION")}
        args = run.meta.get("args") or {}
        args = args if isinstance(args, dict) else {}
        row = "resident_batched_rowoverlap"
        for r in run.rows:
            if not r.get("resident_batched_loop_ms") or "error" in r:
                continue
            rows.append((f"`{run.path.name}`", r.get("transport", "?"), args.get("protocol") or "tcp",
                         " ".join(f"{k}={v}" for k, v in kept.items()) or "defaults", r["P"], h.mnnz(r["nnz"]),
                         h.f(r["resident_batched_loop_ms"]), h.f(r.get("resident_batched_exchange_ms")),
                         h.f(r.get("resident_batched_exposed_ms")), h.f(r.get(f"{row}_loop_ms")),
                         h.f(r.get(f"{row}_exposed_ms"))))
    if not rows:
        return []
    return ["Halo-exchange settings compared (`-vN` files, not in the table above; same loop and breakdown; "
            "\"transport\": NCCL or Dask actor calls over the comm protocol; `TCSPMM_HALO_COPY=ce`: the row "
            "overlap's halo on the copy engines, tasks/distribute/ce_exchange.py, the default since "
            "2026-11-28 (these files set it while it was opt-in); the row-overlap exchange ms there are the "
            "shard's outgoing peer copies):", "",
            *h.table(("file", "transport", "Dask protocol", "environment", "GPUs", "nnz", "loop ms", "exchange ms",
                      "exposed ms", "row-overlap loop ms", "row-overlap exposed ms"), rows),
            *(["Set in every one of these runs: " + " ".join(f"{k}={v}" for k, v in sorted(common)), ""]
              if common else [])]
