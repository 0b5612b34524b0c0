//! What every PostgreSQL test needs: the server's URL (from scripts/with-postgres.sh)
//! and a store in a schema of its own, so tests never see each other's records.

#![allow(dead_code, reason = "each test file uses a different part")]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use idemkit::adapters::postgres::{PgOptions, PostgresAdapter};

/// Held for its whole run by each test that stops the server or times it (the
/// tests of the `postgres_serial` binary), so no two of them overlap.
pub(crate) static SERVER: Mutex<()> = Mutex::new(());

/// The server to this test alone until the guard drops: [`SERVER`], held.
pub(crate) fn alone() -> MutexGuard<'static, ()> {
    SERVER.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The environment variable scripts/with-postgres.sh sets.
pub(crate) const URL_VAR: &str = "IDEMKIT_TEST_POSTGRES_URL";

/// The test server's URL. Panics when it is not set: a PostgreSQL test that
/// cannot reach PostgreSQL fails, it never passes vacuously.
pub(crate) fn url() -> String {
    std::env::var(URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{URL_VAR} is not set: run the PostgreSQL tests through scripts/with-postgres.sh \
             (it starts a throwaway server), or point {URL_VAR} at a server you own"
        )
    })
}

/// A schema name no other test (or earlier run against the same server) uses.
pub(crate) fn unique_schema(tag: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "t_{tag}_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Options for a store in `schema` with `pool_size` connections.
pub(crate) fn options(schema: &str, pool_size: u32) -> PgOptions {
    PgOptions {
        schema: Some(schema.to_owned()),
        pool_size,
        connect_timeout: Duration::from_secs(2),
        ..PgOptions::default()
    }
}

/// A migrated store in a fresh schema.
pub(crate) fn fresh_store(tag: &str) -> PostgresAdapter {
    let schema = unique_schema(tag);
    PostgresAdapter::connect_with(&url(), options(&schema, 4))
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", url()))
}
