"""benchmarks/formats.py without a GPU: --help, argument checks, the case list, a worker's preparation; and the
"Formats (FP16)" section benchmarks/summarize.py renders from a synthetic formats-*.json."""
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
    assert [c["label"] for c in only] == ["rmat-s16", "fixture:HB/bcsstk13", "sbm-100k", "rmat-s17"]
    assert only[0]["orders"] == ["given", "tca"]  # the baseline order always comes first
    quick = formats.parse_args(["--quick"])
    assert quick.ns == [128, 512] and [c["label"] for c in formats.cases(quick)] == [
        "dlmc-2048-V8-s90", "rmat-s13", "fixture:Pajek/Erdos971", "fem12-dof3"]


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
