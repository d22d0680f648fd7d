#!/usr/bin/env bash
# `make serve`: a real Prefect server on 127.0.0.1, a process work pool and worker, and the catalog deployment
# (prefect.yaml, cron schedule). Ctrl-C stops all three. PORT=4200 by default.
set -euo pipefail
cd "$(dirname "$0")/.."
export TCSPMM_HOME=$PWD
export PATH=$PWD/.venv/bin:$PATH
port=${PORT:-4200}
export PREFECT_API_URL=http://127.0.0.1:$port/api PREFECT_SERVER_ANALYTICS_ENABLED=false
prefect server start --host 127.0.0.1 --port "$port" &
server=$!
trap 'kill $server ${worker:-} 2>/dev/null || true' EXIT INT TERM
for _ in $(seq 120); do curl -fs "$PREFECT_API_URL/health" >/dev/null && break; sleep 1; done
prefect work-pool inspect tcspmm-process >/dev/null 2>&1 || prefect work-pool create tcspmm-process --type process
prefect --no-prompt deploy --all
prefect worker start --pool tcspmm-process &
worker=$!
echo "Prefect UI: http://127.0.0.1:$port  (deployment tcspmm-catalog/nightly, cron 0 3 * * * UTC)"
wait $server
