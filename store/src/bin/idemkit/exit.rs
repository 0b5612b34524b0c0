//! sysexits(3) codes used by every subcommand.

/// Success.
pub(crate) const OK: u8 = 0;
/// The input was rejected (bad JSON, bad key, changed payload).
pub(crate) const DATA_ERR: u8 = 65;
/// The command line was wrong (a bad pointer, a bad option value).
pub(crate) const USAGE: u8 = 64;
/// An input file could not be opened or read.
pub(crate) const NO_INPUT: u8 = 66;
/// Writing the result failed.
pub(crate) const IO_ERR: u8 = 74;
