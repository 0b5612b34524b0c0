#!/usr/bin/env bash
# Runs every test of idemkit: formatting, lints, the Rust test suites (unit, property,
# corpus, differential, concurrency, crash, fault) and a short fuzz smoke run.
#
# It installs what a fresh machine lacks (npm packages for the differential tests,
# cargo-fuzz, schemathesis, the Python package's test requirements (tools/python/),
# Chromium and playwright-core for the operator console's browser test,
# and for the npm package in wasm/: the wasm32 target, wasm-bindgen-cli, binaryen,
# better-sqlite3, Miniflare/workerd, Deno and Bun), so a newcomer and CI run exactly this:
#
#     scripts/test-all.sh
#
# The PostgreSQL backend's tests need a server: scripts/with-postgres.sh starts a
# throwaway one (installing PostgreSQL with apt-get when it is missing), runs them,
# and stops it. If it cannot start, this script fails: they are never skipped.
#
# Environment:
#   FUZZ_SECONDS   seconds per fuzz target in the smoke run (default 20; 0 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-20}
started=$SECONDS
step() { printf '\n==> %s (%ss)\n' "$*" "$((SECONDS - started))"; }

step "checking toolchain"
for tool in cargo node npm; do
  command -v "$tool" >/dev/null || { echo "test-all: '$tool' is required but not on PATH" >&2; exit 1; }
done
cargo --version
node --version
# The README's quick starts run their curl lines as written (`--json`: curl 7.82+).
if ! curl --help all 2>/dev/null | grep -q -- '--json'; then
  echo "test-all: curl with --json not found; installing curl with apt-get" >&2
  [ "$(id -u)" = 0 ] || { echo "test-all: FAIL: installing curl needs root" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null
fi

step "installing npm packages for the differential tests"
for project in store/tests/npm; do
  if [ -f "$project/package.json" ]; then
    npm ci --prefix "$project" --no-audit --no-fund --loglevel=error
  fi
done

# The MCP SDKs (v1 and v2 servers and clients), the MCP conformance suite and
# Node 22 (npm `node`, which the suite needs) for store/tests/proxy/mcp_*.rs, pinned in
# store/tests/mcp/package-lock.json; installed (about 15 s) only when the lock
# changed since the last install.
step "MCP SDKs and conformance suite (store/tests/mcp)"
if ! cmp -s store/tests/mcp/package-lock.json store/tests/mcp/node_modules/.idemkit-installed-lock; then
  npm ci --prefix store/tests/mcp --no-audit --no-fund --loglevel=error
  cp store/tests/mcp/package-lock.json store/tests/mcp/node_modules/.idemkit-installed-lock
fi

# The Python SDK's client (PyPI `mcp`, pinned in store/tests/mcp/requirements.txt)
# for store/tests/proxy/mcp_sdk_end_to_end.rs, in a venv; installed (about 11 s) only
# when the pins changed since the last install.
step "MCP Python client (tools/mcp-python)"
if ! cmp -s store/tests/mcp/requirements.txt tools/mcp-python/requirements.txt; then
  command -v python3 >/dev/null || { echo "test-all: 'python3' is required but not on PATH" >&2; exit 1; }
  python3 -m venv tools/mcp-python
  tools/mcp-python/bin/pip install --quiet --disable-pip-version-check -r store/tests/mcp/requirements.txt
  cp store/tests/mcp/requirements.txt tools/mcp-python/requirements.txt
fi

# schemathesis (PyPI) for store/tests/appointments/openapi_schemathesis.rs, pinned
# there too; installed into a venv only when that version is missing.
SCHEMATHESIS_VERSION=4.32.5
step "schemathesis $SCHEMATHESIS_VERSION (tools/schemathesis)"
if ! tools/schemathesis/bin/schemathesis --version 2>/dev/null | grep -qF "$SCHEMATHESIS_VERSION"; then
  command -v python3 >/dev/null || { echo "test-all: 'python3' is required but not on PATH" >&2; exit 1; }
  python3 -m venv tools/schemathesis
  tools/schemathesis/bin/pip install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi

# The operator console's browser test (store/tests/proxy/operator_console.rs) drives
# Debian's chromium headless with playwright-core (pinned in
# store/tests/console/package-lock.json); each is installed only when missing.
step "Chromium and playwright-core (store/tests/console)"
if ! command -v chromium >/dev/null; then
  echo "test-all: chromium not found; installing chromium with apt-get" >&2
  [ "$(id -u)" = 0 ] || { echo "test-all: FAIL: installing chromium needs root" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if ! cmp -s store/tests/console/package-lock.json store/tests/console/node_modules/.idemkit-installed-lock; then
  npm ci --prefix store/tests/console --no-audit --no-fund --loglevel=error
  cp store/tests/console/package-lock.json store/tests/console/node_modules/.idemkit-installed-lock
fi

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy (warnings denied)"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings

step "lean builds: idemkit-core without std, idemkit without the CLI"
# core is #![no_std]; its default `std` feature only gives blake3 run-time SIMD
# detection. An embedder's `idemkit --no-default-features` pulls no CLI crates.
cargo clippy -p idemkit-core -p idemkit --no-default-features --locked -- -D warnings
if cargo tree -p idemkit --no-default-features -e normal --locked | grep -E '(clap|ureq|httpdate) v'; then
  echo "test-all: FAIL: idemkit --no-default-features depends on a CLI crate (above)" >&2
  exit 1
fi

step "cargo test"
cargo test --workspace --locked

# --- PostgreSQL -------------------------------------------------------------------
# The feature-gated PostgreSQL tests panic without IDEMKIT_TEST_POSTGRES_URL, so
# they run only here, against a server of their own.
step "PostgreSQL backend (throwaway server)"
# postgres::fleet_skewed_clock runs one instance under libfaketime (package faketime).
if [ -z "$(ls /usr/lib/*/faketime/libfaketimeMT.so.1 /usr/lib/faketime/libfaketimeMT.so.1 2>/dev/null)" ]; then
  echo "test-all: libfaketime not found; installing faketime with apt-get" >&2
  [ "$(id -u)" = 0 ] || { echo "test-all: FAIL: installing faketime needs root" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime >/dev/null
fi
# Resolved over the whole workspace with the one feature added, as the run above was,
# so this build reuses that run's dependencies (and the tests' example build reuses it).
pg_features=(--workspace --features idemkit/postgres,idemkit-benches/postgres --locked)
# store/tests/postgres.rs, then store/tests/postgres_serial.rs (the tests that stop
# the server or time it, one at a time): cargo runs the two binaries one after another.
scripts/with-postgres.sh cargo test "${pg_features[@]}" \
  --test postgres --test postgres_serial -- --nocapture
# idemkit-loadgen --backend postgres (ignored by the workspace run above: no server there).
scripts/with-postgres.sh cargo test "${pg_features[@]}" --test postgres_loadgen -- --ignored
# -----------------------------------------------------------------------------------

# --- Python: the idemkit-rs package (python/) ---------------------------------------
# The pinned test requirements (python/requirements-test.txt: maturin, pytest, httpx,
# starlette, uvicorn, fastapi, langgraph, openai-agents) go into tools/python/ when the
# pins changed (scripts/python-venv.sh); maturin builds the extension in the dev
# profile into that venv; pytest runs python/tests (the CLI and the appointments
# example the workspace tests built are what they compare with and run against) under
# a throwaway PostgreSQL server, as the ASGI scenarios run on redb and on PostgreSQL.
step "Python package (python/): build the extension, run pytest"
scripts/python-venv.sh
VIRTUAL_ENV="$PWD/tools/python" tools/python/bin/maturin develop --manifest-path python/Cargo.toml --locked --quiet
scripts/with-postgres.sh tools/python/bin/python -m pytest python/tests -q -p no:cacheprovider
# -----------------------------------------------------------------------------------

step "doc tests and docs build without warnings"
# idemkit/testing: the conformance suite's and fault injection's pages too (cargo
# test builds them through idemkit's dev-dependency on itself; cargo doc does not).
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet --features idemkit/testing

# --- JavaScript: the `idemkit` npm package (wasm/) ---------------------------------
# Fails loudly if anything cannot be installed or any runtime cannot run; nothing
# is skipped. The build installs what is missing: the npm dev dependencies (npm ci:
# binaryen for wasm-opt, better-sqlite3 built from source, miniflare with workerd,
# deno, bun, canonicalize), the wasm32-unknown-unknown target, and wasm-bindgen-cli
# at exactly the version wasm/Cargo.toml pins (cargo install, about 3.5 minutes).
# Measured on the 2-core machine while three other builds ran: npm ci with an empty
# cache 378 s (better-sqlite3 compiles from source), cargo install wasm-bindgen-cli
# about 29 min (3.5 min on an idle machine), first wasm32 release build 7 min,
# wasm-opt 20 s (cached afterwards), the JavaScript tests about 2 min.
step "wasm: build the npm package (npm --prefix wasm run build)"
npm --prefix wasm run build

# It installs (npm ci, about 17 s, only when wasm/test/agents/package-lock.json changed)
# the MCP SDKs, the AI SDK, OpenAI Agents JS and esbuild for the MCP server and agent
# tool wrappers' tests.
step "wasm: JavaScript tests in Node, workerd (Miniflare), Deno and Bun"
npm --prefix wasm test
# ------------------------------------------------------------------------------------

if [ "$FUZZ_SECONDS" != 0 ]; then
  step "fuzz smoke (${FUZZ_SECONDS}s per target)"
  scripts/fuzz-smoke.sh "$FUZZ_SECONDS"
fi

step "all tests passed"
