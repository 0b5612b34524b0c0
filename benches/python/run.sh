#!/usr/bin/env bash
# The Python package's figures of BENCHMARKS.md: builds the extension in release mode
# into tools/python/ (scripts/python-venv.sh makes the venv), writes the benchmark
# bodies with idemkit-bodies, and runs benches/python/bench.py.
#
#   benches/python/run.sh OUT.json   # BENCH_SECONDS (2) per figure
#
# The next `maturin develop` (scripts/test-all.sh) puts the dev build back.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: benches/python/run.sh OUT.json}
scripts/python-venv.sh
VIRTUAL_ENV="$PWD/tools/python" tools/python/bin/maturin develop --release --manifest-path python/Cargo.toml --locked --quiet
cargo build --release --locked -q -p idemkit-benches --bin idemkit-bodies
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
BODIES=$(mktemp -d)
trap 'rm -rf "$BODIES"' EXIT
"$TARGET_DIR/release/idemkit-bodies" --out "$BODIES" >/dev/null
tools/python/bin/python benches/python/bench.py "$BODIES" >"$OUT"
