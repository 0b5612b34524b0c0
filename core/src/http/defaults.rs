//! The numbers every HTTP binding runs by: how an outcome's recording is
//! retried, how often a lease is renewed, the default limits, and the size of
//! a GC batch. The Rust middleware uses them directly and the JavaScript handler
//! reads them through the wasm package, so the two never drift apart.

use core::time::Duration;

/// How many times an attempt's outcome (completion or Unknown) is written while
/// the store fails, before the answer is [`Refusal::OutcomeNotRecorded`](super::Refusal::OutcomeNotRecorded).
pub const RECORD_ATTEMPTS: u32 = 4;

/// The pause before the first retry of a recording; each later pause doubles.
pub const RECORD_BACKOFF: Duration = Duration::from_millis(25);

/// The default longest execution whose lease is renewed: 15 minutes. After it
/// a hung handler's lease expires.
pub const DEFAULT_MAX_EXECUTION: Duration = Duration::from_secs(15 * 60);

/// The default largest request body read: 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

/// The default largest response body kept for replay: 1 MiB.
pub const DEFAULT_MAX_STORED_RESPONSE_BYTES: usize = 1 << 20;

/// The default `Retry-After` sent with 503 `store-unavailable`: 1 s.
pub const DEFAULT_STORE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The default number of records one GC pass handles.
pub const GC_BATCH: usize = 1_000;

/// The shortest pause between two renewals (a very short lease would otherwise
/// renew in a busy loop).
const RENEWAL_FLOOR: Duration = Duration::from_millis(10);

/// How often a running execution renews its lease: every third of the lease,
/// so two renewals can fail before it runs out.
#[must_use]
pub fn renewal_interval(lease: Duration) -> Duration {
    (lease / 3).max(RENEWAL_FLOOR)
}

/// How soon a renewal the store failed is tried again: a quarter of the
/// regular interval, sooner than the next regular renewal.
#[must_use]
pub fn renewal_retry_interval(lease: Duration) -> Duration {
    (renewal_interval(lease) / 4).max(RENEWAL_FLOOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewals_come_three_times_per_lease_and_retries_four_times_as_often() {
        let lease = Duration::from_secs(30);
        assert_eq!(renewal_interval(lease), Duration::from_secs(10));
        assert_eq!(renewal_retry_interval(lease), Duration::from_millis(2_500));
    }

    #[test]
    fn a_short_lease_is_not_renewed_in_a_busy_loop() {
        assert_eq!(renewal_interval(Duration::ZERO), RENEWAL_FLOOR);
        assert_eq!(
            renewal_retry_interval(Duration::from_millis(60)),
            RENEWAL_FLOOR
        );
    }

    #[test]
    fn the_recording_retries_last_under_a_second() {
        let waited: Duration = (1..RECORD_ATTEMPTS)
            .map(|retry| RECORD_BACKOFF * 2u32.pow(retry - 1))
            .sum();
        assert_eq!(waited, Duration::from_millis(25 + 50 + 100));
    }
}
