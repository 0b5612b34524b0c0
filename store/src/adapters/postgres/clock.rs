//! Time on PostgreSQL: every lease and expiry decision over a
//! [`PostgresAdapter`](super::PostgresAdapter) takes `now` from the database
//! server, never from the node that asks: in a fleet, nodes' clocks disagree,
//! and a node running ahead would take every other node's lease over. `now`
//! is computed in the statement that reads the record the decision is about
//! (GC, the unresolved list and `stats`: one statement per batch):
//!
//! ```sql
//! COALESCE($given, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint + $offset)
//! ```
//!
//! `$offset` is 0 unless a test moved it ([`PgClock::advance`]); `$given` is
//! `NULL` unless a test clock stands in for the server's
//! ([`PgClock::following`]). Whatever the clock, the same statement yields
//! `now` and the same code decides with it.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use idemkit_core::UnixMillis;

use crate::clock::Clock;

/// Where the decisions over a [`PostgresAdapter`](super::PostgresAdapter)
/// take `now` from: the database server's clock (read in the same statement
/// as the record a decision is about), moved by a test offset
/// ([`advance`](Self::advance)), or a test clock in its place
/// ([`following`](Self::following)). Clones share the offset, so a test keeps
/// one handle and gives another to the adapter.
#[derive(Clone, Debug, Default)]
pub struct PgClock {
    offset_ms: Arc<AtomicI64>,
    /// Stands in for the server's clock (tests).
    followed: Option<Arc<dyn Clock>>,
}

impl PgClock {
    /// The database server's clock (`clock_timestamp()`), the one every
    /// instance of a fleet shares: the default.
    #[must_use]
    pub fn database() -> PgClock {
        PgClock::default()
    }

    /// `clock`'s time (a [`ManualClock`](crate::clock::ManualClock) in tests:
    /// exact virtual time) in place of the server's, plus the offset. The
    /// statements still compute `now` and the engine still decides by the
    /// time each read carries, so a test drives the production path. Never
    /// for a fleet: a node's clock then decides.
    #[must_use]
    pub fn following(clock: impl Clock + 'static) -> PgClock {
        PgClock {
            followed: Some(Arc::new(clock)),
            ..PgClock::default()
        }
    }

    /// Moves this clock (and its clones) forward by `by`: the database's time plus
    /// the accumulated offset (saturating).
    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        let mut current = self.offset_ms.load(Ordering::SeqCst);
        loop {
            match self.offset_ms.compare_exchange(
                current,
                current.saturating_add(by),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// Sets the offset from the database's time, in milliseconds (negative: behind).
    pub fn set_offset_millis(&self, offset: i64) {
        self.offset_ms.store(offset, Ordering::SeqCst);
    }

    /// The offset from the database's time, in milliseconds.
    #[must_use]
    pub fn offset_millis(&self) -> i64 {
        self.offset_ms.load(Ordering::SeqCst)
    }

    /// Whether this is the server's own time, unmoved: only then may a
    /// [`DatabaseClock`](super::DatabaseClock) estimate instead of reading.
    pub(crate) fn is_the_servers(&self) -> bool {
        self.followed.is_none() && self.offset_millis() == 0
    }

    /// The statement parameters `($given, $offset)`.
    pub(crate) fn params(&self) -> (Option<i64>, i64) {
        let given = self.followed.as_ref().map(|c| super::millis(c.now()));
        (given, self.offset_millis())
    }
}

/// The SQL expression of `now` in milliseconds, with `$given` and `$offset` as
/// parameters number `given` and `offset`.
pub(crate) fn now_sql(given: usize, offset: usize) -> String {
    format!(
        "COALESCE(${given}::bigint, \
         floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint + ${offset}::bigint)"
    )
}

/// A `now` read from PostgreSQL as a [`UnixMillis`] (before 1970 reads as the epoch).
pub(crate) fn from_db(millis: i64) -> UnixMillis {
    UnixMillis::from_millis(u64::try_from(millis).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_offset() {
        let a = PgClock::database();
        let b = a.clone();
        a.advance(Duration::from_secs(2));
        assert_eq!(b.offset_millis(), 2_000);
        b.set_offset_millis(-5);
        assert_eq!(a.offset_millis(), -5);
    }

    #[test]
    fn only_a_followed_clock_gives_the_time() {
        let t = crate::clock::ManualClock::new(UnixMillis::from_millis(1_000));
        assert_eq!(PgClock::database().params(), (None, 0));
        let followed = PgClock::following(t.clone());
        assert_eq!(followed.params(), (Some(1_000), 0));
        t.advance(Duration::from_secs(1));
        assert_eq!(followed.params(), (Some(2_000), 0));
        assert!(PgClock::database().is_the_servers() && !followed.is_the_servers());
    }
}
