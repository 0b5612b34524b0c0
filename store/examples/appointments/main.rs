//! The appointments reference service: an idempotent `POST /appointments` that
//! books a slot at a (simulated) calendar provider and sends a confirmation
//! through a (simulated) messaging provider, each step with its own persisted
//! provider key, so retries, crashes and reconciliation never book twice.
//!
//! ```text
//! cargo run --release -p idemkit --example appointments -- \
//!     [--db appointments.redb] [--provider-db provider.redb] [--listen 127.0.0.1:8080] \
//!     [--provider-latency-ms N] [--provider-timeout-ms N] [--crash-after-provider] [--fail-notify N]
//!     [--crash-after-note-write] [--note-write-delay-ms N] [--max-wait-s N] [--header-read-timeout-ms N]
//! ```
//!
//! A retry of a booking or reschedule that is still running may ask to wait for
//! its answer (`Prefer: wait=N`, up to `--max-wait-s`, default 10 s) instead of
//! getting 409 `request-in-progress`.
//!
//! With `--features postgres`, `--postgres URL [--pg-schema NAME]` keeps the
//! idemkit records in PostgreSQL instead of `--db`: several instances on different
//! ports then share one database, and a key claimed through one is seen by all.
//!
//! **Demo authentication**: `Authorization: Bearer <tenant>` names the tenant
//! verbatim. A real service verifies a token and takes the tenant from it.
//!
//! Routes: `POST /appointments` (Idempotency-Key required, effect External),
//! `POST /appointments/{id}/reschedule` (Idempotency-Key required, effect
//! External: moves the tenant's booking to another slot at the calendar
//! provider under a persisted provider key), `GET /appointments` (the calendar
//! provider's bookings for the tenant), `POST /appointments/{id}/notes`
//! (Idempotency-Key required, effect **Local**: the note is written in the same
//! transaction as the record's completion, so it is exactly once; see
//! `notes.rs`), `GET /appointments/{id}/notes`, `GET /health`. The OpenAPI document is `openapi.json` beside this file.

// The `idemkit` binary's log: one level variable (IDEMKIT_LOG) for both.
#[path = "../../src/bin/idemkit/log.rs"]
mod log;
mod mcp;
mod notes;
mod providers;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, Response, StatusCode, header};
use axum::routing::{get, post};
use clap::Parser;
use idemkit::core::http::Refusal;
use idemkit::core::machine::{Disposition, Policy, StepStart};
use idemkit::core::record::{EffectKind, StoredResponse};
use idemkit::http::{Execution, IdempotencyLayer, RouteConfig, refusal_response};
use idemkit::store::{ExecutionGuard, ListedRecord, Store};
use providers::{Booking, Crash, Message, ProviderError, Providers, Reschedule};

/// The operation name of `POST /appointments` (part of every record's scope).
const CREATE: &str = "appointments.create";
/// The operation name of `POST /appointments/{id}/reschedule`.
const RESCHEDULE: &str = "appointments.reschedule";

#[derive(Parser, Debug)]
#[command(about = "idemkit appointments reference service")]
struct Args {
    /// The idemkit store.
    #[arg(long, default_value = "appointments.redb")]
    db: PathBuf,
    /// Keep the idemkit records in PostgreSQL (`postgres://user@host:port/db`)
    /// instead of --db, shared by every instance pointed at it (feature `postgres`).
    #[arg(long, value_name = "URL", conflicts_with = "db")]
    postgres: Option<String>,
    /// With --postgres: the PostgreSQL schema for idemkit's tables.
    #[arg(long, value_name = "NAME", requires = "postgres")]
    pg_schema: Option<String>,
    /// The simulated providers' own database.
    #[arg(long, default_value = "provider.redb")]
    provider_db: PathBuf,
    /// Where to listen (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Also serve the booking as MCP tools at http://ADDR/mcp (see mcp.rs).
    #[arg(long, value_name = "ADDR")]
    mcp_listen: Option<SocketAddr>,
    /// Delay before each calendar booking, in milliseconds.
    #[arg(long, default_value_t = 0)]
    provider_latency_ms: u64,
    /// How long the service waits for the calendar provider. A booking that takes
    /// longer may still happen (the call is not withdrawn), so the outcome is
    /// recorded as unknown: retries get 409 `outcome-uncertain` until the
    /// reconciler asks the provider and finishes the record.
    #[arg(long, value_name = "MS")]
    provider_timeout_ms: Option<u64>,
    /// Abort the process once, right after the calendar provider accepted a
    /// booking and before the outcome is recorded.
    #[arg(long)]
    crash_after_provider: bool,
    /// Abort the process once, after a note is written inside its transaction
    /// (with the record's completion on redb) and before that transaction
    /// commits: nothing of the attempt is kept.
    #[arg(long)]
    crash_after_note_write: bool,
    /// Hold each note's transaction open this long after the note is written,
    /// before it commits (widens the window crash tests kill the process in).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    note_write_delay_ms: u64,
    /// The messaging step fails for the first N attempts.
    #[arg(long, default_value_t = 0)]
    fail_notify: u64,
    /// The execution lease, in milliseconds (renewed while a request runs).
    #[arg(long, default_value_t = 3_000)]
    lease_ms: u64,
    /// How often unresolved records are reconciled, in milliseconds.
    #[arg(long, default_value_t = 1_000)]
    reconcile_every_ms: u64,
    /// The longest a retry of a running booking or reschedule may wait for
    /// its answer when it asks to (`Prefer: wait=N`), in seconds; 0: never.
    #[arg(long, default_value_t = 10)]
    max_wait_s: u64,
    /// How long a client may take to send a request's head, in milliseconds:
    /// a head not complete by then (or an idle keep-alive connection) is closed.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_HEADER_READ_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..))]
    header_read_timeout_ms: u64,
}

/// The library's request-head deadline (whole seconds), as the flag's default.
const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 =
    idemkit::http::DEFAULT_HEADER_READ_TIMEOUT.as_secs() * 1000;

struct App {
    store: Store,
    providers: Providers,
    policy: Policy,
    latency: Duration,
    provider_timeout: Option<Duration>,
    crash_after_provider: bool,
    crash_after_note_write: bool,
    note_write_delay: Duration,
}

/// The body of `POST /appointments`. Unknown members are refused (422), as the
/// OpenAPI document says: the body is exactly what is booked.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateAppointment {
    customer_id: String,
    slot_id: String,
}

/// The body of `POST /appointments/{id}/reschedule` (unknown members refused).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RescheduleAppointment {
    slot_id: String,
}

/// 422 `invalid-appointment`: the body is not what the route books.
fn invalid_appointment(detail: &str) -> Response<Body> {
    problem(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-appointment",
        "The appointment request is invalid",
        detail,
    )
}

/// 404 `appointment-not-found`, the same whether the id does not exist or
/// belongs to another tenant (which must learn nothing about it).
fn appointment_not_found() -> Response<Body> {
    problem(
        StatusCode::NOT_FOUND,
        "appointment-not-found",
        "No such appointment",
        "This tenant has no appointment with that id.",
    )
}

/// `Authorization: Bearer <tenant>` (demo authentication: the token *is* the tenant).
fn bearer_tenant(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let tenant = value.strip_prefix("Bearer ")?.trim();
    (!tenant.is_empty() && tenant.bytes().all(|b| b.is_ascii_graphic())).then(|| tenant.to_owned())
}

fn json_response(status: StatusCode, headers: &[(&str, String)], body: Vec<u8>) -> Response<Body> {
    let mut builder = Response::builder().status(status);
    for (name, value) in headers {
        builder = builder.header(*name, value.as_str());
    }
    builder
        .body(Body::from(body))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

fn problem(status: StatusCode, name: &str, title: &str, detail: &str) -> Response<Body> {
    let body = serde_json::json!({
        "type": format!("https://idemkit.dev/problems/{name}"),
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    });
    json_response(
        status,
        &[("content-type", "application/problem+json".to_owned())],
        body.to_string().into_bytes(),
    )
}

/// The 201 for one appointment. The handler and the reconciler both build it
/// here, so a replay is the same bytes whichever of them completed the record.
fn appointment(booking: &Booking, message: &Message) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let body = serde_json::json!({
        "id": booking.id,
        "customer_id": booking.customer_id,
        "slot_id": booking.slot_id,
        "status": "confirmed",
        "confirmation_id": message.id,
    });
    (
        201,
        vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            (
                "location".to_owned(),
                format!("/appointments/{}", booking.id),
            ),
        ],
        body.to_string().into_bytes(),
    )
}

fn proposed_key(step: &str) -> String {
    let mut bytes = [0u8; 16];
    // A key that failed to be random would still be persisted before use and
    // reused on every retry; uniqueness across operations is what suffers.
    let _ = getrandom::fill(&mut bytes);
    format!("{step}-{}", idemkit_core::hex::Lower(&bytes))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ProviderError> + Send + 'static,
) -> Result<T, ProviderError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ProviderError::Storage(e.to_string()))?
}

fn bad_gateway(what: &str, e: &dyn std::fmt::Display) -> Response<Body> {
    problem(
        StatusCode::BAD_GATEWAY,
        "provider-error",
        "A downstream provider failed",
        &format!("{what}: {e}"),
    )
}

/// How a step's provider call is awaited.
#[derive(Clone, Copy)]
enum Wait {
    /// To its end, in the request's own task (the messaging provider).
    Done,
    /// The calendar provider: after `--provider-latency-ms`, in a task of its
    /// own, for at most `--provider-timeout-ms`; past that the route answers 504
    /// with `timeout_detail`.
    Calendar { timeout_detail: &'static str },
}

/// One step of a route, as [`run_step`] drives it.
struct StepSpec {
    /// The step's name in the record (and the prefix of its proposed provider key).
    name: &'static str,
    /// The provider, as the 502s name it.
    provider: &'static str,
    /// The provider's effect, as the 502 for a missing one and the crash log name it.
    effect: &'static str,
    wait: Wait,
    /// Whether `--crash-after-provider` aborts after this step's provider call.
    crash_switch: bool,
    /// The answer to a provider error other than 502 `provider-error`, if any.
    refusal: fn(&Execution, &ProviderError) -> Option<Response<Body>>,
}

/// What a provider's step did, named by the id that is the step's provider ref.
trait Effect: Send + 'static {
    fn id(&self) -> &str;
}

impl Effect for Booking {
    fn id(&self) -> &str {
        &self.id
    }
}

impl Effect for Message {
    fn id(&self) -> &str {
        &self.id
    }
}

impl Effect for Reschedule {
    fn id(&self) -> &str {
        &self.id
    }
}

/// Runs one step: persists its provider key (`begin_step`), calls the provider
/// with the persisted key (`call`) and records the effect's id (`complete_step`);
/// a step an earlier attempt finished is not called again, its effect is looked
/// up by its provider ref (`lookup`). `Err` is the route's answer.
async fn run_step<T, C, L>(
    app: &Arc<App>,
    exec: &Execution,
    step: &StepSpec,
    call: C,
    lookup: L,
) -> Result<T, Response<Body>>
where
    T: Effect,
    C: FnOnce(&Providers, &str) -> Result<T, ProviderError> + Send + 'static,
    L: FnOnce(&Providers, &str) -> Result<Option<T>, ProviderError> + Send + 'static,
{
    let recording =
        |e: &dyn std::fmt::Display| bad_gateway(&format!("recording step {}", step.name), e);
    let provider_key = match exec.begin_step(step.name, &proposed_key(step.name)).await {
        Ok(StepStart::Dispatch { provider_key }) => provider_key,
        Ok(StepStart::AlreadyDone { provider_ref }) => {
            let a = Arc::clone(app);
            let id = provider_ref.unwrap_or_default();
            return match blocking(move || lookup(&a.providers, &id)).await {
                Ok(Some(effect)) => Ok(effect),
                Ok(None) => Err(bad_gateway(
                    step.provider,
                    &format!("{} missing", step.effect),
                )),
                Err(e) => Err(bad_gateway(step.provider, &e)),
            };
        }
        Err(e) => return Err(recording(&e)),
    };
    let a = Arc::clone(app);
    let answered = match step.wait {
        Wait::Done => blocking(move || call(&a.providers, &provider_key)).await,
        Wait::Calendar { timeout_detail } => {
            // A task of its own, like a request already on the wire: giving up
            // waiting for it does not withdraw it.
            let task = tokio::spawn(async move {
                tokio::time::sleep(a.latency).await;
                blocking(move || call(&a.providers, &provider_key)).await
            });
            let waited = match app.provider_timeout {
                Some(limit) => tokio::time::timeout(limit, task).await,
                None => Ok(task.await),
            };
            match waited {
                Ok(Ok(answered)) => answered,
                Ok(Err(e)) => return Err(bad_gateway(step.provider, &e)),
                Err(_) => {
                    // The effect may or may not exist: never guess.
                    exec.record_as(Disposition::Unknown);
                    return Err(problem(
                        StatusCode::GATEWAY_TIMEOUT,
                        "provider-timeout",
                        "The calendar provider did not answer in time",
                        timeout_detail,
                    ));
                }
            }
        }
    };
    let effect = match answered {
        Ok(effect) => effect,
        Err(e) => {
            return Err((step.refusal)(exec, &e).unwrap_or_else(|| bad_gateway(step.provider, &e)));
        }
    };
    if step.crash_switch && app.crash_after_provider {
        let a = Arc::clone(app);
        if matches!(
            blocking(move || a.providers.take_crash(Crash::AfterProvider)).await,
            Ok(true)
        ) {
            eprintln!(
                "appointments: --crash-after-provider: aborting after {} {}",
                step.effect,
                effect.id()
            );
            std::process::abort();
        }
    }
    if let Err(e) = exec
        .complete_step(step.name, Some(effect.id().to_owned()))
        .await
    {
        return Err(recording(&e));
    }
    Ok(effect)
}

/// The refusal of step `notify`: the messaging provider is down.
fn notification_failed(exec: &Execution, e: &ProviderError) -> Option<Response<Body>> {
    if !matches!(e, ProviderError::Unavailable) {
        return None;
    }
    // The booking is recorded as done: releasing lets the retry
    // resume at `notify` with the same key, never book again.
    exec.record_as(Disposition::Release);
    let mut response = problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "notification-failed",
        "The confirmation could not be sent yet",
        "The slot is booked. Retry with the same Idempotency-Key.",
    );
    response.headers_mut().insert(
        header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("1"),
    );
    Some(response)
}

async fn create_appointment(
    State(app): State<Arc<App>>,
    Extension(exec): Extension<Execution>,
    body: axum::body::Bytes,
) -> Response<Body> {
    let Ok(request) = serde_json::from_slice::<CreateAppointment>(&body) else {
        return invalid_appointment(
            "Send a JSON object with exactly the non-empty string members customer_id and slot_id.",
        );
    };
    if request.customer_id.is_empty() || request.slot_id.is_empty() {
        // Refused before any step: nothing reaches the calendar.
        return invalid_appointment("customer_id and slot_id must not be empty.");
    }
    let tenant = exec.tenant().to_owned();

    // Step `book`: the provider key is durable before the provider sees it.
    let book = StepSpec {
        name: "book",
        provider: "calendar",
        effect: "booking",
        wait: Wait::Calendar {
            timeout_detail: "The booking may or may not have been made. Retrying with the \
                             same Idempotency-Key reports the outcome once it is known; it \
                             never books a second time.",
        },
        crash_switch: true,
        refusal: |_, _| None,
    };
    let (c, s) = (request.customer_id, request.slot_id);
    let booking = match run_step(
        &app,
        &exec,
        &book,
        move |p, key| p.book(key, &tenant, &c, &s),
        |p, id| p.booking(id),
    )
    .await
    {
        Ok(booking) => booking,
        Err(response) => return response,
    };
    exec.set_resource_ref(booking.id.clone());

    // Step `notify`, with its own persisted key.
    let notify = StepSpec {
        name: "notify",
        provider: "messaging",
        effect: "message",
        wait: Wait::Done,
        crash_switch: false,
        refusal: notification_failed,
    };
    let b = booking.clone();
    let message = match run_step(
        &app,
        &exec,
        &notify,
        move |p, key| p.send_confirmation(key, &b),
        |p, id| p.message(id),
    )
    .await
    {
        Ok(message) => message,
        Err(response) => return response,
    };
    tracing::info!(parent: exec.span(), booking = %booking.id, "appointment confirmed");
    let (status, headers, body) = appointment(&booking, &message);
    let headers: Vec<(&str, String)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.clone()))
        .collect();
    json_response(
        StatusCode::from_u16(status).unwrap_or(StatusCode::CREATED),
        &headers,
        body,
    )
}

/// The 200 for one reschedule, built from what the calendar recorded for it, so
/// the handler and the reconciler answer the same bytes.
fn rescheduled(booking: &Booking, done: &Reschedule) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let body = serde_json::json!({
        "id": booking.id,
        "customer_id": booking.customer_id,
        "slot_id": done.to_slot_id,
        "previous_slot_id": done.from_slot_id,
        "status": "confirmed",
        "reschedule_id": done.id,
    });
    (
        200,
        vec![("content-type".to_owned(), "application/json".to_owned())],
        body.to_string().into_bytes(),
    )
}

async fn reschedule_appointment(
    State(app): State<Arc<App>>,
    Extension(exec): Extension<Execution>,
    id: Result<Path<String>, PathRejection>,
    body: axum::body::Bytes,
) -> Response<Body> {
    let Ok(Path(id)) = id else {
        return appointment_not_found();
    };
    let Ok(request) = serde_json::from_slice::<RescheduleAppointment>(&body) else {
        return invalid_appointment(
            "Send a JSON object with exactly the non-empty string member slot_id.",
        );
    };
    if request.slot_id.is_empty() {
        return invalid_appointment("slot_id must not be empty.");
    }
    let tenant = exec.tenant().to_owned();

    // Only the tenant's own booking: another tenant's id is answered exactly
    // like an unknown one, before any step is begun.
    let booking = {
        let (a, id) = (Arc::clone(&app), id.clone());
        match blocking(move || a.providers.booking(&id)).await {
            Ok(Some(b)) if b.tenant == tenant => b,
            Ok(_) => return appointment_not_found(),
            Err(e) => return bad_gateway("calendar", &e),
        }
    };

    // Step `reschedule`: the provider key is durable before the calendar sees it.
    let step = StepSpec {
        name: "reschedule",
        provider: "calendar",
        effect: "reschedule",
        wait: Wait::Calendar {
            timeout_detail: "The appointment may or may not have been moved. Retrying with \
                             the same Idempotency-Key reports the outcome once it is known; \
                             it never reschedules a second time.",
        },
        crash_switch: false,
        // Gone between the check and the call: the calendar did nothing.
        refusal: |_, e| matches!(e, ProviderError::NotFound).then(appointment_not_found),
    };
    let (b, slot) = (booking.id.clone(), request.slot_id);
    let done = match run_step(
        &app,
        &exec,
        &step,
        move |p, key| p.reschedule(key, &tenant, &b, &slot),
        |p, id| p.reschedule_by_id(id),
    )
    .await
    {
        Ok(done) => done,
        Err(response) => return response,
    };
    exec.set_resource_ref(booking.id.clone());
    tracing::info!(parent: exec.span(), booking = %booking.id, reschedule = %done.id, "appointment rescheduled");
    let (status, headers, body) = rescheduled(&booking, &done);
    let headers: Vec<(&str, String)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.clone()))
        .collect();
    json_response(
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
        &headers,
        body,
    )
}

async fn list_appointments(State(app): State<Arc<App>>, headers: HeaderMap) -> Response<Body> {
    let Some(tenant) = bearer_tenant(&headers) else {
        return refusal_response(&Refusal::Unauthenticated);
    };
    let a = Arc::clone(&app);
    match blocking(move || a.providers.bookings(&tenant)).await {
        Ok(bookings) => {
            let body = serde_json::json!({ "appointments": bookings
                .iter()
                .map(|b| serde_json::json!({"id": b.id, "customer_id": b.customer_id, "slot_id": b.slot_id, "reschedules": b.reschedules}))
                .collect::<Vec<_>>() });
            json_response(
                StatusCode::OK,
                &[("content-type", "application/json".to_owned())],
                body.to_string().into_bytes(),
            )
        }
        Err(e) => bad_gateway("calendar", &e),
    }
}

/// Any path that is not routed: a problem like every other error.
async fn not_found() -> Response<Body> {
    problem(
        StatusCode::NOT_FOUND,
        "not-found",
        "No such resource",
        "See openapi.json for the routes of this service.",
    )
}

/// 200 while the store can write, 503 with the reason while it cannot (a full
/// disk, say), so a load balancer stops sending requests that would all be 503.
async fn health(State(app): State<Arc<App>>) -> Response<Body> {
    idemkit::http::health_response(app.store.clone(), None).await
}

/// What reconciling one record did.
#[derive(Debug)]
enum Reconciled {
    Completed,
    Released,
    Skipped,
}

/// Recovers the unresolved record `listed` and asks the provider what its step
/// `name` did: by the provider ref the handler recorded, else by the step's
/// persisted provider key (then recorded as the step's ref). `None`: the step
/// was never begun or the provider never saw it, so the record is released and
/// the client's retry dispatches with the same persisted key.
fn recover_step<T>(
    app: &App,
    listed: &ListedRecord,
    name: &str,
    by_id: fn(&Providers, &str) -> Result<Option<T>, ProviderError>,
    by_key: fn(&Providers, &str) -> Result<Option<T>, ProviderError>,
) -> Result<Option<(ExecutionGuard, T)>, String>
where
    T: Effect,
{
    let mut guard = app
        .store
        .recover(&listed.scope, &listed.key, "reconciler", &app.policy)
        .map_err(|e| e.to_string())?;
    let step = guard.steps().iter().find(|s| s.name == name).cloned();
    let effect = match &step {
        None => None,
        Some(step) => match &step.provider_ref {
            Some(id) => by_id(&app.providers, id).map_err(|e| e.to_string())?,
            None => by_key(&app.providers, &step.provider_key).map_err(|e| e.to_string())?,
        },
    };
    let Some(effect) = effect else {
        guard.release().map_err(|e| e.to_string())?;
        return Ok(None);
    };
    if step.is_some_and(|s| s.provider_ref.is_none()) {
        guard
            .complete_step(name, Some(effect.id().to_owned()))
            .map_err(|e| e.to_string())?;
    }
    Ok(Some((guard, effect)))
}

/// Completes a reconciled record with `(status, headers, body)`, the response
/// the handler builds for the same effects, so a replay is the same bytes.
fn finish(
    guard: ExecutionGuard,
    (status, headers, body): (u16, Vec<(String, String)>, Vec<u8>),
    booking_id: &str,
) -> Result<Reconciled, String> {
    guard
        .complete(StoredResponse {
            status,
            headers: headers
                .into_iter()
                .map(|(n, v)| (n, v.into_bytes()))
                .collect(),
            body: Some(body),
            resource_ref: Some(booking_id.to_owned()),
        })
        .map_err(|e| e.to_string())?;
    Ok(Reconciled::Completed)
}

/// Re-drives one unresolved `appointments.create` record with its persisted
/// provider keys. The calendar is asked for the booking under step `book`'s key:
/// if it has one, the booking happened and the record is finished (sending the
/// confirmation with `notify`'s persisted key if needed); if not, the provider
/// never saw the request and the record is released, so the client's retry
/// dispatches with the same persisted key.
fn reconcile_one(app: &App, listed: &ListedRecord) -> Result<Reconciled, String> {
    if listed.scope.operation() == RESCHEDULE {
        return reconcile_reschedule(app, listed);
    }
    if listed.scope.operation() != CREATE {
        return Ok(Reconciled::Skipped);
    }
    let Some((mut guard, booking)) = recover_step(
        app,
        listed,
        "book",
        Providers::booking,
        Providers::booking_by_key,
    )?
    else {
        return Ok(Reconciled::Released);
    };
    let message = match guard
        .begin_step("notify", &proposed_key("notify"))
        .map_err(|e| e.to_string())?
    {
        StepStart::Dispatch { provider_key } => {
            match app.providers.send_confirmation(&provider_key, &booking) {
                Ok(m) => {
                    guard
                        .complete_step("notify", Some(m.id.clone()))
                        .map_err(|e| e.to_string())?;
                    m
                }
                Err(ProviderError::Unavailable) => {
                    guard.release().map_err(|e| e.to_string())?;
                    return Ok(Reconciled::Released);
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        StepStart::AlreadyDone { provider_ref } => app
            .providers
            .message(provider_ref.as_deref().unwrap_or_default())
            .map_err(|e| e.to_string())?
            .ok_or("confirmation missing at the messaging provider")?,
    };
    finish(guard, appointment(&booking, &message), &booking.id)
}

/// Re-drives one unresolved `appointments.reschedule` record: the calendar is
/// asked for the reschedule under step `reschedule`'s persisted key. Found: the
/// record is completed with the 200 the handler would have answered. Not found
/// (or no step begun): the calendar never moved anything, so the record is
/// released and the client's retry dispatches with the same persisted key.
fn reconcile_reschedule(app: &App, listed: &ListedRecord) -> Result<Reconciled, String> {
    let Some((guard, done)) = recover_step(
        app,
        listed,
        "reschedule",
        Providers::reschedule_by_id,
        Providers::reschedule_by_key,
    )?
    else {
        return Ok(Reconciled::Released);
    };
    let booking = app
        .providers
        .booking(&done.booking_id)
        .map_err(|e| e.to_string())?
        .ok_or("rescheduled booking missing at the calendar provider")?;
    finish(guard, rescheduled(&booking, &done), &booking.id)
}

fn reconcile_all(app: &App) {
    let unresolved = match app.store.list_unresolved() {
        Ok(list) => list,
        Err(e) => {
            eprintln!("appointments: reconcile: listing unresolved records failed: {e}");
            return;
        }
    };
    for listed in &unresolved {
        match reconcile_one(app, listed) {
            Ok(Reconciled::Skipped) => {}
            Ok(outcome) => {
                eprintln!("appointments: reconciled {}: {outcome:?}", listed.log_ref());
            }
            Err(e) => eprintln!("appointments: reconcile {} failed: {e}", listed.log_ref()),
        }
    }
}

fn main() -> std::process::ExitCode {
    // A file-size limit (RLIMIT_FSIZE) must reach the store as the I/O error it
    // is (EFBIG), which the store recovers from once the limit is raised, and
    // not end the process by SIGXFSZ's default action.
    #[cfg(unix)]
    let _ = signal_hook::flag::register(
        signal_hook::consts::SIGXFSZ,
        Arc::new(std::sync::atomic::AtomicBool::new(false)),
    );
    let args = Args::parse();
    // The library's warnings, and with IDEMKIT_LOG=info each booking's line
    // inside its request's span (key, log reference), on stderr.
    if let Err(e) = log::init() {
        eprintln!("appointments: {e}");
        return std::process::ExitCode::FAILURE;
    }
    match run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("appointments: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The store: PostgreSQL when --postgres is given, else the --db file.
fn open_store(args: &Args) -> Result<Store, String> {
    match &args.postgres {
        None => idemkit::open(&args.db).map_err(|e| format!("{}: {e}", args.db.display())),
        #[cfg(feature = "postgres")]
        Some(url) => {
            let options = idemkit::adapters::postgres::PgOptions {
                schema: args.pg_schema.clone(),
                ..Default::default()
            };
            idemkit::adapters::postgres::PostgresAdapter::connect_with(url, options)
                .map(Store::from)
                .map_err(|e| format!("--postgres: {e}"))
        }
        #[cfg(not(feature = "postgres"))]
        Some(_) => {
            let _ = &args.pg_schema;
            Err("--postgres needs the example built with --features postgres".into())
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    let store = open_store(&args)?;
    let providers = Providers::open(&args.provider_db, args.fail_notify)
        .map_err(|e| format!("{}: {e}", args.provider_db.display()))?;
    let policy = Policy::default()
        .with_effect(EffectKind::External)
        .with_lease(Duration::from_millis(args.lease_ms.max(100)));
    let app = Arc::new(App {
        store: store.clone(),
        providers,
        policy,
        latency: Duration::from_millis(args.provider_latency_ms),
        provider_timeout: args.provider_timeout_ms.map(Duration::from_millis),
        crash_after_provider: args.crash_after_provider,
        crash_after_note_write: args.crash_after_note_write,
        note_write_delay: Duration::from_millis(args.note_write_delay_ms),
    });
    notes::prepare(&store)?;
    // On the redb file, which this process holds alone, the requests a previous
    // run left unfinished were settled when the store was opened (bookings
    // Unknown, notes released): reconciliation starts at once, in the
    // background, while the service already answers. On PostgreSQL their
    // leases may belong to live instances and expire as usual.
    for orphan in store.orphans_settled_at_open() {
        eprintln!(
            "appointments: {} ({}) was left unfinished by a previous run; now {:?}",
            orphan.log_ref, orphan.operation, orphan.became
        );
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(serve(app, args))
}

async fn serve(app: Arc<App>, args: Args) -> Result<(), String> {
    let max_wait = Duration::from_secs(args.max_wait_s);
    let route = RouteConfig::new(CREATE, EffectKind::External)
        .policy(app.policy)
        .principal(|parts| bearer_tenant(&parts.headers))
        .body_limit(16 * 1024)
        .max_wait(max_wait);
    let reschedule = RouteConfig::new(RESCHEDULE, EffectKind::External)
        .policy(app.policy)
        .principal(|parts| bearer_tenant(&parts.headers))
        .body_limit(16 * 1024)
        .max_wait(max_wait);
    let note = RouteConfig::new(notes::NOTE, EffectKind::Local)
        .policy(app.policy.with_effect(EffectKind::Local))
        .principal(|parts| bearer_tenant(&parts.headers))
        .body_limit(16 * 1024);
    let router = Router::new()
        .route(
            "/appointments/{id}/notes",
            post(notes::add_note)
                .route_layer(IdempotencyLayer::new(app.store.clone(), note))
                .get(notes::list_notes),
        )
        .route(
            "/appointments/{id}/reschedule",
            post(reschedule_appointment)
                .route_layer(IdempotencyLayer::new(app.store.clone(), reschedule)),
        )
        .route(
            "/appointments",
            post(create_appointment)
                .route_layer(IdempotencyLayer::new(app.store.clone(), route))
                .get(list_appointments),
        )
        .route("/health", get(health))
        .fallback(not_found)
        .with_state(Arc::clone(&app));

    let every = Duration::from_millis(args.reconcile_every_ms.max(50));
    let reconciler = Arc::clone(&app);
    tokio::spawn(async move {
        loop {
            let app = Arc::clone(&reconciler);
            let _ = tokio::task::spawn_blocking(move || reconcile_all(&app)).await;
            tokio::time::sleep(every).await;
        }
    });

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("listen {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("appointments: listening on http://{addr}");
    let header_read_timeout = Duration::from_millis(args.header_read_timeout_ms);
    if let Some(mcp) = args.mcp_listen {
        mcp::spawn(mcp, header_read_timeout, router.clone()).await?;
    }
    // Serves until the process ends.
    idemkit::http::serve_router(
        listener,
        header_read_timeout,
        router,
        std::future::pending(),
    )
    .await;
    Ok(())
}
