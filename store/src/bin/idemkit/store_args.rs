//! What every store subcommand shares: `--db`, opening the file, error exits.

use std::path::PathBuf;

use clap::Args;
use idemkit::adapters::redb::{LockRetry, OpenError};
use idemkit::store::{StorageError, Store};

use crate::exit;

/// `--db PATH`.
#[derive(Args, Clone, Debug)]
pub(crate) struct DbArg {
    /// The store file (created if absent). It is opened only around each
    /// transaction, so several `idemkit` processes can share it.
    #[arg(long, value_name = "PATH", default_value = "idemkit.redb")]
    pub(crate) db: PathBuf,
}

impl DbArg {
    /// Opens the store for sharing with other processes, or reports why not.
    pub(crate) fn open(&self) -> Result<Store, u8> {
        idemkit::adapters::redb::RedbAdapter::open_shared(&self.db, LockRetry::default())
            .map(Store::from)
            .map_err(|e| {
                eprintln!("idemkit: {}: {e}", self.db.display());
                open_exit(&e)
            })
    }
}

/// 75 while another process holds the file, 74 for anything else (not an
/// idemkit database, corrupt, unreadable).
pub(crate) fn open_exit(e: &OpenError) -> u8 {
    match e {
        OpenError::Busy { .. } => exit::TEMP_FAIL,
        _ => exit::IO_ERR,
    }
}

/// The exit status for a storage failure: 75 when trying again later may
/// succeed (a file another process holds, a database that cannot be reached,
/// a contended record), 64 for a bad PostgreSQL configuration, 74 otherwise.
pub(crate) fn storage_exit(e: &StorageError) -> u8 {
    #[cfg(feature = "postgres")]
    if let Some(idemkit::adapters::postgres::PgError::Config { .. }) = e.downcast_ref() {
        return exit::USAGE;
    }
    if e.is_transient() {
        exit::TEMP_FAIL
    } else {
        exit::IO_ERR
    }
}

/// Parses `--tenant`, `--operation` and `--key`, or prints why not (exit 65).
pub(crate) fn record_address(
    tenant: &str,
    operation: &str,
    key: &str,
) -> Result<(idemkit::Scope, idemkit::IdempotencyKey), u8> {
    let scope = idemkit::Scope::new(tenant, operation).map_err(|e| {
        eprintln!("idemkit: {e}");
        exit::DATA_ERR
    })?;
    let key = idemkit::IdempotencyKey::new(key).map_err(|e| {
        eprintln!("idemkit: invalid idempotency key: {e} [{}]", e.code());
        exit::DATA_ERR
    })?;
    Ok((scope, key))
}

/// Prints one JSON value on stdout.
pub(crate) fn print_json(value: &serde_json::Value) {
    println!("{value}");
}
