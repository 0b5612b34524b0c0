//! The journal gives one key per logical action: created and made durable before
//! the first attempt, the same after a restart, refused for a changed payload.

use idemkit::UnixMillis;
use idemkit::core::client::{ActionStatus, AttemptResult};
use idemkit::journal::{Journal, JournalError};

fn t(ms: u64) -> UnixMillis {
    UnixMillis::from_millis(ms)
}

fn response(status: u16, problem: Option<&str>) -> AttemptResult {
    AttemptResult::Response {
        status,
        problem_type: problem.map(str::to_owned),
        retry_after: None,
        original_status: None,
    }
}

#[test]
fn the_same_action_id_gets_the_same_key_after_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.redb");
    let first = {
        let journal = Journal::open(&path).unwrap();
        let action = journal.begin("run-1/book", b"{\"slot\":1}", t(10)).unwrap();
        assert!(!action.resumed);
        action
    };
    let journal = Journal::open(&path).unwrap();
    let again = journal.begin("run-1/book", b"{\"slot\":1}", t(99)).unwrap();
    assert!(again.resumed);
    assert_eq!(again.key, first.key);
    assert_eq!(again.payload, first.payload);
    assert_eq!(
        again.created_at,
        t(10),
        "the original creation time is kept"
    );
}

#[test]
fn different_actions_get_different_random_keys_even_with_identical_payloads() {
    let journal = Journal::in_memory().unwrap();
    let a = journal.begin("run-1/book-a", b"same", t(0)).unwrap();
    let b = journal.begin("run-1/book-b", b"same", t(0)).unwrap();
    assert_ne!(a.key, b.key);
    assert_eq!(a.key.as_str().len(), 36, "UUID v4 text");
}

#[test]
fn a_changed_payload_under_a_used_action_id_is_refused() {
    let journal = Journal::in_memory().unwrap();
    journal
        .begin("run-1/charge", b"{\"amount\":10}", t(0))
        .unwrap();
    let err = journal
        .begin("run-1/charge", b"{\"amount\":11}", t(1))
        .unwrap_err();
    assert!(
        matches!(err, JournalError::PayloadChanged { ref action_id } if action_id == "run-1/charge")
    );
    assert!(err.to_string().contains("new action id"), "{err}");
}

#[test]
fn status_is_derived_from_attempts_and_never_upgrades_unknown_by_itself() {
    let journal = Journal::in_memory().unwrap();
    let id = "run-2/notify";
    assert_eq!(journal.status(id).unwrap(), None);
    journal.begin(id, b"x", t(0)).unwrap();
    assert_eq!(journal.status(id).unwrap(), Some(ActionStatus::Pending));

    let first = journal.start_attempt(id, t(1)).unwrap();
    assert_eq!(first.number, 1);
    // Killed mid-attempt: the attempt has a start and no end; still pending.
    assert_eq!(journal.status(id).unwrap(), Some(ActionStatus::Pending));
    journal
        .finish_attempt(id, 1, &AttemptResult::Timeout, t(2))
        .unwrap();

    let second = journal.start_attempt(id, t(3)).unwrap();
    assert_eq!(second.number, 2);
    assert_ne!(second.attempt_id, first.attempt_id);
    journal
        .finish_attempt(id, 2, &response(409, Some("outcome-uncertain")), t(4))
        .unwrap();
    assert_eq!(journal.status(id).unwrap(), Some(ActionStatus::Unknown));

    journal.start_attempt(id, t(5)).unwrap();
    journal
        .finish_attempt(id, 3, &AttemptResult::Timeout, t(6))
        .unwrap();
    assert_eq!(journal.status(id).unwrap(), Some(ActionStatus::Unknown));

    let attempts = journal.attempts(id).unwrap();
    assert_eq!(attempts.len(), 3);
    assert_eq!(attempts[0].ended_at, Some(2));
}

#[test]
fn a_deterministic_key_is_kept_for_the_action() {
    let journal = Journal::in_memory().unwrap();
    let key = idemkit::IdempotencyKey::derive("agent", "run-9", "step-2");
    let action = journal
        .begin_with_key("run-9/step-2", b"p", key.clone(), t(0))
        .unwrap();
    assert_eq!(action.key, key);
    assert_eq!(journal.begin("run-9/step-2", b"p", t(1)).unwrap().key, key);
}

#[test]
fn unknown_actions_and_attempts_are_typed_errors() {
    let journal = Journal::in_memory().unwrap();
    assert!(matches!(
        journal.start_attempt("nope", t(0)),
        Err(JournalError::UnknownAction { .. })
    ));
    journal.begin("a", b"", t(0)).unwrap();
    assert!(matches!(
        journal.finish_attempt("a", 7, &AttemptResult::Timeout, t(0)),
        Err(JournalError::UnknownAttempt { number: 7, .. })
    ));
    assert!(matches!(
        journal.begin("", b"", t(0)),
        Err(JournalError::InvalidActionId { len: 0 })
    ));
}

#[test]
fn two_processes_share_one_journal_file() {
    // redb's multi-writer mode: two handles on one file, as two worker processes.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.redb");
    let worker_a = Journal::open(&path).unwrap();
    let worker_b = Journal::open(&path).unwrap();
    let a = worker_a.begin("run-3/pay", b"p", t(0)).unwrap();
    let b = worker_b.begin("run-3/pay", b"p", t(1)).unwrap();
    assert_eq!(a.key, b.key);
    assert!(b.resumed);
}
