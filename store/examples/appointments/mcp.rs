//! The appointment API as an MCP tool server (`--mcp-listen ADDR`): Streamable
//! HTTP at `/mcp`, JSON answers, no sessions, both protocol eras (2025-11-25
//! with `initialize`, 2026-07-28 with `server/discover`).
//!
//! | tool | does |
//! |---|---|
//! | `book_appointment` `{customer_id, slot_id}` | `POST /appointments` |
//! | `reschedule_appointment` `{appointment_id, slot_id}` | `POST /appointments/{id}/reschedule` |
//! | `list_appointments` `{}` (`readOnlyHint`) | `GET /appointments` |
//!
//! Each call goes through the service's own routes, idempotency layer
//! included: the caller's `Authorization` names the tenant, and the call's key
//! (`_meta["io.idemkit/idempotency-key"]`, else `idempotencyKey`) is sent as
//! the `Idempotency-Key`. Put `idemkit mcp` in front (README, "The reference
//! service as MCP tools") and a retried, lost or concurrent `tools/call` books
//! once, with MCP answers for replays, calls in progress and unknown outcomes.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tower::ServiceExt;

const SERVER_INFO: (&str, &str) = ("idemkit-appointments", "0.1.0");
const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";

/// Serves the tools on `addr`, calling `rest` (the service's router), with
/// `header_read_timeout` for each request head.
pub(crate) async fn spawn(
    addr: SocketAddr,
    header_read_timeout: Duration,
    rest: Router,
) -> Result<(), String> {
    let app = Router::new().route(
        "/mcp",
        post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let rest = rest.clone();
            async move { answer(rest, headers, &body).await }
        })
        .get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
    );
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("mcp listen {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    println!("appointments: MCP tools on http://{bound}/mcp");
    tokio::spawn(async move {
        idemkit::http::serve_router(listener, header_read_timeout, app, std::future::pending())
            .await;
    });
    Ok(())
}

fn tools() -> Value {
    let string = json!({ "type": "string", "minLength": 1 });
    json!([
        {
            "name": "book_appointment",
            "description": "Book a slot for a customer (calendar booking, then a confirmation message).",
            "inputSchema": { "type": "object", "properties": { "customer_id": string, "slot_id": string },
                             "required": ["customer_id", "slot_id"], "additionalProperties": false },
        },
        {
            "name": "reschedule_appointment",
            "description": "Move one of the tenant's appointments to another slot.",
            "inputSchema": { "type": "object", "properties": { "appointment_id": string, "slot_id": string },
                             "required": ["appointment_id", "slot_id"], "additionalProperties": false },
        },
        {
            "name": "list_appointments",
            "description": "The tenant's appointments.",
            "inputSchema": { "type": "object", "properties": {} },
            "annotations": { "readOnlyHint": true },
        },
    ])
}

async fn answer(rest: Router, headers: HeaderMap, body: &[u8]) -> Response {
    let Ok(message) = serde_json::from_slice::<Value>(body) else {
        return rpc_error(&Value::Null, -32700, "Parse error");
    };
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        // A response or something else the server never asked for.
        return StatusCode::ACCEPTED.into_response();
    };
    let Some(id) = message.get("id").cloned() else {
        // Notifications (initialized, cancelled) need no answer.
        return StatusCode::ACCEPTED.into_response();
    };
    let version = message
        .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
        .and_then(Value::as_str)
        .or_else(|| headers.get("mcp-protocol-version")?.to_str().ok());
    let modern = version.is_some_and(|v| v >= MODERN);
    let result = match method {
        "initialize" => json!({
            "protocolVersion": LEGACY,
            "capabilities": { "tools": {} },
            "serverInfo": { "name": SERVER_INFO.0, "version": SERVER_INFO.1 },
        }),
        "server/discover" => json!({
            "supportedVersions": [MODERN],
            "capabilities": { "tools": {} },
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": { "io.modelcontextprotocol/serverInfo": { "name": SERVER_INFO.0, "version": SERVER_INFO.1 } },
        }),
        "ping" => json!({}),
        "tools/list" => json!({ "tools": tools() }),
        "tools/call" => match call(rest, &headers, &message).await {
            Ok(result) => result,
            Err((code, text)) => return rpc_error(&id, code, &text),
        },
        _ => return rpc_error(&id, -32601, &format!("Method not found: {method}")),
    };
    let mut result = result;
    if let (true, Some(object)) = (modern, result.as_object_mut()) {
        object.insert("resultType".to_owned(), json!("complete"));
    }
    axum::Json(json!({ "jsonrpc": "2.0", "id": id, "result": result })).into_response()
}

fn rpc_error(id: &Value, code: i64, message: &str) -> Response {
    axum::Json(json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }))
        .into_response()
}

/// One tool call as a request to the service's own routes.
async fn call(rest: Router, headers: &HeaderMap, message: &Value) -> Result<Value, (i64, String)> {
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let args = params
        .get("arguments")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let text = |field: &str| {
        args.get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (method, path, body) = match name {
        "book_appointment" => (
            "POST",
            "/appointments".to_owned(),
            json!({ "customer_id": text("customer_id"), "slot_id": text("slot_id") }),
        ),
        "reschedule_appointment" => (
            "POST",
            format!("/appointments/{}/reschedule", text("appointment_id")),
            json!({ "slot_id": text("slot_id") }),
        ),
        "list_appointments" => ("GET", "/appointments".to_owned(), Value::Null),
        other => return Err((-32602, format!("Unknown tool: {other}"))),
    };
    let mut request = Request::builder().method(method).uri(&path);
    if let Some(auth) = headers.get(header::AUTHORIZATION) {
        request = request.header(header::AUTHORIZATION, auth);
    }
    let key = params
        .pointer("/_meta/io.idemkit~1idempotency-key")
        .or_else(|| params.get("idempotencyKey"))
        .and_then(Value::as_str);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let request = if body.is_null() {
        request.body(Body::empty())
    } else {
        request
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
    }
    .map_err(|e| (-32603, e.to_string()))?;
    let response = rest
        .oneshot(request)
        .await
        .map_err(|e| (-32603, e.to_string()))?;
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .map_err(|e| (-32603, e.to_string()))?;
    let structured: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    // 5xx, 408, 409, 425, 429: the service does not know yet (a provider
    // timed out, the same key is running). Not a result: an error, so a
    // gateway in front keeps the outcome open instead of storing it.
    if status.is_server_error() || matches!(status.as_u16(), 408 | 409 | 425 | 429) {
        return Err((
            -32603,
            format!("{status}: {}", String::from_utf8_lossy(&bytes)),
        ));
    }
    let mut result = json!({
        "content": [{ "type": "text", "text": String::from_utf8_lossy(&bytes) }],
        "isError": !status.is_success(),
    });
    if let (Value::Object(_), Some(object)) = (&structured, result.as_object_mut()) {
        object.insert("structuredContent".to_owned(), structured);
    }
    Ok(result)
}
