//! Holding a retry whose key is still running until its answer exists
//! (`Prefer: wait=N`, [`RouteConfig::wait`](super::RouteConfig::wait)).

use std::future::Future;
use std::time::{Duration, Instant};

use idemkit_core::RecordId;
use idemkit_core::http::prefer::fallback_poll;

use super::WaitEnded;
#[cfg(doc)]
use crate::store::Watch;
use crate::store::{Claim, ClaimError, Store, TooManyWaiters};

/// The shortest pause before claiming again at a lease's expiry: a lease about
/// to expire is not read in a busy loop.
const LEASE_RECHECK_FLOOR: Duration = Duration::from_millis(10);

/// Why a request was not held.
#[derive(Debug)]
pub enum WaitRefused {
    /// As many requests as the store allows already wait
    /// ([`Store::set_wait_limits`]): answer 503 `too-many-waiters`.
    TooManyWaiters {
        /// Which limit.
        refused: TooManyWaiters,
        /// The running lease's remaining time, for `Retry-After`.
        retry_after: Duration,
    },
    /// Nobody awaits the answer any more.
    ClientGone,
}

/// One claim as a caller runs it: the store's answer, or `None` when the call
/// itself failed (a panic on the blocking pool).
pub type ClaimAnswer = Option<Result<Claim, ClaimError>>;

/// A claim after waiting.
#[derive(Debug)]
pub struct Waited {
    /// The last claim's answer: not in flight, or in flight when the wait ran
    /// out.
    pub claim: ClaimAnswer,
    /// Whether the request was held at all (its key was running): then an
    /// asked-for wait was honoured (`Preference-Applied`).
    pub held: bool,
}

impl Waited {
    /// How the wait ended, for [`Metrics::wait_ended`](super::Metrics::wait_ended);
    /// `None` when the request was not held.
    #[must_use]
    pub fn ended(&self) -> Option<WaitEnded> {
        let ended = match &self.claim {
            Some(Ok(Claim::InFlight { .. })) => WaitEnded::TimedOut,
            Some(Ok(Claim::Execute(_))) => WaitEnded::Executed,
            // An answer, or a store that failed meanwhile (its 503 follows).
            _ => WaitEnded::Answered,
        };
        self.held.then_some(ended)
    }
}

/// The running lease's remaining time when `claim` found the key in flight.
fn in_flight(claim: &ClaimAnswer) -> Option<Duration> {
    match claim {
        Some(Ok(Claim::InFlight { retry_after, .. })) => Some(*retry_after),
        _ => None,
    }
}

/// Claims with `claim`, and while the key still runs and `wait` lasts, waits
/// and claims again.
///
/// The wait wakes on the write that ends the key's Running state (in this
/// process, or announced by the adapter: [`Store::watch`]), at the running
/// lease's expiry (an attempt that died is taken over as any retry would), and
/// where nothing can wake it ([`Store::waits_are_woken`] is false, or the
/// record could not be marked as waited on: [`Watch::is_marked`]) on a
/// fallback poll that backs off from 50 ms to 1 s. A dropped future leaves
/// nothing behind: its watch is unregistered with it.
///
/// `gone` resolves when nobody awaits the answer any more (the client
/// disconnected while the request runs on a task of its own); the wait then
/// ends at once. Pass `std::future::pending()` when dropping the future is how
/// a disconnect shows.
///
/// # Errors
///
/// [`WaitRefused::TooManyWaiters`] when the store's wait limits are reached;
/// [`WaitRefused::ClientGone`] when `gone` resolved. Nothing was executed
/// either way.
pub async fn claim_waiting<F, Fut>(
    store: &Store,
    id: &RecordId,
    wait: Duration,
    mut claim: F,
    gone: impl Future<Output = ()>,
) -> Result<Waited, WaitRefused>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ClaimAnswer>,
{
    let first = claim().await;
    let Some(retry_after) = in_flight(&first) else {
        return Ok(Waited {
            claim: first,
            held: false,
        });
    };
    if wait.is_zero() {
        return Ok(Waited {
            claim: first,
            held: false,
        });
    }
    let deadline = Instant::now() + wait;
    // Watching may mark the record in a shared database: a store call.
    let (watching, wanted) = (store.clone(), id.clone());
    let Some(watched) = super::store_calls::on_store(store, move || watching.watch(&wanted)).await
    else {
        return Ok(Waited {
            claim: first,
            held: false,
        });
    };
    let mut watch = watched.map_err(|refused| WaitRefused::TooManyWaiters {
        refused,
        retry_after,
    })?;
    let mut gone = std::pin::pin!(gone);
    // Registered before this read: a completion from now on wakes the watch.
    let mut current = claim().await;
    let mut polls = 0;
    while let Some(lease_left) = in_flight(&current) {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let mut nap = (deadline - now).min(lease_left.max(LEASE_RECHECK_FLOOR));
        if !(store.waits_are_woken() && watch.is_marked()) {
            nap = nap.min(fallback_poll(polls));
            polls = polls.saturating_add(1);
        }
        // Either way the record is read again: a wake-up is a reason to look.
        tokio::select! {
            _ = tokio::time::timeout(nap, watch.changed()) => {}
            () = &mut gone => return Err(WaitRefused::ClientGone),
        }
        current = claim().await;
    }
    Ok(Waited {
        claim: current,
        held: true,
    })
}
