//! `idemkit proxy --config FILE`: docs/architecture.md's HTTP contract in front of any HTTP
//! API. Each configured route is the axum middleware (`IdempotencyLayer`) around
//! a forwarder to the upstream; every other request streams through untouched.
//! See docs/proxy.md and examples/proxy.toml.

pub(crate) mod access_log;
pub(crate) mod admin;
pub(crate) mod config;
pub(crate) mod forward;
mod limits;
mod paths;
pub(crate) mod tenant;
pub(crate) mod upstream_tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use clap::Args;
use http::{HeaderValue, Request, StatusCode, header};
use idemkit::core::record::EffectKind;
use idemkit::http::{
    Executions, Idempotency, IdempotencyLayer, KeyRequirement, Metrics, RouteConfig,
};
use idemkit::store::Store;

use crate::exit;
use access_log::AccessLog;
use config::{ProxyConfig, StoreChoice, TenantRule};
use forward::{Forward, Forwarder, Upstream, problem};
use limits::{Connections, Slot};
use paths::{Refusal, Resolved, RouteTable};

/// Serve docs/architecture.md's idempotency contract in front of an HTTP API.
///
/// The routes in the config file (method + path template) get the whole
/// contract: a key is claimed before the request goes upstream, the answer is
/// recorded and replayed, a changed request is refused (422), a retry while the
/// first is running gets 409, and an upstream that may have acted without
/// answering (timeout, lost connection, stalled body) leaves the record unknown
/// instead of sending again. A variant of a route's path (a trailing `/`, `//`,
/// dot segments, `;` parameters, letter case, encoded letters) is the route.
/// Everything else passes through, streamed.
///
/// SIGTERM or SIGINT: stop accepting, wait up to `shutdown_grace_ms` for every
/// running execution (whether its client still waits or not) to record, then
/// exit 0; what is still running then is named and left to its lease's expiry
/// (exit 75). A bad config file exits 64 with the file, line and what is wrong.
///
/// Examples:
///   idemkit proxy --config examples/proxy.toml
///   idemkit proxy --config proxy.toml --listen 0.0.0.0:8081 --upstream http://127.0.0.1:9000
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct ProxyArgs {
    /// The TOML configuration (see examples/proxy.toml).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Overrides `listen` from the file.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Overrides `upstream` from the file.
    #[arg(long, value_name = "URL")]
    upstream: Option<String>,
}

pub(crate) fn run(args: &ProxyArgs) -> ExitCode {
    let config = match config::load(
        &args.config,
        args.listen.as_deref(),
        args.upstream.as_deref(),
    ) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("idemkit proxy: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let store = match open_store(&config.store) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("idemkit proxy: {e}");
            return ExitCode::from(exit::UNAVAILABLE);
        }
    };
    store.set_wait_limits(config.wait_limits);
    let workers = config.workers.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    match serve(config, store, workers) {
        Ok(Stopped::AllRecorded) => {
            eprintln!("idemkit proxy: stopped; every running execution recorded its outcome");
            ExitCode::SUCCESS
        }
        Ok(Stopped::GraceOver { grace, left }) => {
            let names: Vec<String> = left.iter().map(ToString::to_string).collect();
            eprintln!(
                "idemkit proxy: stopped after the {} ms grace period; {} running execution(s) \
                 had not recorded and are left to their lease's expiry (a retry gets 409 until \
                 then; a proxy that next opens this redb file settles them as unknown at once): {}",
                grace.as_millis(),
                names.len(),
                names.join(", ")
            );
            // Straight out: the running executions' guards must not be dropped
            // (that would record them as if they had failed); their records
            // stay Running until the lease expires, as after a crash.
            std::process::exit(i32::from(exit::TEMP_FAIL));
        }
        Err(e) => {
            eprintln!("idemkit proxy: {e}");
            ExitCode::from(exit::IO_ERR)
        }
    }
}

/// Opens the configured store.
pub(crate) fn open_store(choice: &StoreChoice) -> Result<Store, String> {
    match choice {
        StoreChoice::Redb(path) => {
            let store =
                idemkit::open(path).map_err(|e| format!("store {}: {e}", path.display()))?;
            // The file is this process's alone: what a crashed proxy left
            // running was settled at open (dispatched requests are Unknown
            // now, so their retries are told so at once).
            for orphan in store.orphans_settled_at_open() {
                eprintln!(
                    "idemkit: {} ({}) was left running by a previous process; now {:?}",
                    orphan.log_ref, orphan.operation, orphan.became
                );
            }
            Ok(store)
        }
        #[cfg(feature = "postgres")]
        StoreChoice::Postgres {
            url,
            schema,
            pool_size,
        } => {
            let defaults = idemkit::adapters::postgres::PgOptions::default();
            let options = idemkit::adapters::postgres::PgOptions {
                schema: schema.clone(),
                pool_size: pool_size.unwrap_or(defaults.pool_size),
                ..defaults
            };
            idemkit::adapters::postgres::PostgresAdapter::connect_with(url, options)
                .map(Store::from)
                .map_err(|e| format!("store postgres: {e}"))
        }
        #[cfg(not(feature = "postgres"))]
        StoreChoice::Postgres { .. } => {
            Err("[store] postgres needs an idemkit built with the `postgres` feature".to_owned())
        }
    }
}

/// One configured route's service: its idempotency layer around a forwarder.
type RouteService = Idempotency<Forwarder>;

/// The configured routes' services, in configuration order (the route
/// table's indexes), all forwarding through `upstream` (a worker's pool).
fn route_services(shared: &Shared, upstream: &Upstream) -> Vec<RouteService> {
    let config = &shared.config;
    config
        .routes
        .iter()
        .map(|route| {
            // Behind a proxy nobody sees the upstream's transaction: every
            // claim is recorded as External, so a claim whose proxy died (or
            // whose answer never came) is unresolved, never taken over and
            // sent again. A Local route's answers keep its own rules (below).
            let claimed = route.policy.with_effect(EffectKind::External);
            let mut rc = RouteConfig::new(route.operation.clone(), EffectKind::External)
                .fingerprint(route.spec.clone())
                .policy(claimed)
                .principal(tenant::principal(&config.tenant))
                .key(if route.required {
                    KeyRequirement::Required
                } else {
                    KeyRequirement::Optional
                })
                .owner(format!("proxy:{}", std::process::id()))
                .metrics(Arc::clone(&shared.metrics))
                .executions(Arc::clone(&shared.executions))
                .on_disconnect(route.on_disconnect);
            if let Some(limit) = route.max_execution {
                rc = rc.max_execution(limit);
            }
            if let Some(wait) = route.wait {
                rc = rc.wait(wait);
            }
            if let Some(limit) = route.max_wait {
                rc = rc.max_wait(limit);
            }
            if let Some(bytes) = route.max_stored_response_bytes {
                rc = rc.max_stored_response_bytes(bytes);
            }
            if let Some(list) = &route.replayed_headers {
                rc = rc.replayed_headers(list.clone());
            }
            if let Some(bytes) = route.body_limit {
                rc = rc.body_limit(bytes);
            }
            if let Some(after) = route.store_retry_after {
                rc = rc.store_retry_after(after);
            }
            let forward = Forwarder(Arc::new(Forward {
                upstream: upstream.clone(),
                timeouts: route.timeouts,
                forward_key: route.forward_key,
                answers_as: (route.effect == EffectKind::Local).then_some(route.policy),
            }));
            tower::Layer::layer(&IdempotencyLayer::new(shared.store.clone(), rc), forward)
        })
        .collect()
}

/// What a worker's connections dispatch to.
#[derive(Clone)]
struct Entry {
    /// Which route a request is (path variants included).
    table: Arc<RouteTable>,
    /// Each configured route behind its idempotency layer, by table index.
    routes: Arc<Vec<RouteService>>,
    passthrough: Arc<Forward>,
    tenant: Arc<TenantRule>,
    request_body_idle: Duration,
    /// The listener serves HTTPS: the upstream is told so
    /// (`X-Forwarded-Proto`).
    over_tls: bool,
    /// Each configured route's operation, by table index (for the access log).
    operations: Arc<Vec<String>>,
    access_log: Option<AccessLog>,
}

/// One accepted connection: the entry, the caller's address, and its place
/// among the open connections.
#[derive(Clone)]
struct Connection {
    entry: Entry,
    peer: SocketAddr,
    slot: Arc<Slot>,
}

type Answer = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<axum::response::Response, std::convert::Infallible>>
            + Send,
    >,
>;

fn answer(response: axum::response::Response) -> Answer {
    Box::pin(std::future::ready(Ok(response)))
}

impl tower::Service<Request<Body>> for Connection {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = Answer;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let Some(log) = self.entry.access_log.clone() else {
            return self.dispatch(request).1;
        };
        let arrived = access_log::Arrived::of(&request, self.peer);
        let (route, answered) = self.dispatch(request);
        let operations = Arc::clone(&self.entry.operations);
        Box::pin(async move {
            let response = answered.await;
            if let Ok(response) = &response {
                let operation = route.and_then(|i| operations.get(i)).map(String::as_str);
                log.answered(&arrived, operation, response);
            }
            response
        })
    }
}

impl Connection {
    /// Answers `request`; with the index of the configured route it is, if
    /// it is one.
    fn dispatch(&mut self, request: Request<Body>) -> (Option<usize>, Answer) {
        if !self.slot.within_cap {
            return (None, answer(too_many_connections()));
        }
        let mut request = limits::with_body_idle_timeout(request, self.entry.request_body_idle);
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(self.peer));
        if self.entry.over_tls {
            request.extensions_mut().insert(forward::OverTls);
        }
        match self
            .entry
            .table
            .resolve(request.method(), request.uri().path())
        {
            Resolved::PassThrough => {
                let passthrough = Arc::clone(&self.entry.passthrough);
                (
                    None,
                    Box::pin(async move { Ok(passthrough.send(request).await) }),
                )
            }
            Resolved::Refused(refusal) => (None, answer(refused_path(&refusal))),
            Resolved::Route { index, path } => {
                let route = Some(index);
                if tenant::repeated(&self.entry.tenant, request.headers()) {
                    return (
                        route,
                        answer(problem(
                            StatusCode::BAD_REQUEST,
                            "ambiguous-tenant",
                            "The tenant header was sent more than once",
                            "The request names its tenant twice; send the tenant's header once. \
                         Nothing was executed.",
                        )),
                    );
                }
                if path != request.uri().path() {
                    match normalized_uri(request.uri(), &path) {
                        Some(uri) => *request.uri_mut() = uri,
                        None => return (route, answer(refused_path(&Refusal::Ambiguous))),
                    }
                }
                let Some(service) = self.entry.routes.get(index).cloned() else {
                    return (route, answer(refused_path(&Refusal::Ambiguous)));
                };
                (
                    route,
                    Box::pin(async move { tower::ServiceExt::oneshot(service, request).await }),
                )
            }
        }
    }
}

/// `uri` with its path replaced by `path` (its query kept).
fn normalized_uri(uri: &http::Uri, path: &str) -> Option<http::Uri> {
    let path_and_query = match uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    };
    http::Uri::try_from(path_and_query).ok()
}

fn refused_path(refusal: &Refusal) -> axum::response::Response {
    match refusal {
        Refusal::Ambiguous => problem(
            StatusCode::BAD_REQUEST,
            "ambiguous-path",
            "The request path is ambiguous",
            "The path holds an encoded `/` or `\\`, a NUL or a malformed escape, and one way \
             of reading it is an idempotent route: routers disagree on such paths, so it is \
             refused rather than forwarded. Nothing was executed.",
        ),
        Refusal::Variant { canonical } => problem(
            StatusCode::BAD_REQUEST,
            "non-canonical-path",
            "The request path is a variant of an idempotent route",
            &format!(
                "This route accepts only its own spelling of the path: send it to {canonical}. \
                 Nothing was executed."
            ),
        ),
    }
}

/// The answer on a connection past `max_connections`, which then closes.
fn too_many_connections() -> axum::response::Response {
    let mut response = problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "too-many-connections",
        "Too many open connections",
        "The proxy holds as many client connections as it is configured to; this one is \
         closed. Nothing was executed; retry later.",
    );
    let headers = response.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// What every worker shares.
struct Shared {
    config: ProxyConfig,
    store: Store,
    metrics: Arc<Metrics>,
    /// Every route's running executions, attached to a client or not.
    executions: Arc<Executions>,
    connections: Arc<Connections>,
    stop: tokio::sync::watch::Receiver<bool>,
    /// Where each answered request's line goes (`access_log`).
    access_log: Option<AccessLog>,
}

/// How the proxy stopped.
enum Stopped {
    /// Every running execution recorded its outcome.
    AllRecorded,
    /// The grace period ended first; these executions were still running.
    GraceOver {
        grace: Duration,
        left: Vec<idemkit::core::LogRef>,
    },
}

/// What the serving threads tell the main one.
enum Event {
    /// SIGTERM or SIGINT arrived (again, for a second one).
    Stop(Instant),
    /// A worker ended: its connections closed and no execution runs.
    WorkerDone(Result<(), String>),
}

/// Serves with `workers` threads, each a single-threaded runtime with its own
/// listener on the same address (`SO_REUSEPORT`: the kernel spreads the
/// connections) and its own upstream pool, the way nginx runs its workers: a
/// request never hops between threads. Worker 0 also runs the admin listener
/// and GC.
///
/// After a stop signal the workers close their listeners and wait for their
/// connections and for every running execution; this thread waits for them
/// up to the grace period (a second signal ends it at once).
fn serve(config: ProxyConfig, store: Store, workers: usize) -> Result<Stopped, String> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (events, inbox) = std::sync::mpsc::channel();
    spawn_signal_thread(stop_tx.clone(), events.clone())?;
    let access_log = config
        .access_log
        .clone()
        .map(AccessLog::start)
        .transpose()?;
    let metrics = Arc::new(Metrics::new());
    metrics.orphans_settled(store.orphans_settled_at_open().len());
    let shared = Arc::new(Shared {
        connections: Connections::new(config.max_connections),
        config,
        store,
        metrics,
        executions: Arc::new(Executions::new()),
        stop: stop_rx,
        access_log,
    });
    let first: SocketAddr = shared
        .config
        .listen
        .parse()
        .map_err(|e| format!("listen {}: {e}", shared.config.listen))?;
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    spawn_worker(
        0,
        Arc::clone(&shared),
        first,
        Some(bound_tx),
        events.clone(),
    )?;
    // The first worker bound the address (a port 0 became a real one); the
    // others bind the same.
    let addr = match bound_rx.recv() {
        Ok(Ok(addr)) => addr,
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err("the first worker stopped before it listened".to_owned()),
    };
    let workers = workers.max(1);
    for id in 1..workers {
        spawn_worker(id, Arc::clone(&shared), addr, None, events.clone())?;
    }
    drop(events);
    println!(
        "idemkit proxy: {} routes to {}, {workers} workers, listening on {}://{addr}",
        shared.config.routes.len(),
        shared.config.upstream,
        if shared.config.listen_tls.is_some() {
            "https"
        } else {
            "http"
        },
    );
    let grace = shared.config.shutdown_grace;
    let mut running = workers;
    let mut deadline: Option<Instant> = None;
    let mut failure = None;
    while running > 0 {
        let event = match deadline {
            None => inbox.recv().ok(),
            Some(at) => inbox
                .recv_timeout(at.saturating_duration_since(Instant::now()))
                .ok(),
        };
        match event {
            Some(Event::Stop(at)) => {
                deadline = Some(match deadline {
                    None => at + grace,
                    // A second signal: stop waiting.
                    Some(_) => at,
                });
            }
            Some(Event::WorkerDone(result)) => {
                running -= 1;
                if let Err(e) = result {
                    failure = Some(e);
                    // The others stop too, and get the grace period.
                    let _ = stop_tx.send(true);
                    deadline.get_or_insert_with(|| Instant::now() + grace);
                }
            }
            // The grace period is over (or every sender is gone).
            None => break,
        }
    }
    if let Some(log) = &shared.access_log {
        log.flush(Duration::from_secs(1));
    }
    if let Some(e) = failure {
        return Err(e);
    }
    if running == 0 && shared.executions.is_empty() {
        return Ok(Stopped::AllRecorded);
    }
    Ok(Stopped::GraceOver {
        grace,
        left: shared.executions.log_refs(),
    })
}

type Bound = std::sync::mpsc::Sender<Result<SocketAddr, String>>;

fn spawn_worker(
    id: usize,
    shared: Arc<Shared>,
    addr: SocketAddr,
    bound: Option<Bound>,
    events: std::sync::mpsc::Sender<Event>,
) -> Result<(), String> {
    std::thread::Builder::new()
        .name(format!("proxy-worker-{id}"))
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start a runtime: {e}"));
            let result = match runtime {
                Ok(runtime) => runtime.block_on(worker(id, shared, addr, bound)),
                Err(e) => {
                    if let Some(tx) = &bound {
                        let _ = tx.send(Err(e.clone()));
                    }
                    Err(e)
                }
            };
            let _ = events.send(Event::WorkerDone(result));
        })
        .map(drop)
        .map_err(|e| format!("cannot start worker {id}: {e}"))
}

/// A listener on `addr` that other workers may bind too.
fn reusable_listener(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    #[cfg(unix)]
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

async fn worker(
    id: usize,
    shared: Arc<Shared>,
    addr: SocketAddr,
    bound: Option<Bound>,
) -> Result<(), String> {
    let report = |result: Result<SocketAddr, String>| {
        if let Some(tx) = &bound {
            let _ = tx.send(result);
        }
    };
    let listener = match reusable_listener(addr) {
        Ok(l) => l,
        Err(e) => {
            let e = format!("listen {addr}: {e}");
            report(Err(e.clone()));
            return Err(e);
        }
    };
    if id == 0 {
        if let Err(e) = start_admin(&shared).await {
            report(Err(e.clone()));
            return Err(e);
        }
        spawn_gc(
            shared.store.clone(),
            Arc::clone(&shared.metrics),
            shared.config.gc_interval,
        );
    }
    report(
        listener
            .local_addr()
            .map_err(|e| format!("listen {addr}: {e}")),
    );
    keep_the_next_timer_close(&shared.config);
    // One pool of upstream connections per worker, for every route.
    let passthrough = Arc::new(Forward {
        upstream: Upstream::new(&shared.config.upstream, shared.config.upstream_tls.clone()),
        timeouts: shared.config.timeouts,
        forward_key: true,
        answers_as: None,
    });
    let entry = Entry {
        table: Arc::new(RouteTable::new(&shared.config.routes)),
        routes: Arc::new(route_services(&shared, &passthrough.upstream)),
        passthrough,
        tenant: Arc::new(shared.config.tenant.clone()),
        request_body_idle: shared.config.request_body_idle,
        over_tls: shared.config.listen_tls.is_some(),
        operations: Arc::new(
            shared
                .config
                .routes
                .iter()
                .map(|r| r.operation.clone())
                .collect(),
        ),
        access_log: shared.access_log.clone(),
    };
    let connections = Arc::clone(&shared.connections);
    let connection = move |peer| Connection {
        entry: entry.clone(),
        peer,
        slot: Arc::new(connections.open()),
    };
    let timeout = shared.config.header_read_timeout;
    let stopped = crate::stopped(shared.stop.clone());
    match &shared.config.listen_tls {
        None => idemkit::http::serve(listener, timeout, connection, stopped).await,
        Some(tls) => {
            tls.observed_by(&shared.metrics);
            let handshake = |tcp| tls.accept(tcp);
            idemkit::http::serve_upgraded(listener, timeout, connection, handshake, stopped).await;
        }
    }
    // The connections are closed; executions whose client left run on.
    shared.executions.idle().await;
    Ok(())
}

/// Every forwarded request arms a timeout (the route's `upstream_timeout_ms`).
/// Tokio wakes its driver through an eventfd (a `write` and an extra
/// `epoll_wait`) whenever a new timer is due before the wake-up it last
/// planned, which on an idle wheel (only the connections' 30 s header timers)
/// is every request's timeout. A timer that fires more often than the shortest
/// upstream timeout keeps the planned wake-up ahead of every new deadline, so
/// arming a timeout costs no syscall: on the pass-through benchmark this took
/// about one `write` per request out of the proxy (strace).
fn keep_the_next_timer_close(config: &ProxyConfig) {
    let shortest = config
        .routes
        .iter()
        .map(|r| r.timeouts.answer)
        .fold(config.timeouts.answer, std::cmp::min);
    let period = shortest
        .min(Duration::from_secs(1))
        .checked_div(2)
        .unwrap_or_default()
        .max(Duration::from_millis(1));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
        }
    });
}

async fn start_admin(shared: &Arc<Shared>) -> Result<(), String> {
    let Some(admin_addr) = &shared.config.admin else {
        return Ok(());
    };
    let admin = admin::Admin::start(
        shared.store.clone(),
        Arc::clone(&shared.metrics),
        shared.config.admin_token.clone(),
        shared
            .config
            .routes
            .iter()
            .map(|r| (r.operation.clone(), r.policy))
            .collect(),
        shared.config.audit_log.as_deref(),
    )?;
    let tls = (shared.config.admin_tls.clone(), crate::listen_tls::ADMIN);
    let url = admin::serve("proxy", admin_addr, tls, admin, shared.stop.clone()).await?;
    println!("idemkit proxy: admin on {url}");
    Ok(())
}

/// SIGTERM / SIGINT → graceful shutdown: the workers stop accepting, and the
/// main thread waits for running executions up to the grace period (a second
/// signal ends the wait).
#[cfg(unix)]
fn spawn_signal_thread(
    stop: tokio::sync::watch::Sender<bool>,
    events: std::sync::mpsc::Sender<Event>,
) -> Result<(), String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])
        .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    std::thread::spawn(move || {
        for _ in signals.forever() {
            eprintln!(
                "idemkit proxy: stopping (no new connections; waiting for running executions to record)"
            );
            let _ = stop.send(true);
            if events.send(Event::Stop(Instant::now())).is_err() {
                return;
            }
        }
    });
    Ok(())
}

/// SIGTERM / SIGINT → `stop` (for `idemkit mcp`: axum stops accepting and
/// waits for the connections it serves). `command` names the subcommand in
/// the message.
#[cfg(unix)]
pub(crate) fn stop_on_signal(
    stop: tokio::sync::watch::Sender<bool>,
    command: &'static str,
) -> Result<(), String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])
        .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            eprintln!(
                "idemkit {command}: stopping (no new connections; finishing running requests)"
            );
            let _ = stop.send(true);
        }
    });
    Ok(())
}

/// Elsewhere the process ends with the default handling of Ctrl-C.
#[cfg(not(unix))]
pub(crate) fn stop_on_signal(
    _stop: tokio::sync::watch::Sender<bool>,
    _command: &'static str,
) -> Result<(), String> {
    Ok(())
}

/// Elsewhere the process ends with the default handling of Ctrl-C.
#[cfg(not(unix))]
fn spawn_signal_thread(
    _stop: tokio::sync::watch::Sender<bool>,
    _events: std::sync::mpsc::Sender<Event>,
) -> Result<(), String> {
    Ok(())
}
/// Prunes and deletes records past their windows every `interval`, in batches.
pub(crate) fn spawn_gc(store: Store, metrics: Arc<Metrics>, interval: std::time::Duration) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            let (store, metrics) = (store.clone(), Arc::clone(&metrics));
            let _ = tokio::task::spawn_blocking(move || {
                loop {
                    match store.gc(idemkit::core::http::defaults::GC_BATCH) {
                        Ok(report) => {
                            metrics.gc_deleted(report.deleted);
                            if !report.more {
                                return;
                            }
                        }
                        Err(e) => {
                            metrics.store_error();
                            tracing::warn!(error = %e, "GC failed; next round later");
                            return;
                        }
                    }
                }
            })
            .await;
        }
    });
}
