"""The Python package (idemkit-rs): a section of the benchmark report.

Reads `results / "python.json"`, the one JSON document `benches/python/run.sh`
writes (benches/python/bench.py on a release build of the extension), and renders
it as markdown. Standard library only.

    render(results) -> list[str]    the section's markdown lines ([] when python.json is missing)
    targets(results) -> list[(name, measured, needed, higher_is_better, what)]
"""

from __future__ import annotations

from pathlib import Path

from report_common import load, fmt

SECTION = "## The Python package (idemkit-rs): fingerprints and the ASGI middleware"

# The target: fingerprint at least twice the rate of sha256(json.dumps(obj)).
FINGERPRINT_NEED = 2.0

FIGURES = [
    ("idemkit_fingerprint", "**idemkit_rs.fingerprint(bytes)**"),
    ("idemkit_canonicalize", "idemkit_rs.canonicalize(bytes)"),
    ("sha256_dumps_parsed", "sha256(json.dumps(obj, sort_keys)) of the parsed body"),
    ("sha256_dumps_from_bytes", "the same from the bytes (json.loads first)"),
]


def _mib_s(nbytes: int, ns: float | None) -> float | None:
    return None if not ns else nbytes / (ns / 1e9) / 1048576


def _ratio(row: dict, peer: str) -> float | None:
    ns = row.get("mean_ns", {})
    mine, theirs = ns.get("idemkit_fingerprint"), ns.get(peer)
    return None if not mine or not theirs else theirs / mine


def render(results: Path) -> list[str]:
    doc = load(results, "python.json")
    if doc is None:
        return []
    out = [
        SECTION,
        "",
        f"CPython {doc.get('python', '?')} ({doc.get('cpu', '?')}), the extension built in release "
        f"mode, {doc.get('seconds_per_measurement', '?')} s per figure (the best of 5 rounds), the benchmark bodies of the "
        "criterion figures above (`idemkit-bodies`). Command: `benches/python/run.sh OUT.json`. "
        "The fingerprint is computed from the bytes a server receives (strict RFC 8785 validation "
        "included); the baseline from a body Python already parsed, which needs neither.",
        "",
        "| body | bytes | " + " | ".join(label for _, label in FIGURES) + " | fp ÷ parsed | fp ÷ from bytes |",
        "|---|---:|" + "---:|" * len(FIGURES) + "---:|---:|",
    ]
    for row in doc.get("fingerprint", []):
        ns = row.get("mean_ns", {})
        cells = [fmt(_mib_s(row["bytes"], ns.get(key))) for key, _ in FIGURES]
        parsed, raw = _ratio(row, "sha256_dumps_parsed"), _ratio(row, "sha256_dumps_from_bytes")
        out.append(
            f"| {row['shape']} {row['size']} | {row['bytes']:,} | " + " | ".join(cells)
            + f" | {'—' if parsed is None else f'{parsed:.2f}×'} | {'—' if raw is None else f'{raw:.2f}×'} |"
        )
    out += ["", "MiB/s, higher is better.", ""]
    asgi = doc.get("asgi")
    if asgi:
        bare = asgi.get("bare", {})
        out += [
            "What `IdempotencyMiddleware` adds to a bare Starlette route (uvicorn, one client, "
            "sequential requests on one keep-alive connection, an External route on a redb store; "
            "a fresh key is a claim and a completion, two durable commits):",
            "",
            "| request | requests | mean ms | p50 ms | p99 ms | added to the bare route (p50) |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for key, label in [("bare", "bare route"), ("fresh", "middleware, fresh key"), ("replay", "middleware, replay")]:
            r = asgi.get(key, {})
            added = "—" if key == "bare" or "p50_ms" not in r or "p50_ms" not in bare else f"{r['p50_ms'] - bare['p50_ms']:+.2f} ms"
            out.append(
                f"| {label} | {r.get('requests', '—')} | {fmt(r.get('mean_ms'))} | {fmt(r.get('p50_ms'))} "
                f"| {fmt(r.get('p99_ms'))} | {added} |"
            )
        out.append("")
    out += ["| target | measured | needed | verdict |", "|---|---:|---:|---|"]
    for name, measured, need, higher, what in targets(results):
        verdict = "not measured" if measured is None else ("met" if measured >= need else "**missed**")
        m = "—" if measured is None else f"{measured:.2f}×"
        out.append(f"| {name}: {what} | {m} | ≥ {need:g}× | {verdict} |")
    out.append("")
    return out


def targets(results: Path) -> list[tuple[str, float | None, float, bool, str]]:
    doc = load(results, "python.json")
    what = "idemkit_rs.fingerprint ÷ sha256(json.dumps(obj, sort_keys=True)) (rate), the lowest over the bodies"
    if doc is None:
        return [("Python fingerprint vs json.dumps + sha256", None, FINGERPRINT_NEED, True, what)]
    ratios = [_ratio(row, "sha256_dumps_parsed") for row in doc.get("fingerprint", [])]
    ratios = [r for r in ratios if r is not None]
    return [("Python fingerprint vs json.dumps + sha256", min(ratios) if ratios else None, FINGERPRINT_NEED, True, what)]
