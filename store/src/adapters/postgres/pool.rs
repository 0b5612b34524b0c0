//! The connection pool: r2d2 over `postgres`, checking a connection before it
//! is handed out only when it may have gone stale.
//!
//! A check is one round trip (an empty query). Checked at every checkout, a
//! claim and its completion paid four checks beside their four statements, and
//! PostgreSQL's throughput fell with the round trips. A connection that was
//! returned a moment ago by an operation that succeeded is as good as a
//! checked one, so a connection is checked only when
//!
//! - it sat idle in the pool longer than
//!   [`PgOptions::validate_after_idle`](super::PgOptions::validate_after_idle)
//!   (default 1 s), or
//! - it was returned before the pool last saw a connection break: after a
//!   server restart the first broken connection makes every idle one suspect.
//!
//! Reads are retried once on another connection when theirs broke
//! ([`super::PostgresAdapter`]'s `reading`), so a restart costs a claim nothing: its
//! first statement is a read.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use r2d2::ManageConnection;
use r2d2_postgres::PostgresConnectionManager;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The pool of a [`super::PostgresAdapter`].
pub(crate) type Pool = r2d2::Pool<Manager>;

/// A connection out of the pool, back in it when dropped.
pub(crate) struct Conn(pub(crate) r2d2::PooledConnection<Manager>);

impl Deref for Conn {
    type Target = postgres::Client;
    fn deref(&self) -> &postgres::Client {
        &self.0.client
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut postgres::Client {
        &mut self.0.client
    }
}

/// A pooled client and when it was last returned to the pool.
pub(crate) struct Pooled {
    client: postgres::Client,
    returned_at: Instant,
    /// The adapter's per-record statements, prepared on this connection the
    /// first time each is sent on it.
    prepared: Prepared,
}

impl Conn {
    /// The connection and the statements prepared on it, apart.
    pub(crate) fn parts(&mut self) -> (&mut postgres::Client, &mut Prepared) {
        let pooled = &mut *self.0;
        (&mut pooled.client, &mut pooled.prepared)
    }
}

/// Which per-record statement a [`Prepared`] slot holds (an adapter's SQL is
/// fixed when it connects, and each pool serves one adapter).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Slot {
    SelectAt,
    SelectNow,
    Insert,
    Update,
    UpdateAnnounced,
}

/// Statements prepared on one connection: a prepared statement is parsed and
/// planned by the server once per connection, where a typed one
/// (`query_typed`) is parsed on every execution.
#[derive(Default)]
pub(crate) struct Prepared {
    slots: [Option<postgres::Statement>; 5],
}

impl Prepared {
    /// The statement of `slot` (`sql`, with parameters of `types`), prepared on
    /// `client` now if it was not yet.
    pub(crate) fn get(
        &mut self,
        client: &mut postgres::Client,
        slot: Slot,
        sql: &str,
        types: &[postgres::types::Type],
    ) -> Result<postgres::Statement, postgres::Error> {
        let index = slot as usize;
        if let Some(Some(statement)) = self.slots.get(index) {
            return Ok(statement.clone());
        }
        let statement = client.prepare_typed(sql, types)?;
        if let Some(kept) = self.slots.get_mut(index) {
            *kept = Some(statement.clone());
        }
        Ok(statement)
    }
}

/// Makes, checks and retires the pool's connections.
pub(crate) struct Manager {
    inner: PostgresConnectionManager<MakeRustlsConnect>,
    /// Connections idle for less than this, returned since the last break, are
    /// handed out unchecked.
    check_after_idle: Duration,
    breaks: Breaks,
}

// r2d2 wants a Debug manager; the TLS connector has none to give.
impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("check_after_idle", &self.check_after_idle)
            .field("breaks", &self.breaks)
            .finish_non_exhaustive()
    }
}

impl Manager {
    pub(crate) fn new(
        config: postgres::Config,
        tls: MakeRustlsConnect,
        check_after_idle: Duration,
    ) -> Manager {
        Manager {
            inner: PostgresConnectionManager::new(config, tls),
            check_after_idle,
            breaks: Breaks::default(),
        }
    }

    /// Whether `conn` needs the round trip of a check before it is handed out.
    fn needs_check(&self, conn: &Pooled) -> bool {
        conn.returned_at.elapsed() >= self.check_after_idle
            || self.breaks.since(conn.returned_at)
            || conn.client.is_closed()
    }
}

impl ManageConnection for Manager {
    type Connection = Pooled;
    type Error = ConnectError;

    fn connect(&self) -> Result<Pooled, ConnectError> {
        Ok(Pooled {
            client: self.inner.connect().map_err(ConnectError)?,
            returned_at: Instant::now(),
            prepared: Prepared::default(),
        })
    }

    /// Called at checkout (when the store validates connections).
    fn is_valid(&self, conn: &mut Pooled) -> Result<(), ConnectError> {
        if self.needs_check(conn) {
            self.inner.is_valid(&mut conn.client).map_err(ConnectError)
        } else {
            Ok(())
        }
    }

    /// Called when a connection comes back to the pool.
    fn has_broken(&self, conn: &mut Pooled) -> bool {
        conn.returned_at = Instant::now();
        let broken = self.inner.has_broken(&mut conn.client);
        if broken {
            self.breaks.record();
        }
        broken
    }
}

/// A connection that could not be made or checked, shown with its causes: the
/// pool reports only what an error displays, and the driver's own message
/// leaves out why (the refused connection, the certificate a TLS handshake
/// rejected).
#[derive(Debug)]
pub(crate) struct ConnectError(postgres::Error);

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&super::error::with_causes(&self.0))
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// When the pool last saw a connection break.
#[derive(Debug)]
struct Breaks {
    epoch: Instant,
    /// Nanoseconds after `epoch` of the last break, plus one (0: none yet).
    last: AtomicU64,
}

impl Default for Breaks {
    fn default() -> Self {
        Breaks {
            epoch: Instant::now(),
            last: AtomicU64::new(0),
        }
    }
}

impl Breaks {
    fn record(&self) {
        let at = self.nanos(Instant::now()).saturating_add(1);
        self.last.fetch_max(at, Ordering::SeqCst);
    }

    /// Whether a connection broke at or after `instant`.
    fn since(&self, instant: Instant) -> bool {
        let last = self.last.load(Ordering::SeqCst);
        last != 0 && last > self.nanos(instant)
    }

    fn nanos(&self, instant: Instant) -> u64 {
        u64::try_from(instant.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_break_makes_connections_returned_before_it_suspect() {
        let breaks = Breaks::default();
        let before = Instant::now();
        assert!(!breaks.since(before), "nothing broke yet");
        std::thread::sleep(Duration::from_millis(1));
        breaks.record();
        assert!(breaks.since(before), "returned before the break");
        std::thread::sleep(Duration::from_millis(1));
        assert!(!breaks.since(Instant::now()), "returned after the break");
    }
}
