//! A protected `tools/call`: claimed before it reaches the server, recorded
//! when the server answers, replayed to every retry. Transport-free: the HTTP
//! and stdio transports ask [`Gateway::decide`] what to do with a call, forward
//! it when told to execute, and hand the server's answer to
//! [`Gateway::finish`], which records it before the client hears it.
//!
//! The decisions are the store's (core's state machine); this file maps them
//! to JSON-RPC: a replay is the stored result under the retry's id, in-flight
//! and reuse are errors whose `data.type` names them, an unknown outcome is a
//! tool error whose structured content says not to call again.
//!
//! Multi-round-trip (2026-07-28): an `input_required` answer is interim. The
//! lease stays held in memory (renewed up to the tool's `max_execution_ms`),
//! and the client's continuation under the same key and arguments is
//! forwarded under it; only a complete result or an error records the call. An
//! exchange the client abandons ends with its lease, like any execution.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use idemkit::core::fingerprint::{ContentKind, Fingerprint, FingerprintSpec};
use idemkit::core::http::defaults;
use idemkit::core::machine::{Dispatch, Disposition, classify_attempt};
use idemkit::core::record::StoredResponse;
use idemkit::core::{IdempotencyKey, LogRef, Scope};
use idemkit::http::{
    ClaimAnswered, ClaimOutcomeLabel, Metrics, WaitEnded, WaitRefused, claim_waiting,
};
use idemkit::store::{Claim, ExecutionGuard, Store, WorkerError};
use serde_json::{Value, json};

use super::config::{KeyRule, McpConfig, Tool};
use super::jsonrpc::{self, Era, KeyField, Problem};
use crate::proxy::config::StoreChoice;

/// How long a retry of a call whose continuation is being forwarded waits.
const CONTINUATION_RETRY_AFTER: Duration = Duration::from_secs(1);
/// How long a client is told to wait when the store is unavailable.
const STORE_RETRY_AFTER: Duration = defaults::DEFAULT_STORE_RETRY_AFTER;
/// Attempts at writing an outcome while the store fails.
const RECORD_ATTEMPTS: u32 = defaults::RECORD_ATTEMPTS;

/// What to do with a `tools/call`.
pub(crate) enum Decision {
    /// Not protected: forward it unchanged.
    PassThrough,
    /// Answer the client with this JSON-RPC response; nothing is forwarded.
    /// With what the call's claim decided, when it made one (for the
    /// access log).
    Answer(Value, Option<ClaimAnswered>),
    /// Forward it; hand the server's answer to [`Gateway::finish`].
    Execute(Box<Running>),
}

/// A claimed call on its way to the server.
pub(crate) struct Running {
    /// The JSON-RPC id of the request being forwarded (each round has its own).
    id: Value,
    era: Era,
    tool: Tool,
    scope: Scope,
    key: IdempotencyKey,
    fingerprint: Fingerprint,
    guard: Option<ExecutionGuard>,
    /// Renews the lease while the call (or its exchange) runs.
    _renewal: Renewal,
    /// When the lease stops being renewed.
    deadline: Instant,
    started: Instant,
}

impl Running {
    /// The record's log reference.
    pub(crate) fn log_ref(&self) -> LogRef {
        self.scope.record_id(&self.key).log_ref()
    }

    /// How long the server may take to answer this call.
    pub(crate) fn call_timeout(&self) -> Duration {
        self.tool.call_timeout
    }
}

/// What came back from the server for a forwarded call.
pub(crate) enum Outcome {
    /// The server's JSON-RPC response to the call.
    Response(Value),
    /// Nothing reached the server: the tool did not run.
    NotSent,
    /// The server refused the request before reading it as a call (an HTTP
    /// 4xx: a session it does not know, a bad header): the tool did not run.
    Refused,
    /// The request was sent and no answer came (the connection broke, the
    /// server died, the call timed out): the server may have acted.
    Lost,
    /// The server answered the request with this HTTP 5xx instead of a
    /// JSON-RPC response: recorded by the effect's rule (Local: released,
    /// External: unknown).
    Failed(u16),
}

/// What the client is sent for a forwarded call.
pub(crate) enum Reply {
    /// The server's own answer, unchanged.
    Original,
    /// This response instead (under the call's id).
    Replace(Value),
}

/// An exchange interrupted by `input_required`, waiting for its continuation.
struct Held {
    fingerprint: Fingerprint,
    /// `None` while a continuation is being forwarded.
    running: Option<Box<Running>>,
    deadline: Instant,
}

/// The gateway's state, shared by every connection.
pub(crate) struct Gateway {
    pub(crate) config: McpConfig,
    pub(crate) metrics: Arc<Metrics>,
    /// Opened at start (HTTP) or at the first protected call (stdio, so that
    /// a client's short-lived probe process never contends for the file).
    store: Mutex<Option<Store>>,
    owner: String,
    /// Whether each tool the server listed says it only reads.
    read_only: Mutex<HashMap<String, bool>>,
    held: Mutex<HashMap<(String, String, String), Held>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain maps: a panic while one was held leaves them usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Gateway {
    pub(crate) fn new(config: McpConfig, store: Option<Store>, metrics: Arc<Metrics>) -> Gateway {
        if let Some(store) = &store {
            store.set_wait_limits(config.wait_limits);
        }
        Gateway {
            config,
            metrics,
            store: Mutex::new(store),
            owner: format!("mcp:{}", std::process::id()),
            read_only: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
        }
    }

    /// The store, opened now if it was not yet.
    fn store(&self) -> Result<Store, String> {
        let mut slot = lock(&self.store);
        if let Some(store) = slot.as_ref() {
            return Ok(store.clone());
        }
        let store = open(&self.config.store)?;
        store.set_wait_limits(self.config.wait_limits);
        *slot = Some(store.clone());
        Ok(store)
    }

    /// The time by the store's clock (the database's, for PostgreSQL).
    fn now(&self) -> idemkit::core::UnixMillis {
        self.store_if_open()
            .map_or(idemkit::core::UnixMillis::ZERO, |s| s.now())
    }

    /// The store, if it was opened.
    pub(crate) fn store_if_open(&self) -> Option<Store> {
        lock(&self.store).clone()
    }

    /// Whether the gateway knows whether `name` is protected (from the config
    /// or a `tools/list` it saw). When it does not, a transport lists the
    /// server's tools first ([`Gateway::learn_tools`]); a tool still unknown
    /// after that is protected.
    pub(crate) fn knows(&self, name: &str) -> bool {
        self.config.tool(name).is_some() || lock(&self.read_only).contains_key(name)
    }

    /// Learns the tools of a `tools/list` result the gateway asked for itself.
    pub(crate) fn learn_tools(&self, result: &Value) {
        let mut read_only = lock(&self.read_only);
        for tool in jsonrpc::listed_tools(result) {
            read_only.insert(tool.name, tool.read_only);
        }
    }

    /// Learns the tools of a `tools/list` result and marks the ones the
    /// gateway enforces with `idempotentHint`.
    pub(crate) fn tools_listed(&self, result: &mut Value) {
        let listed = jsonrpc::listed_tools(result);
        {
            let mut read_only = lock(&self.read_only);
            for tool in &listed {
                read_only.insert(tool.name.clone(), tool.read_only);
            }
        }
        jsonrpc::mark_enforced(result, |name| self.tool_for(name).is_some());
    }

    /// Whether calls of `name` are claimed.
    pub(crate) fn protects(&self, name: &str) -> bool {
        self.tool_for(name).is_some()
    }

    /// The rules for `name`, or `None` when its calls pass through: a tool
    /// configured `protected = false`, or one whose annotations say
    /// `readOnlyHint` and that the config does not list.
    fn tool_for(&self, name: &str) -> Option<Tool> {
        if let Some(tool) = self.config.tool(name) {
            return tool.protected.then(|| tool.clone());
        }
        if lock(&self.read_only).get(name) == Some(&true) {
            return None;
        }
        let mut tool = self.config.default_tool.clone();
        tool.name = name.to_owned();
        Some(tool)
    }

    /// What to do with the `tools/call` `message` (its bytes: `raw`) from
    /// `tenant`, speaking `era`.
    pub(crate) async fn decide(
        self: &Arc<Self>,
        message: &Value,
        raw: &[u8],
        tenant: Option<String>,
        era: Era,
    ) -> Decision {
        let Some(name) = message.pointer("/params/name").and_then(Value::as_str) else {
            // Not a call the server can run either: its answer says why.
            return Decision::PassThrough;
        };
        let Some(tool) = self.tool_for(name) else {
            return Decision::PassThrough;
        };
        let id = jsonrpc::id_of(message).cloned().unwrap_or(Value::Null);
        let refuse = |problem: Problem| Decision::Answer(problem.response(&id), None);
        let Some(scope) = tenant.and_then(|t| Scope::new(&t, &tool.name).ok()) else {
            return refuse(Problem::NoTenant);
        };
        // The arguments alone say what the call means: never the id, `_meta`,
        // `inputResponses` or `requestState`.
        let fingerprint = match FingerprintSpec::new(ContentKind::Json)
            .include("/params/arguments")
            .map(|spec| spec.fingerprint(&tool.name, raw))
        {
            Ok(Ok(fingerprint)) => fingerprint,
            Ok(Err(e)) => {
                return refuse(Problem::InvalidArguments {
                    why: format!("{e} [{}]", e.code()),
                });
            }
            Err(e) => {
                return refuse(Problem::InvalidArguments { why: e.to_string() });
            }
        };
        let store = match self.store() {
            Ok(store) => store,
            Err(e) => {
                tracing::warn!(error = %e, "the idempotency store cannot be opened");
                self.metrics.store_error();
                return refuse(Problem::StoreUnavailable {
                    retry_after: STORE_RETRY_AFTER,
                });
            }
        };
        let key = match (jsonrpc::key_field(message), tool.key) {
            (KeyField::Text(text), _) => match IdempotencyKey::new(text) {
                Ok(key) => key,
                Err(e) => return refuse(Problem::InvalidKey { why: e.to_string() }),
            },
            (KeyField::NotText, _) => {
                return refuse(Problem::InvalidKey {
                    why: "not a string".to_owned(),
                });
            }
            (KeyField::Absent, KeyRule::Required) => {
                return refuse(Problem::MissingKey { tool: tool.name });
            }
            (KeyField::Absent, KeyRule::FromArguments { window }) => {
                let (store, scope) = (store.clone(), scope.clone());
                match blocking(move || derived_key(&store, &scope, fingerprint, window)).await {
                    Some(Ok(key)) => key,
                    _ => {
                        self.metrics.store_error();
                        return refuse(Problem::StoreUnavailable {
                            retry_after: STORE_RETRY_AFTER,
                        });
                    }
                }
            }
        };
        let wants_task = jsonrpc::wants_task(message);

        match self.continue_held(&scope, &key, fingerprint, &id, era) {
            Some(Ok(running)) => return Decision::Execute(running),
            Some(Err(problem)) => return refuse(problem),
            None => {}
        }

        // A retry of a running call may wait for its result instead of
        // getting "in progress" (`_meta["io.idemkit/wait"]`, seconds).
        let wait = tool.wait.wait_for(jsonrpc::wait_field(message)).duration;
        let claim_once = || {
            let (store, scope, key, owner, policy) = (
                store.clone(),
                scope.clone(),
                key.clone(),
                self.owner.clone(),
                tool.policy,
            );
            blocking(move || store.claim(&scope, &key, fingerprint, &owner, &policy))
        };
        let id_of_record = scope.record_id(&key);
        // An answer the claim decided names it and the record.
        let log_ref = id_of_record.log_ref();
        let decided = |answer: Value, outcome| {
            Decision::Answer(answer, Some(ClaimAnswered { outcome, log_ref }))
        };
        // A dropped request (its client gone) drops this future and its wait.
        let claim = match claim_waiting(
            &store,
            &id_of_record,
            wait,
            claim_once,
            std::future::pending(),
        )
        .await
        {
            Ok(waited) => {
                if let Some(ended) = waited.ended() {
                    self.metrics.wait_ended(&tool.name, ended);
                }
                waited.claim
            }
            Err(WaitRefused::TooManyWaiters { retry_after, .. }) => {
                self.metrics.claim(&tool.name, ClaimOutcomeLabel::InFlight);
                self.metrics
                    .wait_ended(&tool.name, WaitEnded::TooManyWaiters);
                let answer = Problem::TooManyWaiters { retry_after }.response(&id);
                return decided(answer, ClaimOutcomeLabel::InFlight);
            }
            Err(WaitRefused::ClientGone) => {
                return refuse(Problem::InProgress {
                    retry_after: Duration::ZERO,
                });
            }
        };
        let count = |label| self.metrics.claim(&tool.name, label);
        match claim {
            None | Some(Err(_)) => {
                self.metrics.store_error();
                refuse(Problem::StoreUnavailable {
                    retry_after: STORE_RETRY_AFTER,
                })
            }
            Some(Ok(Claim::Execute(guard))) => {
                count(ClaimOutcomeLabel::Execute);
                let started = Instant::now();
                let deadline = started + tool.max_execution;
                let renewal = Renewal::spawn(&guard, tool.policy.lease, deadline);
                Decision::Execute(Box::new(Running {
                    id: id.clone(),
                    era,
                    tool,
                    scope,
                    key,
                    fingerprint,
                    guard: Some(guard),
                    _renewal: renewal,
                    deadline,
                    started,
                }))
            }
            Some(Ok(Claim::Replay { response, .. })) => {
                let answer = replay(&id, era, wants_task, &response);
                count(ClaimOutcomeLabel::Replay);
                decided(answer, ClaimOutcomeLabel::Replay)
            }
            Some(Ok(Claim::ResponseExpired { resource_ref, .. })) => {
                count(ClaimOutcomeLabel::ResponseExpired);
                let answer = Problem::ResultExpired { resource_ref }.response(&id);
                decided(answer, ClaimOutcomeLabel::ResponseExpired)
            }
            Some(Ok(Claim::InFlight { retry_after, .. })) => {
                count(ClaimOutcomeLabel::InFlight);
                let answer = Problem::InProgress { retry_after }.response(&id);
                decided(answer, ClaimOutcomeLabel::InFlight)
            }
            Some(Ok(Claim::Mismatch { .. })) => {
                count(ClaimOutcomeLabel::Mismatch);
                decided(Problem::Conflict.response(&id), ClaimOutcomeLabel::Mismatch)
            }
            Some(Ok(Claim::Uncertain { since, log_ref })) => {
                count(ClaimOutcomeLabel::Uncertain);
                tracing::info!(%log_ref, tool = %tool.name, "outcome unknown; not executing again");
                let answer = jsonrpc::result_response(
                    &id,
                    jsonrpc::unknown_result(key.as_str(), since, &tool.check, era),
                );
                decided(answer, ClaimOutcomeLabel::Uncertain)
            }
        }
    }

    /// A call under the key of an exchange waiting for its continuation:
    /// forwarded under the held lease, refused while another continuation is
    /// on its way or when the arguments differ. `None`: no exchange is held
    /// (or it outlived its lease), so the call is claimed as usual.
    fn continue_held(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: Fingerprint,
        id: &Value,
        era: Era,
    ) -> Option<Result<Box<Running>, Problem>> {
        let mut held = lock(&self.held);
        let now = Instant::now();
        // An exchange past its deadline is abandoned: its lease runs out and
        // the state machine decides, as for a crashed execution.
        held.retain(|_, h| {
            if h.deadline > now {
                return true;
            }
            if let Some(mut running) = h.running.take()
                && let Some(guard) = running.guard.take()
            {
                guard.abandon();
            }
            false
        });
        let entry = held.get_mut(&held_id(scope, key))?;
        if entry.fingerprint != fingerprint {
            return Some(Err(Problem::Conflict));
        }
        let Some(mut running) = entry.running.take() else {
            return Some(Err(Problem::InProgress {
                retry_after: CONTINUATION_RETRY_AFTER,
            }));
        };
        running.era = era;
        running.id = id.clone();
        Some(Ok(running))
    }

    /// Records what the server answered a forwarded call, then says what the
    /// client gets: durable before it is sent.
    pub(crate) async fn finish(
        self: &Arc<Self>,
        mut running: Box<Running>,
        outcome: Outcome,
    ) -> Reply {
        let tool = running.tool.name.clone();
        let era = running.era;
        let key = running.key.as_str().to_owned();
        let id = held_id(&running.scope, &running.key);
        let Some(guard) = running.guard.take() else {
            lock(&self.held).remove(&id);
            return Reply::Original;
        };
        let (write, reply_if_recorded) = match &outcome {
            Outcome::Response(message) => {
                if let Some(result) = message.get("result") {
                    if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
                        // Interim: the call goes on under the same lease.
                        running.guard = Some(guard);
                        let deadline = running.deadline;
                        lock(&self.held).insert(
                            id,
                            Held {
                                fingerprint: running.fingerprint,
                                running: Some(running),
                                deadline,
                            },
                        );
                        return Reply::Original;
                    }
                    (Write::Store(stored_result(result)), Reply::Original)
                } else if let Some(error) = message.get("error") {
                    let body = json!({ "error": error }).to_string().into_bytes();
                    match jsonrpc::error_status(error) {
                        None => (Write::Release, Reply::Original),
                        Some(status) => {
                            match classify_attempt(status, &running.tool.policy, Dispatch::Unknown)
                            {
                                Disposition::Store => (
                                    Write::Store(StoredResponse::new(status, body)),
                                    Reply::Original,
                                ),
                                Disposition::Release => (Write::Release, Reply::Original),
                                Disposition::Unknown => (
                                    Write::Unknown(format!("JSON-RPC error, status {status}")),
                                    Reply::Original,
                                ),
                            }
                        }
                    }
                } else {
                    (
                        Write::Unknown("the answer was no JSON-RPC response".to_owned()),
                        Reply::Original,
                    )
                }
            }
            Outcome::NotSent | Outcome::Refused => (Write::Release, Reply::Original),
            Outcome::Failed(status) => {
                let error = json!({ "code": -32603, "message": format!("HTTP {status}") });
                let write = match classify_attempt(*status, &running.tool.policy, Dispatch::Unknown)
                {
                    Disposition::Store => Write::Store(StoredResponse::new(
                        *status,
                        json!({ "error": error }).to_string().into_bytes(),
                    )),
                    Disposition::Release => Write::Release,
                    Disposition::Unknown => Write::Unknown(format!("HTTP {status}")),
                };
                (write, Reply::Original)
            }
            Outcome::Lost => (
                Write::Unknown("sent, and no answer came".to_owned()),
                Reply::Replace(jsonrpc::result_response(
                    &running.id,
                    jsonrpc::unknown_result(&key, self.now(), &running.tool.check, era),
                )),
            ),
        };
        lock(&self.held).remove(&id);
        self.metrics.execution(&tool, running.started.elapsed());
        let log_ref = guard.log_ref().to_string();
        let call_id = running.id.clone();
        let max_body = running.tool.max_stored_result_bytes;
        let metrics = Arc::clone(&self.metrics);
        let disposition = write.disposition();
        let recorded = blocking(move || write.apply(guard, max_body, &metrics)).await;
        match recorded {
            Some(true) => {
                self.metrics.outcome(&tool, disposition);
                tracing::info!(%tool, ?disposition, "call recorded");
                reply_if_recorded
            }
            _ => {
                self.metrics.store_error();
                Reply::Replace(Problem::NotRecorded { log_ref }.response(&call_id))
            }
        }
    }
}

/// How a forwarded call is recorded.
enum Write {
    Store(StoredResponse),
    Release,
    Unknown(String),
}

impl Write {
    fn disposition(&self) -> Disposition {
        match self {
            Write::Store(_) => Disposition::Store,
            Write::Release => Disposition::Release,
            Write::Unknown(_) => Disposition::Unknown,
        }
    }

    /// Writes the outcome (blocking), retrying while the store fails. Once the
    /// server answered, no failure here releases the record: a completion
    /// that keeps failing becomes Unknown if it can, else the lease is left
    /// to expire. `true` when the outcome as asked is durable.
    fn apply(self, mut guard: ExecutionGuard, max_body: usize, metrics: &Metrics) -> bool {
        let first = match self {
            Write::Release => return guard.release().is_ok(),
            Write::Store(mut stored) => {
                if stored.body.as_ref().is_some_and(|b| b.len() > max_body) {
                    stored.body = None;
                }
                with_retries(metrics, || guard.try_complete(&stored))
            }
            Write::Unknown(reason) => with_retries(metrics, || guard.try_mark_unknown(&reason)),
        };
        match first {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, "the outcome could not be recorded");
                if with_retries(metrics, || guard.try_mark_unknown("outcome not recorded")).is_err()
                {
                    guard.abandon();
                }
                false
            }
        }
    }
}

fn with_retries(
    metrics: &Metrics,
    mut write: impl FnMut() -> Result<(), WorkerError>,
) -> Result<(), WorkerError> {
    let mut pause = defaults::RECORD_BACKOFF;
    let mut attempt = 1;
    loop {
        match write() {
            Err(WorkerError::Storage(e)) if attempt < RECORD_ATTEMPTS => {
                metrics.store_error();
                tracing::warn!(error = %e, attempt, "recording the outcome failed; retrying");
                std::thread::sleep(pause);
                pause = pause.saturating_mul(2);
                attempt += 1;
            }
            done => return done,
        }
    }
}

/// What is stored of a result: the result without `resultType: "complete"`
/// (each era's replay adds what it needs), and whether it is a task handle,
/// which is replayed only to a request that takes tasks.
fn stored_result(result: &Value) -> StoredResponse {
    let mut result = result.clone();
    let task = match result.get("resultType").and_then(Value::as_str) {
        Some("complete") => {
            if let Some(object) = result.as_object_mut() {
                object.remove("resultType");
            }
            false
        }
        // 2026-07-28: a result type of an extension (the tasks extension's).
        Some(_) => true,
        // 2025-11-25: CreateTaskResult.
        None => result.pointer("/task/taskId").is_some(),
    };
    let mut body = serde_json::Map::new();
    body.insert("result".to_owned(), result);
    if task {
        body.insert("task".to_owned(), Value::Bool(true));
    }
    StoredResponse::new(200, Value::Object(body).to_string().into_bytes())
}

/// The answer to a retry of a completed call.
fn replay(id: &Value, era: Era, wants_task: bool, stored: &StoredResponse) -> Value {
    let Some(body) = &stored.body else {
        return Problem::ResultExpired {
            resource_ref: stored.resource_ref.clone(),
        }
        .response(id);
    };
    let parsed = serde_json::from_slice::<Value>(body)
        .ok()
        .filter(|b| b.get("result").is_some() || b.get("error").is_some());
    let Some(mut body) = parsed else {
        // Settled by an operator (`resolve --applied` with a body of their
        // own): the model gets that text as the tool's result.
        let text = String::from_utf8_lossy(body);
        let result = json!({ "content": [{ "type": "text", "text": text }], "isError": false });
        return jsonrpc::result_response(id, jsonrpc::replayed(result, era));
    };
    if let Some(error) = body.get_mut("error").map(Value::take) {
        return json!({ "jsonrpc": "2.0", "id": id, "error": error });
    }
    if body.get("task") == Some(&Value::Bool(true)) && !wants_task {
        return Problem::TaskOnly.response(id);
    }
    let result = body
        .get_mut("result")
        .map(Value::take)
        .unwrap_or(Value::Null);
    jsonrpc::result_response(id, jsonrpc::replayed(result, era))
}

/// The key of a call without one, for a tool configured `derive =
/// "arguments"`: the tenant and tool are the scope, the fingerprint (tool and
/// canonical arguments) the key, within windows of `window`. A call merges
/// with the one before it when that one was made less than `window` earlier,
/// so two calls a moment apart share a key even across a window's edge.
fn derived_key(
    store: &Store,
    scope: &Scope,
    fingerprint: Fingerprint,
    window: Duration,
) -> Result<IdempotencyKey, String> {
    let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX).max(1);
    let now = store.now().as_millis();
    let bucket = now / window_ms;
    let hex = fingerprint.to_string();
    let digest = hex.get(..32).unwrap_or(&hex);
    let key_of = |bucket: u64| IdempotencyKey::new(&format!("derived-{digest}-{bucket}"));
    if let Some(previous) = bucket.checked_sub(1) {
        let key = key_of(previous).map_err(|e| e.to_string())?;
        let record = store.get(scope, &key).map_err(|e| e.to_string())?;
        if record.is_some_and(|r| r.created_at.as_millis().saturating_add(window_ms) > now) {
            return Ok(key);
        }
    }
    key_of(bucket).map_err(|e| e.to_string())
}

fn held_id(scope: &Scope, key: &IdempotencyKey) -> (String, String, String) {
    (
        scope.tenant().to_owned(),
        scope.operation().to_owned(),
        key.as_str().to_owned(),
    )
}

/// Opens the configured store.
pub(crate) fn open(choice: &StoreChoice) -> Result<Store, String> {
    crate::proxy::open_store(choice)
}

/// Runs store work on tokio's blocking pool: redb commits fsync.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// Renews a lease every third of its length until `deadline`; stops when
/// dropped, or when the store refuses (the lease was lost or recorded).
struct Renewal(tokio::task::JoinHandle<()>);

impl Renewal {
    fn spawn(guard: &ExecutionGuard, lease: Duration, deadline: Instant) -> Renewal {
        let renewer = guard.renewer();
        let every = defaults::renewal_interval(lease);
        let deadline = tokio::time::Instant::from_std(deadline);
        Renewal(tokio::spawn(async move {
            loop {
                let next = tokio::time::Instant::now() + every;
                if next > deadline {
                    return;
                }
                tokio::time::sleep_until(next).await;
                let renewer = renewer.clone();
                match blocking(move || renewer.renew()).await {
                    Some(Ok(_) | Err(WorkerError::Storage(_))) | None => {}
                    Some(Err(_)) => return,
                }
            }
        }))
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Drop for Running {
    /// A call dropped before its outcome was recorded (its transport went
    /// away): the guard's own drop settles it by effect kind (Unknown for
    /// External), on the blocking pool.
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            tracing::warn!(tool = %self.tool.name, "call dropped before its outcome was recorded");
            match tokio::runtime::Handle::try_current() {
                Ok(handle) => drop(handle.spawn_blocking(move || drop(guard))),
                Err(_) => drop(guard),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(stored: &StoredResponse) -> Value {
        serde_json::from_slice(stored.body.as_deref().unwrap()).unwrap()
    }

    #[test]
    fn a_complete_result_is_stored_without_its_result_type_and_replayed_per_era() {
        let stored = stored_result(&json!({"content": [], "resultType": "complete"}));
        assert_eq!(body(&stored), json!({"result": {"content": []}}));
        let modern = replay(&json!(9), Era::Modern, false, &stored);
        assert_eq!(modern["id"], 9);
        assert_eq!(modern["result"]["resultType"], "complete");
        assert_eq!(modern["result"]["_meta"]["io.idemkit/replayed"], true);
        let legacy = replay(&json!("a"), Era::Legacy, false, &stored);
        assert!(legacy["result"].get("resultType").is_none());
    }

    #[test]
    fn a_task_handle_is_replayed_only_to_a_request_that_takes_tasks() {
        // 2025-11-25: CreateTaskResult.
        let created = stored_result(&json!({"task": {"taskId": "t-1", "status": "working"}}));
        assert_eq!(body(&created)["task"], true);
        let refused = replay(&json!(1), Era::Legacy, false, &created);
        assert_eq!(refused["error"]["data"]["type"], "idempotency_task_only");
        let handle = replay(&json!(2), Era::Legacy, true, &created);
        assert_eq!(handle["result"]["task"]["taskId"], "t-1");
        // 2026-07-28: a result type of the tasks extension keeps its type.
        let modern = stored_result(&json!({"resultType": "task", "taskId": "t-2"}));
        let again = replay(&json!(3), Era::Modern, true, &modern);
        assert_eq!(again["result"]["resultType"], "task");
        assert_eq!(
            replay(&json!(4), Era::Modern, false, &modern)["error"]["code"],
            -31007
        );
    }

    #[test]
    fn a_stored_error_replays_as_that_error_and_an_operators_text_as_a_result() {
        let error = StoredResponse::new(
            422,
            br#"{"error":{"code":-32602,"message":"bad slot"}}"#.to_vec(),
        );
        let replayed = replay(&json!(5), Era::Modern, false, &error);
        assert_eq!(replayed["error"]["message"], "bad slot");
        let resolved = StoredResponse::new(200, b"booked by hand".to_vec());
        let replayed = replay(&json!(6), Era::Legacy, false, &resolved);
        assert_eq!(replayed["result"]["content"][0]["text"], "booked by hand");
        let mut expired = StoredResponse::new(200, Vec::new());
        expired.body = None;
        let answer = replay(&json!(7), Era::Legacy, false, &expired);
        assert_eq!(
            answer["error"]["data"]["type"],
            "idempotency_result_expired"
        );
    }

    #[test]
    fn server_errors_are_recorded_by_the_rules_of_an_http_answer() {
        for (code, status) in [
            (-32020, None),
            (-32021, None),
            (-32042, None),
            (-32602, Some(422)),
            (-32601, Some(404)),
            (-32603, Some(500)),
            (-32001, Some(500)),
            (7, Some(500)),
        ] {
            assert_eq!(
                jsonrpc::error_status(&json!({"code": code})),
                status,
                "{code}"
            );
        }
    }

    #[test]
    fn a_derived_key_merges_calls_within_the_window_across_its_edge() {
        use idemkit::clock::ManualClock;
        use idemkit::core::UnixMillis;
        use idemkit::core::machine::Policy;
        let window = Duration::from_secs(10);
        // A millisecond before a window's edge.
        let clock = ManualClock::new(UnixMillis::from_millis(1_000_000 * 10_000 - 1));
        let store = idemkit::in_memory().unwrap().with_clock(clock.clone());
        let scope = Scope::new("t", "note").unwrap();
        let fingerprint = Fingerprint::from_bytes([3; 32]);
        let first = derived_key(&store, &scope, fingerprint, window).unwrap();
        assert!(
            first.as_str().starts_with("derived-0303"),
            "{}",
            first.as_str()
        );
        let claimed = store.claim(&scope, &first, fingerprint, "test", &Policy::default());
        assert!(matches!(claimed, Ok(Claim::Execute(_))));
        // Two milliseconds later, in the next window: the same call.
        clock.advance(Duration::from_millis(2));
        assert_eq!(
            derived_key(&store, &scope, fingerprint, window).unwrap(),
            first
        );
        // Other arguments: another key.
        let other = derived_key(&store, &scope, Fingerprint::from_bytes([4; 32]), window).unwrap();
        assert_ne!(other, first);
        // A window after the first call: a new one.
        clock.advance(window);
        assert_ne!(
            derived_key(&store, &scope, fingerprint, window).unwrap(),
            first
        );
    }
}
