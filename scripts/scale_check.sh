#!/usr/bin/env bash
# One device call on a multi-GPU machine (nvidia-h100-x2 / -x4, nvidia-h200-x2): unpack the site tarball
# (scripts/gpu_site.sh; carry .mg), then run the named steps in order, each bounded in time, logs and JSON to $OUT.
#
#   bash scripts/scale_check.sh STEP[=ARGS] ...
#   tests:P           the multi_gpu tests (test_multi_gpu.py, test_multi_gpu_paths.py) on P GPUs; a test that
#                     hangs fails at TEST_TIMEOUT_S (stacks dumped at HANG_S) and the others still run; a
#                     one-shot product fails at TCSPMM_ONESHOT_TIMEOUT_S (90 here), naming the shards still out;
#                     output is not captured (CAPTURE=fd to capture): the workers' and nannies' logs (a worker's
#                     death, its faulthandler stack, NCCL warnings) land in tests-P.log between the tests
#   bench:NAME=ARGS   benchmarks/multi_gpu.py ARGS --out $OUT/multi_gpu-NAME.json (ARGS: words joined by ',,')
#
# e.g. bash scripts/scale_check.sh tests:2 'bench:quick=--quick,,--gpus,,1,2,4'
set -uo pipefail
out=${OUT:-/tmp/scale-out}
logs=$out  # written where they come back even when the call is cut off
mkdir -p "$out" "$logs" /tmp/site
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN} NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PREFECT_SERVER_ANALYTICS_ENABLED=false TCSPMM_DATA=/tmp/tcspmm-data
[ -f .mg/site.tar.xz ] && [ ! -d /tmp/site/distributed ] && tar xJf .mg/site.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:.
nccl_dir=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
[ -n "$nccl_dir" ] && export LD_LIBRARY_PATH=$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
{
    nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -8
    python3 -c "
import importlib
for m in ('numpy', 'cupy', 'dask', 'distributed', 'dask_cuda', 'rmm', 'ucxx', 'distributed_ucxx', 'prefect'):
    try:
        print(f'{m:17s}', importlib.import_module(m).__version__)
    except Exception as err:
        print(f'{m:17s} missing: {type(err).__name__}: {err}')
from cupy.cuda import nccl
print('nccl', nccl.get_version())"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"
status=0
for step in "$@"; do
    name=${step%%=*}
    t0=$(date +%s)
    case $name in
        tests:*)
            p=${name#tests:}
            TCSPMM_TEST_GPUS=$p TCSPMM_FAILURE_LOG="$logs/failures-$p.log" \
                TCSPMM_ONESHOT_TIMEOUT_S="${TCSPMM_ONESHOT_TIMEOUT_S:-90}" timeout "${TESTS_TIMEOUT_S:-300}" python3 -m pytest -v -m multi_gpu -rs --capture="${CAPTURE:-no}" \
                -p no:cacheprovider --durations=0 -o faulthandler_timeout="${HANG_S:-100}" --tb=short \
                --timeout="${TEST_TIMEOUT_S:-150}" \
                tests/tasks/distribute/test_multi_gpu.py \
                tests/tasks/distribute/test_multi_gpu_paths.py ${PYTEST_K:+-k "$PYTEST_K"} \
                > "$logs/tests-$p.log" 2>&1 || status=1
            echo "== tests on $p GPUs ($(( $(date +%s) - t0 )) s): $(tail -1 "$logs/tests-$p.log")"
            grep -E "FAILED|Error|error:" "$logs/tests-$p.log" | head -20 ;;
        bench:*)
            b=${name#bench:}
            args=${step#*=}
            # shellcheck disable=SC2046  # ARGS words are split on ',,' on purpose
            timeout "${BENCH_TIMEOUT_S:-420}" python3 benchmarks/multi_gpu.py $(echo "$args" | sed 's/,,/ /g') \
                --out "$out/multi_gpu-$b.json" > "$logs/table-$b.txt" 2> "$logs/bench-$b.log" || status=1
            echo "== bench $b ($(( $(date +%s) - t0 )) s)"
            tail -n 24 "$logs/table-$b.txt"
            grep -E "Error|error" "$logs/bench-$b.log" | head -10 ;;
        *) echo "unknown step $step"; status=2 ;;
    esac
done
exit $status
