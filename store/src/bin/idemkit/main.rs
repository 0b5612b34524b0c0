//! `idemkit`: the operator and developer command line.
//!
//! Exit codes follow sysexits(3): 0 success, 64 usage, 65 rejected input (data
//! error), 69 unavailable / outcome unknown, 74 I/O error, 75 try again later.

#![warn(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod call_cmd;
mod exit;
mod key_cmd;

/// Safe retries: canonical JSON, fingerprints, keys and an embedded idempotency store.
#[derive(Parser)]
#[command(name = "idemkit", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Send an HTTP request as one logical action with a journalled idempotency key.
    Call(call_cmd::CallArgs),
    /// Check idempotency keys.
    #[command(subcommand)]
    Key(key_cmd::KeyCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Call(args) => call_cmd::run(args),
        Command::Key(cmd) => key_cmd::run(cmd),
    }
}
