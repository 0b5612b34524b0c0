//! Two edges of docs/architecture.md's HTTP contract, through a real axum server on a TCP
//! socket and a raw HTTP/1.1 client (so the exact header lines are under the
//! test's control):
//!
//! - a bare `Idempotency-Key` holding `,` is what HTTP makes of two field lines:
//!   400 `invalid-idempotency-key`, nothing executed; a quoted key may hold `,`;
//! - a response body larger than `RouteConfig::max_stored_response_bytes` is
//!   answered in full once and recorded as completed without its body: the retry
//!   gets 410 `response-expired` with the resource reference, and the handler ran
//!   once; a long one streams to the client before it ends.
#![cfg(feature = "axum")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use axum::extract::State;
use axum::{Extension, Router, routing::post};
use http::{Response, StatusCode};
use idemkit::core::http::{Answer, Refusal};
use idemkit::core::record::{EffectKind, RecordState};
use idemkit::http::{Execution, IdempotencyLayer, RouteConfig};
use idemkit::store::Store;
use idemkit::{IdempotencyKey, KeyError, Scope};

const OP: &str = "reports.export";

/// Counts executions; answers 201 with a body of `size` bytes (from the request)
/// and names the created resource.
async fn export(
    State(calls): State<Arc<AtomicUsize>>,
    Extension(exec): Extension<Execution>,
    body: String,
) -> Response<Body> {
    let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
    let size: usize = body.trim().parse().unwrap_or(0);
    exec.set_resource_ref(format!("report-{n}"));
    Response::builder()
        .status(StatusCode::CREATED)
        .header("content-type", "text/plain")
        .header("location", format!("/reports/{n}"))
        .body(Body::from("r".repeat(size)))
        .unwrap()
}

struct Server {
    addr: SocketAddr,
    calls: Arc<AtomicUsize>,
    store: Store,
}

async fn serve(route: RouteConfig) -> Server {
    let store = idemkit::in_memory().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let route = route.principal(|_| Some("acme".to_owned()));
    let app = Router::new()
        .route(
            "/reports",
            post(export).route_layer(IdempotencyLayer::new(store.clone(), route)),
        )
        .with_state(Arc::clone(&calls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server { addr, calls, store }
}

struct Got {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn assert_refusal(&self, refusal: Refusal) {
        let Answer { status, body, .. } = refusal.to_answer();
        assert_eq!(
            self.status,
            status,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(self.body, body, "{}", String::from_utf8_lossy(&self.body));
    }
}

/// One POST /reports with these `Idempotency-Key` field lines (each its own line,
/// sent verbatim) and body, over a fresh connection.
async fn post_raw(addr: SocketAddr, key_lines: &[&str], body: &str) -> Got {
    let mut request = format!(
        "POST /reports HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n",
        body.len()
    );
    for line in key_lines {
        request.push_str(&format!("idempotency-key: {line}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).unwrap();
        parse_response(&raw)
    })
    .await
    .unwrap()
}

fn parse_response(raw: &[u8]) -> Got {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8(raw[..split].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Got {
        status: status.parse().unwrap(),
        headers,
        body,
    }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = raw.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[..eol]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = &raw[eol + 2 + size + 2..];
    }
}

fn completed_body(store: &Store, key: &str) -> (Option<Vec<u8>>, Option<String>) {
    let record = store
        .get(
            &Scope::new("acme", OP).unwrap(),
            &IdempotencyKey::new(key).unwrap(),
        )
        .unwrap()
        .expect("the record exists");
    match record.state {
        RecordState::Completed { response, .. } => (response.body, response.resource_ref),
        other => panic!("expected Completed, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_key_with_comma_is_refused_and_a_quoted_one_runs_once() {
    let server = serve(RouteConfig::new(OP, EffectKind::External)).await;

    // A client that sent `a,b` bare, and one that sent two field lines (which
    // HTTP may fold into `a, b` anywhere on the way): both 400, nothing ran.
    let bare = post_raw(server.addr, &["a,b"], "10").await;
    bare.assert_refusal(Refusal::InvalidKey(KeyError::BareComma { offset: 1 }));
    let folded = post_raw(server.addr, &["a, b"], "10").await;
    folded.assert_refusal(Refusal::InvalidKey(KeyError::BareComma { offset: 1 }));
    let two_lines = post_raw(server.addr, &["a", "b"], "10").await;
    two_lines.assert_refusal(Refusal::InvalidKey(KeyError::BareComma { offset: 1 }));
    let body: serde_json::Value = serde_json::from_slice(&bare.body).unwrap();
    assert_eq!(body["code"], "key-bare-comma", "{body}");
    assert_eq!(server.calls.load(Ordering::SeqCst), 0);

    // Quoted, the same characters are one key: it executes once, then replays.
    let first = post_raw(server.addr, &["\"a,b\""], "10").await;
    assert_eq!(first.status, 201);
    let again = post_raw(server.addr, &["\"a,b\""], "10").await;
    assert_eq!(again.status, 201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, first.body);
    assert_eq!(server.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_over_the_stored_limit_is_answered_once_then_410_with_the_resource() {
    let route = RouteConfig::new(OP, EffectKind::External).max_stored_response_bytes(1024);
    let server = serve(route).await;

    // At the limit: stored and replayed.
    let at_limit = post_raw(server.addr, &["at-limit"], "1024").await;
    assert_eq!((at_limit.status, at_limit.body.len()), (201, 1024));
    let replayed = post_raw(server.addr, &["at-limit"], "1024").await;
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    assert_eq!(replayed.body, at_limit.body);

    // One byte over: the caller gets all of it once; the record keeps no body.
    let big = post_raw(server.addr, &["big"], "1025").await;
    assert_eq!((big.status, big.body.len()), (201, 1025));
    assert_eq!(big.header("location"), Some("/reports/2"));
    assert_eq!(
        completed_body(&server.store, "big"),
        (None, Some("report-2".to_owned()))
    );
    for _ in 0..2 {
        let retry = post_raw(server.addr, &["big"], "1025").await;
        retry.assert_refusal(Refusal::ResponseExpired {
            original_status: 201,
            resource_ref: Some("report-2".to_owned()),
        });
    }
    assert_eq!(server.calls.load(Ordering::SeqCst), 2, "each key ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_stored_response_limit_is_one_mebibyte() {
    assert_eq!(RouteConfig::DEFAULT_MAX_STORED_RESPONSE_BYTES, 1 << 20);
    let server = serve(RouteConfig::new(OP, EffectKind::Local)).await;
    let size = (1 << 20) + 1;
    let first = post_raw(server.addr, &["huge"], &size.to_string()).await;
    assert_eq!((first.status, first.body.len()), (201, size));
    let retry = post_raw(server.addr, &["huge"], &size.to_string()).await;
    retry.assert_refusal(Refusal::ResponseExpired {
        original_status: 201,
        resource_ref: Some("report-1".to_owned()),
    });
    assert_eq!(server.calls.load(Ordering::SeqCst), 1);
    assert_eq!(completed_body(&server.store, "huge").0, None);
}

/// The chunks a test hands the handler's response body, as it likes.
struct Chunks(tokio::sync::mpsc::Receiver<bytes::Bytes>);

impl http_body::Body for Chunks {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|data| Ok(http_body::Frame::data(data))))
    }
}

/// A long response was collected whole before its head went out, so an answer
/// of any size sat in memory. Now a body longer than 64 KiB streams: the client
/// has the head and the first bytes while the handler is still producing the
/// rest, gets the whole body once it ends, and the record keeps what fits under
/// `max_stored_response_bytes` (here nothing: a retry gets 410).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_response_streams_before_it_ends_and_is_recorded_without_its_body() {
    let store = idemkit::in_memory().unwrap();
    let (chunks, body) = tokio::sync::mpsc::channel(4);
    let body = Arc::new(std::sync::Mutex::new(Some(body)));
    let route = RouteConfig::new(OP, EffectKind::External)
        .max_stored_response_bytes(1024)
        .principal(|_| Some("acme".to_owned()));
    let handler = move || {
        let body = body.lock().unwrap().take();
        async move {
            match body {
                Some(body) => Response::builder()
                    .status(StatusCode::CREATED)
                    .body(Body::new(Chunks(body)))
                    .unwrap(),
                None => Response::builder().status(500).body(Body::empty()).unwrap(),
            }
        }
    };
    let app = Router::new().route(
        "/reports",
        post(handler).route_layer(IdempotencyLayer::new(store.clone(), route)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    chunks
        .send(bytes::Bytes::from(vec![b'a'; 128 * 1024]))
        .await
        .unwrap();
    let client = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        stream
            .write_all(
                b"POST /reports HTTP/1.1\r\nhost: x\r\nconnection: close\r\nidempotency-key: long\r\ncontent-length: 1\r\n\r\n1",
            )
            .unwrap();
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream
                .read(&mut buf)
                .expect("the head before the body ends");
            assert!(n > 0, "closed before the head");
            raw.extend_from_slice(&buf[..n]);
        }
        (stream, raw)
    });
    let (mut stream, mut raw) = client.await.unwrap();
    assert!(
        raw.starts_with(b"HTTP/1.1 201"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    // Only now does the handler finish its body.
    chunks
        .send(bytes::Bytes::from_static(b"the end"))
        .await
        .unwrap();
    drop(chunks);
    let whole = tokio::task::spawn_blocking(move || {
        stream.read_to_end(&mut raw).unwrap();
        parse_response(&raw)
    })
    .await
    .unwrap();
    assert_eq!(whole.body.len(), 128 * 1024 + 7);
    assert!(whole.body.ends_with(b"the end"));
    let retry = post_raw(addr, &["long"], "1").await;
    retry.assert_refusal(Refusal::ResponseExpired {
        original_status: 201,
        resource_ref: None,
    });
}
