//! A completion takes its time from the clock's estimate when the clock gives
//! one (`Clock::estimate_after`: PostgreSQL's database clock does, for a second
//! after the claim, sparing a round trip), and reads the clock otherwise;
//! every other transition of a guard reads the clock.
//!
//! A counting clock stands in for the database's: it answers `try_now` from a
//! manual instant and counts the reads, and estimates only when told to.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use idemkit::clock::{Clock, ManualClock};
use idemkit::core::machine::Policy;
use idemkit::core::record::{RecordState, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey, Scope, UnixMillis};

#[derive(Debug, Clone, Default)]
struct CountingClock {
    time: ManualClock,
    reads: Arc<AtomicU32>,
    estimates: Arc<AtomicBool>,
}

impl Clock for CountingClock {
    fn now(&self) -> UnixMillis {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.time.now()
    }

    fn estimate_after(&self, earlier: UnixMillis, elapsed: Duration) -> Option<UnixMillis> {
        // An hour on, so the completion's date shows where it came from.
        self.estimates
            .load(Ordering::SeqCst)
            .then(|| earlier.saturating_add(elapsed + Duration::from_secs(3_600)))
    }
}

fn claim_and_complete(store: &Store, key: &str) -> UnixMillis {
    let scope = Scope::new("t", "op").unwrap();
    let key = IdempotencyKey::new(key).unwrap();
    let Claim::Execute(mut guard) = store
        .claim(
            &scope,
            &key,
            Fingerprint::from_bytes([1; 32]),
            "w",
            &Policy::default(),
        )
        .unwrap()
    else {
        panic!("a fresh key executes");
    };
    guard.renew().unwrap();
    guard
        .complete(StoredResponse::new(200, b"done".to_vec()))
        .unwrap();
    let record = store.get(&scope, &key).unwrap().unwrap();
    match record.state {
        RecordState::Completed { completed_at, .. } => completed_at,
        other => panic!("completed, not {other:?}"),
    }
}

#[test]
fn a_completion_uses_the_estimate_and_every_other_transition_reads_the_clock() {
    let clock = CountingClock {
        time: ManualClock::new(UnixMillis::from_millis(1_000_000)),
        ..CountingClock::default()
    };
    let store = idemkit::in_memory().unwrap().with_clock(clock.clone());

    // Without an estimate: the claim, the renewal and the completion each read.
    let before = clock.reads.load(Ordering::SeqCst);
    let completed_at = claim_and_complete(&store, "no-estimate");
    assert_eq!(clock.reads.load(Ordering::SeqCst) - before, 3);
    assert_eq!(completed_at, UnixMillis::from_millis(1_000_000));

    // With one: the completion reads nothing and is dated by the estimate.
    clock.estimates.store(true, Ordering::SeqCst);
    let before = clock.reads.load(Ordering::SeqCst);
    let completed_at = claim_and_complete(&store, "estimate");
    assert_eq!(
        clock.reads.load(Ordering::SeqCst) - before,
        2,
        "the claim and the renewal read the clock, the completion does not"
    );
    assert!(
        completed_at >= UnixMillis::from_millis(1_000_000 + 3_600_000),
        "dated by the estimate: {completed_at:?}"
    );
}
