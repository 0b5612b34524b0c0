//! # idemkit-python
//!
//! The extension module `idemkit_rs._native` behind the Python package
//! `idemkit-rs`: a thin PyO3 wrapper that only delegates. Canonical JSON,
//! fingerprints and keys are [`idemkit_core`]'s; the journal is
//! [`idemkit::journal::Journal`] (the same redb file `idemkit call` writes); the
//! retry rules and the circuit breaker are core's [`client`](idemkit_core::client)
//! module; the records live in [`idemkit::store::Store`] over redb or PostgreSQL,
//! and every HTTP answer is built by core's [`http`](idemkit_core::http) contract.
//! So a Python agent or ASGI service decides exactly as the Rust crate, the CLI and
//! the npm package do (docs/architecture.md, invariant 6).
//!
//! ## What this crate does not do
//!
//! It sends no HTTP request and serves none: the Python modules do
//! (`idemkit_rs.client` over httpx, `idemkit_rs.asgi` for Starlette and FastAPI).
//! Every call that may wait on a disk or a database (a journal commit, a claim, a
//! completion) releases the GIL while it runs; the ASGI middleware also runs it
//! off the event loop, in a worker thread.
//!
//! ## Layout
//!
//! - [`errors`]: every Rust error becomes one of the exception classes defined in
//!   `idemkit_rs/errors.py`, with its stable `code` and, where it has them, the
//!   byte offset and JSON Pointer as attributes;
//! - [`canonical`]: `canonicalize`, `fingerprint`, keys;
//! - [`client`]: the retry policy, attempt classes, breaker settings and the
//!   request format `idemkit call` journals;
//! - [`journal`]: the client-side action journal;
//! - [`store`]: the record store and the operator calls (`list`, `resolve`, `gc`);
//! - [`route`]: one route's claim, execution and recording, for the ASGI middleware.

#![deny(missing_docs)]
#![warn(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

pub mod canonical;
pub mod client;
pub mod errors;
pub mod journal;
pub mod route;
pub mod store;

use std::time::Duration;

use pyo3::prelude::*;

/// A duration given in seconds from Python, refused (a `ValueError` naming
/// `what`) when negative or not finite.
pub(crate) fn seconds(value: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        errors::argument(format!(
            "{what} must be a finite number of seconds >= 0, not {value}"
        ))
    })
}

/// The module `idemkit_rs._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(canonical::canonicalize, m)?)?;
    m.add_function(wrap_pyfunction!(canonical::fingerprint, m)?)?;
    m.add_function(wrap_pyfunction!(canonical::check_key, m)?)?;
    m.add_function(wrap_pyfunction!(canonical::parse_key_header, m)?)?;
    m.add_function(wrap_pyfunction!(canonical::key_header_value, m)?)?;
    m.add_function(wrap_pyfunction!(canonical::derive_key, m)?)?;
    m.add_function(wrap_pyfunction!(client::encode_request, m)?)?;
    m.add_function(wrap_pyfunction!(client::decode_request, m)?)?;
    m.add_function(wrap_pyfunction!(client::action_status, m)?)?;
    m.add_class::<client::AttemptResult>()?;
    m.add_class::<client::RetryPolicy>()?;
    m.add_class::<journal::Journal>()?;
    m.add_class::<journal::Action>()?;
    m.add_class::<journal::AttemptStart>()?;
    m.add_class::<journal::AttemptRecord>()?;
    m.add_class::<store::Store>()?;
    m.add_function(wrap_pyfunction!(route::fallback_poll, m)?)?;
    // Core's caps on held retries, the middleware's defaults.
    m.add(
        "DEFAULT_MAX_WAITERS_PER_KEY",
        idemkit_core::http::prefer::DEFAULT_MAX_WAITERS_PER_KEY,
    )?;
    m.add(
        "DEFAULT_MAX_WAITERS",
        idemkit_core::http::prefer::DEFAULT_MAX_WAITERS,
    )?;
    m.add_class::<route::Route>()?;
    m.add_class::<route::Execution>()?;
    m.add_class::<route::Answer>()?;
    Ok(())
}
