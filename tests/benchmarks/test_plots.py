"""benchmarks/plots.py: every chart from synthetic rows, "not run" for a family without rows, the run chart, and
summarize.py with and without matplotlib (it writes the tables either way and says why there are no charts)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return mod


@pytest.fixture(scope="module")
def plots():
    pytest.importorskip("matplotlib", reason="charts need matplotlib (the dev extra)")
    return _load("plots")


def _rows():
    spmm = [{"matrix": m, "order": o, "N": 128, "speedup_vs_original_cusparse": s1, "speedup_vs_same_cusparse": s2,
             "selected_ms": 2.0 * k + 1, "memory_floor_ms": 1.0 * k + 0.5}
            for k, (m, o, s1, s2) in enumerate([("a", "tca", 1.5, 1.2), ("b", "tca", 0.9, 1.0), ("a", "none", 1, 1)])]
    reorder = [{"matrix": "a", "method": "tca", "none_blocks": 1000, "blocks": 600},
               {"matrix": "a", "method": "rcm", "none_blocks": 1000, "blocks": 800}]
    mgpu = [{"order": "none", "P": p, "iter_eff": e, "resident_batched_iter_eff": e + 0.05}
            for p, e in ((1, 1.0), (2, 0.7), (4, 0.5))]
    prec = [{"matrix": "a", "order": "none", "N": 128, "float32": {"replay_ms": 2.0}, "float16": {"replay_ms": 1.0},
             "bfloat16": {"replay_ms": 1.1}, "cusparse_float16": {"ms": 1.5}}]
    return {"spmm": spmm, "reorder": reorder, "multi_gpu": mgpu, "precision": prec}


def test_every_chart_is_drawn(plots, tmp_path):
    charts = plots.render(_rows(), tmp_path)
    assert [c for c, _ in charts] == [caption for _, _, caption in plots.CHARTS.values()]
    for _, name in charts:
        assert name and (tmp_path / name).read_bytes()[:8] == PNG
    text = "\n".join(plots.section(charts))
    assert "![Multi-GPU scaling](benchmarks-scaling.png)" in text


def test_missing_family_is_not_run(plots, tmp_path):
    charts = dict(plots.render({"spmm": _rows()["spmm"]}, tmp_path))
    assert charts["Multi-GPU scaling"] is None and charts["Half precision"] is None
    assert charts["Time vs memory floor per case"] == "benchmarks-floor.png"
    assert "*Multi-GPU scaling*: not run" in plots.section(list(charts.items()))
    assert not (tmp_path / "benchmarks-scaling.png").exists()


def test_run_chart(plots, tmp_path):
    out = plots.run_chart({"matrix": "gen:banded", "wall_ms": {"fetch": 1.0, "parse": 5.0, "spmm": 9.0},
                           "kernel": "cpu-reference", "kernel_ms": 0.5, "gflops": 3.2}, tmp_path / "run.png")
    assert out.read_bytes()[:8] == PNG
    with pytest.raises(ValueError, match="no wall_ms"):
        plots.run_chart({}, tmp_path / "x.png")


def _results(folder: Path) -> Path:
    folder.mkdir()
    rows = [{**r, "kind": "sbm", "nnz": 10, "shape": [4, 4]} for r in _rows()["multi_gpu"]]
    (folder / "multi_gpu-x-2026-01-01.json").write_text(json.dumps({"date": "2026-01-01", "rows": rows}))
    return folder


def test_summarize_draws_charts_beside_the_doc(plots, tmp_path):
    summarize = _load("summarize")
    doc = tmp_path / "docs" / "benchmarks.md"
    doc.parent.mkdir()
    assert summarize.main(["--results", str(_results(tmp_path / "results")), "--out", str(doc)]) == 0
    text = doc.read_text()
    assert text.index("**Charts**") < text.index("\n## ") and "![Multi-GPU scaling](benchmarks-scaling.png)" in text
    assert (doc.parent / "benchmarks-scaling.png").read_bytes()[:8] == PNG


def test_summarize_without_matplotlib_says_so(tmp_path, monkeypatch, capsys):
    summarize = _load("summarize")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    doc = tmp_path / "benchmarks.md"
    assert summarize.main(["--results", str(_results(tmp_path / "results")), "--out", str(doc)]) == 0
    text = doc.read_text()
    assert "# Benchmarks" in text and "No charts: matplotlib is not installed" in text
    assert "no charts: matplotlib is not installed" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.png"))
