"""PostgreSQL: idemkit against a hand-written INSERT … ON CONFLICT, a section of the
benchmark report. Standard library only.

Reads `results / "postgres.json"`, written by `benches/postgres/run.sh OUT.json`:
`idemkit-loadgen --backend postgres` and `pgbench` running the same claim + complete
of a new key per op, on one server, taking turns, at each client count.

    render(results) -> list[str]    the section's markdown lines ([] when postgres.json is missing)
    targets(results) -> list[(name, measured, needed, higher_is_better, what)]
"""

from __future__ import annotations

from pathlib import Path

from report_common import load

SECTION = "## PostgreSQL: idemkit against a hand-written INSERT … ON CONFLICT (pgbench)"

# idemkit's rate at least this fraction of pgbench's, at every client count.
RATIO_NEED = 0.8


def _num(x, digits: int = 0) -> str:
    if x is None:
        return "—"
    if digits == 0:
        return f"{x:,.0f}"
    return f"{x:,.{digits}f}"


def _us(x) -> str:
    if x is None:
        return "—"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def _ratio(x) -> str:
    return "—" if x is None else f"{x:.2f}×"


def render(results: Path) -> list[str]:
    doc = load(results, "postgres.json")
    if doc is None:
        return []
    points = doc.get("points", [])
    by = {(p["clients"], p.get("round", 1), p["side"]): p for p in points}
    lines = [
        SECTION,
        "",
        "Each op: claim + complete of a new key. **idemkit**: "
        f"`{doc['commands']['idemkit']}` (`Store::from(PostgresAdapter)`, pool of N, a fresh schema per point). "
        f"**pgbench**: `{doc['commands']['pgbench']}`, the hand-written "
        "`INSERT … ON CONFLICT DO NOTHING RETURNING` then `UPDATE` on a "
        "`key text PRIMARY KEY, state, response bytea, timestamps` table "
        "(benches/postgres/schema.sql, claim_complete.sql), a fresh table per point. "
        f"Transactions: {doc.get('transactions', '—')}. "
        f"One server ({doc.get('server', '?')}), both sides in turn at each point, "
        f"{doc.get('seconds_per_point', '?')} s each, {doc.get('rounds', 1)} round(s), started {doc.get('started', '?')}. "
        "Statements and transactions per op are the server's counts (pg_stat_statements; "
        "pg_stat_database.xact_commit, which also counts read-only statements, a separate prepare "
        "and the pool's connection check, an empty query, each as one transaction); only the two "
        "writes of each side wait for a WAL flush.",
        "",
        "| clients | round | side | ops/s | p50 µs | p99 µs | statements / op | transactions / op | idemkit ÷ pgbench |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for n in doc.get("clients", []):
        for r in range(1, int(doc.get("rounds", 1)) + 1):
            idk, pgb = by.get((n, r, "idemkit")), by.get((n, r, "pgbench"))
            for side, p in (("idemkit", idk), ("pgbench", pgb)):
                if p is None:
                    continue
                ratio = None
                if side == "idemkit" and pgb and pgb.get("ops_per_s"):
                    ratio = p["ops_per_s"] / pgb["ops_per_s"]
                lines.append(
                    f"| {n} | {r} | {'**idemkit**' if side == 'idemkit' else 'pgbench'} | {_num(p.get('ops_per_s'))} | "
                    f"{_us(p.get('p50_us'))} | {_us(p.get('p99_us'))} | {_num(p.get('statements_per_op'), 2)} | "
                    f"{_num(p.get('commits_per_op'), 2)} | {_ratio(ratio) if side == 'idemkit' else '—'} |"
                )
    lines.append("")
    for t in targets(results):
        name, measured, need, _, what = t
        ok = measured is not None and (measured >= need if t[3] else measured <= need)
        verdict = "met" if ok else "**missed**"
        lines.append(f"- Target: {name}: {_ratio(measured)} (≥ {_ratio(need)}) — {verdict}; {what}.")
    top = next((p for p in points if p["side"] == "idemkit" and p.get("top_statements")), None)
    if top:
        n = top["clients"]
        lines += ["", f"<details><summary>idemkit's statements per op ({n} client{'s' if n != 1 else ''})</summary>", ""]
        for s in top["top_statements"]:
            if (s.get("calls_per_op") or 0) < 0.5:
                continue
            lines.append(f"- {_num(s.get('calls_per_op'), 2)} × `{s['query']}`")
        lines += ["", "</details>"]
    lines.append("")
    return lines


def targets(results: Path) -> list[tuple[str, float | None, float, bool, str]]:
    doc = load(results, "postgres.json")
    if doc is None:
        return []
    out = []
    for row in doc.get("ratios", []):
        n = row["clients"]
        out.append(
            (
                f"PostgreSQL idemkit ÷ pgbench at {n} client{'s' if n != 1 else ''}",
                row.get("ratio"),
                RATIO_NEED,
                True,
                f"ops/s, claim + complete of a new key, {_num(row.get('idemkit_ops_per_s'))} vs "
                f"{_num(row.get('pgbench_ops_per_s'))}, median of the run's rounds",
            )
        )
    return out
