"""The CUDA-core CSR SDDMM's host side (kernels/formats/csr/sddmm.py): the team size per Kd, the launch mapping of
csr_sddmm.cu modelled in NumPy (every nonzero computed by exactly one team, every feature read by exactly one lane
of it)."""
from __future__ import annotations

import numpy as np
import pytest

from kernels.formats.csr import sddmm as cs


@pytest.mark.parametrize(("Kd", "p_name", "team"), [(1, "float16", 1), (8, "float16", 1), (9, "float16", 2),
                                                    (64, "float16", 8), (64, "float32", 16), (256, "bfloat16", 32),
                                                    (300, "float16", 32), (2, "float32", 1), (13, "float32", 4)])
def test_team_size_gives_a_lane_a_16_byte_piece(Kd, p_name, team):
    assert cs.team_size(Kd, p_name) == team


def kernel_mapping(nnz: int, Kd: int, p_name: str, config=cs.CSR_SDDMM_CONFIG):
    """(nonzero -> times computed, (nonzero, feature) -> times read) by the kernel's index arithmetic."""
    T, per = cs.team_size(Kd, p_name), cs.piece_elems(p_name)
    teams = 32 // T
    (blocks,), (threads,) = cs.grid(nnz, T, config)
    assert threads == 32 * config.warps
    computed = np.zeros(nnz, dtype=np.int64)
    read = np.zeros((nnz, Kd), dtype=np.int64)
    for block in range(blocks):
        for warp in range(config.warps):
            p0 = (block * config.warps + warp) * config.steps * teams
            for step in range(config.steps):
                if p0 + step * teams >= nnz:
                    break
                for lane in range(32):
                    team, t = divmod(lane, T)
                    p = p0 + step * teams + team
                    if p >= nnz:
                        continue
                    for k in range(t * per, Kd, T * per):
                        read[p, k:min(Kd, k + per)] += 1
                    computed[p] += t == 0
    return computed, read


@pytest.mark.parametrize(("nnz", "Kd", "p_name"), [(1, 1, "float16"), (37, 64, "float16"), (515, 13, "float32"),
                                                   (100, 300, "bfloat16"), (1000, 2, "float32"), (64, 0, "float16")])
def test_every_nonzero_and_feature_has_one_owner(nnz, Kd, p_name):
    computed, read = kernel_mapping(nnz, Kd, p_name)
    assert (computed == 1).all() and (read == 1).all()

