//! Where the store gets `now` from.
//!
//! The core never reads a clock (every decision takes `now`); the store reads
//! one [`Clock`] per operation so tests can drive leases and retention windows
//! with virtual time ([`ManualClock`]) instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idemkit_core::UnixMillis;

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant.
    fn now(&self) -> UnixMillis;

    /// The current instant, or why it cannot be read: a clock kept by a
    /// database (PostgreSQL's) fails when the database cannot be reached, and
    /// a decision must then fail too rather than take the local time. The
    /// default never fails.
    fn try_now(&self) -> Result<UnixMillis, ClockError> {
        Ok(self.now())
    }

    /// The instant `elapsed` (measured on this process's monotonic clock) after
    /// `earlier`, an instant this clock gave, when that is as good as reading
    /// the clock again and cheaper: `None` (the default) makes the caller read
    /// it. A clock kept by a database answers for short intervals, sparing a
    /// round trip (the PostgreSQL adapter's `DatabaseClock`, feature
    /// `postgres`). The store asks only for the time of a completion,
    /// which the core accepts by its fencing token at any time: the instant
    /// only dates the outcome.
    fn estimate_after(&self, earlier: UnixMillis, elapsed: Duration) -> Option<UnixMillis> {
        let _ = (earlier, elapsed);
        None
    }
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

/// Why a clock could not be read (the database that keeps it is unreachable):
/// its own error.
pub type ClockError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl Clock for SystemClock {
    fn now(&self) -> UnixMillis {
        // A clock set before 1970 reads as the epoch rather than failing every operation.
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        UnixMillis::from_millis(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that only moves when told to: virtual time for tests.
///
/// Clones share the same instant, so a test keeps one handle and gives another to
/// the store.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock standing at `start`.
    #[must_use]
    pub fn new(start: UnixMillis) -> Self {
        ManualClock(Arc::new(AtomicU64::new(start.as_millis())))
    }

    /// Moves the clock forward by `by` (saturating).
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let mut current = self.0.load(Ordering::SeqCst);
        loop {
            match self.0.compare_exchange(
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

    /// Sets the clock to `to` (it may go backwards: tests of clock skew need that).
    pub fn set(&self, to: UnixMillis) {
        self.0.store(to.as_millis(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> UnixMillis {
        UnixMillis::from_millis(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_is_shared_between_clones() {
        let a = ManualClock::new(UnixMillis::from_millis(1_000));
        let b = a.clone();
        a.advance(Duration::from_secs(2));
        assert_eq!(b.now(), UnixMillis::from_millis(3_000));
        b.set(UnixMillis::from_millis(5));
        assert_eq!(a.now(), UnixMillis::from_millis(5));
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now() > UnixMillis::from_millis(1_577_836_800_000));
    }
}
