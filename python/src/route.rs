//! One idempotent route for the ASGI middleware (`idemkit_rs/asgi.py`): the
//! decisions the tower/axum layer makes (`idemkit::http`), in the same order and
//! with the same answers, each built by core's HTTP contract
//! ([`Refusal`]).
//!
//! The middleware drives it in three calls:
//!
//! 1. `Route.admit` (no I/O): the principal (none → 401) and the
//!    `Idempotency-Key` header (missing and required → 400, malformed → 400,
//!    missing and optional → pass through);
//! 2. the middleware reads the body up to `Route.body_limit` (over →
//!    `Route.too_large`, 413);
//! 3. `Route.claim` (blocking: the middleware runs it in a worker thread, and it
//!    releases the GIL): the fingerprint of the method, concrete path, query and
//!    body (unreadable → 400), then the store's claim (failure → 503, nothing
//!    executed). Every answer but `Execute` is final: a replay (with
//!    `Idempotent-Replayed: true`), 409 in progress with `Retry-After`, 422 reused,
//!    409 outcome uncertain, 410 response expired. `Execute` hands back an
//!    [`Execution`].
//!
//! The handler runs under the [`Execution`] (steps, provider keys, evidence of
//! dispatch), and `Execution.finish` records its response per core's
//! [`classify_attempt`] before the middleware sends it: durable before
//! acknowledged. A handler that raises ends with `Execution.settle`: an External
//! record becomes Unknown, a Local one is released, never executed twice silently.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use idemkit::store::{Claim, ExecutionGuard, WorkerError};
use idemkit_core::http::prefer::{WaitRule, prefer_wait_in};
use idemkit_core::http::{IDEMPOTENT_REPLAYED, Refusal, ReplayedHeaders};
use idemkit_core::machine::{
    Dispatch, Disposition, MismatchStatus, Policy, StepStart, StorePolicy, classify_attempt,
};
use idemkit_core::record::{EffectKind, StepState, StoredResponse};
use idemkit_core::{FingerprintSpec, IdempotencyKey, KeyError, LogRef, RequestLine, Scope};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::canonical::spec;
use crate::store::Store;
use crate::{errors, seconds};

/// A ready-to-send answer: status, headers (lowercase names) and body.
#[pyclass(frozen, module = "idemkit_rs._native")]
pub struct Answer {
    /// The HTTP status.
    #[pyo3(get)]
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    /// The stable problem name of a refusal (`request-in-progress`, …), `"replay"`
    /// for a replay.
    #[pyo3(get)]
    outcome: &'static str,
    /// The `Retry-After` of a refusal that carries one (409 in progress, 503).
    retry_after: Option<Duration>,
}

#[pymethods]
impl Answer {
    /// The headers as ASGI sends them: `[(name, value)]`, both `bytes`.
    #[getter]
    fn headers<'py>(&self, py: Python<'py>) -> Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        self.headers
            .iter()
            .map(|(n, v)| (PyBytes::new(py, n.as_bytes()), PyBytes::new(py, v)))
            .collect()
    }

    /// The body.
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.body)
    }

    fn __repr__(&self) -> String {
        format!("Answer(status={}, outcome={:?})", self.status, self.outcome)
    }
}

impl Answer {
    fn refusal(refusal: &Refusal) -> Answer {
        let answer = refusal.to_answer();
        Answer {
            status: answer.status,
            headers: answer
                .headers
                .into_iter()
                .map(|(n, v)| (n, v.into_bytes()))
                .collect(),
            body: answer.body,
            outcome: refusal.problem_name(),
            retry_after: match refusal {
                Refusal::InProgress { retry_after }
                | Refusal::StoreUnavailable { retry_after }
                | Refusal::TooManyWaiters { retry_after } => Some(*retry_after),
                _ => None,
            },
        }
    }

    /// The stored response, as the handler answered it.
    fn stored(stored: StoredResponse, outcome: &'static str) -> Answer {
        Answer {
            status: stored.status,
            headers: stored.headers,
            body: stored.body.unwrap_or_default(),
            outcome,
            retry_after: None,
        }
    }

    /// The stored response with `Idempotent-Replayed: true`.
    fn replay(stored: StoredResponse) -> Answer {
        let mut answer = Answer::stored(stored, "replay");
        answer
            .headers
            .retain(|(name, _)| !name.eq_ignore_ascii_case(IDEMPOTENT_REPLAYED));
        answer
            .headers
            .push((IDEMPOTENT_REPLAYED.to_owned(), b"true".to_vec()));
        answer
    }
}

/// How one route is made idempotent: what the Rust layer's `RouteConfig` says.
#[pyclass(frozen, module = "idemkit_rs._native")]
pub struct Route {
    config: Arc<Config>,
}

struct Config {
    operation: String,
    spec: FingerprintSpec,
    key_required: bool,
    policy: Policy,
    body_limit: usize,
    max_stored_response_bytes: usize,
    replayed_headers: ReplayedHeaders,
    owner: String,
    store_retry_after: Duration,
    dispatches_only_through_steps: bool,
    wait: WaitRule,
}

/// What `Route.admit` lets through: the request's key, or nothing to claim.
enum Admitted {
    Key(IdempotencyKey),
    PassThrough,
}

// How many times an attempt's outcome is written while the store fails, and
// the pause before the first retry (doubled after): core's, as every binding's.
use idemkit_core::http::defaults::{RECORD_ATTEMPTS, RECORD_BACKOFF};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks leaves plain data behind, still valid.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Config {
    fn unavailable(&self) -> Answer {
        Answer::refusal(&Refusal::StoreUnavailable {
            retry_after: self.store_retry_after,
        })
    }

    /// Principal and key, in the layer's order.
    fn admit(&self, tenant: Option<&str>, key_headers: &[Vec<u8>]) -> Result<Admitted, Answer> {
        let Some(tenant) = tenant else {
            return Err(Answer::refusal(&Refusal::Unauthenticated));
        };
        if Scope::new(tenant, &self.operation).is_err() {
            // A principal the scope cannot encode is no usable identity.
            return Err(Answer::refusal(&Refusal::Unauthenticated));
        }
        match key_headers {
            [] if self.key_required => Err(Answer::refusal(&Refusal::MissingKey)),
            [] => Ok(Admitted::PassThrough),
            [value] => IdempotencyKey::parse_header(value)
                .map(Admitted::Key)
                .map_err(|e| Answer::refusal(&Refusal::InvalidKey(e))),
            // Two field lines combine into one list value (RFC 9110 §5.3), `a, b`:
            // refused where the comma falls, as the combined value would be.
            [first, ..] => Err(Answer::refusal(&Refusal::InvalidKey(KeyError::BareComma {
                offset: first.len(),
            }))),
        }
    }

    fn claim(
        &self,
        store: &idemkit::store::Store,
        scope: Scope,
        key: IdempotencyKey,
        line: &RequestLine<'_>,
        body: &[u8],
    ) -> Result<(ExecutionGuard, Scope), Answer> {
        // What the key means includes the request line: the same key and body sent
        // to another path or query is another operation (422, nothing executed).
        let fingerprint = self
            .spec
            .fingerprint_request(&self.operation, line, body)
            .map_err(|e| {
                Answer::refusal(&Refusal::InvalidBody {
                    code: e.code().to_owned(),
                    message: e.to_string(),
                })
            })?;
        let claim = store.claim(&scope, &key, fingerprint, &self.owner, &self.policy);
        match claim {
            Err(_) => Err(self.unavailable()),
            Ok(Claim::Execute(guard)) => Ok((guard, scope)),
            Ok(Claim::Replay { response, .. }) if response.body.is_none() => {
                Err(Answer::refusal(&Refusal::ResponseExpired {
                    original_status: response.status,
                    resource_ref: response.resource_ref,
                }))
            }
            Ok(Claim::Replay { response, .. }) => Err(Answer::replay(response)),
            Ok(Claim::ResponseExpired {
                status,
                resource_ref,
                ..
            }) => Err(Answer::refusal(&Refusal::ResponseExpired {
                original_status: status,
                resource_ref,
            })),
            Ok(Claim::InFlight { retry_after, .. }) => {
                Err(Answer::refusal(&Refusal::InProgress { retry_after }))
            }
            Ok(Claim::Mismatch { status, .. }) => {
                Err(Answer::refusal(&Refusal::KeyReused { status }))
            }
            Ok(Claim::Uncertain { log_ref, .. }) => {
                Err(Answer::refusal(&Refusal::OutcomeUncertain { log_ref }))
            }
        }
    }
}

fn effect(name: &str) -> PyResult<EffectKind> {
    match name {
        "external" => Ok(EffectKind::External),
        "local" => Ok(EffectKind::Local),
        other => Err(errors::argument(format!(
            "effect must be \"external\" or \"local\", not {other:?}"
        ))),
    }
}

#[pymethods]
impl Route {
    /// A route for `operation` (`appointments.create`) with `effect` `"external"`
    /// (a downstream system may be written: an ambiguous attempt becomes unknown)
    /// or `"local"`. The fingerprint covers the method, the concrete path, the
    /// query (less `ignore_query_params`, or none with `ignore_query`) and the body
    /// by its content type, less `exclude` or only `include` (JSON Pointers).
    /// `replayed_headers` is the allow list of response headers stored and replayed
    /// (default: core's `DEFAULT_REPLAYED_HEADERS`; a cookie or credential header
    /// is refused). A retry of a running key is held until the first attempt's
    /// answer exists when it asks (`Prefer: wait=N`, at most `max_wait` seconds,
    /// default core's 10; 0: never) or, asking nothing, for the route's `wait` seconds (default 0:
    /// answered 409 at once).
    #[new]
    #[pyo3(signature = (
        operation, *, effect = "external", content_type = "application/json",
        schema_version = 1, include = Vec::new(), exclude = Vec::new(), ignore_query = false,
        ignore_query_params = Vec::new(), key_required = true, lease = 30.0,
        replay_window = 86_400.0, record_window = 604_800.0, mismatch_status = 422,
        store_everything = false, body_limit = 1 << 20, max_stored_response_bytes = 1 << 20,
        replayed_headers = None, owner = None, store_retry_after = 1.0,
        dispatches_only_through_steps = false, wait = 0.0, max_wait = None
    ))]
    #[allow(
        clippy::too_many_arguments,
        reason = "the keyword arguments of the Python class, one per RouteConfig setting"
    )]
    fn new(
        py: Python<'_>,
        operation: String,
        effect: &str,
        content_type: &str,
        schema_version: u32,
        include: Vec<String>,
        exclude: Vec<String>,
        ignore_query: bool,
        ignore_query_params: Vec<String>,
        key_required: bool,
        lease: f64,
        replay_window: f64,
        record_window: f64,
        mismatch_status: u16,
        store_everything: bool,
        body_limit: usize,
        max_stored_response_bytes: usize,
        replayed_headers: Option<Vec<String>>,
        owner: Option<String>,
        store_retry_after: f64,
        dispatches_only_through_steps: bool,
        wait: f64,
        max_wait: Option<f64>,
    ) -> PyResult<Self> {
        let spec = spec(
            py,
            content_type,
            schema_version,
            &include,
            &exclude,
            ignore_query,
            &ignore_query_params,
        )?;
        let mismatch = match mismatch_status {
            422 => MismatchStatus::UnprocessableEntity,
            409 => MismatchStatus::Conflict,
            other => {
                return Err(errors::argument(format!(
                    "mismatch_status must be 422 or 409, not {other}"
                )));
            }
        };
        let replayed_headers = match replayed_headers {
            None => ReplayedHeaders::default(),
            Some(names) => ReplayedHeaders::new(&names)
                .map_err(|e| errors::argument(format!("replayed_headers: {e} [{}]", e.code())))?,
        };
        let lease = seconds(lease, "lease")?;
        if lease.is_zero() {
            return Err(errors::argument("lease must be longer than 0 seconds"));
        }
        let policy = Policy::default()
            .with_effect(self::effect(effect)?)
            .with_lease(lease)
            .with_replay_window(seconds(replay_window, "replay_window")?)
            .with_record_window(seconds(record_window, "record_window")?)
            .with_mismatch(mismatch)
            .with_store(if store_everything {
                StorePolicy::StoreEverything
            } else {
                StorePolicy::Definitive
            });
        Ok(Route {
            config: Arc::new(Config {
                operation,
                spec,
                key_required,
                policy,
                body_limit,
                max_stored_response_bytes,
                replayed_headers,
                owner: owner.unwrap_or_else(|| format!("asgi:{}", std::process::id())),
                store_retry_after: seconds(store_retry_after, "store_retry_after")?,
                dispatches_only_through_steps,
                wait: WaitRule {
                    default_wait: seconds(wait, "wait")?,
                    // Core's default cap when none is given.
                    max_wait: match max_wait {
                        Some(max_wait) => seconds(max_wait, "max_wait")?,
                        None => WaitRule::default().max_wait,
                    },
                },
            }),
        })
    }

    /// The operation name.
    #[getter]
    fn operation(&self) -> &str {
        &self.config.operation
    }

    /// The largest body read, in bytes; a larger one is answered `Route.too_large`.
    #[getter]
    fn body_limit(&self) -> usize {
        self.config.body_limit
    }

    /// The lease in seconds (the middleware renews it every third of this).
    #[getter]
    fn lease(&self) -> f64 {
        self.config.policy.lease.as_secs_f64()
    }

    /// Step 1: the tenant (`None`: no acceptable credentials) and the request's
    /// `Idempotency-Key` field lines. Returns the key to claim, `None` to pass the
    /// request through untouched (no key on an optional route), or the
    /// [`Answer`] that refuses it.
    fn admit(
        &self,
        py: Python<'_>,
        tenant: Option<&str>,
        key_headers: Vec<Vec<u8>>,
    ) -> PyResult<Py<PyAny>> {
        match self.config.admit(tenant, &key_headers) {
            Ok(Admitted::Key(key)) => Ok(key.as_str().into_pyobject(py)?.into_any().unbind()),
            Ok(Admitted::PassThrough) => Ok(py.None()),
            Err(answer) => Ok(Py::new(py, answer)?.into_any()),
        }
    }

    /// Step 2's refusal: 413 `body-too-large` with the route's limit.
    fn too_large(&self) -> Answer {
        Answer::refusal(&Refusal::BodyTooLarge {
            limit: u64::try_from(self.config.body_limit).unwrap_or(u64::MAX),
        })
    }

    /// 503 `store-unavailable` with the route's `Retry-After`: nothing executed.
    fn unavailable(&self) -> Answer {
        self.config.unavailable()
    }

    /// How long to hold a retry whose key is running (the 409 `in_progress`
    /// answer of `Route.claim`), given the request's `Prefer` field lines: the
    /// `wait=N` it asked for, else the route's `wait`, at most `max_wait`.
    /// Returns `(seconds, preference_applied)`: zero seconds means answer at
    /// once; `preference_applied` is the `Preference-Applied` value to send
    /// (`wait=N`) when the request asked to wait, else `None`.
    fn wait_for(&self, prefer_headers: Vec<Vec<u8>>) -> (f64, Option<String>) {
        let wait = self
            .config
            .wait
            .wait_for(prefer_wait_in(prefer_headers.iter().map(Vec::as_slice)));
        (wait.duration.as_secs_f64(), wait.preference_applied())
    }

    /// 503 `too-many-waiters` for a retry that asked to wait when as many
    /// requests as allowed already wait; its `Retry-After` is the one of the
    /// 409 `in_progress` answer it would have had. Nothing is executed.
    fn too_many_waiters(&self, in_progress: &Answer) -> Answer {
        Answer::refusal(&Refusal::TooManyWaiters {
            retry_after: in_progress
                .retry_after
                .unwrap_or(self.config.store_retry_after),
        })
    }

    /// Step 3 (blocking; the GIL is released): fingerprint the request and claim
    /// `(tenant, operation, key)` in `store`. Returns an [`Execution`] to run the
    /// handler under, or the final [`Answer`].
    #[allow(
        clippy::too_many_arguments,
        reason = "the request line and body, as the middleware took them apart"
    )]
    fn claim(
        &self,
        py: Python<'_>,
        store: &Store,
        tenant: String,
        key: String,
        method: String,
        path: String,
        query: Option<String>,
        body: Vec<u8>,
    ) -> PyResult<Py<PyAny>> {
        let config = Arc::clone(&self.config);
        let store = store.inner.clone();
        let claimed = py.detach(move || {
            let scope = Scope::new(&tenant, &config.operation)
                .map_err(|_| Answer::refusal(&Refusal::Unauthenticated))?;
            let key =
                IdempotencyKey::new(&key).map_err(|e| Answer::refusal(&Refusal::InvalidKey(e)))?;
            let line = RequestLine::new(&method, &path, query.as_deref());
            config
                .claim(&store, scope, key, &line, &body)
                .map(|(guard, scope)| Execution::new(Arc::clone(&config), scope, guard))
        });
        match claimed {
            Ok(execution) => Ok(Py::new(py, execution)?.into_any()),
            Err(answer) => Ok(Py::new(py, answer)?.into_any()),
        }
    }
}

/// How long a held retry sleeps before claiming again after `polls` earlier
/// polls: core's fallback poll (50 ms, doubling, at most 1 s), for a waiter
/// nothing wakes.
#[pyfunction]
pub fn fallback_poll(polls: u32) -> f64 {
    idemkit_core::http::prefer::fallback_poll(polls).as_secs_f64()
}

/// The execution a request runs under: the handler finds it as
/// `scope["state"]["idemkit"]` (`request.state.idemkit` in Starlette) and may
/// persist steps with provider keys before dispatching them.
#[pyclass(frozen, module = "idemkit_rs._native")]
pub struct Execution {
    config: Arc<Config>,
    guard: Mutex<Option<ExecutionGuard>>,
    scope: Scope,
    log_ref: LogRef,
    attempt: u32,
    token: u64,
    steps: Vec<idemkit_core::record::Step>,
    disposition: Mutex<Option<Disposition>>,
    resource_ref: Mutex<Option<String>>,
    nothing_dispatched: AtomicBool,
    began_step: AtomicBool,
    sent_downstream: AtomicBool,
}

impl Execution {
    fn new(config: Arc<Config>, scope: Scope, guard: ExecutionGuard) -> Execution {
        Execution {
            config,
            log_ref: guard.log_ref(),
            attempt: guard.attempt(),
            token: guard.token().get(),
            steps: guard.steps().to_vec(),
            guard: Mutex::new(Some(guard)),
            scope,
            disposition: Mutex::new(None),
            resource_ref: Mutex::new(None),
            nothing_dispatched: AtomicBool::new(false),
            began_step: AtomicBool::new(false),
            sent_downstream: AtomicBool::new(false),
        }
    }

    /// What this attempt shows about its dispatch (as the Rust layer's
    /// `Execution::dispatch`).
    fn dispatch(&self) -> Dispatch {
        let explicit = if self.nothing_dispatched.load(Ordering::SeqCst) {
            Dispatch::Nothing
        } else {
            Dispatch::Unknown
        };
        let steps = if self.began_step.load(Ordering::SeqCst) {
            Dispatch::Unknown
        } else {
            Dispatch::from_steps(self.config.dispatches_only_through_steps, &self.steps)
        };
        explicit.or(steps)
    }

    /// Runs `f` on the guard with the GIL released.
    fn with_guard<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut ExecutionGuard) -> Result<T, WorkerError> + Send,
    ) -> PyResult<T> {
        let done = py.detach(|| {
            let mut slot = lock(&self.guard);
            let guard = slot.as_mut().ok_or(None)?;
            f(guard).map_err(Some)
        });
        done.map_err(|e| match e {
            None => errors::store_error(
                py,
                "execution-finished",
                "the execution was already recorded",
            ),
            Some(WorkerError::Storage(e)) => errors::store_error(py, "store-unavailable", e),
            Some(e) => errors::store_error(py, "store-refused", e),
        })
    }

    /// Writes `write` up to [`RECORD_ATTEMPTS`] times while the store fails; a
    /// refusal (stale token, wrong state) is final at once.
    fn with_retries(mut write: impl FnMut() -> Result<(), WorkerError>) -> Result<(), WorkerError> {
        let mut pause = RECORD_BACKOFF;
        let mut attempt = 1;
        loop {
            match write() {
                Ok(()) => return Ok(()),
                Err(WorkerError::Storage(_)) if attempt < RECORD_ATTEMPTS => {
                    std::thread::sleep(pause);
                    pause = pause.saturating_mul(2);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Records the handler's response (blocking). Once the handler has answered,
    /// no failure here releases the record: a completion that keeps failing falls
    /// back to Unknown, and when that fails too the lease is left to expire.
    fn record(&self, status: u16, stored: StoredResponse) -> Result<(), Answer> {
        let Some(mut guard) = lock(&self.guard).take() else {
            // Finished already (a second finish): nothing more is recorded.
            return Err(Answer::refusal(&Refusal::OutcomeUncertain {
                log_ref: self.log_ref,
            }));
        };
        let disposition = (*lock(&self.disposition))
            .unwrap_or_else(|| classify_attempt(status, &self.config.policy, self.dispatch()));
        let first = match disposition {
            // Asked for: no effect. A failed release is settled by the guard's
            // drop (a Local record released, an External one Unknown).
            Disposition::Release => {
                let _ = guard.release();
                return Ok(());
            }
            Disposition::Store => Self::with_retries(|| guard.try_complete(&stored)),
            Disposition::Unknown => {
                Self::with_retries(|| guard.try_mark_unknown(&format!("status {status}")))
            }
        };
        let Err(error) = first else {
            return Ok(());
        };
        // The store failed, not refused: try to leave an honest Unknown behind.
        let fallback = if matches!(error, WorkerError::Storage(_))
            && disposition == Disposition::Store
        {
            Self::with_retries(|| guard.try_mark_unknown(&format!("status {status} not recorded")))
        } else {
            Err(error)
        };
        if fallback.is_err() {
            guard.abandon();
        }
        Err(Answer::refusal(&Refusal::OutcomeNotRecorded {
            log_ref: self.log_ref,
            original_status: status,
        }))
    }
}

fn disposition(name: &str) -> PyResult<Disposition> {
    match name {
        "store" => Ok(Disposition::Store),
        "release" => Ok(Disposition::Release),
        "unknown" => Ok(Disposition::Unknown),
        other => Err(errors::argument(format!(
            "disposition must be \"store\", \"release\" or \"unknown\", not {other:?}"
        ))),
    }
}

#[pymethods]
impl Execution {
    /// The authenticated tenant.
    #[getter]
    fn tenant(&self) -> &str {
        self.scope.tenant()
    }

    /// The route's operation.
    #[getter]
    fn operation(&self) -> &str {
        self.scope.operation()
    }

    /// The record's log reference (safe to log; never the raw key).
    #[getter]
    fn log_ref(&self) -> String {
        self.log_ref.to_string()
    }

    /// The attempt number (1 for the first).
    #[getter]
    fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The lease's fencing token.
    #[getter]
    fn fencing_token(&self) -> u64 {
        self.token
    }

    /// The steps persisted by earlier attempts when this lease began:
    /// `[{"name", "state", "provider_key", "provider_ref"}]`.
    #[getter]
    fn steps<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.steps
            .iter()
            .map(|step| {
                let view = PyDict::new(py);
                view.set_item("name", &step.name)?;
                view.set_item(
                    "state",
                    match step.state {
                        StepState::Started => "started",
                        StepState::Done => "done",
                    },
                )?;
                view.set_item("provider_key", &step.provider_key)?;
                view.set_item("provider_ref", &step.provider_ref)?;
                Ok(view)
            })
            .collect()
    }

    /// Persists step `name` with `provider_key` before the handler dispatches it
    /// (blocking). Returns `("dispatch", key)`: send with this key, the one an
    /// earlier attempt persisted if there was one; or `("done", provider_ref)`: an
    /// earlier attempt finished the step, do not send it again.
    fn begin_step(
        &self,
        py: Python<'_>,
        name: String,
        provider_key: String,
    ) -> PyResult<(&'static str, Option<String>)> {
        // Set before the store call: a step persisted whose answer was lost still
        // counts as begun.
        self.began_step.store(true, Ordering::SeqCst);
        let start = self.with_guard(py, move |g| g.begin_step(&name, &provider_key))?;
        Ok(match start {
            StepStart::Dispatch { provider_key } => ("dispatch", Some(provider_key)),
            StepStart::AlreadyDone { provider_ref } => ("done", provider_ref),
        })
    }

    /// Records that step `name` is done, with the provider's reference (blocking).
    #[pyo3(signature = (name, provider_ref = None))]
    fn complete_step(
        &self,
        py: Python<'_>,
        name: String,
        provider_ref: Option<String>,
    ) -> PyResult<()> {
        self.with_guard(py, move |g| g.complete_step(&name, provider_ref))
    }

    /// Declares that this attempt dispatched nothing downstream, so a "retry
    /// later" answer or a 5xx on an External route releases the record instead of
    /// making it unknown. Call it only when that is certain.
    fn nothing_dispatched(&self) {
        self.nothing_dispatched.store(true, Ordering::SeqCst);
    }

    /// Declares that the request is being handed to a system whose transaction
    /// this process cannot see: an attempt that then ends without an answer is
    /// unknown whatever the route's effect.
    fn sent_downstream(&self) {
        self.sent_downstream.store(true, Ordering::SeqCst);
    }

    /// The created resource (or provider reference), kept after the response body
    /// is pruned so that a late retry still learns what was done.
    fn set_resource_ref(&self, reference: String) {
        *lock(&self.resource_ref) = Some(reference);
    }

    /// Overrides how the response is recorded: `"store"`, `"release"` or `"unknown"`.
    fn record_as(&self, disposition: &str) -> PyResult<()> {
        *lock(&self.disposition) = Some(self::disposition(disposition)?);
        Ok(())
    }

    /// Renews the lease (blocking). `True` when renewed, `False` when the store
    /// refused (taken over, recorded, gone: stop renewing); a failing store
    /// raises `StoreError` (try again sooner).
    fn renew(&self, py: Python<'_>) -> PyResult<bool> {
        let renewer = match lock(&self.guard).as_ref() {
            Some(guard) => guard.renewer(),
            None => return Ok(false),
        };
        match py.detach(move || renewer.renew()) {
            Ok(_) => Ok(true),
            Err(WorkerError::Storage(e)) => Err(errors::store_error(py, "store-unavailable", e)),
            Err(_) => Ok(false),
        }
    }

    /// Records the handler's response (blocking; the GIL is released) before it is
    /// sent: stored, released or made unknown per the route's policy and what the
    /// handler declared. Returns `None` when the middleware may send the handler's
    /// response, else the [`Answer`] to send instead (409 `outcome-uncertain` with
    /// `code: outcome-not-recorded`: nothing is acknowledged that is not durable).
    fn finish(
        &self,
        py: Python<'_>,
        status: u16,
        headers: Vec<(Vec<u8>, Vec<u8>)>,
        body: Vec<u8>,
    ) -> PyResult<Option<Py<Answer>>> {
        let stored = StoredResponse {
            status,
            headers: headers
                .into_iter()
                .filter_map(|(name, value)| {
                    let name = String::from_utf8(name).ok()?.to_ascii_lowercase();
                    self.config
                        .replayed_headers
                        .allows(&name)
                        .then_some((name, value))
                })
                .collect(),
            // Over the bound: completed without its body, so a retry gets 410 with
            // the resource reference; the client still gets the whole response.
            body: (body.len() <= self.config.max_stored_response_bytes).then_some(body),
            resource_ref: lock(&self.resource_ref).clone(),
        };
        match py.detach(|| self.record(status, stored)) {
            Ok(()) => Ok(None),
            Err(answer) => Ok(Some(Py::new(py, answer)?)),
        }
    }

    /// Settles an attempt that ended without a response (the handler raised, or
    /// was cancelled), blocking: sent downstream → Unknown (or left to its lease
    /// when the store fails); otherwise an External record becomes Unknown and a
    /// Local one is released. The middleware then re-raises the handler's error.
    fn settle(&self, py: Python<'_>) {
        let guard = lock(&self.guard).take();
        let sent = self.sent_downstream.load(Ordering::SeqCst);
        if let Some(guard) = guard {
            py.detach(move || settle_without_answer(guard, sent));
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Execution(operation={:?}, log_ref={}, attempt={})",
            self.scope.operation(),
            self.log_ref,
            self.attempt
        )
    }
}

/// Settles an attempt that ended without a response to record: one sent
/// downstream is marked Unknown, or left to its lease when the store fails (never
/// released: the other side may commit); otherwise the guard's drop decides by
/// effect kind (External Unknown, Local released).
fn settle_without_answer(mut guard: ExecutionGuard, sent_downstream: bool) {
    if sent_downstream
        && guard
            .try_mark_unknown("no complete answer after the request was sent")
            .is_err()
    {
        guard.abandon();
    }
}

impl Drop for Execution {
    /// An execution dropped unrecorded (its request vanished) is settled as one
    /// that ended without a response.
    fn drop(&mut self) {
        if let Some(guard) = lock(&self.guard).take() {
            settle_without_answer(guard, self.sent_downstream.load(Ordering::SeqCst));
        }
    }
}
