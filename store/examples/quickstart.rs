//! The first quick start of README.md, which shows everything below this header
//! verbatim; store/tests/appointments/readme_quick_starts.rs checks that and runs it with the
//! README's `curl` commands.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::{Json, Router, http::StatusCode, http::request::Parts, routing::post};
use idemkit::{core::record::EffectKind, http::IdempotencyLayer, http::RouteConfig};
use serde_json::{Value, json};

static ORDERS: AtomicU64 = AtomicU64::new(0);

// Runs once per key: charge, reserve, send here. A retry gets this answer replayed.
async fn create_order(Json(order): Json<Value>) -> (StatusCode, Json<Value>) {
    let id = ORDERS.fetch_add(1, Ordering::SeqCst) + 1;
    let body = json!({ "id": format!("ord_{id}"), "sku": order["sku"] });
    (StatusCode::CREATED, Json(body))
}

// Demo only: your authentication names the tenant (never the body or the key).
fn tenant(parts: &Parts) -> Option<String> {
    let auth = parts.headers.get("authorization")?.to_str().ok()?;
    auth.strip_prefix("Bearer ").map(str::to_owned)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = idemkit::open("orders.redb")?;
    let route = RouteConfig::new("orders.create", EffectKind::External).principal(tenant);
    let layer = IdempotencyLayer::new(store, route);
    let app = Router::new().route("/orders", post(create_order).route_layer(layer));
    let addr = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    // Like axum::serve, plus a deadline for each request head: a slow client is cut off.
    let timeout = idemkit::http::DEFAULT_HEADER_READ_TIMEOUT;
    idemkit::http::serve_router(listener, timeout, app, std::future::pending()).await;
    Ok(())
}
