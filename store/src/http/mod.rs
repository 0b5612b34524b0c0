//! Tower/axum middleware that makes one route idempotent (feature `axum`).
//!
//! [`IdempotencyLayer`] wraps any tower service taking
//! `Request<axum::body::Body>` and answers per the HTTP contract of
//! [docs/architecture.md](https://github.com/idemkit/idemkit/blob/main/docs/architecture.md#http-contract-middleware-js-handler-proxy)
//! (its table, the statuses and which responses are stored).
//! Per request: the principal extractor names the tenant, the
//! `Idempotency-Key` header is parsed, the body is read up to the route's limit
//! and fingerprinted with the request line, and the store claims
//! `(tenant, operation, key)`. Every answer that is not the handler's
//! (a refusal, a replay) is core's [`reply`](idemkit_core::http::reply), so every
//! binding sends the same bytes. A claim that executes runs the handler with an
//! [`Execution`] extension, renews its lease meanwhile, and records its response
//! before the client gets it (durable before acknowledged).
//!
//! The parts, one file each: [`RouteConfig`] (how a route is made idempotent),
//! the layer and service, the request pipeline, the execution, lease renewal,
//! recording with retries ([`RECORD_ATTEMPTS`]) and response rendering
//! ([`refusal_response`]).
//!
//! ```no_run
//! use axum::{Extension, Router, routing::post};
//! use idemkit::core::machine::StepStart;
//! use idemkit::core::record::EffectKind;
//! use idemkit::http::{Execution, IdempotencyLayer, RouteConfig};
//! use idemkit::store::Store;
//!
//! async fn charge(Extension(exec): Extension<Execution>) -> (axum::http::StatusCode, String) {
//!     // Persist the provider key before calling the provider; a retry reuses it.
//!     if let Ok(StepStart::Dispatch { provider_key }) = exec.begin_step("charge", "pk-1").await {
//!         // ... call the payment provider with `provider_key` ...
//!         let _ = exec.complete_step("charge", Some("ch_1".into())).await;
//!     }
//!     (axum::http::StatusCode::CREATED, format!("charged for {}", exec.tenant()))
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = idemkit::open("payments.redb")?;
//! let route = RouteConfig::new("payments.create", EffectKind::External)
//!     // The tenant comes from authentication, never from the body or the key.
//!     .principal(|parts| parts.extensions.get::<String>().cloned());
//! let app: Router = Router::new()
//!     .route("/payments", post(charge).route_layer(IdempotencyLayer::new(store, route)));
//! # Ok(()) }
//! ```

mod catch_unwind;
mod config;
mod execute;
mod execution;
mod executions;
mod health;
mod metrics;
mod pipeline;
mod recording;
mod renewal;
mod response;
mod response_body;
mod serve;
mod service;
mod store_calls;
mod wait;

pub use config::{KeyRequirement, OnDisconnect, PrincipalFn, RouteConfig};
pub use execution::{Execution, ExecutionError};
pub use executions::Executions;
pub use health::health_response;
pub use idemkit_core::http::defaults::RECORD_ATTEMPTS;
pub use metrics::{ClaimAnswered, ClaimOutcomeLabel, Metrics, WaitEnded};
pub use response::refusal_response;
pub use serve::{
    DEFAULT_HEADER_READ_TIMEOUT, serve, serve_router, serve_router_upgraded, serve_upgraded,
};
pub use service::{Idempotency, IdempotencyLayer};
pub use wait::{ClaimAnswer, WaitRefused, Waited, claim_waiting};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
