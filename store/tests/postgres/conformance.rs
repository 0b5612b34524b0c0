//! The conformance suite (`idemkit::conformance`) against PostgreSQL: the
//! same decision table as over redb, each check in a fresh schema. The suite
//! drives exact virtual time: the adapter's statements take it in place of the
//! server's clock (`PgClock::following`), through the same statements and
//! decisions as the database's clock.
//!
//! Needs a server: run through scripts/with-postgres.sh (feature `postgres`).

#![cfg(feature = "postgres")]

use crate::support::pg as pg_support;

use idemkit::adapters::postgres::{Migrations, PgClock, PgError, PostgresAdapter, SCHEMA_VERSION};
use idemkit::conformance;
use idemkit::store::Store;

#[test]
fn postgres_conforms() {
    let made = std::cell::Cell::new(0);
    conformance::run_all(|clock| {
        made.set(made.get() + 1);
        Store::from(pg_support::fresh_store("conf").with_clock(PgClock::following(clock)))
    });
    assert_eq!(made.get(), conformance::checks().len());
}

#[test]
fn postgres_keeps_the_seam() {
    idemkit::conformance::seam::run_all(|| std::sync::Arc::new(pg_support::fresh_store("seam")));
}

#[test]
fn migrations_are_versioned_and_idempotent() {
    let url = pg_support::url();
    let schema = pg_support::unique_schema("mig");
    // A team that runs its own migrations: the store refuses an empty schema.
    let opts = pg_support::options(&schema, 2);
    let check_only = idemkit::adapters::postgres::PgOptions {
        migrations: Migrations::CheckOnly,
        ..opts.clone()
    };
    match PostgresAdapter::connect_with(&url, check_only.clone()) {
        Err(PgError::Schema {
            found: 0, expected, ..
        }) => assert_eq!(expected, SCHEMA_VERSION),
        other => panic!("expected a schema error on an empty schema, got {other:?}"),
    }
    // Several instances starting together migrate once (advisory lock).
    std::thread::scope(|s| {
        for _ in 0..4 {
            let (url, opts) = (&url, opts.clone());
            s.spawn(move || PostgresAdapter::connect_with(url, opts).unwrap());
        }
    });
    let store = PostgresAdapter::connect_with(&url, check_only).unwrap();
    assert_eq!(store.migrate().unwrap(), SCHEMA_VERSION, "already current");
}

#[test]
fn the_printed_script_builds_the_same_schema() {
    let url = pg_support::url();
    let schema = pg_support::unique_schema("print");
    let script = PostgresAdapter::migration_script(Some(&schema)).unwrap();
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client.batch_execute(&script).unwrap();
    let opts = idemkit::adapters::postgres::PgOptions {
        migrations: Migrations::CheckOnly,
        ..pg_support::options(&schema, 2)
    };
    let clock =
        idemkit::clock::ManualClock::new(idemkit::UnixMillis::from_millis(1_800_000_000_000));
    let store = Store::from(
        PostgresAdapter::connect_with(&url, opts)
            .unwrap()
            .with_clock(PgClock::following(clock.clone())),
    );
    let subject = conformance::Subject::new(store, clock);
    conformance::checks()
        .into_iter()
        .find(|(name, _)| *name == "completion_replays")
        .map(|(_, check)| check(&subject))
        .unwrap();
}

#[test]
fn unreachable_server_is_a_typed_unavailable_error() {
    // Port 1 on localhost: nothing listens there.
    let opts = idemkit::adapters::postgres::PgOptions {
        connect_timeout: std::time::Duration::from_millis(300),
        ..pg_support::options("nowhere", 1)
    };
    // The URL variable is still required: this file only runs under the script.
    let _ = pg_support::url();
    match PostgresAdapter::connect_with("postgres://postgres@127.0.0.1:1/postgres", opts) {
        Err(e) => assert!(e.is_unavailable(), "{e}"),
        Ok(_) => panic!("connected to a closed port"),
    }
}

#[test]
fn the_database_clock_estimates_only_short_intervals_of_its_own_time() {
    use idemkit::UnixMillis;
    use idemkit::adapters::postgres::ESTIMATE_WITHIN;
    use idemkit::clock::Clock;
    use std::time::Duration;

    let store = pg_support::fresh_store("estimate");
    let clock = store.database_clock();
    let at = store.now().unwrap();
    let short = Duration::from_millis(40);
    assert_eq!(
        clock.estimate_after(at, short),
        Some(UnixMillis::from_millis(at.as_millis() + 40))
    );
    assert_eq!(
        clock.estimate_after(at, ESTIMATE_WITHIN),
        None,
        "too long ago: read"
    );
    // A moved clock (tests' offsets) and a followed clock are always read.
    let moved = PgClock::database();
    moved.advance(Duration::from_secs(5));
    let offset = store.clone().with_clock(moved).database_clock();
    assert_eq!(offset.estimate_after(at, short), None);
    let given = store
        .with_clock(PgClock::following(idemkit::clock::ManualClock::new(at)))
        .database_clock();
    assert_eq!(given.estimate_after(at, short), None);
}

/// Without a configured schema the statements named none, so the connection's
/// `search_path` chose the tables: a role or database whose search path starts
/// with another schema (set by an administrator, a pooler, a migration tool)
/// got a second set of tables there, and a key claimed through one instance
/// could run again through another. Every statement names `public` unless a
/// schema is configured; tables that were made elsewhere through the search
/// path are refused at start, naming the schema to configure.
#[test]
fn without_a_schema_the_tables_are_public_whatever_the_search_path() {
    use idemkit::core::machine::Policy;
    use idemkit::core::record::StoredResponse;
    use idemkit::store::Claim;
    use idemkit::{Fingerprint, IdempotencyKey, Scope};

    let url = pg_support::url();
    let database = pg_support::unique_schema("search_path");
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {database}"))
        .unwrap();
    let (server, _) = url.rsplit_once('/').unwrap();
    let db_url = format!("{server}/{database}");
    let mut client = postgres::Client::connect(&db_url, postgres::NoTls).unwrap();
    client.batch_execute("CREATE SCHEMA elsewhere").unwrap();
    // What `ALTER ROLE … SET search_path = elsewhere, public` does to every session.
    let steered = format!("{db_url}?options=-c%20search_path%3Delsewhere%2Cpublic");
    let options = idemkit::adapters::postgres::PgOptions {
        schema: None,
        pool_size: 2,
        ..idemkit::adapters::postgres::PgOptions::default()
    };

    let store = Store::from(PostgresAdapter::connect_with(&steered, options.clone()).unwrap());
    let scope = Scope::new("acme", "orders.create").unwrap();
    let key = IdempotencyKey::new("k-public").unwrap();
    let fingerprint = Fingerprint::from_bytes([7; 32]);
    let Claim::Execute(guard) = store
        .claim(&scope, &key, fingerprint, "w", &Policy::default())
        .unwrap()
    else {
        panic!("a fresh key executes");
    };
    guard
        .complete(StoredResponse::new(201, b"{}".to_vec()))
        .unwrap();
    drop(store);
    let in_public: i64 = client
        .query_one("SELECT count(*) FROM public.idemkit_records", &[])
        .unwrap()
        .get(0);
    assert_eq!(in_public, 1, "the record is in public");
    let elsewhere: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = 'elsewhere'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        elsewhere, 0,
        "nothing was made where the search path pointed"
    );

    // Tables the search path finds outside public (as a build that left the
    // schema to the search path made them): refused, naming the schema.
    client
        .batch_execute("CREATE TABLE elsewhere.idemkit_records (x int)")
        .unwrap();
    match PostgresAdapter::connect_with(&steered, options) {
        Err(e) => assert!(e.to_string().contains("\"elsewhere\""), "{e}"),
        Ok(_) => panic!("tables found through the search path were ignored"),
    }
    drop(client);
    admin
        .batch_execute(&format!("DROP DATABASE {database} WITH (FORCE)"))
        .unwrap();
}
