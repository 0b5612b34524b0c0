//! The conformance suite (`idemkit::conformance`): the decision table through
//! the engine over the redb adapter (in memory, file-backed, shared) and the
//! memory adapter, and the seam checks on each adapter itself.

use idemkit::conformance;
use idemkit::store::Store;

#[test]
fn redb_in_memory_conforms() {
    conformance::run_all(|clock| idemkit::in_memory().unwrap().with_clock(clock));
}

#[test]
fn redb_file_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let counter = std::cell::Cell::new(0);
    conformance::run_all(|clock| {
        counter.set(counter.get() + 1);
        idemkit::open(
            dir.path()
                .join(format!("conformance-{}.redb", counter.get())),
        )
        .unwrap()
        .with_clock(clock)
    });
    assert_eq!(counter.get(), conformance::checks().len());
}

#[test]
fn redb_shared_file_conforms() {
    // The CLI's mode: the file is opened and closed around every transaction.
    let dir = tempfile::tempdir().unwrap();
    let counter = std::cell::Cell::new(0);
    conformance::run_all(|clock| {
        counter.set(counter.get() + 1);
        let path = dir.path().join(format!("shared-{}.redb", counter.get()));
        Store::from(
            idemkit::adapters::redb::RedbAdapter::open_shared(path, Default::default()).unwrap(),
        )
        .with_clock(clock)
    });
}

#[test]
fn memory_adapter_conforms() {
    use std::sync::Arc;
    let made = std::cell::Cell::new(0);
    conformance::run_all(|clock| {
        made.set(made.get() + 1);
        Store::new(Arc::new(idemkit::adapters::memory::MemoryAdapter::default())).with_clock(clock)
    });
    assert_eq!(made.get(), conformance::checks().len());
}

#[test]
fn every_adapter_keeps_the_seam() {
    use idemkit::adapters::memory::MemoryAdapter;
    use idemkit::adapters::redb::{LockRetry, RedbAdapter};
    use std::sync::Arc;
    conformance::seam::run_all(|| Arc::new(MemoryAdapter::default()));
    conformance::seam::run_all(|| Arc::new(RedbAdapter::in_memory().unwrap()));
    let dir = tempfile::tempdir().unwrap();
    let counter = std::cell::Cell::new(0);
    conformance::seam::run_all(|| {
        counter.set(counter.get() + 1);
        let path = dir.path().join(format!("seam-{}.redb", counter.get()));
        Arc::new(RedbAdapter::open_shared(path, LockRetry::default()).unwrap())
    });
}
