//! Against a PostgreSQL server (scripts/with-postgres.sh starts one): every module
//! but one needs the `postgres` feature and the server; the import test runs its
//! redb half without them. One binary: each file under tests/postgres is a module.
//! The tests that stop the server or time it are in `postgres_serial`.

mod support;

mod postgres {
    mod a_new_key_is_claimed_with_one_insert;
    mod a_silent_network_fails_calls_instead_of_holding_them;
    mod announcements;
    mod appointments_notes_sigkill;
    mod cli_operator;
    mod concurrent_claims;
    mod conformance;
    mod fleet_skewed_clock;
    mod import_copies_records_without_overwriting;
    mod local_complete_in_the_callers_transaction;
    mod operators_gc_resolve_tokens;
    mod proxy_fleet;
    mod the_benchmarks_statements_are_the_adapters;
}
