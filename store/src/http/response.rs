//! Rendering core's answers and stored responses as `http` responses.

use ::http::{HeaderName, HeaderValue, Response, StatusCode};
use axum::body::Body;
use idemkit_core::http::{Answer, Refusal, Reply, reply};
use idemkit_core::record::StoredResponse;

/// The answer for a refusal, built by the core so every binding answers the same bytes.
#[must_use]
pub fn refusal_response(refusal: &Refusal) -> Response<Body> {
    reply_response(reply(refusal.clone().into()))
}

/// Renders what core's [`reply`] decided. [`Reply::Execute`] is never answered
/// here (the pipeline runs the handler instead); it renders as 500.
pub(super) fn reply_response(reply: Reply) -> Response<Body> {
    match reply {
        Reply::Problem(answer) => answer_response(answer),
        Reply::Replay {
            status,
            headers,
            body,
        } => response(status, headers, body),
        Reply::Execute => response(500, Vec::new(), Vec::new()),
    }
}

fn answer_response(answer: Answer) -> Response<Body> {
    let headers = answer
        .headers
        .into_iter()
        .map(|(name, value)| (name, value.into_bytes()))
        .collect();
    response(answer.status, headers, answer.body)
}

/// The response `stored`: its status, stored headers and body.
pub(super) fn stored_response(stored: StoredResponse) -> Response<Body> {
    response(
        stored.status,
        stored.headers,
        stored.body.unwrap_or_default(),
    )
}

fn response(status: u16, headers: Vec<(String, Vec<u8>)>, body: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(&value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}
