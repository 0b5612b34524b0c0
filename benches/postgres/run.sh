#!/usr/bin/env bash
# PostgreSQL: idemkit against what a team would hand-write.
#
#   benches/postgres/run.sh OUT.json   # BENCH_SECONDS (5), BENCH_PG_CLIENTS ("1 16 64"), BENCH_ROUNDS (1)
#   IDEMKIT_LOADGEN=path/to/idemkit-loadgen   # run that binary instead of building one
#   LOADGEN_FLAGS=--no-validate              # extra loadgen flags
#
# One throwaway server (scripts/with-postgres.sh, max_connections=200,
# pg_stat_statements), and at each client count N, taking turns (the order
# alternates between points and rounds):
#
#   - idemkit: `idemkit-loadgen --backend postgres --clients N`: claim + complete
#     of a new key per op through `Store::from(PostgresAdapter)`, pool of N, a fresh
#     schema per point;
#   - pgbench: `pgbench -n -f claim_complete.sql -c N -j 2 -T S -M prepared`: the
#     same work as a hand-written INSERT … ON CONFLICT DO NOTHING RETURNING then
#     UPDATE on schema.sql's table, a new key per transaction, a fresh table per point;
#   - pgbench on idemkit's statements: the same pgbench command on the script
#     `idemkit-loadgen --pgbench-script` writes, the adapter's own claim and
#     completion on the adapter's own (freshly made) tables. Beside the other two
#     it splits the gap: what idemkit's statements and schema cost the server
#     (this ÷ the hand-written table), and what idemkit's client side costs
#     (idemkit ÷ this).
#
# Every side runs each statement in autocommit (two commits per op: the claim
# must be durable before the work runs, the completion after it), on the same
# server with the same settings (fsync and synchronous_commit on).
#
# Per point: ops/s, p50/p99 (pgbench from its per-transaction log); from the
# server: statements per op (pg_stat_statements), commits per op
# (pg_stat_database) and the top statements; and from the machine (cpu_of.py,
# over the whole command): the client's CPU per op, the whole machine's busy
# CPU per op and the cores busy, which say whether the shared cores bound the
# rate. The JSON also gives, per N and round, idemkit ÷ each pgbench side and
# the one pgbench side ÷ the other.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: benches/postgres/run.sh OUT.json}
OUT=$(realpath -m "$OUT")
HERE=benches/postgres

if [ -z "${IDEMKIT_PG_BENCH_INNER:-}" ]; then
  command -v pgbench >/dev/null || { echo "bench-postgres: pgbench not found (package postgresql-client)" >&2; exit 1; }
  if [ -z "${IDEMKIT_LOADGEN:-}" ]; then # a given binary (e.g. an earlier build) is run as it is
    cargo build --release --locked -q -p idemkit-benches --features postgres --bin idemkit-loadgen
    TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
    export IDEMKIT_LOADGEN="$TARGET_DIR/release/idemkit-loadgen"
  fi
  export IDEMKIT_PG_SERVER_OPTIONS="-c max_connections=200 -c shared_preload_libraries=pg_stat_statements ${IDEMKIT_PG_SERVER_OPTIONS:-}"
  export IDEMKIT_PG_BENCH_INNER=1
  exec scripts/with-postgres.sh "$0" "$OUT"
fi

URL=${IDEMKIT_TEST_POSTGRES_URL:?}
SECS=${BENCH_SECONDS:-5}
CLIENTS=${BENCH_PG_CLIENTS:-1 16 64}
ROUNDS=${BENCH_ROUNDS:-1}
TMP=$(mktemp -d)
CPU_OF=$PWD/$HERE/cpu_of.py # what each side's command costs the machine
trap 'rm -rf "$TMP"' EXIT
# pgbench's per-transaction logs are written in the working directory's terms;
# the server runs as another user, the logs are ours.
psql() { command psql -X -q -v ON_ERROR_STOP=1 -At "$URL" "$@"; }
psql -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"

# server_stats FILE: commits so far, and pg_stat_statements since the last reset.
server_stats() {
  sleep 1.2 # backends flush their transaction counts at most once a second
  psql -c "SELECT pg_stat_clear_snapshot()" >/dev/null
  psql -c "SELECT json_build_object(
      'xact_commit', (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
      'statements', (SELECT coalesce(json_agg(s ORDER BY s.calls DESC), '[]') FROM (
          SELECT calls, left(regexp_replace(query, '\s+', ' ', 'g'), 160) AS query
          FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND query !~* 'pg_stat|pg_database|^(DROP|CREATE|BEGIN|COMMIT)'
          ORDER BY calls DESC LIMIT 12) s))" >"$1"
}
commits() { psql -c "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"; }
reset_stats() { psql -c "SELECT pg_stat_statements_reset()" >/dev/null; sleep 1.2; psql -c "SELECT pg_stat_clear_snapshot()" >/dev/null; commits >"$1"; }

run_idemkit() { # N ROUND
  local f="$TMP/idemkit-$1-$2"
  reset_stats "$f.before"
  python3 "$CPU_OF" "$f.cpu" -- \
    "$IDEMKIT_LOADGEN" --backend postgres --postgres "$URL" --clients "$1" --seconds "$SECS" ${LOADGEN_FLAGS:-} >"$f.json"
  server_stats "$f.server"
  echo "  idemkit  N=$1: $(cat "$f.json")" >&2
}
pgbench_point() { # SCRIPT PREFIX N ROUND LABEL: one pgbench point on a fresh table
  local f="$TMP/$2-$3-$4"
  reset_stats "$f.before"
  mkdir -p "$f.logs"
  (cd "$f.logs" && python3 "$CPU_OF" "$f.cpu" -- pgbench -n -f "$1" -c "$3" -j 2 -T "$SECS" -M prepared -l "$URL") >"$f.out" 2>"$f.err" \
    || { cat "$f.err" "$f.out" >&2; exit 1; }
  server_stats "$f.server"
  echo "  $5  N=$3: $(grep -E '^tps' "$f.out")" >&2
}
run_pgbench() { # N ROUND: the hand-written table, made afresh
  psql -f "$HERE/schema.sql" >/dev/null
  pgbench_point "$PWD/$HERE/claim_complete.sql" pgbench "$1" "$2" pgbench
}
run_pgbench_same() { # N ROUND: the adapter's own statements on its own tables, made afresh
  "$IDEMKIT_LOADGEN" --backend postgres --postgres "$URL" --pgbench-script "$TMP/same.sql" --pgbench-schema idemkit_pgbench
  pgbench_point "$TMP/same.sql" same "$1" "$2" "pgbench on idemkit's statements"
}

started=$(date -u +%FT%TZ)
i=0
for round in $(seq 1 "$ROUNDS"); do
  for n in $CLIENTS; do
    echo "bench-postgres: round $round, $n clients, $SECS s each" >&2
    if [ $((i % 2)) = 0 ]; then run_idemkit "$n" "$round"; run_pgbench_same "$n" "$round"; run_pgbench "$n" "$round";
    else run_pgbench "$n" "$round"; run_pgbench_same "$n" "$round"; run_idemkit "$n" "$round"; fi
    i=$((i + 1))
  done
done

python3 - "$TMP" "$OUT" "$SECS" "$ROUNDS" "$started" "$(pgbench --version)" "$(psql -c 'SHOW server_version')" $CLIENTS <<'PY'
import json, os, pathlib, statistics, sys
tmp, out, secs, rounds, started, pgbench_version, server_version = sys.argv[1:8]
clients = [int(c) for c in sys.argv[8:]]
tmp = pathlib.Path(tmp)

def quantile(sorted_us, q):
    if not sorted_us:
        return None
    rank = max(1, -(-len(sorted_us) * q // 1))  # nearest rank
    return float(sorted_us[int(rank) - 1])

def machine(prefix, ops):
    path = tmp / f"{prefix}.cpu"
    if not path.exists() or not ops:
        return {}
    m = json.loads(path.read_text())
    return {"client_cpu_us_per_op": round(m["client_cpu_s"] / ops * 1e6, 1),
            "machine_us_per_op": round(m["machine_busy_s"] / ops * 1e6, 1),
            "cores_busy": round(m["machine_busy_s"] / m["wall_s"], 2) if m["wall_s"] else None}

def server(prefix, ops):
    before = int((tmp / f"{prefix}.before").read_text().strip())
    s = json.loads((tmp / f"{prefix}.server").read_text())
    stmts = s["statements"]
    total = sum(x["calls"] for x in stmts if x["calls"] * 10 >= ops)
    return {
        "statements_per_op": round(total / ops, 3) if ops else None,
        "commits_per_op": round((int(s["xact_commit"]) - before) / ops, 3) if ops else None,
        "top_statements": [{"calls_per_op": round(x["calls"] / ops, 3) if ops else None, "query": x["query"]} for x in stmts[:6]],
    }

points, ratios = [], []
for r in range(1, int(rounds) + 1):
    for n in clients:
        lg = json.loads((tmp / f"idemkit-{n}-{r}.json").read_text())
        idk = {"side": "idemkit", "clients": n, "round": r, "ops": lg["ops"], "seconds": lg["seconds"],
               "ops_per_s": lg["ops_per_s"], "p50_us": lg["p50_us"], "p99_us": lg["p99_us"],
               "validate_connections": lg.get("validate_connections"), **server(f"idemkit-{n}-{r}", lg["ops"]),
               **machine(f"idemkit-{n}-{r}", lg["ops"])}
        def pgbench(prefix, side):
            text = (tmp / f"{prefix}-{n}-{r}.out").read_text()
            fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
            ops = int(fields["number of transactions actually processed"].split("/")[0].strip())
            tps = next(float(l.split()[2]) for l in text.splitlines() if l.startswith("tps ="))
            lat = sorted(int(l.split()[2]) for f in (tmp / f"{prefix}-{n}-{r}.logs").iterdir() for l in f.read_text().splitlines())
            return {"side": side, "clients": n, "round": r, "ops": ops, "seconds": float(secs),
                    "ops_per_s": round(tps, 2), "p50_us": quantile(lat, 0.50), "p99_us": quantile(lat, 0.99),
                    **server(f"{prefix}-{n}-{r}", ops), **machine(f"{prefix}-{n}-{r}", ops)}
        pgb, same = pgbench("pgbench", "pgbench"), pgbench("same", "pgbench_same_statements")
        points += [idk, same, pgb]
        ratios.append({"clients": n, "round": r, "idemkit_over_pgbench": round(idk["ops_per_s"] / pgb["ops_per_s"], 3),
                       "idemkit_over_same": round(idk["ops_per_s"] / same["ops_per_s"], 3),
                       "same_over_pgbench": round(same["ops_per_s"] / pgb["ops_per_s"], 3)})
summary = []
for n in clients:
    of = lambda name: [x[name] for x in ratios if x["clients"] == n]
    pick = lambda side: statistics.median(p["ops_per_s"] for p in points if p["clients"] == n and p["side"] == side)
    rs, same = of("idemkit_over_pgbench"), of("idemkit_over_same")
    summary.append({"clients": n, "idemkit_ops_per_s": pick("idemkit"), "pgbench_ops_per_s": pick("pgbench"),
                    "pgbench_same_statements_ops_per_s": pick("pgbench_same_statements"),
                    "ratio": round(statistics.median(rs), 3), "ratios": rs,
                    "ratio_same_statements": round(statistics.median(same), 3), "ratios_same_statements": same,
                    "statements_cost": round(statistics.median(of("same_over_pgbench")), 3)})
doc = {"started": started, "seconds_per_point": float(secs), "rounds": int(rounds), "clients": clients,
       "server": server_version, "pgbench": pgbench_version, "cpus": os.cpu_count(),
       "commands": {"idemkit": "idemkit-loadgen --backend postgres --postgres URL --clients N --seconds S",
                    "pgbench": "pgbench -n -f benches/postgres/claim_complete.sql -c N -j 2 -T S -M prepared -l URL",
                    "pgbench_same_statements": "idemkit-loadgen --backend postgres --postgres URL --pgbench-script same.sql; "
                                               "pgbench -n -f same.sql -c N -j 2 -T S -M prepared -l URL"},
       "transactions": "autocommit on both sides: each statement its own commit",
       "points": points, "ratios": summary}
pathlib.Path(out).write_text(json.dumps(doc, indent=1) + "\n")
print(f"bench-postgres: wrote {out}", file=sys.stderr)
PY
