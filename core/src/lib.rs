//! # idemkit-core
//!
//! The no-I/O core of [idemkit](https://github.com/idemkit/idemkit): everything that
//! decides whether a retried request is the same logical operation, and what to
//! answer, without touching a disk, a socket or a clock.
//!
//! - [`IdempotencyKey`]: parses the `Idempotency-Key` header (quoted or bare).
//! - [`Scope`] and [`RecordId`]: `(tenant, operation, key)` → an injective storage id,
//!   with a [`LogRef`] that is safe to log.
//! - [`json`]: strict RFC 8785 canonical JSON ([`canonicalize`]).
//! - [`Fingerprint`]: what the key originally meant, computed by a [`FingerprintSpec`].
//! - [`record`]: the stored record of an operation and its versioned codec.
//! - [`machine`]: the pure state machine that decides claims, completions,
//!   recovery and GC; a store applies its decisions atomically, all through
//!   one entry point, [`machine::apply`].
//! - [`http`]: the HTTP contract (statuses, problem types, replayed headers) as values.
//! - [`client`]: retry policy, circuit breaker and action status for callers.
//!
//! ## What this crate does not do
//!
//! It is `#![no_std]` (with `alloc`), so "no I/O" is checked by the compiler,
//! not kept by convention. The default `std` feature only lets blake3 choose
//! its SIMD code at run time; `default-features = false` builds without std.
//!
//! It reads no clock (time is a [`UnixMillis`] parameter), draws no randomness
//! (callers pass it in), and performs no I/O. The `idemkit` crate applies its
//! decisions to a redb database; the `idemkit` npm package applies them to
//! JavaScript platform stores. Both give byte-identical results (docs/architecture.md,
//! invariant 6).
//!
//! ## Example
//!
//! ```
//! use idemkit_core::{IdempotencyKey, Scope};
//!
//! let key = IdempotencyKey::parse_header(br#""order-7f3a""#)?;
//! let scope = Scope::new("acme", "appointments.create")?;
//! let id = scope.record_id(&key);
//! // The same key under another tenant is another record.
//! let other = Scope::new("globex", "appointments.create")?.record_id(&key);
//! assert_ne!(id, other);
//! println!("log reference: {}", id.log_ref());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Panics, errors and unwraps
//!
//! Bad input of any kind (bodies, keys, headers, stored bytes) is a typed error,
//! never a panic (docs/architecture.md, invariant 7).

#![no_std]
#![forbid(unsafe_code, unused_must_use)]
#![deny(missing_docs)]
#![warn(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

extern crate alloc;
// Unit tests use std (threads, collections with hashing, I/O of test data).
#[cfg(test)]
extern crate std;

/// What std's prelude would bring into every module (the crate is `no_std`).
mod prelude {
    pub(crate) use alloc::borrow::ToOwned;
    pub(crate) use alloc::string::{String, ToString};
    pub(crate) use alloc::vec::Vec;
    pub(crate) use alloc::{format, vec};
}

pub mod client;
mod digest;
pub mod fingerprint;
pub mod hex;
pub mod http;
pub mod json;
pub mod key;
pub mod machine;
pub mod record;
pub mod scope;
pub mod time;

pub use fingerprint::{
    ContentKind, Fingerprint, FingerprintError, FingerprintSpec, ParseFingerprintError,
    RequestFingerprint, RequestLine, SpecError,
};
pub use json::{JsonError, JsonErrorKind, Profile, canonicalize};
pub use key::{IdempotencyKey, KeyError};
pub use scope::{LogRef, ParseLogRefError, RecordId, RecordIdError, Scope, ScopeError, ScopePart};
pub use time::UnixMillis;
