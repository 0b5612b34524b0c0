#!/usr/bin/env bash
# Runs every benchmark figure of BENCHMARKS.md in sequence, writes the raw results
# to benches/results/*.json, then regenerates BENCHMARKS.md and
# benches/results/chart.svg (benches/report.py).
#
#   scripts/bench-all.sh                        # the full run (run it on a quiet machine)
#   IDEMKIT_BENCH_SMOKE=1 scripts/bench-all.sh  # a few minutes, tiny sizes: checks it all runs
#
# Besides cargo, node and npm it uses Debian's valgrind, PostgreSQL + pgbench, wrk
# and nginx (each script installs what it misses with apt-get when run as root);
# a figure whose tool is missing is listed in benches/results/skipped.txt.
#
# Knobs: IDEMKIT_BENCH_RECORDS (big store, default 10000000), IDEMKIT_BENCH_DIR (the disk measured, default target/bench-tmp),
# IDEMKIT_BENCH_SECONDS (per loadgen point, default 5), IDEMKIT_BENCH_CLIENTS (default "1 4 16 64"),
# IDEMKIT_BENCH_LOADGEN_ROUNDS (the loadgen points take turns this many times, default 3; each row the median),
# IDEMKIT_BENCH_CACHE (filled stores kept between runs, default target/bench-cache),
# IDEMKIT_BENCH_OUT (default benches/results), IDEMKIT_BENCH_MD (default BENCHMARKS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

SMOKE=${IDEMKIT_BENCH_SMOKE:-0}
if [ "$SMOKE" = 1 ]; then
  RECORDS=${IDEMKIT_BENCH_RECORDS:-200000}
  SECONDS_PER=${IDEMKIT_BENCH_SECONDS:-1}
  LOADGEN_ROUNDS=${IDEMKIT_BENCH_LOADGEN_ROUNDS:-1}
  CLIENTS=${IDEMKIT_BENCH_CLIENTS:-"1 4 16 64"}
  CRIT=(--warm-up-time 0.2 --measurement-time 0.5 --sample-size 10)
  DURABLE_OPS=300 SCALE_OPS=300 GC_RECORDS=20000 GC_BASE=1 WASM_SECONDS=0.3
else
  # 10M records: the fill writes them with Store::import (about 45 s here, once; cached).
  RECORDS=${IDEMKIT_BENCH_RECORDS:-10000000}
  SECONDS_PER=${IDEMKIT_BENCH_SECONDS:-5}
  LOADGEN_ROUNDS=${IDEMKIT_BENCH_LOADGEN_ROUNDS:-3}
  CLIENTS=${IDEMKIT_BENCH_CLIENTS:-"1 4 16 64"}
  CRIT=(--warm-up-time 0.5 --measurement-time 2)
  DURABLE_OPS=2000 SCALE_OPS=2000 GC_RECORDS=500000 GC_BASE=3 WASM_SECONDS=2
fi
DIR=${IDEMKIT_BENCH_DIR:-$ROOT/target/bench-tmp}
CACHE=${IDEMKIT_BENCH_CACHE:-$ROOT/target/bench-cache}
OUT=${IDEMKIT_BENCH_OUT:-$ROOT/benches/results}
MD=${IDEMKIT_BENCH_MD:-$ROOT/BENCHMARKS.md}
mkdir -p "$DIR" "$OUT"
rm -f "$OUT"/*.json "$OUT"/skipped.txt
START=$(date +%s)
step() { printf '\n== %s (%ss elapsed)\n' "$*" "$(($(date +%s) - START))" >&2; }

step "machine"
python3 benches/report.py machine "$DIR" "$OUT/machine.json"

step "build"
cargo build --release --locked -p idemkit-benches --features postgres --bins
cargo bench --locked -p idemkit-benches --no-run
BIN=$ROOT/target/release
"$BIN/idemkit-bodies" >"$OUT/bodies.json"

step "criterion: fingerprint throughput and the claim decision"
rm -rf target/criterion/json_* target/criterion/machine_*
cargo bench --locked -p idemkit-benches --bench fingerprint -- "${CRIT[@]}"
cargo bench --locked -p idemkit-benches --bench machine -- "${CRIT[@]}"
python3 benches/report.py criterion target/criterion "$OUT/criterion.json"

step "durable claim + complete vs raw fdatasync"
"$BIN/idemkit-latency" --dir "$DIR" durable --ops "$DURABLE_OPS" >"$OUT/durable.json"

step "loadgen ($LOADGEN_ROUNDS rounds)"
# Every point once per round, the points taking turns: a slow minute of a shared
# machine falls on one round of each, and each ratio pairs two rates of one round.
: >"$OUT/loadgen.jsonl"
TOP=$(echo "$CLIENTS" | tr ' ' '\n' | sort -n | tail -1)
for round in $(seq "$LOADGEN_ROUNDS"); do
  echo "-- loadgen round $round of $LOADGEN_ROUNDS" >&2
  for clients in $CLIENTS; do
    for backend in fsync redb sqlite; do
      "$BIN/idemkit-loadgen" --backend "$backend" --clients "$clients" --seconds "$SECONDS_PER" \
        --dir "$DIR" | tee -a "$OUT/loadgen.jsonl" >&2
    done
  done
  for keys in hot mixed; do
    for backend in redb sqlite; do
      "$BIN/idemkit-loadgen" --backend "$backend" --clients "$TOP" --seconds "$SECONDS_PER" \
        --dir "$DIR" --keys "$keys" | tee -a "$OUT/loadgen.jsonl" >&2
    done
  done
done
python3 benches/report.py loadgen "$OUT/loadgen.jsonl" "$OUT/loadgen.json"
rm "$OUT/loadgen.jsonl"

step "claim latency with 10 thousand and $RECORDS records (the big store filled once, cached in $CACHE)"
"$BIN/idemkit-latency" --dir "$DIR" scale --records 10000 --records "$RECORDS" --ops "$SCALE_OPS" \
  --cache "$CACHE" >"$OUT/scale.json"

step "GC while claims continue"
"$BIN/idemkit-latency" --dir "$DIR" gc --records "$GC_RECORDS" --baseline-seconds "$GC_BASE" >"$OUT/gc.json"

step "wasm fingerprint in Node"
if command -v node >/dev/null && [ -f wasm/pkg/package.json ] && [ -d wasm/node_modules/canonicalize ]; then
  BENCH_SECONDS=$WASM_SECONDS node wasm/bench/fingerprint.mjs >"$OUT/wasm.json"
elif command -v npm >/dev/null && [ "${IDEMKIT_BENCH_BUILD_WASM:-1}" = 1 ] \
  && (npm --prefix wasm ci && npm --prefix wasm run build) >&2; then
  BENCH_SECONDS=$WASM_SECONDS node wasm/bench/fingerprint.mjs >"$OUT/wasm.json"
else
  echo "wasm: no node/npm or the package could not be built (npm --prefix wasm run build)" >>"$OUT/skipped.txt"
fi

step "instructions per claim + complete (callgrind)"
if [ "$SMOKE" = 1 ]; then CALLGRIND_OPS=256; else CALLGRIND_OPS=4000; fi
if ! BENCH_OPS=$CALLGRIND_OPS benches/callgrind/run.sh "$OUT/instructions.json"; then
  echo "instructions: benches/callgrind/run.sh failed (valgrind comes from Debian)" >>"$OUT/skipped.txt"
fi

step "PostgreSQL: idemkit-loadgen vs pgbench (same server, same run)"
if [ "$SMOKE" = 1 ]; then PG_SECONDS=1 PG_ROUNDS=1; else PG_SECONDS=5 PG_ROUNDS=3; fi
# run.sh builds its own loadgen with the postgres feature: every `cargo bench`
# above rebuilt the package's binaries without it.
if ! BENCH_SECONDS=$PG_SECONDS BENCH_ROUNDS=$PG_ROUNDS \
  benches/postgres/run.sh "$OUT/postgres.json" >&2; then
  echo "postgres: benches/postgres/run.sh failed (PostgreSQL and pgbench come from Debian)" >>"$OUT/skipped.txt"
fi

step "what the idempotency layer adds to a request (wrk)"
if [ "$SMOKE" = 1 ]; then HTTP_SECONDS=1 HTTP_ROUNDS=1; else HTTP_SECONDS=5 HTTP_ROUNDS=3; fi
if ! BENCH_SECONDS=$HTTP_SECONDS BENCH_ROUNDS=$HTTP_ROUNDS benches/http/run.sh "$OUT/http.json" >&2; then
  echo "http: benches/http/run.sh failed (wrk comes from Debian)" >>"$OUT/skipped.txt"
fi

step "the npm package vs @node-idempotency/core (Node)"
if command -v node >/dev/null && [ -f wasm/pkg/package.json ] \
  && { [ -d wasm/bench/node_modules/@node-idempotency/core ] || npm --prefix wasm/bench ci >&2; } \
  && BENCH_SECONDS=$WASM_SECONDS node wasm/bench/overhead.mjs >"$OUT/npm.json"; then
  :
else
  rm -f "$OUT/npm.json"
  echo "npm: wasm/bench/overhead.mjs did not run (needs the built package: npm --prefix wasm run build)" >>"$OUT/skipped.txt"
fi

# The same script on Node 22 (the node@22 package of store/tests/mcp, which the
# test command installs for the MCP conformance suite): what of the figures above
# is the Node release's. The targets stay the machine's own Node's.
step "the npm package vs @node-idempotency/core (Node 22)"
NODE22=store/tests/mcp/node_modules/.bin/node
if [ -f "$OUT/npm.json" ] \
  && { [ -x "$NODE22" ] || npm --prefix store/tests/mcp ci >&2; } \
  && BENCH_SECONDS=$WASM_SECONDS "$NODE22" wasm/bench/overhead.mjs >"$OUT/npm_node22.json"; then
  :
else
  rm -f "$OUT/npm_node22.json"
  echo "npm_node22: wasm/bench/overhead.mjs did not run on store/tests/mcp's Node 22 (npm --prefix store/tests/mcp ci)" >>"$OUT/skipped.txt"
fi

step "what the npm package's MCP server and agent tool wrappers add to a tool call (Node)"
if command -v node >/dev/null && [ -f wasm/pkg/package.json ] \
  && { [ -d wasm/bench/node_modules/@modelcontextprotocol/server ] || npm --prefix wasm/bench ci >&2; } \
  && BENCH_SECONDS=$WASM_SECONDS node wasm/bench/mcp-wrapper.mjs >"$OUT/npm_mcp.json"; then
  :
else
  rm -f "$OUT/npm_mcp.json"
  echo "npm_mcp: wasm/bench/mcp-wrapper.mjs did not run (needs the built package: npm --prefix wasm run build)" >>"$OUT/skipped.txt"
fi

step "idemkit proxy vs nginx under wrk"
if [ "$SMOKE" = 1 ]; then PROXY_SECONDS=1; else PROXY_SECONDS=5; fi
if ! BENCH_SECONDS=$PROXY_SECONDS benches/proxy/run.sh "$OUT/proxy.json" >/dev/null; then
  echo "proxy: benches/proxy/run.sh failed (wrk and nginx come from Debian)" >>"$OUT/skipped.txt"
fi

step "idemkit mcp in front of an MCP server"
if ! BENCH_SECONDS=$PROXY_SECONDS benches/mcp/run.sh "$OUT/mcp.json" >/dev/null; then
  echo "mcp: benches/mcp/run.sh failed (it needs Node and npm for store/tests/mcp)" >>"$OUT/skipped.txt"
fi

step "the Python package: fingerprint and the ASGI middleware"
if [ "$SMOKE" = 1 ]; then PY_SECONDS=0.3; else PY_SECONDS=2; fi
if ! BENCH_SECONDS=$PY_SECONDS benches/python/run.sh "$OUT/python.json"; then
  rm -f "$OUT/python.json"
  echo "python: benches/python/run.sh failed (it needs python3 >= 3.9 with venv)" >>"$OUT/skipped.txt"
fi

step "idemkit canonicalize vs jq on a 3 MiB API document"
if [ "$SMOKE" = 1 ]; then CANON_RUNS=3; else CANON_RUNS=41; fi
if ! BENCH_RUNS=$CANON_RUNS benches/canonicalize/run.sh "$OUT/canonicalize.json"; then
  rm -f "$OUT/canonicalize.json"
  echo "canonicalize: benches/canonicalize/run.sh failed (it needs jq and GNU time from Debian)" >>"$OUT/skipped.txt"
fi

step "the operator console's first load in headless Chromium"
if [ "$SMOKE" = 1 ]; then CONSOLE_RUNS=1; else CONSOLE_RUNS=5; fi
if ! BENCH_RUNS=$CONSOLE_RUNS benches/console/run.sh "$OUT/console.json"; then
  rm -f "$OUT/console.json"
  echo "console: benches/console/run.sh failed (it needs Debian's chromium and store/tests/console's playwright-core)" >>"$OUT/skipped.txt"
fi

END=$(date +%s)
python3 - "$OUT/meta.json" "$START" "$END" "$SMOKE" "$RECORDS" "$SECONDS_PER" "$CLIENTS" <<'EOF'
import json, sys, datetime
out, start, end, smoke, records, secs, clients = sys.argv[1:]
iso = lambda t: datetime.datetime.fromtimestamp(int(t), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
json.dump({"smoke": smoke == "1", "started": iso(start), "finished": iso(end),
           "runtime_s": int(end) - int(start),
           "settings": {"records": int(records), "loadgen_seconds": float(secs), "clients": clients}},
          open(out, "w"), indent=1)
EOF
step "report"
python3 benches/report.py render "$OUT" --md "$MD" --svg "$OUT/chart.svg"
echo "wrote $MD and $OUT/chart.svg in $((END - START)) s" >&2
