//! How one route is made idempotent: the [`RouteConfig`] builder and its parts.

use std::sync::Arc;
use std::time::Duration;

use ::http::request::Parts;
use idemkit_core::http::prefer::WaitRule;
use idemkit_core::http::{ReplayedHeaders, defaults};
use idemkit_core::machine::Policy;
use idemkit_core::record::EffectKind;
use idemkit_core::{ContentKind, FingerprintSpec};

use super::{ClaimOutcomeLabel, Executions, Metrics, WaitEnded};

/// Names the tenant of a request from its parts (after authentication), or
/// `None` when the request carries no acceptable credentials (→ 401).
pub type PrincipalFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;

/// Whether a route requires the `Idempotency-Key` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRequirement {
    /// Missing → 400 `missing-idempotency-key`.
    Required,
    /// Missing → the request passes through without idempotency.
    Optional,
}

/// How one route is made idempotent.
#[derive(Clone)]
pub struct RouteConfig {
    pub(super) operation: String,
    pub(super) spec: FingerprintSpec,
    pub(super) key: KeyRequirement,
    pub(super) principal: Arc<PrincipalFn>,
    pub(super) policy: Policy,
    pub(super) body_limit: usize,
    pub(super) max_stored_response_bytes: usize,
    pub(super) replayed_headers: Arc<ReplayedHeaders>,
    pub(super) owner: String,
    pub(super) store_retry_after: Duration,
    pub(super) on_disconnect: OnDisconnect,
    pub(super) max_execution: Duration,
    pub(super) wait: WaitRule,
    pub(super) dispatches_only_through_steps: bool,
    pub(super) metrics: Option<Arc<Metrics>>,
    pub(super) executions: Option<Arc<Executions>>,
}

/// What happens to an execution when the request's future is dropped before the
/// handler finished, which is what hyper does when the client disconnects
/// (most often: its timeout fired).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnDisconnect {
    /// The default: the handler keeps running to the end, and its response
    /// is recorded as if the client were still there. The handler runs on a
    /// task of its own (spawned on the current tokio runtime); the claim, and
    /// the answer to a claim that does not execute (a replay, a refusal), run
    /// in the request's task, and whatever of them is left when the request's
    /// future is dropped is handed to a task too. The client's
    /// retry with the same key gets 409 `request-in-progress` meanwhile and then
    /// the replay: a timeout on the client's side never becomes an unknown outcome.
    #[default]
    Finish,
    /// The handler's future is dropped with the request. The unrecorded guard
    /// then marks an External record Unknown (a retry gets 409
    /// `outcome-uncertain`) and releases a Local one. Fits handlers that must stop
    /// working when nobody waits for them, at the price of more unknown outcomes.
    Cancel,
}

impl std::fmt::Debug for RouteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteConfig")
            .field("operation", &self.operation)
            .field("spec", &self.spec)
            .field("key", &self.key)
            .field("policy", &self.policy)
            .field("body_limit", &self.body_limit)
            .field("max_stored_response_bytes", &self.max_stored_response_bytes)
            .field("replayed_headers", &self.replayed_headers.names())
            .field("owner", &self.owner)
            .field("max_execution", &self.max_execution)
            .field("wait", &self.wait)
            .field(
                "dispatches_only_through_steps",
                &self.dispatches_only_through_steps,
            )
            .finish_non_exhaustive()
    }
}

impl RouteConfig {
    /// The default body limit: 1 MiB.
    pub const DEFAULT_BODY_LIMIT: usize = defaults::DEFAULT_BODY_LIMIT;

    /// The default bound on a stored response body: 1 MiB.
    pub const DEFAULT_MAX_STORED_RESPONSE_BYTES: usize =
        defaults::DEFAULT_MAX_STORED_RESPONSE_BYTES;

    /// The default maximum execution time: 15 minutes.
    pub const DEFAULT_MAX_EXECUTION: Duration = defaults::DEFAULT_MAX_EXECUTION;

    /// A route for `operation` (for example `appointments.create`) whose effect
    /// is `effect`: JSON fingerprint of the request line (method, concrete path,
    /// query) and the whole body, key required, the
    /// default [`Policy`] with that effect, 1 MiB body limit.
    ///
    /// **No principal extractor is set**: every request is refused with 401
    /// until [`principal`](Self::principal) names how the tenant is
    /// authenticated. The tenant never comes from the body or the key.
    #[must_use]
    pub fn new(operation: impl Into<String>, effect: EffectKind) -> Self {
        RouteConfig {
            operation: operation.into(),
            spec: FingerprintSpec::new(ContentKind::Json),
            key: KeyRequirement::Required,
            principal: Arc::new(|_: &Parts| None),
            policy: Policy::default().with_effect(effect),
            body_limit: Self::DEFAULT_BODY_LIMIT,
            max_stored_response_bytes: Self::DEFAULT_MAX_STORED_RESPONSE_BYTES,
            replayed_headers: Arc::new(ReplayedHeaders::default()),
            owner: format!("http:{}", std::process::id()),
            store_retry_after: defaults::DEFAULT_STORE_RETRY_AFTER,
            on_disconnect: OnDisconnect::Finish,
            max_execution: Self::DEFAULT_MAX_EXECUTION,
            wait: WaitRule::default(),
            dispatches_only_through_steps: false,
            metrics: None,
            executions: None,
        }
    }

    /// How requests are fingerprinted: the body's content kind and field
    /// selection, and which query parameters count
    /// ([`FingerprintSpec::ignore_query_param`], [`FingerprintSpec::ignore_query`]).
    /// The method and the concrete path always count (scheme 2,
    /// [`FingerprintSpec::fingerprint_request`]); records written under scheme 1
    /// (before the request line counted) are compared under scheme 1.
    ///
    /// ```
    /// use idemkit::http::RouteConfig;
    /// use idemkit::core::{ContentKind, FingerprintSpec};
    /// use idemkit::core::record::EffectKind;
    ///
    /// let route = RouteConfig::new("payments.capture", EffectKind::External).fingerprint(
    ///     FingerprintSpec::new(ContentKind::Json)
    ///         .exclude("/request_id")?
    ///         .ignore_query_param("utm_source"),
    /// );
    /// # let _ = route;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn fingerprint(mut self, spec: FingerprintSpec) -> Self {
        self.spec = spec;
        self
    }

    /// Whether the key is required.
    #[must_use]
    pub fn key(mut self, requirement: KeyRequirement) -> Self {
        self.key = requirement;
        self
    }

    /// The principal extractor: request parts → tenant.
    #[must_use]
    pub fn principal(
        mut self,
        extract: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.principal = Arc::new(extract);
        self
    }

    /// The policy (lease, retention windows, mismatch status, store policy).
    /// Its effect kind replaces the one given to [`new`](Self::new).
    #[must_use]
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The largest body read, in bytes; larger → 413 and nothing claimed.
    #[must_use]
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// The largest response body kept for replay, in bytes (default
    /// [`DEFAULT_MAX_STORED_RESPONSE_BYTES`](Self::DEFAULT_MAX_STORED_RESPONSE_BYTES),
    /// 1 MiB). A larger response is answered in full once and recorded as
    /// completed without its body (status, replayable headers and resource
    /// reference are kept), so a retry gets 410 `response-expired` with the
    /// resource reference instead of a replay, and nothing runs twice.
    #[must_use]
    pub fn max_stored_response_bytes(mut self, bytes: usize) -> Self {
        self.max_stored_response_bytes = bytes;
        self
    }

    /// The response headers stored with an outcome and replayed (default
    /// [`DEFAULT_REPLAYED_HEADERS`](idemkit_core::http::DEFAULT_REPLAYED_HEADERS):
    /// content type and the other representation headers, `location`, `link`,
    /// the caching headers, `allow` and `retry-after`). Every other header of
    /// the handler's response reaches the client that asked and is never stored,
    /// so a session token in a custom header is never handed to whoever retries
    /// with the key; `Set-Cookie` and credentials are never stored, whatever the
    /// list says ([`ReplayedHeaders::new`] refuses them). This applies to
    /// responses the layer records and to the handler's own completions
    /// ([`Execution::complete_with`](super::Execution::complete_with)).
    ///
    /// ```
    /// use idemkit::core::http::ReplayedHeaders;
    /// use idemkit::core::record::EffectKind;
    /// use idemkit::http::RouteConfig;
    ///
    /// let route = RouteConfig::new("reports.create", EffectKind::Local)
    ///     .replayed_headers(ReplayedHeaders::default().with("x-report-pages")?);
    /// # let _ = route;
    /// # Ok::<(), idemkit::core::http::ReplayedHeaderError>(())
    /// ```
    #[must_use]
    pub fn replayed_headers(mut self, list: ReplayedHeaders) -> Self {
        self.replayed_headers = Arc::new(list);
        self
    }

    /// The lease owner recorded for operators (default `http:<pid>`).
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// The `Retry-After` sent with 503 when the store is unavailable (default 1 s).
    #[must_use]
    pub fn store_retry_after(mut self, after: Duration) -> Self {
        self.store_retry_after = after;
        self
    }

    /// What a client disconnect does to a running execution (default
    /// [`OnDisconnect::Finish`]).
    #[must_use]
    pub fn on_disconnect(mut self, behaviour: OnDisconnect) -> Self {
        self.on_disconnect = behaviour;
        self
    }

    /// How long an execution may hold its lease (default
    /// [`DEFAULT_MAX_EXECUTION`](Self::DEFAULT_MAX_EXECUTION), 15 minutes).
    ///
    /// The lease is renewed every third of its length while the handler runs;
    /// after this time renewal stops, so a hung handler's lease expires: an
    /// External record is then listed as unresolved (`list_unresolved`) and a
    /// retry gets 409 `outcome-uncertain` (a Local one is taken over by the next
    /// claim). A handler that finishes later finds its lease gone and its
    /// response is not recorded.
    #[must_use]
    pub fn max_execution(mut self, limit: Duration) -> Self {
        self.max_execution = limit;
        self
    }

    /// How long a retry whose key is still running waits for its answer when
    /// it asks nothing (default zero: 409 `request-in-progress` at once).
    /// Capped by [`max_wait`](Self::max_wait).
    ///
    /// While it waits, the request is held; the first attempt's completion
    /// wakes it with the answer any retry would get then (the replay, 410, the
    /// unknown answer), a released claim lets it claim and execute, and a wait
    /// that runs out gets the 409.
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait.default_wait = wait;
        self
    }

    /// The longest a retry may wait for a running key's answer, whatever it
    /// asks with `Prefer: wait=N` (default 10 s; zero: never wait).
    ///
    /// ```
    /// use std::time::Duration;
    /// use idemkit::http::RouteConfig;
    /// use idemkit::core::record::EffectKind;
    ///
    /// // Retries may ask to wait up to 30 s; those that ask nothing wait 2 s.
    /// let route = RouteConfig::new("appointments.create", EffectKind::External)
    ///     .max_wait(Duration::from_secs(30))
    ///     .wait(Duration::from_secs(2));
    /// # let _ = route;
    /// ```
    #[must_use]
    pub fn max_wait(mut self, limit: Duration) -> Self {
        self.wait.max_wait = limit;
        self
    }

    /// Declares that this route's handler dispatches every downstream call
    /// through [`Execution::begin_step`](super::Execution::begin_step) (which persists the step *before* the
    /// call), so a record without steps proves that nothing was dispatched
    /// (core's [`Dispatch::from_steps`](idemkit_core::machine::Dispatch::from_steps)).
    ///
    /// With it, an External attempt that began no step, on a record that holds no
    /// step from an earlier attempt, is released (not made Unknown) when it
    /// answers 408/409/425/429 or a 5xx. Without it (the default) an empty step
    /// list proves nothing: a handler that does not use steps has one too.
    #[must_use]
    pub fn dispatches_only_through_steps(mut self, declared: bool) -> Self {
        self.dispatches_only_through_steps = declared;
        self
    }

    /// Counts this route's claims, outcomes, execution times and store errors
    /// in `metrics` (shared by every route given the same one; see [`Metrics`]).
    #[must_use]
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Counts this route's requests in `executions` from their arrival until
    /// their outcome is recorded, whether their client still waits or not, so
    /// that a shutdown can wait for them ([`Executions::idle`]).
    #[must_use]
    pub fn executions(mut self, executions: Arc<Executions>) -> Self {
        self.executions = Some(executions);
        self
    }

    pub(super) fn count_claim(&self, outcome: ClaimOutcomeLabel) {
        if let Some(m) = &self.metrics {
            m.claim(&self.operation, outcome);
        }
    }

    pub(super) fn count_wait(&self, ended: WaitEnded) {
        if let Some(m) = &self.metrics {
            m.wait_ended(&self.operation, ended);
        }
    }

    pub(super) fn count_store_error(&self) {
        if let Some(m) = &self.metrics {
            m.store_error();
        }
    }

    /// The operation name.
    #[must_use]
    pub fn operation(&self) -> &str {
        &self.operation
    }

    /// The policy.
    #[must_use]
    pub fn policy_ref(&self) -> &Policy {
        &self.policy
    }
}
