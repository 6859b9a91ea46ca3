#!/usr/bin/env bash
# The picture of docs/deployments.md: a tiny training run's page in the Prefect UI, taken with a
# headless Chromium (Debian's `chromium` package: apt-get install -y chromium).
#
#   bash scripts/ui_screenshot.sh [OUT.png]        # default docs/img/prefect-ui-train-run.png
#
# It starts a Prefect server on a free loopback port with its own PREFECT_HOME (a temporary folder),
# trains a two-iteration tiny run against it (`ts train` with PREFECT_API_URL: the same flow a
# deployment runs), opens the flow run's page and saves a screenshot; then stops the server and
# removes the folder. ~2 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${1:-docs/img/prefect-ui-train-run.png}
PY=${PYTHON:-.venv/bin/python}
BIN=$(dirname "$PY")
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
[[ -n "$CHROMIUM" ]] || { echo "error: no chromium; install it with: apt-get install -y chromium" >&2; exit 2; }

WORK=$(mktemp -d)
PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export PREFECT_HOME="$WORK/prefect-home" PREFECT_API_URL="http://127.0.0.1:$PORT/api"
export PREFECT_SERVER_ANALYTICS_ENABLED=false TS_RUNS_DIR="$WORK/runs" OMP_NUM_THREADS=1
"$BIN/prefect" server start --host 127.0.0.1 --port "$PORT" >"$WORK/server.log" 2>&1 &
SERVER=$!
# the script's own status, not the stopped server's (wait would return its 143)
trap 'rc=$?; kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null; rm -rf "$WORK"; exit $rc' EXIT

for _ in $(seq 240); do
  curl -sf "$PREFECT_API_URL/health" >/dev/null && break
  kill -0 "$SERVER" 2>/dev/null || { tail -20 "$WORK/server.log" >&2; exit 1; }
  sleep 0.5
done

# A run of ~1 min: the tiny preset's own model on a small budget.
"$BIN/ts" train --preset tiny --run-id ui-demo --set iterations=2 --set rollout.prompts_per_iteration=4 \
  --set data.train_size=50 --set data.val_size=8 --set data.test_size=8 --set eval.prompts=4 \
  --set eval.samples=4 --set update.launcher=in_process >"$WORK/train.log" 2>&1 || { tail -20 "$WORK/train.log" >&2; exit 1; }

RUN=$("$PY" - <<'PYEOF'
import json, os, urllib.request
req = urllib.request.Request(os.environ["PREFECT_API_URL"] + "/flow_runs/filter", data=b'{"limit": 1}',
                             headers={"Content-Type": "application/json"})
print(json.loads(urllib.request.urlopen(req).read())[0]["id"])
PYEOF
)

mkdir -p "$(dirname "$OUT")"
# --virtual-time-budget: the UI is a single-page app; let its scripts fetch and draw before the shot
"$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
  --disable-sync --no-first-run --hide-scrollbars --user-data-dir="$WORK/chromium" --window-size=1400,1000 \
  --virtual-time-budget=20000 --screenshot="$OUT" "http://127.0.0.1:$PORT/runs/flow-run/$RUN" 2>"$WORK/chromium.log" \
  || { tail -20 "$WORK/chromium.log" >&2; exit 1; }
echo "saved $OUT (flow run $RUN)"
