#!/usr/bin/env bash
# Multi-GPU check on a bare GPU machine (e.g. nvidia-h200-x2: Python 3.12, CuPy, numpy, scipy, pyarrow; no Dask).
# Installs Dask/distributed/dask-cuda from the offline wheelhouse (.whl, git-ignored), then runs the `multi_gpu`
# tests and the strong-scaling benchmark, and prints the benchmark table last.
#
# Usage: bash scripts/multi_gpu_check.sh [MODE]     run from the repository root
#   quick (default): tests + benchmark --quick (~20M nnz per kind)      ~3 min
#   full:            benchmark at the default size (100M nnz per kind)  ~6-8 min
#   tests:           only the multi_gpu tests
#   all:             tests + quick + full (longer than one 10-minute device call)
# Extra arguments after MODE go to the benchmark (e.g. `full --nnz 500e6 --kinds rmat`).
# Logs and the JSON go to $OUT when set (else /tmp/multi_gpu-logs); the JSON also lands in benchmarks/results/.
set -uo pipefail
mode=${1:-quick}
shift || true
logs=${OUT:-/tmp/multi_gpu-logs}
mkdir -p "$logs"
site=/tmp/site

if [ -d .whl ] && ! PYTHONPATH=$site python3 -c "import distributed" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/*.whl \
        >"$logs/pip.log" 2>&1 || { echo "wheelhouse install failed, see $logs/pip.log"; tail -5 "$logs/pip.log"; }
fi
export PYTHONPATH=$site:.${PYTHONPATH:+:$PYTHONPATH}

# CuPy's NCCL binding needs libnccl.so.2; a torch install brings one in the nvidia-nccl wheel.
nccl_dir=$(python3 - <<'EOF' 2>/dev/null
import importlib.util, os
spec = importlib.util.find_spec("nvidia.nccl")
for loc in (spec.submodule_search_locations or []) if spec else []:
    if os.path.isdir(os.path.join(loc, "lib")):
        print(os.path.join(loc, "lib"))
        break
EOF
)
[ -n "$nccl_dir" ] && export LD_LIBRARY_PATH=$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
# NVLink multicast must stay off on these shared hosts (KINDS.md); every process we start inherits this.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

{
    nvidia-smi -L || true
    python3 - <<'EOF'
import importlib
for m in ("numpy", "cupy", "dask", "distributed", "dask_cuda", "pytest"):
    try:
        print(f"{m:12s}", importlib.import_module(m).__version__)
    except Exception as err:
        print(f"{m:12s} missing: {type(err).__name__}: {err}")
try:
    from cupy.cuda import nccl
    print("nccl        ", nccl.get_version())
except Exception as err:
    print("nccl         unavailable:", type(err).__name__, err)
EOF
} 2>&1 | tee "$logs/env.log"

status=0
run_tests() {
    if python3 -c "import pytest" 2>/dev/null; then
        python3 -m pytest -m multi_gpu tests/tasks/distribute -q -rs -s -p no:cacheprovider \
            -W ignore::pytest.PytestConfigWarning \
            2>&1 | tee "$logs/pytest-multi_gpu.log"
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    else
        echo "pytest is not installed here (not in the wheelhouse): skipping the multi_gpu tests;" \
             "the benchmark still checks one-shot and resident C against a single-GPU run" \
            | tee "$logs/pytest-multi_gpu.log"
    fi
}
run_bench() {  # $1 = name, rest = benchmark args
    local name=$1
    shift
    python3 benchmarks/multi_gpu.py "$@" --out "$logs/multi_gpu-$name.json" 2>"$logs/bench-$name.log" \
        | tee "$logs/table-$name.txt"
    if [ "${PIPESTATUS[0]}" -ne 0 ]; then
        status=1
        echo "benchmark $name failed; last log lines:"
        tail -20 "$logs/bench-$name.log"
    fi
    cp "$logs/multi_gpu-$name.json" benchmarks/results/ 2>/dev/null || true
}

case $mode in
    tests) run_tests ;;
    quick) run_tests; run_bench quick --quick "$@" ;;
    full) run_bench full "$@" ;;
    all) run_tests; run_bench quick --quick "$@"; run_bench full "$@" ;;
    *) echo "unknown mode $mode (quick, full, tests, all)"; exit 2 ;;
esac
for t in "$logs"/table-*.txt; do
    [ -f "$t" ] && { echo; echo "== $(basename "$t")"; tail -n 30 "$t"; }
done
exit $status
