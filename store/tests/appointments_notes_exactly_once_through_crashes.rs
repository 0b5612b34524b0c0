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

mod support;

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
