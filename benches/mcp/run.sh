#!/usr/bin/env bash
# The MCP gateway benchmark of BENCHMARKS.md: what `idemkit mcp` (release build,
# redb store) adds to a tools/call round trip, against the SDK v2 server of the
# end-to-end tests (store/tests/mcp/server.mjs) called directly. Sequential calls
# over one keep-alive connection from one Node client (benches/mcp/overhead.mjs).
#
#   benches/mcp/run.sh OUT.json   # BENCH_SECONDS (5) per figure
#
# Installs the SDKs (npm ci in store/tests/mcp) when they are missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: benches/mcp/run.sh OUT.json}
[ -x store/tests/mcp/node_modules/node/bin/node ] \
  || npm ci --prefix store/tests/mcp --no-audit --no-fund --loglevel=error >&2
NODE=store/tests/mcp/node_modules/node/bin/node
cargo build --release --locked -q -p idemkit --bin idemkit
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
TMP=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

UP=19200 GW=127.0.0.1:19201
(cd store/tests/mcp && COUNT_FILE="$TMP/executions" PORT=$UP exec node_modules/node/bin/node server.mjs v2 http) \
  >"$TMP/server.log" 2>&1 &
PIDS+=($!)
cat >"$TMP/mcp.toml" <<TOML
listen = "$GW"
upstream = "http://127.0.0.1:$UP/mcp"
[store]
path = "$TMP/mcp.redb"
[tenant]
fixed = "bench"
TOML
"$TARGET_DIR/release/idemkit" mcp --config "$TMP/mcp.toml" >"$TMP/gateway.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
  grep -q "listening on" "$TMP/server.log" 2>/dev/null && grep -q "listening on" "$TMP/gateway.log" 2>/dev/null && break
  sleep 0.1
done
STARTED=$(date -u +%FT%TZ)
"$NODE" benches/mcp/overhead.mjs "http://127.0.0.1:$UP/mcp" "http://$GW/mcp" >"$TMP/overhead.json"
python3 - "$TMP/overhead.json" "$OUT" "$STARTED" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
doc["started"] = sys.argv[3]
json.dump(doc, open(sys.argv[2], "w"), indent=1)
print(json.dumps(doc["results"], indent=1))
PY
