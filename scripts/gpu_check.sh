#!/usr/bin/env bash
# GPU check on a bare GPU machine (make gpu-check): offline-install the wheels that are missing from the
# wheelhouse, compile-check the kernels, run `pytest -m gpu`, run a short SpMM benchmark, then print a summary
# table last. Works without a wheelhouse or with some wheels absent: what needs them is skipped by the tests.
# Usage: bash scripts/gpu_check.sh [WHEELHOUSE]   (default .whl; logs in ${GPU_CHECK_LOGS:-/tmp/gpu-check})
set -uo pipefail
WHEELHOUSE="${1:-.whl}"
cd "$(dirname "$0")/.."
REPO="$PWD"
PY="${PYTHON:-python3}"
LOGS="${GPU_CHECK_LOGS:-/tmp/gpu-check}"
SITE=/tmp/site
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
declare -A STATUS DETAIL

# 1. wheels: only distributions not already installed (the image's numpy/cupy/torch stay as they are), and
# cuda-pathfinder where the image's is older than nvmath-python's floor (kernels/cusparse*.py import nvmath)
missing=()
if compgen -G "$WHEELHOUSE/*.whl" >/dev/null; then
  mapfile -t missing < <("$PY" - "$WHEELHOUSE" <<'PYEOF'
import importlib.metadata as md, pathlib, re, sys
FLOOR = {"cuda-pathfinder": (1, 5, 1)}  # nvmath-python 1.0 needs >= 1.5.1; CuPy 14.2 only >= 1.3.4
for whl in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    name = re.sub(r"[-_.]+", "-", whl.name.split("-")[0])
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        print(whl)
        continue
    if name in FLOOR and tuple(int(x) for x in re.findall(r"\d+", have)[:3]) < FLOOR[name]:
        print(whl)
PYEOF
)
fi
if ((${#missing[@]})); then
  if "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "${missing[@]}" >"$LOGS/pip.log" 2>&1; then
    STATUS[wheels]=ok; DETAIL[wheels]="${#missing[@]} installed into $SITE"
  else  # one bad wheel should not block the others
    n=0; for w in "${missing[@]}"; do "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$w" >>"$LOGS/pip.log" 2>&1 && n=$((n+1)); done
    STATUS[wheels]=partial; DETAIL[wheels]="$n/${#missing[@]} installed (see $LOGS/pip.log)"
  fi
else
  STATUS[wheels]=skipped; DETAIL[wheels]="nothing missing or no wheelhouse at $WHEELHOUSE"
fi
export PYTHONPATH="$REPO:$SITE${PYTHONPATH:+:$PYTHONPATH}"

# 2. offline compile check (nvcc, sm_80 + sm_90)
if "$PY" -m kernels.compile_check >"$LOGS/compile.log" 2>&1; then STATUS[compile]=ok; else STATUS[compile]=FAILED; fi
DETAIL[compile]="$(tail -n 1 "$LOGS/compile.log")"

# 3. GPU tests (modules of other stages that need absent packages are reported, not fatal to the rest)
"$PY" -m pytest -q -m gpu -p no:cacheprovider --continue-on-collection-errors tests >"$LOGS/pytest.log" 2>&1
rc=$?
STATUS[pytest]=$([ $rc -eq 0 ] && echo ok || echo "FAILED(rc=$rc)")
DETAIL[pytest]="$(grep -E '(passed|failed|error|skipped|no tests ran)' "$LOGS/pytest.log" | tail -n 1)"

# 4. short benchmark (quick suite, N 128/256), its table printed here
"$PY" benchmarks/spmm.py --suite quick --ns 128 256 --repeats 20 --out-dir "$LOGS" --budget-s 120 \
  >"$LOGS/bench.log" 2>&1
rc=$?
STATUS[benchmark]=$([ $rc -eq 0 ] && echo ok || echo "FAILED(rc=$rc)")
DETAIL[benchmark]="$(ls "$LOGS"/spmm-*.json 2>/dev/null | tail -n 1)"
sed -n '/^matrix /,$p' "$LOGS/bench.log"
[ "${STATUS[benchmark]}" = ok ] || tail -n 20 "$LOGS/bench.log"
[ "${STATUS[pytest]}" = ok ] || grep -E '^(FAILED|ERROR)' "$LOGS/pytest.log" | head -n 20

echo
printf '%-10s %-14s %s\n' step status detail
for step in wheels compile pytest benchmark; do printf '%-10s %-14s %s\n' "$step" "${STATUS[$step]}" "${DETAIL[$step]}"; done
[[ "${STATUS[compile]}" == ok && "${STATUS[pytest]}" == ok && "${STATUS[benchmark]}" == ok ]]
