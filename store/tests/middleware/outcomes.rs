//! What the middleware records once the handler has answered (docs/architecture.md, "HTTP
//! contract"), through an axum `Router` with the layer on the route:
//!
//! - an External route answering 408/409/425/429 ("retry later") ran once and
//!   its retry gets 409 `outcome-uncertain` — also when the 408 comes from a
//!   tower timeout *inside* the idempotency layer, after the charge was sent;
//! - the same answers run again when the handler said nothing was dispatched, or
//!   when a route that dispatches only through steps began none;
//! - a 303 (post/redirect/get) on a Local route is stored and replayed;
//! - a completion write that fails is retried, and one that keeps failing never
//!   releases the record: the handler ran once and the retry does not run it.
//!
//! Every test counts the handler's executions.
#![cfg(feature = "axum")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::error_handling::HandleErrorLayer;
use axum::routing::post;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use idemkit::adapters::redb::{FaultSwitch, FaultyBackend};
use idemkit::core::http::Refusal;
use idemkit::core::record::{EffectKind, StateName};
use idemkit::http::{Execution, IdempotencyLayer, RECORD_ATTEMPTS, RouteConfig};
use idemkit::store::Store;
use idemkit::{IdempotencyKey, Scope};
use tower::ServiceBuilder;
use tower::ServiceExt;

const OP: &str = "payments.create";

fn route(effect: EffectKind) -> RouteConfig {
    RouteConfig::new(OP, effect).principal(|_| Some("t".to_owned()))
}

fn req(key: &str) -> Request<Body> {
    Request::post("/pay")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Body::from(r#"{"amount":1200}"#))
        .unwrap()
}

struct Got {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

async fn send(app: &Router, key: &str) -> Got {
    let response = app.clone().oneshot(req(key)).await.unwrap();
    let (parts, body) = response.into_parts();
    Got {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes().to_vec(),
    }
}

fn problem_type(got: &Got) -> String {
    let json: serde_json::Value = serde_json::from_slice(&got.body).unwrap_or_default();
    json["type"].as_str().unwrap_or_default().to_owned()
}

fn assert_uncertain(got: &Got, what: &str) {
    assert_eq!(
        got.status,
        409,
        "{what}: {}",
        String::from_utf8_lossy(&got.body)
    );
    assert!(
        problem_type(got).ends_with("/outcome-uncertain"),
        "{what}: {}",
        String::from_utf8_lossy(&got.body)
    );
}

fn record_state(store: &Store, key: &str) -> Option<StateName> {
    let scope = Scope::new("t", OP).unwrap();
    let key = IdempotencyKey::new(key).unwrap();
    store.get(&scope, &key).unwrap().map(|r| r.state.name())
}

/// A router whose `/pay` handler counts its runs, lets `act` use the execution,
/// and answers `status` with a `location`.
fn app<F>(
    store: &Store,
    config: RouteConfig,
    calls: &Arc<AtomicUsize>,
    status: u16,
    act: F,
) -> Router
where
    F: Fn(Execution) -> futures_like::BoxFuture + Clone + Send + Sync + 'static,
{
    let calls = Arc::clone(calls);
    let handler = move |request: Request<Body>| {
        let (calls, act) = (Arc::clone(&calls), act.clone());
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            let exec = request.extensions().get::<Execution>().cloned().unwrap();
            act(exec).await;
            Response::builder()
                .status(status)
                .header("location", "/pay/1")
                .body(Body::from(format!("answered {status}")))
                .unwrap()
        }
    };
    Router::new().route(
        "/pay",
        post(handler).route_layer(IdempotencyLayer::new(store.clone(), config)),
    )
}

/// Boxed futures for the handlers' `act`, without another dependency.
mod futures_like {
    use std::future::Future;
    use std::pin::Pin;

    pub(super) type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

    pub(super) fn ready() -> BoxFuture {
        Box::pin(async {})
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_route_answering_retry_later_runs_once_and_the_retry_is_uncertain() {
    for status in [408_u16, 409, 425, 429] {
        let store = idemkit::in_memory().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let app = app(&store, route(EffectKind::External), &calls, status, |_| {
            futures_like::ready()
        });
        let first = send(&app, "k").await;
        assert_eq!(first.status, status, "the handler's answer is passed on");
        assert_eq!(
            record_state(&store, "k"),
            Some(StateName::Unknown),
            "{status}"
        );
        let retry = send(&app, "k").await;
        assert_uncertain(&retry, &format!("retry after {status}"));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "{status}: never a second charge"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_layer_inside_the_idempotency_layer_answers_408_after_the_charge_and_the_retry_is_uncertain()
 {
    let store = idemkit::in_memory().unwrap();
    let charges = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&charges);
    // The provider call is sent, then its answer never comes: the timeout inside
    // the idempotency layer answers 408 for the handler.
    let handler = move |_: Request<Body>| {
        let counted = Arc::clone(&counted);
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<()>().await;
            StatusCode::CREATED
        }
    };
    let timeout = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(|_: tower::BoxError| async {
            StatusCode::REQUEST_TIMEOUT
        }))
        .timeout(Duration::from_millis(50));
    let app = Router::new().route(
        "/pay",
        post(handler)
            .route_layer(timeout)
            .route_layer(IdempotencyLayer::new(
                store.clone(),
                route(EffectKind::External),
            )),
    );
    let first = send(&app, "k").await;
    assert_eq!(first.status, 408);
    let retry = send(&app, "k").await;
    assert_uncertain(&retry, "retry after the inner timeout");
    assert_eq!(
        charges.load(Ordering::SeqCst),
        1,
        "charged once, never twice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_dispatched_lets_an_external_retry_later_run_again() {
    for status in [408_u16, 409, 425, 429, 503] {
        let store = idemkit::in_memory().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let app = app(
            &store,
            route(EffectKind::External),
            &calls,
            status,
            |exec| Box::pin(async move { exec.nothing_dispatched() }),
        );
        assert_eq!(send(&app, "k").await.status, status);
        assert_eq!(record_state(&store, "k"), Some(StateName::Released));
        let retry = send(&app, "k").await;
        assert_eq!(retry.status, status, "executed again, not refused");
        assert_eq!(calls.load(Ordering::SeqCst), 2, "{status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_dispatching_only_through_steps_runs_again_when_no_step_was_begun() {
    // Declared, no step begun: nothing was dispatched, the retry runs.
    let store = idemkit::in_memory().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let declared = route(EffectKind::External).dispatches_only_through_steps(true);
    let app1 = app(&store, declared.clone(), &calls, 429, |_| {
        futures_like::ready()
    });
    send(&app1, "k").await;
    send(&app1, "k").await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "no step, nothing dispatched"
    );

    // Declared, a step begun: it may have been dispatched, the retry is uncertain.
    let calls = Arc::new(AtomicUsize::new(0));
    let app2 = app(&store, declared, &calls, 429, |exec| {
        Box::pin(async move {
            let _ = exec.begin_step("charge", "pk-1").await.unwrap();
        })
    });
    send(&app2, "s").await;
    assert_uncertain(&send(&app2, "s").await, "after a begun step");
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Not declared: an empty step list proves nothing (the handler may call the
    // provider without steps).
    let calls = Arc::new(AtomicUsize::new(0));
    let app3 = app(&store, route(EffectKind::External), &calls, 429, |_| {
        futures_like::ready()
    });
    send(&app3, "u").await;
    assert_uncertain(&send(&app3, "u").await, "undeclared route");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_see_other_on_a_local_route_is_replayed() {
    let store = idemkit::in_memory().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let app = app(&store, route(EffectKind::Local), &calls, 303, |_| {
        futures_like::ready()
    });
    let first = send(&app, "k").await;
    assert_eq!(first.status, 303);
    let retry = send(&app, "k").await;
    assert_eq!(retry.status, 303);
    assert_eq!(retry.headers.get("location").unwrap(), "/pay/1");
    assert_eq!(retry.headers.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(retry.body, first.body);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "post/redirect/get runs once"
    );
}

fn faulty_store() -> (Store, FaultSwitch) {
    let switch = FaultSwitch::default();
    let backend = FaultyBackend::new(redb::backends::InMemoryBackend::new(), switch.clone());
    (
        Store::from(idemkit::adapters::redb::RedbAdapter::with_faulty_backend(backend).unwrap()),
        switch,
    )
}

/// The handler arms `failures` transient store failures right before it answers,
/// so the claim succeeded and the completion write meets them.
fn failing_completion(
    store: &Store,
    switch: &FaultSwitch,
    effect: EffectKind,
    calls: &Arc<AtomicUsize>,
    failures: u64,
) -> Router {
    let switch = switch.clone();
    app(store, route(effect), calls, 201, move |_| {
        let switch = switch.clone();
        Box::pin(async move { switch.fail_next_transactions(failures) })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_that_fails_once_is_retried_and_replayed() {
    for effect in [EffectKind::Local, EffectKind::External] {
        let (store, switch) = faulty_store();
        let calls = Arc::new(AtomicUsize::new(0));
        let app = failing_completion(&store, &switch, effect, &calls, 1);
        let first = send(&app, "k").await;
        assert_eq!(first.status, 201, "{effect}: recorded on the second try");
        assert_eq!(switch.injected(), 1);
        let retry = send(&app, "k").await;
        assert_eq!(retry.status, 201);
        assert_eq!(retry.headers.get("idempotent-replayed").unwrap(), "true");
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{effect}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_that_keeps_failing_is_not_acknowledged_and_never_released() {
    for effect in [EffectKind::Local, EffectKind::External] {
        let (store, switch) = faulty_store();
        let calls = Arc::new(AtomicUsize::new(0));
        let app = failing_completion(&store, &switch, effect, &calls, u64::from(RECORD_ATTEMPTS));
        let first = send(&app, "k").await;
        let scope = Scope::new("t", OP).unwrap();
        let log_ref = scope
            .record_id(&IdempotencyKey::new("k").unwrap())
            .log_ref();
        let expected = Refusal::OutcomeNotRecorded {
            log_ref,
            original_status: 201,
        }
        .to_answer();
        assert_eq!(first.status, expected.status, "{effect}");
        assert_eq!(first.body, expected.body, "{effect}: core's one answer");
        assert_eq!(switch.injected(), u64::from(RECORD_ATTEMPTS));
        // The completion failed every time; the fallback left an honest Unknown.
        assert_eq!(
            record_state(&store, "k"),
            Some(StateName::Unknown),
            "{effect}"
        );
        let retry = send(&app, "k").await;
        assert_uncertain(&retry, &format!("{effect} retry"));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{effect}: never run again");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_fails_the_completion_and_the_fallback_leaves_the_record_running() {
    // A Local record: releasing it would run the handler again on retry.
    let (store, switch) = faulty_store();
    let calls = Arc::new(AtomicUsize::new(0));
    let failures = 2 * u64::from(RECORD_ATTEMPTS);
    let app = failing_completion(&store, &switch, EffectKind::Local, &calls, failures);
    let first = send(&app, "k").await;
    assert_eq!(first.status, 409);
    assert!(String::from_utf8_lossy(&first.body).contains("outcome-not-recorded"));
    assert_eq!(
        switch.injected(),
        failures,
        "every write of both tries failed"
    );
    // Neither recorded nor released: the lease (30 s) still holds the key.
    assert_eq!(record_state(&store, "k"), Some(StateName::Running));
    let retry = send(&app, "k").await;
    assert_eq!(retry.status, 409);
    assert!(problem_type(&retry).ends_with("/request-in-progress"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// A real I/O error under the completion: the handler answers, and the commit
/// that records its response fails its sync, which makes redb refuse every
/// later write of that database. The store reopens it on the next write, so the
/// middleware's recording retry succeeds: the client gets the handler's 201,
/// and its retry replays it, with one execution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_whose_commit_fails_its_sync_is_recorded_after_the_store_reopens() {
    for effect in [EffectKind::Local, EffectKind::External] {
        let (store, switch) = faulty_store();
        let calls = Arc::new(AtomicUsize::new(0));
        let armed = switch.clone();
        let app = app(&store, route(effect), &calls, 201, move |_| {
            let armed = armed.clone();
            Box::pin(async move { armed.fail_sync_after(0) })
        });
        let first = send(&app, "k").await;
        assert_eq!(
            first.status,
            201,
            "{effect}: recorded after the reopen: {}",
            String::from_utf8_lossy(&first.body)
        );
        assert_eq!(
            switch.injected(),
            1,
            "{effect}: the completion's sync failed"
        );
        assert!(store.health().is_writable(), "{effect}");
        let retry = send(&app, "k").await;
        assert_eq!(retry.status, 201);
        assert_eq!(retry.headers.get("idempotent-replayed").unwrap(), "true");
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{effect}");
    }
}
