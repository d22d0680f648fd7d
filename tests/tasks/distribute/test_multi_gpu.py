"""Two GPUs through dask-cuda: one-shot and resident SpMM equal the single-GPU SpmmPlan within TF32 tolerance."""
from __future__ import annotations

import numpy as np
import pytest

from tasks.distribute.cluster import count_gpus, has_dask_cuda

pytestmark = [
    pytest.mark.multi_gpu,
    pytest.mark.usefixtures("cluster_watch"),
    pytest.mark.skipif(not (count_gpus() >= 2 and has_dask_cuda()), reason="needs 2 GPUs and dask-cuda"),
]

# TF32 keeps 10 mantissa bits: each product is off by ~5e-4 relative; sums of ~30 terms stay near 1e-3 of the
# norm. Two GPUs run the same kernels on different shard splits, so they agree to that level.
TF32_RTOL = 2e-3


@pytest.fixture(scope="module")
def client():
    from tasks.distribute import cluster_client
    with cluster_client(n_workers=2) as c:
        yield c


@pytest.fixture(scope="module")
def case():
    from kernels.formats.metcf.synth import metcf_from_keys
    from tasks.distribute.synth import relabel, sbm_keys
    keys, shape = sbm_keys(np, 50_000, 20, 15.0, 1.0, seed=4)
    perm = np.random.default_rng(5).permutation(shape[0])
    A_keys = relabel(np, keys, shape, perm)  # node v -> label perm[v]; perm reorders rows back to communities
    inv = np.empty_like(perm)
    inv[perm] = np.arange(shape[0])
    rows, cols = np.divmod(A_keys, shape[1])
    M = metcf_from_keys(np, np.sort(inv[rows] * shape[1] + cols), shape, seed=6)  # rows of A[perm]
    B = np.random.default_rng(7).standard_normal((shape[1], 64)).astype(np.float32)
    return M, perm, B


def single_gpu(M, perm, B):
    """C of the whole (reordered) matrix on GPU 0 of this process, back in the original row order."""
    from kernels.spmm import SpmmPlan
    C = np.empty((M.shape[0], B.shape[1]), dtype=np.float32)
    C[perm] = SpmmPlan(M, device="gpu").run(B)
    return C


def rel(C, ref):
    return float(np.linalg.norm((C - ref).astype(np.float64)) / np.linalg.norm(ref.astype(np.float64)))


def test_workers_see_one_gpu_each(client):
    from tasks.distribute.device import device_name
    names = client.run(lambda: device_name(True))
    assert len(names) == 2 and all("cpu:" not in n for n in names.values())


def test_oneshot_two_gpus_equals_single_gpu(client, case):
    from tasks.distribute import make_plan, run_oneshot
    M, perm, B = case
    plan = make_plan(M, 2, perm=perm)
    C, timings = run_oneshot(plan, B, client, M=M, repeats=3)
    assert len({t["worker"] for t in timings}) == 2 and all(t["gpu"] != "cpu" for t in timings)
    assert rel(C, single_gpu(M, perm, B)) < TF32_RTOL


def test_resident_two_gpus_three_iterations(client, case):
    from tasks.distribute import DistributedSpmm, make_plan
    M, perm, B = case
    plan = make_plan(M, 2, perm=perm)
    ds = DistributedSpmm(plan, client, M=M)
    try:
        ds.scatter(B)
        parts = ds.run()
        ref = single_gpu(M, perm, B)
        assert rel(parts.gather(), ref) < TF32_RTOL
        for _ in range(2):
            parts = ds.step()
            ref = single_gpu(M, perm, ref)
        assert rel(parts.gather(), ref) < 3 * TF32_RTOL  # three TF32 products compound
        shards = ds.history[-1]["shards"]
        assert all(s["halo_bytes_recv"] > 0 for s in shards)
        print("transport:", ds.transport, ds.transport_reason)
    finally:
        ds.close()


def test_resident_exchanges_through_nccl(client, case):
    """With CuPy's NCCL present, the halo exchange must use it (device buffers, no host copies)."""
    try:
        from cupy.cuda import nccl
        nccl.get_unique_id()
    except Exception as err:  # CuPy without NCCL, or libnccl.so.2 not found
        pytest.skip(f"needs CuPy with NCCL: {type(err).__name__}: {err}")
    from tasks.distribute import DistributedSpmm, make_plan
    M, perm, B = case
    plan = make_plan(M, 2, perm=perm)
    ds = DistributedSpmm(plan, client, M=M, transport="nccl")
    try:
        ds.scatter(B)
        parts = ds.run()
        assert ds.transport == "nccl"
        assert {s["transport"] for s in parts.stats["shards"]} == {"nccl"}
        assert rel(parts.gather(), single_gpu(M, perm, B)) < TF32_RTOL
    finally:
        ds.close()


def test_resident_two_gpus_batched_equals_single_steps(client, case):
    """Three iterations in one actor call per GPU (NCCL when present) = run + two steps, and the single-GPU chain."""
    from tasks.distribute import DistributedSpmm, make_plan
    M, perm, B = case
    plan = make_plan(M, 2, perm=perm)
    parts_B = [B[plan.shard_rows(k)] for k in range(2)]
    ds = DistributedSpmm(plan, client, M=M)
    try:
        ds.run(parts_B)
        for _ in range(2):
            single = ds.step()
        C_single = single.gather()
        per_call_ms = [h["iteration_ms"] for h in ds.history[1:]]
        batched = ds.iterate(3, parts_B)
        C_batched = batched.gather()
        assert rel(C_batched, C_single) < TF32_RTOL
        ref = B
        for _ in range(3):
            ref = single_gpu(M, perm, ref)
        assert rel(C_batched, ref) < 3 * TF32_RTOL
        batch = ds.history[-3:]
        assert all(h["batched"] and h["batch_size"] == 3 for h in batch)
        assert {s["transport"] for h in batch for s in h["shards"]} == {ds.transport}
        assert all(h["kernel_ms"] > 0 for h in batch)
        C_same = ds.iterate(2, advance=False).gather()  # the resident B again: C unchanged
        assert rel(C_same, C_batched) < TF32_RTOL
        print("transport:", ds.transport, "per call ms:", per_call_ms, "batched ms/iter:", batch[-1]["iteration_ms"])
    finally:
        ds.close()


@pytest.mark.parametrize("mode", ["columns", "rows"])
def test_resident_two_gpus_overlapped_exchange(client, case, mode):
    """Overlap ("columns": own-column kernel while NCCL moves the halo, the halo-column kernel adding into C;
    "rows": boundary rows first, their exchange beside the interior rows' kernel): per call, batched and
    advancing, equal to the single-GPU products."""
    from tasks.distribute import DistributedSpmm, make_plan
    M, perm, B = case
    plan = make_plan(M, 2, perm=perm)
    with DistributedSpmm(plan, client, M=M, overlap=mode) as ds:
        ds.scatter(B)
        ref = single_gpu(M, perm, B)
        for _ in range(2):  # the C buffer is reused: the second call must overwrite, not add to, the first
            assert rel(ds.run().gather(), ref) < TF32_RTOL
        assert rel(ds.iterate(2, advance=False).gather(), ref) < TF32_RTOL
        C = ds.iterate(2).gather()  # two power steps from C = A B: A^3 B
        ref3 = single_gpu(M, perm, single_gpu(M, perm, ref))
        assert rel(C, ref3) < 3 * TF32_RTOL
        assert all(h["overlap"] == mode for h in ds.history)
        # on NCCL an overlap moves its halo on the copy engines unless they are unavailable (halo_copy says which)
        via = ds.halo_copy if ds.transport == "nccl" else ds.transport
        assert {s["transport"] for h in ds.history for s in h["shards"]} == {via}, ds.halo_copy_reason


# Sharded against one GPU, per precision: the same stored values and the same rounding of B, FP32 accumulation in
# both; only the summation splits differ. The contract against float64 (kernels.precision): TF32 ~1e-3 of the norm,
# float16 1e-2, bfloat16 3e-2.
CONTRACT = {"float32": TF32_RTOL, "float16": 1e-2, "bfloat16": 3e-2}


@pytest.mark.parametrize("fmt", ["metcf", "bcsr", "tiledcsr", "cvse"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_every_format_and_precision_two_gpus(client, case, fmt, dtype):
    """One-shot and resident (overlapped exchange) of every format's shards on 2 GPUs equal the single-GPU product
    of the whole matrix in that format and precision, and float64 within the precision's contract."""
    import scipy.sparse as sp

    from kernels.formats import get
    from kernels.formats.metcf.container import metcf_to_csr
    from kernels.precision import precision
    from kernels.spmm import SpmmPlan
    from tasks.distribute import DistributedSpmm, make_plan, run_oneshot
    M, perm, B = case
    A = sp.csr_array(metcf_to_csr(M))  # rows of A[perm]
    X = get(fmt).convert(A, precision(dtype))
    one = np.empty((M.shape[0], B.shape[1]), dtype=np.float32)
    one[perm] = SpmmPlan(X, device="gpu", dtype=dtype, out_dtype=np.float32).run(B)
    ref = np.empty_like(one, dtype=np.float64)
    ref[perm] = A.astype(np.float64) @ precision(dtype).rounded(B).astype(np.float64)
    plan = make_plan(X, 2, perm=perm)
    C, timings = run_oneshot(plan, B, client, M=X, repeats=2, dtype=dtype)
    assert len({t["worker"] for t in timings}) == 2 and all(t["gpu"] != "cpu" for t in timings)
    assert rel(C, one) < CONTRACT[dtype] and rel(C, ref) < CONTRACT[dtype]
    with DistributedSpmm(plan, client, M=X, dtype=dtype, overlap=True) as ds:
        ds.scatter(B)
        C2 = ds.run().gather()
        assert all(i["format"] == fmt for i in ds.info)
    assert rel(C2, one) < CONTRACT[dtype] and rel(C2, ref) < CONTRACT[dtype]
    print(fmt, dtype, "kernels:", sorted({t["kernel"] for t in timings}), "one-shot", rel(C, one), "resident",
          rel(C2, one))


def test_resident_two_gpus_rows_overlap(client, case):
    """The "rows" overlap on NCCL, halo by the copy engines (boundary rows' kernel, their exchange into the second extended B beside the
    interior rows' kernel): per call, batched with and without advancing, against float64 and the plain loop;
    the history's breakdown (exchange / exposed / kernel / boundary ms) and the split's row counts."""
    from tasks.distribute import DistributedSpmm, make_plan
    M, perm, B = case
    plan = make_plan(M, 2, perm=perm)
    A64 = sp_of(M, perm)
    ref1 = A64 @ B.astype(np.float64)
    ref3 = A64 @ (A64 @ ref1)
    with DistributedSpmm(plan, client, M=M) as ds:
        parts = [B[plan.shard_rows(k)] for k in range(2)]
        plain3 = ds.iterate(3, parts).gather()
        plain1 = ds.iterate(2, parts, advance=False).gather()
        ds.set_overlap("rows")
        assert ds.overlap == "rows" and all(i["overlap"] == "rows" for i in ds.info)
        assert all(i["boundary_rows"] + i["interior_rows"] == i["n_own"] for i in ds.info)
        assert all(0 < i["boundary_rows"] < i["n_own"] for i in ds.info)  # communities: both kinds of rows
        for _ in range(2):  # the second batch replays the bound calls (CUDA graphs) on both extended Bs
            rows3 = ds.iterate(3, parts).gather()
            assert rel(rows3, ref3) < 3 * TF32_RTOL and rel(rows3, plain3) < 3 * TF32_RTOL
        rows1 = ds.iterate(4, parts, advance=False).gather()
        assert rel(rows1, ref1) < TF32_RTOL and rel(rows1, plain1) < TF32_RTOL
        for h in ds.history[-4:]:
            assert h["overlap"] == "rows" and h["batched"]
            assert 0 <= h["boundary_ms"] <= h["kernel_ms"] and h["exposed_ms"] >= 0 and h["exchange_ms"] > 0
            assert ds.transport != "nccl" or h["iteration_gpu_ms"] > 0  # CUDA events of the NCCL loop
            for s in h["shards"]:  # on NCCL the overlap's halo moves by the copy engines unless NCCL was asked
                assert s["transport"] == (ds.halo_copy if ds.transport == "nccl" else ds.transport)
                assert "+" in s["kernel"]
                assert ds.transport != "nccl" or s["advance_ms"] >= 0
        assert rel(ds.run(parts).gather(), ref1) < TF32_RTOL  # per call: the two kernels, C in the split order
        C = ds.step(2).gather()  # continues from that C (advanced in the split's row order)
        assert rel(C, ref3) < 3 * TF32_RTOL
        print("rows overlap, last batch: kernel ms", [round(h["kernel_ms"], 3) for h in ds.history[-2:]],
              "boundary ms", [round(h["boundary_ms"], 3) for h in ds.history[-2:]],
              "exposed ms", [round(h["exposed_ms"] or 0.0, 3) for h in ds.history[-2:]])


def test_resident_two_gpus_rows_overlap_on_the_copy_engines(client, case):
    """halo_copy="ce" (tasks.distribute.ce_exchange: peer copies over CUDA IPC, flags in device memory): the
    rows overlap gives the NCCL rows overlap's C bitwise, per call and batched, advancing and not, over two
    batches (the flags keep growing across them), and again after B is reloaded with another N (a new export)."""
    from tasks.distribute import DistributedSpmm, make_plan
    M, perm, B = case
    plan = make_plan(M, 2, perm=perm)
    ref1 = sp_of(M, perm) @ B.astype(np.float64)
    parts = [B[plan.shard_rows(k)] for k in range(2)]
    with DistributedSpmm(plan, client, M=M, overlap="rows", halo_copy="nccl") as ds:
        want3, want1 = ds.iterate(3, parts).gather(), ds.iterate(4, parts, advance=False).gather()
        want_call = ds.run(parts).gather()
    with DistributedSpmm(plan, client, M=M, overlap="rows", halo_copy="ce") as ds:
        assert ds.halo_copy == "ce", ds.halo_copy_reason
        for _ in range(2):
            got3 = ds.iterate(3, parts).gather()
            assert ds.halo_copy == "ce", ds.halo_copy_reason
            assert np.array_equal(got3, want3)
        assert np.array_equal(ds.iterate(4, parts, advance=False).gather(), want1)
        assert np.array_equal(ds.run(parts).gather(), want_call)
        assert rel(want_call, ref1) < TF32_RTOL
        for h in ds.history[-5:]:
            assert all(s["transport"] == "ce" for s in h["shards"]) and h["exchange_ms"] > 0
        wide = [np.hstack([b, b]) for b in parts]  # N doubles: new extended Bs, a new export
        got = ds.iterate(2, wide, advance=False).gather()
        assert rel(got, np.hstack([ref1, ref1])) < TF32_RTOL and ds.halo_copy == "ce"


def sp_of(M, perm):
    """A (original row order) as float64 SciPy CSR from the ME-TCF of A[perm]."""
    import scipy.sparse as sp

    from kernels.formats.metcf.container import metcf_to_csr
    Ap = sp.csr_array(metcf_to_csr(M)).astype(np.float64)
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.shape[0])
    return sp.csr_array(Ap[inv])


@pytest.mark.parametrize("fmt", ["metcf", "bcsr", "tiledcsr", "cvse", "csr"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_rows_overlap_every_format_and_precision_two_gpus(client, case, fmt, dtype):
    """Every sharded format and precision with the "rows" overlap: three advancing iterations in one batch equal
    the plain batched loop's and the float64 power iteration on the same roundings within the precision's
    contract (three products: 3x)."""
    import scipy.sparse as sp

    from kernels.formats import get
    from kernels.formats.metcf.container import metcf_to_csr
    from kernels.precision import precision
    from tasks.distribute import DistributedSpmm, make_plan
    M, perm, B = case
    prec = precision(dtype)
    Ap = sp.csr_array(metcf_to_csr(M))  # rows of A[perm]
    X = get(fmt).convert(Ap, prec)
    plan = make_plan(X, 2, perm=perm)
    A64 = sp_of(M, perm)
    A64 = sp.csr_array((prec.rounded(A64.data.astype(np.float32)), A64.indices, A64.indptr), shape=A64.shape)
    Bs = B / 4  # three products stay within float16's range
    ref = prec.rounded(Bs).astype(np.float64)
    for i in range(3):
        ref = A64 @ ref
        if i < 2:
            ref = prec.rounded(ref.astype(np.float32)).astype(np.float64)
    with DistributedSpmm(plan, client, M=X, dtype=dtype) as ds:
        parts = [Bs[plan.shard_rows(k)] for k in range(2)]
        plain = ds.iterate(3, parts).gather()
        ds.set_overlap("rows")
        got = ds.iterate(3, parts).gather()
        assert all(i["format"] == fmt and i["overlap"] == "rows" for i in ds.info)
    assert rel(got, ref) < 3 * CONTRACT[dtype] and rel(got, plain) < 3 * CONTRACT[dtype]
    print(fmt, dtype, "rows overlap vs float64", rel(got, ref), "vs plain", rel(got, plain))
