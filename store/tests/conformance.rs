//! The backend conformance suite (`idemkit::conformance`) against the redb store,
//! in memory and file-backed.

use idemkit::conformance;
use idemkit::redb_store::Store;

#[test]
fn redb_in_memory_conforms() {
    conformance::run_all(|| Store::in_memory().unwrap());
}

#[test]
fn redb_file_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let counter = std::cell::Cell::new(0);
    conformance::run_all(|| {
        counter.set(counter.get() + 1);
        Store::open(
            dir.path()
                .join(format!("conformance-{}.redb", counter.get())),
        )
        .unwrap()
    });
    assert_eq!(counter.get(), conformance::checks::<Store>().len());
}

#[test]
fn redb_shared_file_conforms() {
    // The CLI's mode: the file is opened and closed around every transaction.
    let dir = tempfile::tempdir().unwrap();
    let counter = std::cell::Cell::new(0);
    conformance::run_all(|| {
        counter.set(counter.get() + 1);
        let path = dir.path().join(format!("shared-{}.redb", counter.get()));
        Store::open_shared(path, Default::default()).unwrap()
    });
}
