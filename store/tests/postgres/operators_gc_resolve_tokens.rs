//! The operator scenarios of tests/cli/operators_gc_resolve_tokens.rs on PostgreSQL, with
//! the operator steps as real `idemkit --postgres` processes: GC past a damaged
//! record, `resolve` keeping a 30-day window, a token after GC, listings a page
//! at a time.
//!
//! Needs scripts/with-postgres.sh (feature `postgres`).

#![cfg(feature = "postgres")]

use crate::support::operators as operators_support;
use crate::support::pg as pg_support;

use std::process::{Command, Output};

use idemkit::adapters::postgres::{PgClock, PostgresAdapter};
use idemkit::store::Store;
use idemkit::{IdempotencyKey, Scope};
use operators_support as scenario;

/// A migrated store in a fresh schema, and the arguments that point the CLI at it.
fn fresh(tag: &str) -> (PostgresAdapter, String) {
    let schema = pg_support::unique_schema(tag);
    let pg = PostgresAdapter::connect_with(&pg_support::url(), pg_support::options(&schema, 4))
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", pg_support::url()));
    (pg, schema)
}

fn idemkit(subcommand: &str, schema: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .arg(subcommand)
        .args(["--postgres", &pg_support::url(), "--pg-schema", schema])
        .args(args)
        .output()
        .unwrap()
}

fn client() -> postgres::Client {
    postgres::Client::connect(&pg_support::url(), postgres::NoTls).unwrap()
}

fn raw_present(schema: &str, scope: &Scope, key: &IdempotencyKey) -> bool {
    client()
        .query_opt(
            &format!(
                "SELECT 1 FROM \"{schema}\".idemkit_records \
                 WHERE tenant = $1 AND operation = $2 AND key = $3"
            ),
            &[&scope.tenant(), &scope.operation(), &key.as_str()],
        )
        .unwrap()
        .is_some()
}

#[test]
fn postgres_gc_past_a_damaged_record_deletes_the_rest_and_keeps_it() {
    let (pg, schema) = fresh("gcdamaged");
    scenario::gc_past_a_damaged_record(
        &Store::from(pg),
        |scope, key| {
            let n = client()
                .execute(
                    &format!(
                        "UPDATE \"{schema}\".idemkit_records SET record = '\\x02ffffff'::bytea \
                         WHERE tenant = $1 AND operation = $2 AND key = $3"
                    ),
                    &[&scope.tenant(), &scope.operation(), &key.as_str()],
                )
                .unwrap();
            assert_eq!(n, 1);
        },
        |args| idemkit("gc", &schema, args),
        |scope, key| raw_present(&schema, scope, key),
    );
}

#[test]
fn postgres_resolve_keeps_the_30_day_window_the_record_was_claimed_under() {
    let (pg, schema) = fresh("resolve30");
    scenario::resolve_keeps_a_30_day_window(
        &Store::from(pg.clone()),
        |args| idemkit("resolve", &schema, args),
        || {
            // The database's own clock, read 8 days ahead.
            let day_8 = PgClock::database();
            day_8.advance(8 * scenario::DAY);
            Store::from(pg.clone().with_clock(day_8))
        },
    );
}

#[test]
fn postgres_a_token_after_gc_is_above_every_token_of_the_deleted_record() {
    let (pg, schema) = fresh("tokengc");
    let clock = PgClock::database();
    scenario::tokens_never_repeat_after_gc(
        &Store::from(pg.clone().with_clock(clock.clone())),
        |by| clock.advance(by),
        || {
            // A second store over the same schema: its cached floor starts at 0,
            // so only the database's floor keeps the token from repeating.
            let again =
                PostgresAdapter::connect_with(&pg_support::url(), pg_support::options(&schema, 2))
                    .unwrap();
            Store::from(again.with_clock(clock.clone()))
        },
    );
}

#[test]
fn postgres_list_page_walks_every_record_a_page_at_a_time() {
    let (pg, _schema) = fresh("listpage");
    scenario::list_page_walks_every_record_a_page_at_a_time(&Store::from(pg));
}
