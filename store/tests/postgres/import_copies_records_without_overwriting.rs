//! `Store::import` copies records into another store in one transaction: every
//! state survives the copy with its indexes, a copied completion replays, a
//! copied Unknown stays unresolved, and a record the target already holds is
//! never overwritten (so an import cannot turn a completed operation back into a
//! running one). The same checks run against PostgreSQL through
//! scripts/with-postgres.sh.

#[cfg(feature = "postgres")]
use crate::support::pg as pg_support;

use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, StateName, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey};

use crate::support::scope;

fn key(name: &str) -> IdempotencyKey {
    IdempotencyKey::new(name).unwrap()
}

fn execute(store: &Store, name: &str) -> idemkit::store::ExecutionGuard {
    let policy = Policy::default().with_effect(EffectKind::External);
    match store
        .claim(
            &scope(),
            &key(name),
            Fingerprint::from_bytes([7; 32]),
            "w",
            &policy,
        )
        .unwrap()
    {
        Claim::Execute(guard) => guard,
        other => panic!("{name}: expected Execute, got {other:?}"),
    }
}

fn response(body: &str) -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![("content-type".into(), b"application/json".to_vec())],
        body: Some(body.as_bytes().to_vec()),
        resource_ref: Some(format!("ref-{body}")),
    }
}

/// Completed `done-0..n`, one Running `running`, one Unknown `unknown`.
fn source(n: usize) -> Store {
    let store = idemkit::in_memory().unwrap();
    for i in 0..n {
        execute(&store, &format!("done-{i}"))
            .complete(response(&i.to_string()))
            .unwrap();
    }
    std::mem::forget(execute(&store, "running")); // still running: its guard never ends
    execute(&store, "unknown")
        .mark_unknown("timeout at the provider")
        .unwrap();
    store
}

fn state(store: &Store, name: &str) -> Option<StateName> {
    store
        .get(&scope(), &key(name))
        .unwrap()
        .map(|r| r.state.name())
}

/// What a listing holds, without each record's version: a version is the
/// store's own (it counts that store's writes), not part of the record.
fn contents(
    listed: Vec<idemkit::store::ListedRecord>,
) -> Vec<(
    idemkit::core::Scope,
    idemkit::core::IdempotencyKey,
    idemkit::core::record::Record,
)> {
    listed
        .into_iter()
        .map(|r| (r.scope, r.key, r.record))
        .collect()
}

#[test]
fn every_state_is_copied_with_its_indexes() {
    let from = source(50);
    let records = from.list(None).unwrap();
    assert_eq!(records.len(), 52);

    let to = idemkit::in_memory().unwrap();
    let report = to
        .import(records.iter().map(|r| (&r.scope, &r.key, &r.record)))
        .unwrap();
    assert_eq!((report.imported, report.skipped), (52, 0));
    assert_eq!(
        contents(to.list(None).unwrap()),
        contents(records),
        "byte-for-byte the same records"
    );
    let verify = to.verify().unwrap();
    assert_eq!(verify.records, 52);
    assert!(
        verify.problems.is_empty(),
        "indexes derived: {:?}",
        verify.problems
    );
    assert_eq!(
        to.adapter_as::<idemkit::adapters::redb::RedbAdapter>()
            .unwrap()
            .commit_stats()
            .commits,
        1,
        "one transaction for the whole batch"
    );

    // The copy behaves like the original: a completion replays, Unknown stays
    // unresolved, and the retry of a Running record waits.
    let policy = Policy::default().with_effect(EffectKind::External);
    let fp = Fingerprint::from_bytes([7; 32]);
    match to
        .claim(&scope(), &key("done-3"), fp, "w2", &policy)
        .unwrap()
    {
        Claim::Replay { response: r, .. } => assert_eq!(r.body.as_deref(), Some(&b"3"[..])),
        other => panic!("expected Replay, got {other:?}"),
    }
    assert!(matches!(
        to.claim(&scope(), &key("unknown"), fp, "w2", &policy)
            .unwrap(),
        Claim::Uncertain { .. }
    ));
    assert!(matches!(
        to.claim(&scope(), &key("running"), fp, "w2", &policy)
            .unwrap(),
        Claim::InFlight { .. }
    ));
    let unresolved: Vec<_> = to
        .list_unresolved()
        .unwrap()
        .into_iter()
        .map(|r| r.key)
        .collect();
    assert!(unresolved.contains(&key("unknown")));
}

#[test]
fn a_record_already_present_is_never_overwritten() {
    let from = source(3);
    let records = from.list(None).unwrap();
    let to = idemkit::in_memory().unwrap();
    // The target is in use: `done-1` is running there.
    std::mem::forget(execute(&to, "done-1"));

    let report = to
        .import(records.iter().map(|r| (&r.scope, &r.key, &r.record)))
        .unwrap();
    assert_eq!((report.imported, report.skipped), (4, 1));
    assert_eq!(
        state(&to, "done-1"),
        Some(StateName::Running),
        "kept as it was"
    );
    assert_eq!(state(&to, "done-2"), Some(StateName::Completed));

    // Importing again changes nothing and commits nothing.
    let commits = to
        .adapter_as::<idemkit::adapters::redb::RedbAdapter>()
        .unwrap()
        .commit_stats()
        .commits;
    let again = to
        .import(records.iter().map(|r| (&r.scope, &r.key, &r.record)))
        .unwrap();
    assert_eq!((again.imported, again.skipped), (0, 5));
    assert_eq!(
        to.adapter_as::<idemkit::adapters::redb::RedbAdapter>()
            .unwrap()
            .commit_stats()
            .commits,
        commits
    );
}

#[test]
fn an_import_survives_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copy.redb");
    let records = source(10).list(None).unwrap();
    {
        let to = idemkit::open(&path).unwrap();
        to.import(records.iter().map(|r| (&r.scope, &r.key, &r.record)))
            .unwrap();
    }
    // Shared: a file opened for life would settle the imported running record
    // as an orphan of a process that is gone.
    let reopened = Store::from(
        idemkit::adapters::redb::RedbAdapter::open_shared(
            &path,
            idemkit::adapters::redb::LockRetry::default(),
        )
        .unwrap(),
    );
    assert_eq!(contents(reopened.list(None).unwrap()), contents(records));
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_import_keeps_present_records() {
    let pg = pg_support::fresh_store("import");
    let to = Store::from(pg);
    let records = source(20).list(None).unwrap();
    std::mem::forget(execute(&to, "done-4"));

    let report = to
        .import(records.iter().map(|r| (&r.scope, &r.key, &r.record)))
        .unwrap();
    assert_eq!((report.imported, report.skipped), (21, 1));
    assert_eq!(
        state(&to, "done-4"),
        Some(StateName::Running),
        "kept as it was"
    );
    for r in records.iter().filter(|r| r.key != key("done-4")) {
        assert_eq!(to.get(&r.scope, &r.key).unwrap().as_ref(), Some(&r.record));
    }
    let again = to
        .import(records.iter().map(|r| (&r.scope, &r.key, &r.record)))
        .unwrap();
    assert_eq!((again.imported, again.skipped), (0, 22));
}
