#!/usr/bin/env bash
# `idemkit canonicalize` as a user runs it (the whole process: start, read, parse,
# emit, write) against `jq -cS .` on the same 3 MiB API document, the two run in
# turn so the machine's drift falls on both, and its peak memory against the input.
#
#   benches/canonicalize/run.sh OUT.json
#
# Knobs: BENCH_RUNS (pairs, default 41), BENCH_BYTES (document size, default 3 MiB).
# Needs jq and GNU time (installed with apt-get when run as root and missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: benches/canonicalize/run.sh OUT.json}
RUNS=${BENCH_RUNS:-41}
BYTES=${BENCH_BYTES:-3145728}

if ! command -v jq >/dev/null || [ ! -x /usr/bin/time ]; then
  [ "$(id -u)" = 0 ] || { echo "canonicalize bench: jq or /usr/bin/time is missing" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq time >/dev/null
fi
cargo build --release --locked -q -p idemkit --bin idemkit -p idemkit-benches --bin idemkit-bodies
DOC=$(mktemp -d)/api.json
trap 'rm -rf "$(dirname "$DOC")"' EXIT
target/release/idemkit-bodies --write api "$BYTES" "$DOC" >/dev/null
python3 benches/canonicalize/measure.py --runs "$RUNS" --document "$DOC" \
  --idemkit target/release/idemkit >"$OUT"
