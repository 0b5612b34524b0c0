//! Rust errors as the exceptions of `idemkit_rs/errors.py`, each with its stable
//! `code` and, where the error has them, its byte offset and JSON Pointer.
//!
//! The classes are written in Python (so that `JsonError` is also a `ValueError`
//! and every attribute is plain and typed); this module only fills them in.

use idemkit::journal::JournalError;
use idemkit_core::fingerprint::{FingerprintError, SpecError};
use idemkit_core::{JsonError, KeyError};
use pyo3::call::PyCallArgs;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// An instance of `idemkit_rs.errors.<class>(*args)` as a `PyErr`.
fn raise<'py, A>(py: Python<'py>, class: &str, args: A) -> PyErr
where
    A: PyCallArgs<'py>,
{
    let made = py
        .import("idemkit_rs.errors")
        .and_then(|module| module.getattr(class))
        .and_then(|class| class.call1(args));
    match made {
        Ok(instance) => PyErr::from_value(instance),
        Err(e) => e,
    }
}

/// A rejected JSON document: `JsonError(message, code, offset, pointer)`.
pub(crate) fn json_error(py: Python<'_>, e: &JsonError) -> PyErr {
    raise(
        py,
        "JsonError",
        (e.to_string(), e.code(), e.offset, e.pointer.clone()),
    )
}

/// A body that could not be fingerprinted: a `JsonError`, a `FormError`, or a
/// `SpecError` for a field selection on a body that is not JSON.
pub(crate) fn fingerprint_error(py: Python<'_>, e: &FingerprintError) -> PyErr {
    match e {
        FingerprintError::Json(json) => json_error(py, json),
        FingerprintError::Form(form) => {
            raise(py, "FormError", (e.to_string(), e.code(), form.offset))
        }
        _ => raise(py, "SpecError", (e.to_string(), e.code())),
    }
}

/// A malformed JSON Pointer in a field selection.
pub(crate) fn spec_error(py: Python<'_>, what: &str, e: &SpecError) -> PyErr {
    raise(py, "SpecError", (format!("{what} {e}"), e.code()))
}

/// A refused key: `KeyFormatError(message, code, offset or None)`.
pub(crate) fn key_error(py: Python<'_>, e: &KeyError) -> PyErr {
    let offset = match e {
        KeyError::InvalidCharacter { offset, .. }
        | KeyError::UnterminatedString { offset }
        | KeyError::InvalidEscape { offset }
        | KeyError::TrailingData { offset }
        | KeyError::BareComma { offset } => Some(*offset),
        _ => None,
    };
    raise(py, "KeyFormatError", (e.to_string(), e.code(), offset))
}

/// A journal error: `PayloadChangedError` for a payload that changed under an
/// action id, `JournalError` for everything else.
pub(crate) fn journal_error(py: Python<'_>, e: &JournalError) -> PyErr {
    match e {
        JournalError::PayloadChanged { action_id } => raise(
            py,
            "PayloadChangedError",
            (
                e.to_string(),
                "journal-payload-changed",
                action_id.to_owned(),
            ),
        ),
        JournalError::InvalidActionId { .. } => {
            raise(py, "JournalError", (e.to_string(), "action-id-invalid"))
        }
        JournalError::UnknownAction { .. } => raise(
            py,
            "JournalError",
            (e.to_string(), "journal-unknown-action"),
        ),
        JournalError::UnknownAttempt { .. } => raise(
            py,
            "JournalError",
            (e.to_string(), "journal-unknown-attempt"),
        ),
        JournalError::Corrupt { .. } | JournalError::CorruptBreaker { .. } => {
            raise(py, "JournalError", (e.to_string(), "journal-corrupt"))
        }
        _ => raise(py, "JournalError", (e.to_string(), "journal-storage")),
    }
}

/// A store error with `code`.
pub(crate) fn store_error(py: Python<'_>, code: &str, e: impl std::fmt::Display) -> PyErr {
    raise(py, "StoreError", (e.to_string(), code.to_owned()))
}

/// An argument the caller got wrong (a `ValueError` naming it).
pub(crate) fn argument(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}
