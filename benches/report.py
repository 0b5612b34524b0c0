#!/usr/bin/env python3
"""Turns benches/results/*.json into BENCHMARKS.md and benches/results/chart.svg.

Python 3.11, standard library only. Subcommands:

  report.py machine DIR OUT.json          describe this machine and the disk holding DIR
  report.py criterion TARGET/criterion OUT.json
                                          gather criterion's estimates into one file
  report.py loadgen LOADGEN.jsonl OUT.json
                                          gather idemkit-loadgen's rounds: one row per point
  report.py render [RESULTS] [--md BENCHMARKS.md] [--svg RESULTS/chart.svg]
                                          write the report (default: benches/results)

Every figure is shown as a ratio against its peers and against the raw fdatasync
limit measured in the same run; the targets get met/missed and by how much.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from report_common import fmt, load

ROOT = Path(__file__).resolve().parent.parent

# The targets. Checked by benchmarks, never by timed tests.
FP_VS_SERDE = 1.5
FP_VS_CANONICALIZER = 4.0
DURABLE_VS_FSYNC = 2.5
SCALE_64_VS_1 = 20.0
REDB_VS_SQLITE_64 = 10.0
BIG_VS_SMALL = 1.5
WASM_VS_CANONICALIZE = 1.0
# Instructions per claim + complete: at most half of the baseline's count (benches/callgrind/baseline.json).
INSTRUCTIONS_VS_BASELINE = 0.5
# The report's sections that live in their own modules, each with
# render(results) -> lines and targets(results) -> [(name, measured, need, higher_is_better, what)].
SECTION_MODULES = ["report_postgres", "report_http", "report_npm", "report_mcp", "report_npm_mcp", "report_python",
                   "report_canonicalize", "report_console"]

IMPLS = [
    ("serde_json_value", "serde_json → Value (parse only)"),
    ("canonicalizer_sha256", "serde_json_canonicalizer + SHA-256"),
    ("jcs_sha256", "serde_jcs + SHA-256"),
    ("idemkit_canonicalize", "idemkit canonicalize (Vec)"),
    ("idemkit_fingerprint", "**idemkit fingerprint**"),
]
BREAKDOWN = [
    ("idemkit_count", "canonicalize_to → CountingSink (parse + 1 serialization)"),
    ("idemkit_stream_blake3", "canonicalize_to → blake3::Hasher (64 KiB chunks)"),
    ("blake3_only", "blake3 over the canonical bytes alone"),
]
SHAPES = ["api", "numbers", "unicode"]
SIZES = ["1KB", "64KB", "4MB"]


# ---------------------------------------------------------------- collection


def run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(dir_: str, out: str) -> None:
    df = run(["df", "-hT", dir_])
    src = df.splitlines()[-1].split()[0] if df else ""
    info = {
        "uname": run(["uname", "-srmv"]) or platform.platform(),
        "lscpu": run(["lscpu"]),
        "nproc": run(["nproc"]),
        "memory": run(["free", "-h"]),
        "df": df,
        "lsblk": run(["lsblk", "-o", "NAME,TYPE,SIZE,ROTA,MODEL,FSTYPE,MOUNTPOINTS"]),
        "device": src,
        "rustc": run(["rustc", "-V"]),
        "node": run(["node", "--version"]),
        "git": run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"]),
        "loadavg": Path("/proc/loadavg").read_text().strip() if Path("/proc/loadavg").exists() else "",
    }
    Path(out).write_text(json.dumps(info, indent=1) + "\n")


def criterion(dir_: str, out: str) -> None:
    rows = []
    for bench in sorted(Path(dir_).glob("**/new/benchmark.json")):
        meta = json.loads(bench.read_text())
        est = json.loads((bench.parent / "estimates.json").read_text())
        full = meta["full_id"]
        group, _, name = full.rpartition("/")
        tp = meta.get("throughput") or {}
        rows.append(
            {
                "id": full,
                "group": group,
                "name": name,
                "mean_ns": est["mean"]["point_estimate"],
                "median_ns": est["median"]["point_estimate"],
                "bytes": tp.get("Bytes") or tp.get("BytesDecimal"),
            }
        )
    Path(out).write_text(json.dumps(rows, indent=1) + "\n")


def loadgen_rounds(lines: list[dict]) -> list[dict]:
    """`idemkit-loadgen` rows measured over rounds (the points taking turns, in
    order) → one row per point (backend, clients, keys): the round with the
    median rate (of an even count, the lower middle), so its latencies and commit statistics are that round's, with
    `rounds` the rate of every round in the order measured. A shared machine's
    slow minute falls on one round of every point, not on one point."""
    points: dict[tuple, list[dict]] = {}
    for row in lines:
        points.setdefault((row["backend"], row["clients"], row.get("keys", "unique")), []).append(row)
    out = []
    for rows in points.values():
        rates = [r["ops_per_s"] for r in rows]
        middle = sorted(rows, key=lambda r: r["ops_per_s"])[(len(rows) - 1) // 2]
        out.append({**middle, "rounds": rates})
    return out


def gather_loadgen(src: str, out: str) -> None:
    """`report.py loadgen`: the loadgen's JSON lines, as run, → loadgen.json."""
    lines = [json.loads(line) for line in Path(src).read_text().splitlines() if line.strip()]
    Path(out).write_text(json.dumps(loadgen_rounds(lines), indent=1) + "\n")


def paired_ratio(a: dict | None, b: dict | None) -> float | None:
    """a's rate ÷ b's: the median over rounds of the two measured in the same
    round when both have the same rounds, else the quotient of their rows."""
    if a is None or b is None:
        return None
    ra, rb = a.get("rounds"), b.get("rounds")
    if ra and rb and len(ra) == len(rb) and all(rb):
        return statistics.median(x / y for x, y in zip(ra, rb))
    return ratio(a["ops_per_s"], b["ops_per_s"])


# ---------------------------------------------------------------- rendering


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def rx(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×"


class Targets:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str, str]] = []

    def check(self, name: str, measured: float | None, need: float, higher_is_better: bool, what: str,
              unit: str = "×") -> None:
        shown = (lambda x: f"{fmt(x)} {unit}") if unit != "×" else rx
        if measured is None:
            self.rows.append((name, "not measured", shown(need), "—", what))
            return
        if higher_is_better:
            met = measured >= need
            margin = measured / need - 1
        elif measured <= 0:
            # An added cost at or below zero (within the tool's resolution):
            # met, with no meaningful ratio of headroom.
            self.rows.append((name, shown(measured), "≤ " + shown(need), "met", what))
            return
        else:
            met = measured <= need
            margin = need / measured - 1
        if met:
            by = f"met, {margin:+.0%} headroom"
        else:
            # How much faster the measured side must get.
            by = f"**missed**, needs {1 / (1 + margin):.2f}× improvement"
        self.rows.append((name, shown(measured), ("≥ " if higher_is_better else "≤ ") + shown(need), by, what))


def mib_s(row: dict) -> float | None:
    if not row or not row.get("bytes"):
        return None
    return row["bytes"] / (row["mean_ns"] / 1e9) / 1048576


def render(results: Path, md_path: Path, svg_path: Path) -> None:
    meta = load(results, "meta.json") or {}
    mach = load(results, "machine.json") or {}
    crit = load(results, "criterion.json") or []
    durable = load(results, "durable.json")
    loadgen = load(results, "loadgen.json") or []
    scale = load(results, "scale.json")
    stores = (scale or {}).get("stores", [])
    small = stores[0] if len(stores) > 1 else None
    big = stores[-1] if len(stores) > 1 else None
    gc = load(results, "gc.json")
    wasm = load(results, "wasm.json")
    instructions = load(results, "instructions.json")
    baseline_path = ROOT / "benches" / "callgrind" / "baseline.json"
    baseline = json.loads(baseline_path.read_text()) if baseline_path.exists() else None
    sections = section_modules()
    smoke = bool(meta.get("smoke", True))
    t = Targets()
    by_id = {r["id"]: r for r in crit}
    out: list[str] = []
    w = out.append

    w("# idemkit benchmarks")
    w("")
    w("<!-- Generated by benches/report.py from benches/results/*.json; do not edit by hand. -->")
    w("")
    if smoke:
        w("> **SMOKE FIGURES.** These numbers come from a short smoke run on a busy, shared "
          "2-core machine (other engineers were compiling). They show that every figure runs "
          "and roughly where it lands — they are **not** the measurements. The final figures "
          "are produced by `scripts/bench-all.sh` on a quiet machine, which rewrites this file.")
        w("")
    w(f"Run: {meta.get('started', '?')} → {meta.get('finished', '?')}, "
      f"{fmt(meta.get('runtime_s'))} s, settings `{json.dumps(meta.get('settings', {}), sort_keys=True)}`.")
    w("")
    w("## How to run")
    w("")
    w("Everything, in sequence, raw results to `benches/results/*.json`, then this file and "
      "`benches/results/chart.svg`:")
    w("")
    w("```sh")
    w("scripts/bench-all.sh                         # the full run")
    w("IDEMKIT_BENCH_SMOKE=1 scripts/bench-all.sh   # a ~3-minute smoke of every figure (tiny sizes)")
    w("```")
    w("")
    w("The 10M-record store is filled once with `Store::import` (one genuine Completed "
      "record written under 10M keys, 50,000 per transaction, about 45 s here) and kept in "
      "`target/bench-cache`; how long the whole run took is on the Run line above.")
    w("")
    w("Knobs (environment): `IDEMKIT_BENCH_RECORDS` (default 10000000), `IDEMKIT_BENCH_DIR` (the "
      "disk measured; default `target/bench-tmp`), `IDEMKIT_BENCH_SECONDS` (per loadgen point, default 5), "
      "`IDEMKIT_BENCH_CLIENTS` (default `1 4 16 64`), `IDEMKIT_BENCH_CACHE` (filled stores, default "
      "`target/bench-cache`).")
    w("")
    w("| figure | command (what bench-all.sh runs) | raw result |")
    w("|---|---|---|")
    w("| canonicalize / fingerprint throughput | `cargo bench -p idemkit-benches --bench fingerprint` | `criterion.json` |")
    w("| pure claim decision | `cargo bench -p idemkit-benches --bench machine` | `criterion.json` |")
    w("| durable claim + complete vs raw fdatasync | `idemkit-latency --dir D durable --ops 2000` | `durable.json` |")
    w("| throughput vs clients | `idemkit-loadgen --backend redb\\|sqlite\\|fsync --clients N --seconds S --dir D [--keys hot\\|mixed]`, every point once per round, then `report.py loadgen` | `loadgen.json` |")
    w("| claim latency at 10k and 10M records | `idemkit-latency --dir D scale --records 10000 --records 10000000 --cache C` | `scale.json` |")
    w("| GC while claims continue | `idemkit-latency --dir D gc --records N` | `gc.json` |")
    w("| wasm fingerprint in Node | `npm --prefix wasm run build && node wasm/bench/fingerprint.mjs` | `wasm.json` |")
    w("| idemkit proxy vs nginx | `benches/proxy/run.sh OUT.json` (wrk and nginx from Debian) | `proxy.json` |")
    w("| idemkit mcp in front of an MCP server | `benches/mcp/run.sh OUT.json` (Node and the SDKs of store/tests/mcp) | `mcp.json` |")
    w("| instructions per claim + complete | `benches/callgrind/run.sh OUT.json` (valgrind from Debian) | `instructions.json` |")
    w("| PostgreSQL vs pgbench on idemkit's statements and on a hand-written `INSERT … ON CONFLICT` | `benches/postgres/run.sh OUT.json` (PostgreSQL and pgbench from Debian) | `postgres.json` |")
    w("| what the idempotency layer adds to a request | `benches/http/run.sh OUT.json` (wrk from Debian) | `http.json` |")
    w("| the npm package vs `@node-idempotency/core` | `node wasm/bench/overhead.mjs` (after `npm --prefix wasm/bench ci`) | `npm.json` |")
    w("| the same on Node 22 | `store/tests/mcp/node_modules/.bin/node wasm/bench/overhead.mjs` (after `npm --prefix store/tests/mcp ci`) | `npm_node22.json` |")
    w("| the operator console's first load | `benches/console/run.sh OUT.json` (Debian's chromium, store/tests/console's playwright-core) | `console.json` |")
    w("")
    w("Binaries: `cargo build --release -p idemkit-benches` → `target/release/idemkit-{loadgen,latency,bodies}`. "
      "Bodies are generated from a fixed seed (`benches/src/bodies.rs`, ported to JavaScript in the wasm "
      "script; `idemkit-bodies` prints their SHA-256 to check both produce the same bytes).")
    w("")

    # ------------------------------------------------ machine
    w("## Machine")
    w("")
    lscpu = {k.strip(): v.strip() for k, _, v in
             (line.partition(":") for line in mach.get("lscpu", "").splitlines())}
    w("| | |")
    w("|---|---|")
    w(f"| CPU | {lscpu.get('Model name', '?')}, {mach.get('nproc', '?')} CPUs ({lscpu.get('Thread(s) per core', '?')} thread(s)/core) |")
    w(f"| kernel | `{mach.get('uname', '?')}` |")
    w(f"| disk measured | `{(mach.get('df') or '?').splitlines()[-1] if mach.get('df') else '?'}` |")
    w(f"| toolchain | {mach.get('rustc', '?')}, node {mach.get('node', '?')} |")
    w(f"| commit | `{mach.get('git', '?')}` |")
    w(f"| load average at start | {mach.get('loadavg', '?')} |")
    w("")
    if mach.get("lsblk"):
        w("<details><summary>lsblk</summary>\n\n```\n" + mach["lsblk"] + "\n```\n</details>")
        w("")

    # ------------------------------------------------ fingerprint throughput
    fp_rows = []
    min_serde = min_canon = None
    for shape in SHAPES:
        for size in SIZES:
            g = f"json/{shape}/{size}"
            r = {name: by_id.get(f"{g}/{name}") for name, _ in IMPLS + BREAKDOWN}
            if not any(r.values()):
                continue
            fp = mib_s(r["idemkit_fingerprint"])
            vs_serde = ratio(fp, mib_s(r["serde_json_value"]))
            vs_canon = ratio(fp, mib_s(r["canonicalizer_sha256"]))
            fp_rows.append((shape, size, r, fp, vs_serde, vs_canon))
            if vs_serde is not None:
                min_serde = vs_serde if min_serde is None else min(min_serde, vs_serde)
            if vs_canon is not None:
                min_canon = vs_canon if min_canon is None else min(min_canon, vs_canon)

    dur_ratio = None
    if durable:
        dur_ratio = ratio(durable["claim_complete"]["p50_us"], durable["fsync_append"]["p50_us"])

    def lg(backend: str, clients: int, keys: str = "unique") -> dict | None:
        for r in loadgen:
            if r["backend"] == backend and r["clients"] == clients and r.get("keys", "unique") == keys:
                return r
        return None

    clients_seen = sorted({r["clients"] for r in loadgen})
    top = max(clients_seen) if clients_seen else None
    r1, rtop, stop = lg("redb", 1), (lg("redb", top) if top else None), (lg("sqlite", top) if top else None)
    scale_ratio = paired_ratio(rtop, r1)
    vs_sqlite = paired_ratio(rtop, stop)
    big_ratio = ratio(big and big["claim"]["p50_us"], small and small["claim"]["p50_us"])
    wasm64 = [r for r in (wasm or {}).get("results", []) if r["size"] == "64KB"]
    wasm_min = min((r["ratio"] for r in wasm64), default=None)

    t.check("fingerprint vs `serde_json::from_slice::<Value>`", min_serde, FP_VS_SERDE, True,
            "throughput, worst of 9 bodies (3 shapes × 3 sizes)")
    t.check("fingerprint vs `serde_json_canonicalizer` + SHA-256", min_canon, FP_VS_CANONICALIZER, True,
            "throughput, worst of 9 bodies")
    t.check("durable claim + complete p50 / raw fdatasync p50", dur_ratio, DURABLE_VS_FSYNC, False,
            "two commits vs one `write(128 B) + fdatasync` (append), same disk, same run")
    paired = ", the median over rounds of the two measured in the same round" if len((rtop or {}).get("rounds") or []) > 1 else ""
    t.check(f"redb {top} clients / redb 1 client (unique keys)", scale_ratio, SCALE_64_VS_1, True,
            f"ops/s{paired}; target is stated for 64 clients{'' if top == 64 else f' (this run went up to {top})'}")
    t.check(f"redb / SQLite at {top} clients (unique keys)", vs_sqlite, REDB_VS_SQLITE_64, True,
            f"ops/s{paired}, SQLite WAL + synchronous=FULL")
    t.check(f"claim p50 at {big['records'] if big else '?':,} / at {small['records'] if small else '?':,} records"
            if big and small else "claim p50 at 10M / at 10k records", big_ratio, BIG_VS_SMALL, False,
            "durable claim transaction alone, p50; both stores probed in turn in one run"
            + ("" if big and big["records"] >= 10_000_000 else
               "; **the target is set at 10,000,000 records** (`IDEMKIT_BENCH_RECORDS=10000000`)"))
    t.check("wasm fingerprint / canonicalize + WebCrypto SHA-256 (Node, 64 KB)", wasm_min, WASM_VS_CANONICALIZE,
            True, "throughput, worst of the 3 shapes")
    for clients in (1, 64):
        now_, before = per_op(instructions, clients), per_op(baseline, clients)
        t.check(f"instructions per claim + complete, {clients} client{'s' if clients > 1 else ''}, "
                f"÷ the baseline ({(baseline or {}).get('commit', '?')})", ratio(now_, before),
                INSTRUCTIONS_VS_BASELINE, False,
                "callgrind, `benches/callgrind/run.sh` (the baseline: `benches/callgrind/baseline.json`)")
    for module in sections:
        for name, measured, need, higher, what in module.targets(results):
            # The modules' targets are ratios, except the µs a layer adds.
            t.check(name, measured, need, higher, what, unit="µs" if ("µs" in name or "added" in name) else "×")

    w("## Targets")
    w("")
    w("| target | measured | needed | verdict | on |")
    w("|---|---|---|---|---|")
    for row in t.rows:
        w("| " + " | ".join(row) + " |")
    w("")
    if smoke:
        w("*Smoke run: verdicts are indicative only.*")
        w("")

    if fp_rows:
        w("## Canonicalize and fingerprint throughput (MiB/s, criterion mean)")
        w("")
        w("Higher is better. Ratios: idemkit fingerprint ÷ the peer (the target columns).")
        w("")
        w("| body | bytes | " + " | ".join(label for _, label in IMPLS) + " | fp ÷ serde_json | fp ÷ canonicalizer | fp ÷ serde_jcs |")
        w("|---|---:|" + "---:|" * (len(IMPLS) + 3))
        for shape, size, r, fp, vs_serde, vs_canon in fp_rows:
            nbytes = next((x["bytes"] for x in r.values() if x), None)
            cells = [fmt(mib_s(r[name])) for name, _ in IMPLS]
            w(f"| {shape} {size} | {nbytes:,} | " + " | ".join(cells)
              + f" | {rx(vs_serde)} | {rx(vs_canon)} | {rx(ratio(fp, mib_s(r['jcs_sha256'])))} |")
        w("")
        w("### Where the fingerprint's time goes")
        w("")
        w("Same bodies, parts of the pipeline measured alone (MiB/s). `FingerprintSpec::fingerprint` "
          "validates the body in one pass and writes the canonical form straight from it in a "
          "second (no tree is built) into a `Vec` and hashes it with one blake3 update (the length frame is the "
          "`Vec`'s length). The split attributes the fingerprint's time per byte: canonicalizer = "
          "both passes (`CountingSink`); hashing = blake3 over the canonical bytes; "
          "rest = the `Vec` and framing.")
        w("")
        w("| body | fingerprint | " + " | ".join(label for _, label in BREAKDOWN)
          + " | canonicalize (Vec) | split: canonicalizer / hashing / rest |")
        w("|---|---:|" + "---:|" * (len(BREAKDOWN) + 2))
        for shape, size, r, fp, _, _ in fp_rows:
            count, stream = mib_s(r["idemkit_count"]), mib_s(r["idemkit_stream_blake3"])
            split = "—"
            if fp and count and stream:
                total = 1 / fp
                b3 = mib_s(r["blake3_only"])
                hashing = 1 / b3 if b3 else 0
                parts_ = [1 / count, hashing, max(total - 1 / count - hashing, 0)]
                split = " / ".join(f"{p_ / total:.0%}" for p_ in parts_)
            w(f"| {shape} {size} | {fmt(fp)} | " + " | ".join(fmt(mib_s(r[n])) for n, _ in BREAKDOWN)
              + f" | {fmt(mib_s(r['idemkit_canonicalize']))} | {split} |")
        w("")

    mach_rows = [r for r in crit if r["group"].startswith("machine/")]
    if mach_rows:
        w("## The pure claim decision (ns, criterion mean)")
        w("")
        w("`idemkit_core::machine::claim` and the record codec: no I/O. For scale, the raw fdatasync "
          "of the same run is " + (f"{fmt(durable['fsync_append']['p50_us'] * 1000)} ns" if durable else "—") + ".")
        w("")
        w("| decision | ns | share of one fdatasync |")
        w("|---|---:|---:|")
        for r in mach_rows:
            share = ratio(r["mean_ns"], durable and durable["fsync_append"]["p50_us"] * 1000)
            w(f"| {r['id'].removeprefix('machine/')} | {fmt(r['mean_ns'])} | {'—' if share is None else f'{share:.4%}'} |")
        w("")

    if durable:
        f_app = durable["fsync_append"]["p50_us"]
        w(f"## Durable claim + complete vs raw fdatasync ({durable['ops']:,} ops each)")
        w("")
        w("A temp redb file on the measured disk; each claim is a new key. The raw rows are "
          "`write(128 B) + fdatasync` on a file in the same directory, one after each claim + complete "
          "(interleaved op by op, so both see the same disk).")
        w("")
        w("| operation | p50 µs | p99 µs | mean µs | p50 ÷ fdatasync (append) | p99 ÷ fdatasync p99 |")
        w("|---|---:|---:|---:|---:|---:|")
        for key, label in [("claim", "claim (1 commit)"), ("complete", "complete (1 commit)"),
                           ("claim_complete", "**claim + complete**"),
                           ("fsync_append", "raw append + fdatasync"),
                           ("fsync_overwrite", "raw overwrite-in-place + fdatasync")]:
            s = durable[key]
            w(f"| {label} | {fmt(s['p50_us'])} | {fmt(s['p99_us'])} | {fmt(s['mean_us'])} | "
              f"{rx(ratio(s['p50_us'], f_app))} | {rx(ratio(s['p99_us'], durable['fsync_append']['p99_us']))} |")
        w("")
        logged = durable.get("io_per_op_logged")
        if logged:
            w("I/O per operation as measured above (a store file kept open, writes made durable "
              "through its write-ahead log; write calls and bytes from `/proc/self/io`, "
              "one sync per commit): "
              f"claim {logged['claim']['syncs']:.2f} fdatasync, {logged['claim']['writes']:.1f} writes, "
              f"{logged['claim']['bytes'] / 1024:.2f} KiB; complete {logged['complete']['syncs']:.2f} "
              f"fdatasync, {logged['complete']['writes']:.1f} writes, "
              f"{logged['complete']['bytes'] / 1024:.2f} KiB ({logged['logged']} of "
              f"{logged['commits']} commits through the log; the bytes include the log's "
              "zero-filled growth, 1 MiB at a time).")
            w("")
        io = durable.get("io_per_op")
        if io:
            w("The same with every commit a durable redb commit (`IDEMKIT_WAL=off`; a store "
              "on a counting backend): "
              f"claim {io['claim']['syncs']:.2f} fdatasync, {io['claim']['writes']:.1f} writes, "
              f"{io['claim']['bytes'] / 1024:.1f} KiB; complete {io['complete']['syncs']:.2f} fdatasync, "
              f"{io['complete']['writes']:.1f} writes, {io['complete']['bytes'] / 1024:.1f} KiB "
              "(the raw row writes 128 B).")
            w("")

    if loadgen:
        w("## Throughput vs clients (`idemkit-loadgen`)")
        w("")
        w("Each client: claim + complete of a new key (redb: one shared `Store`; SQLite: one connection "
          "per thread, WAL, `synchronous=FULL`; fsync: 128-byte append + fdatasync to its own file). "
          "Hot keys: all clients on 16 keys (mostly replays; `executed`/`replayed` split shown). "
          "Mixed: the even clients write unique keys while the odd ones replay the 16 hot keys.")
        rounds = max((len(r.get("rounds") or []) for r in loadgen), default=0)
        if rounds > 1:
            w("")
            w(f"The points took turns over {rounds} rounds (every point once per round: by clients, then "
              "fsync, redb and SQLite; then the hot and mixed keys). Each row is its round with the median "
              "rate, its latencies that round's; `rounds` lists every round's rate in the order measured. "
              "Each ratio is the median over rounds of the two rates measured in the same round, so a slow "
              "minute of the machine moves both sides of it.")
        remeasured = sorted({r["measured"] for r in loadgen if "measured" in r})
        if remeasured:
            w("")
            w(f"The hot and mixed rows were measured again at {', '.join(remeasured)} (one run, redb and SQLite in "
              "turn), on the engine over the adapter seam (answers that write nothing are decided on a "
              "snapshot read, outside redb's write queue); the other rows are from the run above. Against the build "
              "before the engine (af2ee8b), measured in turn the same hour: 64-client hot replay p50 4.22 / 4.33 µs "
              "before, 4.31 / 4.51 µs after; one client 3.25 µs before, 3.42 µs after (the dynamic adapter call and "
              "the version read with each record); unique keys at 64 clients 7,859 / 8,838 ops/s before, "
              "9,021 / 8,839 after.")
        w("")
        shown = " rounds (ops/s) |" if rounds > 1 else ""
        w(f"| backend | keys | clients | ops/s | p50 µs | p99 µs | × own 1-client | ÷ fsync same clients | ÷ SQLite same clients |{shown}")
        w("|---|---|---:|---:|---:|---:|---:|---:|---:|" + ("---|" if rounds > 1 else ""))
        for r in sorted(loadgen, key=lambda r: (r.get("keys", "unique"), r["backend"], r["clients"])):
            keys = r.get("keys", "unique")
            one = lg(r["backend"], 1, keys)
            fs = lg("fsync", r["clients"])
            sq = lg("sqlite", r["clients"], keys)
            extra = (f" ({r['executed']:,} exec / {r['replayed']:,} replay; replay p50 {fmt(r['replay_p50_us'])} µs, "
                     f"p99 {fmt(r['replay_p99_us'])} µs)") if keys in ("hot", "mixed") and "replay_p50_us" in r else (
                f" ({r['executed']:,} exec / {r['replayed']:,} replay)" if keys == "hot" else "")
            w(f"| {r['backend']} | {keys}{extra} | {r['clients']} | {fmt(r['ops_per_s'])} | {fmt(r['p50_us'])} | "
              f"{fmt(r['p99_us'])} | {rx(paired_ratio(r, one))} | "
              f"{rx(paired_ratio(r, fs)) if r['backend'] != 'fsync' else '—'} | "
              f"{rx(paired_ratio(r, sq)) if r['backend'] == 'redb' else '—'} |"
              + (f" {' / '.join(fmt(x) for x in r.get('rounds') or [])} |" if rounds > 1 else ""))
        w("")
        for keys in ("hot", "mixed"):
            top = max((r["clients"] for r in loadgen if r.get("keys") == keys), default=None)
            redb, sq = lg("redb", top, keys), lg("sqlite", top, keys)
            if redb and sq and "replay_p50_us" in redb and "replay_p50_us" in sq:
                x = ratio(redb["replay_p50_us"], sq["replay_p50_us"])
                w(f"- Target: `--keys {keys}` at {top} clients, redb's replay p50 within 2× of SQLite's: "
                  f"{fmt(redb['replay_p50_us'])} µs vs {fmt(sq['replay_p50_us'])} µs, {rx(x)} — "
                  f"{'met' if x is not None and x <= 2 else '**missed**'}.")
                if keys == "hot":
                    y = paired_ratio(redb, sq)
                    w(f"- Target: `--keys hot` at {top} clients, redb's throughput at least SQLite's: "
                      f"{fmt(redb['ops_per_s'])} vs {fmt(sq['ops_per_s'])} ops/s, {rx(y)} — "
                      f"{'met' if y is not None and y >= 1 else '**missed**'}.")
        w("")
        render_group_commit(w, loadgen)

    if instructions:
        render_instructions(w, instructions, baseline)

    if stores:
        f_app = scale["fsync_append"]["p50_us"]
        w("## Claim latency vs records in the store")
        w("")
        w("Each store is filled with `Store::import` (one genuine Completed record under every key, "
          "50,000 per transaction, on a `RedbAdapter::with_backend` whose `sync_data` is a no-op, synced "
          "once at the end), then reopened with `idemkit::open`. The stores are probed op by "
          "op in turn (durable claim + complete of new keys, one raw fdatasync between rounds), so "
          "they see the same disk; then replays of existing keys spread over the key space. "
          f"Raw append + fdatasync in the same run: p50 {fmt(f_app)} µs, p99 {fmt(scale['fsync_append']['p99_us'])} µs.")
        w("")
        w("| records | fill s (records/s) | file MiB | open s | claim p50 / p99 µs | claim + complete p50 / p99 µs | replay p50 / p99 µs | claim p50 ÷ fdatasync | claim p50 ÷ smallest store |")
        w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for s_ in stores:
            fill = "cached" if s_.get("fill_reused") else f"{fmt(s_['fill_s'])} ({fmt(s_.get('fill_records_per_s'))})"
            w(f"| {s_['records']:,} | {fill} | {fmt(s_['file_bytes'] / 1048576)} | {fmt(s_['open_s'])} | "
              f"{fmt(s_['claim']['p50_us'])} / {fmt(s_['claim']['p99_us'])} | "
              f"{fmt(s_['claim_complete']['p50_us'])} / {fmt(s_['claim_complete']['p99_us'])} | "
              f"{fmt(s_['replay_existing']['p50_us'])} / {fmt(s_['replay_existing']['p99_us'])} | "
              f"{rx(ratio(s_['claim']['p50_us'], f_app))} | {rx(ratio(s_['claim']['p50_us'], stores[0]['claim']['p50_us']))} |")
        w("")

    if gc:
        w("## GC while claims continue")
        w("")
        b, d = gc["claims_baseline"], gc["claims_during_gc"]
        w(f"{gc['records']:,} expired records collected in batches of {gc['batch']:,} while "
          f"{gc['clients']} clients keep claiming + completing new keys.")
        w("")
        w("| | value |")
        w("|---|---:|")
        w(f"| GC records/s | {fmt(gc['gc_records_per_s'])} ({gc['gc_deleted']:,} in {fmt(gc['gc_s'])} s) |")
        w(f"| GC batch p50 / p99 ms | {fmt(gc['gc_batch']['p50_us'] / 1000)} / {fmt(gc['gc_batch']['p99_us'] / 1000)} |")
        w(f"| claims/s without GC → during GC | {fmt(b['ops_per_s'])} → {fmt(d['ops_per_s'])} ({rx(ratio(d['ops_per_s'], b['ops_per_s']))}; "
          f"{b['latency']['n']:,} → {d['latency']['n']:,} claims measured) |")
        w(f"| claim + complete p50 µs without → during | {fmt(b['latency']['p50_us'])} → {fmt(d['latency']['p50_us'])} |")
        w(f"| claim + complete p99 µs without → during | {fmt(b['latency']['p99_us'])} → {fmt(d['latency']['p99_us'])} |")
        w("")

    if wasm:
        w(f"## wasm fingerprint in Node ({wasm.get('node', '?')})")
        w("")
        w("The npm package's `fingerprint(bytes)` vs `canonicalize(JSON.parse(decode(bytes)))` + "
          "`crypto.subtle.digest('SHA-256')`, same bodies as above (SHA-256 of each body checked "
          "against the Rust generator when `bodies.json` is present).")
        w("")
        bodies = {(b["shape"], b["size"]): b["sha256"] for b in (load(results, "bodies.json") or [])}
        w("| body | idemkit MiB/s | canonicalize + SHA-256 MiB/s | ratio | same bytes as Rust | same canonical form |")
        w("|---|---:|---:|---:|---|---|")
        for r in wasm["results"]:
            same = bodies.get((r["shape"], r["size"]))
            w(f"| {r['shape']} {r['size']} | {fmt(r['idemkit_fingerprint']['mib_per_s'])} | "
              f"{fmt(r['canonicalize_sha256']['mib_per_s'])} | {rx(r['ratio'])} | "
              f"{'—' if same is None else ('yes' if same == r['sha256'] else '**NO**')} | "
              f"{'yes' if r.get('canonical_equal') else '**NO**'} |")
        w("")
    proxy = load(results, "proxy.json")
    if proxy:
        w("## `idemkit proxy` vs nginx `proxy_pass` (wrk)")
        w("")
        w(f"Run {proxy['started']}: `wrk {proxy['wrk']}`, {proxy.get('rounds', 1)} rounds taking turns (each figure the "
          "median of its rounds; every round is in `proxy.json`), against one upstream "
          f"(`store/examples/bench_upstream.rs`: `GET /ping` at once, `POST …/withdraw` after "
          f"{proxy['work_ms']} ms of work), directly, through {proxy['nginx']}, and through "
          "`idemkit proxy` (redb store). The POST carries one Idempotency-Key: directly and "
          "through nginx every request does the work; through idemkit the first did (before the "
          "measurement) and every measured one is a replay from the store. wrk, the upstream and "
          "the proxy share the 2 cores.")
        w("")
        w("| route | target | p50 ms of each round |")
        w("|---|---|---|")
        for r in proxy["rows"]:
            w(f"| {r['route']} | {r['target']} | " + ", ".join(fmt(x['p50_ms'], digits=3) for x in r.get("rounds", [])) + " |")
        w("")
        w("| route | target | requests/s | p50 ms | p99 ms | non-2xx |")
        w("|---|---|---:|---:|---:|---:|")
        for r in proxy["rows"]:
            w(f"| {r['route']} | {r['target']} | {fmt(r['rps'], digits=0)} | {fmt(r['p50_ms'], digits=3)} | "
              f"{fmt(r['p99_ms'], digits=3)} | {r['non_2xx']} |")
        w("")
        row = {(r["target"], r["route"].split(" ")[0]): r for r in proxy["rows"]}
        ping_i, ping_n = row.get(("idemkit", "GET")), row.get(("nginx", "GET"))
        post_i, post_d = row.get(("idemkit", "POST")), row.get(("direct", "POST"))
        def verdict(measured, need):
            return "met" if measured is not None and measured <= need else "**missed**"
        if ping_i and ping_n:
            r = ratio(ping_i["p50_ms"], ping_n["p50_ms"])
            w(f"- Target: pass-through p50 through idemkit proxy ≤ 1.3× nginx's: {rx(r)} — {verdict(r, 1.3)}.")
        if post_i and post_d:
            r = ratio(post_i["p50_ms"], post_d["p50_ms"])
            w(f"- Target: a replay answered by the proxy faster than the upstream's own answer: "
              f"p50 {rx(r)} of the direct answer — {verdict(r, 1.0)}.")
        w("")
    for module in sections:
        lines = module.render(results)
        if lines:
            out.extend(lines)
            if lines[-1] != "":
                w("")
    missing = [n for n, v in [("criterion", crit), ("durable", durable), ("loadgen", loadgen),
                              ("scale", stores), ("gc", gc), ("wasm", wasm), ("proxy", proxy),
                              ("instructions", instructions)] if not v]
    missing += [m.__name__.removeprefix("report_") for m in sections if not m.render(results)]
    if missing:
        w("## Not measured in this run")
        w("")
        w(", ".join(missing) + (" — see `benches/results/skipped.txt`." if (results / "skipped.txt").exists() else "."))
        w("")
    w("![chart](benches/results/chart.svg)")
    w("")
    # Hand-written analysis of the figures (why a target is missed, with the profile
    # that shows it): kept beside the results, carried over verbatim.
    analysis = results / "analysis.md"
    if analysis.exists():
        w(analysis.read_text().rstrip())
        w("")
    md_path.write_text("\n".join(out))
    svg_path.write_text(chart(fp_rows, loadgen, durable, smoke))


def section_modules() -> list:
    """The section modules (benches/report_*.py) that are present."""
    import importlib

    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    found = []
    for name in SECTION_MODULES:
        if (Path(here) / f"{name}.py").exists():
            found.append(importlib.import_module(name))
    return found


def per_op(doc: dict | None, clients: int) -> float | None:
    for run in (doc or {}).get("runs", []):
        if run["clients"] == clients:
            return run["instructions_per_op"]
    return None


def render_instructions(w, doc: dict, baseline: dict | None) -> None:
    w("## Instructions per claim + complete (callgrind)")
    w("")
    w("`benches/callgrind/run.sh`: `idemkit-instructions` claims and completes new keys on a redb store "
      "in /dev/shm under `valgrind --tool=callgrind`, twice, with N/2 and N operations; the figure is the "
      "difference of the two totals ÷ N/2, so opening the store, the warm-up and thread start-up cancel "
      "out. User-space instructions only (an fsync is a system call). Under callgrind threads take turns "
      "on one core, so a group commit forms as on a busy machine. Unlike time on this VM, the count "
      "repeats within 1 %.")
    w("")
    w(f"| clients | instructions per claim + complete | commits per operation | the baseline ({(baseline or {}).get('commit', '?')}) | now ÷ before |")
    w("|---:|---:|---:|---:|---:|")
    for run in doc["runs"]:
        before = per_op(baseline, run["clients"])
        w(f"| {run['clients']} | {run['instructions_per_op']:,} | {run['commits_per_op']:.3f} | "
          f"{fmt(before)} | {rx(ratio(run['instructions_per_op'], before))} |")
    w("")
    win = doc.get("window")
    if win:
        w(f"Where one client's instructions go (the counted window alone, {win['ops']:,} operations, "
          f"{win['commits']:,} commits, {win['instructions_per_op']:,} instructions per operation; inclusive "
          "shares, so they overlap):")
        w("")
        w("| part | share |")
        w("|---|---:|")
        for name, share in win["shares"].items():
            w(f"| {name} | {share:.1%} |")
        w("")
        w("<details><summary>top functions by own instructions</summary>")
        w("")
        w("| function | share |")
        w("|---|---:|")
        for row in win["top_self"]:
            w(f"| `{row['function'].replace('|', '¦')}` | {row['share']:.1%} |")
        w("")
        w("</details>")
        w("")


# ---------------------------------------------------------------- chart

COLORS = ["#8c8c8c", "#d08c3c", "#b85450", "#6c8ebf", "#2d6a4f", "#999999"]


def esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render_group_commit(w, loadgen) -> None:
    """Where one group commit's time goes on its leader, per redb new-key row
    (`RedbAdapter::commit_stats`, which the loadgen reports)."""
    rows = sorted((r for r in loadgen if r["backend"] == "redb" and r.get("keys", "unique") == "unique"
                   and r.get("group_commit")), key=lambda r: r["clients"])
    if not rows:
        return
    w("### What one group commit spends (redb, new keys)")
    w("")
    w("Concurrent writes share one transaction and one sync (group commit): one caller leads each group "
      "and runs its steps one after the other while the others wait, so the sum of a group's steps bounds "
      "the groups a second. From `RedbAdapter::commit_stats` over each row above; µs per group "
      "(transaction), logging being the part of committing spent writing and syncing the log's frame.")
    w("")
    # Results from before groups could carry their transaction on have no such count.
    carrying = any("carried" in r["group_commit"] for r in rows)
    w("| clients | groups/s | writes per group (largest) | beginning | running the writes | committing | of which logging | answering the callers | sum |"
      + (" carried on (no redb commit) |" if carrying else ""))
    w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if carrying else ""))
    for r in rows:
        g, us = r["group_commit"], r["group_commit"]["us_per_transaction"]
        total = us["beginning"] + us["running"] + us["committing"] + us["answering"]
        per_s = g["transactions"] / r["seconds"] if r.get("seconds") else None
        carried = (f" {100 * g.get('carried', 0) / max(g['transactions'], 1):.0f}% |" if carrying else "")
        w(f"| {r['clients']} | {fmt(per_s)} | {fmt(g['operations_per_transaction'])} ({g['largest_group']:,}) | "
          f"{fmt(us['beginning'])} | {fmt(us['running'])} | {fmt(us['committing'])} | {fmt(us['logging'])} | "
          f"{fmt(us['answering'])} | {fmt(total)} |" + carried)
    w("")


def chart(fp_rows, loadgen, durable, smoke: bool) -> str:
    """Two panels: fingerprint throughput per body (log scale), ops/s vs clients."""
    import math

    width, left = 900, 150
    parts = []
    y = 40
    title = "idemkit benchmarks" + (" — SMOKE figures (busy machine, not the measurements)" if smoke else "")
    parts.append(f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{esc(title)}</text>')

    # Panel 1: throughput, MiB/s, log10 scale.
    names = [(n, l.replace("*", "")) for n, l in IMPLS]
    if fp_rows:
        parts.append(f'<text x="10" y="{y + 12}" font-size="13" font-weight="bold">Throughput, MiB/s (log scale)</text>')
        y += 24
        for i, (n, label) in enumerate(names):
            parts.append(f'<rect x="{left + (i % 3) * 240}" y="{y + (i // 3) * 16}" width="10" height="10" fill="{COLORS[i]}"/>'
                         f'<text x="{left + (i % 3) * 240 + 14}" y="{y + (i // 3) * 16 + 9}" font-size="11">{esc(label)}</text>')
        y += 40
        vals = [mib_s(r[n]) for _, _, r, *_ in fp_rows for n, _ in names if r.get(n)]
        lo = math.floor(math.log10(max(min(v for v in vals if v), 0.1)))
        hi = math.ceil(math.log10(max(vals)))
        span = width - left - 20
        scale = lambda v: (math.log10(max(v, 10 ** lo)) - lo) / max(hi - lo, 1) * span  # noqa: E731
        bar = 7
        for shape, size, r, *_ in fp_rows:
            parts.append(f'<text x="{left - 8}" y="{y + bar * len(names) / 2 + 4}" text-anchor="end" font-size="11">{shape} {size}</text>')
            for i, (n, _) in enumerate(names):
                v = mib_s(r.get(n)) if r.get(n) else None
                if v:
                    parts.append(f'<rect x="{left}" y="{y + i * bar}" width="{scale(v):.1f}" height="{bar - 1}" fill="{COLORS[i]}"><title>{esc(n)}: {v:.1f} MiB/s</title></rect>')
            y += bar * len(names) + 6
        for e in range(lo, hi + 1):
            x = left + (e - lo) / max(hi - lo, 1) * span
            parts.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 5}" stroke="#333"/>'
                         f'<text x="{x:.1f}" y="{y + 17}" text-anchor="middle" font-size="10">{10 ** e:g}</text>')
        y += 40

    # Panel 2: ops/s vs clients, unique keys.
    uniq = [r for r in loadgen if r.get("keys", "unique") == "unique"]
    if uniq:
        parts.append(f'<text x="10" y="{y + 12}" font-size="13" font-weight="bold">claim + complete ops/s vs clients (unique keys; fsync = raw 128 B append + fdatasync)</text>')
        y += 24
        backends = ["fsync", "redb", "sqlite"]
        for i, b in enumerate(backends):
            parts.append(f'<rect x="{left + i * 120}" y="{y}" width="10" height="10" fill="{COLORS[[0, 4, 3][i]]}"/>'
                         f'<text x="{left + i * 120 + 14}" y="{y + 9}" font-size="11">{b}</text>')
        y += 22
        top = max(r["ops_per_s"] for r in uniq) or 1
        span = width - left - 80
        bar = 10
        for c in sorted({r["clients"] for r in uniq}):
            parts.append(f'<text x="{left - 8}" y="{y + bar * 1.5 + 4}" text-anchor="end" font-size="11">{c} client{"s" if c > 1 else ""}</text>')
            for i, b in enumerate(backends):
                r = next((r for r in uniq if r["backend"] == b and r["clients"] == c), None)
                if r:
                    wv = r["ops_per_s"] / top * span
                    parts.append(f'<rect x="{left}" y="{y + i * bar}" width="{wv:.1f}" height="{bar - 1}" fill="{COLORS[[0, 4, 3][i]]}"/>'
                                 f'<text x="{left + wv + 4:.1f}" y="{y + i * bar + 8}" font-size="9">{r["ops_per_s"]:,.0f}</text>')
            y += bar * 3 + 8
        y += 10
    if durable:
        parts.append(f'<text x="10" y="{y + 12}" font-size="12">Durable claim + complete p50 {durable["claim_complete"]["p50_us"]:.0f} µs; '
                     f'raw fdatasync p50 {durable["fsync_append"]["p50_us"]:.0f} µs (append), {durable["fsync_overwrite"]["p50_us"]:.0f} µs (overwrite)</text>')
        y += 24
    height = y + 10
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif">\n'
            f'<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(parts) + "\n</svg>\n")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("machine")
    m.add_argument("dir")
    m.add_argument("out")
    c = sub.add_parser("criterion")
    c.add_argument("dir")
    c.add_argument("out")
    rounds = sub.add_parser("loadgen")
    rounds.add_argument("src")
    rounds.add_argument("out")
    r = sub.add_parser("render")
    r.add_argument("results", nargs="?", default=str(ROOT / "benches" / "results"))
    r.add_argument("--md", default=str(ROOT / "BENCHMARKS.md"))
    r.add_argument("--svg", default=None)
    a = ap.parse_args(argv)
    if a.cmd == "machine":
        machine(a.dir, a.out)
    elif a.cmd == "criterion":
        criterion(a.dir, a.out)
    elif a.cmd == "loadgen":
        gather_loadgen(a.src, a.out)
    else:
        results = Path(a.results)
        render(results, Path(a.md), Path(a.svg) if a.svg else results / "chart.svg")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
