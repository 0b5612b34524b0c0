//! `idemkit-loadgen`: N client threads of claim + complete against one backend.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
#[cfg(feature = "postgres")]
use idemkit::adapters::postgres::{PgOptions, PostgresAdapter};
use idemkit::adapters::redb::{CommitStats, RedbAdapter};
use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey, Scope};

use crate::fsync::{Mode, RawLog};
use crate::stats::{Latencies, round2};

/// What the clients run against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// One shared `idemkit::store::Store` (a clone per thread): claim, then
    /// `ExecutionGuard::complete`.
    Redb,
    /// SQLite (bundled), WAL, `synchronous=FULL`, one connection per thread:
    /// `INSERT … ON CONFLICT DO NOTHING RETURNING`, then `UPDATE`.
    Sqlite,
    /// The disk's floor: each thread appends 128 bytes to its own file and fdatasyncs.
    Fsync,
    /// One shared `idemkit::store::Store` over `PostgresAdapter` (`--postgres URL`), the
    /// pool sized to the clients, in a fresh schema dropped after the run.
    Postgres,
}

impl Backend {
    /// The name printed in results.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Backend::Redb => "redb",
            Backend::Sqlite => "sqlite",
            Backend::Fsync => "fsync",
            Backend::Postgres => "postgres",
        }
    }
}

/// Which keys the clients claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Keys {
    /// Every claim a new key: every operation executes and completes.
    Unique,
    /// All clients fight over a small key set (`--hot-keys`): most claims replay
    /// or find the key in flight; they still count as operations.
    Hot,
    /// Half the clients (the even ones) write unique keys while the other half
    /// replay the hot set: how long a replay takes while writes commit.
    Mixed,
}

impl Keys {
    fn name(self) -> &'static str {
        match self {
            Keys::Unique => "unique",
            Keys::Hot => "hot",
            Keys::Mixed => "mixed",
        }
    }

    /// The hot set client `client` claims from, or `None` for unique keys.
    fn hot_set_of(self, client: usize, hot_keys: u32) -> Option<u32> {
        match self {
            Keys::Unique => None,
            Keys::Hot => Some(hot_keys),
            Keys::Mixed => (client % 2 == 1).then_some(hot_keys),
        }
    }
}

/// Command-line arguments of `idemkit-loadgen`.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "idemkit-loadgen",
    about = "N threads of claim + complete; prints one JSON line"
)]
pub struct Args {
    /// The backend to load.
    #[arg(long, value_enum)]
    pub backend: Backend,
    /// Client threads (1–4096).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub clients: u32,
    /// How long to run, in seconds (may be fractional, > 0).
    #[arg(long, default_value_t = 5.0, value_parser = parse_seconds, allow_hyphen_values = true)]
    pub seconds: f64,
    /// Directory for the database files (a fresh subdirectory is made in it and
    /// removed after); default: the system temp directory.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Unique keys, a small hot set, or half of each (`mixed`).
    #[arg(long, value_enum, default_value_t = Keys::Unique)]
    pub keys: Keys,
    /// Size of the hot key set.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub hot_keys: u32,
    /// The PostgreSQL server of `--backend postgres` (`postgres://user@host:port/db`).
    #[arg(long, env = "IDEMKIT_TEST_POSTGRES_URL", hide_env_values = true)]
    pub postgres: Option<String>,
    /// `--backend postgres`: the connection pool's size (`PgOptions::pool_size`);
    /// default: one connection per client. With fewer, the clients beyond the
    /// pool wait for a connection, as they would behind a store left at the
    /// default of 16.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub pool_size: Option<u32>,
    /// `--backend postgres`: skip the pool's check of a connection (one empty
    /// query) before each adapter call (`PgOptions::validate_connections = false`).
    #[arg(long)]
    pub no_validate: bool,
    /// `--backend postgres`: check a connection at every checkout, as before
    /// idle-aware checks (`PgOptions::validate_after_idle = 0`), to measure what
    /// they save.
    #[arg(long, conflicts_with = "no_validate")]
    pub validate_every_checkout: bool,
    /// `--backend postgres`: run no load; instead make `--pgbench-schema` afresh
    /// (the adapter's tables, empty) and write to FILE a pgbench script of the
    /// statements one operation sends there (a new key's claim, then its
    /// completion), for pgbench to run beside the adapter.
    #[arg(long, value_name = "FILE")]
    pub pgbench_script: Option<PathBuf>,
    /// The schema `--pgbench-script` makes (dropped first if it exists).
    #[arg(long, default_value = "idemkit_pgbench", requires = "pgbench_script")]
    pub pgbench_schema: String,
}

impl Args {
    /// The PostgreSQL pool's size: `--pool-size`, else one connection per client.
    pub fn postgres_pool_size(&self) -> u32 {
        self.pool_size.unwrap_or(self.clients)
    }
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if v.is_finite() && v > 0.0 && v <= 86_400.0 {
        Ok(v)
    } else {
        Err(format!("`{s}`: seconds must be > 0 and at most 86400"))
    }
}

/// What one run measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// The arguments.
    pub args: Args,
    /// Operations finished (a claim + complete, or any other claim answer).
    pub ops: u64,
    /// Claims that executed (and were completed).
    pub executed: u64,
    /// Claims answered Replay.
    pub replayed: u64,
    /// Claims answered InFlight (or another final answer).
    pub other: u64,
    /// Wall time of the measured phase.
    pub elapsed: Duration,
    /// Per-operation latencies.
    pub latencies: Latencies,
    /// The latencies of the claims answered Replay alone.
    pub replay_latencies: Latencies,
    /// How the redb store grouped its writes, and where each group's time went.
    pub group_commit: Option<CommitStats>,
}

impl Report {
    /// The one JSON line: `backend, clients, ops, seconds, ops_per_s, p50_us, p99_us`,
    /// then the breakdown.
    pub fn to_json(&mut self) -> serde_json::Value {
        let secs = self.elapsed.as_secs_f64();
        serde_json::json!({
            "backend": self.args.backend.name(),
            "clients": self.args.clients,
            "ops": self.ops,
            "seconds": round2(secs),
            "ops_per_s": round2(if secs > 0.0 { self.ops as f64 / secs } else { 0.0 }),
            "p50_us": self.latencies.quantile_us(0.50),
            "p99_us": self.latencies.quantile_us(0.99),
            "keys": self.args.keys.name(),
            "executed": self.executed,
            "replayed": self.replayed,
            "other": self.other,
            "replay_p50_us": self.replay_latencies.quantile_us(0.50),
            "replay_p99_us": self.replay_latencies.quantile_us(0.99),
            "validate_connections": (self.args.backend == Backend::Postgres)
                .then_some(!self.args.no_validate),
            "validate_every_checkout": (self.args.backend == Backend::Postgres)
                .then_some(self.args.validate_every_checkout),
            "pool_size": (self.args.backend == Backend::Postgres)
                .then(|| self.args.postgres_pool_size()),
            "group_commit": self.group_commit.as_ref().map(group_commit_json),
        })
    }
}

/// The store's group commit over the run: how many writes each group held,
/// and the µs one group spent in each step on its leader (the steps run one
/// after the other, so their sum bounds the groups a second).
fn group_commit_json(stats: &CommitStats) -> serde_json::Value {
    let groups = stats.transactions.max(1) as f64;
    let per_group = |spent: Duration| round2(spent.as_secs_f64() * 1e6 / groups);
    serde_json::json!({
        "operations": stats.operations,
        "transactions": stats.transactions,
        "commits": stats.commits,
        "logged": stats.logged,
        "carried": stats.carried,
        "largest_group": stats.largest_group,
        "operations_per_transaction": round2(stats.operations as f64 / groups),
        "us_per_transaction": {
            "beginning": per_group(stats.beginning),
            "running": per_group(stats.running),
            "committing": per_group(stats.committing),
            "logging": per_group(stats.logging),
            "answering": per_group(stats.answering),
        },
    })
}

#[derive(Default)]
struct ThreadResult {
    executed: u64,
    replayed: u64,
    other: u64,
    lat: Latencies,
    replay_lat: Latencies,
}

/// Errors of a load run.
#[derive(Debug)]
pub struct LoadError(pub String);

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LoadError {}

pub(crate) fn err(context: &str, e: impl std::fmt::Display) -> LoadError {
    LoadError(format!("{context}: {e}"))
}

/// The fingerprint every loadgen request carries (the body is the same).
fn fingerprint() -> Fingerprint {
    Fingerprint::from_bytes(*blake3::hash(b"{\"slot\":\"10:00\"}").as_bytes())
}

const RESPONSE: &[u8] = b"{\"id\":\"appt_000001\",\"status\":\"confirmed\"}";

/// A fresh temporary directory (removed when dropped) in `dir`, created if
/// missing, or in the system's temp directory.
pub(crate) fn temp_dir_in(
    dir: Option<&Path>,
    prefix: &str,
) -> Result<tempfile::TempDir, LoadError> {
    match dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| err("--dir", e))?;
            tempfile::Builder::new().prefix(prefix).tempdir_in(d)
        }
        None => tempfile::Builder::new().prefix(prefix).tempdir(),
    }
    .map_err(|e| err("temp dir", e))
}

/// Runs the load described by `args`.
///
/// # Errors
///
/// The backend could not be set up, or an operation failed.
pub fn run(args: &Args) -> Result<Report, LoadError> {
    let base = temp_dir_in(args.dir.as_deref(), "idemkit-loadgen-")?;
    let dir = base.path();
    let clients = args.clients as usize;
    let duration = Duration::from_secs_f64(args.seconds);
    let barrier = Arc::new(Barrier::new(clients + 1));

    let mut handles = Vec::with_capacity(clients);
    let mut pg_schema = None;
    let mut redb = None;
    match args.backend {
        Backend::Postgres | Backend::Redb => {
            // The same clients over either store: only the store differs.
            let store = if args.backend == Backend::Postgres {
                let (store, run) = postgres_store(args)?;
                pg_schema = Some(run);
                store
            } else {
                // `idemkit::open`, keeping the adapter for its commit statistics
                // (a fresh file: no orphans to settle).
                let adapter = Arc::new(
                    RedbAdapter::open(dir.join("loadgen.redb")).map_err(|e| err("redb open", e))?,
                );
                redb = Some(Arc::clone(&adapter));
                Store::new(adapter)
            };
            for c in 0..clients {
                let store = store.clone();
                let barrier = Arc::clone(&barrier);
                let hot = args.keys.hot_set_of(c, args.hot_keys);
                handles.push(std::thread::spawn(move || {
                    store_client(&store, c, hot, &barrier, duration)
                }));
            }
        }
        Backend::Sqlite => {
            let path = dir.join("loadgen.sqlite");
            sqlite_setup(&path)?;
            for c in 0..clients {
                let conn = sqlite_connect(&path)?;
                let barrier = Arc::clone(&barrier);
                let hot = args.keys.hot_set_of(c, args.hot_keys);
                handles.push(std::thread::spawn(move || {
                    sqlite_client(&conn, c, hot, &barrier, duration)
                }));
            }
        }
        Backend::Fsync => {
            for c in 0..clients {
                let mut log = RawLog::create(&dir.join(format!("raw-{c}.log")), Mode::Append)
                    .map_err(|e| err("raw log", e))?;
                let barrier = Arc::clone(&barrier);
                handles.push(std::thread::spawn(move || {
                    fsync_client(&mut log, &barrier, duration)
                }));
            }
        }
    }
    barrier.wait();
    let start = Instant::now();
    let mut report = Report {
        args: args.clone(),
        ops: 0,
        executed: 0,
        replayed: 0,
        other: 0,
        elapsed: Duration::ZERO,
        latencies: Latencies::default(),
        replay_latencies: Latencies::default(),
        group_commit: None,
    };
    let mut first_error = None;
    for h in handles {
        match h.join() {
            Ok(Ok(r)) => {
                report.executed += r.executed;
                report.replayed += r.replayed;
                report.other += r.other;
                report.latencies.merge(r.lat);
                report.replay_latencies.merge(r.replay_lat);
            }
            Ok(Err(e)) => first_error = first_error.or(Some(e)),
            Err(_) => first_error = first_error.or(Some(LoadError("a client panicked".into()))),
        }
    }
    report.elapsed = start.elapsed();
    report.ops = report.executed + report.replayed + report.other;
    report.group_commit = redb.map(|adapter| adapter.commit_stats());
    #[cfg(not(feature = "postgres"))]
    let _: Option<PgRun> = pg_schema; // never Some: nothing to clean up
    #[cfg(feature = "postgres")]
    if let Some((pg, schema)) = pg_schema {
        let dropped = pg
            .connection()
            .map_err(|e| err("postgres", e))
            .and_then(|mut c| {
                c.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
                    .map_err(|e| err("postgres drop schema", e))
            });
        first_error = first_error.or(dropped.err());
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(report)
}

fn key_for(client: usize, i: u64, hot: Option<u32>) -> String {
    match hot {
        Some(n) => format!(
            "hot-{}",
            i.wrapping_mul(2_654_435_761).wrapping_add(client as u64) % u64::from(n)
        ),
        None => format!("c{client}-{i}"),
    }
}

/// What every operation of the store clients claims and records.
pub(crate) struct LoadgenOp {
    pub(crate) scope: Scope,
    pub(crate) fingerprint: Fingerprint,
    pub(crate) policy: Policy,
    pub(crate) response: &'static [u8],
}

impl LoadgenOp {
    pub(crate) fn new() -> Result<LoadgenOp, LoadError> {
        Ok(LoadgenOp {
            scope: Scope::new("bench", "loadgen").map_err(|e| err("scope", e))?,
            fingerprint: fingerprint(),
            policy: Policy::default().with_effect(EffectKind::Local),
            response: RESPONSE,
        })
    }
}

/// `--pgbench-script FILE`: see [`Args::pgbench_script`].
///
/// # Errors
///
/// No `--postgres`, a build without PostgreSQL, or what
/// `pgbench::write_script` fails with.
pub fn write_pgbench_script(args: &Args, file: &Path) -> Result<(), LoadError> {
    let url = postgres_url(args)?;
    #[cfg(feature = "postgres")]
    return crate::pgbench::write_script(url, &args.pgbench_schema, file);
    #[cfg(not(feature = "postgres"))]
    {
        let _ = (url, file);
        Err(without_postgres())
    }
}

fn store_client(
    store: &Store,
    client: usize,
    hot: Option<u32>,
    barrier: &Barrier,
    duration: Duration,
) -> Result<ThreadResult, LoadError> {
    let LoadgenOp {
        scope,
        fingerprint: fp,
        policy,
        response,
    } = LoadgenOp::new()?;
    let owner = format!("client-{client}");
    let mut r = ThreadResult {
        lat: Latencies::with_capacity(1 << 14),
        ..ThreadResult::default()
    };
    barrier.wait();
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed() < duration {
        let key = IdempotencyKey::new(&key_for(client, i, hot)).map_err(|e| err("key", e))?;
        i += 1;
        let t = Instant::now();
        match store
            .claim(&scope, &key, fp, &owner, &policy)
            .map_err(|e| err("claim", e))?
        {
            Claim::Execute(guard) => {
                guard
                    .complete(StoredResponse::new(201, response.to_vec()))
                    .map_err(|e| err("complete", e))?;
                r.executed += 1;
            }
            Claim::Replay { .. } => {
                r.replayed += 1;
                r.replay_lat.record(t.elapsed());
            }
            _ => r.other += 1,
        }
        r.lat.record(t.elapsed());
    }
    Ok(r)
}

/// What a PostgreSQL run leaves to clean up: its store and the schema made for it.
#[cfg(feature = "postgres")]
type PgRun = (PostgresAdapter, String);
/// Without the `postgres` feature there is no PostgreSQL run.
#[cfg(not(feature = "postgres"))]
type PgRun = std::convert::Infallible;

fn postgres_url(args: &Args) -> Result<&str, LoadError> {
    args.postgres.as_deref().ok_or_else(|| {
        LoadError("--backend postgres needs --postgres URL (or IDEMKIT_TEST_POSTGRES_URL)".into())
    })
}

/// Without the `postgres` feature (kept off by default, so that building the
/// workspace's tests does not turn on idemkit's PostgreSQL tests, which need a
/// server): says how to build it.
#[cfg(not(feature = "postgres"))]
fn postgres_store(args: &Args) -> Result<(Store, PgRun), LoadError> {
    postgres_url(args)?;
    Err(without_postgres())
}

/// What a build without the `postgres` feature answers a PostgreSQL run.
#[cfg(not(feature = "postgres"))]
fn without_postgres() -> LoadError {
    LoadError(
        "this idemkit-loadgen was built without PostgreSQL: \
         cargo build --release -p idemkit-benches --features postgres"
            .into(),
    )
}

/// A migrated `PostgresAdapter` in a fresh schema, its pool sized to the clients
/// unless `--pool-size` says otherwise.
#[cfg(feature = "postgres")]
fn postgres_store(args: &Args) -> Result<(Store, PgRun), LoadError> {
    let url = postgres_url(args)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let schema = format!("loadgen_{}_{nanos}", std::process::id());
    let options = PgOptions {
        schema: Some(schema.clone()),
        pool_size: args.postgres_pool_size(),
        connect_timeout: Duration::from_secs(10),
        validate_connections: !args.no_validate,
        validate_after_idle: if args.validate_every_checkout {
            Duration::ZERO
        } else {
            PgOptions::default().validate_after_idle
        },
        ..PgOptions::default()
    };
    let pg = PostgresAdapter::connect_with(url, options).map_err(|e| err("postgres connect", e))?;
    Ok((Store::from(pg.clone()), (pg, schema)))
}

/// Creates the SQLite database: WAL, and the records table.
///
/// # Errors
///
/// SQLite refused.
pub fn sqlite_setup(path: &Path) -> Result<(), LoadError> {
    let conn = sqlite_connect(path)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS idem (
            scope TEXT NOT NULL,
            key TEXT NOT NULL,
            fingerprint BLOB NOT NULL,
            state TEXT NOT NULL,
            response BLOB,
            PRIMARY KEY (scope, key)
        ) WITHOUT ROWID;",
    )
    .map_err(|e| err("sqlite schema", e))
}

/// One connection: WAL, `synchronous=FULL`, a 10 s busy timeout.
///
/// # Errors
///
/// SQLite refused.
pub fn sqlite_connect(path: &Path) -> Result<rusqlite::Connection, LoadError> {
    let conn = rusqlite::Connection::open(path).map_err(|e| err("sqlite open", e))?;
    conn.busy_timeout(Duration::from_secs(10))
        .map_err(|e| err("sqlite busy_timeout", e))?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(|e| err("sqlite WAL", e))?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| err("sqlite synchronous", e))?;
    Ok(conn)
}

fn sqlite_client(
    conn: &rusqlite::Connection,
    client: usize,
    hot: Option<u32>,
    barrier: &Barrier,
    duration: Duration,
) -> Result<ThreadResult, LoadError> {
    let fp = fingerprint();
    let mut claim = conn
        .prepare(
            "INSERT INTO idem (scope, key, fingerprint, state, response) \
             VALUES ('bench/loadgen', ?1, ?2, 'running', NULL) \
             ON CONFLICT DO NOTHING RETURNING key",
        )
        .map_err(|e| err("sqlite prepare", e))?;
    let mut complete = conn
        .prepare(
            "UPDATE idem SET state = 'completed', response = ?2 \
             WHERE scope = 'bench/loadgen' AND key = ?1 AND state = 'running'",
        )
        .map_err(|e| err("sqlite prepare", e))?;
    let mut existing = conn
        .prepare("SELECT state, response FROM idem WHERE scope = 'bench/loadgen' AND key = ?1")
        .map_err(|e| err("sqlite prepare", e))?;
    let mut r = ThreadResult {
        lat: Latencies::with_capacity(1 << 14),
        ..ThreadResult::default()
    };
    barrier.wait();
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed() < duration {
        let key = key_for(client, i, hot);
        i += 1;
        let t = Instant::now();
        let claimed = claim
            .query(rusqlite::params![key, fp.as_bytes().as_slice()])
            .and_then(|mut rows| rows.next().map(|row| row.is_some()))
            .map_err(|e| err("sqlite claim", e))?;
        if claimed {
            complete
                .execute(rusqlite::params![key, RESPONSE])
                .map_err(|e| err("sqlite complete", e))?;
            r.executed += 1;
        } else {
            // The answer a real store would give: replay a completed record.
            let state: String = existing
                .query_row([&key], |row| row.get(0))
                .map_err(|e| err("sqlite read", e))?;
            if state == "completed" {
                r.replayed += 1;
                r.replay_lat.record(t.elapsed());
            } else {
                r.other += 1;
            }
        }
        r.lat.record(t.elapsed());
    }
    Ok(r)
}

fn fsync_client(
    log: &mut RawLog,
    barrier: &Barrier,
    duration: Duration,
) -> Result<ThreadResult, LoadError> {
    let mut r = ThreadResult {
        lat: Latencies::with_capacity(1 << 14),
        ..ThreadResult::default()
    };
    barrier.wait();
    let start = Instant::now();
    while start.elapsed() < duration {
        let t = Instant::now();
        log.write_sync().map_err(|e| err("fdatasync", e))?;
        r.lat.record(t.elapsed());
        r.executed += 1;
    }
    Ok(r)
}
