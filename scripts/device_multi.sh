#!/usr/bin/env bash
# One device call on a multi-GPU machine (nvidia-h200-x2 / -x4): install the offline wheelhouse, run the flow on
# all GPUs (one-shot and resident, same matrix, each checked against float64), then the strong-scaling benchmark
# once per argument (each argument is one quoted argument string for benchmarks/multi_gpu.py), and the multi_gpu
# tests when TESTS=1. Results (JSON per benchmark run, logs in one tarball) go to $OUT.
#
#   bash scripts/device_multi.sh "--kinds sbm --nnz 110e6 --orders natural" "--kinds sbm --orders tca --gpus 1,2"
set -uo pipefail
logs=/tmp/tcspmm-logs; mkdir -p "$logs"
out=${OUT:-/tmp/tcspmm-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ "${TESTS:-0}" = 1 ]; then
    OUT=$logs/mg timeout 150 bash scripts/multi_gpu_check.sh tests > "$logs/test-multi.log" 2>&1
    echo "multi_gpu tests: $(grep -E 'passed|failed' "$logs/test-multi.log" | tail -1)"
elif [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > "$logs/pip.log" 2>&1 \
        || echo "wheelhouse install failed: $(tail -1 "$logs/pip.log")"
fi
export PYTHONPATH=/tmp/site:. TCSPMM_DATA=/tmp/tcspmm-data PREFECT_SERVER_ANALYTICS_ENABLED=false
nccl_dir=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
[ -n "$nccl_dir" ] && export LD_LIBRARY_PATH=$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
spec='gen:sbm?n=500000&blocks=5000&deg_in=16&deg_out=4&seed=7'
for mode in ${FLOW_MODES-oneshot resident}; do
    timeout "${FLOW_TIMEOUT_S:-100}" python3 flows/spmm.py --matrix "$spec" -N 256 --reorder tca --devices all \
        --mode "$mode" > "$logs/flow-$mode.log" 2>&1
    echo "flow $mode rc=$?"
    grep -A9 "^tcspmm run" "$logs/flow-$mode.log" | grep -v "| INFO"
done
i=0
for args in "$@"; do
    i=$((i + 1))
    # shellcheck disable=SC2086  # one argument string per benchmark run, split on purpose
    timeout "${BENCH_TIMEOUT_S:-420}" python3 benchmarks/multi_gpu.py $args --out "$out/multi_gpu-$i.json" \
        > "$logs/table-$i.txt" 2> "$logs/bench-$i.log"
    echo "benchmark $i ($args) rc=$?"
    tail -n 12 "$logs/table-$i.txt"
done
tar czf "$out/logs.tgz" -C "$logs" . 2>/dev/null
