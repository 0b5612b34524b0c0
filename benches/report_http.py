"""What the idempotency layer adds to a request (wrk), a section of the benchmark
report. Standard library only.

Reads `results / "http.json"`, written by `benches/http/run.sh OUT.json`: wrk against
one axum handler served bare and behind `IdempotencyLayer` on the in-memory adapter
(`idemkit-http-overhead`), and against the appointments reference service, each with a
fresh Idempotency-Key per request and with one replayed key; `-t1 -c1` for latency,
`-t2 -cN` for throughput, the targets taking turns, medians of the rounds.

    render(results) -> list[str]    the section's markdown lines ([] when http.json is missing)
    targets(results) -> list[(name, measured, needed, higher_is_better, what)]
"""

from __future__ import annotations

from pathlib import Path

from report_common import load

SECTION = "## What the idempotency layer adds to a request (wrk)"

# µs added to the bare route's p50 (one connection), at most.
REPLAY_NEED_US = 10.0
FRESH_NEED_US = 15.0

# Published figures, as reported by their authors (not measured here).
ANCHORS = [
    ("idempot-js on Hono + SQLite", "about 49 µs per request", "—"),
    ("Go `idemkit`, in memory", "about 3.6 µs", "about 1.4 µs"),
]

TARGETS = [
    ("bare", "`POST /bare`: the axum handler alone"),
    ("layer-fresh", "`POST /layered`, a fresh key per request: the same handler behind the layer, in-memory store"),
    ("layer-replay", "`POST /layered`, one key: every request a replay"),
    ("appointments-fresh", "appointments `POST /appointments`, a fresh key (redb + simulated providers)"),
    ("appointments-replay", "appointments `POST /appointments`, one key: every request a replay"),
]


def _num(x) -> str:
    return "—" if x is None else f"{x:,.0f}"


def _us(x) -> str:
    if x is None:
        return "—"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}"


def _ratio(x) -> str:
    return "—" if x is None else f"{x:.2f}×"


def _row(doc: dict, target: str, mode: str) -> dict | None:
    for r in doc.get("rows", []):
        if r["target"] == target and r["mode"] == mode:
            return r
    return None


def _added(doc: dict, target: str) -> float | None:
    """µs the target adds to the bare route's p50, one connection, same run."""
    bare, other = _row(doc, "bare", "latency"), _row(doc, target, "latency")
    if bare is None or other is None:
        return None
    return other["p50_us"] - bare["p50_us"]


def render(results: Path) -> list[str]:
    doc = load(results, "http.json")
    if doc is None:
        return []
    wrk = doc.get("wrk", {})
    lines = [
        SECTION,
        "",
        "One axum handler (`benches/src/http_overhead.rs`, answers 201 with a small JSON body) served "
        "bare and behind `IdempotencyLayer` on the in-memory adapter, on one listener of "
        "`idemkit-http-overhead`; and the appointments reference service "
        "(`cargo run --release --example appointments`, redb files in a temp dir). Every request "
        "carries the same headers and a 40-odd-byte JSON body (`benches/http/fresh.lua`: a unique "
        "`Idempotency-Key` per request, `PREFIX-THREAD-COUNTER`; `replay.lua`: one key whose first "
        "request ran before the measurement). "
        f"Latency: `wrk {wrk.get('latency', '-t1 -c1')}` (one request at a time: what a request "
        "sees, without queueing); throughput: "
        f"`wrk {wrk.get('throughput', '-t2 -cN')}`. The targets take turns, {doc.get('rounds')} "
        f"round(s); each figure is the median of its rounds. Started {doc.get('started')}, "
        f"commit `{doc.get('commit')}`; `benches/http/run.sh`.",
        "",
        "| target | p50 µs (1 conn) | p99 µs (1 conn) | req/s (1 conn) | p50 µs "
        f"({doc.get('connections')} conns) | p99 µs ({doc.get('connections')} conns) | req/s "
        f"({doc.get('connections')} conns) | µs added to bare p50 | p50 ÷ bare | req/s ÷ bare "
        f"({doc.get('connections')} conns) | non-2xx |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    bare_l, bare_t = _row(doc, "bare", "latency"), _row(doc, "bare", "throughput")
    for target, what in TARGETS:
        lat, thr = _row(doc, target, "latency"), _row(doc, target, "throughput")
        if lat is None and thr is None:
            continue
        g = lambda r, f: None if r is None else r.get(f)  # noqa: E731
        ratio_p50 = (lat["p50_us"] / bare_l["p50_us"]) if lat and bare_l and bare_l["p50_us"] else None
        ratio_rps = (thr["rps"] / bare_t["rps"]) if thr and bare_t and bare_t["rps"] else None
        added = None if target == "bare" else _added(doc, target)
        non2xx = sum(r.get("non_2xx", 0) for r in (lat, thr) if r)
        lines.append(
            f"| {what} | {_us(g(lat, 'p50_us'))} | {_us(g(lat, 'p99_us'))} | {_num(g(lat, 'rps'))} | "
            f"{_us(g(thr, 'p50_us'))} | {_us(g(thr, 'p99_us'))} | {_num(g(thr, 'rps'))} | "
            f"{'—' if target == 'bare' else _us(added)} | {_ratio(ratio_p50)} | {_ratio(ratio_rps)} | {non2xx} |"
        )
    lines += [
        "",
        "Published anchors, **as reported by their authors (not measured here, other machines)**:",
        "",
        "| implementation | added on a fresh key | added on a replay |",
        "|---|---|---|",
    ]
    for name, fresh, replay in ANCHORS:
        lines.append(f"| {name} | {fresh} | {replay} |")
    for note in doc.get("notes", []):
        lines += ["", note]
    lines += ["", "<details><summary>every round</summary>", "",
              "| target | mode | round | p50 µs | p90 µs | p99 µs | req/s | requests | non-2xx |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in doc.get("rows", []):
        for i, x in enumerate(r.get("rounds", []), 1):
            lines.append(
                f"| {r['target']} | {r['mode']} | {i} | {_us(x['p50_us'])} | {_us(x.get('p90_us'))} | "
                f"{_us(x['p99_us'])} | {_num(x['rps'])} | {_num(x['requests'])} | {x.get('non_2xx', 0)} |"
            )
    lines += ["", "</details>", ""]
    return lines


def targets(results: Path) -> list[tuple[str, float | None, float, bool, str]]:
    doc = load(results, "http.json")
    if doc is None:
        return []
    return [
        (
            "idempotency layer, replay: µs added to the bare route's p50",
            _added(doc, "layer-replay"),
            REPLAY_NEED_US,
            False,
            "wrk -t1 -c1, the same axum handler bare and behind the layer (in-memory store), median of the rounds",
        ),
        (
            "idempotency layer, fresh key: µs added to the bare route's p50",
            _added(doc, "layer-fresh"),
            FRESH_NEED_US,
            False,
            "wrk -t1 -c1, the same axum handler bare and behind the layer (in-memory store), median of the rounds",
        ),
    ]
