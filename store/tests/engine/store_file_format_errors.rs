//! The store's own format checks: an unknown store format version and record
//! bytes that do not decode are typed errors naming the record, never a misread
//! and never a panic; a format-1 file (written before records carried their
//! version) opens, upgraded in place.

use std::collections::BTreeMap;

use idemkit::adapters::redb::FORMAT_VERSION;
use idemkit::adapters::redb::{LockRetry, OpenError};
use idemkit::core::machine::{Policy, Resolution};
use idemkit::core::record::StateName;
use idemkit::store::{Claim, ClaimError, StorageError, Store};
use idemkit::{Fingerprint, IdempotencyKey, Scope};
use redb::ReadableDatabase;

const META: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("idemkit.meta");
const RECORDS: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("idemkit.records");

fn raw_write(path: &std::path::Path, f: impl FnOnce(&redb::WriteTransaction)) {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    f(&txn);
    txn.commit().unwrap();
}

#[test]
fn a_newer_store_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.redb");
    drop(idemkit::open(&path).unwrap());
    raw_write(&path, |txn| {
        txn.open_table(META)
            .unwrap()
            .insert("format", (FORMAT_VERSION + 1).to_le_bytes().as_slice())
            .unwrap();
    });
    match idemkit::open(&path) {
        Err(OpenError::UnsupportedFormat { found, supported }) => {
            assert_eq!((found, supported), (FORMAT_VERSION + 1, FORMAT_VERSION));
        }
        other => panic!("expected UnsupportedFormat, got {other:?}"),
    }
}

#[test]
fn undecodable_record_bytes_are_a_typed_error_naming_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad-record.redb");
    drop(idemkit::open(&path).unwrap());
    let scope = Scope::new("acme", "charge").unwrap();
    let key = IdempotencyKey::new("k").unwrap();
    let id = scope.record_id(&key);
    for bytes in [&[][..], &[9, 1, 2, 3][..], &[1, 0xff, 0xff, 0xff][..]] {
        raw_write(&path, |txn| {
            txn.open_table(RECORDS)
                .unwrap()
                .insert(id.as_bytes(), bytes)
                .unwrap();
        });
        let store = idemkit::open(&path).unwrap();
        let claim = store.claim(
            &scope,
            &key,
            Fingerprint::from_bytes([0; 32]),
            "w",
            &Policy::default(),
        );
        match claim {
            Err(ClaimError::Storage(StorageError::CorruptRecord { log_ref, detail })) => {
                assert_eq!(log_ref, Some(id.log_ref()));
                assert!(!detail.is_empty());
            }
            other => panic!("{bytes:?}: expected CorruptRecord, got {other:?}"),
        }
        assert!(store.list(None).is_err());
        let report = store.verify().unwrap();
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert!(report.problems[0].contains(&id.log_ref().to_string()));
        // Other keys still work.
        let other = IdempotencyKey::new("other").unwrap();
        assert!(
            store
                .claim(
                    &scope,
                    &other,
                    Fingerprint::from_bytes([0; 32]),
                    "w",
                    &Policy::default()
                )
                .is_ok()
        );
    }
}

/// `tests/data/format1.redb` was written by idemkit at commit af2ee8b (format 1)
/// with the CLI: `idemkit exec --db f1.redb` for acme/invoice.send/inv-1
/// (`echo sent-1`: completed), acme/invoice.send/inv-2 (`--effect external --
/// false`: unknown), acme/import/batch-3 (`--effect local -- false`: released)
/// and beta/invoice.send/inv-1 (`echo sent-beta`: completed).
fn format_1_copy(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("format1.redb");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/format1.redb"),
        &path,
    )
    .unwrap();
    path
}

fn format_in(path: &std::path::Path) -> u32 {
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    let meta = txn.open_table(META).unwrap();
    let format = meta.get("format").unwrap().unwrap();
    u32::from_le_bytes(format.value().try_into().unwrap())
}

#[test]
fn a_format_1_file_opens_upgraded_with_every_record() {
    for shared in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = format_1_copy(dir.path());
        assert_eq!(format_in(&path), 1);
        let store = if shared {
            Store::from(
                idemkit::adapters::redb::RedbAdapter::open_shared(&path, LockRetry::default())
                    .unwrap(),
            )
        } else {
            idemkit::open(&path).unwrap()
        };
        let states: BTreeMap<String, StateName> = store
            .list(None)
            .unwrap()
            .into_iter()
            .map(|r| {
                let address = format!("{}/{}/{}", r.scope.tenant(), r.scope.operation(), r.key);
                (address, r.record.state.name())
            })
            .collect();
        assert_eq!(
            states,
            BTreeMap::from([
                ("acme/import/batch-3".to_owned(), StateName::Released),
                ("acme/invoice.send/inv-1".to_owned(), StateName::Completed),
                ("acme/invoice.send/inv-2".to_owned(), StateName::Unknown),
                ("beta/invoice.send/inv-1".to_owned(), StateName::Completed),
            ]),
            "shared: {shared}"
        );
        assert!(store.verify().unwrap().problems.is_empty());

        // The upgraded records take writes as any other: the Unknown one is
        // resolved, a new key claims, executes and replays.
        let scope = Scope::new("acme", "invoice.send").unwrap();
        let unknown = IdempotencyKey::new("inv-2").unwrap();
        let resolved = store
            .resolve(&scope, &unknown, Resolution::NotApplied, &Policy::default())
            .unwrap();
        assert_eq!(resolved.state.name(), StateName::Released);
        let fresh = IdempotencyKey::new("inv-9").unwrap();
        let fingerprint = Fingerprint::from_bytes([9; 32]);
        match store
            .claim(&scope, &fresh, fingerprint, "w", &Policy::default())
            .unwrap()
        {
            Claim::Execute(guard) => guard
                .complete(idemkit::core::record::StoredResponse::new(
                    201,
                    b"ok".to_vec(),
                ))
                .unwrap(),
            other => panic!("expected Execute, got {other:?}"),
        }
        assert!(matches!(
            store
                .claim(&scope, &fresh, fingerprint, "w", &Policy::default())
                .unwrap(),
            Claim::Replay { .. }
        ));
        drop(store);
        assert_eq!(format_in(&path), FORMAT_VERSION, "shared: {shared}");
        // And it opens again as format 2, unchanged.
        let store = idemkit::open(&path).unwrap();
        assert_eq!(store.list(None).unwrap().len(), 5);
        assert!(store.verify().unwrap().problems.is_empty());
    }
}
