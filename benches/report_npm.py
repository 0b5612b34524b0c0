"""The npm package against @node-idempotency/core: a section of the benchmark report.

Reads `results / "npm.json"`, the one JSON document `node wasm/bench/overhead.mjs`
prints, and renders it as markdown; `npm_node22.json`, the same script run by Node 22
(the `node@22` package store/tests/mcp installs), when present, as a second table.
The targets are the first run's: the machine's own Node. Standard library only.

    render(results) -> list[str]    the section's markdown lines ([] when npm.json is missing)
    targets(results) -> list[(name, measured, needed, higher_is_better, what)]
"""

from __future__ import annotations

from pathlib import Path

from report_common import load, fmt

SECTION = "## The npm package against @node-idempotency/core (Node)"

# (key in results, label, the peer figure it is compared with, or None)
ROWS = [
    ("peer_fresh", "peer: onRequest + onResponse, new key", None),
    ("peer_replay", "peer: onRequest, key already answered", None),
    ("idemkit_claim_complete", "idemkit: claim + complete, new key", "peer_fresh"),
    ("idemkit_replay", "idemkit: claim, key already answered (replay)", "peer_replay"),
    ("idemkit_fingerprint", "idemkit: fingerprint alone", None),
    ("idemkit_decode", "idemkit: decodeRecord into a JS view", None),
    ("bare_handler", "bare fetch handler (no idempotency)", None),
    ("handle_fresh", "idemkit: handle(), new key", None),
    ("handle_replay", "idemkit: handle(), replay", None),
    ("fetch_copies", "Node alone: the Request copy and the Response that handle() makes on a new key, each made and read", None),
]

# The targets: rate ratios against the peer, and what handle() adds.
RATIO_NEED = 1.5
HANDLE_REPLAY_NEED_US = 30.0
HANDLE_FRESH_NEED_US = 50.0


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


# The pairs overhead.mjs compares within each round (its `derived`): the median of
# the per-round figures, steadier than a ratio of two medians measured apart.
PAIRED_RATIO = {("idemkit_claim_complete", "peer_fresh"): "ratio_fresh", ("idemkit_replay", "peer_replay"): "ratio_replay"}
PAIRED_ADDED = {"handle_fresh": "handle_fresh_added_us", "handle_replay": "handle_replay_added_us"}


def _paired(doc: dict, key: str | None) -> float | None:
    """The derived figure `key` of a run measured in rounds (None before rounds, or without one)."""
    return _num(doc.get("derived", {}).get(key)) if "rounds" in doc and key else None


def _rate_ratio(doc: dict, name: str, peer: str) -> float | None:
    paired = _paired(doc, PAIRED_RATIO.get((name, peer)))
    if paired is not None:
        return paired
    res = doc.get("results", {})
    a = _num(res.get(name, {}).get("ops_per_s"))
    b = _num(res.get(peer, {}).get("ops_per_s"))
    return None if a is None or b is None or b == 0 else a / b


def _added(doc: dict, name: str) -> float | None:
    paired = _paired(doc, PAIRED_ADDED.get(name))
    if paired is not None:
        return paired
    res = doc.get("results", {})
    a = _num(res.get(name, {}).get("mean_us"))
    b = _num(res.get("bare_handler", {}).get("mean_us"))
    return None if a is None or b is None else a - b


def _method(doc: dict) -> str:
    """How the figures were measured, after "N s per figure"."""
    if "rounds" not in doc:
        return "."
    return (
        f" over {doc['rounds']} rounds, the figures taking turns in each; each figure is the median of its "
        "rounds, and each ratio and added µs the median over rounds of the two figures measured in that round."
    )


def _fetch_split(doc: dict) -> str | None:
    """What handle() adds on a new key, split into Node's fetch copies and idemkit's own steps (None before the split was measured)."""
    added = _added(doc, "handle_fresh")
    copies = _num(doc.get("results", {}).get("fetch_copies", {}).get("mean_us"))
    own = _paired(doc, "handle_fresh_own_us")
    if added is None or copies is None or own is None:
        return None
    return (
        f"Of the {added:.1f} µs `handle()` adds on a new key, Node's two fetch copies take {copies:.1f} µs "
        "(the row \"Node alone\": the handler gets a copy of the request, whose stream the fingerprint read, and the "
        "client a new Response, the handler's having been read to record it; no idemkit code runs in that row), "
        f"and idemkit's own steps {own:.1f} µs (each round's new key less its bare handler and its fetch copies, "
        "the median over rounds)."
    )


def _figures(doc: dict) -> list[str]:
    """The figures of one run of overhead.mjs, a row per operation, then the split of a fresh handle()."""
    res = doc.get("results", {})
    out = [
        "| operation | mean µs | p50 µs | ops/s | against the peer (rate) | added to the bare handler |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, label, against in ROWS:
        row = res.get(key)
        if row is None:
            out.append(f"| {label} | — | — | — | — | — |")
            continue
        r = _rate_ratio(doc, key, against) if against else None
        vs = "—" if r is None else f"{r:.2f}× ({against})"
        added = _added(doc, key) if key.startswith("handle_") else None
        add = "—" if added is None else f"{added:+.1f} µs"
        out.append(
            f"| {label} | {fmt(_num(row.get('mean_us')))} | {fmt(_num(row.get('p50_us')))} "
            f"| {fmt(_num(row.get('ops_per_s')))} | {vs} | {add} |"
        )
    out.append("")
    split = _fetch_split(doc)
    if split is not None:
        out.append(split)
        out.append("")
    return out


def _on_node22(results: Path, first: dict) -> list[str]:
    """The same script run by Node 22, beside the first run's Node ([] when it did not run)."""
    doc = load(results, "npm_node22.json")
    if doc is None:
        return []
    out = [
        f"**The same script on {doc.get('node', 'Node 22')}** (`store/tests/mcp/node_modules/.bin/node "
        "wasm/bench/overhead.mjs`: the `node@22` package the test command installs for the MCP conformance "
        f"suite), right after the run above on {first.get('node', '?')}, the same build and settings. "
        "It shows what of the figures above is the Node release's: the targets below stay the run above's.",
        "",
    ]
    return out + _figures(doc)


def render(results: Path) -> list[str]:
    doc = load(results, "npm.json")
    if doc is None:
        return []
    peer = doc.get("peer", {})
    out = [
        SECTION,
        "",
        f"One Node process ({doc.get('node', '?')}, {doc.get('cpu', '?')}), the same "
        f"{doc.get('body_bytes', '?')}-byte JSON body on both sides, in-memory stores on both sides "
        f"(`{peer.get('package', '@node-idempotency/core')}@{peer.get('version', '?')}` with "
        f"`{peer.get('adapter', '?')}`; idemkit's `memoryAdapter`), "
        f"{doc.get('seconds_per_measurement', '?')} s per figure{_method(doc)} "
        "Command: `npm --prefix wasm run build && npm --prefix wasm/bench ci && node wasm/bench/overhead.mjs`. "
        "The peer is given the body parsed (`JSON.parse` counted in its figure), idemkit the bytes.",
        "",
    ]
    out += _figures(doc)
    out += _on_node22(results, doc)
    out.append("| target | measured | needed | verdict |")
    out.append("|---|---:|---:|---|")
    for name, measured, need, higher, what in targets(results):
        unit = "×" if name.startswith("ratio") or "rate" in name else " µs"
        if measured is None:
            verdict = "not measured"
        elif higher:
            verdict = "met" if measured >= need else "**missed**"
        else:
            verdict = "met" if measured <= need else "**missed**"
        m = "—" if measured is None else f"{measured:.2f}{unit}"
        n = ("≥ " if higher else "≤ ") + f"{need:g}{unit}"
        out.append(f"| {name}: {what} | {m} | {n} | {verdict} |")
    out.append("")
    return out


def targets(results: Path) -> list[tuple[str, float | None, float, bool, str]]:
    doc = load(results, "npm.json")
    if doc is None:
        return [
            ("npm fresh rate vs peer", None, RATIO_NEED, True, "idemkit claim+complete ÷ @node-idempotency/core onRequest+onResponse (ops/s)"),
            ("npm replay rate vs peer", None, RATIO_NEED, True, "idemkit replayed claim ÷ @node-idempotency/core replayed onRequest (ops/s)"),
            ("npm handle() added, replay", None, HANDLE_REPLAY_NEED_US, False, "µs handle() adds to a bare fetch handler on a replay (memory adapter)"),
            ("npm handle() added, fresh", None, HANDLE_FRESH_NEED_US, False, "µs handle() adds to a bare fetch handler on a new key (memory adapter)"),
        ]
    return [
        ("npm fresh rate vs peer", _rate_ratio(doc, "idemkit_claim_complete", "peer_fresh"), RATIO_NEED, True,
         "idemkit claim+complete ÷ @node-idempotency/core onRequest+onResponse (ops/s)"),
        ("npm replay rate vs peer", _rate_ratio(doc, "idemkit_replay", "peer_replay"), RATIO_NEED, True,
         "idemkit replayed claim ÷ @node-idempotency/core replayed onRequest (ops/s)"),
        ("npm handle() added, replay", _added(doc, "handle_replay"), HANDLE_REPLAY_NEED_US, False,
         "µs handle() adds to a bare fetch handler on a replay (memory adapter)"),
        ("npm handle() added, fresh", _added(doc, "handle_fresh"), HANDLE_FRESH_NEED_US, False,
         "µs handle() adds to a bare fetch handler on a new key (memory adapter)"),
    ]
