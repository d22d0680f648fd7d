"""Charts of the benchmark results, rendered as PNGs beside docs/benchmarks.md by benchmarks/summarize.py.

    speedup per matrix against cuSPARSE, both ways (spmm: vs cuSPARSE on the original and on the same order)
    time vs memory floor per case (spmm: selected kernel's ms against the bytes-moved floor)
    TC blocks before/after reordering (reorder: every matrix and method)
    multi-GPU scaling (multi_gpu: per-iteration efficiency against GPUs, per row order)
    half precision (precision-*.json: float32 ms over float16 / bfloat16 ms, and over cuSPARSE's float16)

matplotlib is optional (``pip install -e '.[dev]'`` brings it): without it ``unavailable()`` says why, and the
summary is written without charts, saying so. ``run_chart(outcome, path)`` draws one pipeline run (stage wall
times, kernel and GFLOP/s) from the flow's result (``tasks.cli.run_outcome``).
"""
from __future__ import annotations

from pathlib import Path

from tasks.chart import PNG_META, _plt, _save, run_chart, unavailable  # noqa: F401 (shared with the flow's --plot)


def _common_n(rows) -> int | None:
    ns = [r.get("N") for r in rows if r.get("N") is not None]
    if not ns:
        return None
    return 128 if 128 in ns else max(set(ns), key=ns.count)


def speedup_chart(rows, path: Path) -> Path | None:
    """Bars per matrix (reordered rows at N = 128): speedup of the selected path over cuSPARSE on the original
    matrix and over cuSPARSE on the same reordered matrix."""
    N = _common_n(rows)
    pick = {}
    for r in rows:
        if r.get("N") == N and r.get("order") not in (None, "none") and \
                r.get("speedup_vs_original_cusparse") is not None:
            pick.setdefault(r["matrix"], r)
    if not pick:
        return None
    plt = _plt()
    names = list(pick)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(names) + 2), 4.2))
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], [pick[n]["speedup_vs_original_cusparse"] for n in names], 0.4,
           label="vs cuSPARSE on the original matrix")
    ax.bar([i + 0.2 for i in x], [pick[n]["speedup_vs_same_cusparse"] for n in names], 0.4,
           label="vs cuSPARSE on the same (reordered) matrix")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(list(x), names, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("speedup (x)")
    ax.set_title(f"Selected path over cuSPARSE's best CSR algorithm, N = {N}")
    ax.legend(fontsize=8)
    return _save(fig, path)


def floor_chart(rows, path: Path) -> Path | None:
    """Selected kernel ms against the memory floor ms of every case, log-log, with the floor line y = x."""
    pts = [(r["memory_floor_ms"], r["selected_ms"], f"order {r.get('order') or '?'}") for r in rows
           if r.get("memory_floor_ms") and r.get("selected_ms")]
    lo_hi = lambda: (min(min(p[0], p[1]) for p in pts), max(max(p[0], p[1]) for p in pts))  # noqa: E731
    return _against_diagonal(pts, lo_hi, "at the memory floor", "memory floor ms (bytes moved / peak bandwidth)",
                             "selected kernel ms", "Time vs memory floor, every case", path)


def reorder_chart(rows, path: Path) -> Path | None:
    """TC blocks before (original order) against after, per matrix and method, log-log with y = x."""
    pts = [(r["none_blocks"], r["blocks"], r.get("method", "?")) for r in rows
           if r.get("none_blocks") and r.get("blocks")]
    lo_hi = lambda: (min(p[1] for p in pts), max(p[0] for p in pts))  # noqa: E731
    return _against_diagonal(pts, lo_hi, "unchanged", "TC blocks before (original order)",
                             "TC blocks after reordering", "Reordering: fewer blocks lie below the line", path)


def _against_diagonal(pts, lo_hi, diagonal: str, xlabel: str, ylabel: str, title: str, path: Path) -> Path | None:
    """A log-log scatter of (x, y, group) points, one series per group, with the line y = x from ``lo_hi()``."""
    if not pts:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    for group in sorted({p[2] for p in pts}):
        sel = [p for p in pts if p[2] == group]
        ax.scatter([p[0] for p in sel], [p[1] for p in sel], s=16, label=group)
    lo, hi = lo_hi()
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8, label=diagonal)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _save(fig, path)


def scaling_chart(rows, path: Path) -> Path | None:
    """Resident per-iteration efficiency (time on 1 GPU / (P x time on P)) against GPUs, per matrix and row order:
    the steady state of batched iterations (inside one actor call per GPU) where measured, else one iteration per
    driver call, and the row-overlapped loop's (dotted, same colour) where it ran; the devices in the title."""
    rows = [r for r in rows if r.get("P") and (r.get("resident_batched_loop_eff") is not None
                                                or r.get("iter_eff") is not None)]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.8, 4.2))
    series = sorted({(r.get("kind", "?"), r.get("order", "?"), r.get("nnz", 0)) for r in rows})
    for kind, order, nnz in series:
        sel = sorted((r for r in rows if (r.get("kind", "?"), r.get("order", "?"), r.get("nnz", 0)) ==
                      (kind, order, nnz)), key=lambda r: r["P"])
        loop = [r for r in sel if r.get("resident_batched_loop_eff") is not None]
        pts, how = (loop, "resident_batched_loop_eff") if loop else (sel, "iter_eff")
        line, = ax.plot([r["P"] for r in pts], [r[how] for r in pts], marker="o" if loop else "s",
                        linestyle="-" if loop else "--",
                        label=f"{kind} {order} {nnz / 1e6:.0f}M: " + ("batched loop" if loop else
                                                                       "one call per iteration"))
        row_ov = [r for r in sel if r.get("resident_batched_rowoverlap_loop_eff") is not None]
        if row_ov:  # the row overlap against the same 1-GPU loop (where it ran: P > 1)
            one = [r for r in loop if r["P"] == 1]
            ce = any(r.get("rowoverlap_halo_copy") == "ce" for r in row_ov)
            ax.plot([r["P"] for r in one + row_ov], [r[how] for r in one] +
                    [r["resident_batched_rowoverlap_loop_eff"] for r in row_ov], marker="^", linestyle=":",
                    color=line.get_color(), label=f"{kind} {order} {nnz / 1e6:.0f}M: row overlap"
                    + (" (copy engines)" if ce else ""))
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(sorted({r["P"] for r in rows}))
    ax.set_xlabel("GPUs")
    ax.set_ylabel("parallel efficiency per iteration")
    ax.set_ylim(0, 1.1)
    devices = sorted({g for r in rows for g in (r.get("_gpus") or r.get("gpus") or [])})
    ax.set_title("Resident SpMM scaling (N = 256)" + (f"\non {', '.join(devices)}" if devices else ""),
                 fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, path)


def precision_chart(rows, path: Path) -> Path | None:
    """Per case: float32 ms over float16 and bfloat16 ms (our kernels), and cuSPARSE float16 ms over our
    float16 ms."""
    cases = []
    N = _common_n(rows)
    for r in (r for r in rows if r.get("N") == N):
        f32, f16, bf16 = (r.get(k) or {} for k in ("float32", "float16", "bfloat16"))
        if f32.get("replay_ms") and f16.get("replay_ms"):
            cs16 = (r.get("cusparse_float16") or {})
            cs16_ms = cs16.get("ms") if isinstance(cs16, dict) else cs16
            cases.append((f"{r['matrix']} {r.get('order', '')}", f32["replay_ms"] / f16["replay_ms"],
                          f32["replay_ms"] / bf16["replay_ms"] if bf16.get("replay_ms") else None,
                          cs16_ms / f16["replay_ms"] if isinstance(cs16_ms, (int, float)) and cs16_ms else None))
    if not cases:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(cases) + 2), 4.4))
    x = list(range(len(cases)))
    for k, (label, off) in enumerate([("float16 over float32 (TF32)", -0.27), ("bfloat16 over float32", 0.0),
                                      ("float16 over cuSPARSE float16", 0.27)]):
        ax.bar([i + off for i in x], [c[k + 1] or 0 for c in cases], 0.27, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x, [c[0] for c in cases], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("speedup (x)")
    ax.set_title(f"Half precision (ME-TCF m16n8k16, FP32 accumulation), N = {N}")
    ax.legend(fontsize=8)
    return _save(fig, path)


CHARTS = {  # file name -> (result family, chart, caption)
    "benchmarks-speedup.png": ("spmm", speedup_chart, "Speedup per matrix against cuSPARSE, both ways"),
    "benchmarks-floor.png": ("spmm", floor_chart, "Time vs memory floor per case"),
    "benchmarks-reorder.png": ("reorder", reorder_chart, "TC blocks before and after reordering"),
    "benchmarks-scaling.png": ("multi_gpu", scaling_chart, "Multi-GPU scaling"),
    "benchmarks-precision.png": ("precision", precision_chart, "Half precision"),
}


def render(rows_by_family: dict[str, list[dict]], out_dir: Path) -> list[tuple[str, str | None]]:
    """Draw every chart from ``{family: rows}`` into ``out_dir``; returns ``[(caption, file name or None)]``
    (None: no rows for it). Raises nothing for missing data; call ``unavailable()`` first."""
    out = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, (family, chart, caption) in CHARTS.items():
        path = chart(rows_by_family.get(family) or [], out_dir / name)
        out.append((caption, path.name if path is not None else None))
    return out


def section(charts: list[tuple[str, str | None]] | None, why_not: str | None = None) -> list[str]:
    """The Markdown charts block (placed before the first section, so it adds no "## " heading): each image
    with its caption, or why there are none."""
    out = ["**Charts** (`benchmarks/plots.py`, from the same files as the tables below)", ""]
    if charts is None:
        return out + [f"No charts: {why_not}.", ""]
    for caption, name in charts:
        out += [f"*{caption}*" + ("" if name else ": not run"), ""] + ([f"![{caption}]({name})", ""] if name else [])
    return out


def insert(doc: str, block: list[str]) -> str:
    """``doc`` with ``block`` inserted before its first "## " section (appended when it has none)."""
    head, sep, rest = doc.partition("\n## ")
    return head.rstrip() + "\n\n" + "\n".join(block).rstrip() + "\n" + (sep + rest if sep else "")

