//! Forwarding to the upstream: hop-by-hop headers dropped (RFC 9110 §7.6.1),
//! `X-Forwarded-*` added, bodies streamed, and the crash window named:
//!
//! - the connection to the upstream failed or did not open within the
//!   connect timeout (nothing was sent) → 502 / 503, and the execution says
//!   nothing was dispatched, so its record is released;
//! - once the request is being written, only the upstream's answer decides:
//!   no answer within the route's timeout, the connection lost, or the
//!   answer's body stalling longer than the idle timeout between two chunks
//!   → the record becomes Unknown **whatever the route's effect** (the proxy
//!   cannot see the upstream's transaction): retries get 409
//!   `outcome-uncertain`, never a second upstream call.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use idemkit::core::http::{Answer, PROBLEM_JSON};
use idemkit::core::machine::{Dispatch, Disposition, Policy, classify_attempt};
use idemkit::http::Execution;

use super::config::Timeouts;
use super::limits::Idle;
use super::upstream_tls::UpstreamTls;

/// Where the upstream is, and this worker's idle connections to it.
///
/// Each worker (one thread) has its own; a request checks out an idle
/// HTTP/1.1 connection, or opens one, and the connection goes back when the
/// upstream's answer has been read to its end. hyper-util's pooled client did
/// the same with a shared pool and one more task per request (to wait for the
/// connection to become idle); on the pass-through benchmark this costs less.
#[derive(Clone)]
pub(crate) struct Upstream {
    pool: Arc<Pool>,
    /// `Host` on every forwarded request: the upstream's own authority.
    host: HeaderValue,
    /// A base path without a trailing `/` (may be empty).
    base_path: String,
}

struct Pool {
    /// `host:port`, resolved at each connect.
    address: String,
    /// For an `https://` upstream: the handshake each new connection makes.
    tls: Option<UpstreamTls>,
    idle: Mutex<Vec<SendRequest<Body>>>,
}

/// Idle connections kept per worker; more are closed when their answer ends.
const MAX_IDLE_PER_WORKER: usize = 256;

/// Why a request got no answer from the upstream.
enum SendFailure {
    /// No byte of the request reached the upstream: the attempt had no effect.
    NotSent(String),
    /// No connection within the connect timeout: nothing was sent either.
    ConnectTimeout,
    /// The request was (at least partly) written, then the connection failed.
    AfterSent(hyper::Error),
    /// The request was (at least partly) written and no answer came in time.
    NoAnswer,
}

impl Upstream {
    /// The upstream at `uri`, through `tls` when it is `https://` (see
    /// [`UpstreamTls::for_upstream`]).
    pub(crate) fn new(uri: &Uri, tls: Option<UpstreamTls>) -> Upstream {
        // config.rs refused an upstream without an authority.
        let authority = uri
            .authority()
            .cloned()
            .unwrap_or_else(|| http::uri::Authority::from_static("127.0.0.1"));
        let default_port = if tls.is_some() { 443 } else { 80 };
        let address = match authority.port_u16() {
            Some(_) => authority.as_str().to_owned(),
            None => format!("{}:{default_port}", authority.host()),
        };
        Upstream {
            pool: Arc::new(Pool {
                address,
                tls,
                idle: Mutex::new(Vec::new()),
            }),
            host: HeaderValue::from_str(authority.as_str())
                .unwrap_or_else(|_| HeaderValue::from_static("127.0.0.1")),
            base_path: uri.path().trim_end_matches('/').to_owned(),
        }
    }
}

impl Pool {
    fn checkout(&self) -> Option<SendRequest<Body>> {
        self.idle.lock().ok()?.pop()
    }

    fn give_back(&self, sender: SendRequest<Body>) {
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE_PER_WORKER
            && !sender.is_closed()
        {
            idle.push(sender);
        }
    }

    async fn connect(&self) -> Result<SendRequest<Body>, String> {
        let stream = tokio::net::TcpStream::connect(&self.address)
            .await
            .map_err(|e| format!("connect to {}: {e}", self.address))?;
        let _ = stream.set_nodelay(true);
        let Some(tls) = &self.tls else {
            return self.http1(stream).await;
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&tls.config));
        let stream = connector
            .connect(tls.name.clone(), stream)
            .await
            .map_err(|e| format!("TLS handshake with {}: {e}", self.address))?;
        self.http1(stream).await
    }

    /// HTTP/1.1 over `stream`, its connection driven by a task of its own.
    async fn http1<S>(&self, stream: S) -> Result<SendRequest<Body>, String>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| format!("handshake with {}: {e}", self.address))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "upstream connection ended");
            }
        });
        Ok(sender)
    }

    /// Sends on an idle connection or a new one. A pooled connection the
    /// upstream closed while it was idle is dropped and the request tried on
    /// the next (it was never written, so this sends it at most once). Each
    /// phase has its timeout: connecting (nothing sent), then from writing the
    /// request to the answer's head, then between two chunks of its body.
    /// `execution` learns when the request leaves.
    async fn send(
        self: &Arc<Self>,
        mut request: Request<Body>,
        timeouts: Timeouts,
        execution: Option<&Execution>,
    ) -> Result<Response<Body>, SendFailure> {
        loop {
            let pooled = self.checkout();
            let reused = pooled.is_some();
            let mut sender = match pooled {
                Some(sender) => sender,
                None => match tokio::time::timeout(timeouts.connect, self.connect()).await {
                    Ok(connected) => connected.map_err(SendFailure::NotSent)?,
                    Err(_) => return Err(SendFailure::ConnectTimeout),
                },
            };
            if let Err(e) = sender.ready().await {
                if reused {
                    continue;
                }
                return Err(SendFailure::NotSent(format!("connection closed: {e}")));
            }
            if let Some(execution) = execution {
                execution.sent_downstream();
            }
            let sent =
                tokio::time::timeout(timeouts.answer, sender.try_send_request(request)).await;
            let Ok(sent) = sent else {
                // Perhaps written, perhaps acted on: the connection is dropped
                // with the request, and only an answer could have told.
                return Err(SendFailure::NoAnswer);
            };
            match sent {
                Ok(response) => {
                    let (head, body) = response.into_parts();
                    let body = GivesBackAtEnd {
                        body,
                        sender: Some(sender),
                        pool: Arc::clone(self),
                    };
                    let body = Idle::new(body, timeouts.body_idle);
                    return Ok(Response::from_parts(head, Body::new(body)));
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) if reused => request = unsent,
                    Some(_) => {
                        return Err(SendFailure::NotSent(format!(
                            "connection closed: {}",
                            e.into_error()
                        )));
                    }
                    None => return Err(SendFailure::AfterSent(e.into_error())),
                },
            }
        }
    }
}

/// The upstream's answer body; its connection goes back to the pool once the
/// body has been read to the end (a body dropped before then closes it).
struct GivesBackAtEnd {
    body: Incoming,
    sender: Option<SendRequest<Body>>,
    pool: Arc<Pool>,
}

impl GivesBackAtEnd {
    fn give_back(&mut self) {
        if let Some(sender) = self.sender.take() {
            self.pool.give_back(sender);
        }
    }
}

impl http_body::Body for GivesBackAtEnd {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.give_back(),
            Poll::Ready(Some(Ok(_))) if self.body.is_end_stream() => self.give_back(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for GivesBackAtEnd {
    fn drop(&mut self) {
        // An empty answer (HEAD, 204, 304) may never be polled.
        if http_body::Body::is_end_stream(&self.body) {
            self.give_back();
        }
    }
}

/// `X-Forwarded-For` of a request with none: the peer's address, formatted
/// once per address and thread (callers mostly come from a few addresses).
fn forwarded_for(ip: IpAddr) -> Option<HeaderValue> {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(IpAddr, HeaderValue)>> =
            const { std::cell::RefCell::new(None) };
    }
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if let Some((cached, value)) = last.as_ref()
            && *cached == ip
        {
            return Some(value.clone());
        }
        let value = HeaderValue::from_str(&ip.to_string()).ok()?;
        *last = Some((ip, value.clone()));
        Some(value)
    })
}

/// How one route forwards.
#[derive(Clone)]
pub(crate) struct Forward {
    pub(crate) upstream: Upstream,
    pub(crate) timeouts: Timeouts,
    /// Whether the `Idempotency-Key` goes on to the upstream.
    pub(crate) forward_key: bool,
    /// A Local route's own policy: its claims are recorded as External (a
    /// lost proxy leaves them unresolved, never taken over), and the answers
    /// its upstream sends are classified by this one (a 5xx released).
    pub(crate) answers_as: Option<Policy>,
}

/// In a request's extensions: the client reached the gateway over TLS, so the
/// upstream gets `X-Forwarded-Proto: https` (without it, `http`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct OverTls;

/// A [`Forward`] as the tower service an idempotency layer wraps.
#[derive(Clone)]
pub(crate) struct Forwarder(pub(crate) Arc<Forward>);

impl tower::Service<Request<Body>> for Forwarder {
    type Response = Response<Body>;
    type Error = std::convert::Infallible;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Response<Body>, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let forward = Arc::clone(&self.0);
        Box::pin(async move { Ok(forward.send(request).await) })
    }
}

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Headers that describe one connection, never forwarded (RFC 9110 §7.6.1).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    *name == header::CONNECTION
        || *name == header::TE
        || *name == header::TRAILER
        || *name == header::TRANSFER_ENCODING
        || *name == header::UPGRADE
        || *name == header::PROXY_AUTHENTICATE
        || *name == header::PROXY_AUTHORIZATION
        || *name == KEEP_ALIVE
        || *name == PROXY_CONNECTION
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one pass over the few names present, instead
    // of a lookup (and a name parse) per hop-by-hop header, twice a request.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    // The names a `Connection` header lists are hop-by-hop too.
    if headers.contains_key(header::CONNECTION) {
        strip_listed(headers);
    }
    let present: Vec<HeaderName> = headers
        .keys()
        .filter(|n| is_hop_by_hop(n))
        .cloned()
        .collect();
    for name in present {
        headers.remove(name);
    }
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

/// A problem answer of the proxy itself (the upstream's answers pass as they
/// are), rendered by core as every idemkit problem is.
pub(crate) fn problem(status: StatusCode, name: &str, title: &str, detail: &str) -> Response<Body> {
    let answer = Answer::problem(status.as_u16(), name, title, detail);
    let mut response = Response::new(Body::from(answer.body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
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
        // upstream's base path, in origin form (the authority goes in Host).
        let path_and_query = match (self.upstream.base_path.as_str(), parts.uri.path_and_query()) {
            ("", Some(pq)) => Ok(pq.clone()),
            (base, pq) => http::uri::PathAndQuery::try_from(format!(
                "{base}{}",
                pq.map_or("/", |p| p.as_str())
            )),
        };
        let Ok(path_and_query) = path_and_query else {
            return problem(
                StatusCode::BAD_REQUEST,
                "invalid-request-target",
                "The request target cannot be forwarded",
                "The path and query do not form a valid URI.",
            );
        };
        strip_hop_by_hop(&mut parts.headers);
        if !self.forward_key {
            parts.headers.remove(IDEMPOTENCY_KEY);
        }
        // The upstream sees its own authority as Host and the caller's in
        // X-Forwarded-Host.
        if let Some(host) = parts
            .headers
            .insert(header::HOST, self.upstream.host.clone())
        {
            parts.headers.insert(X_FORWARDED_HOST, host);
        }
        if let Some(ip) = peer {
            let forwarded_for = match parts
                .headers
                .get(X_FORWARDED_FOR)
                .and_then(|v| v.to_str().ok())
            {
                Some(earlier) => HeaderValue::from_str(&format!("{earlier}, {ip}")).ok(),
                None => forwarded_for(ip),
            };
            if let Some(value) = forwarded_for {
                parts.headers.insert(X_FORWARDED_FOR, value);
            }
        }
        let proto = match parts.extensions.get::<OverTls>() {
            Some(OverTls) => "https",
            None => "http",
        };
        parts
            .headers
            .insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
        parts.uri = Uri::from(path_and_query);
        // Keep-alive to the upstream whatever the caller spoke.
        parts.version = http::Version::HTTP_11;
        parts.extensions = http::Extensions::new();
        let request = Request::from_parts(parts, body);

        let sent = self
            .upstream
            .pool
            .send(request, self.timeouts, execution.as_ref())
            .await;
        match sent {
            Ok(mut response) => {
                if let (Some(execution), Some(policy)) = (&execution, &self.answers_as) {
                    // The upstream answered: its transaction's fate is known.
                    let status = response.status().as_u16();
                    execution.record_as(classify_attempt(status, policy, Dispatch::Unknown));
                }
                strip_hop_by_hop(response.headers_mut());
                response
            }
            Err(SendFailure::NotSent(e)) => {
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
            Err(SendFailure::ConnectTimeout) => {
                if let Some(execution) = &execution {
                    execution.nothing_dispatched();
                }
                tracing::warn!("no connection to the upstream in time; nothing was sent");
                let mut response = problem(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "upstream-connect-timeout",
                    "The upstream did not accept a connection in time",
                    "No connection to the upstream opened within the connect timeout, so the \
                     request was not sent. Nothing was executed; a retry with the same key may \
                     execute.",
                );
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                response
            }
            Err(SendFailure::AfterSent(e)) => {
                if let Some(execution) = &execution {
                    execution.record_as(Disposition::Unknown);
                }
                tracing::warn!(error = %e, "the upstream connection failed after the request was sent");
                problem(
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream-no-answer",
                    "The upstream did not answer",
                    "The connection was lost after the request was sent: the upstream may \
                     have acted. Do not retry automatically.",
                )
            }
            Err(SendFailure::NoAnswer) => {
                if let Some(execution) = &execution {
                    execution.record_as(Disposition::Unknown);
                }
                tracing::warn!(
                    timeout_ms =
                        u64::try_from(self.timeouts.answer.as_millis()).unwrap_or(u64::MAX),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn address_of(url: &str) -> String {
        let uri: Uri = url.parse().unwrap();
        let tls = UpstreamTls::for_upstream(&uri, None).unwrap();
        Upstream::new(&uri, tls).pool.address.clone()
    }

    #[test]
    fn the_port_defaults_to_the_scheme_s() {
        assert_eq!(address_of("http://api.example.com"), "api.example.com:80");
        assert_eq!(address_of("https://api.example.com"), "api.example.com:443");
        assert_eq!(
            address_of("https://tools.example.com/mcp"),
            "tools.example.com:443"
        );
        assert_eq!(address_of("https://127.0.0.1:8443"), "127.0.0.1:8443");
    }
}
