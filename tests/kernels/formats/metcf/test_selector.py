"""Selector on the CPU: list-scheduling makespan, balance on skewed windows only, cuSPARSE on tiny TC blocks."""
from __future__ import annotations

import heapq
import struct
from unittest import mock

import numpy as np
import pytest

from kernels.formats.metcf import selector
from kernels.formats.metcf.selector import (EXACT_SCHEDULE_MAX_JOBS, Calibration, DeviceModel, choose,
                                            list_schedule_makespan, predict)

H100_LIKE = DeviceModel(name="test-gpu", sm_count=132, blocks_per_sm_plain=9, blocks_per_sm_balanced=7,
                        copy_gbs=2900.0)
CAL = Calibration()


def rwo_from_blocks(blocks):
    return np.concatenate([[0], np.cumsum(blocks)]).astype(np.int64)


def test_list_schedule_small_case():
    # 2 slots, jobs 3 3 2 2 2 in order: slot A 3,2,2 (ends 7), slot B 3,2 (ends 5)
    assert list_schedule_makespan([3, 3, 2, 2, 2], 2) == 7
    assert list_schedule_makespan([], 4) == 0.0
    assert list_schedule_makespan([5, 1], 8) == 5


def test_merged_schedule_close_to_exact():
    costs = np.random.default_rng(0).pareto(1.5, 400_000) + 1
    exact = list_schedule_makespan(costs, 1188, exact=True)
    merged = list_schedule_makespan(costs, 1188, exact=False)
    assert abs(merged - exact) / exact < 0.01


def heapq_makespan(costs, n_slots) -> float:
    """The heapq list schedule `_heap_makespan` was compiled from."""
    free = [0.0] * n_slots
    heapq.heapify(free)
    for c in costs.tolist():
        heapq.heapreplace(free, free[0] + c)
    return max(free)


def makespan_reference(costs, slots, exact=None) -> float:
    """list_schedule_makespan with the heapq schedule it ran before it was compiled: the oracle, bit for bit."""
    with mock.patch.object(selector, "_heap_makespan", heapq_makespan):
        return list_schedule_makespan(costs, slots, exact=exact)


def same_bits(a: float, b: float) -> bool:
    return type(a) is type(b) is float and struct.pack("<d", a) == struct.pack("<d", b)


@pytest.mark.parametrize("slots", [1, 2, 3, 7, 64, 1188, 5000, np.int64(2) ** 40, 0, -3])
@pytest.mark.parametrize("exact", [None, True, False])
def test_compiled_schedule_is_the_heapq_schedule_bit_for_bit(slots, exact):
    rng = np.random.default_rng(int(slots) % 1000)
    cases = [
        rng.random(2000) * 7,  # distinct costs
        1.0 + 2.0 * rng.poisson(3, 3000),  # integer-valued costs: many equal free times
        rng.pareto(1.5, 1000) + 1,  # a few hub jobs
        np.full(777, 0.1),  # every slot ties every time; sums that round
        rng.integers(0, 50, 500, dtype=np.int64),  # int64 costs
        [2.5], [0, 0, 0], [3, 3, 2, 2, 2],  # one job, zero costs, the small case
        rng.standard_normal(300),  # negative costs too
        np.arange(4000, dtype=np.float64)[::3],  # a strided view
    ]
    for costs in cases:
        assert same_bits(list_schedule_makespan(costs, slots, exact=exact), makespan_reference(costs, slots, exact))


@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf])
def test_compiled_schedule_keeps_heapq_comparisons_on_nan_and_inf(special):
    """NaN compares false both ways, so the result depends on the order of comparisons, which the kernel keeps."""
    rng = np.random.default_rng(7)
    for slots in (1, 2, 5, 33):
        for where in ([0], [5], [99], [3, 40], [98, 99]):
            costs = rng.random(100)
            costs[where] = special
            assert same_bits(list_schedule_makespan(costs, slots), makespan_reference(costs, slots))
            if special == np.inf:  # inf - inf = NaN on the way
                costs[where[0]] = -np.inf
                assert same_bits(list_schedule_makespan(costs, slots), makespan_reference(costs, slots))


def test_compiled_schedule_merges_runs_past_the_exact_limit_as_before():
    costs = np.random.default_rng(3).pareto(1.5, EXACT_SCHEDULE_MAX_JOBS * 2 + 17) + 1  # g = 3, a short last run
    for slots in (1188, 3):
        assert same_bits(list_schedule_makespan(costs, slots), makespan_reference(costs, slots))
    assert same_bits(list_schedule_makespan(costs, 1188, exact=True), makespan_reference(costs, 1188, True))
    assert same_bits(list_schedule_makespan([], 5, exact=False), 0.0)


def test_balance_chosen_on_skewed_not_on_uniform():
    rng = np.random.default_rng(1)
    uniform = np.full(200_000, 6)
    pred_u = predict(rwo_from_blocks(uniform), int(uniform.sum()) * 40, (16 * uniform.size, 10**6), 128,
                     H100_LIKE, CAL)
    assert pred_u["approximation_ratio"] < 1.05
    assert choose(pred_u, CAL)["kernel"] == "metcf-window"
    skewed = rng.poisson(2, 20_000)
    skewed[::2000] = 20_000  # a few hub windows, each far longer than the balanced makespan
    pred_s = predict(rwo_from_blocks(skewed), int(skewed.sum()) * 40, (16 * skewed.size, 10**6), 128,
                     H100_LIKE, CAL)
    assert pred_s["approximation_ratio"] > 5
    assert pred_s["balanced_ms"] < pred_s["plain_ms"]
    assert choose(pred_s, CAL)["kernel"] == "metcf-balanced"


def test_cusparse_chosen_when_tc_blocks_nearly_empty():
    blocks = np.full(100_000, 8)
    rwo = rwo_from_blocks(blocks)
    sparse_tc = predict(rwo, int(1.2 * blocks.sum()), (16 * blocks.size, 10**6), 128, H100_LIKE, CAL)
    assert choose(sparse_tc, CAL)["kernel"] == "cusparse"
    dense_tc = predict(rwo, int(60 * blocks.sum()), (16 * blocks.size, 10**6), 128, H100_LIKE, CAL)
    assert choose(dense_tc, CAL)["kernel"] == "metcf-window"
    assert choose(sparse_tc, CAL, allow_cusparse=False)["kernel"] == "metcf-window"


def test_forced_balance_and_reason_text():
    pred = predict(rwo_from_blocks(np.full(1000, 4)), 4000 * 60, (16000, 5000), 64, H100_LIKE, CAL)
    choice = choose(pred, CAL, balance=True, allow_cusparse=False)
    assert choice["kernel"] == "metcf-balanced" and "forced" in choice["reason"]
    assert choice["predicted_ms"] == pytest.approx(pred["balanced_ms"])


def test_calibration_file_loaded(tmp_path):
    import json

    (tmp_path / "calibration-test-gpu.json").write_text(json.dumps({"calibration": {"block_us": 0.5,
                                                                                    "balance_threshold": 1.5}}))
    cal = Calibration.load("Test GPU", tmp_path)
    assert cal.block_us == 0.5 and cal.balance_threshold == 1.5 and cal.source == "calibration-test-gpu.json"
    assert Calibration.load("other", tmp_path).source == "defaults"


def test_one_window_past_blocks_per_item_does_not_make_a_small_matrix_look_imbalanced():
    """125 windows of 20 blocks, one of 32 or 33 (blocks_per_item = 32): the schedule barely changes, nor may AR."""
    from kernels.formats.metcf.config import CONFIG

    ars = []
    for hub in (CONFIG.blocks_per_item, CONFIG.blocks_per_item + 1):
        blocks = np.full(125, 20)
        blocks[7] = hub
        pred = predict(rwo_from_blocks(blocks), int(blocks.sum()) * 30, (16 * blocks.size, 5000), 128, H100_LIKE, CAL)
        ars.append(pred["approximation_ratio"])
    assert abs(ars[1] - ars[0]) < 0.1 and ars[1] < CAL.balance_threshold


def test_split_chosen_for_few_windows_not_for_many():
    """The split-K kernel wins when the windows leave most warp slots idle (a small matrix, or one hub window
    beside few others) and loses its tree overhead on a large uniform matrix."""
    dev = DeviceModel(name="test-gpu", sm_count=132, blocks_per_sm_plain=9, blocks_per_sm_balanced=7,
                      copy_gbs=2900.0, split_blocks_per_sm=(((2, 2), 4), ((2, 4), 2), ((2, 8), 1)))
    small = predict(rwo_from_blocks(np.full(100, 40)), 100 * 40 * 20, (1600, 5000), 128, dev, CAL)
    assert small["split_ksplit"] == 8 and small["split_ms"] < small["plain_ms"]
    assert choose(small, CAL, allow_cusparse=False)["kernel"] == "metcf-split"
    assert "split-K (ksplit 8)" in choose(small, CAL, allow_cusparse=False)["reason"]
    big = predict(rwo_from_blocks(np.full(200_000, 6)), 200_000 * 6 * 20, (3_200_000, 10**6), 128, dev, CAL)
    assert big["split_ms"] > big["plain_ms"]
    assert choose(big, CAL, allow_cusparse=False)["kernel"] == "metcf-window"
    # forced balance modes never pick it; a device model without split shapes predicts none
    assert choose(small, CAL, balance=False, allow_cusparse=False)["kernel"] == "metcf-window"
    none = predict(rwo_from_blocks(np.full(100, 40)), 100 * 40 * 20, (1600, 5000), 128, H100_LIKE, CAL)
    assert none["split_ksplit"] == 0 and none["split_ms"] == float("inf")


def test_autotune_policy():
    """SpmmPlan's "auto" times the candidates for large matrices, close predictions and hub windows only."""
    from kernels.formats.metcf.plugin import AUTOTUNE_MIN_NNZ, wants_autotune

    far = {"plain_ms": 0.01, "balanced_ms": 0.02, "split_ms": float("inf"), "cusparse_ms": 0.05,
           "approximation_ratio": 1.0}
    assert not wants_autotune("auto", 1000, far, 1.4)
    assert wants_autotune("auto", AUTOTUNE_MIN_NNZ, far, 1.4)
    assert wants_autotune("auto", 1000, {**far, "approximation_ratio": 4.7}, 1.4)  # hubs: the model extrapolates
    assert not wants_autotune("auto", 1000, {**far, "approximation_ratio": 4.7})  # no threshold known
    assert wants_autotune("auto", 1000, {**far, "cusparse_ms": 0.012}, 1.4)  # within AUTOTUNE_MARGIN
    split_close = {**far, "plain_ms": 1.0, "balanced_ms": 1.0, "split_ms": 0.04}
    assert wants_autotune("auto", 1000, split_close, 1.4)  # the split kernel counts as a TC prediction
    assert wants_autotune(True, 10, far) and not wants_autotune(False, 10**9, far)


def test_slots_follow_the_launched_block_width():
    """At N = 128 the window kernel launches 2-warp blocks: their residency, not the 4-warp one, sets the slots."""
    dev = DeviceModel(name="test-gpu", sm_count=132, blocks_per_sm_plain=5, blocks_per_sm_balanced=3,
                      copy_gbs=2900.0, window_blocks_per_sm=((1, 20), (2, 10), (3, 6), (4, 5)),
                      balanced_blocks_per_sm=((2, 7), (4, 3)))
    rwo = rwo_from_blocks(np.full(5000, 6))
    assert predict(rwo, 5000 * 6 * 20, (80_000, 10**5), 128, dev, CAL)["plain_slots"] == 132 * 10
    assert predict(rwo, 5000 * 6 * 20, (80_000, 10**5), 512, dev, CAL)["plain_slots"] == 132 * 5
    assert predict(rwo, 5000 * 6 * 20, (80_000, 10**5), 128, H100_LIKE, CAL)["plain_slots"] == 132 * 9  # fallback


def test_block_shape_the_launcher_and_the_model_share():
    """KernelConfig.slices / chunks: warps per window and gridDim.y, as kernels/launch.py launches them."""
    from kernels.formats.metcf.config import CONFIG, KernelConfig

    assert (CONFIG.slices(1), CONFIG.chunks(1)) == (1, 1)
    assert (CONFIG.slices(128), CONFIG.chunks(128)) == (2, 1)  # 64 columns per warp
    assert (CONFIG.slices(512), CONFIG.chunks(512)) == (4, 2)  # at most max_warps = 4 warps per block
    two = KernelConfig(windows_per_block=2)
    assert (two.slices(512, 2), two.chunks(512, 2)) == (2, 4)
    from kernels.formats.metcf.launch import ksplits, max_ksplit

    assert ksplits(32) == [2, 4, 8, 16] and ksplits(128) == [2, 4, 8] and ksplits(512) == [2, 4]  # 16 warps max
    assert ksplits(128, KernelConfig(split_max_warps=2)) == [] and max_ksplit(128, KernelConfig(split_max_warps=2)) == 1
