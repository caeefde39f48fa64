#!/usr/bin/env bash
# Runs each test binary of a package N times in a row and counts the runs that failed: a
# flaky test shows here long before a newcomer's first `cargo test` meets it. Not for CI.
#
#   scripts/repeat-tests.sh [RUNS [PACKAGE]]      (default: 50 runs of ratelab-server's)
#   scripts/repeat-tests.sh 10 all                 (every test binary of the workspace)
#   LOAD=2 scripts/repeat-tests.sh 10 all          (with two busy loops keeping both cores loaded)
#
# The binaries run as `cargo test` runs them: four tests at a time (.cargo/config.toml).
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
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-4}
if [ "$PKG" = all ]; then SELECT=(--workspace); else SELECT=(-p "$PKG"); fi
mapfile -t BINS < <(cargo test "${SELECT[@]}" --tests --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in m["target"]["kind"]:
        print(m["executable"] + "\t" + m["manifest_path"].rsplit("/", 1)[0])
')
[ "${#BINS[@]}" -gt 0 ] || { echo "no test binaries found for $PKG" >&2; exit 2; }
# Busy loops that keep cores loaded while the tests run, stopped on exit.
LOADERS=()
for _ in $(seq 1 "${LOAD:-0}"); do
  (while :; do :; done) &
  LOADERS+=($!)
done
trap '[ "${#LOADERS[@]}" -eq 0 ] || kill "${LOADERS[@]}" 2>/dev/null' EXIT
total=0
for entry in "${BINS[@]}"; do
  bin=${entry%%$'\t'*}
  dir=${entry#*$'\t'}
  # Same-named binaries (every crate's `suite`) are told apart by their package directory;
  # each runs there, as cargo runs it.
  name=$(basename "$dir")/$(basename "$bin"); name=${name%-*}
  failed=0
  for i in $(seq 1 "$RUNS"); do
    log="$OUT/${name//\//-}.$i.log"
    if ! (cd "$dir" && "$bin" -q) >"$log" 2>&1; then
      failed=$((failed + 1))
    else
      rm -f "$log"
    fi
  done
  total=$((total + failed))
  printf '%-24s %4d runs  %3d failed\n' "$name" "$RUNS" "$failed"
done
[ "$total" -eq 0 ]
