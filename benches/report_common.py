"""What every part of the benchmark report shares (benches/report.py and its
section modules report_*.py): reading a result file and formatting a figure.
Standard library only."""

from __future__ import annotations

import json
from pathlib import Path


def load(results: Path, name: str):
    """The JSON document `results / name`, or None when that figure was not run."""
    p = Path(results) / name
    if not p.exists():
        return None
    return json.loads(p.read_text())


def fmt(x: float | None, unit: str = "", digits: int = 2) -> str:
    """A figure with as many digits as it needs: 1,234 / 12.3 / 1.23; — when absent."""
    if x is None:
        return "—"
    if abs(x) >= 100:
        s = f"{x:,.0f}"
    elif abs(x) >= 10:
        s = f"{x:.1f}"
    else:
        s = f"{x:.{digits}f}"
    return s + unit
