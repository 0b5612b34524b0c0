//! The handler's view of its claimed execution: steps, provider keys, and how
//! the attempt is recorded.

mod local;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use idemkit_core::http::ReplayedHeaders;
use idemkit_core::machine::{Dispatch, Disposition, StepStart};
use idemkit_core::record::{FencingToken, Step, StoredResponse};
use idemkit_core::{LogRef, Scope};

use crate::store::{ExecutionGuard, WorkerError};

/// The execution a request runs under, handed to the inner service as a request
/// extension (`Extension<Execution>` in axum).
///
/// A handler with downstream effects persists each step's provider key with
/// [`begin_step`](Self::begin_step) *before* dispatching it, and records the
/// provider's reference with [`complete_step`](Self::complete_step). Store work
/// runs on tokio's blocking pool, never on the async executor.
///
/// The middleware records the attempt when the handler returns; the handler does
/// not complete the record itself, except to commit a Local effect in the same
/// transaction as the outcome ([`complete_with`](Self::complete_with) on redb,
/// `complete_in` on PostgreSQL): the layer then answers the response stored
/// there. Clones share one lease.
#[derive(Clone)]
pub struct Execution {
    shared: Arc<Shared>,
}

struct Shared {
    guard: Mutex<Option<ExecutionGuard>>,
    scope: Scope,
    log_ref: LogRef,
    attempt: u32,
    token: FencingToken,
    steps: Vec<Step>,
    disposition: Mutex<Option<Disposition>>,
    resource_ref: Mutex<Option<String>>,
    /// The handler said nothing was dispatched ([`Execution::nothing_dispatched`]).
    nothing_dispatched: AtomicBool,
    /// `begin_step` was called by this attempt (set before the store call, so a
    /// step persisted whose answer was lost still counts as begun).
    began_step: AtomicBool,
    /// The request went to a system whose transaction this process cannot see
    /// ([`Execution::sent_downstream`]).
    sent_downstream: AtomicBool,
    /// The response the handler completed the record with, in its own
    /// transaction ([`Execution::complete_with`]): what the layer answers.
    completed: Mutex<Option<StoredResponse>>,
    /// The route's [`RouteConfig::max_stored_response_bytes`](super::RouteConfig::max_stored_response_bytes).
    max_stored_body: usize,
    /// The route's [`RouteConfig::replayed_headers`](super::RouteConfig::replayed_headers).
    replayed_headers: Arc<ReplayedHeaders>,
    span: tracing::Span,
}

/// A step operation on an [`Execution`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ExecutionError {
    /// The middleware already recorded this attempt (the handler kept a clone
    /// of the [`Execution`] past its response).
    Finished,
    /// The store refused or failed; nothing was acknowledged.
    Store(WorkerError),
    /// The blocking task running the store call did not finish.
    Blocking(String),
}

impl fmt::Display for ExecutionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecutionError::Finished => f.write_str("the execution was already recorded"),
            ExecutionError::Store(e) => write!(f, "store: {e}"),
            ExecutionError::Blocking(e) => write!(f, "blocking store task failed: {e}"),
        }
    }
}

impl std::error::Error for ExecutionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ExecutionError::Store(e) => Some(e),
            _ => None,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks leaves plain data behind, still valid.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Execution {
    pub(crate) fn new(
        scope: Scope,
        guard: ExecutionGuard,
        span: tracing::Span,
        max_stored_body: usize,
        replayed_headers: Arc<ReplayedHeaders>,
        log_ref: LogRef,
    ) -> Self {
        debug_assert!(log_ref == guard.log_ref());
        Execution {
            shared: Arc::new(Shared {
                scope,
                log_ref,
                attempt: guard.attempt(),
                token: guard.token(),
                steps: guard.steps().to_vec(),
                guard: Mutex::new(Some(guard)),
                disposition: Mutex::new(None),
                resource_ref: Mutex::new(None),
                nothing_dispatched: AtomicBool::new(false),
                began_step: AtomicBool::new(false),
                sent_downstream: AtomicBool::new(false),
                completed: Mutex::new(None),
                max_stored_body,
                replayed_headers,
                span,
            }),
        }
    }

    /// The authenticated tenant the request runs for (from the principal extractor).
    #[must_use]
    pub fn tenant(&self) -> &str {
        self.shared.scope.tenant()
    }

    /// The record's scope: tenant and operation.
    #[must_use]
    pub fn scope(&self) -> &Scope {
        &self.shared.scope
    }

    /// The record's log reference (safe to log; never the raw key).
    #[must_use]
    pub fn log_ref(&self) -> LogRef {
        self.shared.log_ref
    }

    /// The attempt number (1 for the first).
    #[must_use]
    pub fn attempt(&self) -> u32 {
        self.shared.attempt
    }

    /// The lease's fencing token.
    #[must_use]
    pub fn fencing_token(&self) -> FencingToken {
        self.shared.token
    }

    /// The steps persisted by earlier attempts, as they were when this lease began.
    #[must_use]
    pub fn steps(&self) -> &[Step] {
        &self.shared.steps
    }

    /// The tracing span of this execution (log reference, attempt, token,
    /// provider reference).
    #[must_use]
    pub fn span(&self) -> &tracing::Span {
        &self.shared.span
    }

    /// Persists step `name` with `proposed_provider_key` before the handler
    /// dispatches it. A step begun by an earlier attempt keeps the key persisted
    /// then; a finished step answers [`StepStart::AlreadyDone`].
    pub async fn begin_step(
        &self,
        name: &str,
        proposed_provider_key: &str,
    ) -> Result<StepStart, ExecutionError> {
        self.shared.began_step.store(true, Ordering::SeqCst);
        let (name, proposed) = (name.to_owned(), proposed_provider_key.to_owned());
        let start = self
            .with_guard(move |g| g.begin_step(&name, &proposed))
            .await?;
        Ok(start)
    }

    /// Records that step `name` is done, with the provider's reference.
    pub async fn complete_step(
        &self,
        name: &str,
        provider_ref: Option<String>,
    ) -> Result<(), ExecutionError> {
        if let Some(reference) = &provider_ref {
            self.shared
                .span
                .record("provider_ref", tracing::field::display(reference));
        }
        let name = name.to_owned();
        self.with_guard(move |g| g.complete_step(&name, provider_ref))
            .await
    }

    /// Overrides how the middleware records this attempt's response, instead of
    /// the policy's classification of its status.
    ///
    /// `Disposition::Release` fits a failure after some steps finished: the done
    /// steps are persisted, so a retry with the same key resumes at the first
    /// unfinished one and never repeats a finished effect.
    pub fn record_as(&self, disposition: Disposition) {
        *lock(&self.shared.disposition) = Some(disposition);
    }

    /// Declares that this attempt dispatched nothing downstream: no call to a
    /// provider was sent (or could have arrived). Call it only when that is
    /// certain, for example when the handler refused before any downstream call.
    ///
    /// On an External route a "retry later" answer (408, 409, 425, 429) or a 5xx
    /// then **releases** the record, so a retry with the same key executes again;
    /// without this call such an answer makes the record Unknown (a timeout or a
    /// rate limit can strike after the provider was called, and a second call
    /// could charge twice). Stored answers (1xx–4xx other than those four) are
    /// stored either way. On a Local route it changes nothing.
    ///
    /// A route declared with
    /// [`RouteConfig::dispatches_only_through_steps`](super::RouteConfig::dispatches_only_through_steps)
    /// gets the same evidence without this call when the attempt began no step and
    /// its record holds none.
    pub fn nothing_dispatched(&self) {
        self.shared.nothing_dispatched.store(true, Ordering::SeqCst);
    }

    /// Declares that the request is about to be handed to a system whose own
    /// transaction this process cannot see: a proxy's upstream, a remote call
    /// that may commit after its caller gave up. Call it before the first byte
    /// is sent.
    ///
    /// From then on, an attempt that ends without a complete response (a
    /// response body that fails or stalls, a request dropped with its client, a
    /// panic) is recorded **Unknown whatever the route's effect kind**: a Local
    /// route is not released, because the other side may still commit. An
    /// answer that did arrive is classified as usual (a 5xx the upstream sent
    /// releases a Local record). Pair it with
    /// [`record_as`](Self::record_as)`(Disposition::Unknown)` for an answer the
    /// caller makes up itself, such as a gateway timeout.
    pub fn sent_downstream(&self) {
        self.shared.sent_downstream.store(true, Ordering::SeqCst);
    }

    /// Whether [`sent_downstream`](Self::sent_downstream) was called.
    pub(crate) fn was_sent_downstream(&self) -> bool {
        self.shared.sent_downstream.load(Ordering::SeqCst)
    }

    /// What this attempt shows about its dispatch, under the route's declaration
    /// that it dispatches only through steps (core's [`Dispatch::from_steps`] over
    /// the steps of earlier attempts and this one's).
    pub(crate) fn dispatch(&self, dispatches_only_through_steps: bool) -> Dispatch {
        let explicit = if self.shared.nothing_dispatched.load(Ordering::SeqCst) {
            Dispatch::Nothing
        } else {
            Dispatch::Unknown
        };
        let steps = if self.shared.began_step.load(Ordering::SeqCst) {
            // This attempt began a step: something may have been sent.
            Dispatch::Unknown
        } else {
            Dispatch::from_steps(dispatches_only_through_steps, &self.shared.steps)
        };
        explicit.or(steps)
    }

    /// The created resource (or provider reference), kept after the response
    /// body is pruned so a late retry still learns what was done.
    pub fn set_resource_ref(&self, reference: impl Into<String>) {
        *lock(&self.shared.resource_ref) = Some(reference.into());
    }

    pub(crate) fn disposition_override(&self) -> Option<Disposition> {
        *lock(&self.shared.disposition)
    }

    pub(crate) fn resource_ref(&self) -> Option<String> {
        lock(&self.shared.resource_ref).clone()
    }

    /// Takes the guard out: the attempt is being recorded by the middleware.
    pub(crate) fn take_guard(&self) -> Option<ExecutionGuard> {
        lock(&self.shared.guard).take()
    }

    /// The response the handler completed the record with itself, if it did.
    pub(crate) fn completed(&self) -> Option<StoredResponse> {
        lock(&self.shared.completed).clone()
    }

    async fn with_guard<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut ExecutionGuard) -> Result<T, WorkerError> + Send + 'static,
    ) -> Result<T, ExecutionError> {
        let shared = Arc::clone(&self.shared);
        tokio::task::spawn_blocking(move || {
            let mut slot = lock(&shared.guard);
            let guard = slot.as_mut().ok_or(ExecutionError::Finished)?;
            f(guard).map_err(ExecutionError::Store)
        })
        .await
        .map_err(|e| ExecutionError::Blocking(e.to_string()))?
    }
}

/// Settles an attempt that ended without a response to record (blocking). An
/// attempt whose request was sent downstream is marked Unknown, or left to its
/// lease when the store fails (never released: the other side may commit);
/// otherwise the guard's drop decides by effect kind (External Unknown, Local
/// released).
pub(crate) fn settle_without_answer(mut guard: ExecutionGuard, sent_downstream: bool) {
    if !sent_downstream {
        drop(guard);
        return;
    }
    if let Err(e) = guard.try_mark_unknown("no complete answer after the request was sent") {
        tracing::error!(error = %e, "marking the unanswered attempt Unknown failed; leaving the lease to expire");
        guard.abandon();
    }
}

impl fmt::Debug for Execution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Execution")
            .field("log_ref", &self.shared.log_ref)
            .field("attempt", &self.shared.attempt)
            .field("token", &self.shared.token)
            .finish_non_exhaustive()
    }
}

impl Drop for Shared {
    /// The request was dropped (client gone, future cancelled) or the handler
    /// panicked before the middleware recorded the attempt: drop the guard on the
    /// blocking pool, where its own `Drop` marks an External record Unknown (a
    /// Local one released) without blocking the executor.
    fn drop(&mut self) {
        let Some(guard) = lock(&self.guard).take() else {
            return;
        };
        tracing::warn!(parent: &self.span, "execution dropped before its outcome was recorded");
        let sent = self.sent_downstream.load(Ordering::SeqCst);
        let settle = move || settle_without_answer(guard, sent);
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                drop(handle.spawn_blocking(settle));
            }
            Err(_) => settle(),
        }
    }
}
