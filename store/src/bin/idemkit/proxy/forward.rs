//! Forwarding to the upstream: hop-by-hop headers dropped (RFC 9110 §7.6.1),
//! `X-Forwarded-*` added, bodies streamed, and the crash window named:
//!
//! - the connection to the upstream failed (nothing was sent) → 502, and the
//!   execution says nothing was dispatched, so its record is released;
//! - no answer within the route's timeout, or the connection lost after the
//!   request was written → 504, and on an External route the record becomes
//!   Unknown (the upstream may have acted): retries get 409
//!   `outcome-uncertain`, never a second upstream call.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use idemkit::http::Execution;

/// The pooled upstream client and where it points.
#[derive(Clone)]
pub(crate) struct Upstream {
    client: Client<HttpConnector, Body>,
    /// `host:port`, and a base path without a trailing `/` (may be empty).
    authority: http::uri::Authority,
    base_path: String,
}

impl Upstream {
    pub(crate) fn new(uri: &Uri) -> Upstream {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
        Upstream {
            client,
            // config.rs refused an upstream without one.
            authority: uri
                .authority()
                .cloned()
                .unwrap_or_else(|| http::uri::Authority::from_static("127.0.0.1")),
            base_path: uri.path().trim_end_matches('/').to_owned(),
        }
    }
}

/// How one route forwards.
#[derive(Clone)]
pub(crate) struct Forward {
    pub(crate) upstream: Upstream,
    pub(crate) timeout: Duration,
    /// Whether the `Idempotency-Key` goes on to the upstream.
    pub(crate) forward_key: bool,
}

/// Headers that describe one connection, never forwarded (RFC 9110 §7.6.1).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // The names a `Connection` header lists are hop-by-hop too.
    if headers.contains_key(header::CONNECTION) {
        strip_listed(headers);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove(header::UPGRADE);
}

fn strip_listed(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
}

/// A problem answer of the proxy itself (the upstream's answers pass as they are).
fn problem(status: StatusCode, name: &str, title: &str, detail: &str) -> Response<Body> {
    let body = serde_json::json!({
        "type": format!("https://idemkit.dev/problems/{name}"),
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

impl Forward {
    /// Sends `request` upstream and answers with what came back.
    pub(crate) async fn send(&self, request: Request<Body>) -> Response<Body> {
        let (mut parts, body) = request.into_parts();
        let execution = parts.extensions.get::<Execution>().cloned();
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip());
        // The caller's path and query as they are (no re-parse) under the
        // upstream's base path.
        let path_and_query = match (self.upstream.base_path.as_str(), parts.uri.path_and_query()) {
            ("", Some(pq)) => Ok(pq.clone()),
            (base, pq) => http::uri::PathAndQuery::try_from(format!(
                "{base}{}",
                pq.map_or("/", |p| p.as_str())
            )),
        };
        let uri = path_and_query.ok().and_then(|pq| {
            Uri::builder()
                .scheme(http::uri::Scheme::HTTP)
                .authority(self.upstream.authority.clone())
                .path_and_query(pq)
                .build()
                .ok()
        });
        let Some(uri) = uri else {
            return problem(
                StatusCode::BAD_REQUEST,
                "invalid-request-target",
                "The request target cannot be forwarded",
                "The path and query do not form a valid URI.",
            );
        };
        strip_hop_by_hop(&mut parts.headers);
        if !self.forward_key {
            parts.headers.remove("idempotency-key");
        }
        // The upstream sees its own authority as Host (the client sets it from
        // the URI) and the caller's in X-Forwarded-Host.
        if let Some(host) = parts.headers.remove(header::HOST) {
            parts.headers.insert("x-forwarded-host", host);
        }
        if let Some(ip) = peer {
            let forwarded_for = match parts
                .headers
                .get("x-forwarded-for")
                .and_then(|v| v.to_str().ok())
            {
                Some(earlier) => format!("{earlier}, {ip}"),
                None => ip.to_string(),
            };
            if let Ok(value) = HeaderValue::from_str(&forwarded_for) {
                parts.headers.insert("x-forwarded-for", value);
            }
        }
        parts
            .headers
            .insert("x-forwarded-proto", HeaderValue::from_static("http"));
        parts.uri = uri;
        parts.extensions = http::Extensions::new();
        let request = Request::from_parts(parts, body);

        match tokio::time::timeout(self.timeout, self.upstream.client.request(request)).await {
            Ok(Ok(response)) => {
                let (mut head, body) = response.into_parts();
                strip_hop_by_hop(&mut head.headers);
                Response::from_parts(head, Body::new(body))
            }
            Ok(Err(e)) if e.is_connect() => {
                // Nothing reached the upstream: the attempt had no effect.
                if let Some(execution) = &execution {
                    execution.nothing_dispatched();
                }
                tracing::warn!(error = %e, "upstream unreachable; nothing was sent");
                problem(
                    StatusCode::BAD_GATEWAY,
                    "upstream-unavailable",
                    "The upstream could not be reached",
                    "The connection to the upstream failed before the request was sent. \
                     Nothing was executed; a retry with the same key may execute.",
                )
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the upstream connection failed after the request was sent");
                problem(
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream-no-answer",
                    "The upstream did not answer",
                    "The connection was lost after the request was sent: the upstream may \
                     have acted. Do not retry automatically.",
                )
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
                    "the upstream did not answer in time"
                );
                problem(
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream-timeout",
                    "The upstream did not answer in time",
                    "The request was sent and no answer came within the route's timeout: \
                     the upstream may have acted. Do not retry automatically.",
                )
            }
        }
    }
}
