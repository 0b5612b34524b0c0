//! One execution: the handler runs with its [`Execution`], and its response is
//! recorded (or streamed, for a long body) before the client gets it.

use std::sync::Arc;

use ::http::request::Parts;
use ::http::{Request, Response};
use axum::body::Body;
use bytes::Bytes;
use idemkit_core::Scope;
use idemkit_core::http::Refusal;
use idemkit_core::machine::{Disposition, classify_attempt};
use idemkit_core::record::StoredResponse;

use super::catch_unwind::CatchUnwind;
use super::recording::{record, settle_unrecorded};
use super::renewal::spawn_renewal;
use super::response::{refusal_response, stored_response};
use super::response_body::{self, Start};
use super::{BoxError, Execution, RouteConfig, executions};
use crate::store::ExecutionGuard;

/// Runs the handler under `guard` (lease renewed meanwhile), then records its
/// response per core's [`classify_attempt`] before it is returned. A handler
/// that completed its record itself ([`Execution::complete_with`]) is answered
/// its stored response; one that panics, fails or (with
/// [`OnDisconnect::Cancel`](super::OnDisconnect::Cancel)) is dropped is settled
/// without an answer: an External record Unknown, a Local one released. The
/// caller instruments it with the `idempotent` span (operation, log reference,
/// attempt, fencing token; never the key or the body).
#[allow(
    clippy::too_many_arguments,
    reason = "the request's parts, taken apart once by handle()"
)]
pub(super) async fn execute<S, RB>(
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
