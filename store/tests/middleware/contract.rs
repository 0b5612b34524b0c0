//! Every row of docs/architecture.md's HTTP contract, through the middleware alone (tower
//! `oneshot`, no network): 400 missing / malformed key, 401 without a principal,
//! 413 over the body limit, replay with `Idempotent-Replayed: true`, 422 (or
//! 409 by policy) for a changed payload, 409 + `Retry-After` while running,
//! 409 `outcome-uncertain` with the log reference, 410 after the replay window.
//! Each refusal is byte-for-byte `Refusal::to_answer()` from the core.
#![cfg(feature = "axum")]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use http::{Request, Response};
use http_body_util::BodyExt;
use idemkit::clock::ManualClock;
use idemkit::core::http::{Answer, Refusal};
use idemkit::core::machine::{MismatchStatus, Policy, StepStart};
use idemkit::core::record::EffectKind;
use idemkit::http::{
    ClaimAnswered, ClaimOutcomeLabel, Execution, IdempotencyLayer, KeyRequirement, RouteConfig,
};
use idemkit::store::Store;
use idemkit::{IdempotencyKey, KeyError, Scope, UnixMillis};
use tokio::sync::Notify;
use tower::{Layer, ServiceExt};

const OP: &str = "orders.create";

fn config() -> RouteConfig {
    RouteConfig::new(OP, EffectKind::External)
        .principal(|parts| {
            parts
                .headers
                .get("x-tenant")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
        .body_limit(64)
}

fn req(key: Option<&str>, tenant: Option<&str>, body: &str) -> Request<Body> {
    let mut b = Request::post("/orders").header("content-type", "application/json");
    if let Some(k) = key {
        b = b.header("idempotency-key", k);
    }
    if let Some(t) = tenant {
        b = b.header("x-tenant", t);
    }
    b.body(Body::from(body.to_owned())).unwrap()
}

struct Got {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

async fn got(response: Response<Body>) -> Got {
    let (parts, body) = response.into_parts();
    Got {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes().to_vec(),
    }
}

fn assert_refusal(got: &Got, refusal: Refusal) {
    let Answer {
        status,
        headers,
        body,
    } = refusal.to_answer();
    assert_eq!(got.status, status);
    assert_eq!(got.body, body, "{}", String::from_utf8_lossy(&got.body));
    for (name, value) in headers {
        assert_eq!(got.headers.get(&name).unwrap(), value.as_str(), "{name}");
    }
}

/// A handler that counts its executions, takes a step, and answers 201 with a
/// body naming the call; `gate` (when set) holds it until notified.
#[derive(Clone)]
struct Handler {
    calls: Arc<AtomicUsize>,
    gate: Option<Arc<Notify>>,
    status: u16,
}

impl Handler {
    fn new(status: u16) -> Self {
        Handler {
            calls: Arc::new(AtomicUsize::new(0)),
            gate: None,
            status,
        }
    }

    fn service(
        self,
    ) -> impl tower::Service<
        Request<Body>,
        Response = Response<Body>,
        Error = Infallible,
        Future = impl Send,
    > + Clone
    + Send
    + 'static {
        let this = self;
        tower::service_fn(move |request: Request<Body>| {
            let this = this.clone();
            async move {
                let n = this.calls.fetch_add(1, Ordering::SeqCst) + 1;
                let exec = request.extensions().get::<Execution>().cloned().unwrap();
                let start = exec.begin_step("charge", &format!("pk-{n}")).await.unwrap();
                if let Some(gate) = &this.gate {
                    gate.notified().await;
                }
                if matches!(start, StepStart::Dispatch { .. }) {
                    exec.complete_step("charge", Some(format!("ch_{n}")))
                        .await
                        .unwrap();
                }
                Ok::<_, Infallible>(
                    Response::builder()
                        .status(this.status)
                        .header("content-type", "application/json")
                        .header("location", format!("/orders/{n}"))
                        .header("set-cookie", "s=1")
                        .body(Body::from(format!(r#"{{"order":{n}}}"#)))
                        .unwrap(),
                )
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_row_of_the_contract() {
    let clock = ManualClock::new(UnixMillis::from_millis(1_000_000));
    let store = idemkit::in_memory().unwrap().with_clock(clock.clone());
    let handler = Handler::new(201);
    let svc = IdempotencyLayer::new(store.clone(), config()).layer(handler.clone().service());

    // 401 before anything else.
    let r = got(svc
        .clone()
        .oneshot(req(Some("k1"), None, "{}"))
        .await
        .unwrap())
    .await;
    assert_refusal(&r, Refusal::Unauthenticated);

    // 400 missing key.
    let r = got(svc
        .clone()
        .oneshot(req(None, Some("t"), "{}"))
        .await
        .unwrap())
    .await;
    assert_refusal(&r, Refusal::MissingKey);

    // 400 malformed keys.
    let long = "k".repeat(256);
    for (key, error) in [
        ("", KeyError::Empty),
        ("\"\"", KeyError::Empty),
        (long.as_str(), KeyError::TooLong { len: 256 }),
        (
            "a\tb",
            KeyError::InvalidCharacter {
                offset: 1,
                byte: b'\t',
            },
        ),
        (
            "a b",
            KeyError::InvalidCharacter {
                offset: 1,
                byte: b' ',
            },
        ),
    ] {
        let r = got(svc
            .clone()
            .oneshot(req(Some(key), Some("t"), "{}"))
            .await
            .unwrap())
        .await;
        assert_refusal(&r, Refusal::InvalidKey(error));
    }

    // 413 over the limit (64 bytes), nothing claimed.
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(100));
    let r = got(svc
        .clone()
        .oneshot(req(Some("big"), Some("t"), &big))
        .await
        .unwrap())
    .await;
    assert_refusal(&r, Refusal::BodyTooLarge { limit: 64 });
    let scope = Scope::new("t", OP).unwrap();
    assert!(
        store
            .get(&scope, &IdempotencyKey::new("big").unwrap())
            .unwrap()
            .is_none()
    );
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        0,
        "no refusal executed"
    );

    // First request executes: 201, no replay header.
    let first = got(svc
        .clone()
        .oneshot(req(Some("k1"), Some("t"), r#"{"a":1}"#))
        .await
        .unwrap())
    .await;
    assert_eq!(first.status, 201);
    assert!(first.headers.get("idempotent-replayed").is_none());

    // Same key, same value (other spelling): the stored response, marked.
    let replay = got(svc
        .clone()
        .oneshot(req(Some("\"k1\""), Some("t"), r#"{ "a" : 1.0 }"#))
        .await
        .unwrap())
    .await;
    assert_eq!(replay.status, 201);
    assert_eq!(replay.body, first.body);
    assert_eq!(replay.headers.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(
        replay.headers.get("location"),
        first.headers.get("location")
    );
    assert_eq!(
        replay.headers.get("content-type"),
        first.headers.get("content-type")
    );
    assert!(
        replay.headers.get("set-cookie").is_none(),
        "set-cookie is never replayed"
    );
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);

    // Same key, different payload: 422, nothing executed or overwritten.
    let r = got(svc
        .clone()
        .oneshot(req(Some("k1"), Some("t"), r#"{"a":2}"#))
        .await
        .unwrap())
    .await;
    assert_refusal(&r, Refusal::KeyReused { status: 422 });
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);
    let again = got(svc
        .clone()
        .oneshot(req(Some("k1"), Some("t"), r#"{"a":1}"#))
        .await
        .unwrap())
    .await;
    assert_eq!(again.body, first.body);

    // Invalid body: 400, never executed.
    let r = got(svc
        .clone()
        .oneshot(req(Some("k-bad"), Some("t"), r#"{"a":1,"a":2}"#))
        .await
        .unwrap())
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);

    // 410 after the replay window (24 h by default), after GC pruned the body.
    clock.advance(Duration::from_secs(25 * 60 * 60));
    let _ = store.gc(100).unwrap();
    let r = got(svc
        .clone()
        .oneshot(req(Some("k1"), Some("t"), r#"{"a":1}"#))
        .await
        .unwrap())
    .await;
    assert_refusal(
        &r,
        Refusal::ResponseExpired {
            original_status: 201,
            resource_ref: None,
        },
    );
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);

    // 409 (by policy) for a changed payload.
    let conflict_svc = IdempotencyLayer::new(
        store.clone(),
        config().policy(Policy::default().with_mismatch(MismatchStatus::Conflict)),
    )
    .layer(handler.clone().service());
    let _ = conflict_svc
        .clone()
        .oneshot(req(Some("k409"), Some("t"), r#"{"a":1}"#))
        .await
        .unwrap();
    let r = got(conflict_svc
        .oneshot(req(Some("k409"), Some("t"), r#"{"a":3}"#))
        .await
        .unwrap())
    .await;
    assert_refusal(&r, Refusal::KeyReused { status: 409 });
}

/// What the claim decided rides on the response (`ClaimAnswered`), for an
/// access log around the layer: none before a claim, then execute, replay and
/// mismatch, each naming the record by its log reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_answer_names_what_its_claim_decided() {
    let store = idemkit::in_memory().unwrap();
    let svc = IdempotencyLayer::new(store, config()).layer(Handler::new(201).service());
    let answered =
        |response: &Response<Body>| response.extensions().get::<ClaimAnswered>().copied();
    let expected_ref = Scope::new("t", OP)
        .unwrap()
        .record_id(&IdempotencyKey::new("k-ext").unwrap())
        .log_ref();

    let unauthenticated = svc
        .clone()
        .oneshot(req(Some("k-ext"), None, "{}"))
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
    assert_eq!(answered(&unauthenticated), None);

    let mut seen = Vec::new();
    for body in [r#"{"a":1}"#, r#"{"a":1}"#, r#"{"a":2}"#] {
        let response = svc
            .clone()
            .oneshot(req(Some("k-ext"), Some("t"), body))
            .await
            .unwrap();
        let claim = answered(&response).expect("a claimed request says what its claim decided");
        assert_eq!(claim.log_ref, expected_ref);
        seen.push((response.status().as_u16(), claim.outcome));
    }
    assert_eq!(
        seen,
        [
            (201, ClaimOutcomeLabel::Execute),
            (201, ClaimOutcomeLabel::Replay),
            (422, ClaimOutcomeLabel::Mismatch),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_progress_then_uncertain() {
    let clock = ManualClock::new(UnixMillis::from_millis(5_000_000));
    let store = idemkit::in_memory().unwrap().with_clock(clock.clone());
    let mut handler = Handler::new(201);
    let gate = Arc::new(Notify::new());
    handler.gate = Some(Arc::clone(&gate));
    let policy = Policy::default().with_lease(Duration::from_secs(30));
    let svc = IdempotencyLayer::new(store.clone(), config().policy(policy))
        .layer(handler.clone().service());

    let running = tokio::spawn(svc.clone().oneshot(req(Some("slow"), Some("t"), "{}")));
    while handler.calls.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Same key while it runs: 409 with Retry-After (the lease's remaining time).
    let r = got(svc
        .clone()
        .oneshot(req(Some("slow"), Some("t"), "{}"))
        .await
        .unwrap())
    .await;
    assert_refusal(
        &r,
        Refusal::InProgress {
            retry_after: Duration::from_secs(30),
        },
    );

    // The lease expires (the worker hangs, renewals are far apart in real
    // time): an External record becomes Unknown, never re-executed.
    clock.advance(Duration::from_secs(31));
    let r = got(svc
        .clone()
        .oneshot(req(Some("slow"), Some("t"), "{}"))
        .await
        .unwrap())
    .await;
    let log_ref = Scope::new("t", OP)
        .unwrap()
        .record_id(&IdempotencyKey::new("slow").unwrap())
        .log_ref();
    assert_refusal(&r, Refusal::OutcomeUncertain { log_ref });
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);

    // The worker finally answers. No other lease was granted, so its token is
    // still the record's: its real outcome settles the uncertainty (durably,
    // before it is sent), and retries replay it.
    gate.notify_one();
    let late = got(running.await.unwrap().unwrap()).await;
    assert_eq!(late.status, 201);
    let r = got(svc
        .clone()
        .oneshot(req(Some("slow"), Some("t"), "{}"))
        .await
        .unwrap())
    .await;
    assert_eq!(r.body, late.body);
    assert_eq!(r.headers.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_key_passes_through_and_5xx_is_not_stored() {
    let store = idemkit::in_memory().unwrap();
    let handler = Handler::new(201);
    let optional = IdempotencyLayer::new(store.clone(), config().key(KeyRequirement::Optional))
        .layer(tower::service_fn(|request: Request<Body>| async move {
            assert!(request.extensions().get::<Execution>().is_none());
            Ok::<_, Infallible>(Response::new(Body::from("plain")))
        }));
    let r = got(optional.oneshot(req(None, Some("t"), "{}")).await.unwrap()).await;
    assert_eq!((r.status, r.body.as_slice()), (200, &b"plain"[..]));
    drop(handler);

    // A 502 from an External operation is ambiguous: Unknown, then 409 uncertain.
    let failing = Handler::new(502);
    let svc = IdempotencyLayer::new(store.clone(), config()).layer(failing.clone().service());
    let r = got(svc
        .clone()
        .oneshot(req(Some("k5"), Some("t"), "{}"))
        .await
        .unwrap())
    .await;
    assert_eq!(r.status, 502);
    let r = got(svc
        .clone()
        .oneshot(req(Some("k5"), Some("t"), "{}"))
        .await
        .unwrap())
    .await;
    assert_eq!(r.status, 409);
    assert_eq!(failing.calls.load(Ordering::SeqCst), 1);

    // The same from a Local operation is released: the retry executes.
    let local = Handler::new(502);
    let svc = IdempotencyLayer::new(
        store,
        RouteConfig::new(OP, EffectKind::Local).principal(|_| Some("t".into())),
    )
    .layer(local.clone().service());
    let _ = svc
        .clone()
        .oneshot(req(Some("k6"), None, "{}"))
        .await
        .unwrap();
    let _ = svc
        .clone()
        .oneshot(req(Some("k6"), None, "{}"))
        .await
        .unwrap();
    assert_eq!(local.calls.load(Ordering::SeqCst), 2);
}

/// The handler's answer with the headers a real one sends: a representation
/// header, a location, caching, a session cookie, a session token in a custom
/// header and an application header.
fn with_custom_headers() -> Response<Body> {
    Response::builder()
        .status(201)
        .header("content-type", "application/json")
        .header("location", "/orders/1")
        .header("cache-control", "no-store")
        .header("set-cookie", "session=s3cret")
        .header("x-session-token", "tok-s3cret")
        .header("x-request-cost", "3")
        .body(Body::from(r#"{"order":1}"#))
        .unwrap()
}

/// The names of the headers stored with the completed record of `key`.
fn stored_header_names(store: &Store, key: &str) -> Vec<String> {
    let record = store
        .get(
            &Scope::new("t", OP).unwrap(),
            &IdempotencyKey::new(key).unwrap(),
        )
        .unwrap()
        .unwrap();
    let idemkit::core::record::RecordState::Completed { response, .. } = record.state else {
        panic!("not completed: {:?}", record.state);
    };
    let mut names: Vec<String> = response.headers.into_iter().map(|(n, _)| n).collect();
    names.sort_unstable();
    names
}

/// Replayed headers were chosen by a deny list, so a session token the handler
/// sent in `X-Session-Token` was stored and handed to whoever retried with the
/// key. They come from an allow list: the content type, location and caching
/// headers are replayed; the session token, the cookie and any other header
/// reach only the client that asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_headers_come_from_an_allow_list() {
    let store = idemkit::in_memory().unwrap();
    let svc = IdempotencyLayer::new(store.clone(), config()).layer(tower::service_fn(
        |_: Request<Body>| async { Ok::<_, Infallible>(with_custom_headers()) },
    ));
    let first = got(svc
        .clone()
        .oneshot(req(Some("k-allow"), Some("t"), "{}"))
        .await
        .unwrap())
    .await;
    assert_eq!(first.status, 201);
    assert_eq!(
        first.headers["x-session-token"], "tok-s3cret",
        "the client that asked gets the whole answer"
    );
    let replay = got(svc
        .clone()
        .oneshot(req(Some("k-allow"), Some("t"), "{}"))
        .await
        .unwrap())
    .await;
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    for kept in ["content-type", "location", "cache-control"] {
        assert_eq!(replay.headers.get(kept), first.headers.get(kept), "{kept}");
    }
    for dropped in ["set-cookie", "x-session-token", "x-request-cost"] {
        assert!(replay.headers.get(dropped).is_none(), "{dropped} replayed");
    }
    assert_eq!(
        stored_header_names(&store, "k-allow"),
        ["cache-control", "content-type", "location"]
    );
}

/// A route names the headers it replays (here an application header the
/// default list leaves out); a cookie or a credential can never be named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_names_its_replayed_headers_and_never_a_cookie() {
    use idemkit::core::http::ReplayedHeaders;
    let store = idemkit::in_memory().unwrap();
    let list = ReplayedHeaders::new(["Content-Type", "X-Request-Cost"]).unwrap();
    let svc = IdempotencyLayer::new(store.clone(), config().replayed_headers(list)).layer(
        tower::service_fn(|_: Request<Body>| async { Ok::<_, Infallible>(with_custom_headers()) }),
    );
    for _ in 0..2 {
        let _ = svc
            .clone()
            .oneshot(req(Some("k-named"), Some("t"), "{}"))
            .await
            .unwrap();
    }
    assert_eq!(
        stored_header_names(&store, "k-named"),
        ["content-type", "x-request-cost"]
    );
    for never in ["Set-Cookie", "cookie", "authorization"] {
        let refused = ReplayedHeaders::default().with(never).unwrap_err();
        assert_eq!(refused.code(), "replayed-header-never-stored", "{never}");
    }
}
