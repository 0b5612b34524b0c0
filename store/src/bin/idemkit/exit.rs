//! sysexits(3) codes used by every subcommand.

/// Success.
pub(crate) const OK: u8 = 0;
/// The input was rejected (bad JSON, bad key, changed payload).
pub(crate) const DATA_ERR: u8 = 65;
