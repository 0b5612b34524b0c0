//! The middleware's lease while the handler runs, through an axum `Router`:
//!
//! - renewal survives transient store errors: it keeps retrying until a renewal
//!   succeeds, so a slow handler keeps its key (a retry meanwhile gets 409
//!   `request-in-progress`, and the handler runs once);
//! - after the route's maximum execution time renewal stops: a hung handler's
//!   External record is listed as unresolved and a retry gets 409
//!   `outcome-uncertain`, never a second execution.
//!
//! The waits below wait for events (an injected failure counted, a lease renewed,
//! a record listed), each bounded by a generous deadline; nothing asserts a time.
#![cfg(feature = "axum")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use http::{Request, Response};
use http_body_util::BodyExt;
use idemkit::UnixMillis;
use idemkit::adapters::redb::{FaultSwitch, FaultyBackend};
use idemkit::core::machine::Policy;
use idemkit::core::record::EffectKind;
use idemkit::http::{IdempotencyLayer, RouteConfig};
use idemkit::store::Store;
use idemkit::{IdempotencyKey, Scope};
use tokio::sync::Notify;
use tower::ServiceExt;

const OP: &str = "reports.generate";
const DEADLINE: Duration = Duration::from_secs(20);

fn req(key: &str) -> Request<Body> {
    Request::post("/run")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .unwrap()
}

async fn send(app: &Router, key: &str) -> (u16, String) {
    let response = app.clone().oneshot(req(key)).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A handler that counts its runs and waits for `gate` before answering 201.
fn app(store: &Store, config: RouteConfig, calls: &Arc<AtomicUsize>, gate: &Arc<Notify>) -> Router {
    let (calls, gate) = (Arc::clone(calls), Arc::clone(gate));
    let handler = move |_: Request<Body>| {
        let (calls, gate) = (Arc::clone(&calls), Arc::clone(&gate));
        async move {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            gate.notified().await;
            Response::builder()
                .status(201)
                .body(Body::from(format!("report {n}")))
                .unwrap()
        }
    };
    Router::new().route(
        "/run",
        post(handler).route_layer(IdempotencyLayer::new(store.clone(), config)),
    )
}

fn lease_of(store: &Store, key: &str) -> Option<UnixMillis> {
    let scope = Scope::new("t", OP).unwrap();
    let key = IdempotencyKey::new(key).unwrap();
    store
        .get(&scope, &key)
        .unwrap()
        .and_then(|r| r.lease_expires_at())
}

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_renewal_survives_transient_store_errors() {
    const FAILURES: u64 = 4;
    let switch = FaultSwitch::default();
    let backend = FaultyBackend::new(redb::backends::InMemoryBackend::new(), switch.clone());
    let store =
        Store::from(idemkit::adapters::redb::RedbAdapter::with_faulty_backend(backend).unwrap());
    // A Local route: a lease that lapsed would let the retry take the key over
    // and run the handler a second time.
    let config = RouteConfig::new(OP, EffectKind::Local)
        .principal(|_| Some("t".to_owned()))
        .policy(
            Policy::default()
                .with_effect(EffectKind::Local)
                .with_lease(Duration::from_millis(1_500)),
        );
    let calls = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Notify::new());
    let app = app(&store, config, &calls, &gate);

    let first = tokio::spawn({
        let app = app.clone();
        async move { send(&app, "k").await }
    });
    eventually("the handler started", || calls.load(Ordering::SeqCst) == 1).await;
    // Nothing but the renewals writes while the handler waits: each of these
    // failures is a failed renewal.
    switch.fail_next_transactions(FAILURES);
    eventually("every injected failure met a renewal", || {
        switch.injected() == FAILURES
    })
    .await;
    let after_failures = lease_of(&store, "k").unwrap();
    eventually("a renewal succeeded after the failures", || {
        lease_of(&store, "k").is_some_and(|lease| lease > after_failures)
    })
    .await;

    // The key is still held by the first execution.
    let (status, body) = send(&app, "k").await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("request-in-progress"), "{body}");

    gate.notify_one();
    let (status, body) = first.await.unwrap();
    assert_eq!((status, body.as_str()), (201, "report 1"));
    let (status, body) = send(&app, "k").await;
    assert_eq!((status, body.as_str()), (201, "report 1"), "the replay");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_handler_past_its_maximum_execution_time_becomes_unresolved_and_uncertain() {
    let store = idemkit::in_memory().unwrap();
    let config = RouteConfig::new(OP, EffectKind::External)
        .principal(|_| Some("t".to_owned()))
        .policy(Policy::default().with_lease(Duration::from_millis(300)))
        .max_execution(Duration::from_millis(600));
    let calls = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Notify::new());
    let app = app(&store, config, &calls, &gate);

    let first = tokio::spawn({
        let app = app.clone();
        async move { send(&app, "k").await }
    });
    eventually("the hung execution is listed as unresolved", || {
        store
            .list_unresolved()
            .unwrap()
            .iter()
            .any(|listed| listed.key.as_str() == "k")
    })
    .await;
    let (status, body) = send(&app, "k").await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("outcome-uncertain"), "{body}");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "never executed twice");

    // The handler finally answers: the machine accepts the late outcome of the
    // lease that expired, so it is recorded and replayed from then on.
    gate.notify_one();
    let (status, body) = first.await.unwrap();
    assert_eq!((status, body.as_str()), (201, "report 1"));
    let (status, body) = send(&app, "k").await;
    assert_eq!((status, body.as_str()), (201, "report 1"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
