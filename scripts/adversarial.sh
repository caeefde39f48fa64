#!/usr/bin/env bash
# The edge's adversarial suite at full scale: forwarding-header forgery behind real proxies,
# path and method spellings, cross-site admin requests, slow heads and bodies, descriptor and
# memory exhaustion, malformed HTTP/1.1 and HTTP/2. Prints each attack's figures
# (`adversarial:` lines) with the bound it was held to; exits non-zero if any bound broke.
# Needs nginx and HAProxy (Debian: apt-get install nginx-light haproxy). A few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
export RATELAB_ADVERSARIAL=full RATELAB_REQUIRE_NGINX=1 RATELAB_REQUIRE_HAPROXY=1
cargo test --release -q -p ratelab-gateway --lib -- admin:: ip:: path::
log=target/adversarial.log
mkdir -p target
status=0
cargo test --release -q -p ratelab-server --test suite \
  -- edge:: bounds:: malformed:: --test-threads 1 --nocapture >"$log" 2>&1 || status=$?
grep -o -E 'adversarial:.*|test result:.*|.*FAILED.*' "$log" || true
if [ "$status" -ne 0 ]; then
  grep -E -A12 'panicked' "$log" || true
  echo "the suite failed (exit $status); the whole output is in $log"
fi
exit "$status"
