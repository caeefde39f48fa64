#!/usr/bin/env bash
# Runs each test binary of a package N times in a row and counts the runs that failed: a
# flaky test shows here long before a newcomer's first `cargo test` meets it. Not for CI.
#
#   scripts/repeat-tests.sh [RUNS [PACKAGE]]      (default: 50 runs of ratelab-server's)
#
# Prints one line per binary (runs, failures) and exits 1 when any run failed; the output
# of each failed run is kept under target/repeat-tests/.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-50}
PKG=${2:-ratelab-server}
case "$RUNS" in '' | *[!0-9]*) echo "runs: expected a number, got $RUNS" >&2; exit 2 ;; esac
OUT=target/repeat-tests
mkdir -p "$OUT"
# The package's integration test binaries, built once.
mapfile -t BINS < <(cargo test -p "$PKG" --tests --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in m["target"]["kind"]:
        print(m["executable"])
')
[ "${#BINS[@]}" -gt 0 ] || { echo "no test binaries found for $PKG" >&2; exit 2; }
total=0
for bin in "${BINS[@]}"; do
  name=$(basename "$bin"); name=${name%-*}
  failed=0
  for i in $(seq 1 "$RUNS"); do
    if ! "$bin" -q >"$OUT/$name.$i.log" 2>&1; then
      failed=$((failed + 1))
    else
      rm -f "$OUT/$name.$i.log"
    fi
  done
  total=$((total + failed))
  printf '%-12s %4d runs  %3d failed\n' "$name" "$RUNS" "$failed"
done
[ "$total" -eq 0 ]
