"""Kernel selector: a cost model plus a simulated thread-block schedule (DTC-SpMM section 4.5.2), no table.

Cost model (microseconds; `Calibration` holds the constants, measured on the device by
``python -m benchmarks.spmm --calibrate`` and stored in ``benchmarks/results/calibration-<device>.json``;
the documented defaults below are used when no file exists):
- TC kernels: one thread block with nb TC blocks costs ``tb_us + block_us * nb``; the thread blocks of a launch
  are list-scheduled in launch order onto ``sm_count * resident blocks per SM`` slots (each slot takes the next
  thread block the moment it frees up); predicted time = ``launch_us + makespan``.
  Plain kernel: one thread block per (window, column chunk). Strict balance: one per (item of
  ``blocks_per_item`` TC blocks, column chunk), plus the combine pass (its bytes at the copy bandwidth).
- Balance is chosen when AR = makespan_plain / lower_bound exceeds ``balance_threshold``, where lower_bound =
  the larger of total thread-block work / slots (the perfectly balanced makespan) and the cost of the largest
  unsplittable piece (a thread block of min(largest window, blocks_per_item) TC blocks). The threshold is
  calibrated as the measured time ratio balanced / plain on uniform matrices (AR ~ 1 there, so that ratio is
  exactly the overhead balance must win back: the paper's 1.2 came from the same experiment on an RTX 4090).
- Split-K window kernel (metcf_spmm_split, small matrices and hub windows): each (window, chunk) thread block's
  warps share its TC blocks k ways, k a power of two up to the block-size limit; cost per thread block
  ``tb_us * (1 + log2 k) + block_us * ceil(nb / k)``, scheduled like the plain kernel on the slots its occupancy
  allows; chosen (balance="auto") when predicted faster than the kernel the AR rule picked.
- cuSPARSE: ``cus_a_us + cus_b_ns * nnz * N / 1e3 + cus_c_ns * M * N / 1e3``, a least-squares fit of the best
  CSR algorithm's measured times; cuSPARSE is chosen when predicted below the chosen TC kernel.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numba
import numpy as np

from kernels.formats.metcf.config import CONFIG, KernelConfig
from kernels.formats.metcf.launch import ksplits, module, split_shape
from kernels.launch import copy_bandwidth_gbs

RESULTS_DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
EXACT_SCHEDULE_MAX_JOBS = 200_000  # above this, the wave approximation (numpy) replaces the exact heap


@dataclass(frozen=True)
class DeviceModel:
    name: str
    sm_count: int
    blocks_per_sm_plain: int  # resident thread blocks per SM of metcf_spmm_window at max_warps warps (occupancy)
    blocks_per_sm_balanced: int  # same for metcf_spmm_balanced
    copy_gbs: float  # device-to-device copy bandwidth, bytes read + written (GB/s)
    # metcf_spmm_split's resident thread blocks per SM: ((column slices, ksplit), blocks) for every block shape it
    # can launch; empty = not known (then no split prediction)
    split_blocks_per_sm: tuple = ()
    # The window and balanced kernels' resident blocks per SM for each block width they launch: ((warps per block,
    # blocks), ...); a width not listed falls back to blocks_per_sm_plain / blocks_per_sm_balanced. At N = 128 a
    # block has 2 warps and twice the residency of the 4-warp width.
    window_blocks_per_sm: tuple = ()
    balanced_blocks_per_sm: tuple = ()


def _per_sm(pairs, warps: int, default: int) -> int:
    return dict(pairs).get(int(warps), default)


@dataclass(frozen=True)
class Calibration:
    # Defaults: read off the first H100 smoke run (docs/kernels-notes.md: uniform random, 8.4M nnz, 1M TC blocks,
    # N = 128: window kernel 1.72 ms over 1188 slots; cuSPARSE CSR_ALG3 1.55 ms); a calibration file replaces them.
    launch_us: float = 5.0  # fixed cost of one launch (and its tail)
    tb_us: float = 1.0  # per thread block: start, window offsets, 16 x 128 C tile store
    block_us: float = 2.0  # per TC block in one thread block: 8 B rows x 128 columns gathered + 4 mma per warp
    balance_threshold: float = 1.2  # DTC-SpMM's value, until measured
    cus_a_us: float = 8.0
    cus_b_ns: float = 0.0012  # per nonzero x column (gathered B reads)
    cus_c_ns: float = 0.0014  # per row x column (C writes)
    # Host cost of one call as SpmmPlan.run issues it (bound launch, no graph): a path whose GPU time is below it
    # takes this long per call instead. H200 (docs/kernels-notes.md, session 6): cuLaunchKernel with packed
    # arguments 3.7-4.2 us; cuSPARSE through CusparseSpmm.run 11-17 us (the bound call is cheaper; measured by
    # benchmarks/host_overhead.py)
    host_launch_us: float = 4.0
    cus_host_us: float = 8.0
    source: str = "defaults"

    @classmethod
    def load(cls, device_name: str, results_dir: Path = RESULTS_DIR) -> "Calibration":
        path = Path(results_dir) / f"calibration-{slug(device_name)}.json"
        if not path.exists():
            return cls()
        values = json.loads(path.read_text())["calibration"]
        known = {k: values[k] for k in asdict(cls()) if k in values}
        return cls(**{**known, "source": str(path.name)})


def slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name.lower()).strip("-")


def list_schedule_makespan(costs, slots: int, *, exact: bool | None = None) -> float:
    """Makespan of jobs (in launch order) list-scheduled onto `slots` identical slots.

    Exact (a heap of slot free times) up to EXACT_SCHEDULE_MAX_JOBS jobs. Beyond that, runs of g consecutive jobs
    are merged into one job (g = ceil(jobs / EXACT_SCHEDULE_MAX_JOBS)) and scheduled exactly: a merged run
    executes back to back on one slot, so the error is at most one run's cost, about slots / 200k of the
    makespan when jobs are small (hub jobs stay nearly intact).
    """
    costs = np.asarray(costs, dtype=np.float64)
    slots = max(int(slots), 1)
    if costs.size == 0:
        return 0.0
    if exact is None:
        exact = costs.size <= EXACT_SCHEDULE_MAX_JOBS
    if not exact:
        g = -(-costs.size // EXACT_SCHEDULE_MAX_JOBS)
        costs = np.add.reduceat(costs, np.arange(0, costs.size, g))
    return _heap_makespan(np.ascontiguousarray(costs), min(slots, costs.size))


@numba.njit(cache=True, nogil=True)
def _heap_makespan(costs, n_slots):
    """The exact list schedule: a min-heap of slot free times, each job starts on the earliest free slot.

    Compiled because the Python heap (heapq.heapreplace per job) cost 3.2 ms per 20k-job call on a 2-core host,
    0.085 s per plan (8 calls) on an H200 host; compiled 0.65 ms. It is CPython's heapreplace step for step (sift
    the new root down to a leaf along the smaller children, right child on ties, then back up; the same ``<``
    comparisons) and builtins.max's ``>`` scan, so the result, NaN costs included, is bit for bit the heapq one's."""
    free = np.zeros(n_slots, np.float64)  # all equal: already a heap
    for c in costs:
        item = free[0] + c
        pos = 0
        child = 1
        while child + 1 < n_slots:  # heapq._siftup: the smaller child moves up until a leaf is free
            child += not free[child] < free[child + 1]  # no branch: 0.65 ms instead of 0.9 ms on 20k jobs
            free[pos] = free[child]
            pos = child
            child = 2 * pos + 1
        if child < n_slots:  # a left child without a sibling
            free[pos] = free[child]
            pos = child
        while pos > 0:  # heapq._siftdown: the new item back up to its place
            parent = (pos - 1) >> 1
            if item < free[parent]:
                free[pos] = free[parent]
                pos = parent
            else:
                break
        free[pos] = item
    makespan = free[0]
    for x in free[1:]:
        if x > makespan:
            makespan = x
    return makespan


def predict(row_window_offset, nnz: int, shape, N: int, device: DeviceModel, cal: Calibration,
            config: KernelConfig = CONFIG) -> dict:
    """Predicted ms of the plain and balanced TC kernels and of cuSPARSE, with the makespans behind them."""
    rwo = np.asarray(row_window_offset, dtype=np.int64)
    n_rows = int(shape[0])
    blocks = np.diff(rwo)
    n_blocks = int(rwo[-1]) if rwo.size else 0
    chunks = config.chunks(N)
    # Plain: (window, column chunk) jobs in launch order (blockIdx.x fastest): windows of chunk 0, then of chunk
    # 1, ...; a block of windows_per_block windows runs them as independent warps: that many slots per block.
    wpb = config.windows_per_block
    plain_chunks = config.chunks(N, wpb)
    plain_costs = np.tile(cal.tb_us + cal.block_us * blocks, plain_chunks)
    plain_warps = wpb * config.slices(N, wpb)
    slots_plain = device.sm_count * _per_sm(device.window_blocks_per_sm, plain_warps, device.blocks_per_sm_plain) * wpb
    makespan_plain = list_schedule_makespan(plain_costs, slots_plain)
    # No schedule beats perfect balance, nor the largest piece that strict balance cannot split (a window of at
    # most blocks_per_item blocks is one item): continuous in the largest window, so one window passing
    # blocks_per_item does not turn AR from ~1 into ~17 on a small matrix.
    lower_bound = float(plain_costs.sum()) / slots_plain if plain_costs.size else 0.0
    if blocks.size:
        lower_bound = max(lower_bound, cal.tb_us + cal.block_us * min(int(blocks.max()), config.blocks_per_item))
    # Balanced: items of blocks_per_item TC blocks, then the combine pass over split windows' partials.
    bpi = config.blocks_per_item
    item_blocks = np.full(-(-n_blocks // bpi), bpi, dtype=np.float64)
    if item_blocks.size and n_blocks % bpi:
        item_blocks[-1] = n_blocks % bpi
    bal_costs = np.tile(cal.tb_us + cal.block_us * item_blocks, chunks)
    bal_warps = config.slices(N)
    slots_bal = device.sm_count * _per_sm(device.balanced_blocks_per_sm, bal_warps, device.blocks_per_sm_balanced)
    makespan_bal = list_schedule_makespan(bal_costs, slots_bal)
    nonempty = blocks > 0
    first, last = rwo[:-1] // bpi, (rwo[1:] - 1) // bpi
    n_slots = int(np.where(nonempty & (last > first), last - first + 1, 0).sum())
    combine_bytes = (n_slots + min(n_slots, n_rows)) * 16 * 4 * N  # read partials, write their windows' rows
    combine_us = (cal.launch_us + combine_bytes / (device.copy_gbs * 1e3)) if n_slots or (~nonempty).any() else 0.0
    ar = makespan_plain / lower_bound if lower_bound > 0 else 1.0
    split_us, split_k = _split_makespan(blocks, N, device, cal, config)
    return {
        "N": int(N), "n_blocks": n_blocks, "n_windows": int(blocks.size), "column_chunks": chunks,
        "plain_column_chunks": plain_chunks, "plain_slots": slots_plain,
        "mean_nnz_tc": nnz / n_blocks if n_blocks else 0.0,
        "plain_ms": (cal.launch_us + makespan_plain) / 1e3,
        "balanced_ms": (cal.launch_us + makespan_bal + combine_us) / 1e3,
        "lower_bound_ms": (cal.launch_us + lower_bound) / 1e3,
        "approximation_ratio": ar,
        "split_ms": (cal.launch_us + split_us) / 1e3 if split_k else float("inf"), "split_ksplit": split_k,
        "cusparse_ms": (cal.cus_a_us + cal.cus_b_ns * nnz * N / 1e3 + cal.cus_c_ns * n_rows * N / 1e3) / 1e3,
    }


def _split_makespan(blocks, N: int, device: DeviceModel, cal: Calibration, config: KernelConfig):
    """(makespan us, ksplit) of metcf_spmm_split at its best ksplit >= 2, (inf, 0) when none is known.

    A (window, column chunk) thread block whose warps share nb TC blocks k ways costs
    ``tb_us * (1 + log2 k) + block_us * ceil(nb / k)`` (each tree step assumed to cost one thread-block start:
    an accumulator through shared memory and two barriers); slots = SMs x resident blocks of that shape."""
    slices, chunks = config.slices(N), config.chunks(N)
    best = (float("inf"), 0)
    for (sl, k), per_sm in device.split_blocks_per_sm:
        if sl != slices or k < 2 or per_sm < 1:
            continue
        costs = np.tile(cal.tb_us * (1 + np.log2(k)) + cal.block_us * -(-blocks // k), chunks)
        best = min(best, (list_schedule_makespan(costs, device.sm_count * per_sm), k))
    return best


def issued_ms(device_ms: float, launches: int, cal: Calibration, *, cusparse: bool = False) -> float:
    """Milliseconds per call as issued from Python: the GPU's time, or the host's cost to issue the call where
    that is larger (the queue then runs dry between calls)."""
    host_us = cal.cus_host_us if cusparse else cal.host_launch_us * launches
    return max(device_ms, host_us / 1e3)


def choose(pred: dict, cal: Calibration, *, balance="auto", allow_cusparse: bool = True) -> dict:
    """The kernel for one prediction: balance by the AR rule (or forced), then TC vs cuSPARSE by predicted ms per
    call as issued (`issued_ms`: a path whose host cost exceeds its GPU time is charged the host cost)."""
    ar, thr = pred["approximation_ratio"], cal.balance_threshold
    if balance == "auto":
        use_bal = ar > thr
        why = f"AR = makespan_plain / lower_bound = {ar:.3f} {'>' if use_bal else '<='} threshold {thr:.3f}"
    else:
        use_bal = bool(balance)
        why = f"balance={balance!r} forced"
    tc_kernel = "metcf-balanced" if use_bal else "metcf-window"
    tc_ms = pred["balanced_ms"] if use_bal else pred["plain_ms"]
    if balance == "auto" and pred.get("split_ms", float("inf")) < tc_ms:
        why += (f"; split-K (ksplit {pred['split_ksplit']}) predicted {pred['split_ms']:.4f} ms < {tc_kernel} "
                f"{tc_ms:.4f} ms")
        tc_kernel, tc_ms = "metcf-split", pred["split_ms"]
    tc_ms = issued_ms(tc_ms, 2 if tc_kernel == "metcf-balanced" else 1, cal)
    cus_ms = issued_ms(pred["cusparse_ms"], 1, cal, cusparse=True)
    if allow_cusparse and cus_ms < tc_ms:
        return {"kernel": "cusparse", "predicted_ms": cus_ms,
                "reason": f"predicted cuSPARSE {cus_ms:.4f} ms < {tc_kernel} {tc_ms:.4f} ms per call as issued "
                          f"(MeanNnzTC {pred['mean_nnz_tc']:.1f}); {why}"}
    return {"kernel": tc_kernel, "predicted_ms": tc_ms,
            "reason": f"{why}; predicted {tc_kernel} {tc_ms:.4f} ms vs cuSPARSE {cus_ms:.4f} ms per call as issued"}


_DEVICE_MODELS: dict = {}  # (device id, config) -> DeviceModel


def device_model(config: KernelConfig = CONFIG) -> DeviceModel:
    """The current CuPy device's SM count, the kernels' occupancy and its copy bandwidth for ``config``: measured
    once per (device, config) in a process (each ME-TCF operator asks; the device's properties and ~20 occupancy
    queries of the driver are the same every time)."""
    import cupy

    key = (int(cupy.cuda.Device().id), config)
    model = _DEVICE_MODELS.get(key)
    if model is None:
        model = _DEVICE_MODELS[key] = _device_model(config)
    return model


def _device_model(config: KernelConfig) -> DeviceModel:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    mod = module(config)
    per_sm = {name: resident_blocks(mod.get_function(name), config.threads)
              for name in ("metcf_spmm_window", "metcf_spmm_balanced")}
    widths = {name: tuple((w, resident_blocks(mod.get_function(name), 32 * w))
                          for w in range(1, config.max_warps + 1))
              for name in ("metcf_spmm_window", "metcf_spmm_balanced")}
    split = []
    if config.a_regs:
        fn = mod.get_function("metcf_spmm_split")
        for slices in range(1, config.max_warps + 1):
            for k in ksplits(slices * config.warp_n, config):
                threads, _, smem = split_shape(slices * config.warp_n, k, config)
                split.append(((slices, k), resident_blocks(fn, threads, smem)))
    return DeviceModel(name=props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"]),
                       sm_count=int(props["multiProcessorCount"]),
                       blocks_per_sm_plain=per_sm["metcf_spmm_window"],
                       blocks_per_sm_balanced=per_sm["metcf_spmm_balanced"],
                       copy_gbs=_cached_copy_gbs(int(cupy.cuda.Device().id), copy_bandwidth_gbs),
                       split_blocks_per_sm=tuple(split), window_blocks_per_sm=widths["metcf_spmm_window"],
                       balanced_blocks_per_sm=widths["metcf_spmm_balanced"])


def resident_blocks(kernel, threads: int, smem: int = 0) -> int:
    """Resident thread blocks per SM of a CuPy RawKernel with `smem` dynamic shared bytes: the driver's occupancy
    query, else the register and shared-memory rule (sm_80/sm_90: 64K registers, 256-register warp granularity,
    2048 threads, 32 blocks and ~227 KB of shared memory per SM)."""
    try:
        from cupy_backends.cuda.api import driver

        return int(driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, threads, smem))
    except Exception:  # older/newer CuPy without the query or the .kernel handle
        regs_per_warp = -(-int(kernel.num_regs) * 32 // 256) * 256
        by_smem = (227 * 1024) // smem if smem else 32
        return max(1, min(32, by_smem, 2048 // threads, 65536 // (regs_per_warp * (threads // 32))))


_COPY_GBS: dict[int, float] = {}


def _cached_copy_gbs(device_id: int, measure) -> float:
    if device_id not in _COPY_GBS:
        _COPY_GBS[device_id] = measure(1 << 30)
    return _COPY_GBS[device_id]
