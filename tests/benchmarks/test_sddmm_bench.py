"""benchmarks/sddmm.py without a GPU: the refusal, argument checks, the matrix list and its builders (benchmarks/
graph_suite.py; its IGB reader is tested in test_gnn_bench.py), the sampled float64 reference and the failure rules,
torch's call (CPU torch, where installed), the table; and the SDDMM section benchmarks/summarize.py renders from a
synthetic sddmm-*.json."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "sddmm.py"


@pytest.fixture(scope="module")
def bench(load_script):
    return load_script(SCRIPT)


def test_refuses_without_cuda(bench):
    from kernels.spmm import gpu_available

    if gpu_available():
        pytest.skip("the refusal needs a machine without CuPy or a CUDA device")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--kd", "64"], capture_output=True, text=True, timeout=120,
                          cwd=REPO)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "error: benchmarks/sddmm.py needs CuPy and a CUDA device, found none"


def test_arguments(bench, capsys):
    args = bench.parse_args([])
    assert args.kd == [64, 256] and args.repeats == 20 and args.budget_s == 400.0 and args.out is None
    args = bench.parse_args(["--kd", "32", "--matrices", "dnn", "rmat-s1", "--out", "x.json"])
    assert args.kd == [32] and args.matrices == ["dnn", "rmat-s1"] and args.out == Path("x.json")
    for bad, msg in ((["--kd", "0"], "--kd must be positive"), (["--repeats", "2"], "--repeats must be >= 3"),
                     (["--matrices", "webbase"], "--matrices: ['webbase'] match no class or label")):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)
        assert msg in capsys.readouterr().err


def test_results_path(bench, tmp_path):
    assert bench.results_path(None, "nvidia-h100", "2026-01-02") == \
        REPO / "benchmarks" / "results" / "sddmm-nvidia-h100-2026-01-02.json"
    assert bench.results_path(tmp_path, "gpu", "2026-01-02") == tmp_path / "sddmm-gpu-2026-01-02.json"
    assert bench.results_path(tmp_path / "r.json", "gpu", "2026-01-02") == tmp_path / "r.json"



def test_main_runs_each_matrix_isolated_within_the_budget(bench, tmp_path, monkeypatch):
    """main's loop without a GPU (builds and run_matrix stand-ins): an absent fixture is skipped, a matrix that
    raises before any Kd is a failure with its whole message and the next one runs; no matrix starts past
    --budget-s (counted from the start of the run)."""
    import kernels.spmm

    monkeypatch.setattr(kernels.spmm, "gpu_available", lambda: True)
    monkeypatch.setattr(bench, "device_meta", lambda: {"device": "test gpu", "slug": "test-gpu"})
    eye = sp.csr_array(sp.eye(4, dtype=np.float32))
    monkeypatch.setattr(bench, "build", lambda source: None if source[0] == "fixture" else eye)  # fixtures absent
    ran = []

    def run_matrix(case, S, args, torch_ok):
        ran.append(case["label"])
        if case["label"] == "rmat-s16":
            raise RuntimeError("upload failed\nsecond line")
        return []

    monkeypatch.setattr(bench, "run_matrix", run_matrix)
    out = tmp_path / "r.json"
    assert bench.main(["--matrices", "rmat-s1", "fixture:", "--out", str(out)]) == 1
    doc = json.loads(out.read_text())
    assert ran == ["rmat-s13", "rmat-s16", "rmat-s17"]
    assert doc["failures"] == ["rmat-s16: raised RuntimeError: upload failed\nsecond line"]
    assert doc["meta"]["skipped"] == ["fixture:SNAP/email-Enron: fixture absent"]
    assert list(doc["meta"]["matrices"]) == ["rmat-s13", "rmat-s16", "rmat-s17"]
    ran.clear()
    assert bench.main(["--matrices", "rmat-s13", "dnn", "--budget-s", "1e-9", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert ran == [] and doc["meta"]["skipped"] == ["rmat-s13: over --budget-s 1e-09",
                                                    "dlmc-4096-V8-s80: over --budget-s 1e-09"]


def test_matrix_list_and_filters(bench):
    labels = [c["label"] for c in bench.cases(bench.parse_args([]))]
    # the first graph, then the pruned weights (a budget stop leaves both classes), then the other graphs
    assert labels == ["rmat-s13", "dlmc-4096-V8-s80", "igb-tiny", "fixture:SNAP/email-Enron", "mesh2d-400",
                      "rmat-s16", "sbm-100k", "rmat-s17"]
    dnn = bench.cases(bench.parse_args(["--matrices", "dnn"]))
    assert [(c["label"], c["class"], c["source"][0]) for c in dnn] == [("dlmc-4096-V8-s80", "dnn", "dlmc")]
    assert [c["label"] for c in bench.cases(bench.parse_args(["--matrices", "rmat", "fixture:"]))] == [
        "rmat-s13", "fixture:SNAP/email-Enron", "rmat-s16", "rmat-s17"]


def test_build_gives_the_pattern_with_unit_values(bench):
    S = bench.build(("gen", "rmat", "scale=8&edge_factor=4", 1))
    A = bench.build(("gen", "rmat", "scale=8&edge_factor=4", 1))
    assert S.has_canonical_format and S.dtype == np.float32 and np.all(S.data == 1.0) and S.nnz > 500
    assert np.array_equal(S.indices, A.indices) and np.array_equal(S.indptr, A.indptr)  # seeded
    assert bench.build(("igb", "no/such/archive.tar.gz")) is None


def small():
    """7 x 5, 13 nonzeros, an empty row (3) and a full row (5):
       [ x . x . . ]
       [ . x . . x ]
       [ x . . x . ]
       [ . . . . . ]
       [ . . x . . ]
       [ x x x x x ]
       [ . x . . . ]"""
    pattern = [[0, 2], [1, 4], [0, 3], [], [2], [0, 1, 2, 3, 4], [1]]
    rows = [r for r, cols in enumerate(pattern) for _ in cols]
    cols = [c for cs in pattern for c in cs]
    return sp.csr_array((np.ones(len(cols), np.float32), (rows, cols)), shape=(7, 5))


def test_sample_and_reference(bench):
    from kernels.precision import precision

    S = small()
    rng = np.random.default_rng(3)
    A = rng.standard_normal((7, 6)).astype(np.float32)
    B = rng.standard_normal((5, 6)).astype(np.float32)
    pos, rows = bench.sample(S, np.random.default_rng(0), max_nnz=5)
    assert len(pos) == 5 and np.all(np.diff(pos) > 0)
    assert all(S.indptr[r] <= k < S.indptr[r + 1] for k, r in zip(pos, rows))  # the empty row 3 is never drawn
    pos, rows = bench.sample(S, np.random.default_rng(0))
    assert np.array_equal(pos, np.arange(13))
    dense = A.astype(np.float64) @ B.T.astype(np.float64)
    np.testing.assert_allclose(bench.reference(S, pos, rows, A, B), dense[rows, S.indices], rtol=1e-12)
    p = precision("float16")
    want = np.einsum("ij,ij->i", p.rounded(A)[rows], p.rounded(B)[S.indices])
    np.testing.assert_allclose(bench.reference(S, pos, rows, A, B, p), want, rtol=1e-12)
    assert not np.allclose(want, dense[rows, S.indices], rtol=1e-6)  # the rounding is applied
    assert bench.rel_err(want * (1 + 1e-3), want) == pytest.approx(1e-3)
    assert np.isnan(bench.rel_err(np.r_[want[:-1], np.inf], want))


def test_failures_use_each_results_precision(bench):
    row = {"matrix": "m", "Kd": 64, "errors": {"torch": "RuntimeError: boom"},
           "rel_err": {"cvse-float16": 5e-3, "cvse-bfloat16-kernel": 2e-2, "csr": 1e-7, "cvse-float32-out": 1e-7,
                       "cusparse-sddmm": float("nan")},
           "rel_err_contract": {"cvse-float16": 5e-3, "csr-out": 5e-3, "cvse-float32-kernel": 3e-3}}
    got = bench.failures_of(row)
    # fp16 5e-3 <= 1e-2 and bf16 2e-2 <= 3e-2 pass; NaN, the csr route and TF32 are held to 2e-3
    assert got == ["m Kd=64: cusparse-sddmm rel_err nan > 0.002", "m Kd=64: csr-out rel_err_contract 0.005 > 0.002",
                   "m Kd=64: cvse-float32-kernel rel_err_contract 0.003 > 0.002",
                   "m Kd=64: torch raised RuntimeError: boom"]
    assert bench.precision_of("cvse-bfloat16-out") == "bfloat16" and bench.precision_of("torch") == "float32"


def test_torch_call_is_the_sddmm(bench):
    torch = pytest.importorskip("torch", reason="needs torch (CPU is enough): pip install -e '.[gnn]'")
    from kernels.sddmm import csr_sddmm

    S = small()
    A = torch.randn(7, 6, generator=torch.Generator().manual_seed(0))
    B = torch.randn(5, 6, generator=torch.Generator().manual_seed(1))
    res = bench.torch_sddmm(bench.torch_csr(S, "cpu"), A, B)
    assert res.layout == torch.sparse_csr and res.values().dtype == torch.float32
    assert torch.equal(res.crow_indices(), torch.from_numpy(S.indptr.astype(np.int64)))  # S's pattern, CSR order
    np.testing.assert_allclose(res.values().numpy(), csr_sddmm(S, A.numpy(), B.numpy()), rtol=1e-5, atol=1e-6)


def result_row(matrix, cls, nnz, Kd, torch_ms, tf32, fp16, bf16=None):
    iss = {"torch": torch_ms, "cvse-float32": tf32, "cvse-float32-out": tf32 * 0.9, "cvse-float16": fp16,
           "cvse-float16-out": fp16 * 0.9, "csr": 2.0, "csr-out": 1.9}
    if bf16:
        iss.update({"cvse-bfloat16": bf16, "cvse-bfloat16-out": bf16})
    return {"matrix": matrix, "class": cls, "shape": [10, 10], "nnz": nnz, "Kd": Kd, "vector": {"cvse-float16": 8},
            "route": {"cvse-float16": "cusparse" if Kd == 64 and cls == "graph" else "cvse"}, "issued_ms": iss, "ms": {"cusparse-sddmm": 0.5, "cvse-float32": 0.2, "cvse-float16": 0.125,
                                     "cvse-float16-call": 0.15},
            "rel_err": {"cvse-float16": 1e-7}, "rel_err_contract": {"cvse-float16": 3e-4, "torch": 1e-7},
            "errors": {}}


def test_table_last_columns(bench):
    lines = bench.text_table([result_row("rmat-s16", "graph", 954_557, 64, 1.0, 0.8, 0.5)])
    assert lines[0].startswith("timing: ")
    assert lines[1].split()[:7] == ["matrix", "class", "nnz", "Kd", "V", "route", "torch"]
    cells = lines[2].split()
    assert cells[:9] == ["rmat-s16", "graph", "954557", "64", "8", "cusp", "1.0000", "2.0000", "0.8000"]
    assert cells[10] == "-" and cells[11:14] == ["1.25", "2.00", "-"]  # no bf16 timing: "-"
    assert cells[14:16] == ["0.5000", "0.2000"] and cells[-1] == "3.0e-04"


def test_sddmm_section_and_targets(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    rows = [result_row("rmat-s16", "graph", 954_557, 64, 1.0, 0.8, 0.5, bf16=0.55),  # 2.00x
            result_row("sbm-100k", "graph", 1_785_543, 64, 1.0, 0.9, 1.0),  # 1.00x: geomean 1.41x, missed
            result_row("igb-tiny", "graph", 88_648, 64, 1.0, 1.0, 0.1),  # below 0.1M: shown, not counted
            result_row("dlmc-4096-V8-s80", "dnn", 3_355_440, 64, 3.0, 1.2, 1.0)]  # 3.00x, met
    (results / "sddmm-test-gpu-2026-01-02.json").write_text(json.dumps({
        "meta": {"benchmark": "sddmm", "device": "Test GPU", "torch": "2.9", "command": "benchmarks/sddmm.py --kd 64",
                 "date": "2026-01-02T00:00:00+00:00", "skipped": ["rmat-s17: over --budget-s 10"]}, "rows": rows}))
    out = tmp_path / "bench.md"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "summarize.py"), "--results", str(results), "--out",
                    str(out)], check=True, capture_output=True)
    body = out.read_text().split("## SDDMM as users call it", 1)[1].split("\n## ", 1)[0]
    assert "| rmat-s16 | graph | 0.95M | 64 | 8 | cusp | 1.000 | 2.000 (1.900) | 0.800 (0.720) | 0.500 (0.450) | " \
           "0.550 (0.550) | 1.25 | 2.00 | 1.82 | 0.500 | 0.200 | 0.125 | – | 0.150 | 3.0e-04 |" in body
    assert "| igb-tiny (†) | graph |" in body and "(†): a graph outside" in body
    assert "Graphs below the 1.5x target (FP16)" in body
    gaps = [ln for ln in body.splitlines() if ln.startswith("- ") and "(Kd = " in ln]
    assert len(gaps) == 1 and gaps[0].startswith("- sbm-100k (Kd = 64): torch / FP16 1.00x, route cusp; kernels by "
                                                 "graph replay: cuSPARSE 0.500 ms, CVSE FP16 0.125 ms; the CVSE kernel")
    assert "Skipped: rmat-s17: over --budget-s 10" in body and "torch 2.9" in body
    targets = {ln.split("|")[1].strip(): [c.strip() for c in ln.strip().strip("|").split("|")]
               for ln in body.splitlines() if ln.startswith("| FP16")}
    g = targets["FP16 `run(A, B)` as issued over torch as issued, geomean over graphs of 0.1-3M nnz, Kd = 64"]
    assert g[2].startswith("1.41x over 2 matrices (min 1.00x, sbm-100k); TF32 1.18x") and g[3] == "**missed**"
    d = targets["FP16 `run(A, B)` as issued over torch as issued, geomean over pruned DNN weights (V = 8, 80 %), "
                "Kd = 64"]
    assert d[2].startswith("3.00x over 1 matrices") and d[3] == "**met**"
    f = targets["FP16 faster than TF32 (`run(A, B)` as issued), every S and Kd"]
    assert f[2].startswith("3 of 4 (") and "least gain 0.90x, sbm-100k Kd=64" in f[2] and f[3] == "**missed**"
    assert "How to reproduce: `PYTHONPATH=. python3 benchmarks/sddmm.py --kd 64`" in body
