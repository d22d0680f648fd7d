"""benchmarks/rank_check.py: measured times read from recorded rows (a fallback's time, a lower bound when it lost),
a row's verdict in its run's dtype, the constant fit recovering the constants its rows were made with, a fit over
runs of two dtypes refused, and the leave-one-matrix-out check."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest
import scipy.sparse as sp

from kernels.formats import REGISTRY
from kernels.formats.structure import structure

spec = importlib.util.spec_from_file_location("rank_check", Path(__file__).resolve().parents[2] / "benchmarks" /
                                              "rank_check.py")
rc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rc)

OWNER = {k: f.name for f in REGISTRY.values() for k in f.device_class().kernels}


def row(ms: dict, metcf_kernel="metcf-window", N=128, matrix="m"):
    return {"matrix": matrix, "order": "given", "N": N, "ms": {**ms, "cusparse": 0.001},
            "choice": {"metcf": {"kernel": metcf_kernel, "measured_ms": {"metcf-window": 0.5, "metcf-split": 0.4}},
                       "bcsr": {"kernel": "bcsr-window"}}}


def test_a_won_fallback_is_its_formats_time_and_a_lost_one_a_lower_bound():
    known, lower = rc.measured(row({"metcf": 0.3, "bcsr": 0.6}, metcf_kernel="csr-rows"), OWNER)
    assert known == {"csr": 0.3, "metcf": 0.4, "bcsr": 0.6} and lower == {}  # ME-TCF's own: its fastest kernel
    known, lower = rc.measured(row({"metcf": 0.3, "bcsr": 0.6}), OWNER)
    assert known == {"metcf": 0.3, "bcsr": 0.6} and lower == {"csr": 0.3}  # cuSPARSE is no format


def test_a_rows_verdict():
    stats = structure(sp.random(400, 400, density=0.02, format="csr", random_state=0))
    out = rc.check_row(row({"metcf": 0.3, "bcsr": 0.6}), stats, OWNER, "float16")
    assert out["best"] == "metcf" and set(out["predicted"]) == {"metcf", "bcsr", "csr"}
    assert out["top2"] == ("metcf" in out["predicted"][:2]) and out["top1"] == (out["predicted"][0] == "metcf")
    first = out["predicted"][0]
    assert out["loss"] == pytest.approx({"metcf": 1.0, "bcsr": 2.0, "csr": 1.0}[first])
    assert out["loss_is_lower_bound"] == (first == "csr")


def test_the_dtype_comes_from_each_runs_meta_and_ranks_in_it():
    assert rc.dtype_of({"meta": {}}) == "float16" and rc.dtype_of({"rows": []}) == "float16"  # before --dtype
    assert rc.dtype_of({"meta": {"dtype": "float32"}}) == "float32"
    stats = structure(sp.random(400, 400, density=0.02, format="csr", random_state=0))
    half, single = (rc.check_row(row({"metcf": 0.3, "bcsr": 0.6}), stats, OWNER, d) for d in ("float16", "float32"))
    for out, dtype in ((half, "float16"), (single, "float32")):
        assert out["estimate_us"] == {n: round(REGISTRY[n].estimate(stats, dtype, 128), 3) for n in out["estimate_us"]}
    assert half["estimate_us"] != single["estimate_us"]  # TF32: 16 x 8 blocks, 4-byte B and C


def test_a_fit_over_runs_of_two_dtypes_is_refused_before_any_matrix_is_built(tmp_path, monkeypatch, capsys):
    files = []
    for name, meta in (("formats-gpu-2026-11-25.json", {}), ("formats-gpu-2026-12-01-float32.json",
                                                             {"dtype": "float32"})):
        files.append(tmp_path / name)
        files[-1].write_text(json.dumps({"meta": {"device": "GPU", "matrices": {}, **meta}, "rows": []}))
    monkeypatch.setattr(rc, "matrices", lambda docs: pytest.fail("built matrices for a refused fit"))
    assert rc.main(["--results", *map(str, files), "--fit", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("rank_check: --fit needs runs of one dtype, got float16: formats-gpu-2026-11-25.json; float32: "
                   "formats-gpu-2026-12-01-float32.json; fit each dtype apart")
    assert not list(tmp_path.glob("rank-check-*.json"))
    assert rc.one_dtype([{"meta": {"dtype": "float32"}}, {"meta": {"dtype": "float32"}}]) == "float32"


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_the_fit_recovers_the_constants_its_rows_were_made_with(monkeypatch, dtype):
    """In the runs' dtype: float32 rows fitted on float16 terms would give c_mb 2x (4-byte C read as 2-byte)."""
    true = {"launch": 3.0, "b_mb": 0.2, "c_mb": 1.0}
    model = dataclasses.replace(REGISTRY["bcsr"].estimate, us=true, per_precision={})  # `true` in every dtype
    monkeypatch.setitem(REGISTRY, "bcsr", dataclasses.replace(REGISTRY["bcsr"], estimate=model))
    stats = {f"m{i}": structure(sp.random(200 * (i + 1), 300, density=0.01 * (i + 1), format="csr", random_state=i))
             for i in range(4)}
    rows = [{"matrix": m, "order": "given", "N": N, "ms": {"bcsr": model(s, dtype, N) / 1e3},
             "choice": {"bcsr": {"kernel": "bcsr-window"}}} for m, s in stats.items() for N in (64, 256, 1024)]
    meta = {} if dtype == "float16" else {"dtype": dtype}  # float16: as the files from before formats.py's --dtype
    fitted = rc.fit([{"meta": meta, "rows": rows}], lambda r: stats[r["matrix"]], OWNER)
    assert set(fitted) == {"bcsr"} and fitted["bcsr"]["rows"] == 12
    for term, value in true.items():
        assert fitted["bcsr"]["us"].get(term, 0.0) == pytest.approx(value, rel=1e-3), term
    assert fitted["bcsr"]["ratio"]["median"] == pytest.approx(1.0, abs=1e-3)


def test_orders_are_regenerated_at_the_block_width_their_run_reordered_for(monkeypatch):
    """formats.py reorders for the precision's TC blocks (16 x 8 in TF32) and records the width; rank_check rebuilds
    each run's orders at its width (16 where a run predates the field) and checks them against the run's counts."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import formats

    source = ["gen", "rmat", "scale=10&edge_factor=8"]
    A = formats.build(tuple(source), "float32")[0]
    docs = []
    for dtype in ("float16", "float32"):
        width = formats.order_width(dtype)
        _, info = formats.reorders(A, ["given", "tca"], width)
        assert info["tca"]["applied"], dtype
        docs.append({"path": f"{dtype}.json", "meta": {"dtype": dtype, "order_width": width, "matrices": {
            "m": {"source": source, "orders": info}}}, "rows": []})
    assert [d["meta"]["order_width"] for d in docs] == [16, 8]
    built = rc.matrices(docs)
    assert set(built) == {("m", o, w) for o in ("given", "tca") for w in (16, 8)}
    assert built[("m", "tca", 8)].nnz == built[("m", "tca", 16)].nnz == A.nnz
    del docs[1]["meta"]["order_width"]  # read as 16 x 16: the recorded TF32 counts no longer match
    with pytest.raises(SystemExit, match="m tca: the regenerated order differs from the recorded one"):
        rc.matrices(docs[1:])


def test_leave_one_out_ranks_each_matrix_with_constants_fitted_without_it(monkeypatch):
    """Rows made with known constants for two formats: each matrix's rows, ranked with constants fitted on the other
    matrices alone, come out as the known constants rank them; the registry's estimates are restored after."""
    true = {"bcsr": {"launch": 3.0, "b_mb": 0.2, "c_mb": 1.0}, "metcf": {"launch": 1.0, "b_mb": 0.1, "hub_mb": 30.0}}
    for name, us in true.items():
        model = dataclasses.replace(REGISTRY[name].estimate, us=us, per_precision={})
        monkeypatch.setitem(REGISTRY, name, dataclasses.replace(REGISTRY[name], estimate=model))
    before = {name: REGISTRY[name] for name in true}
    stats = {f"m{i}": structure(sp.random(200 * (i + 1), 300, density=0.01 * (i + 1), format="csr", random_state=i))
             for i in range(5)}
    rows = [{"matrix": m, "order": "given", "N": N,
             "ms": {n: REGISTRY[n].estimate(s, "float16", N) / 1e3 for n in true},
             "choice": {"bcsr": {"kernel": "bcsr-window"}, "metcf": {"kernel": "metcf-window"}}}
            for m, s in stats.items() for N in (64, 256, 1024)]
    docs = [{"meta": {}, "rows": rows}]
    calls = []
    real_fit = rc.fit
    monkeypatch.setattr(rc, "fit", lambda d, *a: calls.append({r["matrix"] for r in d[0]["rows"]}) or real_fit(d, *a))
    out = rc.leave_one_out(docs, lambda r: stats[r["matrix"]], OWNER)
    assert calls == [set(stats) - {m} for m in sorted(stats)]  # each fit without one matrix
    assert out["rows"] == 15 and out["top1"] == 1.0 and out["loss_max"] == pytest.approx(1.0)
    assert all(REGISTRY[name] is before[name] for name in true)
