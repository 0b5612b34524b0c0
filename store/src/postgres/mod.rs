//! The PostgreSQL store (feature `postgres`): for fleets that outgrew one machine.
//!
//! The same decisions as the redb store — `idemkit_core::machine` decides, this
//! module only applies — over one table (see the [`schema`](self) docs in
//! `schema.rs`):
//!
//! - **claim** is one `INSERT … ON CONFLICT DO NOTHING RETURNING`. On conflict the
//!   row is read and the core decides on it; a write (a takeover, a new attempt
//!   after Released) is an `UPDATE … WHERE version = $n`.
//! - **every transition** reads `(record, version)`, lets the core decide, and writes
//!   with `UPDATE … WHERE version = $n`. A writer that lost the race (0 rows) reads
//!   again and lets the core decide again, at most [`MAX_ATTEMPTS`] times.
//! - **serialization failures and deadlocks** (SQLSTATE 40001, 40P01) retry the
//!   whole read → decide → write, within the same bound.
//! - **time** is the database's: each read → decide → write reads `now` from
//!   PostgreSQL in the statement that reads the record (GC, the unresolved list
//!   and `stats` in one statement per batch), never from the calling node, so a
//!   fleet whose clocks disagree still agrees on every lease. See [`PgClock`].
//! - **a lost connection** is [`PgError::Unavailable`]: nothing is acknowledged, and
//!   the caller must not execute. Each statement runs in autocommit, so a statement
//!   the server committed is durable (`synchronous_commit` as the server has it).
//!
//! The pool is `r2d2` over the synchronous `postgres` driver, because
//! [`IdempotencyBackend`] is synchronous; async services call it from
//! `spawn_blocking`, as they do the redb store.

mod clock;
mod error;
mod schema;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use idemkit_core::machine::{
    self, ClaimOutcome, ClaimRequest, GcAction, Policy, RecoverGrant, Resolution, StepStart,
    TransitionError,
};
use idemkit_core::record::{
    EffectKind, FencingToken, Record, StateName, StoredResponse, UnknownReason,
};
use idemkit_core::{IdempotencyKey, LogRef, RequestFingerprint, Scope, UnixMillis};
use postgres::NoTls;
use postgres::types::ToSql;
use r2d2_postgres::PostgresConnectionManager;

pub use clock::PgClock;
pub use error::PgError;
pub use schema::SCHEMA_VERSION;

use crate::backend::{BackendError, IdempotencyBackend};
use crate::redb_store::{GcReport, ImportReport, ListedRecord, Stats};
use error::{Failure, classify, fail};
use schema::Sql;

/// How many times one read → decide → write is tried before
/// [`PgError::Contention`] (lost version races and serialization failures):
/// core's bound, the one every store (and the JavaScript adapters) uses.
pub use idemkit_core::machine::MAX_ATTEMPTS;

type Pool = r2d2::Pool<PostgresConnectionManager<NoTls>>;
type Conn = r2d2::PooledConnection<PostgresConnectionManager<NoTls>>;

/// How [`PgStore::connect_with`] treats the schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Migrations {
    /// Create or upgrade it (under an advisory lock, so instances may start together).
    #[default]
    Run,
    /// Only check it is at [`SCHEMA_VERSION`]: for teams that apply
    /// `idemkit migrate --print` themselves.
    CheckOnly,
}

/// Options of a [`PgStore`].
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// The PostgreSQL schema holding the tables; `None`: the connection's search path.
    pub schema: Option<String>,
    /// Connections in the pool (default 16).
    pub pool_size: u32,
    /// How long to wait for a connection (connect or pool) before
    /// [`PgError::Unavailable`] (default 2 s).
    pub connect_timeout: Duration,
    /// Whether to run or only check migrations (default: run).
    pub migrations: Migrations,
    /// Whether the pool checks a connection (one empty query) before handing it
    /// out (default: yes). Without it, after a server restart every stale pooled
    /// connection fails one operation with [`PgError::Unavailable`] before the pool
    /// replaces it; with it, that costs one round trip per operation.
    pub validate_connections: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            schema: None,
            pool_size: 16,
            connect_timeout: Duration::from_secs(2),
            migrations: Migrations::Run,
            validate_connections: true,
        }
    }
}

/// An idemkit store in PostgreSQL. Cheap to clone (clones share the pool).
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    sql: Arc<Sql>,
    clock: PgClock,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("records", &self.sql.records)
            .field("pool_size", &self.pool.max_size())
            .finish_non_exhaustive()
    }
}

/// A record with the version it was read at.
type Versioned = (Record, i64);

/// What one read of a record gives a decision: the database's time, the store's
/// token floor, and the record, if any.
struct ReadAt {
    now: UnixMillis,
    floor: u64,
    found: Option<Versioned>,
}

/// One attempt of a read → decide → write.
enum Step<T> {
    Done(T),
    /// The version moved or the server asked for a retry: decide again.
    Again,
}

impl PgStore {
    /// Connects to `url` (`postgres://user@host:port/db` or key=value form) with the
    /// default [`PgOptions`], running migrations.
    pub fn connect(url: &str) -> Result<PgStore, PgError> {
        PgStore::connect_with(url, PgOptions::default())
    }

    /// Connects to `url` with `options`. Fails with [`PgError::Unavailable`] when
    /// the server cannot be reached within `options.connect_timeout`.
    pub fn connect_with(url: &str, options: PgOptions) -> Result<PgStore, PgError> {
        let sql = Sql::new(options.schema.as_deref())?;
        let mut config = postgres::Config::from_str(url).map_err(|e| PgError::Config {
            detail: format!("bad PostgreSQL URL: {e}"),
        })?;
        config.connect_timeout(options.connect_timeout);
        config.application_name("idemkit");
        let manager = PostgresConnectionManager::new(config, NoTls);
        let pool = r2d2::Pool::builder()
            .max_size(options.pool_size.max(1))
            .min_idle(Some(0))
            .connection_timeout(options.connect_timeout)
            .test_on_check_out(options.validate_connections)
            .build_unchecked(manager);
        let store = PgStore {
            pool,
            sql: Arc::new(sql),
            clock: PgClock::database(),
        };
        {
            let mut conn = store.conn()?;
            match options.migrations {
                Migrations::Run => {
                    store.sql.migrate(&mut conn)?;
                }
                Migrations::CheckOnly => store.sql.check(&mut conn)?,
            }
        }
        Ok(store)
    }

    /// The SQL script that creates the schema (version [`SCHEMA_VERSION`]) in an
    /// empty database, for teams that run their own migrations.
    pub fn migration_script(schema: Option<&str>) -> Result<String, PgError> {
        Ok(Sql::new(schema)?.script())
    }

    /// Runs pending migrations; returns the schema version found before.
    pub fn migrate(&self) -> Result<u32, PgError> {
        let mut conn = self.conn()?;
        self.sql.migrate(&mut conn)
    }

    /// This store deciding by `clock`: the database's time plus a test offset
    /// ([`PgClock::advance`]), or the callers' virtual time for the conformance
    /// suite ([`PgClock::given_by_caller`]). The default is [`PgClock::database`].
    #[must_use]
    pub fn with_clock(mut self, clock: PgClock) -> PgStore {
        self.clock = clock;
        self
    }

    /// The current time by this store's clock: the database server's, plus the
    /// clock's offset (0 unless a test moved it).
    pub fn now(&self) -> Result<UnixMillis, PgError> {
        let mut conn = self.conn()?;
        self.decision_time(&mut conn, None)
    }

    /// `now` for a decision that reads no single record (GC, the unresolved
    /// list): one statement, answered by the database's clock.
    fn decision_time(
        &self,
        conn: &mut Conn,
        caller_now: Option<UnixMillis>,
    ) -> Result<UnixMillis, PgError> {
        let (given, offset) = self.clock.params(caller_now);
        let row = conn
            .query_one(
                &format!("SELECT {}", clock::now_sql(1, 2)),
                &[&given, &offset],
            )
            .map_err(|e| fail(&e))?;
        let now: i64 = row.try_get(0).map_err(|e| clock_unreadable(&e))?;
        Ok(clock::from_db(now))
    }

    fn conn(&self) -> Result<Conn, PgError> {
        Ok(self.pool.get()?)
    }

    /// Runs `attempt` until it is done, at most [`MAX_ATTEMPTS`] times.
    fn retrying<T>(
        &self,
        log_ref: Option<LogRef>,
        mut attempt: impl FnMut(&mut Conn) -> Result<Step<T>, PgError>,
    ) -> Result<T, PgError> {
        for n in 0..MAX_ATTEMPTS {
            let mut conn = self.conn()?;
            match attempt(&mut conn)? {
                Step::Done(answer) => return Ok(answer),
                Step::Again => {
                    if n > 2 {
                        // Sustained contention: let the other writers finish.
                        std::thread::sleep(Duration::from_millis(u64::from(n)));
                    }
                }
            }
        }
        Err(PgError::Contention {
            log_ref,
            attempts: MAX_ATTEMPTS,
        })
    }

    /// Reads `(record, version)` of `(scope, key)`.
    fn read(
        &self,
        conn: &mut Conn,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Step<Option<(Record, i64)>>, PgError> {
        let row = match conn.query_opt(
            &self.sql.select,
            &[&scope.tenant(), &scope.operation(), &key.as_str()],
        ) {
            Ok(row) => row,
            Err(e) => return retry_or_fail(&e),
        };
        let Some(row) = row else {
            return Ok(Step::Done(None));
        };
        let log_ref = Some(scope.record_id(key).log_ref());
        let bytes: Vec<u8> = row.try_get(0).map_err(|e| PgError::CorruptRecord {
            log_ref,
            detail: e.to_string(),
        })?;
        let version: i64 = row.try_get(1).map_err(|e| PgError::CorruptRecord {
            log_ref,
            detail: e.to_string(),
        })?;
        let record = Record::decode(&bytes).map_err(|e| PgError::CorruptRecord {
            log_ref,
            detail: e.to_string(),
        })?;
        Ok(Step::Done(Some((record, version))))
    }

    /// Reads `now` by this store's clock and `(record, version)` of `(scope, key)`,
    /// in one statement: the time every decision on the record takes.
    fn read_at(
        &self,
        conn: &mut Conn,
        scope: &Scope,
        key: &IdempotencyKey,
        caller_now: Option<UnixMillis>,
    ) -> Result<Step<ReadAt>, PgError> {
        let (given, offset) = self.clock.params(caller_now);
        let row = match conn.query_one(
            &self.sql.select_at,
            &[
                &scope.tenant(),
                &scope.operation(),
                &key.as_str(),
                &given,
                &offset,
            ],
        ) {
            Ok(row) => row,
            Err(e) => return retry_or_fail(&e),
        };
        let now: i64 = row.try_get(0).map_err(|e| clock_unreadable(&e))?;
        let log_ref = Some(scope.record_id(key).log_ref());
        let corrupt = |detail: String| PgError::CorruptRecord { log_ref, detail };
        let bytes: Option<Vec<u8>> = row.try_get(1).map_err(|e| corrupt(e.to_string()))?;
        let version: Option<i64> = row.try_get(2).map_err(|e| corrupt(e.to_string()))?;
        let floor: i64 = row.try_get(3).map_err(|e| fail_read_floor(&e))?;
        let found = match (bytes, version) {
            (Some(bytes), Some(version)) => Some((
                Record::decode(&bytes).map_err(|e| corrupt(e.to_string()))?,
                version,
            )),
            _ => None,
        };
        Ok(Step::Done(ReadAt {
            now: clock::from_db(now),
            floor: u64::try_from(floor).unwrap_or(0),
            found,
        }))
    }

    /// `UPDATE … WHERE version = $v`: `Done(true)` when this writer won.
    fn write(
        &self,
        conn: &mut Conn,
        scope: &Scope,
        key: &IdempotencyKey,
        record: &Record,
        version: i64,
    ) -> Result<Step<bool>, PgError> {
        let cols = Columns::of(record);
        let params: [&(dyn ToSql + Sync); 9] = [
            &scope.tenant(),
            &scope.operation(),
            &key.as_str(),
            &cols.fingerprint,
            &cols.state,
            &cols.lease_expires_at,
            &cols.gc_due_at,
            &cols.record,
            &version,
        ];
        match conn.execute(&self.sql.update, &params) {
            Ok(n) => Ok(Step::Done(n == 1)),
            Err(e) => retry_or_fail(&e),
        }
    }

    /// One read → decide → write on an existing record (`decide` may run again
    /// after a lost race, on the newer record). `decide` gets `now` by this
    /// store's clock, read with the record; `caller_now` counts only for a
    /// [`PgClock::given_by_caller`].
    pub(crate) fn transition<T>(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        caller_now: Option<UnixMillis>,
        decide: impl Fn(&Record, UnixMillis) -> Result<(Option<Record>, T), TransitionError>,
    ) -> Result<T, PgError> {
        let log_ref = scope.record_id(key).log_ref();
        self.retrying(Some(log_ref), |conn| {
            let Step::Done(ReadAt { now, found, .. }) =
                self.read_at(conn, scope, key, caller_now)?
            else {
                return Ok(Step::Again);
            };
            let (existing, version) = found.ok_or(PgError::NotFound { log_ref })?;
            let (write, answer) =
                decide(&existing, now).map_err(|error| PgError::Rejected { log_ref, error })?;
            match write {
                Some(next) if next != existing => {
                    match self.write(conn, scope, key, &next, version)? {
                        Step::Done(true) => Ok(Step::Done(answer)),
                        Step::Done(false) | Step::Again => Ok(Step::Again),
                    }
                }
                _ => Ok(Step::Done(answer)),
            }
        })
    }

    /// Every record, or those in `state`, ordered by tenant, operation and key.
    pub fn list(&self, state: Option<StateName>) -> Result<Vec<ListedRecord>, PgError> {
        let mut conn = self.conn()?;
        let base = format!(
            "SELECT tenant, operation, key, record FROM {}",
            self.sql.records
        );
        let rows = match state {
            Some(s) => conn.query(
                &format!("{base} WHERE state = $1 ORDER BY tenant, operation, key"),
                &[&s.as_str()],
            ),
            None => conn.query(&format!("{base} ORDER BY tenant, operation, key"), &[]),
        }
        .map_err(|e| fail(&e))?;
        rows.iter().map(listed).collect()
    }

    /// Counts per state, expired leases, and the table's size on disk (indexes included).
    pub fn stats(&self) -> Result<Stats, PgError> {
        let (given, offset) = self.clock.params(None);
        let mut conn = self.conn()?;
        let rows = conn
            .query(
                &format!(
                    "SELECT state, count(*), count(*) FILTER (WHERE lease_expires_at <= {now}) \
                     FROM {records} GROUP BY state",
                    now = clock::now_sql(1, 2),
                    records = self.sql.records
                ),
                &[&given, &offset],
            )
            .map_err(|e| fail(&e))?;
        let mut stats = Stats::default();
        for row in rows {
            let corrupt = |e: postgres::Error| PgError::CorruptRecord {
                log_ref: None,
                detail: e.to_string(),
            };
            let state: String = row.try_get(0).map_err(corrupt)?;
            let count: i64 = row.try_get(1).map_err(corrupt)?;
            let expired: i64 = row.try_get(2).map_err(corrupt)?;
            let name = StateName::from_str(&state).map_err(|e| PgError::CorruptRecord {
                log_ref: None,
                detail: e.to_string(),
            })?;
            let count = u64::try_from(count).unwrap_or(0);
            stats.by_state.insert(name, count);
            stats.total += count;
            stats.expired_leases += u64::try_from(expired).unwrap_or(0);
        }
        let size: i64 = conn
            .query_one(
                "SELECT pg_total_relation_size($1::text::regclass)",
                &[&self.sql.records],
            )
            .and_then(|row| row.try_get(0))
            .map_err(|e| fail(&e))?;
        stats.file_size = u64::try_from(size).ok();
        Ok(stats)
    }

    /// Settles an unresolved record by the store's clock (see
    /// `idemkit_core::machine::resolve`); returns the record as written.
    pub fn resolve_now(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        policy: &Policy,
    ) -> Result<Record, PgError> {
        self.resolve_at(scope, key, resolution, policy, None)
    }

    fn resolve_at(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        policy: &Policy,
        caller_now: Option<UnixMillis>,
    ) -> Result<Record, PgError> {
        self.transition(scope, key, caller_now, |r, now| {
            let next = machine::resolve(r, resolution.clone(), policy, now)?;
            Ok((Some(next.clone()), next))
        })
    }

    /// Claims, and says which effect kind the written record has (`None`: nothing
    /// written). Decides at the database's time (`caller_now` counts only for a
    /// [`PgClock::given_by_caller`]).
    pub(crate) fn claim_at(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: RequestFingerprint,
        owner: &str,
        policy: &Policy,
        caller_now: UnixMillis,
    ) -> Result<(ClaimOutcome, Option<EffectKind>), PgError> {
        let request = ClaimRequest {
            fingerprint,
            owner: owner.to_owned(),
        };
        let log_ref = scope.record_id(key).log_ref();
        self.retrying(Some(log_ref), |conn| {
            // `now` and the token floor come from the database, read with the
            // record: every instance of a fleet decides on the same clock.
            let Step::Done(read) = self.read_at(conn, scope, key, Some(caller_now))? else {
                return Ok(Step::Again);
            };
            let ReadAt { now, floor, found } = read;
            let Some((existing, version)) = found else {
                // No record yet: the INSERT is the claim; only one concurrent
                // INSERT of a key can win, and it is refused unless its first
                // token is above the token floor (checked again in the INSERT:
                // GC may have raised it since the read).
                let fresh = machine::claim_above(None, &request, policy, now, floor);
                let Some(write) = &fresh.write else {
                    return Ok(Step::Done((fresh.outcome, None)));
                };
                let version = i64::try_from(write.last_token.get()).unwrap_or(i64::MAX);
                return match self.insert(&mut **conn, scope, key, write, Some(version)) {
                    Ok(true) => Ok(Step::Done((fresh.outcome, Some(write.effect)))),
                    // Someone inserted first, or the floor moved: read again and
                    // decide again.
                    Ok(false) => Ok(Step::Again),
                    Err(e) => retry_or_fail(&e),
                };
            };
            let decision = machine::claim_above(Some(&existing), &request, policy, now, floor);
            match &decision.write {
                Some(next) if *next != existing => {
                    match self.write(conn, scope, key, next, version)? {
                        Step::Done(true) => Ok(Step::Done((decision.outcome, Some(next.effect)))),
                        Step::Done(false) | Step::Again => Ok(Step::Again),
                    }
                }
                _ => Ok(Step::Done((decision.outcome, None))),
            }
        })
    }

    /// Inserts `record` unless the key is taken: `true` if it was inserted. A
    /// claim's fresh record gives its row `version` (its first token), refused
    /// unless above the token floor; an import gives `None` (the floor + 1).
    fn insert(
        &self,
        client: &mut impl postgres::GenericClient,
        scope: &Scope,
        key: &IdempotencyKey,
        record: &Record,
        version: Option<i64>,
    ) -> Result<bool, postgres::Error> {
        let cols = Columns::of(record);
        let params: [&(dyn ToSql + Sync); 9] = [
            &scope.tenant(),
            &scope.operation(),
            &key.as_str(),
            &cols.fingerprint,
            &cols.state,
            &cols.lease_expires_at,
            &cols.gc_due_at,
            &cols.record,
            &version,
        ];
        Ok(client.query_opt(&self.sql.insert, &params)?.is_some())
    }

    /// [`Store::import`](crate::redb_store::Store::import) on PostgreSQL: one
    /// transaction of `INSERT … ON CONFLICT DO NOTHING`, so present records are kept.
    pub fn import<'a>(
        &self,
        records: impl IntoIterator<Item = (&'a Scope, &'a IdempotencyKey, &'a Record)>,
    ) -> Result<ImportReport, PgError> {
        let mut conn = self.conn()?;
        let mut txn = conn.transaction().map_err(|e| fail(&e))?;
        let mut report = ImportReport::default();
        for (scope, key, record) in records {
            if self
                .insert(&mut txn, scope, key, record, None)
                .map_err(|e| fail(&e))?
            {
                report.imported += 1;
            } else {
                report.skipped += 1;
            }
        }
        txn.commit().map_err(|e| fail(&e))?;
        Ok(report)
    }

    /// One bounded GC batch by this store's clock (the database's): see [`GcReport`].
    pub fn gc_now(&self, max_batch: usize) -> Result<GcReport, PgError> {
        self.gc_at(None, max_batch)
    }

    pub(crate) fn gc_at(
        &self,
        caller_now: Option<UnixMillis>,
        max_batch: usize,
    ) -> Result<GcReport, PgError> {
        let mut conn = self.conn()?;
        let now = self.decision_time(&mut conn, caller_now)?;
        let mut report = GcReport::default();
        // Due rows in due order. A row whose bytes do not decode is counted and
        // left alone (never deleted: its state cannot be read), and does not take
        // a place in the batch: the query widens by the rows it had to skip, so a
        // damaged record can never stop GC.
        let mut limit = max_batch.saturating_add(1);
        let (due, undecodable) = loop {
            let rows = conn
                .query(
                    &format!(
                        "SELECT tenant, operation, key, record, version FROM {} \
                         WHERE gc_due_at <= $1 ORDER BY gc_due_at LIMIT $2",
                        self.sql.records
                    ),
                    &[&millis(now), &i64::try_from(limit).unwrap_or(i64::MAX)],
                )
                .map_err(|e| fail(&e))?;
            let exhausted = rows.len() < limit;
            let mut due = Vec::new();
            let mut undecodable = 0_usize;
            for row in &rows {
                match listed(row) {
                    Ok(item) => {
                        let version: i64 = row.try_get(4).map_err(|e| PgError::CorruptRecord {
                            log_ref: Some(item.log_ref()),
                            detail: e.to_string(),
                        })?;
                        due.push((item, version));
                    }
                    Err(PgError::CorruptRecord { .. }) => undecodable += 1,
                    Err(other) => return Err(other),
                }
            }
            if exhausted || due.len() > max_batch {
                break (due, undecodable);
            }
            limit = limit.saturating_add(undecodable);
        };
        report.undecodable = u64::try_from(undecodable).unwrap_or(u64::MAX);
        report.more = due.len() > max_batch;
        let due = due.into_iter().take(max_batch).collect::<Vec<_>>();
        // Raise the token floor above every token and version of the rows about
        // to be deleted, committed before any of them is: an INSERT that can
        // succeed on a deleted key starts after its delete, so it sees the floor.
        let floor = due
            .iter()
            .filter(|(item, _)| machine::gc(&item.record, now) == GcAction::Delete)
            .map(|(item, version)| {
                item.record
                    .last_token
                    .get()
                    .max(u64::try_from(*version).unwrap_or(0))
            })
            .max();
        if let Some(floor) = floor {
            let floor = i64::try_from(floor).unwrap_or(i64::MAX);
            conn.execute(&self.sql.raise_floor, &[&floor])
                .map_err(|e| fail(&e))?;
        }
        for (item, version) in due {
            // A record whose version moved since the SELECT was just written by
            // someone else: skip it, the next batch sees it again if still due.
            match machine::gc(&item.record, now) {
                GcAction::Delete => {
                    let n = conn
                        .execute(
                            &self.sql.delete,
                            &[
                                &item.scope.tenant(),
                                &item.scope.operation(),
                                &item.key.as_str(),
                                &version,
                            ],
                        )
                        .map_err(|e| fail(&e))?;
                    report.deleted += n;
                }
                GcAction::PruneBody => {
                    let pruned = machine::prune_body(&item.record);
                    if let Step::Done(true) =
                        self.write(&mut conn, &item.scope, &item.key, &pruned, version)?
                    {
                        report.pruned += 1;
                    }
                }
                GcAction::Keep => {}
            }
        }
        Ok(report)
    }

    /// Unknown records and Running records past their lease by this store's
    /// clock (the database's): what needs an operator or reconciler.
    pub fn list_unresolved_now(&self) -> Result<Vec<ListedRecord>, PgError> {
        self.list_unresolved_at(None)
    }

    pub(crate) fn list_unresolved_at(
        &self,
        caller_now: Option<UnixMillis>,
    ) -> Result<Vec<ListedRecord>, PgError> {
        let mut conn = self.conn()?;
        let now = self.decision_time(&mut conn, caller_now)?;
        let rows = conn
            .query(
                &format!(
                    "SELECT tenant, operation, key, record FROM {t} \
                     WHERE lease_expires_at <= $1 ORDER BY lease_expires_at",
                    t = self.sql.records
                ),
                &[&millis(now)],
            )
            .map_err(|e| fail(&e))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let item = listed(row)?;
            if item.record.is_unresolved(now) {
                out.push(item);
            }
        }
        let rows = conn
            .query(
                &format!(
                    "SELECT tenant, operation, key, record FROM {t} \
                     WHERE state = 'unknown' ORDER BY tenant, operation, key",
                    t = self.sql.records
                ),
                &[],
            )
            .map_err(|e| fail(&e))?;
        for row in &rows {
            out.push(listed(row)?);
        }
        Ok(out)
    }
}

/// The derived columns of a record, as written.
struct Columns {
    fingerprint: Vec<u8>,
    state: &'static str,
    lease_expires_at: Option<i64>,
    gc_due_at: Option<i64>,
    record: Vec<u8>,
}

impl Columns {
    fn of(record: &Record) -> Columns {
        Columns {
            fingerprint: record.fingerprint.as_bytes().to_vec(),
            state: record.state.name().as_str(),
            lease_expires_at: record.lease_expires_at().map(millis),
            gc_due_at: record.gc_due_at().map(millis),
            record: record.encode(),
        }
    }
}

/// The token floor could not be read from a row (a schema older than version 2).
fn fail_read_floor(e: &postgres::Error) -> PgError {
    PgError::Database {
        code: None,
        detail: format!("reading the token floor (run `idemkit migrate`?): {e}"),
    }
}

/// The database's clock could not be read from a row (a driver-level mismatch).
fn clock_unreadable(e: &postgres::Error) -> PgError {
    PgError::Database {
        code: None,
        detail: format!("reading the database's clock: {e}"),
    }
}

/// Milliseconds as PostgreSQL's `bigint`; "never" (`UnixMillis::MAX`) sorts last.
fn millis(t: UnixMillis) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

fn retry_or_fail<T>(e: &postgres::Error) -> Result<Step<T>, PgError> {
    match classify(e) {
        Failure::Retry => Ok(Step::Again),
        Failure::Fail(err) => Err(err),
    }
}

/// A `(tenant, operation, key, record, ..)` row as a [`ListedRecord`].
fn listed(row: &postgres::Row) -> Result<ListedRecord, PgError> {
    let corrupt = |detail: String| PgError::CorruptRecord {
        log_ref: None,
        detail,
    };
    let tenant: &str = row.try_get(0).map_err(|e| corrupt(e.to_string()))?;
    let operation: &str = row.try_get(1).map_err(|e| corrupt(e.to_string()))?;
    let key: &str = row.try_get(2).map_err(|e| corrupt(e.to_string()))?;
    let bytes: &[u8] = row.try_get(3).map_err(|e| corrupt(e.to_string()))?;
    let scope = Scope::new(tenant, operation).map_err(|e| corrupt(e.to_string()))?;
    let key = IdempotencyKey::new(key).map_err(|e| corrupt(e.to_string()))?;
    let record = Record::decode(bytes).map_err(|e| PgError::CorruptRecord {
        log_ref: Some(scope.record_id(&key).log_ref()),
        detail: e.to_string(),
    })?;
    Ok(ListedRecord { scope, key, record })
}

impl BackendError for PgError {
    fn transition_error(&self) -> Option<&TransitionError> {
        PgError::transition_error(self)
    }

    fn is_not_found(&self) -> bool {
        matches!(self, PgError::NotFound { .. })
    }
}

/// The conformance seam. Every method decides at the database's time by this
/// store's [`PgClock`]: the `now` arguments are ignored unless the clock is
/// [`PgClock::given_by_caller`] (virtual time for the conformance suite).
impl IdempotencyBackend for PgStore {
    type Error = PgError;

    fn claim(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: impl Into<RequestFingerprint>,
        owner: &str,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<ClaimOutcome, PgError> {
        self.claim_at(scope, key, fingerprint.into(), owner, policy, now)
            .map(|(outcome, _)| outcome)
    }

    fn complete(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        response: StoredResponse,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(), PgError> {
        self.transition(scope, key, Some(now), |r, now| {
            let next = machine::complete(r, token, response.clone(), policy, now)?;
            Ok((Some(next), ()))
        })
    }

    fn release(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(), PgError> {
        self.transition(scope, key, Some(now), |r, now| {
            Ok((Some(machine::release(r, token, policy, now)?), ()))
        })
    }

    fn mark_unknown(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        reason: UnknownReason,
        now: UnixMillis,
    ) -> Result<(), PgError> {
        self.transition(scope, key, Some(now), |r, now| {
            Ok((
                Some(machine::mark_unknown(r, token, reason.clone(), now)?),
                (),
            ))
        })
    }

    fn renew(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<UnixMillis, PgError> {
        self.transition(scope, key, Some(now), |r, now| {
            let next = machine::renew(r, token, policy, now)?;
            let expires = next.lease_expires_at().unwrap_or(now);
            Ok((Some(next), expires))
        })
    }

    fn begin_step(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        name: &str,
        proposed_provider_key: &str,
        now: UnixMillis,
    ) -> Result<StepStart, PgError> {
        self.transition(scope, key, Some(now), |r, now| {
            let (next, start) = machine::begin_step(r, token, name, proposed_provider_key, now)?;
            Ok((Some(next), start))
        })
    }

    fn complete_step(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        name: &str,
        provider_ref: Option<String>,
        now: UnixMillis,
    ) -> Result<(), PgError> {
        self.transition(scope, key, Some(now), |r, now| {
            let next = machine::complete_step(r, token, name, provider_ref.clone(), now)?;
            Ok((Some(next), ()))
        })
    }

    fn resolve(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(), PgError> {
        self.resolve_at(scope, key, resolution, policy, Some(now))
            .map(|_| ())
    }

    fn recover(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        owner: &str,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<RecoverGrant, PgError> {
        self.transition(scope, key, Some(now), |r, now| {
            let (next, grant) = machine::recover(r, owner, policy, now)?;
            Ok((Some(next), grant))
        })
    }

    fn list_unresolved(&self, now: UnixMillis) -> Result<Vec<ListedRecord>, PgError> {
        self.list_unresolved_at(Some(now))
    }

    fn gc(&self, now: UnixMillis, max_batch: usize) -> Result<GcReport, PgError> {
        self.gc_at(Some(now), max_batch)
    }

    fn get(&self, scope: &Scope, key: &IdempotencyKey) -> Result<Option<Record>, PgError> {
        self.retrying(Some(scope.record_id(key).log_ref()), |conn| {
            Ok(match self.read(conn, scope, key)? {
                Step::Done(found) => Step::Done(found.map(|(record, _)| record)),
                Step::Again => Step::Again,
            })
        })
    }
}
