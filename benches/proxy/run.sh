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
import json, re, statistics, sys
text, out, started, secs, conns, rounds = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
def ms(v):
    n, unit = re.match(r"([\d.]+)(us|ms|s)", v).groups()
    return float(n) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
runs = []
for block in text.split("### ")[1:]:
    head, body = block.split("\n", 1)
    target, route = head.split("|")
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", body, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", body)
    runs.append({
        "target": target, "route": route,
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", body).group(1)),
        "p50_ms": ms(lat["50"]), "p99_ms": ms(lat["99"]),
        "requests": int(re.search(r"(\d+) requests in", body).group(1)),
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
    })
rows = []
for key in dict.fromkeys((r["target"], r["route"]) for r in runs):
    mine = [r for r in runs if (r["target"], r["route"]) == key]
    med = lambda f: statistics.median(r[f] for r in mine)
    rows.append({"target": key[0], "route": key[1], "rps": med("rps"), "p50_ms": med("p50_ms"),
                 "p99_ms": med("p99_ms"), "requests": sum(r["requests"] for r in mine),
                 "non_2xx": sum(r["non_2xx"] for r in mine), "rounds": mine})
json.dump({"started": started, "wrk": f"-t2 -c{conns} -d{secs}s --latency", "work_ms": 5, "rounds": rounds,
           "nginx": "Debian nginx 1.22, worker_processes 2, keepalive upstream", "rows": rows},
          open(out, "w"), indent=1)
print(json.dumps([{k: v for k, v in r.items() if k != "rounds"} for r in rows], indent=1))
EOF
