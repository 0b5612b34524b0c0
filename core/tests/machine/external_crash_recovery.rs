//! An External operation crashes between its two steps; nothing is executed twice.
//!
//! A worker books an appointment at a provider (step `book`, provider key persisted
//! before dispatch), then crashes before sending the confirmation (step `notify`).
//! The client retries: while the lease lives it gets `InFlight`; once the lease
//! expired it gets `Uncertain` — never a second execution, because the booking may
//! have happened. A reconciler recovers the record, is told to resume at `notify`
//! with the persisted key (so the provider deduplicates), finishes, and the
//! client's next retry replays the outcome. The crashed worker, waking up late, is
//! fenced off.

#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "a panic is a failing test"
)]

use core::time::Duration;

use idemkit_core::machine::{self, ClaimOutcome, ClaimRequest, Policy, StepStart, TransitionError};
use idemkit_core::record::{EffectKind, Record, StepState, StoredResponse};
use idemkit_core::{Fingerprint, UnixMillis};

/// One stored record, read and written as bytes like a real store.
#[derive(Default)]
struct Slot(Option<Vec<u8>>);

impl Slot {
    fn read(&self) -> Option<Record> {
        self.0.as_deref().map(|b| Record::decode(b).unwrap())
    }
    fn write(&mut self, record: &Record) {
        self.0 = Some(record.encode());
    }
}

#[test]
fn an_external_crash_is_recovered_without_a_second_booking() {
    let policy = Policy::default()
        .with_effect(EffectKind::External)
        .with_lease(Duration::from_secs(30));
    let request = ClaimRequest {
        fingerprint: Fingerprint::from_bytes([3; 32]).into(),
        owner: "worker-a".into(),
    };
    let mut slot = Slot::default();
    let mut now = UnixMillis::from_millis(1_700_000_000_000);
    let mut bookings_dispatched = Vec::new();

    // The first attempt executes, books, and crashes before notifying.
    let d = machine::claim(slot.read().as_ref(), &request, &policy, now);
    let ClaimOutcome::Execute {
        token: worker_token,
        ..
    } = d.outcome
    else {
        panic!("{:?}", d.outcome)
    };
    slot.write(&d.write.unwrap());
    let (r, start) = machine::begin_step(
        &slot.read().unwrap(),
        worker_token,
        "book",
        "book-key-1",
        now,
    )
    .unwrap();
    slot.write(&r);
    let StepStart::Dispatch { provider_key } = start else {
        panic!()
    };
    bookings_dispatched.push(provider_key);
    // (crash: complete_step and notify never happen)

    // Retries: in flight while the lease lives, uncertain once it expired.
    now = now.saturating_add(Duration::from_secs(10));
    let retry = ClaimRequest {
        owner: "worker-b".into(),
        ..request.clone()
    };
    let d = machine::claim(slot.read().as_ref(), &retry, &policy, now);
    assert_eq!(
        d.outcome,
        ClaimOutcome::InFlight {
            retry_after: Duration::from_secs(20)
        }
    );
    now = now.saturating_add(Duration::from_secs(25));
    let d = machine::claim(slot.read().as_ref(), &retry, &policy, now);
    assert!(matches!(d.outcome, ClaimOutcome::Uncertain { .. }));
    slot.write(&d.write.unwrap());
    assert!(slot.read().unwrap().is_unresolved(now));
    let d = machine::claim(slot.read().as_ref(), &retry, &policy, now);
    assert!(matches!(d.outcome, ClaimOutcome::Uncertain { .. }));
    assert!(
        d.write.is_none(),
        "an Unknown record is left for the reconciler"
    );

    // The reconciler takes a new lease and resumes at the first unfinished step.
    let (r, grant) = machine::recover(&slot.read().unwrap(), "reconciler", &policy, now).unwrap();
    slot.write(&r);
    let resume = grant.resume_at().unwrap();
    assert_eq!(
        (resume.name.as_str(), resume.state),
        ("book", StepState::Started)
    );
    // It re-dispatches `book` with the persisted key (the provider deduplicates),
    // never a key of its own.
    let (r, start) = machine::begin_step(
        &slot.read().unwrap(),
        grant.token,
        "book",
        "reconciler-key",
        now,
    )
    .unwrap();
    let StepStart::Dispatch { provider_key } = start else {
        panic!()
    };
    bookings_dispatched.push(provider_key);
    let r = machine::complete_step(&r, grant.token, "book", Some("appt_77".into()), now).unwrap();
    let (r, _) = machine::begin_step(&r, grant.token, "notify", "notify-key-1", now).unwrap();
    let r = machine::complete_step(&r, grant.token, "notify", None, now).unwrap();
    let mut response = StoredResponse::new(201, br#"{"id":"appt_77"}"#.to_vec());
    response.resource_ref = Some("appt_77".into());
    let r = machine::complete(&r, grant.token, response.clone(), &policy, now).unwrap();
    slot.write(&r);
    assert_eq!(bookings_dispatched, ["book-key-1", "book-key-1"]);

    // The crashed worker wakes up and tries to report: fenced off, nothing changes.
    let before = slot.0.clone();
    let late = machine::complete_step(&slot.read().unwrap(), worker_token, "book", None, now);
    assert!(matches!(late, Err(TransitionError::StaleToken { .. })));
    assert_eq!(slot.0, before);

    // The client's retry replays the outcome.
    now = now.saturating_add(Duration::from_secs(1));
    let d = machine::claim(slot.read().as_ref(), &retry, &policy, now);
    assert_eq!(d.outcome, ClaimOutcome::Replay { response });
}
