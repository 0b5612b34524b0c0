//! `idemkit mcp --config FILE [-- CMD ARGS…]`: docs/architecture.md's idempotency
//! contract for MCP `tools/call`, in front of any MCP server, for both protocol
//! eras (decided per request). Over Streamable HTTP it serves the endpoint at
//! the upstream's path; with a command after `--` it speaks stdio to the client
//! and to the command. It shares the proxy's stores, tenant rules, metrics and
//! admin listener. See docs/agents.md and examples/mcp.toml.

mod call;
mod config;
mod http;
mod jsonrpc;
mod sse;
mod stdio;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use axum::body::Body;
use clap::Args;
use idemkit::http::Metrics;
use idemkit::store::Store;

use crate::exit;
use crate::proxy::access_log::{AccessLog, Arrived};
use crate::proxy::admin;
use crate::proxy::forward::Upstream;
use call::Gateway;
use config::McpConfig;

/// Put docs/architecture.md's idempotency contract in front of an MCP server.
///
/// A `tools/call` of a protected tool (every tool whose annotations do not say
/// `readOnlyHint`, unless the config says otherwise) is claimed under its key,
/// `params._meta["io.idemkit/idempotency-key"]` (or `params.idempotencyKey`),
/// before it reaches the server; the result is recorded and every retry with
/// the key gets it back, marked `_meta["io.idemkit/replayed"]`. A retry while
/// the first runs, or the key with other arguments, gets a JSON-RPC error; a
/// call whose outcome is unknown (the server died after it was sent) gets a
/// tool error that tells the model not to call again. Both protocol eras
/// (2025-11-25 with sessions, 2026-07-28 without) pass through intact.
///
/// Examples:
///   idemkit mcp --config examples/mcp.toml
///   idemkit mcp --config mcp.toml --listen 127.0.0.1:8090 --upstream http://127.0.0.1:3000/mcp
///   idemkit mcp --config mcp.toml -- node server.mjs      (stdio)
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct McpArgs {
    /// The TOML configuration (see examples/mcp.toml).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Overrides `listen` from the file.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Overrides `upstream` from the file (the server's Streamable HTTP URL).
    #[arg(long, value_name = "URL")]
    upstream: Option<String>,
    /// The MCP server to run and speak stdio with, after `--`.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

pub(crate) fn run(args: &McpArgs) -> ExitCode {
    let stdio = !args.command.is_empty();
    let config = match config::load(
        &args.config,
        args.listen.as_deref(),
        args.upstream.as_deref(),
        stdio,
    ) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("idemkit mcp: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    if stdio {
        return stdio::run(config, &args.command);
    }
    let store = match call::open(&config.store) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("idemkit mcp: {e}");
            return ExitCode::from(exit::UNAVAILABLE);
        }
    };
    let workers = config.workers.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let runtime = match runtime(workers) {
        Ok(r) => r,
        Err(code) => return code,
    };
    match runtime.block_on(serve(config, store)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idemkit mcp: {e}");
            ExitCode::from(exit::IO_ERR)
        }
    }
}

/// A runtime with `workers` threads, or the exit code when none can start.
fn runtime(workers: usize) -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("idemkit mcp: cannot start a runtime: {e}");
            ExitCode::from(exit::IO_ERR)
        })
}

/// The admin listener's view: the store, the metrics, and each configured
/// tool's policy (resolve keeps a record's own windows; these fill in for
/// older records).
fn admin_state(
    config: &McpConfig,
    store: &Store,
    metrics: &Arc<Metrics>,
) -> Result<Arc<admin::Admin>, String> {
    admin::Admin::start(
        store.clone(),
        Arc::clone(metrics),
        config.admin_token.clone(),
        config
            .tools
            .values()
            .map(|t| (t.name.clone(), t.policy))
            .collect(),
        config.audit_log.as_deref(),
    )
}

async fn serve(config: McpConfig, store: Store) -> Result<(), String> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    crate::proxy::stop_on_signal(stop_tx, "mcp")?;
    let metrics = Arc::new(Metrics::new());
    metrics.orphans_settled(store.orphans_settled_at_open().len());
    if let Some(addr) = &config.admin {
        let url = admin::serve(
            "mcp",
            addr,
            (config.admin_tls.clone(), crate::listen_tls::ADMIN),
            admin_state(&config, &store, &metrics)?,
            stop_rx.clone(),
        )
        .await?;
        println!("idemkit mcp: admin on {url}");
    }
    crate::proxy::spawn_gc(store.clone(), Arc::clone(&metrics), config.gc_interval);
    let Some(upstream) = config.upstream.clone() else {
        return Err("no upstream to serve".to_owned());
    };
    let upstream_tls = config.upstream_tls.clone();
    let origin: ::http::Uri = match upstream.authority() {
        Some(authority) => format!("{}://{authority}", upstream.scheme_str().unwrap_or("http"))
            .parse()
            .map_err(|e| format!("upstream {upstream}: {e}"))?,
        None => return Err(format!("upstream {upstream}: no host")),
    };
    let listen = config.listen.clone();
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .map_err(|e| format!("listen {listen}: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("listen {listen}: {e}"))?;
    let endpoint = upstream.path().to_owned();
    let tenant = Box::new(crate::proxy::tenant::principal(&config.tenant));
    let header_read_timeout = config.header_read_timeout;
    let listen_tls = config.listen_tls.clone();
    if let Some(tls) = &listen_tls {
        tls.observed_by(&metrics);
    }
    let access_log = config
        .access_log
        .clone()
        .map(AccessLog::start)
        .transpose()?;
    let logged = access_log.clone();
    let gateway = Arc::new(Gateway::new(config, Some(store), metrics));
    let front = Arc::new(http::HttpGateway {
        gateway,
        upstream: Upstream::new(&origin, upstream_tls),
        endpoint: endpoint.clone(),
        tenant,
        loopback: addr.ip().is_loopback(),
    });
    let scheme = if listen_tls.is_some() {
        "https"
    } else {
        "http"
    };
    println!("idemkit mcp: in front of {upstream}, listening on {scheme}://{addr}{endpoint}");
    let over_tls = listen_tls.is_some();
    let service = tower::service_fn(move |mut request: ::http::Request<Body>| {
        let front = Arc::clone(&front);
        if over_tls {
            request
                .extensions_mut()
                .insert(crate::proxy::forward::OverTls);
        }
        let arrived = logged.as_ref().map(|_| {
            let peer = request
                .extensions()
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map_or(std::net::SocketAddr::from(([0, 0, 0, 0], 0)), |c| c.0);
            Arrived::of(&request, peer)
        });
        let log = logged.clone();
        async move {
            let response = front.handle(request).await;
            if let (Some(log), Some(arrived)) = (log, arrived) {
                let tool = response.extensions().get::<http::CalledTool>();
                log.answered(&arrived, tool.map(|t| t.0.as_str()), &response);
            }
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let app = axum::Router::new().fallback_service(service);
    let stopped = crate::stopped(stop_rx);
    crate::listen_tls::serve_router(listen_tls, listener, header_read_timeout, app, stopped).await;
    if let Some(log) = &access_log {
        log.flush(std::time::Duration::from_secs(1));
    }
    eprintln!("idemkit mcp: stopped; running calls finished and were recorded");
    Ok(())
}
