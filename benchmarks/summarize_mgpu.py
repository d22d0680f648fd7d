"""The multi-GPU strong-scaling section of docs/benchmarks.md (benchmarks/multi_gpu.py's files), for
benchmarks/summarize.py: kernel-only and resident efficiencies, the driver-free one-shots and their breakdowns, and
the targets.
"""
from __future__ import annotations

import math

from summarize_common import (  # benchmarks/ is the script folder (summarize.py puts it on the path)
    absent, env, f, gpus_text, mnnz, model_of, older_note, reproduce, status, table, targets)


NNZ_100M_FLOOR = 0.9e8  # multi_gpu rows of the 100e6 target size (the generators land within a few % of it)

MGPU_LIMITS = {"kernel_eff": 0.95, "iter_eff_2gpu_100M": 0.85, "iter_eff_4gpu_100M": 0.70,
               "oneshot_e2e_ratio_2gpu": 0.6, "oneshot_e2e_ratio_4gpu": 0.35}  # a file's own "targets" win
MGPU_TARGETS = [("kernel-only strong-scaling efficiency, every P > 1 row", "≥ 95%"),
                (f"resident per-iteration efficiency at 2 GPUs, nnz ≥ {NNZ_100M_FLOOR / 1e6:.0f}M (batched: the "
                 "steady state inside one actor call per GPU, the best of plain and overlapped halo exchange, "
                 "where measured; else the batch's wall time; else per call)", "≥ 85%"),
                ("same at 4 GPUs", "≥ 70%"),
                ("one-shot end to end (driver-free, store to C in the store) / 1-GPU time, 2 GPUs", "≤ 0.6"),
                ("same, 4 GPUs", "≤ 0.35"),
                ("halo shrink from reordering (halo bytes received, none / reordered, P > 1)", "> 1x")]

HALO_ORDERS = ("community",)  # tasks.reorder methods that order rows for small row-partition halos
MGPU_ERRS = ("oneshot_rel_err", "stored_rel_err", "resident_rel_err", "resident_overlap_rel_err",
             "resident_batched_rel_err", "resident_batched_overlap_rel_err", "resident_batched_advance_rel_err",
             "resident_batched_rowoverlap_rel_err", "resident_batched_rowoverlap_advance_rel_err")
ROW = "resident_batched_rowoverlap"  # the row-split overlap (boundary rows first; multi_gpu.py --modes rowoverlap)
LOOP_EFFS = ("resident_batched_loop_eff", "resident_batched_overlap_loop_eff", f"{ROW}_loop_eff")  # in the call
BATCHED_EFFS = ("resident_batched_iter_eff", "resident_batched_overlap_iter_eff", f"{ROW}_iter_eff")  # batch wall


def resident_eff(r):
    """The resident efficiency a row is judged by: the better steady-state (in-call loop) one when measured, else
    the better batched wall-time one, else the best per-call one."""
    for keys in (LOOP_EFFS, BATCHED_EFFS):
        got = [r[k] for k in keys if r.get(k) is not None]
        if got:
            return max(got)
    return max((x for x in (r.get("iter_eff"), r.get("iter_eff_overlap")) if x is not None), default=None)


def resident_measured(r) -> str:
    per_call = f"plain {f(r.get('iter_eff'), 3)}, overlap {f(r.get('iter_eff_overlap'), 3)}"
    if all(r.get(k) is None for k in BATCHED_EFFS):
        return per_call
    rows = lambda key: "" if r.get(key) is None else f", row-overlapped {f(r[key], 3)}"  # noqa: E731 (only if run)
    loop = "" if all(r.get(k) is None for k in LOOP_EFFS) else (
        f"in-call loop {f(r.get('resident_batched_loop_eff'), 3)}, overlapped "
        f"{f(r.get('resident_batched_overlap_loop_eff'), 3)}{rows(f'{ROW}_loop_eff')}; ")
    return (f"{loop}batch wall {f(r.get('resident_batched_iter_eff'), 3)}, overlapped "
            f"{f(r.get('resident_batched_overlap_iter_eff'), 3)}{rows(f'{ROW}_iter_eff')} (per call: {per_call})")


def with_resident_kernel(rows) -> list[dict]:
    """Rows without a one-shot kernel time get the resident one: the batched iterations' median kernel ms (else
    the per-call ones'), each the slowest shard's CUDA-event time, with its efficiency against the P = 1 row of the
    same matrix, order and GPU model (a P = 1 run may have seen fewer of the machine's GPUs); ``kernel_from`` says
    which."""
    out = [dict(r) for r in rows]
    for r in out:
        if r.get("kernel_ms") is None and "error" not in r:
            ms = r.get("resident_batched_kernel_ms") or r.get("iter_kernel_ms")
            if ms is not None:
                r.update(kernel_ms=ms, kernel_from="resident")
    one = {(r["kind"], r["order"], r["nnz"], model_of(r.get("_gpus"))): r["kernel_ms"] for r in out
           if r["P"] == 1 and r.get("kernel_from") == "resident"}
    for r in out:
        t1 = one.get((r["kind"], r["order"], r["nnz"], model_of(r.get("_gpus"))))
        if r.get("kernel_from") == "resident" and t1:
            r["kernel_eff"] = t1 / (r["P"] * r["kernel_ms"])
    return out


def mgpu_targets(run) -> list[tuple]:
    tg = {**MGPU_LIMITS, **(run.meta.get("targets") or {})}
    rows = [r for r in with_resident_kernel(run.rows) if "error" not in r]
    ke = [r for r in rows if r["P"] > 1 and r.get("kernel_eff") is not None]
    w = min(ke, key=lambda r: r["kernel_eff"], default=None)
    src = " (resident kernel times)" if w and w.get("kernel_from") == "resident" else ""
    out = [(MGPU_TARGETS[0][0], f"≥ {tg['kernel_eff']:.0%}",
            f"min {w['kernel_eff']:.1%} ({w['kind']} {w['order']} {mnnz(w['nnz'])} P={w['P']}{src}; {len(ke)} rows)"
            if w else "–", status(w["kernel_eff"] >= tg["kernel_eff"] if w else None))]
    for P, key, label in ((2, "iter_eff_2gpu_100M", MGPU_TARGETS[1][0]), (4, "iter_eff_4gpu_100M",
                                                                           MGPU_TARGETS[2][0])):
        got = [(r, resident_eff(r)) for r in rows if r["P"] == P and r["nnz"] >= NNZ_100M_FLOOR]
        got = [(r, e) for r, e in got if e is not None]
        meas = "; ".join(f"{r['kind']} {r['order']} {mnnz(r['nnz'])}: {resident_measured(r)}" for r, _ in got)
        lim = tg.get(key, MGPU_LIMITS[key])
        out.append((label, f"≥ {lim:.0%}", meas or "–", status(min(e for _, e in got) >= lim if got else None)))
        if P == 2:
            it = got
    lim = tg.get("iter_eff_2gpu_100M", MGPU_LIMITS["iter_eff_2gpu_100M"])
    halo_ordered = [(r, e) for r, e in it if r["order"] in HALO_ORDERS]
    if halo_ordered:  # the same target judged on the halo-reducing reordering alone (also counted above)
        out.append((f"same, with the `{'/'.join(HALO_ORDERS)}` reordering (label propagation: the order meant for "
                    "row partitions)", f"≥ {lim:.0%}",
                    "; ".join(f"{r['kind']} {mnnz(r['nnz'])}: {e:.3f}" for r, e in halo_ordered),
                    status(min(e for _, e in halo_ordered) >= lim)))
    halo = {}
    for r in rows:
        if r["P"] > 1 and r.get("halo_recv_bytes") is not None:
            halo.setdefault((r["kind"], r["shape"][0], r["P"]), {})[r["order"]] = sum(r["halo_recv_bytes"])
    shrink = [(k, o, h["none"] / b if b else math.inf) for k, h in halo.items() if "none" in h
              for o, b in h.items() if o != "none"]
    ideal = " (the ideal order, not a reordering method)"
    meas = "; ".join(f"{k[0]} {mnnz(k[1])} rows P={k[2]} {o}{ideal if o == 'natural' else ''}: {x:.2f}x"
                     for k, o, x in shrink)
    for P, key, label in ((2, "oneshot_e2e_ratio_2gpu", MGPU_TARGETS[3][0]), (4, "oneshot_e2e_ratio_4gpu",
                                                                               MGPU_TARGETS[4][0])):
        got = [(r, *x) for r, x in ((r, oneshot_ratio(r, rows)) for r in rows if r["P"] == P) if x is not None]
        lim = tg.get(key, MGPU_LIMITS[key])
        out.append((label, f"≤ {lim:g}", "; ".join(f"{r['kind']} {r['order']} {mnnz(r['nnz'])}: {x:.2f}"
                                                   + (" (B read once, halo exchanged)" if how == "exchanged" else "")
                                                   for r, x, how in got) or "–",
                    status(max(x for _, x, _ in got) <= lim if got else None)))
    return out + [(*MGPU_TARGETS[5], meas or "–", status(min(x for *_, x in shrink) > 1 if shrink else None))]


def exchanged_cell(r: dict, what: str, p: int = 2) -> str:
    """`` / <value>`` of the one-shot that reads B once (halo exchanged) for ``what`` ("e2e_ms", "e2e_ratio"),
    where it ran."""
    v = r.get(f"exchanged_{what}")
    return f" / {f(v, p)}" if v is not None else ""


ONESHOTS = ("stored", "exchanged")  # the driver-free one-shot (every worker reads its B rows); the one that reads B
# once and exchanges the halo


def origin(row: dict, field: str) -> str:
    """The result file a pooled row's ``field`` came from (`newest_per_key`)."""
    return (row.get("_origin") or {}).get(field) or (row.get("_file") or "").split(" + ")[0]


def oneshot_ratio(r: dict, rows: list):
    """(ratio, which) for a row's faster one-shot: its end to end over the faster one-shot's at 1 GPU on the same
    case, both from one run, the newest that has both (pooled rows mix runs of different code; each path's own
    ratio flatters a path whose 1-GPU run is slow: the one over the exchange pays its actors' setup there too),
    ``which`` in ONESHOTS; the per-path ratios where the 1-GPU row has no times; None when neither ran."""
    one = next((o for o in rows if o["P"] == 1 and all(o.get(k) == r.get(k) for k in ("kind", "order", "nnz"))),
               {})
    for src in (r.get("_file") or "").split(" + "):  # newest run first: both times from one run (one code version)
        e2e = {w: r[f"{w}_e2e_ms"] for w in ONESHOTS if r.get(f"{w}_e2e_ms") is not None
               and origin(r, f"{w}_e2e_ms") == src}
        e1 = [one[f"{w}_e2e_ms"] for w in ONESHOTS if one.get(f"{w}_e2e_ms") is not None
              and origin(one, f"{w}_e2e_ms") == src]
        if e2e and e1:
            which = min(e2e, key=e2e.get)
            return e2e[which] / min(e1), which
    got = {w: r[f"{w}_e2e_ratio"] for w in ONESHOTS if r.get(f"{w}_e2e_ratio") is not None}
    return (min(got.values()), min(got, key=got.get)) if got else None


def via(r: dict) -> str:
    """The resident exchange of a multi_gpu row, "+ce" where its row overlap copied the halo on the copy engines."""
    t = r.get("transport", "–")
    return f"{t}+ce" if r.get("rowoverlap_halo_copy") == "ce" and r.get(f"{ROW}_loop_ms") else t


def multi_gpu_section(runs, v0, older) -> list[str]:
    if not runs:
        return absent("multi_gpu", "Multi-GPU strong scaling", MGPU_TARGETS)
    run, rows = runs[0], []
    for r in with_resident_kernel(run.rows):
        if "error" in r:
            rows.append((r["kind"], r["order"], mnnz(r["nnz"]), r["P"], "ERROR: " + r["error"][:80], *("",) * 25))
            continue
        err = max(r.get(k) or 0.0 for k in MGPU_ERRS)
        batched = f(r.get("resident_batched_iter_ms")) + (" (failed)" if r.get("batched_error") else "")
        if r.get("resident_batched_iters"):
            batched += f" ({r['resident_batched_iters']}/batch)"
        res = " (res.)" if r.get("kernel_from") == "resident" else ""
        b = "resident_batched"  # the breakdown of the plain batched loop (the overlapped one is in the JSON)
        per_gpu = r.get(f"{b}_kernel_ms_per_gpu")
        rows.append((r["kind"], r["order"], mnnz(r["nnz"]), r["P"], f(r.get("kernel_ms")) + res,
                     f(r.get("kernel_eff"), 3), f(r.get("stored_e2e_ms"), 0) + exchanged_cell(r, "e2e_ms", 0),
                     f(r.get("stored_e2e_ratio")) + exchanged_cell(r, "e2e_ratio"),
                     f(r.get("iter_ms")), f(r.get("iter_eff"), 3), batched, f(r.get("resident_batched_iter_eff"), 3),
                     f(r.get("resident_batched_overlap_iter_eff"), 3), f(r.get(f"{b}_loop_ms")),
                     f(r.get(f"{b}_loop_eff"), 3), f(r.get("resident_batched_overlap_loop_ms")),
                     f(r.get("resident_batched_overlap_loop_eff"), 3), f(r.get(f"{ROW}_loop_ms")),
                     f(r.get(f"{ROW}_loop_eff"), 3), f(r.get(f"{ROW}_boundary_ms")), f(r.get(f"{ROW}_exposed_ms")),
                     "–" if not per_gpu else "/".join(f"{x:.2f}" for x in per_gpu), f(r.get(f"{b}_exchange_ms")),
                     f(r.get(f"{b}_exposed_ms")), f(r.get(f"{b}_gap_ms"), 3), via(r),
                     f"{max(r.get('halo_recv_bytes') or [0]) / 2**20:.1f}", f"{err:.1e}",
                     ",".join(sorted(set(r.get("kernels") or []))) or "–", gpus_text(r.get("_gpus")) or "–",
                     f"`{r['_file']}`" if r.get("_file") else "–"))
    out = ["## Multi-GPU strong scaling", ""] + env(run)
    out += table(("kind", "order", "nnz", "P", "kernel ms", "kernel eff", "one-shot e2e ms", "e2e / 1 GPU",
                  "iter ms (per call)", "iter eff", "batch wall ms", "batch eff", "overlap batch eff", "loop ms",
                  "loop eff", "overlap loop ms",
                  "overlap loop eff", "row-overlap loop ms", "row-overlap loop eff", "row-overlap boundary ms",
                  "row-overlap exposed ms", "kernel ms per GPU", "exchange ms", "exposed ms", "gap ms", "via",
                  "halo MB/GPU", "max rel err", "kernel per shard", "GPUs", "file"), rows)
    if any(r.get("exchanged_e2e_ms") is not None for r in run.rows):
        out += ["\"one-shot e2e ms\" and \"e2e / 1 GPU\": the driver-free one-shot (every worker reads the B rows its "
                "shard references), then after \"/\" the one that reads B once (each worker its own rows, the halo "
                "by the resident exchange; `tasks/distribute/exchanged.py`), each over its own 1-GPU run; the "
                "targets judge the faster one-shot against the faster one at 1 GPU.", ""]
    out += ["Each (kind, order, nnz, P) row comes from the newest file that has it, the fields that run did not "
            "measure from older files of the same case (column \"file\", newest first); \"via\": the "
            "resident exchange (NCCL or Dask actor calls), \"+ce\" where the row overlap's halo went over the copy "
            "engines (the default since 2026-11-28; NCCL's kernels before).", ""]
    if any(r.get("kernel_from") == "resident" for r in with_resident_kernel(run.rows)):
        out += ["\"(res.)\": no one-shot run; the kernel time is the resident iterations' median slowest-shard kernel "
                "(CUDA events; batched where measured), its efficiency against the P = 1 row of the same matrix, "
                "order and machine.", ""]
    if any(r.get("checked_rows") for r in run.rows):
        checked = max(r.get("checked_rows") or 0 for r in run.rows)
        out += [f"Correctness: every C (P = 1 included) is compared with a float64 product on up to {checked:,} "
                "rows (random 16-row windows, decoded from the matrix's own arrays), fetched from their shards "
                "(max rel err column; the TF32 contract is 2e-3).", ""]
    out += ["\"kernel per shard\" is what each shard's selector ran: where it says cusparse, the efficiencies are "
            "those of cuSPARSE split over the GPUs, not of the Tensor Core kernel.", ""]
    if any(r.get("resident_batched_iter_ms") is not None for r in run.rows):
        out += ["\"iter ms\" is one driver call per iteration (Dask actor round trip included); \"batch wall ms\" "
                "is a batch of iterations in one actor call per GPU, its wall time / iterations; \"loop ms\" the "
                "slowest GPU's time inside that call / iterations (the steady state of a long run: no host sync "
                "between iterations); each efficiency is T1 / (P · TP) against the P = 1 row of the same mode. "
                "Breakdown of the plain batched loop (medians, CUDA events): the kernel per GPU (imbalance), the "
                "exchange (pack + NCCL, including the wait for a late peer), the exposed exchange (what the kernel "
                "waited for), the GPU's idle time between iterations (gap). \"overlap\": the column split (the "
                "own-column kernel beside the exchange, the halo-column kernel adding into C); \"row-overlap\": the "
                "row split (the boundary rows' kernel first, then their exchange for the next iteration beside the "
                "interior rows' kernel; each row computed once), with its boundary kernel's ms (part of its kernel) "
                "and the exchange it left exposed.", ""]
    out += oneshot_breakdown(run.rows)
    out += ["Skipped: " + "; ".join(run.meta["skipped"]), ""] if run.meta.get("skipped") else []
    if v0:  # -v<n> files: runs of earlier code, kept for reference
        out += ["Runs of other code (earlier versions, or variants not kept; not summarized): " + ", ".join(
            f"`{r.path.name}` ({len(r.rows)} rows, {r.date.date()})" for r in v0), ""]
    return out + older_note(older) + targets(mgpu_targets(run)) + [reproduce("multi_gpu", run), ""]


ONESHOT_PARTS = ("scatter_ms", "load_ms", "remap_ms", "h2d_ms", "plan_ms", "d2h_ms", "worker_ms",
                 "last_gather_ms", "other_ms")


STORED_PARTS = ("stored_load_ms", "stored_b_ms", "stored_b_wait_ms", "stored_remap_ms", "stored_h2d_ms",
                "stored_plan_ms", "stored_first_ms", "stored_d2h_ms", "stored_write_ms", "stored_overhead_ms")


def parts_table(rows, intro: str, e2e: str, parts: tuple, prefix: str = "") -> list[str]:
    """``intro`` and a table of each measured row's end to end (field ``e2e``) and ``parts`` (ms, headed by their
    names less ``prefix`` and "_ms"); nothing for rows without the parts."""
    have = [r for r in rows if "error" not in r and r.get(parts[-1]) is not None]
    if not have:
        return []
    return [intro, ""] + table(
        ("kind", "order", "nnz", "P", "e2e", *(k[len(prefix):-3] for k in parts)),
        [(r["kind"], r["order"], mnnz(r["nnz"]), r["P"], f(r.get(e2e), 0), *(f(r.get(k), 0) for k in parts))
         for r in have])


def oneshot_breakdown(rows) -> list[str]:
    """Where one-shot end-to-end time goes: the driver's one-shot, then the driver-free one (rows with itemized
    timings only)."""
    return parts_table(
        rows, "One-shot end-to-end breakdown (ms; driver: scatter of shards and B or halo rows, gather of C; per GPU, "
        "the slowest: load from Parquet, halo remap, host to device, plan (conversion, compile, selection), device to "
        "host; along the path of the shard placed last: `worker` = its whole task less its timing runs, `gather` its "
        "block, `other` = the rest of that path: Dask scheduling, inputs moving to the worker, the block serialized "
        "back):", "e2e_ms", ONESHOT_PARTS) + parts_table(
        rows, "Driver-free one-shot (each worker reads its shard and B rows from Parquet and writes its C block), the "
        "shard placed last (ms): load = its shard from Parquet, b = its rows of B, b_wait = what was left of that "
        "read when the remap and the plan (run beside it since 2026-11-28; '–' before) were done, remap = its halo "
        "columns renamed, h2d / d2h = copies, plan = the SpmmPlan's build, first = the product's first run (kernel "
        "selection and autotune included; '–' in runs before it was recorded), write = its C block, overhead = "
        "Dask's share; e2e excludes the timed repeats only:", "stored_e2e_ms", STORED_PARTS, "stored_")
