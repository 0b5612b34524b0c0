#!/usr/bin/env bash
# The proxy benchmark of BENCHMARKS.md: wrk (Debian) against the same upstream
# (store/examples/bench_upstream.rs: GET /ping at once, POST .../withdraw after
# 5 ms of work), directly, through nginx `proxy_pass` (Debian's nginx, keepalive
# upstream) and through `idemkit proxy` (redb store), in one run:
#
#   - pass-through: GET /ping (no route: streamed through untouched);
#   - replay: POST /accounts/A/withdraw with one Idempotency-Key. Directly and
#     through nginx every request runs the 5 ms of work; through idemkit proxy the
#     first one does and every later one is answered from the store.
#
#   benches/proxy/run.sh OUT.json   # BENCH_SECONDS (5), BENCH_CONNECTIONS (16), BENCH_ROUNDS (3)
#
# The three targets take turns, BENCH_ROUNDS times; each figure is the median of
# its rounds (on a shared 2-core machine one round of one target can be 1.5x
# another's with the same code), and every round is kept in the JSON.
#
# Installs wrk and nginx with apt-get when they are missing (as root).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: benches/proxy/run.sh OUT.json}
SECS=${BENCH_SECONDS:-5}
CONNS=${BENCH_CONNECTIONS:-16}
ROUNDS=${BENCH_ROUNDS:-3}
for tool in wrk nginx; do
  if ! command -v "$tool" >/dev/null; then
    [ "$(id -u)" = 0 ] || { echo "bench-proxy: $tool is missing and installing it needs root" >&2; exit 1; }
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk nginx >/dev/null
  fi
done
cargo build --release --locked -q -p idemkit --bin idemkit --example bench_upstream
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
TMP=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

UP=127.0.0.1:19000 NGX=127.0.0.1:19080 IDK=127.0.0.1:19081
"$TARGET_DIR/release/examples/bench_upstream" --listen "$UP" --work-ms 5 >"$TMP/upstream.log" 2>&1 &
PIDS+=($!)
mkdir -p "$TMP/nginx/logs"
cat >"$TMP/nginx/nginx.conf" <<EOF
worker_processes 2;
daemon off;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/logs/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  upstream api { server $UP; keepalive 64; }
  server {
    listen $NGX;
    location / {
      proxy_pass http://api;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
EOF
nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" &
PIDS+=($!)
cat >"$TMP/proxy.toml" <<EOF
listen = "$IDK"
upstream = "http://$UP"
[store]
path = "$TMP/proxy.redb"
[tenant]
fixed = "bench"
[[routes]]
method = "POST"
path = "/accounts/{account}/withdraw"
operation = "accounts.withdraw"
effect = "external"
EOF
"$TARGET_DIR/release/idemkit" proxy --config "$TMP/proxy.toml" >"$TMP/proxy.log" 2>&1 &
PIDS+=($!)
cat >"$TMP/replay.lua" <<'EOF'
wrk.method = "POST"
wrk.body = '{"amount":10}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Idempotency-Key"] = "bench-replay-1"
EOF

python3 - "$UP" "$NGX" "$IDK" <<'EOF'
import sys, time, urllib.request
deadline = time.time() + 30
for addr in sys.argv[1:]:
    while True:
        try:
            urllib.request.urlopen(f"http://{addr}/ping", timeout=1).read()
            break
        except Exception:
            if time.time() > deadline:
                sys.exit(f"bench-proxy: {addr} did not come up")
            time.sleep(0.1)
# The replay key's first request: it executes once, before the measurement.
req = urllib.request.Request(f"http://{sys.argv[3]}/accounts/A/withdraw", data=b'{"amount":10}', method="POST",
                             headers={"Content-Type": "application/json", "Idempotency-Key": "bench-replay-1"})
assert urllib.request.urlopen(req, timeout=5).status == 201
EOF

run() { # name route url [script]
  local name=$1 route=$2 url=$3 script=${4:-}
  local args=(-t2 "-c$CONNS" "-d${SECS}s" --latency)
  [ -n "$script" ] && args+=(-s "$script")
  echo "== $name $route" >&2
  { echo "### $name|$route"; wrk "${args[@]}" "$url"; } >>"$TMP/wrk.txt"
}
STARTED=$(date -u +%FT%TZ)
for _round in $(seq "$ROUNDS"); do
  for target in "direct $UP" "nginx $NGX" "idemkit $IDK"; do
    set -- $target
    run "$1" "GET /ping" "http://$2/ping"
    run "$1" "POST /accounts/A/withdraw (one key)" "http://$2/accounts/A/withdraw" "$TMP/replay.lua"
  done
done

python3 - "$TMP/wrk.txt" "$OUT" "$STARTED" "$SECS" "$CONNS" "$ROUNDS" <<'EOF'
import json, sys
sys.path.insert(0, "benches")
from wrk_parse import medians, runs as parse
text, out, started, secs, conns, rounds = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
runs = []
for r in parse(text, "route"):
    lat = r.pop("latency_us")
    del r["socket_errors"]
    r.update({"p50_ms": lat["50"] / 1000, "p99_ms": lat["99"] / 1000})
    runs.append(r)
rows = medians(runs, "route", ["rps", "p50_ms", "p99_ms"])
json.dump({"started": started, "wrk": f"-t2 -c{conns} -d{secs}s --latency", "work_ms": 5, "rounds": rounds,
           "nginx": "Debian nginx 1.22, worker_processes 2, keepalive upstream", "rows": rows},
          open(out, "w"), indent=1)
print(json.dumps([{k: v for k, v in r.items() if k != "rounds"} for r in rows], indent=1))
EOF
