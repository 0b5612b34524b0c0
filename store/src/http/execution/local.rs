//! Completing the record in the handler's own transaction: its writes and
//! the outcome commit together or not at all (see [`crate::local`]).

use std::sync::Arc;

use idemkit_core::http::ReplayedHeaders;
use idemkit_core::record::StoredResponse;

use super::{Execution, lock};
use crate::local::LocalError;
use crate::store::WorkerError;

impl Execution {
    /// Completes the record with `response` and runs `writes` (the handler's
    /// writes to its own tables in the store's redb database) in the same
    /// write transaction: both or neither
    /// ([`ExecutionGuard::complete_with`](crate::store::ExecutionGuard::complete_with), [`crate::local`]). Exactly once
    /// for a Local route.
    ///
    /// After `Ok` the layer answers `response` (its status, the headers of the
    /// route's [`replayed_headers`](crate::http::RouteConfig::replayed_headers) list,
    /// and its body: what a retry replays) whatever the handler returns. A
    /// header the list leaves out is neither stored nor answered. A body over
    /// the route's [`max_stored_response_bytes`](crate::http::RouteConfig::max_stored_response_bytes)
    /// is answered this once and not kept, as for a response the layer records:
    /// a retry then gets 410 `response-expired` with the resource reference. On
    /// `Err` nothing was committed and the lease is still held: the handler's
    /// response is recorded as usual (a 5xx releases a Local record).
    pub async fn complete_with<T, E, F>(
        &self,
        writes: F,
        response: StoredResponse,
    ) -> Result<T, LocalError<E>>
    where
        F: FnMut(&redb::WriteTransaction) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let shared = Arc::clone(&self.shared);
        let response = replayable(response, &shared.replayed_headers);
        let done = tokio::task::spawn_blocking(move || {
            let mut slot = lock(&shared.guard);
            let guard = slot.as_mut().ok_or(LocalError::AlreadyRecorded)?;
            let value =
                guard.try_complete_with(writes, &kept(&response, shared.max_stored_body))?;
            *lock(&shared.completed) = Some(response);
            // Finished: dropping it writes nothing.
            drop(slot.take());
            Ok(value)
        })
        .await;
        match done {
            Ok(done) => done,
            // The handler's writes panicked: the panic is the handler's.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(LocalError::Store(WorkerError::Storage(
                crate::store::StorageError::Corrupt {
                    detail: format!("the blocking task of the completion did not finish: {e}"),
                },
            ))),
        }
    }

    /// Completes the record with `response` inside the handler's PostgreSQL
    /// transaction `txn`, after the handler's own statements in it
    /// ([`ExecutionGuard::try_complete_in`](crate::store::ExecutionGuard::try_complete_in)), and **commits `txn`**: the
    /// statements and the outcome commit together or not at all. **Blocking**:
    /// call it where the handler runs its synchronous `postgres` transaction,
    /// on tokio's blocking pool (`spawn_blocking`). Feature `postgres`.
    ///
    /// After `Ok` the layer answers `response`, as for
    /// [`complete_with`](Self::complete_with). If the completion is refused or
    /// fails, `txn` is rolled back, the lease is still held, and the handler's
    /// response is recorded as usual. If the **commit** fails, whether it took
    /// effect is unknown: the guard is abandoned (its lease expires, then a
    /// retry replays the outcome if the commit took effect, or executes again
    /// if it did not) and the layer answers 409 `outcome-uncertain`, never the
    /// handler's response.
    #[cfg(feature = "postgres")]
    pub fn complete_in(
        &self,
        mut txn: postgres::Transaction<'_>,
        response: StoredResponse,
    ) -> Result<(), LocalError> {
        let response = replayable(response, &self.shared.replayed_headers);
        let mut slot = lock(&self.shared.guard);
        let guard = slot.as_mut().ok_or(LocalError::AlreadyRecorded)?;
        // Refused or failed: `txn` is dropped, which rolls it back.
        guard.try_complete_in(&mut txn, &kept(&response, self.shared.max_stored_body))?;
        // Finished by the completion; from here on only the commit decides.
        drop(slot.take());
        txn.commit().map_err(|e| {
            LocalError::Store(WorkerError::Storage(crate::store::StorageError::Adapter(
                crate::adapters::AdapterError::new(crate::adapters::FailureKind::Failed, e),
            )))
        })?;
        *lock(&self.shared.completed) = Some(response);
        Ok(())
    }
}

/// `response` with only the headers of `list`: what is stored, and so what the
/// first answer carries too (it is answered as every retry will be).
fn replayable(mut response: StoredResponse, list: &ReplayedHeaders) -> StoredResponse {
    response.headers.retain(|(name, _)| list.allows(name));
    response
}

/// What is stored of `response`: without its body when that is over `max_body`
/// bytes (status, headers and resource reference stay).
fn kept(response: &StoredResponse, max_body: usize) -> StoredResponse {
    let mut kept = response.clone();
    if kept.body.as_ref().is_some_and(|body| body.len() > max_body) {
        kept.body = None;
    }
    kept
}
