//! The Streamable HTTP transport: the gateway serves the MCP endpoint at the
//! upstream's path and forwards through the proxy's forwarder. A POST to the
//! endpoint is read as JSON-RPC: a protected `tools/call` goes through
//! [`Gateway::decide`] and [`Gateway::finish`]; `initialize`, `server/discover`
//! and `tools/list` results get the capability and the hints; everything else
//! (notifications, responses to server requests, other methods, GET streams
//! with `Last-Event-ID`, DELETE, other paths) passes through unchanged, headers
//! and all. An answer may be JSON or an SSE stream: events before the response
//! stream through as they come.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::request::Parts;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use idemkit::http::{ClaimAnswered, ClaimOutcomeLabel};
use serde_json::{Value, json};

use super::call::{Decision, Gateway, Outcome, Reply};
use super::jsonrpc::{self, Era};
use super::sse::{self, ChannelBody, Stopped};
use crate::proxy::config::{DEFAULT_BODY_IDLE_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, Timeouts};
use crate::proxy::forward::{Forward, Upstream};

/// The most of an upstream answer the gateway reads to rewrite or record it.
const MAX_ANSWER_BYTES: usize = 16 << 20;

/// Names the tenant of a request from its parts.
pub(crate) type TenantFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;

/// The tool a `tools/call` named: an extension of the gateway's answer to
/// it, for the access log.
#[derive(Clone, Debug)]
pub(crate) struct CalledTool(pub(crate) String);

/// One worker's view of the gateway: the shared state, the forwarder and
/// the rule naming a request's tenant.
pub(crate) struct HttpGateway {
    pub(crate) gateway: Arc<Gateway>,
    /// The upstream's origin; requests keep their own path.
    pub(crate) upstream: Upstream,
    /// The MCP endpoint's path (the upstream URL's).
    pub(crate) endpoint: String,
    pub(crate) tenant: Box<TenantFn>,
    /// The gateway listens on a loopback address: only local names may reach
    /// it (DNS rebinding protection, as the MCP SDKs do for local servers).
    pub(crate) loopback: bool,
}

impl HttpGateway {
    fn forward(&self, timeout: Duration) -> Forward {
        Forward {
            upstream: self.upstream.clone(),
            timeouts: Timeouts {
                connect: DEFAULT_CONNECT_TIMEOUT,
                answer: timeout,
                body_idle: DEFAULT_BODY_IDLE_TIMEOUT,
            },
            forward_key: true,
            answers_as: None,
        }
    }

    /// Answers one request.
    pub(crate) async fn handle(self: Arc<Self>, request: Request<Body>) -> Response<Body> {
        let config = &self.gateway.config;
        if self.loopback && !local_names_only(request.headers()) {
            // A page on another origin whose name resolves to this machine
            // (DNS rebinding) must not reach a local server through the gateway.
            return jsonrpc_error_response(
                StatusCode::FORBIDDEN,
                -32000,
                "Host and Origin must name this machine (localhost, 127.0.0.1 or [::1])",
            );
        }
        if request.method() != Method::POST || request.uri().path() != self.endpoint {
            return self.forward(config.upstream_timeout).send(request).await;
        }
        let (parts, body) = request.into_parts();
        let bytes = match Limited::new(body, config.body_limit).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) => {
                return jsonrpc_error_response(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    -32600,
                    &format!(
                        "the message could not be read (limit {} bytes): {e}",
                        config.body_limit
                    ),
                );
            }
        };
        let Ok(message) = serde_json::from_slice::<Value>(&bytes) else {
            // The server answers a parse error in its own words.
            return self.pass(parts, bytes).await;
        };
        if let Some(batch) = message.as_array() {
            let protected = batch.iter().any(|m| {
                jsonrpc::method_of(m) == Some("tools/call")
                    && m.pointer("/params/name")
                        .and_then(Value::as_str)
                        .is_none_or(|name| self.gateway.protects(name))
            });
            if protected {
                return jsonrpc_error_response(
                    StatusCode::BAD_REQUEST,
                    -32600,
                    "a batch may not carry tools/call through the idempotency gateway: send each call on its own",
                );
            }
            return self.pass(parts, bytes).await;
        }
        let header_version = parts
            .headers
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok());
        let era = Era::of(&message, header_version);
        let Some(id) = jsonrpc::id_of(&message).cloned() else {
            return self.pass(parts, bytes).await;
        };
        match jsonrpc::method_of(&message) {
            Some("initialize") => {
                self.rewritten(parts, bytes, id, jsonrpc::advertise_in_initialize)
                    .await
            }
            Some("server/discover") => {
                self.rewritten(parts, bytes, id, jsonrpc::advertise_in_discover)
                    .await
            }
            Some("tools/list") => {
                let gateway = Arc::clone(&self.gateway);
                self.rewritten(parts, bytes, id, move |result| gateway.tools_listed(result))
                    .await
            }
            Some("tools/call") => {
                let name = message.pointer("/params/name").and_then(Value::as_str);
                if let Some(name) = name
                    && !self.gateway.knows(name)
                {
                    self.list_tools(&parts, &message, era).await;
                }
                let called = name.map(|name| CalledTool(name.to_owned()));
                let tenant = (self.tenant)(&parts);
                let (mut response, claim) =
                    match self.gateway.decide(&message, &bytes, tenant, era).await {
                        Decision::PassThrough => (self.pass(parts, bytes).await, None),
                        Decision::Answer(answer, claim) => (json_response(&answer), claim),
                        Decision::Execute(running) => {
                            let log_ref = running.log_ref();
                            let response = self.execute(parts, bytes, id, running).await;
                            let outcome = ClaimOutcomeLabel::Execute;
                            (response, Some(ClaimAnswered { outcome, log_ref }))
                        }
                    };
                let extensions = response.extensions_mut();
                if let Some(claim) = claim {
                    extensions.insert(claim);
                }
                if let Some(called) = called {
                    extensions.insert(called);
                }
                response
            }
            _ => self.pass(parts, bytes).await,
        }
    }

    /// Asks the server for its tools (with the call's headers: its session,
    /// its credentials, its protocol version), to learn which only read. A
    /// failure leaves the tools unknown, hence protected.
    async fn list_tools(&self, call: &Parts, message: &Value, era: Era) {
        let mut cursor: Option<String> = None;
        for page in 0..jsonrpc::MAX_TOOL_PAGES {
            let id = format!("idemkit-tools-list-{page}");
            let request = jsonrpc::tools_list_request(&id, message, era, cursor.as_deref());
            let mut builder = Request::builder()
                .method(Method::POST)
                .uri(call.uri.clone());
            for (name, value) in &call.headers {
                // Mcp-Method and Mcp-Name mirror the body, which is another one.
                if name != header::CONTENT_LENGTH
                    && !matches!(name.as_str(), "mcp-method" | "mcp-name")
                {
                    builder = builder.header(name, value);
                }
            }
            if era == Era::Modern {
                builder = builder.header("mcp-method", "tools/list");
            }
            let Ok(request) = builder.body(Body::from(request.to_string())) else {
                return;
            };
            let (mut head, body) = self
                .forward(self.gateway.config.upstream_timeout)
                .send(request)
                .await
                .into_parts();
            if head.status != StatusCode::OK {
                return;
            }
            let id = Value::String(id);
            let message = if is_event_stream(&head.headers) {
                let (tx, _rx) = tokio::sync::mpsc::channel(64);
                let deadline = tokio::time::Instant::now() + self.gateway.config.upstream_timeout;
                match sse::relay_until_response(body, &id, &tx, Some(deadline)).await {
                    Ok((message, _)) => message,
                    Err(_) => return,
                }
            } else {
                head.headers.remove(header::CONTENT_LENGTH);
                match Limited::new(body, MAX_ANSWER_BYTES).collect().await {
                    Ok(c) => match serde_json::from_slice::<Value>(&c.to_bytes()) {
                        Ok(message) => message,
                        Err(_) => return,
                    },
                    Err(_) => return,
                }
            };
            let Some(result) = message.get("result") else {
                return;
            };
            self.gateway.learn_tools(result);
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(next) => cursor = Some(next.to_owned()),
                None => return,
            }
        }
    }

    async fn pass(&self, parts: Parts, bytes: Bytes) -> Response<Body> {
        let timeout = self.gateway.config.upstream_timeout;
        self.forward(timeout)
            .send(Request::from_parts(parts, Body::from(bytes)))
            .await
    }

    /// Forwards a request whose result `rewrite` changes (the answer to `id`),
    /// JSON or SSE.
    async fn rewritten(
        &self,
        parts: Parts,
        bytes: Bytes,
        id: Value,
        rewrite: impl FnOnce(&mut Value) + Send + 'static,
    ) -> Response<Body> {
        let response = self.pass(parts, bytes).await;
        if response.status() != StatusCode::OK {
            return response;
        }
        let (mut head, body) = response.into_parts();
        head.headers.remove(header::CONTENT_LENGTH);
        if is_event_stream(&head.headers) {
            let (tx, rx) = tokio::sync::mpsc::channel(16);
            tokio::spawn(async move {
                match sse::relay_until_response(body, &id, &tx, None).await {
                    Ok((mut message, event_id)) => {
                        if let Some(result) = message.get_mut("result") {
                            rewrite(result);
                        }
                        let _ = tx.send(sse::event(event_id.as_deref(), &message)).await;
                    }
                    Err(Stopped::Ended | Stopped::TimedOut) => {}
                }
            });
            return Response::from_parts(head, Body::new(ChannelBody(rx)));
        }
        let Ok(collected) = Limited::new(body, MAX_ANSWER_BYTES).collect().await else {
            return jsonrpc_error_response(
                StatusCode::BAD_GATEWAY,
                -32603,
                "the server's answer could not be read",
            );
        };
        let bytes = collected.to_bytes();
        let Ok(mut message) = serde_json::from_slice::<Value>(&bytes) else {
            return Response::from_parts(head, Body::from(bytes));
        };
        if message.get("id") == Some(&id)
            && let Some(result) = message.get_mut("result")
        {
            rewrite(result);
        }
        Response::from_parts(head, Body::from(message.to_string()))
    }

    /// Forwards a claimed call and records what comes back before the client
    /// hears it.
    async fn execute(
        &self,
        parts: Parts,
        bytes: Bytes,
        id: Value,
        running: Box<super::call::Running>,
    ) -> Response<Body> {
        let call_timeout = running.call_timeout();
        let deadline = tokio::time::Instant::now() + call_timeout;
        let gateway = Arc::clone(&self.gateway);
        let response = self
            .forward(call_timeout)
            .send(Request::from_parts(parts, Body::from(bytes)))
            .await;
        let status = response.status();
        if status.is_client_error() {
            // Refused before it was read as a call (an unknown session, a bad
            // header): the tool did not run.
            let _ = gateway.finish(running, Outcome::Refused).await;
            return response;
        }
        if status.is_server_error() || status != StatusCode::OK {
            let (head, body) = response.into_parts();
            let bytes = Limited::new(body, MAX_ANSWER_BYTES)
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let outcome = match forwarder_problem(&head.headers, &bytes) {
                // The forwarder could not connect (refused, or timed out
                // connecting): nothing of the call was sent.
                Some("upstream-unavailable" | "upstream-connect-timeout") => Outcome::NotSent,
                Some(_) => Outcome::Lost,
                None if status.is_server_error() => Outcome::Failed(status.as_u16()),
                // A 1xx, 2xx other than 200, or 3xx to a call: no answer to it.
                None => Outcome::Lost,
            };
            return match gateway.finish(running, outcome).await {
                Reply::Original => Response::from_parts(head, Body::from(bytes)),
                Reply::Replace(answer) => json_response(&answer),
            };
        }
        let (mut head, body) = response.into_parts();
        head.headers.remove(header::CONTENT_LENGTH);
        if is_event_stream(&head.headers) {
            let (tx, rx) = tokio::sync::mpsc::channel(16);
            // Its own task: a client that goes away does not stop the call
            // from being recorded.
            tokio::spawn(async move {
                let found = sse::relay_until_response(body, &id, &tx, Some(deadline)).await;
                let (outcome, original) = match found {
                    Ok((message, event_id)) => {
                        let original = sse::event(event_id.as_deref(), &message);
                        (Outcome::Response(message), Some((original, event_id)))
                    }
                    Err(_) => (Outcome::Lost, None),
                };
                let event_id = original.as_ref().and_then(|(_, e)| e.clone());
                let event = match (gateway.finish(running, outcome).await, original) {
                    (Reply::Original, Some((original, _))) => original,
                    (Reply::Replace(answer), _) => sse::event(event_id.as_deref(), &answer),
                    (Reply::Original, None) => return,
                };
                let _ = tx.send(event).await;
            });
            return Response::from_parts(head, Body::new(ChannelBody(rx)));
        }
        let task = tokio::spawn(async move {
            let read =
                tokio::time::timeout_at(deadline, Limited::new(body, MAX_ANSWER_BYTES).collect())
                    .await;
            let bytes = match read {
                Ok(Ok(collected)) => collected.to_bytes(),
                _ => Bytes::new(),
            };
            let outcome = match serde_json::from_slice::<Value>(&bytes) {
                Ok(message) if message.get("id") == Some(&id) => Outcome::Response(message),
                _ => Outcome::Lost,
            };
            match gateway.finish(running, outcome).await {
                Reply::Original => Response::from_parts(head, Body::from(bytes)),
                Reply::Replace(answer) => json_response(&answer),
            }
        });
        task.await.unwrap_or_else(|_| {
            jsonrpc_error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                -32603,
                "the gateway failed while recording the call",
            )
        })
    }
}

/// The type of a problem the proxy's forwarder answered itself (the
/// upstream could not be reached, or did not answer), if `bytes` is one.
fn forwarder_problem<'a>(headers: &http::HeaderMap, bytes: &'a [u8]) -> Option<&'a str> {
    if headers.get(header::CONTENT_TYPE)? != "application/problem+json" {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let start = text.find("https://idemkit.dev/problems/")? + "https://idemkit.dev/problems/".len();
    let rest = text.get(start..)?;
    rest.get(..rest.find('"')?)
}

/// Whether `Host` and `Origin` (when present) name the local machine.
fn local_names_only(headers: &http::HeaderMap) -> bool {
    let local = |host: &str| {
        let name = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => host.split(':').next().unwrap_or_default(),
        };
        name.eq_ignore_ascii_case("localhost") || name == "127.0.0.1" || name == "::1"
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let origin = headers.get(header::ORIGIN).map(|v| {
        v.to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .map(|(_, rest)| rest)
    });
    host.is_some_and(local)
        && match origin {
            None => true,
            Some(Some(rest)) => local(rest.split('/').next().unwrap_or_default()),
            Some(None) => false,
        }
}

fn is_event_stream(headers: &http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// A JSON-RPC message as an `application/json` answer (HTTP 200: the request
/// was read and answered, even when the answer is an error).
pub(crate) fn json_response(message: &Value) -> Response<Body> {
    let mut response = Response::new(Body::from(message.to_string()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn jsonrpc_error_response(status: StatusCode, code: i64, message: &str) -> Response<Body> {
    let mut response = json_response(&json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": code, "message": message },
    }));
    *response.status_mut() = status;
    response
}
