"""benchmarks/formats.py without a GPU: --help, argument checks, the case list, a worker's preparation, the float32
mode's file name and meta; and the "Formats (FP16)" section benchmarks/summarize.py renders from a synthetic
formats-*.json, reading FP16 runs only (a float32 run has its own section)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "formats.py"


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def formats():
    return load("bench_formats", SCRIPT)


@pytest.fixture(scope="module")
def summarize():
    return load("bench_summarize_for_formats", REPO / "benchmarks" / "summarize.py")


def run(*argv):
    return subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=120)


def test_help_works_without_a_gpu():
    proc = run("--help")
    assert proc.returncode == 0, proc.stderr
    assert "--budget-s" in proc.stdout and "--quick" in proc.stdout and "--matrices" in proc.stdout


@pytest.mark.parametrize("argv, message", [
    (["--ns", "128", "0"], "--ns must be positive"),
    (["--sparsities", "0.3"], "must lie in [0.5, 0.98]"),
    (["--v1-sparsities", "0.99"], "must lie in [0.5, 0.98]"),
    (["--vectors", "3"], "--vectors must be among"),
    (["--size", "1000"], "--size must be a positive multiple of 16"),
    (["--formats", "metcf", "csc"], "--formats: unknown ['csc']"),
    (["--orders", "rcm"], "--orders: unknown ['rcm']"),
    (["--budget-s", "0"], "--budget-s"),
    (["--repeats", "1"], "--repeats must be >= 3"),
    (["--ns", "abc"], "invalid int value"),
    (["--dtype", "bfloat16"], "argument --dtype: invalid choice: 'bfloat16'"),
])
def test_bad_arguments_are_refused_before_any_gpu_work(argv, message):
    proc = run(*argv)
    assert proc.returncode == 2
    assert message in proc.stderr, proc.stderr


def test_cases_interleave_the_classes_and_filter(formats):
    todo = formats.cases(formats.parse_args([]))
    assert [c["class"] for c in todo[:4]] == ["dnn", "graph", "suitesparse", "fem"]  # one of each first
    labels = [c["label"] for c in todo]
    assert labels[0] == "dlmc-4096-V8-s90" and labels[4] == "dlmc-4096-V4-s90"
    assert "dlmc-4096-V1-s50" in labels and "dlmc-4096-V1-s70" not in labels and "dlmc-4096-V4-s98" in labels
    assert all(c["orders"] == ["given", "rowshuffle"] for c in todo if c["class"] == "dnn")
    assert all(c["orders"] == ["given", "rowshuffle", "smat", "tca"] for c in todo if c["class"] != "dnn")
    only = formats.cases(formats.parse_args(["--matrices", "graph", "fixture:HB", "--orders", "tca"]))
    assert [c["label"] for c in only] == ["rmat-s16", "fixture:HB/bcsstk13", "sbm-100k", "rmat-s17", "core-s16"]
    assert "mesh27-34" in labels and [c["class"] for c in todo if c["label"] == "mesh27-34"] == ["fem"]
    assert only[0]["orders"] == ["given", "tca"]  # the baseline order always comes first
    quick = formats.parse_args(["--quick"])
    assert quick.ns == [128, 512] and [c["label"] for c in formats.cases(quick)] == [
        "dlmc-2048-V8-s90", "rmat-s13", "fixture:Pajek/Erdos971", "fem12-dof3"]


def test_dtype_defaults_to_float16_and_names_the_file_and_meta_of_a_float32_run(formats):
    assert formats.parse_args([]).dtype == "float16" and formats.parse_args(["--dtype", "float32"]).dtype == "float32"
    name = formats.results_name
    assert name("nvidia-h200", "2026-12-01", "float16", None) == "formats-nvidia-h200-2026-12-01.json"  # as before
    assert name("nvidia-h200", "2026-12-01", "float16", "b") == "formats-nvidia-h200-2026-12-01-b.json"
    assert name("nvidia-h200", "2026-12-01", "float32", None) == "formats-nvidia-h200-2026-12-01-float32.json"
    assert name("nvidia-h200", "2026-12-01", "float32", "b") == "formats-nvidia-h200-2026-12-01-float32-b.json"
    half, single = formats.precision_meta("float16"), formats.precision_meta("float32")
    assert half == {"dtype": "float16", "tolerance": 1e-2, "precision": formats.PRECISION_TEXT["float16"],
                    "order_width": 16}
    assert single["order_width"] == 8  # smat and tca on TF32's 16 x 8 blocks
    assert half["precision"] == "FP16 A and B, FP32 accumulation, FP16 C (cuSPARSE: CUDA_R_16F, FP32 compute)"
    assert single["dtype"] == "float32" and single["tolerance"] == 2e-3 and "TF32" in single["precision"]
    assert "half-precision Tensor Core path" in single["blocked_ell"]


def test_the_dense_baseline_allows_tf32_in_float32_only_and_restores_the_setting(monkeypatch):
    """benchmarks/dense.py's torch path with a stand-in torch (no GPU here): float32 times with allow_tf32 set and
    puts the caller's setting back, also when the timing raises; FP16 leaves the setting alone."""
    import types

    import scipy.sparse as sp

    matmul = types.SimpleNamespace(allow_tf32=False)
    torch = types.SimpleNamespace(__version__="9.9", cuda=types.SimpleNamespace(is_available=lambda: True),
                                  as_tensor=lambda x, device: x,
                                  backends=types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=matmul)))
    monkeypatch.setitem(sys.modules, "torch", torch)
    dense = load("bench_dense", REPO / "benchmarks" / "dense.py")
    seen = []

    def timing(self, B, repeats, issued_repeats):
        seen.append(matmul.allow_tf32)
        if B is None:
            raise RuntimeError("stand-in failure")
        return 1.0, 2.0, B

    monkeypatch.setattr(dense.Dense, "_torch_time", timing)
    A = sp.csr_array(np.eye(4, dtype=np.float32))
    d16, d32 = dense.Dense(A), dense.Dense(A, "float32")
    assert d16.name == "torch.matmul (cuBLAS, torch 9.9)" and d16.A.dtype == np.float16  # as before
    assert d32.name == "torch.matmul (cuBLAS, torch 9.9); float32, TF32 allowed" and d32.A.dtype == np.float32
    assert d16.time("B", 3, 3) == (1.0, 2.0, "B") and d32.time("B", 3, 3) == (1.0, 2.0, "B")
    with pytest.raises(RuntimeError, match="stand-in failure"):
        d32.time(None, 3, 3)
    assert seen == [False, True, True] and matmul.allow_tf32 is False
    with pytest.raises(ValueError, match="Dense runs float16 or float32, got dtype 'bfloat16'"):
        dense.Dense(A, "bfloat16")


def test_values_out_of_fp16_range_are_replaced_in_float16_only(formats, monkeypatch):
    import spmm  # benchmarks/spmm.py, on sys.path once formats.py is loaded

    #   [ 0  40 ]   max |x| 40 > 1: FP16 runs replace the values, float32 runs keep them
    #   [-3   0 ]
    stiff = np.array([[0.0, 40.0], [-3.0, 0.0]], dtype=np.float32)
    monkeypatch.setattr(spmm, "fixture", lambda name: stiff)
    A16, note16 = formats.build(("fixture", "HB/stiff"), "float16")
    A32, note32 = formats.build(("fixture", "HB/stiff"), "float32")
    assert np.abs(A16.data).max() <= 1.0 and "replaced by uniform(-1, 1)" in note16
    np.testing.assert_array_equal(A32.toarray(), stiff)
    assert note32 == "as stored; max |x| 40 kept (the [-1, 1] replacement is for FP16's range only)"
    assert np.array_equal(A16.indices, A32.indices) and np.array_equal(A16.indptr, A32.indptr)  # same structure


def test_prepare_returns_permutations_and_order_scores(formats):
    case = {"label": "rmat-tiny", "class": "graph", "source": ("gen", "rmat", "scale=9&edge_factor=8"),
            "orders": ["given", "rowshuffle", "smat", "tca"]}
    prep = formats.prepare(case)
    A, n = prep["A"], prep["A"].shape[0]
    assert prep["perms"]["given"] is None and set(prep["orders"]) == {"given", "rowshuffle", "smat", "tca"}
    for order, perm in prep["perms"].items():
        if perm is not None:
            assert prep["orders"][order]["applied"]
            assert np.array_equal(np.sort(perm), np.arange(n))
    rs = prep["orders"]["rowshuffle"]
    assert 0 < rs["rate_before"] <= 1 and 0 < rs["rate_after"] <= 1
    assert ("rowshuffle" in prep["perms"]) == (rs["rate_after"] > rs["rate_before"])
    assert {"tc_blocks_before", "tc_blocks_after"} <= set(prep["orders"]["tca"])
    rows = np.array([0, 5, n - 1])
    B = np.random.default_rng(0).standard_normal((A.shape[1], 4)).astype(np.float32)
    np.testing.assert_allclose(formats.reference(A, rows, B), (A @ B.astype(np.float64))[rows], rtol=1e-12)


def row(matrix, cls, order, N, cus_orig, **ms):
    return {"matrix": matrix, "class": cls, "order": order, "N": N, "shape": [64, 64], "nnz": 100, "ms": ms,
            "issued_ms": {k: v * 1.5 for k, v in ms.items()}, "cusparse_original_ms": cus_orig,
            "rel_err": {k: 1e-3 for k in ms}, "choice": {}, "errors": {}}


ROWS = [  # dnn: Tiled-CSR 4x over cuSPARSE as given after row shuffle, and the fastest; graph: 1x, ME-TCF after tca
    row("d", "dnn", "given", 128, 2.0, metcf=0.6, bcsr=4.0, tiledcsr=1.0, cvse=1.0, cusparse=2.0),
    row("d", "dnn", "rowshuffle", 128, 2.0, metcf=0.7, bcsr=4.0, tiledcsr=0.5, cvse=1.2, cusparse=1.8),
    row("g", "graph", "given", 128, 2.0, metcf=1.0, bcsr=3.0, tiledcsr=2.0, cvse=0.5, cusparse=2.0),
    row("g", "graph", "tca", 128, 2.0, metcf=0.25, bcsr=3.0, tiledcsr=2.0, cvse=1.0, cusparse=2.0),
    row("g", "graph", "smat", 128, 2.0, metcf=1.0, bcsr=2.0, tiledcsr=2.0, cvse=1.0, cusparse=2.0),
    row("f", "fem", "given", 128, 1.0, metcf=1.0, bcsr=1.0, tiledcsr=4.0, cvse=1.0, cusparse=1.0),  # not judged
]
MATRICES = {"d": {"class": "dnn", "orders": {"given": {"applied": True}, "rowshuffle": {
    "applied": True, "rate_before": 0.25, "rate_after": 0.5, "gain_over_srbcrs": 2.5}}}}


def test_summary_math(formats):
    import summarize_formats as sf  # benchmarks/ is on sys.path once formats.py is loaded

    t = sf.tiled_target(ROWS)
    assert t["overall"] == pytest.approx(2.0) and t["met"] is True and t["n"] == 2  # fem shown, not judged
    assert t["per_class"]["fem"]["orig"] == pytest.approx(0.25)
    assert t["overall_same"] == pytest.approx(np.sqrt(3.6))
    s = sf.class_summary(ROWS)
    assert s["dnn"]["winner"] == "tiledcsr" and s["graph"]["winner"] == "metcf"
    assert s["graph"]["formats"]["metcf"]["own"] == pytest.approx(8.0)  # after tca, vs cuSPARSE as given
    assert s["graph"]["formats"]["bcsr"]["own"] == pytest.approx(1.0)  # after smat
    (v,) = sf.cvse_versus(ROWS[:5])
    assert v["metcf"] == pytest.approx(0.5) and v["bcsr"] == pytest.approx(4.0)
    text = "\n".join(sf.text_report(ROWS, MATRICES, "x.json", 1e-2))
    assert "target >= 1.5x: met" in text and "0.2500 -> 0.5000 = 2.00x" in text


def test_summarize_renders_the_formats_section_and_nothing_without_files(summarize, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "## Formats" not in summarize.render(empty)
    meta = {"device": "Test GPU", "sm_count": 132, "copy_gbs": 4000.0, "cupy": "14", "torch": "2.9",
            "command": "benchmarks/formats.py --quick", "date": "2026-11-26T00:00:00+00:00", "tolerance": 1e-2,
            "matrices": MATRICES, "skipped": ["dlmc-4096-V8-s80"]}
    (tmp_path / "formats-test-gpu-2026-11-26.json").write_text(json.dumps({"meta": meta, "rows": ROWS}))
    old = {**meta, "date": "2026-11-20T00:00:00+00:00", "command": "OLD"}
    (tmp_path / "formats-test-gpu-2026-11-20.json").write_text(json.dumps({"meta": old, "rows": ROWS[:1]}))
    md = summarize.render(tmp_path)
    sec = md[md.index("## Formats (FP16)"):]
    sec = sec[:sec.index("\n## ")] if "\n## " in sec else sec
    assert "`formats-test-gpu-2026-11-26.json`" in sec and "OLD" not in sec.split("Older files")[0]
    assert "Older files not summarized: `formats-test-gpu-2026-11-20.json`" in sec
    assert ("| Tiled-CSR vs cuSPARSE half CSR as given, dnn, graph, suitesparse, N = 128-1024 (geomean) | >= 1.5x "
            "| 2.00x (2 cases; same matrix 1.90x) | **met** |") in sec
    assert "| errors vs float64 on sampled rows (max) | <= 0.01 | 1.0e-03 | **met** |" in sec
    assert "| dnn | 1 |" in sec and sec.split("| dnn | 1 |")[1].splitlines()[0].endswith("| Tiled-CSR |")
    assert "| `d` | dnn | 0.2500 | 0.5000 | 2.00x | 2.50x | yes |" in sec
    assert "Skipped (budget or missing fixtures): dlmc-4096-V8-s80" in sec
    assert "How to reproduce: `PYTHONPATH=. python3 benchmarks/formats.py --quick`" in sec


def test_the_fp16_section_ignores_a_newer_float32_run_which_gets_its_own_section(summarize, tmp_path):
    meta = {"device": "Test GPU", "command": "benchmarks/formats.py --quick", "date": "2026-11-26T00:00:00+00:00",
            "tolerance": 1e-2, "matrices": MATRICES}
    (tmp_path / "formats-test-gpu-2026-11-26.json").write_text(json.dumps({"meta": meta, "rows": ROWS}))
    alone = summarize.render(tmp_path)
    assert "## Formats (float32" not in alone
    slow = [{**r, "ms": {k: 10 * v for k, v in r["ms"].items()}, "rel_err": {k: 5e-4 for k in r["ms"]}}
            for r in ROWS]
    f32 = {**meta, "dtype": "float32", "tolerance": 2e-3, "date": "2026-11-27T00:00:00+00:00",
           "command": "benchmarks/formats.py --quick --dtype float32"}
    (tmp_path / "formats-test-gpu-2026-11-27-float32.json").write_text(json.dumps({"meta": f32, "rows": slow}))
    md = summarize.render(tmp_path)
    fp16 = md[md.index("## Formats (FP16)"):md.index("## Formats (float32")]
    assert fp16 == alone[alone.index("## Formats (FP16)"):][:len(fp16)]  # as without the float32 file
    assert "float32" not in fp16 and "Older files" not in fp16
    sec = md[md.index("## Formats (float32"):]
    sec = sec[:sec.index("\n## ")] if "\n## " in sec else sec
    assert "`formats-test-gpu-2026-11-27-float32.json`" in sec and "BELL" not in sec.split("Per class")[0]
    assert "| errors vs float64 on sampled rows (max) | <= 0.002 | 5.0e-04 | **met** |" in sec
    assert "| `d` | dnn | rowshuffle | 128 | 18.0000 |" in sec  # its own rows, the baseline 10x as well
    assert "How to reproduce: `PYTHONPATH=. python3 benchmarks/formats.py --quick --dtype float32`" in sec


def test_the_readiness_check_passes_the_default_formats_and_refuses_an_unready_one(formats, monkeypatch):
    """The default --formats include the hybrid, a plan rather than a registered format: the readiness check lets it
    through (it raised "not a registered format" on an H100, 2026-11-27) and stops at an unready format in one line."""
    from kernels.formats import registry

    reached = []
    monkeypatch.setattr(formats, "cases", lambda args: reached.append(list(args.formats)) or [])
    monkeypatch.setattr(formats, "_run", lambda args, todo, pending: 0)
    assert formats.main(["--quick"]) == 0
    assert "hybrid" in reached[0]
    import dataclasses

    import kernels.formats

    real = registry.get
    monkeypatch.setattr(kernels.formats, "get", lambda name: dataclasses.replace(
        real(name), gpu_ready=False, gpu_not_ready_why="stood in by a test") if name == "cvse" else real(name))
    reached.clear()
    assert formats.main(["--quick", "--formats", "cvse", "hybrid"]) == 2
    assert not reached
