//! `--db PATH` or `--postgres URL`: the operator commands (`list`, `show`,
//! `resolve`, `gc`, `stats`) work the same on either store.

use clap::Args;
use idemkit::core::machine::{Policy, Resolution};
use idemkit::core::record::{Record, StateName};
#[cfg(feature = "postgres")]
use idemkit::postgres::{Migrations, PgError, PgOptions, PgStore};
use idemkit::redb_store::{GcReport, ListedRecord, OperatorError, QueryError, Stats, Store};
use idemkit::{IdempotencyKey, Scope};

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
    /// (default: the connection's search path).
    #[arg(long, value_name = "NAME", requires = "postgres")]
    pg_schema: Option<String>,
}

/// An opened store.
pub(crate) enum Operated {
    Redb(Store),
    #[cfg(feature = "postgres")]
    Pg(PgStore),
}

/// A failed store operation: the message is printed, the code is the exit status.
pub(crate) struct Failed {
    pub(crate) code: u8,
}

fn failed(message: impl std::fmt::Display, code: u8) -> Failed {
    eprintln!("idemkit: {message}");
    Failed { code }
}

fn query_failed(e: &QueryError) -> Failed {
    let code = match e {
        QueryError::Storage(s) => storage_exit(s),
        _ => exit::IO_ERR,
    };
    failed(e, code)
}

#[cfg(feature = "postgres")]
fn pg_failed(e: &PgError) -> Failed {
    let code = match e {
        PgError::Unavailable { .. } | PgError::Contention { .. } => exit::TEMP_FAIL,
        PgError::NotFound { .. } | PgError::Rejected { .. } => exit::DATA_ERR,
        PgError::Config { .. } => exit::USAGE,
        _ => exit::IO_ERR,
    };
    failed(e, code)
}

impl StoreArg {
    /// Opens the chosen store, or reports why not.
    pub(crate) fn open(&self) -> Result<Operated, u8> {
        match &self.postgres {
            None => self.db.open().map(Operated::Redb),
            #[cfg(feature = "postgres")]
            Some(url) => {
                let options = PgOptions {
                    schema: self.pg_schema.clone(),
                    pool_size: 1,
                    // Operators never create tables by accident: `idemkit migrate` does.
                    migrations: Migrations::CheckOnly,
                    ..PgOptions::default()
                };
                PgStore::connect_with(url, options)
                    .map(Operated::Pg)
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

impl Operated {
    pub(crate) fn list(&self, state: Option<StateName>) -> Result<Vec<ListedRecord>, Failed> {
        match self {
            Operated::Redb(s) => s.list(state).map_err(|e| query_failed(&e)),
            #[cfg(feature = "postgres")]
            Operated::Pg(s) => s.list(state).map_err(|e| pg_failed(&e)),
        }
    }

    pub(crate) fn list_unresolved(&self) -> Result<Vec<ListedRecord>, Failed> {
        match self {
            Operated::Redb(s) => s.list_unresolved().map_err(|e| query_failed(&e)),
            #[cfg(feature = "postgres")]
            Operated::Pg(s) => s.list_unresolved_now().map_err(|e| pg_failed(&e)),
        }
    }

    pub(crate) fn get(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, Failed> {
        match self {
            Operated::Redb(s) => s.get(scope, key).map_err(|e| query_failed(&e)),
            #[cfg(feature = "postgres")]
            Operated::Pg(s) => {
                use idemkit::backend::IdempotencyBackend;
                s.get(scope, key).map_err(|e| pg_failed(&e))
            }
        }
    }

    /// Settles the record; returns it as written.
    pub(crate) fn resolve(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        policy: &Policy,
    ) -> Result<Record, Failed> {
        match self {
            Operated::Redb(s) => s.resolve(scope, key, resolution, policy).map_err(|e| {
                let code = match &e {
                    OperatorError::Storage(s) => storage_exit(s),
                    _ => exit::DATA_ERR,
                };
                failed(e, code)
            }),
            #[cfg(feature = "postgres")]
            Operated::Pg(s) => s
                .resolve_now(scope, key, resolution, policy)
                .map_err(|e| pg_failed(&e)),
        }
    }

    pub(crate) fn gc(&self, max_batch: usize) -> Result<GcReport, Failed> {
        match self {
            Operated::Redb(s) => s.gc(max_batch).map_err(|e| query_failed(&e)),
            #[cfg(feature = "postgres")]
            Operated::Pg(s) => s.gc_now(max_batch).map_err(|e| pg_failed(&e)),
        }
    }

    pub(crate) fn stats(&self) -> Result<Stats, Failed> {
        match self {
            Operated::Redb(s) => s.stats().map_err(|e| query_failed(&e)),
            #[cfg(feature = "postgres")]
            Operated::Pg(s) => s.stats().map_err(|e| pg_failed(&e)),
        }
    }
}
