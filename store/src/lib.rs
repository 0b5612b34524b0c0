//! # idemkit
//!
//! Safe retries for HTTP APIs, webhooks and agent tool calls. This is the crate
//! services add: it re-exports the no-I/O core ([`idemkit_core`]) and adds the
//! embedded store and the `idemkit` command-line tool.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

pub mod journal;

pub use idemkit_core as core;
pub use idemkit_core::{
    Fingerprint, IdempotencyKey, KeyError, LogRef, RecordId, Scope, ScopeError, UnixMillis,
};
