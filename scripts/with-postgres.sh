#!/usr/bin/env bash
# Starts a throwaway PostgreSQL 15 server on a free port of 127.0.0.1, exports
# IDEMKIT_TEST_POSTGRES_URL, runs the given command (default: the PostgreSQL tests),
# and stops the server and deletes its data even when the command fails.
#
#     scripts/with-postgres.sh                      # the PostgreSQL tests (and the loadgen's)
#     scripts/with-postgres.sh cargo test -p idemkit --features postgres --test postgres -- conformance
#
# If PostgreSQL is not installed it is installed with apt-get (CI runs as root).
# If the server cannot be started the script FAILS with the reason: the PostgreSQL
# tests are never skipped silently.
#
# IDEMKIT_PG_SERVER_OPTIONS (default empty) adds server options, e.g.
# "-c max_connections=200" for benches/postgres/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

PG_BIN=${PG_BIN:-}
if [ -z "$PG_BIN" ]; then
  PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
fi
if [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ]; then
  echo "with-postgres: initdb not found; installing postgresql with apt-get" >&2
  if [ "$(id -u)" != 0 ]; then
    echo "with-postgres: FAIL: PostgreSQL is missing and installing it needs root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
  PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi

# initdb refuses to run as root: run the server as the postgres user when root.
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
  as_pg() { runuser -u postgres -- "$@"; }
else
  as_pg() { "$@"; }
fi

DATA=$(mktemp -d /tmp/idemkit-pg.XXXXXX)
if [ "$(id -u)" = 0 ]; then chown postgres "$DATA"; fi
chmod 700 "$DATA"

# A free port: ask the kernel for one, then let pg_ctl fail loudly if it raced.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null \
  || echo $((20000 + RANDOM % 20000)))

stop() {
  as_pg "$PG_BIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$DATA"
}
trap stop EXIT

as_pg "$PG_BIN/initdb" -D "$DATA" -A trust -U postgres >"$DATA.initdb.log" 2>&1 || {
  cat "$DATA.initdb.log" >&2; rm -f "$DATA.initdb.log"
  echo "with-postgres: FAIL: initdb failed" >&2; exit 1
}
rm -f "$DATA.initdb.log"
if ! as_pg "$PG_BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DATA ${IDEMKIT_PG_SERVER_OPTIONS:-}" start >/dev/null; then
  cat "$DATA/server.log" >&2 || true
  echo "with-postgres: FAIL: PostgreSQL did not start on 127.0.0.1:$PORT" >&2
  exit 1
fi

export IDEMKIT_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$PORT/postgres"
# For the restart test: how to stop and start this very server.
export IDEMKIT_TEST_PG_CTL="$PG_BIN/pg_ctl"
export IDEMKIT_TEST_PG_DATA="$DATA"
export IDEMKIT_TEST_PG_PORT="$PORT"
if [ "$(id -u)" = 0 ]; then export IDEMKIT_TEST_PG_RUNAS=postgres; fi
echo "with-postgres: PostgreSQL $("$PG_BIN/pg_ctl" --version | awk '{print $NF}') on 127.0.0.1:$PORT"

if [ $# -eq 0 ]; then
  cargo test -p idemkit-benches --features postgres --locked --test postgres_loadgen -- --ignored
  set -- cargo test -p idemkit --features postgres --locked \
    --test postgres --test postgres_serial
fi
"$@"
