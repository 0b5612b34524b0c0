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
    // One connection: one worker, and the blocking pool for the store.
    let runtime = match super::runtime(1) {
        Ok(r) => r,
        Err(code) => return code,
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

/// The relay between the client and the server.
struct Relay {
    gateway: Arc<Gateway>,
    tenant: Option<String>,
    to_client: std::sync::mpsc::Sender<String>,
    /// `None` once the client closed its side.
    to_server: Option<std::sync::mpsc::Sender<String>>,
    pending: HashMap<String, Pending>,
    /// Calls answered by the gateway after a timeout: a late answer from the
    /// server is not sent on (the client already has one for that id).
    answered: HashSet<String>,
    /// Calls of tools the gateway does not know yet, waiting for the
    /// `tools/list` it sent the server (`lookup`).
    waiting: Vec<String>,
    /// The id of the gateway's own `tools/list` in flight, and its page.
    lookup: Option<(String, usize)>,
    gc_started: bool,
}

async fn relay(
    gateway: Arc<Gateway>,
    tenant: Option<String>,
    mut lines: tokio::sync::mpsc::Receiver<Line>,
    to_client: std::sync::mpsc::Sender<String>,
    to_server: std::sync::mpsc::Sender<String>,
) {
    let mut relay = Relay {
        gateway,
        tenant,
        to_client,
        to_server: Some(to_server),
        pending: HashMap::new(),
        answered: HashSet::new(),
        waiting: Vec::new(),
        lookup: None,
        gc_started: false,
    };
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        let line = tokio::select! {
            line = lines.recv() => line,
            _ = tick.tick() => {
                relay.expire().await;
                continue;
            }
        };
        match line {
            None | Some(Line::ServerClosed) => break,
            // The client is done: close the server's stdin and keep relaying
            // until it exits, so running calls still record.
            Some(Line::ClientClosed) => relay.to_server = None,
            Some(Line::Client(text)) => relay.on_client_line(text).await,
            Some(Line::Server(text)) => relay.on_server_line(text).await,
        }
    }
    // The server is gone: a call it never answered may have run.
    for (_, waiting) in relay.pending.drain() {
        if let Pending::Call { running, .. } = waiting
            && let Reply::Replace(answer) = relay.gateway.finish(running, Outcome::Lost).await
        {
            let _ = relay.to_client.send(answer.to_string());
        }
    }
}

impl Relay {
    fn to_server(&self, text: String) {
        if let Some(server) = &self.to_server {
            let _ = server.send(text);
        }
    }

    async fn on_client_line(&mut self, text: String) {
        if self.to_server.is_none() {
            return;
        }
        let Ok(message) = serde_json::from_str::<Value>(&text) else {
            return self.to_server(text);
        };
        let (Some(id), Some(method)) = (jsonrpc::id_of(&message), jsonrpc::method_of(&message))
        else {
            return self.to_server(text);
        };
        let key = id_key(id);
        match method {
            "initialize" => drop(self.pending.insert(key, Pending::Initialize)),
            "server/discover" => drop(self.pending.insert(key, Pending::Discover)),
            "tools/list" => drop(self.pending.insert(key, Pending::ToolsList)),
            "tools/call" => return self.call(text, message).await,
            _ => {}
        }
        self.to_server(text);
    }

    /// A `tools/call` from the client: claimed, answered or forwarded; held
    /// back while the gateway lists the server's tools to learn whether it is
    /// protected.
    async fn call(&mut self, text: String, message: Value) {
        let era = Era::of(&message, None);
        if self.lookup.is_some() {
            return self.waiting.push(text);
        }
        let name = message.pointer("/params/name").and_then(Value::as_str);
        if let Some(name) = name.filter(|n| !self.gateway.knows(n)) {
            tracing::debug!(tool = %name, "unknown tool; listing the server's tools");
            self.waiting.push(text);
            return self.list_tools(&message, era, None, 0);
        }
        self.claim(text, message, era).await;
    }

    /// A call whose tool is known (or still unknown after listing, hence
    /// protected): what the gateway decides.
    async fn claim(&mut self, text: String, message: Value, era: Era) {
        let Some(key) = jsonrpc::id_of(&message).map(id_key) else {
            return self.to_server(text);
        };
        let decision = self
            .gateway
            .decide(&message, text.as_bytes(), self.tenant.clone(), era)
            .await;
        if !self.gc_started
            && let Some(store) = self.gateway.store_if_open()
        {
            let gateway = &self.gateway;
            crate::proxy::spawn_gc(
                store,
                Arc::clone(&gateway.metrics),
                gateway.config.gc_interval,
            );
            self.gc_started = true;
        }
        match decision {
            Decision::PassThrough => self.to_server(text),
            Decision::Answer(answer, _) => drop(self.to_client.send(answer.to_string())),
            Decision::Execute(running) => {
                let deadline = tokio::time::Instant::now() + running.call_timeout();
                self.answered.remove(&key);
                self.pending
                    .insert(key, Pending::Call { running, deadline });
                self.to_server(text);
            }
        }
    }

    /// Sends the gateway's own `tools/list` (page `page`, after `cursor`).
    fn list_tools(&mut self, call: &Value, era: Era, cursor: Option<&str>, page: usize) {
        let id = format!("idemkit-tools-list-{page}");
        let request = jsonrpc::tools_list_request(&id, call, era, cursor);
        self.lookup = Some((Value::String(id).to_string(), page));
        self.to_server(request.to_string());
    }

    async fn on_server_line(&mut self, text: String) {
        let Ok(mut message) = serde_json::from_str::<Value>(&text) else {
            return drop(self.to_client.send(text));
        };
        let is_response = jsonrpc::method_of(&message).is_none();
        let Some(key) = jsonrpc::id_of(&message).filter(|_| is_response).map(id_key) else {
            return drop(self.to_client.send(text));
        };
        if self.answered.remove(&key) {
            return;
        }
        if let Some((lookup, page)) = self.lookup.clone()
            && lookup == key
        {
            return self.listed(&message, page).await;
        }
        let rewrite = |message: &mut Value, f: &dyn Fn(&mut Value)| {
            if let Some(result) = message.get_mut("result") {
                f(result);
            }
        };
        let out = match self.pending.remove(&key) {
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
                let gateway = Arc::clone(&self.gateway);
                rewrite(&mut message, &|result| gateway.tools_listed(result));
                message.to_string()
            }
            Some(Pending::Call { running, .. }) => {
                match self
                    .gateway
                    .finish(running, Outcome::Response(message))
                    .await
                {
                    Reply::Original => text,
                    Reply::Replace(answer) => answer.to_string(),
                }
            }
        };
        let _ = self.to_client.send(out);
    }

    /// The answer to the gateway's own `tools/list`: learn, read the next
    /// page, or take the waiting calls in order.
    async fn listed(&mut self, message: &Value, page: usize) {
        self.lookup = None;
        if let Some(result) = message.get("result") {
            self.gateway.learn_tools(result);
            let next = result.get("nextCursor").and_then(Value::as_str);
            if let (Some(cursor), Some(first)) = (next, self.waiting.first())
                && page + 1 < jsonrpc::MAX_TOOL_PAGES
                && let Ok(call) = serde_json::from_str::<Value>(first)
            {
                let era = Era::of(&call, None);
                return self.list_tools(&call, era, Some(cursor), page + 1);
            }
        }
        for text in std::mem::take(&mut self.waiting) {
            let Ok(message) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            let era = Era::of(&message, None);
            self.claim(text, message, era).await;
        }
    }

    /// Answers the calls the server did not answer in time: unknown outcome.
    async fn expire(&mut self) {
        let now = tokio::time::Instant::now();
        let late: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| matches!(p, Pending::Call { deadline, .. } if *deadline <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in late {
            if let Some(Pending::Call { running, .. }) = self.pending.remove(&key) {
                if let Reply::Replace(answer) = self.gateway.finish(running, Outcome::Lost).await {
                    let _ = self.to_client.send(answer.to_string());
                }
                self.answered.insert(key);
            }
        }
    }
}
