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

import statistics
from pathlib import Path

from report_common import load

SECTION = "## PostgreSQL: idemkit against pgbench, on idemkit's statements and on a hand-written table"

# idemkit's rate at least this fraction of pgbench's, at every client count.
RATIO_NEED = 0.8

# Cores busy, as a share of the machine's, from which the machine's time per op
# bounds the rate.
SATURATED = 0.9

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
    ]
    cpu = any(p.get("machine_us_per_op") is not None for p in points)
    if cpu:
        lines[-1] += (
            " The machine's columns come from `benches/postgres/cpu_of.py` around each side's "
            "whole command (set-up included): the client's own CPU per op, the whole machine's busy "
            "CPU per op (the client, the server and the kernel's network work; /proc/stat), and how "
            f"many of the machine's {doc.get('cpus', '?')} cores were busy on average."
        )
    head = "| clients | round | side | ops/s | p50 µs | p99 µs | statements / op | transactions / op | idemkit ÷ this side |"
    rule = "|---:|---:|---|---:|---:|---:|---:|---:|---:|"
    if cpu:
        head += " client CPU µs / op | machine CPU µs / op | cores busy |"
        rule += "---:|---:|---:|"
    lines += ["", head, rule]
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
                row = (
                    f"| {n} | {r} | {label} | {_num(p.get('ops_per_s'))} | "
                    f"{_us(p.get('p50_us'))} | {_us(p.get('p99_us'))} | {_num(p.get('statements_per_op'), 2)} | "
                    f"{_num(p.get('commits_per_op'), 2)} | {_ratio(ratio)} |"
                )
                if cpu:
                    row += (
                        f" {_us(p.get('client_cpu_us_per_op'))} | {_us(p.get('machine_us_per_op'))} | "
                        f"{_num(p.get('cores_busy'), 2)} |"
                    )
                lines.append(row)
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
    if cpu:
        lines += _machine_bound(doc, points)
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


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _machine_bound(doc: dict, points: list[dict]) -> list[str]:
    """One line per client count: what idemkit and pgbench on its statements spent
    of the machine per op (medians over the rounds), and what the target's ratio
    needs of idemkit's side at the same pace of the machine."""
    lines = []
    for n in doc.get("clients", []):

        def med(side: str, field: str) -> float | None:
            return _median(
                [p[field] for p in points if p["clients"] == n and p["side"] == side and p.get(field) is not None]
            )

        idk, same = med("idemkit", "machine_us_per_op"), med("pgbench_same_statements", "machine_us_per_op")
        idk_busy, same_busy = med("idemkit", "cores_busy"), med("pgbench_same_statements", "cores_busy")
        if None in (idk, same, idk_busy, same_busy):
            continue
        line = (
            f"- The machine at {n} client{'s' if n != 1 else ''} (medians of the rounds): idemkit kept "
            f"{_num(idk_busy, 2)} cores busy and spent {_us(idk)} µs of them per op, "
            f"{_us(med('idemkit', 'client_cpu_us_per_op'))} µs of it in its own client; pgbench on idemkit's "
            f"statements kept {_num(same_busy, 2)} busy and spent {_us(same)} µs, "
            f"{_us(med('pgbench_same_statements', 'client_cpu_us_per_op'))} µs in its client."
        )
        cpus = doc.get("cpus")
        if cpus and min(idk_busy, same_busy) >= SATURATED * cpus and idk:
            # A rate is the cores kept busy over the machine's time per op.
            busier = idk_busy / same_busy
            line += (
                f" Both nearly filled the {cpus} cores, so the rates follow the machine's time per op: "
                f"idemkit ÷ pgbench ≈ ({_us(same)} ÷ {_us(idk)}) × ({_num(idk_busy, 2)} ÷ {_num(same_busy, 2)} cores) "
                f"= {_ratio(same / idk * busier)}, and {_ratio(RATIO_NEED)} needs idemkit's side at or under "
                f"{_us(same * busier / RATIO_NEED)} µs per op."
            )
        else:
            line += " The cores were not both full, so each op's wait, not the machine's time, set the pace."
        lines.append(line)
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
