//! The appointments service's Local route on redb: `POST
//! /appointments/{id}/notes` writes its note in the same transaction as the
//! record's completion (`idemkit::local`), so no crash leaves a note without
//! its outcome or an outcome without its note.
//!
//! - `--crash-after-note-write`: the first attempt dies inside the
//!   transaction; after a restart the retry answers 201 with one note;
//! - SIGKILL at random moments while 4 clients post 240 keys, until 10 kills
//!   landed while keys were unanswered:
//!   every key ends with exactly one note and a 201 that replays.
#![cfg(feature = "axum")]

use crate::support;

use std::path::Path;

use support::Service;
use support::notes;

fn starter(dir: &Path) -> impl Fn(&[&str]) -> Service + '_ {
    move |extra: &[&str]| {
        let mut args = vec!["--lease-ms", "400"];
        args.extend_from_slice(extra);
        Service::start(dir, &args)
    }
}

#[test]
fn crash_after_note_write_then_retry_writes_one_note() {
    let dir = tempfile::tempdir().unwrap();
    notes::crash_after_note_write(&starter(dir.path()));
}

#[test]
fn sigkill_sweep_over_the_note_route_leaves_one_note_per_key() {
    let dir = tempfile::tempdir().unwrap();
    notes::sigkill_sweep(&starter(dir.path()), 240, 4, 10);
}

/// A note orphaned by a SIGKILL inside its transaction (lease 30 s): the
/// restarted service released it when it opened its store (its note never
/// committed, so no effect exists), and the client's retry right after the
/// restart executes it, once, instead of waiting out the lease.
#[test]
fn a_note_orphaned_by_a_sigkill_runs_once_right_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let start = |extra: &[&str]| {
        let mut args = vec!["--lease-ms", "30000"];
        args.extend_from_slice(extra);
        Service::start(dir.path(), &args)
    };
    let mut service = start(&["--note-write-delay-ms", "10000"]);
    let appointment = notes::book(&service);
    let addr = service.addr;
    let id = appointment.clone();
    let first = std::thread::spawn(move || notes::post_note(addr, &id, "orphan-note", "hello"));
    // Inside the transaction: the retry is in progress. (A retry sent before
    // its original arrived would itself be the execution: wait a moment.)
    std::thread::sleep(std::time::Duration::from_millis(1_000));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let retry = notes::post_note(service.addr, &appointment, "orphan-note", "hello").unwrap();
        if retry.status == 409 && retry.problem() == "request-in-progress" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never in progress: {retry:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    service.child.kill().unwrap();
    let _ = service.child.wait();
    assert!(first.join().unwrap().is_err(), "answered before the kill");
    drop(service);

    let service = start(&[]);
    let retry = notes::post_note(service.addr, &appointment, "orphan-note", "hello").unwrap();
    assert_eq!(retry.status, 201, "{retry:?}");
    let again = notes::post_note(service.addr, &appointment, "orphan-note", "hello").unwrap();
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(notes::notes(&service, &appointment).len(), 1);
}
