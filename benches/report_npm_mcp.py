"""What the npm package's MCP server and agent tool wrappers add to a tool call: a
section of the benchmark report.

Reads `results / "npm_mcp.json"`, the one JSON document `node wasm/bench/mcp-wrapper.mjs`
prints, and renders it as markdown. Standard library only.

    render(results) -> list[str]    the section's markdown lines ([] when npm_mcp.json is missing)
    targets(results) -> list        none: the figures are asked for, not a bound
"""

from __future__ import annotations

from pathlib import Path

from report_common import fmt, load

SECTION = "## What the MCP server and agent tool wrappers add to a tool call (npm, Node)"

# (key, label, the bare figure it is compared with)
MCP_ROWS = [
    ("mcp_bare", "`book` on the unprotected server", None),
    ("mcp_fresh_memory", "protected, a new key: claim, the tool, completion (memoryAdapter)", "mcp_bare"),
    ("mcp_replay_memory", "protected, a key already answered: the stored result (memoryAdapter)", "mcp_bare"),
    ("mcp_fresh_sqlite", "protected, a new key (sqliteAdapter, a file, synchronous=FULL)", "mcp_bare"),
    ("mcp_replay_sqlite", "protected, a key already answered (sqliteAdapter, a file)", "mcp_bare"),
]
AGENT_ROWS = [
    ("agent_bare", "an `execute` that posts and parses the answer", None),
    ("agent_fresh_memory", "`aiSdkExecute`, a new action: journal begin, attempt, status (memory journal)", "agent_bare"),
    ("agent_bare_twice", "the bare `execute`, twice", None),
    ("agent_retried_memory", "`aiSdkExecute` twice on one action, the second resuming it with its key", "agent_bare_twice"),
]


def _table(res: dict, rows: list) -> list[str]:
    out = [
        "| call | p50 µs | p99 µs | mean µs | calls/s | added to the bare call (p50) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, label, against in rows:
        row = res.get(key)
        if row is None:
            out.append(f"| {label} | — | — | — | — | — |")
            continue
        base = res.get(against) if against else None
        added = "—" if not base else f"{row['p50_us'] - base['p50_us']:+,.0f} µs"
        out.append(
            f"| {label} | {fmt(row.get('p50_us'))} | {fmt(row.get('p99_us'))} | "
            f"{fmt(row.get('mean_us'))} | {fmt(row.get('ops_per_s'))} | {added} |"
        )
    return out


def render(results: Path) -> list[str]:
    doc = load(results, "npm_mcp.json")
    if doc is None:
        return []
    res = doc.get("results", {})
    out = [
        SECTION,
        "",
        f"One Node {doc.get('node', '?')} process ({doc.get('cpu', '?')}), nothing on the network, "
        f"{doc.get('seconds_per_measurement', '?')} s per figure, calls one after another. Command: "
        "`npm --prefix wasm run build && npm --prefix wasm/bench ci && node wasm/bench/mcp-wrapper.mjs`. "
        "The machine's 2 cores are shared with whatever else runs, so the medians say more than the means.",
        "",
        f"**The MCP server wrapper** (`createMcpIdempotency`): an SDK v2 server "
        f"(`{doc.get('sdk', '@modelcontextprotocol/server')}`) served by `createMcpHandler`, called with "
        "2026-07-28 `tools/call` requests straight into its fetch handler; its `book` tool only counts.",
        "",
        *_table(res, MCP_ROWS),
        "",
        "A fresh call pays the claim and the completion (two conditional writes, each a commit on "
        "SQLite) before the answer leaves; a replay is one read and is answered before the SDK "
        "validates or runs anything, so it costs less than the unprotected call.",
        "",
        "**The agent tool wrapper** (`aiSdkExecute` over HTTP): the `execute` of an AI SDK tool posting to "
        "an in-process booking endpoint (a fetch function) that does no idempotency of its own, so only "
        "the client side is measured.",
        "",
        *_table(res, AGENT_ROWS),
        "",
        "An action is journalled before its first attempt (the key, then the attempt's start and end, "
        "then the action's status read back); the SDK's second execution of the same action reads the "
        "key back instead of creating one.",
        "",
    ]
    return out


def targets(results: Path) -> list:
    return []
