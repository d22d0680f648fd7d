"""The hybrid through the stages, without Prefect: the convert stage stores its split (not a converted copy) and
reuses it, ``auto`` stores the hybrid's split beside the other format it ranks first, the SpMM stage rebuilds the
stored split and checks C against float64, and several devices are refused in one line."""
from __future__ import annotations

import numpy as np
import pytest

from configs.errors import InputError
from storage import BlockStore
from storage.splits import read_split
from tasks import stages
from tasks.execute import check_format_devices, run_spmm
from tests.kernels.hybrid import hybrid_cases

POWER_LAW = "gen:rmat?scale=13&edge_factor=16&seed=1"  # natural R-MAT order: hub windows among sparse ones
DENSE_CORE = hybrid_cases.DENSE_CORE_SPEC  # R-MAT with a planted dense community: the cost model splits it


def ingested(data_root, spec=POWER_LAW):
    out = stages.ingest(spec, str(data_root))
    order = stages.reorder(out["matrix_id"], "none", str(data_root))
    return out["matrix_id"], order["perm_key"]


def test_convert_stores_the_split_and_reuses_it(data_root):
    from kernels.hybrid.parts import split_matrix

    matrix_id, perm_key = ingested(data_root, DENSE_CORE)
    conv = stages.convert(matrix_id, perm_key, str(data_root), fmt="hybrid")
    assert conv["format"] == "hybrid" and list(conv["formats"]) == ["hybrid"] and not conv["reused"]
    mstore = BlockStore(data_root).matrix(matrix_id)
    A = stages.reordered_csr(mstore, perm_key)
    H = split_matrix(A, "float32")
    labels, meta = read_split(mstore, "hybrid", conv["format_key"])
    np.testing.assert_array_equal(labels.astype(bool), H.split.tc)
    split = conv["split"]
    assert split["composite"] == "hybrid" and split["tc_format"] == H.split.tc_format == meta["tc_format"]
    assert 0 < split["tc_rows"] < A.shape[0] and split["tc_rows"] + split["cuda_rows"] == A.shape[0]
    assert split["tc_nnz"] + split["cuda_nnz"] == A.nnz and split["windows"] == -(-A.shape[0] // 16)
    assert not list((mstore.folder / "formats").glob("metcf*"))  # the TC part is converted by its operator
    again = stages.convert(matrix_id, perm_key, str(data_root), fmt="hybrid")
    assert again["reused"] and again["split"] == split


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_spmm_rebuilds_the_stored_split(data_root, dtype):
    matrix_id, perm_key = ingested(data_root)
    conv = stages.convert(matrix_id, perm_key, str(data_root), fmt="hybrid", dtype=dtype)
    out = run_spmm(matrix_id, perm_key, conv["format_key"], str(data_root), n_cols_b=8, dtype=dtype, devices="cpu",
                   fmt="hybrid", repeats=1)
    assert out["choice"]["format"] == "hybrid" and out["rel_err"] <= out["tolerance"]
    assert {k: v for k, v in out["split"].items() if k != "split_s"} == \
        {k: v for k, v in conv["split"].items() if k != "split_s"}


def test_spmm_refuses_a_split_stored_for_another_matrix(data_root):
    """A split whose window count no longer fits the reordered matrix (written by hand here) is refused, naming
    the fix."""
    from storage.splits import write_split

    matrix_id, perm_key = ingested(data_root)
    conv = stages.convert(matrix_id, perm_key, str(data_root), fmt="hybrid")
    mstore = BlockStore(data_root).matrix(matrix_id)
    labels, meta = read_split(mstore, "hybrid", conv["format_key"])
    write_split(mstore, "hybrid", conv["format_key"], labels[:-3], {**meta, "n_windows": labels.size - 3})
    with pytest.raises(InputError, match="expected 512 flags of 0 or 1 for 8192 rows; convert the matrix again"):
        run_spmm(matrix_id, perm_key, conv["format_key"], str(data_root), n_cols_b=4, devices="cpu", fmt="hybrid",
                 repeats=1)


def test_auto_stores_the_hybrid_it_ranks_first(data_root):
    """On a power-law graph with a dense core the float32 ranking puts the hybrid first of the two it builds: the
    convert stage stores its split and the other format's blocks, the report carries both."""
    matrix_id, perm_key = ingested(data_root, DENSE_CORE)
    conv = stages.convert(matrix_id, perm_key, str(data_root), fmt="auto")
    ranking = conv["format_ranking"]
    assert "hybrid" in ranking["built"] and len(ranking["built"]) == 2
    assert list(conv["formats"]) == ranking["built"] and ranking["estimate_us"]["hybrid"] is not None
    other = next(n for n in ranking["built"] if n != "hybrid")
    mstore = BlockStore(data_root).matrix(matrix_id)
    assert mstore.has_format(other, conv["format_key"]) and conv["split"]["composite"] == "hybrid"
    out = run_spmm(matrix_id, perm_key, conv["format_key"], str(data_root), n_cols_b=8, devices="cpu", fmt="auto",
                   repeats=1, stored_formats=list(conv["formats"]))
    assert out["rel_err"] <= out["tolerance"]
    assert stages.convert(matrix_id, perm_key, str(data_root), fmt="auto")["reused"]


def test_several_devices_are_refused_in_one_line(data_root):
    message = ("--format hybrid --devices 2: the hybrid runs on one device: its split is chosen from the whole "
               "matrix's windows and it has no row-window shards; run it with --devices auto, cpu or 1, or shard a "
               "registered format")
    for devices in ("2", 2, "all"):
        with pytest.raises(InputError) as err:
            check_format_devices("hybrid", devices)
        assert str(err.value) == message.replace("--devices 2", f"--devices {devices}")
    for fmt, devices in (("hybrid", "auto"), ("hybrid", "cpu"), ("hybrid", 1), ("metcf", 2), ("auto", "all")):
        check_format_devices(fmt, devices)
    matrix_id, perm_key = ingested(data_root)
    conv = stages.convert(matrix_id, perm_key, str(data_root), fmt="hybrid")
    with pytest.raises(InputError, match="--format hybrid --devices 2: the hybrid runs on one device"):
        run_spmm(matrix_id, perm_key, conv["format_key"], str(data_root), devices=2, fmt="hybrid",
                 scheduler="tcp://127.0.0.1:1")


def test_auto_sharded_skips_the_hybrid(data_root):
    """A sharded auto run takes the first registered format the ranking kept: never the hybrid; with only the
    hybrid stored it is refused in one line."""
    matrix_id, perm_key = ingested(data_root)
    conv = stages.convert(matrix_id, perm_key, str(data_root), fmt="auto")
    with pytest.raises(InputError, match="the ranking kept only hybrid, which runs on one device; pass a registered"):
        run_spmm(matrix_id, perm_key, conv["format_key"], str(data_root), devices=2, fmt="auto",
                 scheduler="tcp://127.0.0.1:1", stored_formats=["hybrid"])
