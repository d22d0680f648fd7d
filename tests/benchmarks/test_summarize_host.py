"""benchmarks/summarize_host.py through summarize.py: the call-path targets (issue 15) and the bindings (issue 16)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "summarize.py"


def host_row(matrix, nnz, N, plan, issued, graph, cus, orig_cus, cupyx=1e3):
    issued, graph, cus, orig_cus = float(issued), float(graph), float(cus), float(orig_cus)
    return {"matrix": matrix, "nnz": nnz, "shape": [10, 10], "N": N, "plan": plan, "kernel": "metcf-window",
            "graph_us": graph, "issued_us": issued, "issued_nograph_us": issued + 1, "rel_err": 1e-4,
            "tolerance": 2e-3, "cus_alg": "CSR_ALG2", "cus_graph_us": cus - 3, "cus_issued_us": cus,
            "cupyx_issued_us": cupyx, "order": "tca", "orig_cus_issued_us": orig_cus, "orig_cupyx_issued_us": cupyx}


def write(folder: Path, name: str, meta: dict, rows: list) -> None:
    (folder / name).write_text(json.dumps({"meta": {"device": "GPU X", "command": "x.py", **meta}, "rows": rows}))


def render(folder: Path, tmp_path: Path) -> str:
    out = tmp_path / "bench.md"
    subprocess.run([sys.executable, str(SCRIPT), "--results", str(folder), "--out", str(out)], check=True,
                   capture_output=True)
    return out.read_text()


def section(md: str, title_start: str) -> str:
    return next(s for s in md.split("\n## ") if s.startswith(title_start))


def test_host_targets_pool_the_days_parts_and_a_later_row_wins(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    day = "2026-01-02T10:00:00+00:00"
    # part 1: a 0.5M-nnz case at 2x, and a case a later part measures again (0.5x here, 2x there)
    write(res, "host-overhead-gpu-x-2026-01-02-a.json", {"reorder": "auto", "date": day},
          [host_row("m1", 500_000, 128, "det-f32", 10, 9, 20, 20), host_row("m2", 600_000, 128, "det-f32", 40, 39,
                                                                               20, 20)])
    write(res, "host-overhead-gpu-x-2026-01-02-b.json", {"reorder": "auto", "date": "2026-01-02T11:00:00+00:00"},
          [host_row("m2", 600_000, 128, "det-f32", 10, 9, 20, 20), host_row("tiny", 2_000, 128, "det-f32", 10, 9,
                                                                               5, 5)])
    write(res, "host-overhead-gpu-x-2026-01-02-before.json", {"reorder": "none", "date": day},
          [host_row("m1", 500_000, 128, "det-f32", 100, 9, 20, 20)])  # not an auto run: left out
    md = section(render(res, tmp_path), "Per call as issued")
    assert "host-overhead-gpu-x-2026-01-02-a.json`, `host-overhead-gpu-x-2026-01-02-b.json" in md
    line = next(x for x in md.splitlines() if "det-f32 vs cuSPARSE float32 as issued on the matrix as given" in x)
    assert "2.00x over 2 cases, min 2.00x" in line and line.endswith("**met** |")  # tiny (2k nnz) is out of range
    over = next(x for x in md.splitlines() if x.startswith("| det-f32: overhead"))
    assert "1.0 / 1.0 us" in over and "**met**" in over
    assert "Cases under 0.1M nnz (tiny)" in md


def test_host_target_missed_below_the_floor(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    write(res, "host-overhead-gpu-x-2026-01-02-a.json", {"reorder": "auto", "date": "2026-01-02T10:00:00+00:00"},
          [host_row("m1", 500_000, 128, "det-f32", 10, 9, 40, 40), host_row("m2", 600_000, 256, "det-f32", 10, 9,
                                                                               9, 9)])
    md = section(render(res, tmp_path), "Per call as issued")
    line = next(x for x in md.splitlines() if x.startswith("| det-f32 vs cuSPARSE float32 as issued on the matrix as given"))
    assert "min 0.90x (m2 N=256)" in line and "**missed**" in line  # geomean 1.90x, but one case < 0.95x


def test_bindings_target(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    path = {"issued_us": 8.0, "host_us": 8.0, "graph_us": 2.0}
    rows = [{"matrix": m, "nnz": 100, "N": 128, "algorithm": "CSR_ALG3", "ctypes_bound": {**path, "host_us": 8.0},
             "nvmath_bound": {**path, "host_us": h}, "nvmath_matmul": path, "cupyx": path}
            for m, h in (("a", 6.0), ("b", 9.0), ("c", 7.0))]
    write(res, "bindings-gpu-x-2026-01-02.json", {"date": "2026-01-02T10:00:00+00:00"}, rows)
    md = section(render(res, tmp_path), "cuSPARSE bindings")
    line = next(x for x in md.splitlines() if x.startswith("| nvmath set_stream"))
    assert "-1.00 us (-2.00 .. 1.00)" in line and "**met**" in line


def test_cvse_targets_and_dense_crossing(tmp_path):
    res = tmp_path / "results"
    res.mkdir()

    def spmm(V, s, N, cvse, dense):
        return {"kind": "spmm", "V": V, "shape": [4096, 4096], "sparsity": s, "N": N, "issued_ms": {"dense": dense},
                "ms": {"cvse": cvse, "cusparse-csr": 2 * cvse, "cusparse-bell": 3 * cvse, "dense": dense},
                "rel_err": {"cvse": 1e-4}}

    rows = [spmm(8, s, N, c, 1.0) for N in (256, 1024) for s, c in ((0.7, 1.5), (0.8, 0.9), (0.9, 0.5))]
    rows[4] = spmm(8, 0.8, 1024, 1.2, 1.0)  # N = 1024 at 0.7 and 0.8 slower than dense: that N crosses at 0.9
    rows += [{"kind": "sddmm", "V": 8, "shape": [4096, 4096], "sparsity": 0.9, "Kd": 64, "rel_err": {"x": 1e-4},
              "ms": {"cusparse-sddmm": 1.0, "cvse-fp16": 0.25, "cvse-tf32": 0.6}}]
    write(res, "cvse-gpu-x-2026-01-02-1000.json", {"date": "2026-01-02T10:00:00+00:00"}, rows)
    md = section(render(res, tmp_path), "CVSE")
    lines = md.splitlines()
    assert "2.00x over 6 cases" in next(x for x in lines if x.startswith("| SpMM FP16 vs cuSPARSE half CSR"))
    dense = next(x for x in lines if x.startswith("| faster than dense"))
    assert "from sparsity 0.9" in dense and "**missed**" in dense  # the worst N decides
    assert "**met**" in next(x for x in lines if x.startswith("| SDDMM FP16"))
    assert "**missed**" in next(x for x in lines if x.startswith("| SDDMM TF32"))


def test_cvse_both_ways_graph_and_issued(tmp_path):
    """Files whose dense column is graph replay too (meta timing ms = graph): the target reads graph against graph,
    and the issued columns (CVSE through SpmmPlan.run, dense through torch.matmul) give their own crossing."""
    res = tmp_path / "results"
    res.mkdir()

    def spmm(s, N, cvse, cvse_issued):
        return {"kind": "spmm", "V": 8, "shape": [4096, 4096], "sparsity": s, "N": N,
                "ms": {"cvse": cvse, "cusparse-csr": 2 * cvse, "cusparse-bell": 3 * cvse, "dense": 1.0},
                "issued_ms": {"cvse": cvse_issued, "dense": 1.1}, "rel_err": {"cvse": 1e-4}}

    rows = [spmm(s, N, c, ci) for N in (256, 1024) for s, c, ci in ((0.7, 0.95, 1.2), (0.8, 0.9, 1.05),
                                                                      (0.9, 0.5, 0.6))]
    write(res, "cvse-gpu-x-2026-01-02-1000.json", {"date": "2026-01-02T10:00:00+00:00", "timing": {"ms": "graph"}},
          rows)
    md = section(render(res, tmp_path), "CVSE")
    lines = md.splitlines()
    dense = next(x for x in lines if x.startswith("| faster than dense"))
    assert "from sparsity 0.7 (graph against graph)" in dense and "**met**" in dense
    assert "As issued (CVSE through SpmmPlan.run against torch.matmul), V = 8 crosses dense from sparsity 0.8." in lines
    header = next(x for x in lines if x.startswith("| V |"))
    assert "CVSE issued" in header and "x dense issued" in header
    row = next(x for x in lines if x.startswith("| 8 | 4096 | 0.9 | 256 |"))
    assert "| 0.6000 | 1.1000 | 1.83x |" in row


def auto_rows(auto_issued: float) -> list[dict]:
    """m1: auto kept ME-TCF's kernel (its 1.2x is noise, not judged); m2: auto chose another kernel."""
    return [host_row("m1", 500_000, 128, "det-f32", 10, 9, 20, 20),
            host_row("m1", 500_000, 128, "auto-f32", 12, 9, 20, 20),
            host_row("m2", 600_000, 128, "det-f32", 20, 19, 40, 40),
            {**host_row("m2", 600_000, 128, "auto-f32", auto_issued, 19.2, 40, 40), "kernel": "cvse-vector"}]


def host_md(folder: Path, tmp_path: Path, *files: tuple[str, dict, list]) -> str:
    """The "Per call as issued" section from host-overhead files (name, meta over a --reorder auto run's on GPU X,
    rows), written to ``folder``."""
    folder.mkdir()
    for name, meta, rows in files:
        write(folder, name, {"reorder": "auto", **meta}, rows)
    return section(render(folder, tmp_path), "Per call as issued")


def test_auto_against_the_base_format_is_judged_where_it_chose_another_kernel(tmp_path):
    for issued, ratio, status in ((20.4, "1.020x", "**met**"), (21.0, "1.050x", "**missed**")):
        md = host_md(tmp_path / f"results-{issued}", tmp_path,
                     ("host-overhead-gpu-x-2026-01-02-a.json", {"date": "2026-01-02T10:00:00+00:00"},
                      auto_rows(issued)))
        line = next(x for x in md.splitlines() if x.startswith("| auto-f32 / det-f32 as issued"))
        assert "(2 cases; 1 where auto chose another kernel" in line
        assert "max 1.20x (same kernel: noise)" in line and f"other kernel: max {ratio}" in line and status in line


def test_a_days_runs_on_two_gpu_models_are_not_pooled(tmp_path):
    """The newest run's model only: a same-day run on another GPU neither adds rows nor replaces them."""
    md = host_md(tmp_path / "results", tmp_path,
                 ("host-overhead-gpu-x-2026-01-02-a.json", {"date": "2026-01-02T10:00:00+00:00"},
                  [host_row("m1", 500_000, 128, "det-f32", 10, 9, 20, 20),
                   host_row("m3", 700_000, 128, "det-f32", 10, 9, 20, 20)]),
                 ("host-overhead-gpu-y-2026-01-02-a.json", {"date": "2026-01-02T11:00:00+00:00", "device": "GPU Y"},
                  [host_row("m1", 500_000, 128, "det-f32", 10, 9, 40, 40)]))
    assert "host-overhead-gpu-y-2026-01-02-a.json" in md and "`m3`" not in md
    line = next(x for x in md.splitlines() if "det-f32 vs cuSPARSE float32 as issued on the matrix as given" in x)
    assert "4.00x over 1 cases" in line


def test_half_plans_against_cusparse_in_their_precision(tmp_path):
    """Rows with ``cus_dtype`` (cuSPARSE in the plan's precision, no cupyx for float16) are judged against their
    bound cuSPARSE call, and the target names that precision; older rows without it name float32."""
    res = tmp_path / "results"
    res.mkdir()
    half = host_row("m1", 500_000, 128, "det-f16", 10, 9, 15, 30)
    half.update(cus_dtype="float16")
    for key in ("cupyx_issued_us", "orig_cupyx_issued_us"):
        del half[key]
    write(res, "host-overhead-gpu-x-2026-01-02-a.json", {"reorder": "auto", "date": "2026-01-02T10:00:00+00:00"},
          [half, host_row("m1", 500_000, 128, "det-f32", 10, 9, 20, 20)])
    md = section(render(res, tmp_path), "Per call as issued")
    line = next(x for x in md.splitlines() if "det-f16 vs cuSPARSE float16 as issued on the matrix as given" in x)
    assert "3.00x" in line  # 30 us of cuSPARSE half on the original against 10 us as issued
    assert "det-f32 vs cuSPARSE float32 as issued" in md


def test_issue32_targets_on_the_defaults_in_their_precision(tmp_path):
    """auto-f32 >= 1.5x and auto-f16 >= 2x over cuSPARSE in the same precision on the matrix as given, none below
    1.0x; float16 rows whose cuSPARSE ran in float32 are not counted."""
    res = tmp_path / "results"
    res.mkdir()
    f32 = [host_row("m1", 500_000, 128, "auto-f32", 10, 9, 20, 20), host_row("m2", 600_000, 256, "auto-f32", 10, 9,
                                                                            12, 12)]
    half = host_row("m1", 500_000, 128, "auto-f16", 10, 9, 30, 30)
    half.update(cus_dtype="float16")
    old_half = host_row("m2", 600_000, 128, "auto-f16", 10, 9, 5, 5)  # cuSPARSE float32: not counted
    write(res, "host-overhead-gpu-x-2026-01-02-a.json", {"reorder": "auto", "date": "2026-01-02T10:00:00+00:00"},
          [*f32, half, old_half])
    md = section(render(res, tmp_path), "Per call as issued")
    line = next(x for x in md.splitlines() if x.startswith("| issue 32: auto-f32 vs cuSPARSE float32"))
    assert "1.55x over 2 cases, min 1.20x (m2 N=256)" in line and "**met**" in line  # sqrt(2.0 * 1.2)
    line = next(x for x in md.splitlines() if x.startswith("| issue 32: auto-f16 vs cuSPARSE float16"))
    assert "3.00x over 1 cases" in line and "**met**" in line


def test_a_geomean_just_under_its_target_is_not_printed_as_the_target(tmp_path):
    """1.996x against a 2x target reads 1.996x (missed), not 2.00x; 2.004x reads 2.00x (met)."""
    for orig, text, verdict in ((19.96, "1.996x over 1 cases", "**missed**"), (20.04, "2.00x over 1 cases", "**met**")):
        res = tmp_path / f"results-{orig}"
        res.mkdir()
        half = host_row("m1", 500_000, 128, "auto-f16", 10, 9, orig, orig)
        half.update(cus_dtype="float16")
        write(res, "host-overhead-gpu-x-2026-01-02-a.json", {"reorder": "auto", "date": "2026-01-02T10:00:00+00:00"},
              [half])
        md = section(render(res, tmp_path), "Per call as issued")
        line = next(x for x in md.splitlines() if x.startswith("| issue 32: auto-f16 vs cuSPARSE float16"))
        assert text in line and verdict in line, line


def test_host_rows_newest_per_case_across_days_on_the_newest_runs_gpu(tmp_path):
    """A newer day's run replaces the cases it measured and keeps the older day's others (same GPU model); a run on
    another GPU model older than the newest is left out."""
    res = tmp_path / "results"
    res.mkdir()
    write(res, "host-overhead-gpu-x-2026-01-01-a.json", {"reorder": "auto", "date": "2026-01-01T10:00:00+00:00"},
          [host_row("m1", 500_000, 128, "det-f32", 40, 39, 20, 20), host_row("m2", 600_000, 128, "det-f32", 10, 9,
                                                                               30, 30)])
    write(res, "host-overhead-gpu-x-2026-01-03-b.json", {"reorder": "auto", "date": "2026-01-03T10:00:00+00:00"},
          [host_row("m1", 500_000, 128, "det-f32", 10, 9, 20, 20)])  # m1 again, now 2x
    write(res, "host-overhead-gpu-y-2026-01-02-c.json", {"reorder": "auto", "date": "2026-01-02T10:00:00+00:00",
                                                         "device": "GPU Y"},
          [host_row("m3", 700_000, 128, "det-f32", 10, 9, 90, 90)])
    md = section(render(res, tmp_path), "Per call as issued")
    assert "`m3`" not in md and "`m2`" in md
    line = next(x for x in md.splitlines() if "det-f32 vs cuSPARSE float32 as issued on the matrix as given" in x)
    assert "2.45x over 2 cases, min 2.00x (m1 N=128)" in line  # m1 at 2x (the newer run), m2 at 3x (the older)
