"""benchmarks/csr_rows.py and its docs section on the CPU: the section's table and targets from a results file
(the worst cases named; a slower walk, a slower half run or a failed check missed), the absent section,
--table-from, and a bad --matrices label refused before any GPU work or file."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import summarize  # noqa: E402


def row(matrix, precision, walk, given, cus, *, order="given", N=128, correct=True):
    return {"matrix": matrix, "order": order, "nnz": 500_000, "shape": [10, 10], "N": N, "precision": precision,
            "tolerance": 2e-3, "walk_graph_us": walk, "given_graph_us": given, "walk_issued_us": walk + 1,
            "given_issued_us": given + 1, "cus_alg": "CSR_ALG2", "cus_graph_us": cus, "cus_issued_us": cus + 2,
            "cus_rel_err": 1e-4, "rel_err": 1e-4, "walks_bitwise_equal": correct, "correct": correct}


def render(tmp_path, rows) -> str:
    res = tmp_path / "results"
    res.mkdir()
    (res / "csr_rows-gpu-x-2026-01-02.json").write_text(json.dumps(
        {"meta": {"device": "GPU X", "command": "benchmarks/csr_rows.py", "date": "2026-01-02T10:00:00+00:00",
                  "skipped": ["SNAP/email-Enron: fixture not present"]}, "rows": rows}))
    md = summarize.render(res)
    start = md.index("## CUDA-core CSR kernel")
    return md[start:md.index("\n## ", start + 5)]


def target(md: str, text: str) -> str:
    return next(line for line in md.splitlines() if line.startswith(f"| {text}"))


def test_targets_met_and_the_worst_cases_named(tmp_path):
    md = render(tmp_path, [row("rmat", "float32", 150, 160, 155), row("rmat", "float16", 100, 110, 150),
                           row("sbm", "float32", 100, 100, 200), row("sbm", "float16", 80, 79, 100)])
    assert "**met**" in target(md, "float16 vs cuSPARSE half CSR") and "1.25x (sbm given N=128 float16)" in md
    assert "1.25x (sbm given N=128 float16)" in target(md, "float16 vs its own float32")
    line = target(md, "default walk vs A's order")
    assert "1.01x (sbm given N=128 float16)" in line and "**met**" in line
    assert "4 of 4" in target(md, "every C within tolerance") and "Skipped: SNAP/email-Enron" in md


def test_a_slower_walk_or_half_and_a_failed_check_are_missed(tmp_path):
    md = render(tmp_path, [row("rmat", "float32", 100, 100, 120), row("rmat", "float16", 110, 100, 105,
                                                                     correct=False)])
    assert "**missed**" in target(md, "float16 vs its own float32")  # 100 / 110
    assert "**missed**" in target(md, "default walk vs A's order")  # 1.10x
    assert "**missed**" in target(md, "every C within tolerance") and "| **no** |" in md
    line = target(md, "float16 vs cuSPARSE half CSR")
    assert "0.95x (rmat given N=128 float16)" in line and "**missed**" in line  # 105 / 110

def test_l2_bound_and_mapping_columns(tmp_path):
    """With the run's L2 read rate, each row shows the speedup a kernel gathering every B row from L2 would reach
    (float16, 500k nnz x 128 x 2 bytes = 128 MB: 16 us at 8 TB/s, so 40 us of cuSPARSE is a 2.5x bound) and the
    mapping the kernel kept; older files without either show a dash."""
    import csr_rows

    r = {**row("rmat", "float16", 30, 31, 40), "mapping": "pair", "mapping_ms": {"wide": 0.032, "pair": 0.030}}
    assert abs(csr_rows.l2_bound_x(r, 8.0) - 2.5) < 1e-9
    res = tmp_path / "results"
    res.mkdir()
    (res / "csr_rows-gpu-x-2026-01-02.json").write_text(json.dumps(
        {"meta": {"device": "GPU X", "command": "benchmarks/csr_rows.py", "date": "2026-01-02T10:00:00+00:00",
                  "l2_read_tbs": 8.0}, "rows": [r, row("rmat", "float32", 50, 50, 60)]}))
    md = summarize.render(res)
    md = md[md.index("## CUDA-core CSR kernel"):]
    assert "| 1.33x | 2.50x | pair |" in md  # x cuSPARSE 40 / 30, the bound, the mapping
    assert "| 1.20x | 1.88x | – |" in md  # float32: 500k x 128 x 4 = 256 MB, 32 us at 8 TB/s; no mapping recorded


def test_absent_section_says_not_run(tmp_path):
    res = tmp_path / "empty"
    res.mkdir()
    md = summarize.render(res)
    assert "no `csr_rows-*.json`" in md and "PYTHONPATH=. python3 benchmarks/csr_rows.py" in md


def test_table_from_and_bad_matrices(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"meta": {}, "rows": [row("rmat", "float16", 100, 110, 150)]}))
    out = subprocess.run([sys.executable, str(BENCH / "csr_rows.py"), "--table-from", str(path)], capture_output=True,
                         text=True, check=True).stdout
    assert "rmat" in out and "1.50" in out
    bad = subprocess.run([sys.executable, str(BENCH / "csr_rows.py"), "--matrices", "nope", "--out-dir",
                          str(tmp_path / "out")], capture_output=True, text=True)
    assert bad.returncode != 0 and "unknown --matrices ['nope']" in bad.stderr
    assert not (tmp_path / "out").exists()  # refused before anything is written
    bad = subprocess.run([sys.executable, str(BENCH / "csr_rows.py"), "--ns", "0", "--out-dir", str(tmp_path / "out")],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and len(bad.stderr.splitlines()) == 1 and "--ns must be >= 1" in bad.stderr
    assert not (tmp_path / "out").exists()


def test_gather_rate_and_the_l2_read_rate_shown(tmp_path):
    # 500k nonzeros x 128 float16 values = 128 MB gathered in 100 us: 1.28 TB/s; cuSPARSE 150 us: 0.85 TB/s
    res = tmp_path / "results"
    res.mkdir()
    (res / "csr_rows-gpu-x-2026-01-02.json").write_text(json.dumps(
        {"meta": {"device": "GPU X", "command": "benchmarks/csr_rows.py", "date": "2026-01-02T10:00:00+00:00",
                  "l2_read_tbs": 7.25}, "rows": [row("rmat", "float16", 100, 110, 150)]}))
    md = summarize.render(res)
    md = md[md.index("## CUDA-core CSR kernel"):]
    assert "| 1.28 / 0.85 |" in md and "**7.25 TB/s**" in md
