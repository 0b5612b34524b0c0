//! `idemkit key check VALUE`.

use std::process::ExitCode;

use clap::Subcommand;
use idemkit::IdempotencyKey;

use crate::exit;

#[derive(Subcommand)]
pub(crate) enum KeyCommand {
    /// Validate an `Idempotency-Key` header value (quoted `"abc"` or bare `abc`).
    ///
    /// Prints the key and exits 0, or prints the reason on stderr and exits 65.
    /// A bare value may not hold `,` (HTTP joins two field lines with it); quote a
    /// key that does: '"a,b"'.
    ///
    /// Examples:
    ///   idemkit key check 'order-42'
    ///   idemkit key check '"8e03978e-40d5-43e8-bc93-6894a57f9324"'
    #[command(verbatim_doc_comment)]
    Check {
        /// The header value.
        value: String,
    },
}

pub(crate) fn run(cmd: KeyCommand) -> ExitCode {
    match cmd {
        KeyCommand::Check { value } => match IdempotencyKey::parse_header(value.as_bytes()) {
            Ok(key) => {
                println!("{key}");
                ExitCode::from(exit::OK)
            }
            Err(e) => {
                eprintln!("idemkit: invalid idempotency key: {e} [{}]", e.code());
                ExitCode::from(exit::DATA_ERR)
            }
        },
    }
}
