//! The appointments service's Local route on PostgreSQL: `POST
//! /appointments/{id}/notes` inserts its note and completes the record in the
//! handler's own transaction (`Execution::complete_in`), so no crash leaves a
//! note without its outcome or an outcome without its note.
//!
//! - `--crash-after-note-write`: the first attempt dies with the note written
//!   in its open transaction; after a restart the retry answers 201 with one note;
//! - SIGKILL at random moments while 4 clients post 240 keys, until 10 kills
//!   landed while keys were unanswered:
//!   every key ends with exactly one note and a 201 that replays.
//!
//! Needs scripts/with-postgres.sh (feature `postgres`).
#![cfg(all(feature = "postgres", feature = "axum"))]

use crate::support;
use crate::support::pg as pg_support;

use std::path::Path;

use support::Service;
use support::notes;

fn starter<'a>(schema: &'a str, dir: &'a Path) -> impl Fn(&[&str]) -> Service + 'a {
    move |extra: &[&str]| {
        let mut args: Vec<std::ffi::OsString> = vec![
            "--postgres".into(),
            pg_support::url().into(),
            "--pg-schema".into(),
            schema.into(),
            "--provider-db".into(),
            dir.join("provider.redb").into(),
            "--lease-ms".into(),
            "400".into(),
        ];
        args.extend(extra.iter().map(Into::into));
        Service::spawn(support::postgres_example_binary(), &args)
    }
}

#[test]
fn postgres_crash_after_note_write_then_retry_writes_one_note() {
    let dir = tempfile::tempdir().unwrap();
    let schema = pg_support::unique_schema("notes_crash");
    notes::crash_after_note_write(&starter(&schema, dir.path()));
}

#[test]
fn postgres_sigkill_sweep_over_the_note_route_leaves_one_note_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let schema = pg_support::unique_schema("notes_sweep");
    notes::sigkill_sweep(&starter(&schema, dir.path()), 240, 4, 10);
}
