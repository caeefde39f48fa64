#!/usr/bin/env bash
# Every scenario under sim-scenarios/, every seed it names: one line per run, "FILE SEED
# TRACE_HASH PASSED". Two builds that print the same lines simulate the same runs:
#   scripts/trace-hashes.sh /tmp/ratelab-before > before.txt
#   scripts/trace-hashes.sh target/release/ratelab > after.txt && diff before.txt after.txt
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/ratelab}
find sim-scenarios -name '*.json' | LC_ALL=C sort | while read -r f; do
  "$bin" run "$f" --json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    line = line.strip()
    if line.startswith("{"):
        r = json.loads(line)
        print(sys.argv[1], r["seed"], r["trace_hash"], r["passed"])
' "$f" || true
done
