#!/usr/bin/env bash
# The operator console's first load as an operator sees it: `idemkit console` over
# a redb store holding 50 Unknown records (one page) and 200 completed ones, a fresh
# headless Chromium logged in, the page reloaded with the cache disabled; the bytes
# transferred, the requests, the first contentful paint and the moment the record
# table exists, median of BENCH_RUNS loads (default 5), written as JSON to OUT.
#
#   benches/console/run.sh OUT.json
#
# Needs Debian's chromium and store/tests/console's playwright-core (scripts/test-all.sh
# installs both).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: benches/console/run.sh OUT.json}
RUNS=${BENCH_RUNS:-5}

command -v chromium >/dev/null || { echo "console bench: chromium is missing" >&2; exit 1; }
[ -d store/tests/console/node_modules/playwright-core ] \
  || npm ci --prefix store/tests/console --no-audit --no-fund --loglevel=error
cargo build --release --locked -q -p idemkit --bin idemkit
IDEMKIT=target/release/idemkit
DIR=$(mktemp -d)
CONSOLE_PID=
cleanup() {
  [ -n "$CONSOLE_PID" ] && kill "$CONSOLE_PID" 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT

# Unknown records the way a batch job leaves them: a command that failed after it
# may have acted (`--effect external`, the default, marks such a run unknown).
for i in $(seq 1 50); do
  "$IDEMKIT" exec --db "$DIR/ops.redb" --tenant "tenant-$((i % 5))" --operation invoice.send \
    --key "inv-$i" -- false >/dev/null 2>&1 || true
done
for i in $(seq 1 200); do
  "$IDEMKIT" exec --db "$DIR/ops.redb" --tenant "tenant-$((i % 5))" --operation invoice.send \
    --key "done-$i" -- true >/dev/null 2>&1
done

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$DIR/token"
"$IDEMKIT" console --db "$DIR/ops.redb" --listen 127.0.0.1:0 --token-file "$DIR/token" \
  >"$DIR/console.out" 2>"$DIR/console.err" &
CONSOLE_PID=$!
for _ in $(seq 1 100); do
  grep -q "http://" "$DIR/console.out" 2>/dev/null && break
  sleep 0.1
done
URL=$(grep -o "http://[0-9.:]*" "$DIR/console.out" | head -n 1)
[ -n "$URL" ] || { echo "console bench: idemkit console did not start" >&2; cat "$DIR/console.err" >&2; exit 1; }

MEASURED=$(MODE=measure RUNS="$RUNS" CONSOLE_URL="$URL" ADMIN_TOKEN=$(cat "$DIR/token") \
  node store/tests/console/browser.mjs | tail -n 1)
ASSET_BYTES=$(cat store/src/bin/idemkit/console/assets/* | wc -c)
python3 - "$OUT" "$MEASURED" "$ASSET_BYTES" "$(chromium --version 2>/dev/null | head -n 1)" <<'PY'
import datetime, json, sys
out, measured, asset_bytes, browser = sys.argv[1:]
doc = json.loads(measured)
doc.update({
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%MZ"),
    "asset_bytes": int(asset_bytes),
    "browser": browser.strip(),
    "records": {"unknown": 50, "completed": 200},
})
json.dump(doc, open(out, "w"), indent=1)
PY
