//! The PostgreSQL benchmark runs the adapter's own claim and completion under
//! pgbench (`new_key_statements`), so that what the statements cost the server
//! is told apart from what the client costs. Those statements, their
//! parameters written as literals and sent by a plain client, must leave the
//! row the adapter itself would: the adapter reads back the completed record.

#![cfg(feature = "postgres")]

use crate::support::pg as pg_support;

use idemkit::adapters::Adapter;
use idemkit::adapters::memory::MemoryAdapter;
use idemkit::adapters::postgres::{PostgresAdapter, StatementWithLiterals, new_key_statements};
use idemkit::core::machine::Policy;
use idemkit::core::record::{Record, RecordState, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey, RecordId, Scope};

/// `statement` with every parameter its literal.
fn inlined(statement: &StatementWithLiterals) -> String {
    let sql = statement.inlined(&[]);
    assert!(!sql.contains('$'), "a parameter was left: {sql}");
    sql
}

/// The Running and the Completed record of one key's claim + complete, as the
/// engine writes them (here on the memory adapter).
fn records_of(scope: &Scope, key: &IdempotencyKey) -> (RecordId, Record, Record) {
    let store = Store::from(MemoryAdapter::default());
    let memory = store.adapter_as::<MemoryAdapter>().unwrap();
    let id = scope.record_id(key);
    let record = |memory: &MemoryAdapter| memory.get(&id).unwrap().stored.unwrap().record;
    let Claim::Execute(guard) = store
        .claim(
            scope,
            key,
            Fingerprint::from_bytes([7; 32]),
            "bench",
            &Policy::default(),
        )
        .unwrap()
    else {
        panic!("a fresh key must execute")
    };
    let running = record(memory);
    guard
        .complete(StoredResponse::new(201, br#"{"id":"pay_1"}"#.to_vec()))
        .unwrap();
    (id.clone(), running, record(memory))
}

#[test]
fn the_statements_sent_by_another_client_leave_the_row_the_adapter_writes() {
    let _alone = pg_support::alone();
    let schema = pg_support::unique_schema("bench_statements");
    let adapter =
        PostgresAdapter::connect_with(&pg_support::url(), pg_support::options(&schema, 2)).unwrap();
    let scope = Scope::new("bench", "loadgen").unwrap();
    let key = IdempotencyKey::new("it's-a-key").unwrap();
    let (id, running, completed) = records_of(&scope, &key);
    assert_eq!(running.state.name().as_str(), "running");

    let [claim, completion] = new_key_statements(Some(&schema), &id, &running, &completed).unwrap();
    assert!(claim.sql.starts_with("INSERT"), "{}", claim.sql);
    assert!(completion.sql.contains("UPDATE"), "{}", completion.sql);
    let mut client = postgres::Client::connect(&pg_support::url(), postgres::NoTls).unwrap();

    let inserted = client.query(&inlined(&claim), &[]).unwrap();
    assert_eq!(
        inserted.len(),
        1,
        "the claim inserts one row and returns its version"
    );
    let version: i64 = inserted[0].get(0);
    assert_eq!(version, 1, "a fresh store's first row is version 1");
    let read = adapter.get(&id).unwrap().stored.expect("the claimed row");
    assert_eq!(read.record, running);

    let updated = client.query(&inlined(&completion), &[]).unwrap();
    assert_eq!(
        updated.len(),
        1,
        "the completion updates the row at version 1"
    );
    let read = adapter.get(&id).unwrap().stored.expect("the completed row");
    assert_eq!(read.record, completed);
    assert!(matches!(read.record.state, RecordState::Completed { .. }));
    assert_eq!(read.version.0, 2);

    // A second claim of the same key is refused by the same statement.
    assert!(client.query(&inlined(&claim), &[]).unwrap().is_empty());
}
