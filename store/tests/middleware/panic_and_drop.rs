//! A handler that panics, or (with `OnDisconnect::Cancel`) a request whose future
//! is dropped (the client went away mid-execution), may already have written to
//! an external system. The middleware must then leave an External record
//! **Unknown** — a retry gets 409 `outcome-uncertain`, never a silent second
//! execution — and a Local record Released. Neither case may leave the record as
//! if nothing happened. By default (`OnDisconnect::Finish`) a dropped request does
//! not stop the handler: it finishes, its response is recorded, the retry replays.
//! A handler that declared `Execution::sent_downstream` (a proxy) leaves even a
//! Local record Unknown when its answer fails, and `Executions` counts the
//! executions that outlive their client until they record.
#![cfg(feature = "axum")]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use http::{Request, Response};
use idemkit::core::record::{EffectKind, StateName};
use idemkit::http::{Execution, Executions, IdempotencyLayer, OnDisconnect, RouteConfig};
use idemkit::store::Store;
use idemkit::{IdempotencyKey, Scope};
use tower::{Layer, ServiceExt};

const OP: &str = "payments.create";

fn req(key: &str) -> Request<Body> {
    Request::post("/p")
        .header("idempotency-key", key)
        .body(Body::from("{}"))
        .unwrap()
}

fn route(effect: EffectKind) -> RouteConfig {
    RouteConfig::new(OP, effect).principal(|_| Some("t".to_owned()))
}

async fn state_eventually(store: &Store, key: &str, want: StateName) {
    let scope = Scope::new("t", OP).unwrap();
    let key = IdempotencyKey::new(key).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = store.get(&scope, &key).unwrap().map(|r| r.state.name());
        if state == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "record state {state:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A handler that counts its calls and starts step `charge` (as a handler would
/// right before calling the payment provider), then goes on with `then`.
fn charging<F, Fut>(
    calls: Arc<AtomicUsize>,
    then: F,
) -> impl tower::Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Send,
> + Clone
+ Send
+ 'static
where
    F: Fn(usize, Execution) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Response<Body>> + Send,
{
    tower::service_fn(move |request: Request<Body>| {
        let (calls, then) = (Arc::clone(&calls), then.clone());
        async move {
            let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
            let exec = request.extensions().get::<Execution>().cloned().unwrap();
            let _ = exec.begin_step("charge", "pk-1").await.unwrap();
            Ok::<_, Infallible>(then(call, exec).await)
        }
    })
}

/// Panics after the provider call.
async fn panics(_: usize, _: Execution) -> Response<Body> {
    panic!("handler bug after the provider call")
}

/// Never finishes (a provider that does not answer).
async fn hangs(_: usize, _: Execution) -> Response<Body> {
    std::future::pending().await
}

/// Takes 800 ms at the provider, then answers 201 `charge <call number>`.
async fn slow_charge(call: usize, exec: Execution) -> Response<Body> {
    tokio::time::sleep(Duration::from_millis(800)).await;
    charges(call, exec).await
}

/// Answers 201 `charge <call number>` at once, the provider's reference recorded.
async fn charges(call: usize, exec: Execution) -> Response<Body> {
    exec.complete_step("charge", Some("ch_1".into()))
        .await
        .unwrap();
    Response::builder()
        .status(201)
        .body(Body::from(format!("charge {call}")))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_panic_leaves_external_unknown() {
    let store = idemkit::in_memory().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = IdempotencyLayer::new(store.clone(), route(EffectKind::External))
        .layer(charging(Arc::clone(&calls), panics));

    let joined = tokio::spawn(svc.clone().oneshot(req("p1"))).await;
    assert!(
        joined.unwrap_err().is_panic(),
        "the panic propagates to the server"
    );
    state_eventually(&store, "p1", StateName::Unknown).await;

    let retry = svc.oneshot(req("p1")).await.unwrap();
    assert_eq!(retry.status(), 409, "outcome-uncertain, not a re-execution");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_panic_releases_local() {
    let store = idemkit::in_memory().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = IdempotencyLayer::new(store.clone(), route(EffectKind::Local))
        .layer(charging(Arc::clone(&calls), panics));
    let joined = tokio::spawn(svc.oneshot(req("p2"))).await;
    assert!(joined.unwrap_err().is_panic());
    state_eventually(&store, "p2", StateName::Released).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_request_leaves_external_unknown() {
    let store = idemkit::in_memory().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let route = route(EffectKind::External).on_disconnect(OnDisconnect::Cancel);
    let svc =
        IdempotencyLayer::new(store.clone(), route).layer(charging(Arc::clone(&calls), hangs));

    // The client disconnects: the server drops the request's future.
    let cut =
        tokio::time::timeout(Duration::from_millis(300), svc.clone().oneshot(req("d1"))).await;
    assert!(cut.is_err(), "the handler was still running");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    state_eventually(&store, "d1", StateName::Unknown).await;

    let retry = svc.oneshot(req("d1")).await.unwrap();
    assert_eq!(retry.status(), 409);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "never re-executed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_request_releases_local() {
    let store = idemkit::in_memory().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let route = route(EffectKind::Local).on_disconnect(OnDisconnect::Cancel);
    let svc =
        IdempotencyLayer::new(store.clone(), route).layer(charging(Arc::clone(&calls), hangs));
    let cut = tokio::time::timeout(Duration::from_millis(300), svc.oneshot(req("d2"))).await;
    assert!(cut.is_err());
    state_eventually(&store, "d2", StateName::Released).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_request_finishes_by_default_and_the_retry_replays() {
    let store = idemkit::in_memory().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = IdempotencyLayer::new(store.clone(), route(EffectKind::External))
        .layer(charging(Arc::clone(&calls), slow_charge));

    // The client's timeout fires long before the provider answers.
    let cut =
        tokio::time::timeout(Duration::from_millis(200), svc.clone().oneshot(req("f1"))).await;
    assert!(cut.is_err(), "the handler was still running");

    let early = svc.clone().oneshot(req("f1")).await.unwrap();
    assert_eq!(early.status(), 409, "request-in-progress while it finishes");
    assert!(early.headers().contains_key("retry-after"));

    state_eventually(&store, "f1", StateName::Completed).await;
    let retry = svc.oneshot(req("f1")).await.unwrap();
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    let body = axum::body::to_bytes(retry.into_body(), 1024).await.unwrap();
    assert_eq!(&body[..], b"charge 1", "the first execution's response");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "executed once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_dropped_while_claiming_still_executes_by_default() {
    let store = idemkit::in_memory().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = IdempotencyLayer::new(store.clone(), route(EffectKind::External))
        .layer(charging(Arc::clone(&calls), slow_charge));

    // Polled once, then dropped once the claim is written (its answer waits,
    // unread): the client went away before the handler could start.
    let mut request = Box::pin(svc.clone().oneshot(req("c1")));
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(request.as_mut().poll(cx))).await;
    assert!(first.is_pending());
    state_eventually(&store, "c1", StateName::Running).await;
    drop(request);

    // A claim left unexecuted would read as Unknown; the claim and the
    // execution belong to one detached task instead.
    state_eventually(&store, "c1", StateName::Completed).await;
    let retry = svc.oneshot(req("c1")).await.unwrap();
    assert_eq!(retry.status(), 201);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// A claim that does not execute is answered in the request's own task: a
/// replay costs no hop to another thread and back. (The handler runs on a task
/// of its own, and a request dropped before its end hands the rest to a task
/// too: the two tests above.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_is_answered_in_the_request_task() {
    let store = idemkit::in_memory().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let asked_in = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&asked_in);
    let route = RouteConfig::new(OP, EffectKind::External).principal(move |_| {
        seen.lock().unwrap().push(tokio::task::try_id());
        Some("t".to_owned())
    });
    let svc = IdempotencyLayer::new(store, route).layer(charging(Arc::clone(&calls), charges));
    let first = svc.clone().oneshot(req("own-task")).await.unwrap();
    assert_eq!(first.status(), 201);
    let (request_task, replay) = tokio::spawn(async move {
        let response = svc.oneshot(req("own-task")).await.unwrap();
        (tokio::task::id(), response)
    })
    .await
    .unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        asked_in.lock().unwrap().last().copied().flatten(),
        Some(request_task),
        "the replay's principal was asked in the task that awaited the request"
    );
}

/// 128 KiB of an answer, then a failure: the connection it was read from broke.
struct FailsMidway {
    sent: bool,
}

impl http_body::Body for FailsMidway {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, std::io::Error>>> {
        if self.sent {
            return std::task::Poll::Ready(Some(Err(std::io::Error::other("connection reset"))));
        }
        self.sent = true;
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(bytes::Bytes::from(
            vec![b'x'; 128 * 1024],
        )))))
    }
}

/// Answers 200 with a body that fails after 128 KiB, having declared (or not)
/// that its request went to a system it cannot see.
fn answers_then_fails(
    sent_downstream: bool,
) -> impl tower::Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |request: Request<Body>| async move {
        let exec = request.extensions().get::<Execution>().cloned().unwrap();
        if sent_downstream {
            exec.sent_downstream();
        }
        Ok::<_, Infallible>(Response::new(Body::new(FailsMidway { sent: false })))
    })
}

/// A response body that fails after its head went out (a long answer streams)
/// settles the attempt as a panic would: a Local record is released, since its
/// transaction rolled back — unless the handler declared that its request went
/// downstream, where nobody can see whether it committed: then it is Unknown.
/// Either way the client's response is cut off, never finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_that_fails_is_unknown_once_the_request_was_sent_downstream() {
    for (sent, key, want) in [
        (false, "s1", StateName::Released),
        (true, "s2", StateName::Unknown),
    ] {
        let store = idemkit::in_memory().unwrap();
        let svc = IdempotencyLayer::new(store.clone(), route(EffectKind::Local))
            .layer(answers_then_fails(sent));
        let response = svc.oneshot(req(key)).await.unwrap();
        assert_eq!(
            response.status(),
            200,
            "the head went out before the body ended"
        );
        let read = axum::body::to_bytes(response.into_body(), usize::MAX).await;
        assert!(read.is_err(), "cut off, never a whole answer");
        state_eventually(&store, key, want).await;
    }
}

/// By default an execution outlives its client, so a server that waits only for
/// its connections at shutdown would cut it off. `Executions` counts it, with
/// its log reference, until its outcome is recorded; `idle` waits for that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executions_count_a_detached_execution_until_it_records() {
    let store = idemkit::in_memory().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let executions = Arc::new(Executions::new());
    let route = route(EffectKind::External).executions(Arc::clone(&executions));
    let svc = IdempotencyLayer::new(store.clone(), route)
        .layer(charging(Arc::clone(&calls), slow_charge));
    let cut = tokio::time::timeout(Duration::from_millis(200), svc.oneshot(req("e1"))).await;
    assert!(cut.is_err(), "the client left while it ran");
    let log_ref = Scope::new("t", OP)
        .unwrap()
        .record_id(&IdempotencyKey::new("e1").unwrap())
        .log_ref();
    assert_eq!(executions.log_refs(), [log_ref]);
    tokio::time::timeout(Duration::from_secs(10), executions.idle())
        .await
        .expect("idle once recorded");
    assert!(executions.is_empty());
    let record = store
        .get(
            &Scope::new("t", OP).unwrap(),
            &IdempotencyKey::new("e1").unwrap(),
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        record.state.name(),
        StateName::Completed,
        "recorded by then"
    );
}
