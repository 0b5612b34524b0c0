#!/usr/bin/env bash
# Builds every cargo-fuzz target and runs each one briefly (default 20 s).
# A crash fails the run; its input is left under fuzz/artifacts/TARGET/ and must be
# kept as a regression test (see fuzz/README.md).
#
#     scripts/fuzz-smoke.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz-smoke: installing cargo-fuzz"
  cargo install cargo-fuzz
fi

# cargo-fuzz needs nightly-only sanitizer flags. Use the nightly toolchain when rustup
# has one; otherwise let stable accept them.
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  fuzz=(cargo +nightly fuzz)
else
  export RUSTC_BOOTSTRAP=1
  fuzz=(cargo fuzz)
fi

targets=$(cd fuzz && "${fuzz[@]}" list)
[ -n "$targets" ] || { echo "fuzz-smoke: no fuzz targets found" >&2; exit 1; }
"${fuzz[@]}" build

jcs_inputs=core/tests/data/jcs/input
for target in $targets; do
  corpus="fuzz/corpus/$target"
  mkdir -p "$corpus" fuzz/artifacts
  seeds=()
  [ -d "fuzz/seeds/$target" ] && seeds+=("fuzz/seeds/$target")
  case "$target" in
    canonicalize | fingerprint) [ -d "$jcs_inputs" ] && seeds+=("$jcs_inputs") ;;
  esac
  echo "fuzz-smoke: $target for ${seconds}s"
  log="fuzz/artifacts/$target.log"
  if ! "${fuzz[@]}" run "$target" "$corpus" "${seeds[@]}" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz-smoke: $target failed; the input is under fuzz/artifacts/$target" >&2
    exit 1
  fi
  grep -E '^(Done|stat::number_of_executed_units)' "$log" || tail -n 3 "$log"
done
echo "fuzz-smoke: $(echo "$targets" | wc -w) targets ran ${seconds}s each without a crash"
