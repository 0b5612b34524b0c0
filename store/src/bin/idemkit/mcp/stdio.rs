//! The stdio transport: `idemkit mcp --config FILE -- CMD ARGS…` runs the MCP
//! server CMD as its child and sits between the client (the gateway's own
//! stdin and stdout) and the child's: newline-delimited JSON-RPC both ways,
//! every line passed through unchanged except a protected `tools/call` (claimed
//! first; answered from the store or forwarded and recorded) and the results
//! of `initialize`, `server/discover` and `tools/list` (the capability and the
//! hints added). The child's stderr is the gateway's.
//!
//! The store is opened at the first protected call, so that a client's
//! short-lived probe process (the SDK v2 client probes a stdio server with a
//! sibling process) never contends for its file.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use idemkit::http::Metrics;
use serde_json::Value;

use super::call::{Decision, Gateway, Outcome, Reply, Running};
use super::config::McpConfig;
use super::jsonrpc::{self, Era};
use crate::exit;
use crate::proxy::config::TenantRule;

/// What the gateway waits for from the server, by request id.
enum Pending {
    Initialize,
    Discover,
    ToolsList,
    Call {
        running: Box<Running>,
        deadline: tokio::time::Instant,
    },
}

/// A line from one side.
enum Line {
    Client(String),
    Server(String),
    ClientClosed,
    ServerClosed,
}

pub(crate) fn run(config: McpConfig, command: &[String]) -> ExitCode {
    let Some((program, args)) = command.split_first() else {
        return ExitCode::from(exit::USAGE);
    };
    let mut child = match Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            eprintln!("idemkit mcp: cannot start {program}: {e}");
            return ExitCode::from(exit::UNAVAILABLE);
        }
    };
    let (Some(child_in), Some(child_out)) = (child.stdin.take(), child.stdout.take()) else {
        return ExitCode::from(exit::IO_ERR);
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("idemkit mcp: cannot start a runtime: {e}");
            return ExitCode::from(exit::IO_ERR);
        }
    };
    let (lines_tx, lines_rx) = tokio::sync::mpsc::channel::<Line>(256);
    spawn_reader(
        std::io::stdin(),
        lines_tx.clone(),
        Line::Client,
        Line::ClientClosed,
    );
    spawn_reader(child_out, lines_tx, Line::Server, Line::ServerClosed);
    let to_client = spawn_writer(std::io::stdout());
    let to_server = spawn_writer(child_in);
    let tenant = match &config.tenant {
        TenantRule::Fixed(t) => Some(t.clone()),
        // config.rs accepts only a fixed tenant over stdio.
        _ => None,
    };
    let gateway = Arc::new(Gateway::new(config, None, Arc::new(Metrics::new())));
    runtime.block_on(relay(gateway, tenant, lines_rx, to_client, to_server));
    drop(runtime);
    match child.wait() {
        Ok(status) => status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .map_or(ExitCode::FAILURE, ExitCode::from),
        Err(_) => ExitCode::FAILURE,
    }
}

fn spawn_reader<R: std::io::Read + Send + 'static>(
    from: R,
    to: tokio::sync::mpsc::Sender<Line>,
    line: fn(String) -> Line,
    closed: Line,
) {
    std::thread::spawn(move || {
        for text in BufReader::new(from).lines() {
            let Ok(text) = text else { break };
            if to.blocking_send(line(text)).is_err() {
                return;
            }
        }
        let _ = to.blocking_send(closed);
    });
}

/// A writer thread: each message is written as one line and flushed.
/// Dropping the sender closes the stream.
fn spawn_writer<W: Write + Send + 'static>(mut to: W) -> std::sync::mpsc::Sender<String> {
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in rx {
            if to
                .write_all(line.as_bytes())
                .and_then(|()| to.write_all(b"\n"))
                .and_then(|()| to.flush())
                .is_err()
            {
                return;
            }
        }
    });
    tx
}

/// The key of a request id in the pending table (`1` and `"1"` differ).
fn id_key(id: &Value) -> String {
    id.to_string()
}

async fn relay(
    gateway: Arc<Gateway>,
    tenant: Option<String>,
    mut lines: tokio::sync::mpsc::Receiver<Line>,
    to_client: std::sync::mpsc::Sender<String>,
    to_server: std::sync::mpsc::Sender<String>,
) {
    let mut to_server = Some(to_server);
    let mut pending: HashMap<String, Pending> = HashMap::new();
    // Calls answered by the gateway after a timeout: a late answer from the
    // server is not sent on (the client already has one for that id).
    let mut answered: HashSet<String> = HashSet::new();
    let mut gc_started = false;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        let line = tokio::select! {
            line = lines.recv() => line,
            _ = tick.tick() => {
                expire(&gateway, &mut pending, &mut answered, &to_client).await;
                continue;
            }
        };
        match line {
            None | Some(Line::ServerClosed) => break,
            Some(Line::ClientClosed) => {
                // The client is done: close the server's stdin and keep
                // relaying until it exits, so running calls still record.
                to_server = None;
            }
            Some(Line::Client(text)) => {
                let Some(server) = &to_server else { continue };
                let Ok(message) = serde_json::from_str::<Value>(&text) else {
                    let _ = server.send(text);
                    continue;
                };
                let (Some(id), Some(method)) =
                    (jsonrpc::id_of(&message), jsonrpc::method_of(&message))
                else {
                    let _ = server.send(text);
                    continue;
                };
                let key = id_key(id);
                match method {
                    "initialize" => drop(pending.insert(key, Pending::Initialize)),
                    "server/discover" => drop(pending.insert(key, Pending::Discover)),
                    "tools/list" => drop(pending.insert(key, Pending::ToolsList)),
                    "tools/call" => {
                        let era = Era::of(&message, None);
                        let decision = gateway
                            .decide(&message, text.as_bytes(), tenant.clone(), era)
                            .await;
                        if !gc_started {
                            if let Some(store) = gateway.store_if_open() {
                                crate::proxy::spawn_gc(
                                    store,
                                    Arc::clone(&gateway.metrics),
                                    gateway.config.gc_interval,
                                );
                                gc_started = true;
                            }
                        }
                        match decision {
                            Decision::PassThrough => {}
                            Decision::Answer(answer) => {
                                let _ = to_client.send(answer.to_string());
                                continue;
                            }
                            Decision::Execute(running) => {
                                let deadline = tokio::time::Instant::now() + running.call_timeout();
                                answered.remove(&key);
                                pending.insert(key, Pending::Call { running, deadline });
                            }
                        }
                    }
                    _ => {}
                }
                let _ = server.send(text);
            }
            Some(Line::Server(text)) => {
                let Ok(mut message) = serde_json::from_str::<Value>(&text) else {
                    let _ = to_client.send(text);
                    continue;
                };
                let is_response = jsonrpc::method_of(&message).is_none();
                let Some(key) = jsonrpc::id_of(&message).filter(|_| is_response).map(id_key) else {
                    let _ = to_client.send(text);
                    continue;
                };
                if answered.remove(&key) {
                    continue;
                }
                let rewrite = |message: &mut Value, f: &dyn Fn(&mut Value)| {
                    if let Some(result) = message.get_mut("result") {
                        f(result);
                    }
                };
                let out = match pending.remove(&key) {
                    None => text,
                    Some(Pending::Initialize) => {
                        rewrite(&mut message, &jsonrpc::advertise_in_initialize);
                        message.to_string()
                    }
                    Some(Pending::Discover) => {
                        rewrite(&mut message, &jsonrpc::advertise_in_discover);
                        message.to_string()
                    }
                    Some(Pending::ToolsList) => {
                        rewrite(&mut message, &|result| gateway.tools_listed(result));
                        message.to_string()
                    }
                    Some(Pending::Call { running, .. }) => {
                        match gateway.finish(running, Outcome::Response(message)).await {
                            Reply::Original => text,
                            Reply::Replace(answer) => answer.to_string(),
                        }
                    }
                };
                let _ = to_client.send(out);
            }
        }
    }
    // The server is gone: a call it never answered may have run.
    for (_, waiting) in pending.drain() {
        if let Pending::Call { running, .. } = waiting {
            if let Reply::Replace(answer) = gateway.finish(running, Outcome::Lost).await {
                let _ = to_client.send(answer.to_string());
            }
        }
    }
}

/// Answers the calls the server did not answer in time: unknown outcome.
async fn expire(
    gateway: &Arc<Gateway>,
    pending: &mut HashMap<String, Pending>,
    answered: &mut HashSet<String>,
    to_client: &std::sync::mpsc::Sender<String>,
) {
    let now = tokio::time::Instant::now();
    let late: Vec<String> = pending
        .iter()
        .filter(|(_, p)| matches!(p, Pending::Call { deadline, .. } if *deadline <= now))
        .map(|(k, _)| k.clone())
        .collect();
    for key in late {
        if let Some(Pending::Call { running, .. }) = pending.remove(&key) {
            if let Reply::Replace(answer) = gateway.finish(running, Outcome::Lost).await {
                let _ = to_client.send(answer.to_string());
            }
            answered.insert(key);
        }
    }
}
