//! `idemkit`: the operator and developer command line.
//!
//! Exit codes follow sysexits(3): 0 success, 64 usage, 65 rejected input (data
//! error), 66 unreadable input, 69 unavailable / outcome unknown, 74 I/O error, 75 try again later.
//! `probe` is a test tool and says so the way test tools do: 0 no check failed,
//! 1 a check failed, 2 usage.

#![warn(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod call_cmd;
mod canonicalize_cmd;
#[cfg(feature = "axum")]
mod console;
mod exec_cmd;
mod exec_process;
mod exit;
mod fingerprint_cmd;
mod input;
mod key_cmd;
mod listen_tls;
mod log;
// The TLS roots, as the library's PostgreSQL adapter loads them.
#[cfg(feature = "axum")]
mod mcp;
mod migrate_cmd;
mod probe;
#[cfg(feature = "axum")]
mod proxy;
mod records_cmd;
mod store_args;
mod store_choice;
mod timestamp;
#[path = "../../tls_files.rs"]
mod tls_files;

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
    // The about text and examples come from the argument structs' doc comments.
    Canonicalize(canonicalize_cmd::CanonicalizeArgs),
    Fingerprint(fingerprint_cmd::FingerprintArgs),
    // The about text, the process-group rules and examples: ExecArgs' doc comment.
    Exec(exec_cmd::ExecArgs),
    // The checks, the requests it sends and examples: ProbeArgs' doc comment.
    Probe(probe::ProbeArgs),
    // The contract, the crash window and examples: ProxyArgs' doc comment.
    #[cfg(feature = "axum")]
    Proxy(proxy::ProxyArgs),
    // Both protocol eras, HTTP and stdio, and examples: McpArgs' doc comment.
    #[cfg(feature = "axum")]
    Mcp(mcp::McpArgs),
    // The page, its security and examples: ConsoleArgs' doc comment.
    #[cfg(feature = "axum")]
    Console(console::command::ConsoleArgs),
    /// List the records in a store.
    List(records_cmd::ListArgs),
    /// Show one record.
    Show(records_cmd::ShowArgs),
    /// Settle a record whose outcome is unknown.
    Resolve(records_cmd::ResolveArgs),
    /// Prune and delete records past their retention windows.
    Gc(records_cmd::GcArgs),
    /// Counts per state and the file size.
    Stats(records_cmd::StatsArgs),
    /// Create or print the PostgreSQL schema.
    Migrate(migrate_cmd::MigrateArgs),
    /// Internal to `exec`: becomes CMD, killed when exec dies (Linux).
    #[cfg(unix)]
    #[command(name = "__exec-child", hide = true)]
    ExecChild(exec_process::ChildArgs),
    /// Internal to `exec`: kills CMD's process group when exec dies.
    #[cfg(unix)]
    #[command(name = "__exec-reaper", hide = true)]
    ExecReaper(exec_process::ReaperArgs),
}

fn main() -> ExitCode {
    // The store turns a panic inside redb (damaged pages) into a typed error; keep
    // what the default hook would print to one line on stderr.
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("idemkit: internal error: {message}{place}");
    }));
    // A file-size limit (RLIMIT_FSIZE) must reach the store as the I/O error it
    // is (EFBIG), which the store recovers from once the limit is raised, and
    // not end the process by SIGXFSZ's default action. A handler, unlike an
    // ignored disposition, is not inherited by the commands `exec` runs.
    #[cfg(unix)]
    let _ = signal_hook::flag::register(
        signal_hook::consts::SIGXFSZ,
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
    );
    // A usage error exits 64 (EX_USAGE) like every other refused argument of
    // this tool, not clap's 2; `--help` and `--version` print and exit 0.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            if !e.use_stderr() {
                return ExitCode::SUCCESS;
            }
            // `probe` follows the test tools' convention (0 pass, 1 fail, 2 usage).
            let probing = std::env::args().nth(1).as_deref() == Some("probe");
            return ExitCode::from(if probing { probe::USAGE } else { exit::USAGE });
        }
    };
    if let Err(e) = log::init() {
        eprintln!("idemkit: {e}");
        return ExitCode::from(exit::USAGE);
    }
    match cli.command {
        Command::Call(args) => call_cmd::run(args),
        Command::Key(cmd) => key_cmd::run(cmd),
        Command::Canonicalize(args) => canonicalize_cmd::run(&args),
        Command::Fingerprint(args) => fingerprint_cmd::run(&args),
        Command::Exec(args) => exec_cmd::run(args),
        Command::Probe(args) => probe::run(&args),
        #[cfg(feature = "axum")]
        Command::Proxy(args) => proxy::run(&args),
        #[cfg(feature = "axum")]
        Command::Mcp(args) => mcp::run(&args),
        #[cfg(feature = "axum")]
        Command::Console(args) => console::command::run(&args),
        Command::List(args) => records_cmd::list(args),
        Command::Show(args) => records_cmd::show(args),
        Command::Resolve(args) => records_cmd::resolve(args),
        Command::Gc(args) => records_cmd::gc(args),
        Command::Stats(args) => records_cmd::stats(args),
        Command::Migrate(args) => migrate_cmd::run(&args),
        #[cfg(unix)]
        Command::ExecChild(args) => exec_process::run_child(args),
        #[cfg(unix)]
        Command::ExecReaper(args) => exec_process::run_reaper(&args),
    }
}

/// Completes when `stop` turns true (or its sender is gone): the stop of a
/// listener's accept loop ([`idemkit::http::serve`]).
async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}
