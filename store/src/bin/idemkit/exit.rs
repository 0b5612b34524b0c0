//! sysexits(3) codes used by every subcommand.

/// Success.
pub(crate) const OK: u8 = 0;
/// `idemkit call`: the server refused the action definitively.
pub(crate) const REJECTED: u8 = 2;
/// `idemkit call`: the action is pending and the origin's circuit breaker is open,
/// so nothing (more) was sent.
pub(crate) const BREAKER_OPEN: u8 = 3;
/// The command line was wrong.
pub(crate) const USAGE: u8 = 64;
/// The input was rejected (bad JSON, bad key, changed payload).
pub(crate) const DATA_ERR: u8 = 65;
/// An input file could not be read.
pub(crate) const NO_INPUT: u8 = 66;
/// The outcome is unknown / a service is unavailable.
pub(crate) const UNAVAILABLE: u8 = 69;
/// An internal error.
pub(crate) const SOFTWARE: u8 = 70;
/// A storage or file I/O error.
pub(crate) const IO_ERR: u8 = 74;
/// Try again later (in progress, or retries exhausted without an answer).
pub(crate) const TEMP_FAIL: u8 = 75;
