//! Time on PostgreSQL: every lease and expiry decision of a [`PgStore`] takes
//! `now` from the database server, never from the node that asks.
//!
//! In a fleet, nodes' clocks disagree (NTP steps, a paused VM, a misconfigured
//! host). A node running two minutes ahead would see every other node's lease as
//! expired and take its work over. So `now` is computed by PostgreSQL, in the
//! statement that reads the record the decision is about (or, for the batch
//! operations, in one statement at the start of the batch):
//!
//! ```sql
//! COALESCE($given, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint + $offset)
//! ```
//!
//! - `$offset` is [`PgClock`]'s offset: 0 in production; tests move time without
//!   sleeping by [`PgClock::advance`] (the database's time plus that offset).
//! - `$given` is `NULL` unless the clock is [`PgClock::given_by_caller`]: then the
//!   adapter's reads leave the time to the engine, and the `now` passed to the
//!   [`IdempotencyBackend`](crate::store::IdempotencyBackend) methods is used as
//!   it is (the conformance suite's exact virtual time).
//!
//! Whatever the clock, the same statement yields `now` and the same code decides
//! with it: there is one decision path.
//!
//! [`PgStore`]: super::PgStore

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use idemkit_core::UnixMillis;

/// Where a [`PgStore`](super::PgStore)'s decisions take `now` from.
///
/// Whatever the clock, `now` is computed by PostgreSQL in the statement that
/// reads the record the decision is about (GC, the unresolved list and `stats`:
/// one statement per batch), and the same code decides with it:
///
/// ```sql
/// COALESCE($given, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint + $offset)
/// ```
///
/// `$offset` is 0 in production and moved by tests with [`PgClock::advance`];
/// `$given` is `NULL` unless the clock is [`PgClock::given_by_caller`]. Clones
/// share the offset, so a test keeps one handle and gives another to the store.
#[derive(Clone, Debug, Default)]
pub struct PgClock {
    offset_ms: Arc<AtomicI64>,
    given_by_caller: bool,
}

impl PgClock {
    /// The database server's clock (`clock_timestamp()`), the one every instance
    /// of a fleet shares: the default. The `now` arguments of the
    /// [`IdempotencyBackend`](crate::store::IdempotencyBackend) methods are ignored.
    #[must_use]
    pub fn database() -> PgClock {
        PgClock::default()
    }

    /// Virtual time for tests: the adapter's reads carry no time, so decisions
    /// take the `now` given to each
    /// [`IdempotencyBackend`](crate::store::IdempotencyBackend) method, or the
    /// engine's clock (for `Store::postgres`, the database's clock plus the
    /// offset, as [`PgStore::now`](super::PgStore::now) reads it). Never for a
    /// fleet: a node's clock then decides.
    #[must_use]
    pub fn given_by_caller() -> PgClock {
        PgClock {
            given_by_caller: true,
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

    /// The statement parameters `($given, $offset)` for a call that was given
    /// `caller_now` (`None`: a method without a `now`).
    /// Whether decisions take the time the caller gives
    /// ([`PgClock::given_by_caller`]) rather than the database's.
    #[must_use]
    pub fn is_given_by_caller(&self) -> bool {
        self.given_by_caller
    }

    pub(crate) fn params(&self, caller_now: Option<UnixMillis>) -> (Option<i64>, i64) {
        let given = caller_now
            .filter(|_| self.given_by_caller)
            .map(super::millis);
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
    fn only_a_caller_clock_passes_the_callers_now() {
        let t = UnixMillis::from_millis(1_000);
        assert_eq!(PgClock::database().params(Some(t)), (None, 0));
        assert_eq!(PgClock::given_by_caller().params(Some(t)), (Some(1_000), 0));
        assert_eq!(PgClock::given_by_caller().params(None), (None, 0));
    }
}
