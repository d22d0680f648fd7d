#!/usr/bin/env bash
# Before/after timings of a change on one GPU: benchmarks/spmm.py (quick suite), formats.py (--quick) and
# host_overhead.py, each run from the BEFORE tree and from this one on the same GPU, alternately for AB_ROUNDS
# rounds (default 1), judged by benchmarks/compare_timings.py on each timing's minimum over the rounds (a case within
# 3%, the geomean within 1%; our timings only: host_overhead.py's plan timings, the other scripts' without the
# baselines and derived numbers, compare_timings.BASELINES). Run it on an otherwise idle machine: host timings (us)
# move with any other load.
# Prints one verdict line per script last.
#
#   bash scripts/ab_timings.sh BEFORE_TREE [OUT]     e.g. BEFORE_TREE from `git archive OLD | tar x -C .ab/before`
#   AB_SCRIPTS="host-overhead" AB_ROUNDS=2 bash scripts/ab_timings.sh ...      (a subset, two rounds each side)
#   AB_ORDER=after-first: each round runs this tree first (an order effect shows as a ratio that flips with it)
#   AB_SPMM_ARGS / AB_FORMATS_ARGS / AB_HOST_ARGS: more options for spmm.py / formats.py / host_overhead.py (e.g.
#   --matrices ... to re-time the cases a full run flagged)
#   AB_LABEL=format-folders: names the change in the ab-<label>-<script>-<date>.json files written to OUT (copy
#   them to benchmarks/results/; benchmarks/summarize.py lists them)
set -uo pipefail
cd "$(dirname "$0")/.."
after=$PWD
before=$(cd "${1:?usage: ab_timings.sh BEFORE_TREE [OUT]}" && pwd) || exit 2
out=${2:-${OUT:-/tmp/ab}}
scripts=${AB_SCRIPTS:-spmm formats host-overhead}
export PYTHONUNBUFFERED=1
[ -d "$after/.fixtures" ] && [ ! -e "$before/.fixtures" ] && ln -s "$after/.fixtures" "$before/.fixtures"

bench() {  # TREE DIR: the scripts from TREE, results and logs under DIR
    local tree=$1 dir=$2
    mkdir -p "$dir"
    for script in $scripts; do
        case $script in
            spmm) (cd "$tree" && timeout "${AB_SPMM_S:-240}" python3 benchmarks/spmm.py --suite quick --ns 128 256 \
                      --repeats 20 --budget-s "${AB_SPMM_BUDGET:-150}" --part ab --out-dir "$dir" ${AB_SPMM_ARGS:-} \
                      > "$dir/spmm.log" 2>&1) ;;
            formats) (cd "$tree" && timeout "${AB_FORMATS_S:-150}" python3 benchmarks/formats.py --quick --tag ab \
                         --out-dir "$dir" ${AB_FORMATS_ARGS:-} > "$dir/formats.log" 2>&1) ;;
            host-overhead) (cd "$tree" && timeout "${AB_HOST_S:-200}" python3 benchmarks/host_overhead.py --label ab \
                               --out-dir "$dir" ${AB_HOST_ARGS:-} > "$dir/host.log" 2>&1) ;;
            *) echo "unknown script $script"; return 2 ;;
        esac
    done
}

for r in $(seq 1 "${AB_ROUNDS:-1}"); do
    if [ "${AB_ORDER:-before-first}" = after-first ]; then
        bench "$after" "$out/after$r"
        bench "$before" "$out/before$r"
    else
        bench "$before" "$out/before$r"
        bench "$after" "$out/after$r"
    fi
done
status=0
for script in $scripts; do
    b=$(ls "$out"/before*/"$script"-*.json 2>/dev/null | paste -sd, -)
    a=$(ls "$out"/after*/"$script"-*.json 2>/dev/null | paste -sd, -)
    if [ -z "$b" ] || [ -z "$a" ]; then
        echo "$script: missing results (before: ${b:-none}, after: ${a:-none})"; status=1; continue
    fi
    skip=$(cd benchmarks && python3 -c 'import compare_timings; print(compare_timings.BASELINES)')
    only=(--skip "$skip")
    [ "$script" = host-overhead ] && only=(--only '^(issued_us|issued_nograph_us|graph_us)$')
    python3 benchmarks/compare_timings.py "$b" "$a" "${only[@]}" --label "${AB_LABEL:-}" \
        --out "$out/ab-${AB_LABEL:-change}-$script-$(date +%Y-%m-%d).json" > "$out/compare-$script.txt" 2>&1 || status=1
    echo "== $script: $(tail -n 1 "$out/compare-$script.txt")"
done
exit $status
