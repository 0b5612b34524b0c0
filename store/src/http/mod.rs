//! Tower/axum middleware that makes one route idempotent (feature `axum`).
//!
//! [`IdempotencyLayer`] wraps any tower service taking `Request<axum::body::Body>`
//! and answers exactly per docs/architecture.md's HTTP contract; every refusal is built by
//! [`idemkit_core::http::Refusal`], so the Rust middleware and the JS handler
//! answer byte-identical problems.
//!
//! Per request, in this order:
//!
//! 1. the principal extractor names the tenant (none → 401);
//! 2. the `Idempotency-Key` header is parsed (missing and required → 400
//!    `missing-idempotency-key`; malformed → 400 `invalid-idempotency-key`;
//!    missing and optional → the request passes through untouched);
//! 3. the body is read up to the route's limit (over → 413) and the request is
//!    fingerprinted with the route's [`FingerprintSpec`]: the method, the
//!    concrete path (as sent, before `Router::nest` strips a prefix) and the
//!    query's pairs count as well as the body, so one key sent to
//!    `/accounts/A/withdraw` and then to `/accounts/B/withdraw` gets 422;
//! 4. the store claims `(tenant, operation, key)` on tokio's blocking pool
//!    (failure → 503 with `Retry-After`: fail closed, nothing executed);
//! 5. a replay answers the stored status, the headers of the route's allow list
//!    ([`RouteConfig::replayed_headers`]) and the body with
//!    `Idempotent-Replayed: true`; in-flight → 409 + `Retry-After`; a changed
//!    payload → 422 (or 409 per policy); Unknown → 409 `outcome-uncertain`;
//!    completed past the replay window, or completed with a response body larger
//!    than [`RouteConfig::max_stored_response_bytes`] → 410 `response-expired`
//!    with the resource reference (never a new execution);
//! 6. otherwise the inner service runs with an [`Execution`] extension, its
//!    lease renewed in the background (store errors retried; no renewal after
//!    [`RouteConfig::max_execution`]), and its response is recorded per core's
//!    [`classify_attempt`] before it is returned (durable before acknowledged).
//!    A response body longer than 64 KiB is not held whole: the head and the
//!    body stream to the client as they come, the first
//!    [`RouteConfig::max_stored_response_bytes`] are kept for the record, and
//!    the last bytes are sent only once the outcome is recorded (if that fails,
//!    or the body fails, the client's response is cut off, never finished).
//!
//! Which responses are stored (the default [`StorePolicy::Definitive`](idemkit_core::machine::StorePolicy)):
//! 1xx, 2xx, 3xx (a 303 of post/redirect/get is replayed) and 4xx other than
//! 408/409/425/429. Those four "retry later" statuses and 5xx follow the effect
//! kind: a Local route releases (a retry executes); an **External route marks the
//! record Unknown** (a retry gets 409 `outcome-uncertain`), because the status may
//! come after the downstream call was sent. Only evidence that nothing was
//! dispatched releases an External attempt: [`Execution::nothing_dispatched`], or
//! a route declared [`RouteConfig::dispatches_only_through_steps`] whose record
//! holds no step.
//!
//! **A Local route that writes the service's own database** completes its record
//! itself, in the transaction that holds its write
//! ([`Execution::complete_with`] on redb, `Execution::complete_in` on
//! PostgreSQL; see [`crate::local`]): the layer then records nothing more and
//! answers the stored response (what every retry replays), whatever the handler
//! returns afterwards. Without it, a Local write and its outcome are two
//! commits, and a crash between them runs the write again: at least once.
//!
//! **Timeout layers belong outside this layer.** A tower `TimeoutLayer` (or any
//! layer that answers for the handler: load shedding, rate limiting) placed
//! *inside* the idempotency layer answers 408/503 as if the handler had, while
//! the handler's downstream call may already be on its way; the middleware can
//! only take that answer for the handler's, so on an External route the record
//! becomes Unknown and the key is stuck until an operator resolves it (never a
//! second charge, but never a replay either). Placed *outside*, a timeout drops
//! the request future: with [`OnDisconnect::Finish`] the handler still runs to
//! its end and is recorded, and the client's retry gets 409
//! `request-in-progress`, then the replay. Bound a slow handler with
//! [`RouteConfig::max_execution`] instead.
//!
//! **Recording failures.** The completion write is retried [`RECORD_ATTEMPTS`]
//! times while the store fails. When it still fails, the handler's response is
//! not sent (it is not durable; a streamed one is cut off); the answer is core's
//! [`Refusal::OutcomeNotRecorded`] (409 `outcome-uncertain`, `code:
//! outcome-not-recorded`, with the handler's status and the log reference), and
//! the record is marked Unknown if the store allows, else left Running for its
//! lease to expire. No failure after the handler answered releases its record.
//!
//! A client that disconnects does not stop the execution: by default
//! ([`OnDisconnect::Finish`]) the handler runs on its own task to the end and its
//! response is recorded, so the client's retry replays it. A handler that panics,
//! a response body that fails, or (with [`OnDisconnect::Cancel`]) a request
//! future that is dropped leaves the guard unrecorded: its drop marks an
//! External record **Unknown** — never Released, never re-executed silently —
//! and releases a Local one, unless the handler declared
//! [`Execution::sent_downstream`] (a proxy's request to its upstream): then it
//! is Unknown too, since the other side may still commit.
//!
//! Tracing: each execution runs in an `idempotent` span with the operation,
//! log reference, attempt, fencing token and (once known) provider reference;
//! never the raw key or the body.
//!
//! ```no_run
//! use axum::{Extension, Router, routing::post};
//! use idemkit::core::machine::StepStart;
//! use idemkit::core::record::EffectKind;
//! use idemkit::http::{Execution, IdempotencyLayer, RouteConfig};
//! use idemkit::store::Store;
//!
//! async fn charge(Extension(exec): Extension<Execution>) -> (axum::http::StatusCode, String) {
//!     // Persist the provider key before calling the provider; a retry reuses it.
//!     if let Ok(StepStart::Dispatch { provider_key }) = exec.begin_step("charge", "pk-1").await {
//!         // ... call the payment provider with `provider_key` ...
//!         let _ = exec.complete_step("charge", Some("ch_1".into())).await;
//!     }
//!     (axum::http::StatusCode::CREATED, format!("charged for {}", exec.tenant()))
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = idemkit::open("payments.redb")?;
//! let route = RouteConfig::new("payments.create", EffectKind::External)
//!     // The tenant comes from authentication, never from the body or the key.
//!     .principal(|parts| parts.extensions.get::<String>().cloned());
//! let app: Router = Router::new()
//!     .route("/payments", post(charge).route_layer(IdempotencyLayer::new(store, route)));
//! # Ok(()) }
//! ```

mod execution;
mod executions;
mod health;
mod metrics;
mod response_body;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ::http::request::Parts;
use ::http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use axum::body::Body;
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use idemkit_core::http::{Answer, IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, Refusal, ReplayedHeaders};
use idemkit_core::machine::{Disposition, Policy, classify_attempt};
use idemkit_core::record::{EffectKind, StoredResponse};
use idemkit_core::{ContentKind, FingerprintSpec, IdempotencyKey, KeyError, RequestLine, Scope};
use tracing::Instrument;

use response_body::Start;

pub use execution::{Execution, ExecutionError};
pub use executions::Executions;
pub use health::health_response;
pub use metrics::{ClaimOutcomeLabel, Metrics};

use crate::store::{Claim, ExecutionGuard, Store, WorkerError};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

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
    operation: String,
    spec: FingerprintSpec,
    key: KeyRequirement,
    principal: Arc<PrincipalFn>,
    policy: Policy,
    body_limit: usize,
    max_stored_response_bytes: usize,
    replayed_headers: Arc<ReplayedHeaders>,
    owner: String,
    store_retry_after: Duration,
    on_disconnect: OnDisconnect,
    max_execution: Duration,
    dispatches_only_through_steps: bool,
    metrics: Option<Arc<Metrics>>,
    executions: Option<Arc<Executions>>,
}

/// What happens to an execution when the request's future is dropped before the
/// handler finished, which is what hyper does when the client disconnects
/// (most often: its timeout fired).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnDisconnect {
    /// The default: the handler keeps running on its own task to the end, and
    /// its response is recorded as if the client were still there. The client's
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
            .field(
                "dispatches_only_through_steps",
                &self.dispatches_only_through_steps,
            )
            .finish_non_exhaustive()
    }
}

impl RouteConfig {
    /// The default body limit: 1 MiB.
    pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

    /// The default bound on a stored response body: 1 MiB.
    pub const DEFAULT_MAX_STORED_RESPONSE_BYTES: usize = 1 << 20;

    /// The default maximum execution time: 15 minutes.
    pub const DEFAULT_MAX_EXECUTION: Duration = Duration::from_secs(15 * 60);

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
            store_retry_after: Duration::from_secs(1),
            on_disconnect: OnDisconnect::Finish,
            max_execution: Self::DEFAULT_MAX_EXECUTION,
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
    /// ([`Execution::complete_with`]).
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

    /// Declares that this route's handler dispatches every downstream call
    /// through [`Execution::begin_step`] (which persists the step *before* the
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

    fn count_claim(&self, outcome: ClaimOutcomeLabel) {
        if let Some(m) = &self.metrics {
            m.claim(&self.operation, outcome);
        }
    }

    fn count_store_error(&self) {
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

/// A tower [`Layer`](tower::Layer) that makes the wrapped service idempotent
/// per one [`RouteConfig`]. Cheap to clone.
#[derive(Clone, Debug)]
pub struct IdempotencyLayer {
    store: Store,
    config: Arc<RouteConfig>,
}

impl IdempotencyLayer {
    /// A layer recording into `store` per `config`.
    #[must_use]
    pub fn new(store: Store, config: RouteConfig) -> Self {
        IdempotencyLayer {
            store,
            config: Arc::new(config),
        }
    }
}

impl<S> tower::Layer<S> for IdempotencyLayer {
    type Service = Idempotency<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotency {
            inner,
            store: self.store.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

/// The service built by [`IdempotencyLayer`].
#[derive(Clone, Debug)]
pub struct Idempotency<S> {
    inner: S,
    store: Store,
    config: Arc<RouteConfig>,
}

impl<S, B, RB> tower::Service<Request<B>> for Idempotency<S>
where
    S: tower::Service<Request<Body>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    RB: http_body::Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness is awaited on a clone inside the call (`oneshot`), so a
        // request refused before execution never reserves the inner service.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        let store = self.store.clone();
        let config = Arc::clone(&self.config);
        let entry = config.executions.as_ref().map(Executions::enter);
        let request = Incoming { request, entry };
        match config.on_disconnect {
            OnDisconnect::Cancel => Box::pin(handle(inner, store, config, request)),
            OnDisconnect::Finish => {
                let unavailable = Refusal::StoreUnavailable {
                    retry_after: config.store_retry_after,
                };
                // Dropping a JoinHandle detaches its task: the claim and the
                // execution outlive the request, so a claim is never left
                // unexecuted (which would read as an unknown outcome).
                let task = tokio::spawn(handle(inner, store, config, request));
                Box::pin(async move {
                    match task.await {
                        Ok(result) => result,
                        Err(e) => match e.try_into_panic() {
                            // The same panic the handler raised, as if it had run inline.
                            Ok(payload) => std::panic::resume_unwind(payload),
                            // Cancelled only when the runtime shuts down; a guard
                            // dropped with it records Unknown or Released.
                            Err(_) => Ok(refusal_response(&unavailable)),
                        },
                    }
                })
            }
        }
    }
}

/// The answer for a refusal, built by the core so every binding answers the same bytes.
#[must_use]
pub fn refusal_response(refusal: &Refusal) -> Response<Body> {
    answer_response(refusal.to_answer())
}

fn answer_response(answer: Answer) -> Response<Body> {
    let mut response = Response::new(Body::from(answer.body));
    *response.status_mut() =
        StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in answer.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

fn replay_response(stored: StoredResponse) -> Response<Body> {
    let mut response = stored_response(stored);
    response.headers_mut().insert(
        HeaderName::from_static(IDEMPOTENT_REPLAYED),
        HeaderValue::from_static("true"),
    );
    response
}

/// The response `stored`: its status, stored headers and body.
fn stored_response(stored: StoredResponse) -> Response<Body> {
    let mut response = Response::new(Body::from(stored.body.unwrap_or_default()));
    *response.status_mut() =
        StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in stored.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(&value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

/// Runs `f` on tokio's blocking pool: redb commits fsync, which must never stall
/// the executor.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// Runs the store call `f` where it costs least: inline on the executor for an
/// adapter that never waits ([`Adapter::may_block`](crate::adapters::Adapter::may_block)
/// is false: the memory adapter, where the blocking pool's two thread hops were
/// most of the layer's cost), on the blocking pool for every other adapter.
/// Either way a panic in `f` is `None`, as from a blocking task that panicked.
async fn on_store<T: Send + 'static>(
    store: &Store,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    if !store.adapter().may_block() {
        std::panic::catch_unwind(AssertUnwindSafe(f)).ok()
    } else {
        blocking(f).await
    }
}

/// A request as it arrived, with its place among the route's running executions.
struct Incoming<B> {
    request: Request<B>,
    entry: Option<executions::Entry>,
}

async fn handle<S, B, RB>(
    inner: S,
    store: Store,
    config: Arc<RouteConfig>,
    incoming: Incoming<B>,
) -> Result<Response<Body>, S::Error>
where
    S: tower::Service<Request<Body>, Response = Response<RB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    RB: http_body::Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    use tower::ServiceExt;

    let Incoming { request, entry } = incoming;
    let (parts, body) = request.into_parts();
    let Some(tenant) = (config.principal)(&parts) else {
        return Ok(refusal_response(&Refusal::Unauthenticated));
    };
    let Ok(scope) = Scope::new(&tenant, &config.operation) else {
        // A principal the scope cannot encode is no usable identity.
        return Ok(refusal_response(&Refusal::Unauthenticated));
    };
    let values: Vec<HeaderValue> = parts
        .headers
        .get_all(IDEMPOTENCY_KEY)
        .iter()
        .cloned()
        .collect();
    let key = match (values.first(), values.get(1)) {
        (None, _) => match config.key {
            KeyRequirement::Required => return Ok(refusal_response(&Refusal::MissingKey)),
            KeyRequirement::Optional => {
                let request = Request::from_parts(parts, Body::new(body));
                let response = inner.oneshot(request).await?;
                return Ok(response.map(Body::new));
            }
        },
        (Some(value), None) => match IdempotencyKey::parse_header(value.as_bytes()) {
            Ok(key) => key,
            Err(e) => return Ok(refusal_response(&Refusal::InvalidKey(e))),
        },
        // Two header lines combine into one list value (RFC 9110 §5.3), `a, b`:
        // refused where the comma falls, as the combined value would be.
        (Some(first), Some(_)) => {
            return Ok(refusal_response(&Refusal::InvalidKey(
                KeyError::BareComma {
                    offset: first.as_bytes().len(),
                },
            )));
        }
    };

    let too_large = Refusal::BodyTooLarge {
        limit: u64::try_from(config.body_limit).unwrap_or(u64::MAX),
    };
    let declared = parts
        .headers
        .get(::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > u64::try_from(config.body_limit).unwrap_or(u64::MAX)) {
        return Ok(refusal_response(&too_large));
    }
    let bytes = match Limited::new(body, config.body_limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => return Ok(refusal_response(&too_large)),
        Err(e) => {
            return Ok(refusal_response(&Refusal::InvalidBody {
                code: "body-read-failed".to_owned(),
                message: format!("the request body could not be read: {e}"),
            }));
        }
    };
    // What the key means includes the request line: the same key and body sent
    // to another path or query is another operation (422, nothing executed). The
    // path is the one the client sent, before any `Router::nest` stripped a prefix.
    let uri = parts
        .extensions
        .get::<axum::extract::OriginalUri>()
        .map_or(&parts.uri, |original| &original.0);
    let line = RequestLine::new(parts.method.as_str(), uri.path(), uri.query());
    let fingerprint = match config
        .spec
        .fingerprint_request(&config.operation, &line, &bytes)
    {
        Ok(fp) => fp,
        Err(e) => {
            return Ok(refusal_response(&Refusal::InvalidBody {
                code: e.code().to_owned(),
                message: e.to_string(),
            }));
        }
    };

    let claim = {
        let (claimer, scope, key, config) = (
            store.clone(),
            scope.clone(),
            key.clone(),
            Arc::clone(&config),
        );
        on_store(&store, move || {
            claimer.claim(&scope, &key, fingerprint, &config.owner, &config.policy)
        })
        .await
    };
    let unavailable = Refusal::StoreUnavailable {
        retry_after: config.store_retry_after,
    };
    let guard = match claim {
        None | Some(Err(_)) => {
            config.count_store_error();
            tracing::warn!(operation = %config.operation, log_ref = %scope.record_id(&key).log_ref(),
                "idempotency store unavailable; refusing without executing");
            return Ok(refusal_response(&unavailable));
        }
        Some(Ok(Claim::Execute(guard))) => {
            config.count_claim(ClaimOutcomeLabel::Execute);
            guard
        }
        Some(Ok(Claim::Replay { response, log_ref })) => {
            if response.body.is_none() {
                config.count_claim(ClaimOutcomeLabel::ResponseExpired);
                return Ok(refusal_response(&Refusal::ResponseExpired {
                    original_status: response.status,
                    resource_ref: response.resource_ref,
                }));
            }
            config.count_claim(ClaimOutcomeLabel::Replay);
            tracing::debug!(%log_ref, status = response.status, "replaying stored response");
            return Ok(replay_response(response));
        }
        Some(Ok(Claim::ResponseExpired {
            status,
            resource_ref,
            ..
        })) => {
            config.count_claim(ClaimOutcomeLabel::ResponseExpired);
            return Ok(refusal_response(&Refusal::ResponseExpired {
                original_status: status,
                resource_ref,
            }));
        }
        Some(Ok(Claim::InFlight { retry_after, .. })) => {
            config.count_claim(ClaimOutcomeLabel::InFlight);
            return Ok(refusal_response(&Refusal::InProgress { retry_after }));
        }
        Some(Ok(Claim::Mismatch { status, .. })) => {
            config.count_claim(ClaimOutcomeLabel::Mismatch);
            return Ok(refusal_response(&Refusal::KeyReused { status }));
        }
        Some(Ok(Claim::Uncertain { log_ref, .. })) => {
            config.count_claim(ClaimOutcomeLabel::Uncertain);
            return Ok(refusal_response(&Refusal::OutcomeUncertain { log_ref }));
        }
    };

    // One log reference per execution (a blake3 key derivation): for the span,
    // the Execution and the refusals below.
    let log_ref = guard.log_ref();
    if let Some(entry) = &entry {
        entry.claimed(log_ref);
    }
    let span = tracing::info_span!(
        "idempotent",
        operation = %config.operation,
        log_ref = %log_ref,
        attempt = guard.attempt(),
        fencing_token = guard.token().get(),
        provider_ref = tracing::field::Empty,
    );
    execute(
        inner,
        config,
        scope,
        guard,
        log_ref,
        parts,
        bytes,
        span.clone(),
        entry,
    )
    .instrument(span)
    .await
}

/// Aborts the lease renewal when the execution ends or its future is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Renews the lease every third of its length while the handler runs.
///
/// A store error does not end the renewal: it is retried (sooner than the next
/// regular renewal) until it succeeds or the store **refuses** it — a stale token
/// or a record no longer Running, which is what a lease that really ended looks
/// like. The machine renews an expired lease nobody took over, so an outage
/// longer than the lease costs nothing unless another claim came in meanwhile.
/// After `max_execution` no renewal is started: a hung handler's lease expires.
fn spawn_renewal(guard: &ExecutionGuard, lease: Duration, max_execution: Duration) -> AbortOnDrop {
    let renewer = guard.renewer();
    let every = (lease / 3).max(Duration::from_millis(10));
    let after_error = (every / 4).max(Duration::from_millis(10));
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

/// How many times the middleware writes an attempt's outcome (completion or
/// Unknown) when the store fails, before it answers
/// [`Refusal::OutcomeNotRecorded`]. The pause before the first retry is 25 ms,
/// doubled before each later one.
pub const RECORD_ATTEMPTS: u32 = 4;

const RECORD_BACKOFF: Duration = Duration::from_millis(25);

/// Runs `write` up to [`RECORD_ATTEMPTS`] times while the store fails; a refusal
/// (stale token, wrong state) is final at once.
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

#[allow(
    clippy::too_many_arguments,
    reason = "the request's parts, taken apart once by handle()"
)]
async fn execute<S, RB>(
    inner: S,
    config: Arc<RouteConfig>,
    scope: Scope,
    guard: ExecutionGuard,
    log_ref: idemkit_core::LogRef,
    mut parts: Parts,
    bytes: Bytes,
    span: tracing::Span,
    entry: Option<executions::Entry>,
) -> Result<Response<Body>, S::Error>
where
    S: tower::Service<Request<Body>, Response = Response<RB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: http_body::Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    use tower::ServiceExt;

    let renewal = spawn_renewal(&guard, config.policy.lease, config.max_execution);
    let started = std::time::Instant::now();
    let execution = Execution::new(
        scope,
        guard,
        span,
        config.max_stored_response_bytes,
        Arc::clone(&config.replayed_headers),
        log_ref,
    );
    parts.extensions.insert(execution.clone());
    let request = Request::from_parts(parts, Body::from(bytes));

    // The start of the response body is read inside the unwind boundary too: a
    // body that panics there is a handler panic. A body longer than
    // STREAM_AFTER is streamed from there (response_body.rs).
    let run = async move {
        let response = inner.oneshot(request).await?;
        let (head, body) = response.into_parts();
        let start = response_body::read_start(body).await;
        Ok::<_, S::Error>((head, start))
    };
    let outcome = CatchUnwind(Box::pin(run)).await;
    if let Some(stored) = execution.completed() {
        // The handler committed its outcome with its own writes: that is the
        // answer, now and on every retry, whatever happened after it.
        if !matches!(outcome, Ok(Ok((_, Start::Whole(_) | Start::Open { .. })))) {
            tracing::error!(
                "the handler failed after completing its execution; answering the stored response"
            );
        }
        if let Some(m) = &config.metrics {
            m.execution(&config.operation, started.elapsed());
            m.outcome(&config.operation, Disposition::Store);
        }
        tracing::info!(status = stored.status, "attempt recorded by the handler");
        return Ok(stored_response(stored));
    }
    let (head, body, rest) = match outcome {
        Ok(Ok((head, Start::Whole(body)))) => (head, body, None),
        Ok(Ok((head, Start::Open { seen, rest }))) => (head, seen, Some(rest)),
        Ok(Ok((_, Start::Failed))) => {
            settle_unrecorded(&execution).await;
            return Ok(refusal_response(&Refusal::OutcomeUncertain { log_ref }));
        }
        Ok(Err(e)) => {
            settle_unrecorded(&execution).await;
            return Err(e);
        }
        Err(panic) => {
            settle_unrecorded(&execution).await;
            std::panic::resume_unwind(panic);
        }
    };

    let status = head.status.as_u16();
    if let Some(m) = &config.metrics {
        m.execution(&config.operation, started.elapsed());
    }
    let dispatch = execution.dispatch(config.dispatches_only_through_steps);
    let disposition = execution
        .disposition_override()
        .unwrap_or_else(|| classify_attempt(status, &config.policy, dispatch));
    let stored = StoredResponse {
        status,
        headers: head
            .headers
            .iter()
            .filter(|(name, _)| config.replayed_headers.allows(name.as_str()))
            .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
            .collect(),
        // Over the bound: completed without its body, so a retry gets 410 with
        // the resource reference; the caller still gets the whole response below.
        body: (body.len() <= config.max_stored_response_bytes).then(|| body.to_vec()),
        resource_ref: execution.resource_ref(),
    };
    if let Some(rest) = rest {
        let streaming = response_body::Streaming {
            execution,
            config,
            stored: StoredResponse {
                body: None,
                ..stored
            },
            disposition,
            hold: Box::new((renewal, entry)),
        };
        return Ok(streaming.respond(head, body, rest));
    }
    let Some(guard) = execution.take_guard() else {
        // Only the middleware takes the guard; it is still here.
        return Ok(refusal_response(&Refusal::OutcomeUncertain { log_ref }));
    };
    if record(guard, disposition, stored, &config).await {
        Ok(Response::from_parts(head, Body::from(body)))
    } else {
        // Not durable, so not acknowledged: one core answer for every binding.
        Ok(refusal_response(&Refusal::OutcomeNotRecorded {
            log_ref,
            original_status: status,
        }))
    }
}

/// Records an answered attempt's outcome where the store's calls run, and
/// counts it; whether it is durable ([`record_outcome`]).
async fn record(
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
async fn settle_unrecorded(execution: &Execution) {
    if let Some(guard) = execution.take_guard() {
        let effect = guard.effect();
        let sent = execution.was_sent_downstream();
        tracing::warn!(%effect, sent_downstream = sent, "attempt ended without a response; settling");
        let _ = blocking(move || execution::settle_without_answer(guard, sent)).await;
    }
}

/// Catches a panic raised while polling the wrapped future.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn std::any::Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}
