"""The spmm flow end to end on the CPU: fetched fixtures and generated matrices, stored, reused, reported."""
from pathlib import Path

import numpy as np
import pytest

from flow_cases import run_cli
from flows.spmm import spmm_flow
from storage import BlockStore

GEN = "gen:sbm?n=3000&blocks=40&p_in=0.05&p_out=0.0005&seed=3"


@pytest.mark.parametrize("spec", ["Newman/karate", "LPnetlib/lp_e226", "igb:tiny"])
def test_fixture_matrices_run_end_to_end(prefect_harness, mirror, data_root, spec):
    out = spmm_flow(matrix=spec, n_cols_b=32, reorder="degree", data_root=str(data_root))
    store = BlockStore(data_root).matrix(out["matrix_id"])
    assert store.has_csr()
    assert store.has_format("metcf", out["convert"]["format_key"])
    assert out["spmm"]["rel_err"] < 1e-5
    runs = BlockStore(data_root).read_runs().to_pylist()
    assert {r["stage"] for r in runs if r["run_id"] == out["run_id"]} == {"fetch", "parse", "reorder", "convert",
                                                                          "spmm"}


def test_second_run_reuses_every_stored_stage(prefect_harness, data_root):
    first = spmm_flow(matrix=GEN, n_cols_b=16, reorder="tca", data_root=str(data_root), save_c=True)
    second = spmm_flow(matrix=GEN, n_cols_b=16, reorder="tca", data_root=str(data_root))
    assert not first["ingest"]["reused"] and second["ingest"]["reused"]
    assert second["reorder"]["reused"] and second["convert"]["reused"]
    assert first["reorder"]["perm_key"] == second["reorder"]["perm_key"]
    # C was stored in the original row order: compare with SciPy on the stored CSR and the same seeded B.
    from tasks.execute import dense_b

    store = BlockStore(data_root).matrix(first["matrix_id"])
    A = store.read_csr()
    C = store.read_result(first["spmm"]["result_run_id"])
    ref = A.astype(np.float64) @ dense_b(A.shape[1], 16, 0).astype(np.float64)
    assert np.linalg.norm(C - ref) / np.linalg.norm(ref) < 1e-5


def test_cli_unknown_matrix_is_one_line_error_and_exit_1(mirror, data_root):
    proc = run_cli(["--matrix", "HB/no_such_matrix", "--data-root", str(data_root)],
                {"TCSPMM_SUITESPARSE_URL": mirror.suitesparse_url})
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "no_such_matrix" in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not list(Path(data_root).rglob("matrices/*/csr/*.parquet"))


def test_cli_malformed_local_file(tmp_path, data_root):
    bad = tmp_path / "bad.mtx"
    bad.write_text("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n4 2 2.0\n")
    proc = run_cli(["--matrix", str(bad), "--data-root", str(data_root)], {})
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "bad.mtx" in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "Retry" not in proc.stderr  # bad input fails at once, not after task retries
    assert not list(Path(data_root).rglob("*.parquet"))


@pytest.mark.parametrize("mode", ["oneshot", "resident"])
def test_sharded_run_on_a_cpu_cluster_matches_one_device(prefect_harness, data_root, mode):
    out = spmm_flow(matrix=GEN, n_cols_b=8, reorder="degree", devices="2", mode=mode, data_root=str(data_root))
    assert out["spmm"]["rel_err"] < 1e-5
    assert out["spmm"]["choice"] == {"mode": mode, "n_parts": 2}
    assert len(out["spmm"]["per_device"]) == 2
    from tasks.report import format_table, stage_rows
    devices = [t["gpu"] for t in out["spmm"]["per_device"]]
    assert all(devices)  # each shard names its device, in both modes
    shown = format_table(stage_rows("run", "m", out)).splitlines()[-1]  # the spmm line of the printed report
    assert shown.startswith("spmm") and "devices=" in shown and ("2 x " in shown or devices[0] in shown)


@pytest.mark.parametrize("fmt, mode, dtype, tol", [("tiledcsr", "resident", "float16", 1e-2),
                                                    ("tiledcsr", "oneshot", "float32", 1e-5),
                                                    ("cvse", "oneshot", "bfloat16", 3e-2),
                                                    ("cvse", "resident", "float32", 1e-5),
                                                    ("auto", "oneshot", "float16", 1e-2)])
def test_every_format_runs_sharded_through_the_flow(prefect_harness, data_root, fmt, mode, dtype, tol):
    """``--format tiledcsr|cvse|auto --devices 2`` on the CPU cluster: the stored format's window-range shards, C
    within the precision's contract. ``auto`` over several devices converts, stores and shards the base format
    only (the scale-out was measured on it; the ranking is of the whole matrix); each worker's SpmmPlan then picks
    that format's kernel for its shard."""
    from configs.names import BASE_FORMAT

    out = spmm_flow(matrix=GEN, n_cols_b=8, reorder="degree", fmt=fmt, dtype=dtype, devices="2", mode=mode,
                    data_root=str(data_root), repeats=1)
    assert out["spmm"]["rel_err"] < tol
    if fmt == "auto":
        assert list(out["convert"]["formats"]) == [BASE_FORMAT] and "format_ranking" not in out["convert"]
        assert out["convert"]["format_asked"].startswith("auto: over several devices")
        fmt = BASE_FORMAT
    assert out["spmm"]["sharded"]["format"] == fmt
    assert out["spmm"]["sharded"]["dtype"] == dtype and len(out["spmm"]["per_device"]) == 2


def test_nonfinite_values_refused_or_counted(prefect_harness, data_root, tmp_path):
    """Issue 17 item 3: NaN/Inf refused at parse (nothing stored); with allow_nonfinite the check compares the
    finite entries of C and the report says how many were not."""
    import scipy.io
    import scipy.sparse as sp

    from configs.errors import InputError

    A = sp.random(300, 300, density=0.02, format="coo", random_state=5, dtype=np.float64)
    A.data[[3, 40]] = [np.nan, np.inf]
    path = tmp_path / "nonfinite.mtx"
    scipy.io.mmwrite(str(path), A)
    with pytest.raises(InputError, match="2 values are not finite"):
        spmm_flow(matrix=str(path), n_cols_b=8, reorder="none", devices="cpu", data_root=str(data_root))
    assert not list(Path(data_root).rglob("*.parquet"))
    out = spmm_flow(matrix=str(path), n_cols_b=8, reorder="none", devices="cpu", data_root=str(data_root),
                    allow_nonfinite=True)
    rows_hit = len({int(A.row[3]), int(A.row[40])})
    assert out["ingest"]["nonfinite_entries"] == 2 and out["spmm"]["nonfinite_a"] == 2
    assert out["spmm"]["nonfinite_c"] == rows_hit * 8 and out["spmm"]["rel_err"] < 1e-5
    assert "nonfinite_a=2" in out["table"] and f"nonfinite_c={rows_hit * 8}" in out["table"]
    with pytest.raises(InputError, match="holds 2 values that are not finite"):  # the stored copy, without the option
        spmm_flow(matrix=str(path), n_cols_b=8, reorder="none", devices="cpu", data_root=str(data_root))


def test_auto_sharded_converts_and_shards_only_the_base_format(prefect_harness, data_root):
    """``--format auto --devices 2`` on a power-law matrix whose float32 ranking keeps the hybrid on one device
    (tests/flows/test_cli.py): over several devices the flow converts, stores and shards the base format alone (no
    hybrid split, which runs on one device, no second format no shard would read), and says so."""
    from configs.names import BASE_FORMAT

    out = spmm_flow(matrix="gen:rmat?scale=13&edge_factor=16&seed=1", n_cols_b=8, reorder="none", fmt="auto",
                    devices="2", data_root=str(data_root), repeats=1)
    assert list(out["convert"]["formats"]) == [BASE_FORMAT] and "split" not in out["convert"]
    assert out["convert"]["format_asked"] == f"auto: over several devices a sharded run takes {BASE_FORMAT}"
    assert out["spmm"]["sharded"]["format"] == BASE_FORMAT
    assert out["spmm"]["rel_err"] < 2e-3 and len(out["spmm"]["per_device"]) == 2
