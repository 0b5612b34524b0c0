//! The conformance suite: the decision table of docs/architecture.md, run on
//! a [`Store`] whose clock the suite drives ([`ManualClock`]), so that the
//! engine over every adapter gives the same answers (redb file-backed, shared
//! and in memory, and the memory adapter, in `tests/engine/conformance.rs`;
//! PostgreSQL, with `PgClock::following` the suite's clock, in
//! `tests/postgres/conformance.rs`); and [`seam`], what each adapter must do
//! on its own. The npm package's stores have their own suite
//! (`wasm/test/conformance.js`). Feature `testing`.
//!
//! ```no_run
//! idemkit::conformance::run_all(|clock| idemkit::in_memory().unwrap().with_clock(clock));
//! ```
//!
//! Each check gets a fresh store from `make` and a [`Subject`] over it. A
//! failing check panics with its name, like a test.
//!

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "conformance checks are test code: a failure must abort the test run"
)]

use std::time::Duration;

use idemkit_core::machine::{
    ClaimOutcome, Dispatch, Disposition, Policy, Resolution, StepStart, TransitionError,
    classify_attempt,
};
use idemkit_core::record::{
    EffectKind, FencingToken, RecordState, StateName, StoredResponse, UnknownReason,
};
use idemkit_core::{Fingerprint, IdempotencyKey, RequestFingerprint, Scope, UnixMillis};

use crate::clock::ManualClock;
use crate::store::{Store, WorkerError};

pub mod seam;
mod subject;

pub use subject::Subject;

/// One named check.
pub type Check = (&'static str, fn(&Subject));

/// Every check, by name.
#[must_use]
pub fn checks() -> Vec<Check> {
    vec![
        ("first_claim_executes", first_claim_executes),
        (
            "concurrent_attempt_is_in_flight",
            concurrent_attempt_is_in_flight,
        ),
        ("completion_replays", completion_replays),
        ("changed_payload_is_refused", changed_payload_is_refused),
        (
            "another_request_line_is_a_mismatch",
            another_request_line_is_a_mismatch,
        ),
        (
            "a_scheme_1_record_is_compared_under_scheme_1",
            a_scheme_1_record_is_compared_under_scheme_1,
        ),
        ("scopes_are_isolated", scopes_are_isolated),
        ("release_lets_a_retry_execute", release_lets_a_retry_execute),
        (
            "local_lease_expiry_is_taken_over",
            local_lease_expiry_is_taken_over,
        ),
        (
            "external_lease_expiry_is_uncertain",
            external_lease_expiry_is_uncertain,
        ),
        (
            "resolve_not_applied_executes_again",
            resolve_not_applied_executes_again,
        ),
        (
            "mark_unknown_blocks_until_resolved",
            mark_unknown_blocks_until_resolved,
        ),
        (
            "resolve_at_a_seen_version_refuses_a_changed_record",
            resolve_at_a_seen_version_refuses_a_changed_record,
        ),
        ("renew_keeps_the_lease", renew_keeps_the_lease),
        (
            "recovery_reuses_persisted_provider_keys",
            recovery_reuses_persisted_provider_keys,
        ),
        (
            "completed_without_body_is_response_expired",
            completed_without_body_is_response_expired,
        ),
        ("gc_prunes_then_deletes", gc_prunes_then_deletes),
        (
            "gc_never_touches_running_or_unknown",
            gc_never_touches_running_or_unknown,
        ),
        ("gc_runs_in_bounded_batches", gc_runs_in_bounded_batches),
        ("list_unresolved_from_indexes", list_unresolved_from_indexes),
        ("missing_record_is_not_found", missing_record_is_not_found),
        (
            "retry_later_statuses_follow_the_effect_kind",
            retry_later_statuses_follow_the_effect_kind,
        ),
        (
            "redirects_are_stored_and_replayed",
            redirects_are_stored_and_replayed,
        ),
        (
            "an_unrecorded_outcome_is_marked_unknown_never_released",
            an_unrecorded_outcome_is_marked_unknown_never_released,
        ),
    ]
}

/// Runs every check, each on a fresh store from `make`, which must decide by
/// the clock it is given.
pub fn run_all(make: impl Fn(ManualClock) -> Store) {
    for (name, check) in checks() {
        let clock = ManualClock::new(T0);
        let subject = Subject::new(make(clock.clone()), clock);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&subject)));
        if let Err(payload) = result {
            let why = crate::panic_text(payload.as_ref());
            panic!("conformance check {name} failed: {why}");
        }
    }
}

const T0: UnixMillis = UnixMillis::from_millis(1_800_000_000_000);

fn at(offset: Duration) -> UnixMillis {
    T0.saturating_add(offset)
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn scope() -> Scope {
    Scope::new("acme", "appointments.create").unwrap()
}

fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::new(k).unwrap()
}

/// A scheme-1 request fingerprint (the suite's records are not about the request
/// line, except where a scenario says so).
fn fp(n: u8) -> RequestFingerprint {
    Fingerprint::from_bytes([n; 32]).into()
}

fn local() -> Policy {
    Policy::default()
        .with_effect(EffectKind::Local)
        .with_lease(secs(30))
        .with_replay_window(secs(3_600))
        .with_record_window(secs(7_200))
}

fn external() -> Policy {
    local().with_effect(EffectKind::External)
}

fn response(body: &str) -> StoredResponse {
    let mut r = StoredResponse::new(201, body.as_bytes().to_vec());
    r.resource_ref = Some(format!("res-{body}"));
    r
}

fn execute(
    b: &Subject,
    scope: &Scope,
    k: &IdempotencyKey,
    policy: &Policy,
    now: UnixMillis,
) -> FencingToken {
    match b.claim(scope, k, fp(1), "worker", policy, now).unwrap() {
        ClaimOutcome::Execute { token, .. } => token,
        other => panic!("expected Execute, got {other:?}"),
    }
}

fn refused(result: Result<impl std::fmt::Debug, WorkerError>) -> TransitionError {
    match result {
        Err(e) => e
            .transition_error()
            .cloned()
            .unwrap_or_else(|| panic!("expected a transition error, got {e}")),
        Ok(v) => panic!("expected a refusal, got Ok({v:?})"),
    }
}

fn first_claim_executes(b: &Subject) {
    let outcome = b
        .claim(&scope(), &key("k"), fp(1), "w", &local(), T0)
        .unwrap();
    match outcome {
        ClaimOutcome::Execute {
            token,
            attempt,
            lease_expires_at,
            steps,
        } => {
            assert_eq!(token, FencingToken::FIRST);
            assert_eq!(attempt, 1);
            assert_eq!(lease_expires_at, at(secs(30)));
            assert!(steps.is_empty());
        }
        other => panic!("expected Execute, got {other:?}"),
    }
    let record = b
        .get(&scope(), &key("k"))
        .unwrap()
        .expect("claim is durable");
    assert_eq!(record.state.name(), StateName::Running);
    assert_eq!(record.fingerprint, fp(1).value());
}

fn concurrent_attempt_is_in_flight(b: &Subject) {
    execute(b, &scope(), &key("k"), &local(), T0);
    let outcome = b
        .claim(
            &scope(),
            &key("k"),
            fp(1),
            "other",
            &local(),
            at(Duration::from_millis(10_500)),
        )
        .unwrap();
    assert_eq!(
        outcome,
        ClaimOutcome::InFlight {
            retry_after: secs(20)
        }
    );
}

fn completion_replays(b: &Subject) {
    let token = execute(b, &scope(), &key("k"), &external(), T0);
    b.complete(
        &scope(),
        &key("k"),
        token,
        response("a"),
        &external(),
        at(secs(1)),
    )
    .unwrap();
    for later in [2, 60, 3_600] {
        let outcome = b
            .claim(
                &scope(),
                &key("k"),
                fp(1),
                "w",
                &external(),
                at(secs(later)),
            )
            .unwrap();
        assert_eq!(
            outcome,
            ClaimOutcome::Replay {
                response: response("a")
            },
            "at +{later}s"
        );
    }
    // A second completion with the same token is refused: the outcome is final.
    let again = b.complete(
        &scope(),
        &key("k"),
        token,
        response("b"),
        &external(),
        at(secs(2)),
    );
    assert!(matches!(refused(again), TransitionError::WrongState { .. }));
}

/// Claims with `first`, then with each of `others` while it runs and after it
/// completed (`response("a")`): a mismatch every time, never a write.
fn mismatch_in_every_state(b: &Subject, first: RequestFingerprint, others: &[RequestFingerprint]) {
    let Ok(ClaimOutcome::Execute { token, .. }) =
        b.claim(&scope(), &key("k"), first, "w", &local(), T0)
    else {
        panic!("a fresh key executes")
    };
    for (at_s, other) in others.iter().enumerate() {
        let running = b
            .claim(
                &scope(),
                &key("k"),
                *other,
                "w",
                &local(),
                at(secs(1 + at_s as u64)),
            )
            .unwrap();
        assert_eq!(
            running,
            ClaimOutcome::Mismatch { status: 422 },
            "running: {other:?}"
        );
    }
    b.complete(
        &scope(),
        &key("k"),
        token,
        response("a"),
        &local(),
        at(secs(10)),
    )
    .unwrap();
    for other in others {
        let done = b
            .claim(&scope(), &key("k"), *other, "w", &local(), at(secs(11)))
            .unwrap();
        assert_eq!(
            done,
            ClaimOutcome::Mismatch { status: 422 },
            "completed: {other:?}"
        );
    }
    let record = b.get(&scope(), &key("k")).unwrap().unwrap();
    assert_eq!(
        record.fingerprint,
        first.value(),
        "a mismatch never overwrites"
    );
    assert_eq!(record.state.name(), StateName::Completed);
}

fn changed_payload_is_refused(b: &Subject) {
    mismatch_in_every_state(b, fp(1), &[fp(2)]);
}

/// A scheme-2 request fingerprint (the request line counts) whose body-only
/// (scheme-1) part is `fp(body)`.
fn with_line(line: u8, body: u8) -> RequestFingerprint {
    RequestFingerprint::with_request_line(
        Fingerprint::from_bytes([line; 32]),
        Fingerprint::from_bytes([body; 32]),
    )
}

/// One key, one body, another path or query (or no request line at all): a
/// mismatch in every state; the same request replays, and the record keeps its
/// scheme-2 fingerprint.
fn another_request_line_is_a_mismatch(b: &Subject) {
    mismatch_in_every_state(b, with_line(7, 1), &[with_line(8, 1), fp(1)]);
    let same = b
        .claim(
            &scope(),
            &key("k"),
            with_line(7, 1),
            "w",
            &local(),
            at(secs(12)),
        )
        .unwrap();
    assert_eq!(
        same,
        ClaimOutcome::Replay {
            response: response("a")
        }
    );
    let record = b.get(&scope(), &key("k")).unwrap().unwrap();
    assert_eq!(
        record.fingerprint_scheme,
        idemkit_core::fingerprint::SCHEME_REQUEST_LINE
    );
}

/// A record written before the request line counted (scheme 1) is compared with
/// a scheme-2 request's body-only fingerprint: the upgrade turns no retry into a
/// 422, and a changed body is still refused.
fn a_scheme_1_record_is_compared_under_scheme_1(b: &Subject) {
    let token = execute(b, &scope(), &key("k"), &local(), T0);
    b.complete(
        &scope(),
        &key("k"),
        token,
        response("a"),
        &local(),
        at(secs(1)),
    )
    .unwrap();
    let retry = b
        .claim(
            &scope(),
            &key("k"),
            with_line(7, 1),
            "w",
            &local(),
            at(secs(2)),
        )
        .unwrap();
    assert_eq!(
        retry,
        ClaimOutcome::Replay {
            response: response("a")
        }
    );
    let changed = b
        .claim(
            &scope(),
            &key("k"),
            with_line(7, 2),
            "w",
            &local(),
            at(secs(2)),
        )
        .unwrap();
    assert_eq!(changed, ClaimOutcome::Mismatch { status: 422 });
    let record = b.get(&scope(), &key("k")).unwrap().unwrap();
    assert_eq!(
        record.fingerprint_scheme,
        idemkit_core::fingerprint::SCHEME_BODY
    );
}

fn scopes_are_isolated(b: &Subject) {
    let k = key("shared-key");
    let token = execute(b, &scope(), &k, &local(), T0);
    b.complete(&scope(), &k, token, response("a"), &local(), at(secs(1)))
        .unwrap();
    let other_tenant = Scope::new("globex", "appointments.create").unwrap();
    let other_operation = Scope::new("acme", "appointments.cancel").unwrap();
    for other in [&other_tenant, &other_operation] {
        assert!(b.get(other, &k).unwrap().is_none());
        // Another payload under another scope is not a mismatch: it is a new operation.
        let outcome = b
            .claim(other, &k, fp(9), "w", &local(), at(secs(2)))
            .unwrap();
        assert!(
            matches!(outcome, ClaimOutcome::Execute { token, .. } if token == FencingToken::FIRST),
            "{other:?}: {outcome:?}"
        );
    }
    let mine = b
        .claim(&scope(), &k, fp(1), "w", &local(), at(secs(3)))
        .unwrap();
    assert_eq!(
        mine,
        ClaimOutcome::Replay {
            response: response("a")
        }
    );
}

fn release_lets_a_retry_execute(b: &Subject) {
    let first = execute(b, &scope(), &key("k"), &local(), T0);
    b.release(&scope(), &key("k"), first, &local(), at(secs(1)))
        .unwrap();
    match b
        .claim(&scope(), &key("k"), fp(1), "w", &local(), at(secs(2)))
        .unwrap()
    {
        ClaimOutcome::Execute { token, attempt, .. } => {
            assert!(token > first);
            assert_eq!(attempt, 2);
        }
        other => panic!("expected Execute after release, got {other:?}"),
    }
    // The released lease's token is dead.
    let stale = b.complete(
        &scope(),
        &key("k"),
        first,
        response("x"),
        &local(),
        at(secs(3)),
    );
    assert!(matches!(refused(stale), TransitionError::StaleToken { .. }));
}

fn local_lease_expiry_is_taken_over(b: &Subject) {
    let old = execute(b, &scope(), &key("k"), &local(), T0);
    let taken = match b
        .claim(
            &scope(),
            &key("k"),
            fp(1),
            "new-owner",
            &local(),
            at(secs(31)),
        )
        .unwrap()
    {
        ClaimOutcome::Execute { token, attempt, .. } => {
            assert_eq!(attempt, 2);
            token
        }
        other => panic!("expected a takeover, got {other:?}"),
    };
    assert!(taken > old, "a takeover gets a higher fencing token");
    let stale = b.complete(
        &scope(),
        &key("k"),
        old,
        response("old"),
        &local(),
        at(secs(32)),
    );
    assert_eq!(
        refused(stale),
        TransitionError::StaleToken {
            presented: old,
            current: taken
        }
    );
    assert!(matches!(
        refused(b.renew(&scope(), &key("k"), old, &local(), at(secs(32)))),
        TransitionError::StaleToken { .. }
    ));
    b.complete(
        &scope(),
        &key("k"),
        taken,
        response("new"),
        &local(),
        at(secs(33)),
    )
    .unwrap();
    let outcome = b
        .claim(&scope(), &key("k"), fp(1), "w", &local(), at(secs(34)))
        .unwrap();
    assert_eq!(
        outcome,
        ClaimOutcome::Replay {
            response: response("new")
        }
    );
}

fn external_lease_expiry_is_uncertain(b: &Subject) {
    let token = execute(b, &scope(), &key("k"), &external(), T0);
    for later in [31, 100, 10_000] {
        let outcome = b
            .claim(
                &scope(),
                &key("k"),
                fp(1),
                "w",
                &external(),
                at(secs(later)),
            )
            .unwrap();
        assert!(
            matches!(outcome, ClaimOutcome::Uncertain { .. }),
            "an expired External lease is never executed again (+{later}s): {outcome:?}"
        );
    }
    let unresolved = b.list_unresolved(at(secs(10_001))).unwrap();
    assert_eq!(unresolved.len(), 1);
    assert_eq!(unresolved[0].record.state.name(), StateName::Unknown);
    // The original worker may still report the real outcome with its token.
    b.complete(
        &scope(),
        &key("k"),
        token,
        response("late"),
        &external(),
        at(secs(10_002)),
    )
    .unwrap();
    let outcome = b
        .claim(
            &scope(),
            &key("k"),
            fp(1),
            "w",
            &external(),
            at(secs(10_003)),
        )
        .unwrap();
    assert_eq!(
        outcome,
        ClaimOutcome::Replay {
            response: response("late")
        }
    );
    assert!(b.list_unresolved(at(secs(10_004))).unwrap().is_empty());
}

fn resolve_not_applied_executes_again(b: &Subject) {
    let token = execute(b, &scope(), &key("k"), &external(), T0);
    b.mark_unknown(
        &scope(),
        &key("k"),
        token,
        UnknownReason::MarkedByWorker("timeout".into()),
        at(secs(1)),
    )
    .unwrap();
    b.resolve(
        &scope(),
        &key("k"),
        Resolution::NotApplied,
        &external(),
        at(secs(2)),
    )
    .unwrap();
    assert!(matches!(
        b.claim(&scope(), &key("k"), fp(1), "w", &external(), at(secs(3)))
            .unwrap(),
        ClaimOutcome::Execute { attempt: 2, .. }
    ));
}

fn mark_unknown_blocks_until_resolved(b: &Subject) {
    let token = execute(b, &scope(), &key("k"), &external(), T0);
    b.mark_unknown(
        &scope(),
        &key("k"),
        token,
        UnknownReason::MarkedByWorker("x".into()),
        at(secs(1)),
    )
    .unwrap();
    let outcome = b
        .claim(&scope(), &key("k"), fp(1), "w", &external(), at(secs(2)))
        .unwrap();
    assert_eq!(outcome, ClaimOutcome::Uncertain { since: at(secs(1)) });
    // Resolving a record that is not unresolved is refused.
    let other = execute(b, &scope(), &key("live"), &external(), at(secs(2)));
    assert!(matches!(
        refused(b.resolve(
            &scope(),
            &key("live"),
            Resolution::NotApplied,
            &external(),
            at(secs(3))
        )),
        TransitionError::WrongState { .. }
    ));
    b.release(&scope(), &key("live"), other, &external(), at(secs(3)))
        .unwrap();
    b.resolve(
        &scope(),
        &key("k"),
        Resolution::Applied(response("r")),
        &external(),
        at(secs(4)),
    )
    .unwrap();
    let outcome = b
        .claim(&scope(), &key("k"), fp(1), "w", &external(), at(secs(5)))
        .unwrap();
    assert_eq!(
        outcome,
        ClaimOutcome::Replay {
            response: response("r")
        }
    );
}

/// An operator settles what a page showed: a record that changed since (here
/// resolved by someone else, then claimed and left Unknown again) is refused
/// and left as it is; at its current version it is settled.
fn resolve_at_a_seen_version_refuses_a_changed_record(b: &Subject) {
    let token = execute(b, &scope(), &key("k"), &external(), T0);
    b.mark_unknown(
        &scope(),
        &key("k"),
        token,
        UnknownReason::MarkedByWorker("x".into()),
        at(secs(1)),
    )
    .unwrap();
    let version_of = |now| {
        b.list_unresolved(now)
            .unwrap()
            .into_iter()
            .find(|r| r.key == key("k"))
            .expect("the record is unresolved")
            .version
    };
    let seen = version_of(at(secs(2)));
    b.resolve(
        &scope(),
        &key("k"),
        Resolution::NotApplied,
        &external(),
        at(secs(3)),
    )
    .unwrap();
    let token = execute(b, &scope(), &key("k"), &external(), at(secs(4)));
    b.mark_unknown(
        &scope(),
        &key("k"),
        token,
        UnknownReason::MarkedByWorker("y".into()),
        at(secs(5)),
    )
    .unwrap();
    let stale = b.resolve_seen(
        &scope(),
        &key("k"),
        Resolution::Applied(response("r")),
        seen,
        at(secs(6)),
    );
    assert!(
        matches!(stale, Err(WorkerError::Changed { .. })),
        "{stale:?}"
    );
    let kept = b.get(&scope(), &key("k")).unwrap().unwrap();
    assert_eq!(
        kept.state.name(),
        StateName::Unknown,
        "the stale resolve wrote nothing"
    );

    let current = version_of(at(secs(7)));
    assert_ne!(current, seen, "every write gives a new version");
    let settled = b
        .resolve_seen(
            &scope(),
            &key("k"),
            Resolution::Applied(response("r")),
            current,
            at(secs(8)),
        )
        .unwrap();
    assert_eq!(settled.state.name(), StateName::Completed);
}

fn renew_keeps_the_lease(b: &Subject) {
    let token = execute(b, &scope(), &key("k"), &local(), T0);
    let expires = b
        .renew(&scope(), &key("k"), token, &local(), at(secs(25)))
        .unwrap();
    assert_eq!(expires, at(secs(55)));
    // Past the original lease, but within the renewed one: still in flight.
    let outcome = b
        .claim(&scope(), &key("k"), fp(1), "w", &local(), at(secs(40)))
        .unwrap();
    assert!(
        matches!(outcome, ClaimOutcome::InFlight { .. }),
        "{outcome:?}"
    );
    b.complete(
        &scope(),
        &key("k"),
        token,
        response("a"),
        &local(),
        at(secs(41)),
    )
    .unwrap();
}

fn recovery_reuses_persisted_provider_keys(b: &Subject) {
    let token = execute(b, &scope(), &key("k"), &external(), T0);
    let start = b
        .begin_step(&scope(), &key("k"), token, "book", "pk-1", at(secs(1)))
        .unwrap();
    assert_eq!(
        start,
        StepStart::Dispatch {
            provider_key: "pk-1".into()
        }
    );
    b.complete_step(
        &scope(),
        &key("k"),
        token,
        "book",
        Some("appt-1".into()),
        at(secs(2)),
    )
    .unwrap();
    let notify = b
        .begin_step(&scope(), &key("k"), token, "notify", "pk-2", at(secs(3)))
        .unwrap();
    assert_eq!(
        notify,
        StepStart::Dispatch {
            provider_key: "pk-2".into()
        }
    );
    // The worker dies; its lease expires; a reconciler takes over.
    let grant = b
        .recover(
            &scope(),
            &key("k"),
            "reconciler",
            &external(),
            at(secs(100)),
        )
        .unwrap();
    assert!(grant.token > token);
    assert_eq!(grant.steps.len(), 2);
    let book = b
        .begin_step(
            &scope(),
            &key("k"),
            grant.token,
            "book",
            "pk-NEW",
            at(secs(101)),
        )
        .unwrap();
    assert_eq!(
        book,
        StepStart::AlreadyDone {
            provider_ref: Some("appt-1".into())
        }
    );
    let notify = b
        .begin_step(
            &scope(),
            &key("k"),
            grant.token,
            "notify",
            "pk-NEW",
            at(secs(102)),
        )
        .unwrap();
    assert_eq!(
        notify,
        StepStart::Dispatch {
            provider_key: "pk-2".into()
        },
        "a replacement worker never invents a new provider key"
    );
    assert!(matches!(
        refused(b.begin_step(&scope(), &key("k"), token, "notify", "pk-3", at(secs(103)))),
        TransitionError::StaleToken { .. }
    ));
    b.complete(
        &scope(),
        &key("k"),
        grant.token,
        response("done"),
        &external(),
        at(secs(104)),
    )
    .unwrap();
}

/// A response over the stored-response limit is recorded as completed without
/// its body: from the first retry on (inside the replay window too) it is 410
/// material with the resource reference, never a replay and never a new execution.
fn completed_without_body_is_response_expired(b: &Subject) {
    let token = execute(b, &scope(), &key("k"), &external(), T0);
    let mut large = response("large");
    large.body = None;
    b.complete(&scope(), &key("k"), token, large, &external(), at(secs(1)))
        .unwrap();
    let record = b.get(&scope(), &key("k")).unwrap().unwrap();
    match &record.state {
        RecordState::Completed { response, .. } => {
            assert!(response.body.is_none());
            assert_eq!(response.resource_ref.as_deref(), Some("res-large"));
        }
        other => panic!("expected Completed, got {other:?}"),
    }
    for later in [2, 60, 3_601] {
        let outcome = b
            .claim(
                &scope(),
                &key("k"),
                fp(1),
                "w",
                &external(),
                at(secs(later)),
            )
            .unwrap();
        assert_eq!(
            outcome,
            ClaimOutcome::ResponseExpired {
                status: 201,
                resource_ref: Some("res-large".into())
            },
            "at +{later}s"
        );
    }
    // GC keeps it like any completed record until its record window ends.
    let report = b.gc(at(secs(3_601)), 100).unwrap();
    assert_eq!(report.deleted, 0);
    let report = b.gc(at(secs(7_201)), 100).unwrap();
    assert_eq!(report.deleted, 1);
    assert!(b.get(&scope(), &key("k")).unwrap().is_none());
}

fn gc_prunes_then_deletes(b: &Subject) {
    let token = execute(b, &scope(), &key("k"), &local(), T0);
    b.complete(&scope(), &key("k"), token, response("a"), &local(), T0)
        .unwrap();
    assert_eq!(b.gc(at(secs(3_599)), 100).unwrap().pruned, 0);
    let report = b.gc(at(secs(3_600)), 100).unwrap();
    assert_eq!((report.pruned, report.deleted, report.more), (1, 0, false));
    let record = b.get(&scope(), &key("k")).unwrap().unwrap();
    match &record.state {
        RecordState::Completed { response, .. } => assert!(response.body.is_none()),
        other => panic!("expected Completed, got {other:?}"),
    }
    // After the replay window: completed, response gone, never a new execution.
    let outcome = b
        .claim(&scope(), &key("k"), fp(1), "w", &local(), at(secs(3_601)))
        .unwrap();
    assert_eq!(
        outcome,
        ClaimOutcome::ResponseExpired {
            status: 201,
            resource_ref: Some("res-a".into())
        }
    );
    let report = b.gc(at(secs(7_200)), 100).unwrap();
    assert_eq!((report.pruned, report.deleted), (0, 1));
    assert!(b.get(&scope(), &key("k")).unwrap().is_none());
}

fn gc_never_touches_running_or_unknown(b: &Subject) {
    execute(b, &scope(), &key("running"), &local(), T0);
    let t = execute(b, &scope(), &key("unknown"), &external(), T0);
    b.mark_unknown(&scope(), &key("unknown"), t, UnknownReason::Crash, T0)
        .unwrap();
    let far = at(secs(10 * 365 * 24 * 3_600));
    let report = b.gc(far, 100).unwrap();
    assert_eq!((report.pruned, report.deleted), (0, 0));
    assert!(b.get(&scope(), &key("running")).unwrap().is_some());
    assert!(b.get(&scope(), &key("unknown")).unwrap().is_some());
}

fn gc_runs_in_bounded_batches(b: &Subject) {
    for i in 0..25 {
        let k = key(&format!("k{i}"));
        let token = execute(b, &scope(), &k, &local(), T0);
        b.release(&scope(), &k, token, &local(), T0).unwrap();
    }
    let late = at(secs(7_200));
    let mut deleted = 0;
    let mut rounds = 0;
    loop {
        let report = b.gc(late, 10).unwrap();
        assert!(report.deleted <= 10);
        deleted += report.deleted;
        rounds += 1;
        if !report.more {
            break;
        }
        assert!(rounds < 10, "gc does not terminate");
    }
    assert_eq!((deleted, rounds), (25, 3));
}

fn list_unresolved_from_indexes(b: &Subject) {
    execute(b, &scope(), &key("live"), &local(), T0);
    execute(b, &scope(), &key("expired"), &local(), T0);
    let t = execute(b, &scope(), &key("unknown"), &external(), T0);
    b.mark_unknown(
        &scope(),
        &key("unknown"),
        t,
        UnknownReason::Crash,
        at(secs(1)),
    )
    .unwrap();
    let done = execute(b, &scope(), &key("done"), &local(), T0);
    b.complete(
        &scope(),
        &key("done"),
        done,
        response("d"),
        &local(),
        at(secs(1)),
    )
    .unwrap();
    // Renew "live" so that only "expired" is past its lease at +31 s.
    let live = b.get(&scope(), &key("live")).unwrap().unwrap().last_token;
    b.renew(&scope(), &key("live"), live, &local(), at(secs(20)))
        .unwrap();
    let mut keys: Vec<String> = b
        .list_unresolved(at(secs(31)))
        .unwrap()
        .into_iter()
        .map(|l| l.key.to_string())
        .collect();
    keys.sort();
    assert_eq!(keys, ["expired", "unknown"]);
    assert!(
        b.list_unresolved(at(secs(2)))
            .unwrap()
            .iter()
            .all(|l| l.key.as_str() == "unknown")
    );
}

fn missing_record_is_not_found(b: &Subject) {
    let result = b.complete(
        &scope(),
        &key("never-claimed"),
        FencingToken::FIRST,
        response("x"),
        &local(),
        T0,
    );
    match result {
        Err(e) => assert!(matches!(e, WorkerError::NotFound { .. }), "{e}"),
        Ok(()) => panic!("completing a missing record must fail"),
    }
    assert!(b.get(&scope(), &key("never-claimed")).unwrap().is_none());
}

/// Records `status` for lease `token` as core's `classify_attempt` says.
fn record_status(
    b: &Subject,
    k: &IdempotencyKey,
    token: FencingToken,
    status: u16,
    policy: &Policy,
    dispatch: Dispatch,
    now: UnixMillis,
) -> Disposition {
    let disposition = classify_attempt(status, policy, dispatch);
    match disposition {
        Disposition::Store => {
            let r = StoredResponse::new(status, b"answer".to_vec());
            b.complete(&scope(), k, token, r, policy, now).unwrap();
        }
        Disposition::Release => b.release(&scope(), k, token, policy, now).unwrap(),
        Disposition::Unknown => b
            .mark_unknown(
                &scope(),
                k,
                token,
                UnknownReason::MarkedByWorker(format!("status {status}")),
                now,
            )
            .unwrap(),
    }
    disposition
}

fn retry_later_statuses_follow_the_effect_kind(b: &Subject) {
    for status in [408_u16, 409, 425, 429, 500, 503] {
        // External, no evidence: Unknown, and the retry is uncertain (never a
        // second dispatch).
        let k = key(&format!("ext-{status}"));
        let token = execute(b, &scope(), &k, &external(), T0);
        let d = record_status(
            b,
            &k,
            token,
            status,
            &external(),
            Dispatch::Unknown,
            at(secs(1)),
        );
        assert_eq!(d, Disposition::Unknown, "{status}");
        let retry = b
            .claim(&scope(), &k, fp(1), "w", &external(), at(secs(2)))
            .unwrap();
        assert!(
            matches!(retry, ClaimOutcome::Uncertain { .. }),
            "{status}: {retry:?}"
        );
        // External, the record's steps show nothing begun on a route that
        // dispatches only through steps: released, the retry executes.
        let k = key(&format!("ext-nothing-{status}"));
        let token = execute(b, &scope(), &k, &external(), T0);
        let steps = b.get(&scope(), &k).unwrap().unwrap().steps;
        let evidence = Dispatch::from_steps(true, &steps);
        let d = record_status(b, &k, token, status, &external(), evidence, at(secs(1)));
        assert_eq!(d, Disposition::Release, "{status}");
        let retry = b
            .claim(&scope(), &k, fp(1), "w", &external(), at(secs(2)))
            .unwrap();
        assert!(
            matches!(retry, ClaimOutcome::Execute { attempt: 2, .. }),
            "{status}: {retry:?}"
        );
        // A begun step is evidence of a possible dispatch.
        let k = key(&format!("ext-step-{status}"));
        let token = execute(b, &scope(), &k, &external(), T0);
        let start = b
            .begin_step(&scope(), &k, token, "charge", "pk-1", at(secs(1)))
            .unwrap();
        assert!(matches!(start, StepStart::Dispatch { .. }), "{start:?}");
        let steps = b.get(&scope(), &k).unwrap().unwrap().steps;
        let evidence = Dispatch::from_steps(true, &steps);
        let d = record_status(b, &k, token, status, &external(), evidence, at(secs(1)));
        assert_eq!(d, Disposition::Unknown, "{status}");
        // Local: released, the retry executes.
        let k = key(&format!("local-{status}"));
        let token = execute(b, &scope(), &k, &local(), T0);
        let d = record_status(
            b,
            &k,
            token,
            status,
            &local(),
            Dispatch::Unknown,
            at(secs(1)),
        );
        assert_eq!(d, Disposition::Release, "{status}");
        let retry = b
            .claim(&scope(), &k, fp(1), "w", &local(), at(secs(2)))
            .unwrap();
        assert!(
            matches!(retry, ClaimOutcome::Execute { attempt: 2, .. }),
            "{status}: {retry:?}"
        );
    }
}

fn redirects_are_stored_and_replayed(b: &Subject) {
    for (status, policy) in [(303_u16, local()), (303, external()), (101, local())] {
        let k = key(&format!("redirect-{status}-{}", policy.effect));
        let token = execute(b, &scope(), &k, &policy, T0);
        let d = record_status(
            b,
            &k,
            token,
            status,
            &policy,
            Dispatch::Unknown,
            at(secs(1)),
        );
        assert_eq!(d, Disposition::Store, "{status}");
        match b
            .claim(&scope(), &k, fp(1), "w", &policy, at(secs(2)))
            .unwrap()
        {
            ClaimOutcome::Replay { response } => assert_eq!(response.status, status),
            other => panic!("{status}: expected the replay, got {other:?}"),
        }
    }
}

/// What the middleware and the JS handler do when the completion of a response
/// keeps failing: mark the record Unknown instead (for a Local record too), so a
/// retry is uncertain, never executed again.
fn an_unrecorded_outcome_is_marked_unknown_never_released(b: &Subject) {
    for policy in [local(), external()] {
        let k = key(&format!("unrecorded-{}", policy.effect));
        let token = execute(b, &scope(), &k, &policy, T0);
        b.mark_unknown(
            &scope(),
            &k,
            token,
            UnknownReason::MarkedByWorker("status 201 not recorded".into()),
            at(secs(1)),
        )
        .unwrap();
        let retry = b
            .claim(&scope(), &k, fp(1), "w", &policy, at(secs(2)))
            .unwrap();
        assert!(
            matches!(retry, ClaimOutcome::Uncertain { .. }),
            "{}: {retry:?}",
            policy.effect
        );
        assert!(
            b.list_unresolved(at(secs(3)))
                .unwrap()
                .iter()
                .any(|l| l.key == k),
            "{}: listed for an operator",
            policy.effect
        );
        // Still uncertain long after the lease (a Local record is not taken over).
        let later = b
            .claim(&scope(), &k, fp(1), "w", &policy, at(secs(10_000)))
            .unwrap();
        assert!(matches!(later, ClaimOutcome::Uncertain { .. }), "{later:?}");
    }
}
