//! What every PostgreSQL test needs: the server's URL (from scripts/with-postgres.sh)
//! and a store in a schema of its own, so tests never see each other's records;
//! for the announcement tests, two instances of one store and ways to wait on a
//! [`Watch`].

#![allow(dead_code, reason = "each test file uses a different part")]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use idemkit::adapters::postgres::{PgOptions, PostgresAdapter};
use idemkit::store::{Store, Watch};
use idemkit::{IdempotencyKey, RecordId};

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

/// Two instances of one store: two adapters (two pools, two listeners) on one
/// fresh schema, as two processes of a fleet would open it.
pub(crate) fn two_instances(tag: &str) -> (Store, PostgresAdapter, Store, PostgresAdapter) {
    let schema = unique_schema(tag);
    let connect = || {
        PostgresAdapter::connect_with(&url(), options(&schema, 4))
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", url()))
    };
    let (a, b) = (connect(), connect());
    (Store::from(a.clone()), a, Store::from(b.clone()), b)
}

/// The record id of `key` in the engine tests' scope.
pub(crate) fn id_of(key: &str) -> RecordId {
    super::scope().record_id(&IdempotencyKey::new(key).unwrap())
}

/// Starts `store`'s listener (its first watch does) and waits until its
/// channel is open; the watch that started it is dropped, so later watches
/// see no wake-up from the channel opening.
pub(crate) fn listening(store: &Store) {
    let starter = store.watch(&id_of("listener-start")).unwrap();
    let open = poll_until(Duration::from_secs(10), || store.waits_are_woken());
    assert!(
        open.is_some(),
        "the listener's channel did not open within 10 s"
    );
    drop(starter);
}

/// Polls `done` every millisecond until it holds (how long that took) or
/// `within` passed (`None`).
pub(crate) fn poll_until(within: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if done() {
            return Some(start.elapsed());
        }
        if start.elapsed() >= within {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Wakes the thread that polls a watch.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Waits up to `within` for `watch` to resolve: the instant it did, or `None`.
pub(crate) fn woken(watch: &mut Watch, within: Duration) -> Option<Instant> {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let deadline = Instant::now() + within;
    let mut changed = watch.changed();
    loop {
        if Pin::new(&mut changed).poll(&mut cx).is_ready() {
            return Some(Instant::now());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        std::thread::park_timeout(left);
    }
}

/// Whether `watch` resolved already (without waiting).
pub(crate) fn was_woken(watch: &mut Watch) -> bool {
    let mut changed = watch.changed();
    Pin::new(&mut changed)
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_ready()
}

/// Completes `key` on `writer` (claimed there first) and waits until
/// `listener`'s watch of it resolves: every notification sent before this
/// one's commit has reached `listener` by then (PostgreSQL delivers them in
/// commit order, and the listener hands them over one by one).
pub(crate) fn flush_announcements(writer: &Store, listener: &Store, key: &str) {
    // Claimed before it is watched: the watch marks the record's row.
    let guard = super::local::guard(super::local::claim(writer, key));
    let mut watch = listener.watch(&id_of(key)).unwrap();
    guard.complete(super::local::created(key)).unwrap();
    assert!(
        woken(&mut watch, Duration::from_secs(10)).is_some(),
        "the completion of {key} was not announced within 10 s"
    );
}
