"""wrk's `--latency` output, as benches/proxy/run.sh and benches/http/run.sh collect
it: blocks headed `### NAME|LABEL`, each followed by one run of wrk. Standard
library only."""

from __future__ import annotations

import re
import statistics

_UNIT_US = {"us": 1.0, "ms": 1000.0, "s": 1_000_000.0}


def micros(value: str) -> float:
    """A wrk duration (`812.00us`, `1.20ms`, `2.00s`) in microseconds."""
    n, unit = re.match(r"([\d.]+)(us|ms|s)", value).groups()
    return float(n) * _UNIT_US[unit]


def runs(text: str, label: str) -> list[dict]:
    """One dict per block: `target`, `label` (under the key `label`), requests/s,
    the latency percentiles wrk printed (`latency_us`, keyed "50", "75", "90",
    "99"), requests, non-2xx answers and wrk's socket-error line."""
    out = []
    for block in text.split("### ")[1:]:
        head, body = block.split("\n", 1)
        target, value = head.split("|")
        non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", body)
        errors = re.search(r"Socket errors: (.*)", body)
        out.append({
            "target": target,
            label: value,
            "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", body).group(1)),
            "latency_us": {p: micros(v) for p, v in re.findall(r"^\s+(50|75|90|99)%\s+(\S+)", body, re.M)},
            "requests": int(re.search(r"(\d+) requests in", body).group(1)),
            "non_2xx": int(non2xx.group(1)) if non2xx else 0,
            "socket_errors": errors.group(1).strip() if errors else "",
        })
    return out


def medians(rounds: list[dict], label: str, fields: list[str]) -> list[dict]:
    """One row per (target, label) in first-seen order: the median of each of
    `fields` over its rounds, requests and non-2xx summed, and every round kept."""
    rows = []
    for key in dict.fromkeys((r["target"], r[label]) for r in rounds):
        mine = [r for r in rounds if (r["target"], r[label]) == key]
        row = {"target": key[0], label: key[1]}
        row.update({f: statistics.median(r[f] for r in mine) for f in fields})
        row.update({"requests": sum(r["requests"] for r in mine),
                    "non_2xx": sum(r["non_2xx"] for r in mine), "rounds": mine})
        rows.append(row)
    return rows
