"""Times `idemkit canonicalize DOC` against `jq -cS . DOC` as whole processes.

Each pair runs the two in turn (after one warm-up each); the output of both goes
through a pipe that is read and thrown away, as a shell pipeline would. Per run:
wall time (a monotonic clock around start and reaping), user + system CPU and
peak RSS (the kernel's accounting of that one child, `os.wait4`). The ratio is
taken pair by pair, and the median of each figure is reported. Peak memory is
read apart, through GNU time (`/usr/bin/time -f %M`), whose small process is
what the child is forked from (a child of Python would report Python's size):
the peak on DOC minus the peak on `{}`, the process's own floor.
Prints one JSON document. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time


def run_once(cmd: list[str]) -> dict:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = 0
    assert proc.stdout is not None
    while chunk := proc.stdout.read(1 << 16):
        out += len(chunk)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd!r} exited {proc.returncode}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "output_bytes": out,
    }


def peak_kib(cmd: list[str]) -> int:
    """The peak RSS of `cmd` in KiB, as GNU time reports it."""
    done = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=True)
    return int(done.stderr.strip().splitlines()[-1])


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=41)
    ap.add_argument("--document", required=True)
    ap.add_argument("--idemkit", required=True)
    args = ap.parse_args()

    ours = [args.idemkit, "canonicalize", args.document]
    peer = ["jq", "-cS", ".", args.document]
    run_once(ours), run_once(peer)
    a, b = [], []
    for _ in range(args.runs):
        a.append(run_once(ours))
        b.append(run_once(peer))
    with tempfile.NamedTemporaryFile("w", suffix=".json") as empty:
        empty.write("{}")
        empty.flush()
        floor = min(peak_kib([args.idemkit, "canonicalize", empty.name]) for _ in range(5))
    peak = max(peak_kib(ours) for _ in range(5))
    size = os.path.getsize(args.document)
    ratios = [x["wall_s"] / y["wall_s"] for x, y in zip(a, b)]
    cpu_ratios = [x["cpu_s"] / y["cpu_s"] for x, y in zip(a, b) if y["cpu_s"] > 0]
    print(json.dumps({
        "date": time.strftime("%Y-%m-%d %H:%MZ", time.gmtime()),
        "document_bytes": size,
        "runs": args.runs,
        "jq": subprocess.run(["jq", "--version"], capture_output=True, text=True).stdout.strip(),
        "idemkit": {k: median(a, k) for k in ("wall_s", "cpu_s")},
        "jq_run": {k: median(b, k) for k in ("wall_s", "cpu_s")},
        "wall_ratio": {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)},
        "cpu_ratio_median": statistics.median(cpu_ratios) if cpu_ratios else None,
        "idemkit_peak_kib": peak,
        "idemkit_floor_kib": floor,
        "memory_vs_input": (peak - floor) * 1024 / size,
        "same_output_bytes": a[0]["output_bytes"] == b[0]["output_bytes"] - 1,
    }, indent=1))


if __name__ == "__main__":
    main()
