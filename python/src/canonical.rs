//! Canonical JSON, fingerprints and keys: core's, byte for byte the CLI's
//! `idemkit canonicalize`, `idemkit fingerprint` and `idemkit key check`.

use std::borrow::Cow;

use idemkit_core::IdempotencyKey;
use idemkit_core::fingerprint::{ContentKind, FingerprintSpec, RequestLine};
use idemkit_core::json::{CanonicalizeOptions, Profile, canonicalize_with};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyString};

use crate::errors;

/// A document or body as Python hands it over: `bytes`, `bytearray`, or `str`
/// (taken as its UTF-8 encoding).
#[derive(FromPyObject)]
pub enum Data<'py> {
    /// `bytes`, borrowed.
    Bytes(Bound<'py, PyBytes>),
    /// `bytearray`, copied (Python code may change it meanwhile).
    ByteArray(Bound<'py, PyByteArray>),
    /// `str`, encoded as UTF-8.
    Str(Bound<'py, PyString>),
}

impl Data<'_> {
    /// The bytes.
    pub fn bytes(&self) -> PyResult<Cow<'_, [u8]>> {
        Ok(match self {
            Data::Bytes(b) => Cow::Borrowed(b.as_bytes()),
            Data::ByteArray(b) => Cow::Owned(b.to_vec()),
            Data::Str(s) => match s.to_cow()? {
                Cow::Borrowed(text) => Cow::Borrowed(text.as_bytes()),
                Cow::Owned(text) => Cow::Owned(text.into_bytes()),
            },
        })
    }
}

fn profile(name: &str) -> PyResult<Profile> {
    match name {
        "strict" => Ok(Profile::Strict),
        "rfc8785" => Ok(Profile::Rfc8785),
        other => Err(errors::argument(format!(
            "profile must be \"strict\" or \"rfc8785\", not {other:?}"
        ))),
    }
}

/// `canonicalize(document, *, profile="strict", max_bytes=None, max_depth=128) -> bytes`:
/// the RFC 8785 canonical form, or `JsonError` with the byte offset and pointer.
#[pyfunction]
#[pyo3(signature = (document, *, profile = "strict", max_bytes = None, max_depth = CanonicalizeOptions::DEFAULT_MAX_DEPTH))]
pub fn canonicalize<'py>(
    py: Python<'py>,
    document: Data<'py>,
    profile: &str,
    max_bytes: Option<usize>,
    max_depth: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    // As the CLI: the document is already in the caller's memory, so no size
    // limit unless one is asked for.
    let opts = CanonicalizeOptions::default()
        .profile(self::profile(profile)?)
        .max_input_len(max_bytes.unwrap_or(usize::MAX))
        .max_depth(max_depth);
    let input = document.bytes()?;
    match canonicalize_with(&input, &opts) {
        Ok(out) => Ok(PyBytes::new(py, &out)),
        Err(e) => Err(errors::json_error(py, &e)),
    }
}

/// A fingerprint spec from the arguments `fingerprint` and a route share.
pub(crate) fn spec(
    py: Python<'_>,
    content_type: &str,
    schema_version: u32,
    include: &[String],
    exclude: &[String],
    ignore_query: bool,
    ignore_query_params: &[String],
) -> PyResult<FingerprintSpec> {
    let mut spec =
        FingerprintSpec::new(ContentKind::from_mime(content_type)).schema_version(schema_version);
    for pointer in include {
        spec = spec
            .include(pointer)
            .map_err(|e| errors::spec_error(py, "include", &e))?;
    }
    for pointer in exclude {
        spec = spec
            .exclude(pointer)
            .map_err(|e| errors::spec_error(py, "exclude", &e))?;
    }
    for name in ignore_query_params {
        spec = spec.ignore_query_param(name);
    }
    if ignore_query {
        spec = spec.ignore_query();
    }
    Ok(spec)
}

/// `fingerprint(body, operation="", *, ...) -> str`: 64 lowercase hex characters,
/// as `idemkit fingerprint` prints them. With `method` and `path` the request line
/// counts too (what the middleware computes); without, only the operation and body.
#[pyfunction]
#[pyo3(signature = (
    body, operation = "", *, content_type = "application/json", schema_version = 1,
    include = Vec::new(), exclude = Vec::new(), method = None, path = None, query = None,
    ignore_query = false, ignore_query_params = Vec::new()
))]
#[allow(
    clippy::too_many_arguments,
    reason = "the keyword arguments of the Python function, one per CLI flag"
)]
pub fn fingerprint(
    py: Python<'_>,
    body: Data<'_>,
    operation: &str,
    content_type: &str,
    schema_version: u32,
    include: Vec<String>,
    exclude: Vec<String>,
    method: Option<&str>,
    path: Option<&str>,
    query: Option<&str>,
    ignore_query: bool,
    ignore_query_params: Vec<String>,
) -> PyResult<String> {
    let spec = spec(
        py,
        content_type,
        schema_version,
        &include,
        &exclude,
        ignore_query,
        &ignore_query_params,
    )?;
    let body = body.bytes()?;
    let fingerprint = match (method, path) {
        (Some(method), Some(path)) => {
            let query = query.map(|q| q.strip_prefix('?').unwrap_or(q));
            spec.fingerprint_request(operation, &RequestLine::new(method, path, query), &body)
                .map(|fp| fp.value())
        }
        (None, None) if query.is_none() && !ignore_query && ignore_query_params.is_empty() => {
            spec.fingerprint(operation, &body)
        }
        _ => {
            return Err(errors::argument(
                "method and path go together, and query, ignore_query and ignore_query_params need them",
            ));
        }
    };
    fingerprint
        .map(|fp| hex(fp.as_bytes()))
        .map_err(|e| errors::fingerprint_error(py, &e))
}

/// Lowercase hex, as `Fingerprint`'s `Display` writes it, without a formatter call
/// per byte (a third of a small body's fingerprint time from Python).
fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for nibble in bytes.iter().flat_map(|b| [b >> 4, b & 0x0f]) {
        // A nibble is always a hex digit; from_digit's None cannot happen.
        out.push(char::from_digit(u32::from(nibble), 16).unwrap_or('0'));
    }
    out
}

/// `check_key(key) -> str`: the key itself if it is 1 to 255 visible ASCII
/// characters, else `KeyFormatError`.
#[pyfunction]
pub fn check_key(py: Python<'_>, key: &str) -> PyResult<String> {
    IdempotencyKey::new(key)
        .map(|k| k.as_str().to_owned())
        .map_err(|e| errors::key_error(py, &e))
}

/// `parse_key_header(value) -> str`: the key of an `Idempotency-Key` header value,
/// quoted (`"abc"`) or bare (`abc`), else `KeyFormatError` with the byte offset.
#[pyfunction]
pub fn parse_key_header(py: Python<'_>, value: Data<'_>) -> PyResult<String> {
    IdempotencyKey::parse_header(&value.bytes()?)
        .map(|k| k.as_str().to_owned())
        .map_err(|e| errors::key_error(py, &e))
}

/// `key_header_value(key) -> str`: what a client sends for `key`: bare unless it
/// must be quoted (it holds `,` or starts with `"`).
#[pyfunction]
pub fn key_header_value(py: Python<'_>, key: &str) -> PyResult<String> {
    IdempotencyKey::new(key)
        .map(|k| k.to_client_header_value())
        .map_err(|e| errors::key_error(py, &e))
}

/// `derive_key(namespace, run_id, step_id) -> str`: the deterministic key
/// (`ik1-` + 32 hex), byte for byte Rust's `IdempotencyKey::derive`.
#[pyfunction]
pub fn derive_key(namespace: &str, run_id: &str, step_id: &str) -> String {
    IdempotencyKey::derive(namespace, run_id, step_id)
        .as_str()
        .to_owned()
}
