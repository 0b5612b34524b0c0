//! Fail closed: when the store cannot write (the disk went away), the middleware
//! answers 503 `store-unavailable` with `Retry-After` and never runs the handler
//! without a claim.
#![cfg(feature = "axum")]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use http::{Request, Response};
use http_body_util::BodyExt;
use idemkit::adapters::redb::{FaultSwitch, FaultyBackend};
use idemkit::core::http::Refusal;
use idemkit::core::record::EffectKind;
use idemkit::http::{IdempotencyLayer, RouteConfig};
use idemkit::store::Store;
use tower::{Layer, ServiceExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_failure_is_503_and_nothing_runs() {
    let switch = FaultSwitch::default();
    let backend = FaultyBackend::new(redb::backends::InMemoryBackend::new(), switch.clone());
    let store = Store::from(idemkit::adapters::redb::RedbAdapter::with_backend(backend).unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let svc = IdempotencyLayer::new(
        store,
        RouteConfig::new("orders.create", EffectKind::External)
            .principal(|_| Some("t".to_owned()))
            .store_retry_after(Duration::from_secs(2)),
    )
    .layer(tower::service_fn(move |_: Request<Body>| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(Response::new(Body::from("done"))) }
    }));

    switch.set_sticky(true);
    switch.fail_write_after(0);
    switch.fail_sync_after(0);
    let request = Request::post("/o")
        .header("idempotency-key", "k1")
        .body(Body::from("{}"))
        .unwrap();
    let response = svc.clone().oneshot(request).await.unwrap();
    let expected = Refusal::StoreUnavailable {
        retry_after: Duration::from_secs(2),
    }
    .to_answer();
    assert_eq!(response.status(), expected.status);
    assert_eq!(response.headers().get("retry-after").unwrap(), "2");
    assert_eq!(
        response.headers().get("content-type").unwrap(),
        "application/problem+json"
    );
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body.as_ref(), expected.body.as_slice());
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "never executed without a claim"
    );
    assert!(switch.injected() > 0, "the fault was hit");

    // Still failing: every retry is refused the same way, never executed.
    let request = Request::post("/o")
        .header("idempotency-key", "k1")
        .body(Body::from("{}"))
        .unwrap();
    let response = svc.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}
