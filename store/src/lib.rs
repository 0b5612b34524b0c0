//! # idemkit
//!
//! Safe retries for HTTP APIs, webhooks and agent tool calls. This is the crate
//! services add: it re-exports the no-I/O core ([`idemkit_core`]) and adds the
//! embedded store and the `idemkit` command-line tool.
//!
//! - [`store`] — the engine: [`Store`](store::Store), atomic claims, fenced leases,
//!   recovery, GC, over any adapter. [`open`] and [`in_memory`] build the
//!   embedded one (over [`adapters::redb`]); `postgres` (feature `postgres`)
//!   the shared one.
//! - [`adapters`] — the five-method storage seam and its adapters: [`adapters::redb`]
//!   (the embedded default), `adapters::postgres` (feature `postgres`, for fleets),
//!   [`adapters::memory`] (tests).
//! - [`http`] (feature `axum`, on by default) — the tower/axum middleware.
//! - [`local`] — exactly once for local effects: the business write and the
//!   outcome in one transaction (redb's, or the caller's PostgreSQL one).
//! - [`journal`] — the client side: one durable idempotency key per logical action,
//!   its attempts, and a circuit breaker per origin.
//! - [`clock`] — where the store reads `now` from (system or virtual time).
//! - `conformance` (feature `testing`) — the suite the engine passes over every adapter.
//!
//! ## Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `axum` | on | `http`, the tower/axum middleware (tokio, hyper, axum, Prometheus metrics) |
//! | `cli` | on | the `idemkit` binary, with `axum`, and what only the binary uses (clap, ureq, httpdate, serde_json; rustix and signal-hook on Unix) |
//! | `postgres` | off | `adapters::postgres`, the PostgreSQL adapter, and `--postgres URL` in the binary |
//! | `testing` | off | what exists for tests: the `conformance` suite and `adapters::redb::{FaultyBackend, FaultSwitch}` with `RedbAdapter::with_faulty_backend` (I/O and transient failure injection) |
//!
//! A service that only embeds the store needs neither the binary nor its
//! dependencies:
//!
//! ```toml
//! [dependencies]
//! idemkit = { version = "0.1", default-features = false, features = ["axum"] }
//!
//! # only where the tests need it: the conformance suite, fault injection
//! [dev-dependencies]
//! idemkit = { version = "0.1", default-features = false, features = ["testing"] }
//! ```
//!
//! Without the `testing` feature the store keeps no fault switch at all: the
//! check a write transaction makes for an armed failure is compiled out.
//!
//! ## When the store cannot write
//!
//! A full disk, a failing volume or a PostgreSQL restart makes every claim fail
//! with a transient [`StorageError`](store::StorageError) (the middleware answers
//! 503 with `Retry-After`; nothing executes without a claim), and a completion
//! that fails is retried, then left to its lease, never released. The store
//! comes back on its own once the cause is gone: a redb file is reopened (redb
//! refuses every write of a handle after an I/O error) and proven writable with a
//! probe write by the next operation or health check; a PostgreSQL pool replaces
//! its broken connections. [`Store::health`](store::Store::health) says whether it
//! can write now, why not and since when; serve it with
//! `idemkit::http::health_response` so a load balancer stops sending traffic
//! meanwhile:
//!
//! ```
//! # #[cfg(feature = "axum")] {
//! use axum::{Router, routing::get};
//! let store = idemkit::in_memory().unwrap();
//! let app: Router = Router::new()
//!     .route("/health", get(move || idemkit::http::health_response(store.clone(), None)));
//! # let _ = app; }
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

pub mod adapters;
pub mod clock;
#[cfg(feature = "testing")]
pub mod conformance;
mod embedded;
#[cfg(feature = "axum")]
pub mod http;
pub mod journal;
pub mod local;
#[cfg(feature = "postgres")]
mod postgres;
pub mod store;
#[cfg(feature = "postgres")]
mod tls_files;

#[cfg(feature = "postgres")]
pub use self::postgres::postgres;
pub use embedded::{in_memory, open};

pub use idemkit_core as core;

/// The message a caught panic carried (`"no message"` when it was not text).
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}
pub use idemkit_core::{
    Fingerprint, IdempotencyKey, KeyError, LogRef, RecordId, Scope, ScopeError, UnixMillis,
};
