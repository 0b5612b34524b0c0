//! `--db PATH` or `--postgres URL`: the operator commands (`list`, `show`,
//! `resolve`, `gc`, `stats`) run the same engine over either adapter.

use clap::Args;
#[cfg(feature = "postgres")]
use idemkit::adapters::postgres::{Migrations, PgError, PgOptions, PostgresAdapter};
use idemkit::store::{QueryError, Store, WorkerError};

use crate::exit;
use crate::store_args::{DbArg, storage_exit};

/// Which store to operate.
#[derive(Args, Clone, Debug)]
pub(crate) struct StoreArg {
    #[command(flatten)]
    db: DbArg,
    /// Operate a PostgreSQL store instead of a file
    /// (`postgres://user@host:port/db`; the schema must be migrated, see `idemkit migrate`).
    #[arg(long, value_name = "URL", conflicts_with = "db")]
    postgres: Option<String>,
    /// With --postgres: the PostgreSQL schema holding idemkit's tables
    /// (default: `public`).
    #[arg(long, value_name = "NAME", requires = "postgres")]
    pg_schema: Option<String>,
}

/// A failed store operation: the message is printed, the code is the exit status.
pub(crate) struct Failed {
    pub(crate) code: u8,
}

fn failed(message: impl std::fmt::Display, code: u8) -> Failed {
    eprintln!("idemkit: {message}");
    Failed { code }
}

pub(crate) fn query_failed(e: &QueryError) -> Failed {
    let code = match e {
        QueryError::Storage(s) => storage_exit(s),
        _ => exit::IO_ERR,
    };
    failed(e, code)
}

/// A refused or failed `resolve`: 65 when the state machine refused (or there
/// is no record), else per the storage failure.
pub(crate) fn operator_failed(e: &WorkerError) -> Failed {
    let code = match e {
        WorkerError::Storage(s) => storage_exit(s),
        _ => exit::DATA_ERR,
    };
    failed(e, code)
}

#[cfg(feature = "postgres")]
fn pg_failed(e: &PgError) -> Failed {
    let code = match e {
        PgError::Unavailable { .. } | PgError::Contention { .. } => exit::TEMP_FAIL,
        PgError::Config { .. } => exit::USAGE,
        _ => exit::IO_ERR,
    };
    failed(e, code)
}

impl StoreArg {
    /// The redb file, unless the store is PostgreSQL.
    pub(crate) fn redb_path(&self) -> Option<&std::path::Path> {
        self.postgres.is_none().then_some(self.db.db.as_path())
    }

    /// Opens the chosen store (the engine over the redb file or PostgreSQL),
    /// or reports why not.
    pub(crate) fn open(&self) -> Result<Store, u8> {
        match &self.postgres {
            None => self.db.open(),
            #[cfg(feature = "postgres")]
            Some(url) => {
                let options = PgOptions {
                    schema: self.pg_schema.clone(),
                    pool_size: 1,
                    // Operators never create tables by accident: `idemkit migrate` does.
                    migrations: Migrations::CheckOnly,
                    ..PgOptions::default()
                };
                PostgresAdapter::connect_with(url, options)
                    .map(Store::from)
                    .map_err(|e| pg_failed(&e).code)
            }
            #[cfg(not(feature = "postgres"))]
            Some(_) => Err(failed(
                "this idemkit was built without the `postgres` feature (cargo install idemkit --features postgres)",
                exit::USAGE,
            )
            .code),
        }
    }
}
