//! The executions a set of routes has running, whether a client still waits
//! for them or not, so that a shutdown can wait for every one to record.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use idemkit_core::LogRef;

/// The executions running under the routes given this set
/// ([`RouteConfig::executions`](super::RouteConfig::executions)), from the
/// request's arrival until its outcome is recorded.
///
/// With [`OnDisconnect::Finish`](super::OnDisconnect::Finish) an execution
/// outlives its client (it runs on its own task), so waiting for the server's
/// connections to close is not waiting for the executions: a graceful shutdown
/// waits for [`idle`](Self::idle) too, and names what is still running
/// ([`log_refs`](Self::log_refs)) when its grace period ends.
///
/// ```
/// use std::sync::Arc;
/// use idemkit::core::record::EffectKind;
/// use idemkit::http::{Executions, RouteConfig};
///
/// let running = Arc::new(Executions::new());
/// let route = RouteConfig::new("payments.create", EffectKind::External)
///     .executions(Arc::clone(&running));
/// # let _ = route;
/// assert!(running.is_empty());
/// ```
#[derive(Debug, Default)]
pub struct Executions {
    state: Mutex<State>,
    changed: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// Each running request, with its record's log reference once claimed.
    running: BTreeMap<u64, Option<LogRef>>,
}

impl Executions {
    /// An empty set.
    #[must_use]
    pub fn new() -> Self {
        Executions::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The lock guards a map and a counter; a panic leaves them usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many requests are running (claimed or still on their way to the claim).
    #[must_use]
    pub fn len(&self) -> usize {
        self.state().running.len()
    }

    /// Whether none is running.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.state().running.is_empty()
    }

    /// The log references of the running executions that hold a claim.
    #[must_use]
    pub fn log_refs(&self) -> Vec<LogRef> {
        self.state().running.values().flatten().copied().collect()
    }

    /// Waits until none is running.
    pub async fn idle(&self) {
        loop {
            // Registered before the check, so a change in between still wakes it.
            let changed = self.changed.notified();
            if self.is_empty() {
                return;
            }
            changed.await;
        }
    }

    /// Counts a request from its arrival; the entry's drop ends it.
    pub(crate) fn enter(self: &Arc<Self>) -> Entry {
        let mut state = self.state();
        let id = state.next;
        state.next += 1;
        state.running.insert(id, None);
        Entry {
            owner: Arc::clone(self),
            id,
        }
    }
}

/// One running request of an [`Executions`] set.
#[derive(Debug)]
pub(crate) struct Entry {
    owner: Arc<Executions>,
    id: u64,
}

impl Entry {
    /// The request claimed the record of `log_ref`.
    pub(crate) fn claimed(&self, log_ref: LogRef) {
        if let Some(slot) = self.owner.state().running.get_mut(&self.id) {
            *slot = Some(log_ref);
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let empty = {
            let mut state = self.owner.state();
            state.running.remove(&self.id);
            state.running.is_empty()
        };
        if empty {
            self.owner.changed.notify_waiters();
        }
    }
}
