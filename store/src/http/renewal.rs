//! Lease renewal while the handler runs.

use std::time::Duration;

use idemkit_core::http::defaults;

use super::store_calls::blocking;
use crate::store::{ExecutionGuard, WorkerError};

/// Aborts the lease renewal when the execution ends or its future is dropped.
pub(super) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Renews the lease while the handler runs, at core's cadence
/// ([`renewal_interval`](defaults::renewal_interval)).
///
/// A store error does not end the renewal: it is retried (sooner than the next
/// regular renewal) until it succeeds or the store **refuses** it — a stale token
/// or a record no longer Running, which is what a lease that really ended looks
/// like. The machine renews an expired lease nobody took over, so an outage
/// longer than the lease costs nothing unless another claim came in meanwhile.
/// After `max_execution` no renewal is started: a hung handler's lease expires.
pub(super) fn spawn_renewal(
    guard: &ExecutionGuard,
    lease: Duration,
    max_execution: Duration,
) -> AbortOnDrop {
    let renewer = guard.renewer();
    let every = defaults::renewal_interval(lease);
    let after_error = defaults::renewal_retry_interval(lease);
    let deadline = tokio::time::Instant::now() + max_execution;
    AbortOnDrop(tokio::spawn(async move {
        let mut wait = every;
        loop {
            let next = tokio::time::Instant::now() + wait;
            if next > deadline {
                tracing::warn!(
                    max_execution_ms = u64::try_from(max_execution.as_millis()).unwrap_or(u64::MAX),
                    "maximum execution time reached; the lease is no longer renewed"
                );
                return;
            }
            tokio::time::sleep_until(next).await;
            let renewer = renewer.clone();
            match blocking(move || renewer.renew()).await {
                Some(Ok(_)) => wait = every,
                Some(Err(WorkerError::Storage(e))) => {
                    tracing::warn!(error = %e, "renewing the lease failed; retrying");
                    wait = after_error;
                }
                None => {
                    tracing::warn!("the lease renewal task did not finish; retrying");
                    wait = after_error;
                }
                // Refused: taken over, recorded, or gone. The fence protects the
                // record; nothing more to renew.
                Some(Err(refused)) => {
                    tracing::debug!(error = %refused, "lease renewal refused; stopping");
                    return;
                }
            }
        }
    }))
}
