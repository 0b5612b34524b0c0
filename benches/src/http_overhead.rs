//! What the idempotency layer adds to a request: one axum handler served twice
//! on one listener, bare and behind [`IdempotencyLayer`] on an in-memory store
//! ([`MemoryAdapter`]), so `wrk` can measure both with the same request bytes.
//!
//! - `POST /bare`: the handler alone (any `Idempotency-Key` header is ignored);
//! - `POST /layered`: the same handler behind the layer (operation
//!   `bench.echo`, External, key required, fixed tenant `bench`): a fresh key
//!   executes it and records its answer, a known key replays the answer with
//!   `Idempotent-Replayed: true`;
//! - `GET /ping`: readiness.
//!
//! The handler answers 201 with `{"ok":true,"bytes":N}` (N: the request body's
//! length), so a replay's body is the stored one byte for byte.
//!
//! `benches/http/run.sh` drives it with `wrk`; `benches/tests/http_overhead_smoke.rs`
//! starts it in-process on port 0.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use idemkit::adapters::memory::MemoryAdapter;
use idemkit::core::record::EffectKind;
use idemkit::http::{IdempotencyLayer, RouteConfig};
use idemkit::store::Store;

/// The operation name of the layered route.
pub const OPERATION: &str = "bench.echo";

/// The tenant every request of the layered route is recorded under.
pub const TENANT: &str = "bench";

/// The server's state: the store behind the layered route and how many times
/// the handler ran (bare and layered together).
#[derive(Clone, Debug)]
pub struct Bench {
    /// The in-memory store of the layered route.
    pub store: Store,
    /// Handler executions so far.
    pub executions: Arc<AtomicU64>,
}

impl Bench {
    /// A fresh in-memory store and a zero count.
    #[must_use]
    pub fn new() -> Bench {
        Bench {
            store: Store::new(Arc::new(MemoryAdapter::default())),
            executions: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl Default for Bench {
    fn default() -> Self {
        Bench::new()
    }
}

async fn echo(State(executions): State<Arc<AtomicU64>>, body: Bytes) -> impl IntoResponse {
    executions.fetch_add(1, Ordering::Relaxed);
    (
        StatusCode::CREATED,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{{\"ok\":true,\"bytes\":{}}}", body.len()),
    )
}

/// The router: `POST /bare`, `POST /layered` (the same handler behind the
/// layer on `bench.store`) and `GET /ping`.
pub fn router(bench: &Bench) -> Router {
    let route = RouteConfig::new(OPERATION, EffectKind::External)
        .principal(|_| Some(TENANT.to_owned()))
        .owner("http-overhead");
    Router::new()
        .route("/bare", post(echo))
        .route(
            "/layered",
            post(echo).route_layer(IdempotencyLayer::new(bench.store.clone(), route)),
        )
        .route("/ping", get(|| async { "pong" }))
        .with_state(Arc::clone(&bench.executions))
}

/// Serves [`router`] on `listener` until the future is dropped or fails.
pub async fn serve(listener: tokio::net::TcpListener, bench: Bench) -> std::io::Result<()> {
    axum::serve(listener, router(&bench)).await
}

/// Binds `addr` (port 0: any free port) and returns the bound address and the
/// serving future (to spawn on a runtime).
pub async fn bind(
    addr: SocketAddr,
    bench: Bench,
) -> std::io::Result<(
    SocketAddr,
    impl std::future::Future<Output = std::io::Result<()>>,
)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((local, serve(listener, bench)))
}
