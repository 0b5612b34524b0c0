#!/usr/bin/env bash
# What the idempotency layer adds to a request (BENCHMARKS.md), with wrk (Debian):
#
#   - bare:   POST /bare on idemkit-http-overhead: an axum handler, no layer;
#   - layer-fresh / layer-replay: POST /layered, the SAME handler behind
#     IdempotencyLayer on the in-memory adapter, with a unique Idempotency-Key
#     per request (fresh.lua) and with one key answered before the measurement
#     (replay.lua);
#   - appointments-fresh / appointments-replay: POST /appointments of the
#     reference service (`--example appointments`, redb files in a temp dir).
#
#   benches/http/run.sh OUT.json   # BENCH_SECONDS (5), BENCH_CONNECTIONS (16), BENCH_ROUNDS (3)
#
# Each target runs twice per round: `wrk -t1 -c1 --latency` (one request at a
# time: the latency a request sees, without queueing; its p50 gives the µs the
# layer adds) and `wrk -t2 -cBENCH_CONNECTIONS` (throughput). The targets take
# turns, BENCH_ROUNDS times; each figure is the median of its rounds (on a
# shared 2-core machine one round of one target can be 1.5x another's with the
# same code), and every round is kept in the JSON. Smoke: BENCH_SECONDS=1 BENCH_ROUNDS=1.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: benches/http/run.sh OUT.json}
SECS=${BENCH_SECONDS:-5}
CONNS=${BENCH_CONNECTIONS:-16}
ROUNDS=${BENCH_ROUNDS:-3}
if ! command -v wrk >/dev/null; then
  [ "$(id -u)" = 0 ] || { echo "bench-http: wrk is missing and installing it needs root" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi
cargo build --release --locked -q -p idemkit-benches --bin idemkit-http-overhead
cargo build --release --locked -q -p idemkit --example appointments
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
HERE=benches/http
TMP=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

OVH=127.0.0.1:19200 APPT=127.0.0.1:19201
"$TARGET_DIR/release/idemkit-http-overhead" --listen "$OVH" >"$TMP/overhead.log" 2>&1 &
PIDS+=($!)
"$TARGET_DIR/release/examples/appointments" --listen "$APPT" --db "$TMP/appointments.redb" \
  --provider-db "$TMP/provider.redb" >"$TMP/appointments.log" 2>&1 &
PIDS+=($!)

python3 - "$OVH" "$APPT" <<'EOF'
import sys, time, urllib.request
ovh, appt = sys.argv[1:]
body = b'{"customer_id":"bench","slot_id":"replay-slot-1"}'
headers = {"Content-Type": "application/json", "Authorization": "Bearer bench", "Idempotency-Key": "bench-replay-1"}
deadline = time.time() + 60
for url, data in ((f"http://{ovh}/ping", None), (f"http://{appt}/appointments", None)):
    while True:
        try:
            urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": "Bearer bench"}), timeout=1).read()
            break
        except Exception:
            if time.time() > deadline:
                sys.exit(f"bench-http: {url} did not come up")
            time.sleep(0.1)
# The replay key's first request on each service: it executes once, before the
# measurement; the second must already be a replay.
for url in (f"http://{ovh}/layered", f"http://{appt}/appointments"):
    for attempt in range(2):
        r = urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST", headers=headers), timeout=10)
        assert 200 <= r.status < 300, (url, r.status)
        assert (r.headers.get("Idempotent-Replayed") == "true") == (attempt == 1), (url, attempt)
EOF

run() { # name mode url script [prefix]
  local name=$1 mode=$2 url=$3 script=$4 prefix=${5:-}
  local args
  if [ "$mode" = latency ]; then args=(-t1 -c1); else args=(-t2 "-c$CONNS"); fi
  args+=("-d${SECS}s" --latency -s "$script" "$url")
  [ -n "$prefix" ] && args+=(-- "$prefix-$mode")
  echo "== $name $mode" >&2
  { echo "### $name|$mode"; wrk "${args[@]}"; } >>"$TMP/wrk.txt"
}
STARTED=$(date -u +%FT%TZ)
NONCE=$(date +%s%N)
for round in $(seq "$ROUNDS"); do
  for mode in latency throughput; do
    run bare "$mode" "http://$OVH/bare" "$HERE/fresh.lua" "b$NONCE-$round"
    run layer-fresh "$mode" "http://$OVH/layered" "$HERE/fresh.lua" "l$NONCE-$round"
    run layer-replay "$mode" "http://$OVH/layered" "$HERE/replay.lua"
    run appointments-fresh "$mode" "http://$APPT/appointments" "$HERE/fresh.lua" "a$NONCE-$round"
    run appointments-replay "$mode" "http://$APPT/appointments" "$HERE/replay.lua"
  done
done

python3 - "$TMP/wrk.txt" "$OUT" "$STARTED" "$SECS" "$CONNS" "$ROUNDS" "$(git rev-parse --short HEAD)" <<'EOF'
import json, sys
sys.path.insert(0, "benches")
from wrk_parse import medians, runs as parse
text, out, started, secs, conns, rounds, commit = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]), sys.argv[7]
runs = []
for r in parse(text, "mode"):
    lat = r.pop("latency_us")
    r.update({"p50_us": lat["50"], "p90_us": lat["90"], "p99_us": lat["99"]})
    runs.append(r)
rows = medians(runs, "mode", ["rps", "p50_us", "p90_us", "p99_us"])
json.dump({"started": started, "commit": commit, "rounds": rounds, "seconds": float(secs),
           "wrk": {"latency": f"-t1 -c1 -d{secs}s --latency", "throughput": f"-t2 -c{conns} -d{secs}s --latency"},
           "connections": int(conns),
           "servers": {"overhead": "idemkit-http-overhead (tokio 2 workers, in-memory adapter)",
                       "appointments": "cargo run --release --example appointments (redb files in a temp dir)"},
           "rows": rows}, open(out, "w"), indent=1)
print(json.dumps([{k: v for k, v in r.items() if k != "rounds"} for r in rows], indent=1))
EOF
