#!/usr/bin/env bash
# `make serve`: a real Prefect server on 127.0.0.1, a process work pool and worker, and the catalog deployment
# (prefect.yaml, cron schedule). PORT=4200 by default.
#
# Stopping: SIGTERM, SIGINT (Ctrl-C) or SIGHUP to this script (make forwards SIGTERM/SIGINT to it), or the server or
# worker ending on its own, stops everything the script started: the server (and its uvicorn/services), the worker,
# the flow runs the worker launched (which Prefect may start in their own sessions) and their Dask processes. The
# process tree under this shell is collected first and signalled as a whole (TERM, then KILL after $STOP_GRACE_S,
# default 20 s), because a background job of a non-interactive shell ignores SIGINT and Prefect's children do not
# all die with their parent. tests/test_serve.py checks that nothing is left.
set -euo pipefail
cd "$(dirname "$0")/.."
export TCSPMM_HOME=$PWD
export PATH=$PWD/.venv/bin:$PATH
port=${PORT:-4200}
grace=${STOP_GRACE_S:-20}
export PREFECT_API_URL=http://127.0.0.1:$port/api PREFECT_SERVER_ANALYTICS_ENABLED=false

# Every descendant of this shell, parents first (one `ps` snapshot).
descendants() {
    ps -e -o pid=,ppid= | awk -v root=$$ '
        { parent[$1] = $2; pids[NR] = $1 }
        END { for (i in pids) { p = pids[i]; q = parent[p]; while (q != "" && q != root && q != 1 && q != 0) q = parent[q];
                                if (q == root && p != root) print p } }'
}

stopping=0
stop() {
    local code=$1
    [ "$stopping" = 1 ] && return
    stopping=1
    trap '' INT TERM HUP
    [ -n "${serve_url:-}" ] && rm -f "$serve_url"
    local pids alive deadline
    pids=$(descendants)
    if [ -n "$pids" ]; then
        echo "serve.sh: stopping server, worker and their processes" >&2
        kill -TERM $pids 2>/dev/null || true
        deadline=$((SECONDS + grace))
        while :; do
            alive=""
            for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
            [ -z "$alive" ] && break
            if [ $SECONDS -ge $deadline ]; then
                echo "serve.sh: still running after ${grace} s, killing:$alive" >&2
                kill -KILL $alive $(descendants) 2>/dev/null || true
                break
            fi
            sleep 0.5
        done
    fi
    exit "$code"
}
trap 'stop 143' TERM
trap 'stop 130' INT
trap 'stop 129' HUP
trap 'stop $?' EXIT

# Foreground steps run in the background and are waited for: bash runs a trap only between commands, and `wait`
# returns at once on a signal, so a SIGTERM during deploy is not held until deploy ends.
step() { "$@" & wait $!; }

prefect server start --host 127.0.0.1 --port "$port" &
server=$!
for _ in $(seq 150); do
    curl -fs "$PREFECT_API_URL/health" >/dev/null && break
    kill -0 $server 2>/dev/null || { echo "error: serve.sh: prefect server exited before answering on port $port" >&2; exit 1; }
    sleep 1
done
curl -fs "$PREFECT_API_URL/health" >/dev/null || { echo "error: serve.sh: prefect server did not answer on port $port within 150 s" >&2; exit 1; }
# Runs of this project (same data root) use this server instead of starting their own (tasks/prefect_api.py).
serve_url=${TCSPMM_DATA:-data}/prefect/serve.url
mkdir -p "$(dirname "$serve_url")" && echo "$PREFECT_API_URL" > "$serve_url"
step prefect work-pool inspect tcspmm-process >/dev/null 2>&1 || step prefect work-pool create tcspmm-process --type process
step prefect --no-prompt deploy --all
prefect worker start --pool tcspmm-process &
worker=$!
echo "Prefect UI: http://127.0.0.1:$port  (deployment tcspmm-catalog/nightly, cron 0 3 * * * UTC)"
# Either one ending stops the other.
wait -n $server $worker || true
echo "error: serve.sh: the prefect $(kill -0 $server 2>/dev/null && echo worker || echo server) exited; stopping" >&2
exit 1
