//! The request pipeline: who asks, with which key and body, and what the claim
//! says; a claim that executes goes on to [`execute`](super::execute).

use std::sync::Arc;
use std::time::Duration;

use ::http::{HeaderValue, Request, Response};
use axum::body::Body;
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use idemkit_core::http::prefer::{PREFER, PREFERENCE_APPLIED, prefer_wait_in};
use idemkit_core::http::{IDEMPOTENCY_KEY, Outcome, Refusal, reply};
use idemkit_core::machine::ClaimOutcome;
use idemkit_core::{IdempotencyKey, KeyError, LogRef, RequestLine, Scope};
use tracing::Instrument;

use super::execute::execute;
use super::response::{refusal_response, reply_response};
use super::store_calls::on_store;
use super::wait::{WaitRefused, claim_waiting};
use super::{BoxError, ClaimOutcomeLabel, KeyRequirement, OnDisconnect, RouteConfig, executions};
use crate::store::{Claim, ExecutionGuard, Store};

/// A request as it arrived, with its place among the route's running executions.
pub(super) struct Incoming<B> {
    pub(super) request: Request<B>,
    pub(super) entry: Option<executions::Entry>,
    /// Resolves when the client is gone and what is left of the request runs
    /// on a task of its own ([`OnDisconnect::Finish`](super::OnDisconnect::Finish)):
    /// a wait ends then. `None`: the request's future is dropped with its client.
    pub(super) client_gone: Option<tokio::sync::oneshot::Receiver<()>>,
}

/// Answers one request: principal, key, body and fingerprint, claim, then
/// either the answer core gives for the claim or the execution.
pub(super) async fn handle<S, B, RB>(
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

    let Incoming {
        request,
        entry,
        client_gone,
    } = incoming;
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

    let wait = config.wait.wait_for(prefer_wait_in(
        parts
            .headers
            .get_all(PREFER)
            .iter()
            .map(HeaderValue::as_bytes),
    ));
    let id = scope.record_id(&key);
    let claim_once = || {
        let (claimer, scope, key, config, fingerprint) = (
            store.clone(),
            scope.clone(),
            key.clone(),
            Arc::clone(&config),
            fingerprint,
        );
        async move {
            let on = claimer.clone();
            on_store(&on, move || {
                claimer.claim(&scope, &key, fingerprint, &config.owner, &config.policy)
            })
            .await
        }
    };
    let gone = async move {
        match client_gone {
            // The sender is dropped with the request's future, never used.
            Some(receiver) => {
                let _ = receiver.await;
            }
            None => std::future::pending().await,
        }
    };
    let waited = match claim_waiting(&store, &id, wait.duration, claim_once, gone).await {
        Ok(waited) => waited,
        Err(WaitRefused::TooManyWaiters { retry_after, .. }) => {
            config.count_claim(ClaimOutcomeLabel::InFlight);
            let response = refusal_response(&Refusal::TooManyWaiters { retry_after });
            return Ok(answered_as(
                response,
                ClaimOutcomeLabel::InFlight,
                id.log_ref(),
            ));
        }
        Err(WaitRefused::ClientGone) => {
            // Nobody reads this answer; the key runs on, untouched.
            return Ok(refusal_response(&Refusal::InProgress {
                retry_after: Duration::ZERO,
            }));
        }
    };
    // An asked-for wait that held the request is named on whatever answers it.
    let applied = waited
        .held
        .then(|| wait.preference_applied())
        .flatten()
        .and_then(|v| HeaderValue::try_from(v).ok());
    let with_applied = |mut response: Response<Body>| {
        if let Some(value) = &applied {
            response
                .headers_mut()
                .insert(PREFERENCE_APPLIED, value.clone());
        }
        response
    };
    if let Some(ended) = waited.ended() {
        config.count_wait(ended);
    }
    let claim = match waited.claim {
        Some(Ok(claim)) => claim,
        None | Some(Err(_)) => {
            config.count_store_error();
            tracing::warn!(operation = %config.operation, log_ref = %id.log_ref(),
                "idempotency store unavailable; refusing without executing");
            return Ok(with_applied(refusal_response(&Refusal::StoreUnavailable {
                retry_after: config.store_retry_after,
            })));
        }
    };
    let guard = match answered(claim) {
        Claimed::Execute(guard) => {
            config.count_claim(ClaimOutcomeLabel::Execute);
            guard
        }
        Claimed::Answer(label, outcome, log_ref) => {
            config.count_claim(label);
            if label == ClaimOutcomeLabel::Replay {
                tracing::debug!(%log_ref, "replaying stored response");
            }
            let response = reply_response(reply(Outcome::Claim(outcome, log_ref)));
            return Ok(answered_as(with_applied(response), label, log_ref));
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
    let finish = config.on_disconnect == OnDisconnect::Finish;
    let unavailable = Refusal::StoreUnavailable {
        retry_after: config.store_retry_after,
    };
    let execution = execute(
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
    .instrument(span);
    let executed = if finish {
        // The execution runs on a task of its own, which the runtime may
        // hand to another worker: the handler's work spreads over the
        // workers, where run inline every connection's handler shares the
        // one worker its connection is on (at 16 connections a quarter fewer
        // fresh requests per second on two workers). Boxed first: spawning
        // copies an unboxed future at each move into the task. A claim
        // answered without executing (a replay, a refusal) stays inline.
        match tokio::spawn(Box::pin(execution)).await {
            Ok(result) => result,
            Err(e) => match e.try_into_panic() {
                // The same panic the handler raised, as if it had run inline.
                Ok(payload) => std::panic::resume_unwind(payload),
                // Cancelled only when the runtime shuts down; a guard
                // dropped with it records Unknown or Released.
                Err(_) => Ok(refusal_response(&unavailable)),
            },
        }
    } else {
        execution.await
    };
    executed
        .map(|response| answered_as(with_applied(response), ClaimOutcomeLabel::Execute, log_ref))
}

/// `response`, carrying what its claim decided ([`ClaimAnswered`]).
fn answered_as(
    mut response: Response<Body>,
    outcome: ClaimOutcomeLabel,
    log_ref: LogRef,
) -> Response<Body> {
    response
        .extensions_mut()
        .insert(super::ClaimAnswered { outcome, log_ref });
    response
}

/// A claim as the pipeline acts on it.
enum Claimed {
    /// Run the handler under this guard.
    Execute(ExecutionGuard),
    /// Answer what core maps this outcome to (counted under the label).
    Answer(ClaimOutcomeLabel, ClaimOutcome, LogRef),
}

/// The store's claim as core's outcome (what [`reply`] maps to an answer).
fn answered(claim: Claim) -> Claimed {
    let (label, outcome, log_ref) = match claim {
        Claim::Execute(guard) => return Claimed::Execute(guard),
        Claim::Replay { response, log_ref } => (
            ClaimOutcomeLabel::Replay,
            ClaimOutcome::Replay { response },
            log_ref,
        ),
        Claim::ResponseExpired {
            status,
            resource_ref,
            log_ref,
        } => (
            ClaimOutcomeLabel::ResponseExpired,
            ClaimOutcome::ResponseExpired {
                status,
                resource_ref,
            },
            log_ref,
        ),
        Claim::InFlight {
            retry_after,
            log_ref,
        } => (
            ClaimOutcomeLabel::InFlight,
            ClaimOutcome::InFlight { retry_after },
            log_ref,
        ),
        Claim::Mismatch { status, log_ref } => (
            ClaimOutcomeLabel::Mismatch,
            ClaimOutcome::Mismatch { status },
            log_ref,
        ),
        Claim::Uncertain { since, log_ref } => (
            ClaimOutcomeLabel::Uncertain,
            ClaimOutcome::Uncertain { since },
            log_ref,
        ),
    };
    Claimed::Answer(label, outcome, log_ref)
}
