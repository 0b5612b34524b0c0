//! Leases in virtual time, through the public guard API.
//!
//! - External: an expired lease is reported as uncertain and is never executed
//!   again without `resolve`.
//! - Local: an expired lease is taken over with a higher fencing token, and the
//!   old owner's completion is refused with the stale-token error.
//! - A guard dropped without an outcome: Released (Local) or Unknown (External).
//! - A long task that renews its lease is never taken over; a fenced guard is
//!   refused even where its answer would write nothing.

use std::time::Duration;

use idemkit::clock::ManualClock;
use idemkit::core::machine::{Policy, Resolution, TransitionError};
use idemkit::core::record::{EffectKind, RecordState, StateName, StoredResponse, UnknownReason};
use idemkit::store::{Claim, ExecutionGuard, Store, WorkerError};
use idemkit::{Fingerprint, IdempotencyKey, Scope, UnixMillis};

fn setup() -> (Store, ManualClock, Scope, IdempotencyKey) {
    let clock = ManualClock::new(UnixMillis::from_millis(1_800_000_000_000));
    let store = idemkit::in_memory().unwrap().with_clock(clock.clone());
    (
        store,
        clock,
        Scope::new("acme", "appointments.create").unwrap(),
        IdempotencyKey::new("order-42").unwrap(),
    )
}

fn policy(effect: EffectKind) -> Policy {
    Policy::default()
        .with_effect(effect)
        .with_lease(Duration::from_secs(30))
}

fn claim(store: &Store, scope: &Scope, key: &IdempotencyKey, policy: &Policy) -> Claim {
    store
        .claim(
            scope,
            key,
            Fingerprint::from_bytes([3; 32]),
            "worker",
            policy,
        )
        .unwrap()
}

fn guard(c: Claim) -> ExecutionGuard {
    match c {
        Claim::Execute(g) => g,
        other => panic!("expected Execute, got {other:?}"),
    }
}

#[test]
fn expired_external_lease_is_uncertain_until_resolved() {
    let (store, clock, scope, key) = setup();
    let policy = policy(EffectKind::External);
    let first = guard(claim(&store, &scope, &key, &policy));
    clock.advance(Duration::from_secs(31));
    for _ in 0..3 {
        match claim(&store, &scope, &key, &policy) {
            Claim::Uncertain { since, log_ref } => {
                assert_eq!(since, first.lease_expires_at());
                assert_eq!(log_ref, scope.record_id(&key).log_ref());
            }
            other => panic!("an expired External lease must be uncertain, got {other:?}"),
        }
        clock.advance(Duration::from_secs(3_600));
    }
    let unresolved = store.list_unresolved().unwrap();
    assert_eq!(unresolved.len(), 1);
    assert!(matches!(
        unresolved[0].record.state,
        RecordState::Unknown {
            reason: UnknownReason::LeaseExpired,
            ..
        }
    ));
    // The worker vanished without reporting.
    first.abandon();
    store
        .resolve(&scope, &key, Resolution::NotApplied, &policy)
        .unwrap();
    let again = guard(claim(&store, &scope, &key, &policy));
    assert_eq!(again.attempt(), 2);
    again
        .complete(StoredResponse::new(201, b"booked".to_vec()))
        .unwrap();
}

#[test]
fn expired_local_lease_is_taken_over_and_the_old_owner_is_fenced() {
    let (store, clock, scope, key) = setup();
    let policy = policy(EffectKind::Local);
    let old = guard(claim(&store, &scope, &key, &policy));
    clock.advance(Duration::from_secs(30));
    let new = guard(claim(&store, &scope, &key, &policy));
    assert!(new.token() > old.token());
    assert_eq!(new.attempt(), 2);
    let (old_token, new_token) = (old.token(), new.token());
    match old.complete(StoredResponse::new(200, b"old".to_vec())) {
        Err(WorkerError::Rejected { error, log_ref }) => {
            assert_eq!(
                error,
                TransitionError::StaleToken {
                    presented: old_token,
                    current: new_token
                }
            );
            assert_eq!(log_ref, scope.record_id(&key).log_ref());
        }
        other => panic!("the old owner's completion must be refused, got {other:?}"),
    }
    new.complete(StoredResponse::new(200, b"new".to_vec()))
        .unwrap();
    match claim(&store, &scope, &key, &policy) {
        Claim::Replay { response, .. } => assert_eq!(response.body.as_deref(), Some(&b"new"[..])),
        other => panic!("expected the new owner's response, got {other:?}"),
    }
}

#[test]
fn dropped_guard_releases_local_and_marks_external_unknown() {
    let (store, _clock, scope, _) = setup();
    let local_key = IdempotencyKey::new("local").unwrap();
    let external_key = IdempotencyKey::new("external").unwrap();
    drop(guard(claim(
        &store,
        &scope,
        &local_key,
        &policy(EffectKind::Local),
    )));
    drop(guard(claim(
        &store,
        &scope,
        &external_key,
        &policy(EffectKind::External),
    )));
    let local = store.get(&scope, &local_key).unwrap().unwrap();
    assert_eq!(local.state.name(), StateName::Released);
    let external = store.get(&scope, &external_key).unwrap().unwrap();
    assert!(matches!(
        external.state,
        RecordState::Unknown {
            reason: UnknownReason::GuardDropped,
            ..
        }
    ));
    assert!(matches!(
        claim(&store, &scope, &local_key, &policy(EffectKind::Local)),
        Claim::Execute(_)
    ));
    assert!(matches!(
        claim(&store, &scope, &external_key, &policy(EffectKind::External)),
        Claim::Uncertain { .. }
    ));
}

#[test]
fn a_renewing_worker_is_never_taken_over() {
    let (store, clock, scope, key) = setup();
    let policy = policy(EffectKind::Local);
    let g = guard(claim(&store, &scope, &key, &policy));
    let renewer = g.renewer();
    for _ in 0..20 {
        clock.advance(Duration::from_secs(10));
        renewer.renew().unwrap();
        assert!(matches!(
            claim(&store, &scope, &key, &policy),
            Claim::InFlight { .. }
        ));
    }
    g.complete(StoredResponse::new(200, Vec::new())).unwrap();
}

/// A guard decides its next transition on the record it wrote last, without a
/// read; only a write is checked against the stored version. An answer that
/// writes nothing (a step begun before: dispatch it again) must not come from
/// that record after another worker took the lease over: the fenced worker is
/// told its token is stale, and does not dispatch.
#[test]
fn a_fenced_guard_is_refused_even_where_its_answer_would_write_nothing() {
    let (store, clock, scope, key) = setup();
    let policy = policy(EffectKind::Local);
    let mut fenced = guard(claim(&store, &scope, &key, &policy));
    assert!(matches!(
        fenced.begin_step("charge", "pk-1").unwrap(),
        idemkit::core::machine::StepStart::Dispatch { .. }
    ));
    clock.advance(Duration::from_secs(31));
    let current = guard(claim(&store, &scope, &key, &policy));
    assert!(current.token() > fenced.token());
    match fenced.begin_step("charge", "pk-1") {
        Err(WorkerError::Rejected {
            error: TransitionError::StaleToken { .. },
            ..
        }) => {}
        other => panic!("a fenced worker must not be told to dispatch: {other:?}"),
    }
    fenced.abandon();
    current
        .complete(StoredResponse::new(200, Vec::new()))
        .unwrap();
}

#[test]
fn recover_reuses_the_persisted_provider_key() {
    let (store, clock, scope, key) = setup();
    let policy = policy(EffectKind::External);
    let mut worker = guard(claim(&store, &scope, &key, &policy));
    let start = worker.begin_step("charge", "pk-first").unwrap();
    assert_eq!(
        start,
        idemkit::core::machine::StepStart::Dispatch {
            provider_key: "pk-first".into()
        }
    );
    worker.abandon();
    clock.advance(Duration::from_secs(60));
    let mut reconciler = store.recover(&scope, &key, "reconciler", &policy).unwrap();
    assert_eq!(reconciler.steps().len(), 1);
    let again = reconciler.begin_step("charge", "pk-invented").unwrap();
    assert_eq!(
        again,
        idemkit::core::machine::StepStart::Dispatch {
            provider_key: "pk-first".into()
        }
    );
    reconciler
        .complete_step("charge", Some("ch_1".into()))
        .unwrap();
    reconciler
        .complete(StoredResponse::new(201, b"charged".to_vec()))
        .unwrap();
}
