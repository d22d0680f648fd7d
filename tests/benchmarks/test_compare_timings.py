"""benchmarks/compare_timings.py: rows matched by identity, every timing's ratio, the 3% / 1% criteria."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

spec = importlib.util.spec_from_file_location("compare_timings", Path(__file__).resolve().parents[2] / "benchmarks" /
                                              "compare_timings.py")
ct = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ct)


def write(path, rows):
    path.write_text(json.dumps({"meta": {}, "rows": rows}))
    return path


def test_ratios_of_matched_rows_and_the_criteria(tmp_path, capsys):
    before = write(tmp_path / "b.json", [
        {"matrix": "a", "N": 128, "ms": {"metcf-window": 1.0, "cusparse": 2.0}, "issued_us": 10.0, "nnz": 5},
        {"matrix": "b", "N": 128, "ms": {"metcf-window": 1.0}}])
    same = write(tmp_path / "s.json", [
        {"matrix": "b", "N": 128, "ms": {"metcf-window": 1.005}},
        {"matrix": "a", "N": 128, "ms": {"metcf-window": 0.99, "cusparse": 2.0}, "issued_us": 10.1, "nnz": 5}])
    ratios = dict(ct.compare(before, same))
    assert set(ratios) == {"matrix=a N=128 ms.metcf-window", "matrix=a N=128 ms.cusparse", "matrix=a N=128 issued_us",
                           "matrix=b N=128 ms.metcf-window"}  # nnz is not a timing
    assert abs(ratios["matrix=a N=128 issued_us"] - 1.01) < 1e-12
    assert ct.main([str(before), str(same)]) == 0
    slow = write(tmp_path / "x.json", [{"matrix": "a", "N": 128, "ms": {"metcf-window": 1.04}}])
    assert ct.main([str(before), str(slow)]) == 1  # one case 4% slower
    drift = write(tmp_path / "d.json", [{"matrix": "a", "N": 128, "ms": {"metcf-window": 1.02, "cusparse": 2.04}}])
    assert ct.main([str(before), str(drift)]) == 1  # each within 3%, the geomean 2% slower
    assert "geomean after/before" in capsys.readouterr().out
    assert [n for n, _ in ct.compare(before, same, only=r"^issued_us$")] == ["matrix=a N=128 issued_us"]
    assert ct.main([str(before), str(slow), "--only", "cusparse"]) == 1  # no timing left: nothing to judge


def test_rounds_count_each_timings_minimum(tmp_path):
    """Comma-separated files on a side are rounds of it: each timing's minimum over them is compared."""
    b1 = write(tmp_path / "b1.json", [{"matrix": "a", "N": 128, "issued_us": 10.0, "graph_us": 5.0}])
    b2 = write(tmp_path / "b2.json", [{"matrix": "a", "N": 128, "issued_us": 12.0, "graph_us": 4.0}])
    a1 = write(tmp_path / "a1.json", [{"matrix": "a", "N": 128, "issued_us": 14.0, "graph_us": 4.0}])
    a2 = write(tmp_path / "a2.json", [{"matrix": "a", "N": 128, "issued_us": 10.1, "graph_us": 6.0}])
    ratios = dict(ct.compare(f"{b1},{b2}", f"{a1},{a2}"))
    assert abs(ratios["matrix=a N=128 issued_us"] - 1.01) < 1e-12 and ratios["matrix=a N=128 graph_us"] == 1.0
    assert ct.main([f"{b1},{b2}", f"{a1},{a2}"]) == 0
    assert ct.main([str(b1), str(a1)]) == 1  # one round each: 40% slower


def test_out_writes_the_comparison(tmp_path):
    """--out: the cases with before, after and ratio, the summary and where the numbers came from."""
    b = tmp_path / "b.json"
    b.write_text(json.dumps({"meta": {"device": "GPU X", "command": "bench --x"},
                             "rows": [{"matrix": "a", "N": 128, "issued_us": 10.0}]}))
    a = write(tmp_path / "a.json", [{"matrix": "a", "N": 128, "issued_us": 10.5}])
    out = tmp_path / "ab.json"
    assert ct.main([str(b), str(a), "--out", str(out), "--label", "refactor"]) == 1  # 5% slower
    doc = json.loads(out.read_text())
    assert doc["meta"]["device"] == "GPU X" and doc["meta"]["label"] == "refactor"
    assert doc["meta"]["before_commands"] == ["bench --x"] and doc["summary"]["above"] == 1
    assert doc["summary"]["ok"] is False and abs(doc["rows"][0]["ratio"] - 1.05) < 1e-12


def test_skip_leaves_out_the_baselines_and_derived_numbers(tmp_path):
    row = {"matrix": "a", "N": 128, "ms": {"metcf-window": 1.0, "cusparse": 2.0, "torch": 3.0},
           "cusparse_algs_ms": {"CSR_ALG2": 2.0}, "memory_floor_ms": 0.5, "model_predicted_ms": 0.9,
           "selected_ms": 1.0, "convert_gpu_ms": 4.0, "cus_issued_us": 9.0, "orig_cus_graph_us": 8.0}
    before = write(tmp_path / "b.json", [row])
    after = write(tmp_path / "a.json", [{**row, "ms": {"metcf-window": 1.0, "cusparse": 2.5, "torch": 3.5}}])
    kept = [n.split(" ")[-1] for n, _ in ct.compare(before, after)]
    assert "ms.cusparse" in kept and ct.main([str(before), str(after)]) == 1  # the baselines moved 25%
    names = [n.split(" ")[-1] for n, _, _ in ct.compare_values(before, after, skip=ct.BASELINES)]
    assert names == ["convert_gpu_ms", "ms.metcf-window", "selected_ms"]
    assert ct.main([str(before), str(after), "--skip", ct.BASELINES]) == 0


def test_beyond_noise_needs_every_after_round_slower(tmp_path, capsys):
    """With rounds on both sides a case above the limit counts as beyond noise only when the rounds' ranges do not
    overlap; the strict verdict stays as it was."""
    b1 = write(tmp_path / "b1.json", [{"matrix": "a", "N": 1, "issued_us": 5.0, "graph_us": 4.0}])
    b2 = write(tmp_path / "b2.json", [{"matrix": "a", "N": 1, "issued_us": 7.5, "graph_us": 4.1}])
    a1 = write(tmp_path / "a1.json", [{"matrix": "a", "N": 1, "issued_us": 6.0, "graph_us": 4.5}])
    a2 = write(tmp_path / "a2.json", [{"matrix": "a", "N": 1, "issued_us": 5.5, "graph_us": 4.4}])
    out = tmp_path / "ab.json"
    assert ct.main([f"{b1},{b2}", f"{a1},{a2}", "--out", str(out), "--geomean", "0.2"]) == 1
    doc = json.loads(out.read_text())
    s = doc["summary"]
    # issued_us: 5.5 / 5.0 = 1.10 but before's rounds reach 7.5 (noise); graph_us: 4.4 > 4.1 on every round
    assert s["above"] == 2 and s["above_beyond_noise"] == 1 and s["rounds"] == [2, 2]
    assert s["ok"] is False and s["ok_beyond_noise"] is False
    rows = {r["case"].split(" ")[-1]: r for r in doc["rows"]}
    assert rows["issued_us"]["beyond_noise"] is False and rows["graph_us"]["beyond_noise"] is True
    assert rows["issued_us"]["before_rounds"] == [5.0, 7.5] and rows["issued_us"]["after"] == 5.5
    assert "1 of them beyond the rounds' noise" in capsys.readouterr().out
    a3 = write(tmp_path / "a3.json", [{"matrix": "a", "N": 1, "issued_us": 5.4, "graph_us": 4.05}])
    assert ct.main([f"{b1},{b2}", f"{a3},{a2}", "--out", str(out), "--geomean", "0.2"]) == 1
    assert json.loads(out.read_text())["summary"]["ok_beyond_noise"] is True  # issued 1.08x, inside before's range
    assert ct.beyond_noise([5.0], [5.4], 1.03)  # one round a side: above the limit is beyond noise
