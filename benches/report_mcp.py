"""What `idemkit mcp` adds to a tools/call round trip: a section of the benchmark
report.

Reads `results / "mcp.json"`, written by `benches/mcp/run.sh` (the SDK v2 server
of store/tests/mcp called directly and through the gateway), and renders it as
markdown. Standard library only.

    render(results) -> list[str]    the section's markdown lines ([] when mcp.json is missing)
    targets(results) -> list        none: the figures are reported, not bounded
"""

from __future__ import annotations

from pathlib import Path

from report_common import fmt, load

SECTION = "## What `idemkit mcp` adds to a tools/call (Node client, SDK v2 server)"

# (key, label, the direct figure it is compared with)
ROWS = [
    ("direct", "`book` straight to the server (the tool runs)", None),
    ("fresh", "`book` through the gateway, a new key per call: claim, forward, record", "direct"),
    ("replay", "`book` through the gateway, a key already answered: from the store", "direct"),
    ("direct_read", "`list_bookings` (read-only) straight to the server", None),
    ("pass_through", "`list_bookings` through the gateway: never claimed", "direct_read"),
]


def render(results: Path) -> list[str]:
    doc = load(results, "mcp.json")
    if doc is None:
        return []
    res = doc.get("results", {})
    out = [
        SECTION,
        "",
        f"Run {doc.get('started', '?')}: `benches/mcp/run.sh OUT.json`. One Node "
        f"{doc.get('node', '?')} client (fetch, one keep-alive connection) sends 2026-07-28 "
        "`tools/call` requests one after another, "
        f"{doc.get('seconds_per_figure', '?')} s per figure, to the SDK v2 server of the "
        "end-to-end tests (`store/tests/mcp/server.mjs`; its `book` appends a line to a file and "
        "reads it back) directly, and through `idemkit mcp` (release build, redb store, fsync "
        "on). Client, gateway and server share the 2 cores with whatever else runs.",
        "",
        "| call | calls | p50 ms | p99 ms | mean ms | p50 against the direct call |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, label, against in ROWS:
        row = res.get(key)
        if row is None:
            out.append(f"| {label} | — | — | — | — | — |")
            continue
        ms = lambda k: None if row.get(k) is None else row[k] / 1000
        base = res.get(against) if against else None
        if base and base.get("p50_us"):
            delta = (row["p50_us"] - base["p50_us"]) / 1000
            vs = f"{row['p50_us'] / base['p50_us']:.2f}× ({delta:+.2f} ms)"
        else:
            vs = "—"
        out.append(
            f"| {label} | {row.get('calls', '—')} | {fmt(ms('p50_us'), digits=3)} | "
            f"{fmt(ms('p99_us'), digits=3)} | {fmt(ms('mean_us'), digits=3)} | {vs} |"
        )
    out += [
        "",
        "A fresh call pays the claim and the completion, each a durable redb commit (an "
        "fdatasync), before the answer goes back; a replay is one read of the store and never "
        "reaches the server; a read-only call is forwarded as it came.",
        "",
    ]
    return out


def targets(results: Path) -> list:
    return []
