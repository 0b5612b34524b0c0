//! A retry of a running request that asks to wait (`Prefer: wait=N`) is held
//! until the first attempt's answer exists, instead of getting 409 and
//! polling (docs/architecture.md, "HTTP contract"):
//!
//! - a hundred retries during a 3-second execution get its stored 201 as soon
//!   as it is recorded, and nothing reads the store while they wait;
//! - a released first attempt wakes its waiter, which executes once;
//! - an Unknown outcome wakes its waiter with the unknown answer;
//! - a wait that runs out gets 409 with `Retry-After`; a changed body is
//!   refused at once; a route may wait by default; past the cap, 503;
//! - a waiter whose client goes away leaves nothing behind.
#![cfg(feature = "axum")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use axum::routing::post;
use http::Request;
use http_body_util::BodyExt;
use idemkit::RecordId;
use idemkit::adapters::{
    Adapter, AdapterError, Read, Scan, ScanPage, Stored, Version, memory::MemoryAdapter,
};
use idemkit::core::record::{EffectKind, Record};
use idemkit::http::{IdempotencyLayer, Metrics, RouteConfig};
use idemkit::store::{Store, WaitLimits};
use tokio::sync::Notify;
use tower::ServiceExt;

/// The redb adapter under a log of when it was read: a waiter that polled
/// would show up here.
#[derive(Debug)]
struct CountingReads {
    inner: Arc<dyn Adapter>,
    reads: std::sync::Mutex<Vec<Instant>>,
    /// Whether it says it is held alone (else: as the adapter under it says).
    alone: bool,
}

impl Adapter for CountingReads {
    fn get(&self, id: &RecordId) -> Result<Read, AdapterError> {
        self.reads.lock().unwrap().push(Instant::now());
        self.inner.get(id)
    }
    fn insert(&self, id: &RecordId, record: &Record) -> Result<Option<Version>, AdapterError> {
        self.inner.insert(id, record)
    }
    fn update(
        &self,
        id: &RecordId,
        read: &Stored,
        next: &Record,
    ) -> Result<Option<Version>, AdapterError> {
        self.inner.update(id, read, next)
    }
    fn delete(&self, id: &RecordId, read: &Stored) -> Result<bool, AdapterError> {
        self.inner.delete(id, read)
    }
    fn scan(&self, scan: &Scan) -> Result<ScanPage, AdapterError> {
        self.inner.scan(scan)
    }
    fn may_block(&self) -> bool {
        self.inner.may_block()
    }
    fn held_alone(&self) -> bool {
        self.alone && self.inner.held_alone()
    }
}

/// A route whose handler counts its runs, says when it started, sleeps
/// `runs_for` and answers 201 (or `first_status` on its first run).
struct Service {
    app: Router,
    store: Store,
    runs: Arc<AtomicUsize>,
    started: Arc<Notify>,
    finished_at: Arc<std::sync::Mutex<Option<Instant>>>,
}

fn service(store: Store, route: RouteConfig, runs_for: Duration, first_status: u16) -> Service {
    let runs = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(Notify::new());
    let finished_at = Arc::new(std::sync::Mutex::new(None));
    let (r, s, f) = (
        Arc::clone(&runs),
        Arc::clone(&started),
        Arc::clone(&finished_at),
    );
    let handler = move || {
        let (runs, started, finished_at) = (Arc::clone(&r), Arc::clone(&s), Arc::clone(&f));
        async move {
            let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
            started.notify_one();
            tokio::time::sleep(runs_for).await;
            *finished_at.lock().unwrap() = Some(Instant::now());
            let status = if run == 1 { first_status } else { 201 };
            (
                StatusCode::from_u16(status).unwrap(),
                format!("{{\"booking\":{run}}}"),
            )
        }
    };
    let app = Router::new().route(
        "/book",
        post(handler).route_layer(IdempotencyLayer::new(store.clone(), route)),
    );
    Service {
        app,
        store,
        runs,
        started,
        finished_at,
    }
}

fn route(effect: EffectKind) -> RouteConfig {
    RouteConfig::new("appointments.create", effect).principal(|_| Some("t".to_owned()))
}

fn request(key: &str, body: &str, wait: Option<&str>) -> Request<Body> {
    let mut builder = Request::post("/book")
        .header("idempotency-key", key)
        .header("content-type", "application/json");
    if let Some(wait) = wait {
        builder = builder.header("prefer", wait);
    }
    builder.body(Body::from(body.to_owned())).unwrap()
}

#[derive(Debug)]
struct Got {
    status: u16,
    headers: http::HeaderMap,
    body: String,
    at: Instant,
}

async fn send(app: &Router, request: Request<Body>) -> Got {
    let response = app.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Got {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        at: Instant::now(),
    }
}

fn header<'a>(got: &'a Got, name: &str) -> Option<&'a str> {
    got.headers.get(name).and_then(|v| v.to_str().ok())
}

fn problem_type(got: &Got) -> String {
    let json: serde_json::Value = serde_json::from_str(&got.body).unwrap_or_default();
    json["type"].as_str().unwrap_or_default().to_owned()
}

/// Sends the first attempt of `key` in the background and returns once its
/// handler runs: every later request with the key finds it Running.
async fn first_attempt(
    svc: &Service,
    key: &'static str,
    body: &'static str,
) -> tokio::task::JoinHandle<Got> {
    let app = svc.app.clone();
    let first = tokio::spawn(async move { send(&app, request(key, body, None)).await });
    svc.started.notified().await;
    first
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < give_up, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_hundred_retries_wait_for_one_execution_and_get_its_stored_answer() {
    let dir = tempfile::tempdir().unwrap();
    let redb = idemkit::open(dir.path().join("waits.redb")).unwrap();
    let counting = Arc::new(CountingReads {
        inner: Arc::clone(redb.adapter()),
        reads: std::sync::Mutex::default(),
        alone: true,
    });
    let store = Store::new(Arc::clone(&counting) as Arc<dyn Adapter>);
    let svc = service(
        store,
        route(EffectKind::External),
        Duration::from_secs(3),
        201,
    );
    let body = r#"{"slot":"09:00"}"#;

    let first = first_attempt(&svc, "k-100", body).await;
    let retries: Vec<_> = (0..100)
        .map(|_| {
            let app = svc.app.clone();
            tokio::spawn(async move { send(&app, request("k-100", body, Some("wait=10"))).await })
        })
        .collect();
    until("all 100 retries wait", || svc.store.waiting() == 100).await;
    // Each read the store once more after registering (so that no completion
    // slips between its claim and its wait): let those reads finish.
    tokio::time::sleep(Duration::from_millis(200)).await;

    // From here to the completion nobody may touch the store or the CPU (the
    // test's current-thread runtime runs every task of the service on this
    // thread, so this thread's CPU time is the service's).
    let (cpu_before, wall_before) = (
        crate::support::cpu_ticks("/proc/thread-self/stat"),
        Instant::now(),
    );
    until("the handler finished", || {
        svc.finished_at.lock().unwrap().is_some()
    })
    .await;
    let (cpu_during, wall_during) = (
        crate::support::cpu_ticks("/proc/thread-self/stat") - cpu_before,
        wall_before.elapsed(),
    );
    let finished = svc.finished_at.lock().unwrap().unwrap();
    let reads_during = counting
        .reads
        .lock()
        .unwrap()
        .iter()
        .filter(|&&at| at >= wall_before && at < finished)
        .count();

    let first = first.await.unwrap();
    assert_eq!(first.status, 201, "{}", first.body);
    let mut slowest = Duration::ZERO;
    for retry in retries {
        let got = retry.await.unwrap();
        assert_eq!(got.status, 201, "{}", got.body);
        assert_eq!(got.body, first.body);
        assert_eq!(header(&got, "idempotent-replayed"), Some("true"));
        assert_eq!(header(&got, "preference-applied"), Some("wait=10"));
        slowest = slowest.max(got.at.duration_since(finished));
    }
    assert_eq!(svc.runs.load(Ordering::SeqCst), 1, "one execution");
    assert_eq!(svc.store.waiting(), 0);
    // Clock ticks are 10 ms: a busy poll over ~3 s would cost far more.
    let cpu_ms = cpu_during * 10;
    eprintln!(
        "100 waiters: {reads_during} store reads and {cpu_ms} ms of CPU over {wall_during:?} of waiting; \
         the slowest answer came {slowest:?} after the handler returned"
    );
    assert_eq!(reads_during, 0, "waiters read the store while waiting");
    assert!(
        Duration::from_millis(cpu_ms) < wall_during / 10,
        "{cpu_ms} ms of CPU over {wall_during:?} of waiting"
    );
    assert!(
        slowest < Duration::from_millis(100),
        "the slowest retry was answered {slowest:?} after the handler returned"
    );
}

#[tokio::test]
async fn a_released_first_attempt_wakes_its_waiter_which_executes_once() {
    // A Local route's 503 releases the claim: nothing was recorded.
    let svc = service(
        idemkit::in_memory().unwrap(),
        route(EffectKind::Local),
        Duration::from_millis(300),
        503,
    );
    let body = r#"{"slot":"10:00"}"#;
    let first = first_attempt(&svc, "k-rel", body).await;
    let waiter = send(&svc.app, request("k-rel", body, Some("wait=5"))).await;
    assert_eq!(first.await.unwrap().status, 503);
    assert_eq!(waiter.status, 201, "{}", waiter.body);
    assert_eq!(header(&waiter, "idempotent-replayed"), None, "it executed");
    assert_eq!(header(&waiter, "preference-applied"), Some("wait=5"));
    assert_eq!(svc.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_unknown_outcome_wakes_its_waiter_with_the_unknown_answer() {
    // An External route's 503 after running may have had its effect: Unknown.
    let svc = service(
        idemkit::in_memory().unwrap(),
        route(EffectKind::External),
        Duration::from_millis(300),
        503,
    );
    let body = r#"{"slot":"10:30"}"#;
    let first = first_attempt(&svc, "k-unk", body).await;
    let started = Instant::now();
    let waiter = send(&svc.app, request("k-unk", body, Some("wait=5"))).await;
    first.await.unwrap();
    assert_eq!(waiter.status, 409, "{}", waiter.body);
    assert!(problem_type(&waiter).ends_with("/outcome-uncertain"));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "woken, not timed out"
    );
    assert_eq!(svc.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_wait_that_runs_out_gets_409_with_retry_after() {
    let metrics = Arc::new(Metrics::new());
    let svc = service(
        idemkit::in_memory().unwrap(),
        route(EffectKind::External).metrics(Arc::clone(&metrics)),
        Duration::from_secs(3),
        201,
    );
    let body = r#"{"slot":"11:00"}"#;
    let first = first_attempt(&svc, "k-out", body).await;
    let started = Instant::now();
    let waiter = send(&svc.app, request("k-out", body, Some("wait=1"))).await;
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(waiter.status, 409, "{}", waiter.body);
    assert!(problem_type(&waiter).ends_with("/request-in-progress"));
    assert!(header(&waiter, "retry-after").is_some());
    assert_eq!(header(&waiter, "preference-applied"), Some("wait=1"));
    assert_eq!(first.await.unwrap().status, 201);
    assert_eq!(svc.runs.load(Ordering::SeqCst), 1);
    let text = metrics.render();
    assert!(
        text.contains(
            r#"idemkit_waits_total{operation="appointments.create",ended="timed_out"} 1"#
        ),
        "{text}"
    );
}

#[tokio::test]
async fn a_changed_body_is_refused_at_once_without_waiting() {
    let svc = service(
        idemkit::in_memory().unwrap(),
        route(EffectKind::External),
        Duration::from_secs(3),
        201,
    );
    let first = first_attempt(&svc, "k-mis", r#"{"slot":"12:00"}"#).await;
    let started = Instant::now();
    let changed = send(
        &svc.app,
        request("k-mis", r#"{"slot":"13:00"}"#, Some("wait=10")),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(changed.status, 422, "{}", changed.body);
    assert_eq!(header(&changed, "preference-applied"), None);
    assert_eq!(svc.store.waiting(), 0);
    first.await.unwrap();
}

#[tokio::test]
async fn a_route_may_wait_by_default_and_cap_what_is_asked() {
    let svc = service(
        idemkit::in_memory().unwrap(),
        route(EffectKind::External)
            .wait(Duration::from_secs(5))
            .max_wait(Duration::from_secs(2)),
        Duration::from_millis(300),
        201,
    );
    let body = r#"{"slot":"14:00"}"#;
    let first = first_attempt(&svc, "k-def", body).await;
    let unasked = send(&svc.app, request("k-def", body, None)).await;
    assert_eq!(unasked.status, 201, "{}", unasked.body);
    assert_eq!(header(&unasked, "idempotent-replayed"), Some("true"));
    assert_eq!(
        header(&unasked, "preference-applied"),
        None,
        "nothing asked"
    );
    first.await.unwrap();

    // A request asking more than the cap is granted the cap.
    let second = first_attempt(&svc, "k-cap", r#"{"slot":"15:00"}"#).await;
    let asked = send(
        &svc.app,
        request("k-cap", r#"{"slot":"15:00"}"#, Some("wait=60")),
    )
    .await;
    assert_eq!(header(&asked, "preference-applied"), Some("wait=2"));
    second.await.unwrap();
}

#[tokio::test]
async fn past_the_cap_a_retry_gets_503_too_many_waiters() {
    let store = idemkit::in_memory().unwrap();
    store.set_wait_limits(WaitLimits {
        per_key: 2,
        total: 100,
    });
    let svc = service(
        store,
        route(EffectKind::External),
        Duration::from_secs(2),
        201,
    );
    let body = r#"{"slot":"16:00"}"#;
    let first = first_attempt(&svc, "k-cap2", body).await;
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let app = svc.app.clone();
            tokio::spawn(async move { send(&app, request("k-cap2", body, Some("wait=10"))).await })
        })
        .collect();
    until("two wait", || svc.store.waiting() == 2).await;
    let third = send(&svc.app, request("k-cap2", body, Some("wait=10"))).await;
    assert_eq!(third.status, 503, "{}", third.body);
    assert!(problem_type(&third).ends_with("/too-many-waiters"));
    assert!(header(&third, "retry-after").is_some());
    first.await.unwrap();
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap().status, 201);
    }
    assert_eq!(svc.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_waiter_whose_client_goes_away_leaves_nothing_behind() {
    let svc = service(
        Store::from(MemoryAdapter::default()),
        route(EffectKind::External).max_wait(Duration::from_secs(60)),
        Duration::from_secs(2),
        201,
    );
    let body = r#"{"slot":"17:00"}"#;
    let first = first_attempt(&svc, "k-gone", body).await;
    // hyper drops the request's future when its client disconnects.
    let app = svc.app.clone();
    let waiter =
        tokio::spawn(async move { send(&app, request("k-gone", body, Some("wait=60"))).await });
    until("it waits", || svc.store.waiting() == 1).await;
    waiter.abort();
    // The wait is the request's own future: nothing else was spawned for it,
    // so dropping it is all it takes.
    assert!(waiter.await.unwrap_err().is_cancelled());
    // Well before its 60 s wait would have ended.
    until("its slot is freed", || svc.store.waiting() == 0).await;
    assert_eq!(first.await.unwrap().status, 201);
    assert_eq!(svc.runs.load(Ordering::SeqCst), 1);
}

/// Two services over one database that neither holds alone (two processes
/// sharing a redb file, or PostgreSQL with its notification connection down):
/// the completion on one wakes nobody on the other, so a retry held there
/// reads the record again on the fallback poll (50 ms doubling to 1 s) and
/// is answered within about a second of the completion.
#[tokio::test]
async fn where_nothing_can_wake_a_waiter_the_fallback_poll_answers_it() {
    // One database, two processes' views of it: each its own adapter.
    let database: Arc<dyn Adapter> = Arc::new(MemoryAdapter::default());
    let view = || {
        Arc::new(CountingReads {
            inner: Arc::clone(&database),
            reads: std::sync::Mutex::default(),
            alone: false,
        })
    };
    let (view_one, view_other) = (view(), view());
    let one = service(
        Store::new(Arc::clone(&view_one) as Arc<dyn Adapter>),
        route(EffectKind::External),
        Duration::from_millis(1_500),
        201,
    );
    let other = service(
        Store::new(Arc::clone(&view_other) as Arc<dyn Adapter>),
        route(EffectKind::External),
        Duration::from_millis(1_500),
        201,
    );
    assert!(!other.store.waits_are_woken());
    let body = r#"{"slot":"18:00"}"#;
    let first = first_attempt(&one, "k-poll", body).await;
    let waiter = send(&other.app, request("k-poll", body, Some("wait=10"))).await;
    let original = first.await.unwrap();
    assert_eq!(original.status, 201);
    assert_eq!(waiter.status, 201, "{}", waiter.body);
    assert_eq!(header(&waiter, "idempotent-replayed"), Some("true"));
    let finished = one.finished_at.lock().unwrap().unwrap();
    let lag = waiter.at.duration_since(finished);
    let polls = view_other.reads.lock().unwrap().len();
    eprintln!("answered by polling ({polls} reads) {lag:?} after the handler returned");
    assert!(polls >= 3, "the waiter read the record {polls} times");
    assert!(lag < Duration::from_millis(1_500), "{lag:?}");
    assert_eq!(
        one.runs.load(Ordering::SeqCst) + other.runs.load(Ordering::SeqCst),
        1
    );
}
