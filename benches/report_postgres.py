"""PostgreSQL: idemkit against a hand-written INSERT … ON CONFLICT, a section of the
benchmark report. Standard library only.

Reads `results / "postgres.json"`, written by `benches/postgres/run.sh OUT.json`:
`idemkit-loadgen --backend postgres` and `pgbench` running a claim + complete of a new
key per op, on one server, taking turns, at each client count; pgbench twice, on a
hand-written table and on idemkit's own statements and schema.

    render(results) -> list[str]    the section's markdown lines ([] when postgres.json is missing)
    targets(results) -> list[(name, measured, needed, higher_is_better, what)]
"""

from __future__ import annotations

from pathlib import Path

from report_common import load

SECTION = "## PostgreSQL: idemkit against pgbench, on idemkit's statements and on a hand-written table"

# idemkit's rate at least this fraction of pgbench's, at every client count.
RATIO_NEED = 0.8

# The sides of a point, in the order the table lists them.
SIDES = (
    ("idemkit", "**idemkit**"),
    ("pgbench_same_statements", "pgbench on idemkit's statements"),
    ("pgbench", "pgbench on a hand-written table"),
)


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
        "**pgbench on idemkit's statements**: the same pgbench command on the script "
        "`idemkit-loadgen --pgbench-script` writes: the adapter's own `INSERT` and `UPDATE`, its "
        "parameters as literals but for the key, on the adapter's own tables, made afresh per point "
        "(idemkit ÷ it is what idemkit's client side costs; it ÷ the hand-written table, what "
        "idemkit's statements and schema cost the server). "
        f"Transactions: {doc.get('transactions', '—')}. "
        f"One server ({doc.get('server', '?')}), both sides in turn at each point, "
        f"{doc.get('seconds_per_point', '?')} s each, {doc.get('rounds', 1)} round(s), started {doc.get('started', '?')}. "
        "Statements and transactions per op are the server's counts (pg_stat_statements; "
        "pg_stat_database.xact_commit, which also counts read-only statements, a separate prepare "
        "and the pool's connection check, an empty query, each as one transaction); only the two "
        "writes of each side wait for a WAL flush.",
        "",
        "| clients | round | side | ops/s | p50 µs | p99 µs | statements / op | transactions / op | idemkit ÷ this side |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for n in doc.get("clients", []):
        for r in range(1, int(doc.get("rounds", 1)) + 1):
            idk = by.get((n, r, "idemkit"))
            for side, label in SIDES:
                p = by.get((n, r, side))
                if p is None:
                    continue
                ratio = None
                if side != "idemkit" and idk and p.get("ops_per_s"):
                    ratio = idk["ops_per_s"] / p["ops_per_s"]
                lines.append(
                    f"| {n} | {r} | {label} | {_num(p.get('ops_per_s'))} | "
                    f"{_us(p.get('p50_us'))} | {_us(p.get('p99_us'))} | {_num(p.get('statements_per_op'), 2)} | "
                    f"{_num(p.get('commits_per_op'), 2)} | {_ratio(ratio)} |"
                )
    lines.append("")
    for t in targets(results):
        name, measured, need, _, what = t
        ok = measured is not None and (measured >= need if t[3] else measured <= need)
        verdict = "met" if ok else "**missed**"
        lines.append(f"- Target: {name}: {_ratio(measured)} (≥ {_ratio(need)}) — {verdict}; {what}.")
    for row in doc.get("ratios", []):
        if row.get("statements_cost") is not None:
            n = row["clients"]
            lines.append(
                f"- What idemkit's statements and schema cost the server at {n} client{'s' if n != 1 else ''}: "
                f"pgbench on them does {_ratio(row['statements_cost'])} the hand-written table's ops/s "
                "(median of the rounds' quotients)."
            )
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
        clients = f"{n} client{'s' if n != 1 else ''}"
        if row.get("ratio_same_statements") is not None:
            out.append(
                (
                    f"PostgreSQL idemkit ÷ pgbench on idemkit's statements at {clients}",
                    row["ratio_same_statements"],
                    RATIO_NEED,
                    True,
                    f"ops/s, claim + complete of a new key, {_num(row.get('idemkit_ops_per_s'))} vs "
                    f"{_num(row.get('pgbench_same_statements_ops_per_s'))}, median of the rounds' quotients",
                )
            )
        out.append(
            (
                f"PostgreSQL idemkit ÷ pgbench on a hand-written table at {clients}",
                row.get("ratio"),
                RATIO_NEED,
                True,
                f"ops/s, claim + complete of a new key, {_num(row.get('idemkit_ops_per_s'))} vs "
                f"{_num(row.get('pgbench_ops_per_s'))}, median of the rounds' quotients",
            )
        )
    return out
