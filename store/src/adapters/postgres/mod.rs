//! The PostgreSQL adapter (feature `postgres`): for fleets that outgrew one machine.
//!
//! The five methods of the seam ([`crate::adapters`]) as five statements over
//! one table (see the [`schema`](self) docs in `schema.rs`) and a pool; the
//! engine ([`Store`](crate::store::Store)) decides:
//!
//! - **get** is one `SELECT` of the row, its version, the token floor and the
//!   database's time.
//! - **insert** is one `INSERT … SELECT … WHERE $token > floor ON CONFLICT DO
//!   NOTHING RETURNING version`: only one concurrent insert of a key wins, and
//!   never one whose first token is at or below the floor.
//! - **update** is `UPDATE … WHERE version = $read`; **delete** raises the floor,
//!   then `DELETE … WHERE version = $read`. A writer that lost (0 rows) is told
//!   so, and the engine reads and decides again, at most [`MAX_ATTEMPTS`] times.
//! - **scan** is a `SELECT … ORDER BY` on the indexed column, from a cursor.
//! - **serialization failures and deadlocks** (SQLSTATE 40001, 40P01) of a
//!   conditional write count as a lost race; of a read, as
//!   [`PgError::Contention`].
//! - **time** is the database's: each read → decide → write reads `now` from
//!   PostgreSQL in the statement that reads the record (GC, the unresolved list
//!   and `stats` in one statement per batch), never from the calling node, so a
//!   fleet whose clocks disagree still agrees on every lease. See [`PgClock`].
//!   A guard's completion within [`ESTIMATE_WITHIN`] of its claim is dated by
//!   the claim's database time plus the interval measured here
//!   ([`DatabaseClock`]'s `estimate_after`), sparing the clock's round trip: the
//!   core accepts a completion by its token at any time, so the instant only
//!   dates the outcome.
//! - **a new key's claim writes first**: within [`ESTIMATE_WITHIN`] of the
//!   time a claim's read carried, the engine decides the next claim as for a
//!   free key at the database's time plus the interval measured here, and
//!   sends only the insert. Its `WHERE $token > floor` and `ON CONFLICT`
//!   refuse a taken key or a token the floor covers, and the claim then reads
//!   and decides as usual. A new key's claim and completion are two statements
//!   ([`PostgresAdapter::statements_sent`] counts them), like a hand-written
//!   `INSERT … ON CONFLICT` and `UPDATE`; a retry of a known key pays one more
//!   (the refused insert) while the estimate holds.
//! - **a lost connection** is [`PgError::Unavailable`]: nothing is acknowledged, and
//!   the caller must not execute. Each statement runs in autocommit, so a statement
//!   the server committed is durable (`synchronous_commit` as the server has it).
//!
//! - **announcements** (`listen.rs`): a write that leaves a record not Running
//!   (an `UPDATE` to completed, released or unknown; every `DELETE`) of a row
//!   a waiter marked (`watched`, set by [`Store::watch`](crate::store::Store::watch)
//!   through [`Adapter::watch`]) calls `pg_notify` in the same statement
//!   (`WITH written AS (UPDATE … RETURNING watched) SELECT CASE WHEN watched
//!   THEN pg_notify(…) END FROM written`), on the store's channel
//!   ([`PostgresAdapter::channel`]: `idemkit_<schema>`, `idemkit_public` by
//!   default; a schema too long for a 63-byte identifier keeps its first 38
//!   characters and gains a hash), with the record id's bytes in hex as the
//!   payload. It costs no round trip, is sent only when the write applied, and
//!   leaves with the commit: a completion inside a caller's transaction
//!   ([`ExecutionGuard::complete_in`](crate::store::ExecutionGuard::complete_in))
//!   is announced when the caller commits, never after a rollback. Claims,
//!   renewals and steps (the record stays Running) announce nothing, nor does
//!   a completion nobody waits for: notifying commits are serialized by the
//!   server, which bounded completions at 16 and 64 clients. The
//!   first [`Store::watch`](crate::store::Store::watch) of a store starts one
//!   thread with a connection of its own (`application_name` `idemkit-listen`)
//!   that `LISTEN`s and wakes that store's waiters. While that connection is
//!   down, [`Store::waits_are_woken`](crate::store::Store::waits_are_woken) is
//!   false and waiters poll the record; it reconnects after 100 ms, doubling to
//!   5 s, and the thread ends (its connection closed) once its store is dropped.
//!
//! - **one round trip per statement**: the per-record statements (the read, the
//!   insert, the update, the clock) are prepared on each pooled connection the
//!   first time it sends them (`pool::Prepared`), then sent as bind and execute
//!   alone, so the server parses and plans each once per connection. In a
//!   caller's transaction ([`crate::local`]) they are sent typed (`query_typed`:
//!   parse, bind and execute of the unnamed statement in one message batch).
//!
//! - **TLS** (`tls.rs`) as libpq's URL parameters ask: `sslmode=prefer` (the
//!   default: TLS when the server offers it), `require` (TLS or no connection;
//!   as in libpq, the certificate is not checked), `verify-ca` (the certificate
//!   chains to a trusted root), `verify-full` (and names the host: the mode that
//!   keeps a man in the middle out), `disable`. `sslrootcert=/path/ca.pem` names
//!   the roots to trust (a managed database's CA bundle); without it, or with
//!   `system`, Mozilla's roots are trusted. `sslcert=/path/client.crt&sslkey=/path/client.key`
//!   present a client certificate when the server asks for one (`cert`
//!   authentication); the key must be readable by its owner only (0600), as
//!   libpq requires. The pool's connections and the listener's are made alike.
//!
//! - **a network gone silent** (`liveness.rs`): a partition or a firewall that
//!   drops packets without a word fails the calls it holds with
//!   [`PgError::Unavailable`] after about
//!   [`PgOptions::dead_connection_timeout`] (10 s by default), where TCP alone
//!   would hold them for 15 minutes or more: the connections' `TCP_USER_TIMEOUT`
//!   and keepalives are set from it, unless the URL sets its own
//!   (`tcp_user_timeout`, `keepalives_idle`, …). A statement that runs long is
//!   never cut: the server's host acknowledges it and answers the probes.
//!
//! The pool is `r2d2` over the synchronous `postgres` driver, because the
//! adapter seam is synchronous; async services call the store from
//! `spawn_blocking`, as they do over redb. It checks a connection before
//! handing it out only when it may have gone stale (`pool.rs`), and a read
//! whose connection broke is tried once more on another.

mod clock;
mod error;
mod listen;
mod liveness;
mod pool;
mod schema;
mod tls;
mod url;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idemkit_core::record::Record;
use idemkit_core::{IdempotencyKey, RecordId, Scope, UnixMillis};
use postgres::types::{ToSql, Type};

pub use clock::PgClock;
pub use error::PgError;
pub use schema::SCHEMA_VERSION;

use crate::adapters::{
    Adapter, AdapterError, ChangeSink, CorruptRecord, Cursor, Health, Read, Scan, ScanBy, ScanPage,
    Scanned, Stored, Version, Write, decode_record,
};
use crate::clock::{Clock, ClockError, SystemClock};
use error::{Failure, classify, fail};
use pool::{Conn, Pool, Slot};
use schema::Sql;

/// How many times the engine tries one read → decide → write before it gives
/// up (lost version races and serialization failures): core's bound, the one
/// every adapter (and the JavaScript ones) shares.
pub use idemkit_core::machine::MAX_ATTEMPTS;

/// How [`PostgresAdapter::connect_with`] treats the schema.
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

/// Options of a [`PostgresAdapter`].
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// The PostgreSQL schema holding the tables; `None`: `public`. Every
    /// statement names it, so the connection's `search_path` never decides
    /// which tables a store reads and writes.
    pub schema: Option<String>,
    /// Connections in the pool (default 16).
    ///
    /// Each call to the adapter takes a connection for its statement and
    /// returns it, so callers beyond the pool sleep until one is returned.
    /// With more threads calling the store at once than this, size it to
    /// those threads, within the server's `max_connections`.
    pub pool_size: u32,
    /// How long to wait for a connection (connect or pool) before
    /// [`PgError::Unavailable`] (default 2 s).
    pub connect_timeout: Duration,
    /// Whether to run or only check migrations (default: run).
    pub migrations: Migrations,
    /// Whether the pool checks a connection (one empty query) before handing it
    /// out when it may have gone stale (default: yes): see
    /// [`validate_after_idle`](Self::validate_after_idle). Without any check,
    /// after a server restart every stale pooled connection fails one operation
    /// with [`PgError::Unavailable`] before the pool replaces it.
    pub validate_connections: bool,
    /// A connection idle in the pool for less than this, and returned since the
    /// pool last saw a connection break, is handed out unchecked (default 1 s;
    /// `Duration::ZERO` checks every checkout, one round trip each). A server
    /// restart breaks the first connection used after it, which makes every
    /// idle one suspect, and a read whose connection broke is retried once on
    /// another: the restart costs no operation.
    pub validate_after_idle: Duration,
    /// How long a connection may hear nothing from the server's host (no
    /// acknowledgement of what it sent, no answer to a keepalive probe) before it
    /// is given up as dead and its call fails with [`PgError::Unavailable`]
    /// (default 10 s). Without it, a network that drops packets silently holds a
    /// store call, and the request waiting on it, until TCP gives up: about 15
    /// minutes to resend a statement, 2 hours of keepalive idle for one waiting
    /// on its answer. It sets the connections' `TCP_USER_TIMEOUT` (Linux) and
    /// their keepalives (probes after half of it, then every quarter), except
    /// what the URL sets itself: `tcp_user_timeout` (milliseconds, as libpq
    /// reads it, where the driver alone would read seconds), or any of `keepalives`,
    /// `keepalives_idle`, `keepalives_interval`, `keepalives_retries`. A slow
    /// statement is not cut short: the server's host acknowledges it and answers
    /// the probes while it runs. `Duration::ZERO` leaves the system's defaults.
    pub dead_connection_timeout: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            schema: None,
            pool_size: 16,
            connect_timeout: Duration::from_secs(2),
            migrations: Migrations::Run,
            validate_connections: true,
            validate_after_idle: Duration::from_secs(1),
            dead_connection_timeout: Duration::from_secs(10),
        }
    }
}

/// Records in PostgreSQL, for the engine: `Store::from(adapter)`, or
/// `idemkit::postgres(url)` for the defaults. Cheap to clone (clones share the
/// pool).
#[derive(Clone)]
pub struct PostgresAdapter {
    pool: Pool,
    sql: Arc<Sql>,
    clock: PgClock,
    /// Where [`Adapter::announce_to`]'s thread listens.
    listen: Arc<listen::Target>,
    /// Statements sent for records, floors and time, by this adapter and its clones.
    statements: Arc<AtomicU64>,
}

impl fmt::Debug for PostgresAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresAdapter")
            .field("records", &self.sql.records)
            .field("pool_size", &self.pool.max_size())
            .finish_non_exhaustive()
    }
}

impl PostgresAdapter {
    /// Connects to `url` (`postgres://user@host:port/db` or key=value form) with the
    /// default [`PgOptions`], running migrations.
    ///
    /// TLS follows the URL's `sslmode` and `sslrootcert`, as in libpq (see the
    /// module docs): `postgres://app@db.example/app?sslmode=verify-full` checks the
    /// server's certificate against Mozilla's roots and its name;
    /// `…&sslrootcert=/etc/idemkit/db-ca.pem` trusts that CA bundle instead.
    pub fn connect(url: &str) -> Result<PostgresAdapter, PgError> {
        PostgresAdapter::connect_with(url, PgOptions::default())
    }

    /// Connects to `url` with `options`. Fails with [`PgError::Unavailable`] when
    /// the server cannot be reached within `options.connect_timeout`.
    pub fn connect_with(url: &str, options: PgOptions) -> Result<PostgresAdapter, PgError> {
        let sql = Sql::new(options.schema.as_deref())?;
        // TLS as the URL's `sslmode` and `sslrootcert` ask (see `tls`).
        let url = url::split(url)?;
        let mut config =
            postgres::Config::from_str(&url.driver_url).map_err(|e| PgError::Config {
                detail: format!("bad PostgreSQL URL: {e}"),
            })?;
        let tls = tls::connector(&url.tls)?;
        config.connect_timeout(options.connect_timeout);
        liveness::apply(&mut config, options.dead_connection_timeout, &url);
        config.application_name("idemkit");
        let listen = listen::Target::new(
            config.clone(),
            tls.clone(),
            sql.channel.clone(),
            options.connect_timeout,
        );
        let manager = pool::Manager::new(config, tls, options.validate_after_idle);
        let pool = r2d2::Pool::builder()
            .max_size(options.pool_size.max(1))
            .min_idle(Some(0))
            .connection_timeout(options.connect_timeout)
            .test_on_check_out(options.validate_connections)
            .build_unchecked(manager);
        let store = PostgresAdapter {
            pool,
            sql: Arc::new(sql),
            clock: PgClock::database(),
            listen: Arc::new(listen),
            statements: Arc::default(),
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

    /// This adapter deciding by `clock`: the database's time plus a test offset
    /// ([`PgClock::advance`]), or a test clock in place of the server's
    /// ([`PgClock::following`]). The default is [`PgClock::database`].
    #[must_use]
    pub fn with_clock(mut self, clock: PgClock) -> PostgresAdapter {
        self.clock = clock;
        self
    }

    /// The current time by this store's clock: the database server's, plus the
    /// clock's offset (0 unless a test moved it).
    pub fn now(&self) -> Result<UnixMillis, PgError> {
        self.reading(|conn| self.decision_time(conn))
    }

    /// How many statements this adapter (and its clones) has sent to read,
    /// insert, update and delete records, raise the token floor and read the
    /// time since it connected, each one round trip (scans, migrations,
    /// connection checks and a statement's one preparation on each pooled
    /// connection are not counted): what an operation costs, for a benchmark
    /// or a test. A new key's claim and completion are two.
    pub fn statements_sent(&self) -> u64 {
        self.statements.load(Ordering::Relaxed)
    }

    fn sending(&self) {
        self.statements.fetch_add(1, Ordering::Relaxed);
    }

    /// `now` for a decision that reads no single record (GC, the unresolved
    /// list, a guard's write): one statement, answered by the database's clock.
    fn decision_time(&self, conn: &mut Conn) -> Result<UnixMillis, PgError> {
        let (given, offset) = self.clock.params();
        self.sending();
        let row = conn
            .one(
                Slot::SelectNow,
                &self.sql.select_now,
                &[(&given, Type::INT8), (&offset, Type::INT8)],
            )
            .map_err(|e| fail(&e))?;
        let now: i64 = row.try_get(0).map_err(|e| clock_unreadable(&e))?;
        Ok(clock::from_db(now))
    }

    fn conn(&self) -> Result<Conn, PgError> {
        Ok(Conn(self.pool.get()?))
    }

    /// Runs the read `f` on a pooled connection, and once more on another when
    /// the first failed for want of its connection (a server restart breaks
    /// each pooled connection at its next use; see `pool.rs`). A read has no
    /// effect, so trying again is safe; writes are never retried here (their
    /// outcome is unknown).
    fn reading<T>(&self, f: impl Fn(&mut Conn) -> Result<T, PgError>) -> Result<T, PgError> {
        // The first connection goes back to the pool, marked broken, before
        // the second is taken: the pool then checks the idle ones.
        let first = f(&mut self.conn()?);
        match first {
            Err(e) if e.is_unavailable() => f(&mut self.conn()?),
            done => done,
        }
    }

    /// A connection from this store's pool, for the caller's own statements in
    /// the same database: open a transaction on it, write, and complete the
    /// execution inside it ([`ExecutionGuard::complete_in`](crate::store::ExecutionGuard::complete_in)).
    /// Back to the pool when dropped.
    pub fn connection(
        &self,
    ) -> Result<impl std::ops::DerefMut<Target = postgres::Client>, PgError> {
        self.conn()
    }

    /// The `LISTEN`/`NOTIFY` channel this store's finishing writes are
    /// announced on: `idemkit_<schema>` (see the module documentation).
    #[must_use]
    pub fn channel(&self) -> &str {
        &self.sql.channel
    }

    /// The schema holding idemkit's tables, if one was configured.
    #[must_use]
    pub fn schema(&self) -> Option<&str> {
        self.sql.schema.as_deref()
    }

    /// The clock an engine over this adapter decides by: the database's (plus
    /// the [`PgClock`]'s test offset), read with one statement.
    #[must_use]
    pub fn database_clock(&self) -> DatabaseClock {
        DatabaseClock {
            store: self.clone(),
        }
    }

    /// Reads the row of `id`, its version, the token floor and the database's
    /// time, in one statement.
    fn read(&self, id: &RecordId) -> Result<Read, PgError> {
        let (mut read, now) = self.reading(|conn| self.read_on(conn, id))?;
        read.now = Some(now);
        Ok(read)
    }

    /// [`read`](Self::read) on `client` (a pooled connection, or a caller's
    /// transaction: [`crate::local`]), with the database's time beside it
    /// (`Read::now` is left `None`).
    pub(crate) fn read_on(
        &self,
        client: &mut impl Sends,
        id: &RecordId,
    ) -> Result<(Read, UnixMillis), PgError> {
        let [tenant, operation, key] = id.parts();
        let (given, offset) = self.clock.params();
        self.sending();
        let row = client
            .one(
                Slot::SelectAt,
                &self.sql.select_at,
                &[
                    (&tenant, Type::TEXT),
                    (&operation, Type::TEXT),
                    (&key, Type::TEXT),
                    (&given, Type::INT8),
                    (&offset, Type::INT8),
                ],
            )
            .map_err(|e| fail(&e))?;
        let now: i64 = row.try_get(0).map_err(|e| clock_unreadable(&e))?;
        let corrupt = |detail: String| PgError::CorruptRecord {
            log_ref: Some(id.log_ref()),
            detail,
        };
        let bytes: Option<Vec<u8>> = row.try_get(1).map_err(|e| corrupt(e.to_string()))?;
        let version: Option<i64> = row.try_get(2).map_err(|e| corrupt(e.to_string()))?;
        let floor: i64 = row.try_get(3).map_err(|e| fail_read_floor(&e))?;
        let stored = match (bytes, version) {
            (Some(bytes), Some(version)) => Some(Stored {
                record: decode_record(id.as_bytes(), &bytes).map_err(corrupt_record)?,
                version: Version(u64::try_from(version).unwrap_or(0)),
            }),
            _ => None,
        };
        let read = Read {
            stored,
            token_floor: u64::try_from(floor).unwrap_or(0),
            now: None,
        };
        Ok((read, clock::from_db(now)))
    }

    /// `INSERT` of a fresh row, refused if the key is taken or the floor is not
    /// below the record's last token.
    fn insert_row(
        &self,
        client: &mut impl Sends,
        id: &RecordId,
        record: &Record,
    ) -> Result<Option<Version>, PgError> {
        let row = Columns::of(id, record);
        let token = i64::try_from(record.last_token.get()).unwrap_or(i64::MAX);
        self.sending();
        match client.opt(Slot::Insert, &self.sql.insert, &row.params(&token)) {
            Ok(row) => Ok(row.map(|row| version_of(&row)).transpose()?),
            Err(e) => lost_or_fail(&e),
        }
    }

    /// `UPDATE … WHERE version = $read` on a pooled connection: a
    /// serialization failure is a lost race (the engine reads again).
    fn update_row(
        &self,
        conn: &mut Conn,
        id: &RecordId,
        read: &Stored,
        next: &Record,
    ) -> Result<Option<Version>, PgError> {
        match self.update_on(conn, id, read, next)? {
            Ok(updated) => Ok(updated),
            Err(e) => lost_or_fail(&e),
        }
    }

    /// `UPDATE … WHERE version = $read` on `client`: the new version, `None`
    /// when the version moved, or the statement's own error (the caller says
    /// what a serialization failure means: in a caller's transaction it
    /// aborted the transaction, so it cannot be retried there).
    pub(crate) fn update_on(
        &self,
        client: &mut impl Sends,
        id: &RecordId,
        read: &Stored,
        next: &Record,
    ) -> Result<Result<Option<Version>, postgres::Error>, PgError> {
        let row = Columns::of(id, next);
        let version = i64::try_from(read.version.0).unwrap_or(i64::MAX);
        self.sending();
        let written = if row.running() {
            client.changed(Slot::Update, &self.sql.update, &row.params(&version))
        } else {
            // Leaving Running: the same statement announces it (on commit).
            let payload = idemkit_core::hex::lower(id.as_bytes());
            let [a, b, c, d, e, f, g, h, i] = row.params(&version);
            let params = [a, b, c, d, e, f, g, h, i, (&payload, Type::TEXT)];
            client.changed(Slot::UpdateAnnounced, &self.sql.update_announced, &params)
        };
        Ok(written.map(|n| (n == 1).then(|| Version(read.version.0.saturating_add(1)))))
    }

    /// Raises the token floor to `to` (committed on its own, before any delete
    /// it covers: an INSERT that can succeed on a deleted key starts after its
    /// delete, so it sees the floor).
    fn raise_floor(&self, conn: &mut Conn, to: u64) -> Result<(), PgError> {
        let to = i64::try_from(to).unwrap_or(i64::MAX);
        self.sending();
        conn.execute(&self.sql.raise_floor, &[&to])
            .map_err(|e| fail(&e))?;
        Ok(())
    }

    /// Marks `id`'s row as waited on (see the schema's documentation).
    fn watch_row(&self, id: &RecordId) -> Result<(), PgError> {
        let [tenant, operation, key] = id.parts();
        let mut conn = self.conn()?;
        self.sending();
        conn.execute(&self.sql.watch, &[&tenant, &operation, &key])
            .map_err(|e| fail(&e))?;
        Ok(())
    }

    /// `DELETE … WHERE version = $read` (the floor raised before), announced
    /// in the same statement.
    fn delete_row(&self, conn: &mut Conn, id: &RecordId, read: &Stored) -> Result<bool, PgError> {
        let [tenant, operation, key] = id.parts();
        let version = i64::try_from(read.version.0).unwrap_or(i64::MAX);
        let payload = idemkit_core::hex::lower(id.as_bytes());
        self.sending();
        match conn.execute(
            &self.sql.delete,
            &[&tenant, &operation, &key, &version, &payload],
        ) {
            Ok(n) => Ok(n == 1),
            Err(e) => lost_or_fail(&e).map(|lost: Option<Version>| lost.is_some()),
        }
    }

    /// One page of a scan: a `SELECT … ORDER BY` on the scan's column.
    fn scan_rows(&self, scan: &Scan) -> Result<ScanPage, PgError> {
        let records = &self.sql.records;
        let limit = i64::try_from(scan.limit).unwrap_or(i64::MAX);
        let mut conn = self.conn()?;
        let cols = "tenant, operation, key, record, version";
        let rows = match scan.by {
            ScanBy::All | ScanBy::Unknown => {
                let filter = if scan.by == ScanBy::Unknown {
                    "state = 'unknown'"
                } else {
                    "TRUE"
                };
                match scan.after.as_ref().map(id_cursor).transpose()? {
                    None => conn.query(
                        &format!(
                            "SELECT {cols} FROM {records} WHERE {filter} \
                             ORDER BY tenant, operation, key LIMIT $1"
                        ),
                        &[&limit],
                    ),
                    Some((scope, key)) => conn.query(
                        &format!(
                            "SELECT {cols} FROM {records} WHERE {filter} \
                             AND (tenant, operation, key) > ($2, $3, $4) \
                             ORDER BY tenant, operation, key LIMIT $1"
                        ),
                        &[&limit, &scope.tenant(), &scope.operation(), &key.as_str()],
                    ),
                }
            }
            ScanBy::GcDue(by) | ScanBy::LeaseExpired(by) => {
                let column = if matches!(scan.by, ScanBy::GcDue(_)) {
                    "gc_due_at"
                } else {
                    "lease_expires_at"
                };
                let by = millis(by);
                let cols = format!("{cols}, {column}");
                match scan.after.as_ref().map(timed_cursor).transpose()? {
                    None => conn.query(
                        &format!(
                            "SELECT {cols} FROM {records} WHERE {column} <= $2 \
                             ORDER BY {column}, tenant, operation, key LIMIT $1"
                        ),
                        &[&limit, &by],
                    ),
                    Some((at, scope, key)) => conn.query(
                        &format!(
                            "SELECT {cols} FROM {records} WHERE {column} <= $2 \
                             AND ({column}, tenant, operation, key) > ($3, $4, $5, $6) \
                             ORDER BY {column}, tenant, operation, key LIMIT $1"
                        ),
                        &[
                            &limit,
                            &by,
                            &at,
                            &scope.tenant(),
                            &scope.operation(),
                            &key.as_str(),
                        ],
                    ),
                }
            }
        }
        .map_err(|e| fail(&e))?;
        let mut entries = Vec::with_capacity(rows.len());
        let mut next = None;
        for row in &rows {
            let (id, stored) = scanned(row)?;
            let mut cursor = Vec::new();
            if !matches!(scan.by, ScanBy::All | ScanBy::Unknown) {
                let at: i64 = row.try_get(5).map_err(|e| fail(&e))?;
                cursor.extend_from_slice(&at.to_be_bytes());
            }
            cursor.extend_from_slice(id.as_bytes());
            next = Some(Cursor(cursor));
            entries.push(Scanned {
                id: id.as_bytes().to_vec(),
                stored,
            });
        }
        if entries.len() < scan.limit {
            next = None;
        }
        Ok(ScanPage { entries, next })
    }
}

impl Adapter for PostgresAdapter {
    fn get(&self, id: &RecordId) -> Result<Read, AdapterError> {
        Ok(self.read(id)?)
    }

    fn insert(&self, id: &RecordId, record: &Record) -> Result<Option<Version>, AdapterError> {
        let mut conn = self.conn()?;
        Ok(self.insert_row(&mut conn, id, record)?)
    }

    fn update(
        &self,
        id: &RecordId,
        read: &Stored,
        next: &Record,
    ) -> Result<Option<Version>, AdapterError> {
        let mut conn = self.conn()?;
        Ok(self.update_row(&mut conn, id, read, next)?)
    }

    fn delete(&self, id: &RecordId, read: &Stored) -> Result<bool, AdapterError> {
        let mut conn = self.conn()?;
        self.raise_floor(&mut conn, floor_after_delete(read))?;
        Ok(self.delete_row(&mut conn, id, read)?)
    }

    fn scan(&self, scan: &Scan) -> Result<ScanPage, AdapterError> {
        Ok(self.scan_rows(scan)?)
    }

    /// Marks the row: only a watched row's completion calls `pg_notify`.
    fn watch(&self, id: &RecordId) -> Result<(), AdapterError> {
        Ok(self.watch_row(id)?)
    }

    /// The records table's size with its indexes (`pg_total_relation_size`).
    fn bytes_on_disk(&self) -> Result<Option<u64>, AdapterError> {
        let mut conn = self.conn()?;
        let size: i64 = conn
            .query_one(
                "SELECT pg_total_relation_size($1::text::regclass)",
                &[&self.sql.records],
            )
            .and_then(|row| row.try_get(0))
            .map_err(|e| fail(&e))?;
        Ok(u64::try_from(size).ok())
    }

    /// Unwritable while no connection can be had (the server is down or
    /// restarting; the pool replaces broken connections as soon as it is back)
    /// or while the server does not accept writes (a standby in recovery, or a
    /// read-only session: a failover that has not reached this address yet).
    /// One statement, retried once on another connection like every read.
    fn health(&self) -> Health {
        let read_only = self.reading(|conn| {
            conn.query_typed_one(
                "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'",
                &[],
            )
            .and_then(|row| row.try_get::<_, bool>(0))
            .map_err(|e| fail(&e))
        });
        match read_only {
            Ok(false) => Health::writable(),
            Ok(true) => Health::unwritable(
                "the PostgreSQL server accepts no writes (a standby in recovery, or read-only)",
            ),
            Err(e) => Health::unwritable(e.to_string()),
        }
    }

    /// Starts the thread that listens to this store's channel on a connection
    /// of its own (`idemkit-listen` in `pg_stat_activity`): see the module
    /// documentation. It ends once `sink` is dropped (the store with it).
    fn announce_to(&self, sink: Arc<dyn ChangeSink>) {
        listen::start((*self.listen).clone(), Arc::downgrade(&sink));
    }

    /// The database's: every instance of a fleet decides by one clock.
    fn clock(&self) -> Option<Arc<dyn Clock>> {
        Some(Arc::new(self.database_clock()))
    }

    /// One connection for the batch; the floor raised once, above every
    /// delete of it, before the first one. Each write is still its own
    /// statement (autocommit), refused or applied alone.
    fn write_all(&self, writes: &[Write]) -> Result<Vec<Option<Version>>, AdapterError> {
        let mut conn = self.conn()?;
        let floor = writes
            .iter()
            .filter_map(|w| match w {
                Write::Delete(_, read) => Some(floor_after_delete(read)),
                _ => None,
            })
            .max();
        if let Some(floor) = floor {
            self.raise_floor(&mut conn, floor)?;
        }
        let mut answers = Vec::with_capacity(writes.len());
        for write in writes {
            answers.push(match write {
                Write::Insert(id, record) => self.insert_row(&mut conn, id, record)?,
                Write::Update(id, read, next) => self.update_row(&mut conn, id, read, next)?,
                Write::Delete(id, read) => {
                    self.delete_row(&mut conn, id, read)?.then_some(Version(0))
                }
            });
        }
        Ok(answers)
    }
}

/// The database's clock, as the engine's [`Clock`]: see
/// [`PostgresAdapter::database_clock`].
#[derive(Clone, Debug)]
pub struct DatabaseClock {
    store: PostgresAdapter,
}

impl Clock for DatabaseClock {
    /// The database's time; the local clock if the database cannot be reached
    /// (every decision uses [`try_now`](Clock::try_now), which fails instead).
    fn now(&self) -> UnixMillis {
        self.try_now().unwrap_or_else(|_| SystemClock.now())
    }

    fn try_now(&self) -> Result<UnixMillis, ClockError> {
        Ok(self.store.now()?)
    }

    /// The database's time at `earlier` plus an interval measured here, for an
    /// interval under [`ESTIMATE_WITHIN`]: this node's clock contributes only
    /// the interval, never its absolute (perhaps skewed) time, and a monotonic
    /// interval never runs ahead of the database's. A test offset
    /// ([`PgClock::advance`]) or a followed clock takes the exact path.
    fn estimate_after(&self, earlier: UnixMillis, elapsed: Duration) -> Option<UnixMillis> {
        (elapsed < ESTIMATE_WITHIN && self.store.clock.is_the_servers())
            .then(|| earlier.saturating_add(elapsed))
    }
}

/// The longest interval [`DatabaseClock`] estimates rather than reads: an
/// operation's claim and completion a moment apart share one clock reading.
pub const ESTIMATE_WITHIN: Duration = Duration::from_secs(1);

/// Where a per-record statement is sent: a pooled connection prepares it once
/// and then sends only its parameters ([`pool::Prepared`]); a caller's
/// transaction ([`Typed`]) sends it typed (parse, bind and execute of the
/// unnamed statement in one message batch), as it may run on any connection.
/// Either way, one round trip.
pub(crate) trait Sends {
    /// The statement's one row.
    fn one(
        &mut self,
        slot: Slot,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<postgres::Row, postgres::Error>;
    /// Its row, if any.
    fn opt(
        &mut self,
        slot: Slot,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Option<postgres::Row>, postgres::Error>;
    /// The rows it changed.
    fn changed(
        &mut self,
        slot: Slot,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<u64, postgres::Error>;
}

/// The statement of `slot` prepared on `conn`, and the parameters' values.
fn prepared<'p>(
    conn: &mut Conn,
    slot: Slot,
    sql: &str,
    params: &[(&'p (dyn ToSql + Sync), Type)],
) -> Result<(postgres::Statement, Vec<&'p (dyn ToSql + Sync)>), postgres::Error> {
    let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
    let (client, cache) = conn.parts();
    let statement = cache.get(client, slot, sql, &types)?;
    Ok((statement, params.iter().map(|(v, _)| *v).collect()))
}

impl Sends for Conn {
    fn one(
        &mut self,
        slot: Slot,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<postgres::Row, postgres::Error> {
        let (statement, values) = prepared(self, slot, sql, params)?;
        self.parts().0.query_one(&statement, &values)
    }

    fn opt(
        &mut self,
        slot: Slot,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Option<postgres::Row>, postgres::Error> {
        let (statement, values) = prepared(self, slot, sql, params)?;
        self.parts().0.query_opt(&statement, &values)
    }

    fn changed(
        &mut self,
        slot: Slot,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<u64, postgres::Error> {
        let (statement, values) = prepared(self, slot, sql, params)?;
        self.parts().0.execute(&statement, &values)
    }
}

/// A caller's client (its transaction), sent typed statements.
pub(crate) struct Typed<'c, C>(pub(crate) &'c mut C);

impl<C: postgres::GenericClient> Sends for Typed<'_, C> {
    fn one(
        &mut self,
        _: Slot,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<postgres::Row, postgres::Error> {
        self.0.query_typed_one(sql, params)
    }

    fn opt(
        &mut self,
        _: Slot,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Option<postgres::Row>, postgres::Error> {
        self.0.query_typed_opt(sql, params)
    }

    fn changed(
        &mut self,
        _: Slot,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<u64, postgres::Error> {
        self.0.execute_typed(sql, params)
    }
}

/// The floor a delete of `stored` raises the table's one floor to: above its
/// last token (a later fresh row's tokens are new) and its version (a later
/// fresh row's version, the floor + 1, is new).
fn floor_after_delete(stored: &Stored) -> u64 {
    stored.record.last_token.get().max(stored.version.0)
}

fn corrupt_record(e: CorruptRecord) -> PgError {
    PgError::CorruptRecord {
        log_ref: e.log_ref,
        detail: e.detail,
    }
}

/// A cursor of an id-ordered scan: the id bytes.
fn id_cursor(cursor: &Cursor) -> Result<(Scope, IdempotencyKey), PgError> {
    RecordId::decode(&cursor.0).map_err(|e| PgError::Config {
        detail: format!("a scan cursor is not a record id: {e}"),
    })
}

/// A cursor of a timed scan: the instant (i64 BE) then the id bytes.
fn timed_cursor(cursor: &Cursor) -> Result<(i64, Scope, IdempotencyKey), PgError> {
    let bad = || PgError::Config {
        detail: "a scan cursor is not an instant and a record id".into(),
    };
    let (at, id) = cursor.0.split_first_chunk::<8>().ok_or_else(bad)?;
    let (scope, key) = RecordId::decode(id).map_err(|_| bad())?;
    Ok((i64::from_be_bytes(*at), scope, key))
}

/// A `(tenant, operation, key, record, version, ..)` row: its id, and the
/// record with its version or why it does not decode.
fn scanned(row: &postgres::Row) -> Result<(RecordId, Result<Stored, String>), PgError> {
    let corrupt = |detail: String| PgError::CorruptRecord {
        log_ref: None,
        detail,
    };
    let tenant: &str = row.try_get(0).map_err(|e| corrupt(e.to_string()))?;
    let operation: &str = row.try_get(1).map_err(|e| corrupt(e.to_string()))?;
    let key: &str = row.try_get(2).map_err(|e| corrupt(e.to_string()))?;
    let scope = Scope::new(tenant, operation).map_err(|e| corrupt(e.to_string()))?;
    let key = IdempotencyKey::new(key).map_err(|e| corrupt(e.to_string()))?;
    let id = scope.record_id(&key);
    let stored = (|| {
        let bytes: &[u8] = row.try_get(3).map_err(|e| e.to_string())?;
        let version: i64 = row.try_get(4).map_err(|e| e.to_string())?;
        Ok(Stored {
            record: decode_record(id.as_bytes(), bytes).map_err(|e| e.to_string())?,
            version: Version(u64::try_from(version).unwrap_or(0)),
        })
    })();
    Ok((id, stored))
}

/// The `version` an `INSERT … RETURNING version` gave.
fn version_of(row: &postgres::Row) -> Result<Version, PgError> {
    let version: i64 = row.try_get(0).map_err(|e| fail(&e))?;
    Ok(Version(u64::try_from(version).unwrap_or(0)))
}

/// A serialization failure or deadlock of a conditional write is a lost race
/// (the engine reads again); anything else fails.
fn lost_or_fail<T>(e: &postgres::Error) -> Result<Option<T>, PgError> {
    match classify(e) {
        Failure::Retry => Ok(None),
        Failure::Fail(err) => Err(err),
    }
}

/// A record's row, as written: its address and fingerprint (borrowed from
/// the id and the record), derived columns and bytes.
struct Columns<'a> {
    tenant: &'a str,
    operation: &'a str,
    key: &'a str,
    fingerprint: &'a [u8],
    state: &'static str,
    lease_expires_at: Option<i64>,
    gc_due_at: Option<i64>,
    record: Vec<u8>,
}

impl<'a> Columns<'a> {
    fn of(id: &'a RecordId, record: &'a Record) -> Columns<'a> {
        let [tenant, operation, key] = id.parts();
        Columns {
            tenant,
            operation,
            key,
            fingerprint: record.fingerprint.as_bytes(),
            state: record.state.name().as_str(),
            lease_expires_at: record.lease_expires_at().map(millis),
            gc_due_at: record.gc_due_at().map(millis),
            record: record.encode(),
        }
    }

    /// Whether the row is a Running record's: the schema ties
    /// `lease_expires_at` to `state = 'running'`.
    fn running(&self) -> bool {
        self.lease_expires_at.is_some()
    }

    /// [`params`](Self::params) written as SQL literals.
    fn literals(&self, last: i64) -> Vec<String> {
        let bigint =
            |v: Option<i64>| v.map_or_else(|| "NULL::bigint".to_owned(), |v| v.to_string());
        let bytea = |b: &[u8]| format!("'\\x{}'::bytea", idemkit_core::hex::lower(b));
        vec![
            text_literal(self.tenant),
            text_literal(self.operation),
            text_literal(self.key),
            bytea(self.fingerprint),
            text_literal(self.state),
            bigint(self.lease_expires_at),
            bigint(self.gc_due_at),
            bytea(&self.record),
            last.to_string(),
        ]
    }

    /// `$1`…`$9` of the INSERT and the UPDATE: the address, the derived columns,
    /// the record, and `last` (the INSERT's token, the UPDATE's version read),
    /// typed, so each statement is parsed, bound and run in one round trip
    /// (`query_typed`: the unnamed statement, no separate prepare).
    fn params<'p>(&'p self, last: &'p i64) -> [(&'p (dyn ToSql + Sync), Type); 9] {
        [
            (&self.tenant, Type::TEXT),
            (&self.operation, Type::TEXT),
            (&self.key, Type::TEXT),
            (&self.fingerprint, Type::BYTEA),
            (&self.state, Type::TEXT),
            (&self.lease_expires_at, Type::INT8),
            (&self.gc_due_at, Type::INT8),
            (&self.record, Type::BYTEA),
            (last, Type::INT8),
        ]
    }
}

/// One statement the adapter sends, with its parameters written as SQL
/// literals (`params[0]` is `$1`), so that another client can send the same
/// statement with the same values.
#[doc(hidden)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatementWithLiterals {
    /// The statement, with `$1`, `$2`, … where its parameters go.
    pub sql: String,
    /// Each parameter as a SQL literal (`'text'`, `'\x…'::bytea`, a number,
    /// `NULL::bigint`).
    pub params: Vec<String>,
}

impl StatementWithLiterals {
    /// The statement with each `$n` replaced by the expression `expressions`
    /// gives for `n`, or else by its literal (the highest first, so `$1` never
    /// eats the start of `$10`).
    pub fn inlined(&self, expressions: &[(usize, &str)]) -> String {
        let mut sql = self.sql.clone();
        for (i, literal) in self.params.iter().enumerate().rev() {
            let n = i + 1;
            let value = expressions
                .iter()
                .find(|(m, _)| *m == n)
                .map_or(literal.as_str(), |(_, expression)| expression);
            sql = sql.replace(&format!("${n}"), value);
        }
        sql
    }
}

/// The two statements a new key's claim and its completion send on `schema`'s
/// tables (`None`: `public`): the claim's `INSERT … ON CONFLICT DO NOTHING
/// RETURNING version` of `claimed` under `id`, then the completion's `UPDATE`
/// of that row (its version: the floor + 1) to `completed`, which leaves
/// Running and so is the statement that announces a watched row.
///
/// Not part of the API: the PostgreSQL benchmark runs these under pgbench,
/// beside the adapter, to tell what the statements cost the server from what
/// the client costs.
///
/// # Errors
///
/// [`PgError::Config`] for a schema name the adapter refuses.
#[doc(hidden)]
pub fn new_key_statements(
    schema: Option<&str>,
    id: &RecordId,
    claimed: &Record,
    completed: &Record,
) -> Result<[StatementWithLiterals; 2], PgError> {
    let sql = Sql::new(schema)?;
    let token = i64::try_from(claimed.last_token.get()).unwrap_or(i64::MAX);
    let claim = StatementWithLiterals {
        sql: sql.insert.clone(),
        params: Columns::of(id, claimed).literals(token),
    };
    // A fresh key's row starts at the token floor + 1; the benchmark's floor is 0.
    let mut params = Columns::of(id, completed).literals(1);
    params.push(text_literal(&idemkit_core::hex::lower(id.as_bytes())));
    let completion = StatementWithLiterals {
        sql: sql.update_announced,
        params,
    };
    Ok([claim, completion])
}

/// `value` as a SQL string literal (standard-conforming: only `'` is doubled).
fn text_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
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
