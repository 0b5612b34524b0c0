//! `idemkit migrate --postgres URL [--print]`: create or upgrade the PostgreSQL
//! schema, or print the SQL for teams that run their own migrations.

use std::process::ExitCode;

use clap::Args;

use crate::exit;

/// Create or upgrade idemkit's tables in PostgreSQL (or print the SQL).
///
/// Migrations are versioned and run in one transaction under an advisory lock,
/// so several instances (or this command) may run them at the same time. The
/// store runs them itself on start unless told to only check them.
///
/// Examples:
///   idemkit migrate --postgres postgres://idemkit@db.internal/app
///   idemkit migrate --print --pg-schema idemkit > idemkit-v1.sql
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub(crate) struct MigrateArgs {
    /// The database to migrate (`postgres://user@host:port/db`).
    #[arg(long, value_name = "URL", required_unless_present = "print")]
    postgres: Option<String>,
    /// The PostgreSQL schema holding idemkit's tables (default: `public`).
    #[arg(long, value_name = "NAME")]
    pg_schema: Option<String>,
    /// Print the SQL that creates the schema in an empty database, and change nothing.
    #[arg(long)]
    print: bool,
}

#[cfg(feature = "postgres")]
pub(crate) fn run(args: &MigrateArgs) -> ExitCode {
    use idemkit::adapters::postgres::{PgError, PgOptions, PostgresAdapter, SCHEMA_VERSION};

    let report = |e: &PgError| {
        eprintln!("idemkit: {e}");
        ExitCode::from(match e {
            PgError::Unavailable { .. } => exit::TEMP_FAIL,
            PgError::Config { .. } => exit::USAGE,
            _ => exit::IO_ERR,
        })
    };
    if args.print {
        return match PostgresAdapter::migration_script(args.pg_schema.as_deref()) {
            Ok(script) => {
                print!("{script}");
                ExitCode::from(exit::OK)
            }
            Err(e) => report(&e),
        };
    }
    let Some(url) = &args.postgres else {
        eprintln!("idemkit: --postgres URL is required");
        return ExitCode::from(exit::USAGE);
    };
    let options = PgOptions {
        schema: args.pg_schema.clone(),
        pool_size: 1,
        ..PgOptions::default()
    };
    // Connecting runs the migrations; `migrate` then reports where they started.
    match PostgresAdapter::connect_with(url, options).and_then(|store| store.migrate()) {
        Ok(_) => {
            println!("idemkit schema is at version {SCHEMA_VERSION}");
            ExitCode::from(exit::OK)
        }
        Err(e) => report(&e),
    }
}

#[cfg(not(feature = "postgres"))]
pub(crate) fn run(args: &MigrateArgs) -> ExitCode {
    let _ = (&args.postgres, &args.pg_schema, args.print);
    eprintln!(
        "idemkit: this idemkit was built without the `postgres` feature (cargo install idemkit --features postgres)"
    );
    ExitCode::from(exit::USAGE)
}
