//! Operators on a redb file, as real `idemkit` processes: GC reports and skips a
//! record it cannot decode (and never deletes it), `resolve` keeps the windows a
//! record was claimed under and prints what it changed, and fencing tokens never
//! repeat for a key after GC deleted its record; listings come a page at a time.

use crate::support::operators as operators_support;

use std::path::Path;
use std::process::{Command, Output};

use idemkit::adapters::redb::LockRetry;
use idemkit::clock::{Clock, ManualClock, SystemClock};
use idemkit::store::Store;
use idemkit::{IdempotencyKey, Scope};
use operators_support as scenario;
use redb::{Database, ReadableDatabase, TableDefinition};

const RECORDS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idemkit.records");

fn idemkit(subcommand: &str, db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .arg(subcommand)
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .unwrap()
}

fn raw_record(db: &Path, scope: &Scope, key: &IdempotencyKey) -> Option<Vec<u8>> {
    let database = Database::open(db).unwrap();
    let read = database.begin_read().unwrap();
    let table = read.open_table(RECORDS).unwrap();
    let id = scope.record_id(key);
    table
        .get(id.as_bytes())
        .unwrap()
        .map(|v| v.value().to_vec())
}

/// The store as every `idemkit` process opens it: only around each transaction,
/// so the test's processes and raw edits can share the file.
fn shared(db: &Path) -> Store {
    Store::from(
        idemkit::adapters::redb::RedbAdapter::open_shared(db, LockRetry::default()).unwrap(),
    )
}

#[test]
fn gc_past_a_damaged_record_deletes_the_rest_and_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ops.redb");
    scenario::gc_past_a_damaged_record(
        &shared(&db),
        |scope, key| {
            let database = Database::open(&db).unwrap();
            let write = database.begin_write().unwrap();
            {
                let mut table = write.open_table(RECORDS).unwrap();
                let id = scope.record_id(key);
                // A format byte this build knows, then bytes that are no record.
                table
                    .insert(id.as_bytes(), [2_u8, 0xff, 0xff, 0xff].as_slice())
                    .unwrap();
            }
            write.commit().unwrap();
        },
        |args| idemkit("gc", &db, args),
        |scope, key| raw_record(&db, scope, key).is_some(),
    );
}

#[test]
fn resolve_keeps_the_30_day_window_the_record_was_claimed_under() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ops.redb");
    scenario::resolve_keeps_a_30_day_window(
        &shared(&db),
        |args| idemkit("resolve", &db, args),
        || {
            let day_8 = SystemClock.now().saturating_add(8 * scenario::DAY);
            shared(&db).with_clock(ManualClock::new(day_8))
        },
    );
}

#[test]
fn resolve_prints_what_it_changed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ops.redb");
    scenario::resolve_prints_what_it_changed(&shared(&db), |args| idemkit("resolve", &db, args));
}

#[test]
fn a_token_after_gc_is_above_every_token_of_the_deleted_record() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ops.redb");
    let clock = ManualClock::new(SystemClock.now());
    scenario::tokens_never_repeat_after_gc(
        &shared(&db).with_clock(clock.clone()),
        |by| clock.advance(by),
        || shared(&db).with_clock(clock.clone()),
    );
}

#[test]
fn list_page_walks_every_record_a_page_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    scenario::list_page_walks_every_record_a_page_at_a_time(&shared(&dir.path().join("ops.redb")));
}
