//! Recording an answered attempt's outcome: durable before it is acknowledged,
//! retried while the store fails, never released once the handler answered.
//!
//! When the write still fails after [`RECORD_ATTEMPTS`], the handler's response
//! is not sent (a streamed one is cut off); the answer is core's
//! `OutcomeNotRecorded` (409 `outcome-uncertain`, `code: outcome-not-recorded`),
//! and the record is marked Unknown if the store allows, else left Running for
//! its lease to expire.

use idemkit_core::http::defaults::{RECORD_ATTEMPTS, RECORD_BACKOFF};
use idemkit_core::machine::Disposition;
use idemkit_core::record::StoredResponse;

use super::store_calls::{blocking, on_store};
use super::{Execution, Metrics, RouteConfig, execution};
use crate::store::{ExecutionGuard, WorkerError};

/// Runs `write` up to [`RECORD_ATTEMPTS`] times while the store fails, pausing
/// [`RECORD_BACKOFF`] before the first retry and doubling it before each later
/// one; a refusal (stale token, wrong state) is final at once.
fn with_retries(
    metrics: Option<&Metrics>,
    mut write: impl FnMut() -> Result<(), WorkerError>,
) -> Result<(), WorkerError> {
    let mut pause = RECORD_BACKOFF;
    let mut attempt = 1;
    loop {
        match write() {
            Ok(()) => return Ok(()),
            Err(WorkerError::Storage(e)) if attempt < RECORD_ATTEMPTS => {
                if let Some(m) = metrics {
                    m.store_error();
                }
                tracing::warn!(error = %e, attempt, "recording the outcome failed; retrying");
                std::thread::sleep(pause);
                pause = pause.saturating_mul(2);
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether the outcome the handler produced was recorded.
enum Recorded {
    /// Durable as the disposition says.
    Yes,
    /// Not recorded after the bounded retries; the record was marked Unknown if
    /// the store allowed, else left Running (never released).
    No,
}

/// Records a response the handler produced (on the blocking pool: retries sleep).
///
/// Once the handler has answered, no failure here releases the record: a
/// completion that keeps failing falls back to marking the record Unknown, and
/// when that fails too the guard is abandoned (the record stays Running and its
/// lease expiry decides, as after a crash), never dropped into a release.
fn record_outcome(
    mut guard: ExecutionGuard,
    disposition: Disposition,
    stored: StoredResponse,
    status: u16,
    metrics: Option<&Metrics>,
) -> Recorded {
    let first = match disposition {
        // Asked for: the attempt had no effect. A failed release is settled by
        // the guard's drop (a Local record released, an External one Unknown).
        Disposition::Release => {
            if let Err(e) = guard.release() {
                tracing::error!(error = %e, status, "releasing the attempt failed");
            }
            return Recorded::Yes;
        }
        Disposition::Store => with_retries(metrics, || guard.try_complete(&stored)),
        Disposition::Unknown => with_retries(metrics, || {
            guard.try_mark_unknown(&format!("status {status}"))
        }),
    };
    let Err(error) = first else {
        return Recorded::Yes;
    };
    tracing::error!(%error, status, ?disposition, "the outcome could not be recorded");
    // The store failed, not refused: try to leave an honest Unknown behind.
    let fallback = if matches!(error, WorkerError::Storage(_)) && disposition == Disposition::Store
    {
        with_retries(metrics, || {
            guard.try_mark_unknown(&format!("status {status} not recorded"))
        })
    } else {
        Err(error)
    };
    if let Err(e) = fallback {
        tracing::error!(error = %e, "marking the unrecorded outcome Unknown failed; leaving the lease to expire");
        guard.abandon();
    }
    Recorded::No
}

/// Records an answered attempt's outcome where the store's calls run, and
/// counts it; whether it is durable ([`record_outcome`]).
pub(super) async fn record(
    guard: ExecutionGuard,
    disposition: Disposition,
    stored: StoredResponse,
    config: &RouteConfig,
) -> bool {
    let status = stored.status;
    let metrics = config.metrics.clone();
    let store = guard.store().clone();
    let recorded = on_store(&store, move || {
        record_outcome(guard, disposition, stored, status, metrics.as_deref())
    })
    .await;
    match recorded {
        Some(Recorded::Yes) => {
            if let Some(m) = &config.metrics {
                m.outcome(&config.operation, disposition);
            }
            tracing::info!(status, ?disposition, "attempt recorded");
            true
        }
        Some(Recorded::No) | None => {
            config.count_store_error();
            false
        }
    }
}

/// The attempt ended without a response to record (panic, inner error, body
/// failure): on the blocking pool, an attempt sent downstream is marked Unknown
/// ([`Execution::sent_downstream`]); otherwise the guard's drop marks an
/// External record Unknown and releases a Local one.
pub(super) async fn settle_unrecorded(execution: &Execution) {
    if let Some(guard) = execution.take_guard() {
        let effect = guard.effect();
        let sent = execution.was_sent_downstream();
        tracing::warn!(%effect, sent_downstream = sent, "attempt ended without a response; settling");
        let _ = blocking(move || execution::settle_without_answer(guard, sent)).await;
    }
}
