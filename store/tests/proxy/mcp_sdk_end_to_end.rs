//! `idemkit mcp` between the official MCP SDKs, end to end over Streamable
//! HTTP and stdio: real servers (store/tests/mcp/server.mjs, whose tools count
//! their executions in a file) behind the gateway, real clients
//! (store/tests/mcp/client_*.{mjs,py}) in front, for each pairing of the two
//! protocol eras. Without the gateway, a retried `tools/call` runs twice and
//! 50 concurrent calls with one key run 50 times.
#![cfg(feature = "axum")]

use crate::support;

use serde_json::{Value, json};
use support::mcp::{ClientKind, Gateway, McpServer, Sdk, gateway_config, key_of, run_client};

/// A server of `sdk` behind a gateway, in a fresh directory.
fn behind_gateway(sdk: Sdk) -> (tempfile::TempDir, McpServer, Gateway) {
    let dir = tempfile::tempdir().unwrap();
    let server = McpServer::start(sdk, dir.path());
    let gateway = Gateway::start(&gateway_config(dir.path(), &server.url, ""));
    (dir, server, gateway)
}

fn replayed(result: &Value) -> bool {
    result["_meta"]["io.idemkit/replayed"] == json!(true)
}

fn error_type(outcome: &Value) -> &str {
    outcome["error"]["data"]["type"]
        .as_str()
        .unwrap_or_default()
}

/// The first response is lost (the client's fetch drops it after the server
/// answered); the client retries with the same `_meta` key and gets the
/// stored result, marked replayed: one execution.
fn lost_response(client: ClientKind, sdk: Sdk) {
    let (_dir, server, gateway) = behind_gateway(sdk);
    let report = run_client(client, &gateway.url, "lost_response", "lost");
    assert!(report["first"]["error"].is_object(), "{report}");
    let retry = &report["retry"]["result"];
    assert!(replayed(retry), "{report}");
    assert_eq!(retry["structuredContent"]["booking"], "bk_1", "{report}");
    assert_eq!(server.executions("lost"), ["book s-1"]);
}

/// 50 concurrent calls with one key: one execution; every other call is told
/// the first is in progress (with a retry-after) or gets its replay.
fn fifty_concurrent(client: ClientKind, sdk: Sdk) {
    let (_dir, server, gateway) = behind_gateway(sdk);
    let report = run_client(client, &gateway.url, "concurrent", "many");
    let all = report["all"].as_array().unwrap();
    assert_eq!(all.len(), 50);
    let fresh = all
        .iter()
        .filter(|o| o["result"].is_object() && !replayed(&o["result"]))
        .count();
    assert_eq!(fresh, 1, "{report}");
    for outcome in all {
        let in_progress = error_type(outcome) == "idempotency_key_in_progress"
            && outcome["error"]["data"]["retryAfter"].as_u64().is_some();
        assert!(in_progress || outcome["result"].is_object(), "{outcome}");
    }
    assert_eq!(server.executions("many"), ["book s-1"]);
}

/// The key again with other arguments: the reuse error, and the other
/// arguments never reach the server.
fn reuse(client: ClientKind, sdk: Sdk) {
    let (_dir, server, gateway) = behind_gateway(sdk);
    let report = run_client(client, &gateway.url, "reuse", "reuse");
    assert!(report["first"]["result"].is_object(), "{report}");
    assert_eq!(
        error_type(&report["other"]),
        "idempotency_key_conflict",
        "{report}"
    );
    assert_eq!(report["other"]["error"]["code"], -31003);
    assert_eq!(server.executions("reuse"), ["book s-1"]);
}

/// A read-only tool (`readOnlyHint`) is never claimed: it runs without a key
/// and leaves no record; `tools/list` marks only the enforced tools
/// `idempotentHint`.
fn read_only(client: ClientKind, sdk: Sdk) {
    let (_dir, _server, gateway) = behind_gateway(sdk);
    let report = run_client(client, &gateway.url, "read_only", "reader");
    assert!(report["listed"]["result"]["content"].is_array(), "{report}");
    assert!(
        gateway.records(None).is_empty(),
        "no claim for a read-only tool"
    );
    let tools = report["tools"].as_array().unwrap();
    let hint = |name: &str| {
        tools.iter().find(|t| t["name"] == name).unwrap()["annotations"]["idempotentHint"].clone()
    };
    assert_eq!(hint("book"), json!(true));
    assert_eq!(hint("confirm_book"), json!(true));
    assert_eq!(hint("list_bookings"), Value::Null);
}

/// A keyless call to a protected tool is refused with how to send a key, and
/// nothing runs; a tool configured `derive = "arguments"` merges a keyless
/// repeat with the same arguments within its window (2 s) and runs again
/// after it.
fn keyless(client: ClientKind, sdk: Sdk) {
    let (_dir, server, gateway) = behind_gateway(sdk);
    let report = run_client(client, &gateway.url, "keyless", "keyless");
    assert_eq!(
        error_type(&report["keyless"]),
        "idempotency_key_missing",
        "{report}"
    );
    assert!(
        report["keyless"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("io.idemkit/idempotency-key")
    );
    assert!(!replayed(&report["first"]["result"]), "{report}");
    assert!(replayed(&report["repeat"]["result"]), "{report}");
    assert!(!replayed(&report["later"]["result"]), "{report}");
    assert_eq!(server.executions("keyless"), ["note hello", "note hello"]);
}

/// The gateway advertises itself where the client's era looks: the
/// `initialize` result's `capabilities.experimental` (2025-11-25), the
/// `server/discover` result's `capabilities.extensions` (2026-07-28, keeping
/// `ttlMs` and `cacheScope`).
fn capability(client: ClientKind, sdk: Sdk) -> Value {
    let (_dir, _server, gateway) = behind_gateway(sdk);
    let report = run_client(client, &gateway.url, "capability", "cap");
    let modern = sdk == Sdk::V2 && client != ClientKind::V1;
    if modern {
        assert_eq!(report["protocolVersion"], "2026-07-28", "{report}");
        let ad = &report["capabilities"]["extensions"]["io.idemkit/idempotency"];
        assert_eq!(ad["keyMeta"], "io.idemkit/idempotency-key", "{report}");
    } else {
        assert_eq!(report["protocolVersion"], "2025-11-25", "{report}");
        let ad = &report["capabilities"]["experimental"]["io.idemkit/idempotency"];
        assert_eq!(ad["keyMeta"], "io.idemkit/idempotency-key", "{report}");
    }
    report
}

/// A tool that asks the user to confirm first (2026: an `input_required`
/// result and a continuation; 2025: an elicitation on the call's stream) runs
/// once, and a later retry with the key replays the final result, not the
/// question.
fn confirm_first(client: ClientKind, sdk: Sdk) {
    let (_dir, server, gateway) = behind_gateway(sdk);
    let report = run_client(client, &gateway.url, "input_required", "confirm");
    let first = &report["first"]["result"];
    assert!(!replayed(first), "{report}");
    assert_eq!(report["elicitations"], 1, "{report}");
    let retry = &report["retry"]["result"];
    assert!(replayed(retry), "{report}");
    assert_eq!(retry["structuredContent"], first["structuredContent"]);
    assert_eq!(server.executions("confirm"), ["book s-1"]);
}

/// The server dies after executing and before answering; restarted, the
/// retry gets the unknown outcome (a tool error with structured content that
/// says not to call again), never a second execution.
fn crash(client: ClientKind, sdk: Sdk) {
    let dir = tempfile::tempdir().unwrap();
    let server = McpServer::start(sdk, dir.path());
    let gateway = Gateway::start(&gateway_config(dir.path(), &server.url, ""));
    let first = run_client(client, &gateway.url, "crash_first", "crash");
    assert!(
        first["first"]["result"]["isError"] == json!(true) || first["first"]["error"].is_object(),
        "{first}"
    );
    let server = server.restart_after_exit(dir.path());
    let report = run_client(client, &gateway.url, "crash_retry", "crash");
    let retry = &report["retry"]["result"];
    assert_eq!(retry["isError"], true, "{report}");
    let unknown = &retry["structuredContent"];
    assert_eq!(unknown["state"], "unknown", "{report}");
    assert_eq!(unknown["key"], key_of("crash"));
    assert!(
        unknown["since"].as_str().unwrap().ends_with('Z'),
        "{unknown}"
    );
    assert!(
        unknown["check"].as_str().unwrap().contains("Do not call"),
        "{unknown}"
    );
    assert_eq!(server.executions("crash"), ["book s-1"]);
    let unresolved = gateway.records(Some("unknown"));
    assert_eq!(unresolved.len(), 1, "{unresolved:?}");
    assert_eq!(unresolved[0]["operation"], "book");
}

/// The capability where 2026-07-28 looks, 2026-07-28 negotiated through the
/// gateway by the client's `auto` negotiation, and the discover result's cache
/// hints kept.
fn negotiated_through_the_gateway(client: ClientKind, sdk: Sdk) {
    let report = capability(client, sdk);
    assert_eq!(report["era"], "modern", "{report}");
    assert_eq!(report["discover"]["ttlMs"], 0, "{report}");
    assert_eq!(report["discover"]["cacheScope"], "private", "{report}");
}

/// One module of tests per client/server pairing, one test per scenario; each
/// scenario's story is the doc comment of the function it runs.
macro_rules! pairing {
    ($(#[$doc:meta])* $module:ident: $client:expr, $sdk:expr;
     $($test:ident => $scenario:ident),* $(,)?) => {
        $(#[$doc])*
        mod $module {
            use super::*;
            $(
                #[doc = concat!("See [`", stringify!($scenario), "`].")]
                #[test]
                fn $test() {
                    let _ = $scenario($client, $sdk);
                }
            )*
        }
    };
}

pairing! {
    /// Revision 2025-11-25 end to end: the SDK v1 client in front of the SDK v1
    /// server (sessions, SSE answers; the confirmation is an elicitation the
    /// server sends on the call's stream).
    v1_client_v1_server: ClientKind::V1, Sdk::V1;
    a_lost_response_is_retried_and_replayed_with_one_execution => lost_response,
    fifty_concurrent_calls_with_one_key_execute_once => fifty_concurrent,
    other_arguments_under_the_key_are_refused_unexecuted => reuse,
    a_read_only_tool_is_never_claimed => read_only,
    a_keyless_call_is_refused_or_deduplicated_by_its_derived_key => keyless,
    the_capability_is_in_the_initialize_result => capability,
    a_call_that_asks_to_confirm_runs_once_and_replays_its_result => confirm_first,
    a_server_killed_before_answering_leaves_an_unknown_outcome => crash,
}

pairing! {
    /// Revision 2026-07-28 end to end: the SDK v2 client (negotiation `auto`)
    /// in front of the SDK v2 server (`input_required`, then the continuation).
    v2_client_v2_server: ClientKind::V2, Sdk::V2;
    a_lost_response_is_retried_and_replayed_with_one_execution => lost_response,
    fifty_concurrent_calls_with_one_key_execute_once => fifty_concurrent,
    other_arguments_under_the_key_are_refused_unexecuted => reuse,
    a_read_only_tool_is_never_claimed => read_only,
    a_keyless_call_is_refused_or_deduplicated_by_its_derived_key => keyless,
    twenty_twenty_six_is_negotiated_and_the_extension_is_in_discover => negotiated_through_the_gateway,
    an_input_required_call_runs_once_and_replays_its_final_result => confirm_first,
    a_server_killed_before_answering_leaves_an_unknown_outcome => crash,
}

pairing! {
    /// An SDK v1 client (2025-11-25) in front of an SDK v2 server, which
    /// serves it statelessly.
    v1_client_v2_server: ClientKind::V1, Sdk::V2;
    a_lost_response_is_retried_and_replayed_with_one_execution => lost_response,
    fifty_concurrent_calls_with_one_key_execute_once => fifty_concurrent,
    other_arguments_under_the_key_are_refused_unexecuted => reuse,
    a_read_only_tool_is_never_claimed => read_only,
    a_keyless_call_is_refused_or_deduplicated_by_its_derived_key => keyless,
    the_capability_is_in_the_initialize_result => capability,
}

pairing! {
    /// The Python SDK's client (PyPI `mcp` 2.x, mode `auto`) in front of the
    /// SDK v2 server: 2026-07-28 (a lost answer reaches it as a 504).
    python_client_v2_server: ClientKind::Python, Sdk::V2;
    a_lost_response_is_retried_and_replayed_with_one_execution => lost_response,
    fifty_concurrent_calls_with_one_key_execute_once => fifty_concurrent,
    other_arguments_under_the_key_are_refused_unexecuted => reuse,
    a_read_only_tool_is_never_claimed => read_only,
    a_keyless_call_is_refused_or_deduplicated_by_its_derived_key => keyless,
    the_extension_is_in_the_discover_result => capability,
    an_input_required_call_runs_once_and_replays_its_final_result => confirm_first,
}

/// `idemkit mcp --config FILE -- node server.mjs v2 stdio`: the gateway
/// between a client on its stdin/stdout and the SDK v2 server on the child's.
mod stdio {
    use super::*;
    use support::mcp::{StdioGateway, executions};

    /// The 2026-07-28 `_meta` envelope every request carries.
    fn envelope(key: Option<&str>) -> Value {
        let mut meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": { "elicitation": { "form": {} } },
        });
        if let Some(key) = key {
            meta["io.idemkit/idempotency-key"] = json!(key);
        }
        meta
    }

    fn confirm_call(id: u64, extra: Value) -> Value {
        let mut params = json!({
            "name": "confirm_book",
            "arguments": { "customer": "stdio", "slot": "s-1" },
            "_meta": envelope(Some("stdio-key")),
        });
        if let (Some(params), Some(extra)) = (params.as_object_mut(), extra.as_object()) {
            params.extend(extra.clone());
        }
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params })
    }

    /// Over stdio, a tool that answers `input_required` first (a confirmation)
    /// completes on the continuation (`inputResponses`, same key) with one
    /// execution; a later retry with the key replays the final result, not
    /// the question. The discover result carries the extension.
    #[test]
    fn an_input_required_call_over_stdio_runs_once_and_replays_its_final_result() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("mcp.toml");
        std::fs::write(
            &config,
            format!(
                "[store]\npath = {:?}\n[tenant]\nfixed = \"clinic-a\"\n",
                dir.path().join("mcp.redb")
            ),
        )
        .unwrap();
        let count_file = dir.path().join("executions");
        let mut gateway = StdioGateway::start(&config, &count_file);

        let discover = gateway.request(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "server/discover",
            "params": { "_meta": envelope(None) },
        }));
        assert!(
            discover["result"]["capabilities"]["extensions"]["io.idemkit/idempotency"].is_object(),
            "{discover}"
        );

        let question = gateway.request(&confirm_call(2, json!({})));
        assert_eq!(
            question["result"]["resultType"], "input_required",
            "{question}"
        );
        assert!(executions(&count_file, "stdio").is_empty());

        let answer = json!({ "inputResponses": { "confirm": { "action": "accept", "content": { "confirm": true } } } });
        let done = gateway.request(&confirm_call(3, answer));
        assert_eq!(done["result"]["resultType"], "complete", "{done}");
        assert!(!replayed(&done["result"]), "{done}");
        assert_eq!(executions(&count_file, "stdio"), ["book s-1"]);

        let retry = gateway.request(&confirm_call(4, json!({})));
        assert_eq!(retry["id"], 4);
        assert!(replayed(&retry["result"]), "{retry}");
        assert_eq!(retry["result"]["resultType"], "complete");
        assert_eq!(
            retry["result"]["structuredContent"],
            done["result"]["structuredContent"]
        );
        assert_eq!(executions(&count_file, "stdio"), ["book s-1"]);
    }
}

/// The official MCP conformance suite (npm `@modelcontextprotocol/conformance`,
/// on Node 22): every server scenario that passes against the SDK's
/// conformance server alone passes through the gateway too. Its tools are
/// configured `derive = "arguments"`, so every `tools/call` of the suite (which
/// sends no keys) is claimed, forwarded and recorded; the gateway listens on
/// loopback, so the suite's DNS rebinding checks are answered by the gateway.
#[test]
fn the_conformance_server_scenarios_pass_through_the_gateway() {
    use support::mcp::{Spawned, conformance, mcp_dir, node};
    let dir = tempfile::tempdir().unwrap();
    let mut server = std::process::Command::new(node());
    server
        .arg(mcp_dir().join("conformance_server.ts"))
        .env("PORT", "0")
        .current_dir(mcp_dir());
    let server = Spawned::start(server);
    let direct = conformance(&server.url, dir.path());
    let passing: Vec<&String> = direct
        .iter()
        .filter(|(_, ok)| *ok)
        .map(|(n, _)| n)
        .collect();
    assert!(
        passing.len() >= 25,
        "the suite ran against the server: {direct:?}"
    );

    let source = std::fs::read_to_string(mcp_dir().join("conformance_server.ts")).unwrap();
    let tools: String = source
        .split("mcpServer.tool(")
        .skip(1)
        .filter_map(|rest| rest.trim_start().strip_prefix('\'')?.split('\'').next())
        .map(|name| {
            format!(
                "[[tools]]\nname = \"{name}\"\nderive = \"arguments\"\nderive_window_ms = 1000\n"
            )
        })
        .collect();
    assert!(tools.contains("test_simple_text"), "{tools}");
    let config = dir.path().join("mcp.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\nupstream = {:?}\n[store]\npath = {:?}\n[tenant]\nfixed = \"conformance\"\n{tools}",
            server.url,
            dir.path().join("mcp.redb")
        ),
    )
    .unwrap();
    let mut gateway = std::process::Command::new(env!("CARGO_BIN_EXE_idemkit"));
    gateway.arg("mcp").arg("--config").arg(&config);
    let gateway = Spawned::start(gateway);
    let through = conformance(&gateway.url.replace("127.0.0.1", "localhost"), dir.path());
    for name in passing {
        assert!(
            through.iter().any(|(n, ok)| n == name && *ok),
            "{name} passes against the server alone, not through the gateway: {through:?}"
        );
    }
}
