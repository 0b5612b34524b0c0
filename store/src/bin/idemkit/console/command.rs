//! `idemkit console`: the operator console and the admin API over a store,
//! without a proxy in front of anything.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use idemkit::http::Metrics;

use crate::exit;
use crate::proxy::admin::{self, Admin};
use crate::proxy::config::{ADMIN_TOKEN_ENV, MIN_SECRET_BYTES};
use crate::store_choice::StoreArg;

/// Serve the operator console over a store: the records needing a person, and
/// resolving them with a note kept in an audit log.
///
/// The page is at http://ADDR/console (https:// with --tls-cert-file and
/// --tls-key-file); it asks for the admin token (from
/// --token-file, or the environment variable IDEMKIT_ADMIN_TOKEN, at least 32
/// bytes) and the operator's name. The admin JSON API (/records, /healthz,
/// /metrics) is served beside it. A redb file held by a running `idemkit
/// proxy` cannot be opened here: use the proxy's own admin listener, which
/// serves the same console.
///
/// Examples:
///
///   idemkit console --db idemkit.redb --listen 127.0.0.1:9090 --token-file admin.token
///   idemkit console --postgres postgres://idemkit@db/idemkit --audit-log /var/log/idemkit-audit.jsonl
///   idemkit console --db idemkit.redb --listen 0.0.0.0:9090 --token-file admin.token \
///     --tls-cert-file /etc/idemkit/console.crt --tls-key-file /etc/idemkit/console.key
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub(crate) struct ConsoleArgs {
    #[command(flatten)]
    store: StoreArg,
    /// The address to serve the console on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9090")]
    listen: String,
    /// A file holding the admin token (default: the environment variable
    /// IDEMKIT_ADMIN_TOKEN).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Where resolves are recorded (default: beside a redb store, e.g.
    /// idemkit.audit.jsonl; a PostgreSQL store needs it named, or the console
    /// resolves nothing).
    #[arg(long, value_name = "FILE")]
    audit_log: Option<PathBuf>,
    /// Serve HTTPS with this certificate chain (PEM, the console's own
    /// certificate first; read again when it changes). Needs --tls-key-file.
    #[arg(long, value_name = "FILE")]
    tls_cert_file: Option<PathBuf>,
    /// The private key of --tls-cert-file (PEM, unencrypted).
    #[arg(long, value_name = "FILE")]
    tls_key_file: Option<PathBuf>,
}

fn token(args: &ConsoleArgs) -> Result<String, String> {
    let token = match &args.token_file {
        Some(file) => std::fs::read_to_string(file)
            .map_err(|e| format!("--token-file {}: {e}", file.display()))?
            .trim_end_matches(['\r', '\n'])
            .to_owned(),
        None => std::env::var(ADMIN_TOKEN_ENV).map_err(|_| {
            format!(
                "the console needs the admin token: --token-file FILE or the environment \
                 variable {ADMIN_TOKEN_ENV}"
            )
        })?,
    };
    if token.len() < MIN_SECRET_BYTES {
        return Err(format!(
            "the admin token is {} bytes: it needs at least {MIN_SECRET_BYTES}",
            token.len()
        ));
    }
    Ok(token)
}

pub(crate) fn run(args: &ConsoleArgs) -> ExitCode {
    let token = match token(args) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("idemkit console: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    if args.listen.parse::<std::net::SocketAddr>().is_err() {
        eprintln!(
            "idemkit console: --listen {:?}: expected ip:port, e.g. 127.0.0.1:9090",
            args.listen
        );
        return ExitCode::from(exit::USAGE);
    }
    let tls = match crate::listen_tls::from_settings(
        crate::listen_tls::CONSOLE,
        args.tls_cert_file.as_deref(),
        args.tls_key_file.as_deref(),
    ) {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("idemkit console: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let store = match args.store.open() {
        Ok(s) => s,
        Err(code) => return ExitCode::from(code),
    };
    let audit_log = args.audit_log.clone().or_else(|| {
        args.store
            .redb_path()
            .map(|db| db.with_extension("audit.jsonl"))
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("idemkit console: cannot start a runtime: {e}");
            return ExitCode::from(exit::IO_ERR);
        }
    };
    let served = runtime.block_on(async move {
        let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
        crate::proxy::stop_on_signal(stop_tx, "console")?;
        let admin: Arc<Admin> = Admin::start(
            store,
            Arc::new(Metrics::new()),
            Some(token),
            Vec::new(),
            audit_log.as_deref(),
        )?;
        match &admin.console.audit {
            Ok(log) => println!("idemkit console: audit log {}", log.path().display()),
            Err(why) => eprintln!("idemkit console: {why}"),
        }
        let tls = (tls, crate::listen_tls::CONSOLE);
        let url = admin::serve("console", &args.listen, tls, admin, stop_rx.clone()).await?;
        println!("idemkit console: {url}/console");
        let _ = stop_rx.wait_for(|stop| *stop).await;
        Ok::<(), String>(())
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idemkit console: {e}");
            ExitCode::from(exit::UNAVAILABLE)
        }
    }
}
