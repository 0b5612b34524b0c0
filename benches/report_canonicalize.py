"""`idemkit canonicalize` against `jq -cS .`: a section of the benchmark report.

Reads `results / "canonicalize.json"`, the one JSON document
`benches/canonicalize/run.sh` writes (benches/canonicalize/measure.py), and
renders it as markdown. Standard library only.

    render(results) -> list[str]    the section's markdown lines ([] when canonicalize.json is missing)
    targets(results) -> list[(name, measured, needed, higher_is_better, what)]
"""

from __future__ import annotations

from pathlib import Path

from report_common import fmt, load

SECTION = "## The canonicalize command against jq"

# The targets: the whole process at most a tenth of `jq -cS .`'s time on the same
# document, with a peak memory above the process's floor of at most 1.5× the input.
WALL_VS_JQ = 0.10
MEMORY_VS_INPUT = 1.5


def render(results: Path) -> list[str]:
    doc = load(results, "canonicalize.json")
    if doc is None:
        return []
    ours, jq, ratio = doc.get("idemkit", {}), doc.get("jq_run", {}), doc.get("wall_ratio", {})
    ms = lambda s: None if s is None else s * 1000  # noqa: E731
    return [
        SECTION,
        "",
        f"`idemkit canonicalize DOC` and `jq -cS . DOC` ({doc.get('jq', 'jq')}) on one "
        f"{doc.get('document_bytes', 0):,}-byte API document (`idemkit-bodies --write api`), each a whole "
        f"process from start to exit, output read through a pipe; {doc.get('runs', '?')} pairs run in "
        f"turn, the ratio taken pair by pair; measured {doc.get('date', '?')}. "
        "Command: `benches/canonicalize/run.sh OUT.json`.",
        "",
        "| command | wall ms (median) | CPU ms (median) |",
        "|---|---:|---:|",
        f"| idemkit canonicalize | {fmt(ms(ours.get('wall_s')))} | {fmt(ms(ours.get('cpu_s')))} |",
        f"| jq -cS . | {fmt(ms(jq.get('wall_s')))} | {fmt(ms(jq.get('cpu_s')))} |",
        "",
        f"Wall ratio per pair: min {fmt(ratio.get('min'), '×', 3)}, median {fmt(ratio.get('median'), '×', 3)}, "
        f"max {fmt(ratio.get('max'), '×', 3)}; CPU ratio median {fmt(doc.get('cpu_ratio_median'), '×', 3)}. "
        f"Peak memory {fmt(doc.get('idemkit_peak_kib'))} KiB, {fmt(doc.get('idemkit_floor_kib'))} KiB of it the "
        f"process on `{{}}`: {fmt(doc.get('memory_vs_input'), '×')} the input above that floor "
        "(GNU time's `%M`). The input is read whole; pass 1 validates it and records the member "
        "order of each object that is not already sorted (reusing the order of the record before "
        "when the names repeat), pass 2 writes the canonical bytes to the output in 64 KiB chunks.",
        "",
    ]


def targets(results: Path) -> list[tuple[str, float | None, float, bool, str]]:
    doc = load(results, "canonicalize.json") or {}
    return [
        ("idemkit canonicalize ÷ jq -cS . (3 MiB API document, whole process)",
         (doc.get("wall_ratio") or {}).get("median"), WALL_VS_JQ, False,
         "wall time, median of the pairs, `benches/canonicalize/run.sh`"),
        ("idemkit canonicalize peak memory ÷ input",
         doc.get("memory_vs_input"), MEMORY_VS_INPUT, False,
         "peak RSS above the process's floor, GNU time"),
    ]
