//! The upstream of the proxy benchmark (benches/proxy/run.sh): an API with no
//! idempotency of its own.
//!
//! - `GET /ping` answers `pong` at once (the pass-through figure);
//! - `POST /accounts/{account}/withdraw` does `--work-ms` of work (default 5: a
//!   database write) and answers 201 with a fresh id (the replay figure: through
//!   `idemkit proxy` only the first request reaches it).
//!
//! ```text
//! cargo run --release -p idemkit --example bench_upstream -- --listen 127.0.0.1:9000 --work-ms 5
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut listen = "127.0.0.1:9000".to_owned();
    let mut work_ms = 5u64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--listen", Some(v)) => listen = v,
            ("--work-ms", Some(v)) => work_ms = v.parse().unwrap_or(work_ms),
            _ => {
                eprintln!("usage: bench_upstream [--listen ADDR] [--work-ms N]");
                std::process::exit(64);
            }
        }
    }
    let counter = Arc::new(AtomicU64::new(0));
    let work = Duration::from_millis(work_ms);
    let app = Router::new()
        .route("/ping", get(|| async { "pong" }))
        .route(
            "/accounts/{account}/withdraw",
            post(move |State(n): State<Arc<AtomicU64>>| async move {
                tokio::time::sleep(work).await;
                let id = n.fetch_add(1, Ordering::Relaxed) + 1;
                (
                    StatusCode::CREATED,
                    [("content-type", "application/json")],
                    format!(r#"{{"id":"w_{id}"}}"#),
                )
            }),
        )
        .with_state(counter);
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("bench upstream on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await
}
