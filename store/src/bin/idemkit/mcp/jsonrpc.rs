//! What the gateway reads from and writes into JSON-RPC messages, for both
//! protocol eras: the era of a request, the idempotency key, the answers it
//! gives itself (errors, replays, the unknown outcome), and the capability it
//! adds to `initialize` and `server/discover` results.

use std::time::Duration;

use idemkit::core::UnixMillis;
use serde_json::{Map, Value, json};

/// Where a client puts the key: `params._meta[KEY_META]`.
pub(crate) const KEY_META: &str = "io.idemkit/idempotency-key";
/// The SEP-3182 shape: `params.idempotencyKey`.
pub(crate) const KEY_PARAM: &str = "idempotencyKey";
/// Set to `true` in a replayed result's `_meta`.
pub(crate) const REPLAYED_META: &str = "io.idemkit/replayed";
/// Where a retry asks to wait for a running call's result:
/// `params._meta[WAIT_META]`, whole seconds (capped by the tool's `max_wait_ms`).
pub(crate) const WAIT_META: &str = "io.idemkit/wait";
/// The capability (2025: `experimental`) or extension (2026) the gateway advertises.
pub(crate) const CAPABILITY: &str = "io.idemkit/idempotency";
/// The per-request protocol version of 2026-07-28 and later.
const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
/// The first revision without `initialize` and sessions.
const FIRST_MODERN: &str = "2026-07-28";

/// The protocol era a request speaks, decided per request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Era {
    /// 2024-11-05 … 2025-11-25: `initialize`, sessions, results without `resultType`.
    Legacy,
    /// 2026-07-28 and later: `server/discover`, `resultType` on every result.
    Modern,
}

impl Era {
    /// The era of a request: its `_meta` protocol version, else the
    /// `MCP-Protocol-Version` header, else 2025 (a session, or no version yet).
    /// Revisions are dates, so they compare as text.
    pub(crate) fn of(message: &Value, header: Option<&str>) -> Era {
        let version = message
            .pointer("/params/_meta")
            .and_then(|m| m.get(PROTOCOL_VERSION_META))
            .and_then(Value::as_str)
            .or(header);
        match version {
            Some(v) if v >= FIRST_MODERN => Era::Modern,
            _ => Era::Legacy,
        }
    }
}

/// A JSON-RPC request id as the client sent it (a string or a number).
pub(crate) fn id_of(message: &Value) -> Option<&Value> {
    message
        .get("id")
        .filter(|id| id.is_string() || id.is_number())
}

/// A request's method, if the message is a request or notification.
pub(crate) fn method_of(message: &Value) -> Option<&str> {
    message.get("method").and_then(Value::as_str)
}

/// What a client sent as the key of a `tools/call`.
pub(crate) enum KeyField<'a> {
    Absent,
    Text(&'a str),
    /// Present but not a string.
    NotText,
}

/// The wait a `tools/call` asks for, in seconds: `_meta["io.idemkit/wait"]`
/// when it is a non-negative integer (anything else asks nothing).
pub(crate) fn wait_field(message: &Value) -> Option<u64> {
    message
        .get("params")?
        .get("_meta")?
        .get(WAIT_META)?
        .as_u64()
}

/// The key of a `tools/call`: `_meta["io.idemkit/idempotency-key"]`, else
/// `idempotencyKey`.
pub(crate) fn key_field(message: &Value) -> KeyField<'_> {
    let params = message.get("params");
    let meta = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(KEY_META));
    let field = meta.or_else(|| params.and_then(|p| p.get(KEY_PARAM)));
    match field {
        None => KeyField::Absent,
        Some(Value::String(s)) => KeyField::Text(s),
        Some(_) => KeyField::NotText,
    }
}

/// Whether a `tools/call` asks for a task: `params.task` (2025-11-25), or on
/// 2026-07-28 a client that declares the tasks extension.
pub(crate) fn wants_task(message: &Value) -> bool {
    let params = message.get("params");
    params.and_then(|p| p.get("task")).is_some()
        || params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("io.modelcontextprotocol/clientCapabilities"))
            .and_then(|c| c.get("extensions"))
            .and_then(|e| e.get("io.modelcontextprotocol/tasks"))
            .is_some()
}

/// The refusals and answers the gateway gives itself, each a JSON-RPC error
/// whose `data.type` names it. The codes lie outside the range JSON-RPC
/// reserves (-32768 to -32000), so they never collide with the
/// specification's.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Problem {
    /// A protected tool was called without a key.
    MissingKey { tool: String },
    /// The key is not 1–255 visible ASCII characters, or not a string.
    InvalidKey { why: String },
    /// Another call with this key is running.
    InProgress { retry_after: Duration },
    /// Another call with this key is running, and as many calls as the
    /// gateway allows already wait for it.
    TooManyWaiters { retry_after: Duration },
    /// The key was used with other arguments (or another tool's call).
    Conflict,
    /// The store cannot be reached: nothing was executed.
    StoreUnavailable { retry_after: Duration },
    /// Completed, but the result is no longer kept.
    ResultExpired { resource_ref: Option<String> },
    /// The result could not be recorded, so it is not given out.
    NotRecorded { log_ref: String },
    /// The first call with this key created a task; this request does not
    /// take one.
    TaskOnly,
    /// The arguments are not I-JSON (duplicate names, lone surrogates, numbers
    /// a double cannot hold), so they have no canonical form.
    InvalidArguments { why: String },
    /// The tenant rule found no tenant in the request.
    NoTenant,
}

impl Problem {
    /// The JSON-RPC error code.
    pub(crate) fn code(&self) -> i64 {
        match self {
            Problem::MissingKey { .. } => -31000,
            Problem::InvalidKey { .. } => -31001,
            Problem::InProgress { .. } => -31002,
            Problem::Conflict => -31003,
            Problem::StoreUnavailable { .. } => -31004,
            Problem::ResultExpired { .. } => -31005,
            Problem::NotRecorded { .. } => -31006,
            Problem::TaskOnly => -31007,
            Problem::InvalidArguments { .. } => -31008,
            Problem::NoTenant => -31009,
            Problem::TooManyWaiters { .. } => -31010,
        }
    }

    /// The problem type in `data.type`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Problem::MissingKey { .. } => "idempotency_key_missing",
            Problem::InvalidKey { .. } => "idempotency_key_invalid",
            Problem::InProgress { .. } => "idempotency_key_in_progress",
            Problem::Conflict => "idempotency_key_conflict",
            Problem::StoreUnavailable { .. } => "idempotency_store_unavailable",
            Problem::ResultExpired { .. } => "idempotency_result_expired",
            Problem::NotRecorded { .. } => "idempotency_outcome_not_recorded",
            Problem::TaskOnly => "idempotency_task_only",
            Problem::InvalidArguments { .. } => "idempotency_arguments_invalid",
            Problem::NoTenant => "idempotency_tenant_missing",
            Problem::TooManyWaiters { .. } => "idempotency_too_many_waiters",
        }
    }

    fn message(&self) -> String {
        match self {
            Problem::MissingKey { tool } => format!(
                "Tool {tool:?} needs an idempotency key: send the same unique string on every \
                 attempt of this action in params._meta[\"{KEY_META}\"] (or params.{KEY_PARAM}). \
                 Nothing was executed."
            ),
            Problem::InvalidKey { why } => format!(
                "The idempotency key is not valid ({why}): 1 to 255 visible ASCII characters, \
                 as a string. Nothing was executed."
            ),
            Problem::InProgress { retry_after } => format!(
                "A call with this idempotency key is in progress. Retry with the same key after \
                 {} seconds.",
                seconds(*retry_after)
            ),
            Problem::TooManyWaiters { retry_after } => format!(
                "A call with this idempotency key is in progress, and too many calls already \
                 wait for its result. Nothing was executed. Retry with the same key after {} \
                 seconds.",
                seconds(*retry_after)
            ),
            Problem::Conflict => "This idempotency key was already used with different \
                arguments. Nothing was executed. Use a new key for a new action."
                .to_owned(),
            Problem::StoreUnavailable { retry_after } => format!(
                "The idempotency store is unavailable; nothing was executed. Retry with the same \
                 key after {} seconds.",
                seconds(*retry_after)
            ),
            Problem::ResultExpired { .. } => "The call with this idempotency key completed, \
                but its result is no longer kept. It was not executed again."
                .to_owned(),
            Problem::NotRecorded { log_ref } => format!(
                "The tool answered, but its outcome could not be recorded, so it is not given \
                 out: whether it took effect is unknown. Do not call it again; an operator \
                 settles log reference {log_ref}."
            ),
            Problem::TaskOnly => "The first call with this idempotency key ran as a task. \
                Retry with task augmentation, or read the task's result (tasks/result)."
                .to_owned(),
            Problem::InvalidArguments { why } => {
                format!("The arguments have no canonical form ({why}). Nothing was executed.")
            }
            Problem::NoTenant => "The request does not name a tenant the gateway accepts \
                (see its [tenant] rule). Nothing was executed."
                .to_owned(),
        }
    }

    fn data(&self) -> Value {
        let mut data = Map::new();
        data.insert("type".to_owned(), json!(self.kind()));
        match self {
            Problem::InProgress { retry_after }
            | Problem::StoreUnavailable { retry_after }
            | Problem::TooManyWaiters { retry_after } => {
                data.insert("retryAfter".to_owned(), json!(seconds(*retry_after)));
            }
            Problem::ResultExpired {
                resource_ref: Some(r),
            } => drop(data.insert("resourceRef".to_owned(), json!(r))),
            Problem::NotRecorded { log_ref } => {
                data.insert("logRef".to_owned(), json!(log_ref));
            }
            _ => {}
        }
        Value::Object(data)
    }

    /// This problem as the JSON-RPC error answering request `id`.
    pub(crate) fn response(&self, id: &Value) -> Value {
        json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": { "code": self.code(), "message": self.message(), "data": self.data() },
        })
    }
}

/// Whole seconds, at least 1 (a `Retry-After` of 0 reads as "now"): core's
/// rounding, the one the HTTP answers use.
fn seconds(d: Duration) -> u64 {
    idemkit::core::http::retry_after_secs(d)
}

/// A JSON-RPC success response.
pub(crate) fn result_response(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

/// The stored result of a call, shaped for `era` and marked replayed.
pub(crate) fn replayed(mut result: Value, era: Era) -> Value {
    if let Some(object) = result.as_object_mut() {
        let meta = object
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(REPLAYED_META.to_owned(), Value::Bool(true));
        }
        // A task handle keeps its own result type; a complete result says so
        // on 2026-07-28 and not before.
        match era {
            Era::Modern => {
                object
                    .entry("resultType")
                    .or_insert_with(|| json!("complete"));
            }
            Era::Legacy => {
                if object.get("resultType") == Some(&json!("complete")) {
                    object.remove("resultType");
                }
            }
        }
    }
    result
}

/// What the model sees when a call's outcome is unknown: a tool error with
/// structured content that says not to call again and what to check.
pub(crate) fn unknown_result(key: &str, since: UnixMillis, check: &str, era: Era) -> Value {
    let since = crate::timestamp::rfc3339(since);
    let text = format!(
        "The outcome of the call with idempotency key {key:?} is unknown since {since}: it may \
         or may not have taken effect, and it will not be executed again. {check}"
    );
    let result = json!({
        "content": [{ "type": "text", "text": text }],
        "structuredContent": { "state": "unknown", "key": key, "since": since, "check": check },
        "isError": true,
    });
    match era {
        // A replay of what a retry gets, for its era.
        Era::Modern => replayed_shape(result),
        Era::Legacy => result,
    }
}

fn replayed_shape(mut result: Value) -> Value {
    if let Some(object) = result.as_object_mut() {
        object.insert("resultType".to_owned(), json!("complete"));
    }
    result
}

/// The pages of `tools/list` the gateway reads to learn which tools only read.
pub(crate) const MAX_TOOL_PAGES: usize = 20;

/// A `tools/list` request of the gateway's own, for the page after `cursor`,
/// in the era of the call that made the gateway ask: a 2026-07-28 request
/// carries that call's `_meta` envelope (protocol version, client
/// capabilities), without its idempotency key.
pub(crate) fn tools_list_request(id: &str, call: &Value, era: Era, cursor: Option<&str>) -> Value {
    let mut params = Map::new();
    if let Some(cursor) = cursor {
        params.insert("cursor".to_owned(), json!(cursor));
    }
    if era == Era::Modern
        && let Some(Value::Object(meta)) = call.pointer("/params/_meta")
    {
        let mut meta = meta.clone();
        meta.remove(KEY_META);
        params.insert("_meta".to_owned(), Value::Object(meta));
    }
    let mut request = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/list" });
    if !params.is_empty()
        && let Some(object) = request.as_object_mut()
    {
        object.insert("params".to_owned(), Value::Object(params));
    }
    request
}

/// The settings advertised with the capability.
fn capability_settings() -> Value {
    json!({ "keyMeta": KEY_META, "keyParam": KEY_PARAM, "replayedMeta": REPLAYED_META })
}

/// Adds the capability to an `initialize` result
/// (`capabilities.experimental`), keeping everything else.
pub(crate) fn advertise_in_initialize(result: &mut Value) {
    insert_capability(result, "experimental");
}

/// Adds the extension to a `server/discover` result
/// (`capabilities.extensions`); `ttlMs`, `cacheScope` and the rest stay.
pub(crate) fn advertise_in_discover(result: &mut Value) {
    insert_capability(result, "extensions");
}

fn insert_capability(result: &mut Value, section: &str) {
    let Some(result) = result.as_object_mut() else {
        return;
    };
    let capabilities = result
        .entry("capabilities")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(capabilities) = capabilities.as_object_mut() else {
        return;
    };
    let section = capabilities
        .entry(section)
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(section) = section.as_object_mut() {
        section.insert(CAPABILITY.to_owned(), capability_settings());
    }
}

/// One tool of a `tools/list` result: its name and whether its annotations
/// say it only reads.
pub(crate) struct Listed {
    pub(crate) name: String,
    pub(crate) read_only: bool,
}

/// The tools of a `tools/list` result.
pub(crate) fn listed_tools(result: &Value) -> Vec<Listed> {
    result
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|tool| {
            Some(Listed {
                name: tool.get("name")?.as_str()?.to_owned(),
                read_only: tool.pointer("/annotations/readOnlyHint") == Some(&Value::Bool(true)),
            })
        })
        .collect()
}

/// Sets `annotations.idempotentHint = true` on the tools `enforced` names.
pub(crate) fn mark_enforced(result: &mut Value, enforced: impl Fn(&str) -> bool) {
    let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
        return;
    };
    for tool in tools {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            continue;
        };
        if !enforced(name) {
            continue;
        }
        let Some(tool) = tool.as_object_mut() else {
            continue;
        };
        let annotations = tool
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert("idempotentHint".to_owned(), Value::Bool(true));
        }
    }
}

/// How the gateway records a JSON-RPC error the server answered a call with,
/// as the HTTP status whose rules apply (docs/architecture.md's store policy), or `None`
/// when the server refused the call before running the tool (its headers,
/// the client's capabilities, the protocol version, a URL flow to finish
/// first): then nothing ran and a retry with the same key runs it.
pub(crate) fn error_status(error: &Value) -> Option<u16> {
    match error.get("code").and_then(Value::as_i64) {
        // Header mismatch, missing client capability, unsupported protocol
        // version, URL elicitation required.
        Some(-32020 | -32021 | -32022 | -32042) => None,
        // Parse error, invalid request: the same message fails the same way.
        Some(-32700 | -32600) => Some(400),
        Some(-32601) => Some(404),
        Some(-32602) => Some(422),
        // Internal errors, implementation-defined server errors and codes the
        // gateway does not know: the tool may have run.
        _ => Some(500),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_era_comes_from_the_meta_version_then_the_header() {
        let modern =
            json!({"params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
        assert_eq!(Era::of(&modern, None), Era::Modern);
        assert_eq!(Era::of(&json!({}), Some("2026-07-28")), Era::Modern);
        assert_eq!(Era::of(&json!({}), Some("2025-11-25")), Era::Legacy);
        assert_eq!(Era::of(&json!({}), None), Era::Legacy);
    }

    #[test]
    fn the_key_is_the_meta_entry_else_the_parameter() {
        let both = json!({"params": {"_meta": {KEY_META: "a"}, KEY_PARAM: "b"}});
        assert!(matches!(key_field(&both), KeyField::Text("a")));
        let param = json!({"params": {KEY_PARAM: "b"}});
        assert!(matches!(key_field(&param), KeyField::Text("b")));
        assert!(matches!(
            key_field(&json!({"params": {}})),
            KeyField::Absent
        ));
        let number = json!({"params": {"_meta": {KEY_META: 7}}});
        assert!(matches!(key_field(&number), KeyField::NotText));
    }

    #[test]
    fn a_replay_is_marked_and_shaped_for_its_era() {
        let stored = json!({"content": [], "_meta": {"x": 1}});
        let modern = replayed(stored.clone(), Era::Modern);
        assert_eq!(modern["resultType"], "complete");
        assert_eq!(modern["_meta"][REPLAYED_META], true);
        assert_eq!(modern["_meta"]["x"], 1);
        let legacy = replayed(modern, Era::Legacy);
        assert!(legacy.get("resultType").is_none());
    }

    #[test]
    fn capabilities_are_added_beside_what_the_server_said() {
        let mut discover =
            json!({"ttlMs": 0, "cacheScope": "private", "capabilities": {"tools": {}}});
        advertise_in_discover(&mut discover);
        assert_eq!(discover["ttlMs"], 0);
        assert_eq!(discover["cacheScope"], "private");
        assert!(discover["capabilities"]["tools"].is_object());
        assert_eq!(
            discover["capabilities"]["extensions"][CAPABILITY]["keyMeta"],
            KEY_META
        );
        let mut init = json!({"capabilities": {"experimental": {"other": {}}}});
        advertise_in_initialize(&mut init);
        assert!(init["capabilities"]["experimental"]["other"].is_object());
        assert!(init["capabilities"]["experimental"][CAPABILITY].is_object());
    }

    #[test]
    fn only_enforced_tools_get_the_hint() {
        let mut list = json!({"tools": [
            {"name": "book", "annotations": {"title": "Book"}},
            {"name": "list", "annotations": {"readOnlyHint": true}}
        ]});
        let listed = listed_tools(&list);
        assert!(!listed[0].read_only && listed[1].read_only);
        mark_enforced(&mut list, |name| name == "book");
        assert_eq!(list["tools"][0]["annotations"]["idempotentHint"], true);
        assert_eq!(list["tools"][0]["annotations"]["title"], "Book");
        assert!(
            list["tools"][1]["annotations"]
                .get("idempotentHint")
                .is_none()
        );
    }

    #[test]
    fn problems_carry_their_type_and_codes_outside_the_reserved_range() {
        let p = Problem::InProgress {
            retry_after: Duration::from_millis(1500),
        };
        let r = p.response(&json!(7));
        assert_eq!(r["id"], 7);
        assert_eq!(r["error"]["data"]["type"], "idempotency_key_in_progress");
        assert_eq!(r["error"]["data"]["retryAfter"], 2);
        for p in [Problem::Conflict, Problem::TaskOnly, Problem::NoTenant] {
            assert!(!(-32768..=-32000).contains(&p.code()));
        }
    }
}
