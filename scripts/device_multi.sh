#!/usr/bin/env bash
# One device call on a multi-GPU machine: the multi_gpu tests (after installing the wheelhouse), the flow on all
# GPUs (one-shot and resident, same matrix, each checked against float64), the strong-scaling benchmark and the
# gpu tests. Logs go to one tarball under $OUT. BENCH_ARGS / BENCH_BUDGET_S pass on to the benchmark.
set -uo pipefail
logs=/tmp/tcspmm-logs; mkdir -p "$logs"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-/tmp}
OUT=$logs/mg timeout 120 bash scripts/multi_gpu_check.sh tests > "$logs/test-multi.log" 2>&1
echo "multi_gpu tests: $(grep -E 'passed|failed' "$logs/test-multi.log" | tail -1)"
export PYTHONPATH=/tmp/site:. TCSPMM_DATA=/tmp/tcspmm-data PREFECT_SERVER_ANALYTICS_ENABLED=false
nccl_dir=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
[ -n "$nccl_dir" ] && export LD_LIBRARY_PATH=$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
spec='gen:sbm?n=500000&blocks=5000&deg_in=16&deg_out=4&seed=7'
for mode in oneshot resident; do
    timeout 100 python3 flows/spmm.py --matrix "$spec" -N 256 --reorder tca --devices all --mode $mode \
        > "$logs/flow-$mode.log" 2>&1; echo "flow $mode rc=$?"
    grep -A7 "^tcspmm run" "$logs/flow-$mode.log" | grep -v "| INFO"
done
OUT=$logs/mg timeout 300 bash scripts/multi_gpu_check.sh full --budget-s "${BENCH_BUDGET_S:-170}" ${BENCH_ARGS:-} \
    > "$logs/mg-full.log" 2>&1
cp "$logs"/mg/multi_gpu-full.json "$out"/ 2>/dev/null
if [ -z "${SKIP_GPU_TESTS:-}" ]; then
    timeout 60 python3 -m pytest -m gpu tests/kernels -q -p no:cacheprovider -x > "$logs/test-gpu.log" 2>&1
    echo "gpu tests: $(tail -1 "$logs/test-gpu.log")"
fi
tar czf "$out/logs.tgz" -C "$logs" . 2>/dev/null
echo; tail -n 40 "$logs"/mg/table-full.txt 2>/dev/null || tail -30 "$logs/mg-full.log"
