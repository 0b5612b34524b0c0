//! `idemkit proxy --config FILE`: DESIGN.md's HTTP contract in front of any HTTP
//! API. Each configured route is the axum middleware (`IdempotencyLayer`) around
//! a forwarder to the upstream; every other request streams through untouched.
//! See docs/proxy.md and examples/proxy.toml.

mod admin;
mod config;
mod forward;
mod templates;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::routing::MethodRouter;
use clap::Args;
use http::Request;
use http::request::Parts;
use idemkit::http::{IdempotencyLayer, KeyRequirement, Metrics, RouteConfig};
use idemkit::store::Store;

use crate::exit;
use config::{ProxyConfig, StoreChoice, TenantRule};
use forward::{Forward, Upstream};
use templates::Templates;

/// Serve DESIGN.md's idempotency contract in front of an HTTP API.
///
/// The routes in the config file (method + path template) get the whole
/// contract: a key is claimed before the request goes upstream, the answer is
/// recorded and replayed, a changed request is refused (422), a retry while the
/// first is running gets 409, and an upstream that may have acted without
/// answering (timeout, lost connection) leaves the record unknown instead of
/// sending again. Everything else passes through, streamed.
///
/// SIGTERM or SIGINT: stop accepting, let running requests finish and record,
/// then exit 0. A bad config file exits 64 with the file, line and what is wrong.
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
    let workers = config.workers.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    match serve(config, store, workers) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idemkit proxy: {e}");
            ExitCode::from(exit::IO_ERR)
        }
    }
}

fn open_store(choice: &StoreChoice) -> Result<Store, String> {
    match choice {
        StoreChoice::Redb(path) => {
            Store::open(path).map_err(|e| format!("store {}: {e}", path.display()))
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
            idemkit::adapters::postgres::PgStore::connect_with(url, options)
                .map(Store::postgres)
                .map_err(|e| format!("store postgres: {e}"))
        }
        #[cfg(not(feature = "postgres"))]
        StoreChoice::Postgres { .. } => {
            Err("[store] postgres needs an idemkit built with the `postgres` feature".to_owned())
        }
    }
}

/// The tenant of a request, by the configured rule.
fn principal(rule: &TenantRule) -> impl Fn(&Parts) -> Option<String> + Send + Sync + 'static {
    let rule = rule.clone();
    move |parts: &Parts| match &rule {
        TenantRule::Header(name) => parts
            .headers
            .get(name.as_str())
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned),
        TenantRule::DigestOf(name) => parts
            .headers
            .get(name.as_str())
            .filter(|v| !v.is_empty())
            .map(|v| {
                let digest = blake3::derive_key("idemkit proxy tenant credential v1", v.as_bytes());
                let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
                format!("cred-{hex}")
            }),
        TenantRule::Fixed(tenant) => Some(tenant.clone()),
    }
}

fn forwarder(forward: Arc<Forward>) -> MethodRouter {
    axum::routing::any(move |request: Request<Body>| {
        let forward = Arc::clone(&forward);
        async move { forward.send(request).await }
    })
}

/// The router: one method router per configured path, each configured method
/// behind its idempotency layer, every other method and path passed through.
/// `passthrough` is the worker's one pass-through forwarder; its upstream
/// (the worker's connection pool) serves every route.
fn app(
    config: &ProxyConfig,
    store: &Store,
    metrics: &Arc<Metrics>,
    passthrough: &Arc<Forward>,
) -> Router {
    let upstream = &passthrough.upstream;
    let mut paths: Vec<&str> = config.routes.iter().map(|r| r.path.as_str()).collect();
    paths.sort_unstable();
    paths.dedup();
    let mut router = Router::new();
    for path in paths {
        let mut methods = MethodRouter::new().fallback_service(forwarder(Arc::clone(passthrough)));
        for route in config.routes.iter().filter(|r| r.path == path) {
            let mut rc = RouteConfig::new(route.operation.clone(), route.effect)
                .fingerprint(route.spec.clone())
                .policy(route.policy)
                .principal(principal(&config.tenant))
                .key(if route.required {
                    KeyRequirement::Required
                } else {
                    KeyRequirement::Optional
                })
                .owner(format!("proxy:{}", std::process::id()))
                .metrics(Arc::clone(metrics));
            if let Some(limit) = route.max_execution {
                rc = rc.max_execution(limit);
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
            rc = rc.on_disconnect(route.on_disconnect);
            let forward = forwarder(Arc::new(Forward {
                upstream: upstream.clone(),
                timeout: route.upstream_timeout,
                forward_key: route.forward_key,
            }));
            let service = tower::Layer::layer(&IdempotencyLayer::new(store.clone(), rc), forward);
            let Ok(filter) = axum::routing::MethodFilter::try_from(route.method.clone()) else {
                // config.rs accepted only methods a filter exists for.
                continue;
            };
            methods = methods.on_service(filter, service);
        }
        router = router.route(path, methods);
    }
    router.fallback_service(forwarder(Arc::clone(passthrough)))
}

/// What a worker's connections dispatch to.
#[derive(Clone)]
struct Entry {
    /// The configured routes (each behind its idempotency layer); a path
    /// there with another method, or no route at all, falls back to the
    /// pass-through.
    routes: Router,
    /// The configured path templates: a request no template can match goes
    /// straight to the pass-through, without the router's matching, boxing
    /// and method dispatch (a quarter of the proxy's own instructions on the
    /// pass-through benchmark, by callgrind).
    templates: Arc<Templates>,
    passthrough: Arc<Forward>,
}

/// One accepted connection: the entry and the caller's address.
#[derive(Clone)]
struct Connection {
    entry: Entry,
    peer: SocketAddr,
}

impl tower::Service<Request<Body>> for Connection {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(self.peer));
        if self.entry.templates.may_match(request.uri().path()) {
            let mut routes = self.entry.routes.clone();
            Box::pin(async move { tower::Service::call(&mut routes, request).await })
        } else {
            let passthrough = Arc::clone(&self.entry.passthrough);
            Box::pin(async move { Ok(passthrough.send(request).await) })
        }
    }
}

/// What every worker shares.
struct Shared {
    config: ProxyConfig,
    store: Store,
    metrics: Arc<Metrics>,
    stop: tokio::sync::watch::Receiver<bool>,
}

/// Serves with `workers` threads, each a single-threaded runtime with its own
/// listener on the same address (`SO_REUSEPORT`: the kernel spreads the
/// connections) and its own upstream pool, the way nginx runs its workers: a
/// request never hops between threads. Worker 0 also runs the admin listener
/// and GC.
fn serve(config: ProxyConfig, store: Store, workers: usize) -> Result<(), String> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    spawn_signal_thread(stop_tx)?;
    let shared = Arc::new(Shared {
        config,
        store,
        metrics: Arc::new(Metrics::new()),
        stop: stop_rx,
    });
    let first: SocketAddr = shared
        .config
        .listen
        .parse()
        .map_err(|e| format!("listen {}: {e}", shared.config.listen))?;
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let mut threads = vec![spawn_worker(0, Arc::clone(&shared), first, Some(bound_tx))?];
    // The first worker bound the address (a port 0 became a real one); the
    // others bind the same.
    let addr = match bound_rx.recv() {
        Ok(Ok(addr)) => addr,
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err("the first worker stopped before it listened".to_owned()),
    };
    for id in 1..workers.max(1) {
        threads.push(spawn_worker(id, Arc::clone(&shared), addr, None)?);
    }
    println!(
        "idemkit proxy: {} routes to {}, {} workers, listening on http://{addr}",
        shared.config.routes.len(),
        shared.config.upstream,
        threads.len()
    );
    let mut failure = None;
    for thread in threads {
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = Some(e),
            Err(_) => failure = Some("a worker panicked".to_owned()),
        }
    }
    match failure {
        Some(e) => Err(e),
        None => {
            eprintln!("idemkit proxy: stopped; running requests finished and were recorded");
            Ok(())
        }
    }
}

type Bound = std::sync::mpsc::Sender<Result<SocketAddr, String>>;

fn spawn_worker(
    id: usize,
    shared: Arc<Shared>,
    addr: SocketAddr,
    bound: Option<Bound>,
) -> Result<std::thread::JoinHandle<Result<(), String>>, String> {
    std::thread::Builder::new()
        .name(format!("proxy-worker-{id}"))
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start a runtime: {e}"));
            let runtime = match runtime {
                Ok(r) => r,
                Err(e) => {
                    if let Some(tx) = &bound {
                        let _ = tx.send(Err(e.clone()));
                    }
                    return Err(e);
                }
            };
            runtime.block_on(worker(id, shared, addr, bound))
        })
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
        upstream: Upstream::new(&shared.config.upstream),
        timeout: shared.config.upstream_timeout,
        forward_key: true,
    });
    let entry = Entry {
        routes: app(&shared.config, &shared.store, &shared.metrics, &passthrough),
        templates: Arc::new(Templates::new(
            shared.config.routes.iter().map(|r| r.path.as_str()),
        )),
        passthrough,
    };
    let mut stop = shared.stop.clone();
    // Small answers go out at once (no Nagle delay behind the client's ACK).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let connections = tower::service_fn(move |incoming: axum::serve::IncomingStream<'_, _>| {
        let connection = Connection {
            entry: entry.clone(),
            peer: *incoming.remote_addr(),
        };
        std::future::ready(Ok::<_, std::convert::Infallible>(connection))
    });
    axum::serve(listener, connections)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await
        .map_err(|e| format!("serving: {e}"))
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
        .map(|r| r.upstream_timeout)
        .fold(config.upstream_timeout, std::cmp::min);
    let period = shortest
        .min(std::time::Duration::from_secs(1))
        .checked_div(2)
        .unwrap_or_default()
        .max(std::time::Duration::from_millis(1));
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
    let admin_listener = tokio::net::TcpListener::bind(admin_addr)
        .await
        .map_err(|e| format!("admin {admin_addr}: {e}"))?;
    let admin_bound = admin_listener
        .local_addr()
        .map_err(|e| format!("admin {admin_addr}: {e}"))?;
    let admin = Arc::new(admin::Admin {
        store: shared.store.clone(),
        metrics: Arc::clone(&shared.metrics),
        token: shared.config.admin_token.clone(),
        policies: shared
            .config
            .routes
            .iter()
            .map(|r| (r.operation.clone(), r.policy))
            .collect(),
    });
    let mut stop = shared.stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(admin_listener, admin::router(admin))
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await;
    });
    println!("idemkit proxy: admin on http://{admin_bound}");
    Ok(())
}

/// SIGTERM / SIGINT → graceful shutdown (axum stops accepting and waits for the
/// connections it serves, so every running execution records its outcome).
#[cfg(unix)]
fn spawn_signal_thread(stop: tokio::sync::watch::Sender<bool>) -> Result<(), String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])
        .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            eprintln!("idemkit proxy: stopping (no new connections; finishing running requests)");
            let _ = stop.send(true);
        }
    });
    Ok(())
}

/// Elsewhere the process ends with the default handling of Ctrl-C.
#[cfg(not(unix))]
fn spawn_signal_thread(_stop: tokio::sync::watch::Sender<bool>) -> Result<(), String> {
    Ok(())
}

/// Prunes and deletes records past their windows every `interval`, in batches.
fn spawn_gc(store: Store, metrics: Arc<Metrics>, interval: std::time::Duration) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            let (store, metrics) = (store.clone(), Arc::clone(&metrics));
            let _ = tokio::task::spawn_blocking(move || {
                loop {
                    match store.gc(1000) {
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
