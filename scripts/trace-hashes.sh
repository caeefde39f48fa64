#!/usr/bin/env bash
# Every scenario under sim-scenarios/, every seed it names: one line per run, "FILE SEED"
# then the run's whole report (trace hash, figures, verdict) less its wall time. Two builds
# that print the same lines simulate and judge the same runs:
#   scripts/trace-hashes.sh /tmp/ratelab-before > before.txt
#   scripts/trace-hashes.sh target/release/ratelab > after.txt && diff before.txt after.txt
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/ratelab}
if [ ! -x "$bin" ]; then
  echo "no ratelab binary at $bin (cargo build --release -p ratelab)" >&2
  exit 2
fi
find sim-scenarios -name '*.json' | LC_ALL=C sort | while read -r f; do
  # A scenario whose expectations fail still prints its reports (and exits 1).
  out=$("$bin" run "$f" --json) || true
  if [ -z "$out" ]; then
    echo "$f: no report" >&2
    exit 1
  fi
  printf '%s\n' "$out" | python3 -c '
import json, sys
for line in sys.stdin:
    line = line.strip()
    if line.startswith("{"):
        r = json.loads(line)
        r.pop("wall_ms", None)
        print(sys.argv[1], r["seed"], json.dumps(r, sort_keys=True))
' "$f"
done
