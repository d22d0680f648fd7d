"""kernels.formats.ranking: each registered format's cost estimate (Format.estimate) and the ranking built on them.

The structural cases assert what the calibration data supports (benchmarks/results/formats-nvidia-h200-2026-11-29-s35
.json, FP16, H200; benchmarks/rank_check.py): CVSE then BCSR measured fastest where every 16 x 16 block holds
entries (dlmc-4096 at 50 %, N = 256-512), CVSE where a DNN layer is pruned in V = 8 vectors to 80 % (N = 256), the
CUDA-core CSR kernel on power-law graphs at N = 128, as given and row-reordered, and Tiled-CSR last on dense
layers."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from kernels.formats import REGISTRY
from kernels.formats.ranking import (TERMS, CostModel, check_candidates, pick, rank, select, within_margin,
                                     work_terms)
from kernels.formats.structure import structure
from kernels.precision import precision as as_precision
from tasks.fetch.generators import generate


def order(A, N, precision="float16") -> list[str]:
    return [f.name for f, _ in rank(list(REGISTRY.values()), structure(A), precision, N)]


@pytest.mark.parametrize("precision", ["float32", "float16", "bfloat16"])
def test_every_format_estimates_a_positive_time_growing_with_n(precision):
    stats = structure(sp.random(300, 200, density=0.05, format="csr", random_state=0))
    for fmt in REGISTRY.values():
        assert fmt.estimate is not None, fmt.name
        times = [fmt.estimate(stats, precision, N) for N in (32, 128, 512)]
        assert all(math.isfinite(t) and t > 0 for t in times) and times == sorted(times), (fmt.name, times)
        assert set(fmt.estimate.terms(stats, as_precision(precision), 128)) <= set(TERMS)


def test_cost_model_sums_its_terms_and_refuses_unknown_ones():
    stats = structure(sp.eye(64, format="csr"))
    model = CostModel(lambda s, p, N: work_terms(s, p, N, a_bytes=1e6, b_rows=10.0, hub_rows=1.0),
                      {"launch": 2.0, "a_mb": 3.0})
    assert model(stats, "float32", 128) == pytest.approx(2.0 + 3.0)  # b_mb etc. weigh nothing here
    with pytest.raises(ValueError, match=r"cost terms \['bogus_mb'\] are not among launch, a_mb"):
        CostModel(model.terms, {"bogus_mb": 1.0})


def test_cost_model_weighs_each_precision_with_its_own_constants():
    stats = structure(sp.eye(64, format="csr"))
    terms = lambda s, p, N: {"launch": 1.0, "a_mb": 1.0}  # noqa: E731
    model = CostModel(terms, {"launch": 2.0, "a_mb": 3.0}, per_precision={"float32": {"launch": 7.0}})
    assert model(stats, "float32", 128) == 7.0 and model.constants("float32") == {"launch": 7.0}
    assert model(stats, "float16", 128) == model(stats, "bfloat16", 128) == 5.0  # no set of their own
    with pytest.raises(ValueError, match=r"cost terms \['bogus_mb'\] are not among"):
        CostModel(terms, {}, per_precision={"float32": {"bogus_mb": 1.0}})
    with pytest.raises(ValueError, match=r"cost constants for \['tf32'\]: not a precision"):
        CostModel(terms, {}, per_precision={"tf32": {}})
    for fmt in REGISTRY.values():  # every registered estimate carries TF32 constants fitted in float32
        if fmt.estimate is not None:
            assert set(fmt.estimate.constants("float32")) <= set(TERMS) and \
                fmt.estimate.constants("float32") is not fmt.estimate.us, fmt.name


def test_formats_without_an_estimate_rank_last_in_their_order():
    import dataclasses

    stats = structure(sp.random(64, 64, density=0.1, format="csr", random_state=1))
    plain = [dataclasses.replace(REGISTRY[n], estimate=None) for n in ("bcsr", "tiledcsr")]
    ranked = rank([plain[0], REGISTRY["cvse"], plain[1], REGISTRY["metcf"]], stats, "float16", 128)
    assert [f.name for f, _ in ranked][2:] == ["bcsr", "tiledcsr"] and [us for _, us in ranked][2:] == [None, None]
    assert ranked[0][1] <= ranked[1][1]


def test_a_format_another_times_as_its_fallback_takes_no_slot():
    csr, metcf, tiled, cvse = (REGISTRY[n] for n in ("csr", "metcf", "tiledcsr", "cvse"))
    assert "csr-rows" in metcf.fallbacks
    assert pick([csr, metcf, tiled, cvse], 2) == ([metcf, tiled], [csr])  # ME-TCF times the CSR kernel anyway
    assert pick([metcf, csr, cvse], 2) == ([metcf, cvse], [csr])
    assert pick([csr, cvse, metcf], 2) == ([csr, cvse], [])  # built in order until two are not covered
    assert pick([cvse, tiled], 5) == ([cvse, tiled], [])


def test_select_computes_statistics_once_or_not_at_all():
    A = sp.random(500, 400, density=0.02, format="csr", random_state=2)
    formats = list(REGISTRY.values())
    kept, record = select(A, formats, "float16", 2)
    assert record["ranked"] and record["built"] == [f.name for f in kept] and len(kept) == 2
    assert list(record["estimate_us"]) == order(A, 128)  # cheapest first, every candidate's estimate
    assert record["statistics_s"] > 0 and record["structure"]["nnz"] == A.nnz
    kept, record = select(A, formats, "float16", len(formats))
    assert kept == formats and not record["ranked"] and "statistics_s" not in record
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="auto_candidates is .*, expected a positive number of formats"):
            check_candidates(bad)


def test_cvse_then_bcsr_where_every_block_holds_entries():
    # a half-pruned layer, as measured (V = 1, 50 %, 4096 x 4096): CVSE 0.0414 / 0.0822 ms, BCSR 0.0742 / 0.1482,
    # ME-TCF 0.0979 / 0.1927 at N = 256 / 512 (CVSE's tiled kernel reuses B's rows in shared memory)
    A = sp.csr_array(generate("dlmc", "rows=4096&cols=4096&sparsity=0.5&vector=1&seed=1"))
    for N in (256, 512):
        assert order(A, N)[:3] == ["cvse", "bcsr", "metcf"]
    assert order(sp.csr_array(np.ones((1024, 2048), dtype=np.float32)), 128)[0] == "bcsr"  # dense


# measured: benchmarks/results/formats-nvidia-h200-2026-11-29-s35.json (FP16, H200), the run the FP16 constants are
# fitted on
def test_cvse_first_on_a_layer_pruned_in_v8_vectors():
    A = sp.csr_array(generate("dlmc", "rows=2048&cols=2048&sparsity=0.8&vector=8&seed=1"))
    assert order(A, 256)[:2] == ["cvse", "metcf"]  # measured 0.0273 vs 0.0345 ms (4096 x 4096, N = 256)
    assert order(A, 256, "bfloat16")[0] == "cvse"


def test_cuda_core_csr_on_power_law_graphs_and_tiled_csr_last_on_dense_layers():
    from tasks.reorder import reorder

    A = sp.csr_array(generate("rmat", "scale=15&edge_factor=16&seed=1"))
    # given order: the CSR kernel, then ME-TCF (R-MAT scale 16, N = 128: 0.042 ms, Tiled-CSR 0.121, CVSE 0.177)
    assert order(A, 128)[:2] == ["csr", "metcf"]
    shuffled = A[reorder(A, "rowshuffle", slot_rows=16, k_cols=16)]  # hub rows gathered: TC blocks sparser
    assert order(shuffled, 128)[0] == "csr"
    assert "bcsr" == order(shuffled, 128)[-1]  # 16 x 16 blocks of a graph are nearly empty (0.539 ms)
    dense_layer = sp.csr_array(generate("dlmc", "rows=1024&cols=1024&sparsity=0.7&vector=4&seed=1"))
    # 4096 x 4096, V = 4, 70 %, N = 128: Tiled-CSR 0.133 ms, BCSR 0.040, ME-TCF 0.036, CVSE 0.030
    assert order(dense_layer, 128)[-1] == "tiledcsr"


def test_within_margin_keeps_the_predictions_near_the_cheapest():
    a, b, c, d = (REGISTRY[n] for n in ("metcf", "cvse", "tiledcsr", "bcsr"))
    assert within_margin([(a, 10.0), (b, 19.0), (c, 21.0), (d, None)], 2.0) == ([a, b], [c, d])
    assert within_margin([(a, 10.0), (b, 19.0), (c, 21.0)], 2.0, keep=c) == ([a, b, c], [])
    assert within_margin([(a, None), (b, None)], 2.0) == ([a, b], [])  # nothing to judge by: all inside
