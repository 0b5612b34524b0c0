//! Two edges of DESIGN.md's HTTP contract, through a real axum server on a TCP
//! socket and a raw HTTP/1.1 client (so the exact header lines are under the
//! test's control):
//!
//! - a bare `Idempotency-Key` holding `,` is what HTTP makes of two field lines:
//!   400 `invalid-idempotency-key`, nothing executed; a quoted key may hold `,`;
//! - a response body larger than `RouteConfig::max_stored_response_bytes` is
//!   answered in full once and recorded as completed without its body: the retry
//!   gets 410 `response-expired` with the resource reference, and the handler ran
//!   once.
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
    let store = Store::in_memory().unwrap();
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
