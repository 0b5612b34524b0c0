//! # idemkit
//!
//! Safe retries for HTTP APIs, webhooks and agent tool calls. This is the crate
//! services add: it re-exports the no-I/O core ([`idemkit_core`]) and adds the
//! embedded store and the `idemkit` command-line tool.
//!
//! - [`redb_store`] — the embedded store: atomic claims, fenced leases, recovery, GC.
//! - [`http`] (feature `axum`, on by default) — the tower/axum middleware.
//! - [`clock`] — where the store reads `now` from (system or virtual time).
//! - [`backend`] — the operations every store offers, as a trait;
//!   [`conformance`] — the suite every backend must pass.
//! - `postgres` (feature `postgres`) — the same store over PostgreSQL, for fleets.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

pub mod journal;

pub mod backend;
pub mod clock;
pub mod conformance;
#[cfg(feature = "axum")]
pub mod http;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod redb_store;

pub use idemkit_core as core;
pub use idemkit_core::{
    Fingerprint, IdempotencyKey, KeyError, LogRef, RecordId, Scope, ScopeError, UnixMillis,
};
