#!/usr/bin/env bash
# Instructions per claim + complete on a redb store, counted by valgrind's
# callgrind (Debian `valgrind`): the write path's CPU cost as a figure that
# repeats on a noisy shared VM (time there varies by a third from run to run;
# these counts by well under 1 %).
#
#   benches/callgrind/run.sh OUT.json     # BENCH_OPS (4000), BENCH_CLIENTS ("1 64")
#
# For each client count the same binary (`idemkit-instructions`) runs twice,
# with N/2 and N operations in all, and the figure is the difference of the two
# totals divided by N/2: opening the store, the warm-up and thread start-up
# cancel out. The store lives on /dev/shm (callgrind counts user-space
# instructions only; an fsync there costs none of them). Under callgrind the
# threads take turns on one core, so groups form as they do on a busy machine.
#
# The 1-client run is also profiled inside its counted window
# (`--toggle-collect=*measured_window*`): the shares of redb's commit, its
# B-tree inserts, opening tables, the snapshot read and malloc go in the
# JSON, so BENCHMARKS.md can say what bounds the figure.
#
# Installs valgrind with apt-get when it is missing (as root).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: benches/callgrind/run.sh OUT.json}
OPS=${BENCH_OPS:-4000}
CLIENTS=${BENCH_CLIENTS:-"1 64"}
if ! command -v valgrind >/dev/null; then
  [ "$(id -u)" = 0 ] || { echo "bench-callgrind: valgrind is missing and installing it needs root" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
fi
cargo build --release --locked -q -p idemkit-benches --bin idemkit-instructions
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
BIN=$TARGET_DIR/release/idemkit-instructions
SHM=/dev/shm
[ -d "$SHM" ] && [ -w "$SHM" ] || SHM=${TMPDIR:-/tmp}
TMP=$(mktemp -d "$SHM/idemkit-callgrind.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

count() { # clients ops_per_client tag
  valgrind --tool=callgrind --callgrind-out-file="$TMP/$3.out" "$BIN" --dir "$TMP" \
    --clients "$1" --ops "$2" --warmup 200 >"$TMP/$3.json" 2>"$TMP/$3.log" \
    || { cat "$TMP/$3.log" >&2; exit 1; }
}
RUNS=()
for c in $CLIENTS; do
  half=$(( OPS / 2 / c )); full=$(( 2 * half ))
  [ "$half" -ge 1 ] || { echo "bench-callgrind: BENCH_OPS=$OPS is too small for $c clients" >&2; exit 1; }
  echo "callgrind: $c client(s), $((half * c)) and $((full * c)) operations" >&2
  count "$c" "$half" "c$c-half"
  count "$c" "$full" "c$c-full"
  RUNS+=("$c")
done
echo "callgrind: the 1-client window, profiled" >&2
valgrind --tool=callgrind --callgrind-out-file="$TMP/window.out" --collect-atstart=no \
  '--toggle-collect=*measured_window*' "$BIN" --dir "$TMP" --ops $(( OPS / 4 > 0 ? OPS / 4 : 1 )) \
  >"$TMP/window.json" 2>"$TMP/window.log" || { cat "$TMP/window.log" >&2; exit 1; }
callgrind_annotate --inclusive=yes "$TMP/window.out" >"$TMP/window.incl.txt" 2>/dev/null
callgrind_annotate "$TMP/window.out" >"$TMP/window.self.txt" 2>/dev/null

python3 - "$TMP" "$OUT" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "${RUNS[@]}" <<'PY'
import json, re, sys
tmp, out, commit, *clients = sys.argv[1:]

def total(path):
    for line in open(path):
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit(f"bench-callgrind: no summary line in {path}")

runs = []
for c in clients:
    half = json.load(open(f"{tmp}/c{c}-half.json"))
    full = json.load(open(f"{tmp}/c{c}-full.json"))
    ir_half, ir_full = total(f"{tmp}/c{c}-half.out"), total(f"{tmp}/c{c}-full.out")
    d_ops = full["ops"] - half["ops"]
    runs.append({
        "clients": int(c),
        "ops": [half["ops"], full["ops"]],
        "instructions": [ir_half, ir_full],
        "instructions_per_op": round((ir_full - ir_half) / d_ops),
        "commits_per_op": round((full["commits"] - half["commits"]) / d_ops, 3),
    })

# Inclusive shares of the counted 1-client window: the first line naming each part.
window = json.load(open(f"{tmp}/window.json"))
lines = open(f"{tmp}/window.incl.txt").read().splitlines()
window_total = total(f"{tmp}/window.out")
row = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)$")
parts = {
    "redb commit (WriteTransaction::commit)": r"redb::transactions::WriteTransaction::commit( \[|$)",
    "B-tree inserts and removes (idemkit's Tables::put_if)": r"redb::records::Tables::put_if( \[|$)",
    "opening tables (WriteTransaction::open_table)": r"redb::transactions::WriteTransaction::open_table( \[|$)",
    "the claim's snapshot read (Adapter::get)": r"RedbAdapter as idemkit::adapters::Adapter>::get( \[|$)",
    "the pure state machine (machine::apply)": r"idemkit_core::machine::apply( \[|$)",
}
def listing(lines):
    """The function table alone: callgrind_annotate's source annotations
    (with "=>" call lines) come after it."""
    for line in lines:
        if "Auto-annotated source" in line or "User-annotated source" in line:
            return
        yield line

shares = {}
for name, pattern in parts.items():
    costs = [int(m.group(1).replace(",", "")) for m in map(row.match, listing(lines))
             if m and not m.group(2).startswith("=>") and re.search(pattern, m.group(2))]
    if costs:
        shares[name] = round(max(costs) / window_total, 4)
self_lines = list(listing(open(f"{tmp}/window.self.txt").read().splitlines()))
alloc = 0
for line in self_lines:
    m = row.match(line)
    if m and re.search(r"malloc\.c:|__rdl_alloc|__rdl_dealloc|__rust_alloc|__rust_dealloc", m.group(2)):
        alloc += int(m.group(1).replace(",", ""))
shares["malloc and free (self)"] = round(alloc / window_total, 4)
top = []
for line in self_lines:
    m = row.match(line)
    if m and "PROGRAM TOTALS" not in m.group(2):
        name = re.sub(r" \[.*\]$", "", m.group(2))
        name = name.split(":", 1)[1] if re.match(r"^[^:]*\.(rs|c|S):", name) else name
        top.append({"function": name[:120],
                    "share": round(int(m.group(1).replace(",", "")) / window_total, 4)})
    if len(top) == 12:
        break
json.dump({"commit": commit, "runs": runs,
           "window": {"ops": window["ops"], "commits": window["commits"],
                      "instructions_per_op": round(window_total / window["ops"]),
                      "shares": shares, "top_self": top}},
          open(out, "w"), indent=1)
print(json.dumps(runs), file=sys.stderr)
PY
