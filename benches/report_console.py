"""The operator console's first load: a section of the benchmark report.

Reads `results / "console.json"`, the one JSON document `benches/console/run.sh`
writes (store/tests/console/browser.mjs in its measure mode), and renders it as
markdown. Standard library only. The console has no target of its own: the
figures say what an operator's browser pays, so a change that makes the page
heavier or slower shows here.

    render(results) -> list[str]    the section's markdown lines ([] when console.json is missing)
    targets(results) -> []
"""

from __future__ import annotations

from pathlib import Path

from report_common import fmt, load

SECTION = "## The operator console's first load (headless Chromium)"


def render(results: Path) -> list[str]:
    doc = load(results, "console.json")
    if doc is None:
        return []
    low, high = doc.get("min", {}), doc.get("max", {})
    records = doc.get("records", {})

    def row(label: str, key: str, unit: str, digits: int = 2) -> str:
        cells = [fmt(d.get(key), digits=digits) + unit for d in (doc, low, high)]
        return f"| {label} | " + " | ".join(cells) + " |"

    return [
        SECTION,
        "",
        f"`idemkit console` over a redb store of {records.get('unknown', '?')} Unknown and "
        f"{records.get('completed', '?')} completed records; a fresh {doc.get('browser', 'Chromium')} "
        "context logs in, then the list view is loaded again with the cache disabled (the weight of a "
        "first visit: the page, its stylesheet and script, the records and the chart samples). "
        f"{doc.get('runs', '?')} loads on the 2-core machine, measured {doc.get('date', '?')}. "
        "Command: `benches/console/run.sh OUT.json`.",
        "",
        "| figure | median | min | max |",
        "|---|---:|---:|---:|",
        row("bytes transferred", "bytes_transferred", " B"),
        row("requests", "requests", "", digits=0),
        row("first contentful paint", "first_contentful_paint_ms", " ms"),
        row("record table rendered", "list_rendered_ms", " ms"),
        "",
        f"The page's four files (HTML, CSS, JavaScript, login page) weigh {fmt(doc.get('asset_bytes'))} bytes, "
        "served by the binary itself, uncompressed; the rest of the transfer is the first page of "
        "records (never a body) and the chart samples.",
        "",
    ]


def targets(results: Path) -> list[tuple[str, float | None, float, bool, str]]:
    return []
