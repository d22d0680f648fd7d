"""The spmm flow in half precision on the CPU: float16 and bfloat16 end to end, and the float16 range refusal that
leaves nothing of the run behind."""
from __future__ import annotations

import pytest

from configs.errors import InputError
from flows.spmm import spmm_flow
from storage import BlockStore

GEN = "gen:sbm?n=2000&blocks=20&p_in=0.05&p_out=0.0005&seed=4"


@pytest.mark.parametrize("dtype, tol", [("float16", 1e-2), ("bfloat16", 3e-2)])
def test_half_precision_runs_end_to_end(prefect_harness, data_root, dtype, tol):
    out = spmm_flow(matrix=GEN, n_cols_b=16, reorder="tca", dtype=dtype, data_root=str(data_root))
    assert out["convert"]["block_shape"] == [16, 16] and out["convert"]["format_key"].endswith(dtype)
    assert out["spmm"]["dtype"] == dtype and out["spmm"]["tolerance"] == tol
    assert out["spmm"]["rel_err"] <= tol
    meta = BlockStore(data_root).matrix(out["matrix_id"]).perm_meta(out["reorder"]["perm_key"])
    assert meta["params"]["tc_width"] == 16  # the order was chosen for 16 x 16 blocks


def _big_values_mtx(path):
    path.write_text("%%MatrixMarket matrix coordinate real general\n4 4 3\n1 1 1.5\n2 3 -1.0e5\n4 2 2.0\n")
    return path


def test_float16_overflow_is_refused_before_anything_is_reordered(prefect_harness, data_root, tmp_path):
    mtx = _big_values_mtx(tmp_path / "big.mtx")
    with pytest.raises(InputError, match=r"1 values exceed the float16 range \(largest \|x\| = 100000 > 65504\); "
                                         r"use --dtype bfloat16"):
        spmm_flow(matrix=str(mtx), n_cols_b=8, reorder="degree", dtype="float16", data_root=str(data_root))
    matrices = list((data_root / "matrices").iterdir())
    assert len(matrices) == 1  # the parsed CSR is the input cache; no order, format or result of the run
    assert not (matrices[0] / "perm").exists() and not (matrices[0] / "formats").exists()
    out = spmm_flow(matrix=str(mtx), n_cols_b=8, reorder="degree", dtype="float16", allow_overflow=True,
                    data_root=str(data_root))
    assert out["spmm"]["precision_check"]["overflow"] == 1
    out = spmm_flow(matrix=str(mtx), n_cols_b=8, reorder="degree", dtype="bfloat16", data_root=str(data_root))
    assert out["spmm"]["rel_err"] <= 3e-2
    assert BlockStore(data_root).matrix(out["matrix_id"]).has_format("metcf", out["convert"]["format_key"])
