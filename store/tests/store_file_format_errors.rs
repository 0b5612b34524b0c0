//! The store's own format checks: an unknown store format version and record
//! bytes that do not decode are typed errors naming the record, never a misread
//! and never a panic.

use idemkit::core::machine::Policy;
use idemkit::redb_store::{ClaimError, OpenError, StorageError, Store};
use idemkit::{Fingerprint, IdempotencyKey, Scope};

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
    drop(Store::open(&path).unwrap());
    raw_write(&path, |txn| {
        txn.open_table(META)
            .unwrap()
            .insert("format", 2u32.to_le_bytes().as_slice())
            .unwrap();
    });
    match Store::open(&path) {
        Err(OpenError::UnsupportedFormat { found, supported }) => {
            assert_eq!((found, supported), (2, idemkit::redb_store::FORMAT_VERSION));
        }
        other => panic!("expected UnsupportedFormat, got {other:?}"),
    }
}

#[test]
fn undecodable_record_bytes_are_a_typed_error_naming_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad-record.redb");
    drop(Store::open(&path).unwrap());
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
        let store = Store::open(&path).unwrap();
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
