"""Halo-aware choice of the row order for P > 1 shards (issue 19 item 3): the CSR estimate equals the plan's own
halo, and on a community graph with shuffled ids the community order wins over the shuffled one and RCM."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from kernels.formats.metcf.container import csr_to_metcf
from tasks.distribute import make_plan
from tasks.distribute.halo_order import choose_order, halo_estimate
from tasks.reorder import reorder


def sbm(n=1600, blocks=20, seed=0):
    """Directed SBM, 80-node communities, ~10 neighbours inside and ~1 outside per row, ids shuffled."""
    rng = np.random.default_rng(seed)
    size = n // blocks
    r = rng.integers(0, n, n * 10)
    c = (r // size) * size + rng.integers(0, size, r.shape[0])
    r2, c2 = rng.integers(0, n, n), rng.integers(0, n, n)
    A = sp.csr_array((np.ones(r.shape[0] + n, np.float32), (np.r_[r, r2], np.r_[c, c2])), shape=(n, n))
    A.sum_duplicates()
    shuffle = rng.permutation(n)
    return sp.csr_array(A[shuffle][:, shuffle]), np.argsort(shuffle)  # ids shuffled; the community order


def test_estimate_equals_the_plans_remote_halo():
    A, _ = sbm(n=500, blocks=5, seed=1)
    perm = np.random.default_rng(2).permutation(500)
    for P in (2, 3):
        est = halo_estimate(A, perm, P)
        plan = make_plan(csr_to_metcf(A[perm]), P, perm=perm)
        assert est["partptr"] == plan.partptr.tolist()
        assert est["tc_blocks"] == plan.n_blocks.tolist()
        assert est["remote_halo_rows"] == [int(plan.remote_mask(k).sum()) for k in range(P)]


def test_community_order_is_chosen_for_two_devices():
    A, natural = sbm()
    perms = {"none": None, "community": natural, "rcm": reorder(A, "rcm")}
    chosen, report = choose_order(A, perms, 2, 256, itemsize=2)
    assert chosen == "community", report["reason"]
    halo = {m: max(r["halo_bytes"]) for m, r in report["orders"].items()}
    assert halo["community"] * 2 < halo["none"]  # the shuffled ids: every community split over both shards
    assert all(b == r * 256 * 2 for m in report["orders"] for b, r in
               zip(report["orders"][m]["halo_bytes"], report["orders"][m]["remote_halo_rows"]))
    # a slack of 1.0 keeps only the order with the fewest blocks per shard, whatever its halo
    fewest = min(report["orders"], key=lambda m: max(report["orders"][m]["tc_blocks"]))
    assert choose_order(A, perms, 2, 256, block_slack=1.0)[0] == fewest


def test_reorder_auto_over_devices_weighs_the_halo(tmp_path):
    """`--reorder auto` with several devices: the stored order is the halo choice among auto's fewest-blocks order,
    community and RCM (per-order estimates in the report), keyed by the shard count; one device keeps auto's."""
    from storage import BlockStore
    from tasks import stages
    A, _ = sbm(n=1600, blocks=20, seed=3)
    root = str(tmp_path)
    BlockStore(root).matrix("sbm").write_csr(A, {"source": "test"})
    one = stages.reorder("sbm", "auto", root, devices=1)
    two = stages.reorder("sbm", "auto", root, devices=2, n_cols_b=64)
    assert "halo" not in one and one["perm_key"] != two["perm_key"]
    orders = two["halo"]["orders"]
    assert {"none", "community", "rcm"} <= set(orders) and two["applied"] == two["halo"]["chosen"]
    chosen_halo = max(orders[two["applied"]]["halo_bytes"])
    assert chosen_halo == min(max(o["halo_bytes"]) for name, o in orders.items()
                              if max(o["tc_blocks"]) <= 1.10 * min(max(r["tc_blocks"]) for r in orders.values()))
    assert chosen_halo < max(orders["none"]["halo_bytes"])  # shuffled ids: a community-keeping order wins
    assert max(orders["none"]["halo_bytes"]) == max(orders["none"]["remote_halo_rows"]) * 64 * 4
    again = stages.reorder("sbm", "auto", root, devices=2)
    assert again["reused"] and again["perm_key"] == two["perm_key"]
