//! Where the middleware's store calls run.

use std::panic::AssertUnwindSafe;

use crate::store::Store;

/// Runs `f` on tokio's blocking pool: redb commits fsync, which must never stall
/// the executor.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// Runs the store call `f` where it costs least: inline on the executor for an
/// adapter that never waits ([`Adapter::may_block`](crate::adapters::Adapter::may_block)
/// is false: the memory adapter, where the blocking pool's two thread hops were
/// most of the layer's cost), on the blocking pool for every other adapter.
/// Either way a panic in `f` is `None`, as from a blocking task that panicked.
pub(super) async fn on_store<T: Send + 'static>(
    store: &Store,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    if !store.adapter().may_block() {
        std::panic::catch_unwind(AssertUnwindSafe(f)).ok()
    } else {
        blocking(f).await
    }
}
